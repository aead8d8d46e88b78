//! Deterministic mutation smoke test over every parser, fast enough for CI.
//!
//! The coverage-guided fuzzing lives in `fuzz/` (cargo-fuzz, run by hand
//! with `fuzz/run-all.sh`, see TESTING.md); this test runs the same entry points
//! (`fuzz/src/lib.rs`, included below, which takes them from the collector
//! registry, so a registered collector is covered here without an edit)
//! on a fixed, seeded set of mutations
//! of the captured (`proc`) and synthetic (`large`) fixtures: byte flips,
//! truncation at line boundaries and mid-line, line deletion, duplication
//! and swaps, numbers replaced by out-of-range or non-integer tokens, huge
//! column counts, CRLF and tab separators, and invalid UTF-8 (through
//! `String::from_utf8_lossy`, which is what a libFuzzer run feeds too).
//! It then replays every input under `fuzz/corpus/` and `fuzz/regressions/`.
//!
//! Parsers may return errors on any of this; they must not panic. Each
//! input runs under `catch_unwind`, and a failure names the parser and the
//! mutation and saves the input under the target dir for reproduction.

// `selected` and `TARGET_VAR` serve the libFuzzer binary only.
#[allow(dead_code)]
#[path = "../../../fuzz/src/lib.rs"]
mod targets;

use std::fs;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use targets::Target;

/// Work per seed file is capped in bytes parsed, so the 180 kB synthetic
/// diskstats costs about as much as the captured one in total time.
const BYTES_PER_SEED: usize = 8 << 20;
const MIN_CASES: usize = 40;
const MAX_CASES: usize = 1000;

/// Tokens swapped in for numbers: u64::MAX, one past it, negative,
/// float-overflowing, non-finite, empty, hex, very long.
const BAD_NUMBERS: &[&str] = &[
    "18446744073709551615",
    "18446744073709551616",
    "-1",
    "1e400",
    "NaN",
    "",
    "0x10",
    "340282366920938463463374607431768211456",
];

/// Bytes that are structural in some /proc format, plus invalid UTF-8.
const INTERESTING_BYTES: &[u8] = b" \n\t:=()-.0912\xff\xfe\x00";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// xorshift64*: deterministic, no dependency, good enough to spread edits.
struct Rng(u64);

impl Rng {
    fn new(seed: &str) -> Rng {
        let h = seed.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        Rng(h | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

/// Up to `n` indexes spread evenly over `0..len`.
fn spread(len: usize, n: usize) -> impl Iterator<Item = usize> {
    let step = len.div_ceil(n.max(1)).max(1);
    (0..len).step_by(step)
}

/// Byte ranges of each line, newline included.
fn line_spans(b: &[u8]) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut start = 0;
    for (i, &c) in b.iter().enumerate() {
        if c == b'\n' {
            spans.push((start, i + 1));
            start = i + 1;
        }
    }
    if start < b.len() {
        spans.push((start, b.len()));
    }
    spans
}

/// Byte ranges of the maximal ASCII-digit runs.
fn number_spans(b: &[u8]) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_digit() {
            let start = i;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            spans.push((start, i));
        } else {
            i += 1;
        }
    }
    spans
}

fn splice(b: &[u8], (start, end): (usize, usize), with: &[u8]) -> Vec<u8> {
    [&b[..start], with, &b[end..]].concat()
}

/// Every mutation of `seed`, each with a description for failure reports.
fn mutations(seed: &[u8], rng: &mut Rng) -> Vec<(String, Vec<u8>)> {
    let n = (BYTES_PER_SEED / seed.len().max(1)).clamp(MIN_CASES, MAX_CASES);
    let lines = line_spans(seed);
    let numbers = number_spans(seed);
    let mut out = vec![("unchanged".to_string(), seed.to_vec())];
    structural(seed, &mut out);
    for i in spread(lines.len(), n / 4) {
        let (start, end) = lines[i];
        out.push((
            format!("truncated before line {}", i + 1),
            seed[..start].to_vec(),
        ));
        out.push((
            format!("truncated mid line {}", i + 1),
            seed[..start + (end - start) / 2].to_vec(),
        ));
        out.push((
            format!("line {} deleted", i + 1),
            splice(seed, (start, end), b""),
        ));
        let dup = [&seed[start..end], &seed[start..end]].concat();
        out.push((
            format!("line {} duplicated", i + 1),
            splice(seed, (start, end), &dup),
        ));
        if let Some(&next) = lines.get(i + 1) {
            let swapped = [&seed[next.0..next.1], &seed[start..end]].concat();
            out.push((
                format!("lines {} and {} swapped", i + 1, i + 2),
                splice(seed, (start, next.1), &swapped),
            ));
        }
    }
    for i in spread(numbers.len(), n / BAD_NUMBERS.len()) {
        for bad in BAD_NUMBERS {
            out.push((
                format!("number {} replaced by {bad:?}", i + 1),
                splice(seed, numbers[i], bad.as_bytes()),
            ));
        }
    }
    for k in 0..n {
        out.push(random_edit(seed, &lines, rng, k));
    }
    out
}

/// Whole-file rewrites: empty, blank, separators changed, extra columns.
fn structural(seed: &[u8], out: &mut Vec<(String, Vec<u8>)>) {
    let text = String::from_utf8_lossy(seed);
    let wide: String = " 1".repeat(20_000);
    out.extend([
        ("empty".to_string(), Vec::new()),
        ("only newlines".to_string(), b"\n\n\n".to_vec()),
        ("only spaces".to_string(), b"   \t ".to_vec()),
        (
            "no final newline".to_string(),
            text.trim_end().as_bytes().to_vec(),
        ),
        ("CRLF".to_string(), text.replace('\n', "\r\n").into_bytes()),
        ("tabs".to_string(), text.replace(' ', "\t").into_bytes()),
        (
            "NUL bytes".to_string(),
            text.replace(' ', "\0").into_bytes(),
        ),
        (
            "20000 extra columns on every line".to_string(),
            text.lines()
                .map(|l| format!("{l}{wide}\n"))
                .collect::<String>()
                .into_bytes(),
        ),
        (
            "one line of 20000 columns first".to_string(),
            format!("{}\n{text}", wide.trim_start()).into_bytes(),
        ),
        (
            "first line only".to_string(),
            text.lines().next().unwrap_or("").as_bytes().to_vec(),
        ),
    ]);
}

/// One seeded edit: a byte overwritten, inserted or deleted, a line cut
/// short, or an invalid UTF-8 sequence inserted.
fn random_edit(
    seed: &[u8],
    lines: &[(usize, usize)],
    rng: &mut Rng,
    k: usize,
) -> (String, Vec<u8>) {
    let at = rng.below(seed.len() + 1);
    let byte = if rng.below(2) == 0 {
        INTERESTING_BYTES[rng.below(INTERESTING_BYTES.len())]
    } else {
        rng.next() as u8
    };
    let mut b = seed.to_vec();
    let what = match k % 5 {
        0 if at < b.len() => {
            b[at] = byte;
            format!("byte {at} set to {byte:#04x}")
        }
        1 => {
            b.insert(at, byte);
            format!("byte {byte:#04x} inserted at {at}")
        }
        2 if at < b.len() => {
            b.remove(at);
            format!("byte {at} deleted")
        }
        3 if !lines.is_empty() => {
            let (start, end) = lines[rng.below(lines.len())];
            let cut = start + rng.below(end - start);
            b.drain(cut..end.saturating_sub(1).max(cut));
            format!("line at byte {start} cut at byte {cut}")
        }
        _ => {
            b.splice(at..at, [0xff, 0xc3]);
            format!("invalid UTF-8 inserted at {at}")
        }
    };
    (format!("random edit {k}: {what}"), b)
}

/// Runs `f` on `input`; on panic, saves the input and returns a report.
fn check(target: &str, case: &str, input: &[u8], f: impl FnOnce(&[u8])) -> Option<String> {
    if catch_unwind(AssertUnwindSafe(|| f(input))).is_ok() {
        return None;
    }
    let dir = repo().join("target/parsers_fuzz_smoke");
    let _ = fs::create_dir_all(&dir);
    let file = dir.join(format!("{target}-{}", failures_key(case)));
    let _ = fs::write(&file, input);
    Some(format!(
        "{target}: panic on {case}; input saved to {} (add it under fuzz/regressions/{target}/)",
        file.display()
    ))
}

fn failures_key(case: &str) -> String {
    case.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// Files in `dir`, sorted, or none if it does not exist.
fn files_in(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| p.is_file())
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
}

/// Seeds to mutate: the target's fixture files from every tree, plus the
/// corpus seeds that are not fixture copies (e.g. /proc/self/stat samples).
fn seeds(name: &str, fixtures: &[String]) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for rel in fixtures {
        let path = repo().join("exporter/tests/fixtures").join(rel);
        if let Ok(bytes) = fs::read(&path) {
            out.push((rel.clone(), bytes));
        }
    }
    for path in files_in(&repo().join("fuzz/corpus").join(name)) {
        let file = path.file_name().unwrap_or_default().to_string_lossy();
        let fixture_copy = ["seed-proc-", "seed-large-", "seed-sys-", "seed-rootfs-"]
            .iter()
            .any(|p| file.starts_with(p));
        if file.starts_with("seed-") && !fixture_copy {
            out.push((
                format!("fuzz/corpus/{name}/{file}"),
                fs::read(&path).unwrap(),
            ));
        }
    }
    out
}

/// Every corpus and regression input for `name`, unmodified.
fn replays(name: &str) -> Vec<(String, Vec<u8>)> {
    ["fuzz/corpus", "fuzz/regressions"]
        .iter()
        .flat_map(|dir| files_in(&repo().join(dir).join(name)))
        .map(|p| (p.display().to_string(), fs::read(&p).unwrap()))
        .collect()
}

fn run_all(name: &str, fixtures: &[String], f: impl Fn(&[u8])) {
    let seeds = seeds(name, fixtures);
    assert!(!seeds.is_empty(), "{name}: no seed input found");
    let mut cases = 0;
    let mut failures = Vec::new();
    for (origin, seed) in &seeds {
        let mut rng = Rng::new(&format!("{name}/{origin}"));
        for (what, input) in mutations(seed, &mut rng) {
            cases += 1;
            failures.extend(check(name, &format!("{origin}, {what}"), &input, &f));
        }
    }
    for (origin, input) in replays(name) {
        cases += 1;
        failures.extend(check(name, &format!("replay of {origin}"), &input, &f));
    }
    assert!(
        failures.is_empty(),
        "{} of {cases} inputs panicked:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn text(target: &Target) {
    run_all(target.name, &target.seeds, |b| {
        targets::run_bytes(target, b)
    });
}

/// Every text target, split in two tests so they run on two threads.
fn half(which: usize) {
    let all = targets::text_targets();
    assert!(all.len() > 10, "the registry lost its parsers");
    for t in all.iter().skip(which).step_by(2) {
        text(t);
    }
}

#[test]
fn text_targets_even() {
    half(0);
}

#[test]
fn text_targets_odd() {
    half(1);
}

/// The harness itself: a panicking parser is caught and reported.
#[test]
fn a_panic_is_caught_and_reported() {
    let report = check("demo", "case", b"input", |_| panic!("expected by the test"));
    let report = report.expect("panic not reported");
    assert!(report.contains("demo: panic on case"), "{report}");
}

/// The BTF reader takes bytes, so its seeds are the BTF sections of the
/// probes' own objects (fuzz/corpus/btf) and no UTF-8 conversion happens.
#[test]
fn btf() {
    run_all("btf", &[], targets::btf);
}
