//! The eBPF probes on the real kernel, observed through real scrapes.
//!
//! Every test needs root (skips otherwise; fails under
//! USESCOPE_REQUIRE_BPF=1). The tests measure host-wide kernel counters,
//! so they take one lock and run one at a time.

mod common;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use common::bpf_objects::{self, probe_up};
use common::{Daemon, can_run_bpf, sample, sum_of};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Only the probe collectors and their status: quicker scrapes, less noise.
const ARGS: &[&str] = &["--collector.disable-defaults", "--collector.loadavg"];

fn drops(expo: &str, reason: &str) -> f64 {
    sample(
        expo,
        &format!("usescope_skb_drops_total{{reason=\"{reason}\"}}"),
    )
    .unwrap_or(0.0)
}

#[test]
fn drops_count_udp_to_closed_port_as_no_socket() {
    if !can_run_bpf() {
        return;
    }
    let _g = serial();
    let d = Daemon::start(ARGS);
    let before = d.scrape();
    if !probe_up(&d, &before, "drops") {
        return;
    }
    common::udp_to_closed_port(200);
    let after = d.scrape();
    let delta = drops(&after, "NO_SOCKET") - drops(&before, "NO_SOCKET");
    eprintln!("drops: NO_SOCKET rose by {delta} for 200 datagrams");
    assert!(
        (200.0..=220.0).contains(&delta),
        "NO_SOCKET rose by {delta}, want 200..=220"
    );
    assert_eq!(
        sample(
            &after,
            "usescope_probe_info{mode=\"tp_btf\",probe=\"drops\"}"
        ),
        Some(1.0)
    );
    assert!(d.stop().success());
}

/// Every registered probe, enabled with its per-cgroup view, writes
/// exactly the families its spec declares (`ProbeSpec::metrics`), so the
/// list the docs are checked against is the real one; a new probe is
/// checked by registering it.
#[test]
fn every_registered_probe_writes_the_families_it_declares() {
    if !can_run_bpf() {
        return;
    }
    let _g = serial();
    let per_cgroup = |p: &usescope::probes::ProbeSpec| {
        let flag = format!("probe.{}.per-cgroup", p.name);
        p.flags
            .iter()
            .any(|f| f.name == flag)
            .then(|| format!("--{flag}"))
    };
    let toggles: Vec<String> = usescope::probes::ALL
        .iter()
        .flat_map(|p| [Some(format!("--probe.{}", p.name)), per_cgroup(p)])
        .flatten()
        .collect();
    let mut args = ARGS.to_vec();
    args.extend(toggles.iter().map(String::as_str));
    let d = Daemon::start(&args);
    let expo = d.scrape();
    let mut declared = vec![
        "usescope_probe_up".to_string(),
        "usescope_probe_info".to_string(),
        // written whenever a program is attached (probes/status.rs)
        "usescope_bpf_program_recursion_misses_total".to_string(),
        "usescope_build_info".to_string(),
        // the loadavg collector's (ARGS)
        "usescope_tasks".to_string(),
        "usescope_pid_max".to_string(),
        "usescope_threads_max".to_string(),
    ];
    for p in usescope::probes::ALL {
        if !probe_up(&d, &expo, p.name) {
            return;
        }
        declared.extend(p.metrics.iter().map(|m| m.name.to_string()));
    }
    let mut written: Vec<String> = expo
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE usescope_"))
        .filter_map(|l| Some(format!("usescope_{}", l.split(' ').next()?)))
        .collect();
    declared.sort();
    written.sort();
    assert_eq!(written, declared);
    assert!(d.stop().success());
}

/// A directory on a disk filesystem: the page cache does not apply to
/// tmpfs files the way it does to disk files.
fn disk_dir() -> tempfile::TempDir {
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    let tmp = std::env::temp_dir();
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    let c = std::ffi::CString::new(tmp.to_str().unwrap()).unwrap();
    // SAFETY: valid path and out-pointer.
    let ok = unsafe { libc::statfs(c.as_ptr(), &mut st) } == 0;
    let base = if ok && st.f_type as i64 != TMPFS_MAGIC {
        tmp
    } else {
        PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
    };
    tempfile::Builder::new()
        .prefix("usescope-probes-")
        .tempdir_in(base)
        .unwrap()
}

/// Voluntary context switches of one thread (each is later followed by a
/// wakeup and a switch-in).
fn voluntary_switches(tid: i32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

fn gettid() -> i32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() }
}

/// Takes every turn of `parity` (0 or 1) until `2 * n` turns are done.
fn play(pair: &(Mutex<u32>, Condvar), parity: u32, n: u32) {
    let (m, cv) = pair;
    let mut turn = m.lock().unwrap();
    loop {
        while *turn % 2 != parity && *turn < 2 * n {
            turn = cv.wait(turn).unwrap();
        }
        if *turn >= 2 * n {
            return;
        }
        *turn += 1;
        cv.notify_one();
    }
}

/// Two threads hand a token back and forth `n` times through a condvar.
/// Returns how often they blocked: each block is one wakeup to measure.
fn ping_pong(n: u32) -> u64 {
    let pair = Arc::new((Mutex::new(0u32), Condvar::new()));
    let p2 = pair.clone();
    let peer = std::thread::spawn(move || {
        let before = voluntary_switches(gettid());
        play(&p2, 1, n);
        voluntary_switches(gettid()) - before
    });
    let before = voluntary_switches(gettid());
    play(&pair, 0, n);
    let mine = voluntary_switches(gettid()) - before;
    mine + peer.join().unwrap()
}

/// (le, cumulative) buckets, sum and count of the unlabelled histogram.
fn histogram(expo: &str) -> (Vec<(f64, f64)>, f64, f64) {
    let buckets = expo
        .lines()
        .filter_map(|l| l.strip_prefix("usescope_runqueue_latency_seconds_bucket{le=\""))
        .map(|rest| {
            let (le, v) = rest.split_once("\"} ").unwrap();
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().unwrap()
            };
            (le, v.parse().unwrap())
        })
        .collect();
    let sum = sample(expo, "usescope_runqueue_latency_seconds_sum").unwrap();
    let count = sample(expo, "usescope_runqueue_latency_seconds_count").unwrap();
    (buckets, sum, count)
}

fn assert_histogram_sane(expo: &str) {
    let (buckets, sum, count) = histogram(expo);
    // The default --probe.histogram.bucket-factor=4: every second kernel
    // bound, 2 µs … 8.4 s (tests/probe_histogram_buckets.rs has the others).
    assert_eq!(buckets.len(), 13, "12 finite buckets and +Inf");
    assert_eq!(buckets[0].0, 2e-6);
    assert_eq!(buckets[11].0, 8.388608);
    for w in buckets.windows(2) {
        assert!(w[0].0 < w[1].0, "le ascending");
        assert!(w[0].1 <= w[1].1, "cumulative counts: {w:?}");
    }
    assert_eq!(buckets[12], (f64::INFINITY, count));
    assert!(sum >= 0.0);
    // Every sample is <= 8.4 s or counted in +Inf only; the sum cannot
    // exceed count * the largest le plus the overflow samples' share.
    let finite = buckets[11].1;
    if finite == count && count > 0.0 {
        assert!(sum <= count * 8.388608, "sum {sum} count {count}");
    }
}

/// Both designs this kernel takes, the default (the scheduler's
/// run_delay) and the wakeup-timed one on task storage: every blocking
/// round trip of a ping-pong is a measured wait.
#[test]
fn runqlat_counts_every_wakeup_of_a_ping_pong() {
    if !can_run_bpf() {
        return;
    }
    let _g = serial();
    for (source, mode) in [
        ("auto", "tp_btf+sched_info"),
        ("task-storage", "tp_btf+task_storage"),
    ] {
        let flag = format!("--probe.runqlat.source={source}");
        let mut args = ARGS.to_vec();
        args.push(&flag);
        let d = Daemon::start(&args);
        let before = d.scrape();
        if !probe_up(&d, &before, "runqlat") {
            return;
        }
        assert_eq!(
            runqlat_mode(&before),
            mode,
            "this kernel has sched_info, task storage and tp_btf"
        );
        let wakeups = ping_pong(5000);
        let after = d.scrape();
        assert_histogram_sane(&before);
        assert_histogram_sane(&after);
        let (_, sum0, count0) = histogram(&before);
        let (_, sum1, count1) = histogram(&after);
        assert!(
            wakeups >= 1000,
            "the ping-pong blocked only {wakeups} times"
        );
        assert!(
            count1 - count0 >= wakeups as f64,
            "{mode}: _count rose by {} for {wakeups} wakeups",
            count1 - count0
        );
        let mean = (sum1 - sum0) / (count1 - count0);
        eprintln!(
            "runqlat {mode}: {wakeups} wakeups, _count +{}, mean latency {mean} s",
            count1 - count0
        );
        assert!(mean > 0.0 && mean < 1.0, "mean run-queue latency {mean} s");
        assert!(d.stop().success());
    }
}

/// The default design against the scheduler's per-thread accounting that
/// /proc/PID/task/TID/schedstat shows (run_delay, the time spent waiting
/// on a run queue, and the arrivals on a CPU). Four busy loops share the
/// two CPUs; the probe measures only the first (`--probe.runqlat.pid`),
/// and over a window of 3 s its `_sum` must equal that process's
/// run_delay growth and its `_count` the arrivals. schedstat is read just
/// before and just after each scrape, so the window the probe saw lies
/// between the shortest and the longest schedstat window (with 4 loops on
/// 2 CPUs an arrival comes every few ms, as long as a scrape takes: one
/// schedstat read per edge missed a few). The probe reports a wait when
/// the task next stops running, schedstat when it starts, so each edge
/// may still hold one wait that only one of them has seen: 2% or 20 ms on
/// the sum, 2 on the count, outside those bounds.
#[test]
fn runqlat_agrees_with_schedstat_run_delay() {
    if !can_run_bpf() {
        return;
    }
    let _g = serial();
    let mut busy: Vec<std::process::Child> = (0..4)
        .map(|_| {
            std::process::Command::new("sh")
                .args(["-c", "while :; do :; done"])
                .spawn()
                .unwrap()
        })
        .collect();
    let pid = busy[0].id();
    let filter = format!("--probe.runqlat.pid={pid}");
    let mut args = ARGS.to_vec();
    args.push(&filter);
    let d = Daemon::start(&args);
    let first = d.scrape();
    let up = probe_up(&d, &first, "runqlat");
    let mut measured = None;
    if up {
        assert_eq!(runqlat_mode(&first), "tp_btf+sched_info");
        std::thread::sleep(Duration::from_millis(300));
        let before0 = schedstat_of(pid);
        let scrape0 = d.scrape();
        let after0 = schedstat_of(pid);
        std::thread::sleep(Duration::from_secs(3));
        let before1 = schedstat_of(pid);
        let scrape1 = d.scrape();
        let after1 = schedstat_of(pid);
        measured = Some((scrape0, scrape1, [before0, after0, before1, after1]));
    }
    for b in &mut busy {
        b.kill().unwrap();
        b.wait().unwrap();
    }
    let Some((scrape0, scrape1, [before0, after0, before1, after1])) = measured else {
        return;
    };
    // The shortest window (after the first scrape to before the second)
    // and the longest (before the first to after the second).
    let delay = |from: (u64, u64), to: (u64, u64)| (to.0 - from.0) as f64 / 1e9;
    let arrivals = |from: (u64, u64), to: (u64, u64)| (to.1 - from.1) as f64;
    let (delay_lo, delay_hi) = (delay(after0, before1), delay(before0, after1));
    let (arrivals_lo, arrivals_hi) = (arrivals(after0, before1), arrivals(before0, after1));
    let (_, sum0, count0) = histogram(&scrape0);
    let (_, sum1, count1) = histogram(&scrape1);
    let (sum, count) = (sum1 - sum0, count1 - count0);
    eprintln!(
        "runqlat pid {pid}: _sum +{sum:.4} s, _count +{count}; schedstat: run_delay \
         +{delay_lo:.4}..{delay_hi:.4} s, arrivals +{arrivals_lo}..{arrivals_hi}"
    );
    assert!(
        delay_lo > 0.3,
        "a busy loop sharing two CPUs with three waited only {delay_lo} s"
    );
    let slack = (0.02 * delay_lo).max(0.02);
    assert!(
        sum >= delay_lo - slack && sum <= delay_hi + slack,
        "_sum +{sum} s against run_delay +{delay_lo}..{delay_hi} s"
    );
    assert!(
        count >= arrivals_lo - 2.0 && count <= arrivals_hi + 2.0,
        "_count +{count} against +{arrivals_lo}..{arrivals_hi} arrivals"
    );
    assert!(d.stop().success());
}

/// (run_delay ns, arrivals) summed over the threads of process `pid`.
fn schedstat_of(pid: u32) -> (u64, u64) {
    let mut total = (0, 0);
    for t in std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
    {
        let text = std::fs::read_to_string(t.path().join("schedstat")).unwrap();
        let f: Vec<u64> = text
            .split_whitespace()
            .map(|v| v.parse().unwrap())
            .collect();
        total.0 += f[1];
        total.1 += f[2];
    }
    total
}

#[test]
fn runqlat_tiny_start_map_skips_instead_of_corrupting() {
    if !can_run_bpf() {
        return;
    }
    let _g = serial();
    let mut args = ARGS.to_vec();
    args.extend([
        "--probe.runqlat.source=lru-hash",
        "--probe.runqlat.max-tasks=2",
    ]);
    let d = Daemon::start(&args);
    let before = d.scrape();
    if !probe_up(&d, &before, "runqlat") {
        return;
    }
    assert_eq!(runqlat_mode(&before), "tp_btf+lru_hash");
    // Many runnable threads at once overflow a 2-entry start map.
    let threads: Vec<_> = (0..8)
        .map(|_| std::thread::spawn(|| ping_pong(300)))
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let after = d.scrape();
    assert_histogram_sane(&after);
    let missed = |e: &str| sample(e, "usescope_runqueue_latency_missed_total").unwrap();
    assert!(
        missed(&after) > missed(&before),
        "evictions are counted as missed"
    );
    assert!(d.stop().success());
}

/// The `mode` label of runqlat's `usescope_probe_info`.
fn runqlat_mode(expo: &str) -> String {
    expo.lines()
        .filter_map(|l| l.strip_prefix("usescope_probe_info{mode=\""))
        .find_map(|l| l.strip_suffix("\",probe=\"runqlat\"} 1"))
        .unwrap_or("none")
        .to_string()
}

/// Forks `n` children that exit at once, one after the other.
fn fork_and_reap(n: usize) {
    for _ in 0..n {
        // SAFETY: the child only calls _exit, which is async-signal-safe,
        // so forking this multithreaded process is sound.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
        if pid == 0 {
            // SAFETY: leaving the child at once, without running destructors.
            unsafe { libc::_exit(0) };
        }
        let mut status = 0;
        // SAFETY: reaping our own child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    }
}

/// 10 000 short-lived processes cost no samples: each child's wait is the
/// growth of its own run_delay, and a child's first (here only) run is
/// measured whole because it has run once in its life, so `_count` rises
/// by at least the number of children and `missed_total` (only tasks
/// older than the probe, on their first run after attach) stays near 0.
/// (The wakeup-timed designs measured 0.02–0.2% missed here; the LRU
/// fallback loses samples when runnable tasks outnumber its entries, see
/// `runqlat_tiny_start_map_skips_instead_of_corrupting`.)
#[test]
fn runqlat_misses_nothing_under_process_churn() {
    if !can_run_bpf() {
        return;
    }
    let _g = serial();
    let d = Daemon::start(ARGS);
    let before = d.scrape();
    if !probe_up(&d, &before, "runqlat") {
        return;
    }
    assert_eq!(runqlat_mode(&before), "tp_btf+sched_info");
    const CHILDREN: usize = 10_000;
    let started = std::time::Instant::now();
    fork_and_reap(CHILDREN);
    let after = d.scrape();
    let missed = |e: &str| sample(e, "usescope_runqueue_latency_missed_total").unwrap();
    let (_, _, count0) = histogram(&before);
    let (_, _, count1) = histogram(&after);
    let (switch_ins, lost) = (count1 - count0, missed(&after) - missed(&before));
    eprintln!(
        "runqlat: {CHILDREN} processes in {:?}: _count +{switch_ins}, missed +{lost} ({:.3}%)",
        started.elapsed(),
        100.0 * lost / (switch_ins + lost)
    );
    assert!(
        switch_ins >= CHILDREN as f64,
        "each child's first run is measured: _count rose by {switch_ins}"
    );
    assert!(
        lost <= 0.005 * (switch_ins + lost),
        "missed rose by {lost} against {switch_ins} measured switch-ins (> 0.5%)"
    );
    assert!(
        lost < CHILDREN as f64 / 20.0,
        "missed rose by {lost} for {CHILDREN} processes"
    );
    assert!(d.stop().success());
}

/// (id, name) of every BPF program loaded on the host.
fn loaded_programs() -> Vec<(u32, String)> {
    aya::programs::loaded_programs()
        .filter_map(Result::ok)
        .map(|p| (p.id(), p.name_as_str().unwrap_or("").to_string()))
        .collect()
}

#[test]
fn sigterm_detaches_every_program() {
    if !can_run_bpf() {
        return;
    }
    let _g = serial();
    let mut args = ARGS.to_vec();
    args.extend(["--probe.biolatency", "--probe.softirq"]);
    let d = Daemon::start(&args);
    let expo = d.scrape();
    for p in ["runqlat", "cachestat", "drops", "biolatency", "softirq"] {
        if !probe_up(&d, &expo, p) {
            return;
        }
    }
    let (ours, maps, links) = bpf_objects::objects_of(d.child.id());
    assert_eq!(
        ours.len(),
        16,
        "1 runqlat + 9 cachestat + 1 drops + 2 biolatency + 3 softirq programs: {ours:?}"
    );
    let names: Vec<(u32, String)> = loaded_programs()
        .into_iter()
        .filter(|(id, _)| ours.contains(id))
        .collect();
    assert_eq!(names.len(), ours.len());
    assert!(names.iter().all(|(_, n)| n.starts_with("us_")), "{names:?}");
    assert!(
        maps.len() >= 9,
        "hist/start maps of runqlat and biolatency, cachestat's counters and per-thread state, drops', softirq's: {maps:?}"
    );
    assert_eq!(links.len(), 16, "one link per program: {links:?}");
    let status = d.stop();
    assert!(status.success(), "exit status {status:?}");
    bpf_objects::assert_released(&ours, &maps, &links);
}

#[test]
fn second_instance_does_not_disturb_the_first() {
    if !can_run_bpf() {
        return;
    }
    let _g = serial();
    let first = Daemon::start(ARGS);
    let mut args = ARGS.to_vec();
    args.extend(["--probe.drops.protocol-label", "--probe.runqlat.per-cpu"]);
    let second = Daemon::start(&args);
    let (e1, e2) = (first.scrape(), second.scrape());
    if !probe_up(&first, &e1, "drops") || !probe_up(&second, &e2, "drops") {
        return;
    }
    // The second instance's options: protocol label and per-CPU histograms.
    common::udp_to_closed_port(50);
    let e2 = second.scrape();
    let v4 = sample(
        &e2,
        "usescope_skb_drops_total{protocol=\"ipv4\",reason=\"NO_SOCKET\"}",
    );
    assert!(v4.unwrap_or(0.0) >= 50.0, "protocol label: {v4:?}");
    assert!(e2.contains("usescope_runqueue_latency_seconds_count{cpu=\"0\"}"));
    assert!(second.stop().success());

    let before = drops(&first.scrape(), "NO_SOCKET");
    common::udp_to_closed_port(200);
    let after = drops(&first.scrape(), "NO_SOCKET");
    assert!(
        after - before >= 200.0,
        "first instance after the second stopped: {before} → {after}"
    );
    assert!(first.stop().success());
}

/// Runs usescope as uid/gid 65534 with no capabilities, returning the child
/// and its address once it listens, plus its log lines so far.
fn start_unprivileged() -> (Child, SocketAddr, Arc<Mutex<Vec<String>>>) {
    let mut child = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
        ])
        .arg(common::bin())
        .arg("--web.listen-address=127.0.0.1:0")
        .args(ARGS)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("setpriv (util-linux) is needed for the unprivileged test");
    let stderr = child.stderr.take().unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let (tx, rx) = std::sync::mpsc::channel();
    let sink = log.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(a) = line
                .split_whitespace()
                .find_map(|kv| kv.strip_prefix("address="))
                .filter(|_| line.contains("usescope listening"))
            {
                let _ = tx.send(a.trim_matches('"').to_string());
            }
            sink.lock().unwrap().push(line);
        }
    });
    let addr = rx
        .recv_timeout(Duration::from_secs(30))
        .unwrap_or_else(|_| {
            let _ = child.kill();
            panic!(
                "unprivileged usescope did not start: {:?}",
                log.lock().unwrap()
            )
        })
        .parse()
        .unwrap();
    (child, addr, log)
}

#[test]
fn without_privileges_probes_are_down_and_proc_metrics_stay() {
    if !can_run_bpf() {
        return;
    }
    let _g = serial();
    let (mut child, addr, log) = start_unprivileged();
    let r = common::http_get(addr, "/metrics", &[]);
    assert_eq!(r.status, 200);
    let expo = r.text();
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert!(status.success(), "exit status {status:?}");

    assert!(
        sample(&expo, "node_load1").is_some(),
        "/proc metrics still served"
    );
    for p in ["runqlat", "cachestat", "drops"] {
        assert_eq!(
            sample(&expo, &format!("usescope_probe_up{{probe=\"{p}\"}}")),
            Some(0.0),
            "{p}"
        );
        assert_eq!(
            sample(
                &expo,
                &format!("usescope_probe_info{{mode=\"none\",probe=\"{p}\"}}")
            ),
            Some(1.0)
        );
        assert_eq!(
            sample(
                &expo,
                &format!("node_scrape_collector_success{{collector=\"probe_{p}\"}}")
            ),
            None,
            "a probe that did not load registers no collector"
        );
    }
    assert_eq!(sum_of(&expo, "usescope_skb_drops_total"), 0.0);
    let log = log.lock().unwrap();
    for p in ["runqlat", "cachestat", "drops"] {
        let warnings: Vec<&String> = log
            .iter()
            .filter(|l| l.contains("level=warn") && l.contains(&format!("probe={p}")))
            .collect();
        assert_eq!(warnings.len(), 1, "one warning for {p}: {log:?}");
        assert!(
            warnings[0].contains("permission denied"),
            "the warning names the cause: {}",
            warnings[0]
        );
    }
}

/// The pids of processes whose command line contains every one of `words`.
fn pids_with_args(words: &[&str]) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
                let c = String::from_utf8_lossy(&c);
                words.iter().all(|w| c.contains(w))
            })
        })
        .collect()
}

#[test]
fn a_killed_loader_takes_only_the_probes_down() {
    if !can_run_bpf() {
        return;
    }
    let _g = serial();
    // The loader lives ~0.1 s; a watcher kills it (SIGKILL, by pid) as soon
    // as it appears. It is recognised by the hidden flag plus a telemetry
    // path unique to this run, which the daemon passes on to it.
    for attempt in 1..=5 {
        let marker = format!("/metrics-loader-kill-{}-{attempt}", std::process::id());
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let watcher = {
            let (marker, done) = (marker.clone(), done.clone());
            std::thread::spawn(move || {
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    let pids = pids_with_args(&["--internal.probe-loader", &marker]);
                    if let Some(&pid) = pids.first() {
                        // SAFETY: SIGKILL to the loader of the daemon this test started.
                        unsafe { libc::kill(pid, libc::SIGKILL) };
                        return true;
                    }
                    std::thread::sleep(Duration::from_micros(200));
                }
                false
            })
        };
        let telemetry = format!("--web.telemetry-path={marker}");
        let mut args = ARGS.to_vec();
        args.push(&telemetry);
        let d = Daemon::start(&args);
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        if !watcher.join().unwrap() {
            eprintln!("attempt {attempt}: the loader finished before it could be killed");
            assert!(d.stop().success());
            continue;
        }
        let expo = d.get(&marker).text();
        assert!(
            sample(&expo, "node_load1").is_some(),
            "/proc metrics served"
        );
        let log = d.log().join("\n");
        for p in ["runqlat", "cachestat", "drops"] {
            assert_eq!(
                sample(&expo, &format!("usescope_probe_up{{probe=\"{p}\"}}")),
                Some(0.0),
                "{p}: {log}"
            );
        }
        assert_eq!(
            log.matches("ended without reporting").count(),
            3,
            "each probe's warning says the loader died: {log}"
        );
        assert!(log.contains("SIGKILL"), "and how: {log}");
        assert!(d.stop().success());
        return;
    }
    panic!("the loader was never caught alive in 5 attempts");
}

/// BPF run-time statistics cost every BPF program on the host, so they
/// are off unless asked for; asked for, they count the probe's runs.
#[test]
fn bpf_statistics_are_opt_in() {
    if !can_run_bpf() {
        return;
    }
    let _g = serial();
    let d = Daemon::start(ARGS);
    let expo = d.scrape();
    if !probe_up(&d, &expo, "drops") {
        return;
    }
    // Recursion misses are always exported; run time and runs only on ask.
    assert!(!expo.contains("usescope_bpf_program_run"), "{expo}");
    assert!(expo.contains("usescope_bpf_program_recursion_misses_total{probe=\"drops\"}"));
    assert!(d.stop().success());

    let mut args = ARGS.to_vec();
    args.push("--probe.bpf-stats");
    let d = Daemon::start(&args);
    // Summed over the probe's programs: one, whichever mode attached.
    let runs = |e: &str| -> f64 {
        e.lines()
            .filter(|l| l.starts_with("usescope_bpf_program_runs_total{probe=\"drops\","))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    let before = runs(&d.scrape());
    common::udp_to_closed_port(100);
    let after = runs(&d.scrape());
    assert!(after - before >= 100.0, "{before} -> {after}");
    assert!(d.stop().success());
}

/// kB of a `/proc/PID/status` field.
fn status_kb(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches(" kB").parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// The loader process, not the daemon, parses the kernel BTF (tens of MB
/// of heap); the daemon's high-water mark stays that of a /proc exporter.
/// The exact number and the 10 MB target are bench/run.py's business; this
/// bound only catches loading creeping back into the daemon (46 MB then).
/// It is a debug build, whose resident code grows with every collector
/// (20.6 MB with the 49 node_exporter collectors and five probes), so the
/// bound sits between that and the regression.
#[test]
fn the_daemon_never_holds_the_btf_parse() {
    if !can_run_bpf() {
        return;
    }
    let _g = serial();
    let d = Daemon::start(&[]);
    let expo = d.scrape();
    for p in ["runqlat", "cachestat", "drops"] {
        if !probe_up(&d, &expo, p) {
            return;
        }
    }
    let hwm = status_kb(d.child.id(), "VmHWM");
    assert!(hwm < 30 * 1024, "daemon VmHWM {hwm} kB");
    assert!(d.stop().success());
}

/// A loop device over a file on disk, with direct I/O to its backing file
/// (`losetup --direct-io=on`); detached on drop.
struct LoopDevice {
    dev: String,
    _dir: tempfile::TempDir,
}

impl LoopDevice {
    fn attach(size: u64) -> LoopDevice {
        let dir = disk_dir();
        let file = dir.path().join("backing.img");
        std::fs::File::create(&file).unwrap().set_len(size).unwrap();
        let out = Command::new("losetup")
            .args(["--find", "--show", "--direct-io=on"])
            .arg(&file)
            .output()
            .expect("losetup (util-linux)");
        assert!(
            out.status.success(),
            "losetup: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let dev = String::from_utf8(out.stdout).unwrap().trim().to_string();
        LoopDevice { dev, _dir: dir }
    }

    /// The disk's name in /proc/diskstats and in the `device` label.
    fn name(&self) -> &str {
        self.dev.trim_start_matches("/dev/")
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.dev]).status();
    }
}

/// (reads completed, ms reading, writes completed, ms writing) of a disk.
fn diskstats(name: &str) -> (f64, f64, f64, f64) {
    let text = std::fs::read_to_string("/proc/diskstats").unwrap();
    let f: Vec<f64> = text
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.get(2) == Some(&name))
        .unwrap_or_else(|| panic!("{name} not in /proc/diskstats"))[3..]
        .iter()
        .map(|v| v.parse().unwrap())
        .collect();
    (f[0], f[3], f[4], f[7])
}

/// `n` 4 KiB O_DIRECT writes, then `n` reads, at scattered offsets of a
/// block device of `size` bytes.
fn direct_io(dev: &str, size: u64, n: u64) {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(dev)
        .unwrap();
    let layout = std::alloc::Layout::from_size_align(4096, 4096).unwrap();
    // SAFETY: a non-zero-sized layout; freed below with the same layout.
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
    assert!(!ptr.is_null());
    // SAFETY: ptr is valid for 4096 bytes until dealloc.
    let buf = unsafe { std::slice::from_raw_parts_mut(ptr, 4096) };
    let blocks = size / 4096;
    let offset = |i: u64| (i.wrapping_mul(2_654_435_761) % blocks) * 4096;
    for i in 0..n {
        buf[0] = i as u8;
        f.write_all_at(buf, offset(i)).unwrap();
    }
    for i in 0..n {
        f.read_exact_at(buf, offset(i)).unwrap();
    }
    // SAFETY: allocated above with this layout.
    unsafe { std::alloc::dealloc(ptr, layout) };
}

/// biolatency against /proc/diskstats on the same disk: over an O_DIRECT
/// workload on a loop device, `_count` per op equals the completed reads
/// and writes (within 2%), and `_sum` (issue to completion) is at most
/// diskstats' time, which also counts the wait before issue.
#[test]
fn biolatency_counts_match_diskstats_on_a_loop_device() {
    if !can_run_bpf() {
        return;
    }
    let _g = serial();
    const SIZE: u64 = 64 << 20;
    const N: u64 = 2000;
    let lo = LoopDevice::attach(SIZE);
    let mut args = ARGS.to_vec();
    args.push("--probe.biolatency");
    let d = Daemon::start(&args);
    // Whatever probing of the new disk udev does, let it finish first.
    std::thread::sleep(Duration::from_millis(300));
    let before = d.scrape();
    if !probe_up(&d, &before, "biolatency") {
        return;
    }
    let ds0 = diskstats(lo.name());
    direct_io(&lo.dev, SIZE, N);
    let after = d.scrape();
    let ds1 = diskstats(lo.name());
    let series = |e: &str, op: &str, part: &str| {
        sample(
            e,
            &format!(
                "usescope_block_io_latency_seconds_{part}{{device=\"{}\",op=\"{op}\"}}",
                lo.name()
            ),
        )
        .unwrap_or(0.0)
    };
    let checks = [
        ("read", ds1.0 - ds0.0, (ds1.1 - ds0.1) / 1e3),
        ("write", ds1.2 - ds0.2, (ds1.3 - ds0.3) / 1e3),
    ];
    for (op, ios, disk_seconds) in checks {
        let count = series(&after, op, "count") - series(&before, op, "count");
        let sum = series(&after, op, "sum") - series(&before, op, "sum");
        eprintln!(
            "biolatency {} {op}: _count +{count}, diskstats +{ios} ios; \
             _sum +{sum:.4} s, diskstats time +{disk_seconds:.3} s",
            lo.name()
        );
        assert!(ios >= N as f64, "diskstats saw {ios} {op}s for {N}");
        assert!(
            (count - ios).abs() <= 0.02 * ios,
            "{op}: _count rose by {count}, diskstats by {ios}"
        );
        // diskstats prints whole milliseconds of a nanosecond total.
        assert!(
            sum > 0.0 && sum <= disk_seconds + 0.002,
            "{op}: _sum rose by {sum} s, diskstats time by {disk_seconds} s"
        );
    }
    assert!(d.stop().success());
}

/// /proc/softirqs as (vector, per-CPU counts).
fn proc_softirqs() -> Vec<(String, Vec<f64>)> {
    std::fs::read_to_string("/proc/softirqs")
        .unwrap()
        .lines()
        .skip(1)
        .filter_map(|l| {
            let (name, counts) = l.split_once(':')?;
            let counts = counts
                .split_whitespace()
                .map(|v| v.parse().unwrap())
                .collect();
            Some((name.trim().to_string(), counts))
        })
        .collect()
}

/// softirq against /proc/softirqs: per vector and CPU, the handler runs
/// the probe counts between two scrapes lie between what the kernel's own
/// counters count over a window inside the scrapes and over one around
/// them (/proc/softirqs read before the first scrape, after it, before the
/// second and after it), so what other work on the machine raises
/// meanwhile needs no tolerance. The upper side is exact (one event of
/// slack for a read between the kernel's count and the probe's hook).
/// The lower side allows 2% (at least 8): the probe sees a few entries
/// fewer than the kernel counts (2 to 11 TIMER, SCHED, RCU or BLOCK
/// entries under load, up to 3 per vector in 5 s on an idle machine, RCU
/// 23 against 27 in one CI run), with
/// no recursion misses reported for the programs; the block_rq_complete
/// tracepoint shows the same kind of shortfall to bpftrace
/// (docs/probes.md). Loopback UDP traffic makes NET_RX busy.
#[test]
fn softirq_entries_match_proc_softirqs() {
    if !can_run_bpf() {
        return;
    }
    let _g = serial();
    let mut args = ARGS.to_vec();
    args.push("--probe.softirq");
    let d = Daemon::start(&args);
    let first = d.scrape();
    if !probe_up(&d, &first, "softirq") {
        return;
    }
    let outer0 = proc_softirqs();
    let before = d.scrape();
    let inner0 = proc_softirqs();
    let started = std::time::Instant::now();
    common::udp_to_closed_port(20_000);
    std::thread::sleep(Duration::from_millis(1500));
    let inner1 = proc_softirqs();
    let after = d.scrape();
    let elapsed = started.elapsed().as_secs_f64();
    let outer1 = proc_softirqs();
    let mut compared = 0;
    let (mut total_ours, mut total_inner, mut total_outer) = (0.0, 0.0, 0.0);
    let mut seconds = 0.0;
    for (v, (name, o0)) in outer0.iter().enumerate() {
        for (cpu, start) in o0.iter().enumerate() {
            let series = format!("{{cpu=\"{cpu}\",vector=\"{name}\"}}");
            let entries = |e: &str| {
                sample(e, &format!("usescope_softirq_entries_total{series}")).unwrap_or(0.0)
            };
            let ours = entries(&after) - entries(&before);
            let inner = inner1[v].1[cpu] - inner0[v].1[cpu];
            let outer = outer1[v].1[cpu] - start;
            seconds += sample(&after, &format!("usescope_softirq_seconds_total{series}"))
                .unwrap_or(0.0)
                - sample(&before, &format!("usescope_softirq_seconds_total{series}"))
                    .unwrap_or(0.0);
            total_ours += ours;
            total_inner += inner;
            total_outer += outer;
            eprintln!(
                "softirq {name} cpu {cpu}: /proc/softirqs inside +{inner}, probe +{ours}, around +{outer}"
            );
            assert!(
                inner - (inner * 0.02).max(8.0) <= ours && ours <= outer + 1.0,
                "{name} cpu {cpu}: probe +{ours} outside /proc/softirqs' +{inner}..+{outer}"
            );
            if inner >= 20.0 {
                compared += 1;
            }
        }
    }
    let slack = (outer0.len() * outer0[0].1.len()) as f64;
    assert!(
        total_inner * 0.98 - slack <= total_ours && total_ours <= total_outer + slack,
        "all vectors: probe +{total_ours} outside /proc/softirqs' +{total_inner}..+{total_outer}"
    );
    // The bracket is tight: what the scrapes' own time adds is small
    // next to the 20 000 datagrams.
    assert!(
        total_outer - total_inner < total_inner * 0.05,
        "windows too far apart to mean anything: +{total_inner}..+{total_outer}"
    );
    assert!(compared >= 2, "too few busy vectors to compare");
    let cpus = outer0[0].1.len() as f64;
    assert!(
        seconds > 0.0 && seconds < elapsed * cpus,
        "softirq time {seconds} s over {elapsed} s on {cpus} CPUs"
    );
    let net_rx = sample(
        &after,
        "usescope_softirq_latency_seconds_count{vector=\"NET_RX\"}",
    )
    .unwrap_or(0.0);
    assert!(net_rx > 0.0, "NET_RX raise-to-entry latencies measured");
    assert!(d.stop().success());
}
