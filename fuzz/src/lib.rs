//! The fuzz targets, taken from usescope's collector registry
//! (`usescope::collectors::ALL`): every registered parser is a target,
//! named by its `Parser::name`, with its `check` as the entry point and the
//! fixture files of the sources it reads as seeds. So a registered
//! collector is fuzzed without an edit here.
//!
//! Shared by the libFuzzer binaries in `fuzz_targets/` and by
//! `exporter/tests/integration/parsers_fuzz_smoke.rs` (which includes this file with
//! `#[path]`), so both exercise exactly the same calls. One binary,
//! `parser`, serves every text target: `USESCOPE_FUZZ_TARGET` picks it
//! (`list` prints them). The BTF reader takes bytes and has its own binary.

use std::hint::black_box;
use std::sync::OnceLock;

use usescope::collectors;
use usescope::kernel::error::ParseError;
use usescope::probes::btf;

/// A parser's whole-file entry point, as the registry declares it.
pub type Check = fn(&str) -> Result<(), ParseError>;

/// A text parser's fuzz entry point. `name` also names its corpus
/// directory (`fuzz/corpus/NAME`); `seeds` are fixture files relative to
/// `exporter/tests/fixtures` (`proc/stat`, `large/stat`, `sys/…`,
/// `rootfs/…`: each source in every fixture tree of its root).
pub struct Target {
    pub name: &'static str,
    pub check: Check,
    pub seeds: Vec<String>,
}

/// Parsers that are not a collector's file, so not in the registry:
/// /proc/self/stat for the process metrics, and the `field=value` text form
/// of adjtimex(2)'s struct, which drives arbitrary structs through the
/// timex collector's pure `derive` (see collectors/timex.rs).
const EXTRA: &[(&str, Check)] = &[
    ("self_stat", self_stat),
    ("timex", collectors::timex::check),
];

/// Every text target: the registry's parsers, then [`EXTRA`].
pub fn text_targets() -> Vec<Target> {
    let mut out: Vec<Target> = collectors::parsers()
        .map(|(spec, p)| Target {
            name: p.name,
            check: p.check,
            seeds: spec
                .sources
                .iter()
                .filter(|s| s.parser == p.name)
                .flat_map(|s| {
                    s.root
                        .fixture_trees()
                        .iter()
                        .map(move |tree| format!("{tree}/{}", s.path))
                })
                .collect(),
        })
        .collect();
    out.extend(EXTRA.iter().map(|&(name, check)| Target {
        name,
        check,
        seeds: Vec::new(),
    }));
    out
}

/// The environment variable that picks the `parser` binary's target.
pub const TARGET_VAR: &str = "USESCOPE_FUZZ_TARGET";

/// The target `USESCOPE_FUZZ_TARGET` names, chosen once per process. With
/// `list` it prints `NAME SEED...` per target and exits; an unknown or
/// missing name exits with the list of names.
pub fn selected() -> &'static Target {
    static SELECTED: OnceLock<Target> = OnceLock::new();
    SELECTED.get_or_init(|| {
        let want = std::env::var(TARGET_VAR).unwrap_or_default();
        let mut targets = text_targets();
        if want == "list" {
            for t in &targets {
                println!("{} {}", t.name, t.seeds.join(" "));
            }
            std::process::exit(0);
        }
        match targets.iter().position(|t| t.name == want) {
            Some(i) => targets.swap_remove(i),
            None => {
                let names: Vec<&str> = targets.iter().map(|t| t.name).collect();
                eprintln!(
                    "set {TARGET_VAR} to one of: {} (or `list`)",
                    names.join(" ")
                );
                std::process::exit(2);
            }
        }
    })
}

/// libFuzzer hands over bytes; the collectors only ever see valid UTF-8
/// (SourceFile guarantees it), so invalid sequences become U+FFFD rather
/// than being thrown away, which keeps every input useful.
pub fn run_bytes(target: &Target, data: &[u8]) {
    let _ = black_box((target.check)(&String::from_utf8_lossy(data)));
}

fn self_stat(s: &str) -> Result<(), ParseError> {
    black_box(usescope::scrape::self_metrics::parse_proc_self_stat(s));
    Ok(())
}

/// The BTF reader takes raw bytes (the kernel's /sys/kernel/btf blobs). The
/// blob is also parsed as split BTF on top of itself, which drives the
/// string lookups across the base/module boundary.
pub fn btf(data: &[u8]) {
    let Ok(base) = btf::Btf::parse(data) else {
        return;
    };
    if let Ok(enums) = base.enums() {
        black_box(btf::find_enum(&enums, "skb_drop_reason"));
    }
    if let Ok(split) = btf::Btf::parse_split(data, Some(&base)) {
        let _ = black_box(split.enums());
    }
}
