//! host-local's allocation in process: the same files under the same lock as the reference
//! `host-local` plugin, so that the built-in plugins save its exec (a Go program's start, the
//! largest part of an IPAM call) and either may allocate from the same directory at any time.
//!
//! On disk, as host-local keeps it (`<dataDir>/<network name>/`): one file per address held, named
//! by the address and holding `<container id>\r\n<ifname>`; `last_reserved_ip.<range set>` with the
//! latest address handed out (allocation goes round from the one after it); an exclusive `flock`
//! on the file `lock` around every allocation and release.
//!
//! Only the configurations it understands entirely run here: `ranges` or the legacy
//! `subnet`/`rangeStart`/`rangeEnd`/`gateway`, `routes`, `dataDir`, with no address requested (no
//! `IP` in `CNI_ARGS`, no `ips` or `ipRanges` from the runtime, no `args`) and `CNI_ARGS` host-local
//! would accept. Anything else (`resolvConf`, requested addresses, a configuration host-local would
//! refuse) returns `None` and the plugin is exec'd as before, so its answers and its errors stay
//! host-local's own.
//!
//! Durability is host-local's: an address's file is made whole before it appears (written under a
//! temporary name and hard-linked to the address's name, which fails if another holds it), so a
//! crash never leaves an address held by an empty file; like host-local's, the files are not
//! fsync'd. What must survive a power loss for the address to be given back is the attachment's
//! own record, which the plugins write durably before they allocate.

use crate::platform::cni::{CniArgs, CniError, Command, Invocation, PluginConf};
use ipnetwork::IpNetwork;
use serde_json::{Value, json};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::net::IpAddr;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Where host-local keeps its files unless `dataDir` says otherwise.
const DEFAULT_DATA_DIR: &str = "/var/lib/cni/networks";
const LINE_BREAK: &str = "\r\n";
const LAST_RESERVED: &str = "last_reserved_ip.";
/// The `ipam` keys understood here.
const KEYS: [&str; 8] = ["type", "subnet", "rangeStart", "rangeEnd", "gateway", "ranges", "routes", "dataDir"];

/// One range of a range set, completed as host-local completes it.
#[derive(Debug, Clone, PartialEq)]
struct Range {
    subnet: IpNetwork,
    start: u128,
    end: u128,
    gateway: u128,
}

impl Range {
    fn contains(&self, ip: IpAddr) -> bool {
        self.subnet.contains(ip) && (self.start..=self.end).contains(&number(ip))
    }
}

/// host-local for one configuration.
#[derive(Debug)]
pub struct HostLocal {
    dir: PathBuf,
    range_sets: Vec<Vec<Range>>,
    routes: Value,
}

impl HostLocal {
    /// The configuration's host-local, when it is one this module runs entirely (module doc).
    pub fn from_conf(conf: &PluginConf, args: &CniArgs) -> Option<Self> {
        let ipam = conf.raw.get("ipam")?.as_object()?;
        if ipam.keys().any(|k| !KEYS.contains(&k.as_str())) || !args_accepted(args) {
            return None;
        }
        let runtime = conf.raw.get("runtimeConfig").and_then(Value::as_object);
        if runtime.is_some_and(|r| r.contains_key("ips") || r.contains_key("ipRanges"))
            || conf.raw.get("args").is_some()
        {
            return None;
        }
        let name = conf.raw.get("name")?.as_str().filter(|n| !n.is_empty() && !n.contains('/') && *n != "..")?;
        let mut sets: Vec<Vec<Range>> = Vec::new();
        if ipam.contains_key("subnet") {
            sets.push(vec![range(&Value::Object(ipam.clone()))?]);
        }
        if let Some(ranges) = ipam.get("ranges") {
            for set in ranges.as_array()? {
                let set: Option<Vec<Range>> = set.as_array()?.iter().map(range).collect();
                sets.push(set.filter(|s| !s.is_empty())?);
            }
        }
        if sets.is_empty() || overlap(&sets) {
            return None;
        }
        let routes = match ipam.get("routes") {
            None | Some(Value::Null) => Value::Array(Vec::new()),
            Some(Value::Array(routes)) => Value::Array(routes.clone()),
            Some(_) => return None,
        };
        let data_dir = match ipam.get("dataDir") {
            None | Some(Value::Null) => PathBuf::from(DEFAULT_DATA_DIR),
            Some(Value::String(d)) if d.is_empty() => PathBuf::from(DEFAULT_DATA_DIR),
            Some(Value::String(d)) => PathBuf::from(d),
            Some(_) => return None,
        };
        Some(HostLocal { dir: data_dir.join(name), range_sets: sets, routes })
    }

    /// ADD or DEL as host-local answers it (its JSON result for ADD); CHECK and GC are not run here.
    pub fn run(&self, command: Command, inv: &Invocation) -> Option<Result<Vec<u8>, CniError>> {
        let outcome = match command {
            Command::Add => self.add(inv.container_id.trim(), &inv.ifname),
            Command::Del => self.release(inv.container_id.trim(), &inv.ifname).map(|()| Vec::new()),
            _ => return None,
        };
        Some(outcome)
    }

    fn add(&self, id: &str, ifname: &str) -> Result<Vec<u8>, CniError> {
        let lock = self.lock()?;
        let held = self
            .held_by(id, ifname)
            .map_err(|e| CniError::io(format!("host-local store {}: {e}", self.dir.display())))?;
        let mut ips = Vec::new();
        for (index, set) in self.range_sets.iter().enumerate() {
            if let Some(ip) = held.iter().find(|ip| set.iter().any(|r| r.contains(**ip))) {
                // host-local refuses a second address for the same attachment; so does this.
                self.release_held(id, ifname, &ips);
                return Err(CniError::new(
                    code::INTERNAL,
                    format!(
                        "failed to allocate for range {index}: {ip} has been allocated to {id}, duplicate allocation is not allowed"
                    ),
                ));
            }
            match self.reserve_in(index, set, id, ifname) {
                Ok(Some(ip)) => ips.push(ip),
                Ok(None) => {
                    self.release_held(id, ifname, &ips);
                    return Err(CniError::new(
                        code::INTERNAL,
                        format!(
                            "failed to allocate for range {index}: no IP addresses available in range set: {}",
                            describe(set)
                        ),
                    ));
                }
                Err(e) => {
                    self.release_held(id, ifname, &ips);
                    return Err(CniError::io(format!("failed to allocate for range {index}: {e}")));
                }
            }
        }
        drop(lock);
        let ips: Vec<Value> = ips
            .iter()
            .map(|(ip, range)| {
                json!({"address": format!("{ip}/{}", range.subnet.prefix()), "gateway": address(range.gateway, range.subnet).to_string()})
            })
            .collect();
        let result = json!({"cniVersion": "1.0.0", "ips": ips, "routes": self.routes, "dns": {}});
        Ok(result.to_string().into_bytes())
    }

    /// The next free address of `set` from the one after its last reserved, reserved for (id,
    /// ifname); `None` when every address is held.
    fn reserve_in(&self, index: usize, set: &[Range], id: &str, ifname: &str) -> io::Result<Option<(IpAddr, Range)>> {
        let last = fs::read_to_string(self.dir.join(format!("{LAST_RESERVED}{index}")))
            .ok()
            .and_then(|text| text.trim().parse::<IpAddr>().ok());
        let mut cursor = Cursor::new(set, last);
        while let Some((ip, range)) = cursor.next() {
            if self.reserve(ip, id, ifname)? {
                write_replacing(&self.dir.join(format!("{LAST_RESERVED}{index}")), ip.to_string().as_bytes())?;
                return Ok(Some((ip, range.clone())));
            }
        }
        Ok(None)
    }

    /// Hold `ip` for (id, ifname): false if another holds it.
    fn reserve(&self, ip: IpAddr, id: &str, ifname: &str) -> io::Result<bool> {
        let path = self.dir.join(ip.to_string());
        if fs::symlink_metadata(&path).is_ok() {
            return Ok(false);
        }
        let temporary = crate::platform::durable::temp_sibling(&path)?;
        let written = (|| {
            let mut f = OpenOptions::new().write(true).create_new(true).mode(0o644).open(&temporary)?;
            f.write_all(format!("{id}{LINE_BREAK}{ifname}").as_bytes())
        })();
        // The address's file appears whole, or not at all when another holds it (EEXIST).
        let linked = written.and_then(|()| fs::hard_link(&temporary, &path));
        let _ = fs::remove_file(&temporary);
        match linked {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Give back every address held by (id, ifname), as host-local's DEL: the files that say so,
    /// or, when none does, those of an older host-local that held only the container id.
    fn release(&self, id: &str, ifname: &str) -> Result<(), CniError> {
        let _lock = self.lock()?;
        let wanted = format!("{id}{LINE_BREAK}{ifname}");
        if self.remove_matching(|content| content == wanted) == 0 {
            self.remove_matching(|content| content == id);
        }
        Ok(())
    }

    /// After a failed ADD, give back what it reserved.
    fn release_held(&self, id: &str, ifname: &str, ips: &[(IpAddr, Range)]) {
        let wanted = format!("{id}{LINE_BREAK}{ifname}");
        for (ip, _) in ips {
            let path = self.dir.join(ip.to_string());
            if fs::read_to_string(&path).is_ok_and(|c| c.trim() == wanted) {
                let _ = fs::remove_file(path);
            }
        }
    }

    /// Remove the address files whose (trimmed) content `matches`; how many.
    fn remove_matching(&self, matches: impl Fn(&str) -> bool) -> usize {
        let Ok(entries) = fs::read_dir(&self.dir) else { return 0 };
        let mut removed = 0;
        for entry in entries.flatten() {
            if !entry.file_type().is_ok_and(|t| t.is_file()) {
                continue;
            }
            if let Ok(content) = fs::read_to_string(entry.path())
                && matches(content.trim())
                && fs::remove_file(entry.path()).is_ok()
            {
                removed += 1;
            }
        }
        removed
    }

    /// The addresses (id, ifname) holds, or the container as an older host-local wrote it.
    fn held_by(&self, id: &str, ifname: &str) -> io::Result<Vec<IpAddr>> {
        let wanted = format!("{id}{LINE_BREAK}{ifname}");
        let mut held = Vec::new();
        for entry in fs::read_dir(&self.dir)?.flatten() {
            let Ok(ip) = entry.file_name().to_string_lossy().parse::<IpAddr>() else { continue };
            if fs::read_to_string(entry.path()).is_ok_and(|c| c.trim() == wanted || c.trim() == id) {
                held.push(ip);
            }
        }
        Ok(held)
    }

    /// host-local's lock: the directory made as it makes it, `flock` on its `lock` file.
    fn lock(&self) -> Result<nix::fcntl::Flock<File>, CniError> {
        let failed = |e: io::Error| CniError::io(format!("host-local store {}: {e}", self.dir.display()));
        fs::DirBuilder::new().recursive(true).mode(0o755).create(&self.dir).map_err(failed)?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o750)
            .open(self.dir.join("lock"))
            .map_err(failed)?;
        nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive).map_err(|(_, e)| failed(e.into()))
    }
}

/// host-local's error code for its own failures (the Go library's "internal" error).
mod code {
    pub const INTERNAL: u32 = 999;
}

/// Whether host-local would take these `CNI_ARGS` without a requested address: it knows only
/// `IgnoreUnknown` and `IP`, and refuses unknown keys unless `IgnoreUnknown` is true.
fn args_accepted(args: &CniArgs) -> bool {
    let boolean = |v: &str| matches!(v, "1" | "true" | "True" | "0" | "false" | "False");
    if args.keys().any(|k| k == "IP") {
        return false;
    }
    match args.get("IgnoreUnknown") {
        Some("1" | "true" | "True") => true,
        Some(v) if !boolean(v) => false,
        _ => args.keys().all(|k| k == "IgnoreUnknown"),
    }
}

/// A range completed as host-local completes it; `None` for one it would refuse (or that this
/// module does not read: then host-local runs and says what is wrong).
fn range(v: &Value) -> Option<Range> {
    let object = v.as_object()?;
    if object.keys().any(|k| !KEYS.contains(&k.as_str())) {
        return None;
    }
    let subnet: IpNetwork = object.get("subnet")?.as_str()?.parse().ok()?;
    let bits = if subnet.is_ipv4() { 32 } else { 128 };
    // Too small to allocate from, or host bits set: host-local refuses it.
    if subnet.prefix() > bits - 2 || subnet.ip() != subnet.network() {
        return None;
    }
    let ip = |key: &str| -> Option<Option<IpAddr>> {
        match object.get(key) {
            None | Some(Value::Null) => Some(None),
            Some(Value::String(s)) if s.is_empty() => Some(None),
            Some(Value::String(s)) => s.parse::<IpAddr>().ok().filter(|a| a.is_ipv4() == subnet.is_ipv4()).map(Some),
            Some(_) => None,
        }
    };
    let first = number(subnet.network()) + 1;
    let last = number(broadcast(subnet)) - u128::from(subnet.is_ipv4());
    let within = |a: IpAddr| subnet.contains(a).then(|| number(a));
    let start = match ip("rangeStart")? {
        Some(a) => within(a)?,
        None => first,
    };
    let end = match ip("rangeEnd")? {
        Some(a) => within(a)?,
        None => last,
    };
    let gateway = match ip("gateway")? {
        Some(a) => number(a),
        None => first,
    };
    (start <= end).then_some(Range { subnet, start, end, gateway })
}

/// Whether any two ranges overlap, or a set mixes address families (host-local refuses both).
fn overlap(sets: &[Vec<Range>]) -> bool {
    let mixed = sets.iter().any(|s| s.iter().any(|r| r.subnet.is_ipv4() != s[0].subnet.is_ipv4()));
    let all: Vec<&Range> = sets.iter().flatten().collect();
    mixed
        || all.iter().enumerate().any(|(n, a)| {
            all[n + 1..]
                .iter()
                .any(|b| a.subnet.is_ipv4() == b.subnet.is_ipv4() && a.start <= b.end && b.start <= a.end)
        })
}

/// host-local's order through a range set: from the address after `last` (when the set holds it),
/// else from the first range's start, once round every range, the gateways skipped.
struct Cursor<'a> {
    set: &'a [Range],
    index: usize,
    current: Option<u128>,
    first: Option<(usize, u128)>,
}

impl<'a> Cursor<'a> {
    fn new(set: &'a [Range], last: Option<IpAddr>) -> Self {
        let from = last.and_then(|ip| set.iter().position(|r| r.contains(ip)).map(|i| (i, number(ip))));
        match from {
            Some((index, at)) => Cursor { set, index, current: Some(at), first: None },
            None => Cursor { set, index: 0, current: None, first: None },
        }
    }

    fn next(&mut self) -> Option<(IpAddr, &'a Range)> {
        loop {
            let range = &self.set[self.index];
            let at = match self.current {
                None => range.start,
                Some(at) if at >= range.end => {
                    self.index = (self.index + 1) % self.set.len();
                    self.set[self.index].start
                }
                Some(at) => at + 1,
            };
            self.current = Some(at);
            let here = (self.index, at);
            match self.first {
                None => self.first = Some(here),
                Some(first) if first == here => return None,
                Some(_) => {}
            }
            let range = &self.set[self.index];
            if at != range.gateway {
                return Some((address(at, range.subnet), range));
            }
        }
    }
}

fn number(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    }
}

fn address(n: u128, family: IpNetwork) -> IpAddr {
    if family.is_ipv4() { IpAddr::V4((n as u32).into()) } else { IpAddr::V6(n.into()) }
}

fn broadcast(subnet: IpNetwork) -> IpAddr {
    match subnet {
        IpNetwork::V4(n) => IpAddr::V4(n.broadcast()),
        IpNetwork::V6(n) => {
            let host = u128::MAX.checked_shr(u32::from(n.prefix())).unwrap_or(0);
            IpAddr::V6((u128::from(n.network()) | host).into())
        }
    }
}

/// How host-local names a range set in its error.
fn describe(set: &[Range]) -> String {
    set.iter()
        .map(|r| format!("{}-{}", address(r.start, r.subnet), address(r.end, r.subnet)))
        .collect::<Vec<_>>()
        .join(",")
}

/// `last_reserved_ip.N`: the same bytes host-local writes, overwritten in place and then cut to
/// length. host-local truncates the file to nothing first, and ext4 flushes a file truncated to
/// nothing when it is closed (`auto_da_alloc`, its guard for files replaced that way): about 0.4 ms
/// of every ADD on a busy disk, for a hint. Killed between the write and the cut, the file holds
/// the new address followed by the tail of the old one; the hint is read leniently, and an address
/// that is none, or outside the range, starts the search at the range's start, as a missing file
/// does. Allocation itself goes by the address files alone.
fn write_replacing(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut file = OpenOptions::new().write(true).create(true).truncate(false).mode(0o644).open(path)?;
    file.write_all(bytes)?;
    file.set_len(bytes.len() as u64)
}

#[cfg(test)]
mod tests;
