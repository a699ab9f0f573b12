//! `yh-ipam`: addresses unique across the cluster, from a pool the network's configuration
//! defines, or an `AddressPool` object it names (docs/ipam.md). Run in process like host-local:
//! its ADD reads the pool and asks the node agent, which hands out addresses from its node's blocks
//! (`programs::agent`, over `node::agent_socket`); its DEL asks the agent to release them. An
//! address belongs to the pod's uid (`K8S_POD_UID`), the sandbox's container id and the interface.
//!
//! ```json
//! "ipam": {"type": "yh-ipam", "pool": "lan",
//!          "ranges": [[{"subnet": "10.80.0.0/16", "gateway": "10.80.0.1"}], [{"subnet": "fd80::/64"}]],
//!          "exclude": ["10.80.255.0/24"], "blockSize": 16, "routes": [{"dst": "0.0.0.0/0"}]}
//! ```
//!
//! Each range set gives one address (dual stack: one of each family). A range takes host-local's
//! keys (`subnet`, `rangeStart`, `rangeEnd`, `gateway`, with its defaults). `pool` names the
//! addresses' pool (the network's name when absent); `blockSize` is how many addresses a node
//! claims at a time (a power of two, 16 unless set); `agentSocket` is where the agent listens.
//! Those keys are read by `agent_socket::pool_definition`, which the agent reads pool objects with.
//!
//! Without `ranges` (nor `exclude` and `blockSize`, which are the pool's) the network takes its pool
//! from the cluster-scoped `AddressPool` object of the pool's name: the plugin cannot read the API
//! server, so it asks the agent to allocate from that object's pool (`AllocateFromPoolObject`) and
//! makes its result from the pool the agent answers with; the network's own `routes`, when it gives
//! them, replace the pool's.
//!
//! `runtimeConfig.ips` (the `ips` capability: addresses a pod asks for in its networks annotation)
//! asks for those addresses, one per range set at most; the agent hands them out only from the
//! pool and only when free (docs/ipam.md, "Addresses asked for").
//!
//! The built-in plugins run it in process (`registry::ipam`); any other plugin (a reference
//! `macvlan`, an SR-IOV plugin) execs it from the CNI path, where the installer links it like the
//! other built-in plugins (`YhIpam`).

use crate::node::agent_socket::addresses::{AddressOwner, Allocated};
use crate::node::agent_socket::client::exchange;
use crate::node::agent_socket::pool_definition::{self, PoolDefinition};
use crate::node::agent_socket::protocol::{Answer, Ask, Request};
use crate::platform::cni::skel::Plugin;
use crate::platform::cni::{CniError, CniResult, CniVersion, Command, Invocation, Operation, PluginConf, code};
use ipnetwork::IpNetwork;
use serde_json::{Map, Value, json};
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The `ipam.type` that names it.
pub const TYPE: &str = "yh-ipam";
/// The `ipam` keys it reads.
const KEYS: [&str; 7] = ["type", "pool", "ranges", "exclude", "blockSize", "routes", "agentSocket"];
/// An ADD waits this long for the agent: a block claimed through the API server included.
const ANSWER_WAIT: Duration = Duration::from_secs(25);

/// `yh-ipam` for one network's configuration; what it says is read when it runs, so that a wrong
/// one is that ADD's error (code 7).
#[derive(Debug)]
pub struct ClusterWide {
    network: String,
    ipam: Map<String, Value>,
    /// `runtimeConfig.ips`, as given.
    requested: Option<Value>,
    /// `runtimeConfig.ipamClaimReference`: the IPAMClaim whose address this is (the selector gives
    /// it from the pod's `ipam-claim-reference`).
    claim: Option<Value>,
}

/// The configuration, read.
#[derive(Debug)]
struct Pool {
    name: String,
    source: Source,
    socket: PathBuf,
}

/// Where the pool's addresses are defined.
#[derive(Debug)]
enum Source {
    /// In the network's `ipam` (`ranges` given).
    Inline(PoolDefinition),
    /// By the `AddressPool` of the pool's name, which the agent reads; the network's own `routes`,
    /// when it gives them, replace the pool's.
    Object { routes: Option<Vec<Value>> },
}

impl ClusterWide {
    pub fn from_conf(conf: &PluginConf) -> Self {
        let ipam = conf.raw.get("ipam").and_then(Value::as_object).cloned().unwrap_or_default();
        let runtime = conf.raw.get("runtimeConfig");
        let requested = runtime.and_then(|r| r.get("ips")).cloned();
        let claim = runtime.and_then(|r| r.get("ipamClaimReference")).cloned();
        ClusterWide { network: conf.name.clone(), ipam, requested, claim }
    }

    /// ADD's JSON result, DEL's release; CHECK and GC have nothing to ask of the agent (the
    /// calling plugin checks the addresses on the interface).
    pub fn run(&self, command: Command, inv: &Invocation) -> Result<Vec<u8>, CniError> {
        let pool = self.read()?;
        match command {
            Command::Add => self.add(&pool, inv),
            Command::Del => self.release(&pool, inv).map(|()| Vec::new()),
            _ => Ok(Vec::new()),
        }
    }

    fn add(&self, pool: &Pool, inv: &Invocation) -> Result<Vec<u8>, CniError> {
        let uid = inv.args.pod_uid().filter(|u| !u.is_empty()).ok_or_else(|| {
            CniError::invalid_config("yh-ipam needs the pod's K8S_POD_UID in CNI_ARGS: its addresses belong to the pod")
        })?;
        let owner = AddressOwner {
            uid: uid.to_string(),
            container_id: inv.container_id.trim().to_string(),
            ifname: inv.ifname.clone(),
            pod: inv.args.pod().map(|(ns, name)| format!("{ns}/{name}")).unwrap_or_default(),
        };
        let requested = self.requested()?;
        let claim = match &self.claim {
            None | Some(Value::Null) => None,
            Some(Value::String(claim)) if !claim.is_empty() => Some(claim.clone()),
            Some(other) => {
                return Err(CniError::invalid_config(format!(
                    "yh-ipam: runtimeConfig.ipamClaimReference must be an IPAMClaim's name, not {other}"
                )));
            }
        };
        let ask = match &pool.source {
            Source::Inline(defined) => {
                Ask::Allocate { pool: defined.spec.clone(), owner, requested: requested.clone(), claim: claim.clone() }
            }
            Source::Object { .. } => Ask::AllocateFromPoolObject {
                pool: pool.name.clone(),
                owner,
                requested: requested.clone(),
                claim: claim.clone(),
            },
        };
        let (addresses, defined) = match (ask_agent(&pool.socket, ask)?, &pool.source) {
            (Answer::Allocated { addresses }, Source::Inline(defined)) => (addresses, defined.clone()),
            (Answer::AllocatedFromPoolObject { addresses, pool: mut defined }, Source::Object { routes }) => {
                if let Some(routes) = routes {
                    defined.routes.clone_from(routes);
                }
                (addresses, defined)
            }
            (Answer::NoAddress { why, invalid: true, .. }, _) => return Err(CniError::invalid_config(why)),
            (Answer::NoAddress { why, retry: false, .. }, _) => return Err(CniError::new(code::IPAM, why)),
            (Answer::NoAddress { why, retry: true, .. }, _) => return Err(CniError::try_again(why)),
            (Answer::Refused { why }, Source::Object { .. }) => {
                // An agent that reads no pool object does not parse the ask, and refuses it.
                return Err(CniError::try_again(format!(
                    "the node agent refused yh-ipam's request for pool {:?}, which the network takes from the \
                     AddressPool of that name (it gives no 'ranges'): {why}; the yh-genie agent on this node must be \
                     of the plugin's release",
                    pool.name
                )));
            }
            (other, _) => return Err(unexpected(&other)),
        };
        if let Some(claim) = &claim
            && addresses.iter().any(|a| !a.fixed)
        {
            return Err(CniError::try_again(format!(
                "the node agent did not hand out IPAMClaim {claim}'s address: the yh-genie agent on this \
                 node must be of the plugin's release"
            )));
        }
        if let Some(missing) = requested.iter().find(|ip| !addresses.iter().any(|a| a.address == **ip)) {
            // An agent that does not read `requested` gives any address: never the pod's.
            return Err(CniError::try_again(format!(
                "the node agent did not hand out address {missing} asked for in 'ips': the yh-genie agent \
                 on this node must be of the plugin's release"
            )));
        }
        Ok(result(&defined, &addresses).to_string().into_bytes())
    }

    fn release(&self, pool: &Pool, inv: &Invocation) -> Result<(), CniError> {
        let ask = Ask::Release {
            pool: pool.name.clone(),
            container_id: inv.container_id.trim().to_string(),
            ifname: inv.ifname.clone(),
            uid: inv.args.pod_uid().filter(|u| !u.is_empty()).map(String::from),
        };
        match ask_agent(&pool.socket, ask)? {
            Answer::Released => Ok(()),
            other => Err(unexpected(&other)),
        }
    }

    /// The addresses of `runtimeConfig.ips`: each an address or a CIDR (whose address counts, as
    /// host-local reads it).
    fn requested(&self) -> Result<Vec<IpAddr>, CniError> {
        let bad = |why: String| CniError::invalid_config(format!("yh-ipam: runtimeConfig.ips {why}"));
        match &self.requested {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(ips)) => ips
                .iter()
                .map(|ip| {
                    let text = ip.as_str().ok_or_else(|| bad(format!("holds {ip}, not an address")))?;
                    text.parse::<IpNetwork>()
                        .map(|net| net.ip())
                        .map_err(|_| bad(format!("holds {text:?}, not an address or a CIDR")))
                })
                .collect(),
            Some(other) => Err(bad(format!("must be a list of addresses, not {other}"))),
        }
    }

    fn read(&self) -> Result<Pool, CniError> {
        let bad = |why: String| CniError::invalid_config(format!("yh-ipam: {why}"));
        if let Some(key) = self.ipam.keys().find(|k| !KEYS.contains(&k.as_str())) {
            return Err(bad(format!("unknown key 'ipam.{key}' (it reads {})", KEYS[1..].join(", "))));
        }
        let name = match self.ipam.get("pool") {
            None | Some(Value::Null) => self.network.clone(),
            Some(Value::String(p)) => p.clone(),
            Some(_) => return Err(bad("'pool' must be a string".into())),
        };
        if !pool_definition::pool_name(&name) {
            return Err(bad(format!(
                "pool {name:?} (the network's name unless 'pool' says) must be 1 to 63 lowercase letters, digits and '-', starting and ending with a letter or digit"
            )));
        }
        let socket = match self.ipam.get("agentSocket") {
            None | Some(Value::Null) => PathBuf::from(crate::node::paths::AGENT_SOCKET),
            Some(Value::String(s)) if !s.is_empty() => PathBuf::from(s),
            Some(_) => return Err(bad("'agentSocket' must be a path".into())),
        };
        let given = |key: &str| self.ipam.get(key).is_some_and(|v| !v.is_null());
        let source = if given("ranges") {
            Source::Inline(pool_definition::read(&name, &self.ipam).map_err(bad)?)
        } else if let Some(key) = pool_definition::ADDRESS_KEYS.iter().find(|k| given(k)) {
            // Without ranges the pool is an AddressPool's, whose addresses are the admin's alone.
            return Err(bad(format!(
                "'{key}' without 'ranges': a network that gives no 'ranges' takes pool {name:?} from the AddressPool \
                 of that name, which sets its 'exclude' and 'blockSize'; give 'ranges' too, or leave '{key}' to the \
                 AddressPool"
            )));
        } else {
            Source::Object { routes: pool_definition::routes(&self.ipam).map_err(bad)? }
        };
        Ok(Pool { name, source, socket })
    }
}

fn ask_agent(socket: &std::path::Path, ask: Ask) -> Result<Answer, CniError> {
    exchange(socket, &Request::new(ask), Instant::now() + ANSWER_WAIT)
        .map_err(|why| CniError::try_again(format!("yh-ipam's addresses come from the node agent: {why}")))
}

fn unexpected(answer: &Answer) -> CniError {
    match answer {
        Answer::Refused { why } => CniError::try_again(format!("the node agent refused yh-ipam's request: {why}")),
        other => CniError::try_again(format!("the node agent answered yh-ipam's request with {other:?}")),
    }
}

/// The ADD's result: each address with its range's gateway, and the configured routes.
fn result(pool: &PoolDefinition, addresses: &[Allocated]) -> Value {
    let ips: Vec<Value> = addresses
        .iter()
        .map(|a| {
            let range = pool.spec.range_sets.iter().flatten().find(|r| r.subnet.contains(a.address));
            match range {
                Some(r) => {
                    json!({"address": format!("{}/{}", a.address, r.subnet.prefix()), "gateway": r.gateway.to_string()})
                }
                None => json!({"address": IpNetwork::from(a.address).to_string()}),
            }
        })
        .collect();
    json!({"cniVersion": "1.0.0", "ips": ips, "routes": pool.routes, "dns": {}})
}

/// `yh-ipam` as a plugin of its own, for plugins that exec their IPAM: the same ADD and DEL.
pub struct YhIpam;

impl Plugin for YhIpam {
    fn name(&self) -> &'static str {
        TYPE
    }
    fn add(&self, inv: &Invocation, conf: &PluginConf, _: &Operation) -> Result<CniResult, CniError> {
        let out = ClusterWide::from_conf(conf).run(Command::Add, inv)?;
        CniResult::from_slice(&out, CniVersion::V1_0_0)
    }
    fn del(&self, inv: &Invocation, conf: &PluginConf, _: &Operation) -> Result<(), CniError> {
        ClusterWide::from_conf(conf).run(Command::Del, inv).map(drop)
    }
    fn check(&self, inv: &Invocation, conf: &PluginConf, _: &Operation) -> Result<(), CniError> {
        ClusterWide::from_conf(conf).run(Command::Check, inv).map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(ipam: Value) -> Result<Pool, CniError> {
        let mut ipam = ipam;
        ipam["type"] = TYPE.into();
        let conf = PluginConf::parse(
            json!({"cniVersion": "1.0.0", "name": "lan", "type": "yh-bridge", "ipam": ipam}).to_string().as_bytes(),
        )
        .unwrap();
        ClusterWide::from_conf(&conf).read()
    }

    fn inline(pool: &Pool) -> &PoolDefinition {
        match &pool.source {
            Source::Inline(defined) => defined,
            Source::Object { .. } => panic!("{pool:?} is an AddressPool's"),
        }
    }

    #[test]
    fn a_pool_is_read_with_host_locals_defaults() {
        let pool =
            read(json!({"ranges": [[{"subnet": "10.80.0.0/24"}], [{"subnet": "fd80::/64", "gateway": "fd80::fe"}]],
                               "exclude": ["10.80.0.128/25"], "blockSize": 32, "routes": [{"dst": "10.0.0.0/8"}]}))
            .unwrap();
        assert_eq!(pool.name, "lan", "the network's name");
        let defined = inline(&pool);
        assert_eq!(defined.spec.block_size, 32);
        let v4 = &defined.spec.range_sets[0][0];
        assert_eq!(
            (v4.start.to_string(), v4.end.to_string(), v4.gateway.to_string()),
            ("10.80.0.1".into(), "10.80.0.254".into(), "10.80.0.1".into())
        );
        let v6 = &defined.spec.range_sets[1][0];
        assert_eq!((v6.start.to_string(), v6.gateway.to_string()), ("fd80::1".into(), "fd80::fe".into()));
        assert_eq!(pool.socket, PathBuf::from("/run/yh-genie/agent.sock"));
        let addresses = [
            Allocated {
                address: "10.80.0.2".parse().unwrap(),
                block: "10.80.0.0/27".parse().unwrap(),
                fixed: false,
                shared: false,
            },
            Allocated {
                address: "fd80::2".parse().unwrap(),
                block: "fd80::/123".parse().unwrap(),
                fixed: false,
                shared: false,
            },
        ];
        assert_eq!(
            result(defined, &addresses),
            json!({"cniVersion": "1.0.0", "ips": [{"address": "10.80.0.2/24", "gateway": "10.80.0.1"}, {"address": "fd80::2/64", "gateway": "fd80::fe"}],
                   "routes": [{"dst": "10.0.0.0/8"}], "dns": {}})
        );
    }

    #[test]
    fn a_wrong_pool_is_code_7_saying_what_is_wrong() {
        for (ipam, says) in [
            (json!({"ranges": []}), "'ranges'"),
            (json!({"ranges": [[{"subnet": "10.80.0.1/24"}]]}), "host bits"),
            (json!({"ranges": [[{"subnet": "10.80.0.0/24"}]], "blockSize": 12}), "power of two"),
            (json!({"ranges": [[{"subnet": "10.80.0.0/30"}]]}), "smaller than a block"),
            (json!({"ranges": [[{"subnet": "10.80.0.0/24"}], [{"subnet": "10.80.0.0/25"}]]}), "overlap"),
            (json!({"ranges": [[{"subnet": "10.80.0.0/24"}, {"subnet": "fd80::/64"}]]}), "mixes"),
            (json!({"ranges": [[{"subnet": "10.80.0.0/24"}]], "pool": "Lan"}), "lowercase"),
            (json!({"ranges": [[{"subnet": "10.80.0.0/24", "rangeEnd": "10.81.0.9"}]]}), "outside"),
            (json!({"ranges": [[{"subnet": "10.80.0.0/24"}]], "subnet": "10.80.0.0/24"}), "unknown key 'ipam.subnet'"),
            (json!({"pool": "lan", "blockSize": 32}), "'blockSize' without 'ranges'"),
            (json!({"exclude": ["10.80.0.0/30"]}), "'exclude' without 'ranges'"),
            (json!({"pool": "lan", "routes": {"dst": "0.0.0.0/0"}}), "'routes' must be a list"),
        ] {
            let e = read(ipam.clone()).unwrap_err();
            assert_eq!(e.code, code::INVALID_CONFIG, "{ipam}");
            assert!(e.msg.contains(says), "{ipam}: {e}");
        }
    }

    #[test]
    fn a_pool_without_ranges_is_the_address_pool_of_its_name() {
        let pool = read(json!({"pool": "lan-a"})).unwrap();
        assert_eq!(pool.name, "lan-a");
        assert!(matches!(pool.source, Source::Object { routes: None }), "{pool:?}");
        let pool = read(json!({"routes": [{"dst": "10.0.0.0/8"}]})).unwrap();
        assert_eq!(pool.name, "lan", "the network's name");
        assert!(matches!(&pool.source, Source::Object { routes: Some(r) } if r.len() == 1), "{pool:?}");
    }

    #[test]
    fn the_runtimes_ips_are_read_as_addresses_or_cidrs() {
        let requested = |ips: Value| {
            let conf = json!({"cniVersion": "1.0.0", "name": "lan", "type": "macvlan", "runtimeConfig": {"ips": ips},
                              "ipam": {"type": TYPE, "ranges": [[{"subnet": "10.80.0.0/24"}]]}});
            ClusterWide::from_conf(&PluginConf::parse(conf.to_string().as_bytes()).unwrap()).requested()
        };
        let got = requested(json!(["10.80.0.7/24", "fd80::7"])).unwrap();
        assert_eq!(got, ["10.80.0.7".parse::<IpAddr>().unwrap(), "fd80::7".parse().unwrap()]);
        assert!(requested(Value::Null).unwrap().is_empty());
        for (ips, says) in [(json!(["10.80.0.300"]), "not an address or a CIDR"), (json!("10.80.0.7"), "a list")] {
            let e = requested(ips).unwrap_err();
            assert_eq!(e.code, code::INVALID_CONFIG);
            assert!(e.msg.contains(says), "{e}");
        }
    }
}
