//! The one way a test skips: when something it needs (root, BPF, a tool
//! such as promtool or node_exporter, a kernel feature) is missing.
//!
//! - Under `USESCOPE_REQUIRE_BPF=1` or `CI=true` (CI sets both) a missing requirement is a
//!   failure, never a skip.
//! - Otherwise the test prints one machine-readable line to stderr,
//!   `USESCOPE-SKIPPED test=<binary>::<test> needs=<what>`, and appends the
//!   same line to the file named by `USESCOPE_SKIP_LOG`, if set:
//!   scripts/test.sh sets it and prints the count and names after
//!   `cargo test` (which hides a passing test's stderr), and fails in CI
//!   when any test skipped.
//!
//! Integration tests reach this through `common`; the library's unit
//! tests include this same file (`exporter/src/lib.rs`, `test_skip`).
#![allow(dead_code)]

use std::io::Write;

/// The prefix scripts/test.sh counts.
pub const MARKER: &str = "USESCOPE-SKIPPED";

/// Whether every requirement must be met: `USESCOPE_REQUIRE_BPF=1`, or
/// `CI=true` (CI sets both).
pub fn required() -> bool {
    std::env::var("USESCOPE_REQUIRE_BPF").is_ok_and(|v| v == "1")
        || std::env::var("CI").is_ok_and(|v| v == "true")
}

/// True when `met`. Otherwise fails the test under `USESCOPE_REQUIRE_BPF=1`,
/// or records the skip and returns false; the caller then returns.
/// `needs` says what is missing and how to get it.
#[track_caller]
pub fn unless_met(met: bool, needs: &str) -> bool {
    if met {
        return true;
    }
    let test = test_name();
    if required() {
        panic!(
            "{test} needs {needs}, which is missing, and USESCOPE_REQUIRE_BPF=1 or CI=true forbids skipping"
        );
    }
    let line = format!("{MARKER} test={test} needs={}", needs.replace('\n', " "));
    eprintln!("{line}");
    if let Some(log) = std::env::var_os("USESCOPE_SKIP_LOG") {
        // One write of one line: concurrent tests append whole lines.
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .and_then(|mut f| f.write_all(format!("{line}\n").as_bytes()));
        if let Err(e) = written {
            panic!("{test}: cannot record the skip in USESCOPE_SKIP_LOG ({e})");
        }
    }
    false
}

/// True when running as root (effective uid 0); otherwise see [`unless_met`].
pub fn unless_root(why: &str) -> bool {
    unless_met(is_root(), &format!("root ({why})"))
}

/// The tool at `path` if it is an executable file; otherwise see
/// [`unless_met`] (`install` says how to get it) and `None`.
pub fn tool(path: &std::path::Path, install: &str) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let found =
        std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
    unless_met(found, &format!("{} ({install})", path.display())).then(|| path.to_path_buf())
}

/// The first executable called `name` on PATH, as [`tool`] does.
pub fn tool_on_path(name: &str, install: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file()));
    tool(
        &found.unwrap_or_else(|| std::path::PathBuf::from(name)),
        install,
    )
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { geteuid() == 0 }
}

unsafe extern "C" {
    fn geteuid() -> u32;
}

/// `<test binary>::<test path>`: libtest runs each test on a thread named
/// after it; the binary (`probes-0123abcd`) says which file.
fn test_name() -> String {
    let binary = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .map(|s| match s.rsplit_once('-') {
            Some((name, hash)) if hash.chars().all(|c| c.is_ascii_hexdigit()) => name.to_string(),
            _ => s,
        })
        .unwrap_or_default();
    let thread = std::thread::current();
    format!("{binary}::{}", thread.name().unwrap_or("unnamed"))
}
