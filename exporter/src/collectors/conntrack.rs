//! Connection tracking: table use from the `nf_conntrack_count` and
//! `nf_conntrack_max` sysctls, and the per-CPU event counters of
//! /proc/net/stat/nf_conntrack summed over CPUs.
//!
//! This feeds the page-worthy ConntrackTableFull alert: when count reaches
//! max the kernel logs "nf_conntrack: table full, dropping packet" and new
//! flows are dropped (`drop`, `early_drop`, `insert_failed` rise).
//!
//! Without the nf_conntrack module none of these files exist: nothing is
//! emitted and the collector still succeeds. Each file is handled on its
//! own, so a kernel that has the sysctls but not the stat file (or the
//! reverse) exports what it has.
//!
//! The stat file is read by its header, not by column position: kernels
//! renamed and repurposed columns (`searched` became `clashres`,
//! `delete_list` became `chainlength`) and very old ones lack
//! `search_restart`. A column missing from the header is simply not
//! exported. node_exporter exports these sums as gauges; so does usescope.

use crate::collectors::{Parser, Settings, Source, Spec};
use crate::kernel::error::{CollectError, ParseError};
use crate::kernel::parse::{fields, hex_u64_field, is_blank, lines, parse_fresh, u64_sysctl_into};
use crate::kernel::source::SourceFile;
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Desc, Encoder};

const COUNT: &str = "sys/net/netfilter/nf_conntrack_count";
const MAX: &str = "sys/net/netfilter/nf_conntrack_max";
const STAT: &str = "net/stat/nf_conntrack";

pub const SPEC: Spec = Spec {
    name: "conntrack",
    default_enabled: true,
    help: "Connection tracking table use and statistics",
    flags: &[],
    build,
    sources: &[
        Source::proc(COUNT, "conntrack_sysctl"),
        Source::proc(MAX, "conntrack_sysctl"),
        Source::proc(STAT, "conntrack_stat"),
    ],
    parsers: &[
        Parser::numeric("conntrack_sysctl", |t| {
            parse_fresh(t, u64_sysctl_into).map(drop)
        }),
        Parser::numeric("conntrack_stat", |t| {
            parse_fresh(t, parse_stat_into).map(drop)
        }),
    ],
};

const ENTRIES: Desc = Desc::gauge(
    "node_nf_conntrack_entries",
    "Number of currently allocated flow entries for connection tracking.",
);
const LIMIT: Desc = Desc::gauge(
    "node_nf_conntrack_entries_limit",
    "Maximum size of connection tracking table.",
);

/// The stat columns node_exporter exports: header name and description.
const STATS: [(&str, Desc); 8] = [
    (
        "found",
        Desc::gauge(
            "node_nf_conntrack_stat_found",
            "Number of searched entries which were successful.",
        ),
    ),
    (
        "invalid",
        Desc::gauge(
            "node_nf_conntrack_stat_invalid",
            "Number of packets seen which can not be tracked.",
        ),
    ),
    (
        "ignore",
        Desc::gauge(
            "node_nf_conntrack_stat_ignore",
            "Number of packets seen which are already connected to a conntrack entry.",
        ),
    ),
    (
        "insert",
        Desc::gauge(
            "node_nf_conntrack_stat_insert",
            "Number of entries inserted into the list.",
        ),
    ),
    (
        "insert_failed",
        Desc::gauge(
            "node_nf_conntrack_stat_insert_failed",
            "Number of entries for which list insertion was attempted but failed.",
        ),
    ),
    (
        "drop",
        Desc::gauge(
            "node_nf_conntrack_stat_drop",
            "Number of packets dropped due to conntrack failure.",
        ),
    ),
    (
        "early_drop",
        Desc::gauge(
            "node_nf_conntrack_stat_early_drop",
            "Number of dropped conntrack entries to make room for new ones, if maximum table size was reached.",
        ),
    ),
    (
        "search_restart",
        Desc::gauge(
            "node_nf_conntrack_stat_search_restart",
            "Number of conntrack table lookups which had to be restarted due to hashtable resizes.",
        ),
    ),
];

/// The [`STATS`] columns summed over all CPU rows, in [`STATS`] order;
/// `None` where this kernel's header has no such column.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct StatSums(pub [Option<u64>; STATS.len()]);

/// Parses /proc/net/stat/nf_conntrack: a header naming the columns, then
/// one row of hexadecimal counters per CPU. Every row must have exactly
/// as many columns as the header, or the columns could not be attributed.
pub fn parse_stat_into(s: &str, out: &mut StatSums) -> Result<(), ParseError> {
    let mut lines = lines(s);
    let header = lines
        .next()
        .ok_or_else(|| ParseError::new(1, "empty file"))?;
    let (columns, width) = header_columns(header)?;
    let mut sums = columns.map(|c| c.map(|_| 0u64));
    let mut rows = 0usize;
    for (i, line) in lines.enumerate() {
        let lineno = i + 2;
        if is_blank(line) {
            continue;
        }
        add_row(line, lineno, &columns, width, &mut sums)?;
        rows += 1;
    }
    if rows == 0 {
        return Err(ParseError::new(1, "header without any per-CPU rows"));
    }
    *out = StatSums(sums);
    Ok(())
}

/// Finds the column index of each [`STATS`] name; returns them with the
/// header's column count. Header tokens are lower-case identifiers, which
/// also rejects a file whose header line was lost (a data row in its place).
fn header_columns(header: &str) -> Result<([Option<usize>; STATS.len()], usize), ParseError> {
    let mut columns = [None; STATS.len()];
    let mut width = 0;
    for (i, name) in fields(header).enumerate() {
        if !name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') {
            return Err(ParseError::new(
                1,
                format!("header column {name:?} is not a column name"),
            ));
        }
        if let Some(k) = STATS.iter().position(|(n, _)| *n == name) {
            columns[k].get_or_insert(i);
        }
        width = i + 1;
    }
    if width == 0 {
        return Err(ParseError::new(1, "empty header line"));
    }
    Ok((columns, width))
}

fn add_row(
    line: &str,
    lineno: usize,
    columns: &[Option<usize>; STATS.len()],
    width: usize,
    sums: &mut [Option<u64>; STATS.len()],
) -> Result<(), ParseError> {
    let mut n = 0;
    for (i, tok) in fields(line).enumerate() {
        if i >= width {
            return Err(width_mismatch(line, lineno, width));
        }
        let v = hex_u64_field(tok, lineno, "counter")?;
        for (k, col) in columns.iter().enumerate() {
            if *col == Some(i)
                && let Some(sum) = sums[k].as_mut()
            {
                *sum = sum.checked_add(v).ok_or_else(|| {
                    ParseError::new(lineno, format!("sum of {} overflows u64", STATS[k].0))
                })?;
            }
        }
        n = i + 1;
    }
    if n != width {
        return Err(width_mismatch(line, lineno, width));
    }
    Ok(())
}

fn width_mismatch(line: &str, lineno: usize, width: usize) -> ParseError {
    ParseError::new(
        lineno,
        format!(
            "row has {} columns but the header names {width}",
            fields(line).count()
        ),
    )
}

pub struct ConntrackCollector {
    count: SourceFile,
    max: SourceFile,
    stat: SourceFile,
    sums: StatSums,
}

pub fn build(s: &Settings) -> Box<dyn Collector> {
    Box::new(ConntrackCollector {
        count: SourceFile::small(&s.procfs, COUNT),
        max: SourceFile::small(&s.procfs, MAX),
        stat: SourceFile::new(&s.procfs, STAT),
        sums: StatSums::default(),
    })
}

impl Collector for ConntrackCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        for (file, desc) in [(&mut self.count, &ENTRIES), (&mut self.max, &LIMIT)] {
            let mut v = 0;
            if file.parse_with(|t| u64_sysctl_into(t, &mut v))?.is_some() {
                enc.family(desc);
                enc.sample(desc, &[], v);
            }
        }
        let sums = &mut self.sums;
        if self
            .stat
            .parse_with(|t| parse_stat_into(t, sums))?
            .is_some()
        {
            for ((_, desc), sum) in STATS.iter().zip(self.sums.0) {
                if let Some(v) = sum {
                    enc.family(desc);
                    enc.sample(desc, &[], v);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collectors::test_support::render;
    use std::path::Path;

    const FIXTURE: &str = include_str!("../../tests/fixtures/proc/net/stat/nf_conntrack");

    fn parse_sysctl(s: &str) -> Result<u64, ParseError> {
        parse_fresh(s, u64_sysctl_into)
    }

    fn parse_stat(s: &str) -> Result<StatSums, ParseError> {
        parse_fresh(s, parse_stat_into)
    }
    const HEADER: &str = "entries  clashres found new invalid ignore delete chainlength insert insert_failed drop early_drop icmp_error  expect_new expect_create expect_delete search_restart";

    fn fixture_settings() -> Settings {
        Settings::with_roots(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/proc"),
            "/nonexistent",
        )
    }

    /// A scratch procfs tree removed on drop.
    struct TempTree(tempfile::TempDir);

    impl TempTree {
        fn new() -> TempTree {
            let dir = tempfile::tempdir().unwrap();
            std::fs::create_dir_all(dir.path().join("sys/net/netfilter")).unwrap();
            std::fs::create_dir_all(dir.path().join("net/stat")).unwrap();
            TempTree(dir)
        }
        fn write(&self, rel: &str, content: &str) {
            std::fs::write(self.0.path().join(rel), content).unwrap();
        }
        fn collector(&self) -> Box<dyn Collector> {
            build(&Settings::with_roots(self.0.path(), "/nonexistent"))
        }
    }

    #[test]
    fn sysctl() {
        assert_eq!(parse_sysctl("262144\n").unwrap(), 262144);
        assert_eq!(parse_sysctl("0").unwrap(), 0);
        assert!(parse_sysctl("").unwrap_err().msg.contains("missing"));
        assert!(parse_sysctl("12 7\n").unwrap_err().msg.contains("extra"));
        assert!(parse_sysctl("-1\n").is_err());
        assert!(parse_sysctl("garbage\n").is_err());
        assert!(parse_sysctl("18446744073709551616\n").is_err());
        assert_eq!(parse_sysctl("18446744073709551615\n").unwrap(), u64::MAX);
    }

    #[test]
    fn stat_fixture() {
        assert_eq!(parse_stat(FIXTURE).unwrap(), StatSums([Some(0); 8]));
    }

    #[test]
    fn stat_sums_named_columns_over_cpus() {
        // found=2, invalid=4, ignore=5, insert=8, insert_failed=9, drop=10,
        // early_drop=11, search_restart=16 in this header.
        let row0 = "00000001 00000000 00000010 00000000 00000001 00000002 00000000 00000000 00000003 00000004 00000005 00000006 00000000 00000000 00000000 00000000 00000007";
        let row1 = "00000001 00000000 000000f0 00000000 00000001 00000002 00000000 00000000 00000003 00000004 0000000a 00000006 00000000 00000000 00000000 00000000 00000007";
        let s = format!("{HEADER}\n{row0}\n{row1}\n");
        assert_eq!(
            parse_stat(&s).unwrap(),
            StatSums([
                Some(0x100),
                Some(2),
                Some(4),
                Some(6),
                Some(8),
                Some(15),
                Some(12),
                Some(14)
            ])
        );
    }

    #[test]
    fn stat_follows_the_header_not_positions() {
        // An old kernel: `searched` and `delete_list`, no `search_restart`,
        // and a reordered layout to prove columns are found by name.
        let s = "drop entries found searched\n0000000a 00000001 00000002 00000003\n00000001 00000001 00000002 00000003\n";
        let mut want = [None; 8];
        want[0] = Some(4); // found
        want[5] = Some(11); // drop
        assert_eq!(parse_stat(s).unwrap(), StatSums(want));
    }

    #[test]
    fn stat_row_width_must_match_header() {
        let full = "00000000 ".repeat(17);
        let short = "00000000 ".repeat(16);
        let long = "00000000 ".repeat(18);
        let e = parse_stat(&format!("{HEADER}\n{full}\n{short}\n")).unwrap_err();
        assert_eq!(e.line, 3);
        assert!(e.msg.contains("16 columns"), "{}", e.msg);
        assert!(e.msg.contains("17"), "{}", e.msg);
        let e = parse_stat(&format!("{HEADER}\n{long}\n")).unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.msg.contains("18 columns"), "{}", e.msg);
        // A header that lost a column against full-width rows.
        let e = parse_stat(&format!("entries found\n{full}\n")).unwrap_err();
        assert_eq!(e.line, 2);
    }

    #[test]
    fn stat_malformed() {
        assert_eq!(parse_stat("").unwrap_err().line, 1);
        assert!(parse_stat(HEADER).unwrap_err().msg.contains("rows"));
        assert!(parse_stat(&format!("{HEADER}\n\n")).is_err());
        // The header is gone: a data row cannot name columns.
        let row = "00000000 ".repeat(17);
        assert!(parse_stat(&format!("{row}\n{row}\n")).is_err());
        assert!(parse_stat("\u{1}garbage here\n%%% not a kernel file %%%\n:::\n").is_err());
        let bad = format!("{HEADER}\n{}zzzzzzzz\n", "00000000 ".repeat(16));
        let e = parse_stat(&bad).unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.msg.contains("zzzzzzzz"));
        // Truncated mid-row.
        let cut = format!("{HEADER}\n{}", "00000000 ".repeat(9));
        assert_eq!(parse_stat(&cut).unwrap_err().line, 2);
    }

    #[test]
    fn stat_overflow() {
        let big = format!("{HEADER}\n{}10000000000000000\n", "00000000 ".repeat(16));
        assert!(parse_stat(&big).unwrap_err().msg.contains("hex"));
        let max = "found\nffffffffffffffff\nffffffffffffffff\n";
        assert!(parse_stat(max).unwrap_err().msg.contains("overflows"));
    }

    #[test]
    fn collector_on_fixture() {
        let out = render(build(&fixture_settings()).as_mut()).unwrap();
        let samples: Vec<&str> = out.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            samples,
            [
                "node_nf_conntrack_entries 0",
                "node_nf_conntrack_entries_limit 262144",
                "node_nf_conntrack_stat_found 0",
                "node_nf_conntrack_stat_invalid 0",
                "node_nf_conntrack_stat_ignore 0",
                "node_nf_conntrack_stat_insert 0",
                "node_nf_conntrack_stat_insert_failed 0",
                "node_nf_conntrack_stat_drop 0",
                "node_nf_conntrack_stat_early_drop 0",
                "node_nf_conntrack_stat_search_restart 0",
            ]
        );
        assert!(out.contains(
            "# HELP node_nf_conntrack_entries_limit Maximum size of connection tracking table.\n# TYPE node_nf_conntrack_entries_limit gauge\n"
        ));
        assert!(out.contains("# TYPE node_nf_conntrack_stat_drop gauge\n"));
    }

    #[test]
    fn collector_on_a_nearly_full_table_with_drops() {
        let t = TempTree::new();
        t.write("sys/net/netfilter/nf_conntrack_count", "95\n");
        t.write("sys/net/netfilter/nf_conntrack_max", "100\n");
        // Two CPUs; drop 0x10+0x20, early_drop 3+4, insert_failed 1+0.
        let cpu0 = "0000005f 00000000 00000100 00000030 00000002 00000000 00000010 00000000 00000030 00000001 00000010 00000003 00000000 00000000 00000000 00000000 00000000";
        let cpu1 = "0000005f 00000000 00000200 00000040 00000001 00000000 00000020 00000000 00000040 00000000 00000020 00000004 00000000 00000000 00000000 00000000 00000002";
        t.write(
            "net/stat/nf_conntrack",
            &format!("{HEADER}\n{cpu0}\n{cpu1}\n"),
        );
        let out = render(t.collector().as_mut()).unwrap();
        let samples: Vec<&str> = out.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            samples,
            [
                "node_nf_conntrack_entries 95",
                "node_nf_conntrack_entries_limit 100",
                "node_nf_conntrack_stat_found 768",
                "node_nf_conntrack_stat_invalid 3",
                "node_nf_conntrack_stat_ignore 0",
                "node_nf_conntrack_stat_insert 112",
                "node_nf_conntrack_stat_insert_failed 1",
                "node_nf_conntrack_stat_drop 48",
                "node_nf_conntrack_stat_early_drop 7",
                "node_nf_conntrack_stat_search_restart 2",
            ]
        );
    }

    #[test]
    fn module_not_loaded_emits_nothing() {
        let t = TempTree::new();
        let mut c = t.collector();
        assert_eq!(render(c.as_mut()).unwrap(), "");
        // The module loads: the sysctls appear before the stat file does.
        t.write("sys/net/netfilter/nf_conntrack_count", "1\n");
        t.write("sys/net/netfilter/nf_conntrack_max", "100\n");
        let out = render(c.as_mut()).unwrap();
        assert!(out.contains("node_nf_conntrack_entries 1\n"));
        assert!(!out.contains("node_nf_conntrack_stat_"));
    }

    #[test]
    fn mismatched_stat_row_fails_naming_file_and_line() {
        let t = TempTree::new();
        t.write("sys/net/netfilter/nf_conntrack_count", "95\n");
        t.write("sys/net/netfilter/nf_conntrack_max", "100\n");
        let row = "00000000 ".repeat(17);
        let short = "00000000 ".repeat(15);
        t.write(
            "net/stat/nf_conntrack",
            &format!("{HEADER}\n{row}\n{short}\n"),
        );
        let e = render(t.collector().as_mut()).unwrap_err();
        assert!(e.file.ends_with("net/stat/nf_conntrack"));
        assert_eq!(e.line, Some(3));
    }

    #[test]
    fn bad_sysctl_fails_naming_file() {
        let t = TempTree::new();
        t.write("sys/net/netfilter/nf_conntrack_count", "lots\n");
        let e = render(t.collector().as_mut()).unwrap_err();
        assert!(e.file.ends_with("nf_conntrack_count"));
        assert_eq!(e.line, Some(1));
    }
}
