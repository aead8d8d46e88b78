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

/// `msg` with control characters and non-ASCII (but "…", which the
/// truncation marks itself and [`excerpt`] writes) escaped, cut to
/// [`MAX_ERROR_CHARS`] characters. Idempotent, so a message that passes
/// through two constructors is unchanged by the second. A short printable
/// ASCII message, every message a parser writes on good code paths, is
/// returned as it is.
fn bounded(msg: String) -> String {
    let plain = |c: char| c == ' ' || c.is_ascii_graphic() || c == '…';
    if msg.len() <= MAX_ERROR_CHARS && msg.chars().all(plain) {
        return msg;
    }
    let mut out = String::new();
    let mut chars = 0;
    // Where to cut if the rest does not fit: the end of the last whole
    // escape that leaves room for the "…".
    let mut cut_at = 0;
    let mut escaped = String::new();
    for c in msg.chars() {
        escaped.clear();
        if plain(c) {
            escaped.push(c);
        } else {
            escape_char(c, &mut escaped);
        }
        let n = escaped.chars().count();
        if chars + n > MAX_ERROR_CHARS {
            out.truncate(cut_at);
            out.push('…');
            return out;
        }
        out.push_str(&escaped);
        chars += n;
        if chars < MAX_ERROR_CHARS {
            cut_at = out.len();
        }
    }
    out
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
        assert_eq!(ParseError::new(3, "expected `(N, …)`").msg, "expected `(N, …)`");
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
        let long = format!("x\n level=error msg=forged\u{1b}[2J\u{202e}{}", "y".repeat(1000));
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
            assert!(e.starts_with("x\\n level=error msg=forged\\u{1b}[2J\\u{202e}yyy"), "{e}");
            assert!(e.chars().all(|c| c == '…' || c == ' ' || c.is_ascii_graphic()));
        }
    }

    #[test]
    fn bounding_is_idempotent() {
        let once = ParseError::new(1, format!("tab\there é \u{0}{}", "z".repeat(400))).msg;
        let twice = CollectError::from_parse(Path::new("f"), ParseError::new(1, once.clone()));
        assert_eq!(twice.cause, once);
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
