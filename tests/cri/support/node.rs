//! A Kubernetes node under a CRI runtime, driven as the kubelet drives it: a private containerd or
//! CRI-O (`runtime`) in a node netns, its CNI bin and conf dirs laid out by `yh-genie install` run
//! with the DaemonSet's flags, the networks an admin ships in the `yh-genie-networks` ConfigMap,
//! the fake API server on the node's 127.0.0.1, and the CRI client (`client`).
//!
//! The networks, one of each kind the test covers:
//! - `yonghui`: `yonghui` -> `yh-bridge`, as shipped in manifests/config.yaml, on the fabric's
//!   `/run/flannel/subnet.env` (in the node's own `/run`); the fabric does not masquerade, so
//!   yh-bridge does (NAT rules per pod). The default network.
//! - `bridge`: Debian's reference `bridge` + `host-local`, with ipMasq.
//! - `macvlan-veth`: the reference `macvlan` on the node's NIC `par0` (one end of a veth pair in
//!   the node netns), chained with the built-in `veth` so that the pod reaches its node (docs/veth-router.md).
//! - `macvlan-router`: a macvlan on `par0` chained with the built-in `router`, for a pod's second
//!   interface beside an overlay `eth0` (the `router` pattern of docs/veth-router.md).

use super::client::{self, PodSandboxConfig, RuntimeService};
use super::runtime::{Engine, Runtime};
use serde_json::{Value, json};
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};
use testkit::apiserver::{ApiServer, NODE_NAME, TOKEN};
use testkit::inspect::{cni_nat_lines, host_local_leases, link_names, list_dir, walk};
use testkit::netns::Netns;
use testkit::process::{sh, terminate};
use testkit::run_dir::RunDir;
use testkit::{REFERENCE_PLUGINS, oci_image, require_root};
use yh_genie::node::agent_socket::client::exchange;
use yh_genie::node::agent_socket::protocol::{Answer, Ask, Request};

const SANDBOX_IMAGE: &str = "yh-genie.test/pause:cri";
/// Where the fabric writes the node's subnet, as in the shipped yonghui network and the DaemonSet's
/// `--wait-for`; a path of the node's private `/run`.
const SUBNET_FILE: &str = "/run/flannel/subnet.env";
/// The attachment lock directory every plugin uses by default: also in the node's `/run`.
const LOCK_DIR: &str = "/run/yh-genie/attachments";
const RESULTS_DIR: &str = "/run/yh-genie/results";
/// The node agent's socket (`install --agent`'s default): in the node's `/run`.
const AGENT_SOCKET: &str = "/run/yh-genie/agent.sock";
/// The node's address on `par0`, the macvlan parent.
pub const NODE_IP: &str = "192.168.100.1";
const PATIENCE: Duration = Duration::from_secs(30);

/// A network of the node: its name and the addresses a pod on it gets.
#[derive(Clone, Copy, Debug)]
pub struct Network {
    pub name: &'static str,
    pub first: Ipv4Addr,
    pub last: Ipv4Addr,
}

impl Network {
    pub fn contains(&self, ip: &str) -> bool {
        ip.parse::<Ipv4Addr>().is_ok_and(|ip| self.first <= ip && ip <= self.last)
    }
}

/// This node's subnet of the yonghui fabric (10.244.0.0/16); .1 is the bridge's.
pub const YONGHUI: Network =
    Network { name: "yonghui", first: Ipv4Addr::new(10, 244, 7, 2), last: Ipv4Addr::new(10, 244, 7, 254) };
pub const BRIDGE: Network =
    Network { name: "bridge", first: Ipv4Addr::new(10, 250, 0, 2), last: Ipv4Addr::new(10, 250, 0, 254) };
pub const MACVLAN_VETH: Network =
    Network { name: "macvlan-veth", first: Ipv4Addr::new(192, 168, 100, 100), last: Ipv4Addr::new(192, 168, 100, 149) };
/// The same LAN as `MACVLAN_VETH` (a pod on each reaches the other through `par0`'s bridge mode).
pub const MACVLAN_ROUTER: Network = Network {
    name: "macvlan-router",
    first: Ipv4Addr::new(192, 168, 100, 150),
    last: Ipv4Addr::new(192, 168, 100, 199),
};

/// A running pod sandbox as the CRI reports it.
#[derive(Debug, Clone)]
pub struct Sandbox {
    pub id: String,
    pub pod: String,
    /// The pod IP the runtime reports (PodSandboxStatus), what the kubelet puts in the pod's status.
    pub ip: String,
    /// The sandbox's pause process, whose netns is the pod's.
    pub pid: u32,
}

pub struct CriNode {
    /// First dropped: ends the node's run, the runtime, its shims or conmons and sandboxes, and
    /// the installer.
    runtime: Runtime,
    installer: Option<Child>,
    pub cri: RuntimeService,
    pub api: ApiServer,
    pub netns: Netns,
}

impl CriNode {
    /// Start the node: the runtime first (network not ready: no CNI configuration yet), then the
    /// installer as the DaemonSet runs it; ready once the runtime reports the network ready.
    pub fn start() -> Self {
        require_root();
        let engine = Engine::chosen();
        engine.require();
        let run = RunDir::new("cri");
        let netns = run.netns("ycri");
        let api = ApiServer::start_in(&netns);
        netns.must(&format!(
            "ip link add par0 type veth peer name wire0 && ip link set wire0 up && \
             ip addr add {NODE_IP}/24 dev par0 && ip link set par0 up"
        ));
        let r = run.path();
        let bin_dir = r.join("opt/cni/bin");
        let conf_dir = r.join("etc/cni/net.d");
        std::fs::create_dir_all(&bin_dir).unwrap();
        std::fs::create_dir_all(&conf_dir).unwrap();
        // The node's own CNI plugins (loopback, bridge, host-local, macvlan...), as a node image has them.
        for e in std::fs::read_dir(REFERENCE_PLUGINS).unwrap().flatten() {
            std::os::unix::fs::symlink(e.path(), bin_dir.join(e.file_name())).unwrap();
        }
        let runtime = Runtime::start(engine, run, &netns, &bin_dir, &conf_dir, SANDBOX_IMAGE);
        let cri = RuntimeService::new(&runtime.socket());
        let mut node = CriNode { runtime, installer: None, cri, api, netns };
        let (ready, reason) = node.network_ready();
        assert!(!ready, "the runtime reports the network ready before any CNI configuration is installed");
        assert!(reason.contains("cni") || reason.contains("NetworkPlugin"), "{reason}");

        node.runtime.import(&oci_image::pause(&node.path("image"), SANDBOX_IMAGE));
        node.write_networks();
        node.install();
        node.wait_network_ready();
        node
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.runtime.run_dir().join(rel)
    }

    /// Which runtime the node runs.
    pub fn engine(&self) -> &Engine {
        &self.runtime.engine
    }

    pub fn conf_dir(&self) -> PathBuf {
        self.path("etc/cni/net.d")
    }

    /// The configuration file of `network` as the installer laid it out.
    pub fn network_file(&self, network: &Network) -> PathBuf {
        self.conf_dir().join(network.name).join(format!("{}.conflist", network.name))
    }

    /// The networks and the selector's configuration as the two ConfigMaps of manifests/config.yaml
    /// mount them into the installer's pod, and the fabric's subnet.env in the node's `/run`.
    fn write_networks(&self) {
        let dir = |rel: &str| self.path(rel).display().to_string();
        // Chaining portmap as the shipped network does, and bandwidth, which this node has too.
        let yonghui = json!({"cniVersion": "1.0.0", "name": "yonghui", "plugins": [{
            "type": "yonghui", "subnetFile": SUBNET_FILE, "dataDir": dir("var/lib/cni/yonghui"),
            "delegate": {"type": "yh-bridge", "hairpinMode": true, "isDefaultGateway": true},
            "ipam": {"dataDir": dir("var/lib/cni/networks")}},
            {"type": "portmap", "capabilities": {"portMappings": true}},
            {"type": "bandwidth", "capabilities": {"bandwidth": true}}]});
        let bridge = json!({"cniVersion": "1.0.0", "name": "bridge", "plugins": [{
            "type": "bridge", "bridge": "br-ref", "isGateway": true, "isDefaultGateway": true, "ipMasq": true,
            "ipam": {"type": "host-local", "dataDir": dir("var/lib/cni/networks"),
                     "ranges": [[{"subnet": "10.250.0.0/24"}]]}}]});
        let macvlan_veth = json!({"cniVersion": "1.0.0", "name": "macvlan-veth", "plugins": [
            {"type": "macvlan", "master": "par0", "mode": "bridge",
             "ipam": {"type": "host-local", "dataDir": dir("var/lib/cni/networks"),
                      "ranges": [[{"subnet": "192.168.100.0/24", "rangeStart": "192.168.100.100",
                                   "rangeEnd": "192.168.100.149", "gateway": "192.168.100.254"}]],
                      "routes": [{"dst": "0.0.0.0/0"}]}},
            {"type": "veth", "overlay_hijack_subnet": ["10.244.0.0/16"], "service_hijack_subnet": ["10.96.0.0/16"],
             "data_dir": dir("var/lib/cni/veth"), "log_options": {"log_file": dir("log/veth.log")}}]});
        let macvlan_router = json!({"cniVersion": "1.0.0", "name": "macvlan-router", "plugins": [
            {"type": "macvlan", "master": "par0", "mode": "bridge",
             "ipam": {"type": "host-local", "dataDir": dir("var/lib/cni/networks"),
                      "ranges": [[{"subnet": "192.168.100.0/24", "rangeStart": "192.168.100.150",
                                   "rangeEnd": "192.168.100.199", "gateway": "192.168.100.254"}]]}},
            {"type": "router", "overlay_interface": "eth0", "overlay_hijack_subnet": ["10.244.0.0/16"],
             "service_hijack_subnet": ["10.96.0.0/16"], "rp_filter": {"set_host": false, "value": 2},
             "data_dir": dir("var/lib/cni/router"), "log_options": {"log_file": dir("log/router.log")}}]});
        let networks = [
            ("yonghui", yonghui),
            ("bridge", bridge),
            ("macvlan-veth", macvlan_veth),
            ("macvlan-router", macvlan_router),
        ];
        for (name, conf) in networks {
            self.write(&format!("config/networks/{name}.conflist"), &conf.to_string());
        }
        self.write_selector_config("yonghui");
        self.write("serviceaccount/token", TOKEN);
        std::fs::copy(self.api.ca(), self.path("serviceaccount/ca.crt")).unwrap();
        let subnet =
            "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.7.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=false\n";
        let subnet_file = self.runtime.node_path(SUBNET_FILE);
        std::fs::create_dir_all(subnet_file.parent().unwrap()).unwrap();
        std::fs::write(subnet_file, subnet).unwrap();
    }

    /// The shipped selector.json with `default_network`, plus what an admin sets for a test: a short
    /// API budget so that an ADD with the API server down fails in seconds, and the operation log
    /// in a file.
    fn write_selector_config(&self, default_network: &str) {
        let selector = json!({"defaultNetwork": default_network, "apiTimeoutSeconds": 2,
                              "logFile": self.path("log/yh-genie.log")});
        self.write("config/selector.json", &selector.to_string());
    }

    /// Make `conf` (a conflist) the network `name` and the node's default network, as an admin does
    /// by editing the two ConfigMaps; returns once the installer has put both on the node.
    pub fn make_default_network(&self, name: &str, conf: &Value) {
        self.write(&format!("config/networks/{name}.conflist"), &conf.to_string());
        self.write_selector_config(name);
        let installed = self.conf_dir().join("00-yh-genie.conflist");
        let network = self.conf_dir().join(name).join(format!("{name}.conflist"));
        let started = Instant::now();
        let default_is = |text: String| {
            serde_json::from_str::<Value>(&text).is_ok_and(|c| c["plugins"][0]["defaultNetwork"] == name)
        };
        while !(network.exists() && std::fs::read_to_string(&installed).is_ok_and(default_is)) {
            assert!(
                started.elapsed() < PATIENCE,
                "the installer did not install {name} as the default network\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The fabric's subnet.env on the node, which the default network's yonghui reads.
    pub fn subnet_file(&self) -> PathBuf {
        self.runtime.node_path(SUBNET_FILE)
    }

    fn write(&self, rel: &str, contents: &str) {
        let path = self.path(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, contents).unwrap();
    }

    /// `yh-genie install` on the node with the flags and environment of manifests/yh-genie.yaml's
    /// container, its host paths in the run dir instead of /opt/cni/bin, /etc/cni/net.d and
    /// /var/lib/cni, and kept running, as the DaemonSet's pod does: with the node agent, on the
    /// node's `/run/yh-genie/agent.sock` and its loopback's metrics port, as the manifest's defaults.
    fn install(&mut self) {
        let dir = |rel: &str| self.path(rel).display().to_string();
        let log = std::fs::File::create(self.path("log/installer.log")).unwrap();
        let installer = self
            .runtime
            .node_command(env!("CARGO_BIN_EXE_yh-genie"))
            .env_clear()
            .env("KUBERNETES_SERVICE_HOST", "127.0.0.1")
            .env("KUBERNETES_SERVICE_PORT", self.api.port().to_string())
            .env("YH_GENIE_NODE_NAME", NODE_NAME)
            .arg("install")
            .arg(format!("--bin-dir={}", dir("opt/cni/bin")))
            .arg(format!("--conf-dir={}", dir("etc/cni/net.d")))
            .arg(format!("--data-dir={}", dir("var/lib/cni/yh-genie")))
            .arg(format!("--sa-dir={}", dir("serviceaccount")))
            .arg(format!("--selector-config={}", dir("config/selector.json")))
            .arg(format!("--networks-dir={}", dir("config/networks")))
            .arg(format!("--wait-for={SUBNET_FILE}"))
            .arg("--cleanup-on-exit")
            .arg("--agent")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        self.installer = Some(installer);
    }

    /// The runtime's NetworkReady condition, and its reason and message, once its CRI answers
    /// (containerd says "server is not initialized yet" while it recovers its state after a start).
    pub fn network_ready(&self) -> (bool, String) {
        let started = Instant::now();
        let status = loop {
            match self.cri.status() {
                Ok(status) => break status,
                Err(e) if started.elapsed() > PATIENCE => panic!("CRI Status: {e}\n{}", self.runtime.log_tail()),
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        };
        let conditions = status.status.map(|s| s.conditions).unwrap_or_default();
        let network = conditions.iter().find(|c| c.r#type == "NetworkReady").expect("a NetworkReady condition");
        (network.status, format!("{}: {}", network.reason, network.message))
    }

    fn wait_network_ready(&self) {
        let started = Instant::now();
        loop {
            let (ready, reason) = self.network_ready();
            if ready {
                return;
            }
            assert!(
                started.elapsed() < PATIENCE,
                "{} did not find the installed CNI configuration: {reason}\ninstaller: {}",
                self.runtime.engine.name(),
                std::fs::read_to_string(self.path("log/installer.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The pod `name` in namespace default as the API server holds it: its containers (`containers`,
    /// JSON as in a manifest). Returns its uid.
    pub fn put_pod(&self, name: &str, containers: Value) -> String {
        self.api.put_pod("default", name, containers)
    }

    /// Wait until the node agent holds pod `name` (namespace default) and everything it refers to,
    /// as it does moments after the scheduler binds a pod to the node, before the kubelet asks
    /// for its sandbox.
    pub fn wait_agent_holds(&self, name: &str) {
        let socket = self.runtime.node_path(AGENT_SOCKET);
        let uid = format!("uid-default-{name}");
        let started = Instant::now();
        loop {
            let ask =
                Ask::Selection { namespace: "default".into(), name: name.into(), uid: Some(uid.clone()), wait_ms: 0 };
            let answer = exchange(&socket, &Request::new(ask), Instant::now() + Duration::from_secs(5));
            if matches!(answer, Ok(Answer::Objects(_))) {
                return;
            }
            assert!(started.elapsed() < PATIENCE, "the agent does not hold pod {name}: {answer:?}\n{}", self.logs());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The annotation `key` of pod `name` (namespace default), once the API server has it.
    pub fn wait_pod_annotation(&self, name: &str, key: &str) -> String {
        let started = Instant::now();
        loop {
            let pod = self.api.pod("default", name).unwrap_or_else(|| panic!("no pod {name}"));
            if let Some(value) = pod["metadata"]["annotations"][key].as_str() {
                return value.to_string();
            }
            assert!(started.elapsed() < PATIENCE, "pod {name} has no annotation {key}: {pod}\n{}", self.logs());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// GETs the API server has answered so far. The node agent only lists, watches and patches, so
    /// these are the plugin's requests (its direct path).
    pub fn api_gets(&self) -> usize {
        self.api.calls().iter().filter(|c| c.verb == "get").count()
    }

    /// The RunPodSandbox config the kubelet sends for attempt `attempt` of pod `name` (which must
    /// be in the API server).
    pub fn sandbox_config(&self, name: &str, attempt: u32) -> PodSandboxConfig {
        let uid = format!("uid-default-{name}");
        let labels = [
            ("io.kubernetes.pod.name", name),
            ("io.kubernetes.pod.namespace", "default"),
            ("io.kubernetes.pod.uid", uid.as_str()),
        ];
        PodSandboxConfig {
            metadata: Some(client::PodSandboxMetadata {
                name: name.into(),
                uid: uid.clone(),
                namespace: "default".into(),
                attempt,
            }),
            hostname: name.into(),
            log_directory: self.path(&format!("log/pods/default_{name}_{uid}")).display().to_string(),
            dns_config: Some(client::DnsConfig {
                servers: vec!["10.96.0.10".into()],
                searches: vec!["default.svc.cluster.local".into(), "svc.cluster.local".into(), "cluster.local".into()],
                options: vec!["ndots:5".into()],
            }),
            port_mappings: Vec::new(),
            labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            annotations: [("kubernetes.io/config.source".to_string(), "api".to_string())].into(),
            linux: Some(client::LinuxPodSandboxConfig {
                cgroup_parent: self.runtime.cgroup_parent(&uid),
                security_context: Some(client::LinuxSandboxSecurityContext {
                    namespace_options: Some(client::NamespaceOption {
                        network: client::NAMESPACE_POD,
                        pid: client::NAMESPACE_CONTAINER,
                        ipc: client::NAMESPACE_POD,
                    }),
                }),
            }),
        }
    }

    /// RunPodSandbox for attempt `attempt` of pod `name`, then its status.
    pub fn run_pod(&self, name: &str, attempt: u32) -> Result<Sandbox, tonic::Status> {
        let id = self.cri.run_pod_sandbox(self.sandbox_config(name, attempt))?;
        Ok(self.sandbox(&id))
    }

    /// A ready sandbox's status: its pod IP and pause process.
    pub fn sandbox(&self, id: &str) -> Sandbox {
        let response = self.cri.pod_sandbox_status(id).unwrap_or_else(|e| panic!("PodSandboxStatus {id}: {e}"));
        let status = response.status.expect("a sandbox status");
        assert_eq!(status.state, client::SANDBOX_READY, "sandbox {id} is ready");
        let info: Value = serde_json::from_str(response.info.get("info").expect("verbose info")).unwrap();
        let pid = info["pid"].as_u64().unwrap_or_else(|| panic!("no pid in the sandbox info: {info}")) as u32;
        Sandbox {
            id: id.to_string(),
            pod: status.metadata.map(|m| m.name).unwrap_or_default(),
            ip: status.network.map(|n| n.ip).unwrap_or_default(),
            pid,
        }
    }

    /// StopPodSandbox then RemovePodSandbox, as the kubelet does when a pod goes.
    pub fn remove_pod(&self, sandbox: &Sandbox) {
        self.cri.stop_pod_sandbox(&sandbox.id).unwrap_or_else(|e| panic!("StopPodSandbox {}: {e}", sandbox.pod));
        self.cri.remove_pod_sandbox(&sandbox.id).unwrap_or_else(|e| panic!("RemovePodSandbox {}: {e}", sandbox.pod));
    }

    /// The attachment record of a sandbox (the selector's container id is the sandbox id).
    pub fn record(&self, sandbox: &Sandbox) -> Value {
        let path = self.path("var/lib/cni/yh-genie/attachments").join(format!("{}:eth0", sandbox.id));
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
            .unwrap()
    }

    /// Stop the runtime as a service manager does; shims or conmons and sandboxes stay.
    pub fn stop_runtime(&mut self) {
        self.runtime.stop_daemon();
    }

    /// Start the runtime again, with a new CRI connection, once its CRI answers.
    pub fn start_runtime(&mut self) {
        self.runtime.start_daemon();
        self.cri = RuntimeService::new(&self.runtime.socket());
        self.network_ready();
    }

    /// Start the runtime again and wait until it reports the network ready.
    pub fn restart_runtime(&mut self) {
        self.start_runtime();
        self.wait_network_ready();
    }

    /// Processes of the node's run other than the holder and the runtime: shims or conmons, and
    /// pause processes.
    pub fn sandbox_processes(&self) -> Vec<String> {
        self.runtime.other_processes()
    }

    /// Everything pods have left on the node, over every kind of state: host-local leases,
    /// attachment records and the plugins' own records, attachment lock files and results,
    /// the runtime's CNI result cache, host veths, NAT rules (the CNI plugins', and CRI-O's own
    /// host ports), pod netns and the mounts the runtime made for sandboxes.
    pub fn leftovers(&self) -> Vec<String> {
        let mut left: Vec<String> = host_local_leases(&self.path("var/lib/cni/networks"))
            .into_iter()
            .map(|(ip, cid)| format!("lease {ip} of {cid}"))
            .collect();
        // The tombstones of completed DELs (`var/lib/cni/yh-genie/deleted/`) outlive them by design.
        let tombstones = self.path("var/lib/cni/yh-genie/deleted");
        for dir in ["var/lib/cni/yh-genie", "var/lib/cni/yonghui", "var/lib/cni/veth", "var/lib/cni/router"] {
            walk(&self.path(dir), &mut |p| {
                if !p.starts_with(&tombstones) {
                    left.push(format!("file {}", p.display()))
                }
            });
        }
        left.extend(list_dir(&self.runtime.node_path(LOCK_DIR)).into_iter().map(|f| format!("lock {f}")));
        // The selector's results, in the node's volatile directory beside the locks.
        walk(&self.runtime.node_path(RESULTS_DIR), &mut |p| left.push(format!("results {}", p.display())));
        // The runtime's libcni result cache (/var/lib/cni/results), which its DEL clears, and
        // anything else written to the node's /var/lib.
        left.extend(self.runtime.var_lib_files().into_iter().map(|f| format!("node /var/lib file {}", f.display())));
        let veths = link_names(&self.netns, "type veth").into_iter().filter(|l| l != "par0" && l != "wire0");
        left.extend(veths.map(|l| format!("host veth {l}")));
        // portmap's chains shared by every pod stay (it never removes them); each pod's must go.
        let pods_nat =
            cni_nat_lines(&self.netns).into_iter().filter(|l| !l.contains("CNI-HOSTPORT-") || l.contains("CNI-DN-"));
        left.extend(pods_nat.map(|l| format!("nat {l}")));
        left.extend(crio_host_ports(&self.netns).into_iter().map(|p| format!("CRI-O host port {p}")));
        left.extend(self.runtime.pod_netns().into_iter().map(|f| format!("netns {f}")));
        left.extend(self.runtime.sandbox_mounts().into_iter().map(|m| format!("mount {m}")));
        left
    }

    /// The kubelet's view: no sandbox left; and the node's: nothing any pod had left.
    pub fn assert_nothing_left(&self, case: &str) {
        let sandboxes = self.cri.list_pod_sandbox().unwrap();
        assert!(sandboxes.is_empty(), "{case}: sandboxes left: {sandboxes:?}");
        let left = self.leftovers();
        assert!(left.is_empty(), "{case}: left on the node: {left:#?}");
    }

    /// End of a test: nothing left of any pod, the installer uninstalls on SIGTERM (the conflist
    /// goes), the runtime stops with no shim, conmon or sandbox left behind, and the node is taken
    /// down.
    pub fn finish(mut self) {
        self.assert_nothing_left("at the end");
        let status = terminate(&mut self.installer.take().unwrap());
        assert!(status.is_some_and(|s| s.success()), "the installer exits cleanly on SIGTERM: {status:?}");
        assert!(!self.conf_dir().join("00-yh-genie.conflist").exists(), "the installer removed its conflist");
        let left = self.runtime.shutdown();
        assert!(left.is_empty(), "processes left by {} once it stopped: {left:#?}", self.runtime.engine.name());
    }

    /// Run `cmd` (sh) in the netns of a sandbox.
    pub fn in_sandbox(&self, sandbox: &Sandbox, cmd: &str) -> (bool, String) {
        sh(&format!("nsenter --net=/proc/{}/ns/net sh -c '{}'", sandbox.pid, cmd.replace('\'', r"'\''")))
    }

    /// IPv4 addresses (`a.b.c.d`) on a sandbox's eth0.
    pub fn sandbox_addresses(&self, sandbox: &Sandbox) -> Vec<String> {
        self.sandbox_addresses_on(sandbox, "eth0")
    }

    /// IPv4 addresses (`a.b.c.d`) on the sandbox's interface `dev`.
    pub fn sandbox_addresses_on(&self, sandbox: &Sandbox, dev: &str) -> Vec<String> {
        let (ok, out) = self.in_sandbox(sandbox, &format!("ip -j -4 addr show dev {dev}"));
        assert!(ok, "{}: {out}", sandbox.pod);
        let links: Vec<Value> = serde_json::from_str(&out).unwrap();
        links
            .iter()
            .flat_map(|l| l["addr_info"].as_array().cloned().unwrap_or_default())
            .filter_map(|a| a["local"].as_str().map(String::from))
            .collect()
    }

    /// The runtime's log and the yh-genie operation log, for a failure message.
    pub fn logs(&self) -> String {
        format!(
            "{}:\n{}\nyh-genie:\n{}\ninstaller and agent:\n{}",
            self.runtime.engine.name(),
            self.runtime.log_tail(),
            std::fs::read_to_string(self.path("log/yh-genie.log")).unwrap_or_default(),
            std::fs::read_to_string(self.path("log/installer.log")).unwrap_or_default()
        )
    }
}

/// What CRI-O's own hostport manager holds in `netns`: it gives the CNI no `portMappings` and maps
/// host ports itself, in the maps and set of its nftables table `crio-hostports` (one element per
/// mapping, and one per pod for hairpin traffic), which stays when they are gone. Each element as
/// nftables' JSON shows it (`[{"concat":["tcp",18090]},{"concat":["10.244.7.3",80]}]`).
pub fn crio_host_ports(netns: &Netns) -> Vec<String> {
    let (ok, out) = netns.exec("nft -j list table ip crio-hostports 2>/dev/null");
    if !ok {
        return Vec::new(); // no such table: CRI-O never mapped a port here
    }
    let listing: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("nft -j: {e}: {out}"));
    let objects = listing["nftables"].as_array().cloned().unwrap_or_default();
    objects
        .iter()
        .filter_map(|o| o.get("map").or_else(|| o.get("set")))
        .flat_map(|m| m["elem"].as_array().cloned().unwrap_or_default())
        .map(|e| e.to_string())
        .collect()
}

impl Drop for CriNode {
    fn drop(&mut self) {
        if let Some(mut installer) = self.installer.take() {
            let _ = installer.kill();
            let _ = installer.wait();
        }
    }
}
