//! The `yh-bridge` configuration: the reference bridge plugin's keys and defaults, validated before
//! anything is made.

use crate::platform::cni::env::validate_ifname;
use crate::platform::cni::result::Dns;
use crate::platform::cni::{CniArgs, CniError, PluginConf, code};
use crate::platform::netlink::MacAddr;
use crate::programs::plugins::firewall::{Backend, BackendKind};
use serde::Deserialize;
use serde_json::Value;

pub const DEFAULT_BRIDGE: &str = "cni0";
/// The smallest MTU IPv4 allows (RFC 791); the kernel refuses less on Ethernet devices anyway.
const MIN_MTU: u32 = 68;
/// The largest MTU of veth and bridge devices (ETH_MAX_MTU).
const MAX_MTU: u32 = 65535;
const MAX_VLAN: i64 = 4094;

/// The keys as they appear on stdin. Types are checked here, values in [`Conf::parse`].
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Raw {
    bridge: Option<String>,
    #[serde(default)]
    is_gateway: bool,
    #[serde(default)]
    is_default_gateway: bool,
    #[serde(default)]
    force_address: bool,
    #[serde(default)]
    ip_masq: bool,
    ip_masq_backend: Option<BackendKind>,
    #[serde(default)]
    mtu: i64,
    #[serde(default)]
    hairpin_mode: bool,
    #[serde(default)]
    promisc_mode: bool,
    #[serde(default)]
    vlan: i64,
    // Keys of later reference versions this plugin does not implement: refused when they ask for
    // something, rather than silently ignored.
    #[serde(default, rename = "macspoofchk")]
    mac_spoof_check: bool,
    #[serde(default, rename = "enabledad")]
    enable_dad: bool,
    #[serde(default)]
    disable_container_interface: bool,
    #[serde(default)]
    port_isolation: bool,
    #[serde(default)]
    vlan_trunk: Option<Value>,
    dns: Option<Dns>,
    #[serde(default)]
    args: Args,
    #[serde(default)]
    runtime_config: MacHolder,
}

#[derive(Deserialize, Default)]
struct Args {
    #[serde(default)]
    cni: MacHolder,
}

#[derive(Deserialize, Default)]
struct MacHolder {
    mac: Option<String>,
}

/// A validated `yh-bridge` configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Conf {
    /// The network's `name`: with the container id, it names the pod's NAT rules.
    pub network: String,
    pub bridge: String,
    /// Put the gateway address on the bridge. Forced on by `isDefaultGateway`.
    pub is_gateway: bool,
    pub is_default_gateway: bool,
    pub force_address: bool,
    /// `Some` when `ipMasq` is on: the NAT backend to use.
    pub ip_masq: Option<Backend>,
    /// `None`: the kernel's default.
    pub mtu: Option<u32>,
    pub hairpin: bool,
    pub promisc: bool,
    /// `None`: no VLAN (the reference's 0).
    pub vlan: Option<u16>,
    /// The container interface's MAC (CNI_ARGS `MAC`, `args.cni.mac`, `runtimeConfig.mac`; last wins).
    pub mac: Option<MacAddr>,
    /// `dns` from the configuration, which replaces the IPAM plugin's when set.
    pub dns: Option<Dns>,
}

impl Conf {
    pub fn parse(conf: &PluginConf, args: &CniArgs) -> Result<Self, CniError> {
        let raw: Raw = conf.typed()?;
        let bridge = raw.bridge.filter(|b| !b.is_empty()).unwrap_or_else(|| DEFAULT_BRIDGE.to_string());
        validate_ifname(&bridge).map_err(|e| CniError::invalid_config(format!("'bridge': {e}")))?;
        let mtu = match raw.mtu {
            0 => None,
            m if (i64::from(MIN_MTU)..=i64::from(MAX_MTU)).contains(&m) => Some(m as u32),
            m => {
                return Err(CniError::invalid_config(format!(
                    "invalid mtu {m}: use 0 for the kernel's default, or {MIN_MTU} to {MAX_MTU}"
                )));
            }
        };
        let vlan = match raw.vlan {
            0 => None,
            v if (1..=MAX_VLAN).contains(&v) => Some(v as u16),
            v => {
                return Err(CniError::invalid_config(format!(
                    "invalid VLAN ID {v} (must be between 0 and {MAX_VLAN})"
                )));
            }
        };
        if let Some(vid) = vlan {
            // With isGateway, the gateway lives on a `<bridge>.<vlan>` interface, which must fit IFNAMSIZ.
            validate_ifname(&format!("{bridge}.{vid}"))
                .map_err(|e| CniError::invalid_config(format!("'bridge' with 'vlan' {vid}: {e}")))?;
        }
        if raw.hairpin_mode && raw.promisc_mode {
            return Err(CniError::invalid_config("cannot set hairpin mode and promiscuous mode at the same time"));
        }
        for (key, on) in [
            ("macspoofchk", raw.mac_spoof_check),
            ("enabledad", raw.enable_dad),
            ("disableContainerInterface", raw.disable_container_interface),
            ("portIsolation", raw.port_isolation),
        ] {
            if on {
                return Err(unsupported(key, "true"));
            }
        }
        if raw.vlan_trunk.as_ref().is_some_and(|v| !v.is_null()) {
            return Err(unsupported("vlanTrunk", "a trunk"));
        }
        let mac = resolve_mac(args, raw.args.cni.mac.as_deref(), raw.runtime_config.mac.as_deref())?;
        Ok(Conf {
            network: conf.name.clone(),
            bridge,
            is_gateway: raw.is_gateway || raw.is_default_gateway,
            is_default_gateway: raw.is_default_gateway,
            force_address: raw.force_address,
            ip_masq: raw.ip_masq.then(|| Backend::select(raw.ip_masq_backend)),
            mtu,
            hairpin: raw.hairpin_mode,
            promisc: raw.promisc_mode,
            vlan,
            mac,
            dns: raw.dns.filter(|d| *d != Dns::default()),
        })
    }

    /// What DEL needs, read leniently: a configuration edited or broken since ADD must not make DEL
    /// fail forever and strand the pod's address and NAT rules. `None` when `ipMasq` is off.
    pub fn masquerade_for_del(conf: &PluginConf) -> Option<Backend> {
        let on = conf.raw.get("ipMasq").and_then(Value::as_bool).unwrap_or(false);
        let kind = conf.raw.get("ipMasqBackend").and_then(|v| serde_json::from_value(v.clone()).ok());
        on.then(|| Backend::select(kind))
    }
}

fn unsupported(key: &str, value: &str) -> CniError {
    CniError::new(code::UNSUPPORTED_FIELD, format!("yh-bridge does not support '{key}' set to {value}"))
}

/// The MAC for the container interface: CNI_ARGS `MAC`, then `args.cni.mac`, then
/// `runtimeConfig.mac`, the later winning as in the reference. It must be one an interface can take
/// (unicast, not all zeros), as the selector checks a pod author's.
fn resolve_mac(
    args: &CniArgs,
    from_args: Option<&str>,
    from_runtime: Option<&str>,
) -> Result<Option<MacAddr>, CniError> {
    let sources = [
        (args.get("MAC"), code::INVALID_ENV, "CNI_ARGS MAC"),
        (from_args, code::INVALID_CONFIG, "args.cni.mac"),
        (from_runtime, code::INVALID_CONFIG, "runtimeConfig.mac"),
    ];
    let chosen = sources.into_iter().rev().find_map(|(m, c, s)| m.filter(|m| !m.is_empty()).map(|m| (m, c, s)));
    let Some((text, err_code, source)) = chosen else {
        return Ok(None);
    };
    let mac = MacAddr::assignable(text).map_err(|why| CniError::new(err_code, format!("{source}: {why}")))?;
    Ok(Some(mac))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::programs::plugins::firewall::{Iptables, Nftables};
    use serde_json::json;

    fn parse_with(v: Value, args: &str) -> Result<Conf, CniError> {
        let mut v = v;
        v["cniVersion"] = "1.0.0".into();
        v["name"] = "mynet".into();
        v["type"] = "yh-bridge".into();
        Conf::parse(&PluginConf::from_value(v).unwrap(), &CniArgs::parse(args).unwrap())
    }
    fn parse(v: Value) -> Result<Conf, CniError> {
        parse_with(v, "")
    }

    #[test]
    fn defaults_are_the_reference_ones() {
        let c = parse(json!({})).unwrap();
        assert_eq!(
            c,
            Conf {
                network: "mynet".into(),
                bridge: "cni0".into(),
                is_gateway: false,
                is_default_gateway: false,
                force_address: false,
                ip_masq: None,
                mtu: None,
                hairpin: false,
                promisc: false,
                vlan: None,
                mac: None,
                dns: None,
            }
        );
    }

    #[test]
    fn a_default_gateway_is_a_gateway() {
        let c = parse(json!({"isDefaultGateway": true, "ipMasq": true, "ipMasqBackend": "nftables"})).unwrap();
        assert!(c.is_gateway && c.is_default_gateway);
    }

    #[test]
    fn ip_masq_uses_the_backend_named() {
        let c = parse(json!({"isDefaultGateway": true, "ipMasq": true, "ipMasqBackend": "nftables"})).unwrap();
        assert_eq!(c.ip_masq, Some(Backend::Nftables(Nftables)));
        let c = parse(json!({"ipMasq": true, "ipMasqBackend": "iptables", "mtu": 1400, "vlan": 100})).unwrap();
        assert_eq!((c.ip_masq, c.mtu, c.vlan), (Some(Backend::Iptables(Iptables)), Some(1400), Some(100)));
        assert_eq!(parse(json!({"ipMasqBackend": "ipfw"})).unwrap_err().code, 7);
    }

    #[test]
    fn a_value_out_of_range_is_code_7_saying_why() {
        for (bad, want) in [
            (json!({"mtu": -1}), "invalid mtu -1"),
            (json!({"mtu": 67}), "invalid mtu 67"),
            (json!({"mtu": 65536}), "invalid mtu 65536"),
            (json!({"vlan": 4095}), "invalid VLAN ID 4095"),
            (json!({"vlan": -2}), "invalid VLAN ID -2"),
            (json!({"bridge": "a-bridge-name-too-long"}), "longer than 15"),
            (json!({"bridge": "bridge012345", "vlan": 4000}), "'vlan' 4000"),
            (json!({"hairpinMode": true, "promiscMode": true}), "hairpin mode and promiscuous mode"),
            (json!({"mtu": "1500"}), "invalid yh-bridge configuration"),
        ] {
            let e = parse(bad.clone()).unwrap_err();
            assert_eq!(e.code, 7, "{bad}");
            assert!(e.msg.contains(want), "{bad}: {e}");
        }
    }

    #[test]
    fn unsupported_features_are_refused_not_ignored() {
        for key in ["macspoofchk", "enabledad", "disableContainerInterface", "portIsolation"] {
            let e = parse(json!({key: true})).unwrap_err();
            assert_eq!(e.code, code::UNSUPPORTED_FIELD);
            assert!(e.msg.contains(key), "{e}");
            assert!(parse(json!({key: false})).is_ok());
        }
        assert_eq!(parse(json!({"vlanTrunk": [{"id": 5}]})).unwrap_err().code, code::UNSUPPORTED_FIELD);
        assert!(parse(json!({"macspoofchk": false})).is_ok());
    }

    #[test]
    fn of_the_mac_sources_the_later_wins() {
        let c = parse_with(json!({}), "IgnoreUnknown=1;MAC=02:00:00:00:00:01").unwrap();
        assert_eq!(c.mac.unwrap().to_string(), "02:00:00:00:00:01");
        let c = parse_with(json!({"args": {"cni": {"mac": "02:00:00:00:00:02"}}}), "MAC=02:00:00:00:00:01").unwrap();
        assert_eq!(c.mac.unwrap().to_string(), "02:00:00:00:00:02");
        let c = parse_with(
            json!({"args": {"cni": {"mac": "02:00:00:00:00:02"}}, "runtimeConfig": {"mac": "02:00:00:00:00:03"}}),
            "",
        )
        .unwrap();
        assert_eq!(c.mac.unwrap().to_string(), "02:00:00:00:00:03");
    }

    #[test]
    fn a_bad_mac_error_names_its_source() {
        let e = parse_with(json!({}), "MAC=nope").unwrap_err();
        assert_eq!((e.code, e.msg.starts_with("CNI_ARGS MAC")), (4, true));
        let e = parse(json!({"runtimeConfig": {"mac": "01:00:5e:00:00:01"}})).unwrap_err();
        assert!(e.code == 7 && e.msg.contains("multicast"), "{e}");
        let e = parse(json!({"args": {"cni": {"mac": "00:00:00:00:00:00"}}})).unwrap_err();
        assert!(e.code == 7 && e.msg.starts_with("args.cni.mac") && e.msg.contains("all zeros"), "{e}");
    }

    #[test]
    fn dns_is_kept_only_when_set() {
        assert_eq!(parse(json!({"dns": {}})).unwrap().dns, None);
        let c = parse(json!({"dns": {"nameservers": ["10.96.0.10"], "search": ["svc.cluster.local"]}})).unwrap();
        assert_eq!(c.dns.unwrap().nameservers, ["10.96.0.10"]);
    }

    #[test]
    fn del_reads_masquerade_leniently() {
        let conf = |v: Value| PluginConf::from_value(v).unwrap();
        let broken = json!({"cniVersion": "1.0.0", "name": "n", "type": "yh-bridge", "mtu": "garbage", "ipMasq": true,
                            "ipMasqBackend": "nftables"});
        assert_eq!(Conf::masquerade_for_del(&conf(broken)), Some(Backend::Nftables(Nftables)));
        let off = json!({"cniVersion": "1.0.0", "name": "n", "type": "yh-bridge", "ipMasq": "yes"});
        assert_eq!(Conf::masquerade_for_del(&conf(off)), None);
    }
}
