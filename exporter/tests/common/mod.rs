//! Shared harness for integration tests: runs the real `usescope` binary on
//! a loopback port, speaks plain HTTP/1.1 to it, and reads its log.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub mod bpf_objects;
pub mod hangfs;
pub mod hierarchy;
pub mod host;
pub mod loop_mount;
pub mod memcg;
pub mod node_exporter;
pub mod skip;

/// The daemon under test: this build's, or `USESCOPE_TEST_BIN` (to show
/// that a new test fails against an older binary).
pub fn bin() -> PathBuf {
    std::env::var_os("USESCOPE_TEST_BIN").map_or_else(
        || PathBuf::from(env!("CARGO_BIN_EXE_usescope")),
        PathBuf::from,
    )
}

/// The checked-in tree captured from a real machine.
pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// A `--path.rootfs` that does not exist. Tests that run on a fixture
/// procfs and compare scrapes pass it, so that the filesystem collector's
/// statfs of the fixture's mount points fails the same way (ENOENT,
/// `device_error` 1) everywhere, instead of reporting the free space of
/// whatever machine runs the test, which changes from scrape to scrape.
pub const ABSENT_ROOTFS: &str = "/nonexistent/usescope-test-rootfs";

pub struct Daemon {
    pub child: Child,
    pub addr: SocketAddr,
    log: Arc<Mutex<Vec<String>>>,
}

impl Daemon {
    /// Starts usescope on 127.0.0.1 with an OS-chosen port plus `args`,
    /// and waits until it says it is listening.
    pub fn start(args: &[&str]) -> Daemon {
        Daemon::try_start(args).unwrap_or_else(|e| panic!("usescope did not start: {e}"))
    }

    pub fn try_start(args: &[&str]) -> Result<Daemon, String> {
        Daemon::try_start_with(Command::new(bin()), args)
    }

    /// Starts `cmd` (usescope, possibly behind a wrapper such as setpriv)
    /// with a loopback listen address plus `args`.
    pub fn try_start_with(mut cmd: Command, args: &[&str]) -> Result<Daemon, String> {
        let mut child = cmd
            .arg("--web.listen-address=127.0.0.1:0")
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("spawn: {e}"))?;
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains("usescope listening")
                    && let Some(a) = line
                        .split_whitespace()
                        .find_map(|kv| kv.strip_prefix("address="))
                {
                    let _ = tx.send(a.trim_matches('"').to_string());
                }
                sink.lock().unwrap().push(line);
            }
        });
        let addr = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(a) => a.parse().map_err(|e| format!("bad address {a}: {e}"))?,
            Err(_) => {
                let _ = child.kill();
                let status = child.wait().ok();
                return Err(format!(
                    "no 'usescope listening' line; exit {status:?}; log:\n{}",
                    log.lock().unwrap().join("\n")
                ));
            }
        };
        Ok(Daemon { child, addr, log })
    }

    pub fn get(&self, path: &str) -> Response {
        http_get(self.addr, path, &[])
    }

    pub fn get_with(&self, path: &str, headers: &[(&str, &str)]) -> Response {
        http_get(self.addr, path, headers)
    }

    /// GET /metrics, asserting 200, as text.
    pub fn scrape(&self) -> String {
        let r = self.get("/metrics");
        assert_eq!(r.status, 200, "scrape failed: {}", r.text());
        r.text()
    }

    /// Every log line so far.
    pub fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    /// Waits until a log line contains `needle`.
    pub fn wait_for_log(&self, needle: &str, timeout: Duration) -> Option<String> {
        let end = Instant::now() + timeout;
        while Instant::now() < end {
            if let Some(l) = self.log().into_iter().find(|l| l.contains(needle)) {
                return Some(l);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// Sends SIGTERM and waits (up to 10 s) for the exit status.
    pub fn stop(mut self) -> ExitStatus {
        // SAFETY: signalling our own child by its pid.
        unsafe { libc_kill(self.child.id() as i32, 15) };
        let end = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s;
            }
            if Instant::now() > end {
                let _ = self.child.kill();
                panic!("usescope did not exit within 10 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Daemon {
    /// Kills the daemon and reaps it, waiting at most 10 s: a daemon with a
    /// thread stuck in a FUSE request its server already took cannot be
    /// reaped until that server goes, and a test that is failing must not
    /// hang forever before its other guards (the mount) are dropped.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let end = Instant::now() + Duration::from_secs(10);
        while Instant::now() < end {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!(
            "usescope pid {} could not be reaped within 10 s",
            self.child.id()
        );
    }
}

unsafe extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// A minimal HTTP/1.1 GET with `Connection: close`.
pub fn http_get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Response {
    http_request(addr, "GET", path, headers)
}

pub fn http_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Response {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    parse_response(&raw)
}

fn parse_response(raw: &[u8]) -> Response {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("no header end");
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .expect("status line");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    let chunked = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    if chunked {
        body = dechunk(&body);
    }
    Response {
        status,
        headers,
        body,
    }
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = b.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let size = usize::from_str_radix(
            String::from_utf8_lossy(&b[..eol])
                .split(';')
                .next()
                .unwrap()
                .trim(),
            16,
        )
        .unwrap_or(0);
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&b[eol + 2..eol + 2 + size]);
        b = &b[eol + 2 + size + 2..];
    }
}

/// The value of the sample whose name-and-labels text is exactly `series`
/// (e.g. `node_load1` or `node_cpu_seconds_total{cpu="0",mode="idle"}`).
pub fn sample(exposition: &str, series: &str) -> Option<f64> {
    exposition.lines().find_map(|l| {
        let rest = l.strip_prefix(series)?;
        let v = rest.strip_prefix(' ')?;
        v.split_whitespace().next()?.parse().ok()
    })
}

/// The runs the kernel skipped of the daemon's BPF programs, because the
/// same program was already running on that CPU (a softirq interrupting it
/// in process context): what such a run would have counted is lost, so a
/// probe's oracle test allows for it.
pub fn recursion_misses(d: &Daemon) -> u64 {
    sum_of(&d.scrape(), "usescope_bpf_program_recursion_misses_total") as u64
}

/// Sum of every sample of a metric name (any labels).
pub fn sum_of(exposition: &str, name: &str) -> f64 {
    exposition
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|r| r.starts_with('{') || r.starts_with(' '))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// True when this process may load BPF programs (root); otherwise a skip
/// or, in CI, a failure (see [`skip`]).
pub fn can_run_bpf() -> bool {
    skip::unless_root("to load BPF programs")
}

/// node_exporter 1.12.1, the oracle of the compat tests: `$NODE_EXPORTER`,
/// else `~/go/bin/node_exporter` (where scripts/setup.sh's `go install`
/// puts it), else /root/go/bin/node_exporter. None after a skip (a
/// failure in CI) when it is missing.
pub fn node_exporter() -> Option<PathBuf> {
    let path = std::env::var_os("NODE_EXPORTER")
        .map(PathBuf::from)
        .or_else(|| {
            let home = std::env::var_os("HOME")?;
            let p = Path::new(&home).join("go/bin/node_exporter");
            p.is_file().then_some(p)
        })
        .unwrap_or_else(|| PathBuf::from("/root/go/bin/node_exporter"));
    skip::tool(
        &path,
        "node_exporter 1.12.1: scripts/setup.sh installs it, or set NODE_EXPORTER",
    )
}

/// Copies a fixture tree into a fresh temporary directory the test may
/// edit, removed when the returned guard drops. The directory is 0755, not
/// tempfile's 0700: some tests run the daemon as another user on it.
pub fn copy_tree(src: &Path) -> tempfile::TempDir {
    let dst = temp_dir();
    copy_dir(src, dst.path());
    dst
}

/// A fresh temporary directory, 0755, removed when the guard drops.
pub fn temp_dir() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::Builder::new()
        .prefix("usescope-test-")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// Copies the tree `src` to `dst` (created), keeping symbolic links.
pub fn copy_dir(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    for e in std::fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        let to = dst.join(e.file_name());
        let kind = e.file_type().unwrap();
        if kind.is_symlink() {
            // sysfs fixtures are made of links; keep them links.
            std::os::unix::fs::symlink(std::fs::read_link(e.path()).unwrap(), &to).unwrap();
        } else if kind.is_dir() {
            copy_dir(&e.path(), &to);
        } else {
            std::fs::copy(e.path(), &to).unwrap();
        }
    }
}

/// Sends `n` UDP datagrams to a port on 127.0.0.1 that nothing listens on.
pub fn udp_to_closed_port(n: usize) {
    udp_to_closed_port_on("127.0.0.1", n);
}

/// Sends `n` UDP datagrams to a port on `loopback` (127.0.0.1 or ::1)
/// that nothing listens on.
pub fn udp_to_closed_port_on(loopback: &str, n: usize) {
    let any_port = format!(
        "{}:0",
        if loopback.contains(':') {
            "[::1]"
        } else {
            loopback
        }
    );
    let closed = std::net::UdpSocket::bind(&any_port).unwrap();
    let target = closed.local_addr().unwrap();
    drop(closed);
    let s = std::net::UdpSocket::bind(&any_port).unwrap();
    for _ in 0..n {
        // ECONNREFUSED from an earlier ICMP error is expected; ignore it.
        let _ = s.send_to(b"usescope", target);
    }
    // Let softirq processing finish before the next scrape.
    std::thread::sleep(std::time::Duration::from_millis(100));
}
