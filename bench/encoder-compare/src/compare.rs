//! What the two encoders write differently for the same model: series
//! present in one only, the same series with another value text, and
//! HELP lines that differ.

use std::collections::BTreeMap;

/// `name{labels}` → value text, and family name → HELP text.
fn read(exposition: &str) -> (BTreeMap<&str, &str>, BTreeMap<&str, &str>) {
    let (mut series, mut help) = (BTreeMap::new(), BTreeMap::new());
    for line in exposition.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, text) = rest.split_once(' ').unwrap_or((rest, ""));
            help.insert(name, text);
        } else if !line.starts_with('#') && !line.is_empty() {
            // The value is the last field (no timestamps or exemplars here).
            if let Some((key, value)) = line.rsplit_once(' ') {
                series.insert(key, value);
            }
        }
    }
    (series, help)
}

pub struct Differences {
    pub only_left: Vec<String>,
    pub only_right: Vec<String>,
    /// (series, left value, right value) where the texts differ.
    pub value_text: Vec<(String, String, String)>,
    /// ... and of those, the ones whose numbers differ too.
    pub value_number: usize,
    pub help: Vec<(String, String, String)>,
    pub common: usize,
}

pub fn diff(left: &str, right: &str) -> Differences {
    let (ls, lh) = read(left);
    let (rs, rh) = read(right);
    let only = |a: &BTreeMap<&str, &str>, b: &BTreeMap<&str, &str>| {
        a.keys()
            .filter(|k| !b.contains_key(*k))
            .map(|k| k.to_string())
            .collect()
    };
    let mut value_text = Vec::new();
    let mut value_number = 0;
    for (k, lv) in &ls {
        if let Some(rv) = rs.get(k)
            && lv != rv
        {
            value_text.push((k.to_string(), lv.to_string(), rv.to_string()));
            if number(lv) != number(rv) {
                value_number += 1;
            }
        }
    }
    let help = lh
        .iter()
        .filter_map(|(k, l)| {
            let r = rh.get(k)?;
            (l != r).then(|| (k.to_string(), l.to_string(), r.to_string()))
        })
        .collect();
    Differences {
        only_left: only(&ls, &rs),
        only_right: only(&rs, &ls),
        common: ls.keys().filter(|k| rs.contains_key(*k)).count(),
        value_text,
        value_number,
        help,
    }
}

fn number(v: &str) -> Option<u64> {
    match v {
        "+Inf" => Some(f64::INFINITY.to_bits()),
        "-Inf" => Some(f64::NEG_INFINITY.to_bits()),
        "NaN" => Some(f64::NAN.to_bits()),
        _ => v.parse::<f64>().ok().map(f64::to_bits),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn finds_each_kind_of_difference() {
        let l = "# HELP a x\na{k=\"1\"} 1\nb 2\nc 3\n";
        let r = "# HELP a y\na{k=\"1\"} 1.0\nb 2.5\nd 4\n";
        let d = super::diff(l, r);
        assert_eq!(d.only_left, vec!["c"]);
        assert_eq!(d.only_right, vec!["d"]);
        assert_eq!(d.value_text.len(), 2);
        assert_eq!(d.value_number, 1);
        assert_eq!(d.help.len(), 1);
        assert_eq!(d.common, 2);
    }
}
