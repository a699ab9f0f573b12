//! Everything the project ships for Kubernetes, checked without a cluster: every YAML document in
//! manifests/, examples/ and e2e/ is a valid object of its kind (parsed into the k8s-openapi type,
//! with no field the type does not know), the NAD CRD serves the type the code reads, the RBAC
//! grants exactly what the selector calls, the DaemonSet mounts what the installer writes (found by
//! parsing the DaemonSet's own args with the installer's parser), the kustomize overlays render
//! (`kubectl kustomize`) to the plain DaemonSet plus what they add, every network a pod chooses
//! exists and is a valid CNI configuration, the copies of one network stay equal, kind-config.yaml
//! is valid kind config, and the e2e scripts pass `bash -n` and shellcheck.

use k8s_openapi::api::admissionregistration::v1::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, Container, Namespace, Pod, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use testkit::cluster::pods::{Network, sleeper, web_server};
use yh_genie::platform::cni::ConfList;
use yh_genie::platform::kube::{AGENT_API_CALLS, AGENT_LEASE_CALLS, API_CALLS, NetworkAttachmentDefinition};
use yh_genie::programs::commands;
use yh_genie::programs::install::Options;
// Plugin types that are part of the binary.
use yh_genie::programs::plugins::NAMES as BUILTIN_TYPES;
use yh_genie::programs::selector::netconf::confdir::{NetworkName, parse_conf, parse_inline};
use yh_genie::programs::selector::netconf::inline::named_after_nad;
use yh_genie::programs::selector::requests::annotation::{self, NETWORKS};
use yh_genie::programs::selector::requests::value;
/// What kind's node image has in /opt/cni/bin: all the e2e may use besides the built-ins.
const KIND_NODE_PLUGINS: [&str; 4] = ["host-local", "loopback", "ptp", "portmap"];
/// Reference plugins (containernetworking/plugins) the examples may use.
const REFERENCE_PLUGINS: [&str; 8] =
    ["bridge", "macvlan", "ipvlan", "ptp", "host-local", "portmap", "bandwidth", "loopback"];
const CONF_DIR: &str = "/etc/cni/net.d";

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// One YAML document, and where it came from for messages.
struct Doc {
    origin: String,
    value: Value,
}

impl Doc {
    fn kind(&self) -> &str {
        self.value["kind"].as_str().unwrap_or_else(|| panic!("{}: no kind", self.origin))
    }
    fn name(&self) -> &str {
        self.value["metadata"]["name"].as_str().unwrap_or_else(|| panic!("{}: no metadata.name", self.origin))
    }
    /// The document as its Kubernetes type, refusing any field the type does not have (k8s-openapi
    /// itself ignores unknown fields, which would let a misspelt key pass): the typed object must
    /// serialize back to exactly the document.
    fn typed<T: k8s_openapi::Resource + DeserializeOwned + serde::Serialize>(&self) -> T {
        assert_eq!(self.value["apiVersion"], T::API_VERSION, "{}: apiVersion", self.origin);
        let typed: T = serde_json::from_value(self.value.clone())
            .unwrap_or_else(|e| panic!("{}: not a valid {}: {e}", self.origin, T::KIND));
        let back = serde_json::to_value(&typed).unwrap();
        if let Some(difference) = first_difference(&self.value, &back, "") {
            panic!("{}: {difference} (a field {} does not have, or a value of the wrong type)", self.origin, T::KIND);
        }
        typed
    }
}

fn first_difference(written: &Value, typed: &Value, path: &str) -> Option<String> {
    match (written, typed) {
        (Value::Object(a), Value::Object(b)) => {
            a.keys().chain(b.keys()).collect::<BTreeSet<_>>().into_iter().find_map(|k| match (a.get(k), b.get(k)) {
                (Some(x), Some(y)) => first_difference(x, y, &format!("{path}.{k}")),
                (Some(_), None) => Some(format!("{path}.{k} is not a field of the type")),
                (None, Some(y)) => Some(format!("{path}.{k} appears as {y} only after typing")),
                (None, None) => None,
            })
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            a.iter().zip(b).enumerate().find_map(|(i, (x, y))| first_difference(x, y, &format!("{path}[{i}]")))
        }
        _ if written == typed => None,
        // One number written as an integer and typed as a float (a CRD schema's `minimum: 0`).
        (Value::Number(a), Value::Number(b)) if a.as_f64() == b.as_f64() => None,
        _ => Some(format!("{path}: written {written}, typed {typed}")),
    }
}

fn yaml_files(dir: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo().join(dir))
        .unwrap_or_else(|e| panic!("{dir}/: {e}"))
        .map(|e| e.unwrap().path())
        .flat_map(|p| if p.is_dir() { yaml_files(p.strip_prefix(repo()).unwrap().to_str().unwrap()) } else { vec![p] })
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    files.sort();
    files
}

fn docs_in(dir: &str) -> Vec<Doc> {
    let files = yaml_files(dir);
    assert!(!files.is_empty(), "no YAML in {dir}/");
    files
        .iter()
        .flat_map(|file| {
            let text = std::fs::read_to_string(file).unwrap();
            let shown = file.strip_prefix(repo()).unwrap().display().to_string();
            let values: Vec<Value> =
                serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("{shown}: not YAML: {e}"));
            values
                .into_iter()
                .filter(|v| !v.is_null())
                .enumerate()
                .map(move |(i, value)| Doc { origin: format!("{shown} document {}", i + 1), value })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Every document of `dir` as its type; fails on a kind nothing here knows.
fn check_all_typed(dir: &str) {
    for doc in docs_in(dir) {
        match doc.kind() {
            "Namespace" => drop(doc.typed::<Namespace>()),
            "ServiceAccount" => drop(doc.typed::<ServiceAccount>()),
            "ClusterRole" => drop(doc.typed::<ClusterRole>()),
            "ClusterRoleBinding" => drop(doc.typed::<ClusterRoleBinding>()),
            "Role" => drop(doc.typed::<Role>()),
            "RoleBinding" => drop(doc.typed::<RoleBinding>()),
            "ConfigMap" => drop(doc.typed::<ConfigMap>()),
            "DaemonSet" => drop(doc.typed::<DaemonSet>()),
            "Pod" => drop(doc.typed::<Pod>()),
            "Service" => drop(doc.typed::<Service>()),
            "NetworkAttachmentDefinition" => drop(doc.typed::<NetworkAttachmentDefinition>()),
            "CustomResourceDefinition" => drop(doc.typed::<CustomResourceDefinition>()),
            "ValidatingAdmissionPolicy" => drop(doc.typed::<ValidatingAdmissionPolicy>()),
            "ValidatingAdmissionPolicyBinding" => drop(doc.typed::<ValidatingAdmissionPolicyBinding>()),
            other => panic!("{}: kind {other} has no check here; add its type", doc.origin),
        }
    }
}

#[test]
fn every_manifest_document_is_a_valid_object_of_its_kind() {
    for dir in ["manifests", "examples", "e2e"] {
        check_all_typed(dir);
    }
}

/// The cluster suite's test pods (`testkit::cluster::pods`) are valid pods holding what the test
/// asked for, whatever the text of a value (the annotation's list syntax, a quantity, a colon).
#[test]
fn the_cluster_suites_test_pods_are_valid_pods() {
    let built = web_server("yh-test", "web-0")
        .on_slot("a")
        .annotation(NETWORKS, "lan@net1, infra/x")
        .annotation("kubernetes.io/ingress-bandwidth", "2M")
        .host_port(30080)
        .network(Network::FromConfigMap("nets"))
        .limit("yh-genie.test/vf", 2)
        .claim_from_template("nics", "two-vfs")
        .claim("red", "red");
    let doc = Doc { origin: "TestPod".into(), value: serde_saphyr::from_str(&built.yaml()).unwrap() };
    let pod: Pod = doc.typed();
    assert_eq!(pod.metadata.namespace.as_deref(), Some("yh-test"));
    let annotations = pod.metadata.annotations.unwrap();
    assert_eq!(annotations[NETWORKS], "lan@net1, infra/x");
    assert_eq!(annotations["kubernetes.io/ingress-bandwidth"], "2M");
    let spec = pod.spec.unwrap();
    assert_eq!(spec.node_selector.unwrap()["yh-genie-e2e/slot"], "a");
    assert_eq!(spec.termination_grace_period_seconds, Some(1));
    let claims: Vec<_> = spec
        .resource_claims
        .unwrap()
        .into_iter()
        .map(|c| (c.name, c.resource_claim_template_name, c.resource_claim_name))
        .collect();
    assert_eq!(claims, [("nics".into(), Some("two-vfs".into()), None), ("red".into(), None, Some("red".into()))]);
    let container = &spec.containers[0];
    assert_eq!(container.ports.as_ref().unwrap()[0].host_port, Some(30080));
    let env = &container.env.as_ref().unwrap()[0];
    assert_eq!(env.name, "CNI_NETWORK_CONFIG");
    assert_eq!(env.value_from.as_ref().unwrap().config_map_key_ref.as_ref().unwrap().name, "nets");
    assert_eq!(container.resources.as_ref().unwrap().limits.as_ref().unwrap()["yh-genie.test/vf"].0, "2");

    let doc = Doc {
        origin: "TestPod".into(),
        value: serde_saphyr::from_str(&sleeper("yh-test", "s").network(Network::Named("yonghui")).yaml()).unwrap(),
    };
    let pod: Pod = doc.typed();
    let spec = pod.spec.unwrap();
    assert!(spec.node_selector.is_none() && pod.metadata.annotations.is_none());
    assert_eq!(spec.containers[0].command.as_deref(), Some(&["sleep".to_string(), "3600".to_string()][..]));
    assert_eq!(spec.containers[0].env.as_ref().unwrap()[0].value.as_deref(), Some("yonghui"));
}

#[test]
fn typing_catches_a_misspelt_field() {
    let doc = Doc {
        origin: "inline".into(),
        value: serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": "i", "imagePullPolicey": "Always"}]}}),
    };
    let caught = std::panic::catch_unwind(|| doc.typed::<Pod>()).unwrap_err();
    let message = caught.downcast_ref::<String>().unwrap();
    assert!(message.contains(".spec.containers[0].imagePullPolicey is not a field"), "{message}");
}

/// One `kind` of document from `dir`, by name.
fn find<T: k8s_openapi::Resource + DeserializeOwned + serde::Serialize>(dir: &str, name: &str) -> T {
    let docs = docs_in(dir);
    let doc = docs
        .iter()
        .find(|d| d.kind() == T::KIND && d.name() == name)
        .unwrap_or_else(|| panic!("no {} {name} in {dir}/", T::KIND));
    doc.typed()
}

fn installer_daemonset() -> DaemonSet {
    find("manifests", "yh-genie")
}

fn installer_container(ds: &DaemonSet) -> Container {
    let spec = ds.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    assert_eq!(spec.containers.len(), 1, "one installer container");
    spec.containers[0].clone()
}

#[test]
fn the_cluster_role_grants_exactly_what_the_selector_calls() {
    let role: ClusterRole = find("manifests", "yh-genie");
    let mut granted = BTreeSet::new();
    for rule in role.rules.unwrap() {
        assert!(rule.resource_names.is_none() && rule.non_resource_urls.is_none(), "{rule:?}");
        for group in rule.api_groups.unwrap_or_default() {
            for resource in rule.resources.clone().unwrap_or_default() {
                for verb in &rule.verbs {
                    granted.insert((group.clone(), resource.clone(), verb.clone()));
                }
            }
        }
    }
    // Every request the selector's API client makes (src/platform/kube: `API_CALLS`) and the node agent's
    // (`AGENT_API_CALLS`), no more, no less.
    let wanted: BTreeSet<_> = API_CALLS
        .iter()
        .chain(&AGENT_API_CALLS)
        .map(|(g, r, v)| (g.to_string(), r.to_string(), v.to_string()))
        .collect();
    assert_eq!(granted, wanted);

    let binding: ClusterRoleBinding = find("manifests", "yh-genie");
    assert_eq!((binding.role_ref.kind.as_str(), binding.role_ref.name.as_str()), ("ClusterRole", "yh-genie"));
    let ds = installer_daemonset();
    let pod = ds.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    let account = pod.service_account_name.clone().unwrap();
    let namespace = ds.metadata.namespace.clone().unwrap();
    let subjects = binding.subjects.unwrap();
    assert!(
        subjects.iter().any(|s| s.kind == "ServiceAccount"
            && s.name == account
            && s.namespace.as_deref() == Some(namespace.as_str())),
        "the binding does not name the DaemonSet's service account {namespace}/{account}"
    );
    let _: ServiceAccount = find("manifests", &account);
}

/// The nodes' credentials may update only pods on their own node (Kubernetes >= 1.30): the policy
/// matches exactly the service account the DaemonSet runs as, every update of a pod, compares the
/// node name the token is bound to with the pod's, keeps the spec, and its binding denies.
#[test]
fn the_node_restriction_policy_holds_the_service_account_to_its_own_node() {
    let policy: ValidatingAdmissionPolicy = find("manifests", "yh-genie-own-node-pods");
    let binding: ValidatingAdmissionPolicyBinding = find("manifests", "yh-genie-own-node-pods");
    let spec = policy.spec.unwrap();
    assert_eq!(spec.failure_policy.as_deref(), Some("Fail"));
    let ds = installer_daemonset();
    let pod_spec = ds.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    let account = pod_spec.service_account_name.as_deref().unwrap();
    let namespace = ds.metadata.namespace.as_deref().unwrap();
    let conditions = spec.match_conditions.unwrap();
    assert_eq!(conditions.len(), 1);
    assert_eq!(
        conditions[0].expression,
        format!("request.userInfo.username == 'system:serviceaccount:{namespace}:{account}'")
    );
    let rules = spec.match_constraints.unwrap().resource_rules.unwrap();
    assert_eq!(rules.len(), 1);
    let rule = &rules[0];
    assert_eq!(rule.operations.as_deref(), Some(&["UPDATE".to_string()][..]), "PATCH is UPDATE at admission");
    assert_eq!(rule.api_groups.as_deref(), Some(&[String::new()][..]));
    assert!(rule.resources.as_ref().unwrap().contains(&"pods".to_string()));
    let validations = spec.validations.unwrap();
    let node_check = &validations[0].expression;
    assert!(
        node_check.contains("request.userInfo.extra['authentication.kubernetes.io/node-name']")
            && node_check.contains("oldObject.spec.nodeName"),
        "{node_check}"
    );
    assert!(validations.iter().any(|v| v.expression == "object.spec == oldObject.spec"));
    let metadata = validations.iter().map(|v| v.expression.as_str()).collect::<Vec<_>>().join("\n");
    for kept in ["labels", "finalizers", "ownerReferences", "annotations"] {
        assert!(metadata.contains(&format!("oldObject.metadata.{kept}")), "{kept} is not held: {metadata}");
    }
    assert!(metadata.contains("'k8s.v1.cni.cncf.io/network-status'"), "{metadata}");
    let binding = binding.spec.unwrap();
    assert_eq!(binding.policy_name.as_deref(), Some("yh-genie-own-node-pods"));
    assert_eq!(binding.validation_actions.as_deref(), Some(&["Deny".to_string()][..]));
    // The ClusterRole grants what the policy limits: patch on pods.
    assert!(API_CALLS.contains(&("", "pods", "patch")));

    // And the events the agent creates: as its own node, about pods only, of the reasons it uses
    // (AddedInterface after ADD; the dynamic networks' RemovedInterface and NetworkChangeFailed).
    let events: ValidatingAdmissionPolicy = find("manifests", "yh-genie-own-node-events");
    let binding: ValidatingAdmissionPolicyBinding = find("manifests", "yh-genie-own-node-events");
    let spec = events.spec.unwrap();
    assert_eq!(spec.failure_policy.as_deref(), Some("Fail"));
    assert_eq!(spec.match_conditions.unwrap()[0].expression, conditions[0].expression);
    let rule = &spec.match_constraints.unwrap().resource_rules.unwrap()[0];
    assert_eq!(rule.resources.as_deref(), Some(&["events".to_string()][..]));
    assert_eq!(rule.operations.as_deref(), Some(&["CREATE".to_string()][..]));
    let checks = spec.validations.unwrap().iter().map(|v| v.expression.clone()).collect::<Vec<_>>().join("\n");
    for part in [
        "== object.reportingInstance",
        "object.reason in ['AddedInterface', 'RemovedInterface', 'NetworkChangeFailed']",
        "object.involvedObject.kind == 'Pod'",
    ] {
        assert!(checks.contains(part), "lacks {part}: {checks}");
    }
    assert_eq!(binding.spec.unwrap().validation_actions.as_deref(), Some(&["Deny".to_string()][..]));
    assert!(AGENT_API_CALLS.contains(&("", "events", "create")));
}

#[test]
fn the_daemonset_runs_on_every_linux_node_as_node_critical() {
    let ds = installer_daemonset();
    assert_eq!(ds.metadata.namespace.as_deref(), Some("kube-system"));
    let spec = ds.spec.as_ref().unwrap();
    assert_eq!(spec.update_strategy.as_ref().unwrap().type_.as_deref(), Some("RollingUpdate"));
    let pod = spec.template.spec.as_ref().unwrap();
    assert_eq!(pod.host_network, Some(true), "the pod network is what it installs");
    assert_eq!(pod.priority_class_name.as_deref(), Some("system-node-critical"));
    assert_eq!(pod.node_selector.as_ref().unwrap().get("kubernetes.io/os").map(String::as_str), Some("linux"));
    let tolerates_all = pod
        .tolerations
        .as_ref()
        .unwrap()
        .iter()
        .any(|t| t.operator.as_deref() == Some("Exists") && t.key.is_none() && t.effect.is_none());
    assert!(tolerates_all, "must tolerate every taint");
    assert_ne!(pod.automount_service_account_token, Some(false), "the kubeconfig is made from the token");
    let container = installer_container(&ds);
    let requests = container.resources.as_ref().unwrap().requests.as_ref().unwrap();
    assert!(requests.contains_key("cpu") && requests.contains_key("memory"));
    let image = container.image.unwrap();
    assert_eq!(image, format!("yh-genie:{}", env!("CARGO_PKG_VERSION")), "the image tag follows the crate version");
}

/// The installer's options as the DaemonSet runs it: its args and env through the real parser.
fn installer_options(container: &Container) -> Options {
    let args: Vec<String> =
        container.command.iter().flatten().chain(container.args.iter().flatten()).cloned().collect();
    // What the kubelet puts in from the downward API: a node's name for spec.nodeName.
    let downward = |e: &k8s_openapi::api::core::v1::EnvVar| {
        let field = e.value_from.as_ref()?.field_ref.as_ref()?;
        (field.field_path == "spec.nodeName").then(|| "worker-1".to_string())
    };
    let env: BTreeMap<String, String> = container
        .env
        .iter()
        .flatten()
        .filter_map(|e| Some((e.name.clone(), e.value.clone().or_else(|| downward(e))?)))
        .collect();
    let lookup = |name: &str| match name {
        // The kubelet sets these in every pod.
        "KUBERNETES_SERVICE_HOST" => Some("10.96.0.1".to_owned()),
        "KUBERNETES_SERVICE_PORT" => Some("443".to_owned()),
        _ => env.get(name).cloned(),
    };
    let args: Vec<std::ffi::OsString> =
        ["yh-genie", "install"].into_iter().map(String::from).chain(args).map(Into::into).collect();
    match commands::parse("yh-genie", &args, &lookup) {
        Ok(commands::Cli { command: Some(commands::Command::Install(install)) }) => {
            install.options(&lookup).unwrap_or_else(|e| panic!("the DaemonSet's installer options are unusable: {e}"))
        }
        other => panic!("the DaemonSet's installer args do not parse: {other:?}"),
    }
}

/// The mount serving local path `local`, and its volume.
fn mount_for<'a>(
    ds: &'a DaemonSet,
    local: &Path,
) -> (&'a k8s_openapi::api::core::v1::VolumeMount, &'a k8s_openapi::api::core::v1::Volume) {
    let pod = ds.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    let mounts = pod.containers[0].volume_mounts.as_ref().unwrap();
    let mount = mounts
        .iter()
        .filter(|m| local.starts_with(&m.mount_path))
        .max_by_key(|m| m.mount_path.len())
        .unwrap_or_else(|| panic!("nothing is mounted at {}", local.display()));
    let volume = pod.volumes.as_ref().unwrap().iter().find(|v| v.name == mount.name).unwrap();
    (mount, volume)
}

#[test]
fn the_daemonset_mounts_every_host_path_the_installer_touches() {
    let ds = installer_daemonset();
    let opts = installer_options(&installer_container(&ds));
    let written = opts.host_dirs_written().into_iter().map(|p| (p.to_owned(), true));
    let read = opts.wait_for.iter().map(|p| (p.clone(), false));
    for (host_path, writes) in written.into_iter().chain(read) {
        let local = opts.on_host(&host_path);
        let (mount, volume) = mount_for(&ds, &local);
        let host_dir = &volume.host_path.as_ref().unwrap_or_else(|| panic!("{} is not a hostPath", volume.name)).path;
        let below = local.strip_prefix(&mount.mount_path).unwrap();
        assert_eq!(Path::new(host_dir).join(below), host_path, "{} maps to the wrong host path", local.display());
        if writes {
            assert_ne!(mount.read_only, Some(true), "{} is written but mounted read-only", host_path.display());
        }
    }
    // The local inputs come from the ConfigMaps in config.yaml.
    for local in [opts.selector_config.clone().unwrap(), opts.networks_dir.clone().unwrap()] {
        let (_, volume) = mount_for(&ds, &local);
        let name =
            &volume.config_map.as_ref().unwrap_or_else(|| panic!("{} is not from a ConfigMap", local.display())).name;
        let _: ConfigMap = find("manifests", name);
    }
}

#[test]
fn the_daemonset_runs_the_agent_for_its_node() {
    let ds = installer_daemonset();
    let container = installer_container(&ds);
    let opts = installer_options(&container);
    let agent = opts.agent.clone().expect("the DaemonSet runs the agent (--agent)");
    assert_eq!(agent.node_name, "worker-1", "the node's name from the downward API");
    // Where the plugin asks by default (the installer writes it into the conflist; the socket's
    // directory is a mounted host path, see the mounts test).
    assert_eq!(agent.socket, std::path::Path::new(yh_genie::programs::agent::DEFAULT_SOCKET));
}

#[test]
fn the_daemonset_probes_the_agents_readiness_only() {
    let ds = installer_daemonset();
    let container = installer_container(&ds);
    let opts = installer_options(&container);
    let agent = opts.agent.clone().expect("the DaemonSet runs the agent (--agent)");
    // Host network: the probe names the node's loopback, where the agent's port is.
    let probe = container.readiness_probe.as_ref().expect("a readinessProbe").http_get.clone().expect("httpGet");
    assert_eq!(probe.host.as_deref(), Some(agent.metrics_address.ip().to_string().as_str()));
    assert_eq!(
        probe.port,
        k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(agent.metrics_address.port().into())
    );
    assert_eq!(probe.path.as_deref(), Some("/readyz"));
    assert!(container.liveness_probe.is_none(), "a failing agent restarts itself; it must never restart the installer");
}

/// The NetworkAttachmentDefinition CRD ships in manifests/, so `kubectl apply -f manifests/` serves
/// every NAD example on a fresh cluster: it is the kind the code reads (group, version, kind,
/// plural, namespaced), named as the API server requires (`<plural>.<group>`, the name Multus's CRD
/// has too), with `spec.config` a string; and its file is applied before yh-genie.yaml (kubectl
/// applies a directory's files in name order). No other copy of it is shipped.
#[test]
fn the_nad_crd_is_shipped_for_the_type_the_code_reads() {
    use k8s_openapi::Resource;
    type Nad = NetworkAttachmentDefinition;
    let name = format!("{}.{}", Nad::URL_PATH_SEGMENT, Nad::GROUP);
    assert_eq!(name, "network-attachment-definitions.k8s.cni.cncf.io");
    let crd: CustomResourceDefinition = find("manifests", &name);
    let spec = crd.spec;
    assert_eq!(spec.group, Nad::GROUP);
    assert_eq!(spec.scope, "Namespaced");
    assert_eq!(spec.names.kind, Nad::KIND);
    assert_eq!(spec.names.plural, Nad::URL_PATH_SEGMENT);
    assert_eq!(spec.names.singular.as_deref(), Some("network-attachment-definition"));
    assert_eq!(spec.names.short_names.as_deref(), Some(&["net-attach-def".to_string()][..]));
    assert_eq!(Nad::API_VERSION, format!("{}/{}", Nad::GROUP, Nad::VERSION));
    let version = spec.versions.iter().find(|v| v.name == Nad::VERSION).expect("the code's version");
    assert!(version.served && version.storage, "{} must be served and stored", Nad::VERSION);
    let schema = version.schema.as_ref().unwrap().open_api_v3_schema.as_ref().unwrap();
    let nad_spec = &schema.properties.as_ref().unwrap()["spec"];
    let config = &nad_spec.properties.as_ref().unwrap()["config"];
    assert_eq!(config.type_.as_deref(), Some("string"));

    let holding_it: Vec<String> = ["manifests", "examples", "e2e"]
        .into_iter()
        .flat_map(docs_in)
        .filter(|d| d.kind() == "CustomResourceDefinition" && d.name() == name)
        .map(|d| d.origin)
        .collect();
    assert_eq!(holding_it, ["manifests/nad-crd.yaml document 1"], "one copy of the CRD");
    let applied: Vec<PathBuf> =
        yaml_files("manifests").into_iter().filter(|f| f.parent() == Some(&repo().join("manifests"))).collect();
    let at =
        |name: &str| applied.iter().position(|f| f.ends_with(name)).unwrap_or_else(|| panic!("no manifests/{name}"));
    assert!(at("nad-crd.yaml") < at("yh-genie.yaml"), "the CRD is applied first: {applied:?}");
}

/// yh-ipam's IPBlock CRD ships in manifests/ as the code names the objects it creates (group,
/// version, kind, plural, cluster-scoped), applied before yh-genie.yaml, with the spec's fields the
/// agent writes; the ClusterRole lets the agent create and read them.
#[test]
fn the_ipblock_crd_is_shipped_for_the_objects_the_agent_creates() {
    use yh_genie::platform::kube::ip_block;
    let name = format!("{}.{}", ip_block::PLURAL, ip_block::GROUP);
    let crd: CustomResourceDefinition = find("manifests", &name);
    assert_eq!(crd.spec.group, ip_block::GROUP);
    assert_eq!(crd.spec.scope, "Cluster");
    assert_eq!((crd.spec.names.kind.as_str(), crd.spec.names.plural.as_str()), (ip_block::KIND, ip_block::PLURAL));
    let version = crd.spec.versions.iter().find(|v| v.name == ip_block::VERSION).expect("the code's version");
    assert!(version.served && version.storage);
    let schema = version.schema.as_ref().unwrap().open_api_v3_schema.as_ref().unwrap();
    let spec = &schema.properties.as_ref().unwrap()["spec"];
    let written = serde_json::to_value(ip_block::IpBlockSpec {
        cidr: "10.0.0.0/28".parse().unwrap(),
        pool: "p".into(),
        node: "n".into(),
        fixed: true,
        shared_by: "m".into(),
    })
    .unwrap();
    let declared: BTreeSet<&String> = spec.properties.as_ref().unwrap().keys().collect();
    assert_eq!(declared, written.as_object().unwrap().keys().collect(), "the fields the agent writes");
    let applied: Vec<PathBuf> =
        yaml_files("manifests").into_iter().filter(|f| f.parent() == Some(&repo().join("manifests"))).collect();
    let at = |name: &str| applied.iter().position(|f| f.ends_with(name)).unwrap();
    assert!(at("ipam-crd.yaml") < at("yh-genie.yaml"), "the CRD is applied first: {applied:?}");
    for verb in ["create", "get"] {
        assert!(AGENT_API_CALLS.contains(&(ip_block::GROUP, ip_block::PLURAL, verb)), "{verb}");
    }
}

/// yh-ipam's AddressPool CRD ships in manifests/ as the code names the pools it reads (group,
/// version, kind, plural, cluster-scoped: only the admin defines pools), applied before
/// yh-genie.yaml, with the keys the agent reads in its spec; the ClusterRole lets the agent list and
/// watch them.
#[test]
fn the_address_pool_crd_is_shipped_for_the_pools_the_agent_reads() {
    use yh_genie::node::agent_socket::pool_definition;
    use yh_genie::platform::kube::{address_pool, ip_block};
    let name = format!("{}.{}", address_pool::PLURAL, ip_block::GROUP);
    let crd: CustomResourceDefinition = find("manifests", &name);
    assert_eq!(crd.spec.group, ip_block::GROUP);
    assert_eq!(crd.spec.scope, "Cluster");
    assert_eq!(
        (crd.spec.names.kind.as_str(), crd.spec.names.plural.as_str()),
        (address_pool::KIND, address_pool::PLURAL)
    );
    let version = crd.spec.versions.iter().find(|v| v.name == ip_block::VERSION).expect("the code's version");
    assert!(version.served && version.storage);
    let schema = version.schema.as_ref().unwrap().open_api_v3_schema.as_ref().unwrap();
    let spec = &schema.properties.as_ref().unwrap()["spec"];
    let declared: BTreeSet<&str> = spec.properties.as_ref().unwrap().keys().map(String::as_str).collect();
    assert_eq!(declared, pool_definition::KEYS.into_iter().collect(), "the keys the agent reads");
    for verb in ["list", "watch"] {
        assert!(AGENT_API_CALLS.contains(&(ip_block::GROUP, address_pool::PLURAL, verb)), "{verb}");
    }
}

/// NPWG's IPAMClaim CRD ships in manifests/ as the code names the claims it reads (group, version,
/// plural, namespaced), and the ClusterRole lets the agent read them and write their status.
#[test]
fn the_ipam_claim_crd_is_shipped_for_the_claims_the_agent_reads() {
    use yh_genie::platform::kube::fixed_address::ipam_claim_resource;
    let resource = ipam_claim_resource();
    let crd: CustomResourceDefinition = find("manifests", &format!("{}.{}", resource.plural, resource.group));
    assert_eq!(crd.spec.scope, "Namespaced");
    assert_eq!(
        (crd.spec.names.kind.as_str(), crd.spec.names.plural.as_str()),
        (resource.kind.as_str(), resource.plural.as_str())
    );
    let version = crd.spec.versions.iter().find(|v| v.name == resource.version).expect("the code's version");
    assert!(version.served && version.storage && version.subresources.as_ref().is_some_and(|s| s.status.is_some()));
    assert!(AGENT_API_CALLS.contains(&("k8s.cni.cncf.io", "ipamclaims", "get")));
    assert!(AGENT_API_CALLS.contains(&("k8s.cni.cncf.io", "ipamclaims/status", "update")));
}

/// yh-ipam's FixedAddress CRD ships beside the IPBlock's, as the code names it, with the spec's
/// fields the agent writes.
#[test]
fn the_fixed_address_crd_is_shipped_for_the_objects_the_agent_creates() {
    use yh_genie::platform::kube::{fixed_address, ip_block};
    let name = format!("{}.{}", fixed_address::PLURAL, ip_block::GROUP);
    let crd: CustomResourceDefinition = find("manifests", &name);
    assert_eq!(crd.spec.scope, "Cluster");
    assert_eq!(
        (crd.spec.names.kind.as_str(), crd.spec.names.plural.as_str()),
        (fixed_address::KIND, fixed_address::PLURAL)
    );
    let version = crd.spec.versions.iter().find(|v| v.name == ip_block::VERSION).expect("the code's version");
    assert!(version.served && version.storage);
    let schema = version.schema.as_ref().unwrap().open_api_v3_schema.as_ref().unwrap();
    let spec = &schema.properties.as_ref().unwrap()["spec"];
    let written = serde_json::to_value(fixed_address::FixedAddressSpec {
        pool: "p".into(),
        address: "10.0.0.2".parse().unwrap(),
        block: "10.0.0.0/28".parse().unwrap(),
        interface: "net1".into(),
        range_set: 0,
        owner: fixed_address::FixedOwner {
            kind: "StatefulSet".into(),
            namespace: "db".into(),
            name: "web".into(),
            uid: "u".into(),
            ordinal: 0,
        },
        pod: fixed_address::HoldingPod {
            uid: "p".into(),
            namespace: "db".into(),
            name: "web-0".into(),
            node: "n".into(),
        },
    })
    .unwrap();
    let declared: BTreeSet<&String> = spec.properties.as_ref().unwrap().keys().collect();
    assert_eq!(declared, written.as_object().unwrap().keys().collect(), "the fields the agent writes");
    for verb in ["create", "list", "update", "delete"] {
        assert!(AGENT_API_CALLS.contains(&(ip_block::GROUP, fixed_address::PLURAL, verb)), "{verb}");
    }
}

/// The node agent's yh-ipam lease is granted by a Role in the DaemonSet's namespace (where the agent,
/// through its service account's `namespace`, keeps it), bound to its service account: exactly the
/// lease requests the agent makes, and only there.
#[test]
fn the_agent_may_renew_its_lease_in_its_own_namespace_only() {
    let role: Role = find("manifests", "yh-genie-ipam-leases");
    let ds = installer_daemonset();
    let namespace = ds.metadata.namespace.clone().unwrap();
    assert_eq!(role.metadata.namespace.as_deref(), Some(namespace.as_str()));
    let mut granted = BTreeSet::new();
    for rule in role.rules.unwrap() {
        assert!(rule.resource_names.is_none(), "{rule:?}");
        for group in rule.api_groups.unwrap_or_default() {
            for resource in rule.resources.clone().unwrap_or_default() {
                for verb in &rule.verbs {
                    granted.insert((group.clone(), resource.clone(), verb.clone()));
                }
            }
        }
    }
    let wanted: BTreeSet<_> =
        AGENT_LEASE_CALLS.iter().map(|(g, r, v)| (g.to_string(), r.to_string(), v.to_string())).collect();
    assert_eq!(granted, wanted);
    let binding: RoleBinding = find("manifests", "yh-genie-ipam-leases");
    assert_eq!(binding.metadata.namespace.as_deref(), Some(namespace.as_str()));
    assert_eq!((binding.role_ref.kind.as_str(), binding.role_ref.name.as_str()), ("Role", "yh-genie-ipam-leases"));
    let account = ds.spec.as_ref().unwrap().template.spec.as_ref().unwrap().service_account_name.clone().unwrap();
    assert!(binding.subjects.unwrap().iter().any(|s| s.kind == "ServiceAccount"
        && s.name == account
        && s.namespace.as_deref() == Some(namespace.as_str())));
}

/// kubectl for `kubectl kustomize`, which needs no cluster: `YH_GENIE_KUBECTL` (the cluster tier
/// sets it to its build's), else the cluster tier's build in the cache, else one on `PATH`.
fn kubectl() -> Option<PathBuf> {
    if let Some(given) = std::env::var_os("YH_GENIE_KUBECTL") {
        return Some(given.into());
    }
    let cache = std::env::var_os("YH_GENIE_CACHE").map_or_else(|| PathBuf::from("/var/cache/yh-genie"), PathBuf::from);
    let mut built: Vec<PathBuf> = std::fs::read_dir(&cache)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("kubernetes-v"))
        .map(|e| e.path().join("bin/kubectl"))
        .filter(|p| p.is_file())
        .collect();
    built.sort();
    built.pop().or_else(|| {
        let path = std::env::var_os("PATH")?;
        std::env::split_paths(&path).map(|dir| dir.join("kubectl")).find(|p| p.is_file())
    })
}

/// `kubectl kustomize dir`: the documents it renders.
fn kustomize(kubectl: &Path, dir: &Path) -> Vec<Doc> {
    let out = Command::new(kubectl).arg("kustomize").arg(dir).output().unwrap();
    assert!(out.status.success(), "kubectl kustomize {}: {}", dir.display(), String::from_utf8_lossy(&out.stderr));
    let values: Vec<Value> = serde_saphyr::from_multiple(&String::from_utf8(out.stdout).unwrap()).unwrap();
    values
        .into_iter()
        .filter(|v| !v.is_null())
        .map(|value| Doc { origin: format!("kubectl kustomize {}", dir.display()), value })
        .collect()
}

/// The documents of `files` (paths in the repository), by kind and name.
fn docs_by_name(docs: Vec<Doc>) -> BTreeMap<(String, String), Value> {
    docs.into_iter().map(|d| ((d.kind().to_owned(), d.name().to_owned()), d.value)).collect()
}

/// A copy of manifests/ and overlays/ in a temp dir, manifests/yh-genie.yaml's image set to `image`.
fn manifests_with_image(image: &str) -> tempfile::TempDir {
    let copy = tempfile::tempdir().unwrap();
    for dir in ["manifests", "overlays/dynamic-networks"] {
        std::fs::create_dir_all(copy.path().join(dir)).unwrap();
        for entry in std::fs::read_dir(repo().join(dir)).unwrap() {
            let path = entry.unwrap().path();
            if path.is_file() {
                std::fs::copy(&path, copy.path().join(dir).join(path.file_name().unwrap())).unwrap();
            }
        }
    }
    let daemonset = copy.path().join("manifests/yh-genie.yaml");
    let text = std::fs::read_to_string(&daemonset).unwrap();
    let shipped = format!("image: yh-genie:{}\n", env!("CARGO_PKG_VERSION"));
    assert_eq!(text.matches(&shipped).count(), 1, "manifests/yh-genie.yaml names one image");
    std::fs::write(&daemonset, text.replace(&shipped, &format!("image: {image}\n"))).unwrap();
    copy
}

/// `kubectl apply -k overlays/dynamic-networks/` (docs/dynamic-networks.md) applies what the base
/// `manifests/Kustomization` holds (the CRD and yh-genie.yaml, never config.yaml's ConfigMaps), with
/// the DaemonSet as manifests/yh-genie.yaml has it plus exactly the attach worker, its host root,
/// hostPID and the installer's --dynamic-networks; the worker runs the image set in
/// manifests/yh-genie.yaml, whatever it is. Renders with kubectl (no cluster); without one it is
/// skipped here and the cluster tier runs it with its build's.
#[test]
fn the_dynamic_networks_overlay_adds_the_worker_with_the_installers_image() {
    let Some(kubectl) = kubectl() else {
        eprintln!("no kubectl (YH_GENIE_KUBECTL, the cluster build's, PATH): the overlay is not rendered here");
        return;
    };
    let plain: Vec<Doc> = [
        "manifests/ipam-crd.yaml",
        "manifests/ipamclaims-crd.yaml",
        "manifests/nad-crd.yaml",
        "manifests/yh-genie.yaml",
    ]
    .iter()
    .flat_map(|file| {
        let text = std::fs::read_to_string(repo().join(file)).unwrap();
        let values: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
        values.into_iter().filter(|v| !v.is_null()).map(|value| Doc { origin: file.to_string(), value })
    })
    .collect();
    let plain = docs_by_name(plain);
    assert_eq!(docs_by_name(kustomize(&kubectl, &repo().join("manifests"))), plain, "the base is what -f applies");

    let image = "registry.example:5000/team/yh-genie:9.9.9-test";
    let copy = manifests_with_image(image);
    let rendered = kustomize(&kubectl, &copy.path().join("overlays/dynamic-networks"));
    let daemonset_doc = rendered.iter().find(|d| d.kind() == "DaemonSet").expect("a DaemonSet");
    let ds: DaemonSet = daemonset_doc.typed();
    let pod = ds.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    let container = |name: &str| pod.containers.iter().find(|c| c.name == name).unwrap_or_else(|| panic!("no {name}"));
    let (install, worker) = (container("install"), container("attach-worker"));
    assert_eq!(pod.containers.len(), 2);
    assert_eq!(install.image.as_deref(), Some(image));
    assert_eq!(worker.image, install.image, "the worker runs the installer's image");
    assert!(installer_options(install).agent.expect("the agent").dynamic_networks, "--dynamic-networks");
    assert_eq!(pod.host_pid, Some(true));
    let args: Vec<std::ffi::OsString> = std::iter::once("yh-genie")
        .chain(worker.command.iter().flatten().skip(1).map(String::as_str))
        .map(Into::into)
        .collect();
    assert_eq!(worker.command.as_ref().unwrap()[0], "/usr/local/bin/yh-genie");
    assert!(matches!(
        commands::parse("yh-genie", &args, &|_| None),
        Ok(commands::Cli { command: Some(commands::Command::AttachWorker(_)) })
    ));
    assert_eq!(worker.security_context.as_ref().unwrap().privileged, Some(true));
    let mount = worker.volume_mounts.as_ref().unwrap().iter().find(|m| m.mount_path == "/host").expect("/host");
    assert_eq!(mount.mount_propagation.as_deref(), Some("HostToContainer"));
    let volume = pod.volumes.as_ref().unwrap().iter().find(|v| v.name == mount.name).unwrap();
    assert_eq!(volume.host_path.as_ref().unwrap().path, "/");

    // Take away what the overlay adds: the plain manifests are left, the DaemonSet included.
    let mut rendered = docs_by_name(rendered);
    let ds = rendered.get_mut(&("DaemonSet".to_string(), "yh-genie".to_string())).unwrap();
    let pod = &mut ds["spec"]["template"]["spec"];
    pod.as_object_mut().unwrap().remove("hostPID");
    pod["containers"].as_array_mut().unwrap().retain(|c| c["name"] != "attach-worker");
    pod["volumes"].as_array_mut().unwrap().retain(|v| v["name"] != "host-root");
    pod["containers"][0]["env"].as_array_mut().unwrap().retain(|e| e["name"] != "YH_GENIE_DYNAMIC_NETWORKS");
    pod["containers"][0]["image"] = Value::String(format!("yh-genie:{}", env!("CARGO_PKG_VERSION")));
    assert_eq!(rendered, plain, "the overlay changes nothing else");
}

/// The network files a ConfigMap carries, checked and laid out as the installer does: key -> conf.
fn networks_of(cm: &ConfigMap, origin: &str) -> BTreeMap<String, ConfList> {
    cm.data
        .iter()
        .flatten()
        .map(|(key, text)| {
            let conf = parse_conf(text.as_bytes(), &Path::new(origin).join(key)).unwrap_or_else(|e| panic!("{e}"));
            let stem = key.rsplit_once('.').unwrap().0;
            assert_eq!(conf.name, stem, "{origin}: {key} must name its network {stem:?}");
            (key.clone(), conf)
        })
        .collect()
}

fn example_networks() -> BTreeMap<String, ConfList> {
    let dir = repo().join("examples/networks");
    std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| {
            let path = e.unwrap().path();
            let key = path.file_name().unwrap().to_str().unwrap().to_owned();
            let conf = parse_conf(&std::fs::read(&path).unwrap(), &path).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(conf.name, key.rsplit_once('.').unwrap().0, "{key} must name its network after the file");
            (key, conf)
        })
        .collect()
}

fn plugin_types(conf: &ConfList) -> Vec<String> {
    let mut types = Vec::new();
    for plugin in &conf.plugins {
        types.push(plugin["type"].as_str().unwrap().to_owned());
        let delegate_type = plugin.get("delegate").and_then(|d| d.get("type")).and_then(Value::as_str);
        types.extend(delegate_type.map(str::to_owned));
        let ipam_type = plugin.get("ipam").and_then(|i| i.get("type")).and_then(Value::as_str);
        types.extend(ipam_type.map(str::to_owned));
    }
    types
}

/// The networks a CNI_NETWORK_CONFIG value names (one, or a list), each as its network directory
/// and file, if the value names a file; parsed by the selector's own parser.
fn chosen(value: &str) -> Vec<(String, Option<String>)> {
    let elements = value::parse(value).unwrap_or_else(|e| panic!("{value}: {e}"));
    elements
        .into_iter()
        .map(|element| {
            let path = match element.name {
                NetworkName::Bare(name) => return (name, None),
                NetworkName::KubeconfigJson(full) => {
                    let rel = full
                        .strip_prefix(CONF_DIR)
                        .unwrap_or_else(|_| panic!("{} is not under {CONF_DIR}", full.display()));
                    rel.to_path_buf()
                }
                NetworkName::Path(path) => path,
            };
            let path = path.display().to_string();
            match path.split_once('/') {
                Some((network, file)) => (network.to_owned(), Some(file.to_owned())),
                None => (path, None),
            }
        })
        .collect()
}

/// Check that `networks` has network `network` (its file `file`, or the first of its directory).
fn assert_has_network(networks: &BTreeMap<String, ConfList>, origin: &str, network: &str, file: Option<String>) {
    let key = match file {
        Some(file) => file,
        None => networks
            .keys()
            .find(|k| k.rsplit_once('.').unwrap().0 == network)
            .unwrap_or_else(|| panic!("{origin}: no network {network:?}"))
            .clone(),
    };
    let conf = networks.get(&key).unwrap_or_else(|| panic!("{origin}: no network file {key}"));
    assert_eq!(conf.name, network, "{origin}: {key} is not in the directory {network}/");
}

/// Every pod in `dir` chooses networks that `networks` provides (or gets the default), and every
/// NetworkAttachmentDefinition its networks annotation names is shipped beside it, naming a
/// network of `networks` or holding a valid configuration. Returns how many choices were checked.
fn assert_pods_choose_existing_networks(dir: &str, networks: &BTreeMap<String, ConfList>) -> usize {
    let docs = docs_in(dir);
    let config_maps: BTreeMap<(String, String), ConfigMap> = docs
        .iter()
        .filter(|d| d.kind() == "ConfigMap")
        .map(|d| {
            let cm: ConfigMap = d.typed();
            ((cm.metadata.namespace.clone().unwrap_or_default(), d.name().to_owned()), cm)
        })
        .collect();
    let nads: BTreeMap<(String, String), NetworkAttachmentDefinition> = docs
        .iter()
        .filter(|d| d.kind() == "NetworkAttachmentDefinition")
        .map(|d| {
            let nad: NetworkAttachmentDefinition = d.typed();
            ((nad.metadata.namespace.clone().unwrap_or_default(), d.name().to_owned()), nad)
        })
        .collect();
    let mut checked = 0;
    for doc in docs.iter().filter(|d| d.kind() == "Pod") {
        let pod: Pod = doc.typed();
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        for container in &pod.spec.as_ref().unwrap().containers {
            for env in container.env.iter().flatten().filter(|e| e.name == "CNI_NETWORK_CONFIG") {
                let value = match (&env.value, env.value_from.as_ref().and_then(|f| f.config_map_key_ref.as_ref())) {
                    (Some(v), None) => v.clone(),
                    (None, Some(r)) => {
                        let cm = config_maps
                            .get(&(namespace.clone(), r.name.clone()))
                            .unwrap_or_else(|| panic!("{}: ConfigMap {} is not shipped with it", doc.origin, r.name));
                        cm.data
                            .as_ref()
                            .and_then(|d| d.get(&r.key))
                            .cloned()
                            .unwrap_or_else(|| panic!("{}: ConfigMap {} has no key {}", doc.origin, r.name, r.key))
                    }
                    _ => panic!("{}: CNI_NETWORK_CONFIG must be a value or a configMapKeyRef", doc.origin),
                };
                for (network, file) in chosen(&value) {
                    assert_has_network(networks, &doc.origin, &network, file);
                    checked += 1;
                }
            }
        }
        let annotation = pod.metadata.annotations.as_ref().and_then(|a| a.get(NETWORKS));
        let requests = annotation
            .map(|a| annotation::parse(a).unwrap_or_else(|e| panic!("{}: {e}", doc.origin)))
            .unwrap_or_default();
        for request in requests {
            let nad_namespace = request.namespace.clone().unwrap_or(namespace.clone());
            let nad = nads.get(&(nad_namespace.clone(), request.name.clone())).unwrap_or_else(|| {
                panic!("{}: NetworkAttachmentDefinition {nad_namespace}/{} is not shipped", doc.origin, request.name)
            });
            match nad.inline_config() {
                // A configuration without a name takes the NAD's, as the selector gives it.
                Some(config) => {
                    let config = named_after_nad(config, &request.name);
                    drop(parse_inline(config.as_bytes(), &doc.origin).unwrap_or_else(|e| panic!("{e}")))
                }
                None => assert_has_network(networks, &doc.origin, &request.name, None),
            }
            checked += 1;
        }
    }
    checked
}

#[test]
fn the_shipped_default_network_is_shipped() {
    let networks: ConfigMap = find("manifests", "yh-genie-networks");
    let networks = networks_of(&networks, "manifests/config.yaml");
    let config: ConfigMap = find("manifests", "yh-genie-config");
    let selector: Value = serde_json::from_str(&config.data.unwrap()["selector.json"]).unwrap();
    let default = selector["defaultNetwork"].as_str().unwrap();
    assert!(networks.values().any(|c| c.name == default), "defaultNetwork {default:?} is not shipped");
}

/// Every shipped network is valid (`networks_of` parses each) and runs only built-in plugins or
/// those kind's node image has.
#[test]
fn the_shipped_networks_are_valid_with_plugins_every_node_has() {
    let networks: ConfigMap = find("manifests", "yh-genie-networks");
    let networks = networks_of(&networks, "manifests/config.yaml");
    for conf in networks.values() {
        for t in plugin_types(conf) {
            assert!(BUILTIN_TYPES.contains(&t.as_str()) || KIND_NODE_PLUGINS.contains(&t.as_str()), "{t}");
        }
    }
}

#[test]
fn every_example_pod_chooses_an_example_network_made_of_known_plugins() {
    let networks = example_networks();
    for (key, conf) in &networks {
        for t in plugin_types(conf) {
            assert!(BUILTIN_TYPES.contains(&t.as_str()) || REFERENCE_PLUGINS.contains(&t.as_str()), "{key}: {t}");
        }
    }
    let choices = assert_pods_choose_existing_networks("examples", &networks);
    assert!(choices >= 8, "an example pod per network chain, and the router pattern twice: {choices} choices");
    // Each built-in plugin appears in some example.
    let used: BTreeSet<String> = networks.values().flat_map(plugin_types).collect();
    for builtin in BUILTIN_TYPES {
        assert!(used.contains(builtin), "no example uses {builtin}");
    }
}

#[test]
fn every_e2e_pod_chooses_an_e2e_network_made_of_what_kind_nodes_have() {
    let cm: ConfigMap = find("e2e", "yh-genie-networks");
    let networks = networks_of(&cm, "e2e/networks.yaml");
    for (key, conf) in &networks {
        for t in plugin_types(conf) {
            assert!(BUILTIN_TYPES.contains(&t.as_str()) || KIND_NODE_PLUGINS.contains(&t.as_str()), "{key}: {t}");
        }
    }
    assert!(assert_pods_choose_existing_networks("e2e", &networks) >= 4);
}

#[test]
fn copies_of_the_yonghui_network_are_identical() {
    let shipped: ConfigMap = find("manifests", "yh-genie-networks");
    let shipped = shipped.data.unwrap()["yonghui.conflist"].clone();
    let e2e: ConfigMap = find("e2e", "yh-genie-networks");
    assert_eq!(e2e.data.unwrap()["yonghui.conflist"], shipped, "e2e/networks.yaml");
    let example = std::fs::read_to_string(repo().join("examples/networks/yonghui.conflist")).unwrap();
    assert_eq!(example, shipped, "examples/networks/yonghui.conflist");
}

/// kind's `kind.x-k8s.io/v1alpha4` Cluster, for the fields this project uses. Unknown fields are
/// refused, so a misspelt key (which kind would reject) fails here.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct KindCluster {
    kind: String,
    api_version: String,
    name: Option<String>,
    networking: KindNetworking,
    nodes: Vec<KindNode>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct KindNetworking {
    #[serde(rename = "disableDefaultCNI")]
    disable_default_cni: bool,
    pod_subnet: String,
    service_subnet: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KindNode {
    role: KindRole,
}

#[derive(Deserialize, PartialEq, Debug)]
#[serde(rename_all = "kebab-case")]
enum KindRole {
    ControlPlane,
    Worker,
}

#[test]
fn kind_config_is_kind_config_without_a_default_cni() {
    let text = std::fs::read_to_string(repo().join("kind-config.yaml")).unwrap();
    let cluster: KindCluster = serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("kind-config.yaml: {e}"));
    assert_eq!((cluster.kind.as_str(), cluster.api_version.as_str()), ("Cluster", "kind.x-k8s.io/v1alpha4"));
    assert!(cluster.name.is_some_and(|n| !n.is_empty()));
    assert!(cluster.networking.disable_default_cni);
    assert_eq!(cluster.networking.pod_subnet, "10.244.0.0/16");
    assert_eq!(cluster.networking.service_subnet, "10.96.0.0/16");
    let roles: Vec<_> = cluster.nodes.into_iter().map(|n| n.role).collect();
    assert_eq!(roles, [KindRole::ControlPlane, KindRole::Worker, KindRole::Worker]);

    // The fabric hands out the same range, and the e2e asserts on it.
    let flannel: ConfigMap = find("e2e", "kube-flannel-cfg");
    let net_conf: Value = serde_json::from_str(&flannel.data.unwrap()["net-conf.json"]).unwrap();
    assert_eq!(net_conf["Network"], cluster.networking.pod_subnet);
    let script = std::fs::read_to_string(repo().join("e2e/run.sh")).unwrap();
    assert!(script.contains(&format!("\npod_cidr={} ", cluster.networking.pod_subnet)));
    // And the veth example hijacks the cluster's own ranges.
    let veth = &example_networks()["macvlan-veth.conflist"];
    let veth = veth.plugins.iter().find(|p| p["type"] == "veth").unwrap();
    assert_eq!(veth["overlay_hijack_subnet"], serde_json::json!([cluster.networking.pod_subnet]));
    assert_eq!(veth["service_hijack_subnet"], serde_json::json!([cluster.networking.service_subnet]));
}

#[test]
fn kind_config_typing_refuses_unknown_fields() {
    let misspelt = "kind: Cluster\napiVersion: kind.x-k8s.io/v1alpha4\nnetworking:\n  disableDefaultCni: true\n  podSubnet: a\n  serviceSubnet: b\nnodes: []\n";
    assert!(serde_saphyr::from_str::<KindCluster>(misspelt).is_err());
}

fn shell_scripts() -> Vec<PathBuf> {
    let mut scripts: Vec<PathBuf> = std::fs::read_dir(repo().join("e2e"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "sh"))
        .collect();
    scripts.sort();
    assert!(!scripts.is_empty());
    scripts
}

#[test]
fn e2e_scripts_parse_with_bash_n() {
    for script in shell_scripts() {
        let out = Command::new("bash").arg("-n").arg(&script).output().unwrap();
        assert!(out.status.success(), "bash -n {}: {}", script.display(), String::from_utf8_lossy(&out.stderr));
    }
}

#[test]
fn e2e_scripts_pass_shellcheck() {
    for script in shell_scripts() {
        let out =
            Command::new("shellcheck").arg("--external-sources").arg(&script).output().unwrap_or_else(|e| {
                panic!("shellcheck cannot run ({e}); CI installs it with apt-get install shellcheck")
            });
        assert!(out.status.success(), "shellcheck {}:\n{}", script.display(), String::from_utf8_lossy(&out.stdout));
    }
}
