//! The line format shared by /proc/net/rpc/nfs (the NFS client, read by
//! `nfs.rs`) and /proc/net/rpc/nfsd (the server, `nfsd.rs`), and the
//! procedure names node_exporter gives their counters.
//!
//! Each line is a key and unsigned decimal counters (`net 70 70 69 45`).
//! A `procN` line starts with the number of counters that follow, one per
//! procedure of that protocol version, in the kernel's procedure order
//! (`proc3 22 0 1061909262 ...`). The names below are node_exporter's
//! (procfs's `nfs` package field names), so `method` labels match.

use crate::kernel::error::{ParseError, excerpt};
use crate::kernel::parse::{Fields, fields, lines, u64_field};

/// NFSv2 procedures, in the kernel's order (`proc2` has at least 18).
pub const V2_PROCEDURES: [&str; 18] = [
    "Null", "GetAttr", "SetAttr", "Root", "Lookup", "ReadLink", "Read", "WrCache", "Write",
    "Create", "Remove", "Rename", "Link", "SymLink", "MkDir", "RmDir", "ReadDir", "FsStat",
];

/// NFSv3 procedures, in the kernel's order (`proc3` has at least 22).
pub const V3_PROCEDURES: [&str; 22] = [
    "Null",
    "GetAttr",
    "SetAttr",
    "Lookup",
    "Access",
    "ReadLink",
    "Read",
    "Write",
    "Create",
    "MkDir",
    "SymLink",
    "MkNod",
    "Remove",
    "RmDir",
    "Rename",
    "Link",
    "ReadDir",
    "ReadDirPlus",
    "FsStat",
    "FsInfo",
    "PathConf",
    "Commit",
];

/// Calls `each(key, line, values)` for every line of an rpc stats file,
/// `values` the line's fields after the key. Every key must be one of
/// `keys` (another is an "unknown {what} metric line", as procfs words
/// it), at most once; the first two of `keys`, which the kernel always
/// writes (`net` and `rpc`), must be there.
pub fn each_line<'t>(
    s: &'t str,
    what: &str,
    keys: &[&'static str],
    mut each: impl FnMut(&'static str, usize, &mut Fields<'t>) -> Result<(), ParseError>,
) -> Result<(), ParseError> {
    let mut seen = 0u32;
    let mut last = 0;
    for (i, line) in lines(s).enumerate() {
        let n = i + 1;
        last = n;
        let mut f = fields(line);
        let word = f.next().ok_or_else(|| ParseError::new(n, "empty line"))?;
        let index = keys.iter().position(|k| *k == word).ok_or_else(|| {
            ParseError::new(n, format!("unknown {what} metric line {}", excerpt(word)))
        })?;
        let bit = 1u32 << index;
        if seen & bit != 0 {
            return Err(ParseError::new(n, format!("a second {word:?} line")));
        }
        seen |= bit;
        each(keys[index], n, &mut f)?;
    }
    for (index, key) in keys.iter().enumerate().take(2) {
        if seen & (1 << index) == 0 {
            return Err(ParseError::new(last + 1, format!("no {key:?} line")));
        }
    }
    Ok(())
}

/// Reads exactly `out.len()` counters of line `line` (`key` names it).
pub fn fixed<'t>(
    values: &mut impl Iterator<Item = &'t str>,
    line: usize,
    key: &str,
    out: &mut [u64],
) -> Result<(), ParseError> {
    let want = out.len();
    let mut n = 0;
    for tok in values.by_ref() {
        if n == want {
            return Err(ParseError::new(
                line,
                format!("{key}: more than {want} values (extra {})", excerpt(tok)),
            ));
        }
        out[n] = u64_field(tok, line, key)?;
        n += 1;
    }
    if n < want {
        return Err(ParseError::new(
            line,
            format!("{key}: {n} values, expected {want}"),
        ));
    }
    Ok(())
}

/// Reads a counted line, `COUNT v1 .. vCOUNT`, into `out`: COUNT must be
/// the number of values that follow and at least `min`. Values past
/// `out.len()` (procedures a newer kernel added) are checked and dropped;
/// `out`'s slots past COUNT (procedures an older kernel lacks) are 0.
/// Returns COUNT.
pub fn counted<'t>(
    values: &mut impl Iterator<Item = &'t str>,
    line: usize,
    key: &str,
    min: u64,
    out: &mut [u64],
) -> Result<u64, ParseError> {
    let count_tok = values
        .next()
        .ok_or_else(|| ParseError::new(line, format!("{key}: no values")))?;
    let count = u64_field(count_tok, line, key)?;
    if count < min {
        return Err(ParseError::new(
            line,
            format!("{key}: {count} procedures, expected at least {min}"),
        ));
    }
    out.fill(0);
    let mut n = 0u64;
    for tok in values.by_ref() {
        let v = u64_field(tok, line, key)?;
        if let Some(slot) = usize::try_from(n).ok().and_then(|i| out.get_mut(i)) {
            *slot = v;
        }
        n += 1;
    }
    if n != count {
        return Err(ParseError::new(
            line,
            format!("{key}: says {count} procedures but has {n} values"),
        ));
    }
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::parse::fields;

    #[test]
    fn fixed_and_counted() {
        let mut out = [0u64; 3];
        fixed(&mut fields("1 2 3"), 4, "rc", &mut out).unwrap();
        assert_eq!(out, [1, 2, 3]);
        let e = fixed(&mut fields("1 2"), 4, "rc", &mut out).unwrap_err();
        assert_eq!((e.line, e.msg.as_str()), (4, "rc: 2 values, expected 3"));
        assert!(fixed(&mut fields("1 2 3 4"), 4, "rc", &mut out).is_err());
        assert!(fixed(&mut fields("1 x 3"), 4, "rc", &mut out).is_err());

        // Fewer than out holds: the rest are 0; more: checked, dropped.
        let mut out = [9u64; 4];
        counted(&mut fields("2 5 6"), 1, "proc4", 0, &mut out).unwrap();
        assert_eq!(out, [5, 6, 0, 0]);
        counted(&mut fields("5 1 2 3 4 5"), 1, "proc4", 0, &mut out).unwrap();
        assert_eq!(out, [1, 2, 3, 4]);
        assert!(counted(&mut fields("5 1 2 3 4 x"), 1, "p", 0, &mut out).is_err());
        let e = counted(&mut fields("3 1 2"), 1, "p", 0, &mut out).unwrap_err();
        assert!(e.msg.contains("says 3 procedures but has 2"), "{e}");
        let e = counted(&mut fields("2 1 2"), 1, "proc3", 22, &mut out).unwrap_err();
        assert!(e.msg.contains("at least 22"), "{e}");
        assert!(counted(&mut fields(""), 1, "p", 0, &mut out).is_err());
        assert!(counted(&mut fields("18446744073709551616"), 1, "p", 0, &mut out).is_err());
    }

    #[test]
    fn each_line_checks_keys() {
        let keys = ["net", "rpc", "proc3"];
        let mut got = Vec::new();
        each_line("net 1\nrpc 2\nproc3 3\n", "NFS", &keys, |k, n, f| {
            got.push((k, n, f.next().unwrap().to_string()));
            Ok(())
        })
        .unwrap();
        assert_eq!(
            got,
            [
                ("net", 1, "1".into()),
                ("rpc", 2, "2".into()),
                ("proc3", 3, "3".into())
            ]
        );
        let run = |s| each_line(s, "NFS", &keys, |_, _, _| Ok(()));
        let e = run("net 1\nxprt 1\n").unwrap_err();
        assert_eq!(
            (e.line, e.msg.as_str()),
            (2, "unknown NFS metric line \"xprt\"")
        );
        let e = run("net 1\nrpc 1\nrpc 1\n").unwrap_err();
        assert_eq!((e.line, e.msg.as_str()), (3, "a second \"rpc\" line"));
        let e = run("net 1\n").unwrap_err();
        assert_eq!((e.line, e.msg.as_str()), (2, "no \"rpc\" line"));
        assert_eq!(run("net 1\n\nrpc 1\n").unwrap_err().line, 2);
    }
}
