//! /proc/spl/kstat/zfs → `node_zfs_*`, OpenZFS's kernel statistics,
//! node_exporter's zfs collector (collector/zfs_linux.go).
//!
//! - Module-wide kstat files (arcstats, dmu_tx, zil, ...): every `uint64`
//!   or `int64` row becomes an untyped family named after its subsystem and
//!   row (`node_zfs_arc_hits`), its HELP the kstat's path
//!   (`kstat.zfs.misc.arcstats.hits`).
//! - Per pool (a directory per pool): `io` (`node_zfs_zpool_nread{zpool}`,
//!   ZFS before 2.x), each dataset's `objset-0x...`
//!   (`node_zfs_zpool_dataset_reads{zpool,dataset}`) and `state`
//!   (`node_zfs_zpool_state{zpool,state}`, 1 for the pool's state among
//!   online, degraded, faulted, offline, removed, unavail, suspended). A
//!   DEGRADED pool is still serving but has lost redundancy: the USE
//!   method's error signal for storage.
//!
//! Without the zfs module there is no /proc/spl/kstat/zfs: no series, and
//! the directory is looked up only after a uevent or a mount (absence.rs).

use std::path::{Path, PathBuf};

use crate::collectors::{Parser, Settings, Source, Spec};
use crate::kernel::error::{CollectError, ParseError, excerpt};
use crate::kernel::parse::{fields, hex_u64_field, i64_field, lines, parse_fresh, u64_field};
use crate::kernel::source::{Dir, DirListing, SourceFile};
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Desc, Encoder, MetricType, Value, help_is_plain};

const BASE: &str = "spl/kstat/zfs";

/// node_exporter's subsystems and the kstat file each is read from.
const KSTAT_FILES: [(&str, &str); 11] = [
    ("zfs_abd", "abdstats"),
    ("zfs_arc", "arcstats"),
    ("zfs_dbuf", "dbufstats"),
    ("zfs_dmu_tx", "dmu_tx"),
    ("zfs_dnode", "dnodestats"),
    ("zfs_fm", "fm"),
    ("zfs_vdev_cache", "vdev_cache_stats"),
    ("zfs_vdev_mirror", "vdev_mirror_stats"),
    ("zfs_xuio", "xuio_stats"),
    ("zfs_zfetch", "zfetchstats"),
    ("zfs_zil", "zil"),
];

/// node_exporter's pool states, in its order.
const POOL_STATES: [&str; 7] = [
    "online",
    "degraded",
    "faulted",
    "offline",
    "removed",
    "unavail",
    "suspended",
];

pub const SPEC: Spec = Spec {
    name: "zfs",
    default_enabled: true,
    help: "OpenZFS kstats, per-pool I/O, dataset and state from /proc/spl/kstat/zfs",
    flags: &[],
    build,
    sources: &[
        Source::proc("spl/kstat/zfs/abdstats", "zfs_kstat"),
        Source::proc("spl/kstat/zfs/arcstats", "zfs_kstat"),
        Source::proc("spl/kstat/zfs/dbufstats", "zfs_kstat"),
        Source::proc("spl/kstat/zfs/dmu_tx", "zfs_kstat"),
        Source::proc("spl/kstat/zfs/dnodestats", "zfs_kstat"),
        Source::proc("spl/kstat/zfs/fm", "zfs_kstat"),
        Source::proc("spl/kstat/zfs/vdev_cache_stats", "zfs_kstat"),
        Source::proc("spl/kstat/zfs/vdev_mirror_stats", "zfs_kstat"),
        Source::proc("spl/kstat/zfs/xuio_stats", "zfs_kstat"),
        Source::proc("spl/kstat/zfs/zfetchstats", "zfs_kstat"),
        Source::proc("spl/kstat/zfs/zil", "zfs_kstat"),
        Source::proc("spl/kstat/zfs/tank/io", "zfs_pool_io"),
        Source::proc("spl/kstat/zfs/tank/objset-0x36", "zfs_objset"),
        Source::proc("spl/kstat/zfs/tank/state", "zfs_pool_state"),
    ],
    parsers: &[
        Parser::numeric("zfs_kstat", |t| parse_fresh(t, parse_kstat_into).map(drop)),
        Parser::numeric("zfs_pool_io", |t| parse_fresh(t, parse_io_into).map(drop)),
        Parser::numeric("zfs_objset", |t| {
            parse_fresh(t, parse_objset_into).map(drop)
        }),
        Parser::text("zfs_pool_state", |t| {
            parse_fresh(t, parse_state_into).map(drop)
        }),
    ],
};

const STATE: Desc = Desc::gauge("node_zfs_zpool_state", "kstat.zfs.misc.state");

/// SPL's kstat types that node_exporter exports.
const KSTAT_INT64: u64 = 3;
const KSTAT_UINT64: u64 = 4;

/// Checks SPL's first line of a kstat file, `KID TYPE 0xFLAGS NDATA
/// DATASIZE CRTIME SNAPTIME` (`6 1 0x01 91 4368 5266997922 97951858082072`).
fn kstat_header(line: Option<&str>) -> Result<(), ParseError> {
    const WHAT: [&str; 7] = [
        "kstat id",
        "kstat type",
        "flags",
        "data count",
        "data size",
        "creation time",
        "snapshot time",
    ];
    let line = line.ok_or_else(|| ParseError::new(1, "empty file"))?;
    let mut f = fields(line);
    for what in WHAT {
        let tok = f
            .next()
            .ok_or_else(|| ParseError::new(1, format!("kstat header: missing {what}")))?;
        match tok.strip_prefix("0x") {
            Some(hex) if what == "flags" => _ = hex_u64_field(hex, 1, what)?,
            _ => _ = u64_field(tok, 1, what)?,
        }
    }
    if let Some(extra) = f.next() {
        return Err(ParseError::new(
            1,
            format!("kstat header: unexpected extra field {}", excerpt(extra)),
        ));
    }
    Ok(())
}

/// A kstat row name usable in a metric name once `-` is `_`.
fn row_name(tok: &str, n: usize) -> Result<&str, ParseError> {
    if tok
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        Ok(tok)
    } else {
        Err(ParseError::new(
            n,
            format!("invalid kstat name {}", excerpt(tok)),
        ))
    }
}

/// Copies `names` into the reused Strings of `out`, growing it if needed.
fn set_name(out: &mut Vec<String>, i: usize, name: &str) {
    if i == out.len() {
        out.push(String::new());
    }
    out[i].clear();
    out[i].push_str(name);
}

/// Refuses a name seen twice (each would be a second family of that
/// name); `line_of` gives the line of the name at a position.
fn no_duplicates(
    names: &[String],
    order: &mut Vec<u32>,
    line_of: impl Fn(usize) -> usize,
) -> Result<(), ParseError> {
    order.clear();
    order.extend(0..names.len() as u32);
    // Stable: of two equal names the later one comes second.
    order.sort_by(|a, b| names[*a as usize].cmp(&names[*b as usize]));
    for pair in order.windows(2) {
        let (first, second) = (pair[0] as usize, pair[1] as usize);
        if names[first] == names[second] {
            return Err(ParseError::new(
                line_of(second),
                format!("a second row {}", excerpt(&names[first])),
            ));
        }
    }
    Ok(())
}

/// The exported rows of a `name type data` kstat file.
#[derive(Debug, Default)]
pub struct Kstat {
    /// Row names as the kernel writes them; only `len` are valid.
    pub names: Vec<String>,
    pub values: Vec<Value>,
    /// The line of each kept row, for errors.
    lines: Vec<u32>,
    /// Scratch for the duplicate check.
    order: Vec<u32>,
}

impl Kstat {
    pub fn rows(&self) -> impl Iterator<Item = (&str, Value)> {
        self.names
            .iter()
            .map(String::as_str)
            .zip(self.values.iter().copied())
    }
}

/// Parses a module-wide kstat file: SPL's header, `name type data`, then
/// one row per statistic. Rows of type 4 (uint64) and 3 (int64) are kept,
/// others (strings, ...) skipped as node_exporter skips them.
pub fn parse_kstat_into(s: &str, out: &mut Kstat) -> Result<(), ParseError> {
    out.values.clear();
    out.lines.clear();
    let mut it = lines(s).enumerate();
    kstat_header(it.next().map(|(_, l)| l))?;
    match it.next() {
        Some((_, l)) if fields(l).eq(["name", "type", "data"]) => {}
        _ => return Err(ParseError::new(2, "expected the header \"name type data\"")),
    }
    let mut kept = 0;
    for (i, line) in it {
        let n = i + 1;
        let mut f = fields(line);
        let name = row_name(f.next().ok_or_else(|| ParseError::new(n, "empty line"))?, n)?;
        let kind = u64_field(
            f.next()
                .ok_or_else(|| ParseError::new(n, "missing field type"))?,
            n,
            "type",
        )?;
        if kind != KSTAT_UINT64 && kind != KSTAT_INT64 {
            continue;
        }
        let data = f
            .next()
            .ok_or_else(|| ParseError::new(n, format!("{name}: missing data")))?;
        let value = if kind == KSTAT_UINT64 {
            Value::U64(u64_field(data, n, name)?)
        } else {
            Value::I64(i64_field(data, n, name)?)
        };
        if let Some(extra) = f.next() {
            return Err(ParseError::new(
                n,
                format!("{name}: unexpected extra field {}", excerpt(extra)),
            ));
        }
        set_name(&mut out.names, kept, name);
        out.values.push(value);
        out.lines.push(n as u32);
        kept += 1;
    }
    out.names.truncate(kept);
    let lines = &out.lines;
    no_duplicates(&out.names, &mut out.order, |i| lines[i] as usize)
}

/// A pool's `io` kstat (ZFS 0.x-1.x): field names and their values.
#[derive(Debug, Default)]
pub struct PoolIo {
    pub names: Vec<String>,
    pub values: Vec<u64>,
    order: Vec<u32>,
}

/// Parses a pool's `io`: SPL's header, a line of at least 12 field names
/// starting `nread`, one line of as many unsigned values.
pub fn parse_io_into(s: &str, out: &mut PoolIo) -> Result<(), ParseError> {
    out.values.clear();
    let mut it = lines(s);
    kstat_header(it.next())?;
    let header = it.next().unwrap_or("");
    let mut count = 0;
    for name in fields(header) {
        set_name(&mut out.names, count, row_name(name, 2)?);
        count += 1;
    }
    out.names.truncate(count);
    if count < 12 || out.names[0] != "nread" {
        return Err(ParseError::new(
            2,
            "expected at least 12 field names starting with nread",
        ));
    }
    let values = it
        .next()
        .ok_or_else(|| ParseError::new(3, "missing the values line"))?;
    for (tok, name) in fields(values).zip(&out.names) {
        out.values.push(u64_field(tok, 3, name)?);
    }
    if fields(values).count() != count {
        return Err(ParseError::new(
            3,
            format!("{} values for {count} fields", fields(values).count()),
        ));
    }
    if it.next().is_some() {
        return Err(ParseError::new(4, "unexpected line after the values"));
    }
    no_duplicates(&out.names, &mut out.order, |_| 2)
}

/// A dataset's `objset-0x...` kstat.
#[derive(Debug, Default)]
pub struct Objset {
    /// `dataset_name`'s data: the rest of its line (names may hold spaces).
    pub dataset: String,
    pub stats: Kstat,
}

/// Parses a dataset's kstat: SPL's header, `name type data`,
/// `dataset_name 7 NAME` before any number, then uint64 rows (others
/// skipped, as node_exporter skips them).
pub fn parse_objset_into(s: &str, out: &mut Objset) -> Result<(), ParseError> {
    out.dataset.clear();
    out.stats.values.clear();
    out.stats.lines.clear();
    let mut it = lines(s).enumerate();
    kstat_header(it.next().map(|(_, l)| l))?;
    match it.next() {
        Some((_, l)) if fields(l).eq(["name", "type", "data"]) => {}
        _ => return Err(ParseError::new(2, "expected the header \"name type data\"")),
    }
    let mut named = false;
    let mut kept = 0;
    for (i, line) in it {
        let n = i + 1;
        let mut f = fields(line);
        let name = row_name(f.next().ok_or_else(|| ParseError::new(n, "empty line"))?, n)?;
        let kind = f
            .next()
            .ok_or_else(|| ParseError::new(n, "missing field type"))?;
        if name == "dataset_name" {
            let data = f
                .next()
                .ok_or_else(|| ParseError::new(n, "dataset_name: empty"))?;
            if named {
                return Err(ParseError::new(n, "a second dataset_name"));
            }
            named = true;
            // The name runs to the end of the line.
            let at = line.find(data).unwrap_or(0);
            out.dataset
                .push_str(line[at..].trim_end_matches(['\r', '\n']));
            continue;
        }
        if u64_field(kind, n, "type")? != KSTAT_UINT64 {
            continue;
        }
        if !named {
            return Err(ParseError::new(n, "a statistic before dataset_name"));
        }
        let data = f
            .next()
            .ok_or_else(|| ParseError::new(n, format!("{name}: missing data")))?;
        let v = u64_field(data, n, name)?;
        if let Some(extra) = f.next() {
            return Err(ParseError::new(
                n,
                format!("{name}: unexpected extra field {}", excerpt(extra)),
            ));
        }
        set_name(&mut out.stats.names, kept, name);
        out.stats.values.push(Value::U64(v));
        out.stats.lines.push(n as u32);
        kept += 1;
    }
    out.stats.names.truncate(kept);
    if !named {
        return Err(ParseError::new(3, "no dataset_name"));
    }
    let stats = &mut out.stats;
    let lines = &stats.lines;
    no_duplicates(&stats.names, &mut stats.order, |i| lines[i] as usize)
}

/// A pool's `state`: one word (`ONLINE`, `DEGRADED`, ...). Sets the
/// position of its lower-case form in [`POOL_STATES`], or `None` for a
/// state node_exporter does not list (all of its series are then 0).
pub fn parse_state_into(s: &str, out: &mut Option<usize>) -> Result<(), ParseError> {
    let mut it = lines(s);
    let word = it.next().unwrap_or("").trim();
    if word.is_empty() || !word.bytes().all(|b| b.is_ascii_alphabetic()) {
        return Err(ParseError::new(
            1,
            format!(
                "expected a pool state such as ONLINE, found {}",
                excerpt(word)
            ),
        ));
    }
    if it.next().is_some() {
        return Err(ParseError::new(2, "expected a single line"));
    }
    *out = POOL_STATES
        .iter()
        .position(|st| st.eq_ignore_ascii_case(word));
    Ok(())
}

/// One module-wide kstat file.
struct KstatFile {
    subsystem: &'static str,
    file_name: &'static str,
    file: SourceFile,
    parsed: Kstat,
    present: bool,
}

struct Dataset {
    file_name: String,
    file: SourceFile,
    parsed: Objset,
    present: bool,
}

struct Pool {
    name: String,
    dir: Dir,
    io: SourceFile,
    io_parsed: PoolIo,
    has_io: bool,
    state: SourceFile,
    state_parsed: Option<Option<usize>>,
    datasets: Vec<Dataset>,
    /// Scratch: this scrape's objset file names.
    listed: Vec<String>,
    present: bool,
}

impl Pool {
    fn new(base: &Path, name: &str) -> Pool {
        Pool {
            name: name.to_string(),
            dir: Dir::new(base, name),
            io: SourceFile::new(base, &format!("{name}/io")),
            io_parsed: PoolIo::default(),
            has_io: false,
            state: SourceFile::new(base, &format!("{name}/state")),
            state_parsed: None,
            datasets: Vec::new(),
            listed: Vec::new(),
            present: false,
        }
    }

    /// Reads the pool's files; a file that vanished (a pool exported
    /// during the scrape) is left out.
    fn read(&mut self, base: &Path) -> Result<(), CollectError> {
        let listed = &mut self.listed;
        listed.clear();
        if !self.dir.list(|n| {
            if n.starts_with("objset-") {
                listed.push(n.to_string());
            }
        })? {
            self.present = false;
            return Ok(());
        }
        self.present = true;
        let parsed = &mut self.io_parsed;
        self.has_io = self.io.parse_with(|t| parse_io_into(t, parsed))?.is_some();
        let mut state = None;
        self.state_parsed = self
            .state
            .parse_with(|t| parse_state_into(t, &mut state))?
            .map(|()| state);
        self.listed.sort_unstable();
        for d in &mut self.datasets {
            d.present = false;
        }
        for file_name in &self.listed {
            let i = match self
                .datasets
                .binary_search_by(|d| d.file_name.cmp(file_name))
            {
                Ok(i) => i,
                Err(i) => {
                    let rel = format!("{}/{file_name}", self.name);
                    self.datasets.insert(
                        i,
                        Dataset {
                            file_name: file_name.clone(),
                            file: SourceFile::new(base, &rel),
                            parsed: Objset::default(),
                            present: false,
                        },
                    );
                    i
                }
            };
            let d = &mut self.datasets[i];
            let parsed = &mut d.parsed;
            d.present = d
                .file
                .parse_with(|t| parse_objset_into(t, parsed))?
                .is_some();
        }
        self.datasets.retain(|d| d.present);
        Ok(())
    }
}

pub struct ZfsCollector {
    base: PathBuf,
    listing: DirListing,
    kstats: Vec<KstatFile>,
    /// Sorted by name.
    pools: Vec<Pool>,
    /// Reused: a family's name and HELP.
    name: String,
    help: String,
    /// Reused: (row name, pool, dataset, value) of the per-pool families.
    rows: Vec<PoolRow<'static>>,
}

/// One sample of a per-pool family: its row name, pool and dataset.
struct PoolRow<'a> {
    row: &'a str,
    pool: &'a str,
    dataset: Option<&'a str>,
    value: Value,
}

pub fn build(s: &Settings) -> Box<dyn Collector> {
    let base = s.procfs.join(BASE);
    Box::new(ZfsCollector {
        kstats: KSTAT_FILES
            .iter()
            .map(|&(subsystem, file_name)| KstatFile {
                subsystem,
                file_name,
                file: SourceFile::new(&base, file_name),
                parsed: Kstat::default(),
                present: false,
            })
            .collect(),
        base,
        listing: DirListing::default(),
        pools: Vec::new(),
        name: String::new(),
        help: String::new(),
        rows: Vec::new(),
    })
}

impl ZfsCollector {
    /// Writes `rows` (sorted by row name) as one family per row name,
    /// `node_PREFIX_ROW`, HELP `kstat.zfs.misc.FILE.ROW` (`FILE` `None`: the
    /// objset HELP names no file but `objset`).
    fn write_pool_rows(
        enc: &mut Encoder,
        rows: &[PoolRow<'_>],
        prefix: &str,
        help_file: &str,
        name: &mut String,
        help: &mut String,
    ) {
        let mut current: Option<&str> = None;
        for r in rows {
            if current != Some(r.row) {
                current = Some(r.row);
                family(enc, name, help, prefix, help_file, r.row);
            }
            match r.dataset {
                Some(ds) => enc.sample_named(
                    name,
                    "",
                    &[("zpool", r.pool), ("dataset", ds)],
                    None,
                    r.value,
                ),
                None => enc.sample_named(name, "", &[("zpool", r.pool)], None, r.value),
            }
        }
    }
}

/// Writes the header of `node_PREFIX_ROW` (`-` as `_`), HELP
/// `kstat.zfs.misc.FILE.ROW`, leaving the name in `name`.
fn family(
    enc: &mut Encoder,
    name: &mut String,
    help: &mut String,
    prefix: &str,
    file: &str,
    row: &str,
) {
    name.clear();
    name.push_str("node_");
    name.push_str(prefix);
    name.push('_');
    name.extend(row.chars().map(|c| if c == '-' { '_' } else { c }));
    help.clear();
    help.push_str("kstat.zfs.misc.");
    help.push_str(file);
    help.push('.');
    help.push_str(row);
    enc.family_named(name, help, help_is_plain(help), MetricType::Untyped);
}

impl Collector for ZfsCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        if !self.listing.read(&self.base)? {
            self.pools.clear();
            return Ok(()); // no zfs module
        }
        for k in &mut self.kstats {
            let parsed = &mut k.parsed;
            k.present = k
                .file
                .parse_with(|t| parse_kstat_into(t, parsed))?
                .is_some();
        }
        for p in &mut self.pools {
            p.present = false;
        }
        for entry in self.listing.entries().iter().filter(|e| !e.is_file) {
            let i = match self
                .pools
                .binary_search_by(|p| p.name.as_str().cmp(&entry.name))
            {
                Ok(i) => i,
                Err(i) => {
                    self.pools.insert(i, Pool::new(&self.base, &entry.name));
                    i
                }
            };
            self.pools[i].read(&self.base)?;
        }
        self.pools.retain(|p| p.present);

        let (name, help) = (&mut self.name, &mut self.help);
        for k in self.kstats.iter().filter(|k| k.present) {
            for (row, value) in k.parsed.rows() {
                family(enc, name, help, k.subsystem, k.file_name, row);
                enc.sample_named(name, "", &[], None, value);
            }
        }
        let mut rows: Vec<PoolRow<'_>> =
            crate::kernel::parse::recycle(std::mem::take(&mut self.rows));
        for p in self.pools.iter().filter(|p| p.has_io) {
            let io = &p.io_parsed;
            rows.extend(io.names.iter().zip(&io.values).map(|(row, v)| PoolRow {
                row,
                pool: &p.name,
                dataset: None,
                value: Value::U64(*v),
            }));
        }
        rows.sort_by(|a, b| a.row.cmp(b.row));
        Self::write_pool_rows(enc, &rows, "zfs_zpool", "io", name, help);
        rows.clear();
        for p in &self.pools {
            for d in &p.datasets {
                rows.extend(d.parsed.stats.rows().map(|(row, value)| PoolRow {
                    row,
                    pool: &p.name,
                    dataset: Some(&d.parsed.dataset),
                    value,
                }));
            }
        }
        rows.sort_by(|a, b| a.row.cmp(b.row));
        Self::write_pool_rows(enc, &rows, "zfs_zpool_dataset", "objset", name, help);
        self.rows = crate::kernel::parse::recycle(rows);

        let states = || {
            self.pools
                .iter()
                .filter_map(|p| Some((&p.name, p.state_parsed?)))
        };
        if states().next().is_some() {
            enc.family(&STATE);
            for (pool, current) in states() {
                for (i, state) in POOL_STATES.iter().enumerate() {
                    let on = u64::from(current == Some(i));
                    enc.sample(&STATE, &[("zpool", pool), ("state", state)], on);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collectors::test_support::{fixture, render};

    const KSTAT: &str = "6 1 0x01 91 4368 5266997922 97951858082072\n\
                         name                            type data\n\
                         hits                            4    8772612\n\
                         memory_available_bytes          3    -3145728\n\
                         arc-meta                        4    7\n\
                         note                            7    some text here\n";

    #[test]
    fn kstat_rows() {
        let k = parse_fresh(KSTAT, parse_kstat_into).unwrap();
        let rows: Vec<_> = k.rows().collect();
        assert_eq!(
            rows,
            [
                ("hits", Value::U64(8772612)),
                ("memory_available_bytes", Value::I64(-3145728)),
                ("arc-meta", Value::U64(7)),
            ]
        );
    }

    #[test]
    fn kstat_malformed() {
        let parse = |s: &str| parse_fresh(s, parse_kstat_into);
        assert_eq!(parse("").unwrap_err().line, 1);
        let e = parse(&KSTAT.replacen("6 1 0x01", "6 1 0xzz", 1)).unwrap_err();
        assert_eq!(e.line, 1);
        assert!(parse(&KSTAT.replacen("6 1", "99999999999999999999 1", 1)).is_err());
        assert_eq!(
            parse(&KSTAT.replace("type data", "type")).unwrap_err().line,
            2
        );
        let e = parse(&format!("{KSTAT}hits 4 1\n")).unwrap_err();
        assert!(e.msg.contains("second row"), "{e}");
        assert!(parse(&KSTAT.replace("8772612", "-1")).is_err());
        assert!(parse(&KSTAT.replace("-3145728", "x")).is_err());
        assert!(
            parse(&KSTAT.replace("arc-meta", "arc.meta"))
                .unwrap_err()
                .msg
                .contains("invalid")
        );
        assert_eq!(parse(&format!("{KSTAT}misses 4\n")).unwrap_err().line, 7);
    }

    #[test]
    fn io_objset_and_state() {
        let io = "12 3 0x00 1 80 79205351707403 395818011156865\n\
                  nread    nwritten reads    writes   wtime    wlentime wupdate  rtime    rlentime rupdate  wcnt     rcnt\n\
                  1884160  3206144  22       132      7155162  104112268 79210489694949 24168078 104112268 79210489849220 0        0\n";
        let p = parse_fresh(io, parse_io_into).unwrap();
        assert_eq!(
            (p.names.len(), p.values[0], p.values[3]),
            (12, 1884160, 132)
        );
        assert!(parse_fresh(&io.replace(" 0        0\n", " 0\n"), parse_io_into).is_err());
        assert!(parse_fresh(&format!("{io}1 2\n"), parse_io_into).is_err());

        let objset = "23 1 0x01 7 2160 221578688875 6665999035587\n\
                      name                            type data\n\
                      dataset_name                    7    tank/home dir\n\
                      writes                          4    12\n\
                      nread                           4    3\n";
        let o = parse_fresh(objset, parse_objset_into).unwrap();
        assert_eq!(o.dataset, "tank/home dir");
        assert_eq!(
            o.stats.rows().collect::<Vec<_>>(),
            [("writes", Value::U64(12)), ("nread", Value::U64(3))]
        );
        let e = parse_fresh(
            &objset.replace("dataset_name                    7    tank/home dir\n", ""),
            parse_objset_into,
        )
        .unwrap_err();
        assert!(e.msg.contains("before dataset_name"), "{e}");

        let state = |s| parse_fresh(s, parse_state_into);
        assert_eq!(state("ONLINE\n").unwrap(), Some(0));
        assert_eq!(state("DEGRADED\n").unwrap(), Some(1));
        assert_eq!(state("SUSPENDED\n").unwrap(), Some(6));
        assert_eq!(state("UNKNOWN\n").unwrap(), None);
        assert!(state("").is_err());
        assert!(state("ONLINE\nONLINE\n").is_err());
        assert!(state("ON LINE\n").is_err());
    }

    #[test]
    fn collector_on_fixture() {
        let s = Settings::with_roots(fixture("proc"), "/nonexistent");
        let out = render(build(&s).as_mut()).unwrap();
        for line in [
            "# HELP node_zfs_arc_hits kstat.zfs.misc.arcstats.hits\n# TYPE node_zfs_arc_hits untyped\n",
            "node_zfs_zpool_state{zpool=\"tank\",state=\"online\"} 1\n",
            "node_zfs_zpool_state{zpool=\"backup\",state=\"degraded\"} 1\n",
            "node_zfs_zpool_state{zpool=\"backup\",state=\"online\"} 0\n",
            "node_zfs_zpool_dataset_writes{zpool=\"tank\",dataset=\"tank/home\"} 1052\n",
        ] {
            assert!(out.contains(line), "{line} in\n{out}");
        }
        assert_eq!(render(build(&s).as_mut()).unwrap(), out);
        let absent = Settings::with_roots("/nonexistent-usescope", "/nonexistent");
        assert_eq!(render(build(&absent).as_mut()).unwrap(), "");
    }
}
