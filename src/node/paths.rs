//! Where yh-genie keeps what lives on a node, and the one environment variable that moves it. Every
//! program that reads or writes one of these places asks here, so that the selector, the agent, the
//! attach worker, the plugins and the installer always agree on them.
//!
//! The node's volatile state is under `/run/yh-genie`: tmpfs on a node, emptied by a reboot as the
//! pods' sandboxes are, so what needs no fsync lives there.
//!
//! | what | where |
//! |---|---|
//! | the CNI configuration files; the selector's, written by the installer | `/etc/cni/net.d/`; `00-yh-genie.conflist` in it |
//! | the CNI plugins' binaries | `/opt/cni/bin/` |
//! | the selector's attachment records, tombstones, its networks' IPAM and plugin state | `/var/lib/cni/yh-genie/` (its `dataDir`) |
//! | the node agent's records of the `yh-ipam` addresses it handed out | `/var/lib/cni/yh-genie/ipam/` |
//! | Multus's delegate cache, read for pods Multus attached | `/var/lib/cni/multus/` |
//! | the attachment locks (`platform::cni::attachment_lock`) | `/run/yh-genie/attachments/` |
//! | the selector's results of completed ADDs | `/run/yh-genie/results<dataDir>/` |
//! | yonghui's saved delegate configurations | `/run/yh-genie/yonghui/` (0.1.0: `/var/lib/cni/yonghui`) |
//! | the node agent's socket | `/run/yh-genie/agent.sock` |
//! | the plugins' operation reports to the agent | beside it: `agent.sock.reports` |
//! | the attach worker's socket | beside it: `dynamic-networks.sock` |
//!
//! `YH_GENIE_LOCK_DIR` moves the lock directory and, with it, the volatile state the selector keeps
//! (its parent): the tests give each sandbox its own. The sockets follow the `agentSocket` the
//! admin configures; yonghui's directory follows its `dataDir`.

use std::path::{Path, PathBuf};

/// The CNI configuration directory, where runtimes read the node's network configuration.
pub const CONF_DIR: &str = "/etc/cni/net.d";
/// The selector's configuration, as the installer writes it (`explain` and the attach worker read it).
pub const CONFLIST: &str = "/etc/cni/net.d/00-yh-genie.conflist";
/// The CNI plugins' directory.
pub const BIN_DIR: &str = "/opt/cni/bin";
/// The selector's durable state (its `dataDir`).
pub const DATA_DIR: &str = "/var/lib/cni/yh-genie";
/// Where the node agent records the `yh-ipam` addresses it handed out (durable: its blocks in the
/// API server outlive a reboot, and so must what the node's pods hold of them).
pub const IPAM_RECORDS: &str = "/var/lib/cni/yh-genie/ipam";
/// Where Multus (thin and thick alike) keeps its delegate cache.
pub const MULTUS_DIR: &str = "/var/lib/cni/multus";
/// The node's volatile state, unless `LOCK_DIR_VAR` moves it.
pub const VOLATILE_DIR: &str = "/run/yh-genie";
/// Environment variable naming another attachment lock directory; the volatile state the selector
/// keeps moves with it (to its parent).
pub const LOCK_DIR_VAR: &str = "YH_GENIE_LOCK_DIR";
/// Where the plugin looks for the node agent, and the agent listens, unless configured otherwise.
pub const AGENT_SOCKET: &str = "/run/yh-genie/agent.sock";
/// Where the attach worker listens unless configured otherwise: beside the agent's socket, in the
/// plugins' own run directory (root's, 0700).
pub const WORKER_SOCKET: &str = "/run/yh-genie/dynamic-networks.sock";
/// Where yonghui saves its delegate configurations unless its `dataDir` says otherwise.
pub const YONGHUI_DATA_DIR: &str = "/run/yh-genie/yonghui";
/// Where yonghui 0.1.0 saved them: still read by DEL and CHECK without a `dataDir`.
pub const YONGHUI_EARLIER_DATA_DIR: &str = "/var/lib/cni/yonghui";

/// The places of this node that move with `LOCK_DIR_VAR`, as this process finds them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodePaths {
    attachment_locks: PathBuf,
}

impl NodePaths {
    /// As this process's environment says.
    pub fn from_env() -> Self {
        Self::with_lock_dir(std::env::var_os(LOCK_DIR_VAR).map(PathBuf::from))
    }

    /// Given `LOCK_DIR_VAR`'s value, if it is set.
    pub fn with_lock_dir(lock_dir: Option<PathBuf>) -> Self {
        let attachment_locks = lock_dir.unwrap_or_else(|| Path::new(VOLATILE_DIR).join("attachments"));
        NodePaths { attachment_locks }
    }

    /// The attachment locks: one file per attachment (`<containerID>:<ifname>`).
    pub fn attachment_locks(&self) -> &Path {
        &self.attachment_locks
    }

    /// The volatile state the selector keeps: the lock directory's parent, `/run/yh-genie` unless
    /// `LOCK_DIR_VAR` moved it.
    pub fn volatile(&self) -> &Path {
        self.attachment_locks.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(&self.attachment_locks)
    }

    /// The results of completed ADDs of the selector whose `dataDir` is `data_dir`: one directory
    /// per data dir, so that one selector's GC never sweeps another's.
    pub fn results(&self, data_dir: &Path) -> PathBuf {
        let data_dir_below_root = data_dir.strip_prefix("/").unwrap_or(data_dir);
        self.volatile().join("results").join(data_dir_below_root)
    }
}

/// The socket the plugins send their operation reports to: beside the agent's socket.
pub fn reports_socket(agent_socket: &Path) -> PathBuf {
    let mut name = agent_socket.file_name().unwrap_or_default().to_os_string();
    name.push(".reports");
    agent_socket.with_file_name(name)
}

/// The directory beside the agent's socket where it keeps the network-status annotations it took
/// and has not written yet (`/run/yh-genie/agent.sock` -> `/run/yh-genie/agent.sock.statuses`).
pub fn kept_statuses(agent_socket: &Path) -> PathBuf {
    let mut name = agent_socket.file_name().unwrap_or_default().to_os_string();
    name.push(".statuses");
    agent_socket.with_file_name(name)
}

/// The attach worker's socket beside an agent socket (`/run/yh-genie/agent.sock` ->
/// `/run/yh-genie/dynamic-networks.sock`), wherever the caller sees that directory.
pub fn worker_socket(agent_socket: &Path) -> PathBuf {
    agent_socket.with_file_name(Path::new(WORKER_SOCKET).file_name().expect("a file name"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lock_directory_moves_the_selectors_volatile_state_with_it() {
        let node = NodePaths::with_lock_dir(None);
        assert_eq!(node.attachment_locks(), Path::new("/run/yh-genie/attachments"));
        assert_eq!(node.volatile(), Path::new(VOLATILE_DIR));
        assert_eq!(
            node.results(Path::new("/var/lib/cni/yh-genie")),
            Path::new("/run/yh-genie/results/var/lib/cni/yh-genie")
        );
        let moved = NodePaths::with_lock_dir(Some("/tmp/sb/run/locks".into()));
        assert_eq!(moved.volatile(), Path::new("/tmp/sb/run"));
        assert_eq!(moved.results(Path::new("/tmp/sb/data")), Path::new("/tmp/sb/run/results/tmp/sb/data"));
        assert_eq!(NodePaths::with_lock_dir(Some("locks".into())).volatile(), Path::new("locks"));
    }

    #[test]
    fn the_sockets_stand_beside_the_agents() {
        let agent = Path::new("/run/x/agent.sock");
        assert_eq!(reports_socket(agent), Path::new("/run/x/agent.sock.reports"));
        assert_eq!(worker_socket(agent), Path::new("/run/x/dynamic-networks.sock"));
        assert_eq!(worker_socket(Path::new(AGENT_SOCKET)), Path::new(WORKER_SOCKET));
    }
}
