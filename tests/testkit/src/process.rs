//! Commands as the tests run them: shell lines whose output goes into failure messages, executables
//! written without ever being held open, daemons started with their output in a log and stopped as
//! a service manager stops them, and a test's report lines.

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// A unique short name for namespaces, bridges, container ids in this test process.
pub fn unique(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!("{prefix}{}x{}", std::process::id() % 100000, N.fetch_add(1, Ordering::Relaxed))
}

/// Print a line of a test's report where the test harness does not capture it, so that it shows in
/// the test command's output whether the test passes or fails.
pub fn report(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// Run `cmd` with `sh -c`: whether it succeeded, and its stdout then stderr.
pub fn sh(cmd: &str) -> (bool, String) {
    let out = Command::new("sh").arg("-c").arg(cmd).output().expect("sh runs");
    let mut s = String::from_utf8_lossy(&out.stdout).into_owned();
    s.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.success(), s)
}

/// `sh` that must succeed.
pub fn must(cmd: &str) -> String {
    let (ok, out) = sh(cmd);
    assert!(ok, "command failed: {cmd}\n{out}");
    out
}

/// Writes an executable file (a fake plugin, an old binary) without this process ever holding it
/// open for writing: a test thread forking a plugin at that moment would hand the descriptor to its
/// child until the child execs, and an exec of the file in that window fails with ETXTBSY ("Text
/// file busy"). A short-lived `sh` writes it instead and has exited before anything runs it.
pub fn write_executable(path: &Path, contents: impl AsRef<[u8]>) {
    let mut writer = Command::new("/bin/sh")
        .args(["-c", r#"cat >"$1" && chmod 755 "$1""#, "sh"])
        .arg(path)
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    writer.stdin.take().unwrap().write_all(contents.as_ref()).unwrap();
    assert!(writer.wait().unwrap().success(), "writing {}", path.display());
}

/// How long a daemon has to stop after SIGTERM.
const STOP_PATIENCE: Duration = Duration::from_secs(30);

/// SIGTERM `child` and wait for it to exit; None (and SIGKILL) if it takes longer than 30 s.
pub fn terminate(child: &mut Child) -> Option<ExitStatus> {
    stop_within(child, STOP_PATIENCE)
}

/// SIGTERM `child` and wait for it to exit; None (and SIGKILL) if it takes longer than `grace`.
pub fn stop_within(child: &mut Child, grace: Duration) -> Option<ExitStatus> {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGTERM);
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        if started.elapsed() > grace {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Start `command` with its output appended to `log` and `dir` its working directory (so that the
/// sweep of a run dir holding `dir` finds it); SIGKILLed when the thread that starts it ends, so
/// that a daemon never outlives the test or benchmark that started it.
pub fn spawn_logged(command: &mut Command, dir: &Path, log: &Path) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap_or_else(|e| panic!("log file {}: {e}", log.display()));
    // SAFETY: between fork and exec the child only makes the prctl system call.
    unsafe {
        command.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL).map_err(std::io::Error::from)
        });
    }
    command
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("{:?} does not start: {e}", command.get_program()))
}
