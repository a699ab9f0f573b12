//! The IPAMs under test, and the pools each case gives them: per IPAM, the plugin a runtime's
//! network plugin would exec on a node, the network configuration it is given there, its
//! environment, and how to count the addresses it still holds (its leaks, once every pod's DEL ran).
//!
//! - `yh-ipam`: the yh-genie binary linked as `yh-ipam` by each node's installer, asking its node's
//!   agent (`--ipam-records` under the node's directory).
//! - `host-local`: the reference plugin, one range per node (the pool split in K), its files under
//!   the node's directory: no API server, the floor.
//! - `whereabouts`, IPPool mode: one pool for the cluster, each node's plugin with its own
//!   kubeconfig (a token of the `whereabouts` service account bound to a pod of that node).
//! - `whereabouts` node slices (`node_slice_size`): the same, with its node slice controller
//!   running and `NODENAME` naming the node.

use ipnetwork::Ipv4Network;
use serde_json::{Value, json};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq)]
pub enum IpamKind {
    YhIpam { block_size: u32 },
    HostLocal,
    Whereabouts,
    WhereaboutsSlices,
}

impl IpamKind {
    /// What `--systems` calls it.
    pub fn parse(name: &str) -> Option<IpamKind> {
        Some(match name {
            "yh-ipam" => IpamKind::YhIpam { block_size: 16 },
            "yh-ipam-4" => IpamKind::YhIpam { block_size: 4 },
            "host-local" => IpamKind::HostLocal,
            "whereabouts" => IpamKind::Whereabouts,
            "whereabouts-slices" => IpamKind::WhereaboutsSlices,
            _ => return None,
        })
    }

    pub fn label(&self) -> String {
        match self {
            IpamKind::YhIpam { block_size } => format!("yh-ipam (blockSize {block_size})"),
            IpamKind::HostLocal => "host-local (a range per node)".into(),
            IpamKind::Whereabouts => "whereabouts v0.9.2 (IPPool)".into(),
            IpamKind::WhereaboutsSlices => "whereabouts v0.9.2 (node slices)".into(),
        }
    }

    /// The service account its per-node part runs as: whose requests the audit log counts.
    pub fn service_account(&self) -> Option<&'static str> {
        match self {
            IpamKind::YhIpam { .. } => Some("yh-genie"),
            IpamKind::HostLocal => None,
            IpamKind::Whereabouts | IpamKind::WhereaboutsSlices => Some("whereabouts"),
        }
    }
}

/// The three cases, each with addresses of its own.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Case {
    /// A pool of exactly as many addresses as pods.
    Equal,
    /// A /16.
    Sufficient,
    /// A /16, one node's IPAM killed and the node deleted mid-burst.
    Killed,
}

impl Case {
    pub const ALL: [Case; 3] = [Case::Equal, Case::Sufficient, Case::Killed];

    /// Its network's and pool's name, and its namespace's.
    pub fn name(self) -> &'static str {
        match self {
            Case::Equal => "equal",
            Case::Sufficient => "sufficient",
            Case::Killed => "killed",
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            Case::Equal => "IPs equal to pods",
            Case::Sufficient => "IPs sufficient (a /16)",
            Case::Killed => "IPs sufficient, one node's IPAM killed and its node deleted mid-burst",
        }
    }
}

/// A case's addresses: `count` of them from `first`, in `subnet` (whose first address is the
/// gateway host-local and yh-ipam never hand out).
#[derive(Debug, Clone)]
pub struct Pool {
    pub subnet: Ipv4Network,
    pub first: Ipv4Addr,
    pub count: u32,
    /// whereabouts' node slices: the slices' prefix length.
    pub slice_prefix: u8,
}

impl Pool {
    pub fn for_case(case: Case, pods: usize, nodes: usize) -> Pool {
        let slices_for_nodes = (nodes.max(1) as f64).log2().ceil() as u8;
        match case {
            Case::Equal => {
                // The smallest subnet holding the pods' addresses, the gateway, the network and
                // broadcast addresses.
                let prefix = 32 - ((pods as f64 + 3.0).log2().ceil() as u8);
                let subnet = Ipv4Network::new(Ipv4Addr::new(10, 20, 0, 0), prefix).unwrap();
                Pool {
                    subnet,
                    first: Ipv4Addr::new(10, 20, 0, 2),
                    count: pods as u32,
                    slice_prefix: (prefix + slices_for_nodes).min(30),
                }
            }
            Case::Sufficient | Case::Killed => {
                let second = if case == Case::Sufficient { 21 } else { 22 };
                let subnet = Ipv4Network::new(Ipv4Addr::new(10, second, 0, 0), 16).unwrap();
                Pool {
                    subnet,
                    first: Ipv4Addr::new(10, second, 0, 2),
                    count: (1 << 16) - 3,
                    slice_prefix: (16 + slices_for_nodes).max(24),
                }
            }
        }
    }

    fn nth(&self, n: u32) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.first) + n)
    }

    fn last(&self) -> Ipv4Addr {
        self.nth(self.count - 1)
    }

    /// Node `node`'s share of the pool out of `nodes` (host-local): consecutive, the first ones
    /// one larger when it does not divide.
    fn share(&self, node: usize, nodes: usize) -> (Ipv4Addr, Ipv4Addr) {
        let (each, extra) = (self.count / nodes as u32, self.count % nodes as u32);
        let node = node as u32;
        let start = node * each + node.min(extra);
        let len = each + u32::from(node < extra);
        (self.nth(start), self.nth(start + len.max(1) - 1))
    }
}

/// One simulated node, as the IPAM's plugin sees it.
pub struct NodeSide {
    pub index: usize,
    pub name: String,
    pub dir: PathBuf,
    /// yh-ipam: its agent's socket.
    pub socket: PathBuf,
    /// whereabouts: its kubeconfig.
    pub kubeconfig: PathBuf,
}

impl NodeSide {
    /// whereabouts' flat configuration file on the node (its installer writes one under the
    /// host's net.d): the datastore and the kubeconfig, which its plugin refuses to run without.
    pub fn whereabouts_conf(&self) -> PathBuf {
        self.dir.join("whereabouts.d/whereabouts.conf")
    }

    /// yh-ipam's records of the node's allocations (the agent's `--ipam-records`).
    pub fn records(&self) -> PathBuf {
        self.dir.join("ipam-records")
    }

    fn host_local_data(&self) -> PathBuf {
        self.dir.join("host-local")
    }
}

/// The plugin's path on `node`.
pub fn plugin(ipam: &IpamKind, node: &NodeSide, whereabouts: &Path) -> PathBuf {
    match ipam {
        IpamKind::YhIpam { .. } => node.dir.join("host/bin/yh-ipam"),
        IpamKind::HostLocal => PathBuf::from("/usr/lib/cni/host-local"),
        IpamKind::Whereabouts | IpamKind::WhereaboutsSlices => whereabouts.join("whereabouts"),
    }
}

/// The plugin's environment on `node`, beside the CNI variables.
pub fn environment(ipam: &IpamKind, node: &NodeSide) -> Vec<(String, String)> {
    match ipam {
        IpamKind::WhereaboutsSlices => vec![("NODENAME".into(), node.name.clone())],
        _ => Vec::new(),
    }
}

/// The network configuration the runtime hands the network plugin (a macvlan, which execs the
/// IPAM with it) for `case` on `node` of `nodes`.
pub fn network(ipam: &IpamKind, case: Case, pool: &Pool, node: &NodeSide, nodes: usize) -> Value {
    let name = format!("bench-{}", case.name());
    let subnet = pool.subnet.to_string();
    let ipam_conf = match ipam {
        IpamKind::YhIpam { block_size } => json!({
            "type": "yh-ipam", "pool": name, "blockSize": block_size,
            "ranges": [[{"subnet": subnet, "rangeStart": pool.first.to_string(), "rangeEnd": pool.last().to_string()}]],
            "agentSocket": node.socket,
        }),
        IpamKind::HostLocal => {
            let (start, end) = pool.share(node.index, nodes);
            json!({
                "type": "host-local", "dataDir": node.host_local_data(),
                "ranges": [[{"subnet": subnet, "rangeStart": start.to_string(), "rangeEnd": end.to_string()}]],
            })
        }
        IpamKind::Whereabouts => json!({
            "type": "whereabouts", "range": subnet,
            "range_start": pool.first.to_string(), "range_end": pool.last().to_string(),
            "configuration_path": node.whereabouts_conf(),
            "log_file": node.dir.join("whereabouts.log"), "log_level": "error",
        }),
        IpamKind::WhereaboutsSlices => json!({
            // Named: the controller takes NADs of one network name (unset: "") for one network.
            "type": "whereabouts", "range": subnet, "node_slice_size": format!("/{}", pool.slice_prefix),
            "network_name": name,
            "configuration_path": node.whereabouts_conf(),
            "log_file": node.dir.join("whereabouts.log"), "log_level": "error",
        }),
    };
    let cni_version = if matches!(ipam, IpamKind::YhIpam { .. }) { "1.0.0" } else { "0.3.1" };
    json!({"cniVersion": cni_version, "name": name, "type": "macvlan", "master": "eth1", "ipam": ipam_conf})
}

/// The addresses `node`'s own files still hold for `case` (yh-ipam's records, host-local's
/// reservations); whereabouts keeps them in the API server (`whereabouts_allocations`).
pub fn held_on_node(ipam: &IpamKind, case: Case, node: &NodeSide) -> usize {
    let name = format!("bench-{}", case.name());
    let count = |dir: PathBuf, address_named: bool| {
        std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .filter_map(Result::ok)
                    .filter(|e| {
                        let file = e.file_name().to_string_lossy().to_string();
                        if address_named { file.parse::<std::net::IpAddr>().is_ok() } else { !file.starts_with('.') }
                    })
                    .count()
            })
            .unwrap_or(0)
    };
    match ipam {
        IpamKind::YhIpam { .. } => count(node.records().join(&name), false),
        IpamKind::HostLocal => count(node.host_local_data().join(&name), true),
        IpamKind::Whereabouts | IpamKind::WhereaboutsSlices => 0,
    }
}

/// The pods (`namespace/name`) of every allocation of whereabouts' IPPools, from
/// `kubectl get ippools -o json`.
pub fn whereabouts_allocations(ippools_json: &str) -> Vec<String> {
    let pools: Value = serde_json::from_str(ippools_json).unwrap_or_default();
    let empty = Vec::new();
    pools["items"]
        .as_array()
        .unwrap_or(&empty)
        .iter()
        .filter_map(|p| p["spec"]["allocations"].as_object())
        .flat_map(|a| a.values().map(|v| v["podref"].as_str().unwrap_or_default().to_string()))
        .collect()
}

/// whereabouts' ClusterRole, as its own daemonset-install.yaml grants it, bound to its service
/// account in kube-system.
pub const WHEREABOUTS_RBAC: &str = r#"
apiVersion: v1
kind: ServiceAccount
metadata: {name: whereabouts, namespace: kube-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: whereabouts-cni}
rules:
- apiGroups: ["whereabouts.cni.cncf.io"]
  resources: ["ippools", "overlappingrangeipreservations", "nodeslicepools"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  verbs: ["*"]
- apiGroups: [""]
  resources: ["pods", "nodes"]
  verbs: ["list", "watch", "get"]
- apiGroups: ["k8s.cni.cncf.io"]
  resources: ["network-attachment-definitions"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["", "events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch", "update", "get"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: whereabouts}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: whereabouts-cni}
subjects:
- {kind: ServiceAccount, name: whereabouts, namespace: kube-system}
"#;

/// whereabouts' flat configuration file for `kubeconfig`, as its installer writes it.
pub fn whereabouts_flat_conf(kubeconfig: &Path) -> String {
    json!({"datastore": "kubernetes", "kubernetes": {"kubeconfig": kubeconfig}}).to_string()
}

/// A kubeconfig for `token`, its context's namespace kube-system (where whereabouts keeps its
/// pools and leases).
pub fn kubeconfig(api_url: &str, ca: &Path, token: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: bench\n  cluster:\n    server: {api_url}\n    \
         certificate-authority: {}\nusers:\n- name: node\n  user:\n    token: {token}\ncontexts:\n- name: bench\n  \
         context:\n    cluster: bench\n    user: node\n    namespace: kube-system\ncurrent-context: bench\n",
        ca.display()
    )
}
