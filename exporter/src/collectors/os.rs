//! os-release → node_exporter's os collector (collector/os_release.go):
//! `node_os_info{build_id,id,id_like,image_id,image_version,name,pretty_name,variant,variant_id,version,version_codename,version_id} 1`,
//! `node_os_version{id,id_like,name}` (the major.minor of VERSION_ID) and
//! `node_os_support_end_timestamp_seconds` (SUPPORT_END).
//!
//! The file is `<rootfs>/etc/os-release`, or `<rootfs>/usr/lib/os-release`
//! when that is absent (os-release(5)); neither: no series. It is parsed as
//! node_exporter parses it, with hashicorp/go-envparse's rules: `KEY=value`
//! lines, `#` comments, an optional `export ` prefix, single quotes taken
//! literally, double quotes with JSON escapes (`\"`, `\\`, `\n`, `\u00e9`,
//! surrogate pairs), control characters rejected. Any line envparse
//! rejects fails the collector, as it fails node_exporter's. One deliberate
//! difference: envparse cuts the last byte off a non-ASCII character
//! that ends an unquoted value before a `# comment` (invalid UTF-8, which
//! makes node_exporter panic); usescope keeps the character.

use std::path::Path;

use crate::collectors::{Parser, Settings, Source, Spec};
use crate::kernel::absence::Epoch;
use crate::kernel::error::{CollectError, ParseError, excerpt};
use crate::kernel::file_watch::FileWatch;
use crate::kernel::parse::lines;
use crate::kernel::source::SourceFile;
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Desc, Encoder};

pub const SPEC: Spec = Spec {
    name: "os",
    default_enabled: true,
    help: "OS release information from /etc/os-release or /usr/lib/os-release under --path.rootfs",
    flags: &[],
    build,
    sources: &[
        Source::rootfs("etc/os-release", "os_release"),
        Source::rootfs("usr/lib/os-release", "os_release"),
    ],
    parsers: &[Parser::text("os_release", check)],
};

/// The registry's entry point: parses and computes everything the
/// collector emits.
fn check(text: &str) -> Result<(), ParseError> {
    let mut out = OsRelease::default();
    parse_into(text, &mut out)?;
    std::hint::black_box(out.derived()?);
    Ok(())
}

const INFO: Desc = Desc::gauge(
    "node_os_info",
    "A metric with a constant '1' value labeled by build_id, id, id_like, image_id, image_version, name, pretty_name, variant, variant_id, version, version_codename, version_id.",
);
const VERSION: Desc = Desc::gauge(
    "node_os_version",
    "Metric containing the major.minor part of the OS version.",
);
const SUPPORT_END: Desc = Desc::gauge(
    "node_os_support_end_timestamp_seconds",
    "Metric containing the end-of-life date timestamp of the OS.",
);

/// The keys node_exporter reads, in `node_os_info`'s label order (sorted),
/// with their label names; `SUPPORT_END` last, not a label.
const KEYS: [(&str, &str); 13] = [
    ("BUILD_ID", "build_id"),
    ("ID", "id"),
    ("ID_LIKE", "id_like"),
    ("IMAGE_ID", "image_id"),
    ("IMAGE_VERSION", "image_version"),
    ("NAME", "name"),
    ("PRETTY_NAME", "pretty_name"),
    ("VARIANT", "variant"),
    ("VARIANT_ID", "variant_id"),
    ("VERSION", "version"),
    ("VERSION_CODENAME", "version_codename"),
    ("VERSION_ID", "version_id"),
    ("SUPPORT_END", "support_end"),
];
const ID: usize = 1;
const ID_LIKE: usize = 2;
const NAME: usize = 5;
const VERSION_ID: usize = 11;
const SUPPORT_END_KEY: usize = 12;

/// The values of [`KEYS`] (empty when not set), Strings reused across
/// parses.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct OsRelease {
    pub values: [String; 13],
    /// Where other keys' values are unescaped (they are validated, then
    /// dropped).
    scratch: String,
}

/// What the collector computes from the values.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Derived {
    /// `node_os_version`; emitted only when above 0.
    pub version: f64,
    /// `node_os_support_end_timestamp_seconds`, if SUPPORT_END is set.
    pub support_end: Option<i64>,
}

impl OsRelease {
    pub fn get(&self, key: &str) -> &str {
        KEYS.iter()
            .position(|(k, _)| *k == key)
            .map_or("", |i| &self.values[i])
    }

    /// node_exporter's `UpdateStruct` after the parse: the leading
    /// `[0-9]+\.?[0-9]*` of VERSION_ID as a float (0 if none; a number too
    /// large for a float is an error, as Go's ParseFloat makes it), and
    /// SUPPORT_END as a `YYYY-MM-DD` date at 00:00 UTC.
    pub fn derived(&self) -> Result<Derived, ParseError> {
        let v = &self.values[VERSION_ID];
        let digits = v.bytes().take_while(u8::is_ascii_digit).count();
        let version = if digits == 0 {
            0.0
        } else {
            let rest = &v.as_bytes()[digits..];
            let len = if rest.first() == Some(&b'.') {
                digits + 1 + rest[1..].iter().take_while(|b| b.is_ascii_digit()).count()
            } else {
                digits
            };
            let f: f64 = v[..len]
                .parse()
                .map_err(|e| ParseError::new(1, format!("VERSION_ID {}: {e}", excerpt(v))))?;
            if !f.is_finite() {
                return Err(ParseError::new(
                    1,
                    format!("VERSION_ID {}: value out of range", excerpt(v)),
                ));
            }
            f
        };
        let end = &self.values[SUPPORT_END_KEY];
        let support_end = if end.is_empty() {
            None
        } else {
            Some(date_to_unix(end).ok_or_else(|| {
                ParseError::new(
                    1,
                    format!("SUPPORT_END {}: not a YYYY-MM-DD date", excerpt(end)),
                )
            })?)
        };
        Ok(Derived {
            version,
            support_end,
        })
    }
}

/// Go's `time.Parse(time.DateOnly, s)`: exactly `YYYY-MM-DD`, month 1–12,
/// day valid for the month; seconds since the epoch at 00:00 UTC.
pub fn date_to_unix(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        b[r].iter().try_fold(0i64, |acc, &c| {
            c.is_ascii_digit().then(|| acc * 10 + i64::from(c - b'0'))
        })
    };
    let (y, m, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let days_in = match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return None,
    };
    if d < 1 || d > days_in {
        return None;
    }
    // Days from civil (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    Some((era * 146_097 + doe - 719_468) * 86_400)
}

/// Parses an os-release file into `out` with go-envparse's rules (see the
/// module documentation). A later assignment of a key wins.
pub fn parse_into(s: &str, out: &mut OsRelease) -> Result<(), ParseError> {
    for v in &mut out.values {
        v.clear();
    }
    for (i, raw) in lines(s).enumerate() {
        let n = i + 1;
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (key, value) = line
            .split_once('=')
            .ok_or_else(|| ParseError::new(n, format!("missing = in {}", excerpt(line))))?;
        let key = key.trim();
        let key = if key.len() > "export ".len() {
            key.strip_prefix("export ").unwrap_or(key)
        } else {
            key
        };
        check_key(key, n)?;
        let slot = match KEYS.iter().position(|(k, _)| *k == key) {
            Some(at) => &mut out.values[at],
            None => &mut out.scratch,
        };
        unquote(value.trim(), slot).map_err(|e| ParseError::new(n, format!("{key}: {e}")))?;
    }
    Ok(())
}

/// A key is `[A-Za-z_][A-Za-z0-9_./]*`.
fn check_key(key: &str, n: usize) -> Result<(), ParseError> {
    let b = key.as_bytes();
    let Some(&first) = b.first() else {
        return Err(ParseError::new(n, "empty key"));
    };
    if !(first.is_ascii_alphabetic() || first == b'_') {
        return Err(ParseError::new(
            n,
            format!("key must start with [A-Za-z_]: {}", excerpt(key)),
        ));
    }
    if let Some(bad) = b[1..]
        .iter()
        .find(|&&c| !(c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'/')))
    {
        return Err(ParseError::new(
            n,
            format!(
                "key characters must be [A-Za-z0-9/_.], found {:?} in {}",
                char::from(*bad),
                excerpt(key)
            ),
        ));
    }
    Ok(())
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Normal,
    Double,
    Single,
    Escape,
}

/// go-envparse's value evaluation into `out`: quotes, escapes, a trailing
/// `# comment` after unquoted text.
fn unquote(value: &str, out: &mut String) -> Result<(), String> {
    out.clear();
    let b = value.as_bytes();
    // Length of `out` up to the last significant (non-blank) character:
    // a comment drops the blanks before it.
    let mut last_sig = 0;
    let mut mode = Mode::Normal;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c < 32 {
            return Err(format!("0x{c:02x} is an invalid value character"));
        }
        if c > 127 {
            if mode == Mode::Escape {
                return Err("multibyte characters disallowed in escape sequences".into());
            }
            // A whole character: its bytes are all above 127.
            let len = value[i..].chars().next().map_or(1, char::len_utf8);
            out.push_str(&value[i..i + len]);
            last_sig = out.len();
            i += len;
            continue;
        }
        let ch = char::from(c);
        match mode {
            Mode::Normal => match ch {
                '"' => mode = Mode::Double,
                '\'' => mode = Mode::Single,
                '#' => {
                    out.truncate(last_sig);
                    return Ok(());
                }
                ' ' | '\t' => out.push(ch),
                _ => {
                    out.push(ch);
                    last_sig = out.len();
                }
            },
            Mode::Double => match ch {
                '"' => mode = Mode::Normal,
                '\\' => mode = Mode::Escape,
                _ => {
                    out.push(ch);
                    last_sig = out.len();
                }
            },
            Mode::Single => match ch {
                '\'' => mode = Mode::Normal,
                _ => {
                    out.push(ch);
                    last_sig = out.len();
                }
            },
            Mode::Escape => {
                let decoded = match ch {
                    '"' | '\\' | '/' => ch,
                    'b' => '\u{8}',
                    'f' => '\u{c}',
                    'r' => '\r',
                    'n' => '\n',
                    't' => '\t',
                    'u' => {
                        let mut r = hex4(&b[i + 1..])?;
                        i += 4;
                        if (0xd800..0xe000).contains(&r) {
                            if b.len() < i + 6 || b[i + 1] != b'\\' || b[i + 2] != b'u' {
                                return Err("incomplete Unicode surrogate pair".into());
                            }
                            let r2 = hex4(&b[i + 3..])?;
                            i += 6;
                            r = decode_surrogates(r, r2);
                        }
                        char::from_u32(r).unwrap_or('\u{fffd}')
                    }
                    _ => return Err(format!("invalid escape sequence: {ch:?}")),
                };
                out.push(decoded);
                last_sig = out.len();
                mode = Mode::Double;
            }
        }
        i += 1;
    }
    match mode {
        Mode::Normal => Ok(()),
        Mode::Double => Err("unmatched \"".into()),
        Mode::Single => Err("unmatched '".into()),
        Mode::Escape => Err("incomplete escape sequence".into()),
    }
}

/// Four hex digits, as envparse's `h2r`.
fn hex4(b: &[u8]) -> Result<u32, String> {
    if b.len() < 4 {
        return Err("incomplete hex sequence".into());
    }
    b[..4].iter().try_fold(0u32, |acc, &c| {
        let d = char::from(c)
            .to_digit(16)
            .ok_or_else(|| format!("invalid hex character: {:?}", char::from(c)))?;
        Ok(acc * 16 + d)
    })
}

/// Go's `utf16.DecodeRune`: U+FFFD unless a high then a low surrogate.
fn decode_surrogates(r1: u32, r2: u32) -> u32 {
    if (0xd800..0xdc00).contains(&r1) && (0xdc00..0xe000).contains(&r2) {
        (((r1 - 0xd800) << 10) | (r2 - 0xdc00)) + 0x10000
    } else {
        0xfffd
    }
}

pub struct OsCollector {
    etc: SourceFile,
    usr_lib: SourceFile,
    parsed: OsRelease,
    /// The file `parsed` came from, as stat saw it just before the read,
    /// and what was derived from it.
    cached: Option<(Identity, Derived)>,
    /// Watches on the directories of both files and of the one a symbolic
    /// link leads to, made before the last stat, and the absence epoch then
    /// (file_watch.rs): while neither moved, the stat is skipped.
    watch: Option<(FileWatch, Epoch)>,
}

/// What changes when os-release is edited or replaced: a package upgrade
/// renames a new file into place (inode), an edit in place moves the size,
/// mtime or ctime (which even a write that restores the mtime moves).
#[derive(Clone, Copy, PartialEq, Debug)]
struct Identity {
    first: bool,
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Identity {
    /// The identity of the file at `path`, following symlinks as the read
    /// does (`/etc/os-release` is usually a link to /usr/lib).
    fn of(path: &Path, first: bool) -> Option<Identity> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path).ok()?;
        Some(Identity {
            first,
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        })
    }
}

pub fn build(s: &Settings) -> Box<dyn Collector> {
    Box::new(OsCollector {
        etc: SourceFile::new(&s.rootfs, "etc/os-release"),
        usr_lib: SourceFile::new(&s.rootfs, "usr/lib/os-release"),
        parsed: OsRelease::default(),
        cached: None,
        watch: None,
    })
}

/// Reads and parses `file` into `out`, then derives; `Ok(None)` if absent.
fn read(file: &mut SourceFile, out: &mut OsRelease) -> Result<Option<Derived>, CollectError> {
    file.parse_with(|t| {
        parse_into(t, out)?;
        out.derived()
    })
}

impl OsCollector {
    /// What to report: the last derivation while nothing could have changed
    /// the files, else stat's word on them, read again if they changed.
    /// `Ok(None)`: neither file is there.
    fn current(&mut self) -> Result<Option<Derived>, CollectError> {
        // The watch (or the epoch) is taken before the stat, so a change
        // right after the stat is reported to the next scrape.
        let intact = self.watch.as_mut().is_some_and(|(w, _)| !w.changed());
        match &mut self.watch {
            Some((_, epoch)) if intact => {
                if epoch.unmoved()
                    && let Some((_, d)) = self.cached
                {
                    return Ok(Some(d));
                }
                *epoch = Epoch::now();
            }
            _ => self.watch = self.new_watch(),
        }
        // os-release is read again only when stat says it changed: the
        // file is the same at almost every scrape, and reading it (open,
        // checks, read, close, parse) costs several times the stat.
        let now = Identity::of(self.etc.path(), true)
            .or_else(|| Identity::of(self.usr_lib.path(), false));
        if let (Some((was, d)), Some(now)) = (self.cached, now)
            && was == now
        {
            return Ok(Some(d));
        }
        self.cached = None;
        let (derived, first) = match read(&mut self.etc, &mut self.parsed)? {
            Some(d) => (d, true),
            None => match read(&mut self.usr_lib, &mut self.parsed)? {
                Some(d) => (d, false),
                None => return Ok(None),
            },
        };
        // Cached only if what was stat'ed is the file that was read.
        if let Some(now) = now.filter(|n| n.first == first) {
            self.cached = Some((now, derived));
        }
        Ok(Some(derived))
    }

    /// Watches for both files and for where `/etc/os-release` leads; None
    /// (stat at every scrape) if any of those directories cannot be watched.
    fn new_watch(&self) -> Option<(FileWatch, Epoch)> {
        let epoch = Epoch::now();
        let target = std::fs::canonicalize(self.etc.path()).ok();
        let mut files = vec![self.etc.path(), self.usr_lib.path()];
        files.extend(target.as_deref());
        FileWatch::new(&files).ok().map(|w| (w, epoch))
    }
}

impl Collector for OsCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        let Some(derived) = self.current()? else {
            return Ok(());
        };
        let v = &self.parsed.values;
        let labels: [(&str, &str); 12] = std::array::from_fn(|i| (KEYS[i].1, v[i].as_str()));
        enc.family(&INFO);
        enc.sample(&INFO, &labels, 1u64);
        if derived.version > 0.0 {
            enc.family(&VERSION);
            enc.sample(
                &VERSION,
                &[("id", &v[ID]), ("id_like", &v[ID_LIKE]), ("name", &v[NAME])],
                derived.version,
            );
        }
        if let Some(ts) = derived.support_end {
            enc.family(&SUPPORT_END);
            enc.sample(&SUPPORT_END, &[], ts);
        }
        Ok(())
    }
}

/// The os-release path a collector built with `rootfs` tries first.
pub fn etc_path(rootfs: &Path) -> std::path::PathBuf {
    rootfs.join("etc/os-release")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collectors::test_support::{fixture, render};

    fn parse(s: &str) -> Result<OsRelease, ParseError> {
        let mut o = OsRelease::default();
        parse_into(s, &mut o).map(|()| o)
    }

    fn value(s: &str) -> Result<String, String> {
        let mut out = String::new();
        unquote(s, &mut out).map(|()| out)
    }

    #[test]
    fn parses_captured_debian() {
        let text = std::fs::read_to_string(fixture("rootfs").join("etc/os-release")).unwrap();
        let o = parse(&text).unwrap();
        assert_eq!(o.get("ID"), "debian");
        assert_eq!(o.get("PRETTY_NAME"), "Debian GNU/Linux 12 (bookworm)");
        assert_eq!(o.get("VERSION_ID"), "12");
        assert_eq!(o.derived().unwrap().version, 12.0);
    }

    #[test]
    fn envparse_values() {
        assert_eq!(value("plain").unwrap(), "plain");
        assert_eq!(value("\"a b\"").unwrap(), "a b");
        assert_eq!(value("'a \\n b'").unwrap(), "a \\n b");
        assert_eq!(
            value(r#""say \"hi\" \\ \/ \t""#).unwrap(),
            "say \"hi\" \\ / \t"
        );
        assert_eq!(value(r#""caf\u00e9""#).unwrap(), "café");
        assert_eq!(value(r#""\ud83d\ude00""#).unwrap(), "😀");
        assert_eq!(value(r#""\udc00\ud800""#).unwrap(), "\u{fffd}");
        assert_eq!(value("a \"b\" 'c'").unwrap(), "a b c");
        assert_eq!(value("This is ok! # comment").unwrap(), "This is ok!");
        assert_eq!(
            value("\"kept # inside\" # dropped").unwrap(),
            "kept # inside"
        );
        assert_eq!(value("a#b").unwrap(), "a");
        assert_eq!(value("'unterminated # comment").unwrap_err(), "unmatched '");
        assert_eq!(value("x # 'unterminated").unwrap(), "x");
        assert_eq!(value("é # c").unwrap(), "é");
        assert_eq!(value("\"unmatched").unwrap_err(), "unmatched \"");
        assert_eq!(value("\"end\\").unwrap_err(), "incomplete escape sequence");
        assert!(value("\"\\x\"").unwrap_err().contains("invalid escape"));
        assert!(value("\"\\u12\"").unwrap_err().contains("hex"));
        assert!(value("\"\\ud800\"").unwrap_err().contains("surrogate"));
        assert!(value("\"\\é\"").unwrap_err().contains("multibyte"));
        assert!(value("a\tb").unwrap_err().contains("0x09"));
        assert_eq!(value("").unwrap(), "");
    }

    #[test]
    fn envparse_lines() {
        let o = parse(
            "# comment\n\n  export NAME = \"Fancy OS\"  \nID=fancy\nID=fancier\nOTHER.key/x=1\nVERSION_ID=3.18.4\n",
        )
        .unwrap();
        assert_eq!(o.get("NAME"), "Fancy OS");
        assert_eq!(o.get("ID"), "fancier");
        assert_eq!(o.derived().unwrap().version, 3.18);
        // `export` alone is a key, not a prefix.
        assert!(parse("export=1\n").is_ok());
        assert_eq!(parse("ID=x\nnot a pair\n").unwrap_err().line, 2);
        assert!(parse("=x\n").unwrap_err().msg.contains("empty key"));
        assert!(parse("1ID=x\n").unwrap_err().msg.contains("start"));
        assert!(parse("I-D=x\n").unwrap_err().msg.contains("characters"));
        let e = parse("ID=ok\nNAME=\"open\n").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.msg.contains("NAME"), "{}", e.msg);
    }

    #[test]
    fn version_and_support_end() {
        let d = |s: &str| parse(s).unwrap().derived();
        assert_eq!(d("VERSION_ID=22.04\n").unwrap().version, 22.04);
        assert_eq!(d("VERSION_ID=\"12\"\n").unwrap().version, 12.0);
        assert_eq!(d("VERSION_ID=rolling\n").unwrap().version, 0.0);
        assert_eq!(d("VERSION_ID=7.\n").unwrap().version, 7.0);
        assert!(d(&format!("VERSION_ID={}\n", "9".repeat(400))).is_err());
        assert_eq!(
            d("SUPPORT_END=2028-06-30\n").unwrap().support_end,
            Some(1_845_936_000)
        );
        assert_eq!(d("SUPPORT_END=1970-01-01\n").unwrap().support_end, Some(0));
        assert_eq!(
            d("SUPPORT_END=2024-02-29\n").unwrap().support_end,
            Some(1_709_164_800)
        );
        for bad in [
            "2023-02-29",
            "2024-13-01",
            "2024-1-01",
            "24-01-01",
            "2024-01-01 ",
        ] {
            assert!(
                d(&format!("SUPPORT_END=\"{bad}\"\n")).is_err(),
                "{bad} accepted"
            );
        }
    }

    fn tree(etc: Option<&str>, usr_lib: Option<&str>) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (rel, text) in [("etc/os-release", etc), ("usr/lib/os-release", usr_lib)] {
            if let Some(t) = text {
                let p = dir.path().join(rel);
                std::fs::create_dir_all(p.parent().unwrap()).unwrap();
                std::fs::write(p, t).unwrap();
            }
        }
        dir
    }

    fn scrape(rootfs: &Path) -> Result<String, CollectError> {
        let mut s = Settings::with_roots("/nonexistent", "/nonexistent");
        s.rootfs = rootfs.to_path_buf();
        render(build(&s).as_mut())
    }

    #[test]
    fn collector_on_fixture() {
        assert_eq!(
            scrape(&fixture("rootfs")).unwrap(),
            "# HELP node_os_info A metric with a constant '1' value labeled by build_id, id, id_like, image_id, image_version, name, pretty_name, variant, variant_id, version, version_codename, version_id.\n\
             # TYPE node_os_info gauge\n\
             node_os_info{build_id=\"\",id=\"debian\",id_like=\"\",image_id=\"\",image_version=\"\",name=\"Debian GNU/Linux\",pretty_name=\"Debian GNU/Linux 12 (bookworm)\",variant=\"\",variant_id=\"\",version=\"12 (bookworm)\",version_codename=\"bookworm\",version_id=\"12\"} 1\n\
             # HELP node_os_version Metric containing the major.minor part of the OS version.\n\
             # TYPE node_os_version gauge\n\
             node_os_version{id=\"debian\",id_like=\"\",name=\"Debian GNU/Linux\"} 12\n"
        );
    }

    #[test]
    fn falls_back_to_usr_lib_and_escapes_labels() {
        let t = tree(
            None,
            Some("NAME=\"Quote \\\"OS\\\"\"\nID=q\nVERSION_ID=0.5\nSUPPORT_END=2030-01-01\n"),
        );
        let out = scrape(t.path()).unwrap();
        assert!(out.contains("name=\"Quote \\\"OS\\\"\""), "{out}");
        assert!(
            out.contains("node_os_version{id=\"q\",id_like=\"\",name=\"Quote \\\"OS\\\"\"} 0.5"),
            "{out}"
        );
        assert!(
            out.contains("node_os_support_end_timestamp_seconds 1893456000"),
            "{out}"
        );
        // /etc wins when present, even if /usr/lib is broken.
        let t = tree(Some("ID=etc\n"), Some("garbage\n"));
        let out = scrape(t.path()).unwrap();
        assert!(out.contains("id=\"etc\""), "{out}");
        assert!(!out.contains("node_os_version"), "no VERSION_ID: {out}");
        // Neither: nothing, and no failure.
        let t = tree(None, None);
        assert_eq!(scrape(t.path()).unwrap(), "");
        // A broken /etc file is a failure naming it, not a fallback.
        let t = tree(Some("ID=\"x\n"), Some("ID=y\n"));
        let e = scrape(t.path()).unwrap_err();
        assert_eq!(e.file, etc_path(t.path()));
        assert_eq!(e.line, Some(1));
    }

    /// The file is read again only when stat says it changed: an edit in
    /// place that keeps size and mtime, a replacement by rename, a switch
    /// to the /usr/lib fallback and a removal must each show at once.
    #[test]
    fn changes_show_at_the_next_scrape() {
        let t = tree(
            Some(
                "ID=aaa
",
            ),
            Some(
                "ID=lib
",
            ),
        );
        let etc = etc_path(t.path());
        let mut s = Settings::with_roots("/nonexistent", "/nonexistent");
        s.rootfs = t.path().to_path_buf();
        let mut c = build(&s);
        let id = |c: &mut Box<dyn Collector>| {
            let out = render(c.as_mut()).unwrap();
            out.split(",id=\"")
                .nth(1)
                .map(|r| r[..r.find('"').unwrap()].to_string())
        };
        assert_eq!(id(&mut c).as_deref(), Some("aaa"));
        assert_eq!(id(&mut c).as_deref(), Some("aaa"));
        // Same size, mtime put back: only the ctime moves.
        let mtime = std::fs::metadata(&etc).unwrap().modified().unwrap();
        std::fs::write(&etc, "ID=bbb\n").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&etc)
            .unwrap()
            .set_modified(mtime)
            .unwrap();
        assert_eq!(id(&mut c).as_deref(), Some("bbb"));
        let new = t.path().join("etc/os-release.new");
        std::fs::write(&new, "ID=ccc\n").unwrap();
        std::fs::rename(&new, &etc).unwrap();
        assert_eq!(id(&mut c).as_deref(), Some("ccc"));
        std::fs::remove_file(&etc).unwrap();
        assert_eq!(id(&mut c).as_deref(), Some("lib"));
        std::fs::remove_file(t.path().join("usr/lib/os-release")).unwrap();
        assert_eq!(id(&mut c), None);
    }
}
