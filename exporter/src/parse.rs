//! Small helpers shared by the pure parsers: number parsing that reports the
//! line and the offending token, never panics, and rejects u64 overflow.

use crate::error::ParseError;

/// Parses an unsigned decimal field; `what` names it in the error.
pub fn u64_field(tok: &str, line: usize, what: &str) -> Result<u64, ParseError> {
    tok.parse::<u64>().map_err(|e| {
        ParseError::new(
            line,
            format!("{what}: invalid unsigned integer {tok:?}: {e}"),
        )
    })
}

/// Parses a signed decimal field (a few kernel counters can be negative).
pub fn i64_field(tok: &str, line: usize, what: &str) -> Result<i64, ParseError> {
    tok.parse::<i64>()
        .map_err(|e| ParseError::new(line, format!("{what}: invalid integer {tok:?}: {e}")))
}

/// Parses a hexadecimal field without `0x` (softnet_stat).
pub fn hex_u64_field(tok: &str, line: usize, what: &str) -> Result<u64, ParseError> {
    u64::from_str_radix(tok, 16)
        .map_err(|e| ParseError::new(line, format!("{what}: invalid hex integer {tok:?}: {e}")))
}

/// Parses a float field (loadavg, PSI averages).
pub fn f64_field(tok: &str, line: usize, what: &str) -> Result<f64, ParseError> {
    match tok.parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(v),
        Ok(_) => Err(ParseError::new(
            line,
            format!("{what}: non-finite number {tok:?}"),
        )),
        Err(e) => Err(ParseError::new(
            line,
            format!("{what}: invalid number {tok:?}: {e}"),
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
    for tok in line.split_ascii_whitespace() {
        let id = tok
            .strip_prefix("CPU")
            .ok_or_else(|| ParseError::new(n, format!("header: expected CPUn, found {tok:?}")))?;
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

/// Runs a `parse_into(text, &mut T)` parser on a fresh `T`: the `parse`
/// entry point of the collectors whose scrape path reuses its output.
pub fn parse_fresh<T: Default>(
    s: &str,
    parse_into: fn(&str, &mut T) -> Result<(), ParseError>,
) -> Result<T, ParseError> {
    let mut out = T::default();
    parse_into(s, &mut out)?;
    Ok(out)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overflow_is_an_error_not_a_panic() {
        let e = u64_field("18446744073709551616", 7, "user").unwrap_err();
        assert_eq!(e.line, 7);
        assert!(e.msg.contains("user"));
        assert!(u64_field("18446744073709551615", 1, "x").is_ok());
        assert!(f64_field("inf", 1, "x").is_err());
        assert_eq!(hex_u64_field("0000001f", 1, "x").unwrap(), 31);
    }
}
