//! `--probe.tasks.per-cgroup` on the real kernel, in cpu cgroups the test
//! makes (the v1 `cpu` hierarchy where it is mounted, else cgroup2, as the
//! probe chooses), named `usescope-exec-PID-TAG.scope` so the cgroup
//! collector's default selection picks them.
//!
//! - Oracle: the execs the test makes in a cgroup. A dash moves itself
//!   into the cgroup and then runs `/bin/true` N times from a loop of
//!   builtins only (`[`, `$((…))`), so exactly N processes exec there, each
//!   forked by the shell after it joined; nothing else runs in the cgroup.
//!   The cgroup's series must equal N exactly.
//! - The sum over every series (with `other`) against
//!   `usescope_process_execs_total` in the same scrape: the collector reads
//!   the host counter first, then the per-cgroup map, so the sum may exceed
//!   the host count by the execs the host made between the two reads (a
//!   millisecond or so; at most [`BETWEEN_READS`]), and fall short only by
//!   an exec whose program was between its two updates at that moment (one
//!   per CPU at most). The sum never goes down from one scrape to the next.
//! - `--probe.tasks.max-cgroups=1`: a cgroup that found the map full has no
//!   series, its execs are in `other` and in the folded counter.
//! - A removed cgroup's series disappears at the next scrape, its execs
//!   move to `other` (`folded{reason="gone"}`), and the sum does not drop.
//!
//! Needs root and BPF (skips otherwise; fails under USESCOPE_REQUIRE_BPF=1
//! or CI=true). Host-wide probe, so the tests run one at a time.

mod common;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use common::bpf_objects::probe_up;
use common::{Daemon, can_run_bpf, sample, sum_of};
use usescope::probes::cgroup_ids::Hierarchy;

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

const HOST: &str = "usescope_process_execs_total";
const FAMILY: &str = "usescope_cgroup_process_execs_total";
const FOLDED: &str = "usescope_cgroup_process_execs_folded_total";
/// Execs the rest of the host may make between the collector's two reads.
const BETWEEN_READS: f64 = 50.0;

/// A cpu cgroup made by the test; removed on drop, also when the test
/// fails (every process the test runs in it has ended by then).
struct ExecCgroup {
    dir: PathBuf,
    label: String,
}

impl ExecCgroup {
    fn create(tag: &str) -> Option<ExecCgroup> {
        let root = match Hierarchy::find("cpu") {
            Ok(h) => h.root,
            Err(e) => {
                common::skip::unless_met(false, &format!("a cpu cgroup hierarchy ({e})"));
                return None;
            }
        };
        let name = format!("usescope-exec-{}-{tag}.scope", std::process::id());
        let dir = root.join(&name);
        std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
        Some(ExecCgroup {
            dir,
            label: format!("/{name}"),
        })
    }

    /// Execs `/bin/true` `n` times inside the cgroup and returns `n`, the
    /// oracle (see the module doc).
    fn exec(&self, n: u32) -> u64 {
        let procs = self.dir.join("cgroup.procs");
        let script = format!(
            "echo $$ > '{}' || exit 9; i=0; while [ $i -lt {n} ]; do /bin/true || exit 8; i=$((i+1)); done",
            procs.display()
        );
        let status = Command::new("/bin/sh")
            .arg("-c")
            .arg(script)
            .stdin(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "exec loop in {}: {status}", self.label);
        u64::from(n)
    }

    fn series(&self) -> String {
        series_of(&self.label)
    }
}

impl Drop for ExecCgroup {
    fn drop(&mut self) {
        // The shell's last child leaves a moment after it was reaped.
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

/// The sum over the cgroups against the host count of the same scrape
/// (module doc); returns the sum.
fn sums_agree(expo: &str) -> f64 {
    let (host, sum) = (value(expo, HOST), sum_of(expo, FAMILY));
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    assert!(
        sum >= host - cpus && sum - host <= BETWEEN_READS,
        "host {host} execs, sum over cgroups {sum}"
    );
    sum
}

fn start(extra: &[&str]) -> Option<Daemon> {
    let mut args = vec![
        "--collector.disable-defaults",
        "--no-probe.runqlat",
        "--no-probe.cachestat",
        "--no-probe.drops",
        "--probe.tasks",
        "--probe.tasks.per-cgroup",
    ];
    args.extend(extra);
    let d = Daemon::start(&args);
    let expo = d.scrape();
    probe_up(&d, &expo, "tasks").then_some(d)
}

#[test]
fn execs_are_counted_by_cgroup_and_add_up_to_the_host_total() {
    let _g = serial();
    if !can_run_bpf() {
        return;
    }
    let Some(a) = ExecCgroup::create("a") else {
        return;
    };
    let Some(b) = ExecCgroup::create("b") else {
        return;
    };
    let Some(d) = start(&[]) else { return };
    let s0 = d.scrape();
    assert_eq!(sample(&s0, &a.series()), None, "no exec yet");
    let sum0 = sums_agree(&s0);
    let (na, nb) = (a.exec(400), b.exec(40));
    let s1 = d.scrape();
    let (pa, pb) = (value(&s1, &a.series()), value(&s1, &b.series()));
    eprintln!(
        "{}: probe {pa}, execs {na}; {}: probe {pb}, execs {nb}; host {} sum {}",
        a.label,
        b.label,
        value(&s1, HOST),
        sum_of(&s1, FAMILY)
    );
    assert_eq!((pa, pb), (na as f64, nb as f64), "the oracle");
    let sum1 = sums_agree(&s1);
    assert!(sum1 - sum0 >= (na + nb) as f64, "sum +{}", sum1 - sum0);
    // Unchanged at the next scrape: nothing else execs in these cgroups.
    let s2 = d.scrape();
    assert_eq!(value(&s2, &a.series()), na as f64);
    assert!(sums_agree(&s2) >= sum1, "the sum went down");
    assert!(d.stop().success());
}

#[test]
fn past_max_cgroups_execs_are_folded_into_other() {
    let _g = serial();
    if !can_run_bpf() {
        return;
    }
    let Some(a) = ExecCgroup::create("cap-a") else {
        return;
    };
    let Some(b) = ExecCgroup::create("cap-b") else {
        return;
    };
    // One entry: the first cgroup on the host to exec after the start
    // (the test's `a`, or any other) takes it.
    let Some(d) = start(&["--probe.tasks.max-cgroups=1"]) else {
        return;
    };
    let s0 = d.scrape();
    let na = a.exec(400);
    let nb = b.exec(40);
    let s1 = d.scrape();
    let rise = |s: &str| {
        value(&s1, s) - value(&s0, s) // counters in the same daemon
    };
    let full = folded(&s1, "map_full") - folded(&s0, "map_full");
    let limit = folded(&s1, "series_limit") - folded(&s0, "series_limit");
    let other = rise(&series_of("other"));
    let (pa, pb) = (sample(&s1, &a.series()), sample(&s1, &b.series()));
    eprintln!(
        "a: {pa:?} of {na}; b: {pb:?} of {nb}; map_full +{full}, series_limit +{limit}, other +{other}"
    );
    assert_eq!(pb, None, "the second cgroup found the map full");
    // Whichever of the two has no series is in other and folded.
    let folded_here = match pa {
        Some(p) => {
            assert_eq!(p, na as f64, "the first cgroup's series");
            nb
        }
        None => na + nb,
    } as f64;
    assert!(full + limit >= folded_here, "folded +{}", full + limit);
    assert!(other >= folded_here, "other +{other} < {folded_here}");
    sums_agree(&s1);
    assert!(d.stop().success());
}

#[test]
fn a_removed_cgroups_series_goes_and_its_execs_stay_in_the_sum() {
    let _g = serial();
    if !can_run_bpf() {
        return;
    }
    let Some(a) = ExecCgroup::create("gone") else {
        return;
    };
    let Some(b) = ExecCgroup::create("stays") else {
        return;
    };
    let Some(d) = start(&[]) else { return };
    let (na, nb) = (a.exec(400), b.exec(40));
    let s1 = d.scrape();
    assert_eq!(value(&s1, &a.series()), na as f64);
    let sum1 = sums_agree(&s1);
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
    let sum2 = sums_agree(&s2);
    assert!(sum2 >= sum1, "the sum went down: {sum1} -> {sum2}");
    // A new cgroup of the same name is a new series, from zero.
    let again = ExecCgroup::create("gone").unwrap();
    let n = again.exec(7);
    let s3 = d.scrape();
    assert_eq!(value(&s3, &series_of(&label)), n as f64);
    assert!(sums_agree(&s3) >= sum2);
    drop((again, b));
    assert!(d.stop().success());
}
