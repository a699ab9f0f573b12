//! CNI ADD for the selector: choose the pod's networks (learning about the pod from the node agent
//! when it knows the pod, else from the API server: `lookup::for_add`), give its device networks
//! their devices, record and attach them all, give the pod the default route it asked for, record
//! the results, and report what was attached (the network-status annotation, the `AddedInterface`
//! events). The runtime gets the result of the first network, on its interface.

use super::status::readiness_indicator;
use crate::node::reports as to_agent;
use crate::platform::cni::{CniError, CniResult, Invocation, Operation, PluginConf, code};
use crate::programs::selector::attach::{self, RecordStore, Tombstones, default_route};
use crate::programs::selector::choose::{PodIdentity, Selection};
use crate::programs::selector::config::{NetworkStatus, SelectorConfig};
use crate::programs::selector::lookup;

pub fn add(inv: &Invocation, conf: &PluginConf, op: &Operation) -> Result<CniResult, CniError> {
    let config = SelectorConfig::from_plugin_conf(conf)?;
    readiness_indicator(&config, code::TRY_AGAIN_LATER)?;
    to_agent::note_stage(op, to_agent::Stage::Selecting);
    let (mut selection, looked_up) = lookup::for_add(&config, inv, op)?;
    if attach::devices::wanted(&selection.attachments) {
        let dra_devices = |namespace: &str| looked_up.dra_devices(&config, inv, op, namespace);
        attach::devices::give(inv, &config, &mut selection.attachments, dra_devices)?;
    }
    op.note_networks(selection.attachments.iter().map(|a| a.network.as_str()));
    let status_wanted = wants_status(&config, &selection);
    // Neither the pod's objects nor, for a pod that gets no status write, a client are kept while
    // its plugins run.
    let audience = looked_up.into_audience(status_wanted);
    let pod = inv.args.pod().map(|(namespace, name)| PodIdentity {
        namespace: namespace.to_string(),
        name: name.to_string(),
        uid: inv.args.pod_uid().map(String::from).or(selection.pod.as_ref().and_then(|p| p.uid.clone())),
    });
    let store = RecordStore::of_node(&config.data_dir);
    // A DEL of this attachment that completed before no longer holds once this ADD makes it.
    Tombstones::new(&config.data_dir).remove(&inv.container_id, &inv.ifname);
    to_agent::note_stage(op, to_agent::Stage::Attaching);
    let mut made = attach::add_all(inv, &config, &store, &selection.attachments, pod.clone())?;
    to_agent::note_stage(op, to_agent::Stage::Finishing);
    crate::platform::crash_point::reached("selector.add.attached");
    let requests = default_route::requested_by(&selection.attachments);
    let finished = default_route::apply(inv, &requests).and_then(|()| {
        let attached = made.networks();
        let mut results: Vec<(&str, &mut CniResult)> =
            attached.iter_mut().map(|a| (a.record.ifname.as_str(), &mut a.result)).collect();
        default_route::adjust(&mut results, &requests);
        attach::record_results(&store, attached)
    });
    if let Err(e) = finished {
        if let Err(undo) = made.undo() {
            tracing::warn!("{undo}");
        }
        return Err(e);
    }
    let attached = made.keep();
    if let Some(pod) = &pod {
        // The status goes on the pod object the API server holds: a static pod's mirror has a
        // uid of its own, not the sandbox's K8S_POD_UID.
        let object_uid = selection.pod.as_ref().and_then(|p| p.uid.clone());
        let object = PodIdentity { uid: object_uid.or(pod.uid.clone()), ..pod.clone() };
        lookup::deliver(&config, audience, op, &object, &attached, status_wanted);
    }
    let primary = attached.into_iter().next().expect("a selection has at least one attachment");
    Ok(primary.result)
}

/// Whether ADD writes the pod's network-status annotation (`networkStatus`).
fn wants_status(config: &SelectorConfig, selection: &Selection) -> bool {
    let looked_up = selection.pod.is_some();
    match config.network_status {
        NetworkStatus::Never => false,
        NetworkStatus::Always => looked_up,
        NetworkStatus::Auto => looked_up && selection.attachments.len() > 1,
    }
}
