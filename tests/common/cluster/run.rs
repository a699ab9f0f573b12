//! A cluster run's directory (`/tmp/yh-genie-cluster.<test pid>.<random>`) and the processes it
//! owns. Every process the harness starts has the run dir in its command line or as its working
//! directory, and every container lives in a cgroup under `/<run dir name>/`, so that ending the
//! run (or sweeping a run whose test process was killed) finds all of them, as containerd.rs does
//! for a single node. The network namespaces it made are listed in `<dir>/netns`.

use super::super::containerd::end_run;
use super::super::{Netns, report, sh};
use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

const RUN_PREFIX: &str = "yh-genie-cluster.";

pub struct Run {
    dir: tempfile::TempDir,
}

impl Run {
    /// A new run directory, after ending the runs of test processes that are gone.
    pub fn new() -> Self {
        sweep_dead_runs();
        let prefix = format!("{RUN_PREFIX}{}.", std::process::id());
        let dir = tempfile::Builder::new().prefix(&prefix).tempdir().expect("run dir");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::create_dir_all(dir.path().join("log")).unwrap();
        Run { dir }
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

    pub fn log(&self, name: &str) -> PathBuf {
        self.path().join("log").join(format!("{name}.log"))
    }

    /// Start `command` with its output in `log/<name>.log` and its working directory in the run.
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

    /// Kill every process of the run and remove its cgroups.
    pub fn end(&self) {
        end_run(self.path());
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        self.end();
    }
}

/// End the runs of test processes that are gone: their processes, cgroups, netns and directory.
/// Runs of live test processes are left alone.
fn sweep_dead_runs() {
    for entry in std::fs::read_dir(std::env::temp_dir()).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix(RUN_PREFIX).and_then(|rest| rest.split('.').next()) else { continue };
        let Ok(pid) = pid.parse::<u32>() else { continue };
        let alive = std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|comm| comm.starts_with("cluster"));
        if alive {
            continue;
        }
        let dir = entry.path();
        report(&format!("cleaning up {} left by a killed test run", dir.display()));
        end_run(&dir);
        for netns in std::fs::read_to_string(dir.join("netns")).unwrap_or_default().lines() {
            let _ = sh(&format!("ip netns delete {netns}"));
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
