//! The /proc collectors and their registry.
//!
//! Every collector is one module that declares everything about itself in
//! one `pub const SPEC: Spec` (docs/adding-a-collector.md walks through
//! one): its name and default, its `--help` line and flags, how to build
//! it, the files it reads and the pure parsers that read them. [`ALL`]
//! lists the specs, one line per collector, and everything else iterates
//! it: `--help` and the flags (cli.rs), the daemon's start-up (main.rs),
//! the fuzz targets (fuzz/src/lib.rs), the mutation smoke test, the
//! malformed-input test and the property tests below.
//!
//! Parsers have one shape, `parse_into(text, &mut out) -> Result<(),
//! ParseError>`: the whole file is checked and written into `out`, which
//! the collector keeps and reuses across scrapes, before anything is
//! encoded (see [`Parser`]).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use regex::Regex;

use crate::kernel::error::ParseError;
use crate::kernel::proc_stat;
use crate::scrape::collector::Collector;

pub mod dynamic;
pub mod single_file;
pub mod sysfs;

/// Declares each collector module and lists its `SPEC` in [`ALL`], in the
/// same order: registering a collector is one line here.
macro_rules! registry {
    ($($module:ident),* $(,)?) => {
        $(pub mod $module;)*

        /// Every collector, in output order.
        pub const ALL: &[&Spec] = &[$(&$module::SPEC),*];
    };
}

registry! {
    cpu,
    cpufreq,
    stat,
    softirqs,
    loadavg,
    meminfo,
    vmstat,
    zoneinfo,
    pressure,
    cgroup,
    diskstats,
    netdev,
    netclass,
    arp,
    udp_queues,
    bonding,
    mdadm,
    netstat,
    sockstat,
    tcpsockets,
    softnet,
    conntrack,
    ipvs,
    schedstat,
    interrupts,
    uname,
    filefd,
    entropy,
    kernel_hung,
    time,
    timex,
    os,
    processes,
    filesystem,
    nfs,
    nfsd,
    xfs,
    zfs,
    btrfs,
    hwmon,
    thermal_zone,
    edac,
    nvme,
    powersupplyclass,
    selinux,
    dmi,
    watchdog,
    rapl,
    dmmultipath,
    infiniband,
    fibrechannel,
    tapestats,
    bcache,
    bcachefs,
    // Last: it checks its families against everything written before it.
    textfile,
}

pub fn find(name: &str) -> Option<&'static Spec> {
    ALL.iter().copied().find(|s| s.name == name)
}

/// Every parser of every collector, with the collector it belongs to.
pub fn parsers() -> impl Iterator<Item = (&'static Spec, &'static Parser)> {
    ALL.iter()
        .flat_map(|spec| spec.parsers.iter().map(move |p| (*spec, p)))
}

/// Everything about one collector, declared in its module as `pub const
/// SPEC` and registered by one line in the `registry!` list above.
pub struct Spec {
    /// `--collector.NAME`, and the `collector` label of
    /// `node_scrape_collector_*`.
    pub name: &'static str,
    pub default_enabled: bool,
    /// One line for `--help`.
    pub help: &'static str,
    /// The collector's own options, `--collector.NAME.*`.
    pub flags: &'static [Flag],
    pub build: Build,
    /// The files it reads. Tests corrupt each one in a copy of the fixture
    /// tree and feed its fixtures to the parser it names as seeds.
    pub sources: &'static [Source],
    /// Its pure parsers, one per file format.
    pub parsers: &'static [Parser],
}

/// How a registered collector is built. Building must not fail: a source
/// that cannot be read shows up as a failed scrape, not a startup error.
pub type Build = fn(&Settings) -> Box<dyn Collector>;

/// Which mount a [`Source`] is under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Root {
    /// `--path.procfs`; fixtures in exporter/tests/fixtures/{proc,large}.
    Procfs,
    /// `--path.sysfs`; fixtures in exporter/tests/fixtures/sys.
    Sysfs,
    /// `--collector.textfile.directory`; fixtures in
    /// exporter/tests/fixtures/textfile.
    Textfile,
    /// `--path.udev.data`; fixtures in exporter/tests/fixtures/udev.
    Udev,
    /// `--path.rootfs` (os-release); fixtures in exporter/tests/fixtures/rootfs.
    Rootfs,
}

impl Root {
    /// The fixture trees (under exporter/tests/fixtures) that hold this
    /// root's files, in the order a source's fixture is looked up.
    pub fn fixture_trees(self) -> &'static [&'static str] {
        match self {
            Root::Procfs => &["proc", "large"],
            Root::Sysfs => &["sys"],
            Root::Textfile => &["textfile"],
            Root::Udev => &["udev"],
            Root::Rootfs => &["rootfs"],
        }
    }
}

/// One file a collector reads.
pub struct Source {
    pub root: Root,
    /// Relative to the root, e.g. `net/dev`.
    pub path: &'static str,
    /// The [`Parser::name`] (of the same spec) that reads it.
    pub parser: &'static str,
    /// A [`FlagKind::Bool`] flag of the same spec without which the
    /// collector does not read this file (`collector.cpu.info` for
    /// /proc/cpuinfo). Tests that corrupt the file switch it on.
    pub read_with: Option<&'static str>,
}

impl Source {
    /// A file under `--path.procfs`.
    pub const fn proc(path: &'static str, parser: &'static str) -> Source {
        Source {
            root: Root::Procfs,
            path,
            parser,
            read_with: None,
        }
    }

    /// A file under `--path.sysfs`. A file that exists once per device
    /// (`cpuN`, `class/net/eth0/mtu`) is declared by one device of the
    /// fixture tree: the collector reads the same file of every device.
    pub const fn sys(path: &'static str, parser: &'static str) -> Source {
        Source {
            root: Root::Sysfs,
            ..Source::proc(path, parser)
        }
    }

    /// A file under `--path.rootfs`.
    pub const fn rootfs(path: &'static str, parser: &'static str) -> Source {
        Source {
            root: Root::Rootfs,
            ..Source::proc(path, parser)
        }
    }

    /// Read only while the Bool flag `flag` is on.
    pub const fn read_with(self, flag: &'static str) -> Source {
        Source {
            read_with: Some(flag),
            ..self
        }
    }

    /// A file in the udev database (`--path.udev.data`).
    pub const fn udev(path: &'static str, parser: &'static str) -> Source {
        Source {
            root: Root::Udev,
            ..Source::proc(path, parser)
        }
    }

    /// A file in a textfile directory.
    pub const fn textfile(path: &'static str, parser: &'static str) -> Source {
        Source {
            root: Root::Textfile,
            ..Source::proc(path, parser)
        }
    }
}

/// A pure parser, as the tests and fuzzers see it.
pub struct Parser {
    /// Unique over the registry: it names the fuzz target and its corpus
    /// directory (`fuzz/corpus/NAME`).
    pub name: &'static str,
    /// Parses a whole file the way the collector does and touches every
    /// part of the result the collector reads, so a lazy part is driven to
    /// the end; the fuzz entry point. Usually `parse_fresh` of the
    /// module's `parse_into`.
    pub check: fn(&str) -> Result<(), ParseError>,
    /// The format's values are numbers: a number past u64::MAX must be an
    /// error. False for free text (uname's sysctls).
    pub numeric: bool,
}

impl Parser {
    /// A parser of a format whose values are numbers.
    pub const fn numeric(name: &'static str, check: fn(&str) -> Result<(), ParseError>) -> Parser {
        Parser {
            name,
            check,
            numeric: true,
        }
    }

    /// A parser of free text.
    pub const fn text(name: &'static str, check: fn(&str) -> Result<(), ParseError>) -> Parser {
        Parser {
            name,
            check,
            numeric: false,
        }
    }
}

/// A collector option, `--collector.NAME.OPTION VALUE`. Parsed and checked
/// by cli.rs, so a bad value stops start-up with one line; the collector's
/// `build` reads it from [`Settings`].
pub struct Flag {
    /// The whole flag without dashes: `collector.NAME.OPTION`.
    pub name: &'static str,
    pub help: &'static str,
    pub default: Option<&'static str>,
    pub kind: FlagKind,
    /// Another flag of the same collector that cannot be given with this one.
    pub conflicts_with: Option<&'static str>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlagKind {
    /// A regular expression, compiled once when the flag is parsed.
    Regex,
    /// Any string.
    Text,
    /// Any string, repeatable: every value given is kept, in order.
    TextList,
    /// A switch, kingpin's bool flag: `--NAME` sets it, `--no-NAME`
    /// clears it; `default` is `"true"` or `"false"`.
    Bool,
    /// A positive duration in Go's syntax (`5s`, `500ms`, `1m30s`), as
    /// node_exporter's duration flags take it.
    Duration,
    /// A signed integer, as node_exporter's (kingpin's) `Int` flags take it.
    Integer,
    /// A comma-separated list of names from this set (empty items
    /// ignored), kept as a [`FlagValue::TextList`] in the set's order, each
    /// once: node_exporter's `--collector.ipvs.backend-labels`.
    Subset(&'static [&'static str]),
}

/// A flag's parsed value.
#[derive(Clone, Debug)]
pub enum FlagValue {
    Regex(Regex),
    Text(String),
    TextList(Vec<String>),
    Bool(bool),
    Duration(Duration),
    Integer(i64),
}

impl FlagValue {
    /// Parses `raw` as `kind`; the error is one line.
    pub fn parse(kind: FlagKind, raw: &str) -> Result<FlagValue, String> {
        match kind {
            FlagKind::Text => Ok(FlagValue::Text(raw.to_string())),
            FlagKind::TextList => Ok(FlagValue::TextList(vec![raw.to_string()])),
            FlagKind::Bool => match raw {
                "true" => Ok(FlagValue::Bool(true)),
                "false" => Ok(FlagValue::Bool(false)),
                _ => Err(format!("{raw:?} is not true or false")),
            },
            FlagKind::Duration => go_duration(raw).map(FlagValue::Duration),
            FlagKind::Integer => raw
                .parse::<i64>()
                .map(FlagValue::Integer)
                .map_err(|e| format!("{raw:?} is not an integer: {e}")),
            FlagKind::Subset(allowed) => subset(allowed, raw).map(FlagValue::TextList),
            FlagKind::Regex => Regex::new(raw).map(FlagValue::Regex).map_err(|e| {
                // regex's message spans lines (pattern, caret, cause); keep the cause.
                e.to_string()
                    .lines()
                    .last()
                    .unwrap_or("invalid regex")
                    .trim()
                    .to_string()
            }),
        }
    }
}

/// The names of the comma-separated `raw` in `allowed`'s order; an unknown
/// name is an error that lists every unknown one.
fn subset(allowed: &[&str], raw: &str) -> Result<Vec<String>, String> {
    let given: Vec<&str> = raw.split(',').filter(|s| !s.is_empty()).collect();
    let mut unknown: Vec<&str> = given
        .iter()
        .copied()
        .filter(|g| !allowed.contains(g))
        .collect();
    if !unknown.is_empty() {
        unknown.sort_unstable();
        unknown.dedup();
        return Err(format!(
            "unknown name(s) {:?}; expected a comma-separated list of {}",
            unknown.join(", "),
            allowed.join(",")
        ));
    }
    Ok(allowed
        .iter()
        .filter(|a| given.contains(a))
        .map(|a| a.to_string())
        .collect())
}

/// A duration as Go's `time.ParseDuration` reads it: one or more decimal
/// numbers, each with a unit (`ns`, `us`/`µs`, `ms`, `s`, `m`, `h`), such as
/// `5s`, `1.5s` or `1m30s`. It must be positive (a zero or negative timeout
/// means nothing sensible here) and at most a day.
pub fn go_duration(raw: &str) -> Result<Duration, String> {
    let bad = || format!("{raw:?} is not a duration like 5s, 500ms or 1m30s");
    let mut rest = raw;
    let mut total = 0f64;
    if rest.is_empty() {
        return Err(bad());
    }
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        let number: f64 = rest[..number_len].parse().map_err(|_| bad())?;
        rest = &rest[number_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let seconds = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(bad()),
        };
        rest = &rest[unit_len..];
        total += number * seconds;
    }
    // Digits and dots only: never NaN.
    if total <= 0.0 {
        return Err(format!("{raw:?} must be more than zero"));
    }
    if total > 86_400.0 {
        return Err(format!("{raw:?} is longer than a day"));
    }
    Ok(Duration::from_secs_f64(total))
}

/// Settings the collectors are built from: the roots and the values of
/// the registered flags.
#[derive(Clone, Debug)]
pub struct Settings {
    pub procfs: PathBuf,
    pub sysfs: PathBuf,
    /// `--path.udev.data`; `None` (the default here, so tests do not see
    /// the host's database) reads no udev data.
    pub udev: Option<PathBuf>,
    /// `--path.rootfs`: where the host's root filesystem is mounted (`/`
    /// unless usescope runs in a container with the host's `/` at, say,
    /// `/host`). The filesystem collector statfs()es mount points under it
    /// and strips it from the `mountpoint` label, as node_exporter does.
    pub rootfs: PathBuf,
    /// Flag name → value, for every registered flag that has a value.
    flags: Vec<(&'static str, FlagValue)>,
    /// `<procfs>/stat`, which the cpu and stat collectors both report
    /// from: made by the first of them that is built, shared with the
    /// other (and with copies of these settings that have the same procfs).
    shared_stat: Arc<Mutex<Vec<(PathBuf, proc_stat::Shared)>>>,
}

impl Settings {
    /// The given roots and every registered flag at its default.
    pub fn with_roots(procfs: impl Into<PathBuf>, sysfs: impl Into<PathBuf>) -> Settings {
        let mut s = Settings {
            procfs: procfs.into(),
            sysfs: sysfs.into(),
            udev: None,
            rootfs: PathBuf::from("/"),
            flags: Vec::new(),
            shared_stat: Arc::default(),
        };
        for flag in ALL.iter().flat_map(|spec| spec.flags) {
            if let Some(default) = flag.default {
                let v = FlagValue::parse(flag.kind, default)
                    .unwrap_or_else(|e| panic!("default of --{}: {e}", flag.name));
                s.set(flag.name, Some(v));
            }
        }
        s
    }

    /// `<procfs>/stat`, read and parsed once per scrape for every collector
    /// built from these settings that asks for it.
    pub fn shared_stat(&self) -> proc_stat::Shared {
        let mut made = self.shared_stat.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, s)) = made.iter().find(|(at, _)| *at == self.procfs) {
            return s.clone();
        }
        let s = proc_stat::SharedStat::at(&self.procfs);
        made.push((self.procfs.clone(), s.clone()));
        s
    }

    /// Sets (or with `None` clears) a flag's value.
    pub fn set(&mut self, flag: &'static str, value: Option<FlagValue>) {
        self.flags.retain(|(name, _)| *name != flag);
        if let Some(v) = value {
            self.flags.push((flag, v));
        }
    }

    pub fn flag(&self, flag: &str) -> Option<&FlagValue> {
        self.flags.iter().find(|(n, _)| *n == flag).map(|(_, v)| v)
    }

    /// A [`FlagKind::Regex`] flag's value.
    pub fn regex(&self, flag: &str) -> Option<&Regex> {
        match self.flag(flag) {
            Some(FlagValue::Regex(r)) => Some(r),
            _ => None,
        }
    }

    /// A [`FlagKind::Bool`] flag's value; false when unset.
    pub fn switch(&self, flag: &str) -> bool {
        matches!(self.flag(flag), Some(FlagValue::Bool(true)))
    }

    /// A [`FlagKind::Text`] flag's value.
    pub fn text(&self, flag: &str) -> Option<&str> {
        match self.flag(flag) {
            Some(FlagValue::Text(t)) => Some(t),
            _ => None,
        }
    }

    /// A [`FlagKind::TextList`] flag's values (none if not given).
    pub fn texts(&self, flag: &str) -> &[String] {
        match self.flag(flag) {
            Some(FlagValue::TextList(t)) => t,
            _ => &[],
        }
    }

    /// A [`FlagKind::Duration`] flag's value.
    pub fn duration(&self, flag: &str) -> Option<Duration> {
        match self.flag(flag) {
            Some(FlagValue::Duration(d)) => Some(*d),
            _ => None,
        }
    }

    /// A [`FlagKind::Integer`] flag's value.
    pub fn integer(&self, flag: &str) -> Option<i64> {
        match self.flag(flag) {
            Some(FlagValue::Integer(n)) => Some(*n),
            _ => None,
        }
    }
}

/// Helpers shared by the collectors' unit tests.
#[cfg(test)]
pub(crate) mod test_support {
    use std::path::{Path, PathBuf};

    use crate::kernel::error::CollectError;
    use crate::scrape::collector::Collector;
    use crate::scrape::exposition::{Encoder, Format};

    /// One `collect` into a fresh buffer, as Prometheus text.
    pub fn render(c: &mut dyn Collector) -> Result<String, CollectError> {
        let mut buf = Vec::new();
        let mut enc = Encoder::new(&mut buf, Format::PrometheusText);
        c.collect(&mut enc)?;
        Ok(String::from_utf8(buf).expect("the encoder writes UTF-8"))
    }

    /// `exporter/tests/fixtures/TREE` (`proc`, `large`, `sys`).
    pub fn fixture(tree: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(tree)
    }
}

/// Properties every registered collector must have. They iterate [`ALL`],
/// so a new collector is checked by registering it.
#[cfg(test)]
mod registry_tests {
    use std::collections::BTreeSet;
    use std::path::{Path, PathBuf};

    use proptest::prelude::*;
    use proptest::sample::{Index, select};
    use proptest::test_runner::{Config, TestCaseError, TestRunner};

    use super::test_support::fixture;
    use super::*;
    use crate::scrape::exposition::{Encoder, Format};

    #[test]
    fn names_sources_parsers_and_flags_are_consistent() {
        let mut names = BTreeSet::new();
        let mut parser_names = BTreeSet::new();
        for spec in ALL {
            assert!(names.insert(spec.name), "collector {} twice", spec.name);
            assert!(
                spec.name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{}: collector names are [a-z_]",
                spec.name
            );
            assert!(!spec.help.is_empty(), "{}: no help", spec.name);
            for p in spec.parsers {
                assert!(
                    parser_names.insert(p.name),
                    "parser name {} used twice (it names a fuzz target)",
                    p.name
                );
                assert!(
                    spec.sources.iter().any(|s| s.parser == p.name),
                    "{}: parser {} reads no source, so it has no seeds",
                    spec.name,
                    p.name
                );
            }
            for s in spec.sources {
                assert!(
                    spec.parsers.iter().any(|p| p.name == s.parser),
                    "{}: source {} names parser {}, which {} does not declare",
                    spec.name,
                    s.path,
                    s.parser,
                    spec.name
                );
                assert!(!s.path.starts_with('/'), "{}: relative paths", s.path);
                if let Some(flag) = s.read_with {
                    assert!(
                        spec.flags
                            .iter()
                            .any(|f| f.name == flag && f.kind == FlagKind::Bool),
                        "{}: {} is read with --{flag}, not a Bool flag of {}",
                        spec.name,
                        s.path,
                        spec.name
                    );
                }
            }
            let prefix = format!("collector.{}.", spec.name);
            // node_exporter's own name, kept for compatibility.
            let prefix = match spec.name {
                "powersupplyclass" => "collector.powersupply.".to_string(),
                _ => prefix,
            };
            for f in spec.flags {
                assert!(
                    f.name.starts_with(&prefix),
                    "flag {} must start with {prefix}",
                    f.name
                );
                if let Some(d) = f.default {
                    FlagValue::parse(f.kind, d)
                        .unwrap_or_else(|e| panic!("default of --{}: {e}", f.name));
                }
                if let Some(other) = f.conflicts_with {
                    assert!(
                        spec.flags.iter().any(|g| g.name == other),
                        "--{} conflicts with unknown --{other}",
                        f.name
                    );
                }
            }
        }
    }

    /// The fixture file of a source: the captured tree's, else the
    /// synthetic one's (sources the capture host lacked, e.g. schedstat).
    fn fixture_of(s: &Source) -> Option<PathBuf> {
        s.root
            .fixture_trees()
            .iter()
            .map(|t| fixture(t).join(s.path))
            .find(|p| p.is_file())
    }

    /// Each source's fixture in every tree that has one, as text.
    fn seeds(spec: &Spec, parser: &str) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for s in spec.sources.iter().filter(|s| s.parser == parser) {
            for tree in s.root.fixture_trees() {
                let path = fixture(tree).join(s.path);
                if let Ok(text) = std::fs::read_to_string(&path) {
                    out.push((format!("{tree}/{}", s.path), text));
                }
            }
        }
        out
    }

    #[test]
    fn every_source_has_a_fixture_its_parser_accepts() {
        for spec in ALL {
            for s in spec.sources {
                assert!(
                    fixture_of(s).is_some(),
                    "{}: no fixture for {} in exporter/tests/fixtures (see docs/adding-a-collector.md)",
                    spec.name,
                    s.path
                );
            }
            for p in spec.parsers {
                for (origin, text) in seeds(spec, p.name) {
                    if let Err(e) = (p.check)(&text) {
                        panic!("{}: parser {} rejects {origin}: {e}", spec.name, p.name);
                    }
                }
            }
        }
    }

    /// Whitespace-separated tokens of the seeds plus separators: the
    /// alphabet of the "looks like the file" strategy.
    fn alphabet(seeds: &[(String, String)]) -> Vec<String> {
        let mut set: BTreeSet<String> = seeds
            .iter()
            .flat_map(|(_, t)| t.split_ascii_whitespace())
            .take(4096)
            .map(str::to_string)
            .collect();
        for extra in [
            "",
            ":",
            "=",
            "-1",
            "0",
            "18446744073709551615",
            "18446744073709551616",
            "1e400",
            "NaN",
            "(",
            ")",
            ",",
            "\t",
            "cpu",
            "Node",
            "some",
            "full",
        ] {
            set.insert(extra.to_string());
        }
        set.into_iter().collect()
    }

    /// A seed with a run of its lines replaced by up to four lines of the
    /// seed's own tokens: input that is locally shaped like the format.
    fn spliced(seed: &str, from: Index, to: Index, new: &[Vec<String>]) -> String {
        let lines: Vec<&str> = seed.lines().collect();
        let (a, b) = (from.index(lines.len() + 1), to.index(lines.len() + 1));
        let (a, b) = (a.min(b), a.max(b));
        let mut out = String::new();
        for l in &lines[..a] {
            out.push_str(l);
            out.push('\n');
        }
        for l in new {
            out.push_str(&l.join(" "));
            out.push('\n');
        }
        for l in &lines[b..] {
            out.push_str(l);
            out.push('\n');
        }
        out
    }

    /// One table-driven property instead of a `never_panics` block per
    /// parser: every registered parser, on arbitrary text, on arbitrary
    /// bytes decoded lossily (what a fuzzer feeds), and on its fixtures
    /// with lines replaced by lines of the fixture's own tokens, returns
    /// and never panics.
    #[test]
    fn parsers_never_panic() {
        let config = Config {
            cases: 256,
            failure_persistence: None,
            ..Config::default()
        };
        for (spec, p) in parsers() {
            let check = p.check;
            let ctx = |what: &str| format!("{}: parser {} on {what}", spec.name, p.name);
            let mut runner = TestRunner::new(config.clone());
            runner
                .run(&"\\PC*", |s| {
                    let _ = check(&s);
                    Ok(())
                })
                .unwrap_or_else(|e| panic!("{}: {e}", ctx("text")));
            runner
                .run(&proptest::collection::vec(any::<u8>(), 0..512), |b| {
                    let _ = check(&String::from_utf8_lossy(&b));
                    Ok(())
                })
                .unwrap_or_else(|e| panic!("{}: {e}", ctx("bytes")));
            let seeds = seeds(spec, p.name);
            let tokens = alphabet(&seeds);
            let line = proptest::collection::vec(select(tokens), 0..12);
            let strategy = (
                select(seeds.into_iter().map(|(_, t)| t).collect::<Vec<_>>()),
                any::<Index>(),
                any::<Index>(),
                proptest::collection::vec(line, 0..4),
            );
            runner
                .run(&strategy, |(seed, a, b, new)| {
                    let _ = check(&spliced(&seed, a, b, &new));
                    Ok::<(), TestCaseError>(())
                })
                .unwrap_or_else(|e| panic!("{}: {e}", ctx("spliced fixtures")));
        }
    }

    fn copy_tree(from: &Path, to: &Path) {
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            let dest = to.join(entry.file_name());
            let kind = entry.file_type().unwrap();
            if kind.is_symlink() {
                // sysfs is made of links (class/net/X -> ../../devices/...).
                let target = std::fs::read_link(entry.path()).unwrap();
                let _ = std::fs::remove_file(&dest);
                std::os::unix::fs::symlink(target, &dest).unwrap();
            } else if kind.is_dir() {
                std::fs::create_dir_all(&dest).unwrap();
                copy_tree(&entry.path(), &dest);
            } else {
                std::fs::copy(entry.path(), &dest).unwrap();
            }
        }
    }

    /// Whole-file and per-line edits that keep the text valid UTF-8.
    fn edits(text: &str) -> Vec<(String, String)> {
        let mut out = vec![
            ("empty".to_string(), String::new()),
            (
                "garbage".to_string(),
                "\u{1}garbage here\n%%% not a kernel file %%%\n:::\n".to_string(),
            ),
        ];
        let lines: Vec<&str> = text.lines().collect();
        let join = |ls: &[String]| ls.iter().map(|l| format!("{l}\n")).collect::<String>();
        let step = lines.len().div_ceil(25).max(1);
        for i in (0..lines.len()).step_by(step) {
            let edit = |what: &str, f: &dyn Fn(&str) -> Option<String>| {
                let new: Vec<String> = lines
                    .iter()
                    .enumerate()
                    .filter_map(|(j, l)| if j == i { f(l) } else { Some(l.to_string()) })
                    .collect();
                (format!("line {}: {what}", i + 1), join(&new))
            };
            out.push(edit("deleted", &|_| None));
            out.push(edit("duplicated", &|l| Some(format!("{l}\n{l}"))));
            out.push(edit("cut", &|l| {
                let mut at = l.len() / 2;
                while !l.is_char_boundary(at) {
                    at -= 1;
                }
                Some(l[..at].to_string())
            }));
            out.push(edit("extra column", &|l| Some(format!("{l} 7"))));
            out.push(edit("last column dropped", &|l| {
                Some(l.rsplit_once(' ').map_or("", |(a, _)| a).to_string())
            }));
            for bad in ["18446744073709551616", "x", "-1"] {
                out.push(edit(&format!("first number → {bad}"), &|l| {
                    let tok = l
                        .split(|c: char| !c.is_ascii_digit())
                        .find(|t| !t.is_empty())?;
                    Some(l.replacen(tok, bad, 1))
                }));
            }
        }
        out
    }

    /// Collectors that, as node_exporter does, skip one unreadable sensor
    /// or namespace attribute and report the rest: a bad value there costs
    /// that series, by design, not the collector (their own tests cover it).
    /// cpu: node_exporter skips an unreadable throttle count too, and a
    /// CPU's topology is read once and kept, so a later corruption of it is
    /// not seen (docs/collectors/system.md).
    /// dmi: its strings are read once, at start-up, as node_exporter reads
    /// them (docs/collectors/dmi.md); a later corruption is not seen.
    const SKIP_BAD_ATTRIBUTES: &[&str] = &["hwmon", "nvme", "cpu", "dmi"];

    /// What the parser rejects, the collector rejects too, naming the
    /// file. Collectors that bypass `parse_into` on the scrape path for
    /// speed (vmstat, netstat cache per-line decisions) are held to their
    /// parser by this.
    #[test]
    fn collectors_reject_what_their_parsers_reject() {
        let temp = tempfile::tempdir().unwrap();
        let base = temp.path();
        let mut failures = Vec::new();
        for spec in ALL
            .iter()
            .filter(|s| !SKIP_BAD_ATTRIBUTES.contains(&s.name))
        {
            let root = base.join(spec.name);
            let sys = base.join(format!("{}-sys", spec.name));
            std::fs::create_dir_all(&root).unwrap();
            std::fs::create_dir_all(&sys).unwrap();
            copy_tree(&fixture("proc"), &root);
            copy_tree(&fixture("sys"), &sys);
            let under = |s: &Source| match s.root {
                Root::Procfs => root.join(s.path),
                Root::Sysfs => sys.join(s.path),
                // Read through their own settings (a textfile directory,
                // the udev database, os-release): their collectors' tests
                // and the malformed test cover them.
                Root::Textfile | Root::Udev | Root::Rootfs => unreachable!("filtered out below"),
            };
            let files_under_proc_or_sys = || {
                spec.sources
                    .iter()
                    .filter(|s| matches!(s.root, Root::Procfs | Root::Sysfs))
            };
            for s in files_under_proc_or_sys() {
                if let Some(f) = fixture_of(s)
                    && !under(s).exists()
                {
                    std::fs::create_dir_all(under(s).parent().unwrap()).unwrap();
                    std::fs::copy(f, under(s)).unwrap();
                }
            }
            let mut settings = Settings::with_roots(&root, &sys);
            settings.rootfs = fixture("rootfs");
            for flag in spec.sources.iter().filter_map(|s| s.read_with) {
                settings.set(flag, Some(FlagValue::Bool(true)));
            }
            let mut c = (spec.build)(&settings);
            let mut buf = Vec::new();
            for s in files_under_proc_or_sys() {
                let parser = spec.parsers.iter().find(|p| p.name == s.parser).unwrap();
                let path = under(s);
                let original = std::fs::read_to_string(&path).unwrap();
                for (what, text) in edits(&original) {
                    std::fs::write(&path, &text).unwrap();
                    buf.clear();
                    let got = c.collect(&mut Encoder::new(&mut buf, Format::PrometheusText));
                    if let Err(pe) = (parser.check)(&text) {
                        match got {
                            Ok(()) => failures.push(format!(
                                "{}: {} {what}: parser says {pe}, collector succeeds",
                                spec.name, s.path
                            )),
                            Err(ce) if ce.file != path => failures.push(format!(
                                "{}: {} {what}: error names {}",
                                spec.name,
                                s.path,
                                ce.file.display()
                            )),
                            Err(_) => {}
                        }
                    }
                }
                std::fs::write(&path, &original).unwrap();
            }
        }
        assert!(
            failures.is_empty(),
            "{} cases:\n{}",
            failures.len(),
            failures.join("\n")
        );
    }
}
