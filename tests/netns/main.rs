//! The netns suite: the plugins and the selector against a real kernel, as root, in throwaway
//! network namespaces with real plugins (Debian's reference plugins beside yh-genie's), driven as
//! runtimes drive them (this suite's own CNI driver, and libcni through tools/cnidrive), with the
//! fake API server and the node agent where the selector needs them. One module per concern; each
//! test makes its own namespaces and sandbox, so they run side by side. `scripts/test.sh --root`
//! runs it (docs/testing.md).

mod support;

// The built-in plugins and the kernel layer.
mod bridge;
mod host_local;
mod legacy_versions;
mod logging;
mod netlink;
mod veth_router;
mod yonghui;

// The selector: choosing networks, attaching them, what the runtime and the pod author hand it.
mod api_certificates;
mod capabilities;
mod devices;
mod dropin;
mod hardening;
mod in_place;
mod migrate;
mod multinet;
mod multinet_records;
mod multus_nads;
mod selector;

// The node agent.
mod agent;
mod dynamic;

// Reliability: concurrent pods, kills, repeated DELs, a misbehaving API server.
mod concurrency;
mod crash;
mod repeated_del;
mod soak;
