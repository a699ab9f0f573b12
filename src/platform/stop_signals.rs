//! SIGTERM (the kubelet stopping a pod, `kill`) and SIGINT (^C) for the long-running programs, the
//! installer and the node agent: taken by a thread of their own and handed over, so that a program
//! stops in its own time, cleaning up on the way out.

use anyhow::Context;
use nix::sys::signal::{SigSet, Signal};
use std::sync::mpsc;
use std::time::Duration;

/// SIGTERM and SIGINT, taken by a thread with `sigwait` and handed to the program, which waits on
/// them (the installer with its poll interval as the timeout). As PID 1 in a container, a process
/// without this would not die on SIGTERM at all.
pub struct StopSignals(mpsc::Receiver<Signal>);

impl StopSignals {
    /// Take the signals from now on. Before any other thread exists, so that every thread inherits
    /// the blocked mask.
    pub fn listen() -> anyhow::Result<Self> {
        let mut set = SigSet::empty();
        set.add(Signal::SIGTERM);
        set.add(Signal::SIGINT);
        set.thread_block().context("blocking SIGTERM and SIGINT")?;
        let (tx, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("signals".into())
            .spawn(move || {
                while let Ok(signal) = set.wait() {
                    if tx.send(signal).is_err() {
                        return;
                    }
                }
            })
            .context("starting the signal thread")?;
        Ok(StopSignals(rx))
    }

    /// The next signal, however long it takes.
    pub fn next(&self) -> Signal {
        loop {
            if let Some(signal) = self.wait(Duration::from_secs(3600)) {
                return signal;
            }
        }
    }

    /// The signal that arrived within `timeout`, if any.
    pub fn wait(&self, timeout: Duration) -> Option<Signal> {
        match self.0.recv_timeout(timeout) {
            Ok(signal) => Some(signal),
            Err(mpsc::RecvTimeoutError::Timeout) => None,
            // `sigwait` only fails on an invalid set, which ours is not; never spin if it did.
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                std::thread::sleep(timeout);
                None
            }
        }
    }
}
