//! The reclaim probe against the kernel's own counters, under real memory
//! pressure in a memory cgroup the test makes.
//!
//! - `kind="memcg"`: a reader of a file four times its cgroup's limit
//!   forces the kernel to reclaim the cgroup's page cache over and over.
//!   Oracle: the cgroup's limit hits (v1 `memory.failcnt`, v2 the `max`
//!   event), summed over every cgroup on the host.
//! - `kind="global"`: /proc/vmstat's `allocstall_*`, host-wide, over the
//!   same window (0 here: a cgroup's limit is not a host shortage).
//! - compaction: /proc/vmstat's `compact_stall`, while the test makes the
//!   kernel compact all memory through /proc/sys/vm/compact_memory, which
//!   is not a stall of an allocating task and must not be counted.
//!
//! Needs root and BPF (skips otherwise; fails under USESCOPE_REQUIRE_BPF=1
//! or CI=true). The counters are host-wide, so each oracle is read just
//! outside and just inside the probe's window, and the probe must fall
//! between the two.

mod common;

use std::io::Write;
use std::time::Instant;

use common::bpf_objects::{self, probe_up};
use common::memcg::MemCgroup;
use common::{Daemon, can_run_bpf, sample};

const ARGS: &[&str] = &[
    "--collector.disable-defaults",
    "--collector.loadavg",
    "--no-probe.runqlat",
    "--no-probe.cachestat",
    "--no-probe.drops",
    "--probe.reclaim",
];

/// The page-cache workload: a file on a disk filesystem (the target
/// directory; /tmp may be tmpfs, whose pages reclaim cannot drop without
/// swap), read through a cgroup limited to a quarter of its size.
const FILE_SIZE: u64 = 128 << 20;
const LIMIT: u64 = 32 << 20;

/// The sum of some /proc/vmstat fields: those named `name`, or starting
/// with `name` when it ends in `_`.
fn vmstat(name: &str) -> u64 {
    std::fs::read_to_string("/proc/vmstat")
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once(' '))
        .filter(|(k, _)| *k == name || (name.ends_with('_') && k.starts_with(name)))
        .map(|(_, v)| v.trim().parse::<u64>().unwrap())
        .sum()
}

fn series(expo: &str, name: &str) -> f64 {
    sample(expo, name).unwrap_or_else(|| panic!("{name} missing from the scrape"))
}

/// A file of FILE_SIZE on disk, written and then dropped from the page
/// cache, so reading it charges every page to the reader's cgroup.
fn cold_file() -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let chunk = vec![0x5au8; 1 << 20];
    for _ in 0..FILE_SIZE >> 20 {
        f.write_all(&chunk).unwrap();
    }
    f.as_file().sync_all().unwrap();
    drop_from_cache(f.as_file());
    f
}

fn drop_from_cache(f: &std::fs::File) {
    use std::os::fd::AsRawFd;
    // SAFETY: a valid fd; the advice only drops clean cached pages.
    let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(rc, 0, "posix_fadvise(DONTNEED)");
}

/// Asserts `inner <= probe <= outer + slack`: the probe's window lies
/// inside the outer oracle window and encloses the inner one.
fn assert_between(what: &str, inner: u64, probe: f64, outer: u64, slack: f64) {
    eprintln!("{what}: probe +{probe}, kernel +{inner} (inner window) .. +{outer} (outer)");
    assert!(
        probe >= inner as f64 - slack && probe <= outer as f64 + slack,
        "{what}: probe +{probe}, kernel +{inner} inside / +{outer} outside its window (slack {slack})"
    );
}

#[test]
fn stalls_match_the_kernels_counters_under_cgroup_memory_pressure() {
    if !can_run_bpf() {
        return;
    }
    let file = cold_file();
    let name = format!("usescope-test-reclaim-{}", std::process::id());
    let cg = match MemCgroup::create(&name, LIMIT) {
        Ok(cg) => cg,
        Err(e) => {
            common::skip::unless_met(false, &format!("a memory cgroup ({e})"));
            return;
        }
    };
    let d = Daemon::start(ARGS);
    let first = d.scrape();
    if !probe_up(&d, &first, "reclaim") {
        return;
    }

    // Outer oracles, then the probe, then inner oracles; and the reverse.
    let (hits0, allocstall0, compact0) = (
        cg.limit_hits_host_wide(),
        vmstat("allocstall_"),
        vmstat("compact_stall"),
    );
    let own0 = cg.limit_hits();
    let before = d.scrape();
    let inner0 = (
        cg.limit_hits_host_wide(),
        vmstat("allocstall_"),
        vmstat("compact_stall"),
    );

    let started = Instant::now();
    let status = cg.run(&format!(
        "dd if='{}' of=/dev/null bs=1M status=none",
        file.path().display()
    ));
    let workload = started.elapsed();
    assert!(
        status.success(),
        "the reader in the cgroup failed: {status:?}"
    );
    // Compaction that is not a stall: the whole host, by this task.
    let compacted0 = vmstat("compact_migrate_scanned") + vmstat("compact_free_scanned");
    std::fs::write("/proc/sys/vm/compact_memory", "1").unwrap();
    let compacted = vmstat("compact_migrate_scanned") + vmstat("compact_free_scanned") - compacted0;

    let inner1 = (
        cg.limit_hits_host_wide(),
        vmstat("allocstall_"),
        vmstat("compact_stall"),
    );
    let after = d.scrape();
    let (hits1, allocstall1, compact1) = (
        cg.limit_hits_host_wide(),
        vmstat("allocstall_"),
        vmstat("compact_stall"),
    );
    let own = cg.limit_hits() - own0;

    let delta = |name: &str| series(&after, name) - series(&before, name);
    let memcg = delta("usescope_direct_reclaim_seconds_count{kind=\"memcg\"}");
    let memcg_sum = delta("usescope_direct_reclaim_seconds_sum{kind=\"memcg\"}");
    let global = delta("usescope_direct_reclaim_seconds_count{kind=\"global\"}");
    let compaction = delta("usescope_compaction_stall_seconds_count");
    eprintln!(
        "memcg reclaim: probe +{memcg} in {memcg_sum:.4} s; this cgroup's limit hits +{own} \
         ({}); reader took {:.3} s; compact_memory scanned {compacted} pages",
        if cg.is_v1() {
            "memory.failcnt"
        } else {
            "memory.events max"
        },
        workload.as_secs_f64()
    );

    // A reader of 4x the limit must have hit it, many times.
    assert!(own >= 20, "only {own} limit hits: no pressure was made");
    // Limit hits and reclaims agree within 2% (measured equal; a failed
    // charge retried without reclaim would count a hit and no reclaim).
    let slack = |n: u64| (n as f64 * 0.02).max(2.0);
    assert!(
        memcg >= own as f64 - slack(own),
        "probe +{memcg} below this cgroup's own {own} limit hits"
    );
    assert_between(
        "memcg reclaims vs limit hits (all cgroups)",
        inner1.0 - inner0.0,
        memcg,
        hits1 - hits0,
        slack(hits1 - hits0),
    );
    // The stall time is the reader's alone, and within its run time,
    // unless another cgroup on the host reclaimed in the same window.
    assert!(memcg_sum > 0.0, "no memcg stall time measured");
    if hits1 - hits0 == own {
        assert!(
            memcg_sum <= workload.as_secs_f64(),
            "memcg stall time {memcg_sum} s within a {workload:?} read"
        );
    }
    // Global direct reclaim: the very calls allocstall counts, exactly.
    assert_between(
        "global direct reclaim vs allocstall_*",
        inner1.1 - inner0.1,
        global,
        allocstall1 - allocstall0,
        0.0,
    );
    // compact_memory compacted (the hooks fired) but stalled no allocator.
    assert!(compacted > 0, "compact_memory scanned no pages");
    if compact1 == compact0 {
        assert_eq!(compaction, 0.0, "compaction outside a stall was counted");
    } else {
        // Direct compaction elsewhere on the host: zones compacted per
        // stall vary (0 when deferred, more when the first zone fails).
        eprintln!(
            "compaction: probe +{compaction} zones, compact_stall +{} .. +{}",
            inner1.2 - inner0.2,
            compact1 - compact0
        );
    }
    for (name, labels) in [
        ("usescope_direct_reclaim_seconds", "kind=\"memcg\","),
        ("usescope_direct_reclaim_seconds", "kind=\"global\","),
        ("usescope_compaction_stall_seconds", ""),
    ] {
        assert_histogram_consistent(&after, name, labels);
    }
    assert!(d.stop().success());
    drop(cg);
}

/// Buckets never decrease, and `+Inf` equals `_count`.
fn assert_histogram_consistent(expo: &str, name: &str, labels: &str) {
    let prefix = format!("{name}_bucket{{{labels}le=\"");
    let buckets: Vec<f64> = expo
        .lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .map(|rest| rest.rsplit_once(' ').unwrap().1.parse().unwrap())
        .collect();
    // 12 bounds at the default --probe.histogram.bucket-factor=4.
    assert_eq!(buckets.len(), 13, "{name}{{{labels}}}: 12 bounds and +Inf");
    assert!(
        buckets.windows(2).all(|w| w[0] <= w[1]),
        "{name}: {buckets:?}"
    );
    let labels = labels.trim_end_matches(',');
    let count = if labels.is_empty() {
        series(expo, &format!("{name}_count"))
    } else {
        series(expo, &format!("{name}_count{{{labels}}}"))
    };
    assert_eq!(
        *buckets.last().unwrap(),
        count,
        "{name}: +Inf against _count"
    );
}

/// Programs, maps and links are all gone after SIGTERM.
#[test]
fn sigterm_leaves_no_program_map_or_link() {
    if !can_run_bpf() {
        return;
    }
    let d = Daemon::start(ARGS);
    if !probe_up(&d, &d.scrape(), "reclaim") {
        return;
    }
    let (progs, maps, links) = bpf_objects::objects_of(d.child.id());
    assert_eq!(
        progs.len(),
        6,
        "begin and end of three stall kinds: {progs:?}"
    );
    assert_eq!(links.len(), 6, "one link per program: {links:?}");
    assert_eq!(maps.len(), 2, "histograms and start times: {maps:?}");
    assert!(d.stop().success());
    bpf_objects::assert_released(&progs, &maps, &links);
}
