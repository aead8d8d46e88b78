//! Go's spellings, as node_exporter's Go code reads and writes them:
//! `strconv.ParseFloat` and `FormatFloat`, and `filepath`'s Clean, Join
//! and Glob. The textfile collector needs them to take what node_exporter
//! takes and to name files as it does; sysfs collectors parse values that
//! node_exporter parses with ParseFloat.

/// Go's `strconv.ParseFloat` as expfmt calls it: `p`, `P` and `_` refused;
/// `NaN` (unsigned), `Inf`/`Infinity` (signed, any case); a finite number
/// too large for an f64 is an error, not infinity.
pub fn go_parse_float(s: &str) -> Option<f64> {
    if s.is_empty() || s.contains(['p', 'P', '_']) {
        return None;
    }
    let (negative, unsigned) = match s.as_bytes()[0] {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    if unsigned.eq_ignore_ascii_case("inf") || unsigned.eq_ignore_ascii_case("infinity") {
        return Some(if negative {
            f64::NEG_INFINITY
        } else {
            f64::INFINITY
        });
    }
    if unsigned.eq_ignore_ascii_case("nan") {
        return (unsigned.len() == s.len()).then_some(f64::NAN);
    }
    // What is left must be a decimal number: Rust's grammar for it is Go's
    // (hex needs a `p` exponent in Go, and `p` was refused above).
    if !unsigned
        .bytes()
        .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-'))
    {
        return None;
    }
    let v: f64 = s.parse().ok()?;
    v.is_finite().then_some(v)
}

/// A float as Go's `strconv.FormatFloat(f, 'g', -1, 64)` writes it, with
/// expfmt's spellings of the special values: how node_exporter writes the
/// `le` and `quantile` labels, so that series keep node_exporter's label
/// values (`1e+06`, not `1000000`).
pub fn go_format_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".to_string();
    }
    if f.is_infinite() {
        return if f > 0.0 { "+Inf" } else { "-Inf" }.to_string();
    }
    if f == 0.0 {
        return "0".to_string();
    }
    // Rust's `{:e}` is the shortest round-trip digits: "1.5e-7", "1e6".
    let e = format!("{f:e}");
    let (mantissa, exp) = e.split_once('e').unwrap_or((&e, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..6).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.unsigned_abs())
    } else {
        format!("{f}")
    }
}

// Paths: Go's filepath.Clean, Join and Glob, as node_exporter uses them.

/// Go's `filepath.Clean`: how node_exporter spells the `file` label.
pub fn go_clean(path: &str) -> String {
    let rooted = path.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for p in path.split('/') {
        match p {
            "" | "." => {}
            ".." => {
                if parts.last().is_some_and(|l| *l != "..") {
                    parts.pop();
                } else if !rooted {
                    parts.push("..");
                }
            }
            p => parts.push(p),
        }
    }
    let joined = parts.join("/");
    match (rooted, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".to_string(),
        (false, false) => joined,
    }
}

pub fn go_join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        go_clean(name)
    } else {
        go_clean(&format!("{dir}/{name}"))
    }
}

fn has_meta(s: &str) -> bool {
    s.contains(['*', '?', '[', '\\'])
}

/// Go's `filepath.Match` on one path element; `None` for a malformed
/// pattern.
pub fn glob_match(pattern: &str, name: &str) -> Option<bool> {
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    match_from(&p, &n)
}

fn match_from(p: &[char], n: &[char]) -> Option<bool> {
    let Some(&first) = p.first() else {
        return Some(n.is_empty());
    };
    match first {
        '*' => {
            // Check the rest of the pattern is well formed even when no
            // name is left to try it on, as Go does.
            let mut any = false;
            for skip in 0..=n.len() {
                if n[..skip].contains(&'/') {
                    break;
                }
                if match_from(&p[1..], &n[skip..])? {
                    any = true;
                    break;
                }
            }
            Some(any)
        }
        '?' => match n.first() {
            Some(&c) if c != '/' => match_from(&p[1..], &n[1..]),
            _ => validate(&p[1..]).map(|_| false),
        },
        '[' => {
            let (matched, used) = class(&p[1..], n.first().copied())?;
            if matched {
                match_from(&p[1 + used..], &n[1..])
            } else {
                validate(&p[1 + used..]).map(|_| false)
            }
        }
        '\\' => {
            let &lit = p.get(1)?;
            if n.first() == Some(&lit) {
                match_from(&p[2..], &n[1..])
            } else {
                validate(&p[2..]).map(|_| false)
            }
        }
        lit => {
            if n.first() == Some(&lit) {
                match_from(&p[1..], &n[1..])
            } else {
                validate(&p[1..]).map(|_| false)
            }
        }
    }
}

/// Whether the pattern is well formed (for the `ErrBadPattern` cases).
fn validate(p: &[char]) -> Option<()> {
    let mut i = 0;
    while i < p.len() {
        match p[i] {
            '[' => i += 1 + class(&p[i + 1..], None)?.1,
            '\\' => {
                p.get(i + 1)?;
                i += 2;
            }
            _ => i += 1,
        }
    }
    Some(())
}

/// A character class after its `[`: whether `c` is in it, and how many
/// pattern characters it took (the closing `]` included).
fn class(p: &[char], c: Option<char>) -> Option<(bool, usize)> {
    let mut i = 0;
    let negated = p.first() == Some(&'^');
    if negated {
        i += 1;
    }
    let mut matched = false;
    let mut ranges = 0;
    // One escaped or plain character of a range; `-` and `]` must be escaped.
    let esc = |i: &mut usize| -> Option<char> {
        let mut ch = *p.get(*i)?;
        if ch == '-' || ch == ']' {
            return None;
        }
        if ch == '\\' {
            *i += 1;
            ch = *p.get(*i)?;
        }
        *i += 1;
        Some(ch)
    };
    loop {
        if p.get(i) == Some(&']') && ranges > 0 {
            i += 1;
            break;
        }
        let lo = esc(&mut i)?;
        let mut hi = lo;
        if p.get(i) == Some(&'-') {
            i += 1;
            hi = esc(&mut i)?;
            if hi < lo {
                return None;
            }
        }
        ranges += 1;
        if let Some(c) = c
            && lo <= c
            && c <= hi
        {
            matched = true;
        }
    }
    let hit = c.is_some_and(|c| c != '/') && matched != negated;
    Some((hit, i))
}

/// Go's `filepath.Glob`, sorted per directory as Go's is. `None` for a
/// malformed pattern.
pub fn glob(pattern: &str) -> Option<Vec<String>> {
    if !has_meta(pattern) {
        return Some(if std::fs::symlink_metadata(pattern).is_ok() {
            vec![pattern.to_string()]
        } else {
            Vec::new()
        });
    }
    let (dir, file) = match pattern.rfind('/') {
        Some(i) => (&pattern[..=i], &pattern[i + 1..]),
        None => ("", pattern),
    };
    validate(&file.chars().collect::<Vec<_>>())?;
    let dir = match dir {
        "" => ".".to_string(),
        "/" => "/".to_string(),
        d => d[..d.len() - 1].to_string(),
    };
    let dirs = if has_meta(&dir) {
        if dir == pattern {
            return None;
        }
        glob(&dir)?
    } else {
        vec![dir]
    };
    let mut out = Vec::new();
    for d in dirs {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        let mut names: Vec<String> = entries
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .collect();
        names.sort();
        for n in names {
            if glob_match(file, &n) == Some(true) {
                out.push(go_join(&d, &n));
            }
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collectors::test_support::fixture;

    #[test]
    fn floats_as_go_parses_them() {
        for (s, v) in [
            ("1", 1.0),
            ("-1.5", -1.5),
            ("1e3", 1000.0),
            (".5", 0.5),
            ("5.", 5.0),
            ("+Inf", f64::INFINITY),
            ("-inf", f64::NEG_INFINITY),
            ("Infinity", f64::INFINITY),
            ("1e-400", 0.0),
        ] {
            assert_eq!(go_parse_float(s), Some(v), "{s}");
        }
        assert!(go_parse_float("NaN").unwrap().is_nan());
        assert!(go_parse_float("nan").unwrap().is_nan());
        for s in [
            "", "+NaN", "-nan", "1e400", "0x10", "0x1p3", "1_000", "x", "1,5", ".",
        ] {
            assert_eq!(go_parse_float(s), None, "{s}");
        }
    }

    #[test]
    fn floats_as_go_formats_them() {
        for (f, s) in [
            (0.0, "0"),
            (1.0, "1"),
            (-1.0, "-1"),
            (0.5, "0.5"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (100000.0, "100000"),
            (1e6, "1e+06"),
            (1234567.0, "1.234567e+06"),
            (2.5e-7, "2.5e-07"),
            (1e300, "1e+300"),
            (f64::INFINITY, "+Inf"),
            (f64::NEG_INFINITY, "-Inf"),
        ] {
            assert_eq!(go_format_float(f), s, "{f}");
        }
    }

    #[test]
    fn paths_as_go_cleans_and_globs_them() {
        assert_eq!(go_clean("a//b/./c/"), "a/b/c");
        assert_eq!(go_clean("/../a/../b"), "/b");
        assert_eq!(go_clean("../a"), "../a");
        assert_eq!(go_clean(""), ".");
        assert_eq!(go_join("./dir/", "x.prom"), "dir/x.prom");
        for (p, n, m) in [
            ("*.prom", "a.prom", true),
            ("*.prom", "a.txt", false),
            ("a?c", "abc", true),
            ("[a-c]x", "bx", true),
            ("[^a-c]x", "bx", false),
            ("\\*", "*", true),
            ("*", "a/b", false),
        ] {
            assert_eq!(glob_match(p, n), Some(m), "{p} {n}");
        }
        assert_eq!(glob_match("[", "x"), None);
        assert_eq!(glob_match("a\\", "a"), None);
        let root = fixture("textfile");
        let found = glob(&format!("{}/g*", root.display())).unwrap();
        assert!(found.iter().any(|p| p.ends_with("/good")), "{found:?}");
    }
}
