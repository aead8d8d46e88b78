//! The scrape as data: every family a collector wrote, read back from its
//! own text 0.0.4 output. Both encoders are fed from this model, so they
//! write exactly the same families, samples and values.

use usescope::scrape::exposition::{MetricType, Value};

pub type Labels = Vec<(&'static str, &'static str)>;

/// One collector's families, in the order it wrote them.
pub struct Chunk {
    pub collector: &'static str,
    pub families: Vec<Family>,
}

pub struct Family {
    /// The full sample name as node_exporter writes it (`_total` included).
    pub name: &'static str,
    /// Unescaped help text.
    pub help: &'static str,
    pub help_plain: bool,
    pub kind: MetricType,
    pub members: Vec<Member>,
}

pub enum Member {
    Sample {
        suffix: &'static str,
        labels: Labels,
        value: Value,
    },
    /// Histogram buckets are cumulative, ascending, without +Inf.
    Histogram {
        labels: Labels,
        buckets: Vec<(f64, u64)>,
        sum: f64,
        count: u64,
    },
}

/// Model strings live for the whole run; leaking them keeps both encoders'
/// inner loops free of lifetimes and conversions.
fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

/// Reads back one collector's output (text 0.0.4, as usescope writes it).
pub fn parse(collector: &'static str, text: &str) -> Result<Chunk, String> {
    let mut families: Vec<Family> = Vec::new();
    let mut help = String::new();
    for (n, line) in text.lines().enumerate() {
        let at = |cause: &str| format!("{collector} output line {}: {cause}: {line}", n + 1);
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (_, h) = rest
                .split_once(' ')
                .ok_or_else(|| at("HELP without text"))?;
            help = unescape(h, false);
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest
                .split_once(' ')
                .ok_or_else(|| at("TYPE without type"))?;
            let kind = match kind {
                "counter" => MetricType::Counter,
                "gauge" => MetricType::Gauge,
                "untyped" => MetricType::Untyped,
                "histogram" => MetricType::Histogram,
                "summary" => MetricType::Summary,
                _ => return Err(at("unknown type")),
            };
            let help = leak(std::mem::take(&mut help));
            families.push(Family {
                name: leak(name.to_string()),
                help,
                help_plain: usescope::scrape::exposition::help_is_plain(help),
                kind,
                members: Vec::new(),
            });
        } else if !line.is_empty() && !line.starts_with('#') {
            let family = families
                .last_mut()
                .ok_or_else(|| at("sample before TYPE"))?;
            let (name, labels, value) = split_sample(line).ok_or_else(|| at("bad sample"))?;
            let suffix = name
                .strip_prefix(family.name)
                .ok_or_else(|| at("sample outside its family"))?;
            add_member(family, suffix, labels, value).map_err(|e| at(&e))?;
        }
    }
    Ok(Chunk {
        collector,
        families,
    })
}

fn add_member(
    family: &mut Family,
    suffix: &str,
    mut labels: Labels,
    value: &str,
) -> Result<(), String> {
    if family.kind != MetricType::Histogram {
        family.members.push(Member::Sample {
            suffix: leak(suffix.to_string()),
            labels,
            value: parse_value(value)?,
        });
        return Ok(());
    }
    let le = labels
        .iter()
        .position(|(k, _)| *k == "le")
        .map(|i| labels.remove(i).1);
    let open = family.members.iter_mut().rev().find_map(|m| match m {
        Member::Histogram {
            labels: l,
            buckets,
            sum,
            count,
        } if *l == labels => Some((buckets, sum, count)),
        _ => None,
    });
    let (buckets, sum, count) = match open {
        Some(parts) => parts,
        None => {
            family.members.push(Member::Histogram {
                labels,
                buckets: Vec::new(),
                sum: 0.0,
                count: 0,
            });
            match family.members.last_mut() {
                Some(Member::Histogram {
                    buckets,
                    sum,
                    count,
                    ..
                }) => (buckets, sum, count),
                _ => unreachable!("just pushed a histogram"),
            }
        }
    };
    let number = |v: &str| v.parse::<f64>().map_err(|e| format!("value {v}: {e}"));
    match (suffix, le) {
        ("_bucket", Some("+Inf")) => {}
        ("_bucket", Some(le)) => buckets.push((number(le)?, number(value)? as u64)),
        ("_sum", None) => *sum = number(value)?,
        ("_count", None) => *count = number(value)? as u64,
        _ => return Err(format!("unexpected histogram sample {suffix}")),
    }
    Ok(())
}

fn parse_value(v: &str) -> Result<Value, String> {
    if let Ok(n) = v.parse::<u64>() {
        return Ok(Value::U64(n));
    }
    if let Ok(n) = v.parse::<i64>() {
        return Ok(Value::I64(n));
    }
    match v {
        "+Inf" => Ok(Value::F64(f64::INFINITY)),
        "-Inf" => Ok(Value::F64(f64::NEG_INFINITY)),
        _ => v
            .parse()
            .map(Value::F64)
            .map_err(|e| format!("value {v}: {e}")),
    }
}

/// `name{k="v",...} value` → parts, label values unescaped.
fn split_sample(line: &str) -> Option<(&str, Labels, &str)> {
    let Some(open) = line.find('{') else {
        let (name, value) = line.split_once(' ')?;
        return Some((name, Vec::new(), value));
    };
    let name = &line[..open];
    let mut rest = &line[open + 1..];
    let mut labels = Vec::new();
    loop {
        if let Some(after) = rest.strip_prefix('}') {
            return Some((name, labels, after.strip_prefix(' ')?));
        }
        rest = rest.strip_prefix(',').unwrap_or(rest);
        let (key, after) = rest.split_once("=\"")?;
        // The value ends at the first quote not escaped by a backslash.
        let bytes = after.as_bytes();
        let mut i = 0;
        while bytes.get(i)? != &b'"' {
            i += if bytes[i] == b'\\' { 2 } else { 1 };
        }
        labels.push((leak(key.to_string()), leak(unescape(&after[..i], true))));
        rest = &after[i + 1..];
    }
}

fn unescape(s: &str, quote: bool) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match (c, chars.clone().next()) {
            ('\\', Some('\\')) => {
                out.push('\\');
                chars.next();
            }
            ('\\', Some('n')) => {
                out.push('\n');
                chars.next();
            }
            ('\\', Some('"')) if quote => {
                out.push('"');
                chars.next();
            }
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_back_escapes_labels_and_histograms() {
        let text = "# HELP a_total x \\\\ y\\nz\n# TYPE a_total counter\na_total{k=\"q\\\"\\\\\",l=\"2\"} 7\n\
                    # HELP h h\n# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 3\nh_sum 1.5\nh_count 3\n";
        let chunk = parse("t", text).unwrap();
        let a = &chunk.families[0];
        assert_eq!(a.help, "x \\ y\nz");
        assert!(!a.help_plain);
        match &a.members[0] {
            Member::Sample {
                suffix,
                labels,
                value,
            } => {
                assert_eq!(*suffix, "");
                assert_eq!(labels, &vec![("k", "q\"\\"), ("l", "2")]);
                assert_eq!(*value, Value::U64(7));
            }
            Member::Histogram { .. } => panic!("a counter read as a histogram"),
        }
        match &chunk.families[1].members[..] {
            [
                Member::Histogram {
                    labels,
                    buckets,
                    sum,
                    count,
                },
            ] => {
                assert!(labels.is_empty());
                assert_eq!(buckets, &vec![(1.0, 2)]);
                assert_eq!((*sum, *count), (1.5, 3));
            }
            _ => panic!("histogram not grouped"),
        }
    }
}
