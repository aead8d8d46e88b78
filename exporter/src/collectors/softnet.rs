//! /proc/net/softnet_stat → `node_softnet_*{cpu}`: per-CPU packet
//! processing in the NET_RX softirq.
//!
//! One row per online CPU, hexadecimal columns. `dropped` counts packets
//! lost because the backlog queue was full; `times_squeezed` counts NET_RX
//! runs that ran out of budget with work left, the first sign of a packet
//! storm saturating a CPU.
//!
//! Kernels grew the row over time (9 columns in 2.6.23, `received_rps` at
//! 10, `flow_limit_count` at 11, backlog length and the CPU id at 13, and
//! queue lengths after that). As in node_exporter (procfs), the `cpu` label
//! is the CPU-id column where the row has one and the row index otherwise;
//! the row index differs from the CPU id once CPUs are offline. Unlike
//! node_exporter, a column the kernel does not print is not exported as 0.

use crate::collectors::{Parser, Settings, Source, Spec};
use crate::kernel::error::{CollectError, ParseError};
use crate::kernel::parse::{fields, hex_u64_field, lines, parse_fresh};
use crate::kernel::source::SourceFile;
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Desc, Encoder, u64_label};

pub const SPEC: Spec = Spec {
    name: "softnet",
    default_enabled: true,
    help: "Per-CPU packet processing statistics from /proc/net/softnet_stat",
    flags: &[],
    build,
    sources: &[Source::proc("net/softnet_stat", "softnet")],
    parsers: &[Parser::numeric("softnet", |t| {
        parse_fresh(t, parse_into).map(drop)
    })],
};

const PROCESSED: Desc = Desc::counter(
    "node_softnet_processed_total",
    "Number of processed packets",
);
const DROPPED: Desc = Desc::counter("node_softnet_dropped_total", "Number of dropped packets");
const TIMES_SQUEEZED: Desc = Desc::counter(
    "node_softnet_times_squeezed_total",
    "Number of times processing packets ran out of quota",
);
const CPU_COLLISION: Desc = Desc::counter(
    "node_softnet_cpu_collision_total",
    "Number of collision occur while obtaining device lock while transmitting",
);
const RECEIVED_RPS: Desc = Desc::counter(
    "node_softnet_received_rps_total",
    "Number of times cpu woken up received_rps",
);
const FLOW_LIMIT_COUNT: Desc = Desc::counter(
    "node_softnet_flow_limit_count_total",
    "Number of times flow limit has been reached",
);
const BACKLOG_LEN: Desc = Desc::gauge("node_softnet_backlog_len", "Softnet backlog status");

/// Fewest columns any kernel prints (2.6.23).
const MIN_COLUMNS: usize = 9;

/// One exported value: its description and the column it comes from.
struct Column {
    desc: Desc,
    index: usize,
}

const COLUMNS: [Column; 7] = [
    Column {
        desc: PROCESSED,
        index: 0,
    },
    Column {
        desc: DROPPED,
        index: 1,
    },
    Column {
        desc: TIMES_SQUEEZED,
        index: 2,
    },
    Column {
        desc: CPU_COLLISION,
        index: 8,
    },
    Column {
        desc: RECEIVED_RPS,
        index: 9,
    },
    Column {
        desc: FLOW_LIMIT_COUNT,
        index: 10,
    },
    Column {
        desc: BACKLOG_LEN,
        index: 11,
    },
];

/// Column of the CPU id (Linux 5.14+).
const CPU_ID: usize = 12;

/// One CPU's row: the exported columns in [`COLUMNS`] order (`None` where
/// this kernel's row is too narrow) and the CPU the row belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuRow {
    pub cpu: u64,
    pub values: [Option<u64>; COLUMNS.len()],
}

/// Parses softnet_stat into `rows`, one per line. Every row must have the
/// same width (the kernel prints one format for all CPUs) and at least
/// [`MIN_COLUMNS`]. An empty file (no CPUs) is valid.
pub fn parse_into(s: &str, rows: &mut Vec<CpuRow>) -> Result<(), ParseError> {
    rows.clear();
    let mut width = None;
    for (i, line) in lines(s).enumerate() {
        rows.push(row(&mut width, i, line)?);
    }
    Ok(())
}

/// One row; `width` is the first row's, which every other must match.
fn row(width: &mut Option<usize>, index: usize, line: &str) -> Result<CpuRow, ParseError> {
    let lineno = index + 1;
    let n = fields(line).count();
    if n < MIN_COLUMNS {
        return Err(ParseError::new(
            lineno,
            format!("{n} columns, at least {MIN_COLUMNS} expected"),
        ));
    }
    match *width {
        Some(w) if w != n => {
            return Err(ParseError::new(
                lineno,
                format!("{n} columns, but the first row has {w}"),
            ));
        }
        _ => *width = Some(n),
    }
    let mut row = CpuRow {
        cpu: index as u64,
        values: [None; COLUMNS.len()],
    };
    for (col, tok) in fields(line).enumerate() {
        let v = hex_u64_field(tok, lineno, "softnet column")?;
        if let Some(k) = COLUMNS.iter().position(|c| c.index == col) {
            row.values[k] = Some(v);
        } else if col == CPU_ID {
            row.cpu = v;
        }
    }
    Ok(row)
}

pub struct SoftnetCollector {
    file: SourceFile,
    /// Reused across scrapes: families are written column by column, so
    /// all rows are parsed first.
    rows: Vec<CpuRow>,
}

pub fn build(s: &Settings) -> Box<dyn Collector> {
    Box::new(SoftnetCollector {
        file: SourceFile::new(&s.procfs, "net/softnet_stat"),
        rows: Vec::new(),
    })
}

impl Collector for SoftnetCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        let rows = &mut self.rows;
        if self.file.parse_with(|t| parse_into(t, rows))?.is_none() {
            return Ok(());
        }
        for (k, column) in COLUMNS.iter().enumerate() {
            if self.rows.first().is_none_or(|r| r.values[k].is_none()) {
                continue;
            }
            enc.family(&column.desc);
            for row in &self.rows {
                if let Some(v) = row.values[k] {
                    let mut b = [0u8; 20];
                    enc.sample(&column.desc, &[("cpu", u64_label(row.cpu, &mut b))], v);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scrape::exposition::Format;
    use std::path::Path;

    const FIXTURE: &str = include_str!("../../tests/fixtures/proc/net/softnet_stat");

    fn rows(s: &str) -> Result<Vec<CpuRow>, ParseError> {
        parse_fresh(s, parse_into)
    }

    #[test]
    fn fixture() {
        let r = rows(FIXTURE).unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(
            r[0],
            CpuRow {
                cpu: 0,
                values: [
                    Some(0x17),
                    Some(0),
                    Some(0),
                    Some(0),
                    Some(0),
                    Some(0),
                    Some(0)
                ]
            }
        );
        assert_eq!(r[1].cpu, 1);
        assert_eq!(r[1].values[0], Some(0xfbf));
    }

    #[test]
    fn cpu_id_column_wins_over_row_index() {
        // CPU 1 is offline: the rows belong to CPUs 0 and 2.
        let s = "00000001 00000002 00000003 0 0 0 0 0 00000004 00000005 00000006 00000007 00000000\n\
                 00000001 00000002 00000003 0 0 0 0 0 00000004 00000005 00000006 00000007 00000002\n";
        let r = rows(s).unwrap();
        assert_eq!(r[1].cpu, 2);
        assert_eq!(
            r[1].values,
            [
                Some(1),
                Some(2),
                Some(3),
                Some(4),
                Some(5),
                Some(6),
                Some(7)
            ]
        );
    }

    #[test]
    fn older_kernels_use_row_index_and_omit_missing_columns() {
        let nine = "0000000a 00000001 00000002 0 0 0 0 0 00000003\n0000000b 0 0 0 0 0 0 0 0\n";
        let r = rows(nine).unwrap();
        assert_eq!(r[1].cpu, 1);
        assert_eq!(
            r[0].values,
            [Some(10), Some(1), Some(2), Some(3), None, None, None]
        );
        let eleven = "1 2 3 0 0 0 0 0 4 5 6\n";
        assert_eq!(
            rows(eleven).unwrap()[0].values,
            [Some(1), Some(2), Some(3), Some(4), Some(5), Some(6), None]
        );
    }

    #[test]
    fn malformed() {
        assert_eq!(rows("").unwrap(), vec![]);
        let e = rows("00000001 00000002\n").unwrap_err();
        assert!(e.msg.contains("at least 9"));
        assert!(rows("\u{1}garbage here\n%%% not a kernel file %%%\n:::\n").is_err());
        let e = rows("1 2 3 4 5 6 7 8 zz 10\n").unwrap_err();
        assert!(e.msg.contains("zz"));
        let over = "10000000000000000 0 0 0 0 0 0 0 0 0 0 0 0\n";
        assert!(rows(over).unwrap_err().msg.contains("hex"));
        assert!(rows("ffffffffffffffff 0 0 0 0 0 0 0 0\n").is_ok());
        // Truncated in the middle of the second row.
        let cut = &FIXTURE[..FIXTURE.len() * 3 / 4];
        assert_eq!(rows(cut).unwrap_err().line, 2);
    }

    #[test]
    fn rows_must_agree_in_width() {
        let extra = FIXTURE.replacen('\n', " 00000007\n", 1);
        let e = rows(&extra).unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.msg.contains("first row has 16"), "{}", e.msg);
        let missing = FIXTURE.replacen(" 00000000\n", "\n", 1);
        assert_eq!(rows(&missing).unwrap_err().line, 2);
    }

    #[test]
    fn collector_on_fixture() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/proc");
        let mut c = build(&Settings::with_roots(root, "/nonexistent"));
        let mut buf = Vec::new();
        let mut enc = Encoder::new(&mut buf, Format::PrometheusText);
        c.collect(&mut enc).unwrap();
        let out = String::from_utf8(buf).unwrap();
        let expected = "\
# HELP node_softnet_processed_total Number of processed packets
# TYPE node_softnet_processed_total counter
node_softnet_processed_total{cpu=\"0\"} 23
node_softnet_processed_total{cpu=\"1\"} 4031
# HELP node_softnet_dropped_total Number of dropped packets
# TYPE node_softnet_dropped_total counter
node_softnet_dropped_total{cpu=\"0\"} 0
node_softnet_dropped_total{cpu=\"1\"} 0
# HELP node_softnet_times_squeezed_total Number of times processing packets ran out of quota
# TYPE node_softnet_times_squeezed_total counter
node_softnet_times_squeezed_total{cpu=\"0\"} 0
node_softnet_times_squeezed_total{cpu=\"1\"} 0
# HELP node_softnet_cpu_collision_total Number of collision occur while obtaining device lock while transmitting
# TYPE node_softnet_cpu_collision_total counter
node_softnet_cpu_collision_total{cpu=\"0\"} 0
node_softnet_cpu_collision_total{cpu=\"1\"} 0
# HELP node_softnet_received_rps_total Number of times cpu woken up received_rps
# TYPE node_softnet_received_rps_total counter
node_softnet_received_rps_total{cpu=\"0\"} 0
node_softnet_received_rps_total{cpu=\"1\"} 0
# HELP node_softnet_flow_limit_count_total Number of times flow limit has been reached
# TYPE node_softnet_flow_limit_count_total counter
node_softnet_flow_limit_count_total{cpu=\"0\"} 0
node_softnet_flow_limit_count_total{cpu=\"1\"} 0
# HELP node_softnet_backlog_len Softnet backlog status
# TYPE node_softnet_backlog_len gauge
node_softnet_backlog_len{cpu=\"0\"} 0
node_softnet_backlog_len{cpu=\"1\"} 0
";
        assert_eq!(out, expected);
    }
}
