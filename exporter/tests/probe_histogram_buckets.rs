//! `--probe.histogram.bucket-factor` on the real kernel: three daemons, at
//! factors 2, 4 (the default, no flag) and 16, measure the same process's
//! run-queue waits with runqlat. The process is started before them and
//! blocked, runs its waits only once all three are attached, and has exited
//! before they are scraped, so all three counted the same events: the
//! coarser histograms must have fewer series, bounds that are a subset of
//! the fine ones, and at each of them exactly the fine cumulative count.
//!
//! Needs root (skips otherwise; fails under USESCOPE_REQUIRE_BPF=1) and
//! python3 for the waiting process.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::bpf_objects::probe_up;
use common::{Daemon, can_run_bpf, skip};

const FAMILY: &str = "usescope_runqueue_latency_seconds";

/// Says it is ready, blocks on a line of stdin, then two threads hand a token back and forth
/// 3,000 times (each hand-over a wakeup, so a run-queue wait), then exits.
const PING_PONG: &str = "
import sys, threading
print('ready', flush=True)
sys.stdin.readline()
c = threading.Condition()
turn = [0]
def play(p):
    for _ in range(3000):
        with c:
            while turn[0] % 2 != p:
                c.wait()
            turn[0] += 1
            c.notify()
t = threading.Thread(target=play, args=(1,))
t.start()
play(0)
t.join()
";

/// The histogram's lines: (le, cumulative) per bucket (`+Inf` last, as
/// infinity), and the `_sum` and `_count` lines as written.
fn histogram(expo: &str) -> (Vec<(f64, u64)>, Vec<String>) {
    let mut buckets = Vec::new();
    let mut rest = Vec::new();
    for line in expo.lines().filter(|l| l.starts_with(FAMILY)) {
        match line.strip_prefix(&format!("{FAMILY}_bucket{{le=\"")) {
            Some(b) => {
                let (le, n) = b.split_once("\"} ").unwrap();
                let le = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().unwrap()
                };
                buckets.push((le, n.parse().unwrap()));
            }
            None => rest.push(line.to_string()),
        }
    }
    (buckets, rest)
}

#[test]
fn coarser_factors_write_fewer_buckets_with_the_fine_counts() {
    if !can_run_bpf() {
        return;
    }
    let Some(python) = skip::tool_on_path("python3", "apt-get install python3") else {
        return;
    };
    let mut child = Command::new(python)
        .args(["-c", PING_PONG])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Started and asleep on stdin before the first daemon attaches: its
    // start-up (runnable while the daemons' loaders take the CPUs) would
    // otherwise be counted by the daemons attached early and not by the
    // others.
    let mut ready = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut ready)
        .unwrap();
    assert_eq!(ready, "ready\n");
    let stat = format!("/proc/{}/stat", child.id());
    let deadline = Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(&stat)
        .unwrap()
        .rsplit_once(") ")
        .is_some_and(|(_, rest)| rest.starts_with('S'))
    {
        assert!(Instant::now() < deadline, "python3 never slept on stdin");
        std::thread::sleep(Duration::from_millis(10));
    }
    let pid = format!("--probe.runqlat.pid={}", child.id());
    let base = [
        "--collector.disable-defaults",
        "--collector.loadavg",
        "--no-probe.cachestat",
        "--no-probe.drops",
        pid.as_str(),
    ];
    let factors = [Some("2"), None, Some("16")];
    let mut daemons = Vec::new();
    for f in factors {
        let flag = f.map(|f| format!("--probe.histogram.bucket-factor={f}"));
        let mut args = base.to_vec();
        args.extend(flag.as_deref());
        let d = Daemon::start(&args);
        if !probe_up(&d, &d.scrape(), "runqlat") {
            child.kill().unwrap();
            child.wait().unwrap();
            return;
        }
        daemons.push(d);
    }
    // All three attached: let the process run its waits, and wait for it
    // to end, so nothing more is counted between the three scrapes.
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("the ping-pong did not end within 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success());
    let scrapes: Vec<String> = daemons.iter().map(Daemon::scrape).collect();
    let (fine, fine_rest) = histogram(&scrapes[0]);
    let (default, default_rest) = histogram(&scrapes[1]);
    let (coarse, coarse_rest) = histogram(&scrapes[2]);

    // Series per histogram: 25 bounds, 12 and 6, each with +Inf, _sum and
    // _count.
    assert_eq!(fine.len() + fine_rest.len(), 28, "factor 2");
    assert_eq!(default.len() + default_rest.len(), 15, "factor 4 (default)");
    assert_eq!(coarse.len() + coarse_rest.len(), 9, "factor 16");

    let (_, count) = *fine.last().unwrap();
    eprintln!("runqlat, one process: {count} waits; fine buckets {fine:?}");
    assert!(
        count >= 3000,
        "only {count} waits counted for 6,000 hand-overs"
    );
    // The waits spread over more than one fine bucket, so merging is not
    // trivially exact.
    let used = fine.windows(2).filter(|w| w[1].1 > w[0].1).count() + usize::from(fine[0].1 > 0);
    assert!(used >= 2, "all waits in one bucket: {fine:?}");

    for (name, merged, rest) in [
        ("default", &default, &default_rest),
        ("16", &coarse, &coarse_rest),
    ] {
        // The same events: +Inf, _sum and _count identical.
        assert_eq!(rest, &fine_rest, "factor {name}: _sum and _count");
        assert_eq!(merged.last(), fine.last(), "factor {name}: +Inf");
        // Every merged bound is a fine bound, and its count is the sum of
        // the fine buckets up to it, which is the fine cumulative count.
        for &(le, n) in merged {
            let at = fine.iter().position(|b| b.0 == le);
            let Some(at) = at else {
                panic!("factor {name}: le {le} is not a kernel bucket bound");
            };
            let per_bucket = |i: usize| fine[i].1 - if i == 0 { 0 } else { fine[i - 1].1 };
            let summed: u64 = (0..=at).map(per_bucket).sum();
            assert_eq!(n, summed, "factor {name}, le {le}");
        }
        assert!(
            merged.iter().any(|b| b.0 == 0.008192),
            "factor {name}: 8.192 ms is kept"
        );
    }
    for d in daemons {
        assert!(d.stop().success());
    }
}
