//! Reading kernel files at scrape time.
//!
//! A [`SourceFile`] owns one path, a reused read buffer and, when the path
//! is on a real procfs/sysfs, a kept file descriptor that is re-read with
//! `pread(offset 0)`. Kept descriptors halve the kernel cost of a scrape
//! (measured here: ~130 µs against ~230 µs when reopening; BENCHMARKS.md has the floor).
//!
//! On ordinary filesystems (fixture trees in tests, a bind-mounted copy) the
//! file is reopened on every read: a kept descriptor would keep reading a
//! file that has since been replaced or deleted.
//!
//! What a read accepts, since `--path.procfs`/`--path.sysfs` may point at
//! any tree:
//! - Only regular files. A FIFO would block the scrape forever, a device
//!   such as /dev/zero never ends, and opening either can have side
//!   effects, so the type is checked with stat() before the open, which is
//!   non-blocking, and with fstat() on the opened descriptor (the path may
//!   have been swapped in between). procfs and sysfs files are regular
//!   files. A kept descriptor was checked when it was opened and is not
//!   checked again.
//! - At most [`MAX_FILE_BYTES`]; a longer file is an error and is not read
//!   past the cap. A buffer that a large read left behind is released when
//!   the read fails or the file shrinks, so one bad file does not pin
//!   memory for the daemon's life.
//! - Text that is valid UTF-8 line by line. A line that is not is dropped
//!   from the text handed to the parser, alone (its line ending with it);
//!   a warning names the file and the line whenever the set of dropped
//!   lines changes. The parser then succeeds or fails on the other lines,
//!   so one interface name with a stray byte does not take every interface
//!   down. A parser's line numbers count the lines it was given;
//!   [`SourceFile::parse_error`] turns them back into the file's. When the
//!   whole file is valid (always, on a real kernel) the text is the read
//!   buffer itself: no copy, no allocation.
//!
//! Device attributes in sysfs (`class/net/eth0/mtu`, one value each) are
//! read with [`SourceFile::attribute`]: a collector reads dozens per
//! device, so the differences matter there. Reopening one costs about
//! 7 µs on the development VM against 0.55 µs for a `pread` on a kept
//! descriptor, but each kept sysfs descriptor pins about 4 KiB of kernel
//! memory (its seq_file buffer) and one open file. So attribute
//! descriptors are kept only up to a process-wide budget
//! ([`attribute_fd_budget`]); past it they are reopened on every read. A
//! device that does not report a value now (EINVAL from a down link's
//! `carrier` or a virtual device's `speed`, EOPNOTSUPP) is [`Read::Absent`],
//! not an error, and keeps its descriptor for the next scrape.

use std::fs::{File, FileType, OpenOptions};
use std::io::{self, ErrorKind};
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::kernel::absence::{Epoch, Memo, Stamp};
use crate::kernel::dirents;
use crate::kernel::error::{CollectError, ParseError};
use crate::kernel::fd_budget::{Budget, Unit};
use crate::kernel::fs_kind::{is_kernel_fs_magic, magic_of_fd};

/// Most bytes read from one source file. The largest real sources are a
/// few MB: /proc/interrupts on 1024 CPUs is ~1–2 MB, /proc/net/dev with
/// 5,000 interfaces ~4 MB. 32 MiB leaves ample room above them while
/// bounding what a wrong path (a device, a log file, a core dump) costs.
pub const MAX_FILE_BYTES: usize = 32 << 20;

/// A read buffer above this size is released (or shrunk) after a read that
/// failed or used less than a quarter of it. Real sources fit well below
/// it, so their buffers are never reallocated.
const KEEP_BUFFER_BYTES: usize = 1 << 20;

/// What a read found.
pub enum Read<'a> {
    /// The file's content, valid UTF-8; lines that were not are left out
    /// (see the module documentation).
    Text(&'a str),
    /// The file does not exist: the kernel lacks the feature. Not an error.
    Absent,
}

pub struct SourceFile {
    path: PathBuf,
    /// Whether the file existed at the last read; a change is logged once.
    present: Option<bool>,
    kept: Option<File>,
    /// Read buffer, initialised to its full length; `len` bytes are valid.
    buf: Vec<u8>,
    len: usize,
    /// Largest read request; sysctl reads allocate a kernel buffer as large
    /// as the request, so those are created with a small one.
    chunk: usize,
    /// The file's line numbers (1-based, ascending) that the last read
    /// dropped as invalid UTF-8; empty on every real kernel.
    skipped: Vec<usize>,
    /// A device attribute ([`SourceFile::attribute`]).
    attribute: bool,
    /// The budget slot a kept attribute descriptor holds.
    slot: Option<Unit>,
    /// Whether a descriptor on procfs/sysfs is kept between reads.
    keep: bool,
    /// A sysfs attribute under a root known to be a real sysfs, read
    /// without keeping a descriptor: opened without the file-type checks
    /// and read with one `pread` (see [`SourceFile::unkept_attribute`]).
    one_pread: bool,
    /// That the file was absent, while nothing could have created it.
    absence: Memo,
    /// The last read failed because the file's device went away
    /// ([`Vanished::NoDevice`]).
    device_gone: bool,
}

/// Attribute descriptors kept open at once, process-wide: 512, or an
/// eighth of the soft open-files limit if that is less. 512 descriptors
/// pin about 2 MiB of kernel memory; the web server leaves this many
/// descriptors free of connections (server.rs).
static ATTRIBUTES: Budget = Budget::new(8, 512);

/// Most attribute descriptors kept open at once ([`ATTRIBUTES`]).
pub fn attribute_fd_budget() -> usize {
    ATTRIBUTES.limit()
}

/// Attribute descriptors kept open now (for tests and the budget).
pub fn kept_attributes() -> usize {
    ATTRIBUTES.kept()
}

/// Errors that mean a device does not report an attribute now: EINVAL (a
/// down interface's `carrier`, a virtual one's `speed`), EOPNOTSUPP,
/// ENODATA, and EACCES/EPERM (prometheus/procfs ignores the same set).
fn attribute_unavailable(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EINVAL | libc::EOPNOTSUPP | libc::ENODATA | libc::EACCES | libc::EPERM)
    )
}

/// How a read found that a file, or the device it belongs to, went away
/// after a listing named it (an interface deleted, a chip unbound, a CPU
/// taken offline during a scrape).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vanished {
    /// ENOENT or ENOTDIR: the path is not there. A device lacking an
    /// attribute answers the same, so the device counts as gone only if
    /// its directory is gone too ([`Vanished::device_gone`]).
    NotFound,
    /// ENODEV or ENXIO: the device is gone or going. sysfs answers ENODEV
    /// for a file removed while it was open, and for the attributes of a
    /// network interface being unregistered (recent kernels; seen on 6.18).
    NoDevice,
}

/// Whether `e` means that a file or its device went away.
pub fn vanished(e: &io::Error) -> Option<Vanished> {
    match e.raw_os_error()? {
        libc::ENOENT | libc::ENOTDIR => Some(Vanished::NotFound),
        libc::ENODEV | libc::ENXIO => Some(Vanished::NoDevice),
        _ => None,
    }
}

impl Vanished {
    /// Whether the device whose directory is `dir` went away, given a read
    /// under it that failed this way.
    pub fn device_gone(self, dir: &Path) -> bool {
        match self {
            Vanished::NoDevice => true,
            // Followed: a class entry is a link to the device's directory.
            Vanished::NotFound => {
                std::fs::metadata(dir).is_err_and(|e| vanished(&e) == Some(Vanished::NotFound))
            }
        }
    }
}

impl SourceFile {
    /// A file under a procfs/sysfs root, e.g. `SourceFile::new(root, "stat")`.
    pub fn new(root: &Path, relative: &str) -> SourceFile {
        SourceFile {
            path: root.join(relative),
            present: None,
            kept: None,
            buf: Vec::new(),
            len: 0,
            chunk: usize::MAX,
            skipped: Vec::new(),
            attribute: false,
            slot: None,
            keep: true,
            one_pread: false,
            absence: Memo::default(),
            device_gone: false,
        }
    }

    /// A sysfs device attribute holding one value (`class/net/eth0/mtu`):
    /// read like [`SourceFile::small`], its descriptor kept only within
    /// [`attribute_fd_budget`], and a value the device does not report now
    /// (EINVAL, EOPNOTSUPP, ...) is [`Read::Absent`]. Appearing and
    /// disappearing is normal for these (a link going down), so it is not
    /// logged.
    pub fn attribute(root: &Path, relative: impl AsRef<Path>) -> SourceFile {
        SourceFile {
            path: root.join(relative),
            present: None,
            kept: None,
            buf: Vec::new(),
            len: 0,
            chunk: 64,
            skipped: Vec::new(),
            attribute: true,
            slot: None,
            keep: true,
            one_pread: false,
            absence: Memo::default(),
            device_gone: false,
        }
    }

    /// Whether a descriptor is kept between reads.
    pub fn is_kept(&self) -> bool {
        self.kept.is_some()
    }

    /// Whether the last read failed because the file's device went away
    /// (ENODEV, ENXIO): the caller leaves that device out of this scrape
    /// instead of failing. An ENOENT is [`Read::Absent`], as before.
    pub fn device_gone(&self) -> bool {
        self.device_gone
    }

    /// A small file read with a small request size (sysctls, one number).
    pub fn small(root: &Path, relative: &str) -> SourceFile {
        SourceFile {
            chunk: 64,
            ..SourceFile::new(root, relative)
        }
    }

    /// A small file reopened at every read, never keeping a descriptor:
    /// for per-CPU attributes, where a kept descriptor for each of
    /// thousands of files would cost more open files than it saves.
    pub fn transient(root: &Path, relative: &str) -> SourceFile {
        SourceFile {
            keep: false,
            ..SourceFile::small(root, relative)
        }
    }

    /// A per-device sysfs attribute (cpuN/online, cpuN/topology/core_id)
    /// read at every scrape without keeping a descriptor, as
    /// [`SourceFile::transient`]. When `on_sysfs` (the root was checked
    /// with [`crate::kernel::fs_kind::is_sysfs`]) the read is three system calls, open, one
    /// `pread` and close, instead of six: sysfs holds only regular files,
    /// directories and links within itself, so the file-type checks have
    /// nothing to catch, and an attribute (at most a page) comes whole in
    /// one read, so a short read is the end.
    pub fn unkept_attribute(root: &Path, relative: &str, on_sysfs: bool) -> SourceFile {
        SourceFile {
            one_pread: on_sysfs,
            ..SourceFile::transient(root, relative)
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's line numbers that the last read left out as invalid
    /// UTF-8 (the textfile collector refuses such a file whole).
    pub fn dropped_lines(&self) -> &[usize] {
        &self.skipped
    }

    /// Reads the whole file. ENOENT (and ENOTDIR, for a missing parent)
    /// becomes [`Read::Absent`]; any other failure, including a file that
    /// is not a regular file or is over [`MAX_FILE_BYTES`], is a
    /// [`CollectError`] naming the file. Lines that are not valid UTF-8 are
    /// left out of the text (see the module documentation).
    pub fn read(&mut self) -> Result<Read<'_>, CollectError> {
        self.device_gone = false;
        if self.absence.still_absent() {
            return Ok(Read::Absent);
        }
        let looked_up = Epoch::now();
        let result = self.read_bytes();
        self.release_unused_buffer(if result.is_ok() { self.len } else { 0 });
        match result {
            Ok(()) => {
                self.absence.present();
                self.note_presence(true);
            }
            // ENOENT: the file is not there. EOPNOTSUPP: it is there but the
            // feature is switched off (PSI built in, booted with psi=0).
            // Either way the kernel has nothing to report, which is not a failure.
            Err(e)
                if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory)
                    || e.raw_os_error() == Some(libc::EOPNOTSUPP)
                    || (self.attribute && attribute_unavailable(&e)) =>
            {
                if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) {
                    self.absence.absent(looked_up, &self.path);
                }
                self.note_presence(false);
                return Ok(Read::Absent);
            }
            Err(e) => {
                self.device_gone = vanished(&e) == Some(Vanished::NoDevice);
                return Err(CollectError::io(&self.path, e));
            }
        }
        // The Ok arm cannot return the `&str` it was given while the Err
        // arm mutates `buf` (a known limit of the borrow checker, fixed by
        // Polonius), so it re-borrows the bytes it has just validated.
        match std::str::from_utf8(&self.buf[..self.len]) {
            Ok(_) => {
                if !self.skipped.is_empty() {
                    tracing::info!(file = %self.path.display(), "every line is valid UTF-8 again");
                    self.skipped.clear();
                }
                // SAFETY: these bytes were validated just above and have
                // not changed since; validating them again would double the
                // cost of the check on every read.
                Ok(Read::Text(unsafe {
                    std::str::from_utf8_unchecked(&self.buf[..self.len])
                }))
            }
            Err(e) => {
                self.drop_invalid_lines(e.valid_up_to());
                // Every line left was valid on its own, and a line ending is
                // never inside a character, so this succeeds; it is checked
                // rather than assumed because it is not the common path.
                match std::str::from_utf8(&self.buf[..self.len]) {
                    Ok(text) => Ok(Read::Text(text)),
                    Err(e) => Err(CollectError::other(&self.path, e.to_string())),
                }
            }
        }
    }

    /// Reads the file and parses its text with `parse`, naming this file
    /// in a parse error. `Ok(None)`: the file is absent.
    pub fn parse_with<T>(
        &mut self,
        parse: impl FnOnce(&str) -> Result<T, ParseError>,
    ) -> Result<Option<T>, CollectError> {
        let text = match self.read()? {
            Read::Text(t) => t,
            Read::Absent => return Ok(None),
        };
        parse(text).map(Some).map_err(|e| self.parse_error(e))
    }

    /// A parser's error on the text of the last read, naming this file and
    /// the line by its number in the file: the parser counts only the lines
    /// it was given, and lines before it may have been dropped.
    pub fn parse_error(&self, e: ParseError) -> CollectError {
        let mut line = e.line;
        for &dropped in &self.skipped {
            if dropped > line {
                break;
            }
            line += 1;
        }
        CollectError::parse(&self.path, line, e.msg)
    }

    /// Logs at info level, once per transition, when the file appears or
    /// disappears (a module loaded or unloaded, PSI switched on).
    fn note_presence(&mut self, now: bool) {
        if self.attribute {
            return;
        }
        match (self.present, now) {
            (Some(true), true) | (Some(false), false) | (None, true) => {}
            (_, false) => {
                tracing::info!(file = %self.path.display(), "source absent; the kernel lacks this feature, emitting no series for it")
            }
            (Some(false), true) => {
                tracing::info!(file = %self.path.display(), "source appeared again")
            }
        }
        self.present = Some(now);
    }

    fn read_bytes(&mut self) -> io::Result<()> {
        if let Some(f) = self.kept.as_ref() {
            match read_all_at(f, &mut self.buf, self.chunk, self.attribute) {
                Ok(n) => {
                    self.len = n;
                    return Ok(());
                }
                // Reopening would read the same oversized file again.
                Err(e) if e.kind() == ErrorKind::FileTooLarge => return Err(e),
                // The device does not report the value now; it may later.
                Err(e) if self.attribute && attribute_unavailable(&e) => return Err(e),
                // The file may have gone away (module unloaded) or been
                // replaced: drop the descriptor and try a fresh open.
                Err(_) => {
                    self.kept = None;
                    self.slot = None;
                }
            }
        }
        if self.one_pread {
            let f = OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
                .open(&self.path)?;
            const PAGE: usize = 4096;
            if self.buf.len() < PAGE {
                self.buf.resize(PAGE, 0);
            }
            let n = loop {
                match f.read_at(&mut self.buf[..PAGE], 0) {
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    r => break r?,
                }
            };
            self.len = if n < PAGE {
                n
            } else {
                read_all_at(&f, &mut self.buf, usize::MAX, false)?
            };
            return Ok(());
        }
        let f = open_regular(&self.path)?;
        let read = read_all_at(&f, &mut self.buf, self.chunk, self.attribute);
        let keep = match &read {
            Ok(_) => true,
            Err(e) => self.attribute && attribute_unavailable(e),
        };
        if keep && self.keep && is_kernel_fs(&f) {
            if !self.attribute {
                self.kept = Some(f);
            } else if let Some(slot) = ATTRIBUTES.take() {
                self.kept = Some(f);
                self.slot = Some(slot);
            }
        }
        self.len = read?;
        Ok(())
    }

    /// Releases the read buffer, or shrinks it to twice `needed`, when it
    /// is large and `needed` (0 after a failed read) is under a quarter of
    /// it: the buffer only grows while reading, so without this a file
    /// that was once huge would hold its memory for good.
    fn release_unused_buffer(&mut self, needed: usize) {
        if self.buf.len() > KEEP_BUFFER_BYTES && needed < self.buf.len() / 4 {
            // Twice the content leaves the spare room a read wants, so a
            // file that stays at its new size does not regrow the buffer.
            self.buf.truncate(2 * needed);
            self.buf.shrink_to_fit();
        }
    }

    /// Compacts the buffer in place, leaving out each line that is not
    /// valid UTF-8; `valid_up_to` bytes are known to be valid. Records the
    /// dropped lines and warns when they differ from the last read's.
    fn drop_invalid_lines(&mut self, valid_up_to: usize) {
        let data = &self.buf[..self.len];
        // The lines before the first invalid byte stay where they are.
        let mut read = memchr::memrchr(b'\n', &data[..valid_up_to]).map_or(0, |i| i + 1);
        let mut line = 1 + memchr::memchr_iter(b'\n', &data[..read]).count();
        let mut write = read;
        let mut skipped = Vec::new();
        while read < self.len {
            let end =
                memchr::memchr(b'\n', &self.buf[read..self.len]).map_or(self.len, |i| read + i + 1);
            if std::str::from_utf8(&self.buf[read..end]).is_ok() {
                self.buf.copy_within(read..end, write);
                write += end - read;
            } else {
                skipped.push(line);
            }
            read = end;
            line += 1;
        }
        self.len = write;
        if skipped != self.skipped {
            tracing::warn!(file = %self.path.display(), "{}", describe_skipped(&skipped));
            self.skipped = skipped;
        }
    }
}

/// Most entries a [`DirListing`] reads from one directory; a host has far
/// fewer network interfaces or block devices, and a tree that holds more
/// is not a sysfs.
pub const MAX_DIR_ENTRIES: usize = 1 << 16;

/// One entry of a [`DirListing`].
#[derive(Debug, Default, Clone)]
pub struct DirEntryInfo {
    pub name: String,
    /// The entry's inode number: a sysfs device keeps it when renamed, so
    /// a name that now means another device is told from the same device.
    pub ino: u64,
    /// A regular file (`bonding_masters` among the devices of class/net).
    pub is_file: bool,
}

/// The entries of a directory such as `class/net`, listed again on every
/// [`DirListing::read`] into storage reused across scrapes, sorted by name.
/// The directory's descriptor is kept between scrapes on procfs and sysfs
/// (see [`Dir`]), so a listing costs one lseek and one getdents64; one of
/// [`DirListing::of_devices`] costs nothing while no uevent was sent.
#[derive(Default)]
pub struct DirListing {
    dir: Option<Dir>,
    entries: Vec<DirEntryInfo>,
    len: usize,
    /// The directory's entries are devices ([`Dir::of_devices`]).
    of_devices: bool,
}

impl DirListing {
    /// A listing of a directory of devices; see [`Dir::of_devices`].
    pub fn of_devices() -> DirListing {
        DirListing {
            of_devices: true,
            ..DirListing::default()
        }
    }

    /// Lists `dir`. `Ok(false)`: it does not exist (the listing is then
    /// empty). Names that are not UTF-8 are left out.
    pub fn read(&mut self, dir: &Path) -> Result<bool, CollectError> {
        if self.dir.as_ref().is_none_or(|d| d.path != dir) {
            let d = Dir::at(dir.to_path_buf());
            self.dir = Some(if self.of_devices { d.of_devices() } else { d });
        }
        let Some(d) = self.dir.as_mut() else {
            return Ok(false);
        };
        // The entries are still sorted from the listing that is replayed.
        if d.unchanged() {
            return Ok(true);
        }
        self.len = 0;
        let (entries, len) = (&mut self.entries, &mut self.len);
        let mut too_many = false;
        let found = d.list_entries(|e| {
            if *len == MAX_DIR_ENTRIES {
                too_many = true;
                return;
            }
            if *len == entries.len() {
                entries.push(DirEntryInfo::default());
            }
            let slot = &mut entries[*len];
            slot.name.clear();
            slot.name.push_str(e.name);
            slot.ino = e.ino;
            slot.is_file = e.is_file;
            *len += 1;
        })?;
        if too_many {
            return Err(CollectError::other(
                dir,
                format!("more than {MAX_DIR_ENTRIES} entries; not a sysfs directory"),
            ));
        }
        self.entries[..self.len].sort_unstable_by(|a, b| a.name.cmp(&b.name));
        Ok(found)
    }

    pub fn entries(&self) -> &[DirEntryInfo] {
        &self.entries[..self.len]
    }

    /// The entries named `PREFIX` then a digit then anything (the glob
    /// `PREFIX[0-9]*`), in name order, each with the rest of its name after
    /// the prefix (`thermal_zone10` → `10`).
    pub fn numbered<'a>(
        &'a self,
        prefix: &'a str,
    ) -> impl Iterator<Item = (&'a DirEntryInfo, &'a str)> + 'a {
        self.entries().iter().filter_map(move |e| {
            let rest = e.name.strip_prefix(prefix)?;
            rest.starts_with(|c: char| c.is_ascii_digit())
                .then_some((e, rest))
        })
    }
}

/// "line 3 is not valid UTF-8; skipped", or for several lines the first
/// few of them and how many there are in all.
fn describe_skipped(lines: &[usize]) -> String {
    const LISTED: usize = 8;
    match lines {
        [one] => format!("line {one} is not valid UTF-8; skipped"),
        _ => {
            let listed: Vec<String> = lines.iter().take(LISTED).map(usize::to_string).collect();
            let more = if lines.len() > LISTED {
                format!(", … ({} in all)", lines.len())
            } else {
                String::new()
            };
            format!(
                "lines {}{more} are not valid UTF-8; skipped",
                listed.join(", ")
            )
        }
    }
}

/// Opens `path` for reading if it is a regular file; see the module
/// documentation for why nothing else is opened.
fn open_regular(path: &Path) -> io::Result<File> {
    check_regular(std::fs::metadata(path)?.file_type())?;
    // O_NONBLOCK: if a FIFO is swapped in after the stat, the open returns
    // at once and the fstat below refuses it. O_NOCTTY: a terminal never
    // becomes our controlling terminal.
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
        .open(path)?;
    check_regular(f.metadata()?.file_type())?;
    Ok(f)
}

fn check_regular(t: FileType) -> io::Result<()> {
    let what = if t.is_file() {
        return Ok(());
    } else if t.is_fifo() {
        "is a FIFO, not a regular file"
    } else if t.is_char_device() {
        "is a character device, not a regular file"
    } else if t.is_block_device() {
        "is a block device, not a regular file"
    } else if t.is_socket() {
        "is a socket, not a regular file"
    } else if t.is_dir() {
        "is a directory, not a regular file"
    } else {
        "is not a regular file"
    };
    Err(io::Error::new(ErrorKind::InvalidInput, what))
}

/// Reads a whole file from offset 0 into `buf` and returns its length.
///
/// `buf` is kept initialised to its full length across reads, so a read
/// never zero-fills spare space again (that memset was a quarter of a
/// scrape's instructions); it grows, doubling, when a file outgrows it, up
/// to one byte past [`MAX_FILE_BYTES`] (to tell a file of exactly the cap
/// from a longer one). No request is larger than `max_request` bytes.
///
/// With `short_is_eof`, a read that returns less than was asked for ends
/// the file without a second read returning 0: a sysfs attribute is one
/// `show()` of at most a page, handed over whole, so this halves the
/// system calls of a collector that reads hundreds of them.
fn read_all_at(
    f: &File,
    buf: &mut Vec<u8>,
    max_request: usize,
    short_is_eof: bool,
) -> io::Result<usize> {
    let min_spare = max_request.min(4096);
    let mut filled = 0usize;
    loop {
        if buf.len() - filled < min_spare {
            let grown = (buf.len() * 2)
                .max(filled + min_spare)
                .min(MAX_FILE_BYTES + 1);
            buf.resize(grown, 0);
        }
        // Not empty: `filled` is at most the cap, the buffer longer.
        let end = buf.len().min(filled.saturating_add(max_request));
        match f.read_at(&mut buf[filled..end], filled as u64) {
            Ok(0) => return Ok(filled),
            Ok(n) if short_is_eof && n < end - filled => return Ok(filled + n),
            Ok(n) => filled += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
        if filled > MAX_FILE_BYTES {
            return Err(io::Error::new(
                ErrorKind::FileTooLarge,
                format!(
                    "is larger than the {} MiB cap on a source file; not read past it",
                    MAX_FILE_BYTES >> 20
                ),
            ));
        }
    }
}

/// A directory listed at scrape time (`/proc`, `/sys/devices/system/cpu`):
/// `getdents64` into a reused buffer, entries handed to a callback, so a
/// listing allocates nothing. As with [`SourceFile`], the descriptor is
/// kept (and rewound) on procfs/sysfs and reopened elsewhere: a kept
/// descriptor spares the path walk, the open and the close of every scrape.
pub struct Dir {
    path: PathBuf,
    kept: Option<File>,
    buf: Vec<u8>,
    /// That the directory was absent, while nothing could have created it.
    absence: Memo,
    /// For a directory of devices ([`Dir::of_devices`]), its last listing.
    devices: Option<Box<Listed>>,
}

/// A listing kept to be replayed, with when it was taken.
#[derive(Default)]
struct Listed {
    at: Stamp,
    names: String,
    /// Each entry's end in `names`, inode and whether it is a file.
    entries: Vec<(usize, u64, bool)>,
    /// More than [`MAX_DIR_ENTRIES`] entries: not kept.
    overflowed: bool,
}

impl Listed {
    fn clear(&mut self) {
        self.at = Stamp::default();
        self.names.clear();
        self.entries.clear();
        self.overflowed = false;
    }

    fn push(&mut self, e: &RawDirEntry<'_>) {
        self.names.push_str(e.name);
        self.entries.push((self.names.len(), e.ino, e.is_file));
    }

    fn replay(&self, mut each: impl FnMut(RawDirEntry<'_>)) {
        let mut start = 0;
        for &(end, ino, is_file) in &self.entries {
            each(RawDirEntry {
                name: &self.names[start..end],
                ino,
                is_file,
            });
            start = end;
        }
    }
}

/// One entry of a listing, as getdents64 reports it.
pub struct RawDirEntry<'a> {
    pub name: &'a str,
    pub ino: u64,
    /// A regular file (from the entry's type; procfs and sysfs report it).
    pub is_file: bool,
}

impl Dir {
    pub fn new(root: &Path, relative: &str) -> Dir {
        Dir::at(root.join(relative))
    }

    pub fn at(path: PathBuf) -> Dir {
        Dir {
            path,
            kept: None,
            buf: Vec::new(),
            absence: Memo::default(),
            devices: None,
        }
    }

    /// A directory whose entries are devices (`class/net`, `/sys/block`,
    /// `devices/system/cpu`): the kernel sends a device's uevent after it
    /// has added, removed, renamed or moved the device's entry, so a
    /// listing is replayed from memory until a uevent (or a mount) could
    /// have changed it, or for at most
    /// [`RECHECK_AT_LEAST_EVERY`](crate::kernel::absence::RECHECK_AT_LEAST_EVERY);
    /// see [`crate::kernel::absence`]. Not for a directory whose entries appear
    /// without a uevent (`/sys/fs/xfs`, whose entries come with mounts in
    /// any namespace).
    pub fn of_devices(mut self) -> Dir {
        self.devices = Some(Box::default());
        self
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A directory of devices whose last listing (a whole, successful one)
    /// still holds: listing it again would replay that listing.
    pub fn unchanged(&self) -> bool {
        self.devices.as_deref().is_some_and(|l| l.at.holds())
    }

    /// Calls `each` with every entry's name but `.` and `..` (names that
    /// are not UTF-8 are skipped). `Ok(false)`: the directory is absent.
    pub fn list(&mut self, mut each: impl FnMut(&str)) -> Result<bool, CollectError> {
        self.list_entries(|e| each(e.name))
    }

    /// Every entry's name, sorted as Go's `os.ReadDir` sorts them (the
    /// order node_exporter reports class devices in); none when the
    /// directory is absent.
    pub fn sorted_names(&mut self) -> Result<Vec<String>, CollectError> {
        let mut names = Vec::new();
        self.list(|name| names.push(name.to_owned()))?;
        names.sort();
        Ok(names)
    }

    /// As [`Dir::list`], with each entry's inode and type.
    pub fn list_entries(
        &mut self,
        mut each: impl FnMut(RawDirEntry<'_>),
    ) -> Result<bool, CollectError> {
        if self.absence.still_absent() {
            return Ok(false);
        }
        if let Some(listed) = self.devices.as_deref().filter(|_| self.unchanged()) {
            listed.replay(each);
            return Ok(true);
        }
        // Taken before the listing (see Epoch).
        let looked_up = Epoch::now();
        let (f, fresh) = match self.kept.take() {
            Some(f) => (f, false),
            None => match open_dir(&self.path) {
                Ok(f) => (f, true),
                Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => {
                    self.absence.absent(looked_up, &self.path);
                    return Ok(false);
                }
                Err(e) => return Err(CollectError::io(&self.path, e)),
            },
        };
        use std::os::fd::AsRawFd;
        // Nothing is kept where it could not be replayed (outside a real
        // sysfs), nor a listing longer than MAX_DIR_ENTRIES.
        let path = &self.path;
        let listed = self
            .devices
            .as_deref_mut()
            .map(|listed| (listed, Stamp::of(looked_up, path)))
            .filter(|(_, stamp)| *stamp != Stamp::default());
        let result = match listed {
            Some((listed, stamp)) => {
                listed.clear();
                let r = list_fd_entries(f.as_raw_fd(), &mut self.buf, |e| {
                    if listed.entries.len() < MAX_DIR_ENTRIES {
                        listed.push(&e);
                    } else {
                        listed.overflowed = true;
                    }
                    each(e)
                });
                // Kept only once the whole listing succeeded.
                if r.is_ok() && !listed.overflowed {
                    listed.at = stamp;
                }
                r
            }
            None => list_fd_entries(f.as_raw_fd(), &mut self.buf, each),
        };
        result.map_err(|e| CollectError::io(&self.path, e))?;
        self.absence.present();
        // A kept descriptor was on procfs/sysfs when it was opened.
        if !fresh || is_kernel_fs(&f) {
            self.kept = Some(f);
        }
        Ok(true)
    }
}

/// Opens a directory for [`list_fd`].
pub fn open_dir(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
}

/// Lists the directory open at `fd` from its start, calling `each` with
/// every name but `.` and `..`; `buf` is the reused getdents64 buffer.
pub fn list_fd(
    fd: std::os::fd::RawFd,
    buf: &mut Vec<u8>,
    mut each: impl FnMut(&str),
) -> io::Result<()> {
    list_fd_entries(fd, buf, |e| each(e.name))
}

/// As [`list_fd`], with each entry's inode and type.
pub fn list_fd_entries(
    fd: std::os::fd::RawFd,
    buf: &mut Vec<u8>,
    mut each: impl FnMut(RawDirEntry<'_>),
) -> io::Result<()> {
    dirents::for_each(fd, buf, 16 << 10, |e| {
        if !e.is_dot()
            && let Ok(n) = std::str::from_utf8(e.name)
        {
            let is_file = match e.d_type {
                libc::DT_UNKNOWN => is_regular_at(fd, e.name),
                t => t == libc::DT_REG,
            };
            each(RawDirEntry {
                name: n,
                ino: e.ino,
                is_file,
            });
        }
        true
    })
}

/// Whether `name` in the directory open at `fd` is a regular file, for a
/// filesystem whose listing does not say (`DT_UNKNOWN`); not following a
/// symlink, as `DirEntry::file_type` does not.
fn is_regular_at(fd: std::os::fd::RawFd, name: &[u8]) -> bool {
    let Ok(c) = std::ffi::CString::new(name) else {
        return false;
    };
    // SAFETY: stat is plain C data; all-zero is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated name relative to a directory fd the caller
    // owns, and a struct we own.
    let rc = unsafe { libc::fstatat(fd, c.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) };
    rc == 0 && st.st_mode & libc::S_IFMT == libc::S_IFREG
}

fn is_kernel_fs(f: &File) -> bool {
    use std::os::fd::AsFd;
    magic_of_fd(f.as_fd()).is_some_and(is_kernel_fs_magic)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absent_file_is_not_an_error() {
        let mut f = SourceFile::new(Path::new("/nonexistent-usescope"), "stat");
        assert!(matches!(f.read(), Ok(Read::Absent)));
    }

    #[test]
    fn attribute_einval_is_absent_and_keeps_its_fd() {
        // The loopback device has no link speed: EINVAL on every read.
        let mut f = SourceFile::attribute(Path::new("/sys/class/net/lo"), "speed");
        if !crate::test_skip::unless_met(f.path().exists(), "sysfs at /sys with class/net/lo") {
            return;
        }
        assert!(matches!(f.read(), Ok(Read::Absent)));
        let kept = f.is_kept();
        assert!(matches!(f.read(), Ok(Read::Absent)));
        assert_eq!(f.is_kept(), kept);
        let mut mtu = SourceFile::attribute(Path::new("/sys/class/net/lo"), "mtu");
        assert!(matches!(mtu.read(), Ok(Read::Text(t)) if t.trim().parse::<u32>().is_ok()));
        // (Other tests keep attributes concurrently, so the count is only
        // bounded here.)
        assert!(kept_attributes() <= attribute_fd_budget());
        // A missing attribute is absent too, and on an ordinary file system
        // nothing is kept.
        let dir = tree(&[("mtu", b"1500\n")]);
        let mut f = SourceFile::attribute(dir.path(), "carrier");
        assert!(matches!(f.read(), Ok(Read::Absent)));
        let mut f = SourceFile::attribute(dir.path(), "mtu");
        assert_eq!(text(&mut f), "1500\n");
        assert!(!f.is_kept());
    }

    #[test]
    fn vanished_errors_and_gone_devices() {
        let e = |n| io::Error::from_raw_os_error(n);
        assert_eq!(vanished(&e(libc::ENOENT)), Some(Vanished::NotFound));
        assert_eq!(vanished(&e(libc::ENOTDIR)), Some(Vanished::NotFound));
        assert_eq!(vanished(&e(libc::ENODEV)), Some(Vanished::NoDevice));
        assert_eq!(vanished(&e(libc::ENXIO)), Some(Vanished::NoDevice));
        for other in [libc::EIO, libc::EINVAL, libc::EACCES, libc::EBUSY] {
            assert_eq!(vanished(&e(other)), None, "{other}");
        }
        assert_eq!(vanished(&io::Error::other("x")), None);
        let dir = tree(&[("file", b"")]);
        let device = dir.path().join("dev0");
        std::fs::create_dir(&device).unwrap();
        assert!(!Vanished::NotFound.device_gone(&device));
        assert!(Vanished::NoDevice.device_gone(&device));
        // A link to a directory that is gone, as a class entry whose device
        // was removed; a file is there, not gone.
        std::os::unix::fs::symlink("nowhere", dir.path().join("dev1")).unwrap();
        assert!(Vanished::NotFound.device_gone(&dir.path().join("dev1")));
        assert!(Vanished::NotFound.device_gone(&dir.path().join("dev2")));
        assert!(!Vanished::NotFound.device_gone(&dir.path().join("file")));
        // A read of a missing attribute is absent, not a gone device.
        let mut f = SourceFile::attribute(&device, "mtu");
        assert!(matches!(f.read(), Ok(Read::Absent)));
        assert!(!f.device_gone());
    }

    #[test]
    fn attribute_budget_is_bounded() {
        assert!(attribute_fd_budget() <= 512);
        assert!(attribute_fd_budget() >= 1);
    }

    #[test]
    fn dir_listing_is_sorted_and_reused() {
        let dir = tree(&[("b", b""), ("a", b"")]);
        std::fs::create_dir(dir.path().join("c")).unwrap();
        let mut l = DirListing::default();
        assert!(l.read(dir.path()).unwrap());
        let names: Vec<(&str, bool)> = l
            .entries()
            .iter()
            .map(|e| (e.name.as_str(), e.is_file))
            .collect();
        assert_eq!(names, [("a", true), ("b", true), ("c", false)]);
        std::fs::remove_file(dir.path().join("a")).unwrap();
        assert!(l.read(dir.path()).unwrap());
        assert_eq!(l.entries().len(), 2);
        assert!(!l.read(&dir.path().join("none")).unwrap());
        assert!(l.entries().is_empty());
    }

    /// A directory of devices is listed once per epoch, and only under a
    /// kernel root: an ordinary directory's listing is never replayed.
    #[test]
    fn device_listing_is_replayed_until_the_epoch_moves() {
        let count = |l: &mut DirListing, dir: &Path| {
            assert!(l.read(dir).unwrap());
            l.entries().len()
        };
        let ordinary = tree(&[("eth0", b"")]);
        let mut l = DirListing::of_devices();
        assert_eq!(count(&mut l, ordinary.path()), 1);
        std::fs::write(ordinary.path().join("eth1"), b"").unwrap();
        assert_eq!(count(&mut l, ordinary.path()), 2);

        let kernel = tree(&[("eth0", b"")]);
        crate::kernel::absence::pretend_kernel_root_and_advance(kernel.path());
        let mut l = DirListing::of_devices();
        // Retried: another test may move the process-wide epoch at any
        // moment, but not between every listing of ten.
        let replayed = (1..=10).any(|i| {
            let before = count(&mut l, kernel.path());
            std::fs::write(kernel.path().join(format!("eth{i}")), b"").unwrap();
            count(&mut l, kernel.path()) == before
        });
        assert!(replayed, "a device listing was never replayed");
        crate::kernel::absence::pretend_kernel_root_and_advance(kernel.path());
        let on_disk = std::fs::read_dir(kernel.path()).unwrap().count();
        assert_eq!(count(&mut l, kernel.path()), on_disk);
    }

    #[test]
    fn reads_real_proc_twice_with_kept_fd() {
        // The CPU rows of /proc/stat, as std reads them: the same rows must
        // come back on both reads, the second through the kept descriptor
        // (only the counters move between reads).
        let cpu_rows = |t: &str| -> Vec<String> {
            t.lines()
                .filter(|l| l.starts_with("cpu"))
                .map(|l| l.split(' ').next().unwrap_or("").to_string())
                .collect()
        };
        let expected = cpu_rows(&std::fs::read_to_string("/proc/stat").unwrap());
        assert!(expected.len() >= 2, "{expected:?}");
        let mut f = SourceFile::new(Path::new("/proc"), "stat");
        assert_eq!(cpu_rows(&text(&mut f)), expected);
        assert!(f.kept.is_some(), "procfs file should keep its fd");
        assert_eq!(cpu_rows(&text(&mut f)), expected, "second read");
    }

    #[test]
    fn small_reads_assemble_whole_file() {
        // A small SourceFile asks for 64 bytes at a time: a file of many
        // such pieces, with a last one shorter than the rest, must come
        // back byte for byte, on an ordinary filesystem and on procfs.
        let content: String = (0..300)
            .map(|i| format!("line {i} {}\n", "x".repeat(i % 97)))
            .collect();
        assert!(content.len() > 100 * 64 && !content.len().is_multiple_of(64));
        let dir = tree(&[("big", content.as_bytes())]);
        let mut f = SourceFile::small(dir.path(), "big");
        assert_eq!(text(&mut f), content);
        // /proc/self/limits is over 64 bytes and the same on every read.
        let limits = std::fs::read_to_string("/proc/self/limits").unwrap();
        assert!(limits.len() > 2 * 64, "{limits}");
        let mut f = SourceFile::small(Path::new("/proc"), "self/limits");
        assert_eq!(text(&mut f), limits);
        assert_eq!(text(&mut f), limits, "second read, through the kept fd");
    }

    /// A directory for test files, removed when dropped.
    fn tree(files: &[(&str, &[u8])]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (name, content) in files {
            std::fs::write(dir.path().join(name), content).unwrap();
        }
        dir
    }

    fn text(f: &mut SourceFile) -> String {
        match f.read() {
            Ok(Read::Text(t)) => t.to_string(),
            Ok(Read::Absent) => panic!("absent"),
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn kept_fd_is_reread_not_reopened() {
        use std::os::fd::AsRawFd;
        let mut f = SourceFile::new(Path::new("/proc"), "self/stat");
        text(&mut f);
        let fd = f.kept.as_ref().map(|k| k.as_raw_fd());
        assert!(fd.is_some(), "a procfs file keeps its fd");
        assert!(text(&mut f).contains(") "));
        assert_eq!(f.kept.as_ref().map(|k| k.as_raw_fd()), fd);
    }

    #[test]
    fn invalid_utf8_lines_are_dropped_alone() {
        let dir = tree(&[(
            "bad",
            b"a 1\nb \xff 2\nc \xc3\xa9 3\r\n\xfe\nd 4\ne \xe2\x82",
        )]);
        let mut f = SourceFile::new(dir.path(), "bad");
        assert_eq!(text(&mut f), "a 1\nc \u{e9} 3\r\nd 4\n");
        assert_eq!(f.skipped, [2, 4, 6]);
        // The parser's line 3 ("d 4") is the file's line 5.
        let e = f.parse_error(ParseError::new(3, "x"));
        assert_eq!(e.line, Some(5));
        assert_eq!(f.parse_error(ParseError::new(1, "x")).line, Some(1));
        assert_eq!(f.parse_error(ParseError::new(2, "x")).line, Some(3));
        let e = f.parse_with(|_| Err::<(), _>(ParseError::new(3, "x")));
        assert_eq!(e.unwrap_err().line, Some(5));

        // Fixed: the whole file again, and line numbers as they are.
        std::fs::write(dir.path().join("bad"), b"a 1\nb 2\n").unwrap();
        assert_eq!(text(&mut f), "a 1\nb 2\n");
        assert!(f.skipped.is_empty());
        assert_eq!(f.parse_error(ParseError::new(2, "x")).line, Some(2));

        // Nothing valid left: an empty text for the parser to judge.
        std::fs::write(dir.path().join("bad"), b"\xff\n\xff").unwrap();
        assert_eq!(text(&mut f), "");
        assert_eq!(f.skipped, [1, 2]);
    }

    #[test]
    fn skipped_lines_are_described() {
        assert_eq!(describe_skipped(&[7]), "line 7 is not valid UTF-8; skipped");
        assert_eq!(
            describe_skipped(&[2, 4]),
            "lines 2, 4 are not valid UTF-8; skipped"
        );
        let many: Vec<usize> = (1..=20).collect();
        assert_eq!(
            describe_skipped(&many),
            "lines 1, 2, 3, 4, 5, 6, 7, 8, … (20 in all) are not valid UTF-8; skipped"
        );
    }

    /// `f.read()`'s error text, failing the test instead of hanging if the
    /// read blocks.
    fn read_error(root: &Path, name: &str) -> String {
        let (root, name) = (root.to_path_buf(), name.to_string());
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut f = SourceFile::new(&root, &name);
            let _ = tx.send(f.read().err().map(|e| e.to_string()));
        });
        rx.recv_timeout(std::time::Duration::from_secs(5))
            .expect("the read did not return within 5 s")
            .expect("the read did not fail")
    }

    #[test]
    fn only_regular_files_are_read() {
        let dir = tree(&[]);
        let fifo = dir.path().join("loadavg");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // A writer blocks in open() until a reader opens the FIFO: if the
        // read opened it, the writer would get through.
        let (tx, rx) = std::sync::mpsc::channel();
        let writer_path = fifo.clone();
        std::thread::spawn(move || {
            let _ = tx.send(OpenOptions::new().write(true).open(writer_path).is_ok());
        });
        std::thread::sleep(std::time::Duration::from_millis(200));
        let e = read_error(dir.path(), "loadavg");
        assert!(e.contains("loadavg: is a FIFO, not a regular file"), "{e}");
        let opened = rx.recv_timeout(std::time::Duration::from_millis(300));
        assert!(opened.is_err(), "the FIFO was opened");
        // Let the writer go.
        let _reader = File::open(&fifo).unwrap();
        assert_eq!(rx.recv(), Ok(true));

        std::os::unix::fs::symlink("/dev/zero", dir.path().join("zero")).unwrap();
        let e = read_error(dir.path(), "zero");
        assert!(e.contains("zero: is a character device"), "{e}");

        std::fs::create_dir(dir.path().join("sub")).unwrap();
        let e = read_error(dir.path(), "sub");
        assert!(e.contains("sub: is a directory"), "{e}");
    }

    #[test]
    fn files_over_the_cap_fail_and_free_the_buffer() {
        let dir = tree(&[]);
        let path = dir.path().join("big");
        let file = File::create(&path).unwrap();
        // Sparse: no disk space, zeros when read.
        file.set_len(MAX_FILE_BYTES as u64 + 1).unwrap();
        let mut f = SourceFile::new(dir.path(), "big");
        let e = f.read().err().unwrap().to_string();
        assert!(e.contains("larger than the 32 MiB cap"), "{e}");
        assert_eq!(f.buf.capacity(), 0, "the buffer is released");

        // Exactly at the cap is read, and the buffer kept for the next read.
        file.set_len(MAX_FILE_BYTES as u64).unwrap();
        assert_eq!(text(&mut f).len(), MAX_FILE_BYTES);
        assert!(f.buf.len() > MAX_FILE_BYTES);
        // Once the file shrinks, so does the buffer.
        std::fs::write(&path, b"1 2 3\n").unwrap();
        assert_eq!(text(&mut f), "1 2 3\n");
        assert!(f.buf.capacity() <= 12, "{}", f.buf.capacity());
    }

    #[test]
    fn ordinary_buffers_stay_across_failures() {
        let dir = tree(&[("f", b"1 2 3\n")]);
        let mut f = SourceFile::new(dir.path(), "f");
        text(&mut f);
        let cap = f.buf.capacity();
        std::fs::remove_file(dir.path().join("f")).unwrap();
        std::fs::create_dir(dir.path().join("f")).unwrap();
        assert!(f.read().is_err());
        assert_eq!(f.buf.capacity(), cap);
    }
}
