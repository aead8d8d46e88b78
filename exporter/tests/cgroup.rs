//! The cgroup collector against the real binary.
//!
//! - Oracles on real cgroups this test makes (root): every value the
//!   collector exports for a v1 cgroup (CPU under a CFS quota that
//!   throttles it, memory over its limit, direct I/O to a loop device of
//!   the test's own, pids, PSI from the hybrid `unified` hierarchy) lies
//!   between the kernel file read just before the scrape and just after it.
//! - A real cgroup2 mount in a mount namespace of the daemon's own: on a
//!   v1 host it has no controllers, so CPU usage (cpu.stat) and PSI are
//!   what it can show, against the files.
//! - Cgroups removed while the daemon reads them (real, churned): every
//!   scrape succeeds, the vanished ones are only left out.
//! - Hostile fixture trees: 100,000 cgroups, nesting past PATH_MAX, names
//!   with newlines, quotes and invalid UTF-8, a FIFO for a file.
//!
//! Cgroups, processes, loop devices and mounts made here are removed on
//! every exit path (guards).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Daemon, fixture, sample, skip};

const CG: &str = "/sys/fs/cgroup";

const NO_PROBES: [&str; 3] = [
    "--no-probe.runqlat",
    "--no-probe.cachestat",
    "--no-probe.drops",
];

/// The v1 hierarchies the collector reads plus the hybrid `unified` one,
/// each once (`cpu` may be a link to `cpu,cpuacct`), as (controller,
/// canonical directory).
fn hierarchies() -> Vec<(&'static str, PathBuf)> {
    let mut out: Vec<(&'static str, PathBuf)> = Vec::new();
    for c in ["cpu", "cpuacct", "memory", "blkio", "pids", "unified"] {
        if let Ok(dir) = std::fs::canonicalize(Path::new(CG).join(c))
            && !out.iter().any(|(_, d)| *d == dir)
        {
            out.push((c, dir));
        }
    }
    out
}

fn is_v1() -> bool {
    Path::new(CG).join("memory/memory.usage_in_bytes").is_file()
        && Path::new(CG).join("cpuacct/cpuacct.usage").is_file()
}

/// A cgroup made in every hierarchy of [`hierarchies`] (or in one given
/// directory), with the processes started in it; all removed on drop.
struct TestCgroup {
    rel: String,
    dirs: Vec<PathBuf>,
    children: Vec<Child>,
    loop_dev: Option<String>,
}

impl TestCgroup {
    fn create(rel: &str, roots: &[PathBuf]) -> TestCgroup {
        let mut cg = TestCgroup {
            rel: rel.to_string(),
            dirs: Vec::new(),
            children: Vec::new(),
            loop_dev: None,
        };
        for root in roots {
            let dir = root.join(rel);
            std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
            cg.dirs.push(dir);
        }
        cg
    }

    fn dir(&self, hierarchy_dir: &Path) -> PathBuf {
        hierarchy_dir.join(&self.rel)
    }

    fn procs(&self) -> String {
        self.dirs
            .iter()
            .map(|d| format!("'{}/cgroup.procs'", d.display()))
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn command(&self, cmd: &str) -> Command {
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg(format!(
                "for p in {}; do echo $$ > \"$p\"; done && exec {cmd}",
                self.procs()
            ))
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        c
    }

    /// Runs `cmd` in the cgroup to its end.
    fn run(&self, cmd: &str) {
        let status = self.command(cmd).status().unwrap();
        assert!(status.success(), "{cmd}: {status}");
    }

    /// Starts `cmd` in the cgroup; it is killed on drop.
    fn spawn(&mut self, cmd: &str) {
        self.children.push(self.command(cmd).spawn().unwrap());
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        // Deepest first: children of the test cgroup, then it.
        let mut all: Vec<PathBuf> = Vec::new();
        for d in &self.dirs {
            let mut stack = vec![d.clone()];
            while let Some(p) = stack.pop() {
                for e in std::fs::read_dir(&p).into_iter().flatten().flatten() {
                    if e.file_type().is_ok_and(|t| t.is_dir()) {
                        stack.push(e.path());
                    }
                }
                all.push(p);
            }
        }
        all.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
        for d in all {
            let mut removed = false;
            for _ in 0..100 {
                if std::fs::remove_dir(&d).is_ok() || !d.exists() {
                    removed = true;
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            if !removed {
                eprintln!("could not remove the test cgroup {}", d.display());
            }
        }
        if let Some(l) = &self.loop_dev {
            let _ = Command::new("losetup").args(["-d", l]).status();
        }
    }
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn number(p: &Path) -> u64 {
    read(p).trim().parse().unwrap()
}

fn keyed(p: &Path, key: &str) -> u64 {
    read(p)
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {key} in {}", p.display()))
}

fn blkio(p: &Path, dev: &str, op: &str) -> u64 {
    read(p)
        .lines()
        .find_map(|l| {
            let mut f = l.split_whitespace();
            (f.next()? == dev && f.next()? == op).then(|| f.next()?.parse().ok())?
        })
        .unwrap_or(0)
}

fn psi_total(p: &Path, kind: &str) -> u64 {
    read(p)
        .lines()
        .find(|l| l.starts_with(kind))
        .and_then(|l| l.rsplit_once("total=")?.1.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {kind} in {}", p.display()))
}

fn labels(cgroup: &str) -> String {
    format!("{{cgroup=\"{cgroup}\",container_id=\"\",pod_uid=\"\"}}")
}

/// One exported value and the kernel's before and after the scrape, in
/// the exported unit.
struct Check {
    series: String,
    before: f64,
    after: f64,
}

fn check_all(expo: &str, checks: &[Check]) {
    let mut failures = Vec::new();
    for c in checks {
        let (lo, hi) = (c.before.min(c.after), c.before.max(c.after));
        let slack = 1e-9 * hi.abs().max(1.0);
        match sample(expo, &c.series) {
            Some(v) if v >= lo - slack && v <= hi + slack => {}
            got => failures.push(format!(
                "{}: exported {got:?}, the file said {} before and {} after",
                c.series, c.before, c.after
            )),
        }
    }
    assert!(failures.is_empty(), "{}\n{expo}", failures.join("\n"));
}

/// A loop device with direct I/O over a file in `dir`, `MAJ:MIN` and path.
fn loop_device(dir: &Path) -> (String, String) {
    let img = dir.join("disk.img");
    std::fs::File::create(&img)
        .unwrap()
        .set_len(16 << 20)
        .unwrap();
    let out = Command::new("losetup")
        .args(["-f", "--show", "--direct-io=on"])
        .arg(&img)
        .output()
        .unwrap();
    assert!(out.status.success(), "losetup: {out:?}");
    let dev = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let majmin = Command::new("lsblk")
        .args(["-dno", "MAJ:MIN", &dev])
        .output()
        .unwrap();
    let majmin = String::from_utf8(majmin.stdout).unwrap().trim().to_string();
    (majmin, dev)
}

fn start(sysfs: &str, select: &str, extra: &[&str]) -> Daemon {
    let mut args = vec![
        "--collector.disable-defaults".to_string(),
        "--collector.cgroup".to_string(),
        format!("--path.sysfs={sysfs}"),
        format!("--collector.cgroup.select={select}"),
    ];
    args.extend(NO_PROBES.iter().map(|s| s.to_string()));
    args.extend(extra.iter().map(|s| s.to_string()));
    Daemon::start(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

#[test]
fn v1_values_equal_the_kernel_files() {
    if !skip::unless_root("to make cgroups")
        || !skip::unless_met(
            is_v1(),
            "cgroup v1 (cpuacct and memory under /sys/fs/cgroup)",
        )
    {
        return;
    }
    let hs = hierarchies();
    let dir_of = |c: &str| hs.iter().find(|(n, _)| *n == c).map(|(_, d)| d.clone());
    let rel = format!("usescope-test-{}-v1", std::process::id());
    let roots: Vec<PathBuf> = hs.iter().map(|(_, d)| d.clone()).collect();
    let mut cg = TestCgroup::create(&rel, &roots);
    let work = common::temp_dir();
    let cpu = cg.dir(&dir_of("cpu").unwrap());
    let cpuacct = cg.dir(&dir_of("cpuacct").unwrap());
    let memory = cg.dir(&dir_of("memory").unwrap());
    let blkio_dir = cg.dir(&dir_of("blkio").unwrap());
    let pids = cg.dir(&dir_of("pids").unwrap());
    let unified = dir_of("unified").map(|d| cg.dir(&d));
    // 10% of a CPU, so a busy loop is throttled in nine periods of ten.
    std::fs::write(cpu.join("cpu.cfs_quota_us"), "10000").unwrap();
    std::fs::write(
        memory.join("memory.limit_in_bytes"),
        (32u64 << 20).to_string(),
    )
    .unwrap();
    std::fs::write(pids.join("pids.max"), "50").unwrap();
    // blk-throttle counts a device's I/O once a rule is set on it.
    let (majmin, dev) = loop_device(work.path());
    cg.loop_dev = Some(dev.clone());
    for f in [
        "blkio.throttle.read_bps_device",
        "blkio.throttle.write_bps_device",
    ] {
        std::fs::write(blkio_dir.join(f), format!("{majmin} 1099511627776")).unwrap();
    }
    let file = work.path().join("cache");
    cg.run(&format!(
        "sh -c 'dd if=/dev/zero of={dev} bs=64k count=64 oflag=direct status=none && \
         dd if={dev} of=/dev/null bs=64k count=32 iflag=direct status=none && \
         dd if=/dev/zero of={} bs=1M count=64 status=none'",
        file.display()
    ));
    cg.spawn("sh -c 'while :; do :; done'");
    std::thread::sleep(Duration::from_millis(1500));
    let d = start("/sys", &format!("^/{rel}$"), &[]);
    let l = labels(&format!("/{rel}"));
    let dev_name = Path::new(&dev)
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    let io = |name: &str| {
        format!(
            "usescope_cgroup_io_{name}{}",
            l.replace('}', &format!(",device=\"{dev_name}\"}}"))
        )
    };
    // The kernel's figures, in the exported units, at one moment.
    let kernel = || {
        let ws = number(&memory.join("memory.usage_in_bytes"))
            .saturating_sub(keyed(&memory.join("memory.stat"), "total_inactive_file"));
        let bytes = blkio_dir.join("blkio.throttle.io_service_bytes_recursive");
        let ios = blkio_dir.join("blkio.throttle.io_serviced_recursive");
        let mut v = vec![
            (
                format!("usescope_cgroup_cpu_usage_seconds_total{l}"),
                number(&cpuacct.join("cpuacct.usage")) as f64 / 1e9,
            ),
            (
                format!("usescope_cgroup_cpu_user_seconds_total{l}"),
                keyed(&cpuacct.join("cpuacct.stat"), "user") as f64 / 100.0,
            ),
            (
                format!("usescope_cgroup_cpu_system_seconds_total{l}"),
                keyed(&cpuacct.join("cpuacct.stat"), "system") as f64 / 100.0,
            ),
            (
                format!("usescope_cgroup_cpu_cfs_periods_total{l}"),
                keyed(&cpu.join("cpu.stat"), "nr_periods") as f64,
            ),
            (
                format!("usescope_cgroup_cpu_cfs_throttled_periods_total{l}"),
                keyed(&cpu.join("cpu.stat"), "nr_throttled") as f64,
            ),
            (
                format!("usescope_cgroup_cpu_cfs_throttled_seconds_total{l}"),
                keyed(&cpu.join("cpu.stat"), "throttled_time") as f64 / 1e9,
            ),
            (
                format!("usescope_cgroup_memory_usage_bytes{l}"),
                number(&memory.join("memory.usage_in_bytes")) as f64,
            ),
            (
                format!("usescope_cgroup_memory_working_set_bytes{l}"),
                ws as f64,
            ),
            (
                format!("usescope_cgroup_memory_limit_bytes{l}"),
                number(&memory.join("memory.limit_in_bytes")) as f64,
            ),
            (
                format!("usescope_cgroup_memory_limit_hits_total{l}"),
                number(&memory.join("memory.failcnt")) as f64,
            ),
            (
                format!("usescope_cgroup_memory_oom_kills_total{l}"),
                keyed(&memory.join("memory.oom_control"), "oom_kill") as f64,
            ),
            (
                io("read_bytes_total"),
                blkio(&bytes, &majmin, "Read") as f64,
            ),
            (
                io("written_bytes_total"),
                blkio(&bytes, &majmin, "Write") as f64,
            ),
            (io("reads_total"), blkio(&ios, &majmin, "Read") as f64),
            (io("writes_total"), blkio(&ios, &majmin, "Write") as f64),
            (
                format!("usescope_cgroup_pids{l}"),
                number(&pids.join("pids.current")) as f64,
            ),
            (
                format!("usescope_cgroup_pids_limit{l}"),
                number(&pids.join("pids.max")) as f64,
            ),
        ];
        if let Some(u) = &unified {
            for (res, file) in [
                ("cpu", "cpu.pressure"),
                ("memory", "memory.pressure"),
                ("io", "io.pressure"),
            ] {
                for (kind, what) in [("some", "waiting"), ("full", "stalled")] {
                    v.push((
                        format!("usescope_cgroup_pressure_{res}_{what}_seconds_total{l}"),
                        psi_total(&u.join(file), kind) as f64 / 1e6,
                    ));
                }
            }
        }
        v
    };
    for round in 0..3 {
        let before = kernel();
        let expo = d.scrape();
        let after = kernel();
        let checks: Vec<Check> = before
            .into_iter()
            .zip(after)
            .map(|((series, b), (_, a))| Check {
                series,
                before: b,
                after: a,
            })
            .collect();
        check_all(&expo, &checks);
        if round == 0 {
            // What the workload was for.
            for (series, at_least) in [
                (
                    format!("usescope_cgroup_cpu_cfs_throttled_periods_total{l}"),
                    5.0,
                ),
                (format!("usescope_cgroup_memory_limit_hits_total{l}"), 1.0),
                (io("read_bytes_total"), 2.0 * 1024.0 * 1024.0),
                (io("written_bytes_total"), 4.0 * 1024.0 * 1024.0),
            ] {
                let v = sample(&expo, &series).unwrap();
                assert!(
                    v >= at_least,
                    "{series} = {v}, expected at least {at_least}"
                );
            }
            assert_eq!(
                sample(&expo, "node_scrape_collector_success{collector=\"cgroup\"}"),
                Some(1.0)
            );
            assert_eq!(sample(&expo, "usescope_cgroup_seen"), Some(1.0));
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    // The files were kept open (a real cgroupfs).
    let expo = d.scrape();
    assert!(
        sample(&expo, "usescope_cgroup_kept_files").unwrap() >= 12.0,
        "{expo}"
    );
}

/// Where the v2 hierarchy is mounted (fstype cgroup2), if anywhere.
fn v2_mount() -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    mounts.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let point = left.split(' ').nth(4)?;
        (right.split(' ').next()? == "cgroup2").then(|| PathBuf::from(point))
    })
}

#[test]
fn a_real_cgroup2_mount_in_a_namespace_of_its_own() {
    if !skip::unless_root("to mount cgroup2") {
        return;
    }
    let Some(v2) = v2_mount() else {
        skip::unless_met(
            false,
            "a cgroup2 hierarchy mounted somewhere (hybrid or v2 host)",
        );
        return;
    };
    let rel = format!("usescope-test-{}-v2", std::process::id());
    let mut cg = TestCgroup::create(&rel, std::slice::from_ref(&v2));
    cg.spawn("sh -c 'while :; do :; done'");
    std::thread::sleep(Duration::from_millis(500));
    let sysfs = common::temp_dir();
    let mountpoint = sysfs.path().join("fs/cgroup");
    std::fs::create_dir_all(&mountpoint).unwrap();
    // The daemon mounts cgroup2 in a mount namespace of its own, where the
    // mount lives and dies with it.
    let mut wrapper = Command::new("unshare");
    wrapper
        .args(["--mount", "--propagation", "private", "--", "sh", "-c"])
        .arg("mount -t cgroup2 none \"$1\" && shift && exec \"$@\"")
        .arg("sh")
        .arg(&mountpoint)
        .arg(common::bin())
        .args(["--collector.disable-defaults", "--collector.cgroup"])
        .arg(format!("--path.sysfs={}", sysfs.path().display()))
        .arg(format!("--collector.cgroup.select=^/{rel}$"))
        .args(NO_PROBES);
    let d = Daemon::try_start_with(wrapper, &[]).unwrap();
    let dir = cg.dir(&v2);
    let l = labels(&format!("/{rel}"));
    let kernel = || {
        let stat = dir.join("cpu.stat");
        let mut v = vec![
            (
                format!("usescope_cgroup_cpu_usage_seconds_total{l}"),
                keyed(&stat, "usage_usec") as f64 / 1e6,
            ),
            (
                format!("usescope_cgroup_cpu_user_seconds_total{l}"),
                keyed(&stat, "user_usec") as f64 / 1e6,
            ),
            (
                format!("usescope_cgroup_cpu_system_seconds_total{l}"),
                keyed(&stat, "system_usec") as f64 / 1e6,
            ),
        ];
        for (res, file) in [
            ("cpu", "cpu.pressure"),
            ("memory", "memory.pressure"),
            ("io", "io.pressure"),
        ] {
            if dir.join(file).exists() {
                for (kind, what) in [("some", "waiting"), ("full", "stalled")] {
                    v.push((
                        format!("usescope_cgroup_pressure_{res}_{what}_seconds_total{l}"),
                        psi_total(&dir.join(file), kind) as f64 / 1e6,
                    ));
                }
            }
        }
        if dir.join("memory.current").exists() {
            v.push((
                format!("usescope_cgroup_memory_usage_bytes{l}"),
                number(&dir.join("memory.current")) as f64,
            ));
        }
        if dir.join("pids.current").exists() {
            v.push((
                format!("usescope_cgroup_pids{l}"),
                number(&dir.join("pids.current")) as f64,
            ));
        }
        v
    };
    for _ in 0..3 {
        let before = kernel();
        let expo = d.scrape();
        let after = kernel();
        assert_eq!(
            sample(&expo, "node_scrape_collector_success{collector=\"cgroup\"}"),
            Some(1.0),
            "{expo}"
        );
        let checks: Vec<Check> = before
            .into_iter()
            .zip(after)
            .map(|((series, b), (_, a))| Check {
                series,
                before: b,
                after: a,
            })
            .collect();
        check_all(&expo, &checks);
        // A controller this mount does not have (on a v1 host: all of
        // them) is no series, not a failure.
        for (file, family) in [
            ("memory.current", "usescope_cgroup_memory_usage_bytes"),
            ("io.stat", "usescope_cgroup_io_read_bytes_total"),
            ("pids.current", "usescope_cgroup_pids"),
        ] {
            if !dir.join(file).exists() {
                assert!(
                    !expo.contains(&format!("{family}{{")),
                    "{family} without {file}:\n{expo}"
                );
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn cgroups_removed_mid_read_cost_only_their_own_series() {
    if !skip::unless_root("to make cgroups") {
        return;
    }
    // The hierarchies with a controller the collector reads.
    let roots: Vec<PathBuf> = hierarchies()
        .into_iter()
        .filter(|(c, _)| matches!(*c, "cpuacct" | "memory" | "pids" | "unified"))
        .map(|(_, d)| d)
        .collect();
    if !skip::unless_met(!roots.is_empty(), "a cgroup hierarchy under /sys/fs/cgroup") {
        return;
    }
    let rel = format!("usescope-test-{}-churn", std::process::id());
    let cg = TestCgroup::create(&rel, &roots);
    const N: usize = 100;
    for i in 0..N {
        for r in &cg.dirs {
            std::fs::create_dir(r.join(format!("c{i}"))).unwrap();
        }
    }
    let d = start("/sys", &format!("^/{rel}/"), &[]);
    // Declared after `cg`, so dropped (stopped and joined) before it: a
    // churn still running would make children the cleanup cannot remove.
    let churn = Churn::start(cg.dirs.clone(), N);
    let end = Instant::now() + Duration::from_secs(30);
    let (mut scrapes, mut vanished) = (0, 0.0);
    while Instant::now() < end && (scrapes < 20 || vanished == 0.0) {
        let r = d.get("/metrics");
        assert_eq!(r.status, 200);
        let expo = r.text();
        assert_eq!(
            sample(&expo, "node_scrape_collector_success{collector=\"cgroup\"}"),
            Some(1.0),
            "scrape {scrapes} failed: {:?}",
            d.log()
                .iter()
                .filter(|l| l.contains("collector failed"))
                .collect::<Vec<_>>()
        );
        vanished = sample(&expo, "usescope_cgroup_vanished_total").unwrap();
        scrapes += 1;
    }
    drop(churn);
    assert!(
        vanished > 0.0,
        "no cgroup vanished mid-read in {scrapes} scrapes: the test did not test it"
    );
    // Gone for good: gone from the output, and nothing kept for them.
    for i in 0..N {
        for r in &cg.dirs {
            let _ = std::fs::remove_dir(r.join(format!("c{i}")));
        }
    }
    let expo = d.scrape();
    assert_eq!(sample(&expo, "usescope_cgroup_seen"), Some(0.0), "{expo}");
    assert!(!expo.contains(&format!("/{rel}/")), "{expo}");
    assert_eq!(sample(&expo, "usescope_cgroup_kept_files"), Some(0.0));
    eprintln!("{scrapes} scrapes, {vanished} cgroups vanished mid-read");
}

/// A thread that removes and remakes the children `c0`..`cN` of `dirs`,
/// one after another, until dropped (for at most a minute).
struct Churn {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Churn {
    fn start(dirs: Vec<PathBuf>, n: usize) -> Churn {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut i = 0;
            let end = Instant::now() + Duration::from_secs(60);
            while !flag.load(std::sync::atomic::Ordering::Relaxed) && Instant::now() < end {
                for r in &dirs {
                    let _ = std::fs::remove_dir(r.join(format!("c{i}")));
                }
                for r in &dirs {
                    let _ = std::fs::create_dir(r.join(format!("c{i}")));
                }
                i = (i + 1) % n;
            }
        });
        Churn {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Churn {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A v2 tree of `services` (`/system.slice/sI.service`) under `sysfs`.
fn v2_fixture(sysfs: &Path, services: usize) {
    let root = sysfs.join("fs/cgroup");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("cgroup.controllers"), "cpu io memory pids\n").unwrap();
    for i in 0..services {
        let dir = root.join(format!("system.slice/s{i}.service"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("cpu.stat"),
            format!("usage_usec {i}000000\nuser_usec {i}000000\nsystem_usec 0\n"),
        )
        .unwrap();
        std::fs::write(dir.join("memory.current"), "4096\n").unwrap();
    }
}

#[test]
fn a_hundred_thousand_cgroups_cost_only_the_collector() {
    // tmpfs: 100,000 directories on disk would take 400 MB of blocks.
    let base = Path::new("/dev/shm");
    let t = if base.is_dir() {
        tempfile::Builder::new()
            .prefix("usescope-test-")
            .tempdir_in(base)
            .unwrap()
    } else {
        common::temp_dir()
    };
    v2_fixture(t.path(), 10);
    let root = t.path().join("fs/cgroup");
    for k in 0..100 {
        for i in 0..1000 {
            std::fs::create_dir_all(root.join(format!("many{k}.slice/c{i}.scope"))).unwrap();
        }
    }
    let procfs = format!("--path.procfs={}", fixture("proc").display());
    let args = [
        "--collector.cgroup",
        &format!("--path.sysfs={}", t.path().display()),
        &procfs,
        "--path.rootfs=/nonexistent/usescope-test-rootfs",
        NO_PROBES[0],
        NO_PROBES[1],
        NO_PROBES[2],
    ];
    let d = Daemon::start(&args);
    for _ in 0..2 {
        let started = Instant::now();
        let r = d.get("/metrics");
        assert_eq!(r.status, 200);
        let expo = r.text();
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(
            sample(&expo, "node_scrape_collector_success{collector=\"cgroup\"}"),
            Some(1.0)
        );
        assert_eq!(
            sample(
                &expo,
                "node_scrape_collector_success{collector=\"loadavg\"}"
            ),
            Some(1.0)
        );
        assert_eq!(
            sample(
                &expo,
                "usescope_cgroup_walk_limit_reached{limit=\"max-walk\"}"
            ),
            Some(1.0)
        );
        assert_eq!(
            sample(&expo, "usescope_cgroup_walked_directories"),
            Some(10000.0)
        );
        let seen = sample(&expo, "usescope_cgroup_seen").unwrap();
        assert!(seen > 9000.0 && seen < 10000.0, "{seen}");
        assert_eq!(sample(&expo, "usescope_cgroup_folded"), Some(seen - 200.0));
        // 201 cgroups (200 and other) in each family, at most.
        let per_family = expo
            .lines()
            .filter(|l| l.starts_with("usescope_cgroup_memory_usage_bytes{"))
            .count();
        assert!(per_family <= 201, "{per_family}");
    }
    let warned = d
        .log()
        .iter()
        .filter(|l| l.contains("cgroup walk limited"))
        .count();
    assert_eq!(warned, 1, "{:?}", d.log());
}

#[test]
fn hostile_names_deep_nesting_and_a_fifo_cost_only_the_collector() {
    use std::os::unix::ffi::OsStrExt;
    let t = common::temp_dir();
    v2_fixture(t.path(), 3);
    let root = t.path().join("fs/cgroup");
    for name in [
        &b"new\nline.service"[..],
        b"q\"uote\\.service",
        b"bad\xff.service",
    ] {
        let dir = root.join(std::ffi::OsStr::from_bytes(name));
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(
            dir.join("cpu.stat"),
            "usage_usec 1000000\nuser_usec 1000000\nsystem_usec 0\n",
        )
        .unwrap();
    }
    // 300 levels of 30 bytes, past PATH_MAX, made relative to descriptors.
    let mut fd = std::fs::File::open(&root).unwrap();
    let name = std::ffi::CString::new("x".repeat(30)).unwrap();
    for _ in 0..300 {
        use std::os::fd::AsRawFd;
        // SAFETY: a NUL-terminated name relative to a directory we opened.
        assert_eq!(
            unsafe { libc::mkdirat(fd.as_raw_fd(), name.as_ptr(), 0o755) },
            0
        );
        // SAFETY: as above; the new descriptor is handed to a File.
        let next = unsafe {
            libc::openat(
                fd.as_raw_fd(),
                name.as_ptr(),
                libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        assert!(next >= 0);
        use std::os::fd::FromRawFd;
        // SAFETY: a new descriptor nothing else owns.
        fd = unsafe { std::fs::File::from_raw_fd(next) };
    }
    let procfs = format!("--path.procfs={}", fixture("proc").display());
    let sysfs = format!("--path.sysfs={}", t.path().display());
    let args = [
        "--collector.cgroup",
        sysfs.as_str(),
        procfs.as_str(),
        "--path.rootfs=/nonexistent/usescope-test-rootfs",
        NO_PROBES[0],
        NO_PROBES[1],
        NO_PROBES[2],
    ];
    let d = Daemon::start(&args);
    let expo = d.scrape();
    let cpu = |expo: &str, label: &str| {
        sample(
            expo,
            &format!(
                "usescope_cgroup_cpu_usage_seconds_total{{cgroup=\"{label}\",container_id=\"\",pod_uid=\"\"}}"
            ),
        )
    };
    assert_eq!(
        sample(&expo, "node_scrape_collector_success{collector=\"cgroup\"}"),
        Some(1.0)
    );
    assert_eq!(cpu(&expo, "/new\\nline.service"), Some(1.0), "{expo}");
    assert_eq!(cpu(&expo, "/q\\\"uote\\\\.service"), Some(1.0), "{expo}");
    assert_eq!(cpu(&expo, "/bad\\\\xff.service"), Some(1.0), "{expo}");
    assert_eq!(cpu(&expo, "/system.slice/s2.service"), Some(2.0));
    assert_eq!(
        sample(
            &expo,
            "usescope_cgroup_walk_limit_reached{limit=\"max-depth\"}"
        ),
        Some(1.0)
    );
    if let Some(promtool) = skip::tool_on_path("promtool", "Debian package prometheus") {
        let mut child = Command::new(promtool)
            .args(["check", "metrics"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::io::Write::write_all(child.stdin.as_mut().unwrap(), expo.as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        // It parses; lint remarks about node_exporter's own names are the
        // promtool test's business, none may name a cgroup family.
        assert!(
            !text.contains("error while linting") && !text.contains("usescope_cgroup"),
            "{text}"
        );
    }
    // A FIFO where a file belongs: the collector fails naming it, at once,
    // and everything else is served.
    let fifo = root.join("system.slice/s1.service/memory.current");
    std::fs::remove_file(&fifo).unwrap();
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let started = Instant::now();
    let r = d.get("/metrics");
    assert_eq!(r.status, 200);
    assert!(started.elapsed() < Duration::from_secs(5));
    let expo = r.text();
    assert_eq!(
        sample(&expo, "node_scrape_collector_success{collector=\"cgroup\"}"),
        Some(0.0)
    );
    assert_eq!(
        sample(
            &expo,
            "node_scrape_collector_success{collector=\"loadavg\"}"
        ),
        Some(1.0)
    );
    assert!(
        !expo.contains("usescope_cgroup_"),
        "a failed collector emits nothing"
    );
    let logged = d
        .wait_for_log("collector failed", Duration::from_secs(5))
        .expect("a warning");
    assert!(
        logged.contains("memory.current") && logged.contains("FIFO"),
        "{logged}"
    );
    std::fs::remove_file(&fifo).unwrap();
    std::fs::write(&fifo, "4096\n").unwrap();
    let expo = d.scrape();
    assert_eq!(
        sample(&expo, "node_scrape_collector_success{collector=\"cgroup\"}"),
        Some(1.0)
    );
}
