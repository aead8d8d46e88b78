//! Least privilege, observed from outside: after start-up the daemon's
//! /proc/PID/status shows no effective, permitted or bounding capabilities
//! and no_new_privs, yet it keeps serving /proc and probe metrics.

mod common;

use common::{Daemon, can_run_bpf};

fn status_field(pid: u32, field: &str) -> String {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
        .trim()
        .to_string()
}

fn assert_no_capabilities(d: &Daemon) {
    let pid = d.child.id();
    for field in ["CapEff", "CapPrm", "CapInh", "CapBnd", "CapAmb"] {
        assert_eq!(
            status_field(pid, field),
            "0000000000000000",
            "{field} of the running daemon"
        );
    }
    assert_eq!(status_field(pid, "NoNewPrivs"), "1");
}

#[test]
fn root_daemon_drops_every_capability_after_attach() {
    if !can_run_bpf("root_daemon_drops_every_capability_after_attach") {
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
    if !can_run_bpf("runtime_user_switches_uid") {
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

/// The container model (Dockerfile): a non-root process whose binary carries
/// file capabilities attaches its probes, then holds no capability at all.
#[test]
fn non_root_with_file_capabilities_attaches_then_drops_everything() {
    if !can_run_bpf("non_root_with_file_capabilities_attaches_then_drops_everything") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("usescope-filecaps-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bin = dir.join("usescope");
    std::fs::copy(common::bin(), &bin).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
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
    let d = Daemon::try_start_with(cmd, &[]).expect("usescope as uid 65534");
    let pid = d.child.id();
    assert!(
        status_field(pid, "Uid")
            .split_whitespace()
            .all(|u| u == "65534")
    );
    let expo = d.scrape();
    for probe in ["runqlat", "cachestat", "drops"] {
        assert!(
            expo.contains(&format!("usescope_probe_up{{probe=\"{probe}\"}} 1")),
            "{probe} did not attach from file capabilities:\n{}",
            d.log().join("\n")
        );
    }
    assert_no_capabilities(&d);
    assert!(d.stop().success());
    let _ = std::fs::remove_dir_all(&dir);
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
