//! The namespaces a node of the CRI suite or of the real cluster runs in: its netns, and a mount
//! namespace of its own (a slave of the machine's, so that mounts propagate in from the machine and
//! never out) held open by a `holder` process, so that a restarted daemon finds the mounts of the
//! first one (pod netns bind mounts, sandboxes' rootfs), as it does on a real node. The holder's
//! script sets the namespace up, says `ready`, and sleeps with its working directory in the run
//! dir, so that it is part of the run. The test process sees none of those mounts: it reads the
//! node's files through `/proc/<holder>/root`.

use crate::netns::Netns;
use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

pub struct NodeNamespaces {
    holder: Child,
}

impl NodeNamespaces {
    /// A holder in `netns` and a new mount namespace running `script` (`sh -c`, as `name`, with
    /// `args`), which sets the namespace up, prints `ready` and then holds it by sleeping. Panics
    /// with the script's stderr if it fails.
    pub fn hold(netns: &Netns, script: &str, name: &str, args: &[&OsStr]) -> Self {
        let mut holder = Command::new("unshare")
            .args(["--mount", "--propagation", "slave", "--", "nsenter"])
            .arg(format!("--net={}", netns.path().display()))
            .args(["--", "sh", "-c", script, name])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("unshare runs");
        let mut line = String::new();
        BufReader::new(holder.stdout.take().unwrap()).read_line(&mut line).unwrap();
        if line.trim() != "ready" {
            let _ = holder.kill();
            let out = holder.wait_with_output().unwrap();
            panic!("setting up the node's mount namespace failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        NodeNamespaces { holder }
    }

    pub fn holder_pid(&self) -> u32 {
        self.holder.id()
    }

    /// `program` to be run inside the node: its netns and mount namespace.
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut c = Command::new("nsenter");
        c.args(["--target", &self.holder.id().to_string(), "--mount", "--net", "--"]).arg(program);
        c
    }

    /// A path of the node's mount namespace, as the test process reaches it.
    pub fn path(&self, path: &str) -> PathBuf {
        PathBuf::from(format!("/proc/{}/root", self.holder.id())).join(path.trim_start_matches('/'))
    }

    /// Mount points in the node's mount namespace.
    pub fn mounts(&self) -> Vec<String> {
        let info = std::fs::read_to_string(format!("/proc/{}/mountinfo", self.holder.id())).unwrap();
        info.lines().filter_map(|l| l.split(' ').nth(4)).map(String::from).collect()
    }
}

impl Drop for NodeNamespaces {
    fn drop(&mut self) {
        let _ = self.holder.kill();
        let _ = self.holder.wait();
    }
}
