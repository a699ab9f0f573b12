//! The binary's entry: a multi-call program. Called as `yonghui`, `yh-bridge`, `veth` or `router` it is
//! that CNI plugin; as anything else it is the selector, `yh-genie`. Without `CNI_COMMAND` it is a
//! command-line tool for operators.

use crate::platform::cni::skel::{self, Plugin};
use crate::programs::plugins;
use crate::programs::selector;
use std::path::Path;

pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The plugin this binary is when invoked as `argv0`.
pub fn plugin_for(argv0: &str) -> &'static dyn Plugin {
    let base = Path::new(argv0).file_name().and_then(|n| n.to_str()).unwrap_or_default();
    plugins::builtin(base).unwrap_or(&selector::Selector)
}

pub fn main() -> i32 {
    let args: Vec<String> = std::env::args().collect();
    let plugin = plugin_for(args.first().map(String::as_str).unwrap_or_default());
    if std::env::var_os("CNI_COMMAND").is_some() {
        return skel::run(plugin, crate::node::paths::NodePaths::from_env().attachment_locks());
    }
    let rest: Vec<&str> = args.iter().skip(1).map(String::as_str).collect();
    match rest.first().copied() {
        None | Some("-h" | "--help" | "help") => {
            print!("{}", help(plugin.name()));
            0
        }
        Some("install") => crate::programs::install::main(&rest[1..]),
        Some("explain") => selector::explain::run(&rest[1..]),
        Some("attach-worker") => selector::dynamic::worker::run(&rest[1..]),
        Some("-V" | "--version" | "version") => {
            println!(
                "{} {VERSION} (CNI spec versions {})",
                plugin.name(),
                crate::platform::cni::version::SUPPORTED.join(", ")
            );
            0
        }
        Some(other) => {
            eprintln!("{}: unknown command {other:?}; see --help", plugin.name());
            2
        }
    }
}

fn help(name: &str) -> String {
    format!(
        "{name} {VERSION}: yh-genie, a Kubernetes-aware multi-network selector for CNI.

This binary is a CNI plugin: container runtimes run it with CNI_COMMAND and friends in the
environment and the network configuration on stdin. Called as `yonghui`, `yh-bridge`, `veth` or
`router` it is that plugin; under any other name it is the selector `yh-genie`.

Usage (for people):
  {name} --help       this text
  {name} --version    version and supported CNI spec versions
  {name} install      put yh-genie on this node and keep it configured (see `{name} install --help`)
  {name} explain [--namespace NS] --pod NAME [--config FILE]
                      which network the selector gives a pod, and why (reads the API server
                      and the conf dir; changes nothing)
  {name} attach-worker [--host-root DIR]
                      attach and detach running pods' networks as the node agent asks
                      (dynamicNetworks; the DaemonSet's privileged container runs it)
"
    )
}

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
}
