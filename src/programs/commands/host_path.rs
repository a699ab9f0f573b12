//! Host paths in flags: as the host sees them, so absolute (the installer reaches them under its
//! `--host-root`, and writes them into the conflist as they are).

use std::path::PathBuf;

/// `path`, the value of `--{flag}`, if it is absolute; else the error saying so.
pub fn absolute(flag: &str, path: PathBuf) -> Result<PathBuf, String> {
    if path.is_absolute() {
        Ok(path)
    } else {
        Err(format!("--{flag} must be an absolute host path, not {:?}", path.display().to_string()))
    }
}
