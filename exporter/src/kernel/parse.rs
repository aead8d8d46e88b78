//! Small helpers shared by the pure parsers: number parsing that reports the
//! line and the offending token, never panics, and rejects u64 overflow.
//! A token in an error is quoted as an [`excerpt`]: short and escaped, since
//! it is file content on its way to the log and the landing page.

use crate::kernel::error::{ParseError, excerpt};

/// Parses an unsigned decimal field; `what` names it in the error.
pub fn u64_field(tok: &str, line: usize, what: &str) -> Result<u64, ParseError> {
    if let Some(v) = plain_u64(tok) {
        return Ok(v);
    }
    // Everything else (a leading '+', 20 digits, garbage) goes to std, so
    // what is accepted and every error message stay std's.
    tok.parse::<u64>().map_err(|e| {
        ParseError::new(
            line,
            format!("{what}: invalid unsigned integer {}: {e}", excerpt(tok)),
        )
    })
}

/// The value of a token of 1 to 19 ASCII digits, the form of nearly every
/// kernel counter; `None` for anything else. 19 digits cannot overflow a
/// u64, so the loop needs no checks: std's general parser cost 6% of a
/// scrape's instructions.
pub fn plain_u64(tok: &str) -> Option<u64> {
    let digits = tok.as_bytes();
    if digits.is_empty() || digits.len() > 19 {
        return None;
    }
    let mut v = 0u64;
    for &b in digits {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        v = v * 10 + u64::from(d);
    }
    Some(v)
}

/// The lines of `s`, split exactly as [`str::lines`] splits them (`\n` or
/// `\r\n` ends a line; the last line ending is optional), but found with
/// memchr: `str::lines`' generic char searcher was 7% of a scrape.
pub fn lines(s: &str) -> Lines<'_> {
    Lines { rest: s }
}

pub struct Lines<'a> {
    rest: &'a str,
}

impl<'a> Iterator for Lines<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        if self.rest.is_empty() {
            return None;
        }
        // Slicing at an ASCII '\n' always falls on a char boundary.
        let (line, rest) = match memchr::memchr(b'\n', self.rest.as_bytes()) {
            Some(i) => {
                let line = &self.rest[..i];
                (line.strip_suffix('\r').unwrap_or(line), &self.rest[i + 1..])
            }
            None => (self.rest, ""),
        };
        self.rest = rest;
        Some(line)
    }
}

/// Whether a line is empty or all whitespace, as `line.trim().is_empty()`
/// decides it, without running Unicode `trim` on lines that start with a
/// visible ASCII character (every line of a kernel file).
pub fn is_blank(line: &str) -> bool {
    match line.as_bytes().first() {
        Some(b) if b.is_ascii_graphic() => false,
        _ => line.trim().is_empty(),
    }
}

/// The tokens of `s` between runs of ASCII whitespace, exactly as
/// [`str::split_ascii_whitespace`] yields them, from a plain byte scan
/// (the std adapter chain of split + filter cost several times more).
pub fn fields(s: &str) -> Fields<'_> {
    Fields { rest: s }
}

#[derive(Clone)]
pub struct Fields<'a> {
    rest: &'a str,
}

impl<'a> Iterator for Fields<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        let bytes = self.rest.as_bytes();
        let Some(start) = bytes.iter().position(|b| !b.is_ascii_whitespace()) else {
            self.rest = "";
            return None;
        };
        let end = bytes[start..]
            .iter()
            .position(|b| b.is_ascii_whitespace())
            .map_or(bytes.len(), |n| start + n);
        // Both ends are at ASCII bytes or the end, so on char boundaries.
        let tok = &self.rest[start..end];
        self.rest = &self.rest[end..];
        Some(tok)
    }
}

/// What follows `key` in `line` when `key` is the line's first
/// whitespace-separated token: lets a collector that remembers the name
/// it saw on a line last scrape (and checked then) skip tokenising and
/// checking it again.
pub fn after_key<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let rest = line.strip_prefix(key)?;
    match rest.as_bytes().first() {
        Some(b) if !b.is_ascii_whitespace() => None,
        _ => Some(rest),
    }
}

/// The only token of `s`, or `None` if it has none or several.
pub fn single_field(s: &str) -> Option<&str> {
    let mut tokens = fields(s);
    let tok = tokens.next()?;
    tokens.next().is_none().then_some(tok)
}

/// A [`KeysByLen`] of a `const` table whose entries have a `key: &str`
/// field, in table order: `const KEYS: KeysByLen = keys_by_len!(FIELDS);`.
/// (A macro because a `const fn` cannot be generic over the entry type.)
macro_rules! keys_by_len {
    ($table:expr) => {{
        let mut keys = $crate::kernel::parse::KeysByLen::EMPTY;
        let mut i = 0;
        while i < $table.len() {
            keys = keys.with(i, $table[i].key);
            i += 1;
        }
        keys
    }};
}
pub(crate) use keys_by_len;

/// Finds a key in a collector's fixed table of up to 64 keys without
/// comparing it with every one: bit `i` of `by_len[n]` is set when key `i`
/// is `n` bytes long, so a key is compared only with the few as long as
/// it. Most lines of zoneinfo and meminfo are looked up, and the plain
/// linear search was a tenth of a scrape. Built in a `const` (see
/// [`KeysByLen::with`]), so a table that does not fit fails the build.
pub struct KeysByLen {
    by_len: [u64; 32],
}

impl KeysByLen {
    pub const EMPTY: KeysByLen = KeysByLen { by_len: [0; 32] };

    /// Adds `key` as entry `i` of the table.
    pub const fn with(mut self, i: usize, key: &str) -> KeysByLen {
        self.by_len[key.len()] |= 1 << i;
        self
    }

    /// The index of `key`, given how to read the table's key `i`.
    pub fn find<'t>(&self, key: &str, key_at: impl Fn(usize) -> &'t str) -> Option<usize> {
        let mut candidates = self.by_len.get(key.len()).copied().unwrap_or(0);
        while candidates != 0 {
            let i = candidates.trailing_zeros() as usize;
            if key_at(i) == key {
                return Some(i);
            }
            candidates &= candidates - 1;
        }
        None
    }
}

/// Parses a signed decimal field (a few kernel counters can be negative).
pub fn i64_field(tok: &str, line: usize, what: &str) -> Result<i64, ParseError> {
    tok.parse::<i64>().map_err(|e| {
        ParseError::new(
            line,
            format!("{what}: invalid integer {}: {e}", excerpt(tok)),
        )
    })
}

/// Parses an integer as Go's `strconv.ParseInt(tok, 0, 64)` does, the way
/// prometheus/procfs reads sysfs attributes (`util.NewValueParser`): an
/// optional sign, then `0x` hexadecimal, `0o` or a leading `0` octal, `0b`
/// binary, or decimal (Go's `_` digit separators are not accepted).
pub fn go_i64_field(tok: &str, line: usize, what: &str) -> Result<i64, ParseError> {
    let bad = |why: &str| go_int_error(tok, line, what, why);
    let (negative, unsigned) = match tok.as_bytes().first() {
        Some(b'-') => (true, &tok[1..]),
        Some(b'+') => (false, &tok[1..]),
        _ => (false, tok),
    };
    let magnitude = go_unsigned(unsigned).map_err(bad)?;
    if negative {
        0i64.checked_sub_unsigned(magnitude)
            .ok_or_else(|| bad("out of range"))
    } else {
        i64::try_from(magnitude).map_err(|_| bad("out of range"))
    }
}

/// Parses an unsigned integer as Go's `strconv.ParseUint(tok, 0, 64)`
/// does (procfs' `PUInt64`): no sign, base prefixes as [`go_i64_field`].
pub fn go_u64_field(tok: &str, line: usize, what: &str) -> Result<u64, ParseError> {
    go_unsigned(tok).map_err(|why| go_int_error(tok, line, what, why))
}

fn go_int_error(tok: &str, line: usize, what: &str, why: &str) -> ParseError {
    ParseError::new(
        line,
        format!("{what}: invalid integer {}: {why}", excerpt(tok)),
    )
}

/// The digits of a Go base-0 integer literal without sign.
fn go_unsigned(unsigned: &str) -> Result<u64, &'static str> {
    // Compared as bytes: the text may start with a multi-byte character.
    let prefixed =
        |p: &str| unsigned.len() > 2 && unsigned.as_bytes()[..2].eq_ignore_ascii_case(p.as_bytes());
    let (radix, digits) = if prefixed("0x") {
        (16, &unsigned[2..])
    } else if prefixed("0o") {
        (8, &unsigned[2..])
    } else if prefixed("0b") {
        (2, &unsigned[2..])
    } else if unsigned.len() > 1 && unsigned.starts_with('0') {
        (8, &unsigned[1..])
    } else {
        (10, unsigned)
    };
    if digits.is_empty() || !digits.bytes().all(|b| (b as char).is_digit(radix)) {
        return Err("not a number");
    }
    u64::from_str_radix(digits, radix).map_err(|_| "out of range")
}

/// Parses a hexadecimal field without `0x` (softnet_stat).
pub fn hex_u64_field(tok: &str, line: usize, what: &str) -> Result<u64, ParseError> {
    u64::from_str_radix(tok, 16).map_err(|e| {
        ParseError::new(
            line,
            format!("{what}: invalid hex integer {}: {e}", excerpt(tok)),
        )
    })
}

/// Parses a float field (loadavg, PSI averages).
pub fn f64_field(tok: &str, line: usize, what: &str) -> Result<f64, ParseError> {
    match tok.parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(v),
        Ok(_) => Err(ParseError::new(
            line,
            format!("{what}: non-finite number {}", excerpt(tok)),
        )),
        Err(e) => Err(ParseError::new(
            line,
            format!("{what}: invalid number {}: {e}", excerpt(tok)),
        )),
    }
}

/// Highest CPU id accepted. Collectors keep per-CPU state in Vecs indexed by
/// CPU id, so a corrupt `cpu4000000000` must not size them; Linux's NR_CPUS
/// tops out at 8192 today.
pub const MAX_CPU_ID: u64 = 65_535;

/// A CPU id (the `N` of `cpuN` or `CPUN`), at most [`MAX_CPU_ID`].
pub fn cpu_id(tok: &str, line: usize) -> Result<u32, ParseError> {
    let id = u64_field(tok, line, "cpu id")?;
    if id > MAX_CPU_ID {
        return Err(ParseError::new(
            line,
            format!("cpu id {id} above the supported maximum {MAX_CPU_ID}"),
        ));
    }
    Ok(id as u32)
}

/// Parses a `CPU0 CPU1 ...` header (/proc/softirqs, /proc/interrupts) into
/// CPU ids. The kernel prints CPUs in ascending order; the ids, not the
/// column positions, label the series, so gaps from offline CPUs survive.
pub fn parse_cpu_header(line: &str, n: usize, out: &mut Vec<u32>) -> Result<(), ParseError> {
    out.clear();
    for tok in fields(line) {
        let id = tok.strip_prefix("CPU").ok_or_else(|| {
            ParseError::new(n, format!("header: expected CPUn, found {}", excerpt(tok)))
        })?;
        let id = cpu_id(id, n)?;
        if let Some(&last) = out.last()
            && id <= last
        {
            return Err(ParseError::new(
                n,
                format!("header: CPU{id} after CPU{last}: CPU ids must ascend"),
            ));
        }
        out.push(id);
    }
    if out.is_empty() {
        return Err(ParseError::new(n, "header names no CPUs"));
    }
    Ok(())
}

/// Runs a `parse_into(text, &mut T)` parser on a fresh `T`: the value
/// form, for tests and for a [`crate::collectors::Parser`]'s `check`.
pub fn parse_fresh<T: Default>(
    s: &str,
    parse_into: fn(&str, &mut T) -> Result<(), ParseError>,
) -> Result<T, ParseError> {
    let mut out = T::default();
    parse_into(s, &mut out)?;
    Ok(out)
}

/// Parses a sysctl holding one unsigned decimal number (`262144\n`):
/// `nf_conntrack_max`, `entropy_avail`. Read such files with
/// `SourceFile::small`.
pub fn u64_sysctl_into(s: &str, out: &mut u64) -> Result<(), ParseError> {
    let mut f = fields(s);
    *out = u64_field(next_field(&mut f, 1, "value")?, 1, "value")?;
    match f.next() {
        None => Ok(()),
        Some(extra) => Err(ParseError::new(
            1,
            format!("unexpected extra field {extra:?} after the value"),
        )),
    }
}

/// Empties a Vec and hands its allocation over to another element type of
/// the same layout: in practice the same type with another lifetime.
/// Parsed rows that borrow the scrape's text (`Vec<Zone<'t>>`) cannot stay
/// in the collector between scrapes, but their buffer can: the collector
/// keeps a `Vec<Row<'static>>`, always empty, and recycles it into
/// `Vec<Row<'t>>` for the scrape and back. Mapping an empty `IntoIter` into
/// a same-layout Vec reuses the buffer in place (std's in-place collect)
/// instead of allocating.
pub fn recycle<A, B>(mut v: Vec<A>) -> Vec<B> {
    v.clear();
    v.into_iter()
        .map(|_| unreachable!("the vector was cleared"))
        .collect()
}

/// Takes the next whitespace-separated token or reports which one is missing.
pub fn next_field<'a>(
    it: &mut impl Iterator<Item = &'a str>,
    line: usize,
    what: &str,
) -> Result<&'a str, ParseError> {
    it.next()
        .ok_or_else(|| ParseError::new(line, format!("missing field {what}")))
}

/// The kernel's CPU list format (devices/system/cpu/isolated, offline):
/// `2-5,7\n`, or empty. Sorted and without
/// duplicates in `out`; ids above [`MAX_CPU_ID`] are an error.
pub fn parse_cpu_range_into(s: &str, out: &mut Vec<u32>) -> Result<(), ParseError> {
    out.clear();
    let text = s.strip_suffix('\n').unwrap_or(s);
    if text.contains('\n') {
        return Err(ParseError::new(2, "expected a single line"));
    }
    let id = |t: &str| -> Result<u32, ParseError> {
        match t.parse::<u64>() {
            Ok(v) if v <= MAX_CPU_ID && !t.starts_with('+') => Ok(v as u32),
            _ => Err(ParseError::new(1, format!("invalid cpu id {}", excerpt(t)))),
        }
    };
    for part in text.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (id(a)?, id(b)?);
                if a <= b {
                    out.extend(a..=b);
                }
            }
            None => out.push(id(part)?),
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_integers_as_strconv_parse_int_base_0() {
        let p = |t| go_i64_field(t, 1, "v");
        assert_eq!(p("42").unwrap(), 42);
        assert_eq!(p("-7").unwrap(), -7);
        assert_eq!(p("+7").unwrap(), 7);
        assert_eq!(p("0x1F").unwrap(), 31);
        assert_eq!(p("0X1f").unwrap(), 31);
        assert_eq!(p("010").unwrap(), 8);
        assert_eq!(p("0o10").unwrap(), 8);
        assert_eq!(p("0b101").unwrap(), 5);
        assert_eq!(p("0").unwrap(), 0);
        assert_eq!(p("-9223372036854775808").unwrap(), i64::MIN);
        for bad in [
            "",
            "-",
            "0x",
            "09",
            "1.5",
            "9223372036854775808",
            "1_000",
            " 1",
            "abc",
        ] {
            let e = p(bad).unwrap_err();
            assert_eq!(e.line, 1, "{bad:?}");
        }
        let u = |t| go_u64_field(t, 1, "v");
        assert_eq!(u("18446744073709551615").unwrap(), u64::MAX);
        assert_eq!(u("0x10").unwrap(), 16);
        assert!(u("+1").is_err());
        assert!(u("-1").is_err());
        assert!(u("18446744073709551616").is_err());
    }

    #[test]
    fn overflow_is_an_error_not_a_panic() {
        let e = u64_field("18446744073709551616", 7, "user").unwrap_err();
        assert_eq!(e.line, 7);
        assert!(e.msg.contains("user"));
        assert!(u64_field("18446744073709551615", 1, "x").is_ok());
        assert!(f64_field("inf", 1, "x").is_err());
        assert_eq!(hex_u64_field("0000001f", 1, "x").unwrap(), 31);
    }

    #[test]
    fn quoted_tokens_are_short_escaped_excerpts() {
        let huge = format!("\u{1b}[31m\"{}", "9x".repeat(5_000_000));
        let errors = [
            u64_field(&huge, 1, "f").unwrap_err(),
            i64_field(&huge, 1, "f").unwrap_err(),
            hex_u64_field(&huge, 1, "f").unwrap_err(),
            f64_field(&huge, 1, "f").unwrap_err(),
            parse_cpu_header(&huge, 1, &mut Vec::new()).unwrap_err(),
        ];
        let quoted = excerpt(&huge).to_string();
        assert_eq!(quoted, r#""\u{1b}[31m\"9x9x9x9x9x9x9x9x9x9x…""#);
        for e in errors {
            assert!(e.msg.contains(&quoted), "{}", e.msg);
            assert!(e.msg.len() < 120, "{}", e.msg);
        }
    }

    #[test]
    fn u64_field_agrees_with_std() {
        for tok in [
            "0",
            "007",
            "+5",
            "-0",
            "",
            " 1",
            "1 ",
            "1_000",
            "٣",
            "9999999999999999999",
            "10000000000000000000",
            "18446744073709551615",
            "18446744073709551616",
            "000000000000000000001",
        ] {
            let ours = u64_field(tok, 1, "f").map_err(|e| e.msg);
            let std = tok
                .parse::<u64>()
                .map_err(|e| format!("f: invalid unsigned integer {}: {e}", excerpt(tok)));
            assert_eq!(ours, std, "{tok:?}");
        }
    }

    #[test]
    fn key_and_single_value() {
        assert_eq!(after_key("pgfault 12", "pgfault"), Some(" 12"));
        assert_eq!(after_key("pgfault", "pgfault"), Some(""));
        assert_eq!(after_key("pgfaults 12", "pgfault"), None);
        assert_eq!(after_key(" pgfault 12", "pgfault"), None);
        assert_eq!(single_field(" 12 "), Some("12"));
        assert_eq!(single_field(" 12 3"), None);
        assert_eq!(single_field("  "), None);
    }

    #[test]
    fn lines_and_fields_agree_with_std() {
        for s in [
            "",
            "\n",
            "a",
            "a\n",
            "a\r\nb\r",
            "a\rb\n\n c \r\n",
            "\r\n\r\n",
            " x\ty\x0bz\x0c w\u{a0}v\u{3000}\n",
            "\t\n \u{2028}\n\x0b\n",
        ] {
            assert!(lines(s).eq(s.lines()), "{s:?}");
            assert!(fields(s).eq(s.split_ascii_whitespace()), "{s:?}");
            for line in s.lines() {
                assert_eq!(is_blank(line), line.trim().is_empty(), "{line:?}");
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn splitting_matches_std(s in "[a1+ \t\r\n\x0b\x0c\u{a0}\u{3000}é]{0,40}") {
            proptest::prop_assert!(lines(&s).eq(s.lines()));
            proptest::prop_assert!(fields(&s).eq(s.split_ascii_whitespace()));
            for line in s.lines() {
                proptest::prop_assert_eq!(is_blank(line), line.trim().is_empty());
            }
        }

        #[test]
        fn u64_matches_std(s in "[+0-9a]{0,21}") {
            proptest::prop_assert_eq!(u64_field(&s, 1, "f").ok(), s.parse::<u64>().ok());
        }
    }

    #[test]
    fn cpu_ranges() {
        let parse = |s: &str| {
            let mut v = Vec::new();
            parse_cpu_range_into(s, &mut v).map(|()| v)
        };
        assert_eq!(parse("\n").unwrap(), Vec::<u32>::new());
        assert_eq!(parse("").unwrap(), Vec::<u32>::new());
        assert_eq!(parse("2-3,6\n").unwrap(), [2, 3, 6]);
        assert_eq!(parse("6,2-3,3").unwrap(), [2, 3, 6]);
        assert_eq!(parse("5-4").unwrap(), Vec::<u32>::new());
        assert!(parse("1-2-3").is_err());
        assert!(parse("x").is_err());
        assert!(parse("0-65536").is_err());
        assert!(parse("1\n2\n").is_err());
    }
}
