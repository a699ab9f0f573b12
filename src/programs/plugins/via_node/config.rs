//! The configuration keys `veth` and `router` share (docs/veth-router.md), parsed strictly for ADD and CHECK and
//! leniently for DEL: a DEL must be able to clean up even after the configuration was broken.

use crate::platform::cni::CniError;
use crate::platform::logging::LogConfig;
use ipnetwork::IpNetwork;
use serde_json::{Map, Value};
use std::path::PathBuf;

/// Route table 254 (`main`), where the kernel and every plain `ip route add` put routes.
pub const MAIN_TABLE: u32 = 254;
/// The table migrated routes move into when the configuration does not say, as in the original plugins.
pub const DEFAULT_ROUTE_TABLE: u32 = 200;
/// Tables the kernel gives a meaning of its own: unspec, compat (252), default, main, local.
const RESERVED_TABLES: [u32; 5] = [0, 252, 253, 254, 255];

/// `migrate_route`: whether the chained NIC's routes move out of `main` into a table of their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MigrateRoute {
    /// `-1`: by NIC name order: the NIC that sorts first keeps `main`, the others migrate.
    Auto,
    /// `0`.
    Never,
    /// `1`.
    Always,
}

/// `rp_filter`: the reverse-path filter for the interfaces this plugin routes through.
/// Accepts `2` or, as the original plugins spelled it, `{"set_host": true, "value": 2}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RpFilter {
    pub value: u8,
    /// Whether the host-side interface gets `value` too (the pod always does).
    pub set_host: bool,
}

/// The keys both plugins take.
#[derive(Debug, Clone, PartialEq)]
pub struct HijackConfig {
    pub overlay_subnets: Vec<IpNetwork>,
    pub service_subnets: Vec<IpNetwork>,
    pub additional_subnets: Vec<IpNetwork>,
    pub migrate_route: MigrateRoute,
    pub skip_call: bool,
    pub rp_filter: RpFilter,
    /// `route_table`: where migrated routes go; the base of the per-NIC tables.
    pub route_table: u32,
    /// `data_dir`: where ADD records what it changed, for DEL and CHECK.
    pub data_dir: PathBuf,
    pub log: LogConfig,
}

impl HijackConfig {
    /// Every subnet whose traffic the pod sends through the hijack path: overlay, service, additional.
    pub fn hijacked_subnets(&self) -> impl Iterator<Item = &IpNetwork> {
        self.overlay_subnets.iter().chain(&self.service_subnets).chain(&self.additional_subnets)
    }

    /// Parse and validate for ADD and CHECK: every key is checked, and the first problem is a code-7
    /// error that names the key, the plugin and the bad value.
    pub fn parse(plugin: &str, raw: &Map<String, Value>) -> Result<Self, CniError> {
        let keys = Keys { plugin, raw };
        let overlay_subnets = keys.subnets("overlay_hijack_subnet", true)?;
        let service_subnets = keys.subnets("service_hijack_subnet", true)?;
        let additional_subnets = keys.subnets("additional_hijack_subnet", false)?;
        let migrate_route = match keys.integer("migrate_route")? {
            None | Some(-1) => MigrateRoute::Auto,
            Some(0) => MigrateRoute::Never,
            Some(1) => MigrateRoute::Always,
            Some(n) => {
                return Err(keys.invalid(
                    "migrate_route",
                    format!("{n} is not one of -1 (by NIC name order), 0 (never), 1 (always)"),
                ));
            }
        };
        let skip_call = keys.boolean("skip_call")?.unwrap_or(false);
        let rp_filter = keys.rp_filter()?;
        let route_table = match keys.integer("route_table")? {
            None => DEFAULT_ROUTE_TABLE,
            Some(n) => match u32::try_from(n) {
                Ok(t) if !RESERVED_TABLES.contains(&t) => t,
                _ => return Err(keys.invalid("route_table", format!("{n} is not a usable table: it must be 1..4294967295 and not 252, 253, 254 (main) or 255 (local)"))),
            },
        };
        let data_dir = keys.data_dir()?;
        let log =
            LogConfig::from_log_options(plugin, raw.get("log_options")).map_err(|e| keys.invalid("log_options", e))?;
        Ok(HijackConfig {
            overlay_subnets,
            service_subnets,
            additional_subnets,
            migrate_route,
            skip_call,
            rp_filter,
            route_table,
            data_dir,
            log,
        })
    }

    /// What DEL needs, which is only where the record and the log are. A broken value falls back to
    /// its default rather than failing: DEL must clean up whatever the configuration has become.
    pub fn for_del(plugin: &str, raw: &Map<String, Value>) -> (PathBuf, LogConfig) {
        let keys = Keys { plugin, raw };
        let data_dir = keys.data_dir().unwrap_or_else(|_| default_data_dir(plugin));
        let log = LogConfig::from_log_options_or_defaults(plugin, raw);
        (data_dir, log)
    }
}

/// `/var/lib/cni/<plugin>`.
pub fn default_data_dir(plugin: &str) -> PathBuf {
    PathBuf::from("/var/lib/cni").join(plugin)
}

/// Typed access to the raw configuration object, with errors that say which key is wrong.
pub struct Keys<'a> {
    pub plugin: &'a str,
    pub raw: &'a Map<String, Value>,
}

impl Keys<'_> {
    pub fn invalid(&self, key: &str, why: impl std::fmt::Display) -> CniError {
        CniError::invalid_config(format!("{} configuration: {key}: {why}", self.plugin))
    }

    fn present(&self, key: &str) -> Option<&Value> {
        self.raw.get(key).filter(|v| !v.is_null())
    }

    pub fn integer(&self, key: &str) -> Result<Option<i64>, CniError> {
        match self.present(key) {
            None => Ok(None),
            Some(v) => v.as_i64().map(Some).ok_or_else(|| self.invalid(key, format!("{v} is not an integer"))),
        }
    }

    pub fn boolean(&self, key: &str) -> Result<Option<bool>, CniError> {
        match self.present(key) {
            None => Ok(None),
            Some(v) => v.as_bool().map(Some).ok_or_else(|| self.invalid(key, format!("{v} is not true or false"))),
        }
    }

    pub fn string(&self, key: &str) -> Result<Option<&str>, CniError> {
        match self.present(key) {
            None => Ok(None),
            Some(Value::String(s)) if !s.trim().is_empty() => Ok(Some(s.trim())),
            Some(v) => Err(self.invalid(key, format!("{v} is not a non-empty string"))),
        }
    }

    fn data_dir(&self) -> Result<PathBuf, CniError> {
        match self.string("data_dir")? {
            None => Ok(default_data_dir(self.plugin)),
            Some(d) if d.starts_with('/') => Ok(PathBuf::from(d)),
            Some(d) => Err(self.invalid("data_dir", format!("{d:?} is not an absolute path"))),
        }
    }

    /// A list of CIDRs (a single string is taken as a list of one). Each must be a network address
    /// with an explicit prefix, not a default route: those are configuration mistakes that would
    /// otherwise surface as a route the kernel refuses half-way through ADD.
    fn subnets(&self, key: &str, required: bool) -> Result<Vec<IpNetwork>, CniError> {
        let items: Vec<&Value> = match self.present(key) {
            None => Vec::new(),
            Some(Value::Array(list)) => list.iter().collect(),
            Some(v @ Value::String(_)) => vec![v],
            Some(v) => return Err(self.invalid(key, format!("{v} is not a list of CIDRs"))),
        };
        if required && items.is_empty() {
            return Err(self.invalid(key, "at least one subnet is required, e.g. [\"10.244.0.0/16\"]"));
        }
        items
            .into_iter()
            .enumerate()
            .map(|(i, v)| parse_subnet(v).map_err(|why| self.invalid(&format!("{key}[{i}]"), why)))
            .collect()
    }

    fn rp_filter(&self) -> Result<RpFilter, CniError> {
        let level = |v: &Value, key: &str| match v.as_u64() {
            Some(n @ 0..=2) => Ok(n as u8),
            _ => Err(self.invalid(key, format!("{v} is not one of 0 (off), 1 (strict), 2 (loose)"))),
        };
        match self.present("rp_filter") {
            None => Ok(RpFilter { value: 2, set_host: true }),
            Some(Value::Object(m)) => {
                if let Some(unknown) = m.keys().find(|k| *k != "value" && *k != "set_host") {
                    return Err(self.invalid("rp_filter", format!("unknown key {unknown:?}; expected value, set_host")));
                }
                let value = m.get("value").filter(|v| !v.is_null()).map(|v| level(v, "rp_filter.value")).transpose()?;
                let set_host = match m.get("set_host").filter(|v| !v.is_null()) {
                    None => true,
                    Some(Value::Bool(b)) => *b,
                    Some(v) => return Err(self.invalid("rp_filter.set_host", format!("{v} is not true or false"))),
                };
                Ok(RpFilter { value: value.unwrap_or(2), set_host })
            }
            Some(v) => Ok(RpFilter { value: level(v, "rp_filter")?, set_host: true }),
        }
    }
}

fn parse_subnet(v: &Value) -> Result<IpNetwork, String> {
    let Some(s) = v.as_str().map(str::trim) else {
        return Err(format!("{v} is not a string"));
    };
    if !s.contains('/') {
        return Err(format!("{s:?} has no prefix length; write it as a CIDR, e.g. \"10.96.0.0/12\""));
    }
    let net: IpNetwork = s.parse().map_err(|e| format!("{s:?} is not a CIDR: {e}"))?;
    if net.ip() != net.network() {
        return Err(format!("{s:?} has host bits set; the subnet is {}/{}", net.network(), net.prefix()));
    }
    if net.prefix() == 0 {
        return Err(format!("{s:?} is a default route; the pod's default route stays with its own NIC"));
    }
    Ok(net)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn conf(v: Value) -> Result<HijackConfig, CniError> {
        let Value::Object(m) = v else { unreachable!() };
        HijackConfig::parse("veth", &m)
    }

    fn minimal() -> Value {
        json!({"overlay_hijack_subnet": ["10.244.0.0/16", "fd00:10:244::/56"], "service_hijack_subnet": ["10.96.0.0/12"]})
    }

    fn with(key: &str, v: Value) -> Value {
        let mut c = minimal();
        c[key] = v;
        c
    }

    #[test]
    fn defaults() {
        let c = conf(minimal()).unwrap();
        assert_eq!(c.overlay_subnets.len(), 2);
        assert!(c.additional_subnets.is_empty());
        assert_eq!(c.migrate_route, MigrateRoute::Auto);
        assert!(!c.skip_call);
        assert_eq!(c.rp_filter, RpFilter { value: 2, set_host: true });
        assert_eq!(c.route_table, 200);
        assert_eq!(c.data_dir, PathBuf::from("/var/lib/cni/veth"));
        assert_eq!(c.hijacked_subnets().count(), 3);
    }

    #[test]
    fn every_key_is_read() {
        let c = conf(json!({
            "overlay_hijack_subnet": " 10.244.0.0/16 ", "service_hijack_subnet": ["10.96.0.0/12"],
            "additional_hijack_subnet": ["169.254.20.10/32"], "migrate_route": 0, "skip_call": true,
            "rp_filter": {"set_host": false, "value": 1}, "route_table": 300, "data_dir": "/tmp/x"
        }))
        .unwrap();
        assert_eq!(c.overlay_subnets, vec!["10.244.0.0/16".parse::<IpNetwork>().unwrap()]);
        assert_eq!(c.additional_subnets[0].prefix(), 32);
        assert_eq!(c.migrate_route, MigrateRoute::Never);
        assert!(c.skip_call);
        assert_eq!(c.rp_filter, RpFilter { value: 1, set_host: false });
        assert_eq!(c.route_table, 300);
        assert_eq!(c.data_dir, PathBuf::from("/tmp/x"));
        assert_eq!(conf(with("migrate_route", json!(1))).unwrap().migrate_route, MigrateRoute::Always);
        assert_eq!(conf(with("rp_filter", json!(0))).unwrap().rp_filter, RpFilter { value: 0, set_host: true });
    }

    #[test]
    fn bad_values_are_code_7_naming_the_key() {
        let cases = [
            (json!({"service_hijack_subnet": ["10.96.0.0/12"]}), "overlay_hijack_subnet: at least one"),
            (with("service_hijack_subnet", json!([])), "service_hijack_subnet: at least one"),
            (
                with("overlay_hijack_subnet", json!(["10.244.0.1/16"])),
                "overlay_hijack_subnet[0]: \"10.244.0.1/16\" has host bits set; the subnet is 10.244.0.0/16",
            ),
            (with("additional_hijack_subnet", json!(["10.1.0.0/16", "nonsense/8"])), "additional_hijack_subnet[1]"),
            (with("additional_hijack_subnet", json!(["10.1.0.0"])), "no prefix length"),
            (with("additional_hijack_subnet", json!(["0.0.0.0/0"])), "default route"),
            (with("additional_hijack_subnet", json!([7])), "7 is not a string"),
            (with("service_hijack_subnet", json!({"a": 1})), "not a list of CIDRs"),
            (with("migrate_route", json!(2)), "migrate_route: 2 is not one of -1"),
            (with("migrate_route", json!("1")), "migrate_route: \"1\" is not an integer"),
            (with("skip_call", json!("yes")), "skip_call"),
            (with("rp_filter", json!(3)), "rp_filter: 3 is not one of 0"),
            (with("rp_filter", json!({"value": 5})), "rp_filter.value"),
            (with("rp_filter", json!({"set_hots": true})), "unknown key \"set_hots\""),
            (with("route_table", json!(254)), "route_table: 254"),
            (with("route_table", json!(-3)), "route_table: -3"),
            (with("data_dir", json!("relative/dir")), "data_dir"),
            (with("log_options", json!({"log_level": "loud"})), "log_options"),
        ];
        for (v, want) in cases {
            let e = conf(v.clone()).unwrap_err();
            assert_eq!(e.code, 7, "{v}");
            assert!(e.msg.starts_with("veth configuration: ") && e.msg.contains(want), "{v}: {}", e.msg);
        }
    }

    #[test]
    fn del_never_fails_on_a_broken_configuration() {
        let Value::Object(m) = json!({"data_dir": 5, "log_options": "x", "overlay_hijack_subnet": "junk"}) else {
            unreachable!()
        };
        let (dir, _) = HijackConfig::for_del("router", &m);
        assert_eq!(dir, PathBuf::from("/var/lib/cni/router"));
    }
}
