//! What a process costs: CPU seconds and resident memory, read from Linux's `/proc/<pid>/stat`
//! and `/proc/<pid>/status` (with the `procfs` crate).

use anyhow::Context;

/// CPU time a process used so far (user + system), seconds. Ticks are converted with
/// `sysconf(_SC_CLK_TCK)` (usually 100 per second, so the resolution is 10 ms).
///
/// # Errors
/// When the process is gone or `/proc` cannot be read.
pub fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    let stat = procfs::process::Process::new(pid as i32)
        .and_then(|p| p.stat())
        .with_context(|| format!("read /proc/{pid}/stat"))?;
    Ok((stat.utime + stat.stime) as f64 / procfs::ticks_per_second() as f64)
}

/// Resident set size of a process (`VmRSS`), bytes.
///
/// # Errors
/// When the process is gone or `/proc` cannot be read.
pub fn rss_bytes(pid: u32) -> anyhow::Result<u64> {
    let status = procfs::process::Process::new(pid as i32)
        .and_then(|p| p.status())
        .with_context(|| format!("read /proc/{pid}/status"))?;
    Ok(status.vmrss.context("no VmRSS")? * 1024)
}

/// Peak resident set size of a process so far (`VmHWM`), bytes.
///
/// # Errors
/// When the process is gone or `/proc` cannot be read.
pub fn peak_rss_bytes(pid: u32) -> anyhow::Result<u64> {
    let status = procfs::process::Process::new(pid as i32)
        .and_then(|p| p.status())
        .with_context(|| format!("read /proc/{pid}/status"))?;
    Ok(status.vmhwm.context("no VmHWM")? * 1024)
}

/// CPU seconds of several processes together (a server and its helpers).
///
/// # Errors
/// As [`cpu_seconds`].
pub fn cpu_seconds_all(pids: &[u32]) -> anyhow::Result<f64> {
    pids.iter().map(|p| cpu_seconds(*p)).sum()
}

/// The machine's CPU time so far, over all cores, in clock ticks (`sysconf(_SC_CLK_TCK)`), from
/// the first line of `/proc/stat`: busy = user + nice + system + irq + softirq + steal (time the
/// hypervisor gave to someone else is not available to us either), total = busy + idle + iowait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MachineCpu {
    pub busy: u64,
    pub total: u64,
}

impl MachineCpu {
    /// Reads `/proc/stat` now.
    ///
    /// # Errors
    /// When `/proc/stat` cannot be read or parsed.
    pub fn now() -> anyhow::Result<Self> {
        use procfs::CurrentSI;
        let t = procfs::KernelStats::current().context("read /proc/stat")?.total;
        let busy = t.user + t.nice + t.system + t.irq.unwrap_or(0) + t.softirq.unwrap_or(0) + t.steal.unwrap_or(0);
        Ok(Self { busy, total: busy + t.idle + t.iowait.unwrap_or(0) })
    }

    /// Share of all cores' time that was busy between `earlier` and `self`, percent (0–100);
    /// `None` when no time passed.
    pub fn busy_percent_since(&self, earlier: &Self) -> Option<f64> {
        let total = self.total.checked_sub(earlier.total)?;
        let busy = self.busy.checked_sub(earlier.busy)?;
        (total > 0).then(|| 100.0 * busy as f64 / total as f64)
    }
}

/// Raises this process's open-file limit (soft and hard, when allowed) to at least `want`
/// descriptors; children inherit it. Ten thousand WebSocket connections need ten thousand
/// descriptors in the client, the node, and twice that in a proxy.
///
/// Returns the soft limit in force afterwards.
pub fn raise_nofile(want: u64) -> u64 {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else { return 0 };
    if soft >= want {
        return soft;
    }
    // Root may raise the hard limit too; others up to the hard limit.
    if setrlimit(Resource::RLIMIT_NOFILE, want, want.max(hard)).is_ok() {
        return want;
    }
    let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
    getrlimit(Resource::RLIMIT_NOFILE).map_or(soft, |(s, _)| s)
}

/// One line describing the machine: CPU model, cores, memory, kernel.
pub fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name").map(|r| r.trim_start_matches([' ', '\t', ':']).trim().to_owned()))
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    use procfs::Current;
    let mem_gib = procfs::Meminfo::current().map_or(0.0, |m| m.mem_total as f64 / (1u64 << 30) as f64);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!("{model}, {cores} cores, {mem_gib:.0} GiB RAM, Linux {}", kernel.trim())
}

#[cfg(test)]
mod tests {
    use super::MachineCpu;

    #[test]
    fn busy_percent_is_the_busy_share_of_the_ticks_in_between() {
        let a = MachineCpu { busy: 1_000, total: 5_000 };
        let cases = [
            (MachineCpu { busy: 1_150, total: 5_200 }, Some(75.0)),
            (MachineCpu { busy: 1_200, total: 5_200 }, Some(100.0)),
            (MachineCpu { busy: 1_000, total: 5_200 }, Some(0.0)),
            (MachineCpu { busy: 1_000, total: 5_000 }, None),
            // A counter that went backwards (another boot): no figure rather than a wrong one.
            (MachineCpu { busy: 900, total: 5_200 }, None),
        ];
        for (b, want) in cases {
            assert_eq!(b.busy_percent_since(&a), want, "{a:?} → {b:?}");
        }
    }

    #[test]
    fn the_machine_counters_only_go_forward() {
        let a = MachineCpu::now().expect("/proc/stat is readable on Linux");
        let x: u64 = (0..2_000_000u64).fold(0, |s, i| s.wrapping_add(i * i));
        std::hint::black_box(x);
        let b = MachineCpu::now().expect("/proc/stat is readable on Linux");
        assert!(b.total >= a.total && b.busy >= a.busy, "{a:?} → {b:?}");
        assert!(b.total > 0, "{b:?}");
    }
}
