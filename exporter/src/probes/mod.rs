//! eBPF probes (run-queue latency, page cache, packet drops), loaded with
//! aya. Each probe becomes a [`crate::collector::Collector`] that reads its
//! per-CPU maps at scrape time.

use clap::{ArgMatches, Command};

use crate::collector::Scraper;

pub struct ProbeSpec {
    pub name: &'static str,
    pub help: &'static str,
}

/// Every probe; each is enabled unless `--no-probe.NAME` is given.
pub const ALL: &[ProbeSpec] = &[
    ProbeSpec {
        name: "runqlat",
        help: "Run-queue latency histogram (sched tracepoints)",
    },
    ProbeSpec {
        name: "cachestat",
        help: "Page-cache accesses, misses and dirtied pages (filemap tracepoints)",
    },
    ProbeSpec {
        name: "drops",
        help: "Packet drops by kernel drop reason (skb:kfree_skb)",
    },
];

#[derive(Debug, Clone, Default)]
pub struct ProbeSettings {
    pub enabled: Vec<&'static str>,
}

/// Probe-specific flags.
pub fn add_args(cmd: Command) -> Command {
    cmd
}

pub fn settings_from(_m: &ArgMatches, enabled: Vec<&'static str>) -> ProbeSettings {
    ProbeSettings { enabled }
}

/// Loads and attaches the enabled probes and registers their collectors.
/// Returns a guard whose drop detaches everything.
pub fn attach(_settings: &ProbeSettings, _scraper: &mut Scraper) -> Probes {
    Probes {}
}

/// Owns every loaded program and link; dropping it detaches them.
pub struct Probes {}
