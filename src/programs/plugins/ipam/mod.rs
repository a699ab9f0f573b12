//! IPAM delegation, as the spec describes it: the plugin named by `ipam.type` is exec'd from the CNI
//! path with the same environment and the whole network configuration on stdin. An allocation is a
//! resource ADD must give back when anything after it fails; [`Ipam::add_with_rollback`] ties the
//! two together so no caller can forget. Whether it runs in process instead is the registry's
//! (`registry::ipam`): `host-local`'s ADD and DEL do (`host_local`: the same files under the same
//! lock) when the configuration is one that module reads entirely; yh-genie's own `yh-ipam`
//! (`cluster_wide`: addresses unique across the cluster, from the node agent) always does.

pub mod cluster_wide;
pub mod host_local;

use super::registry::ipam::ipam;
use super::registry::runs::Runs;
use crate::platform::cni::exec::{DEFAULT_TIMEOUT, exec_plugin, find_plugin};
use crate::platform::cni::{CniError, CniResult, CniVersion, Command, Invocation, PluginConf, code};
use serde_json::Value;

/// The IPAM plugin of one network configuration, for one invocation.
pub struct Ipam<'a> {
    plugin_type: String,
    inv: &'a Invocation,
    stdin: Vec<u8>,
    /// The configuration's version: the shape of an answer that does not say its own.
    version: CniVersion,
    /// How it runs (`registry::ipam`).
    runs: Runs,
}

impl<'a> Ipam<'a> {
    /// The configuration's IPAM plugin, or `None` when `ipam` is absent or has no `type` (an L2-only
    /// network). A malformed `ipam` is code 7.
    pub fn from_conf(conf: &PluginConf, inv: &'a Invocation) -> Result<Option<Self>, CniError> {
        let plugin_type = match conf.raw.get("ipam") {
            None | Some(Value::Null) => return Ok(None),
            Some(Value::Object(ipam)) => match ipam.get("type") {
                None | Some(Value::Null) => return Ok(None),
                Some(Value::String(t)) if t.is_empty() => return Ok(None),
                Some(Value::String(t)) => t.clone(),
                Some(_) => return Err(CniError::invalid_config("'ipam.type' must be a string")),
            },
            Some(_) => return Err(CniError::invalid_config("'ipam' must be an object")),
        };
        let runs = ipam(&plugin_type, conf, &inv.args);
        Ok(Some(Ipam { plugin_type, inv, stdin: conf.to_bytes(), version: conf.cni_version, runs }))
    }

    pub fn plugin_type(&self) -> &str {
        &self.plugin_type
    }

    async fn exec(&self, command: Command) -> Result<Vec<u8>, CniError> {
        // Only in process: there is no binary of it to look for.
        if let Runs::ClusterWide(pool) = &self.runs {
            return pool.run(command, self.inv);
        }
        // Looked for even when it runs in process: without it on CNI_PATH the answer is the same.
        let binary = find_plugin(&self.plugin_type, &self.inv.path)?;
        if let Runs::HostLocal(host_local) = &self.runs
            && let Some(outcome) = host_local.run(command, self.inv)
        {
            return outcome.map_err(|e| e.context(format!("IPAM plugin host-local {}", command.as_str())));
        }
        exec_plugin(&binary, command, self.inv, &self.stdin, DEFAULT_TIMEOUT)
            .await
            .map_err(|e| e.context(format!("IPAM plugin {} {}", self.plugin_type, command.as_str())))
    }

    /// Allocate. The result must carry at least one address, and every gateway must be of its
    /// address's (or route's) family: code 104 otherwise, after giving the allocation back.
    pub async fn add(&self) -> Result<CniResult, CniError> {
        let out = self.exec(Command::Add).await?;
        let parsed = CniResult::from_slice(&out, self.version)
            .map_err(|e| e.context(format!("result of IPAM plugin {}", self.plugin_type)))
            .and_then(|r| {
                usable(&r)
                    .map_err(|why| CniError::new(code::IPAM, format!("IPAM plugin {} {why}", self.plugin_type)))?;
                Ok(r)
            });
        if parsed.is_err() {
            self.release_after_failure().await;
        }
        parsed
    }

    /// Allocate, then run `then` with the allocation; if `then` fails, the allocation is released
    /// before the error is returned.
    pub async fn add_with_rollback<T>(
        &self,
        then: impl AsyncFnOnce(CniResult) -> Result<T, CniError>,
    ) -> Result<T, CniError> {
        let allocation = self.add().await?;
        let outcome = then(allocation).await;
        if outcome.is_err() {
            self.release_after_failure().await;
        }
        outcome
    }

    /// Release (IPAM DEL). Idempotent in every IPAM plugin worth the name.
    pub async fn del(&self) -> Result<(), CniError> {
        self.exec(Command::Del).await.map(drop)
    }

    /// IPAM CHECK: does the plugin still hold the allocation?
    pub async fn check(&self) -> Result<(), CniError> {
        self.exec(Command::Check).await.map(drop)
    }

    /// Rollback: the original error is what the caller reports, so a failing release is only logged.
    async fn release_after_failure(&self) {
        if let Err(e) = self.del().await {
            tracing::warn!("releasing the IPAM allocation after a failed ADD failed too: {e}");
        }
    }
}

/// Whether an IPAM answer is one a plugin can configure: what it says otherwise would only fail
/// later, half-way through ADD, as a kernel error (or a gateway prefix that cannot exist).
fn usable(r: &CniResult) -> Result<(), String> {
    if r.ips.is_empty() {
        return Err("returned no IP address".into());
    }
    let gateways = r.ips.iter().map(|ip| (ip.address, ip.gateway)).chain(r.routes.iter().map(|r| (r.dst, r.gw)));
    for (net, gw) in gateways {
        if let Some(gw) = gw.filter(|gw| gw.is_ipv4() != net.is_ipv4()) {
            return Err(format!("returned gateway {gw} for {net}, of another address family"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::cni::Command;
    use crate::platform::cni::testing::{invocation, script};
    use std::path::Path;

    /// A fake IPAM plugin that logs each command to `log` and answers ADD with `add_reply`.
    fn fake_ipam(dir: &Path, add_reply: &str) -> std::path::PathBuf {
        let log = dir.join("log");
        let body = format!(
            "echo \"$CNI_COMMAND\" >> {log}\ncat > /dev/null\n[ \"$CNI_COMMAND\" = ADD ] && echo '{add_reply}'\nexit 0",
            log = log.display()
        );
        script(dir, "fake-ipam", &body);
        log
    }

    fn inv(path: &Path) -> Invocation {
        invocation(Command::Add, path)
    }

    fn conf(ipam: &str) -> PluginConf {
        PluginConf::parse(format!(r#"{{"cniVersion":"1.0.0","name":"n","type":"yh-bridge","ipam":{ipam}}}"#).as_bytes())
            .unwrap()
    }

    #[test]
    fn no_ipam_type_means_no_ipam() {
        let i = inv(Path::new("/nonexistent"));
        assert!(Ipam::from_conf(&conf("{}"), &i).unwrap().is_none());
        assert!(Ipam::from_conf(&conf(r#"{"type":""}"#), &i).unwrap().is_none());
        assert_eq!(
            Ipam::from_conf(&conf(r#"{"type":"host-local"}"#), &i).unwrap().unwrap().plugin_type(),
            "host-local"
        );
    }

    #[test]
    fn a_malformed_ipam_section_is_code_7() {
        let i = inv(Path::new("/nonexistent"));
        assert_eq!(Ipam::from_conf(&conf("[]"), &i).err().unwrap().code, 7);
        assert_eq!(Ipam::from_conf(&conf(r#"{"type":1}"#), &i).err().unwrap().code, 7);
    }

    #[test]
    fn failure_after_allocation_releases_it() {
        let d = tempfile::tempdir().unwrap();
        let log = fake_ipam(d.path(), r#"{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.2/24"}]}"#);
        let i = inv(d.path());
        let c = conf(r#"{"type":"fake-ipam"}"#);
        let ipam = Ipam::from_conf(&c, &i).unwrap().unwrap();
        let e = crate::platform::async_runtime::block_on(ipam.add_with_rollback(
            async |r: CniResult| -> Result<(), CniError> {
                assert_eq!(r.ips[0].address.to_string(), "10.0.0.2/24");
                Err(CniError::kernel("veth setup failed"))
            },
        ))
        .unwrap_err();
        assert_eq!(e.msg, "veth setup failed");
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "ADD\nDEL\n");

        std::fs::remove_file(&log).unwrap();
        let ok = crate::platform::async_runtime::block_on(ipam.add_with_rollback(async |r: CniResult| Ok(r.ips.len())))
            .unwrap();
        assert_eq!(ok, 1);
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "ADD\n");
    }

    #[test]
    fn a_legacy_answer_is_read_in_the_configurations_version() {
        let d = tempfile::tempdir().unwrap();
        // host-local's 0.2.0 answer, here without cniVersion: the config's version says its shape.
        fake_ipam(
            d.path(),
            r#"{"ip4":{"ip":"10.0.0.2/24","gateway":"10.0.0.1","routes":[{"dst":"0.0.0.0/0"}]},"dns":{}}"#,
        );
        let i = inv(d.path());
        let c =
            PluginConf::parse(br#"{"cniVersion":"0.2.0","name":"n","type":"yh-bridge","ipam":{"type":"fake-ipam"}}"#)
                .unwrap();
        let r = crate::platform::async_runtime::block_on(Ipam::from_conf(&c, &i).unwrap().unwrap().add()).unwrap();
        assert_eq!(
            (r.ips[0].address.to_string(), r.ips[0].gateway.unwrap().to_string()),
            ("10.0.0.2/24".into(), "10.0.0.1".into())
        );
        assert_eq!(r.routes[0].dst.to_string(), "0.0.0.0/0");
    }

    #[test]
    fn an_ipam_answer_without_addresses_is_released_as_code_104() {
        let d = tempfile::tempdir().unwrap();
        let log = fake_ipam(d.path(), r#"{"cniVersion":"1.0.0"}"#);
        let i = inv(d.path());
        let c = conf(r#"{"type":"fake-ipam"}"#);
        let e = crate::platform::async_runtime::block_on(Ipam::from_conf(&c, &i).unwrap().unwrap().add()).unwrap_err();
        assert_eq!(e.code, code::IPAM);
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "ADD\nDEL\n");
    }

    #[test]
    fn an_ipam_gateway_of_another_family_is_released_as_code_104() {
        for answer in [
            r#"{"cniVersion":"1.0.0","ips":[{"address":"fd00::7/64","gateway":"10.0.0.1"}]}"#,
            r#"{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.7/24"}],"routes":[{"dst":"::/0","gw":"10.0.0.1"}]}"#,
        ] {
            let d = tempfile::tempdir().unwrap();
            let log = fake_ipam(d.path(), answer);
            let i = inv(d.path());
            let c = conf(r#"{"type":"fake-ipam"}"#);
            let e =
                crate::platform::async_runtime::block_on(Ipam::from_conf(&c, &i).unwrap().unwrap().add()).unwrap_err();
            assert_eq!(e.code, code::IPAM);
            assert!(e.msg.contains("gateway 10.0.0.1") && e.msg.contains("another address family"), "{e}");
            assert_eq!(std::fs::read_to_string(&log).unwrap(), "ADD\nDEL\n");
        }
    }

    #[test]
    fn a_missing_plugin_names_itself() {
        let d = tempfile::tempdir().unwrap();
        let i = inv(d.path());
        let c = conf(r#"{"type":"nope-ipam"}"#);
        let e = crate::platform::async_runtime::block_on(Ipam::from_conf(&c, &i).unwrap().unwrap().add()).unwrap_err();
        assert!(e.msg.contains("nope-ipam"), "{e}");
    }
}
