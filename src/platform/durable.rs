//! State on disk: written whole or not at all, and durable before it is relied upon.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Write `bytes` to `path` atomically: a temp file in the same directory, fsync, rename, fsync of the
/// directory. A crash leaves either the old file or the new one, never a torn one. Creates the
/// directory (mode 0700) if needed. Concurrent writers of the same path leave one whole version.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    write_atomic_with(path, mode, |f| f.write_all(bytes))
}

/// `write_atomic` with the content written by `fill`, e.g. streamed from another file. `mode` is set
/// with fchmod before the rename, so the process umask cannot narrow it. Because the new content goes
/// to a new inode, replacing an executable that is running is safe (no "Text file busy"): processes
/// already running it keep the old inode, later execs get the new one.
pub fn write_atomic_with(path: &Path, mode: u32, fill: impl FnOnce(&mut File) -> io::Result<()>) -> io::Result<()> {
    replace(path, mode, fill, Durability::FileAndDirectory)
}

/// Write `bytes` to `path` atomically against a crash of the process, not of the machine: a temp
/// file renamed over `path`, nothing fsync'd. A process killed at any point leaves the old file or
/// the new one, whole; after a power loss the file may be the old one, absent, empty or torn, so
/// readers must take a file that does not parse as absent. For state that only matters while the
/// machine keeps running, beside durable state that stays valid without it (a record's results:
/// the sandboxes do not survive a power loss either). Costs no wait on the disk.
pub fn write_volatile(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    replace(path, mode, |f| f.write_all(bytes), Durability::None)
}

/// How much of a `replace` is made durable.
#[derive(Clone, Copy, PartialEq)]
enum Durability {
    /// The file and its directory: the new version survives a power loss.
    FileAndDirectory,
    /// Nothing: the new version survives a crash of the process.
    None,
}

fn replace(
    path: &Path,
    mode: u32,
    fill: impl FnOnce(&mut File) -> io::Result<()>,
    durability: Durability,
) -> io::Result<()> {
    let dir = parent_dir(path);
    fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    let tmp = write_temp_in(dir, path, mode, fill, durability == Durability::FileAndDirectory)?;
    crate::platform::crash_point::reached("write_atomic.before-rename");
    if let Err(e) = fs::rename(&tmp, path) {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    match durability {
        Durability::FileAndDirectory => {
            remove_abandoned_beside(path);
            File::open(dir)?.sync_all()
        }
        // No listing for debris either: what killed volatile writers leave is cleared by the
        // owner's sweep (`remove_abandoned_temps`), off the hot path.
        Durability::None => Ok(()),
    }
}

/// Remove the temp files that writes of `paths` (of one directory) left when their process died
/// before the rename: the next write of a file clears what a killed writer of it left. Best effort
/// and not made durable: such a file is debris, never state, whether or not it survives. It costs
/// a listing of the directory (tens of microseconds for a node's few hundred records).
fn remove_abandoned(paths: &[PathBuf]) {
    let Some(first) = paths.first() else { return };
    let Ok(entries) = fs::read_dir(parent_dir(first)) else { return };
    let names: Vec<String> = entries.filter_map(Result::ok).filter_map(|e| e.file_name().into_string().ok()).collect();
    for path in paths {
        for temp in abandoned_among(path, &names).unwrap_or_default() {
            let _ = fs::remove_file(temp);
        }
    }
}

/// `write_atomic_with`, the temp file made in `staging` (a directory of the same filesystem, not
/// watched) instead of beside `path`: for a directory that others watch, like a CNI runtime's conf
/// dir, which then sees only the complete file appear, by its rename, and no temp file come and go.
/// The temp files of writers killed before their rename stay in `staging`, for
/// `remove_abandoned_temps`.
pub fn write_atomic_staged(
    path: &Path,
    staging: &Path,
    mode: u32,
    fill: impl FnOnce(&mut File) -> io::Result<()>,
) -> io::Result<()> {
    fs::DirBuilder::new().recursive(true).mode(0o700).create(staging)?;
    let tmp = write_temp_in(staging, path, mode, fill, true)?;
    crate::platform::crash_point::reached("write_atomic.before-rename");
    if let Err(e) = fs::rename(&tmp, path) {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    File::open(parent_dir(path))?.sync_all()
}

/// Remove the temp files in `dir` (of any path) whose writers no longer exist; the names removed.
pub fn remove_abandoned_temps(dir: &Path) -> io::Result<Vec<String>> {
    remove_temps_where(dir, gone)
}

/// Remove every temp file in `dir`, whatever the pid in its name: for a directory whose one writer
/// is the caller, while it writes nothing there, so that each temp file is a killed writer's. Its
/// pid cannot tell: a writer started again in a container of its own (a pid namespace) may well
/// have the pid the killed one had. The names removed.
pub fn remove_every_temp(dir: &Path) -> io::Result<Vec<String>> {
    remove_temps_where(dir, |_| true)
}

/// Remove the temp files in `dir` whose writer's pid `abandoned` says: the names removed.
fn remove_temps_where(dir: &Path, abandoned: impl Fn(i32) -> bool) -> io::Result<Vec<String>> {
    let names: Vec<String> = match fs::read_dir(dir) {
        Ok(entries) => {
            entries.filter_map(Result::ok).filter_map(|e| e.file_name().to_str().map(String::from)).collect()
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut removed = Vec::new();
    for name in names {
        let writer = name.strip_prefix('.').and_then(|rest| rest.rsplit_once(".tmp-")).and_then(|(_, w)| writer_pid(w));
        if writer.is_some_and(&abandoned) {
            match fs::remove_file(dir.join(&name)) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => removed.push(name),
            }
        }
    }
    Ok(removed)
}

/// A temp file beside `path` holding what `fill` wrote, with `mode` (set with fchmod, so the umask
/// cannot narrow it), fsync'd: ready to be renamed over `path`. Removed again on an error.
fn write_temp(path: &Path, mode: u32, fill: impl FnOnce(&mut File) -> io::Result<()>) -> io::Result<PathBuf> {
    write_temp_in(parent_dir(path), path, mode, fill, true)
}

/// `write_temp` in `dir`; fsync'd only when `durable`.
fn write_temp_in(
    dir: &Path,
    path: &Path,
    mode: u32,
    fill: impl FnOnce(&mut File) -> io::Result<()>,
    durable: bool,
) -> io::Result<PathBuf> {
    let tmp = temp_in(dir, path)?;
    let written = (|| {
        let mut f = OpenOptions::new().write(true).create_new(true).mode(mode).open(&tmp)?;
        fill(&mut f)?;
        f.set_permissions(fs::Permissions::from_mode(mode))?;
        if durable { f.sync_all() } else { Ok(()) }
    })();
    match written {
        Ok(()) => Ok(tmp),
        Err(e) => {
            let _ = fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// `write_atomic` for several files of one directory together: each written to its temp file and
/// fsync'd, then all renamed, then the directory fsync'd once. Each file is whole or absent after a
/// crash at any point; what costs is one fsync per file and one for the directory, not two per file.
/// On an error, the temp files not yet renamed are removed (files already renamed stay).
pub fn write_atomic_all(files: &[(PathBuf, Vec<u8>)], mode: u32) -> io::Result<()> {
    let Some((first, _)) = files.first() else { return Ok(()) };
    let dir = parent_dir(first);
    if files.iter().any(|(path, _)| parent_dir(path) != dir) {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "write_atomic_all writes into one directory"));
    }
    fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    let mut temps: Vec<PathBuf> = Vec::with_capacity(files.len());
    let mut renamed = 0;
    let result = (|| {
        for (path, bytes) in files {
            temps.push(write_temp(path, mode, |f| f.write_all(bytes))?);
        }
        for (tmp, (path, _)) in temps.iter().zip(files) {
            crate::platform::crash_point::reached("write_atomic.before-rename");
            fs::rename(tmp, path)?;
            renamed += 1;
        }
        remove_abandoned(&files.iter().map(|(path, _)| path.clone()).collect::<Vec<_>>());
        File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        for tmp in &temps[renamed..] {
            let _ = fs::remove_file(tmp);
        }
    }
    result
}

/// Make `path` a symbolic link to `target`, atomically: a link made under a temp name in the same
/// directory is renamed over `path`, so readers see the old entry or the new link, never neither.
pub fn symlink_atomic(target: &Path, path: &Path) -> io::Result<()> {
    let dir = parent_dir(path);
    let tmp = temp_sibling(path)?;
    let result = (|| {
        std::os::unix::fs::symlink(target, &tmp)?;
        fs::rename(&tmp, path)?;
        remove_abandoned_beside(path);
        File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

fn parent_dir(path: &Path) -> &Path {
    path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."))
}

/// A fresh name beside `path` for building its replacement: hidden, and with no `.conf`/`.conflist`
/// ending, so neither CNI runtimes scanning a conf dir nor `ls` users mistake it for the real file.
/// `.<name>.tmp-<pid>-<nonce>`: the writer's pid tells `remove_durably` whether it is still alive.
/// For what `durable` does not write itself (a socket bound there, then renamed to `path`), with
/// `remove_abandoned_beside` after the rename.
pub fn temp_sibling(path: &Path) -> io::Result<PathBuf> {
    temp_in(parent_dir(path), path)
}

/// What killed makers of `path` left under `temp_sibling` names, removed (best effort).
pub fn remove_abandoned_beside(path: &Path) {
    remove_abandoned(std::slice::from_ref(&path.to_path_buf()));
}

/// A fresh temp name for `path` in `dir`, named as `temp_sibling`.
fn temp_in(dir: &Path, path: &Path) -> io::Result<PathBuf> {
    // 48 random bits, as 12 hex digits.
    let nonce = getrandom::u64().map_err(io::Error::other)? >> 16;
    Ok(dir.join(format!("{}{}-{nonce:012x}", temp_prefix(path)?, std::process::id())))
}

/// `.<name>.tmp-`, how the temp files of `path` begin.
fn temp_prefix(path: &Path) -> io::Result<String> {
    let file_name =
        path.file_name().ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no file name"))?;
    Ok(format!(".{}.tmp-", file_name.to_string_lossy()))
}

/// Remove `path`; a file already gone is success. Temp files that writes of `path` left behind
/// when their process died before the rename (killed by a runtime's timeout, say) go too, whether
/// or not `path` exists; those of live processes stay. The directory is fsync'd so the removal is
/// durable.
pub fn remove_durably(path: &Path) -> io::Result<()> {
    remove_all_durably(&[path.to_path_buf()])
}

/// `remove_durably` for several files of one directory together: one look for abandoned temp files,
/// one fsync of the directory.
pub fn remove_all_durably(paths: &[PathBuf]) -> io::Result<()> {
    remove_all(paths, Durability::FileAndDirectory)
}

/// `remove_all_durably` without the fsync, for what `write_volatile` wrote: the files and their
/// killed writers' temp files go, and a power loss may bring them back.
pub fn remove_all_volatile(paths: &[PathBuf]) -> io::Result<()> {
    remove_all(paths, Durability::None)
}

fn remove_all(paths: &[PathBuf], durability: Durability) -> io::Result<()> {
    let Some(first) = paths.first() else { return Ok(()) };
    let dir = parent_dir(first);
    if paths.iter().any(|path| parent_dir(path) != dir) {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "remove_all_durably removes from one directory"));
    }
    let names: Vec<String> = match fs::read_dir(dir) {
        Ok(entries) => {
            entries.filter_map(Result::ok).filter_map(|e| e.file_name().to_str().map(String::from)).collect()
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    let mut removed = false;
    for path in paths {
        let temps = abandoned_among(path, &names)?;
        for file in temps.iter().map(PathBuf::as_path).chain([path.as_path()]) {
            match fs::remove_file(file) {
                Ok(()) => removed = true,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
    }
    if removed && durability == Durability::FileAndDirectory {
        File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// Of the `names` in `path`'s directory, the temp files of `path` whose writer no longer exists.
fn abandoned_among(path: &Path, names: &[String]) -> io::Result<Vec<PathBuf>> {
    let prefix = temp_prefix(path)?;
    let abandoned = |name: &String| name.strip_prefix(&prefix).and_then(writer_pid).is_some_and(gone);
    Ok(names.iter().filter(|name| abandoned(name)).map(|name| parent_dir(path).join(name)).collect())
}

/// The writer's pid in what follows `.tmp-` in a temp file's name (`<pid>-<hex nonce>`).
fn writer_pid(suffix: &str) -> Option<i32> {
    let (pid, nonce) = suffix.split_once('-')?;
    if nonce.is_empty() || !nonce.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    pid.parse().ok().filter(|pid| *pid > 0)
}

/// Whether process `pid` has ended: no such process, or a zombie (killed, not yet reaped by its
/// parent: a runtime's DEL right after it killed the ADD comes before the reaping).
fn gone(pid: i32) -> bool {
    if nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None) == Err(nix::errno::Errno::ESRCH) {
        return true;
    }
    // `/proc/<pid>/stat`: `pid (comm) S ...`; the state follows the last `)` (comm may hold one).
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| stat.rsplit_once(')').map(|(_, rest)| rest.trim_start().starts_with('Z')))
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_write_leaves_just_the_whole_new_file_with_its_mode() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("sub/dir/record");
        write_atomic(&p, b"one", 0o600).unwrap();
        write_atomic(&p, b"two", 0o600).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two");
        assert_eq!(fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(fs::read_dir(p.parent().unwrap()).unwrap().count(), 1);
        write_volatile(&p, b"three", 0o600).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"three");
        assert_eq!(fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(fs::read_dir(p.parent().unwrap()).unwrap().count(), 1);
    }

    #[test]
    fn concurrent_writers_leave_one_whole_version() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        std::thread::scope(|s| {
            for i in 0..8u8 {
                let p = &p;
                s.spawn(move || {
                    for _ in 0..50 {
                        write_atomic(p, &[i; 4096], 0o644).unwrap();
                    }
                });
            }
        });
        let got = fs::read(&p).unwrap();
        assert_eq!(got.len(), 4096);
        assert!(got.iter().all(|b| *b == got[0]));
        assert_eq!(fs::read_dir(d.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_symlink_replaces_a_file_leaving_nothing_beside_it() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("name");
        fs::write(&p, b"old").unwrap();
        symlink_atomic(Path::new("target"), &p).unwrap();
        symlink_atomic(Path::new("target"), &p).unwrap();
        assert_eq!(fs::read_link(&p).unwrap(), Path::new("target"));
        assert_eq!(fs::read_dir(d.path()).unwrap().count(), 1);
    }

    /// A pid that no process has: that of a child that has exited and been reaped.
    fn dead_pid() -> u32 {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        child.wait().unwrap();
        child.id()
    }

    #[test]
    fn removal_takes_the_temp_files_of_writers_that_died_before_their_rename() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("c1:eth0");
        let dead = d.path().join(format!(".c1:eth0.tmp-{}-0123456789ab", dead_pid()));
        let live = d.path().join(format!(".c1:eth0.tmp-{}-0123456789ab", std::process::id()));
        let other = d.path().join(format!(".c1:eth01.tmp-{}-0123456789ab", dead_pid()));
        for f in [&dead, &live, &other] {
            fs::write(f, b"half").unwrap();
        }
        // With the file itself, and without it (the writer died before its first rename).
        write_atomic(&p, b"record", 0o600).unwrap();
        remove_durably(&p).unwrap();
        assert!(!p.exists() && !dead.exists());
        fs::write(&dead, b"half").unwrap();
        remove_durably(&p).unwrap();
        assert!(!dead.exists());
        assert!(live.exists(), "a live writer's temp file stays");
        assert!(other.exists(), "another file's temp file stays");
    }

    #[test]
    fn the_next_write_takes_the_temp_files_of_killed_writers_of_that_file() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("c1:eth0");
        let dead = || {
            let f = d.path().join(format!(".c1:eth0.tmp-{}-0123456789ab", dead_pid()));
            fs::write(&f, b"half").unwrap();
            f
        };
        let live = d.path().join(format!(".c1:eth0.tmp-{}-0123456789ab", std::process::id()));
        let other = d.path().join(format!(".c1:net1.tmp-{}-0123456789ab", dead_pid()));
        fs::write(&live, b"half").unwrap();
        fs::write(&other, b"half").unwrap();
        let f = dead();
        write_atomic(&p, b"one", 0o600).unwrap();
        assert!(!f.exists(), "write_atomic");
        let f = dead();
        write_atomic_all(&[(p.clone(), b"three".to_vec())], 0o600).unwrap();
        assert!(!f.exists(), "write_atomic_all");
        assert!(live.exists() && other.exists(), "a live writer's, and another file's, stay");
        assert_eq!(remove_abandoned_temps(d.path()).unwrap().len(), 1, "the other file's, in a sweep of the directory");
        assert!(live.exists() && !other.exists());
    }

    #[test]
    fn a_killed_writer_not_yet_reaped_is_gone() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let zombie = child.id() as i32;
        // Not waited for: once it has exited it is a zombie until `wait` below.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !gone(zombie) {
            assert!(std::time::Instant::now() < deadline, "the child never became a zombie");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(!gone(std::process::id() as i32));
        child.wait().unwrap();
        assert!(gone(zombie));
    }

    #[test]
    fn a_symlink_replaced_takes_the_temp_links_of_killed_makers() {
        let d = tempfile::tempdir().unwrap();
        let link = d.path().join("yonghui");
        let dead = d.path().join(format!(".yonghui.tmp-{}-0123456789ab", dead_pid()));
        let live = d.path().join(format!(".yonghui.tmp-{}-0123456789ab", std::process::id()));
        std::os::unix::fs::symlink("yh-genie", &dead).unwrap();
        std::os::unix::fs::symlink("yh-genie", &live).unwrap();
        symlink_atomic(Path::new("yh-genie"), &link).unwrap();
        assert_eq!(fs::read_link(&link).unwrap(), Path::new("yh-genie"));
        assert!(fs::symlink_metadata(&dead).is_err(), "the killed maker's temp link is left");
        assert!(fs::symlink_metadata(&live).is_ok(), "a live maker's temp link is gone");
    }

    /// Two records in one directory, each holding its own name.
    fn two_records(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
        ["c1:eth0", "c1:net1"].iter().map(|n| (dir.join("records").join(n), n.as_bytes().to_vec())).collect()
    }

    #[test]
    fn several_files_are_written_together() {
        let d = tempfile::tempdir().unwrap();
        let files = two_records(d.path());
        write_atomic_all(&files, 0o600).unwrap();
        for (path, bytes) in &files {
            assert_eq!(&fs::read(path).unwrap(), bytes);
            assert_eq!(fs::metadata(path).unwrap().permissions().mode() & 0o777, 0o600);
        }
    }

    #[test]
    fn several_files_are_removed_together_with_a_dead_writers_temp() {
        let d = tempfile::tempdir().unwrap();
        let files = two_records(d.path());
        write_atomic_all(&files, 0o600).unwrap();
        let dead = d.path().join(format!("records/.c1:net1.tmp-{}-0123456789ab", dead_pid()));
        fs::write(&dead, b"half").unwrap();
        assert_eq!(fs::read_dir(d.path().join("records")).unwrap().count(), 3);
        let paths: Vec<PathBuf> = files.iter().map(|(p, _)| p.clone()).collect();
        remove_all_durably(&paths).unwrap();
        assert_eq!(fs::read_dir(d.path().join("records")).unwrap().count(), 0, "the dead writer's temp file too");
        remove_all_durably(&paths).unwrap();
    }

    #[test]
    fn files_written_together_must_share_one_directory() {
        let d = tempfile::tempdir().unwrap();
        let elsewhere = vec![(d.path().join("a/x"), vec![]), (d.path().join("b/y"), vec![])];
        assert_eq!(write_atomic_all(&elsewhere, 0o600).unwrap_err().kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn a_staged_write_leaves_no_temp_beside_the_file() {
        let d = tempfile::tempdir().unwrap();
        let (watched, staging) = (d.path().join("net.d"), d.path().join("net.d/yh-genie.d"));
        fs::create_dir_all(&watched).unwrap();
        let p = watched.join("00-a.conflist");
        write_atomic_staged(&p, &staging, 0o644, |f| f.write_all(b"one")).unwrap();
        write_atomic_staged(&p, &staging, 0o644, |f| f.write_all(b"two")).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two");
        assert_eq!(fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o644);
        let mut names: Vec<_> = fs::read_dir(&watched).unwrap().map(|e| e.unwrap().file_name()).collect();
        names.sort();
        assert_eq!(names, ["00-a.conflist", "yh-genie.d"]);
        assert_eq!(fs::read_dir(&staging).unwrap().count(), 0);
    }

    #[test]
    fn only_the_temps_of_dead_writers_are_swept() {
        let d = tempfile::tempdir().unwrap();
        let staging = d.path().join("net.d/yh-genie.d");
        fs::create_dir_all(&staging).unwrap();
        let dead = format!(".00-a.conflist.tmp-{}-0123456789ab", dead_pid());
        let live = format!(".00-a.conflist.tmp-{}-0123456789ab", std::process::id());
        for name in [&dead, &live, &"kubeconfig".to_string(), &".x.tmp-1-zz".to_string()] {
            fs::write(staging.join(name), b"half").unwrap();
        }
        assert_eq!(remove_abandoned_temps(&staging).unwrap(), vec![dead.clone()]);
        assert!(staging.join(&live).exists() && !staging.join(&dead).exists());
        assert!(remove_abandoned_temps(&d.path().join("none")).unwrap().is_empty());
        assert_eq!(remove_every_temp(&staging).unwrap(), vec![live.clone()], "every temp file, a live pid's too");
        assert!(staging.join("kubeconfig").exists() && staging.join(".x.tmp-1-zz").exists());
        assert!(remove_every_temp(&d.path().join("none")).unwrap().is_empty());
    }

    #[test]
    fn remove_missing_is_ok() {
        let d = tempfile::tempdir().unwrap();
        remove_durably(&d.path().join("absent")).unwrap();
    }
}
