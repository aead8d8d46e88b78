//! Signals at any moment of start-up, against the real binary: a SIGHUP
//! while the probe loader hands its descriptors over must not disable the
//! probes (it once did: recvmsg got EINTR), and a SIGTERM at any moment
//! must end in a clean exit 0 that leaves no BPF program behind.

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
        let mut child = Command::new(common::bin())
            .arg("--web.listen-address=127.0.0.1:0")
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

    fn wait_listening(&self) -> std::net::SocketAddr {
        let end = Instant::now() + Duration::from_secs(60);
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
        panic!("never listening; log:\n{}", self.log());
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
        let addr = d.wait_listening();
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
        let status = d.wait_exit(Duration::from_secs(65));
        assert!(
            status.success(),
            "SIGTERM {ms} ms into start-up: {status:?}; log:\n{}",
            d.log()
        );
        // The kernel frees programs asynchronously after their last fd
        // closes (RCU, then a workqueue).
        let end = Instant::now() + Duration::from_secs(5);
        let mut left = usescope_programs();
        while left.iter().any(|id| !before.contains(id)) && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(50));
            left = usescope_programs();
        }
        let new: Vec<_> = left.iter().filter(|id| !before.contains(id)).collect();
        assert!(
            new.is_empty(),
            "SIGTERM {ms} ms into start-up left programs {new:?}"
        );
    }
}
