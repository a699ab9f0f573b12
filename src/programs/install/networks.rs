//! Network confs shipped to the node: each `NAME.conflist`, `NAME.conf` or `NAME.json` in the source
//! directory (typically a mounted ConfigMap, one key per network) becomes `<confDir>/NAME/<file>`,
//! where the selector finds the network NAME. Each file is checked first as the selector will load
//! it, so a typo fails here, naming the file, instead of at a pod's ADD.
//!
//! Files are never deleted: a network dropped from the source may still be in use by running pods.

use super::files::{self, Change};
use crate::programs::selector::netconf::confdir::{CONF_EXTENSIONS, parse_conf};
use anyhow::{Context, anyhow};
use std::path::{Path, PathBuf};

/// One installed (or already current) network file.
#[derive(Debug, PartialEq)]
pub struct Installed {
    pub path: PathBuf,
    pub change: Change,
}

/// Install every network in `source` into `conf_dir` (a local path: the host conf dir under the host
/// root), each file through a temp file in `staging` (`files::ensure_conf_file`). `reserved` names
/// entries of the conf dir that are not networks. Good files are installed even when others are
/// bad; the error then lists every bad one.
pub fn sync(source: &Path, conf_dir: &Path, staging: &Path, reserved: &[&str]) -> anyhow::Result<Vec<Installed>> {
    let entries =
        std::fs::read_dir(source).with_context(|| format!("reading the networks dir {}", source.display()))?;
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.with_context(|| format!("reading the networks dir {}", source.display()))?;
        // A mounted ConfigMap holds `..data` and timestamped dirs beside the key symlinks: skip dot names.
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with('.') {
            names.push(name);
        }
    }
    names.sort();
    let mut installed = Vec::new();
    let mut problems = Vec::new();
    for name in names {
        match install_one(&source.join(&name), &name, conf_dir, staging, reserved) {
            Ok(done) => installed.push(done),
            Err(e) => problems.push(format!("{e:#}")),
        }
    }
    if problems.is_empty() { Ok(installed) } else { Err(anyhow!("{}", problems.join("; "))) }
}

fn install_one(
    file: &Path,
    name: &str,
    conf_dir: &Path,
    staging: &Path,
    reserved: &[&str],
) -> anyhow::Result<Installed> {
    let (network, _) = name
        .rsplit_once('.')
        .filter(|(network, ext)| !network.is_empty() && CONF_EXTENSIONS.contains(ext))
        .ok_or_else(|| anyhow!("{}: a network file is named NAME.conflist, NAME.conf or NAME.json", file.display()))?;
    if reserved.contains(&network) {
        return Err(anyhow!("{}: {network:?} is reserved for yh-genie's own files", file.display()));
    }
    let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    parse_conf(&bytes, file)?;
    let dir = conf_dir.join(network);
    files::ensure_dir(&dir, 0o755).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(name);
    let change = files::ensure_conf_file(&path, staging, &bytes, 0o644)
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(Installed { path, change })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    const YONGHUI: &str = r#"{"cniVersion": "1.0.0", "name": "yonghui", "plugins": [{"type": "yonghui"}]}"#;
    const PTP: &str = r#"{"cniVersion": "1.0.0", "name": "ptpnet", "type": "ptp", "ipam": {"type": "host-local"}}"#;

    /// A ConfigMap's volume in `dir`/src, with its internal timestamped directory and two network
    /// files, and the conf dir `dir`/net.d to install them in.
    fn configmap_volume(dir: &Path) -> (PathBuf, PathBuf) {
        let (src, conf) = (dir.join("src"), dir.join("net.d"));
        fs::create_dir_all(src.join("..2024_01_01_00_00_00.1")).unwrap();
        fs::write(src.join("yonghui.conflist"), YONGHUI).unwrap();
        fs::write(src.join("ptpnet.conf"), PTP).unwrap();
        (src, conf)
    }

    #[test]
    fn each_network_is_installed_in_its_own_dir() {
        let d = tempfile::tempdir().unwrap();
        let (src, conf) = configmap_volume(d.path());
        let done = sync(&src, &conf, &conf.join("yh-genie.d"), &["yh-genie.d"]).unwrap();
        assert!(done.iter().all(|i| i.change == Change::Written));
        assert_eq!(fs::read_to_string(conf.join("yonghui/yonghui.conflist")).unwrap(), YONGHUI);
        assert_eq!(fs::read_to_string(conf.join("ptpnet/ptpnet.conf")).unwrap(), PTP);
    }

    #[test]
    fn the_configmaps_internals_are_skipped() {
        let d = tempfile::tempdir().unwrap();
        let (src, conf) = configmap_volume(d.path());
        let done = sync(&src, &conf, &conf.join("yh-genie.d"), &["yh-genie.d"]).unwrap();
        assert_eq!(done.len(), 2);
    }

    #[test]
    fn a_second_sync_of_the_same_files_changes_nothing() {
        let d = tempfile::tempdir().unwrap();
        let (src, conf) = configmap_volume(d.path());
        sync(&src, &conf, &conf.join("yh-genie.d"), &["yh-genie.d"]).unwrap();
        let again = sync(&src, &conf, &conf.join("yh-genie.d"), &["yh-genie.d"]).unwrap();
        assert!(again.iter().all(|i| i.change == Change::Unchanged));
    }

    /// Syncs a good network file beside four bad ones into `dir`/net.d: the error, and the conf dir.
    fn sync_with_bad_files(dir: &Path) -> (String, PathBuf) {
        let (src, conf) = (dir.join("src"), dir.join("net.d"));
        fs::create_dir_all(&src).unwrap();
        fs::write(src.join("yonghui.conflist"), YONGHUI).unwrap();
        fs::write(src.join("broken.conflist"), "{").unwrap();
        fs::write(src.join("README"), "hi").unwrap();
        fs::write(src.join("yh-genie.d.conf"), PTP).unwrap();
        fs::write(src.join("loop.conf"), r#"{"cniVersion": "1.0.0", "name": "loop", "type": "yh-genie"}"#).unwrap();
        let err = format!("{:#}", sync(&src, &conf, &conf.join("yh-genie.d"), &["yh-genie.d"]).unwrap_err());
        (err, conf)
    }

    #[test]
    fn each_bad_network_file_is_named_with_its_fault() {
        let d = tempfile::tempdir().unwrap();
        let (err, _) = sync_with_bad_files(d.path());
        assert!(err.contains("broken.conflist: not valid JSON"), "{err}");
        assert!(err.contains("README: a network file is named"), "{err}");
        assert!(err.contains("reserved"), "{err}");
        assert!(err.contains("loop.conf: plugins[0].type is yh-genie"), "{err}");
    }

    #[test]
    fn bad_network_files_do_not_block_good_ones() {
        let d = tempfile::tempdir().unwrap();
        let (_, conf) = sync_with_bad_files(d.path());
        assert!(conf.join("yonghui/yonghui.conflist").exists());
        assert!(!conf.join("broken").exists());
    }
}
