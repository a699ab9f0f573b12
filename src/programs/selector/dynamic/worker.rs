//! `yh-genie attach-worker`: the DaemonSet's privileged container when `dynamicNetworks` is on. It
//! enters the node's root (`--host-root`, the host's `/` mounted with the host's mounts following),
//! so that every path is the one the runtime's calls see: the selector's conflist, the network
//! files, the plugins, the records, the attachment locks, the pods' netns. It listens on a root-only
//! unix socket beside the agent's and does what the agent asks, one pod at a time: it runs plugins,
//! the agent never does.

use super::reconcile::reconcile;
use crate::node::worker_protocol::{self as protocol, Answer, MAX_LINE, Request, VERSION};
use crate::programs::selector::config::SelectorConfig;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long one exchange with the agent may stay silent.
const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the worker runs (`yh-genie attach-worker --help`).
#[derive(Debug, PartialEq, Eq)]
pub struct Options {
    /// The host's `/` as this container sees it; entered first unless it is `/`.
    pub host_root: PathBuf,
    /// The selector's configuration on the host.
    pub config: PathBuf,
    /// Where to listen on the host.
    pub socket: PathBuf,
}

/// Run the worker until it is killed; the exit code if it cannot start (1).
pub fn run(options: &Options) -> i32 {
    let _ = tracing_subscriber::fmt().with_writer(std::io::stderr).with_ansi(false).with_target(false).try_init();
    match serve(options) {
        Ok(()) => 0,
        Err(e) => {
            tracing::error!("{e}");
            1
        }
    }
}

fn serve(options: &Options) -> Result<(), String> {
    if options.host_root != Path::new("/") {
        nix::unistd::chroot(&options.host_root)
            .and_then(|()| nix::unistd::chdir("/"))
            .map_err(|e| format!("cannot enter the host's root {}: {e}", options.host_root.display()))?;
    }
    let listener = bind(&options.socket).map_err(|e| format!("cannot listen on {}: {e}", options.socket.display()))?;
    tracing::info!("attach worker listening on {}", options.socket.display());
    for stream in listener.incoming() {
        match stream {
            Ok(stream) => {
                if let Err(e) = answer(&options.config, stream) {
                    tracing::warn!("an exchange with the agent failed: {e}");
                }
            }
            Err(e) => tracing::warn!("accepting a connection: {e}"),
        }
    }
    Ok(())
}

/// Listen on `path` (its directory root's, 0700; the socket 0600), replacing a stale socket.
fn bind(path: &Path) -> std::io::Result<UnixListener> {
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    }
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let listener = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

/// One request, one answer.
fn answer(config_file: &Path, stream: UnixStream) -> std::io::Result<()> {
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    let mut line = Vec::new();
    BufReader::new((&stream).take(MAX_LINE as u64)).read_until(b'\n', &mut line)?;
    let answer = match serde_json::from_slice::<Request>(&line) {
        Ok(request) if request.version == VERSION => match SelectorConfig::load_file(config_file) {
            Ok(config) => {
                let answer = reconcile(&config, &request);
                tracing::info!("pod {}/{} (uid {}): {answer:?}", request.namespace, request.name, request.uid);
                answer
            }
            Err(e) => Answer::Refused { why: format!("the selector's configuration: {e}") },
        },
        Ok(request) => Answer::Refused { why: format!("protocol version {} is not {VERSION}", request.version) },
        Err(e) => Answer::Refused { why: format!("the request does not parse: {e}") },
    };
    (&stream).write_all(&protocol::to_line(&answer))
}
