//! Error types. A parser reports a line and a cause; a collector adds the
//! file it was reading, so the log line says exactly where input went bad.

use std::fmt;
use std::path::{Path, PathBuf};

/// A parse failure from a pure parser: 1-based line number and cause.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    pub line: usize,
    pub msg: String,
}

impl ParseError {
    pub fn new(line: usize, msg: impl Into<String>) -> ParseError {
        ParseError {
            line,
            msg: msg.into(),
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
}

impl CollectError {
    pub fn io(file: &Path, e: std::io::Error) -> CollectError {
        CollectError {
            file: file.to_path_buf(),
            line: None,
            cause: e.to_string(),
        }
    }

    pub fn parse(file: &Path, line: usize, cause: impl Into<String>) -> CollectError {
        CollectError {
            file: file.to_path_buf(),
            line: Some(line),
            cause: cause.into(),
        }
    }

    /// Attaches a file to a parser's error.
    pub fn from_parse(file: &Path, e: ParseError) -> CollectError {
        CollectError::parse(file, e.line, e.msg)
    }

    /// A failure that is not tied to one file (a BPF map read, a syscall).
    pub fn other(what: impl Into<PathBuf>, cause: impl Into<String>) -> CollectError {
        CollectError {
            file: what.into(),
            line: None,
            cause: cause.into(),
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
