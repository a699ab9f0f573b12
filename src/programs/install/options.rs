//! What the installer is told: its options, validated (the command line that sets them is
//! `programs::commands::install`).

use crate::platform::cni::version::CniVersion;
use crate::programs::agent::AgentSettings;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Everything the installer needs, validated. Paths named "host" are as the host sees them (they go
/// into the conflist); the installer reaches them under `host_root`. The others are local paths.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    pub host_root: PathBuf,
    pub bin_dir: PathBuf,
    pub conf_dir: PathBuf,
    pub data_dir: PathBuf,
    pub default_network: Option<String>,
    pub cni_version: CniVersion,
    pub selector_config: Option<PathBuf>,
    pub networks_dir: Option<PathBuf>,
    pub sa_dir: PathBuf,
    pub api_server: String,
    pub wait_for: Vec<PathBuf>,
    pub interval: Duration,
    pub once: bool,
    pub cleanup_on_exit: bool,
    /// `--agent`: run the node agent beside the installer's loop.
    pub agent: Option<AgentSettings>,
}

impl Options {
    /// The host directories the installer writes into (everything it writes is below one of them,
    /// the agent's socket included); the `wait_for` files are the only other host paths it
    /// touches, and only to see if they exist.
    pub fn host_dirs_written(&self) -> Vec<&Path> {
        let socket_dir = self.agent.as_ref().and_then(|a| a.socket.parent());
        let ipam_records = self.agent.as_ref().map(|a| &*a.ipam_records);
        [&*self.bin_dir, &*self.conf_dir].into_iter().chain(socket_dir).chain(ipam_records).collect()
    }

    /// `host_path` as the installer reaches it: under `host_root`.
    pub fn on_host(&self, host_path: &Path) -> PathBuf {
        self.host_root.join(host_path.strip_prefix("/").unwrap_or(host_path))
    }
}

#[cfg(test)]
impl Options {
    /// The options of `yh-genie install` without flags, in a pod whose API server is 10.96.0.1.
    pub fn standard() -> Self {
        Options {
            host_root: "/".into(),
            bin_dir: "/opt/cni/bin".into(),
            conf_dir: "/etc/cni/net.d".into(),
            data_dir: "/var/lib/cni/yh-genie".into(),
            default_network: None,
            cni_version: CniVersion::V1_0_0,
            selector_config: None,
            networks_dir: None,
            sa_dir: "/var/run/secrets/kubernetes.io/serviceaccount".into(),
            api_server: "https://10.96.0.1:443".into(),
            wait_for: vec![],
            interval: Duration::from_secs(2),
            once: false,
            cleanup_on_exit: false,
            agent: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_paths_are_reached_under_the_host_root() {
        let o = Options { host_root: "/host".into(), ..Options::standard() };
        assert_eq!(o.on_host(&o.conf_dir), Path::new("/host/etc/cni/net.d"));
        assert_eq!(o.host_dirs_written(), [Path::new("/opt/cni/bin"), Path::new("/etc/cni/net.d")]);
        let agent = AgentSettings {
            node_name: "worker-1".into(),
            socket: "/run/yh-genie/agent.sock".into(),
            metrics_address: "127.0.0.1:9745".parse().unwrap(),
            dynamic_networks: false,
            ipam_records: crate::node::paths::IPAM_RECORDS.into(),
            ipam_reclaim_after: std::time::Duration::from_secs(30),
            ipam_lease_duration: std::time::Duration::from_secs(60),
            ipam_clock_skew: std::time::Duration::from_secs(30),
        };
        let o = Options { agent: Some(agent), ..o };
        assert!(o.host_dirs_written().contains(&Path::new("/run/yh-genie")));
        assert!(o.host_dirs_written().contains(&Path::new("/var/lib/cni/yh-genie/ipam")));
    }
}
