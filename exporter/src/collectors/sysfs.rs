//! Helpers shared by the sysfs collectors (hwmon, thermal_zone, rapl,
//! bcachefs, ...): reading
//! one attribute the way node_exporter (and prometheus/procfs) does, and
//! collecting samples of families whose names and labels are only known at
//! scrape time, to write them grouped and in node_exporter's order.
//!
//! It also holds the rule for a device that goes away while a scrape
//! reads it ([`DeviceError`], [`settle`]): that device is left out of the
//! scrape, and the collector reports the others.
//!
//! Not a collector: it is declared outside the `registry!` list.

use std::fs::OpenOptions;
use std::io;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

use regex::Regex;

use crate::kernel::error::{CollectError, ParseError};
use crate::kernel::source::{SourceFile, Vanished, vanished};
use crate::scrape::exposition::{Encoder, MetricType, Value, help_is_plain};

/// Why one device of a class (an interface, a chip, a controller, a
/// cache set) could not be read.
#[derive(Debug)]
pub enum DeviceError {
    /// A read under the device failed in a way that means it may have
    /// gone (ENOENT, ENOTDIR, ENODEV, ENXIO): [`DeviceError::settle`]
    /// decides with the device's directory.
    Vanishing(CollectError, Vanished),
    /// Anything else (a value that does not parse, EIO, ...): fails the
    /// collector.
    Failed(CollectError),
}

impl From<CollectError> for DeviceError {
    fn from(e: CollectError) -> DeviceError {
        DeviceError::Failed(e)
    }
}

/// The error itself, where no device is in question (the class directory).
impl From<DeviceError> for CollectError {
    fn from(e: DeviceError) -> CollectError {
        match e {
            DeviceError::Vanishing(e, _) | DeviceError::Failed(e) => e,
        }
    }
}

/// An I/O error from reading `path`, which belongs to a device.
pub fn io_error(path: &Path, e: io::Error) -> DeviceError {
    let v = vanished(&e);
    let e = CollectError::io(path, e);
    match v {
        Some(v) => DeviceError::Vanishing(e, v),
        None => DeviceError::Failed(e),
    }
}

/// A device's attribute read through a [`SourceFile`], for the readers
/// whose functions return [`DeviceError`].
pub trait DeviceFile {
    /// [`SourceFile::parse_with`], an error because the device went away
    /// ([`SourceFile::device_gone`]) being [`DeviceError::Vanishing`].
    fn device_parse<T>(
        &mut self,
        parse: impl FnOnce(&str) -> Result<T, ParseError>,
    ) -> Result<Option<T>, DeviceError>;
}

impl DeviceFile for SourceFile {
    fn device_parse<T>(
        &mut self,
        parse: impl FnOnce(&str) -> Result<T, ParseError>,
    ) -> Result<Option<T>, DeviceError> {
        self.parse_with(parse)
            .map_err(|e| match self.device_gone() {
                true => DeviceError::Vanishing(e, Vanished::NoDevice),
                false => DeviceError::Failed(e),
            })
    }
}

impl DeviceError {
    /// `Ok` if the device whose directory is `dir` went away while it was
    /// read (an ENODEV or ENXIO from one of its files, or an ENOENT and
    /// its directory is gone now): it is left out of this scrape. Logged
    /// at debug level only, since interfaces and mounts come and go by the
    /// thousand on a container host. Any other error is returned: the
    /// collector fails, as before.
    pub fn settle(self, dir: &Path) -> Result<(), CollectError> {
        match self {
            DeviceError::Vanishing(e, v) if v.device_gone(dir) => {
                tracing::debug!(device = %dir.display(), error = %e, "device went away during the scrape; left out");
                Ok(())
            }
            DeviceError::Vanishing(e, _) | DeviceError::Failed(e) => Err(e),
        }
    }
}

/// The end of reading the device at `dir`, whose samples start at `mark`
/// in `families` ([`Families::len`] before it was read): a device that
/// went away is left out with every sample it pushed ([`DeviceError::settle`]).
pub fn settle(
    families: &mut Families,
    mark: usize,
    dir: &Path,
    read: Result<(), DeviceError>,
) -> Result<(), CollectError> {
    let Err(e) = read else {
        return Ok(());
    };
    e.settle(dir)?;
    families.truncate(mark);
    Ok(())
}

/// procfs' `SysReadFile`: one read(2) of at most 128 bytes. Some hwmon
/// drivers answer EAGAIN for ever, so a sysfs attribute is read once and
/// never polled; only regular files are opened (a FIFO or a device in a
/// copied tree must not block or stream).
pub fn read_raw(path: &Path) -> io::Result<Vec<u8>> {
    read_at_most(path, 128, true)
}

/// An attribute read with [`read_attribute`] and parsed into a fresh
/// value; either error names the file.
pub fn read_parsed<T: Default>(
    path: &Path,
    parse: impl FnOnce(&str, &mut T) -> Result<(), ParseError>,
) -> Result<T, DeviceError> {
    let text = read_attribute(path).map_err(|e| io_error(path, e))?;
    let mut v = T::default();
    parse(&text, &mut v).map_err(|e| CollectError::from_parse(path, e))?;
    Ok(v)
}

/// [`read_parsed`], with an absent attribute as `None` (procfs reads many
/// optional attributes as zero or empty).
pub fn read_parsed_if_present<T: Default>(
    path: &Path,
    parse: impl FnOnce(&str, &mut T) -> Result<(), ParseError>,
) -> Result<Option<T>, DeviceError> {
    let text = match read_attribute(path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_error(path, e)),
    };
    let mut v = T::default();
    parse(&text, &mut v).map_err(|e| CollectError::from_parse(path, e))?;
    Ok(Some(v))
}

/// The most a sysfs attribute holds: the kernel formats each into one page.
pub const ATTRIBUTE_MAX_BYTES: usize = 4096;

/// A whole sysfs attribute (bcache's and bcachefs's multi-line stats, a
/// counter, a label) as text, invalid UTF-8 replaced: the guards of
/// [`read_raw`], at most [`ATTRIBUTE_MAX_BYTES`]. A longer file is an
/// error, not a truncated value: sysfs never writes one, so it is not an
/// attribute. The collectors read every per-scrape file through here or a
/// [`crate::kernel::source::SourceFile`], never with an unbounded read.
pub fn read_attribute(path: &Path) -> io::Result<String> {
    let raw = read_at_most(path, ATTRIBUTE_MAX_BYTES + 1, false)?;
    if raw.len() > ATTRIBUTE_MAX_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("longer than a sysfs attribute ({ATTRIBUTE_MAX_BYTES} bytes)"),
        ));
    }
    Ok(match String::from_utf8(raw) {
        Ok(s) => s,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    })
}

/// Up to `max` bytes of a regular file, opened without blocking: one
/// read(2) when `single_read` (node_exporter's), else until end of file
/// or `max` (sysfs gives an attribute in one read, a fixture file may take
/// more). EAGAIN after some bytes ends the read with what was read.
fn read_at_most(path: &Path, max: usize, single_read: bool) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let meta = std::fs::metadata(path)?;
    let t = meta.file_type();
    if !t.is_file() || t.is_fifo() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    let mut f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
        .open(path)?;
    if !f.metadata()?.file_type().is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    let mut buf = vec![0u8; max];
    let mut n = 0;
    while n < max {
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if n > 0 && e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) => return Err(e),
        }
        if single_read {
            break;
        }
    }
    buf.truncate(n);
    Ok(buf)
}

/// [`read_raw`], as text with surrounding whitespace trimmed (procfs'
/// `SysReadFile`). Invalid UTF-8 is replaced.
pub fn read_trimmed(path: &Path) -> io::Result<String> {
    let raw = read_raw(path)?;
    Ok(String::from_utf8_lossy(&raw).trim().to_string())
}

/// node_exporter's `SanitizeMetricName`: each run of characters outside
/// `[0-9A-Za-z_]`, with the underscores around it, becomes one `_`.
pub fn sanitize_metric_name(name: &str) -> String {
    let valid = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = String::with_capacity(name.len());
    let mut chars = name.chars().peekable();
    while let Some(c) = chars.next() {
        if valid(c) && c != '_' {
            out.push(c);
            continue;
        }
        // A run of underscores: kept unless invalid characters follow.
        let mut underscores = 0;
        let mut c = c;
        while c == '_' {
            underscores += 1;
            match chars.next() {
                Some(n) => c = n,
                None => {
                    out.extend(std::iter::repeat_n('_', underscores));
                    return out;
                }
            }
        }
        if valid(c) {
            out.extend(std::iter::repeat_n('_', underscores));
            out.push(c);
            continue;
        }
        // Invalid characters, then any underscores and invalid ones after.
        while chars.peek().is_some_and(|&n| !valid(n) || n == '_') {
            chars.next();
        }
        out.push('_');
    }
    out
}

/// One sample of a family named at run time.
struct Row {
    name: String,
    help: String,
    kind: MetricType,
    labels: Vec<(&'static str, String)>,
    value: f64,
    /// Order of arrival: the first row of a family gives its HELP.
    seq: usize,
}

/// Samples gathered in any order and written grouped by family, families
/// by name, labels by name and series by label values: node_exporter's
/// (the Prometheus client library's) output order. A family's HELP is the first one given.
#[derive(Default)]
pub struct Families {
    rows: Vec<Row>,
}

impl Families {
    pub fn clear(&mut self) {
        self.rows.clear();
    }

    pub fn push(
        &mut self,
        name: impl Into<String>,
        help: impl Into<String>,
        kind: MetricType,
        labels: &[(&'static str, &str)],
        value: f64,
    ) {
        let mut labels: Vec<(&'static str, String)> =
            labels.iter().map(|(n, v)| (*n, v.to_string())).collect();
        // The client library sorts a series' labels by name.
        labels.sort_by_key(|(n, _)| *n);
        self.rows.push(Row {
            name: name.into(),
            help: help.into(),
            kind,
            labels,
            value,
            seq: self.rows.len(),
        });
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The samples pushed so far: a mark to [`Families::truncate`] to.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Forgets the samples pushed after `mark` (a device that went away).
    pub fn truncate(&mut self, mark: usize) {
        self.rows.truncate(mark);
    }

    /// Ends a scrape: writes the samples a collector's read gathered, or,
    /// if the read failed, forgets them, so a failure writes nothing.
    pub fn write_or_discard(
        &mut self,
        enc: &mut Encoder,
        read: Result<(), CollectError>,
    ) -> Result<(), CollectError> {
        match read {
            Ok(()) => {
                self.write(enc);
                Ok(())
            }
            Err(e) => {
                self.clear();
                Err(e)
            }
        }
    }

    /// Writes every family and forgets the samples.
    pub fn write(&mut self, enc: &mut Encoder) {
        self.rows.sort_by(|a, b| {
            a.name
                .cmp(&b.name)
                .then_with(|| {
                    a.labels
                        .iter()
                        .map(|(_, v)| v)
                        .cmp(b.labels.iter().map(|(_, v)| v))
                })
                .then(a.seq.cmp(&b.seq))
        });
        let mut labels: Vec<(&str, &str)> = Vec::new();
        let mut i = 0;
        while i < self.rows.len() {
            let first = &self.rows[i];
            let end = i + self.rows[i..]
                .iter()
                .take_while(|r| r.name == first.name)
                .count();
            let oldest = self.rows[i..end]
                .iter()
                .min_by_key(|r| r.seq)
                .unwrap_or(first);
            enc.family_named(
                &first.name,
                &oldest.help,
                help_is_plain(&oldest.help),
                oldest.kind,
            );
            let mut j = i;
            while j < self.rows.len() && self.rows[j].name == first.name {
                let r = &self.rows[j];
                // Two samples of one series (a name two files map to): the
                // first is kept, as the client library keeps the first.
                let dup = j > i && self.rows[j - 1].labels == r.labels;
                if !dup {
                    labels.clear();
                    labels.extend(r.labels.iter().map(|(n, v)| (*n, v.as_str())));
                    enc.sample_named(&r.name, "", &labels, None, Value::F64(r.value));
                }
                j += 1;
            }
            i = j;
        }
        self.rows.clear();
    }
}

/// Makes `name` in the class directory `class` a device that went away
/// after a listing named it: a class entry (a link, as in sysfs) to a
/// device directory that is gone, so every read under it fails with
/// ENOENT, as in the moment between a device's removal and its entry's.
/// node_exporter's device filter: excluded if `exclude` matches, or if
/// `include` is given and does not.
pub fn ignored(include: Option<&Regex>, exclude: Option<&Regex>, name: &str) -> bool {
    exclude.is_some_and(|r| r.is_match(name)) || include.is_some_and(|r| !r.is_match(name))
}

#[cfg(test)]
pub(crate) fn gone_device(class: &Path, name: &str) {
    std::fs::create_dir_all(class).unwrap();
    std::os::unix::fs::symlink(format!("../../devices/gone/{name}"), class.join(name)).unwrap();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scrape::exposition::Format;

    /// What the collectors read per scrape through [`read_attribute`]: a
    /// FIFO or a directory is refused without blocking, a file longer than
    /// a page is an error, invalid UTF-8 is replaced, and a fixture file
    /// that takes several reads is read whole.
    #[test]
    fn attributes_are_bounded_regular_files() {
        let dir = tempfile::tempdir().unwrap();
        let p = |n: &str| dir.path().join(n);
        std::fs::write(p("stats"), "a 1\nb 2\n").unwrap();
        assert_eq!(read_attribute(&p("stats")).unwrap(), "a 1\nb 2\n");
        let page = "x".repeat(ATTRIBUTE_MAX_BYTES);
        std::fs::write(p("page"), &page).unwrap();
        assert_eq!(read_attribute(&p("page")).unwrap(), page);
        std::fs::write(p("huge"), "x".repeat(ATTRIBUTE_MAX_BYTES + 1)).unwrap();
        let e = read_attribute(&p("huge")).unwrap_err();
        assert!(
            e.to_string().contains("longer than a sysfs attribute"),
            "{e}"
        );
        std::fs::write(p("bytes"), b"ab\xffc").unwrap();
        assert_eq!(read_attribute(&p("bytes")).unwrap(), "ab\u{fffd}c");
        let fifo = std::ffi::CString::new(p("fifo").into_os_string().into_encoded_bytes()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let e = read_attribute(&p("fifo")).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(read_attribute(dir.path()).is_err());
        assert_eq!(
            read_raw(&p("page")).unwrap().len(),
            128,
            "node_exporter's one read"
        );
    }

    #[test]
    fn names_are_sanitized_as_node_exporter_does() {
        assert_eq!(sanitize_metric_name("package"), "package");
        assert_eq!(sanitize_metric_name("psys"), "psys");
        assert_eq!(sanitize_metric_name("a-b"), "a_b");
        assert_eq!(sanitize_metric_name("a_-_b"), "a_b");
        assert_eq!(sanitize_metric_name("a__b"), "a__b");
        assert_eq!(sanitize_metric_name("a b.c"), "a_b_c");
        assert_eq!(sanitize_metric_name("_x_"), "_x_");
        assert_eq!(sanitize_metric_name("x-"), "x_");
    }

    #[test]
    fn families_are_grouped_and_sorted() {
        let mut f = Families::default();
        f.push("b", "B.", MetricType::Gauge, &[("x", "2")], 2.0);
        f.push("a", "A.", MetricType::Counter, &[], 1.0);
        f.push("b", "other", MetricType::Gauge, &[("x", "1")], 1.0);
        f.push("b", "B.", MetricType::Gauge, &[("x", "1")], 9.0);
        let mut buf = Vec::new();
        f.write(&mut Encoder::new(&mut buf, Format::PrometheusText));
        assert_eq!(
            String::from_utf8(buf).unwrap(),
            "# HELP a A.\n# TYPE a counter\na 1\n# HELP b B.\n# TYPE b gauge\nb{x=\"1\"} 1\nb{x=\"2\"} 2\n"
        );
        assert!(f.is_empty());
    }

    /// The rule every collector of a class follows for a device that
    /// went away: left out with its samples; any other failure, and a
    /// missing file of a device that is still there, fail as before.
    #[test]
    fn a_device_that_went_away_is_left_out_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let class = dir.path().join("class/thing");
        let present = class.join("thing0");
        std::fs::create_dir_all(&present).unwrap();
        gone_device(&class, "thing1");
        let gone = class.join("thing1");
        let mut f = Families::default();
        f.push("a", "A.", MetricType::Gauge, &[], 1.0);
        let read_gone = |f: &mut Families| {
            f.push("b", "B.", MetricType::Gauge, &[], 2.0);
            read_trimmed(&gone.join("value"))
                .map(drop)
                .map_err(|e| io_error(&gone, e))
        };
        let mark = f.len();
        let r = read_gone(&mut f);
        assert!(
            matches!(r, Err(DeviceError::Vanishing(_, Vanished::NotFound))),
            "{r:?}"
        );
        settle(&mut f, mark, &gone, r).unwrap();
        assert_eq!(f.len(), 1, "the gone device's sample is taken back");

        // Missing on a device that is there: an error, as before.
        let path = present.join("value");
        let e = io_error(&path, read_raw(&path).unwrap_err());
        let e = settle(&mut f, 1, &present, Err(e)).unwrap_err();
        assert!(e.file.ends_with("thing0/value"), "{e}");
        // ENODEV and ENXIO: the device is gone, wherever its directory is.
        for errno in [libc::ENODEV, libc::ENXIO] {
            let e = io_error(&path, io::Error::from_raw_os_error(errno));
            assert!(e.settle(&present).is_ok());
        }
        // Anything else fails, gone directory or not.
        for errno in [libc::EIO, libc::EBUSY, libc::EACCES] {
            let e = io_error(&path, io::Error::from_raw_os_error(errno));
            assert!(e.settle(&gone).is_err(), "errno {errno}");
        }
        let parse = DeviceError::from(CollectError::parse(&path, 1, "bad"));
        assert!(parse.settle(&gone).is_err());
    }

    #[test]
    fn attributes_are_read_once_and_trimmed() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("temp1_input");
        std::fs::write(&p, " 42000\n").unwrap();
        assert_eq!(read_trimmed(&p).unwrap(), "42000");
        std::fs::write(&p, "x".repeat(300)).unwrap();
        assert_eq!(read_raw(&p).unwrap().len(), 128);
        assert!(read_raw(&dir.path().join("missing")).is_err());
        assert!(read_raw(dir.path()).is_err());
    }
}
