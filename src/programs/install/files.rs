//! Converging files on the host: each function makes one path what it should be, and touches nothing
//! when it already is. Writes go through `durable` (temp file in the same directory, fsync, rename),
//! so the CNI runtime, which may read or exec these files at any moment, sees the old or the new
//! version, never a torn one. "Unchanged" means no write and no rename: same inode, same mtime.

use crate::platform::durable;
use std::fs::{self, File};
use std::io::{self, Read};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::Path;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Unchanged,
    Written,
}

/// Create `dir` and its missing parents with `mode` (existing directories are left as they are).
pub fn ensure_dir(dir: &Path, mode: u32) -> io::Result<()> {
    fs::DirBuilder::new().recursive(true).mode(mode).create(dir)
}

/// Make `path` a regular file holding `content` with permission bits `mode`.
pub fn ensure_file(path: &Path, content: &[u8], mode: u32) -> io::Result<Change> {
    if is_regular_file_with_mode(path, mode)? && fs::read(path)? == content {
        return Ok(Change::Unchanged);
    }
    durable::write_atomic(path, content, mode)?;
    Ok(Change::Written)
}

/// `ensure_file` for a file of the runtime's conf dir, which the runtime watches (containerd
/// reloads on events there, and logs an error for each while no configuration is complete): the
/// temp file is made in `staging` (the installer's own directory in the conf dir: same
/// filesystem, not watched) and renamed into place, so the watched directory sees only the
/// complete file appear; then `announce`d, since containerd ignores the "create" a rename into the
/// directory is.
pub fn ensure_conf_file(path: &Path, staging: &Path, content: &[u8], mode: u32) -> io::Result<Change> {
    if is_regular_file_with_mode(path, mode)? && fs::read(path)? == content {
        return Ok(Change::Unchanged);
    }
    durable::write_atomic_staged(path, staging, mode, |f| io::Write::write_all(f, content))?;
    announce(path)?;
    Ok(Change::Written)
}

/// Make a watcher of `path`'s directory see a write of `path`, changing nothing in it: containerd
/// reloads its CNI configuration on write, rename and remove events of its conf dir, not on create
/// (a file created is written next, it expects). A truncate to the file's own length is a write
/// event (IN_MODIFY) of the complete file, its bytes untouched.
pub fn announce(path: &Path) -> io::Result<()> {
    let file = fs::OpenOptions::new().write(true).open(path)?;
    let len = file.metadata()?.len();
    file.set_len(len)
}

/// Make `path` a regular file with the same bytes as `source` and permission bits `mode`, streaming
/// (the binary is megabytes; the installer's memory limit stays small).
pub fn ensure_copy(source: &Path, path: &Path, mode: u32) -> io::Result<Change> {
    if is_regular_file_with_mode(path, mode)? && same_content(source, path)? {
        return Ok(Change::Unchanged);
    }
    let mut from = File::open(source)?;
    durable::write_atomic_with(path, mode, |to| io::copy(&mut from, to).map(drop))?;
    Ok(Change::Written)
}

/// Make `path` a symbolic link whose target is exactly `target`.
pub fn ensure_symlink(target: &Path, path: &Path) -> io::Result<Change> {
    match fs::read_link(path) {
        Ok(current) if current == target => return Ok(Change::Unchanged),
        // Not there, not a link, or pointing elsewhere: replace.
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound || e.kind() == io::ErrorKind::InvalidInput => {}
        Err(e) => return Err(e),
    }
    durable::symlink_atomic(target, path)?;
    Ok(Change::Written)
}

fn is_regular_file_with_mode(path: &Path, mode: u32) -> io::Result<bool> {
    match fs::symlink_metadata(path) {
        Ok(m) => Ok(m.file_type().is_file() && m.permissions().mode() & 0o7777 == mode),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

fn same_content(a: &Path, b: &Path) -> io::Result<bool> {
    let (mut a, mut b) = (File::open(a)?, File::open(b)?);
    if a.metadata()?.len() != b.metadata()?.len() {
        return Ok(false);
    }
    let (mut buf_a, mut buf_b) = (vec![0u8; 64 * 1024], vec![0u8; 64 * 1024]);
    loop {
        let n = read_full(&mut a, &mut buf_a)?;
        if n == 0 {
            return Ok(read_full(&mut b, &mut buf_b)? == 0);
        }
        if read_full(&mut b, &mut buf_b[..n])? != n || buf_a[..n] != buf_b[..n] {
            return Ok(false);
        }
    }
}

/// Read until `buf` is full or the file ends; returns how much was read.
fn read_full(f: &mut File, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match f.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn inode(p: &Path) -> u64 {
        fs::symlink_metadata(p).unwrap().ino()
    }

    #[test]
    fn file_is_rewritten_only_when_content_or_mode_differ() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        assert_eq!(ensure_file(&p, b"a", 0o644).unwrap(), Change::Written);
        let first = inode(&p);
        assert_eq!(ensure_file(&p, b"a", 0o644).unwrap(), Change::Unchanged);
        assert_eq!(inode(&p), first);
        assert_eq!(ensure_file(&p, b"a", 0o600).unwrap(), Change::Written);
        assert_eq!(fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(ensure_file(&p, b"b", 0o600).unwrap(), Change::Written);
        assert_eq!(fs::read(&p).unwrap(), b"b");
    }

    #[test]
    fn a_symlink_where_a_file_belongs_is_replaced_not_followed() {
        let d = tempfile::tempdir().unwrap();
        let elsewhere = d.path().join("elsewhere");
        fs::write(&elsewhere, b"a").unwrap();
        let p = d.path().join("f");
        std::os::unix::fs::symlink(&elsewhere, &p).unwrap();
        assert_eq!(ensure_file(&p, b"a", 0o644).unwrap(), Change::Written);
        assert!(fs::symlink_metadata(&p).unwrap().file_type().is_file());
        assert_eq!(fs::read(&elsewhere).unwrap(), b"a");
    }

    #[test]
    fn copy_compares_whole_content_across_buffer_boundaries() {
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("src");
        let dst = d.path().join("dst");
        let mut big = vec![7u8; 200 * 1024 + 3];
        fs::write(&src, &big).unwrap();
        assert_eq!(ensure_copy(&src, &dst, 0o755).unwrap(), Change::Written);
        assert_eq!(ensure_copy(&src, &dst, 0o755).unwrap(), Change::Unchanged);
        *big.last_mut().unwrap() = 8;
        fs::write(&src, &big).unwrap();
        assert_eq!(ensure_copy(&src, &dst, 0o755).unwrap(), Change::Written);
        assert_eq!(fs::read(&dst).unwrap(), big);
    }

    #[test]
    fn symlink_is_replaced_only_when_its_target_differs() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("yonghui");
        assert_eq!(ensure_symlink(Path::new("yh-genie"), &p).unwrap(), Change::Written);
        let first = inode(&p);
        assert_eq!(ensure_symlink(Path::new("yh-genie"), &p).unwrap(), Change::Unchanged);
        assert_eq!(inode(&p), first);
        assert_eq!(ensure_symlink(Path::new("other"), &p).unwrap(), Change::Written);
        fs::remove_file(&p).unwrap();
        fs::write(&p, b"a regular file").unwrap();
        assert_eq!(ensure_symlink(Path::new("yh-genie"), &p).unwrap(), Change::Written);
        assert_eq!(fs::read_link(&p).unwrap(), Path::new("yh-genie"));
    }
}
