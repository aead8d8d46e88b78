//! /proc/diskstats → the `node_disk_*` families, with node_exporter 1.9's
//! names, types and units: sectors × 512 → bytes, milliseconds → seconds.
//!
//! A line is `major minor name` and then 11, 15 or 17 counters: kernels
//! 4.18 added four discard counters and 5.5 two flush counters. Families a
//! line has no column for are not emitted for that device. Columns past the
//! 17th are ignored, as newer kernels may append more.
//!
//! `io_time_seconds_total` is the disk's busy time (its rate is the
//! utilisation of the USE method); `io_time_weighted_seconds_total` grows
//! with queue depth × time (its rate is the average queue size, i.e.
//! saturation).
//!
//! Devices matching `--collector.diskstats.device-exclude` (partitions,
//! loop and ram devices by default) are skipped; with
//! `--collector.diskstats.device-include`, as in node_exporter, only the
//! devices it matches are kept (the default exclude then does not apply,
//! and an exclude given too is refused at start). The decision is made once
//! per device name and cached with the device, together with the
//! `node_disk_info` labels read from sysfs, so neither the regex nor sysfs
//! is touched on the scrape path for known devices.

use std::collections::HashMap;
use std::io::Read as _;
use std::path::{Path, PathBuf};

use regex::Regex;

use crate::collectors::{Flag, FlagKind, Parser, Settings, Source, Spec};
use crate::kernel::error::{CollectError, ParseError};
use crate::kernel::parse::{fields, is_blank, lines, next_field, recycle, u64_field};
use crate::kernel::source::{Read, SourceFile};
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Desc, Encoder, Value, u64_label};

pub const DEFAULT_DEVICE_EXCLUDE: &str = "^(z?ram|loop|fd|(h|s|v|xv)d[a-z]|nvme\\d+n\\d+p)\\d+$";

pub const DEVICE_EXCLUDE: &str = "collector.diskstats.device-exclude";
pub const DEVICE_INCLUDE: &str = "collector.diskstats.device-include";

pub const SPEC: Spec = Spec {
    name: "diskstats",
    default_enabled: true,
    help: "Disk I/O statistics from /proc/diskstats",
    flags: &[
        Flag {
            name: DEVICE_EXCLUDE,
            help: "Regexp of diskstats devices to exclude",
            default: Some(DEFAULT_DEVICE_EXCLUDE),
            kind: FlagKind::Regex,
            conflicts_with: None,
        },
        Flag {
            name: DEVICE_INCLUDE,
            help: "Regexp of diskstats devices to include (mutually exclusive to device-exclude).",
            default: None,
            kind: FlagKind::Regex,
            conflicts_with: Some(DEVICE_EXCLUDE),
        },
    ],
    build,
    sources: &[
        Source::proc("diskstats", "diskstats"),
        Source::udev("b254:0", "udev"),
    ],
    parsers: &[
        Parser::numeric("diskstats", |t| parse_into(t, &mut Vec::new())),
        Parser::text("udev", |t| parse_udev_into(t, &mut Vec::new())),
    ],
};

/// Counters after `major minor name` on the widest line usescope reads.
pub const STATS: usize = 17;

/// node_exporter's `secondsPerTick`; multiplying (not dividing) gives the
/// very same float.
const SECONDS_PER_MS: f64 = 1.0 / 1000.0;
/// diskstats counts standard 512-byte UNIX sectors whatever the device's
/// own block size (Documentation/block/stat.rst).
const SECTOR_BYTES: f64 = 512.0;

const INFO: Desc = Desc::gauge("node_disk_info", "Info of /sys/block/<block_device>.");
const DM_INFO: Desc = Desc::gauge(
    "node_disk_device_mapper_info",
    "Info about disk device mapper.",
);
const FS_INFO: Desc = Desc::gauge("node_disk_filesystem_info", "Info about disk filesystem.");
/// node_exporter's ATA families, from udev properties of ATA disks.
const ATA: [(&str, Desc); 3] = [
    (
        "ID_ATA_ROTATION_RATE_RPM",
        Desc::gauge(
            "node_disk_ata_rotation_rate_rpm",
            "ATA disk rotation rate in RPMs (0 for SSDs).",
        ),
    ),
    (
        "ID_ATA_WRITE_CACHE",
        Desc::gauge("node_disk_ata_write_cache", "ATA disk has a write cache."),
    ),
    (
        "ID_ATA_WRITE_CACHE_ENABLED",
        Desc::gauge(
            "node_disk_ata_write_cache_enabled",
            "ATA disk has its write cache enabled.",
        ),
    ),
];

/// How a counter column becomes a sample value.
#[derive(Clone, Copy)]
enum Unit {
    /// Exported as is.
    Count,
    /// Sectors, exported as bytes.
    Sectors,
    /// Milliseconds, exported as seconds.
    Millis,
}

/// One family per counter column, in column order.
const FAMILIES: [(Desc, Unit); STATS] = [
    (
        Desc::counter(
            "node_disk_reads_completed_total",
            "The total number of reads completed successfully.",
        ),
        Unit::Count,
    ),
    (
        Desc::counter(
            "node_disk_reads_merged_total",
            "The total number of reads merged.",
        ),
        Unit::Count,
    ),
    (
        Desc::counter(
            "node_disk_read_bytes_total",
            "The total number of bytes read successfully.",
        ),
        Unit::Sectors,
    ),
    (
        Desc::counter(
            "node_disk_read_time_seconds_total",
            "The total number of seconds spent by all reads.",
        ),
        Unit::Millis,
    ),
    (
        Desc::counter(
            "node_disk_writes_completed_total",
            "The total number of writes completed successfully.",
        ),
        Unit::Count,
    ),
    (
        Desc::counter(
            "node_disk_writes_merged_total",
            "The number of writes merged.",
        ),
        Unit::Count,
    ),
    (
        Desc::counter(
            "node_disk_written_bytes_total",
            "The total number of bytes written successfully.",
        ),
        Unit::Sectors,
    ),
    (
        Desc::counter(
            "node_disk_write_time_seconds_total",
            "This is the total number of seconds spent by all writes.",
        ),
        Unit::Millis,
    ),
    (
        Desc::gauge(
            "node_disk_io_now",
            "The number of I/Os currently in progress.",
        ),
        Unit::Count,
    ),
    (
        Desc::counter(
            "node_disk_io_time_seconds_total",
            "Total seconds spent doing I/Os.",
        ),
        Unit::Millis,
    ),
    (
        Desc::counter(
            "node_disk_io_time_weighted_seconds_total",
            "The weighted # of seconds spent doing I/Os.",
        ),
        Unit::Millis,
    ),
    (
        Desc::counter(
            "node_disk_discards_completed_total",
            "The total number of discards completed successfully.",
        ),
        Unit::Count,
    ),
    (
        Desc::counter(
            "node_disk_discards_merged_total",
            "The total number of discards merged.",
        ),
        Unit::Count,
    ),
    // node_exporter exports this one in sectors, not bytes.
    (
        Desc::counter(
            "node_disk_discarded_sectors_total",
            "The total number of sectors discarded successfully.",
        ),
        Unit::Count,
    ),
    (
        Desc::counter(
            "node_disk_discard_time_seconds_total",
            "This is the total number of seconds spent by all discards.",
        ),
        Unit::Millis,
    ),
    (
        Desc::counter(
            "node_disk_flush_requests_total",
            "The total number of flush requests completed successfully",
        ),
        Unit::Count,
    ),
    (
        Desc::counter(
            "node_disk_flush_requests_time_seconds_total",
            "This is the total number of seconds spent by all flush requests.",
        ),
        Unit::Millis,
    ),
];

impl Unit {
    fn value(self, raw: u64) -> Value {
        match self {
            Unit::Count => Value::U64(raw),
            Unit::Sectors => Value::F64(raw as f64 * SECTOR_BYTES),
            Unit::Millis => Value::F64(raw as f64 * SECONDS_PER_MS),
        }
    }
}

/// One /proc/diskstats line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Disk<'a> {
    pub major: u64,
    pub minor: u64,
    pub name: &'a str,
    /// The counters in column order; only the first `count` are valid.
    pub stats: [u64; STATS],
    /// 11, 15 or 17, depending on the kernel.
    pub count: usize,
}

/// Parses /proc/diskstats into `out`, one [`Disk`] per non-blank line. An
/// empty file (no block devices) is valid.
pub fn parse_into<'t>(s: &'t str, out: &mut Vec<Disk<'t>>) -> Result<(), ParseError> {
    out.clear();
    for (i, l) in lines(s).enumerate() {
        if !is_blank(l) {
            out.push(parse_line(l, i + 1)?);
        }
    }
    Ok(())
}

fn parse_line(line: &str, lineno: usize) -> Result<Disk<'_>, ParseError> {
    let mut f = fields(line);
    let major = u64_field(next_field(&mut f, lineno, "major")?, lineno, "major")?;
    let minor = u64_field(next_field(&mut f, lineno, "minor")?, lineno, "minor")?;
    let name = next_field(&mut f, lineno, "device name")?;
    let mut stats = [0u64; STATS];
    let mut count = 0;
    for (i, tok) in f.enumerate() {
        if let Some(slot) = stats.get_mut(i) {
            *slot = u64_field(tok, lineno, FAMILIES[i].0.name)?;
        }
        count = i + 1;
    }
    match count {
        11 | 15 => {}
        n if n >= STATS => count = STATS,
        n => {
            return Err(ParseError::new(
                lineno,
                format!("{name}: {n} counters; kernels print 11, 15 or 17"),
            ));
        }
    }
    Ok(Disk {
        major,
        minor,
        name,
        stats,
        count,
    })
}

/// Parses a udev database file (`/run/udev/data/b8:0`) into its device
/// properties, the `E:KEY=VALUE` lines; other lines (`S:` links, `I:`,
/// `G:` tags...) are skipped, as node_exporter skips them. Never fails:
/// every line is either a property or ignored.
pub fn parse_udev_into(text: &str, out: &mut Vec<(String, String)>) -> Result<(), ParseError> {
    out.clear();
    for line in text.lines() {
        if let Some((k, v)) = line.strip_prefix("E:").and_then(|p| p.split_once('=')) {
            // A later line with the same key wins, as in node_exporter's map.
            out.retain(|(key, _)| key != k);
            out.push((k.to_string(), v.to_string()));
        }
    }
    Ok(())
}

/// Most bytes of one udev database file read (they are a few KB).
const MAX_UDEV_BYTES: u64 = 1 << 20;

/// The properties of block device `major:minor` in the udev database
/// `dir`; `None` if there is no readable file for it.
fn udev_properties(dir: &Path, major: u64, minor: u64) -> Option<Vec<(String, String)>> {
    let path = dir.join(format!("b{major}:{minor}"));
    if !std::fs::metadata(&path).ok()?.is_file() {
        return None;
    }
    let mut raw = Vec::new();
    std::fs::File::open(&path)
        .ok()?
        .take(MAX_UDEV_BYTES)
        .read_to_end(&mut raw)
        .ok()?;
    let mut out = Vec::new();
    parse_udev_into(&String::from_utf8_lossy(&raw), &mut out).ok()?;
    Some(out)
}

/// `node_disk_info` labels and the udev-only families of one device.
///
/// With `--path.udev.data` a directory and a database file for the device,
/// the labels are node_exporter's: udev's `ID_PATH`, `ID_WWN`, `ID_MODEL`,
/// `SCSI_IDENT_SERIAL` (else `ID_SERIAL_SHORT`, else `ID_SERIAL`) and
/// `ID_REVISION`. Without one (no udev in a container, a device udev has
/// not seen), they are read from sysfs, which holds the same strings for
/// NVMe (model, serial, firmware, wwid) and virtio (serial); node_exporter
/// leaves them empty then. For SCSI/ATA disks udev rewrites the strings
/// (underscores for spaces, `0x` WWNs), so sysfs values may differ from
/// udev's; `path` exists only in udev.
#[derive(Debug, Default)]
struct Info {
    path: String,
    wwn: String,
    model: String,
    serial: String,
    revision: String,
    rotational: String,
    /// `node_disk_device_mapper_info`: name, uuid, vg_name, lv_name, lv_layer.
    dm: Option<[String; 5]>,
    /// `node_disk_filesystem_info`: type, usage, uuid, version.
    fs: Option<[String; 4]>,
    /// node_exporter's ATA families that the device has a number for.
    ata: Vec<(usize, f64)>,
}

impl Info {
    fn read(sysfs: &Path, udev: Option<&Path>, device: &str, major: u64, minor: u64) -> Info {
        if let Some(props) = udev.and_then(|d| udev_properties(d, major, minor)) {
            return Info::from_udev(sysfs, device, &props);
        }
        Info::from_sysfs(sysfs, device)
    }

    fn from_udev(sysfs: &Path, device: &str, props: &[(String, String)]) -> Info {
        let get = |k: &str| {
            props
                .iter()
                .find(|(key, _)| key == k)
                .map_or("", |(_, v)| v.as_str())
        };
        let serial = ["SCSI_IDENT_SERIAL", "ID_SERIAL_SHORT", "ID_SERIAL"]
            .into_iter()
            .map(get)
            .find(|s| !s.is_empty())
            .unwrap_or("");
        let owned = |keys: &[&str]| keys.iter().map(|k| get(k).to_string()).collect::<Vec<_>>();
        let dm = (!get("DM_NAME").is_empty()).then(|| {
            let v = owned(&[
                "DM_NAME",
                "DM_UUID",
                "DM_VG_NAME",
                "DM_LV_NAME",
                "DM_LV_LAYER",
            ]);
            [0, 1, 2, 3, 4].map(|i| v[i].clone())
        });
        let fs = (!get("ID_FS_TYPE").is_empty()).then(|| {
            let v = owned(&["ID_FS_TYPE", "ID_FS_USAGE", "ID_FS_UUID", "ID_FS_VERSION"]);
            [0, 1, 2, 3].map(|i| v[i].clone())
        });
        let mut ata = Vec::new();
        if !get("ID_ATA").is_empty() {
            for (i, (key, _)) in ATA.iter().enumerate() {
                if let Some((_, v)) = props.iter().find(|(k, _)| k == key)
                    && let Some(n) = crate::kernel::go_compat::go_parse_float(v)
                {
                    ata.push((i, n));
                }
            }
        }
        Info {
            path: get("ID_PATH").to_string(),
            wwn: get("ID_WWN").to_string(),
            model: get("ID_MODEL").to_string(),
            serial: serial.to_string(),
            revision: get("ID_REVISION").to_string(),
            rotational: Info::from_sysfs(sysfs, device).rotational,
            dm,
            fs,
            ata,
        }
    }

    fn from_sysfs(sysfs: &Path, device: &str) -> Info {
        // sysfs spells '/' in block device names (cciss/c0d0) as '!'.
        let dir_name = device.replace('/', "!");
        if dir_name == "." || dir_name == ".." {
            return Info::default();
        }
        let dir = sysfs.join("block").join(dir_name);
        let attr = |rel: &str| read_attr(&dir.join(rel));
        Info {
            wwn: attr("wwid").unwrap_or_default(),
            model: attr("device/model").unwrap_or_default(),
            serial: attr("device/serial")
                .or_else(|| attr("serial"))
                .unwrap_or_default(),
            revision: attr("device/firmware_rev")
                .or_else(|| attr("device/rev"))
                .unwrap_or_default(),
            // node_exporter reports 0 when the queue attributes are missing.
            rotational: attr("queue/rotational").unwrap_or_else(|| "0".to_string()),
            ..Info::default()
        }
    }
}

/// A small sysfs attribute, trimmed; `None` if absent, unreadable or empty.
fn read_attr(path: &Path) -> Option<String> {
    let mut s = String::new();
    std::fs::File::open(path)
        .ok()?
        .take(4096)
        .read_to_string(&mut s)
        .ok()?;
    let t = s.trim();
    (!t.is_empty()).then(|| t.to_string())
}

/// What is remembered about a device between scrapes.
struct Device {
    name: String,
    major: u64,
    minor: u64,
    excluded: bool,
    info: Info,
    /// The scrape that last saw the device, for forgetting removed ones.
    seen: u64,
}

/// A device exported in this scrape: `disk` indexes the parsed disks,
/// `device` [`DiskStatsCollector::devices`].
struct Row {
    disk: usize,
    device: usize,
}

pub struct DiskStatsCollector {
    file: SourceFile,
    sysfs: PathBuf,
    /// `--path.udev.data`, if it is a directory (checked at start, as
    /// node_exporter checks it).
    udev: Option<PathBuf>,
    /// `--collector.diskstats.device-exclude`; `None` excludes nothing.
    exclude: Option<Regex>,
    /// `--collector.diskstats.device-include`: when set, it alone decides.
    include: Option<Regex>,
    devices: Vec<Device>,
    by_name: HashMap<String, usize>,
    scrape: u64,
    /// Kept empty between scrapes; only its allocation is reused.
    disks: Vec<Disk<'static>>,
    rows: Vec<Row>,
}

pub fn build(s: &Settings) -> Box<dyn Collector> {
    Box::new(DiskStatsCollector {
        file: SourceFile::new(&s.procfs, "diskstats"),
        sysfs: s.sysfs.clone(),
        udev: s.udev.as_ref().filter(|d| d.is_dir()).cloned(),
        exclude: s.regex(DEVICE_EXCLUDE).cloned(),
        include: s.regex(DEVICE_INCLUDE).cloned(),
        devices: Vec::new(),
        by_name: HashMap::new(),
        scrape: 0,
        disks: Vec::new(),
        rows: Vec::new(),
    })
}

/// The state `fill` updates, borrowed apart from the source file.
struct Tracker<'c> {
    exclude: Option<&'c Regex>,
    include: Option<&'c Regex>,
    sysfs: &'c Path,
    udev: Option<&'c Path>,
    devices: &'c mut Vec<Device>,
    by_name: &'c mut HashMap<String, usize>,
    scrape: u64,
}

impl Tracker<'_> {
    /// The cached entry for `disk`, created (regex and sysfs consulted) the
    /// first time its name is seen or when its device number changes.
    fn device(&mut self, disk: &Disk) -> usize {
        let i = match self.by_name.get(disk.name) {
            Some(&i) => i,
            None => {
                self.devices.push(Device {
                    name: disk.name.to_string(),
                    major: disk.major,
                    minor: disk.minor,
                    excluded: match self.include {
                        Some(re) => !re.is_match(disk.name),
                        None => self.exclude.is_some_and(|re| re.is_match(disk.name)),
                    },
                    info: Info::default(),
                    seen: 0,
                });
                let i = self.devices.len() - 1;
                self.by_name.insert(disk.name.to_string(), i);
                self.refresh_info(i);
                i
            }
        };
        let d = &mut self.devices[i];
        if (d.major, d.minor) != (disk.major, disk.minor) {
            d.major = disk.major;
            d.minor = disk.minor;
            self.refresh_info(i);
        }
        self.devices[i].seen = self.scrape;
        i
    }

    fn refresh_info(&mut self, i: usize) {
        let d = &mut self.devices[i];
        if !d.excluded {
            d.info = Info::read(self.sysfs, self.udev, &d.name, d.major, d.minor);
        }
    }
}

/// Forgets devices scrape `scrape` did not see (hot-unplugged), so the
/// cache does not grow with every device a host ever had.
fn forget_unseen(devices: &mut Vec<Device>, by_name: &mut HashMap<String, usize>, scrape: u64) {
    if devices.iter().all(|d| d.seen == scrape) {
        return;
    }
    devices.retain(|d| d.seen == scrape);
    by_name.clear();
    for (i, d) in devices.iter().enumerate() {
        by_name.insert(d.name.clone(), i);
    }
}

/// Fills `rows` with the parsed disks that are not excluded.
fn fill(disks: &[Disk], tracker: &mut Tracker, rows: &mut Vec<Row>) {
    rows.clear();
    for (i, disk) in disks.iter().enumerate() {
        let device = tracker.device(disk);
        if !tracker.devices[device].excluded {
            rows.push(Row { disk: i, device });
        }
    }
}

/// Writes `node_disk_info` and one family per counter column.
fn emit(rows: &[Row], devices: &[Device], disks: &[Disk], enc: &mut Encoder) {
    if rows.is_empty() {
        return;
    }
    enc.family(&INFO);
    for row in rows {
        let d = &devices[row.device];
        let (mut b1, mut b2) = ([0u8; 20], [0u8; 20]);
        enc.sample(
            &INFO,
            &[
                ("device", d.name.as_str()),
                ("major", u64_label(d.major, &mut b1)),
                ("minor", u64_label(d.minor, &mut b2)),
                ("path", &d.info.path),
                ("wwn", &d.info.wwn),
                ("model", &d.info.model),
                ("serial", &d.info.serial),
                ("revision", &d.info.revision),
                ("rotational", &d.info.rotational),
            ],
            1u64,
        );
    }
    for (k, (desc, unit)) in FAMILIES.iter().enumerate() {
        if !rows.iter().any(|r| disks[r.disk].count > k) {
            continue;
        }
        enc.family(desc);
        for row in rows {
            let disk = &disks[row.disk];
            if disk.count > k {
                let device = devices[row.device].name.as_str();
                enc.sample(desc, &[("device", device)], unit.value(disk.stats[k]));
            }
        }
    }
    emit_udev_families(rows, devices, enc);
}

/// The families only udev's database has: device mapper, filesystem, ATA.
fn emit_udev_families(rows: &[Row], devices: &[Device], enc: &mut Encoder) {
    let info = |r: &Row| &devices[r.device];
    if rows.iter().any(|r| info(r).info.dm.is_some()) {
        enc.family(&DM_INFO);
        for d in rows.iter().map(info) {
            if let Some([name, uuid, vg, lv, layer]) = &d.info.dm {
                enc.sample(
                    &DM_INFO,
                    &[
                        ("device", d.name.as_str()),
                        ("name", name),
                        ("uuid", uuid),
                        ("vg_name", vg),
                        ("lv_name", lv),
                        ("lv_layer", layer),
                    ],
                    1u64,
                );
            }
        }
    }
    if rows.iter().any(|r| info(r).info.fs.is_some()) {
        enc.family(&FS_INFO);
        for d in rows.iter().map(info) {
            if let Some([kind, usage, uuid, version]) = &d.info.fs {
                enc.sample(
                    &FS_INFO,
                    &[
                        ("device", d.name.as_str()),
                        ("type", kind),
                        ("usage", usage),
                        ("uuid", uuid),
                        ("version", version),
                    ],
                    1u64,
                );
            }
        }
    }
    for (i, (_, desc)) in ATA.iter().enumerate() {
        if !rows
            .iter()
            .any(|r| info(r).info.ata.iter().any(|(k, _)| *k == i))
        {
            continue;
        }
        enc.family(desc);
        for d in rows.iter().map(info) {
            if let Some((_, v)) = d.info.ata.iter().find(|(k, _)| *k == i) {
                enc.sample(desc, &[("device", d.name.as_str())], *v);
            }
        }
    }
}

impl Collector for DiskStatsCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        let text = match self.file.read()? {
            Read::Text(t) => t,
            Read::Absent => return Ok(()),
        };
        let mut disks = recycle(std::mem::take(&mut self.disks));
        let parsed = parse_into(text, &mut disks);
        if parsed.is_ok() {
            self.scrape += 1;
            let mut tracker = Tracker {
                exclude: self.exclude.as_ref(),
                include: self.include.as_ref(),
                sysfs: &self.sysfs,
                udev: self.udev.as_deref(),
                devices: &mut self.devices,
                by_name: &mut self.by_name,
                scrape: self.scrape,
            };
            fill(&disks, &mut tracker, &mut self.rows);
            emit(&self.rows, &self.devices, &disks, enc);
            // Row indices point into `devices`: prune only after emitting.
            forget_unseen(&mut self.devices, &mut self.by_name, self.scrape);
        }
        self.disks = recycle(disks);
        parsed.map_err(|e| self.file.parse_error(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collectors::test_support::render;

    const FIXTURE: &str = include_str!("../../tests/fixtures/proc/diskstats");
    const VDA: &str = " 254       0 vda 50989 8224 3483818 8745 15009 14970 2531288 8425 0 4992 17526 5461 22 353064 310 1547 44";

    fn disks(s: &str) -> Result<Vec<Disk<'_>>, ParseError> {
        let mut out = Vec::new();
        parse_into(s, &mut out).map(|()| out)
    }

    fn fixture_root() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/proc")
    }

    /// A scratch directory removed on drop.
    struct TempDir(tempfile::TempDir);

    impl TempDir {
        fn new() -> TempDir {
            TempDir(tempfile::tempdir().unwrap())
        }
        fn path(&self) -> &Path {
            self.0.path()
        }
        fn write(&self, rel: &str, content: &str) {
            let p = self.path().join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, content).unwrap();
        }
    }

    #[test]
    fn fixture() {
        let d = disks(FIXTURE).unwrap();
        assert_eq!(d.len(), 10);
        let vda = d.iter().find(|d| d.name == "vda").unwrap();
        assert_eq!((vda.major, vda.minor, vda.count), (254, 0, 17));
        assert_eq!(
            vda.stats,
            [
                50989, 8224, 3483818, 8745, 15009, 14970, 2531288, 8425, 0, 4992, 17526, 5461, 22,
                353064, 310, 1547, 44
            ]
        );
    }

    #[test]
    fn kernel_variants() {
        // 4.17 and older: 11 counters; 4.18: discards; 5.5: flushes.
        let old = disks("   8       0 sda 1 2 3 4 5 6 7 8 9 10 11\n").unwrap();
        assert_eq!(old[0].count, 11);
        let discard = disks("   8       0 sda 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15\n").unwrap();
        assert_eq!(discard[0].count, 15);
        assert_eq!(discard[0].stats[14], 15);
        // Columns a future kernel appends are ignored.
        let appended = format!("{VDA} 99 98\n");
        let newer = disks(&appended).unwrap();
        assert_eq!(newer[0].count, 17);
        assert_eq!(newer[0].stats[16], 44);
    }

    #[test]
    fn malformed() {
        assert_eq!(disks("").unwrap(), vec![]);
        assert!(disks("\u{1}garbage here\n%%% not a kernel file %%%\n:::\n").is_err());
        let e = disks("   8       0 sda 1 2 3 4 5 6 7 8 9 10 11 12\n").unwrap_err();
        assert!(e.msg.contains("12 counters"), "{}", e.msg);
        let e = disks(&format!("{VDA}\n   8 0\n")).unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.msg.contains("device name"));
        let e = disks("99999999999999999999999 0 sda 1 2 3 4 5 6 7 8 9 10 11\n").unwrap_err();
        assert!(e.msg.contains("major"));
        let e = disks("8 0 sda 1 2 3 4 5 6 7 8 9 10 18446744073709551616\n").unwrap_err();
        assert!(e.msg.contains("node_disk_io_time_weighted_seconds_total"));
        let e = disks("8 0 sda 1 2 x 4 5 6 7 8 9 10 11\n").unwrap_err();
        assert!(e.msg.contains("node_disk_read_bytes_total"));
        // Truncated in the middle of the last line.
        let cut = &FIXTURE[..FIXTURE.len() - 20];
        assert!(disks(cut).is_err());
        let missing = VDA.rsplit_once(' ').unwrap().0;
        assert!(disks(missing).unwrap_err().msg.contains("16 counters"));
    }

    #[test]
    fn collector_on_fixture() {
        let mut c = build(&Settings::with_roots(fixture_root(), "/nonexistent"));
        let out = render(c.as_mut()).unwrap();
        let expected = "\
# HELP node_disk_info Info of /sys/block/<block_device>.
# TYPE node_disk_info gauge
node_disk_info{device=\"vda\",major=\"254\",minor=\"0\",path=\"\",wwn=\"\",model=\"\",serial=\"\",revision=\"\",rotational=\"0\"} 1
# HELP node_disk_reads_completed_total The total number of reads completed successfully.
# TYPE node_disk_reads_completed_total counter
node_disk_reads_completed_total{device=\"vda\"} 50989
# HELP node_disk_reads_merged_total The total number of reads merged.
# TYPE node_disk_reads_merged_total counter
node_disk_reads_merged_total{device=\"vda\"} 8224
# HELP node_disk_read_bytes_total The total number of bytes read successfully.
# TYPE node_disk_read_bytes_total counter
node_disk_read_bytes_total{device=\"vda\"} 1783714816
# HELP node_disk_read_time_seconds_total The total number of seconds spent by all reads.
# TYPE node_disk_read_time_seconds_total counter
node_disk_read_time_seconds_total{device=\"vda\"} 8.745000000000001
# HELP node_disk_writes_completed_total The total number of writes completed successfully.
# TYPE node_disk_writes_completed_total counter
node_disk_writes_completed_total{device=\"vda\"} 15009
# HELP node_disk_writes_merged_total The number of writes merged.
# TYPE node_disk_writes_merged_total counter
node_disk_writes_merged_total{device=\"vda\"} 14970
# HELP node_disk_written_bytes_total The total number of bytes written successfully.
# TYPE node_disk_written_bytes_total counter
node_disk_written_bytes_total{device=\"vda\"} 1296019456
# HELP node_disk_write_time_seconds_total This is the total number of seconds spent by all writes.
# TYPE node_disk_write_time_seconds_total counter
node_disk_write_time_seconds_total{device=\"vda\"} 8.425
# HELP node_disk_io_now The number of I/Os currently in progress.
# TYPE node_disk_io_now gauge
node_disk_io_now{device=\"vda\"} 0
# HELP node_disk_io_time_seconds_total Total seconds spent doing I/Os.
# TYPE node_disk_io_time_seconds_total counter
node_disk_io_time_seconds_total{device=\"vda\"} 4.992
# HELP node_disk_io_time_weighted_seconds_total The weighted # of seconds spent doing I/Os.
# TYPE node_disk_io_time_weighted_seconds_total counter
node_disk_io_time_weighted_seconds_total{device=\"vda\"} 17.526
# HELP node_disk_discards_completed_total The total number of discards completed successfully.
# TYPE node_disk_discards_completed_total counter
node_disk_discards_completed_total{device=\"vda\"} 5461
# HELP node_disk_discards_merged_total The total number of discards merged.
# TYPE node_disk_discards_merged_total counter
node_disk_discards_merged_total{device=\"vda\"} 22
# HELP node_disk_discarded_sectors_total The total number of sectors discarded successfully.
# TYPE node_disk_discarded_sectors_total counter
node_disk_discarded_sectors_total{device=\"vda\"} 353064
# HELP node_disk_discard_time_seconds_total This is the total number of seconds spent by all discards.
# TYPE node_disk_discard_time_seconds_total counter
node_disk_discard_time_seconds_total{device=\"vda\"} 0.31
# HELP node_disk_flush_requests_total The total number of flush requests completed successfully
# TYPE node_disk_flush_requests_total counter
node_disk_flush_requests_total{device=\"vda\"} 1547
# HELP node_disk_flush_requests_time_seconds_total This is the total number of seconds spent by all flush requests.
# TYPE node_disk_flush_requests_time_seconds_total counter
node_disk_flush_requests_time_seconds_total{device=\"vda\"} 0.044
";
        assert_eq!(out, expected);
        assert_eq!(render(c.as_mut()).unwrap(), out);
    }

    #[test]
    fn info_labels_from_sysfs() {
        let sys = TempDir::new();
        sys.write("block/nvme0n1/queue/rotational", "0\n");
        sys.write("block/nvme0n1/wwid", "eui.0025388b91b1b3d4\n");
        sys.write(
            "block/nvme0n1/device/model",
            "Samsung SSD 970 EVO Plus 1TB            \n",
        );
        sys.write("block/nvme0n1/device/serial", "S4EWNX0R123456      \n");
        sys.write("block/nvme0n1/device/firmware_rev", "2B2QEXM7\n");
        sys.write("block/sda/queue/rotational", "1\n");
        sys.write("block/sda/device/model", "ST4000DM004-2CV1\n");
        sys.write("block/sda/device/rev", "0001\n");
        sys.write("block/vda/serial", "overlayblk");
        sys.write("block/cciss!c0d0/queue/rotational", "1\n");
        let proc = TempDir::new();
        proc.write(
            "diskstats",
            " 259 0 nvme0n1 1 0 0 0 0 0 0 0 0 0 0\n 259 1 nvme0n1p1 1 0 0 0 0 0 0 0 0 0 0\n   8 0 sda 1 0 0 0 0 0 0 0 0 0 0\n 254 0 vda 1 0 0 0 0 0 0 0 0 0 0\n 104 0 cciss/c0d0 1 0 0 0 0 0 0 0 0 0 0\n",
        );
        let mut c = build(&Settings::with_roots(proc.path(), sys.path()));
        let out = render(c.as_mut()).unwrap();
        let info: Vec<&str> = out
            .lines()
            .filter(|l| l.starts_with("node_disk_info{"))
            .collect();
        assert_eq!(
            info,
            [
                "node_disk_info{device=\"nvme0n1\",major=\"259\",minor=\"0\",path=\"\",wwn=\"eui.0025388b91b1b3d4\",model=\"Samsung SSD 970 EVO Plus 1TB\",serial=\"S4EWNX0R123456\",revision=\"2B2QEXM7\",rotational=\"0\"} 1",
                "node_disk_info{device=\"sda\",major=\"8\",minor=\"0\",path=\"\",wwn=\"\",model=\"ST4000DM004-2CV1\",serial=\"\",revision=\"0001\",rotational=\"1\"} 1",
                "node_disk_info{device=\"vda\",major=\"254\",minor=\"0\",path=\"\",wwn=\"\",model=\"\",serial=\"overlayblk\",revision=\"\",rotational=\"0\"} 1",
                "node_disk_info{device=\"cciss/c0d0\",major=\"104\",minor=\"0\",path=\"\",wwn=\"\",model=\"\",serial=\"\",revision=\"\",rotational=\"1\"} 1",
            ]
        );
        // 11-counter lines: no discard or flush families at all.
        assert!(out.contains("node_disk_io_time_weighted_seconds_total{device=\"sda\"} 0\n"));
        assert!(!out.contains("discard"));
        assert!(!out.contains("flush"));
        assert!(!out.contains("nvme0n1p1"));
    }

    #[test]
    fn udev_properties_give_node_exporters_labels() {
        let mut props = Vec::new();
        parse_udev_into("S:x\nE:A=1\nE:B=x=y\nE:NOEQ\nE:A=2\nI:5\n", &mut props).unwrap();
        assert_eq!(
            props,
            [("B".into(), "x=y".into()), ("A".into(), "2".into())]
        );

        let udev = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/udev");
        let proc = TempDir::new();
        proc.write(
            "diskstats",
            "   8 0 sda 1 0 0 0 0 0 0 0 0 0 0\n 252 1 dm-1 1 0 0 0 0 0 0 0 0 0 0\n 254 0 vda 1 0 0 0 0 0 0 0 0 0 0\n 259 0 nvme0n1 1 0 0 0 0 0 0 0 0 0 0\n",
        );
        let sys = TempDir::new();
        sys.write("block/sda/queue/rotational", "1\n");
        sys.write("block/nvme0n1/device/model", "Some NVMe\n");
        let mut s = Settings::with_roots(proc.path(), sys.path());
        s.udev = Some(udev);
        let out = render(build(&s).as_mut()).unwrap();
        let lines = |prefix: &str| -> Vec<String> {
            out.lines()
                .filter(|l| l.starts_with(prefix))
                .map(str::to_string)
                .collect()
        };
        assert_eq!(
            lines("node_disk_info{"),
            [
                "node_disk_info{device=\"sda\",major=\"8\",minor=\"0\",path=\"pci-0000:3b:00.0-sas-phy7-lun-0\",wwn=\"0x7c72382b8de36a64\",model=\"TOSHIBA_KSDB4U86\",serial=\"2160A0D5FVGG\",revision=\"0102\",rotational=\"1\"} 1",
                "node_disk_info{device=\"dm-1\",major=\"252\",minor=\"1\",path=\"\",wwn=\"\",model=\"\",serial=\"\",revision=\"\",rotational=\"0\"} 1",
                "node_disk_info{device=\"vda\",major=\"254\",minor=\"0\",path=\"pci-0000:00:05.0\",wwn=\"\",model=\"\",serial=\"usescope-vda-0001\",revision=\"\",rotational=\"0\"} 1",
                // No udev file for it: sysfs, as without udev.
                "node_disk_info{device=\"nvme0n1\",major=\"259\",minor=\"0\",path=\"\",wwn=\"\",model=\"Some NVMe\",serial=\"\",revision=\"\",rotational=\"0\"} 1",
            ]
        );
        let dm = lines("node_disk_device_mapper_info{");
        assert_eq!(dm.len(), 1, "{out}");
        assert!(
            dm[0].starts_with("node_disk_device_mapper_info{device=\"dm-1\",name=\""),
            "{dm:?}"
        );
        assert_eq!(
            lines("node_disk_filesystem_info{")[0],
            "node_disk_filesystem_info{device=\"sda\",type=\"LVM2_member\",usage=\"raid\",uuid=\"cVVv6j-HSA2-IY33-1Jmj-dO2H-YL7w-b4Oxqw\",version=\"LVM2 001\"} 1"
        );
        assert_eq!(
            lines("node_disk_ata_rotation_rate_rpm{"),
            ["node_disk_ata_rotation_rate_rpm{device=\"sda\"} 7200"]
        );
        assert_eq!(
            lines("node_disk_ata_write_cache_enabled{"),
            ["node_disk_ata_write_cache_enabled{device=\"sda\"} 0"]
        );
    }

    #[test]
    fn mixed_widths_emit_each_family_for_the_devices_that_have_it() {
        let proc = TempDir::new();
        proc.write(
            "diskstats",
            &format!("{VDA}\n   8 0 sda 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15\n"),
        );
        let out =
            render(build(&Settings::with_roots(proc.path(), "/nonexistent")).as_mut()).unwrap();
        assert!(out.contains("node_disk_discard_time_seconds_total{device=\"vda\"} 0.31\nnode_disk_discard_time_seconds_total{device=\"sda\"} 0.015\n"));
        assert!(out.contains(
            "# TYPE node_disk_flush_requests_total counter\nnode_disk_flush_requests_total{device=\"vda\"} 1547\n# HELP"
        ));
    }

    #[test]
    fn exclude_decisions_are_cached_and_forgotten_with_the_device() {
        let proc = TempDir::new();
        let sys = TempDir::new();
        sys.write("block/sdb/queue/rotational", "1\n");
        proc.write(
            "diskstats",
            "8 16 sdb 1 0 0 0 0 0 0 0 0 0 0\n8 17 sdb1 1 0 0 0 0 0 0 0 0 0 0\n",
        );
        let mut c = DiskStatsCollector {
            file: SourceFile::new(proc.path(), "diskstats"),
            sysfs: sys.path().to_path_buf(),
            udev: None,
            exclude: Some(Regex::new(DEFAULT_DEVICE_EXCLUDE).unwrap()),
            include: None,
            devices: Vec::new(),
            by_name: HashMap::new(),
            scrape: 0,
            disks: Vec::new(),
            rows: Vec::new(),
        };
        let out = render(&mut c).unwrap();
        assert!(out.contains("device=\"sdb\""));
        assert!(!out.contains("sdb1"));
        let names: Vec<(&str, bool)> = c
            .devices
            .iter()
            .map(|d| (d.name.as_str(), d.excluded))
            .collect();
        assert_eq!(names, [("sdb", false), ("sdb1", true)]);
        // sysfs is read once per device: a change there is not seen...
        sys.write("block/sdb/queue/rotational", "0\n");
        assert!(render(&mut c).unwrap().contains("rotational=\"1\""));
        // ...until the name comes back with another device number.
        proc.write("diskstats", "8 32 sdb 1 0 0 0 0 0 0 0 0 0 0\n");
        let out = render(&mut c).unwrap();
        assert!(out.contains("minor=\"32\""));
        assert!(out.contains("rotational=\"0\""));
        assert_eq!(c.devices.len(), 1, "sdb1 was unplugged and forgotten");
        assert_eq!(c.by_name.get("sdb"), Some(&0));
    }

    #[test]
    fn custom_and_empty_exclude_patterns() {
        use crate::collectors::FlagValue;
        let mut s = Settings::with_roots(fixture_root(), "/nonexistent");
        s.set(
            DEVICE_EXCLUDE,
            Some(FlagValue::Regex(Regex::new("^vda$").unwrap())),
        );
        let out = render(build(&s).as_mut()).unwrap();
        assert!(out.contains("device=\"loop0\""));
        assert!(out.contains("device=\"zram0\""));
        assert!(!out.contains("device=\"vda\""));
        // An invalid pattern never gets here (cli.rs rejects it); without
        // one, nothing is excluded.
        s.set(DEVICE_EXCLUDE, None);
        let out = render(build(&s).as_mut()).unwrap();
        assert!(out.contains("device=\"loop0\""));
        assert!(out.contains("device=\"vda\""));
        // An include keeps only what it matches, whatever the exclude
        // (the command line refuses both given; the default stays set).
        s.set(
            DEVICE_EXCLUDE,
            Some(FlagValue::Regex(
                Regex::new(DEFAULT_DEVICE_EXCLUDE).unwrap(),
            )),
        );
        s.set(
            DEVICE_INCLUDE,
            Some(FlagValue::Regex(Regex::new("^(vda|loop0)$").unwrap())),
        );
        let out = render(build(&s).as_mut()).unwrap();
        assert!(
            out.contains("device=\"loop0\""),
            "included though the default excludes it"
        );
        assert!(out.contains("device=\"vda\""));
        assert!(!out.contains("device=\"zram0\""));
    }

    #[test]
    fn absent_and_bad_files() {
        let proc = TempDir::new();
        let mut c = build(&Settings::with_roots(proc.path(), "/nonexistent"));
        assert_eq!(render(c.as_mut()).unwrap(), "");
        proc.write("diskstats", &format!("{VDA}\n   8 0 sda 1 2\n"));
        let e = render(c.as_mut()).unwrap_err();
        assert!(e.file.ends_with("diskstats"));
        assert_eq!(e.line, Some(2));
    }
}
