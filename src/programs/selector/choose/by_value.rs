//! Networks named by a value (`CNI_NETWORK_CONFIG`, `defaultNetwork`, CNI-Genie's annotation): each
//! element resolved to its file under `confDir` and loaded, in the value's order. The admin's
//! `defaultNetwork` may also name the cluster's own network in place (`confdir::resolve_in_place`).

use super::chosen::{Attachment, Source};
use super::interfaces::{self, Planned};
use crate::platform::cni::CniError;
use crate::programs::selector::config::SelectorConfig;
use crate::programs::selector::netconf::confdir;
use crate::programs::selector::requests::annotation::Extras;
use crate::programs::selector::requests::value::{self, Element};

/// What to do about a pod that needs `defaultNetwork` on a node that has none.
pub const NO_DEFAULT_FIX: &str = "give the pod a network (a container's CNI_NETWORK_CONFIG), or the node a default one \
     (\"defaultNetwork\" in selector.json of the yh-genie-config ConfigMap, or yh-genie install --default-network)";

/// `defaultNetwork`'s networks; `why` says why they are needed, for the error when there is none.
pub fn default_plans(config: &SelectorConfig, why: &str) -> Result<Vec<Planned>, CniError> {
    let value = config.default_network.as_deref().ok_or_else(|| {
        CniError::invalid_config(format!("{why} and no defaultNetwork is configured: {NO_DEFAULT_FIX}"))
    })?;
    let from = format!("defaultNetwork {value:?}");
    if let Some(file) = confdir::resolve_in_place(&config.conf_dir, value) {
        let file = file?;
        let (text, _) = confdir::load(&file).map_err(|e| e.context(&from))?;
        let source = Source::DefaultNetwork { element: value.trim().to_string() };
        return Ok(vec![planned(file, text, None, source)]);
    }
    value_plans(config, value, &from, |element| Source::DefaultNetwork { element: element.text.clone() })
}

/// The plans of a value: its elements, each resolved to its file and loaded.
pub fn value_plans(
    config: &SelectorConfig,
    value: &str,
    from: &str,
    source: impl Fn(&Element) -> Source,
) -> Result<Vec<Planned>, CniError> {
    let elements = match value::legacy_single(value) {
        // Before lists, `a,b` or `a@b` named one network directory; if it exists, it still does.
        Some(single) if confdir::resolve(&config.conf_dir, &single).is_ok() => {
            vec![Element { name: single, ifname: None, text: value.trim().to_string() }]
        }
        _ => value::parse(value)
            .map_err(|why| CniError::invalid_config(format!("{from}: cannot name a network: {why}")))?,
    };
    interfaces::check_count(elements.len(), from, elements.iter().map(|e| e.text.as_str()))?;
    elements
        .iter()
        .map(|element| {
            let file = confdir::resolve(&config.conf_dir, &element.name).map_err(|e| e.context(from))?;
            let (text, _) = confdir::load(&file).map_err(|e| e.context(from))?;
            Ok(planned(file, text, element.ifname.clone(), source(element)))
        })
        .collect()
}

/// One network's planned attachment, from its file as loaded.
fn planned(file: confdir::NetworkFile, text: String, ifname: Option<String>, source: Source) -> Planned {
    Planned {
        identity: file.path.display().to_string(),
        ifname,
        attachment: Attachment {
            ifname: String::new(),
            network: file.network,
            path: Some(file.path),
            config: text,
            source,
            extras: Extras::default(),
            device: None,
        },
    }
}
