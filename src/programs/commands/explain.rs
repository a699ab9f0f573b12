//! `yh-genie explain`: which networks the selector gives a pod, and why
//! (`programs::selector::explain`).

use crate::node::paths::CONFLIST as DEFAULT_CONFIG_FILE;
use crate::programs::selector::explain::{self, Options};
use clap::builder::NonEmptyStringValueParser;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
#[command(
    about = "which network the selector gives a pod, and why (reads the API server and the conf dir; changes nothing)",
    before_help = "yh-genie explain: which networks the selector gives a pod, on which interfaces, and why.

Decides exactly as ADD would, from the selector's configuration, the conf dir and the API server,
without touching the node's networking or writing anything; then says whether the node agent holds
the pod and what ADD would do with its answer. Exit status: 0 the pod gets its networks, 1 an ADD
for it would fail (the error and its CNI code are printed), 2 the command line is unusable."
)]
pub struct ExplainArgs {
    /// the pod's namespace
    #[arg(short, long, value_name = "NS", default_value = "default", value_parser = NonEmptyStringValueParser::new())]
    namespace: String,
    /// the pod's name
    #[arg(short, long, value_name = "NAME", value_parser = NonEmptyStringValueParser::new())]
    pod: String,
    /// the selector's configuration
    #[arg(long, value_name = "FILE", default_value = DEFAULT_CONFIG_FILE)]
    config: PathBuf,
}

/// Run `yh-genie explain`; returns the exit code (0 explained, 1 the pod would get an error).
pub fn run(args: &ExplainArgs) -> i32 {
    explain::run(&Options { namespace: args.namespace.clone(), pod: args.pod.clone(), config: args.config.clone() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Args, FromArgMatches};

    fn parse(args: &[&str]) -> Result<Options, String> {
        let command = ExplainArgs::augment_args(clap::Command::new("explain"));
        let matches =
            command.try_get_matches_from(std::iter::once(&"explain").chain(args)).map_err(|e| e.to_string())?;
        let args = ExplainArgs::from_arg_matches(&matches).map_err(|e| e.to_string())?;
        Ok(Options { namespace: args.namespace, pod: args.pod, config: args.config })
    }

    #[test]
    fn options() {
        assert_eq!(
            parse(&["--namespace", "web", "--pod=p-0", "--config", "/c"]).unwrap(),
            Options { namespace: "web".into(), pod: "p-0".into(), config: "/c".into() }
        );
        let o = parse(&["-p", "x"]).unwrap();
        assert_eq!((o.namespace.as_str(), o.config.to_str()), ("default", Some(DEFAULT_CONFIG_FILE)));
        assert_eq!(parse(&["-n", "kube-system", "-p", "x"]).unwrap().namespace, "kube-system");
        assert!(parse(&[]).unwrap_err().contains("--pod <NAME>"));
        assert!(parse(&["--pod"]).unwrap_err().contains("a value is required"));
        assert!(parse(&["--pod="]).unwrap_err().contains("a value is required"));
        assert!(parse(&["--pod", "x", "--bogus"]).unwrap_err().contains("--bogus"));
    }
}
