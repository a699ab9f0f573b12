//! What every program stands on, knowing nothing of them: the CNI protocol (`cni`), the
//! Kubernetes API server (`kube`), netlink behind one typed interface (`netlink`), entering a
//! network namespace (`netns`), files written whole and durably (`durable`), operation logs
//! (`logging`), tokio for one blocking call (`async_runtime`), named crash points for the crash
//! tests (`crash_point`), SIGTERM and SIGINT for the long-running programs (`stop_signals`).

pub mod async_runtime;
pub mod cni;
pub mod crash_point;
pub mod durable;
pub mod kube;
pub mod logging;
pub mod netlink;
pub mod netns;
pub mod stop_signals;
