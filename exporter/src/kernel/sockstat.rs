//! /proc/net/sockstat and sockstat6: `PROTO: key value ...` lines, each
//! checked. The sockstat collector exports them; udp_queues takes the UDP
//! tables' `inuse` counts from them.

use crate::kernel::error::{ParseError, excerpt};
use crate::kernel::parse::{fields, i64_field, is_blank, lines};

/// One line, `TCP: inuse 1 orphan 0 tw 3 alloc 1 mem 166`, checked: a
/// protocol, then an even number of tokens whose values are integers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Line<'a> {
    pub proto: &'a str,
    pairs: &'a str,
    pub line: usize,
}

impl<'a> Line<'a> {
    /// `(key, value token)` pairs in file order.
    pub fn pairs(&self) -> impl Iterator<Item = (&'a str, &'a str)> + use<'a> {
        let mut toks = fields(self.pairs);
        std::iter::from_fn(move || Some((toks.next()?, toks.next()?)))
    }
}

/// Parses a sockstat file into checked lines, skipping blank ones.
pub fn parse_into<'t>(s: &'t str, out: &mut Vec<Line<'t>>) -> Result<(), ParseError> {
    out.clear();
    for (i, l) in lines(s).enumerate() {
        if !is_blank(l) {
            out.push(line(l, i + 1)?);
        }
    }
    Ok(())
}

fn line(text: &str, lineno: usize) -> Result<Line<'_>, ParseError> {
    let (proto, pairs) = text
        .split_once(':')
        .ok_or_else(|| ParseError::new(lineno, "missing ':' after the protocol name"))?;
    if proto.is_empty() || !proto.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Err(ParseError::new(
            lineno,
            format!("invalid protocol name {proto:?}"),
        ));
    }
    let n = fields(pairs).count();
    if n == 0 || !n.is_multiple_of(2) {
        return Err(ParseError::new(
            lineno,
            format!("{}: {n} tokens, expected key/value pairs", excerpt(proto)),
        ));
    }
    let l = Line {
        proto,
        pairs,
        line: lineno,
    };
    for (key, tok) in l.pairs() {
        if !key.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') {
            return Err(ParseError::new(
                lineno,
                format!("{}: invalid key {}", excerpt(proto), excerpt(key)),
            ));
        }
        i64_field(tok, lineno, key)?;
    }
    Ok(l)
}

/// `proto`'s `inuse` count in a sockstat file's text (udp_queues' count of
/// a UDP table), if the protocol's line parses and starts with it. A line
/// before it that does not parse also means None.
pub fn inuse(text: &str, proto: &str) -> Option<u64> {
    for (i, l) in lines(text).enumerate() {
        if is_blank(l) {
            continue;
        }
        let l = line(l, i + 1).ok()?;
        if l.proto == proto {
            let (key, value) = l.pairs().next()?;
            return (key == "inuse").then(|| value.parse().ok())?;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const SOCKSTAT: &str = include_str!("../../tests/fixtures/proc/net/sockstat");
    const SOCKSTAT6: &str = include_str!("../../tests/fixtures/proc/net/sockstat6");

    fn parsed(s: &str) -> Result<Vec<Line<'_>>, ParseError> {
        let mut out = Vec::new();
        parse_into(s, &mut out).map(|()| out)
    }

    #[test]
    fn fixtures() {
        let l = parsed(SOCKSTAT).unwrap();
        let protos: Vec<&str> = l.iter().map(|l| l.proto).collect();
        assert_eq!(protos, ["sockets", "TCP", "UDP", "UDPLITE", "RAW", "FRAG"]);
        let tcp: Vec<_> = l[1].pairs().collect();
        assert_eq!(
            tcp,
            [
                ("inuse", "1"),
                ("orphan", "0"),
                ("tw", "3"),
                ("alloc", "1"),
                ("mem", "166")
            ]
        );
        let l6 = parsed(SOCKSTAT6).unwrap();
        assert_eq!(l6.len(), 5);
        assert_eq!(
            l6[4].pairs().collect::<Vec<_>>(),
            [("inuse", "0"), ("memory", "0")]
        );
    }

    #[test]
    fn malformed() {
        assert_eq!(parsed("").unwrap(), vec![]);
        assert!(parsed("\u{1}garbage here\n%%% not a kernel file %%%\n:::\n").is_err());
        let e = parsed("sockets: used 8\nTCP: inuse 1 orphan\n").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.msg.contains("3 tokens"), "{}", e.msg);
        assert!(parsed("TCP:\n").unwrap_err().msg.contains("0 tokens"));
        assert!(parsed("TCP inuse 1\n").unwrap_err().msg.contains("':'"));
        assert!(parsed("TCP: inuse x\n").unwrap_err().msg.contains("inuse"));
        assert!(
            parsed("TCP: 1 inuse\n")
                .unwrap_err()
                .msg
                .contains("invalid key")
        );
        assert!(parsed("TCP: inuse 9223372036854775808\n").is_err());
        assert!(parsed("TCP: inuse 99999999999999999999999\n").is_err());
        let extra: String = SOCKSTAT.lines().map(|l| format!("{l} 7\n")).collect();
        assert!(parsed(&extra).is_err());
        let cut = &SOCKSTAT[..SOCKSTAT.len() / 2];
        assert!(parsed(cut).is_err());
    }

    #[test]
    fn inuse_counts() {
        let v4 = "sockets: used 7\nTCP: inuse 1 orphan 0 tw 1 alloc 1 mem 0\nUDP: inuse 3 mem 2\nUDPLITE: inuse 0\n";
        assert_eq!(inuse(v4, "UDP"), Some(3));
        assert_eq!(inuse(v4, "UDPLITE"), Some(0));
        assert_eq!(inuse("UDPLITE: inuse 0\n", "UDP"), None);
        let v6 = "TCP6: inuse 0\nUDP6: inuse 0\nUDPLITE6: inuse 0\n";
        assert_eq!(inuse(v6, "UDP6"), Some(0));
        assert_eq!(inuse(v6, "UDP"), None);
        for bad in [
            "UDP: mem 0 inuse 0\n",
            "UDP: inuse\n",
            "UDP: inuse x\n",
            "UDP: inuse -1\n",
            "garbage\nUDP: inuse 0\n",
            "",
        ] {
            assert_eq!(inuse(bad, "UDP"), None, "{bad:?}");
        }
    }
}
