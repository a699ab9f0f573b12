//! Running the firewall tools: bounded in time, holding the attachment's lock (`spawn_helper`),
//! stdin fed, failures as code-105 errors that carry the tool's own message.

use crate::platform::cni::{CniError, code};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::AsyncWriteExt;

/// Generous: `iptables-restore` can wait for the xtables lock held by kube-proxy's full resyncs.
const TIMEOUT: Duration = Duration::from_secs(30);

/// Whether `program` is an executable file in one of `$PATH`'s directories.
pub fn on_path(program: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| {
            std::fs::metadata(Path::new(&dir).join(program))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    })
}

/// Run `program args...` with `stdin`, returning its stdout.
pub async fn run(program: &str, args: &[&str], stdin: &str) -> Result<String, CniError> {
    let what = || format!("{program} {}", args.join(" "));
    let fail = |msg: String| CniError::new(code::FIREWALL, msg);
    use crate::platform::cni::exec::spawn_helper;
    let mut child = spawn_helper(
        tokio::process::Command::new(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    )
    .map_err(|e| fail(format!("cannot run {program}: {e}")))?;
    let mut input = child.stdin.take().expect("stdin is piped");
    let feed = async move {
        // A tool that exits early closes its stdin; its exit status then says what went wrong.
        let _ = input.write_all(stdin.as_bytes()).await;
    };
    let (_, out) = tokio::time::timeout(TIMEOUT, async { tokio::join!(feed, child.wait_with_output()) })
        .await
        .map_err(|_| fail(format!("{} timed out after {}s", what(), TIMEOUT.as_secs())))?;
    let out = out.map_err(|e| fail(format!("{}: {e}", what())))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(fail(format!("{} failed ({}): {}", what(), out.status, stderr.trim())));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
