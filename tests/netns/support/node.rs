//! The netns node: a Kubernetes node for end-to-end tests of the selector, a netns that holds the
//! plugins, the bridges and the NAT rules, a sandbox (conf dir, data dirs, bin dir), and the fake
//! API server on the node's 127.0.0.1. Each pod gets a netns of its own.
//!
//! `leftovers` and `leftovers_of` list what the node still holds of pods, over every kind of state a
//! CNI plugin can leak: addresses leased by host-local, host veths, NAT chains and jumps, attachment
//! records and yonghui's saved delegate configurations (temp files of interrupted writes included),
//! interfaces in the pod's netns. Tests assert those lists are empty.

use super::driver::{Call, PLUGINS, Reply, cni_command};
use serde_json::{Value, json};
use std::io::Write;
use std::path::PathBuf;
use std::process::Command;
use testkit::agent::{Agent, METRICS_PORT};
use testkit::apiserver::{ApiServer, Serving};
use testkit::inspect::{cni_nat_lines, host_local_leases, link_names, list_dir, walk};
use testkit::netns::Netns;
use testkit::process::unique;
use testkit::require_root;
use testkit::sandbox::Sandbox;

pub struct NetnsNode {
    pub sb: Sandbox,
    pub api: ApiServer,
    pub netns: Netns,
    /// `defaultNetwork` of the selector's configuration, if any.
    pub default_network: Option<String>,
    /// Links the test made in the node netns (a LAN's parent NIC), not pods' leftovers.
    pub fixtures: std::sync::Mutex<Vec<String>>,
}

/// A pod sandbox: its netns, name (as the API server knows it), container id and the runtime's CNI_ARGS.
pub struct Pod {
    pub netns: Netns,
    pub name: String,
    pub cid: String,
    pub args: String,
}

impl Pod {
    /// The next sandbox of a pod named `name` in the same netns, as a runtime retrying a pod does:
    /// a new container id.
    pub fn renew(self, name: &str) -> Pod {
        let cid = unique("cid");
        Pod { args: pod_args(name, &cid), name: name.to_string(), cid, netns: self.netns }
    }

    pub fn netns_path(&self) -> String {
        self.netns.path().display().to_string()
    }
}

/// The runtime's CNI_ARGS for a pod in namespace `default`.
pub fn pod_args(name: &str, cid: &str) -> String {
    format!(
        "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME={name};K8S_POD_INFRA_CONTAINER_ID={cid};K8S_POD_UID=uid-default-{name}"
    )
}

impl NetnsNode {
    pub fn new() -> Self {
        Self::serving(Serving::Valid)
    }

    /// A node whose API server presents the certificate `serving` describes.
    pub fn serving(serving: Serving) -> Self {
        require_root();
        let netns = Netns::new("ysn");
        let sb = Sandbox::on_node(&netns, &PLUGINS);
        let api = ApiServer::start_serving(&netns, serving);
        std::fs::create_dir_all(sb.path().join("empty-path")).unwrap();
        NetnsNode { sb, api, netns, default_network: None, fixtures: Default::default() }
    }

    pub fn conf_dir(&self) -> PathBuf {
        self.sb.path().join("net.d")
    }
    /// The selector's `dataDir`.
    pub fn data_dir(&self) -> PathBuf {
        self.sb.path().join("yh-genie")
    }
    /// host-local's `dataDir`, for every network.
    pub fn ipam_dir(&self) -> PathBuf {
        self.sb.path().join("ipam")
    }
    /// yonghui's `dataDir` (unless a network sets another).
    pub fn yonghui_dir(&self) -> PathBuf {
        self.sb.path().join("yonghui")
    }

    pub fn write_conf(&self, rel: &str, conf: &Value) -> PathBuf {
        self.sb.write(&format!("net.d/{rel}"), &conf.to_string())
    }

    /// A `yonghui` network `<confDir>/<name>/10-<name>.conflist` on this node's subnet
    /// `10.77.<octet>.0/24` of the cluster network 10.77.0.0/16, delegating to `yh-bridge` on a
    /// bridge of its own. The fabric does not masquerade (`FLANNEL_IPMASQ=false`), so yh-bridge
    /// does: every pod gets NAT rules. `plugin_extra` keys replace the plugin's (e.g. `dataDir`,
    /// `delegate`). Returns the path of the configuration.
    pub fn add_yonghui_network(&self, name: &str, octet: u8, plugin_extra: Value) -> PathBuf {
        let subnet_env = format!(
            "FLANNEL_NETWORK=10.77.0.0/16\nFLANNEL_SUBNET=10.77.{octet}.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=false\n"
        );
        let subnet_file = self.sb.write(&format!("{name}.subnet.env"), &subnet_env);
        let mut plugin = json!({
            "type": "yonghui", "subnetFile": subnet_file, "dataDir": self.yonghui_dir(),
            "delegate": {"bridge": unique("yb")}, "ipam": {"dataDir": self.ipam_dir()}
        });
        for (k, v) in plugin_extra.as_object().expect("plugin_extra is an object") {
            plugin[k] = v.clone();
        }
        let list = json!({"cniVersion": "1.0.0", "name": name, "plugins": [plugin]});
        self.write_conf(&format!("{name}/10-{name}.conflist"), &list)
    }

    /// Where the node's agent listens (`start_agent`), as the plugin is told by `agentSocket`.
    pub fn agent_socket(&self) -> PathBuf {
        self.sb.path().join("run/yh-genie/agent.sock")
    }

    /// Start the node's agent, as `yh-genie install --agent` with the DaemonSet's flags.
    pub fn start_agent(&self) -> Agent {
        Agent::start(&self.netns, &self.api, self.sb.path(), &self.agent_socket(), METRICS_PORT, &[])
    }

    /// The selector's stdin, as the runtime passes it, with `extra` keys merged in. Its
    /// `agentSocket` is the node's own (`agent_socket`), never the host's: without
    /// `start_agent`, nothing listens there and ADD takes the direct path, as on a node without
    /// the agent.
    pub fn selector_conf(&self, version: &str, extra: Value) -> String {
        let mut conf = json!({
            "cniVersion": version, "name": "yh-genie", "type": "yh-genie",
            "kubeconfig": self.api.kubeconfig(), "confDir": self.conf_dir(), "dataDir": self.data_dir(),
            "binDir": self.sb.bin(), "agentSocket": self.agent_socket(),
        });
        if let Some(default) = &self.default_network {
            conf["defaultNetwork"] = default.as_str().into();
        }
        for (k, v) in extra.as_object().expect("extra is an object") {
            conf[k] = v.clone();
        }
        conf.to_string()
    }

    /// `00-yh-genie.conflist` in the conf dir, for cnidrive and `explain`.
    pub fn selector_conflist(&self, version: &str) -> PathBuf {
        let mut plugin: Value = serde_json::from_str(&self.selector_conf(version, json!({}))).unwrap();
        let plugin = plugin.as_object_mut().unwrap();
        plugin.remove("cniVersion");
        plugin.remove("name");
        self.write_conf(
            "00-yh-genie.conflist",
            &json!({"cniVersion": version, "name": "yh-genie", "plugins": [plugin]}),
        )
    }

    /// A new pod sandbox (netns, container id) for the pod `name`.
    pub fn pod(&self, name: &str) -> Pod {
        let cid = unique("cid");
        Pod { args: pod_args(name, &cid), name: name.to_string(), cid, netns: Netns::new("ysp") }
    }

    /// Call the selector as the runtime does, but with a `CNI_PATH` that holds no plugin: every
    /// delegate must be found through `binDir`.
    pub fn call(&self, command: &str, pod: &Pod, conf: &str) -> Reply {
        let mut child = self.command(command, pod, &[]).spawn().expect("plugin starts");
        child.stdin.take().unwrap().write_all(conf.as_bytes()).unwrap();
        Reply::from(child.wait_with_output().unwrap())
    }

    /// The process `call` runs, not yet started; the caller writes the configuration to its stdin.
    pub fn command(&self, command: &str, pod: &Pod, extra: &[(&str, &str)]) -> Command {
        let netns = pod.netns_path();
        let call = Call {
            plugin: "yh-genie",
            command,
            container_id: &pod.cid,
            netns: &netns,
            ifname: "eth0",
            args: &pod.args,
            config: "",
        };
        let empty = self.sb.path().join("empty-path").display().to_string();
        let mut env = vec![("CNI_PATH", empty.as_str())];
        env.extend_from_slice(extra);
        cni_command(&self.sb, &call, &env)
    }

    /// Files in the attachment record directory, temp files of interrupted writes included.
    pub fn records(&self) -> Vec<String> {
        list_dir(&self.data_dir().join("attachments"))
    }

    pub fn record(&self, pod: &Pod) -> Value {
        let path = self.data_dir().join("attachments").join(format!("{}:eth0", pod.cid));
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    /// The results of the pod's completed ADD, of its eth0: in the node's volatile directory (the
    /// attachment locks' parent, here the sandbox; `/run/yh-genie` on a node), under the data dir's
    /// path.
    pub fn results(&self, pod: &Pod) -> Value {
        let dir = self.results_dir().join(self.data_dir().strip_prefix("/").unwrap());
        let path = dir.join(format!("{}:eth0", pod.cid));
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
            .unwrap()
    }

    /// Where the selector keeps results: `results/` in the node's volatile directory, the attachment
    /// locks' parent.
    pub fn results_dir(&self) -> PathBuf {
        self.sb.locks().parent().unwrap().join("results")
    }

    /// Addresses host-local has handed out over every network, with the container id holding each.
    pub fn leases(&self) -> Vec<(String, String)> {
        host_local_leases(&self.ipam_dir())
    }

    /// Addresses host-local has handed out, over every network.
    pub fn allocations(&self) -> Vec<String> {
        self.leases().into_iter().map(|(ip, _)| ip).collect()
    }

    /// Veths in the node netns, but the test's own (`fixtures`).
    pub fn node_veths(&self) -> Vec<String> {
        let fixtures = self.fixtures.lock().unwrap();
        link_names(&self.netns, "type veth").into_iter().filter(|l| !fixtures.contains(l)).collect()
    }

    /// Lines of the node's NAT tables (both families) that belong to CNI plugins: `CNI-` chains
    /// and the jumps to them.
    pub fn nat_lines(&self) -> Vec<String> {
        cni_nat_lines(&self.netns)
    }

    /// Every file under the selector's and yonghui's data dirs, as paths relative to the sandbox,
    /// but the tombstones of completed DELs (`tombstones`), which outlive their DEL by design.
    pub fn state_files(&self) -> Vec<String> {
        let mut files = Vec::new();
        let tombstones = self.data_dir().join("deleted");
        for dir in [self.data_dir(), self.yonghui_dir(), self.results_dir()] {
            walk(&dir, &mut |p| {
                if !p.starts_with(&tombstones) {
                    files.push(p.strip_prefix(self.sb.path()).unwrap().display().to_string())
                }
            });
        }
        files
    }

    /// The tombstones of completed DELs (`<container id>:<ifname>`), in every bucket, sorted.
    pub fn tombstones(&self) -> Vec<String> {
        let mut names = Vec::new();
        walk(&self.data_dir().join("deleted"), &mut |p| {
            names.push(p.file_name().unwrap().to_string_lossy().into_owned())
        });
        names.sort();
        names
    }

    /// Everything pods have left on the node: leases, veths, NAT rules, state files. Empty once
    /// every pod has been DELeted.
    pub fn leftovers(&self) -> Vec<String> {
        let mut left: Vec<String> = self.allocations().into_iter().map(|ip| format!("lease {ip}")).collect();
        left.extend(self.node_veths().into_iter().map(|v| format!("veth {v}")));
        left.extend(self.nat_lines().into_iter().map(|l| format!("nat {l}")));
        left.extend(self.state_files().into_iter().map(|f| format!("file {f}")));
        left.extend(self.lock_files().into_iter().map(|f| format!("lock {f}")));
        left
    }

    /// Attachment lock files (`<container id>:<ifname>`): an ADD keeps its own, a DEL removes it.
    pub fn lock_files(&self) -> Vec<String> {
        list_dir(&self.sb.locks())
    }

    /// What `leftovers_of` calls the lock file of `pod`, the one thing a failed ADD leaves of it.
    pub fn own_lock(pod: &Pod) -> String {
        format!("lock {}:eth0", pod.cid)
    }

    /// What is left of one pod attached to `network`: interfaces in its netns (if that still
    /// exists), its leases, its NAT chain and jumps, its records and yonghui files (or their temp files).
    pub fn leftovers_of(&self, pod: &Pod, network: &str) -> Vec<String> {
        self.leftovers_of_networks(pod, &[network])
    }

    /// `leftovers_of` a pod attached to several networks.
    pub fn leftovers_of_networks(&self, pod: &Pod, networks: &[&str]) -> Vec<String> {
        let interfaces = if pod.netns.path().exists() { link_names(&pod.netns, "") } else { Vec::new() };
        let mut left: Vec<String> =
            interfaces.into_iter().filter(|l| l != "lo").map(|l| format!("interface {l} in the pod netns")).collect();
        left.extend(self.leases().into_iter().filter(|(_, cid)| *cid == pod.cid).map(|(ip, _)| format!("lease {ip}")));
        let chains: Vec<String> = networks
            .iter()
            .map(|network| yh_genie::programs::plugins::firewall::Owner::new(network, &pod.cid, "eth0").chain())
            .collect();
        left.extend(
            self.nat_lines().into_iter().filter(|l| chains.iter().any(|c| l.contains(c))).map(|l| format!("nat {l}")),
        );
        // By whole name: `cid7x2` must not claim the files of `cid7x20`.
        let of_pod = |f: &String| f.split(['/', ':', '.']).any(|part| part == pod.cid);
        left.extend(self.state_files().into_iter().filter(of_pod).map(|f| format!("file {f}")));
        left.extend(self.lock_files().into_iter().filter(of_pod).map(|f| format!("lock {f}")));
        left
    }

    /// What a DEL must leave: nothing of `pod`, and nothing of any pod on the node.
    pub fn assert_nothing_left(&self, pod: &Pod, case: &str) {
        assert_eq!(link_names(&pod.netns, ""), ["lo"], "{case}: pod netns interfaces");
        let left = self.leftovers();
        assert!(left.is_empty(), "{case}: left on the node: {left:#?}");
    }

    /// What a failed ADD must leave: nothing of `pod` but its attachment lock file, which the DEL
    /// that a runtime sends after a failed ADD removes, and nothing of any other pod.
    pub fn assert_failed_add_left_nothing(&self, pod: &Pod, case: &str) {
        assert_eq!(link_names(&pod.netns, ""), ["lo"], "{case}: pod netns interfaces");
        let own_lock = NetnsNode::own_lock(pod);
        let left: Vec<String> = self.leftovers().into_iter().filter(|l| *l != own_lock).collect();
        assert!(left.is_empty(), "{case}: left on the node: {left:#?}");
    }
}

/// IPv4 addresses (`a.b.c.d/len`) on the pod's eth0.
pub fn pod_addresses(pod: &Pod) -> Vec<String> {
    addresses_on(pod, "eth0")
}

/// IPv4 addresses (`a.b.c.d/len`) on the pod's interface `dev`; none if it has no such interface.
pub fn addresses_on(pod: &Pod, dev: &str) -> Vec<String> {
    let (ok, out) = pod.netns.exec(&format!("ip -j -4 addr show dev {dev}"));
    if !ok {
        return Vec::new();
    }
    let links: Vec<Value> = serde_json::from_str(&out).unwrap_or_default();
    links
        .iter()
        .flat_map(|l| l["addr_info"].as_array().cloned().unwrap_or_default())
        .map(|a| format!("{}/{}", a["local"].as_str().unwrap(), a["prefixlen"]))
        .collect()
}
