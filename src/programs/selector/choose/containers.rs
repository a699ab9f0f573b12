//! What the pod's containers choose with `CNI_NETWORK_CONFIG`, a literal value or one from a
//! ConfigMap: the networks of the value they agree on. Containers whose values name different
//! networks are an error naming both; init containers are not consulted.

use super::by_value::value_plans;
use super::chosen::{Choice, ENV_VAR, Source, ValueSource};
use super::interfaces::Planned;
use super::objects::Objects;
use super::pod::{config_map_source, env_entry};
use crate::platform::cni::{CniError, code};
use crate::platform::kube::ObjectRef;
use crate::programs::selector::config::SelectorConfig;
use k8s_openapi::api::core::v1::Container;

/// Each choosing container's value, and the plans of the value they agree on.
pub type ContainersChoice = (Vec<Choice>, Vec<Planned>);

/// What the containers choose; `None` when no container chooses.
pub fn containers_choice(
    config: &SelectorConfig,
    pod_ref: ObjectRef<'_>,
    containers: &[Container],
    objects: &mut dyn Objects,
) -> Result<Option<ContainersChoice>, CniError> {
    // The first choosing container, its value and that value's plans.
    let mut chosen: Option<(String, String, Vec<Planned>)> = None;
    let mut choices: Vec<Choice> = Vec::new();
    for container in containers {
        let whose = format!("{pod_ref} container {:?} env {ENV_VAR}", container.name);
        let Some((source, value)) =
            container_value(container, pod_ref.namespace, objects).map_err(|e| e.context(&whose))?
        else {
            continue;
        };
        // The same value as the first container's names the same networks: not read again.
        if chosen.as_ref().is_some_and(|(_, first_value, _)| *first_value == value) {
            choices.push(Choice { container: container.name.clone(), source, value });
            continue;
        }
        let from = match &source {
            ValueSource::Literal => whose.clone(),
            ValueSource::ConfigMap { name, key } => {
                format!("{whose} (ConfigMap {}/{name} key {key:?})", pod_ref.namespace)
            }
        };
        let plans = value_plans(config, &value, &from, |element| Source::Value {
            element: element.text.clone(),
            form: element.name.form().to_string(),
        })?;
        match &chosen {
            None => chosen = Some((container.name.clone(), value.clone(), plans)),
            Some((first, _, first_plans)) if !same_networks(first_plans, &plans) => {
                return Err(CniError::invalid_config(format!(
                    "{pod_ref}: containers {first:?} and {:?} choose different networks: {first:?} chooses {}, {:?} chooses {}",
                    container.name,
                    summary(first_plans),
                    container.name,
                    summary(&plans),
                )));
            }
            Some(_) => {}
        }
        choices.push(Choice { container: container.name.clone(), source, value });
    }
    Ok(chosen.map(|(_, _, plans)| (choices, plans)))
}

/// Containers agree when they name the same files, in the same order, on the same interfaces
/// (`b@net1` in second place is `b`).
fn same_networks(a: &[Planned], b: &[Planned]) -> bool {
    let ifname =
        |i: usize, p: &Planned| if i == 0 { None } else { Some(p.ifname.clone().unwrap_or(format!("net{i}"))) };
    a.len() == b.len()
        && a.iter().zip(b).enumerate().all(|(i, (a, b))| a.identity == b.identity && ifname(i, a) == ifname(i, b))
}

/// `blue (/etc/cni/net.d/blue/10-blue.conflist), red@net1 (...)`, for messages.
fn summary(plans: &[Planned]) -> String {
    let one = |p: &Planned| {
        let at = p.ifname.as_deref().map(|i| format!("@{i}")).unwrap_or_default();
        format!("{}{at} ({})", p.attachment.network, p.identity)
    };
    plans.iter().map(one).collect::<Vec<_>>().join(", ")
}

/// The value a container's `CNI_NETWORK_CONFIG` would have, and where it comes from. `None` when
/// the container has none, or takes it from an `optional` ConfigMap or key that is absent (as
/// Kubernetes leaves such a variable unset).
fn container_value(
    container: &Container,
    namespace: &str,
    objects: &mut dyn Objects,
) -> Result<Option<(ValueSource, String)>, CniError> {
    let Some(entry) = env_entry(container) else {
        return Ok(None);
    };
    if entry.value_from.is_none() {
        return Ok(Some((ValueSource::Literal, entry.value.clone().unwrap_or_default())));
    }
    let Some(selector) = config_map_source(entry) else {
        return Err(CniError::invalid_config(
            "only a literal value or valueFrom.configMapKeyRef can name a network".to_string(),
        ));
    };
    let optional = selector.optional.unwrap_or(false);
    let cm_ref = ObjectRef::config_map(namespace, &selector.name);
    let Some(cm) = objects.config_map(namespace, &selector.name)? else {
        return if optional { Ok(None) } else { Err(CniError::new(code::KUBE_API, format!("{cm_ref} not found"))) };
    };
    match cm.data.as_ref().and_then(|d| d.get(&selector.key)) {
        Some(value) => {
            Ok(Some((ValueSource::ConfigMap { name: selector.name.clone(), key: selector.key.clone() }, value.clone())))
        }
        None if optional => Ok(None),
        None => Err(CniError::new(code::KUBE_API, format!("{cm_ref} has no key {:?} in its data", selector.key))),
    }
}
