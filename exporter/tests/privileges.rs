//! Least privilege, observed from outside: after start-up every thread of
//! the daemon (/proc/PID/task/*/status) shows no effective, permitted or
//! bounding capabilities and no_new_privs, yet it keeps serving /proc and
//! probe metrics; and a scrape cannot read what the runtime user cannot.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::Daemon;

fn status_field(pid: u32, field: &str) -> String {
    task_status_field(&format!("/proc/{pid}/status"), field)
}

fn task_status_field(path: &str, field: &str) -> String {
    let s = std::fs::read_to_string(path).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} in {path}"))
        .trim()
        .to_string()
}

/// Capabilities and no_new_privs are per thread: check every one of them,
/// after a few scrapes so that the runtime's workers (and any blocking
/// thread) exist and have served requests.
fn assert_no_capabilities(d: &Daemon) {
    for _ in 0..3 {
        d.scrape();
    }
    let pid = d.child.id();
    let tasks: Vec<_> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(
        tasks.len() >= 3,
        "expected the main thread and two workers: {tasks:?}"
    );
    for task in tasks {
        let status = format!("{}/status", task.display());
        for field in ["CapEff", "CapPrm", "CapInh", "CapBnd", "CapAmb"] {
            assert_eq!(
                task_status_field(&status, field),
                "0000000000000000",
                "{field} of {status}"
            );
        }
        assert_eq!(task_status_field(&status, "NoNewPrivs"), "1", "{status}");
    }
}

/// usescope started through setpriv(1) with these options (user, groups,
/// capability sets), as a container runtime or service manager would.
fn usescope_under_setpriv(options: &[&str]) -> std::process::Command {
    let mut cmd = std::process::Command::new("setpriv");
    cmd.args(options).arg("--").arg(common::bin());
    cmd
}

/// A procfs tree whose `loadavg` belongs to another user, mode 0600.
fn tree_with_private_loadavg(owner: u32) -> tempfile::TempDir {
    let tree = common::copy_tree(&common::fixture("proc"));
    make_world_readable(tree.path());
    let file = tree.path().join("loadavg");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::chown(&file, Some(owner), Some(owner)).unwrap();
    tree
}

fn make_world_readable(dir: &Path) {
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            make_world_readable(&p);
        } else {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
    }
}

/// The review's attack: a scrape, served on a worker thread that had kept
/// CAP_DAC_OVERRIDE, read a 0600 file owned by another user. Run as root
/// without --runtime.user, the daemon keeps uid 0 but no capability, so a
/// file of another owner stays unread.
#[test]
fn scrape_cannot_read_another_users_private_file() {
    if !common::skip::unless_root("to start the daemon privileged and see it drop everything") {
        return;
    }
    let tree_dir = tree_with_private_loadavg(65534);
    let tree = tree_dir.path();
    let procfs = format!("--path.procfs={}", tree.display());
    let d = Daemon::start(&[
        &procfs,
        "--no-probe.runqlat",
        "--no-probe.cachestat",
        "--no-probe.drops",
    ]);
    let expo = d.scrape();
    assert!(
        !expo.contains("node_load1 "),
        "a 0600 file of uid 65534 was read"
    );
    assert_eq!(
        common::sample(
            &expo,
            "node_scrape_collector_success{collector=\"loadavg\"}"
        ),
        Some(0.0)
    );
    assert!(
        d.log()
            .iter()
            .any(|l| l.contains("loadavg") && l.contains("ermission denied")),
        "{}",
        d.log().join("\n")
    );
    assert!(
        d.log().iter().any(|l| l.contains("still running as root")),
        "no loud warning about uid 0"
    );
    assert_eq!(
        common::sample(&expo, "node_scrape_collector_success{collector=\"stat\"}"),
        Some(1.0)
    );
    assert!(d.stop().success());

    // And under --runtime.user, a root-owned 0600 file is out of reach too.
    let tree_dir = tree_with_private_loadavg(0);
    let tree = tree_dir.path();
    let procfs = format!("--path.procfs={}", tree.display());
    let d = Daemon::start(&[
        &procfs,
        "--runtime.user=nobody",
        "--no-probe.runqlat",
        "--no-probe.cachestat",
        "--no-probe.drops",
    ]);
    let expo = d.scrape();
    assert!(
        !expo.contains("node_load1 "),
        "a root-owned 0600 file was read as nobody"
    );
    assert!(!d.log().iter().any(|l| l.contains("still running as root")));
    assert!(d.stop().success());
}

#[test]
fn root_daemon_drops_every_capability_after_attach() {
    if !common::skip::unless_root("to start the daemon privileged and see it drop everything") {
        return;
    }
    let d = Daemon::start(&[]);
    assert!(
        d.wait_for_log("with no capabilities", std::time::Duration::from_secs(10))
            .is_some()
    );
    assert_no_capabilities(&d);
    let expo = d.scrape();
    assert!(expo.contains("node_cpu_seconds_total{"));
    // Probe maps are still readable through the descriptors kept from start-up.
    if expo.contains("usescope_probe_up{probe=\"drops\"} 1") {
        assert!(expo.contains("usescope_skb_drops_total"));
    }
    assert!(d.stop().success());
}

#[test]
fn runtime_user_switches_uid() {
    if !common::skip::unless_root("to start the daemon privileged and see it drop everything") {
        return;
    }
    let d = Daemon::start(&["--runtime.user=nobody"]);
    assert!(
        d.wait_for_log("running as nobody", std::time::Duration::from_secs(10))
            .is_some()
    );
    let uid = status_field(d.child.id(), "Uid");
    assert!(uid.split_whitespace().all(|u| u == "65534"), "Uid: {uid}");
    assert_no_capabilities(&d);
    let expo = d.scrape();
    assert!(expo.contains("node_load1 "));
    // Non-dumpable after the switch, so /proc/self/fd cannot be opened any
    // more; the descriptor kept from start-up still lists it.
    let fds = common::sample(&expo, "process_open_fds").expect("process_open_fds exported");
    assert!(fds >= 5.0, "process_open_fds {fds}");
    assert!(d.stop().success());
}

/// A non-root process whose binary carries file capabilities (an option for
/// bare installs; the container image has none) attaches its probes, then
/// holds no capability at all.
#[test]
fn non_root_with_file_capabilities_attaches_then_drops_everything() {
    if !common::skip::unless_root("to start the daemon privileged and see it drop everything") {
        return;
    }
    let dir = common::temp_dir();
    let bin = dir.path().join("usescope");
    std::fs::copy(common::bin(), &bin).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let setcap = std::process::Command::new("setcap")
        .args(["cap_bpf,cap_perfmon,cap_sys_admin,cap_setpcap+ep"])
        .arg(&bin)
        .status()
        .expect("setcap (libcap2-bin)");
    assert!(setcap.success());
    let mut cmd = std::process::Command::new("setpriv");
    cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(&bin);
    let d = Daemon::try_start_with(
        cmd,
        &["--probe.biolatency", "--probe.softirq", "--probe.reclaim"],
    )
    .expect("usescope as uid 65534");
    let pid = d.child.id();
    assert!(
        status_field(pid, "Uid")
            .split_whitespace()
            .all(|u| u == "65534")
    );
    let expo = d.scrape();
    for probe in [
        "runqlat",
        "cachestat",
        "drops",
        "biolatency",
        "softirq",
        "reclaim",
    ] {
        assert!(
            expo.contains(&format!("usescope_probe_up{{probe=\"{probe}\"}} 1")),
            "{probe} did not attach from file capabilities:\n{}",
            d.log().join("\n")
        );
    }
    assert!(
        expo.contains("usescope_probe_info{mode=\"tp_btf+sched_info\",probe=\"runqlat\"} 1"),
        "task storage needs no more than CAP_BPF and CAP_PERFMON"
    );
    assert_no_capabilities(&d);
    // The maps stay readable through the fds kept from start-up.
    let expo = d.scrape();
    // drops reads its counters with batch lookups: no capability either.
    assert!(
        expo.contains("node_scrape_collector_success{collector=\"probe_drops\"} 1"),
        "drops' map reads failed without capabilities:\n{}",
        d.log().join("\n")
    );
    assert!(expo.contains("usescope_runqueue_latency_seconds_count "));
    assert!(expo.contains("# TYPE usescope_block_io_latency_seconds histogram"));
    assert!(expo.contains("usescope_softirq_entries_total{cpu=\"0\",vector=\"TIMER\"}"));
    assert!(expo.contains("usescope_direct_reclaim_seconds_count{kind=\"memcg\"} "));
    assert!(d.stop().success());
}

/// The container image's entrypoint passes --runtime.user=65534; started
/// with no capabilities at all (`docker run --cap-drop ALL`), uid 0 cannot
/// switch. It must still serve, with no capabilities, and say loudly that
/// the switch did not happen and why.
#[test]
fn runtime_user_without_setuid_keeps_serving_and_says_why() {
    if !common::skip::unless_root("to start the daemon as uid 0 with no capabilities") {
        return;
    }
    // Root with an empty bounding set: exec leaves no capability at all.
    let cmd = usescope_under_setpriv(&["--inh-caps=-all", "--bounding-set=-all"]);
    let d = Daemon::try_start_with(cmd, &["--runtime.user=65534"])
        .expect("usescope as uid 0 with no capabilities");
    let line = d
        .wait_for_log("not applied", std::time::Duration::from_secs(10))
        .expect("a warning that --runtime.user was not applied");
    assert!(line.contains("level=warn"), "{line}");
    assert!(line.contains("CAP_SETUID"), "{line}");
    let pid = d.child.id();
    assert!(
        status_field(pid, "Uid")
            .split_whitespace()
            .all(|u| u == "0")
    );
    assert_eq!(status_field(pid, "CapEff"), "0000000000000000");
    assert_eq!(status_field(pid, "NoNewPrivs"), "1");
    let expo = d.scrape();
    assert!(expo.contains("node_load1 "));
    for probe in ["runqlat", "cachestat", "drops"] {
        assert!(
            expo.contains(&format!("usescope_probe_up{{probe=\"{probe}\"}} 0")),
            "{probe} should be down without capabilities"
        );
    }
    assert!(d.stop().success());
}

/// `docker run --user 65534:65534 --cap-drop ALL` with the image's
/// --runtime.user=65534: the process already is that user (runc also lists
/// the primary group as a supplementary one), so there is nothing to switch
/// and no capability is needed to not switch.
#[test]
fn runtime_user_already_in_effect_needs_no_capabilities() {
    if !common::skip::unless_root("to start the daemon as uid 65534 through setpriv") {
        return;
    }
    let cmd = usescope_under_setpriv(&["--reuid=65534", "--regid=65534", "--groups=65534"]);
    let d = Daemon::try_start_with(
        cmd,
        &[
            "--runtime.user=65534",
            "--no-probe.runqlat",
            "--no-probe.cachestat",
            "--no-probe.drops",
        ],
    )
    .expect("usescope as uid 65534 with --runtime.user=65534");
    let line = d
        .wait_for_log("with no capabilities", std::time::Duration::from_secs(10))
        .expect("the drop's log line");
    assert!(line.contains("(uid 65534, gid 65534)"), "{line}");
    assert!(!line.contains("not applied"), "{line}");
    assert!(d.stop().success());
}

#[test]
fn unknown_runtime_user_fails_startup_with_one_line() {
    let out = std::process::Command::new(common::bin())
        .args([
            "--web.listen-address=127.0.0.1:0",
            "--runtime.user=no-such-user-usescope",
            "--no-probe.runqlat",
            "--no-probe.cachestat",
            "--no-probe.drops",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.trim().lines().last().unwrap().contains("no such user"),
        "{err}"
    );
}

/// Started unprivileged (no CAP_SETPCAP), the bounding set cannot be
/// emptied: the log must say so instead of claiming it was.
#[test]
fn an_unprivileged_start_says_the_bounding_set_stayed() {
    if !common::skip::unless_root("to start the daemon privileged and see it drop everything") {
        return;
    }
    let cmd = usescope_under_setpriv(&["--reuid=65534", "--regid=65534", "--clear-groups"]);
    let d = Daemon::try_start_with(
        cmd,
        &[
            "--no-probe.runqlat",
            "--no-probe.cachestat",
            "--no-probe.drops",
        ],
    )
    .expect("usescope as uid 65534");
    let line = d
        .wait_for_log("with no capabilities", std::time::Duration::from_secs(10))
        .expect("a line saying what was dropped");
    assert!(line.contains("bounding set unchanged"), "{line}");
    assert!(!line.contains("bounding set empty"), "{line}");
    assert!(d.stop().success());
}

/// systemd and many containers start services with a soft open-file limit
/// of 1024; usescope raises it to the hard limit, as Go programs do.
#[test]
fn the_soft_open_file_limit_is_raised_to_the_hard_limit() {
    let mut cmd = std::process::Command::new("sh");
    cmd.args([
        "-c",
        "ulimit -Sn 1024 && ulimit -Hn 4096 && exec \"$0\" \"$@\"",
    ])
    .arg(common::bin());
    let d = Daemon::try_start_with(
        cmd,
        &[
            "--no-probe.runqlat",
            "--no-probe.cachestat",
            "--no-probe.drops",
        ],
    )
    .expect("usescope under ulimit -Sn 1024");
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", d.child.id())).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    let numbers: Vec<&str> = line.split_whitespace().skip(3).take(2).collect();
    assert_eq!(numbers, ["4096", "4096"], "{line}");
    assert!(d.stop().success());
}
