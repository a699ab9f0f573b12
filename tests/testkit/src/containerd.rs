//! containerd's configuration as a Kubernetes node has it, for the CRI suite's private containerd
//! and the real cluster's nodes: everything of its own (root, state, opt, sockets) under one
//! directory of the run, the CRI plugin with its CNI bin and conf dirs and sandbox image.

use std::path::Path;

/// The configuration: root, state and opt under `dir`; the gRPC socket at `socket` and the ttrpc
/// one beside it; the CRI plugin set up as a kubelet's node has it.
pub fn config(dir: &Path, socket: &Path, cni_bin: &Path, cni_conf: &Path, sandbox_image: &str) -> String {
    format!(
        r#"version = 2
root = "{d}/root"
state = "{d}/state"
# Snapshotters that cannot work here, so that their failures do not clutter the log.
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
                    "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs"]

[grpc]
  address = "{socket}"

[ttrpc]
  address = "{socket}.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "{d}/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{sandbox_image}"
  # Without it runc fails writing the sandbox's oom_score_adj below the test process's own.
  restrict_oom_score_adj = true

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{bin}"
    conf_dir = "{conf}"
"#,
        d = dir.display(),
        socket = socket.display(),
        bin = cni_bin.display(),
        conf = cni_conf.display(),
    )
}
