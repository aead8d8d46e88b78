//! /proc/vmstat → `node_vmstat_<field>` (untyped, as node_exporter).
//!
//! The exported fields are node_exporter's default `--collector.vmstat.fields`
//! regex, `^(oom_kill|pgpg|pswp|pg.*fault).*`, plus the reclaim and
//! compaction counters the USE method needs for memory saturation: every
//! `pgscan*`, `pgsteal*`, `allocstall*` and `compact_stall`; and
//! `drop_pagecache` and `drop_slab`, how many times someone wrote to
//! /proc/sys/vm/drop_caches: the cause of a page cache that empties at
//! once (and of the slow reads after it). Each keeps node_exporter's name
//! and type (`node_vmstat_<field>`, untyped), as node_exporter writes it
//! when its `--collector.vmstat.fields` regex includes the field.
//!
//! Selection runs no regex: [`selected`] is a few prefix checks, and the
//! collector caches its decision (and the family's name and help) per line
//! position, so a steady-state scrape only compares each field name with the
//! one seen at that position last time. So the scrape path encodes while it
//! reads and does not call [`parse_into`]; it shares its line parser, and
//! the registry's tests hold it to rejecting whatever `parse_into` rejects.

use crate::collectors::{Parser, Settings, Source, Spec};
use crate::kernel::error::{CollectError, ParseError, excerpt};
use crate::kernel::parse::{after_key, fields, is_blank, lines, single_field, u64_field};
use crate::kernel::source::{Read, SourceFile};
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Encoder, Format, MetricType, help_is_plain};

pub const SPEC: Spec = Spec {
    name: "vmstat",
    default_enabled: true,
    help: "Paging, reclaim and compaction counters from /proc/vmstat",
    flags: &[],
    build,
    sources: &[Source::proc("vmstat", "vmstat")],
    parsers: &[Parser::numeric("vmstat", check)],
};

/// The registry's entry point: [`parse_into`], then the scrape path itself
/// ([`encode`], into a scratch buffer) with a fresh cache and again with
/// the cache that first pass filled.
fn check(text: &str) -> Result<(), ParseError> {
    parse_into(text, &mut Vec::new())?;
    let mut selection = Selection::default();
    let mut buf = Vec::new();
    for _ in 0..2 {
        buf.clear();
        encode(
            text,
            &mut selection,
            &mut Encoder::new(&mut buf, Format::PrometheusText),
        )?;
    }
    Ok(())
}

/// Whether a field is exported; the prefix form of node_exporter's regex
/// plus the reclaim counters (see the module docs).
pub fn selected(field: &str) -> bool {
    const PREFIXES: [&str; 6] = [
        "oom_kill",
        "pgpg",
        "pswp",
        "pgscan",
        "pgsteal",
        "allocstall",
    ];
    PREFIXES.iter().any(|p| field.starts_with(p))
        // `^pg.*fault`: "fault" anywhere after the leading "pg".
        || field.strip_prefix("pg").is_some_and(|rest| rest.contains("fault"))
        || matches!(field, "compact_stall" | "drop_pagecache" | "drop_slab")
}

/// One `name value` line.
#[derive(Debug, PartialEq, Eq)]
pub struct Field<'a> {
    /// 1-based line number, for errors found after parsing (duplicates).
    pub line: usize,
    pub name: &'a str,
    pub value: u64,
}

/// Parses /proc/vmstat into `out`, one [`Field`] per non-empty line. Each
/// line must be exactly `name value`, with a name usable in a metric name,
/// and there must be at least one.
pub fn parse_into<'t>(s: &'t str, out: &mut Vec<Field<'t>>) -> Result<(), ParseError> {
    out.clear();
    for (n, l) in numbered_lines(s) {
        out.push(parse_line(l, n)?);
    }
    if out.is_empty() {
        return Err(ParseError::new(1, "empty file"));
    }
    Ok(())
}

/// The non-empty lines with their 1-based line numbers.
fn numbered_lines(s: &str) -> impl Iterator<Item = (usize, &str)> {
    lines(s)
        .enumerate()
        .filter(|(_, l)| !is_blank(l))
        .map(|(i, l)| (i + 1, l))
}

fn parse_line(line: &str, n: usize) -> Result<Field<'_>, ParseError> {
    let mut tokens = fields(line);
    let (Some(name), Some(value), None) = (tokens.next(), tokens.next(), tokens.next()) else {
        return Err(ParseError::new(
            n,
            format!("expected `name value`, found {}", excerpt(line)),
        ));
    };
    if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return Err(ParseError::new(n, format!("invalid field name {name:?}")));
    }
    Ok(Field {
        line: n,
        name,
        value: u64_field(value, n, name)?,
    })
}

/// Exported fields the collector will remember. The kernel has a few
/// dozen matching fields; the cap only stops a pathological file from
/// growing the cache without bound.
const MAX_NAMES: usize = 1024;

/// An exported field's family strings, built once when the field is first
/// seen at a position and reused on every scrape after.
struct Family {
    name: Box<str>,
    help: Box<str>,
    help_plain: bool,
}

/// What the collector decided for the field at one line position.
struct Slot {
    name: Box<str>,
    line: usize,
    family: Option<Family>,
}

/// The per-position selection cache.
#[derive(Default)]
struct Selection {
    slots: Vec<Slot>,
    /// How many slots hold a [`Family`].
    exported: usize,
    /// Whether the current slots were checked for duplicate names.
    checked: bool,
}

impl Selection {
    /// The family for the field at `pos`, or `None` if it is not exported.
    fn family_at(&mut self, pos: usize, f: &Field) -> Result<Option<&Family>, ParseError> {
        let cached = self.slots.get(pos).is_some_and(|s| *s.name == *f.name);
        if !cached {
            let family = if selected(f.name) {
                if self.exported >= MAX_NAMES {
                    return Err(ParseError::new(
                        f.line,
                        format!(
                            "more than {MAX_NAMES} exported vmstat fields; not exporting {:?}",
                            f.name
                        ),
                    ));
                }
                let help = format!("/proc/vmstat information field {}.", f.name);
                Some(Family {
                    name: format!("node_vmstat_{}", f.name).into(),
                    help_plain: help_is_plain(&help),
                    help: help.into(),
                })
            } else {
                None
            };
            let slot = Slot {
                name: f.name.into(),
                line: f.line,
                family,
            };
            match self.slots.get_mut(pos) {
                Some(s) => *s = slot,
                None => self.slots.push(slot),
            }
            self.exported = self.slots.iter().filter(|s| s.family.is_some()).count();
            self.checked = false;
        }
        let slot = &mut self.slots[pos];
        slot.line = f.line;
        Ok(slot.family.as_ref())
    }

    /// The name and value token of a line that starts with the name
    /// cached at `pos`. That name passed [`parse_line`]'s checks when it
    /// was cached, so only the value is left to parse; any other line
    /// (`None`) goes through [`parse_line`].
    fn cached_value<'a>(&self, pos: usize, line: &'a str) -> Option<(&'a str, &'a str)> {
        let name = &self.slots.get(pos)?.name;
        let value = single_field(after_key(line, name)?)?;
        Some((&line[..name.len()], value))
    }

    /// Forgets positions past the end of the file and, after any change,
    /// rejects a field exported twice (which would make a duplicate series).
    fn finish(&mut self, len: usize) -> Result<(), ParseError> {
        if self.slots.len() != len {
            self.slots.truncate(len);
            self.exported = self.slots.iter().filter(|s| s.family.is_some()).count();
            self.checked = false;
        }
        if self.checked {
            return Ok(());
        }
        let exported = || self.slots.iter().filter(|s| s.family.is_some());
        for (i, s) in exported().enumerate() {
            if exported().take(i).any(|earlier| earlier.name == s.name) {
                return Err(ParseError::new(
                    s.line,
                    format!("duplicate field {:?}", s.name),
                ));
            }
        }
        self.checked = true;
        Ok(())
    }
}

pub struct VmStatCollector {
    file: SourceFile,
    selection: Selection,
}

pub fn build(s: &Settings) -> Box<dyn Collector> {
    Box::new(VmStatCollector {
        file: SourceFile::new(&s.procfs, "vmstat"),
        selection: Selection::default(),
    })
}

/// Encodes the selected fields while parsing; on an error the scraper drops
/// this collector's partial output.
fn encode(text: &str, selection: &mut Selection, enc: &mut Encoder) -> Result<(), ParseError> {
    let mut len = 0;
    for (pos, (n, line)) in numbered_lines(text).enumerate() {
        let field = match selection.cached_value(pos, line) {
            Some((name, value)) => Field {
                line: n,
                name,
                value: u64_field(value, n, name)?,
            },
            None => parse_line(line, n)?,
        };
        if let Some(family) = selection.family_at(pos, &field)? {
            enc.family_named(
                &family.name,
                &family.help,
                family.help_plain,
                MetricType::Untyped,
            );
            enc.sample_named(&family.name, "", &[], None, field.value.into());
        }
        len = pos + 1;
    }
    if len == 0 {
        return Err(ParseError::new(1, "empty file"));
    }
    selection.finish(len)
}

impl Collector for VmStatCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        let text = match self.file.read()? {
            Read::Text(t) => t,
            Read::Absent => return Ok(()),
        };
        encode(text, &mut self.selection, enc).map_err(|e| self.file.parse_error(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scrape::exposition::Format;
    use proptest::prelude::*;

    const FIXTURE: &str = include_str!("../../tests/fixtures/proc/vmstat");

    fn render(text: &str, selection: &mut Selection) -> Result<String, ParseError> {
        let mut buf = Vec::new();
        encode(
            text,
            selection,
            &mut Encoder::new(&mut buf, Format::PrometheusText),
        )?;
        Ok(String::from_utf8(buf).unwrap())
    }

    fn samples(expo: &str) -> Vec<&str> {
        expo.lines().filter(|l| !l.starts_with('#')).collect()
    }

    #[test]
    fn parses_fixture() {
        let mut fields = Vec::new();
        parse_into(FIXTURE, &mut fields).unwrap();
        assert_eq!(fields.len(), FIXTURE.lines().count());
        assert_eq!(
            fields[0],
            Field {
                line: 1,
                name: "nr_free_pages",
                value: 868110
            }
        );
        assert!(fields.contains(&Field {
            line: 96,
            name: "pgfault",
            value: 5068069
        }));
    }

    #[test]
    fn selection_matches_the_regex_form() {
        for yes in [
            "pgpgin",
            "pswpout",
            "pgfault",
            "pgmajfault",
            "pgmajfault_f",
            "oom_kill",
            "pgscan_direct_throttle",
            "pgsteal_anon",
            "allocstall_movable",
            "compact_stall",
            "drop_pagecache",
            "drop_slab",
        ] {
            assert!(selected(yes), "{yes}");
        }
        for no in [
            "pgfree",
            "pgpromote_success",
            "thp_fault_alloc",
            "numa_hint_faults",
            "compact_stall_x",
            "compact_fail",
            "drop_pagecache_x",
            "nr_free_pages",
            "pg",
            "fault",
            "",
        ] {
            assert!(!selected(no), "{no}");
        }
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
            "# HELP node_vmstat_pgpgin /proc/vmstat information field pgpgin.\n\
             # TYPE node_vmstat_pgpgin untyped\n\
             node_vmstat_pgpgin 1741909\n"
        ));
        assert_eq!(
            samples(&out),
            [
                "node_vmstat_pgpgin 1741909",
                "node_vmstat_pgpgout 1265644",
                "node_vmstat_pswpin 0",
                "node_vmstat_pswpout 0",
                "node_vmstat_allocstall_dma 0",
                "node_vmstat_allocstall_dma32 0",
                "node_vmstat_allocstall_normal 0",
                "node_vmstat_allocstall_movable 0",
                "node_vmstat_allocstall_device 0",
                "node_vmstat_pgfault 5068069",
                "node_vmstat_pgmajfault 1253",
                "node_vmstat_pgsteal_kswapd 0",
                "node_vmstat_pgsteal_direct 0",
                "node_vmstat_pgsteal_khugepaged 0",
                "node_vmstat_pgsteal_proactive 0",
                "node_vmstat_pgscan_kswapd 0",
                "node_vmstat_pgscan_direct 0",
                "node_vmstat_pgscan_khugepaged 0",
                "node_vmstat_pgscan_proactive 0",
                "node_vmstat_pgscan_direct_throttle 0",
                "node_vmstat_pgscan_anon 0",
                "node_vmstat_pgscan_file 0",
                "node_vmstat_pgsteal_anon 0",
                "node_vmstat_pgsteal_file 0",
                "node_vmstat_drop_pagecache 1",
                "node_vmstat_drop_slab 2",
                "node_vmstat_oom_kill 0",
                "node_vmstat_compact_stall 0",
            ]
        );
        assert_eq!(out.matches("# TYPE ").count(), 28);
    }

    #[test]
    fn cache_follows_changes_in_the_field_sequence() {
        let mut sel = Selection::default();
        let a = render("pgfault 1\nnr_dirty 2\npgmajfault 3\n", &mut sel).unwrap();
        assert_eq!(
            samples(&a),
            ["node_vmstat_pgfault 1", "node_vmstat_pgmajfault 3"]
        );
        // Same sequence: served from the cache.
        let a2 = render("pgfault 4\nnr_dirty 5\npgmajfault 6\n", &mut sel).unwrap();
        assert_eq!(
            samples(&a2),
            ["node_vmstat_pgfault 4", "node_vmstat_pgmajfault 6"]
        );
        // A field appears in the middle, one disappears, the file shrinks.
        let b = render("pgfault 7\noom_kill 8\n", &mut sel).unwrap();
        assert_eq!(
            samples(&b),
            ["node_vmstat_pgfault 7", "node_vmstat_oom_kill 8"]
        );
        assert_eq!(sel.slots.len(), 2);
        let c = render("nr_dirty 1\npgpgin 2\npswpin 3\n", &mut sel).unwrap();
        assert_eq!(
            samples(&c),
            ["node_vmstat_pgpgin 2", "node_vmstat_pswpin 3"]
        );
        // Only the exported fields of the current sequence hold families.
        assert_eq!(sel.exported, 2);
    }

    #[test]
    fn cached_lines_fail_like_new_ones() {
        let mut cached = Selection::default();
        render("nr_free_pages 1\npgfault 2\n", &mut cached).unwrap();
        for line in [
            "pgfault x",
            "pgfault -1",
            "pgfault +5",
            "pgfault 18446744073709551616",
            "pgfault",
            "pgfault 1 2",
            "pgfault\t3",
            "pgfaults 3",
        ] {
            let text = format!("nr_free_pages 1\n{line}\n");
            let fresh = render(&text, &mut Selection::default());
            assert_eq!(render(&text, &mut cached), fresh, "{line:?}");
            render("nr_free_pages 1\npgfault 2\n", &mut cached).unwrap();
        }
    }

    #[test]
    fn duplicate_exported_field_is_an_error_every_time() {
        let mut sel = Selection::default();
        render("pgfault 1\npgpgin 2\n", &mut sel).unwrap();
        let dup = "pgfault 1\npgpgin 2\npgfault 3\n";
        for _ in 0..2 {
            let e = render(dup, &mut sel).unwrap_err();
            assert_eq!(e.line, 3);
            assert!(e.msg.contains("duplicate field \"pgfault\""), "{e}");
        }
        // Unexported duplicates make no series, so they are tolerated.
        render("nr_dirty 1\nnr_dirty 2\n", &mut sel).unwrap();
    }

    #[test]
    fn empty_and_garbage() {
        let mut sel = Selection::default();
        assert!(render("", &mut sel).unwrap_err().msg.contains("empty"));
        assert!(render("\n \n", &mut sel).is_err());
        assert_eq!(render("garbage here\n", &mut sel).unwrap_err().line, 1);
        let e = render("pgfault 1\n\u{1}garbage 2\n", &mut sel).unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.msg.contains("invalid field name"), "{e}");
        assert!(render("pg-fault 1\n", &mut sel).is_err());
    }

    #[test]
    fn truncated() {
        let mut sel = Selection::default();
        let cut = &FIXTURE[..FIXTURE.find("pgfault").unwrap() + 7];
        let e = render(cut, &mut sel).unwrap_err();
        assert_eq!(e.line, 96);
        assert!(e.msg.contains("expected `name value`"), "{e}");
        let cut = &FIXTURE[..FIXTURE.find("pgmajfault").unwrap() - 1];
        assert!(render(cut, &mut sel).is_ok());
    }

    #[test]
    fn missing_and_extra_columns() {
        let mut sel = Selection::default();
        assert!(render("pgfault\n", &mut sel).is_err());
        let e = render("pgfault 1 2\n", &mut sel).unwrap_err();
        assert!(e.msg.contains("expected `name value`"), "{e}");
        assert!(render("pgfault -1\n", &mut sel).is_err());
    }

    #[test]
    fn u64_overflow() {
        let mut sel = Selection::default();
        let e = render("nr_free_pages 18446744073709551616\n", &mut sel).unwrap_err();
        assert!(e.msg.contains("nr_free_pages"), "{e}");
        let max = render("pgfault 18446744073709551615\n", &mut sel).unwrap();
        assert_eq!(samples(&max), ["node_vmstat_pgfault 18446744073709551615"]);
    }

    #[test]
    fn name_cache_is_bounded() {
        let mut sel = Selection::default();
        let many: String = (0..=MAX_NAMES).map(|i| format!("pgscan_{i} 1\n")).collect();
        let e = render(&many, &mut sel).unwrap_err();
        assert_eq!(e.line, MAX_NAMES + 1);
        assert_eq!(sel.exported, MAX_NAMES);
    }

    proptest! {
        #[test]
        fn selected_equals_the_regex(name in "(pg|oom_|ps|allocs|compact_|drop_)?[a-z_]{0,12}") {
            let re = regex::Regex::new(
                "^(oom_kill|pgpg|pswp|pg.*fault|pgscan|pgsteal|allocstall).*|^(compact_stall|drop_pagecache|drop_slab)$",
            ).unwrap();
            prop_assert_eq!(selected(&name), re.is_match(&name));
        }

        #[test]
        fn reused_selection_equals_a_fresh_one(
            files in proptest::collection::vec(
                proptest::collection::vec(("(pgfault|pgpgin|nr_dirty|oom_kill|pswpin)", 0u64..9), 0..6),
                1..5,
            )
        ) {
            let mut reused = Selection::default();
            for f in files {
                let text: String = f.iter().map(|(n, v)| format!("{n} {v}\n")).collect();
                let fresh = render(&text, &mut Selection::default());
                prop_assert_eq!(render(&text, &mut reused), fresh);
            }
        }
    }
}
