//! /proc/PID/mountinfo (proc(5)), parsed as procfs (Go) parses it: the
//! filesystem and btrfs collectors both read the mount table.

use crate::kernel::error::{ParseError, excerpt};
use crate::kernel::parse::{lines, u64_field};

/// One line of mountinfo (proc(5)), fields borrowed from the text:
/// `36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mount<'t> {
    pub mount_id: u64,
    pub parent_id: u64,
    pub major: u64,
    pub minor: u64,
    /// The directory of the filesystem mounted here (not `/` for a bind
    /// mount of a subdirectory).
    pub root: &'t str,
    /// As the kernel writes it: space, tab, newline and backslash escaped
    /// as `\040`, `\011`, `\012`, `\134`.
    pub mount_point: &'t str,
    pub options: &'t str,
    pub fs_type: &'t str,
    /// The device (`/dev/vda1`), or what the filesystem puts there
    /// (`tmpfs`, `server:/export`); escaped like the mount point.
    pub source: &'t str,
    pub super_options: &'t str,
}

/// Parses mountinfo into `out`, one [`Mount`] per line. As procfs (Go)
/// reads it: fields are separated by single spaces (an empty source makes
/// an empty field), a line has at least ten, and the fourth from the end is
/// the `-` that ends the optional fields. The mount IDs and
/// `major:minor` must be decimal numbers. An empty file is valid (no
/// mounts); an empty line is not.
pub fn parse_into<'t>(text: &'t str, out: &mut Vec<Mount<'t>>) -> Result<(), ParseError> {
    out.clear();
    for (i, line) in lines(text).enumerate() {
        out.push(parse_line(line, i + 1)?);
    }
    Ok(())
}

fn parse_line(line: &str, n: usize) -> Result<Mount<'_>, ParseError> {
    // The first six fields and a ring of the last four.
    let mut head = [""; 6];
    let mut tail = [""; 4];
    let mut count = 0;
    for (i, f) in line.split(' ').enumerate() {
        if let Some(h) = head.get_mut(i) {
            *h = f;
        }
        tail[i % 4] = f;
        count = i + 1;
    }
    if count < 10 {
        return Err(ParseError::new(
            n,
            format!("{count} fields; a mountinfo line has at least 10"),
        ));
    }
    let from_end = |k: usize| tail[(count - k) % 4];
    if from_end(4) != "-" {
        return Err(ParseError::new(
            n,
            format!(
                "separator: expected \"-\" as the 4th field from the end, got {}",
                excerpt(from_end(4))
            ),
        ));
    }
    let (major, minor) = head[2].split_once(':').ok_or_else(|| {
        ParseError::new(
            n,
            format!("major:minor: expected N:M, got {}", excerpt(head[2])),
        )
    })?;
    Ok(Mount {
        mount_id: u64_field(head[0], n, "mount ID")?,
        parent_id: u64_field(head[1], n, "parent ID")?,
        major: u64_field(major, n, "major")?,
        minor: u64_field(minor, n, "minor")?,
        root: head[3],
        mount_point: head[4],
        options: head[5],
        fs_type: from_end(3),
        source: from_end(2),
        super_options: from_end(1),
    })
}

/// The mount point as a path: every `\ooo` escape the kernel writes
/// (space, tab, newline, backslash) turned back into its byte.
pub fn unescape(raw: &str) -> Vec<u8> {
    let b = raw.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && let Some(&[d1, d2, d3]) = b.get(i + 1..i + 4)
            && [d1, d2, d3].iter().all(|d| (b'0'..=b'7').contains(d))
            && d1 <= b'3'
        {
            out.push((d1 - b'0') * 64 + (d2 - b'0') * 8 + (d3 - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

/// Whether option `name` is set bare (`ro`, not `ro=x`) in a
/// comma-separated option list. Like node_exporter, which puts the options
/// in a map, the last `name` or `name=...` decides; `name=` counts as bare.
pub fn has_option(options: &str, name: &str) -> bool {
    let mut set = false;
    for opt in options.split(',') {
        let mut kv = opt.split('=');
        if kv.next() == Some(name) {
            set = kv.next().unwrap_or("").is_empty();
        }
    }
    set
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIXTURE: &str = include_str!("../../tests/fixtures/proc/1/mountinfo");

    fn parse(text: &str) -> Result<Vec<Mount<'_>>, ParseError> {
        let mut out = Vec::new();
        parse_into(text, &mut out).map(|()| out)
    }

    #[test]
    fn parses_the_captured_table() {
        let mounts = parse(FIXTURE).unwrap();
        assert_eq!(mounts.len(), FIXTURE.lines().count());
        let root = mounts.iter().find(|m| m.mount_point == "/").unwrap();
        assert_eq!((root.major, root.minor), (254, 0));
        assert_eq!((root.fs_type, root.source), ("ext4", "/dev/vda"));
        assert_eq!(root.options, "rw,relatime");
        assert!(root.super_options.starts_with("rw,"));
        // A bind mount of a subdirectory: same device, its own root.
        let netns = mounts
            .iter()
            .find(|m| m.mount_point == "/run/netns")
            .unwrap();
        assert_eq!((netns.root, netns.source), ("/run/netns", "/dev/vda"));
    }

    #[test]
    fn optional_fields_empty_source_and_escapes() {
        let m = parse(
            "36 35 98:0 /mnt1 /mnt\\0402 rw,noatime master:1 shared:7 propagate_from:3 - ext3 /dev/root rw,errors=continue\n\
             40 1 0:50 / /srv/x rw - tmpfs  rw,size=4k\n",
        )
        .unwrap();
        assert_eq!(
            m[0],
            Mount {
                mount_id: 36,
                parent_id: 35,
                major: 98,
                minor: 0,
                root: "/mnt1",
                mount_point: "/mnt\\0402",
                options: "rw,noatime",
                fs_type: "ext3",
                source: "/dev/root",
                super_options: "rw,errors=continue",
            }
        );
        // `mount -t tmpfs "" /srv/x`: the source is an empty field.
        assert_eq!((m[1].fs_type, m[1].source), ("tmpfs", ""));
        assert_eq!(parse("").unwrap(), []);
    }

    #[test]
    fn malformed_lines_name_line_and_field() {
        let ok = "1 0 8:1 / / rw - ext4 /dev/sda1 rw\n";
        let err = |s: &str| parse(s).unwrap_err();
        let e = err(&format!("{ok}1 0 8:1 / / rw ext4 /dev/sda1 rw\n"));
        assert_eq!(e.line, 2);
        assert!(e.msg.contains("9 fields"), "{e}");
        let e = err("1 0 8:1 / / rw x - ext4 /dev/sda1 rw extra\n");
        assert!(e.msg.contains("separator"), "{e}");
        let e = err("x 0 8:1 / / rw - ext4 /dev/sda1 rw\n");
        assert!(e.msg.contains("mount ID"), "{e}");
        let e = err("18446744073709551616 0 8:1 / / rw - ext4 /dev/sda1 rw\n");
        assert!(e.msg.contains("mount ID"), "{e}");
        let e = err("1 0 8-1 / / rw - ext4 /dev/sda1 rw\n");
        assert!(e.msg.contains("major:minor"), "{e}");
        let e = err("1 0 8:x / / rw - ext4 /dev/sda1 rw\n");
        assert!(e.msg.contains("minor"), "{e}");
        // An empty line is not a mount (procfs fails on it too).
        assert_eq!(err(&format!("{ok}\n{ok}")).line, 2);
        // Two spaces make an empty field, as in procfs: here empty mount
        // options and an optional field "rw".
        let m = parse("1 0 8:1 / /  rw - ext4 /dev/sda1 rw\n").unwrap();
        assert_eq!((m[0].options, m[0].fs_type), ("", "ext4"));
    }
}
