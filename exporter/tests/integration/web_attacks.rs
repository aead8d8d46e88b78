//! Attacks on the HTTP surface, each made by real clients over loopback
//! against the real binary: a wrong-password flood, one peer holding a
//! thousand connections, silent and idle connections, a client that never
//! reads its response, running out of file descriptors, and timing probes
//! for user names. 127.0.0.2 and up play the attackers, 127.0.0.1 the
//! scraper (a client socket may bind any 127/8 address before connecting).

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::common::{Daemon, fixture};
use base64::Engine;

const SCRAPER: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 1);
const ATTACKER: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);

/// bcrypt hashes of "right-password", made once with `bcrypt::hash`: in a
/// debug build cost 10 takes ~130 ms and cost 12 ~530 ms, which every test
/// would pay again if it hashed its own.
const HASH_COST10: &str = "$2b$10$TiTy34dSmvSaEvVc3DS7cOlcx7OzvNer1a6RB5AiXk.KwJhvXGyxy";
const HASH_COST12: &str = "$2b$12$oyupwV70Yn0SLk9zDSQXnuq9K/UQkRlQMfT58EeBroma.9Ze.mnO2";

/// `Limits::default()` in src/web/server.rs.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// A `--web.config.file` with basic auth users, in its own directory.
struct WebFile {
    /// Removed when the file drops.
    dir: tempfile::TempDir,
}

impl WebFile {
    fn users(users: &[(&str, &str)]) -> WebFile {
        let dir = crate::common::temp_dir();
        let mut yaml = String::from("basic_auth_users:\n");
        for (user, hash) in users {
            yaml.push_str(&format!("  {user}: '{hash}'\n"));
        }
        std::fs::write(dir.path().join("web.yml"), yaml).unwrap();
        WebFile { dir }
    }

    fn arg(&self) -> String {
        format!(
            "--web.config.file={}",
            self.dir.path().join("web.yml").display()
        )
    }
}

fn start(tree: &str, extra: &[&str]) -> Daemon {
    let mut args = vec![
        format!("--path.procfs={}", fixture(tree).display()),
        "--no-probe.runqlat".to_string(),
        "--no-probe.cachestat".to_string(),
        "--no-probe.drops".to_string(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    Daemon::start(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

/// A TCP connection from `src` to `dst`; `rcvbuf` shrinks our receive
/// buffer (before connecting, so the window is small from the start).
fn connect_from(src: Ipv4Addr, dst: SocketAddr, rcvbuf: Option<usize>) -> io::Result<TcpStream> {
    use rustix::net::{AddressFamily, SocketType};
    let fd = rustix::net::socket(AddressFamily::INET, SocketType::STREAM, None)?;
    if let Some(size) = rcvbuf {
        rustix::net::sockopt::set_socket_recv_buffer_size(&fd, size)?;
    }
    rustix::net::bind(&fd, &SocketAddrV4::new(src, 0))?;
    rustix::net::connect(&fd, &dst)?;
    Ok(TcpStream::from(fd))
}

fn basic(user: &str, password: &str) -> String {
    let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    format!("Basic {token}")
}

fn request(path: &str, headers: &[(&str, &str)], close: bool) -> String {
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: usescope\r\n");
    if close {
        req.push_str("Connection: close\r\n");
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req + "\r\n"
}

/// One request with `Connection: close` from `src`: the status (0 when the
/// connection closed or timed out without one) and the time to the whole
/// answer.
fn get_from(
    src: Ipv4Addr,
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
    timeout: Duration,
) -> (u16, Duration) {
    let start = Instant::now();
    let Ok(mut s) = connect_from(src, addr, None) else {
        return (0, start.elapsed());
    };
    s.set_read_timeout(Some(timeout)).unwrap();
    let mut raw = Vec::new();
    if s.write_all(request(path, headers, true).as_bytes())
        .is_err()
    {
        return (0, start.elapsed());
    }
    let _ = s.read_to_end(&mut raw);
    (status_of(&raw), start.elapsed())
}

fn status_of(raw: &[u8]) -> u16 {
    String::from_utf8_lossy(raw)
        .strip_prefix("HTTP/1.1 ")
        .and_then(|r| r.get(..3))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// Reads one response with a `Content-Length` body off a keep-alive
/// connection: (status, body).
fn read_reply(s: &mut TcpStream) -> io::Result<(u16, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 64 * 1024];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = s.read(&mut chunk)?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| io::Error::other("no content-length"))?;
    while buf.len() < head_end + len {
        let n = s.read(&mut chunk)?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Ok((status_of(&buf), buf.split_off(head_end)))
}

/// utime + stime of `pid`, in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name; utime and stime are fields 14 and 15.
    let rest: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    let ticks: f64 = rest[11].parse::<f64>().unwrap() + rest[12].parse::<f64>().unwrap();
    // SAFETY: sysconf has no preconditions.
    ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

/// How many sockets `pid` has open (its listener plus its connections).
fn sockets(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|target| target.to_string_lossy().starts_with("socket:"))
        .count()
}

/// Waits until `pid` has `want` sockets; how long that took, or None.
fn wait_for_sockets(pid: u32, want: usize, timeout: Duration) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if sockets(pid) == want {
            return Some(start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Wrong passwords from 127.0.0.2 until `stop`. A patient attacker waits
/// (up to 500 ms) for each answer and reuses its connection; an impatient
/// one sends a request and hangs up at once, leaving the work behind.
fn flood(addr: SocketAddr, patient: bool, stop: &AtomicBool) -> u64 {
    let mut sent = 0;
    let mut kept: Option<TcpStream> = None;
    while !stop.load(Ordering::Relaxed) {
        let mut s = match kept.take() {
            Some(s) => s,
            None => match connect_from(ATTACKER, addr, None) {
                Ok(s) => s,
                Err(_) => {
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                }
            },
        };
        let auth = basic("prometheus", &format!("wrong-{sent}"));
        sent += 1;
        if s.write_all(request("/metrics", &[("Authorization", &auth)], false).as_bytes())
            .is_err()
        {
            continue;
        }
        if !patient {
            std::thread::sleep(Duration::from_millis(5));
            continue;
        }
        s.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        if read_reply(&mut s).is_ok() {
            kept = Some(s);
        }
    }
    sent
}

#[test]
fn wrong_password_flood_neither_locks_out_scrapers_nor_outlives_itself() {
    let fresh: Vec<String> = (0..4).map(|i| format!("fresh{i}")).collect();
    let mut users = vec![("prometheus", HASH_COST10)];
    users.extend(fresh.iter().map(|u| (u.as_str(), HASH_COST10)));
    let web = WebFile::users(&users);
    let d = start("proc", &[&web.arg()]);
    let (addr, pid) = (d.addr, d.child.id());
    let known = basic("prometheus", "right-password");
    let timeout = Duration::from_secs(10);
    let login = get_from(
        SCRAPER,
        addr,
        "/metrics",
        &[("Authorization", &known)],
        timeout,
    );
    assert_eq!(login.0, 200, "the first login failed");

    let cpu_before = cpu_seconds(pid);
    let stop = Arc::new(AtomicBool::new(false));
    let attackers: Vec<_> = (0..8)
        .map(|i| {
            let stop = stop.clone();
            std::thread::spawn(move || flood(addr, i % 2 == 0, &stop))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    // First logins of other users, one a second, beside the known scraper.
    let first_logins = std::thread::spawn(move || {
        fresh
            .iter()
            .map(|user| {
                let auth = basic(user, "right-password");
                let r = get_from(
                    SCRAPER,
                    addr,
                    "/metrics",
                    &[("Authorization", &auth)],
                    timeout,
                );
                std::thread::sleep(Duration::from_secs(1));
                r
            })
            .collect::<Vec<_>>()
    });
    let mut scrapes = Vec::new();
    let flood_end = Instant::now() + Duration::from_secs(6);
    while Instant::now() < flood_end {
        scrapes.push(get_from(
            SCRAPER,
            addr,
            "/metrics",
            &[("Authorization", &known)],
            timeout,
        ));
        std::thread::sleep(Duration::from_millis(250));
    }
    let logins = first_logins.join().unwrap();
    stop.store(true, Ordering::Relaxed);
    let sent: u64 = attackers.into_iter().map(|t| t.join().unwrap()).sum();
    let stopped = Instant::now();
    let attack_cpu = cpu_seconds(pid) - cpu_before;
    std::thread::sleep(Duration::from_secs(1).saturating_sub(stopped.elapsed()));
    let settled = cpu_seconds(pid);
    std::thread::sleep(Duration::from_secs(1));
    let idle_cpu = cpu_seconds(pid) - settled;
    let worst = scrapes.iter().map(|s| s.1).max().unwrap();
    eprintln!(
        "flood: {sent} wrong passwords in 6.5 s; daemon CPU {attack_cpu:.2} s during it, \
         {idle_cpu:.2} s in the second after the next; known scraper {} scrapes, worst {worst:?}; \
         first logins {logins:?}",
        scrapes.len()
    );
    let bad: Vec<_> = scrapes
        .iter()
        .filter(|(status, took)| *status != 200 || *took > Duration::from_secs(2))
        .collect();
    assert!(bad.is_empty(), "known scraper failed or was slow: {bad:?}");
    assert!(
        logins
            .iter()
            .all(|(status, took)| *status == 200 && *took < Duration::from_secs(5)),
        "first logins during the flood: {logins:?}"
    );
    assert!(
        idle_cpu < 0.1,
        "the daemon used {idle_cpu:.2} s of CPU in the second starting 1 s after the flood stopped"
    );
}

#[test]
fn logins_abandoned_by_their_clients_are_not_checked() {
    let web = WebFile::users(&[("alice", HASH_COST12)]);
    let d = start("proc", &[&web.arg()]);
    let pid = d.child.id();
    let cpu_before = cpu_seconds(pid);
    // Four peers each send four wrong passwords (cost 12, ~0.5 s each),
    // wait long enough for all of them to be queued, and hang up: 16 checks,
    // 8 s of CPU if nobody cancels them.
    let mut abandoned = Vec::new();
    for last in 2..6 {
        for i in 0..4 {
            let mut s = connect_from(Ipv4Addr::new(127, 0, 0, last), d.addr, None).unwrap();
            let auth = basic("alice", &format!("wrong-{i}"));
            s.write_all(request("/metrics", &[("Authorization", &auth)], false).as_bytes())
                .unwrap();
            abandoned.push(s);
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    drop(abandoned);
    std::thread::sleep(Duration::from_millis(1500));
    let later = cpu_seconds(pid);
    std::thread::sleep(Duration::from_secs(1));
    let busy = cpu_seconds(pid) - later;
    eprintln!(
        "16 abandoned logins: {:.2} s of CPU in the first 1.5 s, {busy:.2} s in the second after",
        later - cpu_before
    );
    assert!(
        busy < 0.1,
        "abandoned logins still cost {busy:.2} s of CPU a second"
    );
}

#[test]
fn a_peer_holding_1024_connections_does_not_starve_a_scraper() {
    let d = start("proc", &[]);
    let held: Vec<TcpStream> = (0..1024)
        .filter_map(|_| connect_from(ATTACKER, d.addr, None).ok())
        .collect();
    assert!(held.len() > 1000, "only {} connections opened", held.len());
    // Let the daemon accept all of them first.
    std::thread::sleep(Duration::from_millis(300));
    let ok = (0..30)
        .filter(|_| get_from(SCRAPER, d.addr, "/metrics", &[], Duration::from_secs(5)).0 == 200)
        .count();
    eprintln!("scrapes while 127.0.0.2 holds 1024 connections: {ok} of 30");
    assert_eq!(ok, 30);
    drop(held);
}

#[test]
fn slowloris_does_not_block_a_scrape() {
    let d = start("proc", &[]);
    // 200 connections that send half a request and then go quiet.
    let mut slow = Vec::new();
    for _ in 0..200 {
        let mut s = connect_from(ATTACKER, d.addr, None).unwrap();
        let _ = s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n");
        slow.push(s);
    }
    let (status, took) = get_from(SCRAPER, d.addr, "/metrics", &[], Duration::from_secs(5));
    assert_eq!(status, 200);
    assert!(
        took < Duration::from_secs(1),
        "scrape took {took:?} with 200 slow clients"
    );
    drop(slow);
}

#[test]
fn silent_and_idle_keep_alive_connections_are_closed() {
    let d = start("proc", &[]);
    let silent = connect_from(SCRAPER, d.addr, None).unwrap();
    let mut idle = connect_from(SCRAPER, d.addr, None).unwrap();
    idle.write_all(request("/-/healthy", &[], false).as_bytes())
        .unwrap();
    assert_eq!(read_reply(&mut idle).unwrap().0, 200);
    let start = Instant::now();
    for (what, mut s) in [("silent", silent), ("idle keep-alive", idle)] {
        s.set_read_timeout(Some(HEADER_READ_TIMEOUT * 3)).unwrap();
        let r = s.read(&mut [0u8; 1]);
        let took = start.elapsed();
        assert!(
            matches!(r, Ok(0))
                || r.as_ref()
                    .is_err_and(|e| e.kind() == io::ErrorKind::ConnectionReset),
            "{what}: {r:?} after {took:?}"
        );
        assert!(
            took < HEADER_READ_TIMEOUT + Duration::from_secs(3),
            "{what} connection closed only after {took:?}"
        );
    }
}

#[test]
fn a_client_that_stops_reading_is_disconnected() {
    let d = start("large", &["--collector.interrupts"]);
    let pid = d.child.id();
    let idle = sockets(pid);
    // Four pipelined scrapes of ~2.3 MB each overflow the daemon's send
    // buffer and our (small) receive buffer, so its writes stall.
    let mut s = connect_from(SCRAPER, d.addr, Some(4096)).unwrap();
    for _ in 0..4 {
        s.write_all(request("/metrics", &[], false).as_bytes())
            .unwrap();
    }
    assert!(
        wait_for_sockets(pid, idle + 1, Duration::from_secs(2)).is_some(),
        "the daemon did not take the connection"
    );
    let closed = wait_for_sockets(pid, idle, WRITE_TIMEOUT + Duration::from_secs(10));
    eprintln!("a client that never reads was disconnected after {closed:?}");
    assert!(
        closed.is_some(),
        "a client that never reads still holds its connection"
    );
    drop(s);
}

/// True when every `node_scrape_collector_success` sample is 1.
fn all_collectors_succeeded(body: &[u8]) -> Result<(), String> {
    let text = String::from_utf8_lossy(body);
    let failed: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("node_scrape_collector_success{") && !l.ends_with(" 1"))
        .collect();
    if failed.is_empty() {
        Ok(())
    } else {
        Err(failed.join("\n"))
    }
}

#[test]
fn running_out_of_file_descriptors_does_not_break_scrapes() {
    // A hard limit of 128 descriptors (a raise to the hard limit at start-up
    // cannot go above it); three peers then try to hold 180 connections.
    let mut cmd = Command::new("sh");
    cmd.args(["-c", "ulimit -n 128 && exec \"$@\"", "sh"])
        .arg(crate::common::bin());
    let d = Daemon::try_start_with(
        cmd,
        &[
            &format!("--path.procfs={}", fixture("proc").display()),
            "--no-probe.runqlat",
            "--no-probe.cachestat",
            "--no-probe.drops",
        ],
    )
    .unwrap();
    let mut scraper = connect_from(SCRAPER, d.addr, None).unwrap();
    scraper
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let scrape = |s: &mut TcpStream| {
        s.write_all(request("/metrics", &[], false).as_bytes())
            .unwrap();
        let (status, body) = read_reply(s).unwrap();
        assert_eq!(status, 200);
        all_collectors_succeeded(&body)
    };
    scrape(&mut scraper).unwrap();
    let held: Vec<TcpStream> = (2..5)
        .flat_map(|last| {
            (0..60).filter_map(move |_| {
                connect_from(Ipv4Addr::new(127, 0, 0, last), d.addr, None).ok()
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    for i in 0..5 {
        if let Err(failed) = scrape(&mut scraper) {
            panic!(
                "scrape {i} while {} connections are held: collectors failed:\n{failed}",
                held.len()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let accept_errors = d
        .log()
        .iter()
        .filter(|l| l.contains("accept failed"))
        .count();
    assert!(
        accept_errors <= 3,
        "{accept_errors} 'accept failed' log lines"
    );
    drop(held);
    drop(scraper);
    // Attempts of 2 s within 15 s: one attempt that waited out the whole
    // window (5 s, as it was) failed once in CI, with the other tests of
    // this file loading both CPUs; a daemon that never serves again still
    // fails.
    let end = Instant::now() + Duration::from_secs(15);
    while get_from(SCRAPER, d.addr, "/metrics", &[], Duration::from_secs(2)).0 != 200 {
        assert!(
            Instant::now() < end,
            "no new connection served within 15 s after the peers left:\n{}",
            d.log().join("\n")
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn unknown_users_cost_the_same_as_known_ones() {
    let web = WebFile::users(&[("alice", HASH_COST12)]);
    let d = start("proc", &[&web.arg()]);
    let timeout = Duration::from_secs(30);
    let (mut known, mut unknown) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        for (user, times) in [("alice", &mut known), ("mallory", &mut unknown)] {
            let auth = basic(user, "wrong-password");
            let (status, took) = get_from(
                SCRAPER,
                d.addr,
                "/metrics",
                &[("Authorization", &auth)],
                timeout,
            );
            assert_eq!(status, 401, "{user}");
            times.push(took);
        }
    }
    let (k, u) = (median(known), median(unknown));
    let ratio = u.as_secs_f64() / k.as_secs_f64();
    eprintln!("median 401: known user {k:?}, unknown user {u:?}, ratio {ratio:.2}");
    assert!(
        (0.7..=1.3).contains(&ratio),
        "an unknown user takes {u:?}, a known one {k:?}: the difference reveals which users exist"
    );
}
