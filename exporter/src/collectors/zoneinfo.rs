//! /proc/zoneinfo → `node_zoneinfo_*{node,zone}`: free pages, the min/low/high
//! watermarks, zone sizes, protection (lowmem_reserve) and the other fields
//! node_exporter 1.9 exports through procfs' `Zoneinfo` struct.
//!
//! The watermark alerts compare `nr_free_pages` with `low_pages` and
//! `min_pages` per zone, so the semantics follow procfs exactly:
//! - a value comes from a line whose first token is the field's key, inside
//!   the zone's block; `pages free N` is not read, so an empty zone (e.g.
//!   Movable with `present 0`, which prints no per-zone counters) exports its
//!   watermarks and sizes but no `nr_free_pages`, and cannot fire the alert;
//! - the per-node counters the kernel prints under the node's first zone
//!   (`nr_inactive_anon`, `nr_dirty`, …) are exported with that zone's
//!   labels, as node_exporter does, but only with
//!   `--collector.zoneinfo.all`, as are empty zones (`present 0`): by
//!   default the collector writes the populated zones' free pages,
//!   watermarks, sizes, NUMA counters and protection. No shipped rule or
//!   dashboard reads the rest, /proc/vmstat and /proc/meminfo carry the
//!   host's sums of those counters, and they were a third of the
//!   collector's series (the series budget in docs/fleet.md).

use crate::collectors::{Flag, FlagKind, Parser, Settings, Source, Spec};
use crate::kernel::error::{CollectError, ParseError, excerpt};
use crate::kernel::parse::{KeysByLen, fields, keys_by_len, lines, recycle, u64_field};
use crate::kernel::source::{Read, SourceFile};
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Desc, Encoder};

pub const ALL: &str = "collector.zoneinfo.all";

pub const SPEC: Spec = Spec {
    name: "zoneinfo",
    default_enabled: true,
    help: "Free pages and watermarks per NUMA node and zone from /proc/zoneinfo",
    flags: &[Flag {
        name: ALL,
        help: "Every field of every zone, as node_exporter's zoneinfo collector writes them: also empty zones (present 0) and the per-node counters the kernel prints under each node's first zone (nr_active_anon .. nr_written).",
        default: Some("false"),
        kind: FlagKind::Bool,
        conflicts_with: None,
    }],
    build,
    sources: &[Source::proc("zoneinfo", "zoneinfo")],
    parsers: &[Parser::numeric("zoneinfo", |t| {
        let mut zones = Vec::new();
        parse_into(t, &mut zones)?;
        for zone in &zones {
            std::hint::black_box((zone.get("nr_free_pages"), zone.protection()));
        }
        Ok(())
    })],
};

struct Field {
    /// The key as the kernel prints it.
    key: &'static str,
    desc: Desc,
}

macro_rules! gauge {
    ($key:literal, $name:literal, $help:literal) => {
        Field {
            key: $key,
            desc: Desc::gauge(concat!("node_zoneinfo_", $name), $help),
        }
    };
}

macro_rules! counter {
    ($key:literal, $name:literal, $help:literal) => {
        Field {
            key: $key,
            desc: Desc::counter(concat!("node_zoneinfo_", $name), $help),
        }
    };
}

/// node_exporter's fields, in procfs' struct order. Some keys are gone from
/// current kernels (`scanned`, `nr_mlock_stack`); they are kept so older
/// kernels export what node_exporter exports there.
const FIELDS: [Field; 34] = [
    gauge!(
        "nr_free_pages",
        "nr_free_pages",
        "Total number of free pages in the zone"
    ),
    gauge!("min", "min_pages", "Zone watermark pages_min"),
    gauge!("low", "low_pages", "Zone watermark pages_low"),
    gauge!("high", "high_pages", "Zone watermark pages_high"),
    gauge!(
        "scanned",
        "scanned_pages",
        "Pages scanned since last reclaim"
    ),
    gauge!(
        "spanned",
        "spanned_pages",
        "Total pages spanned by the zone, including holes"
    ),
    gauge!(
        "present",
        "present_pages",
        "Physical pages existing within the zone"
    ),
    gauge!(
        "managed",
        "managed_pages",
        "Present pages managed by the buddy system"
    ),
    gauge!(
        "nr_active_anon",
        "nr_active_anon_pages",
        "Number of anonymous pages recently more used"
    ),
    gauge!(
        "nr_inactive_anon",
        "nr_inactive_anon_pages",
        "Number of anonymous pages recently less used"
    ),
    gauge!(
        "nr_isolated_anon",
        "nr_isolated_anon_pages",
        "Temporary isolated pages from anon lru"
    ),
    gauge!(
        "nr_anon_pages",
        "nr_anon_pages",
        "Number of anonymous pages currently used by the system"
    ),
    gauge!(
        "nr_anon_transparent_hugepages",
        "nr_anon_transparent_hugepages",
        "Number of anonymous transparent huge pages currently used by the system"
    ),
    gauge!(
        "nr_active_file",
        "nr_active_file_pages",
        "Number of active pages with file-backing"
    ),
    gauge!(
        "nr_inactive_file",
        "nr_inactive_file_pages",
        "Number of inactive pages with file-backing"
    ),
    gauge!(
        "nr_isolated_file",
        "nr_isolated_file_pages",
        "Temporary isolated pages from file lru"
    ),
    gauge!("nr_file_pages", "nr_file_pages", "Number of file pages"),
    gauge!(
        "nr_slab_reclaimable",
        "nr_slab_reclaimable_pages",
        "Number of reclaimable slab pages"
    ),
    gauge!(
        "nr_slab_unreclaimable",
        "nr_slab_unreclaimable_pages",
        "Number of unreclaimable slab pages"
    ),
    gauge!(
        "nr_mlock_stack",
        "nr_mlock_stack_pages",
        "mlock()ed pages found and moved off LRU"
    ),
    gauge!(
        "nr_kernel_stack",
        "nr_kernel_stacks",
        "Number of kernel stacks"
    ),
    gauge!("nr_mapped", "nr_mapped_pages", "Number of mapped pages"),
    gauge!("nr_dirty", "nr_dirty_pages", "Number of dirty pages"),
    gauge!(
        "nr_writeback",
        "nr_writeback_pages",
        "Number of writeback pages"
    ),
    gauge!(
        "nr_unevictable",
        "nr_unevictable_pages",
        "Number of unevictable pages"
    ),
    gauge!(
        "nr_shmem",
        "nr_shmem_pages",
        "Number of shmem pages (included tmpfs/GEM pages)"
    ),
    counter!(
        "nr_dirtied",
        "nr_dirtied_total",
        "Page dirtyings since bootup"
    ),
    counter!(
        "nr_written",
        "nr_written_total",
        "Page writings since bootup"
    ),
    counter!("numa_hit", "numa_hit_total", "Allocated in intended node"),
    counter!(
        "numa_miss",
        "numa_miss_total",
        "Allocated in non intended node"
    ),
    counter!(
        "numa_foreign",
        "numa_foreign_total",
        "Was intended here, hit elsewhere"
    ),
    counter!(
        "numa_interleave",
        "numa_interleave_total",
        "Interleaver preferred this zone"
    ),
    counter!(
        "numa_local",
        "numa_local_total",
        "Allocation from local node"
    ),
    counter!(
        "numa_other",
        "numa_other_total",
        "Allocation from other node"
    ),
];

/// [`FIELDS`]' keys, for [`field_index`].
const KEYS: KeysByLen = keys_by_len!(FIELDS);

/// The index in [`FIELDS`] of the field whose kernel key is `key`.
fn field_index(key: &str) -> Option<usize> {
    KEYS.find(key, |i| FIELDS[i].key)
}

/// Protection entries a zone can have: one per zone type of the node, and
/// the kernel has at most six (DMA, DMA32, Normal, HighMem, Movable, Device).
const MAX_PROTECTION: usize = 8;

macro_rules! protection {
    ($($i:literal),*) => {
        [$(Desc::gauge(
            concat!("node_zoneinfo_protection_", $i),
            concat!("Protection array ", $i, ". field"),
        )),*]
    };
}

const PROTECTION: [Desc; MAX_PROTECTION] = protection!(0, 1, 2, 3, 4, 5, 6, 7);

/// One `Node N, zone NAME` block.
#[derive(Debug, PartialEq)]
pub struct Zone<'a> {
    pub node: &'a str,
    pub zone: &'a str,
    /// Indexed like [`FIELDS`]; `None` where the block has no such line.
    values: [Option<u64>; FIELDS.len()],
    protection: [u64; MAX_PROTECTION],
    protection_len: usize,
}

impl Zone<'_> {
    /// A field's value by its kernel key, e.g. `"nr_free_pages"`.
    pub fn get(&self, key: &str) -> Option<u64> {
        let i = field_index(key)?;
        self.values[i]
    }

    /// The `protection: (…)` array, empty if the block has none.
    pub fn protection(&self) -> &[u64] {
        &self.protection[..self.protection_len]
    }
}

/// Parses /proc/zoneinfo into `zones` (cleared first), reusing its
/// allocation across scrapes. Lines before the first `Node` header and
/// malformed lines for exported keys are errors; other lines (pagesets,
/// `pages free`, newer counters) are skipped, as procfs does. A repeated key
/// keeps its last value, also as procfs does.
pub fn parse_into<'a>(s: &'a str, zones: &mut Vec<Zone<'a>>) -> Result<(), ParseError> {
    zones.clear();
    for (i, line) in lines(s).enumerate() {
        let n = i + 1;
        let mut tokens = fields(line);
        let Some(key) = tokens.next() else { continue };
        if key == "Node" {
            let zone = header(line, n)?;
            if zones
                .iter()
                .any(|z| z.node == zone.node && z.zone == zone.zone)
            {
                return Err(ParseError::new(
                    n,
                    format!("zone {} of node {} appears twice", zone.zone, zone.node),
                ));
            }
            zones.push(zone);
            continue;
        }
        let Some(zone) = zones.last_mut() else {
            return Err(ParseError::new(
                n,
                format!("expected `Node N, zone NAME`, found {}", excerpt(line)),
            ));
        };
        if key == "protection:" {
            protection(line, zone, n)?;
        } else if let Some(idx) = field_index(key) {
            let (Some(value), None) = (tokens.next(), tokens.next()) else {
                return Err(ParseError::new(
                    n,
                    format!("expected `{key} value`, found {}", excerpt(line)),
                ));
            };
            zone.values[idx] = Some(u64_field(value, n, key)?);
        }
    }
    if zones.is_empty() {
        return Err(ParseError::new(1, "no `Node N, zone NAME` line"));
    }
    Ok(())
}

/// Parses `Node 0, zone   Normal`.
fn header(line: &str, n: usize) -> Result<Zone<'_>, ParseError> {
    let bad = || {
        ParseError::new(
            n,
            format!("expected `Node N, zone NAME`, found {}", excerpt(line)),
        )
    };
    let mut t = fields(line).skip(1);
    let (Some(node), Some("zone"), Some(zone), None) = (t.next(), t.next(), t.next(), t.next())
    else {
        return Err(bad());
    };
    let node = node.strip_suffix(',').ok_or_else(bad)?;
    u64_field(node, n, "node")?;
    // procfs matches the zone name with `\w+`.
    if !zone.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return Err(bad());
    }
    Ok(Zone {
        node,
        zone,
        values: [None; FIELDS.len()],
        protection: [0; MAX_PROTECTION],
        protection_len: 0,
    })
}

/// Parses `protection: (0, 3019, 4939, 4939, 4939)`.
fn protection(line: &str, zone: &mut Zone, n: usize) -> Result<(), ParseError> {
    let bad = || {
        ParseError::new(
            n,
            format!("expected `protection: (N, …)`, found {}", excerpt(line)),
        )
    };
    let list = line
        .trim()
        .strip_prefix("protection:")
        .map(str::trim)
        .and_then(|l| l.strip_prefix('('))
        .and_then(|l| l.strip_suffix(')'))
        .ok_or_else(bad)?;
    zone.protection_len = 0;
    for tok in list.split(',') {
        let slot = zone
            .protection
            .get_mut(zone.protection_len)
            .ok_or_else(|| {
                ParseError::new(n, format!("more than {MAX_PROTECTION} protection entries"))
            })?;
        *slot = u64_field(tok.trim(), n, "protection")?;
        zone.protection_len += 1;
    }
    Ok(())
}

/// `FIELDS[NODE_COUNTERS]`: the per-node counters (nr_active_anon ..
/// nr_written), written only with [`ALL`].
const NODE_COUNTERS: std::ops::Range<usize> = 8..28;
/// `FIELDS[PRESENT]`: `present`, 0 in an empty zone.
const PRESENT: usize = 6;

pub struct ZoneInfoCollector {
    file: SourceFile,
    /// [`ALL`]: node_exporter's every field of every zone.
    all: bool,
    /// Kept empty between scrapes; only its allocation is reused.
    zones: Vec<Zone<'static>>,
}

pub fn build(s: &Settings) -> Box<dyn Collector> {
    Box::new(ZoneInfoCollector {
        file: SourceFile::new(&s.procfs, "zoneinfo"),
        all: s.switch(ALL),
        zones: Vec::new(),
    })
}

impl Collector for ZoneInfoCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        let text = match self.file.read()? {
            Read::Text(t) => t,
            Read::Absent => return Ok(()),
        };
        let mut zones = recycle(std::mem::take(&mut self.zones));
        let parsed = parse_into(text, &mut zones);
        if parsed.is_ok() {
            encode(&zones, self.all, enc);
        }
        self.zones = recycle(zones);
        parsed.map_err(|e| self.file.parse_error(e))
    }
}

/// Writes one family per field, with a sample for each zone that has it:
/// every field of every zone when `all`, else only populated zones and no
/// per-node counters (see the module documentation).
fn encode(zones: &[Zone], all: bool, enc: &mut Encoder) {
    let written = |z: &Zone| all || z.values[PRESENT] != Some(0);
    for (i, f) in FIELDS.iter().enumerate() {
        if !all && NODE_COUNTERS.contains(&i) {
            continue;
        }
        if zones.iter().all(|z| !written(z) || z.values[i].is_none()) {
            continue;
        }
        enc.family(&f.desc);
        for z in zones.iter().filter(|z| written(z)) {
            if let Some(v) = z.values[i] {
                enc.sample(&f.desc, &[("node", z.node), ("zone", z.zone)], v);
            }
        }
    }
    let entries = zones
        .iter()
        .filter(|z| written(z))
        .map(|z| z.protection_len)
        .max()
        .unwrap_or(0);
    for (i, desc) in PROTECTION.iter().enumerate().take(entries) {
        enc.family(desc);
        for z in zones.iter().filter(|z| written(z)) {
            if let Some(&v) = z.protection().get(i) {
                enc.sample(desc, &[("node", z.node), ("zone", z.zone)], v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scrape::exposition::Format;

    const FIXTURE: &str = include_str!("../../tests/fixtures/proc/zoneinfo");
    const LARGE: &str = include_str!("../../tests/fixtures/large/zoneinfo");

    fn parse(s: &str) -> Result<Vec<Zone<'_>>, ParseError> {
        let mut zones = Vec::new();
        parse_into(s, &mut zones).map(|()| zones)
    }

    fn render(s: &str) -> Result<String, ParseError> {
        let zones = parse(s)?;
        let mut buf = Vec::new();
        encode(
            &zones,
            true,
            &mut Encoder::new(&mut buf, Format::PrometheusText),
        );
        Ok(String::from_utf8(buf).unwrap())
    }

    const ZONE: &str = "Node 0, zone   Normal\n  pages free     5\n        min      1\n        low      2\n        high     3\n        protection: (0, 0)\n      nr_free_pages 5\n";

    #[test]
    fn the_default_leaves_out_empty_zones_and_node_counters() {
        assert_eq!(FIELDS[PRESENT].key, "present");
        assert_eq!(FIELDS[NODE_COUNTERS.start].key, "nr_active_anon");
        assert_eq!(FIELDS[NODE_COUNTERS.end - 1].key, "nr_written");
        let zones = parse(FIXTURE).unwrap();
        let mut buf = Vec::new();
        encode(
            &zones,
            false,
            &mut Encoder::new(&mut buf, Format::PrometheusText),
        );
        let lean = String::from_utf8(buf).unwrap();
        let full = render(FIXTURE).unwrap();
        let samples = |t: &str| t.lines().filter(|l| !l.starts_with('#')).count();
        assert!(samples(&lean) < samples(&full), "{lean}");
        // Every default sample is the full output's, and what the rules
        // read is all there.
        for l in lean.lines().filter(|l| !l.starts_with('#')) {
            assert!(full.lines().any(|f| f == l), "{l}");
        }
        for l in full.lines().filter(|l| !l.starts_with('#')) {
            let rules_read = [
                "nr_free_pages{",
                "min_pages{",
                "low_pages{",
                "high_pages{",
                "managed_pages{",
            ]
            .iter()
            .any(|f| l.starts_with(&format!("node_zoneinfo_{f}")));
            let empty = zones
                .iter()
                .filter(|z| z.get("present") == Some(0))
                .any(|z| l.contains(&format!("zone=\"{}\"", z.zone)));
            if rules_read && !empty {
                assert!(lean.contains(l), "{l}");
            }
        }
        assert!(
            !lean.contains("zone=\"Movable\""),
            "the fixture's Movable zone is empty"
        );
        assert!(!lean.contains("node_zoneinfo_nr_dirty_pages"));
    }

    #[test]
    fn field_index_finds_every_key() {
        for (i, f) in FIELDS.iter().enumerate() {
            assert_eq!(field_index(f.key), Some(i), "{}", f.key);
        }
        for other in ["", "Node", "nr_free", "nr_free_pagesX", "high:", "pages"] {
            assert_eq!(field_index(other), None, "{other}");
        }
        assert_eq!(field_index(&"n".repeat(100)), None);
    }

    #[test]
    fn parses_fixture() {
        let zones = parse(FIXTURE).unwrap();
        let names: Vec<_> = zones.iter().map(|z| (z.node, z.zone)).collect();
        assert_eq!(
            names,
            [
                ("0", "DMA"),
                ("0", "DMA32"),
                ("0", "Normal"),
                ("0", "Movable"),
                ("0", "Device")
            ]
        );
        let normal = &zones[2];
        assert_eq!(normal.get("nr_free_pages"), Some(91292));
        assert_eq!(normal.get("min"), Some(6548));
        assert_eq!(normal.get("low"), Some(8185));
        assert_eq!(normal.get("high"), Some(9822));
        assert_eq!(normal.get("spanned"), Some(5505024));
        assert_eq!(normal.get("managed"), Some(491520));
        assert_eq!(normal.get("numa_hit"), Some(4768551));
        assert_eq!(normal.protection(), [0, 0, 0, 0, 0]);
        // The per-pageset `high:` is not the watermark.
        assert_eq!(zones[1].get("high"), Some(15444));
        // Per-node counters belong to the node's first zone, as in procfs.
        assert_eq!(zones[0].get("nr_inactive_anon"), Some(585));
        assert_eq!(zones[0].get("nr_dirtied"), Some(538894));
        assert_eq!(normal.get("nr_inactive_anon"), None);
        assert_eq!(zones[0].protection(), [0, 3019, 4939, 4939, 4939]);
        // An empty zone has watermarks but no free-page counter.
        let movable = &zones[3];
        assert_eq!(movable.get("present"), Some(0));
        assert_eq!(movable.get("low"), Some(32));
        assert_eq!(movable.get("nr_free_pages"), None);
    }

    #[test]
    fn parses_large_host_with_four_nodes() {
        let zones = parse(LARGE).unwrap();
        assert_eq!(zones.len(), 10);
        let node3: Vec<_> = zones.iter().filter(|z| z.node == "3").collect();
        assert_eq!(node3.len(), 2);
        assert!(node3[0].get("nr_free_pages").is_some());
    }

    /// With `--collector.zoneinfo.all`: node_exporter's every field of
    /// every zone.
    #[test]
    fn collector_output_on_fixture() {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/proc");
        let mut s = Settings::with_roots(root, "/nonexistent");
        s.set(ALL, Some(crate::collectors::FlagValue::Bool(true)));
        let mut c = build(&s);
        let mut buf = Vec::new();
        c.collect(&mut Encoder::new(&mut buf, Format::PrometheusText))
            .unwrap();
        let out = String::from_utf8(buf).unwrap();
        assert!(out.starts_with(
            "# HELP node_zoneinfo_nr_free_pages Total number of free pages in the zone\n\
             # TYPE node_zoneinfo_nr_free_pages gauge\n\
             node_zoneinfo_nr_free_pages{node=\"0\",zone=\"DMA\"} 3840\n\
             node_zoneinfo_nr_free_pages{node=\"0\",zone=\"DMA32\"} 772915\n\
             node_zoneinfo_nr_free_pages{node=\"0\",zone=\"Normal\"} 91292\n\
             # HELP node_zoneinfo_min_pages Zone watermark pages_min\n\
             # TYPE node_zoneinfo_min_pages gauge\n\
             node_zoneinfo_min_pages{node=\"0\",zone=\"DMA\"} 51\n\
             node_zoneinfo_min_pages{node=\"0\",zone=\"DMA32\"} 10296\n\
             node_zoneinfo_min_pages{node=\"0\",zone=\"Normal\"} 6548\n\
             node_zoneinfo_min_pages{node=\"0\",zone=\"Movable\"} 32\n\
             node_zoneinfo_min_pages{node=\"0\",zone=\"Device\"} 0\n\
             # HELP node_zoneinfo_low_pages Zone watermark pages_low\n"
        ));
        for line in [
            "node_zoneinfo_low_pages{node=\"0\",zone=\"Normal\"} 8185\n",
            "node_zoneinfo_high_pages{node=\"0\",zone=\"Normal\"} 9822\n",
            "node_zoneinfo_present_pages{node=\"0\",zone=\"Movable\"} 0\n",
            "node_zoneinfo_managed_pages{node=\"0\",zone=\"DMA32\"} 772915\n",
            "node_zoneinfo_spanned_pages{node=\"0\",zone=\"Normal\"} 5505024\n",
            "node_zoneinfo_nr_inactive_anon_pages{node=\"0\",zone=\"DMA\"} 585\n",
            "node_zoneinfo_nr_kernel_stacks{node=\"0\",zone=\"DMA\"} 1272\n",
            "# TYPE node_zoneinfo_nr_dirtied_total counter\n",
            "node_zoneinfo_nr_dirtied_total{node=\"0\",zone=\"DMA\"} 538894\n",
            "node_zoneinfo_numa_hit_total{node=\"0\",zone=\"Normal\"} 4768551\n",
            "# HELP node_zoneinfo_protection_0 Protection array 0. field\n",
            "node_zoneinfo_protection_1{node=\"0\",zone=\"DMA\"} 3019\n",
            "node_zoneinfo_protection_4{node=\"0\",zone=\"Device\"} 0\n",
        ] {
            assert!(out.contains(line), "missing {line:?}");
        }
        // Gone from this kernel: no family at all.
        assert!(!out.contains("scanned_pages"));
        assert!(!out.contains("nr_mlock_stack"));
        assert!(!out.contains("protection_5"));
        // Every family's samples are contiguous (one HELP per family).
        let helps = out.matches("# HELP ").count();
        let mut names: Vec<_> = out
            .lines()
            .filter_map(|l| l.strip_prefix("# HELP "))
            .collect();
        names.dedup();
        assert_eq!(names.len(), helps);
        assert_eq!(helps, 32 + 5);
    }

    #[test]
    fn vec_allocation_is_reused() {
        let mut zones = Vec::new();
        parse_into(FIXTURE, &mut zones).unwrap();
        let (ptr, cap) = (zones.as_ptr() as usize, zones.capacity());
        let again: Vec<Zone<'static>> = recycle(zones);
        assert_eq!((again.as_ptr() as usize, again.capacity()), (ptr, cap));
        assert!(again.is_empty());
    }

    #[test]
    fn empty_and_garbage() {
        assert!(parse("").is_err());
        assert!(parse("\n\n").is_err());
        let e = parse("\u{1}garbage here\n%%% not a kernel file %%%\n").unwrap_err();
        assert_eq!(e.line, 1);
        assert!(e.msg.contains("expected `Node N, zone NAME`"), "{e}");
        assert_eq!(parse("Node x, zone Normal\n").unwrap_err().line, 1);
        assert!(parse("Node 0 zone Normal\n").is_err());
        assert!(parse("Node 0, zone Nor-mal\n").is_err());
        assert!(parse("Node 0, area Normal\n").is_err());
    }

    #[test]
    fn truncated() {
        // Cut in the middle of a watermark line of the second zone.
        let at = FIXTURE.find("min      10296").unwrap() + 4;
        let e = parse(&FIXTURE[..at]).unwrap_err();
        assert!(e.msg.contains("expected `min value`"), "{e}");
        // Cut inside a protection tuple.
        let at = FIXTURE.find("(0, 3019").unwrap() + 5;
        assert!(parse(&FIXTURE[..at]).is_err());
        // Cut at a line boundary: what is there is valid.
        let at = FIXTURE.find("Node 0, zone   Normal").unwrap();
        assert_eq!(parse(&FIXTURE[..at]).unwrap().len(), 2);
        // Cut inside the header.
        assert!(parse(&FIXTURE[..FIXTURE.find("zone").unwrap()]).is_err());
    }

    #[test]
    fn missing_and_extra_columns() {
        let e = parse(&ZONE.replace("low      2", "low")).unwrap_err();
        assert_eq!(e.line, 4);
        let e = parse(&ZONE.replace("low      2", "low 2 7")).unwrap_err();
        assert!(e.msg.contains("expected `low value`"), "{e}");
        assert!(parse(&ZONE.replace("Normal", "Normal 7")).is_err());
        assert!(parse(&ZONE.replace("(0, 0)", "(0, , 0)")).is_err());
        assert!(parse(&ZONE.replace("(0, 0)", "0, 0")).is_err());
        assert!(parse(&ZONE.replace("(0, 0)", "()")).is_err());
        let nine = "(0, 1, 2, 3, 4, 5, 6, 7, 8)";
        let e = parse(&ZONE.replace("(0, 0)", nine)).unwrap_err();
        assert!(e.msg.contains("more than 8 protection entries"), "{e}");
        // Lines this parser does not export may change shape freely.
        assert!(parse(&ZONE.replace("pages free     5", "pages free 5 7")).is_ok());
    }

    #[test]
    fn u64_overflow() {
        let e = parse(&ZONE.replace("min      1", "min 18446744073709551616")).unwrap_err();
        assert!(e.msg.contains("min"), "{e}");
        let e = parse(&ZONE.replace("(0, 0)", "(0, 18446744073709551616)")).unwrap_err();
        assert!(e.msg.contains("protection"), "{e}");
        assert!(parse("Node 18446744073709551616, zone DMA\n").is_err());
    }

    #[test]
    fn duplicate_zone_is_an_error() {
        let e = parse(&format!("{ZONE}{ZONE}")).unwrap_err();
        assert_eq!(e.line, 8);
        assert!(e.msg.contains("appears twice"), "{e}");
        let other_node = ZONE.replace("Node 0", "Node 1");
        assert_eq!(parse(&format!("{ZONE}{other_node}")).unwrap().len(), 2);
    }

    #[test]
    fn repeated_key_keeps_last() {
        let text = format!("{ZONE}        min 9\n");
        assert_eq!(parse(&text).unwrap()[0].get("min"), Some(9));
    }

    #[test]
    fn zone_without_protection_gets_no_protection_series() {
        let two = format!(
            "{ZONE}{}",
            ZONE.replace("Normal", "Movable")
                .replace("        protection: (0, 0)\n", "")
        );
        let out = render(&two).unwrap();
        assert!(out.contains("node_zoneinfo_protection_1{node=\"0\",zone=\"Normal\"} 0\n"));
        assert!(!out.contains("protection_0{node=\"0\",zone=\"Movable\"}"));
    }
}
