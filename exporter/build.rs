//! Build script:
//! - stamps the git revision, branch and rustc version into the binary for
//!   `usescope_build_info` and `node_exporter_build_info`;
//! - compiles the eBPF programs in `ebpf-probes/` (C, CO-RE) with clang into
//!   OUT_DIR, where `src/probes/loader.rs` embeds them with
//!   `include_bytes_aligned!`, so the one `usescope` binary is all an
//!   operator deploys.
//!
//! - generates `OUT_DIR/layout.rs`, the Rust mirror of the map layouts in
//!   `ebpf-probes/usescope.h` (constants and `#[repr(C)]` structs), which
//!   `src/probes/layout.rs` includes, and checks its own reading of the
//!   header against clang ([`generate_layout`]).
//!
//! The C side includes the checked-in `ebpf-probes/vmlinux.h`, so building
//! needs clang and libbpf-dev's headers but no BTF on the build host (see
//! docs/probes.md).

use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "build/header.rs"]
mod header;

/// The probe objects: `OUT_DIR/<object>.bpf.o` from `ebpf-probes/<source>.bpf.c`
/// with extra clang flags. runqlat comes three ways: from the scheduler's
/// own run_delay (runqlat_delay), or timed from wakeups with the start
/// time in task-local storage (runqlat) or, for kernels that refuse task
/// storage, in an LRU hash (runqlat_lru, RUNQLAT_START_LRU).
const PROBES: &[(&str, &str, &[&str])] = &[
    ("runqlat_delay", "runqlat_delay", &[]),
    ("runqlat", "runqlat", &[]),
    ("runqlat_lru", "runqlat", &["-DRUNQLAT_START_LRU"]),
    ("cachestat", "cachestat", &[]),
    ("drops", "drops", &[]),
    ("biolatency", "biolatency", &[]),
    ("softirq", "softirq", &[]),
    ("reclaim", "reclaim", &[]),
];

fn main() {
    stamp_versions();
    generate_layout();
    compile_probes();
}

fn stamp_versions() {
    let revision = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".to_string());
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_string());
    let rust_version = Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .nth(1)
                .map(str::to_string)
        })
        .unwrap_or_else(|| "unknown".to_string());
    let branch = Command::new("git")
        .args(["rev-parse", "--abbrev-ref", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|b| b != "HEAD")
        .unwrap_or_default();
    println!("cargo:rustc-env=USESCOPE_GIT_REVISION={revision}");
    println!("cargo:rustc-env=USESCOPE_GIT_BRANCH={branch}");
    println!("cargo:rustc-env=USESCOPE_RUSTC_VERSION={rust_version}");
    println!("cargo:rerun-if-changed=../.git/HEAD");
    println!("cargo:rerun-if-changed=../.git/refs");
}

fn compile_probes() {
    let src_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../ebpf-probes");
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    println!("cargo:rerun-if-env-changed=USESCOPE_CLANG");
    println!(
        "cargo:rerun-if-changed={}",
        src_dir.join("usescope.h").display()
    );
    for header in ["vmlinux.h", "log2_hist.h"] {
        println!("cargo:rerun-if-changed={}", src_dir.join(header).display());
    }
    let clang = std::env::var("USESCOPE_CLANG").unwrap_or_else(|_| "clang".to_string());
    for (name, source, flags) in PROBES {
        let src = src_dir.join(format!("{source}.bpf.c"));
        println!("cargo:rerun-if-changed={}", src.display());
        let full = out_dir.join(format!("{name}.full.bpf.o"));
        let obj = out_dir.join(format!("{name}.bpf.o"));
        run_clang(&clang, &src_dir, &src, flags, &full);
        strip_dwarf(&full, &obj);
    }
}

/// Writes `OUT_DIR/layout.rs` from `ebpf-probes/usescope.h`, then has clang
/// check that reading: a C file asserting every define's value and every
/// struct's size, field offsets and field sizes as computed here is compiled
/// the way the probes are, so a misread header fails the build instead of
/// shifting the counters user space reads.
fn generate_layout() {
    let src_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../ebpf-probes");
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let path = src_dir.join("usescope.h");
    println!("cargo:rerun-if-changed={}", path.display());
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| fail(&format!("cannot read {}: {e}", path.display())));
    let parsed = header::parse("ebpf-probes/usescope.h", &text).unwrap_or_else(|e| fail(&e));
    let check = out_dir.join("layout_check.c");
    write(&check, &header::c_check(&parsed, "ebpf-probes/usescope.h"));
    let clang = std::env::var("USESCOPE_CLANG").unwrap_or_else(|_| "clang".to_string());
    let output = Command::new(&clang)
        .args(["-target", "bpf", "-fsyntax-only", "-Wall", "-Werror", "-I"])
        .arg(&src_dir)
        .arg(&check)
        .output();
    match output {
        Ok(o) if o.status.success() => {}
        Ok(o) => fail(&format!(
            "build.rs misread ebpf-probes/usescope.h (or the header uses C it does not \
             read): clang rejects its check {}:\n{}",
            check.display(),
            String::from_utf8_lossy(&o.stderr)
        )),
        Err(e) => fail(&format!(
            "cannot run `{clang}` to check the header layout ({e})"
        )),
    }
    write(
        &out_dir.join("layout.rs"),
        &header::rust(&parsed, "ebpf-probes/usescope.h"),
    );
}

fn write(path: &Path, text: &str) {
    if let Err(e) = std::fs::write(path, text) {
        fail(&format!("cannot write {}: {e}", path.display()));
    }
}

/// Compiles one probe; any failure stops the build with clang's own message.
fn run_clang(clang: &str, include: &Path, src: &Path, flags: &[&str], out: &Path) {
    let output = Command::new(clang)
        .args([
            "-O2",
            "-g",
            "-target",
            "bpf",
            "-D__TARGET_ARCH_x86",
            "-mcpu=v3",
        ])
        .args(["-Wall", "-Werror"])
        .args(flags)
        .arg("-I")
        .arg(include)
        .arg("-c")
        .arg(src)
        .arg("-o")
        .arg(out)
        .output();
    match output {
        Ok(o) if o.status.success() => {}
        Ok(o) => fail(&format!(
            "clang failed to compile {}:\n{}",
            src.display(),
            String::from_utf8_lossy(&o.stderr)
        )),
        Err(e) => fail(&format!(
            "cannot run `{clang}` to compile {} ({e}). Install clang, llvm and \
             libbpf-dev (apt-get install clang llvm libbpf-dev), or point \
             USESCOPE_CLANG at a clang binary.",
            src.display()
        )),
    }
}

/// Drops the DWARF (about 600 KiB per probe, all of vmlinux.h) but keeps
/// .BTF and .BTF.ext, which the loader needs for CO-RE. Without llvm-strip
/// the unstripped object is embedded: bigger, equally correct.
fn strip_dwarf(full: &Path, out: &Path) {
    let stripped = Command::new("llvm-strip")
        .arg("-g")
        .arg(full)
        .arg("-o")
        .arg(out)
        .status()
        .is_ok_and(|s| s.success());
    if !stripped {
        println!("cargo:warning=llvm-strip not found or failed; embedding unstripped eBPF objects");
        if let Err(e) = std::fs::copy(full, out) {
            fail(&format!("cannot copy {}: {e}", full.display()));
        }
    }
}

fn fail(msg: &str) -> ! {
    eprintln!("error: {msg}");
    panic!("building the eBPF probes failed: {msg}");
}
