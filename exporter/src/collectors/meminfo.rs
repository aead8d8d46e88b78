//! /proc/meminfo → `node_memory_<Field>_bytes` and `node_memory_HugePages_*`.
//!
//! node_exporter 1.9 reads meminfo through procfs' `Meminfo` struct and
//! exports exactly the fields in that struct, so [`FIELDS`] is that list and
//! nothing else: a newer kernel's extra fields are validated but not
//! exported, as there. The names follow node_exporter's rule: `(x)` becomes
//! `_x`, a `kB` value is multiplied by 1024 and gets `_bytes`, and the
//! unitless `HugePages_*` page counts keep their bare name.

use crate::collectors::single_file;
use crate::collectors::{Parser, Settings, Source, Spec};
use crate::kernel::error::ParseError;
use crate::kernel::parse::{
    KeysByLen, fields, keys_by_len, lines, next_field, parse_fresh, u64_field,
};
use crate::kernel::source::SourceFile;
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Desc, Encoder};

pub const SPEC: Spec = Spec {
    name: "meminfo",
    default_enabled: true,
    help: "Memory statistics from /proc/meminfo",
    flags: &[],
    build,
    sources: &[Source::proc("meminfo", "meminfo")],
    parsers: &[Parser::numeric("meminfo", |t| {
        parse_fresh(t, parse_into).map(drop)
    })],
};

/// How the kernel prints a field's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Unit {
    /// `Key:   123 kB`, exported in bytes.
    Kb,
    /// `Key:   123`, a count exported as is.
    Count,
}

struct Field {
    /// The key as the kernel prints it, without the colon.
    key: &'static str,
    unit: Unit,
    desc: Desc,
}

macro_rules! field {
    ($key:literal, $name:literal, $unit:ident) => {
        Field {
            key: $key,
            unit: Unit::$unit,
            desc: Desc::gauge(
                concat!("node_memory_", $name),
                concat!("Memory information field ", $name, "."),
            ),
        }
    };
}

/// node_exporter's meminfo fields (1.9, plus `Zswap` and `Zswapped` from
/// 1.10), in its (sorted) output order.
const FIELDS: [Field; 51] = [
    field!("Active(anon)", "Active_anon_bytes", Kb),
    field!("Active", "Active_bytes", Kb),
    field!("Active(file)", "Active_file_bytes", Kb),
    field!("AnonHugePages", "AnonHugePages_bytes", Kb),
    field!("AnonPages", "AnonPages_bytes", Kb),
    field!("Bounce", "Bounce_bytes", Kb),
    field!("Buffers", "Buffers_bytes", Kb),
    field!("Cached", "Cached_bytes", Kb),
    field!("CmaFree", "CmaFree_bytes", Kb),
    field!("CmaTotal", "CmaTotal_bytes", Kb),
    field!("CommitLimit", "CommitLimit_bytes", Kb),
    field!("Committed_AS", "Committed_AS_bytes", Kb),
    field!("DirectMap1G", "DirectMap1G_bytes", Kb),
    field!("DirectMap2M", "DirectMap2M_bytes", Kb),
    field!("DirectMap4k", "DirectMap4k_bytes", Kb),
    field!("Dirty", "Dirty_bytes", Kb),
    field!("HardwareCorrupted", "HardwareCorrupted_bytes", Kb),
    field!("HugePages_Free", "HugePages_Free", Count),
    field!("HugePages_Rsvd", "HugePages_Rsvd", Count),
    field!("HugePages_Surp", "HugePages_Surp", Count),
    field!("HugePages_Total", "HugePages_Total", Count),
    field!("Hugepagesize", "Hugepagesize_bytes", Kb),
    field!("Inactive(anon)", "Inactive_anon_bytes", Kb),
    field!("Inactive", "Inactive_bytes", Kb),
    field!("Inactive(file)", "Inactive_file_bytes", Kb),
    field!("KernelStack", "KernelStack_bytes", Kb),
    field!("Mapped", "Mapped_bytes", Kb),
    field!("MemAvailable", "MemAvailable_bytes", Kb),
    field!("MemFree", "MemFree_bytes", Kb),
    field!("MemTotal", "MemTotal_bytes", Kb),
    field!("Mlocked", "Mlocked_bytes", Kb),
    field!("NFS_Unstable", "NFS_Unstable_bytes", Kb),
    field!("PageTables", "PageTables_bytes", Kb),
    field!("Percpu", "Percpu_bytes", Kb),
    field!("SReclaimable", "SReclaimable_bytes", Kb),
    field!("SUnreclaim", "SUnreclaim_bytes", Kb),
    field!("ShmemHugePages", "ShmemHugePages_bytes", Kb),
    field!("ShmemPmdMapped", "ShmemPmdMapped_bytes", Kb),
    field!("Shmem", "Shmem_bytes", Kb),
    field!("Slab", "Slab_bytes", Kb),
    field!("SwapCached", "SwapCached_bytes", Kb),
    field!("SwapFree", "SwapFree_bytes", Kb),
    field!("SwapTotal", "SwapTotal_bytes", Kb),
    field!("Unevictable", "Unevictable_bytes", Kb),
    field!("VmallocChunk", "VmallocChunk_bytes", Kb),
    field!("VmallocTotal", "VmallocTotal_bytes", Kb),
    field!("VmallocUsed", "VmallocUsed_bytes", Kb),
    field!("WritebackTmp", "WritebackTmp_bytes", Kb),
    field!("Writeback", "Writeback_bytes", Kb),
    field!("Zswap", "Zswap_bytes", Kb),
    field!("Zswapped", "Zswapped_bytes", Kb),
];

/// [`FIELDS`]' keys, for [`field_index`].
const KEYS: KeysByLen = keys_by_len!(FIELDS);

/// The index in [`FIELDS`] of the field whose kernel key is `key`.
fn field_index(key: &str) -> Option<usize> {
    KEYS.find(key, |i| FIELDS[i].key)
}

/// The exported fields' values in export units (bytes, or pages for
/// `HugePages_*`), indexed like [`FIELDS`]; `None` where the kernel does not
/// print the field.
#[derive(Debug, PartialEq)]
pub struct MemInfo {
    values: [Option<u64>; FIELDS.len()],
}

impl Default for MemInfo {
    fn default() -> MemInfo {
        MemInfo {
            values: [None; FIELDS.len()],
        }
    }
}

impl MemInfo {
    /// A field's exported value by its kernel key, e.g. `"Active(anon)"`.
    pub fn get(&self, key: &str) -> Option<u64> {
        let i = field_index(key)?;
        self.values[i]
    }
}

/// Parses `Key:   <value> [kB]` lines. Every line is validated, exported or
/// not, so a format change is reported rather than half-read. A repeated key
/// keeps its last value, as procfs does.
pub fn parse_into(s: &str, m: &mut MemInfo) -> Result<(), ParseError> {
    m.values = [None; FIELDS.len()];
    for (i, line) in lines(s).enumerate() {
        let n = i + 1;
        let mut tokens = fields(line);
        // Some old kernels print stray empty lines; node_exporter skipped them.
        let Some(key) = tokens.next() else { continue };
        let key = key
            .strip_suffix(':')
            .ok_or_else(|| ParseError::new(n, format!("expected `Key:`, found {key:?}")))?;
        let value = u64_field(next_field(&mut tokens, n, key)?, n, key)?;
        let unit = match (tokens.next(), tokens.next()) {
            (None, _) => Unit::Count,
            (Some("kB"), None) => Unit::Kb,
            (Some(u), None) => {
                return Err(ParseError::new(n, format!("{key}: unknown unit {u:?}")));
            }
            (Some(_), Some(extra)) => {
                return Err(ParseError::new(n, format!("{key}: extra column {extra:?}")));
            }
        };
        if let Some(idx) = field_index(key) {
            m.values[idx] = Some(in_export_unit(&FIELDS[idx], value, unit, n)?);
        }
    }
    if m.values.iter().all(Option::is_none) {
        return Err(ParseError::new(1, "no known meminfo field"));
    }
    Ok(())
}

/// Converts a value to its export unit, insisting on the unit the kernel
/// prints for that field: a `kB` field without its unit would otherwise be
/// exported 1024 times too small.
fn in_export_unit(f: &Field, value: u64, unit: Unit, line: usize) -> Result<u64, ParseError> {
    match (f.unit, unit) {
        (Unit::Kb, Unit::Kb) => value.checked_mul(1024).ok_or_else(|| {
            ParseError::new(line, format!("{}: {value} kB overflows u64 bytes", f.key))
        }),
        (Unit::Count, Unit::Count) => Ok(value),
        (Unit::Kb, Unit::Count) => {
            Err(ParseError::new(line, format!("{}: missing unit kB", f.key)))
        }
        (Unit::Count, Unit::Kb) => Err(ParseError::new(
            line,
            format!("{}: unexpected unit kB", f.key),
        )),
    }
}

pub fn build(s: &Settings) -> Box<dyn Collector> {
    single_file::boxed(SourceFile::new(&s.procfs, "meminfo"), parse_into, write)
}

/// The families of one read of the file.
fn write(parsed: &MemInfo, enc: &mut Encoder) {
    for (f, v) in FIELDS.iter().zip(parsed.values) {
        if let Some(v) = v {
            enc.family(&f.desc);
            enc.sample(&f.desc, &[], v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scrape::exposition::Format;

    const FIXTURE: &str = include_str!("../../tests/fixtures/proc/meminfo");

    fn parse(s: &str) -> Result<MemInfo, ParseError> {
        parse_fresh(s, parse_into)
    }

    #[test]
    fn field_index_finds_every_key() {
        for (i, f) in FIELDS.iter().enumerate() {
            assert_eq!(field_index(f.key), Some(i), "{}", f.key);
        }
        for other in ["", "MemTotal:", "Mem", "HugePages_Totally", "DirectMap8k"] {
            assert_eq!(field_index(other), None, "{other}");
        }
        assert_eq!(field_index(&"M".repeat(100)), None);
    }

    #[test]
    fn table_is_sorted_like_node_exporter_output() {
        // Go's exposition sorts families by name, bytewise.
        assert!(FIELDS.windows(2).all(|w| w[0].desc.name < w[1].desc.name));
    }

    #[test]
    fn parses_fixture() {
        let m = parse(FIXTURE).unwrap();
        assert_eq!(m.get("MemTotal"), Some(24684084 * 1024));
        assert_eq!(m.get("Active(anon)"), Some(1504 * 1024));
        assert_eq!(m.get("VmallocTotal"), Some(34359738367 * 1024));
        assert_eq!(m.get("HugePages_Total"), Some(0));
        assert_eq!(m.get("Hugepagesize"), Some(2048 * 1024));
        assert_eq!(m.get("Zswap"), Some(0));
        // Printed by this kernel but not exported by node_exporter.
        assert_eq!(m.get("KReclaimable"), None);
        // Exported by node_exporter but absent on this machine.
        assert_eq!(m.get("CmaTotal"), None);
        assert_eq!(m.get("HardwareCorrupted"), None);
    }

    #[test]
    fn empty_and_garbage() {
        assert!(parse("").is_err());
        assert!(parse("\n\n").is_err());
        assert_eq!(parse("garbage here\n").unwrap_err().line, 1);
        assert_eq!(parse("MemTotal: 1 kB\n%%%\n").unwrap_err().line, 2);
        // Well-formed, but nothing the kernel's meminfo would contain.
        assert!(parse("Foo: 1 kB\n").is_err());
    }

    #[test]
    fn truncated() {
        let cut = &FIXTURE[..FIXTURE.find("MemAvailable:").unwrap() + 20];
        assert_eq!(cut.lines().last().unwrap(), "MemAvailable:   2429");
        let e = parse(cut).unwrap_err();
        assert_eq!(e.line, 3);
        assert!(e.msg.contains("missing unit kB"), "{e}");
        let cut = &FIXTURE[..FIXTURE.find("Buffers").unwrap() + 3];
        assert!(parse(cut).unwrap_err().msg.contains("Buf"));
    }

    #[test]
    fn missing_and_extra_columns() {
        assert!(
            parse("MemTotal:\n")
                .unwrap_err()
                .msg
                .contains("missing field MemTotal")
        );
        assert!(
            parse("MemTotal: 5\n")
                .unwrap_err()
                .msg
                .contains("missing unit")
        );
        assert!(
            parse("HugePages_Total: 5 kB\n")
                .unwrap_err()
                .msg
                .contains("unexpected unit")
        );
        assert!(
            parse("MemTotal: 5 MB\n")
                .unwrap_err()
                .msg
                .contains("unknown unit")
        );
        let e = parse("MemTotal: 5 kB 7\n").unwrap_err();
        assert!(e.msg.contains("extra column"), "{e}");
        // Unexported lines are held to the same shape.
        assert_eq!(
            parse("MemTotal: 5 kB\nZswap: 1 kB 2\n").unwrap_err().line,
            2
        );
    }

    #[test]
    fn u64_overflow() {
        let e = parse("MemTotal: 18446744073709551616 kB\n").unwrap_err();
        assert!(e.msg.contains("MemTotal"), "{e}");
        let e = parse("MemFree: 18446744073709551615 kB\n").unwrap_err();
        assert!(e.msg.contains("overflows"), "{e}");
        assert_eq!(
            parse("HugePages_Free: 18446744073709551615\n")
                .unwrap()
                .get("HugePages_Free"),
            Some(u64::MAX)
        );
    }

    #[test]
    fn repeated_key_keeps_last() {
        let m = parse("MemFree: 1 kB\nMemFree: 2 kB\n").unwrap();
        assert_eq!(m.get("MemFree"), Some(2048));
    }

    #[test]
    fn collector_output_on_fixture() {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/proc");
        let mut c = build(&Settings::with_roots(root, "/nonexistent"));
        let mut buf = Vec::new();
        c.collect(&mut Encoder::new(&mut buf, Format::PrometheusText))
            .unwrap();
        let out = String::from_utf8(buf).unwrap();
        assert!(out.starts_with(
            "# HELP node_memory_Active_anon_bytes Memory information field Active_anon_bytes.\n\
             # TYPE node_memory_Active_anon_bytes gauge\n\
             node_memory_Active_anon_bytes 1540096\n\
             # HELP node_memory_Active_bytes Memory information field Active_bytes.\n\
             # TYPE node_memory_Active_bytes gauge\n\
             node_memory_Active_bytes 516091904\n"
        ));
        for line in [
            "node_memory_MemTotal_bytes 25276502016\n",
            "node_memory_HugePages_Total 0\n",
            "# TYPE node_memory_HugePages_Total gauge\n",
            "node_memory_Hugepagesize_bytes 2097152\n",
            "node_memory_DirectMap1G_bytes 25769803776\n",
            "node_memory_Committed_AS_bytes 49033216\n",
        ] {
            assert!(out.contains(line), "missing {line:?}");
        }
        // 48 of the 51 fields are on this kernel (no Cma*, no HardwareCorrupted).
        assert_eq!(out.lines().filter(|l| !l.starts_with('#')).count(), 48);
    }
}
