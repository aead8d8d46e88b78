//! The collector on the captured v1 fixture and on trees made here: v2,
//! Kubernetes and systemd paths, folding over the cap, hostile names,
//! files that are not regular, nesting past PATH_MAX, the walk's bound.
use super::*;
use crate::collectors::FlagValue;
use crate::collectors::test_support::{fixture, render};
use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

const ID: &str = "3b8e1a3c4f5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f7";
const UID: &str = "0b6f3c2a-1d4e-4f5a-8b9c-0d1e2f3a4b5c";

fn settings(sysfs: &Path, flags: &[(&'static str, FlagValue)]) -> Settings {
    let mut s = Settings::with_roots("/nonexistent", sysfs);
    for (name, v) in flags {
        s.set(name, Some(v.clone()));
    }
    s
}

/// The value of the sample `series` (name and labels, exactly).
fn value(out: &str, series: &str) -> Option<f64> {
    out.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

fn labels(cgroup: &str) -> String {
    format!("{{cgroup=\"{cgroup}\",container_id=\"\",pod_uid=\"\"}}")
}

#[test]
fn collector_on_the_captured_v1_fixture() {
    let out = render(build(&settings(&fixture("sys"), &[])).as_mut()).unwrap();
    let l = labels("/system.slice/usescope-capture.service");
    let io = |name: &str| {
        format!(
            "usescope_cgroup_io_{name}{}",
            l.replace('}', ",device=\"loop0\"}")
        )
    };
    // The captured files' values, converted (cpuacct.stat in USER_HZ
    // ticks, PSI in µs, cpu.stat's throttled_time in ns).
    for (series, want) in [
        (
            format!("usescope_cgroup_cpu_usage_seconds_total{l}"),
            0.236296706,
        ),
        (format!("usescope_cgroup_cpu_user_seconds_total{l}"), 0.19),
        (format!("usescope_cgroup_cpu_system_seconds_total{l}"), 0.04),
        (format!("usescope_cgroup_cpu_cfs_periods_total{l}"), 15.0),
        (
            format!("usescope_cgroup_cpu_cfs_throttled_periods_total{l}"),
            11.0,
        ),
        (
            format!("usescope_cgroup_cpu_cfs_throttled_seconds_total{l}"),
            0.476220719,
        ),
        (format!("usescope_cgroup_memory_usage_bytes{l}"), 9105408.0),
        // usage - total_inactive_file
        (
            format!("usescope_cgroup_memory_working_set_bytes{l}"),
            716800.0,
        ),
        (
            format!("usescope_cgroup_memory_limit_bytes{l}"),
            268435456.0,
        ),
        (format!("usescope_cgroup_memory_limit_hits_total{l}"), 0.0),
        (format!("usescope_cgroup_memory_oom_kills_total{l}"), 0.0),
        (
            format!("usescope_cgroup_pressure_cpu_waiting_seconds_total{l}"),
            0.831313,
        ),
        (
            format!("usescope_cgroup_pressure_cpu_stalled_seconds_total{l}"),
            0.827105,
        ),
        (
            format!("usescope_cgroup_pressure_io_waiting_seconds_total{l}"),
            0.136128,
        ),
        (format!("usescope_cgroup_pids{l}"), 1.0),
        (format!("usescope_cgroup_pids_limit{l}"), 64.0),
        (io("read_bytes_total"), 2097152.0),
        (io("written_bytes_total"), 4194304.0),
        (io("reads_total"), 32.0),
        (io("writes_total"), 64.0),
        ("usescope_cgroup_seen".to_string(), 1.0),
        ("usescope_cgroup_folded".to_string(), 0.0),
        // Root, system.slice and the service in each of 6 hierarchies.
        ("usescope_cgroup_walked_directories".to_string(), 18.0),
    ] {
        assert_eq!(value(&out, &series), Some(want), "{series}\n{out}");
    }
    // v1 has no memory.events `oom`.
    assert!(!out.contains("usescope_cgroup_memory_oom_total"), "{out}");
    // No cgroup filesystem: nothing, and no error.
    assert_eq!(
        render(build(&settings(Path::new("/nonexistent"), &[])).as_mut()).unwrap(),
        ""
    );
}

/// A v2 cgroup directory with the given files.
fn cgroup(root: &Path, path: &str, files: &[(&str, &str)]) {
    let dir = root.join(path.trim_start_matches('/'));
    std::fs::create_dir_all(&dir).unwrap();
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
    }
}

const PSI: &str = "some avg10=0.00 avg60=0.00 avg300=0.00 total=2500000\n\
                   full avg10=0.00 avg60=0.00 avg300=0.00 total=1500000\n";

/// The files of a v2 cgroup, in the formats of the kernel's
/// Documentation/admin-guide/cgroup-v2.rst; `cpu_us` its CPU time.
fn v2_files(cpu_us: u64, memory: u64) -> Vec<(&'static str, String)> {
    vec![
        (
            "cpu.stat",
            format!(
                "usage_usec {cpu_us}\nuser_usec {}\nsystem_usec {}\nnr_periods 40\nnr_throttled 7\nthrottled_usec 350000\nnr_bursts 0\nburst_usec 0\n",
                cpu_us / 4 * 3,
                cpu_us / 4
            ),
        ),
        ("memory.current", format!("{memory}\n")),
        ("memory.max", "max\n".to_string()),
        (
            "memory.stat",
            "anon 4096\nfile 8192\ninactive_file 4096\nactive_file 4096\n".to_string(),
        ),
        (
            "memory.events",
            "low 0\nhigh 0\nmax 12\noom 2\noom_kill 1\noom_group_kill 0\n".to_string(),
        ),
        ("pids.current", "3\n".to_string()),
        ("pids.max", "max\n".to_string()),
        ("cpu.pressure", PSI.to_string()),
        ("memory.pressure", PSI.to_string()),
        ("io.pressure", PSI.to_string()),
    ]
}

fn v2_cgroup(root: &Path, path: &str, cpu_us: u64, memory: u64) {
    let files = v2_files(cpu_us, memory);
    let refs: Vec<(&str, &str)> = files.iter().map(|(n, t)| (*n, t.as_str())).collect();
    cgroup(root, path, &refs);
}

fn v2_tree() -> tempfile::TempDir {
    let sys = tempfile::tempdir().unwrap();
    let root = sys.path().join("fs/cgroup");
    cgroup(
        &root,
        "/",
        &[("cgroup.controllers", "cpuset cpu io memory hugetlb pids\n")],
    );
    std::fs::create_dir_all(sys.path().join("dev/block")).unwrap();
    std::os::unix::fs::symlink(
        "../../devices/pci0000:00/0000:00:10.0/ata1/host0/target0:0:0/0:0:0:0/block/sda",
        sys.path().join("dev/block/8:0"),
    )
    .unwrap();
    sys
}

#[test]
fn v2_tree_kubernetes_and_systemd() {
    let sys = v2_tree();
    let root = sys.path().join("fs/cgroup");
    let pod = UID.replace('-', "_");
    let ctr = format!(
        "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{pod}.slice/cri-containerd-{ID}.scope"
    );
    v2_cgroup(&root, &ctr, 2_000_000, 1 << 20);
    cgroup(
        &root,
        &ctr,
        &[
            ("memory.max", "536870912\n"),
            ("pids.max", "4096\n"),
            (
                "io.stat",
                "8:0 rbytes=4096 wbytes=8192 rios=1 wios=2 dbytes=0 dios=0\n8:16 rbytes=1 wbytes=2 rios=3 wios=4 dbytes=0 dios=0\n",
            ),
        ],
    );
    // A service without the cpu controller (no nr_periods) and without
    // the io controller (no io.stat).
    v2_cgroup(&root, "/system.slice/ssh.service", 1_000_000, 8192);
    cgroup(
        &root,
        "/system.slice/ssh.service",
        &[(
            "cpu.stat",
            "usage_usec 1000000\nuser_usec 600000\nsystem_usec 400000\n",
        )],
    );
    // The pod's own cgroup is not a container: not selected, walked.
    v2_cgroup(&root, ctr.rsplit_once('/').unwrap().0, 9_000_000, 1);
    let out = render(build(&settings(sys.path(), &[])).as_mut()).unwrap();
    let c = format!("{{cgroup=\"{ctr}\",container_id=\"{ID}\",pod_uid=\"{UID}\"}}");
    let s = labels("/system.slice/ssh.service");
    for (series, want) in [
        (
            format!("usescope_cgroup_cpu_usage_seconds_total{c}"),
            Some(2.0),
        ),
        (
            format!("usescope_cgroup_cpu_user_seconds_total{c}"),
            Some(1.5),
        ),
        (
            format!("usescope_cgroup_cpu_system_seconds_total{c}"),
            Some(0.5),
        ),
        (
            format!("usescope_cgroup_cpu_cfs_periods_total{c}"),
            Some(40.0),
        ),
        (
            format!("usescope_cgroup_cpu_cfs_throttled_periods_total{c}"),
            Some(7.0),
        ),
        (
            format!("usescope_cgroup_cpu_cfs_throttled_seconds_total{c}"),
            Some(0.35),
        ),
        (
            format!("usescope_cgroup_memory_usage_bytes{c}"),
            Some(1048576.0),
        ),
        (
            format!("usescope_cgroup_memory_working_set_bytes{c}"),
            Some(1044480.0),
        ),
        (
            format!("usescope_cgroup_memory_limit_bytes{c}"),
            Some(536870912.0),
        ),
        (
            format!("usescope_cgroup_memory_limit_hits_total{c}"),
            Some(12.0),
        ),
        (format!("usescope_cgroup_memory_oom_total{c}"), Some(2.0)),
        (
            format!("usescope_cgroup_memory_oom_kills_total{c}"),
            Some(1.0),
        ),
        (
            format!("usescope_cgroup_pressure_memory_stalled_seconds_total{c}"),
            Some(1.5),
        ),
        (format!("usescope_cgroup_pids{c}"), Some(3.0)),
        (format!("usescope_cgroup_pids_limit{c}"), Some(4096.0)),
        (
            format!(
                "usescope_cgroup_io_read_bytes_total{}",
                c.replace('}', ",device=\"sda\"}")
            ),
            Some(4096.0),
        ),
        (
            format!(
                "usescope_cgroup_io_writes_total{}",
                c.replace('}', ",device=\"8:16\"}")
            ),
            Some(4.0),
        ),
        (
            format!("usescope_cgroup_cpu_usage_seconds_total{s}"),
            Some(1.0),
        ),
        (format!("usescope_cgroup_cpu_cfs_periods_total{s}"), None),
        (format!("usescope_cgroup_memory_limit_bytes{s}"), None),
        (format!("usescope_cgroup_pids_limit{s}"), None),
        (format!("usescope_cgroup_pids{s}"), Some(3.0)),
        ("usescope_cgroup_seen".to_string(), Some(2.0)),
    ] {
        assert_eq!(value(&out, &series), want, "{series}\n{out}");
    }
    assert!(
        !out.contains(
            "cgroup=\"/system.slice/ssh.service\",container_id=\"\",pod_uid=\"\",device="
        ),
        "{out}"
    );
    assert!(
        !out.contains(&format!("pod{pod}.slice\",")),
        "the pod is not a workload:\n{out}"
    );
}

/// `n` v2 services, `/system.slice/sI.service`, the Ith using I seconds of CPU.
fn services(root: &Path, n: u64) {
    for i in 1..=n {
        v2_cgroup(
            root,
            &format!("/system.slice/s{i}.service"),
            i * 1_000_000,
            i * 4096,
        );
    }
}

fn with_max(max: i64) -> [(&'static str, FlagValue); 1] {
    [(MAX, FlagValue::Integer(max))]
}

#[test]
fn over_the_cap_the_busiest_keep_series_and_other_adds_up() {
    let sys = v2_tree();
    let root = sys.path().join("fs/cgroup");
    services(&root, 5);
    let mut c = build(&settings(sys.path(), &with_max(2)));
    let out = render(c.as_mut()).unwrap();
    let cpu = |out: &str, who: &str| {
        value(
            out,
            &format!("usescope_cgroup_cpu_usage_seconds_total{}", labels(who)),
        )
    };
    let mem = |out: &str, who: &str| {
        value(
            out,
            &format!("usescope_cgroup_memory_usage_bytes{}", labels(who)),
        )
    };
    // s5 and s4 use the most CPU; s1..s3 are summed.
    assert_eq!(cpu(&out, "/system.slice/s5.service"), Some(5.0));
    assert_eq!(cpu(&out, "/system.slice/s4.service"), Some(4.0));
    assert_eq!(cpu(&out, "/system.slice/s3.service"), None);
    assert_eq!(
        value(
            &out,
            &format!("usescope_cgroup_cpu_usage_seconds_total{}", OTHER_LABELS)
        ),
        Some(6.0)
    );
    assert_eq!(
        value(
            &out,
            &format!("usescope_cgroup_memory_usage_bytes{}", OTHER_LABELS)
        ),
        Some(6.0 * 4096.0)
    );
    assert_eq!(value(&out, "usescope_cgroup_seen"), Some(5.0));
    assert_eq!(value(&out, "usescope_cgroup_folded"), Some(3.0));
    // Gauges: the sum over all series is the sum over all cgroups.
    let total_mem: f64 = ["s5", "s4"]
        .iter()
        .map(|s| mem(&out, &format!("/system.slice/{s}.service")).unwrap())
        .sum::<f64>()
        + value(
            &out,
            &format!("usescope_cgroup_memory_usage_bytes{}", OTHER_LABELS),
        )
        .unwrap();
    assert_eq!(total_mem, 15.0 * 4096.0);

    // A folded cgroup works 0.5 s: other grows by that much.
    v2_cgroup(&root, "/system.slice/s2.service", 2_500_000, 2 * 4096);
    let out = render(c.as_mut()).unwrap();
    assert_eq!(
        value(
            &out,
            &format!("usescope_cgroup_cpu_usage_seconds_total{}", OTHER_LABELS)
        ),
        Some(6.5)
    );
    // A folded cgroup goes away: other's counters do not go down, its
    // gauges lose its share.
    std::fs::remove_dir_all(root.join("system.slice/s3.service")).unwrap();
    let out = render(c.as_mut()).unwrap();
    assert_eq!(
        value(
            &out,
            &format!("usescope_cgroup_cpu_usage_seconds_total{}", OTHER_LABELS)
        ),
        Some(6.5)
    );
    assert_eq!(
        value(
            &out,
            &format!("usescope_cgroup_memory_usage_bytes{}", OTHER_LABELS)
        ),
        Some(3.0 * 4096.0)
    );
    // A folded cgroup that becomes much busier than the weakest member
    // (s4 at 4 s, idle since) takes its place: its series starts, and
    // other keeps what it had. s4's counters join other from their next
    // increase on, so other's never go down.
    v2_cgroup(&root, "/system.slice/s1.service", 21_000_000, 4096);
    let out = render(c.as_mut()).unwrap();
    assert_eq!(cpu(&out, "/system.slice/s1.service"), Some(21.0));
    assert_eq!(cpu(&out, "/system.slice/s4.service"), None);
    assert_eq!(cpu(&out, "/system.slice/s5.service"), Some(5.0));
    assert_eq!(
        value(
            &out,
            &format!("usescope_cgroup_cpu_usage_seconds_total{}", OTHER_LABELS)
        ),
        Some(6.5)
    );
    v2_cgroup(&root, "/system.slice/s4.service", 4_250_000, 4 * 4096);
    let out = render(c.as_mut()).unwrap();
    assert_eq!(
        value(
            &out,
            &format!("usescope_cgroup_cpu_usage_seconds_total{}", OTHER_LABELS)
        ),
        Some(6.75)
    );
    // Near the cut, nothing changes places from scrape to scrape.
    for _ in 0..5 {
        let again = render(c.as_mut()).unwrap();
        assert_eq!(cpu(&again, "/system.slice/s1.service"), Some(21.0));
        assert_eq!(cpu(&again, "/system.slice/s5.service"), Some(5.0));
    }
}

const OTHER_LABELS: &str = "{cgroup=\"other\",container_id=\"\",pod_uid=\"\"}";

#[test]
fn hostile_names_are_labels_or_folded() {
    let sys = v2_tree();
    let root = sys.path().join("fs/cgroup");
    let names: [&[u8]; 5] = [
        b"new\nline.service",
        b"q\"uote\\.service",
        b"bad\xff\xfe.service",
        // Escapes to the same label as the one before it.
        b"bad\\xff\\xfe.service",
        b"ok.service",
    ];
    for n in names {
        let dir = root.join(std::ffi::OsStr::from_bytes(n));
        std::fs::create_dir_all(&dir).unwrap();
        for (f, t) in v2_files(1_000_000, 4096) {
            std::fs::write(dir.join(f), t).unwrap();
        }
    }
    // A path too long to be a label.
    let long = format!("/{0}/{0}/{0}/x.service", "d".repeat(200));
    v2_cgroup(&root, &long, 1_000_000, 4096);
    let out = render(build(&settings(sys.path(), &[])).as_mut()).unwrap();
    let cpu = |label: &str| {
        value(
            &out,
            &format!(
                "usescope_cgroup_cpu_usage_seconds_total{{cgroup=\"{label}\",container_id=\"\",pod_uid=\"\"}}"
            ),
        )
    };
    assert_eq!(cpu("/new\\nline.service"), Some(1.0), "{out}");
    assert_eq!(cpu("/q\\\"uote\\\\.service"), Some(1.0), "{out}");
    assert_eq!(cpu("/bad\\\\xff\\\\xfe.service"), Some(1.0), "{out}");
    assert_eq!(cpu("/ok.service"), Some(1.0));
    // The duplicate and the long one are in other.
    assert_eq!(
        value(
            &out,
            &format!("usescope_cgroup_cpu_usage_seconds_total{OTHER_LABELS}")
        ),
        Some(2.0)
    );
    assert_eq!(value(&out, "usescope_cgroup_seen"), Some(6.0));
    assert_eq!(value(&out, "usescope_cgroup_folded"), Some(2.0));
    // Every series is one line, and no two are the same.
    let series: Vec<&str> = out
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.rsplit_once(' ').unwrap().0)
        .collect();
    let unique: std::collections::BTreeSet<&&str> = series.iter().collect();
    assert_eq!(unique.len(), series.len(), "{out}");
}

#[test]
fn a_file_that_is_not_regular_fails_the_collector_naming_it() {
    let sys = v2_tree();
    let root = sys.path().join("fs/cgroup");
    v2_cgroup(&root, "/a.service", 1, 1);
    let fifo = root.join("a.service/memory.stat");
    std::fs::remove_file(&fifo).unwrap();
    let c = std::ffi::CString::new(fifo.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let s = settings(sys.path(), &[]);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(render(build(&s).as_mut()).map_err(|e| e.to_string()));
    });
    let e = rx
        .recv_timeout(std::time::Duration::from_secs(5))
        .expect("the scrape did not return within 5 s")
        .unwrap_err();
    assert!(
        e.contains("a.service/memory.stat: is a FIFO, not a regular file"),
        "{e}"
    );
}

#[test]
fn a_malformed_file_fails_the_collector_naming_file_and_line() {
    let sys = v2_tree();
    let root = sys.path().join("fs/cgroup");
    v2_cgroup(&root, "/a.service", 1, 1);
    let mut c = build(&settings(sys.path(), &[]));
    for (file, text, line, cause) in [
        ("cpu.stat", "usage_usec 1\nuser_usec x\n", 2, "user_usec"),
        (
            "cpu.stat",
            "usage_usec 1\nuser_usec 1\n",
            3,
            "no `system_usec` line",
        ),
        ("memory.current", "max\n", 1, "`max` where a number belongs"),
        ("memory.events", "max 1\n", 2, "no `oom` line"),
        ("io.stat", "8:0 rbytes=1 rbytes\n", 1, "key=value"),
        (
            "memory.pressure",
            "some avg10=0.00 avg60=0.00 avg300=0.00 total=1\n",
            2,
            "no `full` line",
        ),
    ] {
        let path = root.join("a.service").join(file);
        let original = std::fs::read(&path).ok();
        std::fs::write(&path, text).unwrap();
        let e = render(c.as_mut()).unwrap_err();
        assert_eq!(e.file, path, "{e}");
        assert_eq!(e.line, Some(line), "{e}");
        assert!(e.cause.contains(cause), "{e}");
        match original {
            Some(o) => std::fs::write(&path, o).unwrap(),
            None => std::fs::remove_file(&path).unwrap(),
        }
        render(c.as_mut()).unwrap();
    }
}

/// Directories nested `depth` deep below `at`, each named `name`, made
/// with mkdirat so the path may be longer than PATH_MAX.
fn nest(at: &Path, name: &str, depth: usize) -> OwnedFd {
    let mut fd = OwnedFd::from(std::fs::File::open(at).unwrap());
    let c = std::ffi::CString::new(name).unwrap();
    for _ in 0..depth {
        // SAFETY: a NUL-terminated name relative to a directory fd we own.
        assert_eq!(
            unsafe { libc::mkdirat(std::os::fd::AsRawFd::as_raw_fd(&fd), c.as_ptr(), 0o755) },
            0
        );
        fd = walk::open_dir_at(fd.as_fd(), &c).unwrap();
    }
    fd
}

#[test]
fn deeper_than_path_max_is_bounded_and_readable() {
    let sys = v2_tree();
    let root = sys.path().join("fs/cgroup");
    // 120 levels of 60 bytes: a 7 KiB path, past PATH_MAX (4096).
    let name = "n".repeat(59) + "s";
    let deepest = nest(&root, &name, 120);
    let svc = std::ffi::CString::new("deep.service").unwrap();
    // SAFETY: as in `nest`.
    assert_eq!(
        unsafe {
            libc::mkdirat(
                std::os::fd::AsRawFd::as_raw_fd(&deepest),
                svc.as_ptr(),
                0o755,
            )
        },
        0
    );
    let svc_fd = walk::open_dir_at(deepest.as_fd(), &svc).unwrap();
    let cpu = std::ffi::CString::new("cpu.stat").unwrap();
    // SAFETY: as in `nest`; the descriptor is ours.
    let f = unsafe {
        libc::openat(
            std::os::fd::AsRawFd::as_raw_fd(&svc_fd),
            cpu.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_CLOEXEC,
            0o644,
        )
    };
    assert!(f >= 0);
    // SAFETY: a new descriptor nothing else owns.
    let mut f = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(f) });
    std::io::Write::write_all(
        &mut f,
        b"usage_usec 3000000\nuser_usec 2000000\nsystem_usec 1000000\n",
    )
    .unwrap();
    // The default depth stops the walk; nothing fails.
    let out = render(build(&settings(sys.path(), &[])).as_mut()).unwrap();
    assert_eq!(
        value(
            &out,
            "usescope_cgroup_walk_limit_reached{limit=\"max-depth\"}"
        ),
        Some(1.0),
        "{out}"
    );
    assert_eq!(value(&out, "usescope_cgroup_seen"), Some(0.0));
    // Deep enough: found and read through descriptors (its path is too
    // long to open, and to be a label: it is in other).
    let deep = [(MAX_DEPTH, FlagValue::Integer(200))];
    let out = render(build(&settings(sys.path(), &deep)).as_mut()).unwrap();
    assert_eq!(
        value(
            &out,
            "usescope_cgroup_walk_limit_reached{limit=\"max-depth\"}"
        ),
        Some(0.0),
        "{out}"
    );
    assert_eq!(value(&out, "usescope_cgroup_seen"), Some(1.0));
    assert_eq!(
        value(
            &out,
            &format!("usescope_cgroup_cpu_usage_seconds_total{OTHER_LABELS}")
        ),
        Some(3.0),
        "{out}"
    );
}

#[test]
fn the_walk_stops_at_max_walk() {
    let sys = v2_tree();
    let root = sys.path().join("fs/cgroup");
    for i in 0..3000 {
        std::fs::create_dir_all(root.join(format!("many/c{i}.scope"))).unwrap();
    }
    let flags = [(MAX_WALK, FlagValue::Integer(500))];
    let mut c = build(&settings(sys.path(), &flags));
    for _ in 0..2 {
        let out = render(c.as_mut()).unwrap();
        assert_eq!(
            value(
                &out,
                "usescope_cgroup_walk_limit_reached{limit=\"max-walk\"}"
            ),
            Some(1.0)
        );
        assert_eq!(
            value(&out, "usescope_cgroup_walked_directories"),
            Some(500.0)
        );
        assert_eq!(value(&out, "usescope_cgroup_seen"), Some(498.0));
        // 200 series each, the rest in other.
        assert_eq!(value(&out, "usescope_cgroup_folded"), Some(298.0));
    }
}
