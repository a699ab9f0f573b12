//! What unit tests of plugins share: an invocation as the runtime would make it, and scripted
//! fake plugins on a CNI path.

use super::{CniArgs, Command, Invocation};
use std::path::{Path, PathBuf};

/// A call for container `c1`, interface `eth0`, netns `/run/netns/pod`, with plugins found in `path`.
pub fn invocation(command: Command, path: &Path) -> Invocation {
    Invocation {
        command,
        container_id: "c1".into(),
        netns: Some(PathBuf::from("/run/netns/pod")),
        ifname: "eth0".into(),
        args: CniArgs::default(),
        path: vec![path.to_path_buf()],
    }
}

/// An executable `/bin/sh` script `dir/name` running `body`.
pub fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let p = dir.join(name);
    write_executable(&p, format!("#!/bin/sh\n{body}\n"));
    p
}

/// Writes an executable file without this process holding it open for writing (the testkit says
/// why: "Text file busy").
pub use testkit::process::write_executable;
