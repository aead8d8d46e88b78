//! Signals at any moment of start-up, against the real binary: a SIGHUP
//! while the probe loader hands its descriptors over must not disable the
//! probes (it once did: recvmsg got EINTR), and a SIGTERM at any moment
//! must end in a clean exit 0 that leaves no BPF program behind. A loader
//! that hands its descriptors over and then never exits must not hold
//! start-up past the loader's timeout, nor SIGTERM/SIGINT at all.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{can_run_bpf, http_get};

/// Moments after the daemon has begun holding its signals, in ms: before,
/// during and after the probe loader's hand-over (~100–300 ms here).
const MOMENTS_MS: [u64; 8] = [0, 2, 5, 10, 25, 50, 100, 200];

/// Both tests count BPF programs host-wide: run them one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

struct Started {
    child: Child,
    log: Arc<Mutex<Vec<String>>>,
}

impl Started {
    fn spawn() -> Started {
        Started::spawn_with(&[])
    }

    fn spawn_with(env: &[(&str, &str)]) -> Started {
        let mut child = Command::new(common::bin())
            .arg("--web.listen-address=127.0.0.1:0")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn usescope");
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        Started { child, log }
    }

    /// Waits until the process holds or handles SIGHUP, i.e. it is past
    /// exec and into main, where the daemon's own start-up begins.
    fn wait_until_signals_are_ours(&self) {
        let end = Instant::now() + Duration::from_secs(5);
        let status = format!("/proc/{}/status", self.child.id());
        while Instant::now() < end {
            let s = std::fs::read_to_string(&status).unwrap_or_default();
            let mask = |field: &str| {
                s.lines()
                    .find_map(|l| l.strip_prefix(field))
                    .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
                    .unwrap_or(0)
            };
            // Bit 0 is SIGHUP: blocked (held during start-up) or caught.
            if (mask("SigBlk:") | mask("SigCgt:")) & 1 == 1 {
                return;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        panic!("usescope never took charge of SIGHUP");
    }

    fn signal(&self, sig: i32) {
        // SAFETY: signalling our own child by its pid.
        unsafe { libc_kill(self.child.id() as i32, sig) };
    }

    fn wait_listening(&self, within: Duration) -> std::net::SocketAddr {
        let end = Instant::now() + within;
        while Instant::now() < end {
            let addr = self.log.lock().unwrap().iter().find_map(|l| {
                if !l.contains("usescope listening") {
                    return None;
                }
                l.split_whitespace()
                    .find_map(|kv| kv.strip_prefix("address="))
                    .map(|a| a.trim_matches('"').parse().unwrap())
            });
            if let Some(a) = addr {
                return a;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("never listening within {within:?}; log:\n{}", self.log());
    }

    fn wait_exit(&mut self, within: Duration) -> std::process::ExitStatus {
        let end = Instant::now() + within;
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s;
            }
            assert!(
                Instant::now() < end,
                "no exit within {within:?}; log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

unsafe extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

const SIGHUP: i32 = 1;
const SIGTERM: i32 = 15;

fn usescope_programs() -> Vec<u32> {
    aya::programs::loaded_programs()
        .filter_map(Result::ok)
        .filter(|p| p.name_as_str().is_some_and(|n| n.starts_with("us_")))
        .map(|p| p.id())
        .collect()
}

#[test]
fn sighup_at_any_moment_of_startup_keeps_every_probe() {
    if !can_run_bpf() {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    for ms in MOMENTS_MS {
        let mut d = Started::spawn();
        d.wait_until_signals_are_ours();
        std::thread::sleep(Duration::from_millis(ms));
        d.signal(SIGHUP);
        let addr = d.wait_listening(Duration::from_secs(60));
        let expo = http_get(addr, "/metrics", &[]).text();
        for probe in ["runqlat", "cachestat", "drops"] {
            assert!(
                expo.contains(&format!("usescope_probe_up{{probe=\"{probe}\"}} 1")),
                "SIGHUP {ms} ms into start-up disabled probe {probe}; log:\n{}",
                d.log()
            );
        }
        d.signal(SIGTERM);
        assert!(d.wait_exit(Duration::from_secs(10)).success());
    }
}

#[test]
fn sigterm_at_any_moment_of_startup_exits_zero_and_leaves_no_program() {
    if !can_run_bpf() {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let before = usescope_programs();
    for ms in MOMENTS_MS {
        let mut d = Started::spawn();
        d.wait_until_signals_are_ours();
        std::thread::sleep(Duration::from_millis(ms));
        d.signal(SIGTERM);
        let status = d.wait_exit(Duration::from_secs(10));
        assert!(
            status.success(),
            "SIGTERM {ms} ms into start-up: {status:?}; log:\n{}",
            d.log()
        );
        assert_no_new_programs(&before, &format!("SIGTERM {ms} ms into start-up"));
    }
}

/// Fails unless every usescope program not in `before` is gone. The kernel
/// frees programs asynchronously after their last fd closes (RCU, then a
/// workqueue), so it gets 5 s.
fn assert_no_new_programs(before: &[u32], when: &str) {
    let end = Instant::now() + Duration::from_secs(5);
    let mut left = usescope_programs();
    while left.iter().any(|id| !before.contains(id)) && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(50));
        left = usescope_programs();
    }
    let new: Vec<_> = left.iter().filter(|id| !before.contains(id)).collect();
    assert!(new.is_empty(), "{when} left programs {new:?}");
}

/// A loader that hands its descriptors over and then never exits, made by
/// the loader's test hook, which exists only in debug builds (what `cargo
/// test` runs): so do these tests.
#[cfg(debug_assertions)]
mod never_exiting_loader {
    use super::*;
    use common::sample;
    use usescope::probes::loader_process::{STOP_AFTER_HAND_OVER, TIMEOUT};

    const SIGINT: i32 = 2;
    const SIGKILL: i32 = 9;

    /// A process as /proc/PID/stat shows it: its state letter, parent and start
    /// time (which tells it apart from a later process given the same pid).
    #[derive(Clone, Copy, Debug, PartialEq)]
    struct Proc {
        pid: i32,
        state: char,
        ppid: i32,
        start: u64,
    }

    fn proc_stat(pid: i32) -> Option<Proc> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // The command name is in parentheses and may hold anything, so the
        // fields are counted from its last ')'.
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        Some(Proc {
            pid,
            state: fields.first()?.chars().next()?,
            ppid: fields.get(1)?.parse().ok()?,
            start: fields.get(19)?.parse().ok()?,
        })
    }

    /// Every process whose parent is `ppid`, zombies included.
    fn children_of(ppid: u32) -> Vec<Proc> {
        std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            .filter_map(proc_stat)
            .filter(|p| p.ppid == ppid as i32)
            .collect()
    }

    /// The daemon's probe loader, stopped by the test hook right after its
    /// hand-over. Dropping this kills it if it is still alive (the daemon
    /// under test may not have), so a failed run leaves no stopped process
    /// holding BPF programs; the start time makes sure it is still the same
    /// process.
    struct StoppedLoader(Proc);

    impl StoppedLoader {
        /// Waits (at most 30 s) until a child of the daemon is stopped.
        fn of(d: &Started) -> StoppedLoader {
            let end = Instant::now() + Duration::from_secs(30);
            while Instant::now() < end {
                if let Some(p) = children_of(d.child.id())
                    .into_iter()
                    .find(|p| p.state == 'T')
                {
                    return StoppedLoader(p);
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            panic!(
                "the probe loader never stopped after its hand-over (is {STOP_AFTER_HAND_OVER} \
             honoured?); log:\n{}",
                d.log()
            );
        }

        fn alive(&self) -> bool {
            proc_stat(self.0.pid).is_some_and(|p| p.start == self.0.start)
        }
    }

    impl Drop for StoppedLoader {
        fn drop(&mut self) {
            if self.alive() {
                // SAFETY: SIGKILL to the loader of a daemon this test started,
                // checked by pid and start time.
                unsafe { libc_kill(self.0.pid, SIGKILL) };
            }
        }
    }

    /// A loader that hands its descriptors over and then never exits (stopped
    /// right after the hand-over, still holding its copies of them) once held
    /// start-up for ever. Now the daemon waits for it no longer than for the
    /// hand-over itself, kills and reaps it, keeps the probes that arrived
    /// whole, says why in one warning and serves; and its shutdown still leaves
    /// no program behind.
    #[test]
    fn a_loader_that_never_exits_is_killed_and_reaped_and_start_up_goes_on() {
        if !can_run_bpf() {
            return;
        }
        let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        let before = usescope_programs();
        let mut d = Started::spawn_with(&[(STOP_AFTER_HAND_OVER, "1")]);
        let loader = StoppedLoader::of(&d);
        let stopped_at = Instant::now();
        let addr = d.wait_listening(TIMEOUT + Duration::from_secs(15));
        eprintln!(
            "serving {:?} after the loader stopped",
            stopped_at.elapsed()
        );
        assert!(
            !loader.alive(),
            "the stopped loader {:?} is still there: not killed, or not reaped",
            loader.0
        );
        let children = children_of(d.child.id());
        assert!(
            children.is_empty(),
            "the daemon still has children (a zombie is one not reaped): {children:?}"
        );
        let r = http_get(addr, "/metrics", &[]);
        assert_eq!(r.status, 200);
        let expo = r.text();
        assert!(
            sample(&expo, "node_load1").is_some(),
            "/proc metrics served"
        );
        for probe in ["runqlat", "cachestat", "drops"] {
            assert_eq!(
                sample(&expo, &format!("usescope_probe_up{{probe=\"{probe}\"}}")),
                Some(1.0),
                "{probe}: the hand-over was whole, so the probe is kept; log:\n{}",
                d.log()
            );
        }
        let log = d.log();
        let warning = log
            .lines()
            .find(|l| l.contains("level=warn") && l.contains("did not exit"))
            .unwrap_or_else(|| panic!("no warning naming the cause; log:\n{log}"));
        assert!(
            warning.contains(&format!("pid={}", loader.0.pid)) && warning.contains("SIGKILL"),
            "the warning names the loader and what was done: {warning}"
        );
        d.signal(SIGTERM);
        assert!(
            d.wait_exit(Duration::from_secs(10)).success(),
            "{}",
            d.log()
        );
        assert_no_new_programs(&before, "SIGTERM after a loader that never exited");
    }

    /// SIGTERM or SIGINT while the daemon waits for a loader that has handed
    /// its descriptors over but never exits: exit 0 promptly (not after the
    /// loader's timeout), with no program of usescope's left, the daemon's
    /// copies nor the loader's.
    #[test]
    fn sigterm_or_sigint_while_the_loader_never_exits_exits_zero_promptly() {
        if !can_run_bpf() {
            return;
        }
        let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        let before = usescope_programs();
        for (sig, name) in [(SIGTERM, "SIGTERM"), (SIGINT, "SIGINT")] {
            let mut d = Started::spawn_with(&[(STOP_AFTER_HAND_OVER, "1")]);
            let loader = StoppedLoader::of(&d);
            // The daemon is waiting for the loader's exit now (the hand-over
            // came first); give it a moment to be well into that wait.
            std::thread::sleep(Duration::from_millis(200));
            let sent = Instant::now();
            d.signal(sig);
            let status = d.wait_exit(Duration::from_secs(20));
            let took = sent.elapsed();
            eprintln!("{name} during the wait: exit {status:?} after {took:?}");
            assert!(status.success(), "{name}: {status:?}; log:\n{}", d.log());
            assert!(
                took < Duration::from_secs(5),
                "{name}: exit took {took:?}; log:\n{}",
                d.log()
            );
            assert!(
                !loader.alive(),
                "{name}: the daemon left its loader {:?} behind",
                loader.0
            );
            assert_no_new_programs(&before, &format!("{name} while the loader never exits"));
        }
    }
}
