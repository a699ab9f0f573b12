//! `yh-genie explain`: which networks a pod gets, on which interfaces, and why, decided by the same
//! code as ADD, without touching the node's networking or writing anything; and whether the node
//! agent holds the pod, what it would answer and what ADD would do with that.

use crate::node::agent_socket::protocol::Answer;
use crate::platform::cni::CniError;
use crate::platform::kube::PodSource;
use crate::programs::selector::choose::{Selection, from_agent_answer};
use crate::programs::selector::config::SelectorConfig;
use crate::programs::selector::devices::dra::{self, DraDevices};
use crate::programs::selector::lookup;
use std::fmt::Write;
use std::path::PathBuf;

/// Which pod to explain, and with which configuration (`yh-genie explain --help`).
#[derive(Debug, PartialEq, Eq)]
pub struct Options {
    pub namespace: String,
    pub pod: String,
    /// The selector's configuration: its conflist.
    pub config: PathBuf,
}

/// Explain the pod; returns the process exit code (0 explained, 1 the pod would get an error).
pub fn run(options: &Options) -> i32 {
    let config = match SelectorConfig::load_file(&options.config) {
        Ok(config) => config,
        Err(e) => return failed(options, &e, ""),
    };
    let direct = explain(options, &config);
    let devices = direct.as_ref().ok().and_then(|(_, _, devices)| devices.clone());
    let mut agent = agent_section(options, &config, direct.as_ref().ok().map(|(s, _, _)| s), devices.as_ref());
    agent.push_str(&hotplugged_section(options, &config));
    match direct {
        Ok((_, text, _)) => {
            print!("{text}{agent}");
            0
        }
        Err(e) => failed(options, &e, &agent),
    }
}

/// The networks attached to the running pod on this node after it started (`dynamicNetworks`),
/// from the records: nothing when there are none.
fn hotplugged_section(options: &Options, config: &SelectorConfig) -> String {
    let records = crate::programs::selector::attach::RecordStore::of_node(&config.data_dir).list().unwrap_or_default();
    let of_pod = records.iter().filter(|r| {
        r.hotplugged && r.pod.as_ref().is_some_and(|p| p.namespace == options.namespace && p.name == options.pod)
    });
    let mut text = String::new();
    for record in of_pod {
        let network = record.source.as_ref().and_then(|s| s.nad()).unwrap_or(&record.network);
        let state = if record.result.is_some() { "attached" } else { "being attached" };
        let _ = writeln!(
            text,
            "hot-plugged:   {} on {} of container {} ({state}, by an edit of the networks annotation)",
            network, record.ifname, record.container_id
        );
    }
    text
}

fn failed(options: &Options, e: &CniError, agent: &str) -> i32 {
    println!(
        "pod:    {}/{}\nerror:  {e}\n        (an ADD for this pod fails with CNI error code {})\n{agent}",
        options.namespace, options.pod, e.code
    );
    1
}

/// What the API server says: the selection, its text, and the pod's DRA devices if it has claims.
type Explained = (Selection, String, Option<Result<DraDevices, CniError>>);

fn explain(options: &Options, config: &SelectorConfig) -> Result<Explained, CniError> {
    let pod = (options.namespace.as_str(), options.pod.as_str());
    let (selection, api) = lookup::explain::from_api_server(config, pod)?;
    let mut text = render(options, &selection)?;
    let mut devices = None;
    if let (Some(api), Some(identity)) = (&api, &selection.pod) {
        let pod = api.pod(&options.namespace, &options.pod)?;
        if let Some(pod) = pod.filter(|pod| !dra::claim_names(pod).is_empty()) {
            let found = dra::allocated(&options.namespace, &pod, identity.uid.as_deref(), &mut dra::FromApi(api));
            text.push_str(&dra_lines(&found));
            devices = Some(found);
        }
    }
    Ok((selection, text, devices))
}

/// The DRA devices of the pod's resource claims, by resource name, or why they cannot be read.
fn dra_lines(found: &Result<DraDevices, CniError>) -> String {
    let mut out = String::new();
    match found {
        Ok(devices) => {
            let _ = writeln!(out, "DRA claims:    {}", devices.claims.join(", "));
            for (resource, ids) in &devices.device_ids {
                let _ = writeln!(out, "DRA devices:   {resource}: {}", ids.join(", "));
            }
            for why in &devices.passed_over {
                let _ = writeln!(out, "passed over:   {why}");
            }
        }
        Err(e) => {
            let _ = writeln!(
                out,
                "DRA devices:   cannot be read: {e}\n               (an ADD whose NetworkAttachmentDefinition names a resource \
                 fails with CNI error code {})",
                e.code
            );
        }
    }
    out
}

/// Whether the node agent holds the pod, what it would answer, and what ADD would do with it,
/// beside the API server's `direct` selection (if the pod has one).
fn agent_section(
    options: &Options,
    config: &SelectorConfig,
    direct: Option<&Selection>,
    devices: Option<&Result<DraDevices, CniError>>,
) -> String {
    let line = |text: String| format!("agent:         {text}\n");
    let Some(socket) = &config.agent_socket else {
        return line("none (agentSocket is empty): ADD asks the API server".into());
    };
    if config.kubeconfig.is_none() {
        return String::new();
    }
    let pod = (options.namespace.as_str(), options.pod.as_str());
    let objects = match lookup::explain::from_agent(socket, pod) {
        Err(why) => return line(format!("not reachable ({why}): ADD asks the API server")),
        Ok(Answer::Objects(objects)) => objects,
        Ok(Answer::Unknown { why }) => {
            return line(format!(
                "{} does not hold the pod ({why}): ADD waits up to {} ms for it, then asks the API server",
                socket.display(),
                lookup::ANSWER_WAIT.as_millis()
            ));
        }
        Ok(other) => return line(format!("{} answered {other:?}: ADD asks the API server", socket.display())),
    };
    let uid = objects.pod.metadata.uid.clone().unwrap_or_default();
    let held = format!(
        "{} holds the pod (uid {uid}) and the {} object(s) it refers to",
        socket.display(),
        objects.config_maps.len() + objects.network_attachments.len()
    );
    let devices = devices.map(|direct| {
        let mut answered = dra::FromAgent::new(&objects);
        let found = dra::allocated(&options.namespace, &objects.pod, Some(&uid), &mut answered);
        let text = match (&found, answered.lacking) {
            (_, Some(lacking)) => format!("its answer lacks {lacking}: ADD asks the API server for the pod's devices"),
            (Ok(found), None) if Ok(found) == direct.as_ref() => "the same DRA devices as above".to_string(),
            (Ok(found), None) => {
                let ids: Vec<String> =
                    found.device_ids.iter().map(|(r, ids)| format!("{r}: {}", ids.join(", "))).collect();
                format!("other DRA devices than the API server's (not current yet): {}", ids.join("; "))
            }
            (Err(e), None) => format!("its DRA devices cannot be read ({e}): ADD asks the API server"),
        };
        line(format!("DRA, from {}: {text}", socket.display()))
    });
    let devices = devices.unwrap_or_default();
    let selection = match from_agent_answer::resolve(config, "eth0", pod, &uid, &objects) {
        Err(why) => line(format!("{held}, but ADD cannot use its answer ({why}): ADD asks the API server")),
        Ok(selection) if Some(&selection) == direct => {
            line(format!("{held}: ADD (with K8S_POD_UID {uid}) takes its answer, the same networks as above"))
        }
        Ok(selection) => {
            let networks: Vec<String> =
                selection.attachments.iter().map(|a| format!("{} on {}", a.network, a.ifname)).collect();
            line(format!(
                "{held}, and its copy differs from the API server's (a change its watches have not delivered yet): \
                 ADD (with K8S_POD_UID {uid}) takes its answer: {}",
                networks.join(", ")
            ))
        }
    };
    selection + &devices
}

fn render(options: &Options, selection: &Selection) -> Result<String, CniError> {
    let mut out = String::new();
    let uid = selection.pod.as_ref().and_then(|p| p.uid.as_deref()).map(|u| format!(" (uid {u})")).unwrap_or_default();
    let _ = writeln!(out, "pod:           {}/{}{uid}", options.namespace, options.pod);
    for (i, line) in selection.reason.to_string().lines().enumerate() {
        let _ = writeln!(out, "{}{line}", if i == 0 { "why:           " } else { "               " });
    }
    for (i, a) in selection.attachments.iter().enumerate() {
        let list = a.conf_list()?;
        let plugins: Vec<&str> = (0..list.plugins.len()).map(|i| list.plugin_type(i)).collect();
        let version = match list.version_text.as_str() {
            "" => format!("none, read as {}", list.cni_version),
            _ => list.cni_version.to_string(),
        };
        let file = match &a.path {
            Some(path) => path.display().to_string(),
            None => "inline, in the NetworkAttachmentDefinition's spec.config".to_string(),
        };
        let _ = writeln!(out, "interface {}:{}{}, network {}", i + 1, pad(i + 1), a.ifname, a.network);
        let _ = writeln!(
            out,
            "  configuration: {file} (name {:?}, cniVersion {}, plugins: {})",
            list.name,
            version,
            plugins.join(" -> ")
        );
        let _ = writeln!(out, "  chosen by:     {}", a.source);
        let mut asks = Vec::new();
        if !a.extras.ips.is_empty() {
            asks.push(format!("ips {}", a.extras.ips.iter().map(ToString::to_string).collect::<Vec<_>>().join(" ")));
        }
        if let Some(mac) = &a.extras.mac {
            asks.push(format!("mac {mac}"));
        }
        for gw in &a.extras.default_route {
            asks.push(format!("the pod's default route via {gw}"));
        }
        if a.extras.cni_args.is_some() {
            asks.push("cni-args".to_string());
        }
        if !asks.is_empty() {
            let _ = writeln!(out, "  asks for:      {}", asks.join(", "));
        }
    }
    for note in &selection.notes {
        let _ = writeln!(out, "note:          {note}");
    }
    Ok(out)
}

/// Spaces that line the values up after `interface N:`.
fn pad(n: usize) -> &'static str {
    if n < 10 { "   " } else { "  " }
}
