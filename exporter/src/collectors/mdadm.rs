//! /proc/mdstat and /sys/block/md*/md → `node_md_*`, node_exporter's
//! mdadm collector (collector/mdadm_linux.go, prometheus/procfs mdstat.go
//! and sysfs/mdraid.go).
//!
//! From /proc/mdstat, per array: the disks it requires, how many are
//! active, failed (`(F)`) and spare (`(S)`), its state, its size in blocks
//! and how many are in sync. From sysfs: `raid_disks` and `degraded`.
//! Failed disks, degraded arrays and a recovery in progress are the
//! errors and saturation of the USE method for software RAID.
//!
//! The parse follows prometheus/procfs line for line, with its regular
//! expressions, so every value is node_exporter's, including its quirks:
//! for raid0 and linear the disk counts are the number of `[` in the
//! array's line; an inactive array has 0 disks; the state is `recovering`,
//! `resyncing`, `checking` or `reshaping` while a sync line says so, and
//! a reshaping array has every `node_md_state` series at 0 (node_exporter
//! has no `reshaping` label); a sync that is PENDING or DELAYED has 0
//! blocks synced.
//!
//! Of the sysfs attributes node_exporter reads for each md device only
//! `level`, `raid_disks` and `degraded` feed a metric, and only they are
//! read; a device whose `level` is missing, or that is stopped while it is
//! read (ENODEV), is left out (node_exporter fails the collector). node_exporter also fails it when /proc/mdstat is
//! absent; usescope exports nothing and succeeds.

use std::path::PathBuf;
use std::sync::LazyLock;

use regex::Regex;

use crate::collectors::{Parser, Settings, Source, Spec};
use crate::kernel::error::{CollectError, ParseError, excerpt};
use crate::kernel::parse::{fields, lines, parse_fresh, recycle, u64_field, u64_sysctl_into};
use crate::kernel::source::{DirListing, Read, SourceFile};
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Desc, Encoder};

pub const SPEC: Spec = Spec {
    name: "mdadm",
    default_enabled: true,
    help: "Software RAID arrays from /proc/mdstat and /sys/block/md*/md",
    flags: &[],
    build,
    sources: &[
        Source::proc("mdstat", "mdstat"),
        Source::sys("block/md0/md/level", "md_level"),
        Source::sys("block/md0/md/raid_disks", "md_raid_disks"),
        Source::sys("block/md0/md/degraded", "md_degraded"),
    ],
    parsers: &[
        Parser::numeric("mdstat", |t| parse_into(t, &mut Vec::new())),
        Parser::text("md_level", |t| parse_fresh(t, parse_level_into).map(drop)),
        Parser::numeric("md_raid_disks", |t| {
            parse_fresh(t, parse_raid_disks_into).map(drop)
        }),
        Parser::numeric("md_degraded", |t| parse_fresh(t, u64_sysctl_into).map(drop)),
    ],
};

const DISKS_REQUIRED: Desc =
    Desc::gauge("node_md_disks_required", "Total number of disks of device.");
const DISKS: Desc = Desc::gauge(
    "node_md_disks",
    "Number of active/failed/spare disks of device.",
);
const STATE: Desc = Desc::gauge("node_md_state", "Indicates the state of md-device.");
const BLOCKS: Desc = Desc::gauge("node_md_blocks", "Total number of blocks on device.");
const BLOCKS_SYNCED: Desc = Desc::gauge(
    "node_md_blocks_synced",
    "Number of blocks synced on device.",
);
const RAID_DISKS: Desc = Desc::gauge("node_md_raid_disks", "Number of raid disks on device.");
const DEGRADED: Desc = Desc::gauge("node_md_degraded", "Number of degraded disks on device.");

/// `node_md_state`'s labels and the activity state that sets each to 1.
const STATES: [(&str, &str); 5] = [
    ("active", "active"),
    ("inactive", "inactive"),
    ("recovering", "recovering"),
    ("resync", "resyncing"),
    ("check", "checking"),
];

/// One array of /proc/mdstat, as prometheus/procfs reads it.
#[derive(Debug, PartialEq, Eq)]
pub struct MdArray<'t> {
    pub name: &'t str,
    /// `active`, `inactive`, or while a sync line says so `recovering`,
    /// `reshaping`, `checking`, `resyncing`.
    pub state: &'t str,
    pub disks_total: u64,
    pub disks_active: u64,
    pub disks_failed: u64,
    pub disks_spare: u64,
    pub blocks: u64,
    pub blocks_synced: u64,
}

static STATUS_LINE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(\d+) blocks .*\[(\d+)/(\d+)\] \[([U_]+)\]").unwrap());
static RECOVERY_BLOCKS: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\((\d+/\d+)\)").unwrap());
static RECOVERY_PCT: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"= (.+)%").unwrap());
static RECOVERY_FINISH: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"finish=(.+)min").unwrap());
static RECOVERY_SPEED: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"speed=(.+)[A-Z]").unwrap());
static COMPONENT: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(.*)\[(\d+)\](\([SF]+\))?").unwrap());

const PERSONALITIES: &str = "Personalities : ";

/// Parses /proc/mdstat (md_seq_show): the `Personalities` line, then per
/// array its line (`md0 : active raid1 sdb1[1] sda1[0]`), a status line,
/// an optional bitmap line and a sync line, and a blank line. Lines
/// starting with a space and `unused devices` are skipped between arrays,
/// as in prometheus/procfs.
pub fn parse_into<'t>(s: &'t str, out: &mut Vec<MdArray<'t>>) -> Result<(), ParseError> {
    out.clear();
    let mut personalities = "";
    // Split exactly as Go's strings.Split(data, "\n") does, so the "too few
    // lines" rule counts what procfs counts.
    let mut it = s.split('\n');
    let mut n = 0;
    while let Some(line) = it.next() {
        n += 1;
        if line.trim().is_empty() || line.starts_with(' ') || line.starts_with("unused") {
            continue;
        }
        if fields(personalities).next().is_none()
            && let Some(list) = line.strip_prefix(PERSONALITIES)
        {
            for word in fields(list) {
                if word.len() < 2 || !word.starts_with('[') || !word.ends_with(']') {
                    return Err(ParseError::new(
                        n,
                        format!("personality {}: expected [name]", excerpt(word)),
                    ));
                }
            }
            personalities = list;
            continue;
        }
        let mut f = fields(line);
        let (Some(name), Some(_colon), Some(state)) = (f.next(), f.next(), f.next()) else {
            return Err(ParseError::new(
                n,
                format!("expected \"mdN : state ...\", found {}", excerpt(line)),
            ));
        };
        let is_raid_type = |w: &str| {
            !w.contains(['(', '['])
                && fields(personalities).any(|p| p.get(1..p.len() - 1) == Some(w))
        };
        let fourth = f.next();
        let fifth = f.clone().next();
        let components = match (fourth, fifth) {
            (Some(w), _) if is_raid_type(w) => f.clone(),
            (Some(_), Some(w)) if is_raid_type(w) => {
                let mut rest = f.clone();
                rest.next();
                rest
            }
            // No known type: every field is tried as a component.
            _ => fields(line),
        };
        let mut ahead = it.clone();
        let (Some(status), Some(third), Some(fourth_line)) =
            (ahead.next(), ahead.next(), ahead.next())
        else {
            return Err(ParseError::new(
                n,
                format!("too few lines for md device {}", excerpt(name)),
            ));
        };
        let disks_failed = line.matches("(F)").count() as u64;
        let disks_spare = line.matches("(S)").count() as u64;
        let (disks_active, disks_total, blocks) = status_line(line, status, n + 1)?;
        let (sync, sync_n) = if third.contains("bitmap") {
            (fourth_line, n + 3)
        } else {
            (third, n + 2)
        };
        let mut array = MdArray {
            name,
            state,
            disks_total,
            disks_active,
            disks_failed,
            disks_spare,
            blocks,
            blocks_synced: blocks,
        };
        let recovering = sync.contains("recovery");
        let reshaping = sync.contains("reshape");
        let resyncing = sync.contains("resync");
        let checking = sync.contains("check");
        if recovering || reshaping || resyncing || checking {
            array.state = if recovering {
                "recovering"
            } else if reshaping {
                "reshaping"
            } else if checking {
                "checking"
            } else {
                "resyncing"
            };
            array.blocks_synced = if sync.contains("PENDING") || sync.contains("DELAYED") {
                0
            } else {
                sync_line(sync, sync_n)?
            };
        }
        for c in components {
            if let Some(m) = COMPONENT.captures(c) {
                let index = m.get(2).map_or("", |g| g.as_str());
                if index.parse::<i32>().is_err() {
                    return Err(ParseError::new(
                        n,
                        format!("component {}: descriptor index out of range", excerpt(c)),
                    ));
                }
            }
        }
        out.push(array);
    }
    Ok(())
}

/// The status line after an array's line: (active, total, blocks).
fn status_line(device: &str, status: &str, n: usize) -> Result<(u64, u64, u64), ParseError> {
    let first = fields(status)
        .next()
        .ok_or_else(|| ParseError::new(n, "empty status line"))?;
    let blocks = u64_field(first, n, "blocks")?;
    if device.contains("raid0") || device.contains("linear") {
        // Only the member disks have a number in [] on the array's line.
        let total = device.matches('[').count() as u64;
        return Ok((total, total, blocks));
    }
    if device.contains("inactive") {
        return Ok((0, 0, blocks));
    }
    let m = STATUS_LINE.captures(status).ok_or_else(|| {
        ParseError::new(
            n,
            format!(
                "no \"N blocks ... [n/m] [UU]\" in {}",
                excerpt(status.trim())
            ),
        )
    })?;
    let group = |i| m.get(i).map_or("", |g| g.as_str());
    let total = u64_field(group(2), n, "raid disks")?;
    let active = u64_field(group(3), n, "active disks")?;
    Ok((active, total, blocks))
}

/// The blocks synced of a sync line, `[==>...]  recovery = 12.6%
/// (132096/1047552) finish=0.6min speed=26419K/sec`; the percentage,
/// finish time and speed must parse too, as procfs requires.
fn sync_line(line: &str, n: usize) -> Result<u64, ParseError> {
    let bad = |what: &str| {
        ParseError::new(
            n,
            format!("sync line: no {what} in {}", excerpt(line.trim())),
        )
    };
    let blocks = RECOVERY_BLOCKS
        .captures(line)
        .and_then(|m| m.get(1))
        .ok_or_else(|| bad("(synced/total)"))?
        .as_str();
    let (synced, total) = blocks
        .split_once('/')
        .ok_or_else(|| bad("(synced/total)"))?;
    let synced = u64_field(synced, n, "blocks synced")?;
    u64_field(total, n, "blocks to sync")?;
    for (re, what, trim) in [
        (&RECOVERY_PCT, "percentage", true),
        (&RECOVERY_FINISH, "finish time", false),
        (&RECOVERY_SPEED, "speed", false),
    ] {
        let v = re
            .captures(line)
            .and_then(|m| m.get(1))
            .ok_or_else(|| bad(what))?
            .as_str();
        let v = if trim { v.trim() } else { v };
        go_float(v).ok_or_else(|| bad(what))?;
    }
    Ok(synced)
}

/// Whether Go's strconv.ParseFloat accepts `s`, near enough: a decimal
/// number (Rust also takes "inf" and "NaN", which Go does too).
fn go_float(s: &str) -> Option<f64> {
    if s.is_empty() || s.bytes().any(|b| b.is_ascii_whitespace()) {
        return None;
    }
    s.parse::<f64>().ok()
}

/// `md/level`: one line, a personality name (`raid1`, `linear`,
/// `container`) or a number, possibly empty (an array being set up).
pub fn parse_level_into(s: &str, out: &mut String) -> Result<(), ParseError> {
    let value = one_line(s)?;
    if !value
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Err(ParseError::new(
            1,
            format!("invalid level {}", excerpt(value)),
        ));
    }
    out.clear();
    out.push_str(value);
    Ok(())
}

/// `md/raid_disks`: `4`, or `5 (4)` during a reshape (the new count
/// first), or empty. The new count, if any.
pub fn parse_raid_disks_into(s: &str, out: &mut Option<u64>) -> Result<(), ParseError> {
    let value = one_line(s)?;
    *out = None;
    if value.is_empty() {
        return Ok(());
    }
    let mut f = fields(value);
    let now = u64_field(f.next().unwrap_or(""), 1, "raid_disks")?;
    match (f.next(), f.next()) {
        (None, _) => {}
        (Some(before), None)
            if before
                .strip_prefix('(')
                .and_then(|b| b.strip_suffix(')'))
                .is_some_and(|b| u64_field(b, 1, "raid_disks").is_ok()) => {}
        _ => {
            return Err(ParseError::new(
                1,
                format!(
                    "raid_disks: expected N or \"N (M)\", found {}",
                    excerpt(value)
                ),
            ));
        }
    }
    *out = Some(now);
    Ok(())
}

/// The content of a one-line attribute, trimmed.
fn one_line(s: &str) -> Result<&str, ParseError> {
    let mut l = lines(s);
    let value = l.next().unwrap_or("").trim();
    if l.next().is_some() {
        return Err(ParseError::new(2, "expected a single line"));
    }
    Ok(value)
}

/// An md device's sysfs attributes.
struct MdSys {
    name: String,
    level_file: SourceFile,
    raid_disks_file: SourceFile,
    degraded_file: SourceFile,
    level: String,
    /// Read this scrape: `level` was there.
    present: bool,
    raid_disks: Option<u64>,
    degraded: Option<u64>,
    seen: u64,
}

impl MdSys {
    fn new(sysfs: &std::path::Path, name: &str) -> MdSys {
        let attr = |a: &str| SourceFile::attribute(sysfs, format!("block/{name}/md/{a}"));
        MdSys {
            name: name.to_string(),
            level_file: attr("level"),
            raid_disks_file: attr("raid_disks"),
            degraded_file: attr("degraded"),
            level: String::new(),
            present: false,
            raid_disks: None,
            degraded: None,
            seen: 0,
        }
    }

    /// Reads what node_exporter reads for this level. An array stopped
    /// while it is read (ENODEV from one of its files) is left out, as
    /// one without `level` is.
    fn read(&mut self) -> Result<(), CollectError> {
        self.raid_disks = None;
        self.degraded = None;
        let level = &mut self.level;
        self.present = match self.level_file.parse_with(|t| parse_level_into(t, level)) {
            Ok(read) => read.is_some(),
            Err(_) if self.level_file.device_gone() => false,
            Err(e) => return Err(e),
        };
        if !self.present {
            return Ok(());
        }
        if !matches!(self.level.as_str(), "container" | "imsm" | "ddf" | "") {
            let out = &mut self.raid_disks;
            match self
                .raid_disks_file
                .parse_with(|t| parse_raid_disks_into(t, out))
            {
                Ok(_) => {}
                Err(_) if self.raid_disks_file.device_gone() => {
                    self.gone();
                    return Ok(());
                }
                Err(e) => return Err(e),
            }
        }
        if matches!(
            self.level.as_str(),
            "raid1" | "raid4" | "raid5" | "raid6" | "raid10"
        ) {
            let mut v = 0;
            match self
                .degraded_file
                .parse_with(|t| u64_sysctl_into(t, &mut v))
            {
                Ok(read) => self.degraded = read.map(|()| v),
                Err(_) if self.degraded_file.device_gone() => {
                    self.gone();
                    return Ok(());
                }
                Err(e) => return Err(e),
            }
        } else {
            // node_exporter reports 0 for levels without the attribute.
            self.degraded = Some(0);
        }
        Ok(())
    }

    /// Leaves this device out of the scrape.
    fn gone(&mut self) {
        self.present = false;
        self.raid_disks = None;
        self.degraded = None;
    }
}

pub struct MdadmCollector {
    file: SourceFile,
    sysfs: PathBuf,
    block: DirListing,
    /// Sorted by name.
    sys: Vec<MdSys>,
    arrays: Vec<MdArray<'static>>,
    scrape: u64,
}

pub fn build(s: &Settings) -> Box<dyn Collector> {
    Box::new(MdadmCollector {
        file: SourceFile::new(&s.procfs, "mdstat"),
        sysfs: s.sysfs.clone(),
        block: DirListing::of_devices(),
        sys: Vec::new(),
        arrays: Vec::new(),
        scrape: 0,
    })
}

fn encode_arrays(arrays: &[MdArray], enc: &mut Encoder) {
    if arrays.is_empty() {
        return;
    }
    enc.family(&DISKS_REQUIRED);
    for a in arrays {
        enc.sample(&DISKS_REQUIRED, &[("device", a.name)], a.disks_total);
    }
    enc.family(&DISKS);
    for a in arrays {
        for (state, v) in [
            ("active", a.disks_active),
            ("failed", a.disks_failed),
            ("spare", a.disks_spare),
        ] {
            enc.sample(&DISKS, &[("device", a.name), ("state", state)], v);
        }
    }
    enc.family(&STATE);
    for a in arrays {
        for (label, state) in STATES {
            let v = u64::from(a.state == state);
            enc.sample(&STATE, &[("device", a.name), ("state", label)], v);
        }
    }
    enc.family(&BLOCKS);
    for a in arrays {
        enc.sample(&BLOCKS, &[("device", a.name)], a.blocks);
    }
    enc.family(&BLOCKS_SYNCED);
    for a in arrays {
        enc.sample(&BLOCKS_SYNCED, &[("device", a.name)], a.blocks_synced);
    }
}

impl MdadmCollector {
    /// The md devices of sysfs (`block/md*` with an `md/level`).
    fn read_sys(&mut self) -> Result<(), CollectError> {
        self.scrape += 1;
        let block = self.sysfs.join("block");
        if !self.block.read(&block)? {
            self.sys.clear();
            return Ok(());
        }
        for e in self
            .block
            .entries()
            .iter()
            .filter(|e| e.name.starts_with("md"))
        {
            let i = match self.sys.binary_search_by(|m| m.name.as_str().cmp(&e.name)) {
                Ok(i) => i,
                Err(i) => {
                    self.sys.insert(i, MdSys::new(&self.sysfs, &e.name));
                    i
                }
            };
            self.sys[i].seen = self.scrape;
            self.sys[i].read()?;
        }
        let scrape = self.scrape;
        self.sys.retain(|m| m.seen == scrape);
        Ok(())
    }

    fn encode_sys(&self, enc: &mut Encoder) {
        let present = || self.sys.iter().filter(|m| m.present);
        if present().any(|m| m.raid_disks.is_some()) {
            enc.family(&RAID_DISKS);
            for m in present() {
                if let Some(v) = m.raid_disks {
                    enc.sample(&RAID_DISKS, &[("device", &m.name)], v);
                }
            }
        }
        if present().any(|m| m.degraded.is_some()) {
            enc.family(&DEGRADED);
            for m in present() {
                if let Some(v) = m.degraded {
                    enc.sample(&DEGRADED, &[("device", &m.name)], v);
                }
            }
        }
    }
}

impl Collector for MdadmCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        // node_exporter reads sysfs only once /proc/mdstat is there.
        let text = match self.file.read()? {
            Read::Text(t) => t,
            Read::Absent => return Ok(()),
        };
        let mut arrays = recycle(std::mem::take(&mut self.arrays));
        if let Err(e) = parse_into(text, &mut arrays) {
            self.arrays = recycle(arrays);
            return Err(self.file.parse_error(e));
        }
        // The arrays borrow the file's buffer; sysfs is read into other
        // buffers, so both are encoded once everything is read.
        let mark = enc.mark();
        encode_arrays(&arrays, enc);
        self.arrays = recycle(arrays);
        if let Err(e) = self.read_sys() {
            enc.truncate(mark);
            return Err(e);
        }
        self.encode_sys(enc);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collectors::test_support::{fixture, render};

    fn parse(s: &str) -> Result<Vec<MdArray<'_>>, ParseError> {
        let mut out = Vec::new();
        parse_into(s, &mut out).map(|()| out)
    }

    fn array<'t>(
        name: &'t str,
        state: &'t str,
        disks: [u64; 4],
        blocks: u64,
        blocks_synced: u64,
    ) -> MdArray<'t> {
        MdArray {
            name,
            state,
            disks_total: disks[0],
            disks_active: disks[1],
            disks_failed: disks[2],
            disks_spare: disks[3],
            blocks,
            blocks_synced,
        }
    }

    /// Every state and level node_exporter handles, in md_seq_show's layout.
    pub const EVERY_STATE: &str = "\
Personalities : [linear] [raid0] [raid1] [raid6] [raid5] [raid4] [raid10]
md127 : active (auto-read-only) raid1 sdb1[1] sda1[0]
      1046528 blocks super 1.2 [2/2] [UU]
      \tresync=PENDING
      bitmap: 0/1 pages [0KB], 65536KB chunk

md1 : active raid5 sdh1[3] sdg1[1] sdf1[0]
      2093056 blocks super 1.2 level 5, 512k chunk, algorithm 2 [3/2] [UU_]
      [=>...................]  recovery =  8.1% (85504/1046528) finish=0.7min speed=21376K/sec

md2 : active raid1 sdd1[1](F) sdc1[0] sde1[2](S)
      1046528 blocks super 1.2 [2/1] [U_]

md3 : active raid6 sdl1[3] sdk1[2] sdj1[1] sdi1[0]
      2093056 blocks super 1.2 level 6, 512k chunk, algorithm 2 [4/4] [UUUU]
      [====>................]  check = 22.3% (233728/1046528) finish=0.5min speed=25969K/sec

md4 : active raid10 sdp1[3] sdo1[2] sdn1[1] sdm1[0]
      2093056 blocks super 1.2 512K chunks 2 near-copies [4/4] [UUUU]
      [==>..................]  resync = 12.6% (264448/2093056) finish=1.1min speed=26444K/sec

md5 : active raid5 sdt1[4] sds1[2] sdr1[1] sdq1[0]
      3139584 blocks super 1.2 level 5, 512k chunk, algorithm 2 [4/4] [UUUU]
      [=>...................]  reshape =  7.4% (77824/1046528) finish=1.9min speed=8106K/sec

md6 : active raid0 sdv1[1] sdu1[0]
      2093056 blocks super 1.2 512k chunks

md7 : active linear sdx1[1] sdw1[0]
      2093056 blocks super 1.2 0k rounding

md8 : inactive sdz1[1](S) sdy1[0](S)
      2093056 blocks super 1.2

md9 : active raid1 sdab1[1] sdaa1[0]
      1046528 blocks super 1.2 [2/2] [UU]
      \tresync=DELAYED

unused devices: <none>
";

    #[test]
    fn every_state_and_level() {
        assert_eq!(
            parse(EVERY_STATE).unwrap(),
            [
                array("md127", "resyncing", [2, 2, 0, 0], 1046528, 0),
                array("md1", "recovering", [3, 2, 0, 0], 2093056, 85504),
                array("md2", "active", [2, 1, 1, 1], 1046528, 1046528),
                array("md3", "checking", [4, 4, 0, 0], 2093056, 233728),
                array("md4", "resyncing", [4, 4, 0, 0], 2093056, 264448),
                array("md5", "reshaping", [4, 4, 0, 0], 3139584, 77824),
                array("md6", "active", [2, 2, 0, 0], 2093056, 2093056),
                array("md7", "active", [2, 2, 0, 0], 2093056, 2093056),
                array("md8", "inactive", [0, 0, 0, 2], 2093056, 2093056),
                array("md9", "resyncing", [2, 2, 0, 0], 1046528, 0),
            ]
        );
        assert_eq!(
            parse("Personalities : \nunused devices: <none>\n").unwrap(),
            []
        );
    }

    #[test]
    fn malformed() {
        let e = parse("Personalities : [raid1]\nmd0 : active\n").unwrap_err();
        assert!(e.msg.contains("too few lines"), "{}", e.msg);
        let e = parse("Personalities : [raid1]\nmd0 :\n").unwrap_err();
        assert_eq!(e.line, 2);
        let e = parse("Personalities : [\n").unwrap_err();
        assert!(e.msg.contains("personality"), "{}", e.msg);
        let bad_status = "Personalities : [raid1]\nmd0 : active raid1 sda[0]\n      x blocks\n\n\n";
        let e = parse(bad_status).unwrap_err();
        assert_eq!(e.line, 3);
        assert!(e.msg.contains("blocks"), "{}", e.msg);
        let no_counts = "Personalities : [raid1]\nmd0 : active raid1 sda[0]\n      5 blocks\n\n\n";
        assert!(parse(no_counts).unwrap_err().msg.contains("[n/m]"));
        let bad_sync = "Personalities : [raid1]\nmd0 : active raid1 sda[0]\n      5 blocks [1/1] [U]\n      resync = 5% (1/x)\n\n";
        let e = parse(bad_sync).unwrap_err();
        assert_eq!(e.line, 4);
        let huge_index = "Personalities : [raid1]\nmd0 : active raid1 sda[9999999999]\n      5 blocks [1/1] [U]\n\n\n";
        assert!(
            parse(huge_index)
                .unwrap_err()
                .msg
                .contains("descriptor index")
        );
    }

    #[test]
    fn sysfs_attributes() {
        assert_eq!(parse_fresh("raid1\n", parse_level_into).unwrap(), "raid1");
        assert_eq!(parse_fresh("\n", parse_level_into).unwrap(), "");
        assert!(parse_fresh("raid 1\n", parse_level_into).is_err());
        let rd = |s| parse_fresh(s, parse_raid_disks_into);
        assert_eq!(rd("4\n").unwrap(), Some(4));
        assert_eq!(rd("5 (4)\n").unwrap(), Some(5));
        assert_eq!(rd("").unwrap(), None);
        assert!(rd("5 4\n").is_err());
        assert!(rd("x\n").is_err());
    }

    #[test]
    fn collector_on_fixture() {
        let s = Settings::with_roots(fixture("large"), fixture("sys"));
        let mut c = build(&s);
        let out = render(c.as_mut()).unwrap();
        for line in [
            "# HELP node_md_disks_required Total number of disks of device.",
            "node_md_disks_required{device=\"md0\"} 2",
            "node_md_disks{device=\"md0\",state=\"active\"} 2",
            "node_md_state{device=\"md0\",state=\"active\"} 1",
            "node_md_raid_disks{device=\"md0\"} 2",
            "node_md_degraded{device=\"md0\"} 0",
            "node_md_degraded{device=\"md1\"} 1",
        ] {
            assert!(out.lines().any(|l| l == line), "missing {line} in\n{out}");
        }
        assert_eq!(render(c.as_mut()).unwrap(), out);
        // No /proc/mdstat: nothing, sysfs or not.
        let s = Settings::with_roots(fixture("proc"), fixture("sys"));
        assert_eq!(render(build(&s).as_mut()).unwrap(), "");
    }
}
