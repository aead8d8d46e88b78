//! The drops probe at scale: a scrape reads only the counters in use, and
//! they stay exact against the kernel's own counters.
//!
//! Each test loads its own instance of the probe in this process (its own
//! maps, so every counter starts at zero) and reads it with the daemon's
//! collector. Oracles: /proc/net/snmp `Udp: NoPorts` (IPv4) or
//! /proc/net/snmp6 `Udp6NoPorts` (IPv6, the protocol-label test) for
//! NO_SOCKET, and the packet counter of an nftables drop rule (in a network
//! namespace of its own, so the host's ruleset is never touched) for
//! NETFILTER_DROP.
//!
//! Needs root, `unshare`, `ip` and `nft` (scripts/setup.sh); skips
//! otherwise, and fails under USESCOPE_REQUIRE_BPF=1 / CI=true.

mod common;

use std::os::fd::AsFd;
use std::process::Command;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use aya::maps::Map;
use common::{can_run_bpf, sample, skip, udp_to_closed_port_on};
use usescope::collector::Collector;
use usescope::exposition::{Encoder, Format};
use usescope::probes::drops::{self, DropsCollector};
use usescope::probes::layout::{DROPS_SLOTS, DROPS_USED_WORDS};
use usescope::probes::{Kernel, Loaded, ProbeSettings};

/// Both tests make drops that both tests' probes see: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// The probe attached (kept alive by the returned `Loaded`) and the
/// daemon's collector over its map.
fn attach(protocol_label: bool) -> Option<(Loaded, DropsCollector)> {
    let settings = ProbeSettings {
        drops_protocol_label: protocol_label,
        ..ProbeSettings::default()
    };
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

/// The traffic of a test: IPv4 without the protocol label; IPv6 with it,
/// which also keeps the test's drops apart from IPv4 traffic elsewhere on
/// the host (the probe counts host-wide).
#[derive(Clone, Copy)]
enum Family {
    V4,
    V6,
}

impl Family {
    fn loopback(self) -> &'static str {
        match self {
            Family::V4 => "127.0.0.1",
            Family::V6 => "::1",
        }
    }

    /// The `protocol` label value.
    fn protocol(self) -> &'static str {
        match self {
            Family::V4 => "ipv4",
            Family::V6 => "ipv6",
        }
    }

    /// Datagrams to a port nothing listens on, each of which the kernel
    /// frees as NO_SOCKET: `Udp: NoPorts` in /proc/net/snmp, or
    /// `Udp6NoPorts` in /proc/net/snmp6.
    fn udp_no_ports(self) -> u64 {
        match self {
            Family::V4 => {
                let snmp = std::fs::read_to_string("/proc/net/snmp").unwrap();
                let mut udp = snmp.lines().filter(|l| l.starts_with("Udp: "));
                let (names, values) = (udp.next().unwrap(), udp.next().unwrap());
                let i = names
                    .split_whitespace()
                    .position(|n| n == "NoPorts")
                    .unwrap();
                values.split_whitespace().nth(i).unwrap().parse().unwrap()
            }
            Family::V6 => std::fs::read_to_string("/proc/net/snmp6")
                .unwrap()
                .lines()
                .find_map(|l| l.strip_prefix("Udp6NoPorts"))
                .unwrap()
                .trim()
                .parse()
                .unwrap(),
        }
    }
}

/// In a new network namespace: an nftables rule that counts and drops UDP
/// to port 9 of the loopback address on output, `n` datagrams sent there;
/// returns the rule's packet counter. None after a skip.
fn nft_dropped(family: Family, n: usize) -> Option<u64> {
    let (af, addr, proto) = match family {
        Family::V4 => ("AF_INET", "127.0.0.1", "ip"),
        Family::V6 => ("AF_INET6", "::1", "ip6"),
    };
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
nft add rule inet usescope_test out {proto} daddr {addr} udp dport 9 counter drop
python3 -c '
import socket
s = socket.socket(socket.{af}, socket.SOCK_DGRAM)
for _ in range({n}):
    try:
        s.sendto(b"usescope", ("{addr}", 9))
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

fn series(protocol_label: bool, family: Family, reason: &str) -> String {
    if protocol_label {
        let protocol = family.protocol();
        format!("usescope_skb_drops_total{{protocol=\"{protocol}\",reason=\"{reason}\"}}")
    } else {
        format!("usescope_skb_drops_total{{reason=\"{reason}\"}}")
    }
}

/// Datagrams sent to a closed port, and into the nftables drop rule.
const UDP: u64 = 1000;
const NFT: u64 = 500;

/// The probe counts drops host-wide, and other processes drop packets too
/// (on a shared machine, other tests). An attempt that saw more drops of a
/// reason than its oracle plus 1% + 5 is repeated, up to this many times;
/// fewer than the oracle fails at once (a lost count never comes from
/// elsewhere).
const ATTEMPTS: usize = 3;

/// One round of traffic under both oracles, and what the scrape after it
/// read and reported.
struct Round {
    no_socket: f64,
    no_ports: u64,
    netfilter: f64,
    nft: u64,
    bytes: usize,
}

fn round(c: &mut DropsCollector, protocol_label: bool, family: Family) -> Option<Round> {
    let before = scrape(c);
    let no_ports = family.udp_no_ports();
    udp_to_closed_port_on(family.loopback(), UDP as usize);
    let no_ports = family.udp_no_ports() - no_ports;
    let nft = nft_dropped(family, NFT as usize)?;
    c.reader().take_bytes_read();
    let after = scrape(c);
    let delta = |reason: &str| {
        let s = series(protocol_label, family, reason);
        sample(&after, &s).unwrap_or(0.0) - sample(&before, &s).unwrap_or(0.0)
    };
    Some(Round {
        no_socket: delta("NO_SOCKET"),
        no_ports,
        netfilter: delta("NETFILTER_DROP"),
        nft,
        bytes: c.reader().take_bytes_read(),
    })
}

/// Whether `got` is the oracle's count, give or take other drops on the
/// host; panics if it is below.
fn matches(what: &str, got: f64, oracle: u64) -> bool {
    assert!(
        got >= oracle as f64,
        "{what}: +{got}, oracle +{oracle}: counts lost"
    );
    got <= oracle as f64 * 1.01 + 5.0
}

/// Drops under both oracles, then checks what the scrape read and what it
/// reported.
fn reads_only_counters_in_use(protocol_label: bool, family: Family) {
    if !can_run_bpf() {
        return;
    }
    let _g = serial();
    let Some((_probe, mut c)) = attach(protocol_label) else {
        return;
    };
    for attempt in 1..=ATTEMPTS {
        let Some(r) = round(&mut c, protocol_label, family) else {
            return;
        };
        eprintln!(
            "label {protocol_label}, attempt {attempt}: NO_SOCKET +{} (Udp NoPorts +{}), \
             NETFILTER_DROP +{} (nft counter {}), {} bytes read",
            r.no_socket, r.no_ports, r.netfilter, r.nft, r.bytes
        );
        assert!(
            r.no_ports >= UDP,
            "Udp NoPorts +{} for {UDP} datagrams",
            r.no_ports
        );
        assert_eq!(r.nft, NFT, "the rule dropped every datagram");
        let no_socket = matches("NO_SOCKET", r.no_socket, r.no_ports);
        let netfilter = matches("NETFILTER_DROP", r.netfilter, r.nft);
        if no_socket && netfilter {
            check_reads(&mut c, protocol_label, r.bytes);
            return;
        }
    }
    panic!("more drops than the oracles count in all {ATTEMPTS} attempts (see above)");
}

/// Only counters in use were read: each has a count (counters start at
/// zero with this probe instance and only grow), protocol rows the probe
/// does not keep were never read, and the bytes the kernel copied out are
/// exactly the bitmap words of the rows kept plus one u64 per CPU per
/// counter read, not one per possible reason (481 per protocol).
fn check_reads(c: &mut DropsCollector, protocol_label: bool, bytes: usize) {
    let read: Vec<(usize, usize, u64)> = c.reader().totals().collect();
    assert!(
        read.len() >= 2,
        "NO_SOCKET and NETFILTER_DROP at least: {read:?}"
    );
    for &(proto, slot, total) in &read {
        assert!(
            total > 0,
            "read protocol {proto} slot {slot}, which is not in use"
        );
        if !protocol_label {
            assert_eq!(proto, 0, "protocol rows read without the label");
        }
    }
    let cpus = usescope::probes::percpu::possible_cpus().unwrap();
    let rows = if protocol_label { 4 } else { 1 };
    let words = (rows * DROPS_SLOTS).div_ceil(64);
    assert!(words <= DROPS_USED_WORDS);
    assert_eq!(bytes, (words + read.len()) * cpus * 8, "{read:?}");
    assert!(read.len() < DROPS_SLOTS / 4);
}

#[test]
fn without_protocol_label_reads_only_protocol_0_counters_in_use() {
    reads_only_counters_in_use(false, Family::V4);
}

#[test]
fn with_protocol_label_reads_only_counters_in_use() {
    reads_only_counters_in_use(true, Family::V6);
}
