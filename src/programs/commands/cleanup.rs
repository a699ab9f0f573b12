//! `yh-genie cleanup`: what yh-genie's pods left on a node it was uninstalled from
//! (`programs::selector::cleanup`).

use crate::node::paths::{BIN_DIR, CONF_DIR, DATA_DIR};
use crate::programs::selector::cleanup::{self, Options};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
#[command(
    about = "after uninstalling: release the networks of pods that are gone (run on the node, as root)",
    before_help = "yh-genie cleanup: what yh-genie's pods left on a node it was uninstalled from.

Without 00-yh-genie.conflist the runtime sends a pod's DEL to the cluster's network alone, so the
pod's further networks keep their addresses, host state and yh-genie's records. For every pod whose
netns is gone, this DELs each of its networks from yh-genie's records and removes the records; pods
that still run are listed and kept. It refuses while 00-yh-genie.conflist exists. Exit status: 0
nothing is left, 1 an error (printed), 2 the command line is unusable, 3 pods that still run were
kept: run it again once they are deleted."
)]
pub struct CleanupArgs {
    /// the CNI configuration directory
    #[arg(long, value_name = "DIR", default_value = CONF_DIR)]
    conf_dir: PathBuf,
    /// the selector's dataDir, where its attachment records are
    #[arg(long, value_name = "DIR", default_value = DATA_DIR)]
    data_dir: PathBuf,
    /// the CNI plugins' directory
    #[arg(long, value_name = "DIR", default_value = BIN_DIR)]
    bin_dir: PathBuf,
}

/// Run `yh-genie cleanup`; returns the exit code.
pub fn run(args: &CleanupArgs) -> i32 {
    cleanup::run(&Options {
        conf_dir: args.conf_dir.clone(),
        data_dir: args.data_dir.clone(),
        bin_dir: args.bin_dir.clone(),
    })
}
