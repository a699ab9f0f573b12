//! Running an external plugin the way libcni does: found on the CNI path, config on stdin,
//! `CNI_*` in the environment, result or error JSON on stdout, stderr passed through. Bounded in time.

use super::attachment_lock;
use super::env::{Command, Invocation};
use super::error::{CniError, code};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How long a delegate may run before it is killed. Generous: IPAM and SR-IOV plugins can be slow.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// The most a plugin may write to stdout: far above any real result, far below a node's memory.
const MAX_OUTPUT: u64 = 16 << 20;

/// The first executable file named `plugin_type` in `dirs`.
pub fn find_plugin(plugin_type: &str, dirs: &[PathBuf]) -> Result<PathBuf, CniError> {
    if plugin_type.is_empty() || plugin_type.contains('/') || plugin_type == "." || plugin_type == ".." {
        return Err(CniError::invalid_config(format!("plugin type {plugin_type:?} is not a valid plugin name")));
    }
    for dir in dirs {
        let candidate = dir.join(plugin_type);
        if is_executable(&candidate) {
            return Ok(candidate);
        }
    }
    let searched: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    Err(CniError::invalid_config(format!("failed to find plugin {plugin_type:?} in path [{}]", searched.join(" "))))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Start a helper process of this plugin (a delegate or IPAM plugin, iptables-restore): the one
/// way helpers are spawned, so none misses the attachment's lock. It is killed when its handle is
/// dropped (at a timeout). It is *not* killed when the plugin dies (killed at the runtime's
/// timeout, say): interrupted anywhere, a helper can leave what no DEL finds (host-local killed
/// between creating a lease file and writing its owner). Instead it inherits the attachment's lock
/// (`attachment_lock`), so that the runtime's next operation on the attachment, the DEL that
/// follows the kill, waits until the helper has finished.
pub fn spawn_helper(command: &mut tokio::process::Command) -> std::io::Result<tokio::process::Child> {
    command.kill_on_drop(true);
    attachment_lock::passed_on(|| command.spawn())
}

/// Exec `binary` for `command` with `stdin`. Ok(stdout) on exit 0; the delegate's own CNI error on
/// failure; code 101 when it fails without one, is killed, or outlives `timeout`.
pub async fn exec_plugin(
    binary: &Path,
    command: Command,
    inv: &Invocation,
    stdin: &[u8],
    timeout: Duration,
) -> Result<Vec<u8>, CniError> {
    let name = binary.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut child = spawn_helper(
        tokio::process::Command::new(binary)
            .envs(inv.env_for(command))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit()),
    )
    .map_err(|e| CniError::new(code::DELEGATE_FAILED, format!("cannot run plugin {}: {e}", binary.display())))?;
    let mut child_stdin = child.stdin.take().expect("stdin is piped");
    let mut child_stdout = child.stdout.take().expect("stdout is piped");
    let run = async {
        // Write and read concurrently so a large config cannot deadlock against a full stdout pipe.
        let write = async {
            // A plugin that exits without reading stdin is not an error in itself; its exit status tells.
            let _ = child_stdin.write_all(stdin).await;
            drop(child_stdin);
        };
        // A result is a few KiB; a plugin that writes without end must not take the node's memory.
        let mut out = Vec::new();
        let mut limited = (&mut child_stdout).take(MAX_OUTPUT + 1);
        let read = limited.read_to_end(&mut out);
        let ((), read) = tokio::join!(write, read);
        read?;
        if out.len() as u64 > MAX_OUTPUT {
            return Err(std::io::Error::other(format!("wrote more than {} MiB to stdout", MAX_OUTPUT >> 20)));
        }
        let status = child.wait().await?;
        Ok::<_, std::io::Error>((status, out))
    };
    let (status, out) = match tokio::time::timeout(timeout, run).await {
        Err(_) => {
            return Err(CniError::new(
                code::DELEGATE_FAILED,
                format!("plugin {name} {} timed out after {}s and was killed", command.as_str(), timeout.as_secs()),
            ));
        }
        Ok(Err(e)) => {
            return Err(CniError::new(code::DELEGATE_FAILED, format!("plugin {name} {}: {e}", command.as_str())));
        }
        Ok(Ok(r)) => r,
    };
    if status.success() {
        return Ok(out);
    }
    if let Some(e) = CniError::from_plugin_output(&out) {
        return Err(e);
    }
    let text = String::from_utf8_lossy(&out);
    Err(CniError::new(
        code::DELEGATE_FAILED,
        format!("plugin {name} {} failed ({status}) without a CNI error", command.as_str()),
    )
    .with_details(text.trim().chars().take(512).collect::<String>()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::cni::CniArgs;
    use crate::platform::cni::testing::script;

    fn inv() -> Invocation {
        let mut inv = crate::platform::cni::testing::invocation(Command::Add, Path::new("/nonexistent"));
        inv.args = CniArgs::parse("K8S_POD_NAME=p").unwrap();
        inv
    }

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
    }

    #[test]
    fn a_killed_operations_helpers_are_waited_for_as_long_as_a_living_one_gives_them() {
        assert_eq!(attachment_lock::WAIT, DEFAULT_TIMEOUT);
    }

    #[test]
    fn a_plugin_is_called_through_env_with_stdin_returning_its_stdout() {
        let d = tempfile::tempdir().unwrap();
        let p = script(
            d.path(),
            "echoer",
            r#"printf '{"cmd":"%s","args":"%s","in":' "$CNI_COMMAND" "$CNI_ARGS"; cat; printf '}'"#,
        );
        let out = rt().block_on(exec_plugin(&p, Command::Del, &inv(), br#"{"x":1}"#, DEFAULT_TIMEOUT)).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v, serde_json::json!({"cmd":"DEL","args":"K8S_POD_NAME=p","in":{"x":1}}));
    }

    #[test]
    fn a_delegate_holds_the_attachments_lock() {
        let _serial = attachment_lock::tests::serial();
        let d = tempfile::tempdir().unwrap();
        let lock = attachment_lock::acquire(d.path(), "c1", "eth0", attachment_lock::WAIT).unwrap();
        let lock_file = attachment_lock::path(&std::path::absolute(d.path()).unwrap(), "c1", "eth0");
        let lock_file = lock_file.to_str().unwrap();
        // The delegate prints every file it has open.
        let p = script(d.path(), "lister", r#"for fd in /proc/$$/fd/*; do readlink "$fd"; done; exit 0"#);
        let open_files = |out: Vec<u8>| String::from_utf8(out).unwrap().lines().map(String::from).collect::<Vec<_>>();
        let out = rt().block_on(exec_plugin(&p, Command::Add, &inv(), b"{}", DEFAULT_TIMEOUT)).unwrap();
        assert!(open_files(out).iter().any(|f| f == lock_file), "holds the lock file open");
        drop(lock);
        let out = rt().block_on(exec_plugin(&p, Command::Add, &inv(), b"{}", DEFAULT_TIMEOUT)).unwrap();
        assert!(!open_files(out).iter().any(|f| f == lock_file), "without a lock, nothing is passed on");
    }

    #[test]
    fn delegate_error_json_is_passed_through() {
        let d = tempfile::tempdir().unwrap();
        let p =
            script(d.path(), "failer", r#"echo '{"cniVersion":"1.0.0","code":7,"msg":"bad","details":"why"}'; exit 1"#);
        let e = rt().block_on(exec_plugin(&p, Command::Add, &inv(), b"{}", DEFAULT_TIMEOUT)).unwrap_err();
        assert_eq!((e.code, e.msg.as_str(), e.details.as_str()), (7, "bad", "why"));
    }

    #[test]
    fn a_plugin_failing_without_error_json_is_code_101_with_its_output() {
        let d = tempfile::tempdir().unwrap();
        let p = script(d.path(), "crasher", "echo boom; exit 3");
        let e = rt().block_on(exec_plugin(&p, Command::Add, &inv(), b"{}", DEFAULT_TIMEOUT)).unwrap_err();
        assert_eq!(e.code, 101);
        assert!(e.details.contains("boom"));
    }

    #[test]
    fn a_plugin_that_times_out_is_code_101() {
        let d = tempfile::tempdir().unwrap();
        let p = script(d.path(), "sleeper", "exec sleep 30");
        let e = rt().block_on(exec_plugin(&p, Command::Add, &inv(), b"{}", Duration::from_millis(200))).unwrap_err();
        assert_eq!(e.code, 101);
        assert!(e.msg.contains("timed out"));
    }

    #[test]
    fn endless_output_is_cut_off_as_a_failure() {
        let d = tempfile::tempdir().unwrap();
        let p = script(d.path(), "chatty", "exec yes");
        let e = rt().block_on(exec_plugin(&p, Command::Add, &inv(), b"{}", DEFAULT_TIMEOUT)).unwrap_err();
        assert_eq!(e.code, 101);
        assert!(e.msg.contains("more than 16 MiB"), "{e}");
    }

    #[test]
    fn find_plugin_takes_the_first_executable_in_path_order() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let want = script(b.path(), "p", "true");
        std::fs::write(a.path().join("p"), "not executable").unwrap();
        assert_eq!(find_plugin("p", &[a.path().into(), b.path().into()]).unwrap(), want);
    }

    #[test]
    fn a_plugin_not_found_is_named_with_the_path_searched() {
        let a = tempfile::tempdir().unwrap();
        let e = find_plugin("nope", &[a.path().into()]).unwrap_err();
        assert!(e.msg.contains("nope") && e.msg.contains(&a.path().display().to_string()));
    }

    #[test]
    fn a_plugin_type_with_a_path_in_it_is_refused() {
        let a = tempfile::tempdir().unwrap();
        assert_eq!(find_plugin("../etc/passwd", &[a.path().into()]).unwrap_err().code, 7);
    }
}
