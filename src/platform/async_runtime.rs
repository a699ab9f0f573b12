//! The async runtime (tokio's, not the container runtime): one current-thread tokio runtime per
//! blocking call. A CNI plugin does a few round trips per exec, so a multi-threaded runtime would
//! only cost start-up time.

use std::future::Future;

/// Run `fut` to completion on a fresh current-thread runtime.
/// Panics if called from inside a runtime; plugin code keeps async work inside its own calls.
pub fn block_on<F: Future>(fut: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("building a current-thread runtime only fails when the process is out of resources")
        .block_on(fut)
}
