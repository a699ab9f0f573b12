//! `yh-genie install`: what the DaemonSet runs on every node. It puts this binary into the host's
//! CNI bin dir under the selector's name with the built-in plugins' names linked to it, installs the
//! network confs, writes the selector's kubeconfig from the pod's service account, and only then
//! `00-yh-genie.conflist`, so the runtime never sees a conflist whose binary or kubeconfig is
//! missing. Then it keeps watch: the kubelet rotates the token, ConfigMaps change, and each poll
//! converges the files again, rewriting only what differs.
//!
//! Everything is idempotent and atomic (see `files`), so a second installer, a restart mid-way or
//! two installers racing leave one consistent, complete set of files.
//!
//! With `--agent` the same process runs the node agent (`crate::programs::agent`) on a thread of its own: one
//! container, one image. The agent restarts itself when it fails; the installer's loop never waits
//! for it.

mod cluster_network;
mod conflist;
mod files;
mod kubeconfig;
mod networks;
mod options;

pub use options::Options;

use crate::platform::stop_signals::StopSignals;
use crate::programs::agent::AgentSettings;
use anyhow::{Context, bail};
use files::Change;
use kubeconfig::ServiceAccount;
use std::path::{Path, PathBuf};
use tracing::{error, info, warn};

/// Where the kernel keeps the running binary; still readable if the file it came from was replaced.
const SELF_EXE: &str = "/proc/self/exe";

/// Install as `opts` say; returns the exit code (1: failed).
pub fn main(opts: &Options) -> i32 {
    crate::platform::logging::init_stderr_log();
    match run(opts) {
        Ok(()) => 0,
        Err(e) => {
            error!("{e:#}");
            1
        }
    }
}

/// Where a converge pass that could write the kubeconfig ended.
#[derive(Debug, PartialEq)]
struct Outcome {
    /// The `--wait-for` file that is missing, holding back the conflist; `None` once it is written.
    waiting_for: Option<PathBuf>,
    /// The `--wait-for` files not waited for, because the default network is the cluster's own,
    /// read in place: its own file and plugins say when it is ready.
    not_waited_for: Vec<PathBuf>,
    /// The network files that could not be installed (every other one was), and why.
    bad_networks: Option<String>,
    /// Why the cluster's network, read in place as the default one, cannot network a pod yet.
    default_not_ready: Option<String>,
    /// Why the conflist is not written back although it is missing (another network renamed it
    /// away); `None` when it is written.
    held_back: Option<String>,
}

/// What Cilium with `cni.exclusive=true` appends to every other CNI configuration it renames away.
const CILIUM_RENAMED: &str = ".cilium_bak";

fn run(opts: &Options) -> anyhow::Result<()> {
    // Before any other thread exists, so that every thread inherits the blocked mask.
    let stop = if opts.once { None } else { Some(StopSignals::listen()?) };
    if !opts.host_root.is_dir() {
        bail!("the host root {} is not a directory", opts.host_root.display());
    }
    // Beside the loop, on a thread of its own: whatever happens to it, the files below stay right.
    // Its readiness includes the default network's, which the passes below find.
    let default_network =
        crate::programs::agent::NetworkReadiness::waiting("the installer has not written the conflist yet");
    let agent = opts
        .agent
        .as_ref()
        .map(|settings| crate::programs::agent::spawn(agent_options(opts, settings, &default_network)))
        .transpose()?;
    install_binaries(opts)?;
    // A first pass that cannot write the kubeconfig or the conflist is a broken setup: fail, so
    // the pod crash-loops where everyone sees it.
    let first = converge(opts)?;
    note_default_network(&default_network, &first);
    // An installer killed between the conflist's rename and its announcement left a runtime that
    // did not reload: once per start, the conflist in place is announced again.
    let conflist = opts.on_host(&opts.conf_dir.join(conflist::FILE_NAME));
    if first.waiting_for.is_none() && first.held_back.is_none() {
        files::announce(&conflist).with_context(|| format!("announcing {}", conflist.display()))?;
    }
    let Some(stop) = stop else {
        if let Some(path) = first.waiting_for {
            bail!("{} does not exist yet, so the conflist was not written", path.display());
        }
        if let Some(problems) = first.bad_networks {
            bail!("{problems}");
        }
        if let Some(why) = first.held_back {
            bail!("{why}");
        }
        log_not_waited_for(&first.not_waited_for);
        info!("installed");
        return Ok(());
    };
    let mut last = Ok(first);
    report(&last);
    loop {
        if let Some(signal) = stop.wait(opts.interval) {
            info!("{signal}: stopping");
            if let Some(agent) = &agent {
                agent.stop();
            }
            return if opts.cleanup_on_exit { cleanup(opts) } else { Ok(()) };
        }
        // From here on, failures are logged and retried: a ConfigMap mid-edit, a token mid-rotation.
        let now = converge(opts).map_err(|e| format!("{e:#}"));
        if let Ok(outcome) = &now {
            note_default_network(&default_network, outcome);
        }
        if now != last {
            report(&now);
        }
        last = now;
    }
}

/// The default network is ready once the conflist is written (every `--wait-for` file is there)
/// and, when it is the cluster's network read in place, once its file parses and its plugins are
/// installed.
fn note_default_network(readiness: &crate::programs::agent::NetworkReadiness, outcome: &Outcome) {
    match (&outcome.waiting_for, &outcome.held_back, &outcome.default_not_ready) {
        (Some(path), _, _) => readiness.set_waiting(&format!("the installer waits for {}", path.display())),
        (None, Some(why), _) | (None, None, Some(why)) => readiness.set_waiting(why),
        (None, None, None) => readiness.set_ready(),
    }
}

/// The agent of `--agent`: it reaches the API server with the pod's service account (the token
/// file itself, re-read as it rotates) and listens where the conflist tells the plugin to ask.
fn agent_options(
    opts: &Options,
    settings: &AgentSettings,
    default_network: &crate::programs::agent::NetworkReadiness,
) -> crate::programs::agent::Options {
    let access = crate::programs::agent::watching::Access::ServiceAccount {
        dir: opts.sa_dir.clone(),
        server: opts.api_server.clone(),
    };
    crate::programs::agent::Options::new(settings, access, opts.selector_config.clone(), default_network.clone(), |p| {
        opts.on_host(p)
    })
}

/// Log a converge outcome when it differs from the previous one, so a steady state is quiet.
fn report(outcome: &Result<Outcome, String>) {
    match outcome {
        Err(e) => error!("{e}"),
        Ok(Outcome { waiting_for, not_waited_for, bad_networks, default_not_ready, held_back }) => {
            log_not_waited_for(not_waited_for);
            if let Some(why) = held_back {
                error!("{why}");
                return;
            }
            if let Some(problems) = bad_networks {
                error!("{problems}");
            }
            if let Some(why) = default_not_ready {
                warn!("{why}");
            }
            match waiting_for {
                Some(path) => warn!("waiting for {} before writing the conflist", path.display()),
                None => info!("installed; watching for changes"),
            }
        }
    }
}

fn log_not_waited_for(files: &[PathBuf]) {
    if !files.is_empty() {
        let files: Vec<String> = files.iter().map(|p| p.display().to_string()).collect();
        info!(
            "not waiting for {} (--wait-for): the default network is the cluster's own, read in place, and is \
             ready once its file parses and its plugins are installed",
            files.join(", ")
        );
    }
}

/// The binary, streamed over atomically (safe while the runtime is executing the old one), then
/// the plugin names as symlinks to it (see `docs/install.md` for why links, not copies).
fn install_binaries(opts: &Options) -> anyhow::Result<()> {
    let bin_dir = opts.on_host(&opts.bin_dir);
    files::ensure_dir(&bin_dir, 0o755).with_context(|| format!("creating {}", bin_dir.display()))?;
    let binary = bin_dir.join(crate::programs::selector::NAME);
    let change = files::ensure_copy(Path::new(SELF_EXE), &binary, 0o755)
        .with_context(|| format!("installing {}", binary.display()))?;
    log_change(change, &binary);
    for name in crate::programs::plugins::NAMES {
        let link = bin_dir.join(name);
        let change = files::ensure_symlink(Path::new(crate::programs::selector::NAME), &link)
            .with_context(|| format!("linking {}", link.display()))?;
        log_change(change, &link);
    }
    Ok(())
}

/// One pass over the configuration files, in the order that keeps the runtime safe: kubeconfig and
/// networks first, the conflist (which makes the runtime call yh-genie) last. A bad network file
/// holds back neither the other networks nor the conflist; it is reported in the outcome.
fn converge(opts: &Options) -> anyhow::Result<Outcome> {
    let conf_dir = opts.on_host(&opts.conf_dir);
    files::ensure_dir(&conf_dir, 0o755).with_context(|| format!("creating {}", conf_dir.display()))?;

    let sa = ServiceAccount::read(&opts.sa_dir)?;
    let kubeconfig = opts.on_host(&conflist::kubeconfig_path(opts));
    let state_dir = kubeconfig.parent().expect("the kubeconfig path has a parent");
    files::ensure_dir(state_dir, 0o700).with_context(|| format!("creating {}", state_dir.display()))?;
    // The conf dir's files are staged in the state dir; a killed installer's temp files stay there.
    for name in crate::platform::durable::remove_abandoned_temps(state_dir)
        .with_context(|| format!("removing abandoned temp files in {}", state_dir.display()))?
    {
        info!("removed {}, left by a writer that was killed", state_dir.join(name).display());
    }
    let change = files::ensure_file(&kubeconfig, &kubeconfig::render(&opts.api_server, &sa), 0o600)
        .with_context(|| format!("writing {}", kubeconfig.display()))?;
    log_change(change, &kubeconfig);

    let bad_networks = match &opts.networks_dir {
        Some(source) => match networks::sync(source, &conf_dir, state_dir, &[conflist::STATE_DIR]) {
            Ok(installed) => {
                for i in installed {
                    log_change(i.change, &i.path);
                }
                None
            }
            Err(e) => Some(format!("{e:#}")),
        },
        None => None,
    };

    let extra = match &opts.selector_config {
        Some(path) => conflist::read_selector_config(path)?,
        None => Default::default(),
    };
    // `--wait-for` names what yh-genie's own default network needs (the shipped DaemonSet: the
    // fabric's subnet.env for yonghui). Beside the cluster's own network that file may never come:
    // the network in place is waited for by its own readiness instead.
    let in_place = cluster_network::read(opts, &extra);
    let not_waited_for = if in_place.is_some() { opts.wait_for.clone() } else { Vec::new() };
    let in_place = in_place.unwrap_or_default();
    let default_not_ready = in_place.not_ready;
    if not_waited_for.is_empty()
        && let Some(missing) = opts.wait_for.iter().find(|p| !opts.on_host(p).exists())
    {
        let waiting_for = Some(missing.clone());
        return Ok(Outcome { waiting_for, not_waited_for, bad_networks, default_not_ready, held_back: None });
    }
    let path = conf_dir.join(conflist::FILE_NAME);
    // Writing it back would start a rename war with Cilium, which renames it again on every change.
    let renamed = conf_dir.join(format!("{}{CILIUM_RENAMED}", conflist::FILE_NAME));
    if !path.exists() && renamed.exists() {
        let why = format!(
            "{} was renamed to {}: Cilium with cni.exclusive=true renames every other CNI configuration away, so the \
             runtime calls Cilium alone. Not writing it back (Cilium would rename it again); this node's network is \
             not ready. Set cni.exclusive=false in Cilium's Helm values, then delete {}",
            path.display(),
            renamed.display(),
            renamed.display()
        );
        return Ok(Outcome {
            waiting_for: None,
            not_waited_for,
            bad_networks,
            default_not_ready,
            held_back: Some(why),
        });
    }
    let bytes = conflist::render(opts, extra, &in_place.capabilities);
    let change = files::ensure_conf_file(&path, state_dir, &bytes, 0o644)
        .with_context(|| format!("writing {}", path.display()))?;
    log_change(change, &path);
    Ok(Outcome { waiting_for: None, not_waited_for, bad_networks, default_not_ready, held_back: None })
}

/// On the way out (`--cleanup-on-exit`): the conflist first, so the runtime stops calling yh-genie
/// before its kubeconfig goes. Binaries stay: pods still on the node need them for DEL.
fn cleanup(opts: &Options) -> anyhow::Result<()> {
    let conflist = opts.on_host(&opts.conf_dir.join(conflist::FILE_NAME));
    let kubeconfig = opts.on_host(&conflist::kubeconfig_path(opts));
    for path in [conflist, kubeconfig] {
        crate::platform::durable::remove_durably(&path).with_context(|| format!("removing {}", path.display()))?;
        info!("removed {}", path.display());
    }
    Ok(())
}

fn log_change(change: Change, path: &Path) {
    if change == Change::Written {
        info!("wrote {}", path.display());
    }
}
