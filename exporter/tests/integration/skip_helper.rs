//! The skip helper itself (common/skip.rs): a missing requirement is one
//! USESCOPE-SKIPPED line in USESCOPE_SKIP_LOG outside CI, and a failure
//! under USESCOPE_REQUIRE_BPF=1 or CI=true. Run on this test binary's own
//! ignored test, in a child process, so the environment is the child's.

use std::process::{Command, Output};

/// Not run on its own: `skip_is_recorded_outside_ci_and_fails_in_ci` runs it.
#[test]
#[ignore = "run in a child process by skip_is_recorded_outside_ci_and_fails_in_ci"]
fn a_missing_requirement() {
    if !crate::common::skip::unless_met(false, "something this machine lacks") {
        return;
    }
    panic!("unless_met(false) returned true");
}

fn run_child(log: &std::path::Path, env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--ignored", "--exact", "skip_helper::a_missing_requirement"])
        .env_remove("USESCOPE_REQUIRE_BPF")
        .env_remove("CI")
        .env("USESCOPE_SKIP_LOG", log);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

#[test]
fn skip_is_recorded_outside_ci_and_fails_in_ci() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("skips.log");

    let out = run_child(&log, &[]);
    assert!(out.status.success(), "{out:?}");
    let lines = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        lines,
        "USESCOPE-SKIPPED test=integration::skip_helper::a_missing_requirement needs=something this machine lacks\n"
    );

    for env in [("USESCOPE_REQUIRE_BPF", "1"), ("CI", "true")] {
        let _ = std::fs::remove_file(&log);
        let out = run_child(&log, &[env]);
        assert!(!out.status.success(), "{env:?}: a skip passed");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains("needs something this machine lacks, which is missing"),
            "{env:?}: {stdout}"
        );
        assert!(
            !log.exists(),
            "{env:?}: a failure was also logged as a skip"
        );
    }
}
