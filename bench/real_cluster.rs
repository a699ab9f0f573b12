//! A real API server for the selector's benchmark, started as bench/scale.sh starts it (its
//! `control`, `setup` and `systems` modules, shared rather than copied): etcd (fsyncing, as on a
//! control-plane node) and kube-apiserver (the test cluster's build, scripts/cluster/build.sh) in
//! the benchmark's node netns, the NAD CRD and yh-genie's RBAC applied, one Node, and the node agent
//! as its DaemonSet runs it (`yh-genie install --agent` with the node's own pod-bound token). The
//! plugin's direct path authenticates as a user of its own, so the audit log tells its requests
//! from the agent's.

#[allow(dead_code)] // bench/scale.sh's: only some of it is used here.
#[path = "scale/audit.rs"]
mod audit;
#[allow(dead_code)]
#[path = "scale/control.rs"]
mod control;
#[allow(dead_code)]
#[path = "scale/setup.rs"]
mod setup;
#[allow(dead_code)]
#[path = "scale/systems.rs"]
mod systems;

use ::kube::Api;
use ::kube::api::PostParams;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, ServiceAccount};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::Duration;
use systems::{NodeDaemon, System};
use testkit::cluster::control_plane::ControlPlane;
use testkit::netns::Netns;

/// The API server's advertised address (in its serving certificate): a veth of the node netns.
pub const ADVERTISE_IP: &str = testkit::cluster::CONTROL_PLANE_IP;
const NODE: &str = "bench-node";
/// The identity the plugin's direct path uses (a client certificate of the cluster's CA).
const PLUGIN_USER: &str = "yh-genie-bench-plugin";

pub struct RealCluster {
    // Dropped in this order: the agent before the API server.
    agent: NodeDaemon,
    control: ControlPlane,
    client: ::kube::Client,
    runtime: tokio::runtime::Runtime,
    plugin_kubeconfig: PathBuf,
}

impl RealCluster {
    /// Start it all under `dir`, in `node` (whose netns the calling thread has joined already:
    /// the processes started here inherit it).
    pub fn start(node: &Netns, dir: &Path) -> Self {
        let bin = testkit::cluster::kubernetes_bin();
        node.must(&format!(
            "ip link add ybcp0 type veth peer name ybcp1 && ip addr add {ADVERTISE_IP}/24 dev ybcp0 && \
             ip link set ybcp0 up && ip link set ybcp1 up && ip link set lo up"
        ));
        let control = control::start_durable(&dir.join("control"), &bin);
        setup::apply_manifests(&control, Path::new(env!("CARGO_MANIFEST_DIR")));
        let plugin_kubeconfig = control.pki.kubeconfig("plugin", PLUGIN_USER, &["system:masters"], control::API_URL);
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let access = yh_genie::programs::agent::watching::Access::Kubeconfig(control.admin_kubeconfig());
        let client =
            runtime.block_on(yh_genie::programs::agent::watching::connect(&access)).expect("the admin's client");
        let names = [NODE.to_string()];
        runtime.block_on(setup::nodes(&client, &names));
        let token = runtime.block_on(setup::node_tokens(&client, &names, "yh-genie", "yh-genie")).remove(0);
        // The ServiceAccount admission wants the namespace's default account (no controller makes it).
        let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
        let account = serde_json::from_value(json!({"metadata": {"name": "default"}})).unwrap();
        runtime.block_on(accounts.create(&PostParams::default(), &account)).expect("the default service account");
        let system = System::YhGenie { binary: testkit::yh_genie_binary() };
        let mut agent = NodeDaemon::new(&system, dir, 0, NODE, &token, &control.pki.path("ca.crt"));
        agent.start();
        systems::wait_all_ready(std::slice::from_mut(&mut agent), Duration::from_secs(120));
        RealCluster { agent, control, client, runtime, plugin_kubeconfig }
    }

    pub fn agent_socket(&self) -> PathBuf {
        self.agent.socket.clone()
    }

    pub fn plugin_kubeconfig(&self) -> PathBuf {
        self.plugin_kubeconfig.clone()
    }

    pub fn put_config_map(&self, namespace: &str, name: &str, data: Value) {
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), namespace);
        let object = serde_json::from_value(json!({"metadata": {"name": name}, "data": data})).unwrap();
        self.runtime.block_on(api.create(&PostParams::default(), &object)).expect("a ConfigMap");
    }

    /// A pod on the node with `containers`; its uid.
    pub fn put_pod(&self, namespace: &str, name: &str, containers: Value) -> String {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let object = serde_json::from_value(
            json!({"metadata": {"name": name}, "spec": {"nodeName": NODE, "containers": containers}}),
        )
        .unwrap();
        let made = self.runtime.block_on(api.create(&PostParams::default(), &object)).expect("a pod");
        made.metadata.uid.expect("a created pod has a uid")
    }

    /// Requests the plugin made so far (the audit log may lag a request by a moment).
    pub fn plugin_requests(&self) -> usize {
        std::thread::sleep(Duration::from_millis(500));
        audit::Audit::read(&self.control.audit_log()).requests.iter().filter(|r| r.user == PLUGIN_USER).count()
    }

    /// `AddedInterface` events in `namespace` (the agent creates them).
    pub fn added_interface_events(&self, namespace: &str) -> usize {
        let out = self.control.kubectl_ok(&[
            "get",
            "events",
            "-n",
            namespace,
            "--field-selector=reason=AddedInterface",
            "-o",
            "name",
        ]);
        out.lines().count()
    }
}
