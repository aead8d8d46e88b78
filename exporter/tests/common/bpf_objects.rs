//! What the probe tests ask of the kernel about a daemon's eBPF side:
//! whether a probe is up (a skip when not, a failure in CI), which
//! programs, maps and links it holds, and that they are gone after exit.

use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

use aya::maps::Map;
use usescope::probes::loader::ProbeError;
use usescope::probes::{Loaded, ProbeSettings};
use usescope::scrape::collector::Collector;
use usescope::scrape::exposition::{Encoder, Format};

use super::{Daemon, sample, skip};

/// Whether `probe` is up. Down is a skip, and a failure in CI (a probe that
/// silently reports 0 must not pass CI).
pub fn probe_up(d: &Daemon, expo: &str, probe: &str) -> bool {
    let up = sample(expo, &format!("usescope_probe_up{{probe=\"{probe}\"}}"));
    if up == Some(1.0) {
        return true;
    }
    let log = d.log().join("\n");
    skip::unless_met(
        false,
        &format!("probe {probe} up (usescope_probe_up is {up:?}); log: {log}"),
    )
}

/// BPF object ids (`prog_id`, `map_id` or `link_id`) held by a process,
/// from its fds' fdinfo.
pub fn fdinfo_ids(pid: u32, field: &str) -> Vec<u32> {
    let mut ids = Vec::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/fdinfo")).unwrap() {
        let Ok(text) = std::fs::read_to_string(e.unwrap().path()) else {
            continue;
        };
        ids.extend(
            text.lines()
                .filter_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
                .filter_map(|v| v.trim().parse::<u32>().ok()),
        );
    }
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// (program, map, link) ids of a daemon: the programs and links it holds,
/// and every map those programs use (start maps too, which only the
/// programs hold).
pub fn objects_of(pid: u32) -> (Vec<u32>, Vec<u32>, Vec<u32>) {
    let progs = fdinfo_ids(pid, "prog_id");
    let mut maps: Vec<u32> = aya::programs::loaded_programs()
        .filter_map(Result::ok)
        .filter(|p| progs.contains(&p.id()))
        .flat_map(|p| p.map_ids().ok().flatten().unwrap_or_default())
        .collect();
    maps.sort_unstable();
    maps.dedup();
    (progs, maps, fdinfo_ids(pid, "link_id"))
}

/// Ids of every BPF program, map and link loaded on the host.
fn loaded_ids() -> (Vec<u32>, Vec<u32>, Vec<u32>) {
    let progs = aya::programs::loaded_programs()
        .filter_map(Result::ok)
        .map(|p| p.id())
        .collect();
    let maps = aya::maps::loaded_maps()
        .filter_map(Result::ok)
        .map(|m| m.id())
        .collect();
    let links = aya::programs::loaded_links()
        .filter_map(Result::ok)
        .map(|l| l.id())
        .collect();
    (progs, maps, links)
}

/// Asserts that none of these programs, maps and links is still loaded.
/// The kernel frees programs asynchronously (RCU, then a workqueue) after
/// their last fd closes, so it gets up to 5 s.
pub fn assert_released(progs: &[u32], maps: &[u32], links: &[u32]) {
    let mut left = (vec![], vec![], vec![]);
    for _ in 0..100 {
        let (p, m, l) = loaded_ids();
        left = (
            p.into_iter().filter(|id| progs.contains(id)).collect(),
            m.into_iter().filter(|id| maps.contains(id)).collect(),
            l.into_iter().filter(|id| links.contains(id)).collect(),
        );
        if left.0.is_empty() && left.1.is_empty() && left.2.is_empty() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        left,
        (vec![], vec![], vec![]),
        "(programs, maps, links) that survived shutdown"
    );
}

/// The raw_tp copy of a probe (for kernels that refuse tp_btf), loaded in
/// this process by the test (`loaded`), and a scrape of the daemon's own
/// collector over its per-CPU counters map `map`. None when the copy did
/// not load: a skip outside CI, a failure in it. Keep the returned Loaded
/// while scraping: dropping it detaches the programs.
pub fn raw_tp_scraper(
    probe: &str,
    loaded: Result<Loaded, ProbeError>,
    map: &str,
    collector: CollectorFn,
    settings: &ProbeSettings,
) -> Option<(Loaded, impl FnMut() -> String)> {
    let why = format!(
        "the raw_tp {probe} program to load: {:?}",
        loaded.as_ref().err()
    );
    if !skip::unless_met(loaded.is_ok(), &why) {
        return None;
    }
    let loaded = loaded.unwrap();
    assert_eq!(loaded.mode.name, "raw_tp");
    let Some(Map::PerCpuArray(counters)) = loaded.ebpf.map(map) else {
        panic!("map {map} is not a per-CPU array");
    };
    let fd = counters.fd().as_fd().try_clone_to_owned().unwrap();
    let mut collector = collector(fd, loaded.names.clone(), settings).unwrap();
    let scrape = move || {
        let mut buf = Vec::new();
        let mut enc = Encoder::new(&mut buf, Format::PrometheusText);
        collector.collect(&mut enc).unwrap();
        enc.finish();
        String::from_utf8(buf).unwrap()
    };
    Some((loaded, scrape))
}

/// A probe's collector constructor, as its spec names it.
type CollectorFn = fn(OwnedFd, Vec<String>, &ProbeSettings) -> Result<Box<dyn Collector>, String>;
