//! `yh-genie attach-worker`: the DaemonSet's privileged container when `dynamicNetworks` is on
//! (`programs::selector::dynamic::worker`).

use crate::node::paths::CONFLIST as DEFAULT_CONFIG_FILE;
use crate::node::paths::WORKER_SOCKET as DEFAULT_SOCKET;
use crate::programs::selector::dynamic::worker::{self, Options};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
#[command(
    about = "attach and detach running pods' networks as the node agent asks (dynamicNetworks; the DaemonSet's \
             privileged container runs it)",
    before_help = "yh-genie attach-worker: attaches and detaches the networks of running pods when the node agent asks
(dynamicNetworks)."
)]
pub struct AttachWorkerArgs {
    /// the host's / as this container sees it; entered first (/: none)
    #[arg(long, value_name = "DIR", default_value = "/")]
    host_root: PathBuf,
    /// the selector's configuration on the host
    #[arg(long, value_name = "FILE", default_value = DEFAULT_CONFIG_FILE)]
    config: PathBuf,
    /// where to listen on the host
    #[arg(long, value_name = "PATH", default_value = DEFAULT_SOCKET)]
    socket: PathBuf,
}

impl AttachWorkerArgs {
    /// The worker's options: every path absolute.
    pub fn options(&self) -> Result<Options, String> {
        let absolute = |flag: &str, path: &PathBuf| {
            if path.is_absolute() { Ok(path.clone()) } else { Err(format!("--{flag} needs an absolute path")) }
        };
        Ok(Options {
            host_root: absolute("host-root", &self.host_root)?,
            config: absolute("config", &self.config)?,
            socket: absolute("socket", &self.socket)?,
        })
    }
}

/// Run `yh-genie attach-worker` until it is killed; the exit code if it cannot start (1), or if the
/// options are unusable (2).
pub fn run(args: &AttachWorkerArgs) -> i32 {
    match args.options() {
        Ok(options) => worker::run(&options),
        Err(e) => {
            eprintln!("yh-genie attach-worker: {e}");
            2
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Args, FromArgMatches};

    fn parse(args: &[&str]) -> Result<Options, String> {
        let command = AttachWorkerArgs::augment_args(clap::Command::new("attach-worker"));
        let matches =
            command.try_get_matches_from(std::iter::once(&"attach-worker").chain(args)).map_err(|e| e.to_string())?;
        AttachWorkerArgs::from_arg_matches(&matches).map_err(|e| e.to_string())?.options()
    }

    #[test]
    fn options_default_to_the_hosts_paths() {
        assert_eq!(
            parse(&[]).unwrap(),
            Options {
                host_root: "/".into(),
                config: DEFAULT_CONFIG_FILE.into(),
                socket: "/run/yh-genie/dynamic-networks.sock".into()
            }
        );
        assert_eq!(parse(&["--host-root=/host"]).unwrap().host_root, PathBuf::from("/host"));
        assert!(parse(&["--host-root", "host"]).unwrap_err().contains("--host-root needs an absolute path"));
        assert!(parse(&["--nope", "/x"]).unwrap_err().contains("unexpected argument '--nope'"));
    }
}
