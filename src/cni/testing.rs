//! What unit tests of plugins share: an invocation as the runtime would make it, and scripted
//! fake plugins on a CNI path.

use super::{CniArgs, Command, Invocation};
use std::os::unix::fs::PermissionsExt;
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
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}
