//! The daemon's own metrics: `process_*` (as Prometheus client libraries
//! name them) and `usescope_build_info`. These always read the real
//! `/proc/self`, never `--path.procfs`: they describe this process.

use std::path::Path;

use crate::exposition::{Desc, Encoder};
use crate::parse::fields;
use crate::source::{Read, SourceFile};

const CPU: Desc = Desc::counter(
    "process_cpu_seconds_total",
    "Total user and system CPU time spent in seconds.",
);
const OPEN_FDS: Desc = Desc::gauge("process_open_fds", "Number of open file descriptors.");
const MAX_FDS: Desc = Desc::gauge(
    "process_max_fds",
    "Maximum number of open file descriptors.",
);
const VSIZE: Desc = Desc::gauge(
    "process_virtual_memory_bytes",
    "Virtual memory size in bytes.",
);
const VSIZE_MAX: Desc = Desc::gauge(
    "process_virtual_memory_max_bytes",
    "Maximum amount of virtual memory available in bytes.",
);
const RSS: Desc = Desc::gauge(
    "process_resident_memory_bytes",
    "Resident memory size in bytes.",
);
const START: Desc = Desc::gauge(
    "process_start_time_seconds",
    "Start time of the process since unix epoch in seconds.",
);
const BUILD_INFO: Desc = Desc::gauge(
    "usescope_build_info",
    "A metric with a constant '1' value labeled by version, revision and rustversion from which usescope was built.",
);

pub struct SelfMetrics {
    stat: SourceFile,
    clk_tck: f64,
    page_size: f64,
    boot_time: f64,
}

/// Fields of /proc/self/stat that the process metrics need.
#[derive(Debug, PartialEq)]
pub struct ProcSelfStat {
    pub utime_ticks: u64,
    pub stime_ticks: u64,
    pub start_ticks: u64,
    pub vsize_bytes: u64,
    pub rss_pages: u64,
}

/// Parses /proc/PID/stat. The command name may contain spaces and
/// parentheses, so fields are counted from the last `)`.
pub fn parse_proc_self_stat(s: &str) -> Option<ProcSelfStat> {
    let rest = &s[s.rfind(')')? + 1..];
    // After ')': field 3 (state) is index 0.
    let f: Vec<&str> = fields(rest).collect();
    let get = |n: usize| f.get(n - 3).and_then(|t| t.parse::<u64>().ok());
    Some(ProcSelfStat {
        utime_ticks: get(14)?,
        stime_ticks: get(15)?,
        start_ticks: get(22)?,
        vsize_bytes: get(23)?,
        rss_pages: get(24)?,
    })
}

impl SelfMetrics {
    pub fn new() -> SelfMetrics {
        // SAFETY: sysconf has no preconditions.
        let clk_tck = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
        let page_size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(1) as f64;
        let boot_time = std::fs::read_to_string("/proc/stat")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("btime "))
                    .and_then(|v| v.trim().parse::<f64>().ok())
            })
            .unwrap_or(0.0);
        SelfMetrics {
            stat: SourceFile::new(Path::new("/proc"), "self/stat"),
            clk_tck,
            page_size,
            boot_time,
        }
    }

    pub fn write(&mut self, enc: &mut Encoder) {
        if let Ok(Read::Text(s)) = self.stat.read()
            && let Some(st) = parse_proc_self_stat(s)
        {
            let cpu = (st.utime_ticks + st.stime_ticks) as f64 / self.clk_tck;
            enc.family(&CPU);
            enc.sample(&CPU, &[], cpu);
            enc.family(&VSIZE);
            enc.sample(&VSIZE, &[], st.vsize_bytes);
            enc.family(&RSS);
            enc.sample(&RSS, &[], st.rss_pages as f64 * self.page_size);
            enc.family(&START);
            enc.sample(
                &START,
                &[],
                self.boot_time + st.start_ticks as f64 / self.clk_tck,
            );
        }
        if let Ok(dir) = std::fs::read_dir("/proc/self/fd") {
            enc.family(&OPEN_FDS);
            enc.sample(&OPEN_FDS, &[], dir.count() as u64);
        }
        enc.family(&MAX_FDS);
        enc.sample(&MAX_FDS, &[], rlimit(libc::RLIMIT_NOFILE));
        enc.family(&VSIZE_MAX);
        enc.sample(&VSIZE_MAX, &[], rlimit(libc::RLIMIT_AS));
        enc.family(&BUILD_INFO);
        enc.sample(
            &BUILD_INFO,
            &[
                ("version", env!("CARGO_PKG_VERSION")),
                ("revision", env!("USESCOPE_GIT_REVISION")),
                ("rustversion", env!("USESCOPE_RUSTC_VERSION")),
            ],
            1u64,
        );
    }
}

impl Default for SelfMetrics {
    fn default() -> Self {
        SelfMetrics::new()
    }
}

/// The soft limit as a float; RLIM_INFINITY becomes 2^64 as client_golang reports it.
fn rlimit(resource: libc::__rlimit_resource_t) -> f64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    if unsafe { libc::getrlimit(resource, &mut lim) } != 0 {
        return 0.0;
    }
    lim.rlim_cur as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_comm_with_spaces_and_parens() {
        let s = "123 (a b) c) S 1 2 3 4 5 6 7 8 9 10 250 30 0 0 20 0 1 0 500 1048576 300 18446744073709551615 0";
        let st = parse_proc_self_stat(s).unwrap();
        assert_eq!(st.utime_ticks, 250);
        assert_eq!(st.stime_ticks, 30);
        assert_eq!(st.start_ticks, 500);
        assert_eq!(st.vsize_bytes, 1048576);
        assert_eq!(st.rss_pages, 300);
        assert!(parse_proc_self_stat("garbage").is_none());
        assert!(parse_proc_self_stat("1 (x) S 1").is_none());
    }
}
