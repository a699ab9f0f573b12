//! A temp dir laid out as a node's CNI directories: a bin dir holding yh-genie under its own name
//! and every built-in plugin's (as the installer lays them out) beside Debian's reference plugins,
//! and room for conf and data dirs. Everything lives under it, so parallel tests never share state.

use crate::netns::Netns;
use crate::{REFERENCE_PLUGINS, yh_genie_binary};
use std::path::{Path, PathBuf};
use std::process::Command;

/// What a sandbox needs to know of yh-genie: the names it is installed under (the selector's and
/// every built-in plugin's) and the variable that moves its attachment locks (a host path by
/// default) into the sandbox. The suites give the product's own constants: this crate does not
/// link the product, so that its unit tests never wait for this crate to be rebuilt.
pub struct Plugins {
    pub selector: &'static str,
    pub plugins: &'static [&'static str],
    pub lock_dir_var: &'static str,
}

pub struct Sandbox {
    pub dir: tempfile::TempDir,
    /// The netns that plays the node: plugins and cnidrive run inside it (`ip netns exec`), so
    /// bridges, host veths, routes and NAT rules are made there, never on the machine's own interfaces.
    pub node: Option<String>,
    lock_dir_var: &'static str,
}

impl Sandbox {
    pub fn new(plugins: &Plugins) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let bin = dir.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let exe = yh_genie_binary();
        // Laid out as the installer lays them out: the binary under its own name and every plugin's.
        for name in std::iter::once(plugins.selector).chain(plugins.plugins.iter().copied()) {
            std::os::unix::fs::symlink(&exe, bin.join(name)).unwrap();
        }
        if let Ok(entries) = std::fs::read_dir(REFERENCE_PLUGINS) {
            for e in entries.flatten() {
                let _ = std::os::unix::fs::symlink(e.path(), bin.join(e.file_name()));
            }
        }
        Sandbox { dir, node: None, lock_dir_var: plugins.lock_dir_var }
    }

    /// A sandbox whose plugins run inside the `node` netns.
    pub fn on_node(node: &Netns, plugins: &Plugins) -> Self {
        Sandbox { node: Some(node.name.clone()), ..Self::new(plugins) }
    }

    /// A command that runs `program` in the node netns if there is one, taking attachment locks in
    /// `locks()`.
    pub fn command(&self, program: &Path) -> Command {
        let mut c = match &self.node {
            Some(node) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", node]).arg(program);
                c
            }
            None => Command::new(program),
        };
        c.env(self.lock_dir_var, self.locks());
        c
    }

    /// The attachment lock files' directory of plugins run by `command`.
    pub fn locks(&self) -> PathBuf {
        self.path().join("locks")
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn bin(&self) -> PathBuf {
        self.path().join("bin")
    }

    /// Write a file under the sandbox, creating directories; returns its path.
    pub fn write(&self, rel: &str, contents: &str) -> PathBuf {
        let p = self.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, contents).unwrap();
        p
    }
}
