//! Which way of choosing gives a pod its first network, when a pod carries several. The one rule
//! (stated in docs/selector.md and the README), applied here for ADD, the node agent's answers and
//! `explain` alike, since all three go through `resolve`:
//!
//! 1. Multus's `v1.multus-cni.io/default-network` annotation: one NetworkAttachmentDefinition in
//!    place of the first network;
//! 2. else the containers' `CNI_NETWORK_CONFIG` (the project's own way; its list's further networks
//!    come with it);
//! 3. else CNI-Genie's `cni` annotation (`weave,canal`, `weave@eth5`): `confDir` networks by name,
//!    the further ones named as Genie names them, `eth1`, `eth2`... skipping names asked for;
//! 4. else `defaultNetwork` (or Genie's `default_plugin`, named the Genie way too).
//!
//! A way of choosing that a higher one overrides is ignored, and a note says so (`explain` shows
//! it). After the first network and the further ones of the same way come the admin's
//! `defaultNetworks`, then the networks annotation's (see `resolve`).

use super::by_nad::{NadUse, nad_plan};
use super::by_value::{default_plans, value_plans};
use super::chosen::{ENV_VAR, Reason, Source};
use super::containers::containers_choice;
use super::interfaces::Planned;
use super::objects::Objects;
use super::pod::{containers, env_entry};
use crate::platform::cni::CniError;
use crate::platform::kube::ObjectRef;
use crate::programs::selector::config::SelectorConfig;
use crate::programs::selector::requests::annotation::{self, GENIE_CNI, MULTUS_DEFAULT_NETWORK};
use k8s_openapi::api::core::v1::Pod;
use std::collections::BTreeSet;

/// The first network and the further ones chosen the same way, why, and what was ignored.
pub struct First {
    pub reason: Reason,
    pub plans: Vec<Planned>,
    pub notes: Vec<String>,
}

/// The pod's first networks by the rule above.
pub fn first_networks(
    config: &SelectorConfig,
    pod_ref: ObjectRef<'_>,
    pod: &Pod,
    objects: &mut dyn Objects,
) -> Result<First, CniError> {
    let annotation = |key: &str| pod.metadata.annotations.as_ref().and_then(|a| a.get(key)).map(|v| v.trim());
    let multus = annotation(MULTUS_DEFAULT_NETWORK).filter(|v| !v.is_empty());
    let genie = annotation(GENIE_CNI);
    let (containers, _) = containers(pod);
    let setting: Vec<&str> = containers.iter().filter(|c| env_entry(c).is_some()).map(|c| c.name.as_str()).collect();
    let mut notes = Vec::new();
    let mut ignored = |what: String, by: &str| notes.push(format!("{what} is ignored: {by} decides first"));

    if let Some(value) = multus {
        let by = format!("annotation {MULTUS_DEFAULT_NETWORK}");
        for container in &setting {
            ignored(format!("container {container:?} env {ENV_VAR}"), &by);
        }
        if let Some(genie) = genie.filter(|g| !g.is_empty()) {
            ignored(format!("annotation {GENIE_CNI} {genie:?}"), &by);
        }
        let whose = format!("{pod_ref} {by}");
        let mut requests = annotation::parse_as(MULTUS_DEFAULT_NETWORK, value).map_err(|e| e.context(&whose))?;
        if requests.len() != 1 {
            return Err(CniError::invalid_config(format!(
                "{whose}: it names {} networks; it replaces the first network with one NetworkAttachmentDefinition",
                requests.len()
            )));
        }
        let plan = nad_plan(config, pod_ref.namespace, requests.remove(0), NadUse::MultusDefault, objects)
            .map_err(|e| e.context(&whose))?;
        return Ok(First {
            reason: Reason::MultusDefaultNetwork { value: value.to_string() },
            plans: vec![plan],
            notes,
        });
    }
    if let Some((choices, plans)) = containers_choice(config, pod_ref, containers, objects)? {
        if let Some(genie) = genie.filter(|g| !g.is_empty()) {
            ignored(format!("annotation {GENIE_CNI} {genie:?}"), &format!("env {ENV_VAR}"));
        }
        return Ok(First { reason: Reason::Chosen { choices }, plans, notes });
    }
    match genie {
        Some(value) if !value.is_empty() => {
            let from = format!("{pod_ref} annotation {GENIE_CNI}");
            let mut plans = value_plans(config, value, &from, |element| Source::Genie {
                element: element.text.clone(),
                form: element.name.form().to_string(),
            })?;
            genie_names(&mut plans);
            Ok(First { reason: Reason::GenieAnnotation { value: value.to_string() }, plans, notes })
        }
        _ => {
            if genie.is_some() {
                notes.push(format!(
                    "annotation {GENIE_CNI} is empty: CNI-Genie's choice by load (cAdvisor) is not done here; \
                     defaultNetwork decides"
                ));
            }
            let why = format!("{pod_ref} chooses no network (no container sets {ENV_VAR})");
            let mut plans = default_plans(config, &why)?;
            if config.genie_default {
                genie_names(&mut plans);
            }
            Ok(First { reason: Reason::PodChoseNothing, plans, notes })
        }
    }
}

/// CNI-Genie's interface names: the first network on the runtime's interface, each further one
/// that names none on the next free `eth<n>` (n from 1), skipping the names others ask for.
pub fn genie_names(plans: &mut [Planned]) {
    let asked: BTreeSet<String> = plans.iter().filter_map(|p| p.ifname.clone()).collect();
    let mut next = 1;
    for plan in plans.iter_mut().skip(1).filter(|p| p.ifname.is_none()) {
        while asked.contains(&format!("eth{next}")) {
            next += 1;
        }
        plan.ifname = Some(format!("eth{next}"));
        next += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::super::chosen::Attachment;
    use super::*;

    fn plan(ifname: Option<&str>) -> Planned {
        Planned {
            attachment: Attachment {
                ifname: String::new(),
                network: "n".into(),
                path: None,
                config: "{}".into(),
                source: Source::Genie { element: "n".into(), form: "network name".into() },
                extras: Default::default(),
                device: None,
            },
            ifname: ifname.map(String::from),
            identity: String::new(),
        }
    }

    #[test]
    fn genie_names_further_networks_eth_n_skipping_asked_names() {
        let mut plans = vec![plan(None), plan(None), plan(Some("eth1")), plan(None), plan(Some("lan0"))];
        genie_names(&mut plans);
        let names: Vec<Option<&str>> = plans.iter().map(|p| p.ifname.as_deref()).collect();
        assert_eq!(names, [None, Some("eth2"), Some("eth1"), Some("eth3"), Some("lan0")]);
    }
}
