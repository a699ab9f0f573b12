//! A throwaway network namespace (`ip netns add`), and commands run inside it.

use crate::process::{must, sh, unique};
use std::path::PathBuf;

/// A named network namespace, deleted on drop, even when the test panics.
pub struct Netns {
    pub name: String,
}

impl Netns {
    pub fn new(prefix: &str) -> Self {
        let name = unique(prefix);
        must(&format!("ip netns add {name}"));
        must(&format!("ip netns exec {name} ip link set lo up"));
        Netns { name }
    }

    pub fn path(&self) -> PathBuf {
        PathBuf::from("/run/netns").join(&self.name)
    }

    /// Run a shell command inside the namespace.
    pub fn exec(&self, cmd: &str) -> (bool, String) {
        sh(&format!("ip netns exec {} sh -c '{}'", self.name, cmd.replace('\'', r"'\''")))
    }

    pub fn must(&self, cmd: &str) -> String {
        let (ok, out) = self.exec(cmd);
        assert!(ok, "in netns {}: {cmd}\n{out}", self.name);
        out
    }

    /// Delete it now, as a runtime does when it tears a sandbox down (then dropping does nothing).
    pub fn delete(&self) {
        must(&format!("ip netns delete {}", self.name));
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = sh(&format!("ip netns delete {}", self.name));
    }
}
