//! `*.prom` files in `--collector.textfile.directory` → their own families,
//! plus `node_textfile_mtime_seconds{file}` and `node_textfile_scrape_error`:
//! node_exporter's textfile collector (collector/textfile.go).
//!
//! The files are in the Prometheus text format 0.0.4. [`parse_into`] is a
//! parser of that format written to accept what node_exporter's parser
//! (prometheus/common expfmt `TextParser`, legacy name validation) accepts
//! and to reject what it rejects, with the same error wording where it has
//! one. Each file is re-encoded through usescope's [`Encoder`], so the
//! output is valid in both exposition formats whatever the file's layout.
//!
//! A file is taken or skipped whole. It is skipped, with
//! `node_textfile_scrape_error 1` and one log line naming the file (and the
//! line, where there is one), when it cannot be read (not a regular file,
//! over [`crate::kernel::source::MAX_FILE_BYTES`], not valid UTF-8; as root, a
//! symbolic link or another owner's file than the directory's: `open_at`),
//! does not parse (also: more than [`MAX_LABEL_NAMES`] label names in a
//! family, more than [`MAX_LABEL_PAIRS_PER_BYTE`] label pairs written per
//! byte), carries client-side timestamps (node_exporter skips those files
//! too), or conflicts with what is already exported: a family with another
//! TYPE or another HELP in an earlier file, a series an earlier file (or the
//! same file) already has, two families that would write one name in either
//! format (`occupied`: a counter `x` and a gauge `x_total`, a summary `s`
//! and a family `s_count`), or a family that would write a name a built-in
//! collector or the daemon itself writes. Files are taken in the order of
//! the flags and, within a directory, by name, so the earlier file wins a
//! conflict. The other files and every other collector are unaffected.
//!
//! Bounds: at most [`MAX_FILES`] `*.prom` files and [`MAX_TOTAL_BYTES`] of
//! them per scrape; files past either bound are skipped as errors.
//!
//! Cost: a file is read and parsed only when its (device, inode, size,
//! mtime, ctime) changes; otherwise a scrape stats it and re-encodes the
//! parsed families kept from the last read. A parse is linear in the file
//! (but for its sorts). After a large parse is let go of, its memory is
//! handed back (`TRIM_AFTER_BYTES`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::collectors::{Flag, FlagKind, Parser, Settings, Source, Spec};
use crate::kernel::error::CollectError;
use crate::kernel::go_compat::{glob, go_join};
use crate::kernel::parse::{parse_fresh, recycle};
use crate::kernel::source::MAX_FILE_BYTES;
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Desc, Encoder, Format, Value, help_is_plain};

mod exposition_parser;

use exposition_parser::series_text;
pub use exposition_parser::{
    Exposition, Family, Kind, MAX_LABEL_NAMES, MAX_LABEL_PAIRS_PER_BYTE, Point, Series, parse_into,
};

pub const DIRECTORY: &str = "collector.textfile.directory";

pub const SPEC: Spec = Spec {
    name: "textfile",
    default_enabled: true,
    help: "Metrics from *.prom files (Prometheus text format) in --collector.textfile.directory",
    flags: &[Flag {
        name: DIRECTORY,
        help: "Directory to read text files with metrics from, supports glob matching. (repeatable)",
        default: None,
        kind: FlagKind::TextList,
        conflicts_with: None,
    }],
    build,
    sources: &[Source::textfile("good/app.prom", "textfile")],
    parsers: &[Parser::text("textfile", |t| {
        parse_fresh(t, parse_into).map(drop)
    })],
};

/// Most `*.prom` files read in one scrape.
pub const MAX_FILES: usize = 10_000;
/// Most bytes of `*.prom` files read in one scrape (each file is also held
/// to [`crate::kernel::source::MAX_FILE_BYTES`]).
pub const MAX_TOTAL_BYTES: u64 = 64 << 20;

const MTIME: Desc = Desc::gauge(
    "node_textfile_mtime_seconds",
    "Unixtime mtime of textfiles successfully read.",
);
const SCRAPE_ERROR: Desc = Desc::gauge(
    "node_textfile_scrape_error",
    "1 if there was an error opening or reading a file, 0 otherwise",
);

/// Family names written after this collector (the scraper's own families,
/// the process and probe metrics), or by this collector: a textfile family
/// that would write a name with one of these prefixes ([`occupied`]) could
/// clash with them, now or in a later version.
const RESERVED_PREFIXES: &[&str] = &[
    "node_scrape_collector_",
    "node_textfile_",
    "process_",
    "usescope_",
];

/// The other families written after this collector
/// (`crate::scrape::self_metrics`), which a textfile family may not write either.
const RESERVED_NAMES: &[&str] = &["node_exporter_build_info"];

// ---------------------------------------------------------------------------
// The collector

/// What identifies a file's content without reading it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Key {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Key {
    fn of(m: &std::fs::Metadata) -> Key {
        Key {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        }
    }
}

/// A file's error: the message for the log, and the line if there is one.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct FileError {
    line: Option<usize>,
    msg: String,
}

/// One `*.prom` file as last read.
struct FileEntry {
    /// The `file` label: node_exporter's `filepath.Join(dir, name)`.
    label: String,
    key: Option<Key>,
    /// Seconds, truncated, as node_exporter exports it.
    mtime: i64,
    parsed: Result<Exposition, FileError>,
}

/// A family merged over the files that carry it.
struct Merged {
    name: String,
    help: String,
    help_plain: bool,
    kind: Kind,
    /// (file, family, series), sorted by label values over all files.
    series: Vec<(usize, usize, usize)>,
}

/// The merge of the current files, kept while none of them changes.
#[derive(Default)]
struct Merge {
    families: Vec<Merged>,
    /// Per file: the reason it was left out of the merge, if it was.
    conflicts: Vec<Option<FileError>>,
    /// Every name a family of a parsed file writes ([`occupied`]) → the
    /// built-in family that writes it too this scrape, if one does.
    names: HashMap<String, Builtin>,
    /// The files' built-in clashes the merge was made with: (name, the
    /// built-in family).
    clashes: Vec<(String, String)>,
}

/// After parses of this many bytes of files were let go of in a scrape
/// (files removed, changed, or failing), the allocator is asked to give
/// the freed memory back ([`give_back_freed_memory`]). Also after a file
/// is only rewritten: its new parse may well run on the other tokio worker,
/// whose malloc arena does not hold the old parse's free memory.
const TRIM_AFTER_BYTES: u64 = 1 << 20;

/// A parse is many small allocations (a few per label), which glibc's
/// malloc serves from its heaps, not from mappings of their own; freed,
/// they stay with the process unless they happen to lie at a heap's top.
/// Measured with a 19 MB file of 260,000 series: RSS 8 → 196 MB while it
/// was there and still 150 MB after it was removed, all of it free heap
/// (`malloc_trim(0)` brought it back to 8 MB). So after a large parse is
/// let go of, the free pages of every heap are handed back: 0.1–0.25 s for
/// that file's 180 MB (its parse takes 1 s), after a rare event.
fn give_back_freed_memory() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only releases free memory; any thread may call it.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Whether a built-in collector wrote a name this scrape, and in which
/// family (its text is kept between scrapes, so a lasting clash costs no
/// allocation).
#[derive(Default)]
struct Builtin {
    seen: bool,
    family: String,
}

/// A `*.prom` file to read: its directory (an index into the listing's
/// directories), its name there, and its `file` label.
struct Listed {
    dir: usize,
    name: String,
    label: String,
}

/// A directory of `*.prom` files, opened when a file in it is read.
struct TextDir {
    fd: std::fs::File,
    /// Its owner. As root only this owner's files are read, and only their
    /// content is quoted in an error.
    uid: u32,
}

pub struct TextfileCollector {
    patterns: Vec<String>,
    files: Vec<FileEntry>,
    by_label: HashMap<String, usize>,
    merge: Merge,
    /// Whether the merge must be redone (a file changed).
    dirty: bool,
    /// Errors logged last scrape, so a lasting error is logged once.
    logged: HashSet<(String, FileError)>,
    /// Reused per scrape.
    labels: Vec<(&'static str, &'static str)>,
    scratch: String,
}

pub fn build(s: &Settings) -> Box<dyn Collector> {
    Box::new(TextfileCollector {
        patterns: s.texts(DIRECTORY).to_vec(),
        files: Vec::new(),
        by_label: HashMap::new(),
        merge: Merge::default(),
        dirty: true,
        logged: HashSet::new(),
        labels: Vec::new(),
        scratch: String::new(),
    })
}

/// A directory listing's error or a bound, reported like a file's.
fn dir_error(errors: &mut Vec<(String, FileError)>, what: &str, msg: String) {
    errors.push((what.to_string(), FileError { line: None, msg }));
}

impl TextfileCollector {
    /// The `*.prom` files to read, in node_exporter's order, and the
    /// directories they are in.
    fn list(&self, errors: &mut Vec<(String, FileError)>) -> (Vec<String>, Vec<Listed>) {
        let mut dirs = Vec::new();
        for p in &self.patterns {
            match glob(p) {
                Some(found) if !found.is_empty() => dirs.extend(found),
                _ => dirs.push(p.clone()),
            }
        }
        let mut out = Vec::new();
        let mut kept_dirs = Vec::new();
        for dir in dirs {
            if dir.is_empty() {
                continue;
            }
            let entries = match std::fs::read_dir(&dir) {
                Ok(e) => e,
                Err(e) => {
                    dir_error(
                        errors,
                        &dir,
                        format!("failed to read textfile collector directory: {e}"),
                    );
                    continue;
                }
            };
            let mut names: Vec<String> = Vec::new();
            for e in entries {
                match e {
                    Ok(e) => match e.file_name().into_string() {
                        Ok(n) if n.ends_with(".prom") => names.push(n),
                        Ok(_) => {}
                        Err(n) if n.as_encoded_bytes().ends_with(b".prom") => dir_error(
                            errors,
                            &dir,
                            format!("a file name is not valid UTF-8: {:?}", n.to_string_lossy()),
                        ),
                        Err(_) => {}
                    },
                    Err(e) => dir_error(
                        errors,
                        &dir,
                        format!("failed to read textfile collector directory: {e}"),
                    ),
                }
            }
            names.sort();
            for n in names {
                if out.len() == MAX_FILES {
                    dir_error(
                        errors,
                        &dir,
                        format!("more than {MAX_FILES} *.prom files; the rest are not read"),
                    );
                    return (kept_dirs, out);
                }
                let label = go_join(&dir, &n);
                out.push(Listed {
                    dir: kept_dirs.len(),
                    name: n,
                    label,
                });
            }
            kept_dirs.push(dir);
        }
        (kept_dirs, out)
    }

    /// Brings `files` up to date with the directory: stats every file,
    /// reads and parses those whose key changed.
    /// Returns how many bytes of files the parses it let go of came from
    /// (see [`TRIM_AFTER_BYTES`]).
    fn refresh(&mut self, errors: &mut Vec<(String, FileError)>) -> u64 {
        let (dirs, listed) = self.list(errors);
        let mut released = 0;
        let weight = |e: &FileEntry| match (&e.parsed, e.key) {
            (Ok(_), Some(k)) => k.size,
            _ => 0,
        };
        // Opened when a file in them is read, once per scrape.
        let mut opened: Vec<Option<Result<TextDir, String>>> = dirs.iter().map(|_| None).collect();
        // Decided at each scrape, on the uid the process has now.
        // SAFETY: geteuid has no preconditions and cannot fail.
        let as_root = unsafe { libc::geteuid() } == 0;
        let mut old = std::mem::take(&mut self.files);
        let old_index = std::mem::take(&mut self.by_label);
        let mut total: u64 = 0;
        let same_set =
            listed.len() == old.len() && listed.iter().zip(&old).all(|(l, f)| l.label == f.label);
        if !same_set {
            self.dirty = true;
        }
        for Listed { dir, name, label } in listed {
            let prev = old_index.get(&label).map(|&i| {
                std::mem::replace(
                    &mut old[i],
                    FileEntry {
                        label: String::new(),
                        key: None,
                        mtime: 0,
                        parsed: Ok(Exposition::default()),
                    },
                )
            });
            let meta = std::fs::metadata(&label);
            let key = meta.as_ref().ok().map(Key::of);
            if let (Some(p), Some(k)) = (&prev, key)
                && p.key == Some(k)
            {
                total += k.size;
                if total <= MAX_TOTAL_BYTES {
                    self.by_label.insert(label, self.files.len());
                    self.files.push(prev.unwrap());
                    continue;
                }
            }
            self.dirty = true;
            // Let go of before the file is parsed again: the new parse can
            // reuse its memory (if it runs on the same malloc arena).
            let prev_key = prev.as_ref().and_then(|p| p.key);
            released += prev.as_ref().map_or(0, weight);
            let had_prev = prev.is_some();
            drop(prev);
            let entry = match meta {
                Err(e) => FileEntry {
                    label: label.clone(),
                    key: None,
                    mtime: 0,
                    parsed: Err(FileError {
                        line: None,
                        msg: format!("failed to open textfile data file: {e}"),
                    }),
                },
                Ok(m) => {
                    let k = Key::of(&m);
                    let parsed = if !had_prev || prev_key != Some(k) {
                        total += if m.is_file() { k.size } else { 0 };
                        if total > MAX_TOTAL_BYTES {
                            Err(FileError {
                                line: None,
                                msg: format!(
                                    "the *.prom files exceed {} MiB in all; this one is not read",
                                    MAX_TOTAL_BYTES >> 20
                                ),
                            })
                        } else {
                            let d = opened[dir].get_or_insert_with(|| open_text_dir(&dirs[dir]));
                            let read = match d {
                                Ok(d) => read_file(d, &name, as_root),
                                Err(msg) => Err(FileError {
                                    line: None,
                                    msg: msg.clone(),
                                }),
                            };
                            // A parse that failed has let its memory go.
                            if read.is_err() {
                                released += k.size;
                            }
                            read
                        }
                    } else {
                        Err(FileError {
                            line: None,
                            msg: format!(
                                "the *.prom files exceed {} MiB in all; this one is not read",
                                MAX_TOTAL_BYTES >> 20
                            ),
                        })
                    };
                    FileEntry {
                        label: label.clone(),
                        // A bad file is not read again until it changes; one
                        // left out by the size bound is tried every scrape.
                        key: match &parsed {
                            Err(e) if e.msg.contains("in all; this one is not read") => None,
                            _ => Some(k),
                        },
                        mtime: m.mtime(),
                        parsed,
                    }
                }
            };
            self.by_label.insert(label, self.files.len());
            self.files.push(entry);
        }
        // The files that are gone (those taken over were emptied above).
        released += old.iter().map(weight).sum::<u64>();
        drop(old);
        for f in &self.files {
            if let Err(e) = &f.parsed {
                errors.push((f.label.clone(), e.clone()));
            }
        }
        released
    }

    /// Redoes the merge when a file changed or the built-in clashes did.
    fn merge_if_needed(&mut self, written: &[u8]) {
        if self.dirty {
            // Made anew rather than cleared: a large file that is gone must
            // not leave its peak capacity behind.
            self.merge.names = HashMap::new();
            for f in &self.files {
                if let Ok(e) = &f.parsed {
                    for fam in &e.families {
                        occupied(&fam.name, fam.kind, &mut self.scratch, |o| {
                            if !self.merge.names.contains_key(o) {
                                self.merge.names.insert(o.to_string(), Builtin::default());
                            }
                        });
                    }
                }
            }
        }
        // Which of them a built-in collector wrote this scrape: each TYPE
        // line written before this collector, in either format, read as
        // the names its family writes.
        for v in self.merge.names.values_mut() {
            v.seen = false;
        }
        if !self.merge.names.is_empty() {
            for at in memchr::memmem::find_iter(written, b"# TYPE ") {
                if at != 0 && written[at - 1] != b'\n' {
                    continue;
                }
                let rest = &written[at + 7..];
                let end = memchr::memchr(b'\n', rest).unwrap_or(rest.len());
                let line = &rest[..end];
                let Some(sp) = memchr::memchr(b' ', line) else {
                    continue;
                };
                let Ok(family) = std::str::from_utf8(&line[..sp]) else {
                    continue;
                };
                let kind = match &line[sp + 1..] {
                    b"counter" => Kind::Counter,
                    b"gauge" => Kind::Gauge,
                    b"summary" => Kind::Summary,
                    b"histogram" => Kind::Histogram,
                    _ => Kind::Untyped,
                };
                // A counter's family is `x` in OpenMetrics and `x_total` in
                // the text format: named the same in both, so a clash does
                // not read as a new one when the format changes.
                let (stem, total) = match kind {
                    Kind::Counter => (family.strip_suffix("_total").unwrap_or(family), "_total"),
                    _ => (family, ""),
                };
                occupied(family, kind, &mut self.scratch, |o| {
                    if let Some(v) = self.merge.names.get_mut(o) {
                        v.seen = true;
                        if v.family.strip_suffix(total) != Some(stem) {
                            v.family.clear();
                            v.family.push_str(stem);
                            v.family.push_str(total);
                        }
                    }
                });
            }
        }
        // A name is at most a line of a file: do not keep a long one's
        // buffer.
        if self.scratch.capacity() > 4096 {
            self.scratch = String::new();
        }
        let clashes_changed = {
            let now = self.merge.names.values().filter(|v| v.seen).count();
            now != self.merge.clashes.len()
                || self.merge.clashes.iter().any(|(n, fam)| {
                    self.merge
                        .names
                        .get(n)
                        .is_none_or(|v| !v.seen || v.family != *fam)
                })
        };
        if !self.dirty && !clashes_changed {
            return;
        }
        self.merge.clashes = self
            .merge
            .names
            .iter()
            .filter(|(_, v)| v.seen)
            .map(|(n, v)| (n.clone(), v.family.clone()))
            .collect();
        self.merge.clashes.sort();
        let builtin: HashMap<&str, &str> = self
            .merge
            .clashes
            .iter()
            .map(|(n, f)| (n.as_str(), f.as_str()))
            .collect();
        let (families, conflicts) = merge(&self.files, &builtin);
        self.merge.families = families;
        self.merge.conflicts = conflicts;
        self.dirty = false;
    }

    /// Logs each error that was not there last scrape, in file order.
    fn log_errors(&mut self, errors: Vec<(String, FileError)>) {
        let mut now = HashSet::with_capacity(errors.len());
        for (file, e) in errors {
            if !self.logged.contains(&(file.clone(), e.clone())) {
                tracing::warn!(
                    collector = "textfile",
                    file = %file,
                    line = e.line,
                    error = %e.msg,
                    "textfile skipped"
                );
            }
            now.insert((file, e));
        }
        self.logged = now;
    }
}

/// Opens a directory of `*.prom` files, to read its files relative to it
/// and to know its owner.
fn open_text_dir(path: &str) -> Result<TextDir, String> {
    let fd = crate::kernel::source::open_dir(Path::new(path))
        .map_err(|e| format!("failed to open textfile collector directory: {e}"))?;
    let uid = fd
        .metadata()
        .map_err(|e| format!("failed to open textfile collector directory: {e}"))?
        .uid();
    Ok(TextDir { fd, uid })
}

/// Why a file that is not a regular file is not read.
fn not_regular(mode: u32) -> &'static str {
    match mode & libc::S_IFMT {
        libc::S_IFIFO => "is a FIFO, not a regular file",
        libc::S_IFCHR => "is a character device, not a regular file",
        libc::S_IFBLK => "is a block device, not a regular file",
        libc::S_IFSOCK => "is a socket, not a regular file",
        libc::S_IFDIR => "is a directory, not a regular file",
        _ => "is not a regular file",
    }
}

/// As root, a file reached through a symbolic link is not read.
const SYMLINK_REFUSED: &str = "is a symbolic link: refused while usescope runs as root \
     (a link another user planted could point at a file only root may read); \
     write the file itself here, or pass --runtime.user";

/// Opens `name` in `dir` for reading, and checks what was opened (on the
/// descriptor, so what is checked is what is read). Not a regular file:
/// refused, and a FIFO or device is not even opened. As root (`as_root`),
/// a symbolic link or a file another user than the directory's owner owns
/// is refused too: otherwise anyone who may write to the directory could
/// have root read a file of root's for them.
fn open_at(dir: &TextDir, name: &str, as_root: bool) -> Result<std::fs::File, FileError> {
    use std::os::fd::{AsRawFd, FromRawFd};
    let fail = |msg: String| FileError { line: None, msg };
    let open_error = |e: std::io::Error| match e.kind() {
        std::io::ErrorKind::NotFound => {
            fail("failed to open textfile data file: it is gone".into())
        }
        _ if as_root && e.raw_os_error() == Some(libc::ELOOP) => fail(SYMLINK_REFUSED.into()),
        _ => fail(format!("failed to open textfile data file: {e}")),
    };
    let c = std::ffi::CString::new(name)
        .map_err(|_| fail("failed to open textfile data file: a NUL in its name".into()))?;
    let nofollow = if as_root { libc::O_NOFOLLOW } else { 0 };
    // Looked at before the open, so that a device is never opened (opening
    // one can act on it); the descriptor is checked again below.
    // SAFETY: stat is plain C data; all-zero is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let at_flags = if as_root {
        libc::AT_SYMLINK_NOFOLLOW
    } else {
        0
    };
    // SAFETY: a NUL-terminated name relative to a directory descriptor we
    // hold, and a struct we own.
    if unsafe { libc::fstatat(dir.fd.as_raw_fd(), c.as_ptr(), &mut st, at_flags) } != 0 {
        return Err(open_error(std::io::Error::last_os_error()));
    }
    if st.st_mode & libc::S_IFMT == libc::S_IFLNK {
        return Err(fail(SYMLINK_REFUSED.into()));
    }
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(fail(not_regular(st.st_mode).into()));
    }
    // O_NONBLOCK: a FIFO swapped in after the look above does not block
    // the open. O_NOFOLLOW (as root): nor does a symbolic link get
    // followed.
    let flags = libc::O_RDONLY | libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY | nofollow;
    // SAFETY: as for fstatat.
    let fd = unsafe { libc::openat(dir.fd.as_raw_fd(), c.as_ptr(), flags) };
    if fd < 0 {
        return Err(open_error(std::io::Error::last_os_error()));
    }
    // SAFETY: a descriptor openat just returned, owned by nothing else.
    let file = unsafe { std::fs::File::from_raw_fd(fd) };
    let meta = file
        .metadata()
        .map_err(|e| fail(format!("failed to read textfile data file: {e}")))?;
    if !meta.file_type().is_file() {
        return Err(fail(not_regular(meta.mode()).into()));
    }
    if as_root && meta.uid() != dir.uid {
        return Err(fail(format!(
            "is owned by uid {}, not by uid {} that owns its directory: refused while \
             usescope runs as root (another user's file could be a hard link to, or \
             a copy made by, something only root may read); pass --runtime.user",
            meta.uid(),
            dir.uid
        )));
    }
    Ok(file)
}

/// Reads and parses `name` in `dir`; any failure is the file's error. A
/// parse error quotes the file (a token, at most an excerpt) only when the
/// file's owner is the directory's: the file could be someone else's
/// secret that a link here made readable to usescope.
fn read_file(dir: &TextDir, name: &str, as_root: bool) -> Result<Exposition, FileError> {
    use std::io::Read as _;
    let file = open_at(dir, name, as_root)?;
    let fail = |msg: String| FileError { line: None, msg };
    let meta = file
        .metadata()
        .map_err(|e| fail(format!("failed to read textfile data file: {e}")))?;
    let too_large = || {
        fail(format!(
            "is larger than the {} MiB cap on a textfile; not read past it",
            MAX_FILE_BYTES >> 20
        ))
    };
    if meta.len() > MAX_FILE_BYTES as u64 {
        return Err(too_large());
    }
    // One byte more than the cap, to tell a file of exactly the cap from a
    // longer one (it may grow between the fstat and the read).
    let mut bytes = Vec::with_capacity(meta.len() as usize + 1);
    (&file)
        .take(MAX_FILE_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| fail(format!("failed to read textfile data file: {e}")))?;
    if bytes.len() > MAX_FILE_BYTES {
        return Err(too_large());
    }
    let text = String::from_utf8(bytes).map_err(|e| {
        let valid = &e.as_bytes()[..e.utf8_error().valid_up_to()];
        FileError {
            line: Some(1 + memchr::memchr_iter(b'\n', valid).count()),
            msg: "not valid UTF-8".to_string(),
        }
    })?;
    let mut out = Exposition::default();
    if let Err(e) = parse_into(&text, &mut out) {
        let msg = if meta.uid() == dir.uid {
            format!("text format parsing error: {}", e.msg)
        } else {
            format!(
                "text format parsing error (its cause is not shown: the file is owned by \
                 uid {}, not by uid {} that owns its directory)",
                meta.uid(),
                dir.uid
            )
        };
        return Err(FileError {
            line: Some(e.line),
            msg,
        });
    }
    if let Some(line) = out.timestamp_line {
        return Err(FileError {
            line: Some(line),
            msg: "contains unsupported client-side timestamps, skipping entire file".to_string(),
        });
    }
    for f in &out.families {
        if let Some(r) = reserved(&f.name, f.kind) {
            return Err(FileError {
                line: Some(f.line),
                msg: format!(
                    "family {} clashes with usescope's own families ({r})",
                    f.name
                ),
            });
        }
    }
    Ok(out)
}

/// The reserved prefix or name ([`RESERVED_PREFIXES`], [`RESERVED_NAMES`])
/// that a family would write, if it would write one.
fn reserved(name: &str, kind: Kind) -> Option<String> {
    let mut found = None;
    occupied(name, kind, &mut String::new(), |o| {
        if found.is_none() {
            found = RESERVED_PREFIXES
                .iter()
                .find(|p| o.starts_with(*p))
                .map(|p| format!("{p}*"))
                .or_else(|| RESERVED_NAMES.contains(&o).then(|| o.to_string()));
        }
    });
    found
}

/// The label set that identifies a series across files: empty values are
/// absent values in Prometheus.
fn identity(s: &Series) -> Vec<(&str, &str)> {
    s.labels
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect()
}

/// Calls `each` with every name usescope writes for a family `name` of
/// type `kind`, in either format: on its HELP and TYPE lines and on its
/// samples. In OpenMetrics a counter `x` or `x_total` is the family `x`
/// with samples `x_total`, so both take `x` and `x_total`; a summary `s`
/// takes `s`, `s_sum` and `s_count`; a histogram `h` also `h_bucket`. Two
/// families that take one name would write it twice, and a reader keeps
/// one of them (or, for a family name, refuses the page).
///
/// `X_created`, which OpenMetrics reserves for a counter's, summary's or
/// histogram's creation time, is not taken: usescope never writes it, and
/// Python's client library writes that time as a gauge family `X_created`
/// of its own beside `X`, which Prometheus reads as a series of its own.
fn occupied(name: &str, kind: Kind, scratch: &mut String, mut each: impl FnMut(&str)) {
    let (base, suffixes): (&str, &[&str]) = match kind {
        Kind::Counter => (name.strip_suffix("_total").unwrap_or(name), &["", "_total"]),
        Kind::Gauge | Kind::Untyped => (name, &[""]),
        Kind::Summary => (name, &["", "_sum", "_count"]),
        Kind::Histogram => (name, &["", "_bucket", "_sum", "_count"]),
    };
    for suffix in suffixes {
        scratch.clear();
        scratch.push_str(base);
        scratch.push_str(suffix);
        each(scratch);
    }
}

/// Merges the parsed files in order. A file that conflicts with what is
/// already taken, with itself, or with a built-in family (`builtin`: each
/// name a built-in family writes that a file's family would write too →
/// that built-in family), is left out whole.
fn merge(
    files: &[FileEntry],
    builtin: &HashMap<&str, &str>,
) -> (Vec<Merged>, Vec<Option<FileError>>) {
    struct Taken<'a> {
        help: Option<&'a str>,
        kind: Kind,
        file: usize,
        series: HashMap<Vec<(&'a str, &'a str)>, (usize, usize)>,
        parts: Vec<(usize, usize)>,
    }
    let mut taken: BTreeMap<&str, Taken> = BTreeMap::new();
    // Every name the taken families write ([`occupied`]) → the family.
    let mut claimed: HashMap<String, &str> = HashMap::new();
    let mut scratch = String::new();
    let mut conflicts = Vec::with_capacity(files.len());
    for (fi, file) in files.iter().enumerate() {
        let Ok(exp) = &file.parsed else {
            conflicts.push(None);
            continue;
        };
        // The names this file's families write, as `claimed`.
        let mut mine: HashMap<String, &str> = HashMap::new();
        let mut conflict = None;
        'families: for fam in &exp.families {
            let err = |msg: String| FileError {
                line: Some(fam.line),
                msg,
            };
            let mut clash = None;
            occupied(&fam.name, fam.kind, &mut scratch, |o| {
                if clash.is_some() {
                    return;
                }
                let what = |other: &str, kind: Kind, where_: &str| {
                    format!(
                        "{} {} collides with the {} {other}{where_}: both would write {o}",
                        fam.kind.name(),
                        fam.name,
                        kind.name()
                    )
                };
                if let Some(b) = builtin.get(o) {
                    clash = Some(format!(
                        "{} {} collides with the family {b} of a built-in collector: both \
                         would write {o}",
                        fam.kind.name(),
                        fam.name
                    ));
                } else if let Some(&other) = mine.get(o)
                    && other != fam.name
                {
                    let kind = exp
                        .families
                        .iter()
                        .find(|f| f.name == other)
                        .map_or(Kind::Untyped, |f| f.kind);
                    clash = Some(what(other, kind, " in the same file"));
                } else if let Some(&other) = claimed.get(o)
                    && other != fam.name
                    && let Some(t) = taken.get(other)
                {
                    clash = Some(what(other, t.kind, &format!(" of {}", files[t.file].label)));
                } else if !mine.contains_key(o) {
                    mine.insert(o.to_string(), fam.name.as_str());
                }
            });
            if let Some(msg) = clash {
                conflict = Some(err(msg));
                break;
            }
            let Some(t) = taken.get(fam.name.as_str()) else {
                continue;
            };
            let other = &files[t.file].label;
            if t.kind != fam.kind {
                conflict = Some(err(format!(
                    "family {} is a {} here but a {} in {other}",
                    fam.name,
                    fam.kind.name(),
                    t.kind.name()
                )));
                break;
            }
            if let (Some(a), Some(b)) = (t.help, fam.help.as_deref())
                && a != b
            {
                conflict = Some(err(format!(
                    "family {} has another HELP text than in {other}",
                    fam.name
                )));
                break;
            }
            for s in &fam.series {
                if t.series.contains_key(&identity(s)) {
                    conflict = Some(FileError {
                        line: Some(s.line),
                        msg: format!(
                            "series {} is already in {other}",
                            series_text(&fam.name, &s.labels)
                        ),
                    });
                    break 'families;
                }
            }
        }
        if conflict.is_some() {
            conflicts.push(conflict);
            continue;
        }
        conflicts.push(None);
        claimed.extend(mine);
        for (fam_i, fam) in exp.families.iter().enumerate() {
            let t = taken.entry(fam.name.as_str()).or_insert_with(|| Taken {
                help: None,
                kind: fam.kind,
                file: fi,
                series: HashMap::new(),
                parts: Vec::new(),
            });
            if t.help.is_none() {
                t.help = fam.help.as_deref();
            }
            for (si, s) in fam.series.iter().enumerate() {
                t.series.insert(identity(s), (fi, si));
            }
            t.parts.push((fi, fam_i));
        }
    }
    let families = taken
        .into_iter()
        .map(|(name, t)| {
            let help = match t.help {
                Some(h) => h.to_string(),
                None => {
                    let paths: Vec<&str> = t
                        .parts
                        .iter()
                        .map(|&(f, _)| files[f].label.as_str())
                        .collect();
                    format!("Metric read from {}", paths.join(", "))
                }
            };
            let mut series: Vec<(usize, usize, usize)> = t
                .parts
                .iter()
                .flat_map(|&(f, fam)| {
                    let n = family_of(files, f, fam).series.len();
                    (0..n).map(move |s| (f, fam, s))
                })
                .collect();
            series.sort_by(|a, b| {
                let (fa, fb) = (family_of(files, a.0, a.1), family_of(files, b.0, b.1));
                let va = fa.labels(&fa.series[a.2]).map(|(_, v)| v);
                let vb = fb.labels(&fb.series[b.2]).map(|(_, v)| v);
                va.cmp(vb)
            });
            Merged {
                name: name.to_string(),
                help_plain: help_is_plain(&help),
                help,
                kind: t.kind,
                series,
            }
        })
        .collect();
    (families, conflicts)
}

fn family_of(files: &[FileEntry], f: usize, fam: usize) -> &Family {
    match &files[f].parsed {
        Ok(e) => &e.families[fam],
        // The merge only refers to parsed files.
        Err(_) => unreachable!("merged family of an unparsed file"),
    }
}

impl Collector for TextfileCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        let mut errors = Vec::new();
        let released = self.refresh(&mut errors);
        let format = enc.format();
        self.merge_if_needed(enc.written());
        if released >= TRIM_AFTER_BYTES {
            give_back_freed_memory();
        }
        for (f, c) in self.files.iter().zip(&self.merge.conflicts) {
            if let Some(c) = c {
                errors.push((f.label.clone(), c.clone()));
            }
        }
        let errored = !errors.is_empty();
        self.log_errors(errors);

        let mut labels: Vec<(&str, &str)> = recycle(std::mem::take(&mut self.labels));
        for m in &self.merge.families {
            enc.family_named(&m.name, &m.help, m.help_plain, m.kind.metric_type());
            // OpenMetrics names a counter's samples NAME_total.
            let suffix = if format == Format::OpenMetrics
                && m.kind == Kind::Counter
                && !m.name.ends_with("_total")
            {
                "_total"
            } else {
                ""
            };
            for &(f, fam, s) in &m.series {
                let fam = family_of(&self.files, f, fam);
                let s = &fam.series[s];
                labels.clear();
                labels.extend(fam.labels(s));
                match m.kind {
                    Kind::Counter | Kind::Gauge | Kind::Untyped => {
                        enc.sample_named(&m.name, suffix, &labels, None, Value::F64(s.value));
                    }
                    Kind::Summary | Kind::Histogram => {
                        let (extra, parts) = if m.kind == Kind::Summary {
                            ("quantile", "")
                        } else {
                            ("le", "_bucket")
                        };
                        let mut inf_seen = false;
                        for p in &s.points {
                            labels.push((extra, p.label.as_str()));
                            enc.sample_named(&m.name, parts, &labels, None, Value::F64(p.value));
                            labels.pop();
                            inf_seen |= p.bound == f64::INFINITY;
                        }
                        if m.kind == Kind::Histogram && !inf_seen {
                            labels.push(("le", "+Inf"));
                            enc.sample_named(
                                &m.name,
                                "_bucket",
                                &labels,
                                None,
                                Value::F64(s.count),
                            );
                            labels.pop();
                        }
                        enc.sample_named(&m.name, "_sum", &labels, None, Value::F64(s.sum));
                        enc.sample_named(&m.name, "_count", &labels, None, Value::F64(s.count));
                    }
                }
            }
        }
        labels.clear();
        self.labels = recycle(labels);

        let mut ok: Vec<(&str, i64)> = self
            .files
            .iter()
            .zip(&self.merge.conflicts)
            .filter(|(f, c)| f.parsed.is_ok() && c.is_none())
            .map(|(f, _)| (f.label.as_str(), f.mtime))
            .collect();
        ok.sort();
        if !ok.is_empty() {
            enc.family(&MTIME);
            for (file, mtime) in ok {
                enc.sample(&MTIME, &[("file", file)], mtime);
            }
        }
        enc.family(&SCRAPE_ERROR);
        enc.sample(&SCRAPE_ERROR, &[], u64::from(errored));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collectors::FlagValue;
    use crate::collectors::test_support::{fixture, render};

    fn collector(dirs: &[&Path]) -> TextfileCollector {
        let mut s = Settings::with_roots("/nonexistent", "/nonexistent");
        s.set(
            DIRECTORY,
            Some(FlagValue::TextList(
                dirs.iter().map(|d| d.display().to_string()).collect(),
            )),
        );
        TextfileCollector {
            patterns: s.texts(DIRECTORY).to_vec(),
            files: Vec::new(),
            by_label: HashMap::new(),
            merge: Merge::default(),
            dirty: true,
            logged: HashSet::new(),
            labels: Vec::new(),
            scratch: String::new(),
        }
    }

    /// The output without the mtime values, which depend on the checkout.
    fn stable(out: &str) -> String {
        out.lines()
            .map(|l| match l.strip_prefix("node_textfile_mtime_seconds{") {
                Some(rest) => format!(
                    "node_textfile_mtime_seconds{{{} T",
                    rest.rsplit_once(' ').map_or(rest, |(a, _)| a)
                ),
                None => l.to_string(),
            })
            .map(|l| format!("{l}\n"))
            .collect()
    }

    #[test]
    fn no_directory_is_no_error() {
        let mut c = build(&Settings::with_roots("/x", "/y"));
        assert_eq!(
            render(c.as_mut()).unwrap(),
            "# HELP node_textfile_scrape_error 1 if there was an error opening or reading a file, 0 otherwise\n\
             # TYPE node_textfile_scrape_error gauge\nnode_textfile_scrape_error 0\n"
        );
        let mut c = collector(&[Path::new("/nonexistent-usescope")]);
        assert!(
            render(&mut c)
                .unwrap()
                .ends_with("node_textfile_scrape_error 1\n")
        );
    }

    #[test]
    fn good_directory() {
        let dir = fixture("textfile/good");
        let mut c = collector(&[&dir]);
        let out = stable(&render(&mut c).unwrap());
        let d = dir.display();
        let expected = format!(
            "# HELP app_jobs_total Jobs run, by result.\n\
             # TYPE app_jobs_total counter\n\
             app_jobs_total{{result=\"failed\"}} 2\n\
             app_jobs_total{{result=\"ok\"}} 40\n\
             # HELP app_last_run_seconds Metric read from {d}/app.prom\n\
             # TYPE app_last_run_seconds untyped\n\
             app_last_run_seconds 1700000000\n"
        );
        assert!(out.contains(&expected), "{out}");
        assert!(out.contains(
            "app_request_duration_seconds_bucket{handler=\"/\",le=\"1e+06\"} 11\n\
             app_request_duration_seconds_bucket{handler=\"/\",le=\"+Inf\"} 11\n"
        ));
        // The +Inf bucket a histogram lacks is its count.
        assert!(
            out.contains("app_request_duration_seconds_bucket{handler=\"/api\",le=\"+Inf\"} 2\n")
        );
        assert!(
            out.contains("app_rpc_seconds{quantile=\"0.99\"} 0.25\napp_rpc_seconds_sum 17.5\n")
        );
        assert!(out.contains(
            "# HELP app_build_info Build facts: a \"quoted\" word, a back\\\\slash and a\\nnewline.\n"
        ), "{out}");
        assert!(out.contains(
            "app_build_info{note=\"say \\\"hi\\\"\\nbye\",path=\"C:\\\\tmp\\\\x\",version=\"1.2.3\"} 1\n"
        ), "{out}");
        assert!(out.contains("app_temperature_celsius{extra=\"\",sensor=\"a\"} NaN\n"));
        assert!(out.contains(&format!(
            "node_textfile_mtime_seconds{{file=\"{d}/app.prom\"}} T\n"
        )));
        assert!(out.ends_with("node_textfile_scrape_error 0\n"), "{out}");
        // A second scrape reuses the parse and writes the same.
        assert_eq!(stable(&render(&mut c).unwrap()), out);
    }

    #[test]
    fn bad_files_are_skipped_alone() {
        let dir = fixture("textfile/bad");
        let mut c = collector(&[&dir]);
        let out = render(&mut c).unwrap();
        assert!(out.ends_with("node_textfile_scrape_error 1\n"), "{out}");
        // The good file's families and mtime are there; no bad file's are.
        assert!(out.contains("ok_value 1\n"), "{out}");
        let mtimes: Vec<&str> = out
            .lines()
            .filter(|l| l.starts_with("node_textfile_mtime_seconds{"))
            .collect();
        assert_eq!(mtimes.len(), 1, "{mtimes:?}");
        assert!(mtimes[0].contains("/ok.prom\""), "{mtimes:?}");
        let errors: BTreeMap<String, FileError> = c
            .logged
            .iter()
            .map(|(f, e)| (f.rsplit('/').next().unwrap().to_string(), e.clone()))
            .collect();
        let line = |f: &str| errors.get(f).and_then(|e| e.line);
        assert_eq!(line("syntax.prom"), Some(3), "{errors:?}");
        assert_eq!(line("timestamps.prom"), Some(2), "{errors:?}");
        assert_eq!(line("utf8.prom"), Some(2), "{errors:?}");
        assert!(errors.contains_key("nonl.prom"), "{errors:?}");
        assert!(errors.contains_key("dup.prom"), "{errors:?}");
        assert!(errors.contains_key("reserved.prom"), "{errors:?}");
        assert!(!errors.contains_key("ok.prom"), "{errors:?}");
    }

    #[test]
    fn conflicting_files_lose_to_earlier_ones() {
        let dir = fixture("textfile/conflict");
        let mut c = collector(&[&dir]);
        let out = render(&mut c).unwrap();
        assert!(out.ends_with("node_textfile_scrape_error 1\n"), "{out}");
        let errors: BTreeMap<String, String> = c
            .logged
            .iter()
            .map(|(f, e)| (f.rsplit('/').next().unwrap().to_string(), e.msg.clone()))
            .collect();
        assert!(
            errors["b_type.prom"].contains("is a gauge here but a counter"),
            "{errors:?}"
        );
        assert!(errors["z_help.prom"].contains("another HELP"), "{errors:?}");
        assert!(
            errors["d_series.prom"].contains("is already in"),
            "{errors:?}"
        );
        assert!(errors["e_suffix.prom"].contains("collides"), "{errors:?}");
        assert!(!errors.contains_key("a_first.prom"));
        assert!(!errors.contains_key("f_more.prom"), "{errors:?}");
        // f_more adds a series to a_first's family, without a HELP of its own.
        assert!(
            out.contains("shared_total{job=\"a\"} 1\nshared_total{job=\"f\"} 6\n"),
            "{out}"
        );
    }

    #[test]
    fn builtin_families_are_not_overwritten() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("x.prom"), "node_load1 99\n").unwrap();
        std::fs::write(tmp.path().join("y.prom"), "fine 1\n").unwrap();
        let mut c = collector(&[tmp.path()]);
        let mut buf =
            b"# HELP node_load1 1m load average.\n# TYPE node_load1 gauge\nnode_load1 0.5\n"
                .to_vec();
        let mut enc = Encoder::new(&mut buf, Format::PrometheusText);
        c.collect(&mut enc).unwrap();
        let out = String::from_utf8(buf).unwrap();
        // (Not just "99": the mtime of the files written above may hold it.)
        assert!(!out.contains("node_load1 99"), "{out}");
        assert!(out.contains("node_load1 0.5\n"), "{out}");
        assert!(out.contains("fine 1\n"), "{out}");
        assert!(out.ends_with("node_textfile_scrape_error 1\n"));
        // Without the built-in family, the file is taken.
        let out = render(&mut c).unwrap();
        assert!(out.contains("node_load1 99\n"), "{out}");
        assert!(out.ends_with("node_textfile_scrape_error 0\n"));
    }

    #[test]
    fn changes_are_seen_and_bounds_hold() {
        let tmp = tempfile::tempdir().unwrap();
        let f = tmp.path().join("x.prom");
        std::fs::write(&f, "a 1\n").unwrap();
        let mut c = collector(&[tmp.path()]);
        assert!(render(&mut c).unwrap().contains("a 1\n"));
        std::fs::write(&f, "a 2\n").unwrap();
        assert!(render(&mut c).unwrap().contains("a 2\n"));
        std::fs::write(&f, "a 2 x\n").unwrap();
        let out = render(&mut c).unwrap();
        assert!(!out.contains("\na "), "{out}");
        assert!(out.ends_with("node_textfile_scrape_error 1\n"));
        // Not read again while unchanged, and still an error.
        assert!(
            render(&mut c)
                .unwrap()
                .ends_with("node_textfile_scrape_error 1\n")
        );
        std::fs::remove_file(&f).unwrap();
        assert!(
            render(&mut c)
                .unwrap()
                .ends_with("node_textfile_scrape_error 0\n")
        );
        // A FIFO is refused without blocking.
        let fifo = tmp.path().join("p.prom");
        let cpath = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(cpath.as_ptr(), 0o600) }, 0);
        assert!(
            render(&mut c)
                .unwrap()
                .ends_with("node_textfile_scrape_error 1\n")
        );
        let logged: Vec<String> = c.logged.iter().map(|(_, e)| e.msg.clone()).collect();
        assert!(logged.iter().any(|m| m.contains("FIFO")), "{logged:?}");
    }

    #[test]
    fn families_that_would_write_one_name_collide() {
        let tmp = tempfile::tempdir().unwrap();
        let w = |n: &str, t: &str| std::fs::write(tmp.path().join(n), t).unwrap();
        w(
            "a.prom",
            "# TYPE c counter\nc 1\n# TYPE s summary\ns_sum 1\ns_count 1\n",
        );
        w("b.prom", "# TYPE c_total gauge\nc_total 2\n");
        w("c.prom", "# TYPE c_total counter\nc_total 3\n");
        w("d.prom", "s_count 4\n");
        w(
            "e.prom",
            "# TYPE c_created gauge\nc_created 5\n# TYPE t counter\nt 1\nt_total 2\n",
        );
        w("f.prom", "# TYPE c counter\nc{x=\"f\"} 6\n");
        let mut c = collector(&[tmp.path()]);
        for format in [Format::PrometheusText, Format::OpenMetrics] {
            let mut buf = Vec::new();
            c.collect(&mut Encoder::new(&mut buf, format)).unwrap();
            let out = String::from_utf8(buf).unwrap();
            assert!(out.ends_with("node_textfile_scrape_error 1\n"), "{out}");
            assert!(
                out.contains(" 1\n") && out.contains("{x=\"f\"} 6\n"),
                "{out}"
            );
            for refused in [" 2\n", " 3\n", " 4\n", " 5\n"] {
                assert!(!out.contains(refused), "{format:?}: {out}");
            }
        }
        let errors: BTreeMap<String, String> = c
            .logged
            .iter()
            .map(|(f, e)| (f.rsplit('/').next().unwrap().to_string(), e.msg.clone()))
            .collect();
        let b = &errors["b.prom"];
        assert!(
            b.contains("gauge c_total collides with the counter c of ") && b.contains("/a.prom"),
            "{b}"
        );
        assert!(
            errors["c.prom"].contains("counter c_total collides with the counter c"),
            "{errors:?}"
        );
        assert!(
            errors["d.prom"].contains("collides with the summary s"),
            "{errors:?}"
        );
        assert!(errors["e.prom"].contains("in the same file"), "{errors:?}");
        assert!(
            !errors.contains_key("a.prom") && !errors.contains_key("f.prom"),
            "{errors:?}"
        );
    }

    #[test]
    fn the_daemons_own_families_are_reserved() {
        // Everything the scraper writes after the collectors, the
        // textfile collector's own families and any probe's.
        let scraper =
            crate::scrape::collector::Scraper::new(crate::scrape::self_metrics::SelfMetrics::new());
        let out = String::from_utf8(scraper.scrape(Format::PrometheusText)).unwrap();
        let mut families: Vec<(&str, &str)> = out
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE ")?.split_once(' '))
            .collect();
        assert!(
            families
                .iter()
                .any(|(n, _)| *n == "node_exporter_build_info"),
            "{out}"
        );
        families.extend([
            ("node_textfile_scrape_error", "gauge"),
            ("node_textfile_mtime_seconds", "gauge"),
            ("node_scrape_collector_success", "gauge"),
            ("usescope_probe_up", "gauge"),
        ]);
        for (name, kind) in families {
            let kind = match kind {
                "counter" => Kind::Counter,
                "histogram" => Kind::Histogram,
                _ => Kind::Gauge,
            };
            assert!(reserved(name, kind).is_some(), "{name} is not reserved");
            // Nor may a counter write it as its samples.
            if let Some(stem) = name.strip_suffix("_total") {
                assert!(reserved(stem, Kind::Counter).is_some(), "{stem}");
            }
        }
        assert!(reserved("app_build_info", Kind::Gauge).is_none());
    }

    #[test]
    fn nothing_is_kept_at_its_peak_once_a_large_file_is_gone() {
        let tmp = tempfile::tempdir().unwrap();
        let f = tmp.path().join("many.prom");
        let many: String = (0..20_000).map(|i| format!("family_{i} 1\n")).collect();
        std::fs::write(&f, many).unwrap();
        let mut c = collector(&[tmp.path()]);
        assert!(render(&mut c).unwrap().contains("family_19999 1\n"));
        assert!(c.merge.names.capacity() >= 20_000);
        std::fs::write(&f, "few 1\n").unwrap();
        assert!(render(&mut c).unwrap().contains("few 1\n"));
        assert!(
            c.merge.names.capacity() < 64,
            "{}",
            c.merge.names.capacity()
        );
        assert!(c.merge.families.capacity() < 64 && c.merge.clashes.capacity() < 64);
        assert!(c.labels.capacity() <= MAX_LABEL_NAMES + 1 && c.scratch.capacity() <= 4096);
        assert!(c.files.capacity() < 64 && c.by_label.capacity() < 64);
    }

    #[test]
    fn openmetrics_counters_get_total() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(
            tmp.path().join("x.prom"),
            "# TYPE c counter\nc 1\n# TYPE d_total counter\nd_total 2\n# TYPE u untyped\nu 3\n",
        )
        .unwrap();
        let mut c = collector(&[tmp.path()]);
        let mut buf = Vec::new();
        let mut enc = Encoder::new(&mut buf, Format::OpenMetrics);
        c.collect(&mut enc).unwrap();
        let out = String::from_utf8(buf).unwrap();
        assert!(out.contains("# TYPE c counter\nc_total 1\n"), "{out}");
        assert!(out.contains("# TYPE d counter\nd_total 2\n"), "{out}");
        assert!(out.contains("# TYPE u unknown\nu 3\n"), "{out}");
    }
}
