//! `--probe.drops.per-cgroup` on the real kernel: drops of packets that
//! have a socket, by the socket's cgroup2 cgroup, in cgroups the test makes
//! under the cgroup2 mount (`/sys/fs/cgroup/unified` on a hybrid host),
//! named `usescope-drops-PID-TAG.scope` so the default selection picks them.
//!
//! - Oracle: in each cgroup a python receiver joins the cgroup, THEN opens
//!   a UDP socket on 127.0.0.1 with the smallest SO_RCVBUF and never reads
//!   (a socket's cgroup is the creator's at creation). The test sends it N
//!   datagrams; those that do not fit are dropped (SOCKET_RCVBUFF) on the
//!   receive path, where only the tracepoint's `rx_sk` names the socket.
//!   The socket's own drop counter (/proc/net/udp, last column) is the
//!   exact oracle: the cgroup's series must equal it.
//! - A cgroup with a socket and no drops has no series.
//! - The sum over the family never exceeds the host's drops
//!   (`usescope_skb_drops_total`, read first) and never goes down.
//! - `--probe.drops.max-cgroups=1`: the second cgroup finds the map full,
//!   has no series, and its drops are in `other` and folded.
//! - A removed cgroup's series goes, its drops move to `other`
//!   (`folded{reason="gone"}`), and the sum does not drop.
//!
//! Needs root, BPF and python3 (skips otherwise; fails under
//! USESCOPE_REQUIRE_BPF=1 or CI=true). Host-wide probe: one test at a time.

mod common;

use std::io::{BufRead, BufReader};
use std::net::UdpSocket;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use common::bpf_objects::probe_up;
use common::{Daemon, can_run_bpf, sample, sum_of};
use usescope::probes::cgroup_ids::Hierarchy;

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

const HOST: &str = "usescope_skb_drops_total";
const FAMILY: &str = "usescope_cgroup_skb_drops_total";
const FOLDED: &str = "usescope_cgroup_skb_drops_folded_total";

/// Joins the cgroup (argv[1] is its cgroup.procs), then makes the socket,
/// prints its port and waits for stdin to close without reading.
const RECEIVER: &str = "import os,socket,sys
with open(sys.argv[1],'w') as f: f.write(str(os.getpid()))
s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET,socket.SO_RCVBUF,1)
s.bind(('127.0.0.1',0))
print(s.getsockname()[1],flush=True)
sys.stdin.read()
";

/// A cgroup2 cgroup with a receiver in it; the receiver is ended and the
/// cgroup removed on drop, also when the test fails.
struct DropCgroup {
    dir: PathBuf,
    label: String,
    receiver: Option<Child>,
    port: u16,
}

impl DropCgroup {
    fn create(tag: &str) -> Option<DropCgroup> {
        let root = match Hierarchy::find_v2() {
            Ok(h) => h.root,
            Err(e) => {
                common::skip::unless_met(false, &format!("a cgroup2 mount ({e})"));
                return None;
            }
        };
        let name = format!("usescope-drops-{}-{tag}.scope", std::process::id());
        let dir = root.join(&name);
        std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
        let mut cg = DropCgroup {
            dir,
            label: format!("/{name}"),
            receiver: None,
            port: 0,
        };
        let child = Command::new("python3")
            .arg("-c")
            .arg(RECEIVER)
            .arg(cg.dir.join("cgroup.procs"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn();
        if !common::skip::unless_met(
            child.is_ok(),
            &format!("python3 ({:?})", child.as_ref().err()),
        ) {
            return None;
        }
        let mut child = child.unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        cg.receiver = Some(child);
        cg.port = line
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("receiver in {} printed {line:?}", cg.label));
        Some(cg)
    }

    /// Sends `n` datagrams of 1000 bytes to the receiver; returns its
    /// socket's drops from /proc/net/udp once they stop changing.
    fn flood(&self, n: usize) -> u64 {
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        for _ in 0..n {
            tx.send_to(&[0u8; 1000], ("127.0.0.1", self.port)).unwrap();
        }
        let deadline = Instant::now() + Duration::from_secs(2);
        let mut last = self.socket_drops();
        loop {
            std::thread::sleep(Duration::from_millis(100));
            let now = self.socket_drops();
            if now == last || Instant::now() > deadline {
                return now;
            }
            last = now;
        }
    }

    /// The `drops` column of the receiver's line in /proc/net/udp.
    fn socket_drops(&self) -> u64 {
        let local = format!("0100007F:{:04X}", self.port);
        let text = std::fs::read_to_string("/proc/net/udp").unwrap();
        text.lines()
            .find(|l| l.split_whitespace().nth(1) == Some(local.as_str()))
            .and_then(|l| l.split_whitespace().last()?.parse().ok())
            .unwrap_or_else(|| panic!("no {local} in /proc/net/udp:\n{text}"))
    }

    fn series(&self) -> String {
        series_of(&self.label)
    }

    fn end_receiver(&mut self) {
        if let Some(mut c) = self.receiver.take() {
            drop(c.stdin.take());
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for DropCgroup {
    fn drop(&mut self) {
        self.end_receiver();
        let deadline = Instant::now() + Duration::from_secs(5);
        while std::fs::remove_dir(&self.dir).is_err() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn series_of(label: &str) -> String {
    format!("{FAMILY}{{cgroup=\"{label}\",container_id=\"\",pod_uid=\"\"}}")
}

fn value(expo: &str, series: &str) -> f64 {
    sample(expo, series).unwrap_or_else(|| panic!("{series} missing from:\n{expo}"))
}

fn folded(expo: &str, reason: &str) -> f64 {
    value(expo, &format!("{FOLDED}{{reason=\"{reason}\"}}"))
}

/// The family's sum is at most the host's drops of the same scrape (a
/// subset: drops with a socket), give or take the drops of the moment
/// between the two reads; returns the sum.
fn sum_within_host(expo: &str) -> f64 {
    let (host, sum) = (sum_of(expo, HOST), sum_of(expo, FAMILY));
    assert!(
        sum <= host + 50.0,
        "host {host} drops, sum over cgroups {sum}"
    );
    sum
}

fn start(extra: &[&str]) -> Option<Daemon> {
    let mut args = vec![
        "--collector.disable-defaults",
        "--no-probe.runqlat",
        "--no-probe.cachestat",
        "--probe.drops.per-cgroup",
    ];
    args.extend(extra);
    let d = Daemon::start(&args);
    let expo = d.scrape();
    probe_up(&d, &expo, "drops").then_some(d)
}

#[test]
fn drops_with_a_socket_are_counted_by_the_sockets_cgroup() {
    let _g = serial();
    if !can_run_bpf() {
        return;
    }
    let Some(d) = start(&[]) else { return };
    let Some(a) = DropCgroup::create("a") else {
        return;
    };
    let Some(b) = DropCgroup::create("b") else {
        return;
    };
    let Some(quiet) = DropCgroup::create("quiet") else {
        return;
    };
    let s0 = d.scrape();
    let sum0 = sum_within_host(&s0);
    let (na, nb) = (a.flood(400), b.flood(40));
    let s1 = d.scrape();
    let (pa, pb) = (sample(&s1, &a.series()), sample(&s1, &b.series()));
    eprintln!(
        "{}: probe {pa:?}, socket drops {na}; {}: probe {pb:?}, socket drops {nb}; host {} sum {}",
        a.label,
        b.label,
        sum_of(&s1, HOST),
        sum_of(&s1, FAMILY)
    );
    assert!(na > 0 && nb > 0, "the floods dropped nothing");
    assert_eq!((pa, pb), (Some(na as f64), Some(nb as f64)), "the oracle");
    assert_eq!(sample(&s1, &quiet.series()), None, "a cgroup without drops");
    let sum1 = sum_within_host(&s1);
    assert!(sum1 - sum0 >= (na + nb) as f64, "sum +{}", sum1 - sum0);
    let s2 = d.scrape();
    assert_eq!(value(&s2, &a.series()), na as f64);
    assert!(sum_within_host(&s2) >= sum1, "the sum went down");
    drop((a, b, quiet));
    assert!(d.stop().success());
}

#[test]
fn past_max_cgroups_drops_are_folded_into_other() {
    let _g = serial();
    if !can_run_bpf() {
        return;
    }
    // One entry: the first socket's cgroup on the host to drop after the
    // start (the test's `a`, or any other) takes it. The receivers are
    // ready before the start, so `a` floods right after it.
    let Some(a) = DropCgroup::create("cap-a") else {
        return;
    };
    let Some(b) = DropCgroup::create("cap-b") else {
        return;
    };
    let Some(d) = start(&["--probe.drops.max-cgroups=1"]) else {
        return;
    };
    let s0 = d.scrape();
    let na = a.flood(400);
    let nb = b.flood(40);
    let s1 = d.scrape();
    let rise = |s: &str| value(&s1, s) - value(&s0, s);
    let full = folded(&s1, "map_full") - folded(&s0, "map_full");
    let limit = folded(&s1, "series_limit") - folded(&s0, "series_limit");
    let other = rise(&series_of("other"));
    let (pa, pb) = (sample(&s1, &a.series()), sample(&s1, &b.series()));
    eprintln!(
        "a: {pa:?} of {na}; b: {pb:?} of {nb}; map_full +{full}, series_limit +{limit}, other +{other}"
    );
    assert_eq!(pb, None, "the second cgroup found the map full");
    let folded_here = match pa {
        Some(p) => {
            assert_eq!(p, na as f64, "the first cgroup's series");
            nb
        }
        None => na + nb,
    } as f64;
    assert!(full + limit >= folded_here, "folded +{}", full + limit);
    assert!(other >= folded_here, "other +{other} < {folded_here}");
    sum_within_host(&s1);
    drop((a, b));
    assert!(d.stop().success());
}

#[test]
fn a_removed_cgroups_series_goes_and_its_drops_stay_in_the_sum() {
    let _g = serial();
    if !can_run_bpf() {
        return;
    }
    let Some(d) = start(&[]) else { return };
    let Some(a) = DropCgroup::create("gone") else {
        return;
    };
    let Some(b) = DropCgroup::create("stays") else {
        return;
    };
    let (na, nb) = (a.flood(400), b.flood(40));
    let s1 = d.scrape();
    assert_eq!(value(&s1, &a.series()), na as f64);
    let sum1 = sum_within_host(&s1);
    let label = a.label.clone();
    drop(a);
    // The scrape after the rmdir sees the entry idle and its cgroup gone.
    let s2 = d.scrape();
    eprintln!(
        "after rmdir: {label} {:?}, other +{}, gone +{}",
        sample(&s2, &series_of(&label)),
        value(&s2, &series_of("other")) - value(&s1, &series_of("other")),
        folded(&s2, "gone") - folded(&s1, "gone")
    );
    assert_eq!(
        sample(&s2, &series_of(&label)),
        None,
        "{label} still exported"
    );
    assert!(folded(&s2, "gone") - folded(&s1, "gone") >= na as f64);
    assert!(value(&s2, &series_of("other")) - value(&s1, &series_of("other")) >= na as f64);
    assert_eq!(value(&s2, &b.series()), nb as f64, "the other cgroup");
    let sum2 = sum_within_host(&s2);
    assert!(sum2 >= sum1, "the sum went down: {sum1} -> {sum2}");
    drop(b);
    assert!(d.stop().success());
}
