//! One entry point per usescope parser, shared by the libFuzzer targets in
//! `fuzz_targets/` and by `exporter/tests/parsers_fuzz_smoke.rs` (which
//! includes this file with `#[path]`), so both exercise exactly the same
//! calls. Every entry point drains iterators and touches every accessor:
//! a lazy parser only fails (or panics) when it is driven to the end.

use std::hint::black_box;

use usescope::collectors::{
    conntrack, diskstats, interrupts, loadavg, meminfo, netdev, netstat, pressure, schedstat,
    sockstat, softirqs, softnet, stat, uname, vmstat, zoneinfo,
};
use usescope::probes::btf;

/// A text parser's fuzz entry point: `name` is also the fuzz target's name
/// and its corpus directory, `seeds` are fixture paths relative to a /proc
/// root that seed its corpus.
pub struct Target {
    pub name: &'static str,
    pub run: fn(&str),
    pub seeds: &'static [&'static str],
}

pub const TEXT_TARGETS: &[Target] = &[
    Target {
        name: "conntrack_sysctl",
        run: conntrack_sysctl,
        seeds: &[
            "sys/net/netfilter/nf_conntrack_max",
            "sys/net/netfilter/nf_conntrack_count",
        ],
    },
    Target {
        name: "conntrack_stat",
        run: conntrack_stat,
        seeds: &["net/stat/nf_conntrack"],
    },
    Target {
        name: "diskstats",
        run: diskstats,
        seeds: &["diskstats"],
    },
    Target {
        name: "interrupts",
        run: interrupts,
        seeds: &["interrupts"],
    },
    Target {
        name: "loadavg",
        run: loadavg,
        seeds: &["loadavg"],
    },
    Target {
        name: "meminfo",
        run: meminfo,
        seeds: &["meminfo"],
    },
    Target {
        name: "netdev",
        run: netdev,
        seeds: &["net/dev"],
    },
    Target {
        name: "netstat",
        run: netstat,
        seeds: &["net/netstat", "net/snmp"],
    },
    Target {
        name: "snmp6",
        run: snmp6,
        seeds: &["net/snmp6"],
    },
    Target {
        name: "pressure",
        run: pressure,
        seeds: &["pressure/cpu", "pressure/io", "pressure/memory"],
    },
    Target {
        name: "schedstat",
        run: schedstat,
        seeds: &["schedstat"],
    },
    Target {
        name: "sockstat",
        run: sockstat,
        seeds: &["net/sockstat", "net/sockstat6"],
    },
    Target {
        name: "softirqs",
        run: softirqs,
        seeds: &["softirqs"],
    },
    Target {
        name: "softnet",
        run: softnet,
        seeds: &["net/softnet_stat"],
    },
    Target {
        name: "stat",
        run: stat,
        seeds: &["stat"],
    },
    Target {
        name: "uname",
        run: uname,
        seeds: &[
            "sys/kernel/ostype",
            "sys/kernel/osrelease",
            "sys/kernel/domainname",
            "sys/kernel/version",
            "sys/kernel/hostname",
        ],
    },
    Target {
        name: "vmstat",
        run: vmstat,
        seeds: &["vmstat"],
    },
    Target {
        name: "zoneinfo",
        run: zoneinfo,
        seeds: &["zoneinfo"],
    },
    Target {
        name: "self_stat",
        run: self_stat,
        seeds: &[],
    },
];

/// Looks a text target up by name (the fuzz binaries' entry).
pub fn text_target(name: &str) -> &'static Target {
    TEXT_TARGETS
        .iter()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("no fuzz target {name}"))
}

/// libFuzzer hands over bytes; the collectors only ever see valid UTF-8
/// (SourceFile rejects the rest), so invalid sequences become U+FFFD rather
/// than being thrown away, which keeps every input useful.
pub fn run_bytes(target: &Target, data: &[u8]) {
    (target.run)(&String::from_utf8_lossy(data));
}

pub fn conntrack_sysctl(s: &str) {
    let _ = black_box(conntrack::parse_sysctl(s));
}

pub fn conntrack_stat(s: &str) {
    let _ = black_box(conntrack::parse_stat(s));
}

pub fn diskstats(s: &str) {
    for disk in diskstats::parse(s) {
        let _ = black_box(disk);
    }
}

pub fn interrupts(s: &str) {
    let Ok(parsed) = interrupts::parse(s) else {
        return;
    };
    let mut buf = String::new();
    for row in parsed.rows(s) {
        black_box(interrupts::normalize(row.info, &mut buf));
        black_box(interrupts::normalize(row.devices, &mut buf));
        black_box((row.name, row.counts));
    }
}

pub fn loadavg(s: &str) {
    let _ = black_box(loadavg::parse(s));
}

pub fn meminfo(s: &str) {
    if let Ok(m) = meminfo::parse(s) {
        black_box(m.get("MemTotal"));
        black_box(m.get("Active(anon)"));
        black_box(m.get("HugePages_Total"));
    }
}

pub fn netdev(s: &str) {
    let Ok(ifaces) = netdev::parse(s) else {
        return;
    };
    for iface in ifaces {
        let _ = black_box(iface);
    }
}

pub fn netstat(s: &str) {
    for section in netstat::parse(s).flatten() {
        for field in section.fields() {
            black_box(field);
        }
    }
}

pub fn snmp6(s: &str) {
    for field in netstat::parse_snmp6(s) {
        let _ = black_box(field);
    }
}

pub fn pressure(s: &str) {
    let _ = black_box(pressure::parse(s));
}

pub fn schedstat(s: &str) {
    let _ = black_box(schedstat::parse(s));
}

pub fn sockstat(s: &str) {
    for line in sockstat::parse(s).flatten() {
        for pair in line.pairs() {
            black_box(pair);
        }
    }
}

pub fn softirqs(s: &str) {
    if let Ok(parsed) = softirqs::parse(s) {
        for row in parsed.rows() {
            black_box(row);
        }
    }
}

pub fn softnet(s: &str) {
    for row in softnet::parse(s) {
        let _ = black_box(row);
    }
}

pub fn stat(s: &str) {
    let Ok(parsed) = stat::parse(s) else {
        return;
    };
    // The collector clamps each CPU against the previous scrape; feeding
    // every row against itself and against the first exercises that too.
    let first = parsed.cpus.first().map(|(_, t)| *t);
    for (_, ticks) in &parsed.cpus {
        black_box(stat::clamp(Some(ticks), ticks));
        black_box(stat::clamp(first.as_ref(), ticks));
    }
}

pub fn uname(s: &str) {
    let _ = black_box(uname::parse(s));
}

pub fn vmstat(s: &str) {
    for field in vmstat::parse(s) {
        if let Ok(f) = &field {
            black_box(vmstat::selected(f.name));
        }
        let _ = black_box(field);
    }
}

pub fn zoneinfo(s: &str) {
    let mut zones = Vec::new();
    if zoneinfo::parse_into(s, &mut zones).is_ok() {
        for zone in &zones {
            black_box(zone.get("nr_free_pages"));
            black_box(zone.protection());
        }
    }
}

pub fn self_stat(s: &str) {
    black_box(usescope::self_metrics::parse_proc_self_stat(s));
}

/// The BTF reader takes raw bytes (the kernel's /sys/kernel/btf blobs). The
/// blob is also parsed as split BTF on top of itself, which drives the
/// string lookups across the base/module boundary.
pub fn btf(data: &[u8]) {
    let Ok(base) = btf::Btf::parse(data) else {
        return;
    };
    if let Ok(enums) = base.enums() {
        black_box(btf::find_enum(&enums, "skb_drop_reason"));
    }
    if let Ok(split) = btf::Btf::parse_split(data, Some(&base)) {
        let _ = black_box(split.enums());
    }
}
