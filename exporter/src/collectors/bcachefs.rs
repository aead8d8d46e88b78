//! /sys/fs/bcachefs → `node_bcachefs_*`: node_exporter's bcachefs
//! collector (collector/bcachefs_linux.go, procfs bcachefs/get.go).
//!
//! Each mounted filesystem is a directory named by its UUID with:
//! `btree_cache_size` (`2.05G`), `compression_stats` (a table per
//! algorithm), `errors` (`name count [timestamp]` lines), `counters/` (one
//! file per event: `since mount:` and `since filesystem creation:`; the
//! latter is exported as `node_bcachefs_<name>_total`),
//! `btree_write_stats` (a table per write type) and one `dev-N` directory
//! per member device (`label`, `state`, `bucket_size`, `nbuckets`,
//! `durability`, `io_done` per operation and data type, and `io_errors`
//! since filesystem creation).
//!
//! Sizes use bcachefs' one-letter units (`k`, `M`, `G`, `T`, `P`, `E`,
//! powers of 1024), read as procfs reads them. A file that is absent
//! leaves its families out; one that does not parse fails the collector
//! naming the file and line; a filesystem unmounted while it is read
//! (ENODEV, or its directory gone) is left out. Without bcachefs a scrape
//! looks the directory up only after a uevent or a mount (absence.rs).

use std::io;
use std::path::{Path, PathBuf};

use crate::collectors::sysfs::{
    DeviceError, Families, io_error, read_attribute, read_parsed_if_present, sanitize_metric_name,
    settle,
};
use crate::collectors::{Parser, Settings, Source, Spec};
use crate::kernel::absence;
use crate::kernel::error::{CollectError, ParseError, excerpt};
use crate::kernel::parse::{lines, parse_fresh, u64_field};
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Encoder, MetricType};

pub const SPEC: Spec = Spec {
    name: "bcachefs",
    default_enabled: true,
    help: "bcachefs filesystems: btree, compression, errors, counters and member devices from /sys/fs/bcachefs",
    flags: &[],
    build,
    sources: &[
        Source::sys(
            "fs/bcachefs/7f1d5a4e-93c2-4f0b-b8a6-2c5e0d9b1a37/btree_cache_size",
            "bcachefs_size",
        ),
        Source::sys(
            "fs/bcachefs/7f1d5a4e-93c2-4f0b-b8a6-2c5e0d9b1a37/compression_stats",
            "bcachefs_compression_stats",
        ),
        Source::sys(
            "fs/bcachefs/7f1d5a4e-93c2-4f0b-b8a6-2c5e0d9b1a37/errors",
            "bcachefs_errors",
        ),
        Source::sys(
            "fs/bcachefs/7f1d5a4e-93c2-4f0b-b8a6-2c5e0d9b1a37/counters/bucket_alloc",
            "bcachefs_counter",
        ),
        Source::sys(
            "fs/bcachefs/7f1d5a4e-93c2-4f0b-b8a6-2c5e0d9b1a37/btree_write_stats",
            "bcachefs_btree_write_stats",
        ),
        Source::sys(
            "fs/bcachefs/7f1d5a4e-93c2-4f0b-b8a6-2c5e0d9b1a37/dev-0/nbuckets",
            "bcachefs_uint",
        ),
        Source::sys(
            "fs/bcachefs/7f1d5a4e-93c2-4f0b-b8a6-2c5e0d9b1a37/dev-0/io_done",
            "bcachefs_io_done",
        ),
        Source::sys(
            "fs/bcachefs/7f1d5a4e-93c2-4f0b-b8a6-2c5e0d9b1a37/dev-0/io_errors",
            "bcachefs_io_errors",
        ),
    ],
    parsers: &[
        Parser::numeric("bcachefs_size", |t| {
            parse_fresh(t, parse_size_into).map(drop)
        }),
        Parser::numeric("bcachefs_compression_stats", |t| {
            parse_compression_stats(t).map(drop)
        }),
        Parser::numeric("bcachefs_errors", |t| parse_errors(t).map(drop)),
        Parser::numeric("bcachefs_counter", |t| {
            parse_fresh(t, parse_counter_into).map(drop)
        }),
        Parser::numeric("bcachefs_btree_write_stats", |t| {
            parse_btree_write_stats(t).map(drop)
        }),
        Parser::numeric("bcachefs_uint", |t| {
            parse_fresh(t, parse_uint_into).map(drop)
        }),
        Parser::numeric("bcachefs_io_done", |t| parse_io_done(t).map(drop)),
        Parser::numeric("bcachefs_io_errors", |t| parse_io_errors(t).map(drop)),
    ],
};

/// procfs' `parseHumanReadableBytes`: a number with an optional unit
/// `k`, `M`, `G`, `T`, `P` or `E` (either case, powers of 1024).
fn human(tok: &str, line: usize) -> Result<u64, ParseError> {
    let tok = tok.trim();
    let bad = |why: &str| ParseError::new(line, format!("invalid size {}: {why}", excerpt(tok)));
    let (number, power) = match tok.as_bytes().last() {
        None => return Err(bad("empty")),
        Some(b'k' | b'K') => (&tok[..tok.len() - 1], 1),
        Some(b'm' | b'M') => (&tok[..tok.len() - 1], 2),
        Some(b'g' | b'G') => (&tok[..tok.len() - 1], 3),
        Some(b't' | b'T') => (&tok[..tok.len() - 1], 4),
        Some(b'p' | b'P') => (&tok[..tok.len() - 1], 5),
        Some(b'e' | b'E') => (&tok[..tok.len() - 1], 6),
        Some(_) => (tok, 0),
    };
    let v: f64 = number.trim().parse().map_err(|_| bad("not a number"))?;
    if !v.is_finite() || v < 0.0 {
        return Err(bad("not a non-negative number"));
    }
    let bytes = v * 1024f64.powi(power);
    if bytes >= u64::MAX as f64 {
        return Err(bad("out of range"));
    }
    Ok(bytes as u64)
}

/// A decimal unsigned integer (Go's `ParseUint(s, 10, 64)`).
fn uint(tok: &str, line: usize, what: &str) -> Result<u64, ParseError> {
    u64_field(tok.trim(), line, what)
}

/// A one-value size file (`btree_cache_size`, `bucket_size`).
pub fn parse_size_into(text: &str, out: &mut u64) -> Result<(), ParseError> {
    *out = human(text, 1)?;
    Ok(())
}

/// A one-value integer file (`nbuckets`, `durability`).
pub fn parse_uint_into(text: &str, out: &mut u64) -> Result<(), ParseError> {
    *out = uint(text, 1, "value")?;
    Ok(())
}

/// `compression_stats`: a header line, then `algorithm compressed
/// uncompressed [average extent size]`; lines of fewer than three fields
/// are skipped. Returns (algorithm, compressed, uncompressed).
pub fn parse_compression_stats(text: &str) -> Result<Vec<(String, u64, u64)>, ParseError> {
    let mut out = Vec::new();
    for (i, line) in lines(text).enumerate().skip(1) {
        let n = i + 1;
        let f: Vec<&str> = line.split_ascii_whitespace().collect();
        if f.len() < 3 {
            continue;
        }
        let compressed = human(f[1], n)?;
        let uncompressed = human(f[2], n)?;
        if let Some(avg) = f.get(3) {
            human(avg, n)?;
        }
        out.push((
            f[0].trim_end_matches(':').to_string(),
            compressed,
            uncompressed,
        ));
    }
    Ok(out)
}

/// `errors`: `name count [timestamp]` lines; shorter lines are skipped.
/// Returns (name, count).
pub fn parse_errors(text: &str) -> Result<Vec<(String, u64)>, ParseError> {
    let mut out = Vec::new();
    for (i, line) in lines(text).enumerate() {
        let n = i + 1;
        let f: Vec<&str> = line.split_ascii_whitespace().collect();
        if f.len() < 2 {
            continue;
        }
        let count = uint(f[1], n, "error count")?;
        if let Some(ts) = f.get(2) {
            uint(ts, n, "error timestamp")?;
        }
        out.push((f[0].to_string(), count));
    }
    Ok(out)
}

/// A `counters/` file; `out` is the count since filesystem creation. It
/// must have a `since mount:` or a `since filesystem creation:` line.
pub fn parse_counter_into(text: &str, out: &mut u64) -> Result<(), ParseError> {
    *out = 0;
    let mut seen = false;
    for (i, line) in lines(text).enumerate() {
        if let Some(v) = line.strip_prefix("since mount:") {
            human(v, i + 1)?;
            seen = true;
        } else if let Some(v) = line.strip_prefix("since filesystem creation:") {
            *out = human(v, i + 1)?;
            seen = true;
        }
    }
    if !seen {
        return Err(ParseError::new(1, "counter file format not recognized"));
    }
    Ok(())
}

/// `btree_write_stats`: a header line, then `type: nr size`. Returns
/// (type, count, average size).
pub fn parse_btree_write_stats(text: &str) -> Result<Vec<(String, u64, u64)>, ParseError> {
    let mut out = Vec::new();
    for (i, line) in lines(text).enumerate().skip(1) {
        let n = i + 1;
        let f: Vec<&str> = line.split_ascii_whitespace().collect();
        if f.len() < 3 {
            continue;
        }
        let count = uint(f[1], n, "write count")?;
        let size = human(f[2], n)?;
        out.push((f[0].trim_end_matches(':').to_string(), count, size));
    }
    Ok(out)
}

/// `io_done`: `read:` and `write:` sections of `data_type : bytes`.
/// Returns (operation, data type, bytes).
pub fn parse_io_done(text: &str) -> Result<Vec<(String, String, u64)>, ParseError> {
    let mut out = Vec::new();
    let mut op = "";
    for (i, line) in lines(text).enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if line == "read:" || line == "write:" {
            op = line.trim_end_matches(':');
            continue;
        }
        // Stricter than procfs, which skips such lines: the kernel writes
        // only the two headers and `type : bytes` lines under them.
        let (Some((kind, value)), false) = (line.split_once(':'), op.is_empty()) else {
            return Err(ParseError::new(
                i + 1,
                format!(
                    "expected 'read:', 'write:' or 'type : bytes' under one, got {}",
                    excerpt(line)
                ),
            ));
        };
        let v = uint(value, i + 1, "bytes")?;
        out.push((op.to_string(), kind.trim().to_string(), v));
    }
    Ok(out)
}

/// `io_errors`: the `IO errors since filesystem creation` section's
/// `type: count` lines (the section since the last reset is not used).
pub fn parse_io_errors(text: &str) -> Result<Vec<(String, u64)>, ParseError> {
    let mut out = Vec::new();
    let mut in_creation = false;
    for (i, line) in lines(text).enumerate() {
        if line.starts_with("IO errors since filesystem creation") {
            in_creation = true;
            continue;
        }
        if line.starts_with("IO errors since ") {
            break;
        }
        if !in_creation || line.trim().is_empty() {
            continue;
        }
        let Some((kind, value)) = line.trim().split_once(':') else {
            return Err(ParseError::new(
                i + 1,
                format!("expected 'type: count', got {}", excerpt(line)),
            ));
        };
        out.push((kind.trim().to_string(), uint(value, i + 1, "error count")?));
    }
    // Stricter than procfs, which reads a file without the section as no
    // errors: the kernel always writes it.
    if !in_creation {
        return Err(ParseError::new(
            1,
            "no 'IO errors since filesystem creation' section",
        ));
    }
    Ok(out)
}

/// Parses an optional file, naming it in an error; absent is the default.
fn parsed<T: Default>(
    path: &Path,
    parse: impl Fn(&str) -> Result<T, ParseError>,
) -> Result<T, DeviceError> {
    let fresh = read_parsed_if_present(path, |t, out: &mut T| {
        *out = parse(t)?;
        Ok(())
    })?;
    Ok(fresh.unwrap_or_default())
}

/// The names of the entries of `dir` that are directories (not links),
/// or files, sorted; none if `dir` is absent.
fn entries(dir: &Path, dirs: bool) -> Result<Vec<String>, DeviceError> {
    let it = match std::fs::read_dir(dir) {
        Ok(it) => it,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_error(dir, e)),
    };
    let mut out = Vec::new();
    for e in it {
        let e = e.map_err(|e| io_error(dir, e))?;
        if e.file_type().is_ok_and(|t| t.is_dir() == dirs) {
            out.push(e.file_name().to_string_lossy().into_owned());
        }
    }
    out.sort();
    Ok(out)
}

pub struct BcachefsCollector {
    root: PathBuf,
    /// That `root` was absent (no bcachefs), until something may have added it.
    presence: absence::Memo,
    families: Families,
}

pub fn build(s: &Settings) -> Box<dyn Collector> {
    Box::new(BcachefsCollector {
        root: s.sysfs.join("fs/bcachefs"),
        presence: absence::Memo::default(),
        families: Families::default(),
    })
}

impl BcachefsCollector {
    fn push(
        &mut self,
        family: &str,
        help: &str,
        kind: MetricType,
        labels: &[(&'static str, &str)],
        v: f64,
    ) {
        self.families
            .push(format!("node_bcachefs_{family}"), help, kind, labels, v);
    }

    fn read_fs(&mut self, uuid: &str) -> Result<(), CollectError> {
        let dir = self.root.join(uuid);
        let mark = self.families.len();
        let read = self.read_fs_in(&dir, uuid);
        settle(&mut self.families, mark, &dir, read)
    }

    fn read_fs_in(&mut self, dir: &Path, uuid: &str) -> Result<(), DeviceError> {
        use MetricType::{Counter, Gauge};
        let id = [("uuid", uuid)];
        self.push("info", "Filesystem information.", Gauge, &id, 1.0);
        let cache = parsed(&dir.join("btree_cache_size"), |t| {
            parse_fresh(t, parse_size_into)
        })?;
        self.push(
            "btree_cache_size_bytes",
            "Btree cache memory usage in bytes.",
            Gauge,
            &id,
            cache as f64,
        );

        for (alg, compressed, uncompressed) in
            parsed(&dir.join("compression_stats"), parse_compression_stats)?
        {
            let l = [("uuid", uuid), ("algorithm", alg.as_str())];
            self.push(
                "compression_compressed_bytes",
                "Compressed size by algorithm.",
                Gauge,
                &l,
                compressed as f64,
            );
            self.push(
                "compression_uncompressed_bytes",
                "Uncompressed size by algorithm.",
                Gauge,
                &l,
                uncompressed as f64,
            );
        }
        for (kind, count) in parsed(&dir.join("errors"), parse_errors)? {
            let l = [("uuid", uuid), ("error_type", kind.as_str())];
            self.push(
                "errors_total",
                "Error count by error type.",
                Counter,
                &l,
                count as f64,
            );
        }
        let counters = dir.join("counters");
        for name in entries(&counters, false)? {
            let path = counters.join(&name);
            let v = parsed(&path, |t| parse_fresh(t, parse_counter_into))?;
            let help = format!("Bcachefs counter {name} since filesystem creation.");
            self.push(
                &format!("{}_total", sanitize_metric_name(&name)),
                &help,
                Counter,
                &id,
                v as f64,
            );
        }
        for (kind, count, size) in parsed(&dir.join("btree_write_stats"), parse_btree_write_stats)?
        {
            let l = [("uuid", uuid), ("type", kind.as_str())];
            self.push(
                "btree_writes_total",
                "Number of btree writes by type.",
                Counter,
                &l,
                count as f64,
            );
            self.push(
                "btree_write_average_size_bytes",
                "Average btree write size by type.",
                Gauge,
                &l,
                size as f64,
            );
        }
        for entry in entries(dir, true)? {
            let Some(device) = entry.strip_prefix("dev-") else {
                continue;
            };
            self.read_device(uuid, device, &dir.join(&entry))?;
        }
        Ok(())
    }

    fn read_device(&mut self, uuid: &str, device: &str, dir: &Path) -> Result<(), DeviceError> {
        use MetricType::{Counter, Gauge};
        // label and state: any read error is an empty label, as in procfs.
        let text = |f: &str| {
            read_attribute(&dir.join(f))
                .map(|t| t.trim().to_string())
                .unwrap_or_default()
        };
        let (label, state) = (text("label"), text("state"));
        let bucket_size = match text("bucket_size") {
            s if s.is_empty() => 0,
            s => human(&s, 1).map_err(|e| CollectError::from_parse(&dir.join("bucket_size"), e))?,
        };
        let buckets = parsed(&dir.join("nbuckets"), |t| parse_fresh(t, parse_uint_into))?;
        let durability = parsed(&dir.join("durability"), |t| parse_fresh(t, parse_uint_into))?;
        let io_done = parsed(&dir.join("io_done"), parse_io_done)?;
        let io_errors = parsed(&dir.join("io_errors"), parse_io_errors)?;

        let info = [
            ("uuid", uuid),
            ("device", device),
            ("label", label.as_str()),
            ("state", state.as_str()),
        ];
        self.push("device_info", "Device information.", Gauge, &info, 1.0);
        let l = [("uuid", uuid), ("device", device)];
        self.push(
            "device_bucket_size_bytes",
            "Bucket size in bytes.",
            Gauge,
            &l,
            bucket_size as f64,
        );
        self.push(
            "device_buckets",
            "Total number of buckets.",
            Gauge,
            &l,
            buckets as f64,
        );
        self.push(
            "device_durability",
            "Device durability setting.",
            Gauge,
            &l,
            durability as f64,
        );
        for (op, kind, bytes) in &io_done {
            let l = [
                ("uuid", uuid),
                ("device", device),
                ("operation", op.as_str()),
                ("data_type", kind.as_str()),
            ];
            self.push(
                "device_io_done_bytes_total",
                "IO bytes by operation type and data type.",
                Counter,
                &l,
                *bytes as f64,
            );
        }
        for (kind, count) in &io_errors {
            let l = [("uuid", uuid), ("device", device), ("type", kind.as_str())];
            self.push(
                "device_io_errors_total",
                "IO errors by error type.",
                Counter,
                &l,
                *count as f64,
            );
        }
        Ok(())
    }
}

impl Collector for BcachefsCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        self.families.clear();
        if matches!(self.presence.exists(&self.root), Ok(false)) {
            return Ok(());
        }
        let read = entries(&self.root, true)
            .map_err(CollectError::from)
            .and_then(|names| names.iter().try_for_each(|n| self.read_fs(n)));
        self.families.write_or_discard(enc, read)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collectors::test_support::{fixture, render};

    #[test]
    fn sizes() {
        let h = |t| human(t, 1).unwrap();
        assert_eq!(h("720"), 720);
        assert_eq!(h("512k"), 524_288);
        assert_eq!(h("28.2k"), 28_876);
        assert_eq!(h("2.05G"), 2_201_170_739);
        assert_eq!(h("10.8T"), 11_874_725_579_980);
        for bad in [
            "",
            "k",
            "x",
            "-1",
            "1.2.3G",
            "NaN",
            "99999999999999999999",
            "16E",
        ] {
            assert!(human(bad, 1).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn tables() {
        let c = parse_compression_stats(
            "typetype          compressed    uncompressed     average extent size\nlz4                    48.9G           71.2G                   62.5k\nzstd 226G 603G\nshort 1\n",
        )
        .unwrap();
        assert_eq!(c.len(), 2);
        assert_eq!(c[1], ("zstd".to_string(), 242_665_652_224, 647_466_319_872));
        assert_eq!(parse_compression_stats("h\nlz4 x 1\n").unwrap_err().line, 2);

        let w = parse_btree_write_stats("   nr size\ninitial:  3298401   100k\n").unwrap();
        assert_eq!(w, vec![("initial".to_string(), 3_298_401, 102_400)]);

        let e = parse_errors("btree_node_read_err 3 1700000000\nsb_fields_bad 1\n").unwrap();
        assert_eq!(
            e,
            vec![
                ("btree_node_read_err".into(), 3),
                ("sb_fields_bad".into(), 1)
            ]
        );
        assert_eq!(parse_errors("a b\n").unwrap_err().line, 1);

        assert_eq!(
            parse_fresh(
                "since mount:   21\nsince filesystem creation:     30277\n",
                parse_counter_into
            )
            .unwrap(),
            30_277
        );
        assert!(parse_fresh("garbage\n", parse_counter_into).is_err());

        let d = parse_io_done("read:\nsb          :       86016\nuser        :102313054208\nwrite:\nbtree       :       16384\n").unwrap();
        assert_eq!(d[1], ("read".into(), "user".into(), 102_313_054_208));
        assert_eq!(d[2], ("write".into(), "btree".into(), 16_384));
        assert_eq!(parse_io_done("read:\nsb : lots\n").unwrap_err().line, 2);

        let e = parse_io_errors("IO errors since filesystem creation\n  read:    2\n  checksum:0\nIO errors since 8 y ago\n  read:    9\n").unwrap();
        assert_eq!(e, vec![("read".into(), 2), ("checksum".into(), 0)]);
        assert_eq!(parse_io_errors("garbage\n").unwrap_err().line, 1);
        assert_eq!(
            parse_io_errors("IO errors since filesystem creation\n  read 2\n")
                .unwrap_err()
                .line,
            2
        );
        assert_eq!(parse_io_done("garbage\nread:\n").unwrap_err().line, 1);
    }

    #[test]
    fn collector_on_fixture() {
        let s = Settings::with_roots("/nonexistent", fixture("sys"));
        let out = render(build(&s).as_mut()).unwrap();
        let u = "7f1d5a4e-93c2-4f0b-b8a6-2c5e0d9b1a37";
        for l in [
            format!("node_bcachefs_info{{uuid=\"{u}\"}} 1\n"),
            format!("node_bcachefs_bucket_alloc_total{{uuid=\"{u}\"}} 2861374\n"),
            format!(
                "node_bcachefs_device_info{{device=\"1\",label=\"hdd.hdd1\",state=\"ro [evacuating] spare\",uuid=\"{u}\"}} 1\n"
            ),
            format!(
                "node_bcachefs_device_io_errors_total{{device=\"1\",type=\"checksum\",uuid=\"{u}\"}} 7\n"
            ),
            format!(
                "node_bcachefs_errors_total{{error_type=\"ptr_to_missing_backpointer\",uuid=\"{u}\"}} 4\n"
            ),
        ] {
            assert!(out.contains(&l), "missing {l:?} in\n{out}");
        }
    }

    #[test]
    fn no_bcachefs_writes_nothing() {
        let s = Settings::with_roots("/nonexistent", "/nonexistent-usescope");
        assert_eq!(render(build(&s).as_mut()).unwrap(), "");
    }

    #[test]
    fn a_bad_table_names_its_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let fs = dir.path().join("fs/bcachefs/u-1");
        std::fs::create_dir_all(&fs).unwrap();
        std::fs::write(
            fs.join("btree_write_stats"),
            "nr size\ninitial: many 100k\n",
        )
        .unwrap();
        let s = Settings::with_roots("/nonexistent", dir.path());
        let e = render(build(&s).as_mut()).unwrap_err();
        assert!(e.file.ends_with("u-1/btree_write_stats"), "{e}");
        assert_eq!(e.line, Some(2));
    }
}
