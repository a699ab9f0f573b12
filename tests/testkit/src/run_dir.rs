//! A run directory (`/tmp/yh-genie-<kind>.<test pid>.<random>`) and everything started for it: the
//! CRI suite's containerd node and the real cluster each run in one. Every process started for a
//! run has the run dir in its command line or as its working directory (`spawn` does both), every
//! container lives in a cgroup under `/<run dir name>/`, and every netns made for it is listed in
//! `<dir>/netns` (`netns`), so that ending the run (`end`, and dropping it) finds all of them. A
//! test process killed outright cannot end its runs: each new run first sweeps the runs whose test
//! process is gone (their processes, cgroups, netns and directory), and leaves alone those of live
//! test processes (another suite's, in parallel).

use crate::netns::Netns;
use crate::process::{report, sh};
use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const PREFIX: &str = "yh-genie-";
/// The file naming the test process a run belongs to: its pid and start time (so that another
/// process given the same pid later is not taken for it).
const OWNER: &str = "owner";
/// How long the processes of a run have to go once killed.
const PATIENCE: Duration = Duration::from_secs(30);

pub struct RunDir {
    dir: tempfile::TempDir,
}

impl RunDir {
    /// A new run directory `yh-genie-<kind>.<pid>.<random>` in the temp dir, after sweeping the
    /// runs of test processes that are gone.
    pub fn new(kind: &str) -> Self {
        sweep_dead_runs();
        let prefix = format!("{PREFIX}{kind}.{}.", std::process::id());
        let dir = tempfile::Builder::new().prefix(&prefix).tempdir().expect("run dir");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::create_dir_all(dir.path().join("log")).unwrap();
        let me = std::process::id();
        // Written whole under another name, then renamed: another test thread's sweep that read the
        // owner file while it was still empty would take this live run for a dead one and remove it.
        let owner = format!("{me} {}", start_time(me).expect("this process's start time"));
        let unfinished = dir.path().join(format!("{OWNER}.new"));
        std::fs::write(&unfinished, owner).unwrap();
        std::fs::rename(&unfinished, dir.path().join(OWNER)).unwrap();
        RunDir { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The directory's name, also the cgroup every container of the run lives under.
    pub fn name(&self) -> String {
        self.path().file_name().unwrap().to_string_lossy().into_owned()
    }

    /// A network namespace of the run, recorded so that a sweep deletes it.
    pub fn netns(&self, prefix: &str) -> Netns {
        let netns = Netns::new(prefix);
        let mut list = OpenOptions::new().create(true).append(true).open(self.path().join("netns")).unwrap();
        writeln!(list, "{}", netns.name).unwrap();
        netns
    }

    /// `log/<name>.log`.
    pub fn log(&self, name: &str) -> PathBuf {
        self.path().join("log").join(format!("{name}.log"))
    }

    /// Start `command` with its output appended to `log/<name>.log` and its working directory in
    /// the run.
    pub fn spawn(&self, name: &str, command: &mut Command) -> Child {
        let log = OpenOptions::new().create(true).append(true).open(self.log(name)).unwrap();
        command
            .current_dir(self.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("{name} does not start: {e}"))
    }

    /// The last `lines` lines of `log/<name>.log`.
    pub fn log_tail(&self, name: &str, lines: usize) -> String {
        let log = std::fs::read_to_string(self.log(name)).unwrap_or_default();
        let all: Vec<&str> = log.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// The run's processes (pid, command line).
    pub fn processes(&self) -> Vec<(u32, String)> {
        processes(self.path())
    }

    /// Kill every process of the run and remove its cgroups.
    pub fn end(&self) {
        end(self.path());
    }

    /// End the run but leave its directory (logs, state) for a look afterwards: where it is.
    pub fn keep(mut self) -> PathBuf {
        self.end();
        self.dir.disable_cleanup(true);
        self.path().to_path_buf()
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        self.end();
    }
}

/// Processes of the run in `dir` (pid, command line): command line or working directory in it, or
/// in one of its cgroups. Never this process.
fn processes(dir: &Path) -> Vec<(u32, String)> {
    let dir_text = dir.display().to_string();
    let cgroup = format!("/{}/", run_name(dir));
    let me = std::process::id();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        if pid == me {
            continue;
        }
        let proc_dir = entry.path();
        let cmdline = std::fs::read(proc_dir.join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ").trim().to_string();
        let in_dir = std::fs::read_link(proc_dir.join("cwd")).is_ok_and(|cwd| cwd.starts_with(dir));
        let in_cgroup = std::fs::read_to_string(proc_dir.join("cgroup")).is_ok_and(|c| c.contains(&cgroup));
        if cmdline.contains(&dir_text) || in_dir || in_cgroup {
            found.push((pid, cmdline));
        }
    }
    found
}

/// Kill every process of the run in `dir` and wait for them to go, then remove its cgroups.
fn end(dir: &Path) {
    let started = Instant::now();
    loop {
        let left = processes(dir);
        if left.is_empty() {
            break;
        }
        if started.elapsed() > PATIENCE {
            report(&format!("processes of {} survive SIGKILL: {left:?}", dir.display()));
            break;
        }
        for (pid, _) in left {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    remove_cgroups(&run_name(dir));
    unmount_below(dir);
}

/// Unmount whatever the run mounted in its directory (a tmpfs for etcd's data), deepest first, so
/// that the directory can be removed.
fn unmount_below(dir: &Path) {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let mut below: Vec<&str> = mounts
        .lines()
        .filter_map(|line| line.split(' ').nth(1))
        .filter(|point| Path::new(point).starts_with(dir))
        .collect();
    below.sort_by_key(|point| std::cmp::Reverse(point.len()));
    for point in below {
        let _ = nix::mount::umount2(point, nix::mount::MntFlags::MNT_DETACH);
    }
}

fn run_name(dir: &Path) -> String {
    dir.file_name().unwrap().to_string_lossy().into_owned()
}

/// Remove the cgroup `/<name>` and everything below it, in every mounted hierarchy.
fn remove_cgroups(name: &str) {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    for line in mounts.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        if fields.len() > 2 && (fields[2] == "cgroup" || fields[2] == "cgroup2") {
            remove_tree(&Path::new(fields[1]).join(name));
        }
    }
}

/// rmdir a cgroup directory's children, then itself (cgroup files cannot and need not be removed).
fn remove_tree(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            remove_tree(&entry.path());
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// End the runs whose test process is gone: their processes, cgroups, netns and directory.
fn sweep_dead_runs() {
    for entry in std::fs::read_dir(std::env::temp_dir()).into_iter().flatten().flatten() {
        let dir = entry.path();
        if !entry.file_name().to_string_lossy().starts_with(PREFIX) {
            continue;
        }
        // A run's directory names its owner; anything else by that prefix is not a run.
        let Ok(owner) = std::fs::read_to_string(dir.join(OWNER)) else { continue };
        let alive = owner
            .split_once(' ')
            .and_then(|(pid, started)| Some((pid.parse::<u32>().ok()?, started.trim().parse::<u64>().ok()?)))
            .is_some_and(|(pid, started)| start_time(pid) == Some(started));
        if alive {
            continue;
        }
        report(&format!("cleaning up {} left by a killed test run", dir.display()));
        end(&dir);
        for netns in std::fs::read_to_string(dir.join("netns")).unwrap_or_default().lines() {
            let _ = sh(&format!("ip netns delete {netns}"));
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// When process `pid` started (clock ticks after boot), if it runs.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command (field 2) is in parentheses and may hold spaces; the start time is field 22.
    stat.rsplit_once(')')?.1.split_whitespace().nth(19)?.parse().ok()
}
