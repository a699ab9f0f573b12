//! The binary's entry: a multi-call program. Called as `yonghui`, `yh-bridge`, `veth` or `router` it
//! is that CNI plugin; as anything else it is the selector, `yh-genie`. With `CNI_COMMAND` in the
//! environment it speaks CNI; without, it is a command-line tool for operators, parsed by clap, one
//! file per command, each holding its flags and calling into its program:
//!
//! - `install`: the installer the DaemonSet runs (`programs::install`), and with `--agent` the node
//!   agent beside it;
//! - `agent`: the node agent alone, in the foreground (`programs::agent`);
//! - `explain`: which networks a pod gets, and why (`programs::selector::explain`);
//! - `cleanup`: after uninstalling, the networks of pods that are gone (`programs::selector::cleanup`);
//! - `attach_worker`: `attach-worker`, the dynamic networks' privileged container
//!   (`programs::selector::dynamic::worker`);
//!
//! and what they share: `agent` (also the node agent's flags, `install --agent`'s), `api_access` (`--sa-dir`,
//! `--api-server`), `host_path` (host paths are absolute), `environment` (a flag's environment
//! variable, read when the command line does not give the flag). clap answers `--help`, `-h`,
//! `help`, `--version` and `-V`.

pub mod agent;
pub mod api_access;
pub mod attach_worker;
pub mod cleanup;
pub mod environment;
pub mod explain;
pub mod host_path;
pub mod install;

use crate::platform::cni::skel::{self, Plugin};
use crate::programs::plugins;
use crate::programs::selector;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use environment::Lookup;
use std::ffi::OsString;
use std::path::Path;
use std::sync::LazyLock;

pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The plugin this binary is when invoked as `argv0`.
pub fn plugin_for(argv0: &str) -> &'static dyn Plugin {
    let base = Path::new(argv0).file_name().and_then(|n| n.to_str()).unwrap_or_default();
    plugins::builtin(base).unwrap_or(&selector::Selector)
}

pub fn main() -> i32 {
    let args: Vec<OsString> = std::env::args_os().collect();
    let plugin = plugin_for(args.first().and_then(|a| a.to_str()).unwrap_or_default());
    if std::env::var_os("CNI_COMMAND").is_some() {
        let locks = crate::node::paths::NodePaths::from_env();
        return skel::run(plugin, locks.attachment_locks(), &crate::programs::plugins::Registry);
    }
    run(plugin.name(), args, &|name| std::env::var(name).ok())
}

/// The command line for people.
#[derive(Parser, Debug)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    Install(Box<install::InstallArgs>),
    Agent(agent::AgentCommandArgs),
    Explain(explain::ExplainArgs),
    Cleanup(cleanup::CleanupArgs),
    AttachWorker(attach_worker::AttachWorkerArgs),
    /// `--version` as a word.
    #[command(hide = true)]
    Version,
}

/// The whole command line of the program called `name`, as `--help` shows it.
pub fn command(name: &'static str) -> clap::Command {
    let help = "{before-help}{usage-heading} {usage}\n\n{all-args}{after-help}";
    Cli::command()
        .name(name)
        .bin_name(name)
        .version(VERSION_AND_SPECS.as_str())
        .before_help(format!(
            "{name} {VERSION}: yh-genie, a Kubernetes-aware multi-network selector for CNI.

This binary is a CNI plugin: container runtimes run it with CNI_COMMAND and friends in the
environment and the network configuration on stdin. Called as `yonghui`, `yh-bridge`, `veth` or
`router` it is that plugin; under any other name it is the selector `yh-genie`. Without CNI_COMMAND
it is a tool for people:"
        ))
        .after_help(format!("`{name} COMMAND --help` says more of each command."))
        .help_template(help)
        .mut_subcommands(|command| command.help_template(help).next_line_help(true))
}

/// Parse the command line `args` (the program's name first) of the program called `name`, each
/// flag's variable read through `env`.
pub fn parse(name: &'static str, args: &[OsString], env: Lookup) -> Result<Cli, environment::Error> {
    let matches = environment::parse(command(name), args, env)?;
    Cli::from_arg_matches(&matches).map_err(environment::Error::Clap)
}

fn run(name: &'static str, mut args: Vec<OsString>, env: Lookup) -> i32 {
    // `yh-genie COMMAND help` is `yh-genie COMMAND --help`, as `yh-genie help COMMAND` is.
    if args.len() > 2 && args[2] == "help" {
        args[2] = "--help".into();
    }
    let cli = match parse(name, &args, env) {
        Ok(cli) => cli,
        Err(environment::Error::Clap(e)) => {
            let _ = e.print();
            return e.exit_code();
        }
        Err(environment::Error::Variable { command, message }) => {
            eprintln!("yh-genie {command}: {message}");
            return 2;
        }
    };
    match cli.command {
        None => {
            print!("{}", command(name).render_help());
            0
        }
        Some(Command::Install(args)) => install::run(&args, env),
        Some(Command::Agent(args)) => agent::run(&args, env),
        Some(Command::Explain(args)) => explain::run(&args),
        Some(Command::Cleanup(args)) => cleanup::run(&args),
        Some(Command::AttachWorker(args)) => attach_worker::run(&args),
        Some(Command::Version) => {
            println!("{name} {}", *VERSION_AND_SPECS);
            0
        }
    }
}

/// What `--version` says after the program's name.
static VERSION_AND_SPECS: LazyLock<String> =
    LazyLock::new(|| format!("{VERSION} (CNI spec versions {})", crate::platform::cni::version::SUPPORTED.join(", ")));

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argv0_picks_the_plugin() {
        assert_eq!(plugin_for("/opt/cni/bin/yonghui").name(), "yonghui");
        assert_eq!(plugin_for("yh-bridge").name(), "yh-bridge");
        assert_eq!(plugin_for("./veth").name(), "veth");
        assert_eq!(plugin_for("router").name(), "router");
        assert_eq!(plugin_for("/opt/cni/bin/yh-genie").name(), "yh-genie");
        assert_eq!(plugin_for("anything-else").name(), "yh-genie");
    }

    #[test]
    fn the_command_line_is_well_formed() {
        command("yh-genie").debug_assert();
    }
}
