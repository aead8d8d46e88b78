//! Error types. A parser reports a line and a cause; a collector adds the
//! file it was reading, so the log line says exactly where input went bad.
//!
//! Error text goes to the log and to the public landing page, and it is
//! built from whatever a source file contains. So every constructor bounds
//! it: at most [`MAX_ERROR_CHARS`] characters, control characters and
//! non-ASCII escaped (a file cannot forge or break a log line, or hide text
//! with bidi overrides), and a cut marked with "…". File content quoted in
//! a message goes through [`excerpt`], which keeps only a short escaped
//! start of it: a 10 MB line, or the first line of a private file a source
//! was symlinked to, never reaches the log or the page whole.

use std::fmt::{self, Write};
use std::path::{Path, PathBuf};

/// Most characters in a [`ParseError`]'s `msg` or a [`CollectError`]'s
/// `cause`: room for any message the parsers write plus an excerpt, small
/// enough for one log line and one cell of the landing page.
pub const MAX_ERROR_CHARS: usize = 256;

/// Most characters of escaped file content an [`excerpt`] shows: enough to
/// recognise a token, too little to leak a line of a file.
pub const MAX_EXCERPT_CHARS: usize = 32;

/// A parse failure from a pure parser: 1-based line number and cause.
#[derive(Debug, Clone, PartialEq, Eq)]
#[expect(
    clippy::manual_non_exhaustive,
    reason = "#[non_exhaustive] binds only other crates; the collectors are in this one"
)]
pub struct ParseError {
    pub line: usize,
    pub msg: String,
    /// Private, so only this module's constructors build errors (the other
    /// fields stay readable) and no message escapes [`bounded`].
    _private: (),
}

impl ParseError {
    pub fn new(line: usize, msg: impl Into<String>) -> ParseError {
        ParseError {
            line,
            msg: bounded(msg.into()),
            _private: (),
        }
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.msg)
    }
}

impl std::error::Error for ParseError {}

/// A collector failure: which file, which line if known, and why.
#[derive(Debug)]
#[expect(
    clippy::manual_non_exhaustive,
    reason = "#[non_exhaustive] binds only other crates; the collectors are in this one"
)]
pub struct CollectError {
    pub file: PathBuf,
    pub line: Option<usize>,
    pub cause: String,
    /// As in [`ParseError`]: errors are built only by the constructors.
    _private: (),
}

impl CollectError {
    pub fn io(file: &Path, e: std::io::Error) -> CollectError {
        CollectError::build(file.to_path_buf(), None, e.to_string())
    }

    pub fn parse(file: &Path, line: usize, cause: impl Into<String>) -> CollectError {
        CollectError::build(file.to_path_buf(), Some(line), cause.into())
    }

    /// Attaches a file to a parser's error.
    pub fn from_parse(file: &Path, e: ParseError) -> CollectError {
        CollectError::parse(file, e.line, e.msg)
    }

    /// A failure that is not tied to one file (a BPF map read, a syscall).
    pub fn other(what: impl Into<PathBuf>, cause: impl Into<String>) -> CollectError {
        CollectError::build(what.into(), None, cause.into())
    }

    fn build(file: PathBuf, line: Option<usize>, cause: String) -> CollectError {
        CollectError {
            file,
            line,
            cause: bounded(cause),
            _private: (),
        }
    }
}

impl fmt::Display for CollectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(l) => write!(f, "{}:{}: {}", self.file.display(), l, self.cause),
            None => write!(f, "{}: {}", self.file.display(), self.cause),
        }
    }
}

impl std::error::Error for CollectError {}

/// `msg` made safe to show: control characters and non-ASCII (but "…",
/// which marks every cut) escaped; each double-quoted part cut after
/// [`MAX_EXCERPT_CHARS`] characters, since by the convention of `{:?}` and
/// [`excerpt`] that is file content (this is what keeps a collector that
/// quotes a whole line with `{line:?}` to an excerpt); and the whole cut to
/// [`MAX_ERROR_CHARS`]. Runs only when an error is built, never on a good
/// scrape.
///
/// Idempotent, so a message that passes through two constructors is
/// unchanged by the second. That is why, inside quotes, an escape is one
/// unit that is kept or cut whole, a backslash that starts no escape is
/// itself escaped, and a "…" ends the part (it is where an earlier pass
/// cut it).
fn bounded(msg: String) -> String {
    let mut out = Limited::default();
    let mut chars = msg.chars();
    // Characters shown of the quoted part we are in; None outside quotes;
    // above the limit once it has been cut (the rest up to the closing
    // quote is left out).
    let mut quoted: Option<usize> = None;
    let mut unit = String::new();
    while let Some(c) = chars.next() {
        unit.clear();
        if c == '\\' && quoted.is_some() {
            take_escape(&mut chars, &mut unit);
        } else {
            push_safe(c, &mut unit);
        }
        match (c, quoted) {
            ('"', None) => quoted = Some(0),
            ('"', Some(_)) => quoted = None,
            (_, Some(n)) if n > MAX_EXCERPT_CHARS => continue,
            (_, Some(n)) => {
                let len = unit.chars().count();
                if c == '…' || n + len > MAX_EXCERPT_CHARS {
                    unit.clear();
                    unit.push('…');
                    quoted = Some(MAX_EXCERPT_CHARS + 1);
                } else {
                    quoted = Some(n + len);
                }
            }
            (_, None) => {}
        }
        if !out.push(&unit) {
            break;
        }
    }
    out.text
}

fn is_plain(c: char) -> bool {
    c == ' ' || c.is_ascii_graphic() || c == '…'
}

fn push_safe(c: char, out: &mut String) {
    if is_plain(c) {
        out.push(c);
    } else {
        escape_char(c, out);
    }
}

/// After a backslash inside quotes: moves the escape it starts (`\n`, `\"`,
/// `\u{1b}`: what `{:?}` and [`excerpt`] write) from `chars` to `unit`, or,
/// when it starts none, writes the backslash escaped, as `\\`.
fn take_escape(chars: &mut std::str::Chars<'_>, unit: &mut String) {
    let rest = chars.as_str();
    let len = match rest.as_bytes() {
        [b'n' | b'r' | b't' | b'0' | b'\\' | b'\'' | b'"', ..] => 1,
        [b'u', b'{', tail @ ..] => match tail.iter().position(|&b| b == b'}') {
            Some(digits @ 1..=6) if tail[..digits].iter().all(u8::is_ascii_hexdigit) => digits + 3,
            _ => 0,
        },
        _ => 0,
    };
    if len == 0 {
        unit.push_str("\\\\");
        return;
    }
    // All ASCII, as matched above.
    unit.push('\\');
    unit.push_str(&rest[..len]);
    for _ in chars.take(len) {}
}

/// A string of at most [`MAX_ERROR_CHARS`] characters, built unit by unit.
#[derive(Default)]
struct Limited {
    text: String,
    chars: usize,
    /// Where to cut if the rest does not fit: the end of the last whole
    /// unit that leaves room for the "…".
    cut_at: usize,
}

impl Limited {
    /// Appends `unit` whole, or cuts the text with "…" (one: a text that
    /// already ends with one was cut there) and returns false.
    fn push(&mut self, unit: &str) -> bool {
        let n = unit.chars().count();
        if self.chars + n > MAX_ERROR_CHARS {
            self.text.truncate(self.cut_at);
            if !self.text.ends_with('…') {
                self.text.push('…');
            }
            return false;
        }
        self.text.push_str(unit);
        self.chars += n;
        if self.chars < MAX_ERROR_CHARS {
            self.cut_at = self.text.len();
        }
        true
    }
}

/// Writes `c` as an ASCII escape: `\n`, `\r`, `\t`, `\"`, `\\`, or `\u{..}`.
fn escape_char(c: char, out: &mut String) {
    match c {
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        '"' => out.push_str("\\\""),
        '\\' => out.push_str("\\\\"),
        // Writing to a String cannot fail.
        _ => {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        }
    }
}

/// File content for an error message: `"..."` around at most
/// [`MAX_EXCERPT_CHARS`] characters of `s`, escaped so only printable ASCII
/// remains (quotes and backslashes too), with "…" before the closing quote
/// when `s` was longer. Formats lazily: nothing is allocated for it.
pub fn excerpt(s: &str) -> Excerpt<'_> {
    Excerpt(s)
}

pub struct Excerpt<'a>(&'a str);

impl fmt::Display for Excerpt<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_char('"')?;
        let mut shown = 0;
        let mut escaped = String::new();
        for c in self.0.chars() {
            escaped.clear();
            if c == ' ' || (c.is_ascii_graphic() && c != '"' && c != '\\') {
                escaped.push(c);
            } else {
                escape_char(c, &mut escaped);
            }
            if shown + escaped.len() > MAX_EXCERPT_CHARS {
                f.write_char('…')?;
                break;
            }
            f.write_str(&escaped)?;
            shown += escaped.len();
        }
        f.write_char('"')
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_plain_messages_are_kept_as_they_are() {
        let msg = "cpu: invalid unsigned integer \"x\\\"y\": invalid digit found in string";
        assert_eq!(ParseError::new(3, msg).msg, msg);
        assert_eq!(
            ParseError::new(3, "expected `(N, …)`").msg,
            "expected `(N, …)`"
        );
    }

    #[test]
    fn messages_are_cut_to_the_bound_with_a_mark() {
        let e = ParseError::new(1, "a".repeat(10_000_000));
        assert_eq!(e.msg.chars().count(), MAX_ERROR_CHARS);
        assert!(e.msg.ends_with("a…"), "{}", e.msg);
        // Escapes are never split: 42 whole "\u{e9}" and the mark.
        let e = CollectError::parse(Path::new("/proc/vmstat"), 1, "é".repeat(300));
        assert_eq!(e.cause, format!("{}…", "\\u{e9}".repeat(42)));
        // Exactly at the bound: nothing is cut, even on the slow path.
        let e = ParseError::new(1, "b".repeat(MAX_ERROR_CHARS));
        assert_eq!(e.msg, "b".repeat(MAX_ERROR_CHARS));
        let at_bound = format!("{}…", "b".repeat(MAX_ERROR_CHARS - 1));
        assert_eq!(ParseError::new(1, at_bound.clone()).msg, at_bound);
        let e = ParseError::new(1, "b".repeat(MAX_ERROR_CHARS + 1));
        assert_eq!(e.msg, format!("{}…", "b".repeat(MAX_ERROR_CHARS - 1)));
    }

    #[test]
    fn every_constructor_bounds_and_escapes() {
        let long = format!(
            "x\n level=error msg=forged\u{1b}[2J\u{202e}{}",
            "y".repeat(1000)
        );
        let io = std::io::Error::other(long.clone());
        let errors = [
            CollectError::io(Path::new("f"), io).cause,
            CollectError::parse(Path::new("f"), 1, long.clone()).cause,
            CollectError::from_parse(Path::new("f"), ParseError::new(1, long.clone())).cause,
            CollectError::other("f", long.clone()).cause,
            ParseError::new(1, long.clone()).msg,
        ];
        for e in errors {
            assert!(e.chars().count() <= MAX_ERROR_CHARS, "{e}");
            assert!(
                e.starts_with("x\\n level=error msg=forged\\u{1b}[2J\\u{202e}yyy"),
                "{e}"
            );
            assert!(
                e.chars()
                    .all(|c| c == '…' || c == ' ' || c.is_ascii_graphic())
            );
        }
    }

    #[test]
    fn bounding_is_idempotent() {
        let once = ParseError::new(1, format!("tab\there é \u{0}{}", "z".repeat(400))).msg;
        let twice = CollectError::from_parse(Path::new("f"), ParseError::new(1, once.clone()));
        assert_eq!(twice.cause, once);
    }

    #[test]
    fn quoted_parts_are_cut_to_an_excerpt() {
        // What a collector writes with `{line:?}` on a long line.
        let line = format!("root:$6$salt\"{}\u{1b}", "h".repeat(10_000));
        let e = ParseError::new(1, format!("expected `Key:`, found {line:?} at the start"));
        assert_eq!(
            e.msg,
            r#"expected `Key:`, found "root:$6$salt\"hhhhhhhhhhhhhhhhhh…" at the start"#
        );
        // Escapes are units: never split, and each counts whole.
        let e = ParseError::new(1, format!("{:?}", "\u{1b}".repeat(20)));
        assert_eq!(e.msg, format!("\"{}…\"", r"\u{1b}".repeat(5)));
        let e = ParseError::new(1, format!("{:?}", "é".repeat(20)));
        assert_eq!(e.msg, format!("\"{}…\"", r"\u{e9}".repeat(5)));
        // A backslash that starts no escape is escaped itself.
        let e = ParseError::new(1, r#"found "a\qb" here"#);
        assert_eq!(e.msg, r#"found "a\\qb" here"#);
        // Short quoted parts and an excerpt stay as they are.
        let msg = format!("expected the \"Inter-|\" header, found {}", excerpt(&line));
        assert_eq!(ParseError::new(1, msg.clone()).msg, msg);
    }

    proptest::proptest! {
        #[test]
        fn bounding_holds_for_any_text(s in "[a\"\\\\u{{}}x1 \n\u{1b}é…]{0,400}") {
            let once = bounded(s.clone());
            proptest::prop_assert!(once.chars().count() <= MAX_ERROR_CHARS);
            proptest::prop_assert!(once.chars().all(is_plain));
            proptest::prop_assert_eq!(bounded(once.clone()), once.clone());
            let debug = bounded(format!("found {s:?} here"));
            // "found ", the quotes, the excerpt and its mark, " here".
            let most = 6 + 2 + MAX_EXCERPT_CHARS + 1 + 5;
            proptest::prop_assert!(debug.chars().count() <= most, "{}", debug);
            proptest::prop_assert_eq!(bounded(debug.clone()), debug);
        }
    }

    #[test]
    fn excerpts_are_short_and_escaped() {
        assert_eq!(excerpt("eth0").to_string(), "\"eth0\"");
        assert_eq!(excerpt("").to_string(), "\"\"");
        assert_eq!(excerpt("a\"b\\c\td").to_string(), r#""a\"b\\c\td""#);
        assert_eq!(excerpt("é\u{202e}").to_string(), r#""\u{e9}\u{202e}""#);
        let long = excerpt(&"q".repeat(10_000_000)).to_string();
        assert_eq!(long, format!("\"{}…\"", "q".repeat(MAX_EXCERPT_CHARS)));
        // An escape is never split; the excerpt stops before it instead.
        let s = format!("{}\u{1b}", "q".repeat(MAX_EXCERPT_CHARS - 2));
        assert_eq!(
            excerpt(&s).to_string(),
            format!("\"{}…\"", "q".repeat(MAX_EXCERPT_CHARS - 2))
        );
        // Exactly at the bound: no mark.
        let s = "q".repeat(MAX_EXCERPT_CHARS);
        assert_eq!(excerpt(&s).to_string(), format!("\"{s}\""));
    }
}
