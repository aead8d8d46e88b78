//! node_exporter as a test oracle: find the binary (v1.12.1,
//! `/root/go/bin/node_exporter` or `$NODE_EXPORTER`), run it and usescope
//! on the same roots with the same collector flags, and list every way
//! their families differ (type, HELP, label sets, values). Every compat_*
//! test reads both expositions through this one parser and compares them
//! through this one [`differences_within`].
//!
//! Without node_exporter a test skips through `common::skip` and returns,
//! and fails in CI (`USESCOPE_REQUIRE_BPF=1` or `CI=true`).

use std::collections::{BTreeMap, BTreeSet};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{Daemon, http_get};

/// The node_exporter binary, or `None` after a skip (a failure in CI):
/// [`super::node_exporter`].
pub fn find() -> Option<PathBuf> {
    super::node_exporter()
}

/// A node_exporter process on a free loopback port, killed when dropped.
pub struct NodeExporter {
    child: Child,
    addr: SocketAddr,
}

impl Drop for NodeExporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl NodeExporter {
    pub fn start(bin: &Path, args: &[String]) -> NodeExporter {
        // A free port: bind, note it, release it for node_exporter.
        let addr = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let child = Command::new(bin)
            .arg(format!("--web.listen-address={addr}"))
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start node_exporter");
        let mut ne = NodeExporter { child, addr };
        let end = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(addr).is_err() {
            if let Ok(Some(status)) = ne.child.try_wait() {
                panic!("node_exporter {args:?} exited at start-up: {status}");
            }
            assert!(
                Instant::now() < end,
                "node_exporter did not listen on {addr}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        ne
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn scrape(&self) -> String {
        let r = http_get(self.addr, "/metrics", &[]);
        assert_eq!(r.status, 200);
        r.text()
    }
}

/// Both exporters' expositions of one input.
pub struct Pair {
    pub node_exporter: String,
    pub usescope: String,
}

/// Runs both with `--path.procfs`, `--path.sysfs`, only the collectors
/// `flags` enable (`--collector.disable-defaults`), and `flags`; scrapes
/// each once.
pub fn scrape_both(bin: &Path, procfs: &Path, sysfs: &Path, flags: &[&str]) -> Pair {
    let mut args = vec![
        format!("--path.procfs={}", procfs.display()),
        format!("--path.sysfs={}", sysfs.display()),
    ];
    args.extend(flags.iter().map(|s| s.to_string()));
    run_both(bin, &args, &[])
}

/// Runs both with `--collector.disable-defaults` and `args` (node_exporter
/// also with `node_exporter_only`, for a flag usescope does not need),
/// scrapes each once, and checks that usescope then exits cleanly on
/// SIGTERM.
pub fn run_both(bin: &Path, args: &[String], node_exporter_only: &[&str]) -> Pair {
    let mut theirs = vec!["--collector.disable-defaults".to_string()];
    theirs.extend(args.iter().cloned());
    theirs.extend(node_exporter_only.iter().map(|s| s.to_string()));
    let ne = NodeExporter::start(bin, &theirs);
    let mut ours = vec![
        "--collector.disable-defaults",
        "--no-probe.runqlat",
        "--no-probe.cachestat",
        "--no-probe.drops",
    ];
    ours.extend(args.iter().map(String::as_str));
    let d = Daemon::start(&ours);
    let pair = Pair {
        node_exporter: ne.scrape(),
        usescope: d.scrape(),
    };
    assert!(d.stop().success(), "usescope {args:?} did not exit cleanly");
    pair
}

/// Label pairs, sorted by name, values unescaped.
pub type Labels = Vec<(String, String)>;

/// Labels → value.
pub type Series = BTreeMap<Labels, f64>;

/// One metric family of an exposition.
#[derive(Debug, Default, PartialEq)]
pub struct Family {
    pub kind: String,
    pub help: String,
    pub series: Series,
    /// Samples whose labels repeated an earlier sample's.
    pub duplicates: usize,
}

/// Families each exporter has of its own, never compared: Go's and the
/// process's, the scrape's own, the build info, usescope's probes.
fn own(name: &str) -> bool {
    [
        "go_",
        "promhttp_",
        "process_",
        "usescope_",
        "node_scrape_",
        "node_exporter_",
    ]
    .iter()
    .any(|p| name.starts_with(p))
}

/// Every family of an exposition, own ones included (HELP unescaped;
/// counter and histogram samples keyed by the name they are written with).
pub fn parse(expo: &str) -> BTreeMap<String, Family> {
    let mut out: BTreeMap<String, Family> = BTreeMap::new();
    for line in expo.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            out.entry(name.to_string()).or_default().help = unescape(help);
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            out.entry(name.to_string()).or_default().kind = kind.to_string();
        } else if !line.starts_with('#') && !line.is_empty() {
            let (name, labels, value) = sample_of(line);
            let family = out.entry(name).or_default();
            if family.series.insert(labels, value).is_some() {
                family.duplicates += 1;
            }
        }
    }
    out
}

/// The families [`differences`] compares: all but each exporter's own.
pub fn families(expo: &str) -> BTreeMap<String, Family> {
    let mut all = parse(expo);
    all.retain(|name, _| !own(name));
    all
}

/// [`families`] flattened: `name{a="x",b="y"}` (labels sorted, escaped
/// as in the text format) → value, for tests that look up one series.
pub fn samples(expo: &str) -> BTreeMap<String, f64> {
    families(expo)
        .iter()
        .flat_map(|(name, f)| f.series.iter().map(move |(l, v)| (key(name, l), *v)))
        .collect()
}

/// One series written as in the text format.
fn key(name: &str, labels: &Labels) -> String {
    let pairs: Vec<String> = labels
        .iter()
        .map(|(k, v)| {
            let v = v
                .replace('\\', "\\\\")
                .replace('"', "\\\"")
                .replace('\n', "\\n");
            format!("{k}=\"{v}\"")
        })
        .collect();
    format!("{name}{{{}}}", pairs.join(","))
}

fn unescape(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some('n') => out.push('\n'),
                Some(o) => out.push(o),
                None => out.push('\\'),
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn value_of(v: &str) -> f64 {
    match v {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().unwrap_or_else(|_| panic!("value {v:?}")),
    }
}

/// `name{a="x",b="y"} value` → (name, sorted labels, value). `le` and
/// `quantile` are numbers and are compared as numbers ("1" and "1.0" are
/// one bucket).
fn sample_of(line: &str) -> (String, Labels, f64) {
    let (head, value) = line.rsplit_once(' ').unwrap();
    let value = value_of(value);
    let Some((name, rest)) = head.split_once('{') else {
        return (head.to_string(), Vec::new(), value);
    };
    let mut labels = Vec::new();
    let mut rest = rest.strip_suffix('}').unwrap();
    while !rest.is_empty() {
        let (key, after) = rest.split_once("=\"").unwrap();
        let mut val = String::new();
        let mut end = after.len();
        let mut chars = after.char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some((_, 'n')) => val.push('\n'),
                    Some((_, o)) => val.push(o),
                    None => {}
                },
                '"' => {
                    end = i + 1;
                    break;
                }
                c => val.push(c),
            }
        }
        if key == "le" || key == "quantile" {
            val = format!("{:?}", value_of(&val));
        }
        labels.push((key.to_string(), val));
        rest = after[end..].strip_prefix(',').unwrap_or(&after[end..]);
    }
    labels.sort();
    (name.to_string(), labels, value)
}

/// The scrape's `node_scrape_collector_success` for `collector`.
pub fn success(expo: &str, collector: &str) -> Option<f64> {
    super::sample(
        expo,
        &format!("node_scrape_collector_success{{collector=\"{collector}\"}}"),
    )
}

/// [`differences_within`] with no tolerance: values must be equal.
pub fn differences(pair: &Pair, keep: impl Fn(&str) -> bool) -> BTreeSet<String> {
    differences_within(pair, keep, |_| 0.0)
}

/// Every difference between the two expositions' [`families`] that `keep`
/// selects, one line each: `- name{labels}` a series only node_exporter
/// has, `+ name{labels}` one only usescope has, `~ name{labels} a vs b`
/// a value further apart than `tolerance(name)` (and than rounding),
/// `~ family name: ...` another type or HELP, `~ name: n duplicate
/// series` a series written twice, `- family name (no series)` a family
/// without series that only one has.
pub fn differences_within(
    pair: &Pair,
    keep: impl Fn(&str) -> bool,
    tolerance: impl Fn(&str) -> f64,
) -> BTreeSet<String> {
    let mut ne = families(&pair.node_exporter);
    let mut us = families(&pair.usescope);
    ne.retain(|k, _| keep(k));
    us.retain(|k, _| keep(k));
    let empty = Family::default();
    let mut out = BTreeSet::new();
    for name in ne.keys().chain(us.keys()).collect::<BTreeSet<_>>() {
        let (a, b) = (
            ne.get(name).unwrap_or(&empty),
            us.get(name).unwrap_or(&empty),
        );
        if ne.contains_key(name)
            && us.contains_key(name)
            && (&a.kind, &a.help) != (&b.kind, &b.help)
        {
            out.insert(format!(
                "~ family {name}: {:?} vs {:?}",
                (&a.help, &a.kind),
                (&b.help, &b.kind)
            ));
        }
        let sides = [
            (
                "node_exporter",
                a,
                '-',
                ne.contains_key(name) && !us.contains_key(name),
            ),
            (
                "usescope",
                b,
                '+',
                us.contains_key(name) && !ne.contains_key(name),
            ),
        ];
        for (who, f, side, only_here) in sides {
            // A family with HELP and TYPE but no series, on one side only.
            if only_here && f.series.is_empty() {
                out.insert(format!("{side} family {name} (no series)"));
            }
            if f.duplicates > 0 {
                out.insert(format!(
                    "~ {name}: {} duplicate series in {who}",
                    f.duplicates
                ));
            }
        }
        let tol = tolerance(name);
        for (labels, v) in &a.series {
            match b.series.get(labels) {
                None => {
                    out.insert(format!("- {}", key(name, labels)));
                }
                Some(w) => {
                    let same = v == w
                        || (v.is_nan() && w.is_nan())
                        || (v - w).abs() <= tol
                        || (v - w).abs() <= 1e-12 * v.abs();
                    if !same {
                        out.insert(format!("~ {} {v} vs {w}", key(name, labels)));
                    }
                }
            }
        }
        for labels in b.series.keys().filter(|l| !a.series.contains_key(*l)) {
            out.insert(format!("+ {}", key(name, labels)));
        }
    }
    out
}

/// Fails listing `problems`, if there are any.
pub fn assert_none(what: &str, problems: &BTreeSet<String>) {
    assert!(
        problems.is_empty(),
        "{what}: {} differences from node_exporter:\n{}",
        problems.len(),
        problems.iter().cloned().collect::<Vec<_>>().join("\n")
    );
}

/// Asserts no [`differences`] at all and that
/// `collector` succeeded in both; returns usescope's families.
pub fn assert_same(pair: &Pair, collector: &str) -> BTreeMap<String, Family> {
    assert_none(collector, &differences(pair, |_| true));
    assert_eq!(
        success(&pair.node_exporter, collector),
        Some(1.0),
        "node_exporter {collector}"
    );
    assert_eq!(
        success(&pair.usescope, collector),
        Some(1.0),
        "usescope {collector}"
    );
    families(&pair.usescope)
}
