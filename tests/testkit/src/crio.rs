//! CRI-O as a Kubernetes node runs it, for the CRI suite's private CRI-O and a CRI-O node of the
//! real cluster: built by scripts/crio.sh (crio, pinns), everything of its own under one
//! directory of the run (storage root and runroot, pinned namespaces, exits, attach sockets, the
//! version files), its configuration, and images copied into its storage with skopeo.
//!
//! The configuration is a node's with the kubelet's cgroupfs driver: `cgroup_manager =
//! "cgroupfs"`, conmon in the pod's cgroup (`monitor_cgroup = "pod"`, which replaces the
//! deprecated `conmon_cgroup`), Debian's conmon and runc, a signature policy that accepts the local
//! images, and the infra (pause) container kept (`drop_infra_ctr = false`), so that a sandbox has a
//! process whose netns is the pod's, as under containerd. The CNI settings are the node's:
//! `network_dir` its conf dir, `plugin_dirs` its bin dir; CRI-O takes the first valid file of the
//! conf dir as its one network. Nothing of the machine's own: no AppArmor profile is loaded, no
//! irqbalance file written, no NRI socket, no metrics port.
//!
//! Short image names (`yh-genie:0.2.0`, as manifests/ names the image) resolve as containerd
//! resolves them, to `docker.io/library/`: a registries.conf of its own lists docker.io as the one
//! unqualified-search registry, with an empty drop-in dir (nothing of the machine's). Without one,
//! CRI-O 1.36 refuses every short name ("did not resolve to an alias and no unqualified-search
//! registries are defined"), local images included.
//!
//! runc runs through a wrapper that raises a bundle's `oomScoreAdj` to the wrapper's own score:
//! CRI-O gives every infra container -998, which only a process with CAP_SYS_RESOURCE may set, and
//! it has no setting like containerd's `restrict_oom_score_adj` (which `containerd::config` turns
//! on). And it drops a container's hugepage limits where the machine mounts no hugetlb hierarchy:
//! CRI-O sets them whenever the kernel lists the controller in /proc/cgroups, mounted or not, and
//! runc then fails ("cannot set hugetlb limit: container could not join or create cgroup");
//! containerd leaves them out by default (`disable_hugetlb_controller`). A privileged container
//! gets from CRI-O every capability it knows, from containerd those of its own bounding set; the
//! machines here withhold CAP_SYS_RESOURCE, which runc cannot grant ("unable to apply caps"), so
//! the wrapper keeps a bundle's capabilities inside its own bounding set, as containerd does.

use crate::node_namespaces::NodeNamespaces;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// runc for CRI-O: for `create` and `run` (which name the bundle), a score below the caller's own
/// is raised to it, hugepage limits are dropped where no hugetlb hierarchy is mounted, and
/// capabilities outside the caller's bounding set are dropped; then Debian's runc.
const RUNC_WRAPPER: &str = r#"#!/bin/bash
config=
for ((i = 1; i <= $#; i++)); do
  case ${!i} in
    --bundle | -b) j=$((i + 1)); config=${!j}/config.json ;;
    --bundle=*) config=${!i#--bundle=}/config.json ;;
  esac
done
if [ -n "$config" ] && [ -f "$config" ]; then
  own=$(cat /proc/self/oom_score_adj)
  hugetlb=false
  [ -d /sys/fs/cgroup/hugetlb ] && hugetlb=true
  names=(CHOWN DAC_OVERRIDE DAC_READ_SEARCH FOWNER FSETID KILL SETGID SETUID SETPCAP LINUX_IMMUTABLE
    NET_BIND_SERVICE NET_BROADCAST NET_ADMIN NET_RAW IPC_LOCK IPC_OWNER SYS_MODULE SYS_RAWIO SYS_CHROOT
    SYS_PTRACE SYS_PACCT SYS_ADMIN SYS_BOOT SYS_NICE SYS_RESOURCE SYS_TIME SYS_TTY_CONFIG MKNOD LEASE
    AUDIT_WRITE AUDIT_CONTROL SETFCAP MAC_OVERRIDE MAC_ADMIN SYSLOG WAKE_ALARM BLOCK_SUSPEND AUDIT_READ
    PERFMON BPF CHECKPOINT_RESTORE)
  bounding=$((16#$(awk '/^CapBnd:/ { print $2 }' /proc/self/status)))
  withheld=()
  for i in "${!names[@]}"; do
    (((bounding >> i) & 1)) || withheld+=("CAP_${names[$i]}")
  done
  jq --argjson own "$own" --argjson hugetlb "$hugetlb" \
    --argjson withheld "$(printf '%s\n' "${withheld[@]}" | jq -R 'select(. != "")' | jq -s .)" \
    '(if .process.oomScoreAdj != null and .process.oomScoreAdj < $own then .process.oomScoreAdj = $own else . end)
     | (if $hugetlb then . else del(.linux.resources.hugepageLimits) end)
     | (if .process.capabilities then .process.capabilities |= map_values(. - $withheld) else . end)' \
    "$config" >"$config.bounded" && mv "$config.bounded" "$config"
fi
exec runc "$@"
"#;

/// Short names are looked up as `docker.io/library/<name>` (then `localhost/<name>`, which CRI-O
/// always tries first), never asked about: no registry is reachable from a node anyway.
const REGISTRIES_CONF: &str = r#"unqualified-search-registries = ["docker.io"]
short-name-mode = "permissive"
"#;

/// Where and with what CRI-O runs.
pub struct CrioSetup<'a> {
    /// scripts/crio.sh's bin dir (crio, pinns).
    pub bin: &'a Path,
    /// Its own directory, on a filesystem overlayfs can stack on (not the node's copy-on-write
    /// `/var/lib`).
    pub dir: &'a Path,
    /// Its CRI socket, as the node sees it.
    pub socket: &'a Path,
    pub cni_bin: &'a Path,
    pub cni_conf: &'a Path,
    pub sandbox_image: &'a str,
}

impl CrioSetup<'_> {
    /// Write the configuration (`<dir>/crio.conf`), the signature policy and the runc wrapper.
    pub fn write(&self) {
        let own = self.dir;
        for sub in [
            "root",
            "runroot",
            "ns",
            "exits",
            "attach",
            "hooks",
            "cdi",
            "keys",
            "policies",
            "tmp",
            "conf.d",
            "pod-logs",
            "registries.conf.d",
        ] {
            std::fs::create_dir_all(own.join(sub)).unwrap();
        }
        std::fs::write(own.join("policy.json"), r#"{"default": [{"type": "insecureAcceptAnything"}]}"#).unwrap();
        std::fs::write(own.join("registries.conf"), REGISTRIES_CONF).unwrap();
        let wrapper = own.join("runc-oom-bounded");
        std::fs::write(&wrapper, RUNC_WRAPPER).unwrap();
        std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
        let config = format!(
            r#"[crio]
root = "{o}/root"
runroot = "{o}/runroot"
storage_driver = "overlay"
log_dir = "{o}/pod-logs"
version_file = "{o}/version"
version_file_persist = "{o}/version-persist"
clean_shutdown_file = "{o}/clean.shutdown"

[crio.api]
listen = "{socket}"
stream_address = "127.0.0.1"
stream_port = "0"

[crio.runtime]
cgroup_manager = "cgroupfs"
default_runtime = "runc"
drop_infra_ctr = false
pinns_path = "{pinns}"
namespaces_dir = "{o}/ns"
container_exits_dir = "{o}/exits"
container_attach_socket_dir = "{o}/attach"
hooks_dir = ["{o}/hooks"]
cdi_spec_dirs = ["{o}/cdi"]
decryption_keys_path = "{o}/keys"
irqbalance_config_file = ""
irqbalance_config_restore_file = ""
apparmor_profile = "unconfined"
enable_criu_support = false

[crio.runtime.runtimes.runc]
runtime_path = "{wrapper}"
runtime_type = "oci"
runtime_root = "{o}/runc"
monitor_path = "/usr/bin/conmon"
monitor_cgroup = "pod"

[crio.image]
signature_policy = "{o}/policy.json"
signature_policy_dir = "{o}/policies"
pause_image = "{sandbox_image}"
big_files_temporary_dir = "{o}/tmp"

[crio.network]
network_dir = "{conf}"
plugin_dirs = ["{cni_bin}"]

[crio.metrics]
enable_metrics = false

[crio.nri]
enable_nri = false
"#,
            o = own.display(),
            socket = self.socket.display(),
            pinns = self.bin.join("pinns").display(),
            wrapper = wrapper.display(),
            sandbox_image = self.sandbox_image,
            conf = self.cni_conf.display(),
            cni_bin = self.cni_bin.display(),
        );
        std::fs::write(own.join("crio.conf"), config).unwrap();
    }
}

/// crio with the configuration `dir` holds, in the node (`node`), with a service's environment,
/// not the test's: plugins inherit it.
pub fn daemon(node: &NodeNamespaces, bin: &Path, dir: &Path) -> Command {
    let mut command = node.command(bin.join("crio"));
    command
        .env_clear()
        .env("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
        .arg("--registries-conf")
        .arg(dir.join("registries.conf"))
        .arg("--registries-conf-dir")
        .arg(dir.join("registries.conf.d"))
        .arg("--config")
        .arg(dir.join("crio.conf"))
        .arg("--config-dir")
        .arg(dir.join("conf.d"));
    command
}

/// Where CRI-O mounts sandboxes' root filesystems, shm and pinned namespaces.
pub fn sandbox_dirs(dir: &Path) -> Vec<PathBuf> {
    vec![dir.join("root"), dir.join("runroot"), dir.join("ns")]
}

/// The home of CRI-O's overlay storage, which the storage mounts onto itself while CRI-O runs.
pub fn storage_home(dir: &Path) -> PathBuf {
    dir.join("root/overlay")
}

/// Where pinns pins the pods' network namespaces (`<namespaces_dir>/netns`).
pub fn netns_dir(dir: &Path) -> PathBuf {
    dir.join("ns/netns")
}

/// Copy an image (an archive of `oci_image`: its layout beside it) into the storage of the CRI-O
/// of `dir`, under its name, while crio runs.
pub fn import(node: &NodeNamespaces, dir: &Path, archive: &Path) {
    let (layout, name) = crate::oci_image::layout_of(archive);
    skopeo_copy(node, dir, &format!("oci:{layout}"), &name);
}

/// Store the image `from` of the CRI-O of `dir` under the name `to` too, as `ctr images tag` does.
pub fn tag(node: &NodeNamespaces, dir: &Path, from: &str, to: &str) {
    skopeo_copy(node, dir, &storage(dir, from), to);
}

/// The storage of the CRI-O of `dir`, as skopeo names an image in it.
fn storage(dir: &Path, image: &str) -> String {
    format!("containers-storage:[overlay@{}+{}]{image}", dir.join("root").display(), dir.join("runroot").display())
}

/// skopeo copy of `source` into the storage as `name`. In the node, in a mount namespace of its
/// own with a tmpfs on `/var/lib`: skopeo keeps a cache in `/var/lib/containers` that no option
/// moves, and its storage library makes mounts of its own.
fn skopeo_copy(node: &NodeNamespaces, dir: &Path, source: &str, name: &str) {
    let out = node
        .command("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg(r#"mount -t tmpfs yh-genie-skopeo /var/lib && exec "$@""#)
        .args(["skopeo", "skopeo", "--policy"])
        .arg(dir.join("policy.json"))
        .args(["copy", "--quiet", source, &storage(dir, name)])
        .output()
        .unwrap();
    assert!(out.status.success(), "skopeo copy of {name}: {}", String::from_utf8_lossy(&out.stderr));
}

/// The programs CRI-O of `bin` needs, each checked on `PATH`.
pub fn required_programs(bin: &Path) -> Vec<String> {
    let mut programs: Vec<String> = ["crio", "pinns"].iter().map(|p| bin.join(p).display().to_string()).collect();
    programs.extend(["conmon", "runc", "skopeo", "jq", "unshare", "nsenter"].map(String::from));
    programs
}
