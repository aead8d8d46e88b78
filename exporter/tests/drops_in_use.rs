//! The drops probe at scale: a scrape reads only the counters in use, and
//! they stay exact against the kernel's own counters.
//!
//! The test loads two instances of the probe in this process, one with
//! `--probe.drops.protocol-label` and one without (each with its own maps,
//! so every counter starts at zero), and reads them with the daemon's
//! collector. The traffic is IPv6, so with the label the test's drops are
//! apart from IPv4 traffic elsewhere on the host (the probe counts
//! host-wide; on a shared machine other tests drop IPv4 packets).
//!
//! Oracles: /proc/net/snmp6 `Udp6NoPorts` for NO_SOCKET{protocol="ipv6"},
//! and the packet counter of an nftables drop rule (in a network namespace
//! of its own, so the host's ruleset is never touched) for
//! NETFILTER_DROP{protocol="ipv6"}. The instance without the label must
//! count what the labelled one counts over all protocols.
//!
//! Needs root, `unshare`, `ip` and `nft` (scripts/setup.sh); skips
//! otherwise, and fails under USESCOPE_REQUIRE_BPF=1 / CI=true.

mod common;

use std::os::fd::AsFd;
use std::process::Command;
use std::time::Duration;

use aya::maps::Map;
use common::{can_run_bpf, sample, skip, udp_to_closed_port_on};
use usescope::probes::drops::{self, DropsCollector};
use usescope::probes::layout::{DROPS_SLOTS, DROPS_USED_WORDS};
use usescope::probes::{Kernel, Loaded, ProbeFlagValue, ProbeSettings};
use usescope::scrape::collector::Collector;
use usescope::scrape::exposition::{Encoder, Format};

/// The probe attached (kept alive by the returned `Loaded`) and the
/// daemon's collector over its map.
fn attach(protocol_label: bool) -> Option<(Loaded, DropsCollector)> {
    let mut settings = ProbeSettings::default();
    settings.set(
        drops::PROTOCOL_LABEL,
        Some(ProbeFlagValue::Bool(protocol_label)),
    );
    let loaded = Kernel::open().and_then(|k| drops::load(&k, &settings));
    let why = format!("the drops probe to load: {:?}", loaded.as_ref().err());
    if !skip::unless_met(loaded.is_ok(), &why) {
        return None;
    }
    let loaded = loaded.unwrap();
    let Some(Map::PerCpuArray(map)) = loaded.ebpf.map(drops::MAP) else {
        panic!("map {} is not a per-CPU array", drops::MAP);
    };
    let fd = map.fd().as_fd().try_clone_to_owned().unwrap();
    let collector = DropsCollector::new(fd, loaded.names.clone(), &settings).unwrap();
    Some((loaded, collector))
}

fn scrape(c: &mut DropsCollector) -> String {
    let mut buf = Vec::new();
    let mut enc = Encoder::new(&mut buf, Format::PrometheusText);
    c.collect(&mut enc).unwrap();
    enc.finish();
    String::from_utf8(buf).unwrap()
}

/// `Udp6NoPorts` from /proc/net/snmp6: IPv6 datagrams to a port nothing
/// listens on, each of which the kernel frees as NO_SOCKET.
fn udp6_no_ports() -> u64 {
    std::fs::read_to_string("/proc/net/snmp6")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Udp6NoPorts"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// In a new network namespace: an nftables rule that counts and drops UDP
/// to [::1]:9 on output, `n` datagrams sent there; returns the rule's
/// packet counter. None after a skip.
fn nft_dropped(n: usize) -> Option<u64> {
    let tools = ["unshare", "ip", "nft", "python3"].iter().all(|t| {
        Command::new("sh")
            .args(["-c", &format!("command -v {t}")])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    if !skip::unless_met(tools, "unshare, ip, nft and python3 (scripts/setup.sh)") {
        return None;
    }
    let script = format!(
        r#"set -e
ip link set lo up
nft add table inet usescope_test
nft add chain inet usescope_test out '{{ type filter hook output priority 0; }}'
nft add rule inet usescope_test out ip6 daddr ::1 udp dport 9 counter drop
python3 -c '
import socket
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
for _ in range({n}):
    try:
        s.sendto(b"usescope", ("::1", 9))
    except OSError:
        pass
'
nft list chain inet usescope_test out"#
    );
    let out = Command::new("unshare")
        .args(["--net", "--", "sh", "-c", &script])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "nft in a new netns: {text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let packets = text
        .split_whitespace()
        .skip_while(|w| *w != "packets")
        .nth(1)
        .unwrap_or_else(|| panic!("no packet counter in {text}"));
    std::thread::sleep(Duration::from_millis(100));
    Some(packets.parse().unwrap())
}

/// A reason's count summed over every `protocol` (one sample without the
/// label).
fn all_protocols(expo: &str, reason: &str) -> f64 {
    let tail = format!("reason=\"{reason}\"}}");
    expo.lines()
        .filter(|l| l.starts_with("usescope_skb_drops_total{"))
        .filter_map(|l| l.split_once(' '))
        .filter(|(series, _)| series.ends_with(&tail))
        .map(|(_, v)| v.parse::<f64>().unwrap())
        .sum()
}

fn ipv6(expo: &str, reason: &str) -> f64 {
    let series = format!("usescope_skb_drops_total{{protocol=\"ipv6\",reason=\"{reason}\"}}");
    sample(expo, &series).unwrap_or(0.0)
}

/// Datagrams sent to a closed port, and into the nftables drop rule.
const UDP: u64 = 1000;
const NFT: u64 = 500;

/// An instance of the probe and its collector.
struct Probe {
    _loaded: Loaded,
    collector: DropsCollector,
    protocol_label: bool,
}

impl Probe {
    fn scrape(&mut self) -> (String, usize) {
        self.collector.reader().take_bytes_read();
        let expo = scrape(&mut self.collector);
        (expo, self.collector.reader().take_bytes_read())
    }
}

#[test]
fn reads_only_counters_in_use_and_counts_exactly() {
    if !can_run_bpf() {
        return;
    }
    let mut probes = Vec::new();
    for protocol_label in [false, true] {
        let Some((loaded, collector)) = attach(protocol_label) else {
            return;
        };
        probes.push(Probe {
            _loaded: loaded,
            collector,
            protocol_label,
        });
    }
    let [plain, labelled] = &mut probes[..] else {
        unreachable!()
    };
    // The labelled instance's window lies inside the plain one's, a few
    // µs apart at each end.
    let (plain_before, _) = plain.scrape();
    let (labelled_before, _) = labelled.scrape();
    let no_ports = udp6_no_ports();
    udp_to_closed_port_on("::1", UDP as usize);
    let no_ports = udp6_no_ports() - no_ports;
    let Some(nft) = nft_dropped(NFT as usize) else {
        return;
    };
    let (labelled_after, labelled_bytes) = labelled.scrape();
    let (plain_after, plain_bytes) = plain.scrape();

    let d = |after: &str, before: &str, f: fn(&str, &str) -> f64, reason: &str| {
        f(after, reason) - f(before, reason)
    };
    for (reason, oracle, what) in [
        ("NO_SOCKET", no_ports, "Udp6NoPorts"),
        ("NETFILTER_DROP", nft, "the nft rule's counter"),
    ] {
        let v6 = d(&labelled_after, &labelled_before, ipv6, reason);
        let labelled_all = d(&labelled_after, &labelled_before, all_protocols, reason);
        let plain_all = d(&plain_after, &plain_before, all_protocols, reason);
        eprintln!(
            "{reason}: ipv6 +{v6} ({what} +{oracle}); all protocols +{labelled_all}, \
             without the label +{plain_all}"
        );
        // Exact against the kernel, give or take other IPv6 drops of the
        // same reason elsewhere on the host.
        assert!(
            (oracle as f64..=oracle as f64 + 5.0).contains(&v6),
            "{reason}{{protocol=ipv6}} +{v6}, {what} +{oracle}"
        );
        // Without the label the same drops, all in one row; its window is
        // a few µs longer.
        assert!(
            (labelled_all..=labelled_all * 1.01 + 5.0).contains(&plain_all),
            "{reason} without the label +{plain_all}, with it +{labelled_all}"
        );
    }
    assert!(
        no_ports >= UDP,
        "Udp6NoPorts +{no_ports} for {UDP} datagrams"
    );
    assert_eq!(nft, NFT, "the rule dropped every datagram");
    check_reads(plain, plain_bytes);
    check_reads(labelled, labelled_bytes);
}

/// Only counters in use were read: each has a count (counters start at
/// zero with this probe instance and only grow), protocol rows the probe
/// does not keep were never read, and the bytes the kernel copied out are
/// exactly the bitmap words of the rows kept plus one u64 per CPU per
/// counter read, not one per possible reason (481 per protocol).
fn check_reads(p: &mut Probe, bytes: usize) {
    let read: Vec<(usize, usize, u64)> = p.collector.reader().totals().collect();
    let label = p.protocol_label;
    eprintln!("protocol label {label}: read {read:?}, {bytes} bytes");
    assert!(
        read.len() >= 2,
        "NO_SOCKET and NETFILTER_DROP at least: {read:?}"
    );
    for &(proto, slot, total) in &read {
        assert!(
            total > 0,
            "read protocol {proto} slot {slot}, which is not in use"
        );
        if !label {
            assert_eq!(proto, 0, "protocol rows read without the label");
        }
    }
    let cpus = usescope::probes::percpu::possible_cpus().unwrap();
    let rows = if label { 4 } else { 1 };
    let words = (rows * DROPS_SLOTS).div_ceil(64);
    assert!(words <= DROPS_USED_WORDS);
    assert_eq!(bytes, (words + read.len()) * cpus * 8, "{read:?}");
    assert!(read.len() < DROPS_SLOTS / 4);
}
