//! Entering a container's network namespace. `setns` changes only the calling thread, so the work is
//! done on a dedicated short-lived thread: no async worker or other code ever runs in the wrong netns.

use crate::platform::cni::{CniError, code};
use nix::sched::{CloneFlags, setns};
use std::fs::File;
use std::path::Path;

/// Open the netns at `path`, failing with code 102 when it does not exist or is not a network namespace.
pub fn open(path: &Path) -> Result<File, CniError> {
    File::open(path).map_err(|e| CniError::new(code::NETNS, format!("failed to open netns {}: {e}", path.display())))
}

/// Whether `path` still names something; DEL uses it to decide "netns gone, nothing to undo there".
pub fn exists(path: &Path) -> bool {
    path.exists()
}

/// Run `f` on a new thread that has joined the netns at `path`; the thread ends with `f`.
pub fn run_in<T: Send>(path: &Path, f: impl FnOnce() -> T + Send) -> Result<T, CniError> {
    let ns = open(path)?;
    std::thread::scope(|s| {
        s.spawn(move || {
            setns(&ns, CloneFlags::CLONE_NEWNET)
                .map_err(|e| CniError::new(code::NETNS, format!("failed to enter netns {}: {e}", path.display())))?;
            Ok(f())
        })
        .join()
        .unwrap_or_else(|_| Err(CniError::new(code::KERNEL, format!("a task in netns {} panicked", path.display()))))
    })
}

/// Write a sysctl under /proc/sys (of the calling thread's netns for net.*), e.g. `net/ipv4/ip_forward`.
pub fn write_sysctl(key: &str, value: &str) -> Result<(), CniError> {
    let p = Path::new("/proc/sys").join(key);
    std::fs::write(&p, value).map_err(|e| CniError::kernel(format!("cannot set sysctl {key}={value}: {e}")))
}

pub fn read_sysctl(key: &str) -> Result<String, CniError> {
    let p = Path::new("/proc/sys").join(key);
    std::fs::read_to_string(&p)
        .map(|s| s.trim().to_string())
        .map_err(|e| CniError::kernel(format!("cannot read sysctl {key}: {e}")))
}
