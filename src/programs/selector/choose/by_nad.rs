//! The plan of a network that comes through a NetworkAttachmentDefinition: an element of the pod's
//! networks annotation, Multus's default-network annotation, or the admin's `defaultNetworks`.
//! Each is checked against the policy (the namespace rule for what the pod wrote outside the
//! admin's `multusNamespace`, the inline rule for all), then resolves to its inline configuration
//! (named after the NAD when it names no network, as Multus reads it) or to the `confDir` network
//! of its name.

use super::chosen::{Attachment, DeviceUse, Source};
use super::interfaces::Planned;
use super::objects::Objects;
use crate::platform::cni::{CniError, code};
use crate::platform::kube::ObjectRef;
use crate::programs::selector::config::SelectorConfig;
use crate::programs::selector::config::defaults::PodDefaults;
use crate::programs::selector::config::policy::AttachmentPolicy;
use crate::programs::selector::netconf::capabilities;
use crate::programs::selector::netconf::confdir::{self, NetworkName};
use crate::programs::selector::netconf::inline;
use crate::programs::selector::requests::annotation::Request;

/// What a refusal of `ips` adds: the admin's key that lets pods choose addresses on such networks.
pub const ANNOTATION_IPS_HINT: &str =
    " (the cluster admin may let pods choose addresses there with \"annotationIps\" in selector.json)";

/// Which way of naming a NetworkAttachmentDefinition an element came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NadUse {
    /// The pod's `k8s.v1.cni.cncf.io/networks` annotation.
    Networks,
    /// The pod's `v1.multus-cni.io/default-network` annotation.
    MultusDefault,
    /// The admin's `defaultNetworks`: not subject to `namespaceIsolation` (the admin chose it).
    DefaultNetworks,
}

impl NadUse {
    /// The namespace of the NetworkAttachmentDefinition `request` names, for a pod of
    /// `pod_namespace`, once the policy lets the pod use it. A name without a namespace is the
    /// pod's own in the networks annotation, and `multusNamespace` in the default-network
    /// annotation (Multus looks for the default network's NAD there, and so do the pods written for
    /// it) and in `defaultNetworks` (filled in when the configuration is read). The admin's
    /// namespace needs no namespace rule, nor do the admin's `defaultNetworks`; anything else a pod
    /// names is held to `namespaceIsolation`.
    pub fn namespace(
        self,
        request: &Request,
        pod_namespace: &str,
        policy: &AttachmentPolicy,
        defaults: &PodDefaults,
    ) -> Result<String, CniError> {
        let home = match self {
            NadUse::Networks => pod_namespace,
            NadUse::MultusDefault | NadUse::DefaultNetworks => &defaults.multus_namespace,
        };
        let namespace = request.namespace.clone().unwrap_or_else(|| home.to_string());
        let admins = self == NadUse::DefaultNetworks || (self == NadUse::MultusDefault && namespace == *home);
        if !admins {
            policy.check_namespace(pod_namespace, &namespace, &request.name)?;
        }
        Ok(namespace)
    }

    fn source(self, element: String, nad: String, inline: bool) -> Source {
        match self {
            NadUse::Networks => Source::Annotation { element, nad, inline },
            NadUse::MultusDefault => Source::MultusDefault { element, nad, inline },
            NadUse::DefaultNetworks => Source::DefaultNetworks { element, nad, inline },
        }
    }
}

/// The plan of one element: its NetworkAttachmentDefinition, checked against the policy, to its
/// inline configuration or to the `confDir` network of its name.
pub fn nad_plan(
    config: &SelectorConfig,
    pod_namespace: &str,
    request: Request,
    used: NadUse,
    objects: &mut dyn Objects,
) -> Result<Planned, CniError> {
    let namespace = used.namespace(&request, pod_namespace, &config.policy, &config.defaults)?;
    let nad_ref = ObjectRef::network_attachment(&namespace, &request.name);
    let nad = objects
        .network_attachment(&namespace, &request.name)?
        .ok_or_else(|| CniError::new(code::KUBE_API, format!("{nad_ref} not found")))?;
    let nad_name = format!("{namespace}/{}", request.name);
    let source = |inline| used.source(request.text.clone(), nad_name.clone(), inline);
    let device = nad.resource_name().map(|resource| DeviceUse { resource: resource.to_string(), given: None });
    let (attachment, identity, list) = match nad.inline_config() {
        Some(written) => {
            let text = inline::named_after_nad(written, &request.name);
            let list = config.policy.check_inline(&nad_name, &text)?;
            let attachment = Attachment {
                ifname: String::new(),
                network: nad_name.clone(),
                path: None,
                config: text,
                source: source(true),
                extras: request.extras.clone(),
                device: device.clone(),
            };
            (attachment, format!("{nad_ref}"), list)
        }
        None => {
            let file = confdir::resolve(&config.conf_dir, &NetworkName::Bare(request.name.clone())).map_err(|e| {
                e.context(format!("{nad_ref} has no spec.config, so it names the confDir network of its name"))
            })?;
            let (text, list) = confdir::load(&file)?;
            let identity = file.path.display().to_string();
            let attachment = Attachment {
                ifname: String::new(),
                network: file.network,
                path: Some(file.path),
                config: text,
                source: source(false),
                extras: request.extras.clone(),
                device: device.clone(),
            };
            (attachment, identity, list)
        }
    };
    // Where the policy lets a pod choose its addresses as Multus does, its ips reach the plugins
    // as CNI_ARGS whatever they declare.
    let ips_as_multus = config.policy.annotation_ips.as_multus(attachment.source.inline());
    let asked = [
        ("ips", !request.extras.ips.is_empty() && !ips_as_multus),
        ("portMappings", !request.extras.port_mappings.is_empty()),
        ("bandwidth", request.extras.bandwidth.is_some()),
    ];
    if let Some((key, _)) = asked.iter().find(|(key, asked)| *asked && !capabilities::declared_in(&list, key)) {
        let widen = if *key == "ips" { ANNOTATION_IPS_HINT } else { "" };
        return Err(CniError::invalid_config(format!(
            "it asks for {key}, but no plugin of network {} declares the \"{key}\" capability \
             (\"capabilities\": {{\"{key}\": true}}), so none would see them{widen}",
            attachment.network
        )));
    }
    if let Some(claim) = &request.extras.ipam_claim
        && !capabilities::uses_yh_ipam(&list)
    {
        return Err(CniError::new(
            crate::platform::cni::code::UNSUPPORTED_FIELD,
            format!(
                "it asks for ipam-claim-reference {claim:?}, but no plugin of network {} has yh-ipam as its IPAM, \
                 the one that keeps an IPAMClaim's address",
                attachment.network
            ),
        ));
    }
    if let Some(cni_args) = &request.extras.cni_args {
        crate::programs::selector::requests::cni_args::check(cni_args, &list, &attachment.network, ips_as_multus)?;
    }
    Ok(Planned { attachment, ifname: request.ifname, identity })
}
