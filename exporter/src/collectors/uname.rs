//! Kernel identity → `node_uname_info{domainname,machine,nodename,release,sysname,version} 1`.
//!
//! node_exporter takes all six labels from uname(2), and so does usescope
//! when `--path.procfs` is a real procfs: its `sys/kernel/*` files show the
//! reader's own UTS namespace, the strings uname(2) returns in one call
//! instead of five sysctl reads. On a fixture tree (any other filesystem)
//! five of them come from `<procfs>/sys/kernel/*`, so the output is
//! deterministic; `machine` has no /proc file and comes from uname(2). A
//! missing file falls back to uname(2) as well: dashboards join on
//! `node_uname_info` for the host name, so it is always exported.

use std::ffi::CStr;
use std::path::{Path, PathBuf};

use crate::collectors::{Parser, Settings, Source, Spec};
use crate::kernel::error::{CollectError, ParseError};
use crate::kernel::source::{Read, SourceFile};
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Desc, Encoder};

pub const SPEC: Spec = Spec {
    name: "uname",
    default_enabled: true,
    help: "Kernel identity (node_uname_info)",
    flags: &[],
    build,
    sources: &[
        Source::proc("sys/kernel/domainname", "uname"),
        Source::proc("sys/kernel/hostname", "uname"),
        Source::proc("sys/kernel/osrelease", "uname"),
        Source::proc("sys/kernel/ostype", "uname"),
        Source::proc("sys/kernel/version", "uname"),
    ],
    parsers: &[Parser::text("uname", |t| parse_into(t, &mut ""))],
};

const INFO: Desc = Desc::gauge(
    "node_uname_info",
    "Labeled system information as provided by the uname system call.",
);

/// The utsname fields, in the label order of the output (sorted, as
/// node_exporter's client library writes them).
#[derive(Clone, Copy)]
enum Part {
    DomainName,
    Machine,
    NodeName,
    Release,
    SysName,
    Version,
}

impl Part {
    const ALL: [Part; 6] = [
        Part::DomainName,
        Part::Machine,
        Part::NodeName,
        Part::Release,
        Part::SysName,
        Part::Version,
    ];

    fn label(self) -> &'static str {
        match self {
            Part::DomainName => "domainname",
            Part::Machine => "machine",
            Part::NodeName => "nodename",
            Part::Release => "release",
            Part::SysName => "sysname",
            Part::Version => "version",
        }
    }

    /// The sysctl that holds this part, relative to procfs.
    fn sysctl(self) -> Option<&'static str> {
        match self {
            Part::DomainName => Some("sys/kernel/domainname"),
            Part::Machine => None,
            Part::NodeName => Some("sys/kernel/hostname"),
            Part::Release => Some("sys/kernel/osrelease"),
            Part::SysName => Some("sys/kernel/ostype"),
            Part::Version => Some("sys/kernel/version"),
        }
    }
}

/// Parses a one-line sysctl such as `6.18.44\n` into its value. The value
/// may be empty (an unset domain name) or contain spaces (`version`), but
/// not a second line.
pub fn parse_into<'t>(s: &'t str, out: &mut &'t str) -> Result<(), ParseError> {
    if s.is_empty() {
        return Err(ParseError::new(1, "empty file"));
    }
    let value = s.strip_suffix('\n').unwrap_or(s);
    if value.contains('\n') {
        return Err(ParseError::new(2, "expected a single line"));
    }
    *out = value;
    Ok(())
}

/// uname(2)'s answer, read at each scrape (the host name can change).
struct Utsname(libc::utsname);

impl Utsname {
    fn get() -> Result<Utsname, CollectError> {
        // SAFETY: utsname is plain C data; all-zero is a valid value.
        let mut u: libc::utsname = unsafe { std::mem::zeroed() };
        // SAFETY: uname writes only into the struct we own.
        if unsafe { libc::uname(&mut u) } != 0 {
            return Err(CollectError::other(
                "uname(2)",
                std::io::Error::last_os_error().to_string(),
            ));
        }
        Ok(Utsname(u))
    }

    fn part(&self, p: Part) -> Result<&str, CollectError> {
        let field = match p {
            Part::DomainName => &self.0.domainname,
            Part::Machine => &self.0.machine,
            Part::NodeName => &self.0.nodename,
            Part::Release => &self.0.release,
            Part::SysName => &self.0.sysname,
            Part::Version => &self.0.version,
        };
        // SAFETY: the struct started zeroed and the kernel NUL-terminates
        // every field within its bounds, so the string ends inside the array.
        let c = unsafe { CStr::from_ptr(field.as_ptr()) };
        c.to_str()
            .map_err(|_| CollectError::other("uname(2)", format!("{} is not UTF-8", p.label())))
    }
}

pub struct UnameCollector {
    procfs: PathBuf,
    /// One per [`Part::ALL`] entry; `None` for `machine`, and all `None`
    /// on a real procfs (uname(2) answers for all of them).
    files: [Option<SourceFile>; 6],
}

pub fn build(s: &Settings) -> Box<dyn Collector> {
    Box::new(UnameCollector {
        procfs: s.procfs.clone(),
        files: if crate::kernel::fs_kind::is_procfs(&s.procfs) {
            Default::default()
        } else {
            Part::ALL.map(|p| p.sysctl().map(|rel| SourceFile::small(&s.procfs, rel)))
        },
    })
}

/// A part's label and value: from its file, or from uname(2) if the part
/// has no file or the file is absent.
fn value<'a>(
    file: &'a mut Option<SourceFile>,
    uts: &'a Utsname,
    part: Part,
    procfs: &Path,
) -> Result<(&'static str, &'a str), CollectError> {
    let (Some(file), Some(rel)) = (file, part.sysctl()) else {
        return Ok((part.label(), uts.part(part)?));
    };
    let v = match file.read()? {
        // The error path is rebuilt from the root: `file` stays borrowed by
        // the returned text on the success path.
        Read::Text(t) => {
            let mut v = "";
            parse_into(t, &mut v).map_err(|e| CollectError::from_parse(&procfs.join(rel), e))?;
            v
        }
        Read::Absent => uts.part(part)?,
    };
    Ok((part.label(), v))
}

impl Collector for UnameCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        let uts = Utsname::get()?;
        let root = &self.procfs;
        // Destructured in Part::ALL order, which is the label order.
        let [d, m, n, r, s, v] = &mut self.files;
        let labels = [
            value(d, &uts, Part::DomainName, root)?,
            value(m, &uts, Part::Machine, root)?,
            value(n, &uts, Part::NodeName, root)?,
            value(r, &uts, Part::Release, root)?,
            value(s, &uts, Part::SysName, root)?,
            value(v, &uts, Part::Version, root)?,
        ];
        enc.family(&INFO);
        enc.sample(&INFO, &labels, 1u64);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scrape::exposition::Format;

    const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/proc");

    fn parse(s: &str) -> Result<&str, ParseError> {
        let mut v = "";
        parse_into(s, &mut v).map(|()| v)
    }

    fn scrape(procfs: &Path) -> Result<String, CollectError> {
        let mut c = build(&Settings::with_roots(procfs, "/nonexistent"));
        let mut buf = Vec::new();
        c.collect(&mut Encoder::new(&mut buf, Format::PrometheusText))?;
        Ok(String::from_utf8(buf).unwrap())
    }

    #[test]
    fn parses_fixture_files() {
        let read = |f: &str| std::fs::read_to_string(Path::new(FIXTURE).join(f)).unwrap();
        assert_eq!(parse(&read("sys/kernel/ostype")).unwrap(), "Linux");
        assert_eq!(
            parse(&read("sys/kernel/version")).unwrap(),
            "#1 SMP PREEMPT_DYNAMIC @0"
        );
        assert_eq!(parse(&read("sys/kernel/domainname")).unwrap(), "(none)");
    }

    #[test]
    fn malformed() {
        assert_eq!(parse("").unwrap_err().line, 1);
        assert_eq!(parse("\n").unwrap(), "");
        // Truncated (no newline) is still one value.
        assert_eq!(parse("6.18").unwrap(), "6.18");
        let e = parse("garbage\nhere\n").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(parse("\n\n").is_err());
        // Free text: columns and numbers have no meaning here.
        assert_eq!(
            parse("a b 99999999999999999999999\n").unwrap(),
            "a b 99999999999999999999999"
        );
    }

    #[test]
    fn collector_output_on_fixture() {
        assert_eq!(
            scrape(Path::new(FIXTURE)).unwrap(),
            format!(
                "# HELP node_uname_info Labeled system information as provided by the uname system call.\n\
                 # TYPE node_uname_info gauge\n\
                 node_uname_info{{domainname=\"(none)\",machine=\"{}\",nodename=\"vm\",release=\"6.18.44-fc-v669\",sysname=\"Linux\",version=\"#1 SMP PREEMPT_DYNAMIC @0\"}} 1\n",
                std::env::consts::ARCH
            )
        );
    }

    #[test]
    fn absent_files_fall_back_to_the_syscall() {
        let out = scrape(Path::new("/nonexistent-usescope")).unwrap();
        let host = |f: &str| {
            let s = std::fs::read_to_string(Path::new("/proc/sys/kernel").join(f)).unwrap();
            s.trim_end_matches('\n').to_string()
        };
        for (label, file) in [
            ("nodename", "hostname"),
            ("release", "osrelease"),
            ("sysname", "ostype"),
        ] {
            let want = format!("{label}=\"{}\"", host(file));
            assert!(out.contains(&want), "{want} not in {out}");
        }
    }

    /// On the live procfs the labels come from uname(2): they must say what
    /// the five sysctl files say.
    #[test]
    fn live_procfs_agrees_with_its_sysctl_files() {
        let out = scrape(Path::new("/proc")).unwrap();
        let host = |f: &str| {
            let s = std::fs::read_to_string(Path::new("/proc/sys/kernel").join(f)).unwrap();
            s.trim_end_matches('\n').to_string()
        };
        for (label, file) in [
            ("domainname", "domainname"),
            ("nodename", "hostname"),
            ("release", "osrelease"),
            ("sysname", "ostype"),
            ("version", "version"),
        ] {
            let want = format!("{label}=\"{}\"", host(file));
            assert!(out.contains(&want), "{want} not in {out}");
        }
    }

    #[test]
    fn multi_line_file_names_path_and_line() {
        let temp = tempfile::tempdir().unwrap();
        let dir = temp.path();
        let k = dir.join("sys/kernel");
        std::fs::create_dir_all(&k).unwrap();
        std::fs::write(k.join("hostname"), "a\nb\n").unwrap();
        let e = scrape(dir).unwrap_err();
        assert_eq!(e.file, k.join("hostname"));
        assert_eq!(e.line, Some(2));
    }
}
