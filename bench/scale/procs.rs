//! What the benchmark reads of its processes: resident memory, CPU time, TCP connections to the API
//! server, from /proc and `ss`.

use std::collections::BTreeMap;
use std::process::Command;

/// Resident memory now, in KiB (None: the process is gone).
pub fn rss_kib(pid: u32) -> Option<u64> {
    status_field(pid, "VmRSS:")
}

/// The most resident memory the process has had, in KiB.
pub fn peak_rss_kib(pid: u32) -> Option<u64> {
    status_field(pid, "VmHWM:")
}

fn status_field(pid: u32, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines().find_map(|l| l.strip_prefix(field)).and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// User and system CPU time so far, in seconds.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces: the fields after it follow its closing parenthesis.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    let per_second = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK).ok().flatten().unwrap_or(100) as f64;
    Some(ticks as f64 / per_second)
}

/// Established TCP connections to `port` per process id, in this network namespace.
pub fn connections_to(port: u16) -> BTreeMap<u32, usize> {
    let out = Command::new("ss").args(["-tnpH", "state", "established", &format!("dport = :{port}")]).output();
    let mut by_pid = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.map(|o| o.stdout).unwrap_or_default()).lines() {
        // users:(("yh-genie",pid=123,fd=9))
        for part in line.split("pid=").skip(1) {
            if let Some(pid) = part.split(',').next().and_then(|p| p.parse().ok()) {
                *by_pid.entry(pid).or_default() += 1;
                break;
            }
        }
    }
    by_pid
}

/// Median and maximum of `values` (0 for none).
pub fn median_max(values: &[f64]) -> (f64, f64) {
    if values.is_empty() {
        return (0.0, 0.0);
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(|a, b| a.total_cmp(b));
    (sorted[sorted.len() / 2], sorted[sorted.len() - 1])
}

/// The `p` quantile (0..=1) of `values`.
pub fn quantile(values: &[f64], p: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(|a, b| a.total_cmp(b));
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}
