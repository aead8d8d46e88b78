//! The drops probe at scale: a scrape reads only the counters in use, and
//! they stay exact against the kernel's own counters.
//!
//! Each test loads its own instance of the probe in this process (its own
//! maps, so every counter starts at zero) and reads it with the daemon's
//! collector. Oracles: /proc/net/snmp `Udp: NoPorts` for NO_SOCKET, and the
//! packet counter of an nftables drop rule (in a network namespace of its
//! own, so the host's ruleset is never touched) for NETFILTER_DROP.
//!
//! Needs root, `unshare`, `ip` and `nft` (scripts/setup.sh); skips
//! otherwise, and fails under USESCOPE_REQUIRE_BPF=1 / CI=true.

mod common;

use std::os::fd::AsFd;
use std::process::Command;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use aya::maps::Map;
use common::{can_run_bpf, sample, skip, udp_to_closed_port};
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

/// `Udp: NoPorts` from /proc/net/snmp: datagrams to a port nothing
/// listens on, each of which the kernel frees as NO_SOCKET.
fn udp_no_ports() -> u64 {
    let snmp = std::fs::read_to_string("/proc/net/snmp").unwrap();
    let mut udp = snmp.lines().filter(|l| l.starts_with("Udp: "));
    let (names, values) = (udp.next().unwrap(), udp.next().unwrap());
    let i = names
        .split_whitespace()
        .position(|n| n == "NoPorts")
        .unwrap();
    values.split_whitespace().nth(i).unwrap().parse().unwrap()
}

/// In a new network namespace: an nftables rule that counts and drops UDP
/// to 127.0.0.1:9 on output, `n` datagrams sent there; returns the rule's
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
nft add rule inet usescope_test out ip daddr 127.0.0.1 udp dport 9 counter drop
python3 -c '
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for _ in range({n}):
    try:
        s.sendto(b"usescope", ("127.0.0.1", 9))
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

fn series(protocol_label: bool, reason: &str) -> String {
    if protocol_label {
        format!("usescope_skb_drops_total{{protocol=\"ipv4\",reason=\"{reason}\"}}")
    } else {
        format!("usescope_skb_drops_total{{reason=\"{reason}\"}}")
    }
}

/// Drops under both oracles, then checks what the scrape read and what it
/// reported.
fn reads_only_counters_in_use(protocol_label: bool) {
    if !can_run_bpf() {
        return;
    }
    let _g = serial();
    let Some((_probe, mut c)) = attach(protocol_label) else {
        return;
    };
    let before = scrape(&mut c);
    let no_ports = udp_no_ports();
    udp_to_closed_port(300);
    let no_ports = udp_no_ports() - no_ports;
    let Some(nft) = nft_dropped(200) else {
        return;
    };
    c.reader().take_bytes_read();
    let after = scrape(&mut c);
    let bytes = c.reader().take_bytes_read();

    // Exact against the kernel's counters; a few other drops of the same
    // reason elsewhere on the host are tolerated.
    let delta = |reason: &str| {
        let s = series(protocol_label, reason);
        sample(&after, &s).unwrap_or(0.0) - sample(&before, &s).unwrap_or(0.0)
    };
    let (no_socket, netfilter) = (delta("NO_SOCKET"), delta("NETFILTER_DROP"));
    eprintln!(
        "label {protocol_label}: NO_SOCKET +{no_socket} (Udp NoPorts +{no_ports}), \
         NETFILTER_DROP +{netfilter} (nft counter {nft}), {bytes} bytes read"
    );
    assert!(
        no_ports >= 300,
        "Udp NoPorts rose by {no_ports} for 300 datagrams"
    );
    assert!(
        (no_ports as f64..=no_ports as f64 + 5.0).contains(&no_socket),
        "NO_SOCKET +{no_socket}, Udp NoPorts +{no_ports}"
    );
    assert_eq!(nft, 200, "the rule dropped every datagram");
    assert!(
        (nft as f64..=nft as f64 + 2.0).contains(&netfilter),
        "NETFILTER_DROP +{netfilter}, nft counter {nft}"
    );

    // Only counters in use were read: each has a count (counters start at
    // zero with this probe instance and only grow), and protocol rows the
    // probe does not keep were never read.
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
    // And the bytes the kernel copied out are exactly the bitmap words of
    // the rows kept plus one u64 per CPU per counter read, not one per
    // possible reason (481 counters per protocol).
    let cpus = usescope::probes::percpu::possible_cpus().unwrap();
    let rows = if protocol_label { 4 } else { 1 };
    let words = (rows * DROPS_SLOTS).div_ceil(64);
    assert!(words <= DROPS_USED_WORDS);
    assert_eq!(bytes, (words + read.len()) * cpus * 8, "{read:?}");
    assert!(read.len() < DROPS_SLOTS / 4);
}

#[test]
fn without_protocol_label_reads_only_protocol_0_counters_in_use() {
    reads_only_counters_in_use(false);
}

#[test]
fn with_protocol_label_reads_only_counters_in_use() {
    reads_only_counters_in_use(true);
}
