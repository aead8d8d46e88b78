//! /proc/sys/fs/file-nr → `node_filefd_allocated` and `node_filefd_maximum`,
//! node_exporter's filefd collector (collector/filefd_linux.go).
//!
//! The file is one line of three numbers: file handles allocated, allocated
//! but unused (always 0 since Linux 2.6), and the system-wide maximum
//! (`fs.file-max`). Allocated over maximum is the utilisation of the
//! kernel's file table; at the maximum, open(2) fails with ENFILE.

use crate::collectors::single_file;
use crate::collectors::{Parser, Settings, Source, Spec};
use crate::kernel::error::ParseError;
use crate::kernel::parse::{fields, lines, next_field, parse_fresh, u64_field};
use crate::kernel::source::SourceFile;
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Desc, Encoder};

pub const SPEC: Spec = Spec {
    name: "filefd",
    default_enabled: true,
    help: "File handles allocated and the maximum from /proc/sys/fs/file-nr",
    flags: &[],
    build,
    sources: &[Source::proc("sys/fs/file-nr", "filefd")],
    parsers: &[Parser::numeric("filefd", |t| {
        parse_fresh(t, parse_into).map(drop)
    })],
};

const ALLOCATED: Desc = Desc::gauge(
    "node_filefd_allocated",
    "File descriptor statistics: allocated.",
);
const MAXIMUM: Desc = Desc::gauge(
    "node_filefd_maximum",
    "File descriptor statistics: maximum.",
);

#[derive(Debug, Default, PartialEq, Eq)]
pub struct FileNr {
    pub allocated: u64,
    /// Allocated but unused; not exported (0 on every kernel since 2.6).
    pub free: u64,
    pub maximum: u64,
}

/// Parses `792\t0\t2466177\n`: exactly three unsigned numbers on one line.
pub fn parse_into(s: &str, out: &mut FileNr) -> Result<(), ParseError> {
    let mut lines = lines(s);
    let line = lines
        .next()
        .ok_or_else(|| ParseError::new(1, "empty file"))?;
    let mut f = fields(line);
    let mut next = |what| u64_field(next_field(&mut f, 1, what)?, 1, what);
    *out = FileNr {
        allocated: next("allocated")?,
        free: next("free")?,
        maximum: next("maximum")?,
    };
    if let Some(extra) = f.next() {
        return Err(ParseError::new(
            1,
            format!("unexpected extra field {extra:?}"),
        ));
    }
    if lines.next().is_some() {
        return Err(ParseError::new(2, "expected a single line"));
    }
    Ok(())
}

pub fn build(s: &Settings) -> Box<dyn Collector> {
    single_file::boxed(
        SourceFile::small(&s.procfs, "sys/fs/file-nr"),
        parse_into,
        write,
    )
}

/// The families of one read of the file.
fn write(parsed: &FileNr, enc: &mut Encoder) {
    for (desc, v) in [(&ALLOCATED, parsed.allocated), (&MAXIMUM, parsed.maximum)] {
        enc.family(desc);
        enc.sample(desc, &[], v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collectors::test_support::{fixture, render};

    fn parse(s: &str) -> Result<FileNr, ParseError> {
        parse_fresh(s, parse_into)
    }

    #[test]
    fn parses_real_format() {
        assert_eq!(
            parse("792\t0\t2466177\n").unwrap(),
            FileNr {
                allocated: 792,
                free: 0,
                maximum: 2466177
            }
        );
        // fs.file-max defaults to LONG_MAX on recent 64-bit kernels.
        assert_eq!(
            parse("1024\t0\t9223372036854775807\n").unwrap().maximum,
            9223372036854775807
        );
    }

    #[test]
    fn malformed() {
        assert_eq!(parse("").unwrap_err().line, 1);
        assert!(parse("792\t0\n").unwrap_err().msg.contains("maximum"));
        assert!(parse("792\t0\t5\t7\n").unwrap_err().msg.contains("extra"));
        assert!(parse("792\t-1\t5\n").unwrap_err().msg.contains("free"));
        assert!(parse("1\t0\t18446744073709551616\n").is_err());
        assert_eq!(parse("1\t0\t5\n1\t0\t5\n").unwrap_err().line, 2);
    }

    #[test]
    fn collector_on_fixture() {
        let s = Settings::with_roots(fixture("proc"), "/nonexistent");
        assert_eq!(
            render(build(&s).as_mut()).unwrap(),
            "# HELP node_filefd_allocated File descriptor statistics: allocated.\n\
             # TYPE node_filefd_allocated gauge\n\
             node_filefd_allocated 792\n\
             # HELP node_filefd_maximum File descriptor statistics: maximum.\n\
             # TYPE node_filefd_maximum gauge\n\
             node_filefd_maximum 2466177\n"
        );
        let absent = Settings::with_roots("/nonexistent-usescope", "/nonexistent");
        assert_eq!(render(build(&absent).as_mut()).unwrap(), "");
    }
}
