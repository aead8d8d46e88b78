//! The oomkill probe against the kernel's own count of OOM kills, in memory
//! cgroups the test makes and drives to OOM (v1 where the memory controller
//! is mounted there, else v2, as the probe chooses).
//!
//! - Oracle: the cgroup's `oom_kill` count (v1 memory.oom_control, v2
//!   memory.events). The probe's series for the cgroup must rise by
//!   exactly that, the host total by at least that (other cgroups may be
//!   killed at the same time), and every series must add up to the host
//!   total.
//! - A cgroup whose process is not killed has no series.
//! - After the cgroup is removed its kills are still exported under its
//!   label.
//! - `--probe.oomkill.max-cgroups=1`: a second victim cgroup, while the
//!   first is alive, finds the kernel map full (`cgroup="other"`,
//!   `folded{reason="map_full"}`); once the first is removed, a third
//!   victim has a map entry but no series left (`series_limit`).
//!
//! Needs root and BPF (skips otherwise; fails under USESCOPE_REQUIRE_BPF=1
//! or CI=true). Host-wide probe, so the tests run one at a time.

mod common;

use std::sync::{Mutex, MutexGuard};

use common::bpf_objects::{probe_up, raw_tp_scraper};
use common::memcg::MemCgroup;
use common::{Daemon, can_run_bpf, sample, sum_of};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

const BASE: &[&str] = &[
    "--collector.disable-defaults",
    "--collector.loadavg",
    "--no-probe.runqlat",
    "--no-probe.cachestat",
    "--no-probe.drops",
    "--probe.oomkill",
];

const LIMIT: u64 = 32 << 20;
const HOST: &str = "usescope_oom_kills_total";
const FAMILY: &str = "usescope_cgroup_oom_kills_total";

/// Allocates 1 MiB strings until the OOM killer ends it; killed after 60 s
/// at the latest, so the test is bounded.
const HOG: &str = "timeout -s KILL 60 perl -e 'push @a, \"x\" x 1048576 while 1'";

/// A memory cgroup named `*.scope` (selected by the cgroup collector's
/// default), and its label.
fn cgroup(tag: &str) -> Option<(MemCgroup, String)> {
    let name = format!("usescope-oom-{}-{tag}.scope", std::process::id());
    match MemCgroup::create(&name, LIMIT) {
        Ok(cg) => Some((cg, format!("/{name}"))),
        Err(e) => {
            common::skip::unless_met(false, &format!("a memory cgroup ({e})"));
            None
        }
    }
}

fn series_of(label: &str) -> String {
    format!("{FAMILY}{{cgroup=\"{label}\",container_id=\"\",pod_uid=\"\"}}")
}

fn other_series() -> String {
    series_of("other")
}

fn value(expo: &str, series: &str) -> f64 {
    sample(expo, series).unwrap_or_else(|| panic!("{series} missing from:\n{expo}"))
}

/// Runs the hog in `cg` and returns the kernel's count of kills it caused.
fn oom_kill(cg: &MemCgroup) -> u64 {
    let before = cg.oom_kills();
    let status = cg.run(HOG);
    let kills = cg.oom_kills() - before;
    eprintln!("hog: {status}, kernel oom_kill +{kills}");
    assert!(kills >= 1, "the hog was not OOM-killed ({status})");
    kills
}

#[test]
fn kills_are_counted_by_the_victims_cgroup_and_kept_after_it_is_gone() {
    let _serial = serial();
    if !can_run_bpf() {
        return;
    }
    let Some((victim, label)) = cgroup("victim") else {
        return;
    };
    let Some((quiet, quiet_label)) = cgroup("quiet") else {
        return;
    };
    let d = Daemon::start(BASE);
    let before = d.scrape();
    if !probe_up(&d, &before, "oomkill") {
        return;
    }
    assert_eq!(sample(&before, &series_of(&label)), None);

    let kills = oom_kill(&victim);
    // The quiet cgroup's process ends normally within its limit.
    let status = quiet.run("perl -e '$s = \"x\" x 1048576'");
    assert!(status.success(), "quiet process: {status}");
    assert_eq!(quiet.oom_kills(), 0);

    let after = d.scrape();
    assert_eq!(
        value(&after, &series_of(&label)),
        kills as f64,
        "the oracle"
    );
    let host = value(&after, HOST) - value(&before, HOST);
    assert!(host >= kills as f64, "host total +{host} < {kills}");
    assert_eq!(
        sample(&after, &series_of(&quiet_label)),
        None,
        "a cgroup without a kill has no series"
    );
    assert_eq!(sum_of(&after, FAMILY), value(&after, HOST), "series add up");

    // Removed: the kills stay under the label the cgroup had.
    drop(victim);
    drop(quiet);
    let gone = d.scrape();
    assert_eq!(value(&gone, &series_of(&label)), kills as f64);
    let again = d.scrape();
    assert_eq!(value(&again, &series_of(&label)), kills as f64);
    assert_eq!(sum_of(&again, FAMILY), value(&again, HOST));
}

#[test]
fn max_cgroups_folds_further_victims_into_other() {
    let _serial = serial();
    if !can_run_bpf() {
        return;
    }
    let Some((first, first_label)) = cgroup("first") else {
        return;
    };
    let Some((second, second_label)) = cgroup("second") else {
        return;
    };
    let Some((third, third_label)) = cgroup("third") else {
        return;
    };
    let mut args = BASE.to_vec();
    args.push("--probe.oomkill.max-cgroups=1");
    let d = Daemon::start(&args);
    let s0 = d.scrape();
    if !probe_up(&d, &s0, "oomkill") {
        return;
    }
    let folded = |expo: &str, reason: &str| {
        value(
            expo,
            &format!("usescope_cgroup_oom_kills_folded_total{{reason=\"{reason}\"}}"),
        )
    };

    let k1 = oom_kill(&first);
    let s1 = d.scrape();
    assert_eq!(value(&s1, &series_of(&first_label)), k1 as f64);

    // The first cgroup still holds the kernel map's one entry.
    let k2 = oom_kill(&second);
    let s2 = d.scrape();
    assert_eq!(sample(&s2, &series_of(&second_label)), None);
    assert_eq!(value(&s2, &series_of(&first_label)), k1 as f64);
    let full = folded(&s2, "map_full") - folded(&s1, "map_full");
    assert!(full >= k2 as f64, "map_full +{full} < {k2}");
    let other = value(&s2, &other_series()) - value(&s1, &other_series());
    assert!(other >= k2 as f64, "other +{other} < {k2}");

    // The first removed: its entry is freed, its series stays, so the
    // third gets the entry but no series of its own.
    drop(first);
    let s3 = d.scrape();
    assert_eq!(value(&s3, &series_of(&first_label)), k1 as f64);
    let k3 = oom_kill(&third);
    let s4 = d.scrape();
    assert_eq!(sample(&s4, &series_of(&third_label)), None);
    let limit = folded(&s4, "series_limit") - folded(&s3, "series_limit");
    assert_eq!(limit, k3 as f64, "series_limit");
    let other = value(&s4, &other_series()) - value(&s3, &other_series());
    assert!(other >= k3 as f64, "other +{other} < {k3}");
    assert_eq!(sum_of(&s4, FAMILY), value(&s4, HOST), "series add up");
    drop((second, third));
}

/// The raw_tp copy of the program (kernels that refuse tp_btf), loaded in
/// this process and read by the daemon's collector: it reads the victim's
/// cgroup through bpf_probe_read_kernel as the tp_btf one does in place.
#[test]
fn the_raw_tp_fallback_counts_by_cgroup_too() {
    use usescope::probes::{Kernel, ProbeSettings, oomkill};

    let _serial = serial();
    if !can_run_bpf() {
        return;
    }
    let Some((victim, label)) = cgroup("raw") else {
        return;
    };
    let settings = ProbeSettings::default();
    let loaded =
        Kernel::open().and_then(|k| oomkill::load_modes(&k, &settings, &oomkill::MODES[1..]));
    let Some((_loaded, mut scrape)) = raw_tp_scraper(
        "oomkill",
        loaded,
        oomkill::MAP,
        oomkill::collector,
        &settings,
    ) else {
        return;
    };
    let before = scrape();
    let kills = oom_kill(&victim);
    let after = scrape();
    assert_eq!(
        value(&after, &series_of(&label)),
        kills as f64,
        "the oracle"
    );
    assert!(value(&after, HOST) - value(&before, HOST) >= kills as f64);
    assert_eq!(sum_of(&after, FAMILY), value(&after, HOST), "series add up");
}
