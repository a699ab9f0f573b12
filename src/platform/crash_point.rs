//! Crash points: named places between two steps of ADD or DEL where the process can be made to kill
//! itself with SIGKILL, exactly as if the runtime (or the OOM killer) had killed it at that instant.
//! The crash tests (tests/netns/crash.rs) use them to reach every window between two durable steps
//! deterministically, beside kills at random times.
//!
//! Inert unless `YH_GENIE_CRASH_AT` is set in the plugin's environment: `<point>` kills the process
//! the first time it reaches that point, `<point>:<n>` the n-th time. docs/reliability.md lists the
//! points.

use std::sync::atomic::{AtomicUsize, Ordering};

pub const VAR: &str = "YH_GENIE_CRASH_AT";

/// Kill this process with SIGKILL if `YH_GENIE_CRASH_AT` names this `point` and this is the time.
pub fn reached(point: &str) {
    let Some(target) = std::env::var_os(VAR) else { return };
    let target = target.to_string_lossy();
    let (name, nth) = match target.rsplit_once(':') {
        Some((name, n)) => (name, n.parse().unwrap_or(usize::MAX)),
        None => (target.as_ref(), 1),
    };
    if name != point {
        return;
    }
    // One point is targeted per process, so one counter serves.
    static HITS: AtomicUsize = AtomicUsize::new(0);
    if HITS.fetch_add(1, Ordering::SeqCst) + 1 == nth {
        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
    }
}
