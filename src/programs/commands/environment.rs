//! Flags from the environment. A flag that declares a variable (`--foo-bar`, `YH_GENIE_FOO_BAR`)
//! takes its value from it when the command line does not give the flag: a DaemonSet sets
//! variables from ConfigMaps and the downward API more easily than arguments.
//!
//! clap would read a declared variable itself, from the process's environment, when the command is
//! built. Here the variables are read through a lookup instead (the process's environment when the
//! binary runs; a map in the tests and in the check of the shipped DaemonSet), by the installer's
//! rules: a variable set to "" is unset; a switch's variable says true or false (`1`, `yes`, `0`,
//! `no`...); a repeatable flag's variable is a ':'-separated list. The values found go to clap as
//! flags, so clap parses and checks them as it does the command line's. `--help` still shows each
//! flag's variable.

use clap::parser::ValueSource;
use clap::{Arg, ArgAction, ArgMatches, Command};
use std::ffi::OsString;

/// An environment variable's value, if it is set.
pub type Lookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// Why a command line cannot be acted on.
#[derive(Debug)]
pub enum Error {
    /// clap's: a command line it refuses, or the help or version it was asked for.
    Clap(clap::Error),
    /// A variable that cannot stand for its flag: the command it is for, and why.
    Variable { command: String, message: String },
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Clap(e) => write!(f, "{e}"),
            Error::Variable { message, .. } => f.write_str(message),
        }
    }
}

/// A flag of the command (or of one of its subcommands) that declares a variable.
struct Variable {
    /// The subcommand whose flag it is; `None` for the command's own.
    command: Option<String>,
    id: String,
    long: String,
    name: String,
    kind: Kind,
}

enum Kind {
    /// `--once`, `--once=false`.
    Switch,
    /// `--wait-for` given again and again.
    List,
    Value,
}

/// Parse `args` (the program's name first) against `command` and one level of its subcommands, each
/// flag that the command line leaves out taken from its variable through `env`.
pub fn parse(command: Command, args: &[OsString], env: Lookup) -> Result<ArgMatches, Error> {
    let variables = declared(&command);
    let mut command = without_reading_the_environment(command);
    let given = command.try_get_matches_from_mut(args).map_err(Error::Clap)?;
    let (subcommand, matches) = match given.subcommand() {
        Some((name, matches)) => (Some(name), matches),
        None => (None, &given),
    };
    let mut from_environment = Vec::new();
    for variable in variables.iter().filter(|v| v.command.as_deref() == subcommand) {
        if matches.value_source(&variable.id) == Some(ValueSource::CommandLine) {
            continue;
        }
        let Some(value) = env(&variable.name).filter(|v| !v.is_empty()) else { continue };
        let long = &variable.long;
        match variable.kind {
            Kind::Switch => {
                let on = switch(&value).map_err(|why| Error::Variable {
                    command: subcommand.unwrap_or(command.get_name()).to_owned(),
                    message: format!("{} {why}, not {value:?}", variable.name),
                })?;
                from_environment.push(format!("--{long}={on}"));
            }
            Kind::List => {
                from_environment.extend(value.split(':').filter(|v| !v.is_empty()).map(|v| format!("--{long}={v}")))
            }
            Kind::Value => from_environment.push(format!("--{long}={value}")),
        }
    }
    if from_environment.is_empty() {
        return Ok(given);
    }
    // Right after the subcommand's name (or the program's): before anything the command line ends
    // its flags with.
    let at = match subcommand {
        Some(name) => 1 + args.iter().skip(1).position(|a| a == name).expect("the subcommand is in the arguments"),
        None => 0,
    } + 1;
    let mut args = args.to_vec();
    args.splice(at..at, from_environment.into_iter().map(OsString::from));
    command.try_get_matches_from_mut(args).map_err(Error::Clap)
}

/// The words a switch or its variable may say.
pub fn switch(value: &str) -> Result<bool, String> {
    match value.to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" => Ok(true),
        "0" | "false" | "no" => Ok(false),
        _ => Err("must be true or false".to_owned()),
    }
}

fn declared(command: &Command) -> Vec<Variable> {
    let own = command.get_arguments().map(|arg| (None, arg));
    let subcommands = command.get_subcommands().flat_map(|s| s.get_arguments().map(|arg| (Some(s.get_name()), arg)));
    own.chain(subcommands)
        .filter_map(|(command, arg)| {
            let name = arg.get_env()?.to_str().expect("variable names are ASCII").to_owned();
            let long = arg.get_long().expect("a flag with a variable has a long name").to_owned();
            let kind = match arg.get_action() {
                ArgAction::SetTrue => Kind::Switch,
                ArgAction::Append => Kind::List,
                _ => Kind::Value,
            };
            Some(Variable { command: command.map(str::to_owned), id: arg.get_id().to_string(), long, name, kind })
        })
        .collect()
}

/// `command` with no flag read from the environment by clap, each flag's variable shown in `--help`
/// as clap shows it, and each switch taking a word as its variable does: `--once` is `--once=true`.
fn without_reading_the_environment(command: Command) -> Command {
    let command = command.mut_args(with_variable_shown);
    let names: Vec<String> = command.get_subcommands().map(|s| s.get_name().to_owned()).collect();
    names.iter().fold(command, |command, name| command.mut_subcommand(name, |s| s.mut_args(with_variable_shown)))
}

fn with_variable_shown(arg: Arg) -> Arg {
    let Some(name) = arg.get_env().map(|n| n.to_string_lossy().into_owned()) else { return arg };
    let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
    let arg = arg.env(None::<&'static str>).help(format!("{help} [env: {name}]"));
    if !matches!(arg.get_action(), ArgAction::SetTrue) {
        return arg;
    }
    arg.action(ArgAction::Set)
        .num_args(0..=1)
        .require_equals(true)
        .default_missing_value("true")
        .default_value("false")
        .hide_default_value(true)
        .value_name("true|false")
        .value_parser(switch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn command() -> Command {
        Command::new("prog").subcommand(
            Command::new("sub")
                .arg(Arg::new("dir").long("dir").env("TEST_DIR").default_value("/d").help("a dir"))
                .arg(Arg::new("once").long("once").env("TEST_ONCE").action(ArgAction::SetTrue).help("once"))
                .arg(Arg::new("path").long("path").env("TEST_PATH").action(ArgAction::Append).help("paths"))
                .arg(Arg::new("plain").long("plain").help("no variable")),
        )
    }

    fn parse_sub(args: &[&str], env: &[(&str, &str)]) -> Result<ArgMatches, Error> {
        let env: BTreeMap<String, String> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let args: Vec<OsString> = ["prog", "sub"].iter().chain(args).map(OsString::from).collect();
        let matches = parse(command(), &args, &|k| env.get(k).cloned())?;
        Ok(matches.subcommand_matches("sub").unwrap().clone())
    }

    #[test]
    fn a_variable_stands_for_its_flag_when_the_command_line_leaves_it_out() {
        let m = parse_sub(&[], &[("TEST_DIR", "/env"), ("TEST_ONCE", "yes"), ("TEST_PATH", "/a::/b")]).unwrap();
        assert_eq!(m.get_one::<String>("dir").unwrap(), "/env");
        assert!(m.get_one::<bool>("once").unwrap());
        assert_eq!(m.get_many::<String>("path").unwrap().collect::<Vec<_>>(), ["/a", "/b"]);
        // The command line wins, a list replacing the variable's list; an empty variable is unset.
        let m = parse_sub(
            &["--dir", "/flag", "--once=false", "--path=/c"],
            &[("TEST_DIR", "/env"), ("TEST_ONCE", "1"), ("TEST_PATH", "/a")],
        )
        .unwrap();
        assert_eq!(m.get_one::<String>("dir").unwrap(), "/flag");
        assert!(!m.get_one::<bool>("once").unwrap());
        assert_eq!(m.get_many::<String>("path").unwrap().collect::<Vec<_>>(), ["/c"]);
        let m = parse_sub(&["--once"], &[("TEST_DIR", "")]).unwrap();
        assert_eq!((m.get_one::<String>("dir").unwrap().as_str(), m.get_one::<bool>("once")), ("/d", Some(&true)));
    }

    #[test]
    fn a_switchs_variable_must_say_true_or_false() {
        match parse_sub(&[], &[("TEST_ONCE", "perhaps")]) {
            Err(Error::Variable { command, message }) => {
                assert_eq!(
                    (command.as_str(), message.as_str()),
                    ("sub", "TEST_ONCE must be true or false, not \"perhaps\"")
                )
            }
            other => panic!("{other:?}"),
        }
        let Err(Error::Clap(e)) = parse_sub(&["--once=maybe"], &[]) else { panic!("--once=maybe was taken") };
        assert!(e.to_string().contains("--once") && e.to_string().contains("must be true or false"), "{e}");
    }

    #[test]
    fn help_shows_each_variable() {
        let mut command = without_reading_the_environment(command());
        let help = command.find_subcommand_mut("sub").unwrap().render_help().to_string();
        assert!(help.contains("a dir [env: TEST_DIR] [default: /d]"), "{help}");
        assert!(help.contains("--once[=<true|false>]") && help.contains("once [env: TEST_ONCE]\n"), "{help}");
        assert!(help.contains("no variable\n"), "{help}");
    }
}
