//! A pressure stall information file (PSI, Linux 4.20+): /proc/pressure/*
//! for the host, `<resource>.pressure` in a cgroup v2 directory.

use crate::kernel::error::ParseError;
use crate::kernel::parse::{f64_field, fields, lines, next_field, u64_field};

/// The cumulative stall times of one resource, in microseconds.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Psi {
    pub some_total_us: Option<u64>,
    pub full_total_us: Option<u64>,
}

/// Parses `some|full avg10=F avg60=F avg300=F total=N` lines. Every line
/// must have exactly that shape; either kind may be missing (irq has no
/// "some", kernels before 5.13 have no cpu "full"), which the collector
/// checks against what it exports.
pub fn parse_into(s: &str, psi: &mut Psi) -> Result<(), ParseError> {
    *psi = Psi::default();
    for (i, line) in lines(s).enumerate() {
        let n = i + 1;
        let mut tokens = fields(line);
        let Some(kind) = tokens.next() else { continue };
        let slot = match kind {
            "some" => &mut psi.some_total_us,
            "full" => &mut psi.full_total_us,
            other => {
                return Err(ParseError::new(
                    n,
                    format!("expected `some` or `full`, found {other:?}"),
                ));
            }
        };
        if slot.is_some() {
            return Err(ParseError::new(n, format!("second `{kind}` line")));
        }
        for avg in ["avg10", "avg60", "avg300"] {
            f64_field(keyed(&mut tokens, n, avg)?, n, avg)?;
        }
        *slot = Some(u64_field(keyed(&mut tokens, n, "total")?, n, "total")?);
        if let Some(extra) = tokens.next() {
            return Err(ParseError::new(n, format!("extra column {extra:?}")));
        }
    }
    Ok(())
}

/// Takes the next `key=value` token and returns the value.
fn keyed<'a>(
    tokens: &mut impl Iterator<Item = &'a str>,
    line: usize,
    key: &str,
) -> Result<&'a str, ParseError> {
    let tok = next_field(tokens, line, key)?;
    tok.strip_prefix(key)
        .and_then(|rest| rest.strip_prefix('='))
        .ok_or_else(|| ParseError::new(line, format!("expected `{key}=`, found {tok:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::parse::parse_fresh;

    const CPU: &str = include_str!("../../tests/fixtures/proc/pressure/cpu");

    fn parse(s: &str) -> Result<Psi, ParseError> {
        parse_fresh(s, parse_into)
    }
    const IO: &str = include_str!("../../tests/fixtures/proc/pressure/io");
    const MEMORY: &str = include_str!("../../tests/fixtures/proc/pressure/memory");

    #[test]
    fn parses_fixtures() {
        assert_eq!(
            parse(CPU).unwrap(),
            Psi {
                some_total_us: Some(7713082),
                full_total_us: Some(0)
            }
        );
        assert_eq!(
            parse(IO).unwrap(),
            Psi {
                some_total_us: Some(2987636),
                full_total_us: Some(2779424)
            }
        );
        assert!(parse(MEMORY).is_ok());
    }

    #[test]
    fn irq_has_only_full() {
        let irq = "full avg10=0.00 avg60=0.00 avg300=0.00 total=1234\n";
        assert_eq!(
            parse(irq).unwrap(),
            Psi {
                some_total_us: None,
                full_total_us: Some(1234)
            }
        );
    }

    #[test]
    fn empty_and_garbage() {
        assert_eq!(
            parse("").unwrap(),
            Psi {
                some_total_us: None,
                full_total_us: None
            }
        );
        assert_eq!(parse("garbage here\n").unwrap_err().line, 1);
        let e = parse(&format!("{CPU}%%% not a kernel file\n")).unwrap_err();
        assert_eq!(e.line, 3);
    }

    #[test]
    fn truncated() {
        let cut = &IO[..IO.find("total=").unwrap() + 3];
        assert!(parse(cut).unwrap_err().msg.contains("expected `total=`"));
        let cut = &IO[..IO.find("avg300").unwrap()];
        assert!(parse(cut).unwrap_err().msg.contains("missing field avg300"));
    }

    #[test]
    fn missing_extra_and_bad_columns() {
        let e = parse("some avg10=0.00 avg60=0.00 avg300=0.00\n").unwrap_err();
        assert!(e.msg.contains("missing field total"), "{e}");
        let e = parse("some avg10=0.00 avg60=0.00 avg300=0.00 total=5 7\n").unwrap_err();
        assert!(e.msg.contains("extra column"), "{e}");
        let e = parse("some avg60=0.00 avg10=0.00 avg300=0.00 total=5\n").unwrap_err();
        assert!(e.msg.contains("expected `avg10=`"), "{e}");
        assert!(parse("some avg10=x avg60=0.00 avg300=0.00 total=5\n").is_err());
        assert!(parse("some avg10=0 avg60=0 avg300=0 total=-5\n").is_err());
        let e = parse(&format!("{CPU}{CPU}")).unwrap_err();
        assert_eq!(e.line, 3);
        assert!(e.msg.contains("second `some`"), "{e}");
    }

    #[test]
    fn u64_overflow() {
        let e = parse("some avg10=0 avg60=0 avg300=0 total=18446744073709551616\n").unwrap_err();
        assert!(e.msg.contains("total"), "{e}");
        let max = parse("full avg10=0 avg60=0 avg300=0 total=18446744073709551615\n").unwrap();
        assert_eq!(max.full_total_us, Some(u64::MAX));
    }
}
