//! `yh-genie install`, run as the real binary against a temp dir standing in for the host's root
//! (`--host-root`) and a fake service-account dir: what lands on the "host", with which modes and
//! links, what a second or concurrent run does, and how the long-running installer reacts to token
//! rotation, a late fabric, and SIGTERM. No root needed; nothing outside the temp dir is touched.

use base64::Engine as _;
use secrecy::ExposeSecret as _;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};
use yh_genie::programs::plugins::NAMES as PLUGIN_NAMES;

const BIN: &str = env!("CARGO_BIN_EXE_yh-genie");
const CA: &str = "-----BEGIN CERTIFICATE-----\nMIIBfakeCAforTests\n-----END CERTIFICATE-----\n";
const YONGHUI: &str = r#"{"cniVersion": "1.0.0", "name": "yonghui", "plugins": [{"type": "yonghui", "subnetFile": "/run/flannel/subnet.env"}]}"#;
/// How long a test waits for the installer to react before failing (a guard, not a speed check).
const PATIENCE: Duration = Duration::from_secs(60);

/// The DaemonSet's installer pod, faked in a temp dir: its mounts (`root/` the host's `/`, `sa/`
/// its service account, `networks/` the network ConfigMap) and its container's command.
struct InstallerPod {
    dir: tempfile::TempDir,
}

impl InstallerPod {
    fn new() -> Self {
        let pod = InstallerPod { dir: tempfile::tempdir().unwrap() };
        fs::create_dir_all(pod.root()).unwrap();
        fs::create_dir_all(pod.path("sa")).unwrap();
        fs::create_dir_all(pod.path("networks")).unwrap();
        pod.set_token("token-1");
        fs::write(pod.path("sa/ca.crt"), CA).unwrap();
        fs::write(pod.path("networks/yonghui.conflist"), YONGHUI).unwrap();
        pod
    }
    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }
    fn root(&self) -> PathBuf {
        self.path("root")
    }
    /// A host path as seen from the test, e.g. `host("/etc/cni/net.d")`.
    fn host(&self, host_path: &str) -> PathBuf {
        self.root().join(host_path.trim_start_matches('/'))
    }
    fn bin(&self, name: &str) -> PathBuf {
        self.host("/opt/cni/bin").join(name)
    }
    fn conflist(&self) -> PathBuf {
        self.host("/etc/cni/net.d/00-yh-genie.conflist")
    }
    fn kubeconfig(&self) -> PathBuf {
        self.host("/etc/cni/net.d/yh-genie.d/yh-genie.kubeconfig")
    }
    /// Rotate the token the way the kubelet does: a new file renamed into place.
    fn set_token(&self, token: &str) {
        let tmp = self.path("sa/.token.new");
        fs::write(&tmp, format!("{token}\n")).unwrap();
        fs::rename(tmp, self.path("sa/token")).unwrap();
    }

    /// The installer with a clean environment: only what a pod's kubelet would set.
    fn command(&self, extra: &[&str]) -> Command {
        self.command_with_default("yonghui", extra)
    }
    fn command_with_default(&self, default_network: &str, extra: &[&str]) -> Command {
        let mut c = Command::new(BIN);
        c.env_clear()
            .env("KUBERNETES_SERVICE_HOST", "fd00:10:96::1")
            .env("KUBERNETES_SERVICE_PORT", "443")
            .arg("install")
            .arg("--host-root")
            .arg(self.root())
            .arg("--sa-dir")
            .arg(self.path("sa"))
            .arg("--networks-dir")
            .arg(self.path("networks"))
            .args(["--default-network", default_network])
            .args(extra);
        c
    }
    fn install_once(&self, extra: &[&str]) -> Output {
        let mut args = vec!["--once"];
        args.extend_from_slice(extra);
        self.command(&args).output().unwrap()
    }
    fn spawn(&self, extra: &[&str]) -> Installer {
        let child = self.command(extra).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
        Installer(child)
    }

    /// Every entry under the host root: (inode, mtime in ns) by relative path. Directories are in
    /// it too, so a rename or a new file anywhere shows as a changed directory mtime.
    fn snapshot(&self) -> BTreeMap<PathBuf, (u64, i128)> {
        let mut out = BTreeMap::new();
        let mut stack = vec![self.root()];
        while let Some(p) = stack.pop() {
            let m = fs::symlink_metadata(&p).unwrap();
            out.insert(
                p.strip_prefix(self.root()).unwrap().to_owned(),
                (m.ino(), m.mtime() as i128 * 1_000_000_000 + m.mtime_nsec() as i128),
            );
            if m.is_dir() {
                stack.extend(fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
            }
        }
        out
    }
}

/// A running installer, killed when dropped so a failing test leaves no process behind.
struct Installer(Child);

impl Installer {
    fn signal(&self, signal: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.0.id() as i32), signal).unwrap();
    }
    fn wait_exit(&mut self) -> ExitStatus {
        wait_for("the installer to exit", || self.0.try_wait().unwrap())
    }
}

impl Drop for Installer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Poll `check` until it yields a value; fail after `PATIENCE`.
fn wait_for<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn assert_ok(out: &Output) {
    assert!(out.status.success(), "installer failed: {:?}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
}

fn mode(p: &Path) -> u32 {
    fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
}

fn read_json(p: &Path) -> Value {
    serde_json::from_slice(&fs::read(p).unwrap()).unwrap()
}

/// What a complete install looks like, checked as an operator would on the pod.
fn assert_installed(pod: &InstallerPod, token: &str) {
    let binary = pod.bin("yh-genie");
    assert!(fs::symlink_metadata(&binary).unwrap().is_file());
    assert_eq!(mode(&binary), 0o755);
    assert!(fs::read(&binary).unwrap() == fs::read(BIN).unwrap(), "installed binary differs from the build");
    for name in PLUGIN_NAMES {
        let link = pod.bin(name);
        assert_eq!(fs::read_link(&link).unwrap(), Path::new("yh-genie"), "{name}");
        // The link works, and the binary is that plugin when called by that name.
        let out = Command::new(&link).arg("--version").env_clear().output().unwrap();
        assert!(String::from_utf8_lossy(&out.stdout).starts_with(&format!("{name} ")), "{name}: {out:?}");
    }

    assert_eq!(mode(&pod.host("/etc/cni/net.d/yh-genie.d")), 0o700);
    assert_eq!(mode(&pod.kubeconfig()), 0o600);
    let kc = kube::config::Kubeconfig::read_from(pod.kubeconfig()).unwrap();
    let context = kc.contexts.iter().find(|c| Some(&c.name) == kc.current_context.as_ref()).unwrap();
    let context = context.context.as_ref().unwrap();
    let cluster = kc.clusters.iter().find(|c| c.name == context.cluster).unwrap().cluster.as_ref().unwrap();
    assert_eq!(cluster.server.as_deref(), Some("https://[fd00:10:96::1]:443"));
    let ca = base64::engine::general_purpose::STANDARD.decode(cluster.certificate_authority_data.as_ref().unwrap());
    assert_eq!(ca.unwrap(), CA.as_bytes());
    let user = kc.auth_infos.iter().find(|u| Some(&u.name) == context.user.as_ref()).unwrap();
    assert_eq!(user.auth_info.as_ref().unwrap().token.as_ref().unwrap().expose_secret(), token);

    assert_eq!(mode(&pod.conflist()), 0o644);
    assert_eq!(
        read_json(&pod.conflist()),
        json!({
            "cniVersion": "1.0.0", "cniVersions": ["1.0.0", "1.1.0"], "name": "yh-genie",
            "plugins": [{
                "type": "yh-genie",
                "kubeconfig": "/etc/cni/net.d/yh-genie.d/yh-genie.kubeconfig",
                "confDir": "/etc/cni/net.d",
                "dataDir": "/var/lib/cni/yh-genie",
                "binDir": "/opt/cni/bin",
                "agentSocket": "",
                "capabilities": {"portMappings": true, "bandwidth": true, "ipRanges": true, "dns": true,
                    "ips": true, "mac": true, "aliases": true, "cgroupPath": true, "infinibandGUID": true,
                    "deviceID": true, "io.kubernetes.cri.pod-annotations": true},
                "defaultNetwork": "yonghui"
            }]
        })
    );
    let network = pod.host("/etc/cni/net.d/yonghui/yonghui.conflist");
    assert_eq!(fs::read_to_string(&network).unwrap(), YONGHUI);
    assert_eq!(mode(&network), 0o644);

    let leftovers: Vec<_> = pod.snapshot().into_keys().filter(|p| p.to_string_lossy().contains(".tmp-")).collect();
    assert!(leftovers.is_empty(), "temp files left behind: {leftovers:?}");
}

#[test]
fn installs_everything_with_its_modes_whatever_the_umask() {
    let pod = InstallerPod::new();
    // A restrictive umask must not narrow the modes the runtime depends on (0755 binary, 0644 confs).
    let mut c = pod.command(&["--once"]);
    let program = c.get_program().to_owned();
    let args: Vec<_> = c.get_args().map(ToOwned::to_owned).collect();
    c = Command::new("sh");
    c.arg("-c").arg("umask 077 && exec \"$0\" \"$@\"").arg(program).args(args);
    c.env_clear().env("KUBERNETES_SERVICE_HOST", "fd00:10:96::1").env("KUBERNETES_SERVICE_PORT", "443");
    assert_ok(&c.output().unwrap());
    assert_installed(&pod, "token-1");
}

#[test]
fn a_second_run_changes_nothing() {
    let pod = InstallerPod::new();
    assert_ok(&pod.install_once(&[]));
    let conflist = pod.host("/etc/cni/net.d/00-yh-genie.conflist");
    let (before, text) = (pod.snapshot(), fs::read_to_string(&conflist).unwrap());
    assert_ok(&pod.install_once(&[]));
    // Each start announces the conflist in place (a truncate to its own length: a write event for
    // containerd, in case a killed installer renamed it without announcing it), which moves its
    // mtime and nothing else: the same file, the same bytes.
    let key = std::path::PathBuf::from("etc/cni/net.d/00-yh-genie.conflist");
    let (mut after, mut before) = (pod.snapshot(), before);
    assert_eq!(after.remove(&key).map(|(inode, _)| inode), before.remove(&key).map(|(inode, _)| inode));
    assert_eq!(fs::read_to_string(&conflist).unwrap(), text);
    assert_eq!(after, before, "a second run rewrote or renamed something");
}

#[test]
fn concurrent_runs_leave_one_consistent_install() {
    let pod = InstallerPod::new();
    let runs: Vec<Child> = (0..4).map(|_| pod.command(&["--once"]).stderr(Stdio::piped()).spawn().unwrap()).collect();
    for run in runs {
        assert_ok(&run.wait_with_output().unwrap());
    }
    assert_installed(&pod, "token-1");
}

#[test]
fn replaces_a_running_binary_without_text_file_busy() {
    let pod = InstallerPod::new();
    let binary = pod.bin("yh-genie");
    fs::create_dir_all(binary.parent().unwrap()).unwrap();
    // An "old version" that is executing while the new one is installed, as on an upgrade.
    // Copied by `cp`, not by this process: a test thread forking while this one held the file open
    // for writing would pass the descriptor to its child, and the exec below could see ETXTBSY.
    assert!(Command::new("cp").arg("/bin/sleep").arg(&binary).status().unwrap().success());
    let mut old = Command::new(&binary).arg("600").spawn().unwrap();
    let out = pod.install_once(&[]);
    let still_running = old.try_wait().unwrap().is_none();
    let _ = old.kill();
    let _ = old.wait();
    assert_ok(&out);
    assert!(still_running, "the running old binary was disturbed");
    assert_installed(&pod, "token-1");
}

#[test]
fn a_rotated_token_changes_only_the_kubeconfig() {
    let pod = InstallerPod::new();
    let _installer = pod.spawn(&["--interval", "0.05"]);
    wait_for("the conflist", || pod.conflist().exists().then_some(()));
    let conflist_inode = fs::metadata(pod.conflist()).unwrap().ino();
    pod.set_token("token-2");
    wait_for("the new token in the kubeconfig", || {
        fs::read_to_string(pod.kubeconfig()).ok().filter(|k| k.contains("token-2")).map(drop)
    });
    assert_eq!(mode(&pod.kubeconfig()), 0o600);
    assert_eq!(fs::metadata(pod.conflist()).unwrap().ino(), conflist_inode, "the conflist was rewritten");
    assert_installed(&pod, "token-2");
}

#[test]
fn a_network_added_to_the_source_is_installed_while_running() {
    let pod = InstallerPod::new();
    let _installer = pod.spawn(&["--interval", "0.05"]);
    wait_for("the conflist", || pod.conflist().exists().then_some(()));
    let ptp = r#"{"cniVersion": "1.0.0", "name": "ptpnet", "type": "ptp", "ipam": {"type": "host-local"}}"#;
    fs::write(pod.path("networks/ptpnet.conf"), ptp).unwrap();
    let installed = pod.host("/etc/cni/net.d/ptpnet/ptpnet.conf");
    let content = wait_for("ptpnet on the host", || fs::read_to_string(&installed).ok());
    assert_eq!(content, ptp);
}

#[test]
fn sigterm_with_cleanup_on_exit_removes_only_the_configuration() {
    let pod = InstallerPod::new();
    let mut installer = pod.spawn(&["--cleanup-on-exit"]);
    wait_for("the conflist", || pod.conflist().exists().then_some(()));
    installer.signal(nix::sys::signal::Signal::SIGTERM);
    assert!(installer.wait_exit().success());
    assert!(!pod.conflist().exists());
    assert!(!pod.kubeconfig().exists());
    assert!(pod.bin("yh-genie").exists() && pod.bin("yonghui").exists(), "pods on the pod still need them for DEL");
}

#[test]
fn sigterm_without_cleanup_leaves_the_install() {
    let pod = InstallerPod::new();
    let mut installer = pod.spawn(&[]);
    wait_for("the conflist", || pod.conflist().exists().then_some(()));
    installer.signal(nix::sys::signal::Signal::SIGINT);
    assert!(installer.wait_exit().success());
    assert_installed(&pod, "token-1");
}

#[test]
fn the_conflist_waits_for_the_fabric_but_the_kubeconfig_does_not() {
    let pod = InstallerPod::new();
    let wait = ["--wait-for", "/run/flannel/subnet.env"];
    let out = pod.install_once(&wait);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/run/flannel/subnet.env does not exist yet"));
    assert!(pod.kubeconfig().exists() && !pod.conflist().exists());

    let mut args = wait.to_vec();
    args.extend(["--interval", "0.05"]);
    let _installer = pod.spawn(&args);
    let subnet_env = pod.host("/run/flannel/subnet.env");
    fs::create_dir_all(subnet_env.parent().unwrap()).unwrap();
    fs::write(&subnet_env, "FLANNEL_NETWORK=10.244.0.0/16\n").unwrap();
    wait_for("the conflist", || pod.conflist().exists().then_some(()));
    assert_installed(&pod, "token-1");
}

#[test]
fn beside_the_clusters_own_network_the_conflist_does_not_wait_for_the_fabric() {
    let pod = InstallerPod::new();
    let kindnet = r#"{"cniVersion":"0.3.1","name":"kindnet","plugins":[
        {"type":"ptp","ipam":{"type":"host-local","ranges":[[{"subnet":"10.244.0.0/24"}]]}},
        {"type":"portmap","capabilities":{"portMappings":true}}]}"#;
    let conf_dir = pod.host("/etc/cni/net.d");
    fs::create_dir_all(&conf_dir).unwrap();
    fs::write(conf_dir.join("10-kindnet.conflist"), kindnet).unwrap();
    let bin_dir = pod.host("/opt/cni/bin");
    fs::create_dir_all(&bin_dir).unwrap();
    for plugin in ["ptp", "host-local", "portmap"] {
        fs::write(bin_dir.join(plugin), "#!/bin/sh\n").unwrap();
        fs::set_permissions(bin_dir.join(plugin), fs::Permissions::from_mode(0o755)).unwrap();
    }
    // The shipped DaemonSet's --wait-for names flannel's file, which kindnet never writes.
    let out = pod.command_with_default("auto", &["--once", "--wait-for", "/run/flannel/subnet.env"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ok(&out);
    assert!(stderr.contains("not waiting for /run/flannel/subnet.env"), "{stderr}");
    let conflist = fs::read_to_string(pod.conflist()).unwrap();
    assert!(conflist.contains("portMappings"), "kindnet's capabilities declared: {conflist}");
}

#[test]
fn a_conflist_renamed_away_by_cilium_is_not_written_back_until_the_admin_says() {
    let pod = InstallerPod::new();
    assert_ok(&pod.install_once(&[]));
    let renamed = pod.host("/etc/cni/net.d/00-yh-genie.conflist.cilium_bak");
    fs::rename(pod.conflist(), &renamed).unwrap();
    let out = pod.install_once(&[]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cilium_bak") && stderr.contains("cni.exclusive=false"), "{stderr}");
    assert!(!pod.conflist().exists(), "no rename war");

    let _installer = pod.spawn(&["--interval", "0.05"]);
    std::thread::sleep(Duration::from_millis(500));
    assert!(!pod.conflist().exists() && renamed.exists(), "still no rename war");
    // The admin set cni.exclusive=false and deleted Cilium's backup: the conflist is back.
    fs::remove_file(&renamed).unwrap();
    wait_for("the conflist", || pod.conflist().exists().then_some(()));
    assert_installed(&pod, "token-1");
}

#[test]
fn without_credentials_nothing_points_the_runtime_at_yh_genie() {
    let pod = InstallerPod::new();
    fs::remove_file(pod.path("sa/token")).unwrap();
    let out = pod.install_once(&[]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("service-account token") && stderr.contains("sa/token"), "{stderr}");
    assert!(!pod.conflist().exists(), "a conflist without its kubeconfig");
}

#[test]
fn a_bad_network_file_is_named_but_the_rest_is_installed() {
    let pod = InstallerPod::new();
    fs::write(pod.path("networks/broken.conflist"), "{ not json").unwrap();
    let out = pod.install_once(&[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("broken.conflist: not valid JSON"));
    assert!(!pod.host("/etc/cni/net.d/broken").exists());
    assert_installed(&pod, "token-1");
}

#[test]
fn a_running_installer_installs_a_bad_network_once_fixed() {
    let pod = InstallerPod::new();
    let broken = pod.path("networks/late.conflist");
    fs::write(&broken, "{ not json").unwrap();
    let _installer = pod.spawn(&["--interval", "0.05"]);
    wait_for("the conflist", || pod.conflist().exists().then_some(()));
    let fixed = r#"{"cniVersion": "1.0.0", "name": "late", "plugins": [{"type": "ptp"}]}"#;
    fs::write(&broken, fixed).unwrap();
    // Only a running installer can pick the fix up.
    let installed = pod.host("/etc/cni/net.d/late/late.conflist");
    assert_eq!(wait_for("the fixed network", || fs::read_to_string(&installed).ok()), fixed);
}

#[test]
fn usage_errors_exit_2_naming_the_problem() {
    let pod = InstallerPod::new();
    let out = pod.install_once(&["--frobnicate"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unexpected argument '--frobnicate'"));
    let out = pod.command(&["--once"]).env_remove("KUBERNETES_SERVICE_HOST").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("KUBERNETES_SERVICE_HOST is not set"));
    let out = pod.command(&[]).env("YH_GENIE_ONCE", "perhaps").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("yh-genie install: YH_GENIE_ONCE must be true or false, not \"perhaps\""), "{stderr}");
    assert!(pod.snapshot().len() == 1, "nothing but the empty root");
}

#[test]
fn flags_come_from_the_environment_when_the_command_line_leaves_them_out() {
    let pod = InstallerPod::new();
    let out = pod.command(&[]).env("YH_GENIE_ONCE", "yes").env("YH_GENIE_DATA_DIR", "").output().unwrap();
    assert_ok(&out);
    assert_installed(&pod, "token-1");
}

/// What the conf dir shows a runtime that watches it (containerd's fsnotify watch, not recursive,
/// reloads on each event and logs an error for each while no configuration is complete): the
/// names of every event in `dir` since the watch began, `dir`'s own (no name) left out.
fn names_seen(inotify: &nix::sys::inotify::Inotify) -> BTreeMap<String, usize> {
    let mut seen = BTreeMap::new();
    loop {
        match inotify.read_events() {
            Ok(events) => {
                for name in events.into_iter().filter_map(|e| e.name) {
                    *seen.entry(name.to_string_lossy().into_owned()).or_insert(0) += 1;
                }
            }
            Err(nix::errno::Errno::EAGAIN) => return seen,
            Err(e) => panic!("reading inotify events: {e}"),
        }
    }
}

/// Whether, during an install, the conflist sees a write (IN_MODIFY) after it is in place
/// (IN_MOVED_TO), as containerd needs to reload.
fn wrote_after_in_place(conf_dir: &Path, pod: &InstallerPod) -> bool {
    use nix::sys::inotify::AddWatchFlags;
    let inotify = watch(conf_dir);
    fs::remove_file(pod.conflist()).unwrap();
    assert_ok(&pod.install_once(&[]));
    let mut in_place = false;
    while let Ok(events) = inotify.read_events() {
        for e in events.iter().filter(|e| e.name.as_deref() == Some(std::ffi::OsStr::new("00-yh-genie.conflist"))) {
            in_place |= e.mask.contains(AddWatchFlags::IN_MOVED_TO);
            if in_place && e.mask.contains(AddWatchFlags::IN_MODIFY) {
                return true;
            }
        }
    }
    false
}

fn watch(dir: &Path) -> nix::sys::inotify::Inotify {
    use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
    let inotify = Inotify::init(InitFlags::IN_NONBLOCK).unwrap();
    inotify.add_watch(dir, AddWatchFlags::IN_ALL_EVENTS).unwrap();
    inotify
}

#[test]
fn the_watched_conf_dir_sees_only_complete_files_appear() {
    let pod = InstallerPod::new();
    let conf_dir = pod.host("/etc/cni/net.d");
    fs::create_dir_all(&conf_dir).unwrap();
    let inotify = watch(&conf_dir);
    assert_ok(&pod.install_once(&[]));
    let seen = names_seen(&inotify);
    let finals = ["00-yh-genie.conflist", "yh-genie.d", "yonghui"];
    assert!(seen.keys().all(|name| finals.contains(&name.as_str())), "events in the conf dir: {seen:?}");
    assert!(seen.contains_key("00-yh-genie.conflist"), "the watch works: {seen:?}");
    // containerd reloads on a write, rename or removal in its conf dir, not on a create (which a
    // rename into it is): the complete conflist is written to (its bytes untouched) once in place.
    assert!(wrote_after_in_place(&conf_dir, &pod), "a write event of the complete conflist");

    // A rewrite of the conflist (a selector key more) and of a network file (its own dir, too).
    let network_dir = conf_dir.join("yonghui");
    let in_network_dir = watch(&network_dir);
    fs::write(pod.path("networks/yonghui.conflist"), YONGHUI.replace("1.0.0", "0.4.0")).unwrap();
    let before = fs::read(pod.conflist()).unwrap();
    fs::write(pod.path("selector.json"), r#"{"networkStatus": "never"}"#).unwrap();
    let selector_config = pod.path("selector.json").display().to_string();
    assert_ok(&pod.install_once(&["--selector-config", &selector_config]));
    assert_ne!(fs::read(pod.conflist()).unwrap(), before, "the conflist was rewritten");
    let seen = names_seen(&inotify);
    assert!(seen.keys().all(|name| finals.contains(&name.as_str())), "events in the conf dir: {seen:?}");
    assert!(seen.contains_key("00-yh-genie.conflist"), "{seen:?}");
    let seen = names_seen(&in_network_dir);
    assert_eq!(seen.keys().collect::<Vec<_>>(), ["yonghui.conflist"], "events in the network's dir");
}

/// An installer killed before its rename left a temp file where it stages them: the next pass
/// removes it; a live writer's stays.
#[test]
fn a_killed_writers_temp_files_are_swept() {
    let pod = InstallerPod::new();
    let conf_dir = pod.host("/etc/cni/net.d");
    assert_ok(&pod.install_once(&[]));
    let staging = conf_dir.join("yh-genie.d");
    let mut exited = Command::new("true").spawn().unwrap();
    exited.wait().unwrap();
    let dead = staging.join(format!(".00-yh-genie.conflist.tmp-{}-0123456789ab", exited.id()));
    let live = staging.join(format!(".yonghui.conflist.tmp-{}-0123456789ab", std::process::id()));
    fs::write(&dead, "{").unwrap();
    fs::write(&live, "{").unwrap();
    assert_ok(&pod.install_once(&[]));
    assert!(!dead.exists(), "a killed writer's temp file is swept");
    assert!(live.exists(), "a live writer's stays");
}
