//! One operation at a time on an attachment (container id + interface name), the remains of a
//! killed operation included.
//!
//! A runtime never runs two operations on one attachment at once, but when its timeout kills a
//! plugin it sends DEL right away, while the helpers the killed plugin started (an IPAM plugin
//! allocating, `iptables-restore`, an exec'd delegate and its own IPAM plugin) may still be at
//! work. What a helper makes after that DEL leaks. Killing helpers along with the plugin is no
//! cure: it interrupts them anywhere, and host-local killed between creating a lease file and
//! writing its owner into it leaves a lease that no DEL can find.
//!
//! So helpers are left to finish, and the next operation waits for them. Each operation holds an
//! exclusive `flock` on `<dir>/<container id>:<ifname>`; its helpers inherit the locked descriptor
//! (and pass it on to theirs: Go plugins keep inherited descriptors across exec), so the lock is
//! free only once the last process of the operation has exited, whether the plugin itself died or
//! not. Remains that are still running after `WAIT` (a hung IPAM plugin) are killed, as a living
//! plugin kills a helper at its timeout, so that a stuck helper cannot hold a pod's DEL forever.
//!
//! The directory is the caller's (yh-genie's is on tmpfs, `/run/yh-genie/attachments`: a lock means
//! nothing after a reboot). DEL removes the file;
//! an ADD keeps it for the DEL that will follow. Where the lock cannot be had at all (`/run` read
//! only, say), the operation goes on without it, with a warning: a lock is a safeguard, and no pod
//! loses its network for the want of one.

use std::fs::{File, OpenOptions};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long an operation waits for the remains of the previous one before killing them: as long
/// as a living plugin gives a helper (`exec::DEFAULT_TIMEOUT`, which a test of `exec` holds equal
/// to this; `exec` spawns helpers through this module, so this one does not look up to it).
pub const WAIT: Duration = Duration::from_secs(60);

/// After killing the remains, how long to wait for the kernel to take them away.
const AFTER_KILL: Duration = Duration::from_secs(1);

/// The descriptor of the lock this process holds, for `exec::spawn_helper` to pass on.
static HELD: Mutex<Option<RawFd>> = Mutex::new(None);

/// An attachment's lock, held until dropped. Helpers spawned meanwhile inherit it.
#[derive(Debug)]
pub struct AttachmentLock {
    file: File,
    path: PathBuf,
}

/// The descriptor of the lock this process holds, if any.
pub fn held() -> Option<RawFd> {
    *HELD.lock().unwrap_or_else(|e| e.into_inner())
}

/// Run `spawn`, which starts a helper, with the lock this process holds passed on to it: while it
/// runs, an inheritable duplicate of the lock's descriptor exists, and the new process inherits it
/// (and passes it on to its own helpers). No hook runs in the child, so the standard library can
/// spawn with vfork semantics instead of forking the whole plugin process (a quarter of a
/// millisecond less per helper). Spawns are serialized, so the duplicate never outlives its spawn;
/// any process started meanwhile is a helper of this same operation anyway.
pub fn passed_on<T>(spawn: impl FnOnce() -> std::io::Result<T>) -> std::io::Result<T> {
    let held = HELD.lock().unwrap_or_else(|e| e.into_inner());
    let Some(fd) = *held else {
        drop(held);
        return spawn();
    };
    // SAFETY: a lock's descriptor is registered while it is open, and it cannot be unregistered
    // while `held` is locked.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    let inheritable = nix::unistd::dup(fd)?;
    let spawned = spawn();
    drop(inheritable);
    spawned
}

/// The lock file of an attachment. `:` separates the two: container ids cannot contain one.
pub fn path(dir: &Path, container_id: &str, ifname: &str) -> PathBuf {
    dir.join(format!("{container_id}:{ifname}"))
}

/// Take the lock of `container_id`/`ifname` in `dir`, waiting up to `wait` for whoever holds it,
/// then killing the holders. None when this process is part of the operation that holds the lock
/// (a yh-genie plugin exec'd by a delegate of the selector, say: it inherited the descriptor), or
/// when the lock cannot be had (logged).
pub fn acquire(dir: &Path, container_id: &str, ifname: &str, wait: Duration) -> Option<AttachmentLock> {
    // Absolute, to compare with what /proc says a process holds.
    let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    let path = path(&dir, container_id, ifname);
    match lock(&path, wait) {
        Ok(lock) => lock,
        Err(e) => {
            tracing::warn!(lock = %path.display(), error = %e, "cannot take the attachment's lock; going on without it");
            None
        }
    }
}

fn lock(path: &Path, wait: Duration) -> std::io::Result<Option<AttachmentLock>> {
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    }
    let started = Instant::now();
    let mut deadline = started + wait;
    let mut killed = false;
    let mut pause = Duration::from_millis(1);
    let mut file = open(path)?;
    let mut first = true;
    loop {
        match file.try_lock() {
            // A DEL may have removed the file between our open and our lock: then the lock is on
            // a file nobody else will open, and the one to lock is the path's new file.
            Ok(()) if same_file(&file, path)? => break,
            Ok(()) => file = open(path)?,
            // Looked for only when the lock is busy: the common case, a free lock, pays nothing.
            Err(std::fs::TryLockError::WouldBlock) if first && holds_another_descriptor_of(&file) => return Ok(None),
            Err(std::fs::TryLockError::WouldBlock) => {}
            Err(std::fs::TryLockError::Error(e)) => return Err(e),
        }
        first = false;
        if Instant::now() >= deadline {
            if killed {
                tracing::warn!(lock = %path.display(), "the attachment is still locked by processes that were killed; going on");
                return Ok(None);
            }
            let pids = kill_holders(path);
            if pids.is_empty() {
                // Held by this process's own callers, which did not pass the descriptor on.
                tracing::warn!(lock = %path.display(), "the attachment is locked by this operation's callers; going on");
                return Ok(None);
            }
            tracing::warn!(lock = %path.display(), ?pids, waited_ms = started.elapsed().as_millis() as u64,
                "processes of an earlier operation on this attachment outlived the wait; killed them");
            killed = true;
            deadline = Instant::now() + AFTER_KILL;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(20));
    }
    // Only a lock found busy is a wait: on a loaded node, opening and locking a free one can take
    // milliseconds too, and saying "waited" then would send an operator after a holder that was
    // never there.
    if !first {
        tracing::info!(lock = %path.display(), waited_ms = started.elapsed().as_millis() as u64,
            "waited for an earlier operation on this attachment to end");
    }
    *HELD.lock().unwrap_or_else(|e| e.into_inner()) = Some(file.as_raw_fd());
    Ok(Some(AttachmentLock { file, path: path.to_path_buf() }))
}

fn open(path: &Path) -> std::io::Result<File> {
    // std opens with O_CLOEXEC: only helpers spawned while the lock is held get the descriptor.
    OpenOptions::new().read(true).write(true).create(true).truncate(false).mode(0o600).open(path)
}

/// Whether this process has `file`'s file open through another descriptor: inherited from the
/// plugin whose operation holds the lock, or held by this process itself.
fn holds_another_descriptor_of(file: &File) -> bool {
    let (Ok(open), mine) = (file.metadata(), file.as_raw_fd().to_string()) else { return false };
    let Ok(fds) = std::fs::read_dir("/proc/self/fd") else { return false };
    fds.flatten().filter(|fd| fd.file_name().to_str() != Some(&mine)).any(|fd| {
        // Following the link: the metadata of the file the descriptor is open on.
        std::fs::metadata(fd.path()).is_ok_and(|m| (m.dev(), m.ino()) == (open.dev(), open.ino()))
    })
}

fn same_file(file: &File, path: &Path) -> std::io::Result<bool> {
    let (open, named) = (file.metadata()?, std::fs::metadata(path));
    Ok(named.is_ok_and(|named| (named.dev(), named.ino()) == (open.dev(), open.ino())))
}

/// Kill every process that has `path` open, but this one and its ancestors. Returns their pids.
fn kill_holders(path: &Path) -> Vec<i32> {
    let spared = ancestry();
    let mut killed = Vec::new();
    let Ok(procs) = std::fs::read_dir("/proc") else { return killed };
    for entry in procs.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|p| p.parse::<u32>().ok()) else { continue };
        if spared.contains(&pid) {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else { continue };
        let holds = fds.flatten().any(|fd| std::fs::read_link(fd.path()).is_ok_and(|target| target == path));
        if holds {
            // By pid, checked just before: a holder that exited and whose pid was reused in the
            // microseconds between would be hit. This path runs only for remains hung for 60 s.
            let pid = nix::unistd::Pid::from_raw(pid as i32);
            if nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).is_ok() {
                killed.push(pid.as_raw());
            }
        }
    }
    killed
}

/// This process and its ancestors, from /proc.
fn ancestry() -> Vec<u32> {
    let mut line = vec![std::process::id()];
    let mut pid = std::os::unix::process::parent_id();
    while pid > 1 && !line.contains(&pid) {
        line.push(pid);
        // The parent is the 4th field of /proc/<pid>/stat, after the command in parentheses.
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        pid = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse().ok()).unwrap_or(0);
    }
    line
}

impl AttachmentLock {
    /// Remove the lock file, then release the lock: the attachment is gone (DEL succeeded).
    pub fn remove(self) {
        if let Err(e) = std::fs::remove_file(&self.path) {
            tracing::warn!(lock = %self.path.display(), error = %e, "cannot remove the attachment's lock file");
        }
    }
}

impl Drop for AttachmentLock {
    fn drop(&mut self) {
        let mut held = HELD.lock().unwrap_or_else(|e| e.into_inner());
        if *held == Some(self.file.as_raw_fd()) {
            *held = None;
        }
        // Closing `file` releases the lock, unless helpers that outlive this process still hold it.
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};

    /// A plugin's lock as `acquire` takes it, but not registered for `spawn_helper`: helpers
    /// that other tests spawn meanwhile must not inherit it (the lock a process holds is
    /// process-wide), or these tests would wait for them, or kill them.
    fn locked_quietly(dir: &Path) -> File {
        let file = open(&path(dir, "c1", "eth0")).unwrap();
        file.try_lock().unwrap();
        file
    }

    /// In a forked child before exec: keep `fd` open across the exec. One fcntl: async-signal-safe.
    ///
    /// # Safety
    /// `fd` must be open in the parent at the fork.
    unsafe fn pass_on_in_child(fd: RawFd) -> std::io::Result<()> {
        // SAFETY: the caller guarantees that `fd` is open.
        let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
        nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()))?;
        Ok(())
    }

    /// A child process (`sleep`) that holds `lock`'s descriptor, as a helper spawned under it does.
    fn holder(lock: &File, secs: &str) -> std::process::Child {
        let fd = lock.as_raw_fd();
        let mut command = Command::new("sleep");
        command.arg(secs).stdin(Stdio::null());
        // SAFETY: `pass_on_in_child` is async-signal-safe and `lock` is open.
        unsafe { command.pre_exec(move || pass_on_in_child(fd)) };
        command.spawn().unwrap()
    }

    /// Tests that take locks run one at a time: the lock a process holds is process-wide.
    pub(crate) static SERIAL: Mutex<()> = Mutex::new(());

    pub(crate) fn serial() -> std::sync::MutexGuard<'static, ()> {
        SERIAL.lock().unwrap_or_else(|e| e.into_inner())
    }

    #[test]
    fn the_lock_is_free_only_once_the_last_holder_has_ended() {
        let _serial = serial();
        let dir = tempfile::tempdir().unwrap();
        let first = locked_quietly(dir.path());
        let mut helper = holder(&first, "0.3");
        drop(first);
        // The plugin is gone but its helper still runs: the next operation waits for it.
        let second = acquire(dir.path(), "c1", "eth0", WAIT).expect("the lock is taken once the helper ends");
        assert!(helper.try_wait().unwrap().is_some(), "the lock was taken while the helper still held it");
        // Another attachment is not held up by this one.
        let other = acquire(dir.path(), "c1", "net1", Duration::ZERO);
        assert!(other.is_some());
        drop((second, other));
    }

    #[test]
    fn remains_that_outlive_the_wait_are_killed() {
        let _serial = serial();
        let dir = tempfile::tempdir().unwrap();
        let first = locked_quietly(dir.path());
        let mut helper = holder(&first, "600");
        drop(first);
        let second = acquire(dir.path(), "c1", "eth0", Duration::from_millis(50));
        assert!(second.is_some(), "the lock is taken once its holder is killed");
        let status = helper.wait().unwrap();
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(9));
    }

    #[test]
    fn a_process_that_has_the_lock_file_open_already_is_part_of_the_operation_holding_it() {
        let _serial = serial();
        let dir = tempfile::tempdir().unwrap();
        let outer = acquire(dir.path(), "c1", "eth0", WAIT).expect("a free lock is taken");
        assert_eq!(held(), Some(outer.file.as_raw_fd()), "passed on to helpers");
        let again = open(&path(dir.path(), "c1", "eth0")).unwrap();
        assert!(holds_another_descriptor_of(&again));
        let other = open(&path(dir.path(), "c1", "net1")).unwrap();
        assert!(!holds_another_descriptor_of(&other));
        assert!(acquire(dir.path(), "c1", "eth0", WAIT).is_none(), "not taken twice");
        assert_eq!(held(), Some(outer.file.as_raw_fd()), "the outer lock is still the one passed on");
        drop(outer);
        assert_eq!(held(), None);
    }

    #[test]
    fn killing_the_holders_kills_only_the_other_holders() {
        let _serial = serial();
        let dir = tempfile::tempdir().unwrap();
        let mine = locked_quietly(dir.path());
        let mut helper = holder(&mine, "600");
        let path = path(&std::path::absolute(dir.path()).unwrap(), "c1", "eth0");
        assert_eq!(kill_holders(&path), [helper.id() as i32], "only the other holder");
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&helper.wait().unwrap()), Some(9));
        assert!(mine.metadata().is_ok(), "this process still has it open");
    }

    #[test]
    fn the_ancestry_spared_from_killing_starts_with_this_process_then_its_parent() {
        let line = ancestry();
        assert_eq!(line[..2], [std::process::id(), std::os::unix::process::parent_id()]);
    }

    #[test]
    fn a_waiter_on_the_file_del_removed_locks_a_new_file() {
        let _serial = serial();
        let dir = tempfile::tempdir().unwrap();
        let lock = acquire(dir.path(), "c1", "eth0", WAIT).unwrap();
        // A waiter that opened the file before the DEL removed it.
        let stale = open(&path(dir.path(), "c1", "eth0")).unwrap();
        lock.remove();
        assert!(!path(dir.path(), "c1", "eth0").exists());
        stale.try_lock().unwrap();
        assert!(!same_file(&stale, &path(dir.path(), "c1", "eth0")).unwrap(), "a removed file is told apart");
        let next = acquire(dir.path(), "c1", "eth0", Duration::ZERO).expect("the path's new file is locked");
        assert!(path(dir.path(), "c1", "eth0").exists());
        drop(next);
    }

    #[test]
    fn without_a_usable_directory_the_operation_goes_on_unlocked() {
        let _serial = serial();
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("not-a-dir");
        std::fs::write(&file, "").unwrap();
        assert!(acquire(&file, "c1", "eth0", WAIT).is_none());
    }
}
