//! `--probe.runqlat.per-cgroup` on the real kernel, in cpu cgroups the
//! test makes (the v1 `cpu` hierarchy where it is mounted, else cgroup2,
//! as the probe chooses).
//!
//! - Oracle: the scheduler's own run_delay (/proc/PID/schedstat's second
//!   field) summed over a cgroup's threads. Every thread is born into
//!   (or joins first thing) a cgroup made after the daemon attached, and
//!   is stopped (SIGSTOP, so its last wait is recorded at its switch-out)
//!   before both are read, so nothing moves between the two readings.
//! - The cap: more busy cgroups than `--probe.runqlat.max-cgroups` leave
//!   some in `cgroup="other"` and count overflows.
//! - A removed cgroup's series disappears.
//!
//! Needs root and BPF (skips otherwise; fails under USESCOPE_REQUIRE_BPF=1
//! or CI=true). Host-wide probes, so the tests run one at a time.

mod common;

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use common::bpf_objects::probe_up;
use common::{Daemon, can_run_bpf, sample};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

const FAMILY: &str = "usescope_cgroup_runqueue_latency_seconds";

/// A cpu cgroup made by the test, named `*.scope` so the cgroup
/// collector's default selection picks it; its processes are killed and
/// the directory removed on drop, also when the test fails.
struct CpuCgroup {
    dir: PathBuf,
    label: String,
    v1: bool,
    children: Vec<Child>,
    /// Files in which each launching shell wrote its run_delay on joining.
    bases: Vec<PathBuf>,
}

impl CpuCgroup {
    fn create(tag: &str) -> CpuCgroup {
        let (root, v1) =
            common::hierarchy::root_of("cpu").expect("no cpu cgroup hierarchy mounted");
        let name = format!("usescope-rq-{}-{tag}.scope", std::process::id());
        let dir = root.join(&name);
        std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
        CpuCgroup {
            dir,
            label: format!("/{name}"),
            v1,
            children: Vec::new(),
            bases: Vec::new(),
        }
    }

    /// Runs `script` under sh in its own process group, after the shell
    /// has moved itself into the cgroup (its children are born inside) and
    /// noted its run_delay then, the waits it had before, which the probe
    /// put in the test's own cgroup (see [`Self::run_delay_ns`]).
    fn spawn(&mut self, script: &str) {
        let procs = self.dir.join("cgroup.procs");
        let base = std::env::temp_dir().join(format!(
            "{}-{}.base",
            self.label.trim_start_matches('/'),
            self.children.len()
        ));
        let child = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "echo $$ > {} && read _ d _ < /proc/$$/schedstat && echo $d > {} && {script}",
                procs.display(),
                base.display()
            ))
            .stdin(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap();
        self.children.push(child);
        self.bases.push(base);
    }

    fn signal(&self, sig: i32) {
        for c in &self.children {
            // SAFETY: signals the process group this test made.
            unsafe { libc::kill(-(c.id() as i32), sig) };
        }
    }

    fn threads(&self) -> Vec<u32> {
        let file = if self.v1 { "tasks" } else { "cgroup.threads" };
        std::fs::read_to_string(self.dir.join(file))
            .unwrap()
            .lines()
            .map(|l| l.parse().unwrap())
            .collect()
    }

    /// run_delay (ns) summed over the cgroup's threads, less the launching
    /// shells' run_delay when they joined (which [`Self::joined_ns`] also
    /// returns).
    ///
    /// The probe records a wait at the switch-out that ends the run after
    /// it, in the cgroup the task is in then. The wait before the run in
    /// which a shell joined is in its run_delay at joining, but is
    /// recorded in the new cgroup if that run ends after the join: so the
    /// probe may exceed this by at most that one wait, which is at most
    /// the shell's whole run_delay at joining.
    fn run_delay_ns(&self) -> (u64, u64) {
        let now: u64 = self
            .threads()
            .iter()
            .map(|t| {
                let s = std::fs::read_to_string(format!("/proc/{t}/schedstat")).unwrap();
                s.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap()
            })
            .sum();
        let before: u64 = self
            .bases
            .iter()
            .map(|b| {
                let s = std::fs::read_to_string(b).unwrap();
                s.trim().parse::<u64>().unwrap()
            })
            .sum();
        (now - before, before)
    }

    fn kill(&mut self) {
        self.signal(libc::SIGKILL);
        self.signal(libc::SIGCONT);
        for c in &mut self.children {
            let _ = c.wait();
        }
        self.children.clear();
    }
}

impl Drop for CpuCgroup {
    fn drop(&mut self) {
        self.kill();
        for b in &self.bases {
            let _ = std::fs::remove_file(b);
        }
        // The last tasks leave a moment after their parent reaped them.
        let deadline = Instant::now() + Duration::from_secs(5);
        while std::fs::remove_dir(&self.dir).is_err() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn stat(expo: &str, label: &str, what: &str) -> Option<f64> {
    sample(
        expo,
        &format!("{FAMILY}_{what}{{cgroup=\"{label}\",container_id=\"\",pod_uid=\"\"}}"),
    )
}

fn start(extra: &[&str]) -> Option<Daemon> {
    let mut args = vec![
        "--collector.disable-defaults",
        "--no-probe.cachestat",
        "--no-probe.drops",
        "--probe.runqlat.per-cgroup",
    ];
    args.extend(extra);
    let d = Daemon::start(&args);
    let expo = d.scrape();
    probe_up(&d, &expo, "runqlat").then_some(d)
}

const BUSY_LOOP: &str = "while :; do :; done";

#[test]
fn per_cgroup_sum_is_the_run_delay_of_its_threads() {
    if !can_run_bpf() {
        return;
    }
    let _g = serial();
    let Some(d) = start(&[]) else { return };
    // The light one first, on an idle CPU 1, so its shell's few waits
    // before it joins the cgroup are as short as can be.
    let mut light = CpuCgroup::create("light");
    // One thread that sleeps 10 ms at a time. No process may end inside
    // the cgroup: its waits would stay in the histogram and its run_delay
    // leave with it.
    light.spawn("exec taskset -c 1 perl -e 'select(undef, undef, undef, 0.01) while 1'");
    let mut busy = CpuCgroup::create("busy");
    busy.spawn(&format!(
        "for i in 1 2 3; do taskset -c 1 sh -c '{BUSY_LOOP}' & done; wait"
    ));
    std::thread::sleep(Duration::from_secs(3));
    busy.signal(libc::SIGSTOP);
    light.signal(libc::SIGSTOP);
    std::thread::sleep(Duration::from_millis(200));
    let ((busy_ns, busy_joined), (light_ns, light_joined)) =
        (busy.run_delay_ns(), light.run_delay_ns());
    let expo = d.scrape();
    let get = |c: &CpuCgroup, what| {
        stat(&expo, &c.label, what).unwrap_or_else(|| panic!("{} {what} missing", c.label))
    };
    let (busy_sum, busy_count) = (get(&busy, "sum"), get(&busy, "count"));
    let (light_sum, light_count) = (get(&light, "sum"), get(&light, "count"));
    eprintln!(
        "busy: probe {busy_sum:.6} s in {busy_count} waits, run_delay {:.6} s over {} threads \
         (launcher {:.6} s at joining); light: probe {light_sum:.6} s in {light_count} waits, \
         run_delay {:.6} s (launcher {:.6} s at joining)",
        busy_ns as f64 / 1e9,
        busy.threads().len(),
        busy_joined as f64 / 1e9,
        light_ns as f64 / 1e9,
        light_joined as f64 / 1e9,
    );
    for (what, probe, oracle, joined) in [
        ("busy", busy_sum, busy_ns, busy_joined),
        ("light", light_sum, light_ns, light_joined),
    ] {
        let (oracle, joined) = (oracle as f64 / 1e9, joined as f64 / 1e9);
        // 2 %, and above that at most the launching shells' run_delay at
        // joining (see run_delay_ns).
        assert!(
            probe >= oracle * 0.98 && probe <= (oracle + joined) * 1.02,
            "{what}: probe {probe} s, run_delay {oracle} s (+ up to {joined} s at joining)"
        );
    }
    assert!(
        busy_sum > 10.0 * light_sum,
        "busy {busy_sum} s, light {light_sum} s"
    );
    // The light thread shares CPU 1 with the busy loops (and with whatever
    // else the host runs there), so its waits are not short either: ~3x
    // shorter on average with the host at load 8.
    assert!(
        busy_sum / busy_count > 2.0 * light_sum / light_count,
        "mean wait: busy {busy_sum}/{busy_count}, light {light_sum}/{light_count}"
    );
    // The cgroups' histograms add up to the host's (one scrape reads the
    // host histogram a moment before the cgroups': allow that moment).
    let host = sample(&expo, "usescope_runqueue_latency_seconds_count").unwrap();
    let cgroups = common::sum_of(&expo, &format!("{FAMILY}_count"));
    assert!(
        cgroups >= host && cgroups - host <= host * 0.01 + 50.0,
        "host count {host}, sum over cgroups {cgroups}"
    );
    drop((busy, light));
    assert!(d.stop().success());
}

#[test]
fn cgroups_past_the_cap_fold_into_other_and_count_as_overflow() {
    if !can_run_bpf() {
        return;
    }
    let _g = serial();
    // Two entries: the root cgroup (everything else on the host) takes
    // one at once, so at most one of the test's four gets the other.
    let Some(d) = start(&["--probe.runqlat.max-cgroups=2"]) else {
        return;
    };
    let mut cgroups: Vec<CpuCgroup> = (0..4)
        .map(|i| CpuCgroup::create(&format!("cap{i}")))
        .collect();
    for c in &mut cgroups {
        c.spawn("while :; do sleep 0.01; done");
    }
    std::thread::sleep(Duration::from_secs(2));
    let expo = d.scrape();
    let own: Vec<&str> = cgroups
        .iter()
        .filter(|c| stat(&expo, &c.label, "count").is_some())
        .map(|c| c.label.as_str())
        .collect();
    let overflow = sample(&expo, "usescope_cgroup_runqueue_latency_overflow_total").unwrap();
    let other = stat(&expo, "other", "count").unwrap();
    eprintln!("own series: {own:?}; overflow {overflow}; other count {other}");
    assert!(
        own.len() <= 1,
        "{own:?} have series of their own past a cap of 2"
    );
    assert!(overflow > 0.0, "no overflow counted");
    assert!(other >= overflow);
    drop(cgroups);
    assert!(d.stop().success());
}

#[test]
fn a_removed_cgroup_disappears_and_frees_its_slot() {
    if !can_run_bpf() {
        return;
    }
    let _g = serial();
    // Two slots: the root cgroup's and one more (as in the cap test, this
    // host's other cpu cgroups are idle), so the next cgroup gets a series
    // only if the removed one's slot was freed.
    let Some(d) = start(&["--probe.runqlat.max-cgroups=2"]) else {
        return;
    };
    let mut c = CpuCgroup::create("gone");
    let label = c.label.clone();
    c.spawn("while :; do sleep 0.01; done");
    std::thread::sleep(Duration::from_secs(1));
    let expo = d.scrape();
    assert!(
        stat(&expo, &label, "count").is_some(),
        "{label} never appeared"
    );
    drop(c);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let expo = d.scrape();
        if stat(&expo, &label, "count").is_none() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{label} still exported 10 s after rmdir"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let mut next = CpuCgroup::create("next");
    next.spawn("while :; do sleep 0.01; done");
    std::thread::sleep(Duration::from_secs(1));
    let expo = d.scrape();
    assert!(
        stat(&expo, &next.label, "count").is_some(),
        "{} got no slot after {label}'s was freed",
        next.label
    );
    drop(next);
    assert!(d.stop().success());
}

/// The per-cgroup view labels what `--collector.cgroup.select` selects, as
/// the cgroup collector does: a cgroup the selection leaves out has no
/// series of its own, and its waits are in `other`.
#[test]
fn the_cgroup_collectors_selection_chooses_the_series() {
    if !can_run_bpf() {
        return;
    }
    let _g = serial();
    let mut chosen = CpuCgroup::create("chosen");
    let mut left_out = CpuCgroup::create("left-out");
    let select = format!(
        "--collector.cgroup.select=^{}$",
        regex::escape(&chosen.label)
    );
    let Some(d) = start(&[&select]) else { return };
    let other_before = stat(&d.scrape(), "other", "count").unwrap_or(0.0);
    for c in [&mut chosen, &mut left_out] {
        c.spawn("while :; do sleep 0.01; done");
    }
    std::thread::sleep(Duration::from_secs(2));
    let expo = d.scrape();
    let count = |c: &CpuCgroup| stat(&expo, &c.label, "count");
    let other = stat(&expo, "other", "count").unwrap_or(0.0) - other_before;
    eprintln!(
        "selected {}: {:?}; left out {}: {:?}; other +{other}",
        chosen.label,
        count(&chosen),
        left_out.label,
        count(&left_out)
    );
    assert!(
        count(&chosen).is_some_and(|n| n >= 100.0),
        "{} selected, but {:?} waits",
        chosen.label,
        count(&chosen)
    );
    assert_eq!(
        count(&left_out),
        None,
        "{} was not selected",
        left_out.label
    );
    // The left-out cgroup's ~200 sleeps a second wait in `other`.
    assert!(other >= 100.0, "other rose by {other}");
    drop((chosen, left_out));
    assert!(d.stop().success());
}
