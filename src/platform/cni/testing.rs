//! What unit tests of plugins share: an invocation as the runtime would make it, and scripted
//! fake plugins on a CNI path.

use super::{CniArgs, Command, Invocation};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;

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

/// Writes an executable file without this process ever holding it open for writing. Tests run on
/// parallel threads: a thread that forks a plugin while another has a script open for writing
/// hands that descriptor to its child until the child execs, and an exec of the script in that
/// window fails with ETXTBSY ("Text file busy"). A short-lived `sh` writes the file instead and has
/// exited before anything runs it.
pub fn write_executable(path: &Path, contents: impl AsRef<[u8]>) {
    let mut writer = std::process::Command::new("/bin/sh")
        .args(["-c", r#"cat >"$1" && chmod 755 "$1""#, "sh"])
        .arg(path)
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    writer.stdin.take().unwrap().write_all(contents.as_ref()).unwrap();
    assert!(writer.wait().unwrap().success(), "writing {}", path.display());
}
