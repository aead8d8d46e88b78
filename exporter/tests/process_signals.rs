//! The process table against the kernel, on the real binary: the tasks
//! probe's zombie gauge and exec counter, and the loadavg collector's
//! tasks against pid_max.
//!
//! Oracles:
//! - zombies: a walk of /proc counting processes in state `Z` (what top
//!   and ps count), taken between two scrapes. Other sessions' processes
//!   become zombies and are reaped meanwhile, so each comparison is retried
//!   until a moment when both scrapes and the walk agree exactly
//!   (AGREE_WITHIN). The test's own
//!   zombies are made before the daemon starts, then more, then reaped in
//!   two steps; then 3 000 at once.
//! - execs: batches of successful and failed execs; every batch's rise is
//!   at least the successes, and some batch in which nothing else on the
//!   host exec'd rises by exactly them (a failed exec counted, or anything
//!   counted twice, fails).
//! - tasks: /proc/loadavg's total read before and after the scrape, and
//!   400 threads of this test counted; pid_max and threads-max as the
//!   files say.
//! - a storm of process starts (as many forks as two threads make) must
//!   not slow a scrape past its deadline, nor leave zombies counted.
//!
//! Needs root and BPF (skips otherwise; fails under USESCOPE_REQUIRE_BPF=1
//! or CI=true).

mod common;

use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use common::bpf_objects::probe_up;
use common::{Daemon, can_run_bpf, sample};

const ARGS: &[&str] = &[
    "--collector.disable-defaults",
    "--collector.loadavg",
    "--collector.stat",
    "--no-probe.runqlat",
    "--no-probe.cachestat",
    "--no-probe.drops",
    "--probe.tasks",
];

/// How long a comparison may take to find a quiet moment.
const AGREE_WITHIN: Duration = Duration::from_secs(20);
/// Other sessions' zombies that may come between two stages.
const SLACK: i64 = 12;

/// The tests count this process's children and the host's zombies: one
/// at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Processes in state Z, from every /proc/PID/stat (the field after the
/// command's closing parenthesis).
fn zombies_in_proc() -> i64 {
    let mut n = 0;
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = e.file_name();
        if !name.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue; // gone meanwhile
        };
        if stat
            .rfind(')')
            .and_then(|i| stat.as_bytes().get(i + 2))
            .is_some_and(|&s| s == b'Z')
        {
            n += 1;
        }
    }
    n
}

fn value(expo: &str, name: &str) -> f64 {
    sample(expo, name).unwrap_or_else(|| panic!("{name} missing from the scrape:\n{expo}"))
}

fn zombie_gauge(d: &Daemon) -> i64 {
    value(&d.scrape(), "usescope_zombie_processes") as i64
}

/// Scrape, walk, scrape until the three agree, which a quiet moment shows
/// (other sessions' processes come and go). A gauge that counts anything
/// else never agrees. Returns the agreed count.
fn agreed_zombies(d: &Daemon, stage: &str) -> i64 {
    let end = Instant::now() + AGREE_WITHIN;
    let mut seen = Vec::new();
    loop {
        let g1 = zombie_gauge(d);
        let walk = zombies_in_proc();
        let g2 = zombie_gauge(d);
        seen.push((g1, walk, g2));
        if g1 == walk && g2 == walk {
            eprintln!(
                "{stage}: gauge = /proc walk = {walk} (after {} samples)",
                seen.len()
            );
            return walk;
        }
        assert!(
            Instant::now() < end,
            "{stage}: the gauge never equalled the walk of /proc within {AGREE_WITHIN:?}: (gauge, walk, gauge) {seen:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Children of this test that have exited and are not reaped: reaped when
/// dropped, also when the test fails.
struct Zombies(Vec<libc::pid_t>);

impl Zombies {
    /// Forks `n` children that exit at once, and waits until /proc shows
    /// each as a zombie.
    fn make(n: usize) -> Zombies {
        let mut z = Zombies(Vec::new());
        for _ in 0..n {
            // SAFETY: the child only calls _exit, which is
            // async-signal-safe, so forking a threaded process is sound.
            let pid = unsafe { libc::fork() };
            assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
            if pid == 0 {
                // SAFETY: ends the child at once.
                unsafe { libc::_exit(0) };
            }
            z.0.push(pid);
        }
        let end = Instant::now() + Duration::from_secs(20);
        for &pid in &z.0 {
            while !is_zombie(pid) {
                assert!(Instant::now() < end, "child {pid} never became a zombie");
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        z
    }

    fn reap(&mut self, n: usize) {
        for pid in self.0.drain(..n.min(self.0.len())) {
            reap(pid);
        }
    }
}

impl Drop for Zombies {
    fn drop(&mut self) {
        let n = self.0.len();
        self.reap(n);
    }
}

fn is_zombie(pid: libc::pid_t) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rfind(')')
            .and_then(|i| s.as_bytes().get(i + 2))
            .is_some_and(|&c| c == b'Z')
    })
}

fn reap(pid: libc::pid_t) {
    let mut status = 0;
    // SAFETY: waits for a child this test forked.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
}

fn start() -> Option<Daemon> {
    if !can_run_bpf() {
        return None;
    }
    let d = Daemon::start(ARGS);
    probe_up(&d, &d.scrape(), "tasks").then_some(d)
}

/// Zombies made before the daemon attached are counted (the seed) and
/// uncounted when reaped; zombies made after, likewise; the gauge equals a
/// walk of /proc at every stage.
#[test]
fn zombie_gauge_equals_a_walk_of_proc() {
    let _g = serial();
    let mut early = Zombies::make(50);
    let Some(d) = start() else { return };
    let base = agreed_zombies(&d, "50 zombies made before the daemon started");
    assert!(base >= 50, "{base} zombies, 50 of them this test's");
    let mut late = Zombies::make(300);
    let with_all = agreed_zombies(&d, "300 more");
    assert!(with_all >= 350, "{with_all}");
    early.reap(50);
    late.reap(150);
    let after_some = agreed_zombies(&d, "the 50 early ones and 150 later ones reaped");
    assert!(after_some >= 150, "{after_some}");
    late.reap(150);
    let after_all = agreed_zombies(&d, "all reaped");
    // Other sessions' zombies come and go; ours are gone.
    assert!(
        after_all <= with_all - 350 + SLACK,
        "all 350 reaped: {after_all} (was {with_all})"
    );
}

/// 3 000 zombies at once (a parent that never waits, well past top's
/// "115 zombie"): counted exactly, and the walk stays a small part of the
/// scrape.
#[test]
fn thousands_of_zombies_counted_within_the_deadline() {
    let _g = serial();
    let Some(d) = start() else { return };
    let before = agreed_zombies(&d, "before");
    let zombies = Zombies::make(3000);
    let with = agreed_zombies(&d, "3 000 zombies");
    assert!(with >= before + 3000 - SLACK, "{before} -> {with}");
    let expo = d.scrape();
    let took = value(
        &expo,
        "node_scrape_collector_duration_seconds{collector=\"probe_tasks\"}",
    );
    eprintln!(
        "probe_tasks collector with {with} zombies: {:.2} ms",
        took * 1e3
    );
    assert!(took < 1.0, "{took} s");
    drop(zombies);
    agreed_zombies(&d, "reaped");
}

/// Successful execs are counted once each, failed ones not at all.
#[test]
fn execs_counted_exactly() {
    const BATCH: u32 = 20;
    const MAX_BATCHES: u32 = 60;
    let _g = serial();
    let Some(d) = start() else { return };
    let mut before = value(&d.scrape(), "usescope_process_execs_total");
    let (mut clean, mut batches) = (0, 0);
    while batches < MAX_BATCHES && clean < 2 {
        for _ in 0..BATCH {
            assert!(Command::new("/bin/true").status().unwrap().success());
            // ENOENT from execve in the child: no sched_process_exec.
            assert!(Command::new("/nonexistent/usescope-test").status().is_err());
        }
        let after = value(&d.scrape(), "usescope_process_execs_total");
        let rise = after - before;
        before = after;
        batches += 1;
        assert!(rise >= f64::from(BATCH), "batch {batches}: +{rise}");
        if rise == f64::from(BATCH) {
            clean += 1;
        }
    }
    eprintln!("execs: {clean} batches of {BATCH} exact, in {batches}");
    // A host that never pauses its execs cannot show exactness: a skip
    // outside CI, a failure in CI.
    common::skip::unless_met(
        clean >= 2,
        &format!(
            "two batches of {BATCH} execs with no other exec on the host (got {clean} in {batches})"
        ),
    );
}

fn loadavg_tasks() -> u64 {
    let s = std::fs::read_to_string("/proc/loadavg").unwrap();
    let field = s.split_whitespace().nth(3).unwrap();
    field.split_once('/').unwrap().1.parse().unwrap()
}

fn sysctl(name: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/sys/kernel/{name}"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// usescope_tasks is the kernel's nr_threads: between /proc/loadavg read
/// before and after the scrape, and 400 more threads of this test show.
#[test]
fn tasks_against_pid_max() {
    let _g = serial();
    if !can_run_bpf() {
        return;
    }
    let d = Daemon::start(&["--collector.disable-defaults", "--collector.loadavg"]);
    let within = |what: &str| {
        for _ in 0..50 {
            let lo = loadavg_tasks();
            let expo = d.scrape();
            let hi = loadavg_tasks();
            let ours = value(&expo, "usescope_tasks") as u64;
            if (lo.min(hi)..=lo.max(hi)).contains(&ours) {
                assert_eq!(value(&expo, "usescope_pid_max"), sysctl("pid_max"));
                assert_eq!(value(&expo, "usescope_threads_max"), sysctl("threads-max"));
                return ours;
            }
        }
        panic!("{what}: usescope_tasks never between two reads of /proc/loadavg");
    };
    let before = within("before");
    let hold = Arc::new(Barrier::new(401));
    let threads: Vec<_> = (0..400)
        .map(|_| {
            let b = hold.clone();
            std::thread::spawn(move || {
                b.wait();
            })
        })
        .collect();
    let with = within("with 400 threads");
    hold.wait();
    threads.into_iter().for_each(|t| t.join().unwrap());
    eprintln!("tasks: {before} -> {with} with 400 threads");
    assert!(with >= before + 400 - 50, "{before} -> {with}");
}

/// As many process starts as two threads can fork, for STORM: every scrape
/// meanwhile answers within its deadline, the counters only grow, and the
/// zombies counted after the storm are the walk's.
#[test]
fn process_start_storm_keeps_scrapes_fast() {
    const STORM: Duration = Duration::from_secs(6);
    const DEADLINE: Duration = Duration::from_secs(2);
    let _g = serial();
    let Some(d) = start() else { return };
    let expo = d.scrape();
    let forks0 = value(&expo, "node_forks_total");
    let stop = Arc::new(AtomicBool::new(false));
    let made = Arc::new(AtomicU64::new(0));
    let stormers: Vec<_> = (0..2)
        .map(|_| {
            let (stop, made) = (stop.clone(), made.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    // SAFETY: the child only calls _exit.
                    let pid = unsafe { libc::fork() };
                    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
                    if pid == 0 {
                        unsafe { libc::_exit(0) };
                    }
                    reap(pid);
                    made.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let t0 = Instant::now();
    let (mut scrapes, mut slowest) = (0, Duration::ZERO);
    let mut last_execs = 0.0;
    while t0.elapsed() < STORM {
        let t = Instant::now();
        let deadline = DEADLINE.as_secs().to_string();
        let r = d.get_with(
            "/metrics",
            &[("X-Prometheus-Scrape-Timeout-Seconds", deadline.as_str())],
        );
        let took = t.elapsed();
        assert_eq!(r.status, 200, "scrape {scrapes} during the storm");
        let expo = r.text();
        let execs = value(&expo, "usescope_process_execs_total");
        assert!(execs >= last_execs);
        last_execs = execs;
        assert!(sample(&expo, "usescope_zombie_processes").is_some());
        slowest = slowest.max(took);
        scrapes += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    stop.store(true, Ordering::Relaxed);
    stormers.into_iter().for_each(|t| t.join().unwrap());
    let secs = t0.elapsed().as_secs_f64();
    let forks = value(&d.scrape(), "node_forks_total") - forks0;
    eprintln!(
        "storm: {} forks by the test ({:.0}/s), {forks:.0} on the host ({:.0}/s); {scrapes} scrapes, slowest {slowest:?}",
        made.load(Ordering::Relaxed),
        made.load(Ordering::Relaxed) as f64 / secs,
        forks / secs
    );
    assert!(slowest < DEADLINE, "slowest scrape {slowest:?}");
    agreed_zombies(&d, "after the storm");
}
