//! node_exporter as a test oracle: find the binary (v1.12.1,
//! `/root/go/bin/node_exporter` or `$NODE_EXPORTER`), run it and usescope
//! on the same roots with the same collector flags, and list every way
//! their `node_*` families differ (type, HELP, label sets, values).
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
        let end = Instant::now() + Duration::from_secs(10);
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
        "--collector.disable-defaults".to_string(),
    ];
    args.extend(flags.iter().map(|s| s.to_string()));
    let ne = NodeExporter::start(bin, &args);
    let mut ours: Vec<&str> = args.iter().map(String::as_str).collect();
    ours.extend([
        "--no-probe.runqlat",
        "--no-probe.cachestat",
        "--no-probe.drops",
    ]);
    let d = Daemon::start(&ours);
    Pair {
        node_exporter: ne.scrape(),
        usescope: d.scrape(),
    }
}

/// Labels (sorted by name) → value.
pub type Series = BTreeMap<Vec<(String, String)>, f64>;

/// One metric family of an exposition.
#[derive(Debug, Default, PartialEq)]
pub struct Family {
    pub kind: String,
    pub help: String,
    pub series: Series,
}

/// The `node_*` families of an exposition, without the scrape's own
/// `node_scrape_*` and the build info. Counter samples are keyed by their
/// family name.
pub fn families(expo: &str) -> BTreeMap<String, Family> {
    let mut out: BTreeMap<String, Family> = BTreeMap::new();
    let wanted = |n: &str| {
        n.starts_with("node_") && !n.starts_with("node_scrape_") && !n.starts_with("node_exporter_")
    };
    for line in expo.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            if wanted(name) {
                out.entry(name.to_string()).or_default().help = unescape(help);
            }
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            if wanted(name) {
                out.entry(name.to_string()).or_default().kind = kind.to_string();
            }
        } else if !line.starts_with('#') && !line.is_empty() {
            let (name, labels, value) = sample_of(line);
            if wanted(&name) {
                out.entry(name).or_default().series.insert(labels, value);
            }
        }
    }
    out
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

/// `name{a="x",b="y"} value` → (name, sorted labels, value).
fn sample_of(line: &str) -> (String, Vec<(String, String)>, f64) {
    let (head, value) = line.rsplit_once(' ').unwrap();
    let value: f64 = value.parse().unwrap_or_else(|_| panic!("value in {line}"));
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

/// Every difference between the two expositions' `node_*` families that
/// `keep` selects: a family only one has, type, HELP, a label set only one
/// has, a value.
pub fn differences(pair: &Pair, keep: impl Fn(&str) -> bool) -> Vec<String> {
    let mut ne = families(&pair.node_exporter);
    let mut us = families(&pair.usescope);
    ne.retain(|k, _| keep(k));
    us.retain(|k, _| keep(k));
    let mut problems = Vec::new();
    for name in ne.keys().chain(us.keys()).collect::<BTreeSet<_>>() {
        match (ne.get(name), us.get(name)) {
            (Some(_), None) => problems.push(format!("{name}: only node_exporter has it")),
            (None, Some(_)) => problems.push(format!("{name}: only usescope has it")),
            (Some(a), Some(b)) => {
                if a.kind != b.kind {
                    problems.push(format!("{name}: type {} vs {}", a.kind, b.kind));
                }
                if a.help != b.help {
                    problems.push(format!("{name}: HELP {:?} vs {:?}", a.help, b.help));
                }
                for (labels, v) in &a.series {
                    match b.series.get(labels) {
                        None => problems.push(format!("{name}{labels:?}: missing in usescope")),
                        Some(w) if w != v => {
                            problems.push(format!("{name}{labels:?}: {v} vs usescope {w}"))
                        }
                        Some(_) => {}
                    }
                }
                for labels in b.series.keys().filter(|l| !a.series.contains_key(*l)) {
                    problems.push(format!("{name}{labels:?}: only usescope has it"));
                }
            }
            (None, None) => unreachable!(),
        }
    }
    problems
}

/// Asserts no [`differences`] at all and that
/// `collector` succeeded in both; returns usescope's families.
pub fn assert_same(pair: &Pair, collector: &str) -> BTreeMap<String, Family> {
    let problems = differences(pair, |_| true);
    assert!(
        problems.is_empty(),
        "{collector}: {} differences from node_exporter:\n{}",
        problems.len(),
        problems.join("\n")
    );
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
