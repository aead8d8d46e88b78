//! Requests that once crashed, flooded the log, starved other scrapers or
//! were ignored, each sent by real clients over loopback to the real
//! binary: an absurd `X-Prometheus-Scrape-Timeout-Seconds`, one address
//! holding its scrape slots with pages it never reads, node_exporter's
//! `collect[]` / `exclude[]` filters, and a huge page whose memory must be
//! given back once it is gone.

#[path = "../../../fuzz/src/request.rs"]
mod request_target;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::time::{Duration, Instant};

use crate::common::node_exporter::{NodeExporter, find as find_node_exporter};
use crate::common::{Daemon, fixture, http_get};

const SCRAPER: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 1);
const ATTACKER: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);

fn start(extra: &[&str]) -> Daemon {
    let procfs = format!("--path.procfs={}", fixture("proc").display());
    let sysfs = format!("--path.sysfs={}", fixture("sys").display());
    let mut args = vec![
        procfs.as_str(),
        sysfs.as_str(),
        "--no-probe.runqlat",
        "--no-probe.cachestat",
        "--no-probe.drops",
    ];
    args.extend(extra);
    Daemon::start(&args)
}

fn panics_in(d: &Daemon) -> Vec<String> {
    d.log()
        .into_iter()
        .filter(|l| l.contains("panic"))
        .collect()
}

/// A value past what `Duration` holds once panicked the request (the
/// connection closed with no answer). Every value a header can carry now
/// gets a scrape, and nothing panics.
#[test]
fn any_scrape_timeout_header_gets_a_scrape() {
    let d = start(&["--collector.disable-defaults", "--collector.loadavg"]);
    for value in [
        "1.9e19",
        "2e19",
        "1e300",
        "1e309",
        "-1",
        "0",
        "NaN",
        "inf",
        "-inf",
        "1e-300",
        "0x10",
        "10",
        "",
        "   5  ",
        "99999999999999999999999999999",
    ] {
        let r = d.get_with(
            "/metrics",
            &[("X-Prometheus-Scrape-Timeout-Seconds", value)],
        );
        assert_eq!(r.status, 200, "timeout header {value:?}: {}", r.text());
        assert!(r.text().contains("node_load1 "), "timeout header {value:?}");
    }
    assert!(panics_in(&d).is_empty(), "{:?}", panics_in(&d));
    assert!(d.stop().success());
}

/// The `request` fuzz target's seeds (fuzz/corpus/request) and crashes
/// found since (`fuzz/regressions/<target>/` for `request`), each also with every header
/// value swapped for hostile ones, through the real router: none panics
/// or gets a 500.
#[test]
fn request_fuzz_seeds_and_their_mutations_get_answers() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut inputs: Vec<Vec<u8>> = Vec::new();
    for dir in ["corpus/request", "regressions/request"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir)) else {
            continue;
        };
        for e in entries.flatten() {
            inputs.push(std::fs::read(e.path()).unwrap());
        }
    }
    assert!(inputs.len() >= 5, "the request seeds are missing");
    let hostile: [&[u8]; 12] = [
        b"1.9e19",
        b"-0",
        b"1e-320",
        b"nan",
        b"\xff\xfe",
        b"gzip;q=1e999",
        b"application/openmetrics-text; version=9;;;;",
        b"Basic ",
        b"Basic Zm9v",
        b"Basic OmZ1eno=",
        b"*/*;q=-1",
        b"",
    ];
    let mut runs = 0;
    for input in &inputs {
        request_target::request(input);
        runs += 1;
        let lines: Vec<&[u8]> = input.split(|&b| b == b'\n').collect();
        for (i, line) in lines.iter().enumerate().skip(1) {
            let Some(colon) = line.iter().position(|&b| b == b':') else {
                continue;
            };
            for value in hostile {
                let mut mutated = Vec::new();
                for (j, l) in lines.iter().enumerate() {
                    if j == i {
                        mutated.extend_from_slice(&line[..=colon]);
                        mutated.push(b' ');
                        mutated.extend_from_slice(value);
                    } else {
                        mutated.extend_from_slice(l);
                    }
                    mutated.push(b'\n');
                }
                request_target::request(&mutated);
                runs += 1;
            }
        }
    }
    eprintln!("{runs} requests through the router");
}

/// A client can make its requests miss their deadline at will: it
/// announces the shortest timeout while another scrape holds the turn (here
/// a scrape of a large textfile, touched first so that it is parsed again,
/// takes about a second). Each such request used to log a warning; now the
/// warning is logged at most once a second, however many requests miss.
#[test]
fn missed_deadlines_are_logged_at_most_once_a_second() {
    let textfiles = large_textfile(8);
    let file = textfiles.path().join("big.prom");
    let dir = format!(
        "--collector.textfile.directory={}",
        textfiles.path().display()
    );
    let d = start(&["--collector.disable-defaults", "--collector.textfile", &dir]);
    let start = Instant::now();
    let mut missed = 0;
    for round in 0..3u64 {
        let f = std::fs::File::options().append(true).open(&file).unwrap();
        f.set_modified(std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 + round))
            .unwrap();
        std::thread::scope(|s| {
            let slow = s.spawn(|| d.get("/metrics").status);
            std::thread::sleep(Duration::from_millis(100));
            while !slow.is_finished() {
                let r = d.get_with(
                    "/metrics",
                    &[("X-Prometheus-Scrape-Timeout-Seconds", "1e-9")],
                );
                missed += usize::from(r.status == 503);
            }
        });
    }
    let seconds = start.elapsed().as_secs_f64();
    let warnings = d
        .log()
        .iter()
        .filter(|l| l.contains("deadline exceeded"))
        .count();
    eprintln!("{missed} requests missed their deadline in {seconds:.1} s; {warnings} warnings");
    assert!(
        missed >= 10,
        "only {missed} requests missed their deadline: the test proves nothing"
    );
    assert!(
        (warnings as f64) <= seconds.ceil() + 1.0,
        "{warnings} deadline warnings in {seconds:.1} s"
    );
    assert!(panics_in(&d).is_empty());
    assert!(d.stop().success());
}

/// A TCP connection from `src`, with a small receive buffer so that a
/// large page stays in flight.
fn connect_from(src: Ipv4Addr, dst: SocketAddr) -> TcpStream {
    use rustix::net::{AddressFamily, SocketType};
    let fd = rustix::net::socket(AddressFamily::INET, SocketType::STREAM, None).unwrap();
    rustix::net::sockopt::set_socket_recv_buffer_size(&fd, 4096).unwrap();
    rustix::net::bind(&fd, &SocketAddrV4::new(src, 0)).unwrap();
    rustix::net::connect(&fd, &dst).unwrap();
    TcpStream::from(fd)
}

/// A textfile directory whose one file makes the page about `mb` MB.
fn large_textfile(mb: usize) -> tempfile::TempDir {
    let dir = crate::common::temp_dir();
    let mut text = String::from("# HELP big_series Padding.\n# TYPE big_series gauge\n");
    let line_len = "big_series{padding=\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\",i=\"0000000\"} 1\n".len();
    for i in 0..mb * 1_000_000 / line_len {
        text.push_str(&format!(
            "big_series{{padding=\"{}\",i=\"{i:07}\"}} 1\n",
            "x".repeat(50)
        ));
    }
    std::fs::write(dir.path().join("big.prom"), text).unwrap();
    dir
}

/// One address opens many scrapes of a 9 MB page and never reads them (it
/// stays under the per-peer connection limit). Before, those requests held
/// every `--web.max-requests` slot until the write timeout, and a
/// Prometheus on another address got 503 on nearly every scrape. Now the
/// address holds its share and is told 429 beyond it; the other scraper
/// gets every scrape.
#[test]
fn one_address_cannot_hold_every_scrape_slot() {
    let textfiles = large_textfile(9);
    let dir = format!(
        "--collector.textfile.directory={}",
        textfiles.path().display()
    );
    let d = start(&[
        "--collector.disable-defaults",
        "--collector.textfile",
        "--collector.loadavg",
        &dir,
        "--web.max-requests=8",
    ]);
    // 16 held requests from one address: twice the total.
    let mut held = Vec::new();
    let mut refused = 0;
    for _ in 0..16 {
        let mut s = connect_from(ATTACKER, d.addr);
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        held.push(s);
    }
    // Each request is answered (status line first) or still scraping; wait
    // until the refused ones have their 429.
    std::thread::sleep(Duration::from_millis(1500));
    for s in &mut held {
        s.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut head = [0u8; 12];
        if s.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.1 429") {
            refused += 1;
        }
    }
    // The default share is a quarter of 8: two held, the rest refused.
    assert_eq!(refused, 14, "the attacker's refused requests");
    // The held pages fill their sockets and stay in flight well past the
    // other scraper's scrapes (the write timeout is 10 s).
    let started = Instant::now();
    let mut statuses = Vec::new();
    for _ in 0..10 {
        let mut s = connect_from(SCRAPER, d.addr);
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s.write_all(
            b"GET /metrics?collect[]=loadavg HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        )
        .unwrap();
        let mut raw = Vec::new();
        let _ = s.read_to_end(&mut raw);
        statuses.push(String::from_utf8_lossy(&raw[..raw.len().min(12)]).into_owned());
    }
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "the scrapes took {:?}: the attacker's pages may have timed out, which proves nothing",
        started.elapsed()
    );
    assert!(
        statuses.iter().all(|s| s == "HTTP/1.1 200"),
        "the other scraper's answers: {statuses:?}"
    );
    drop(held);
    assert!(d.stop().success());
}

/// `collect[]` and `exclude[]` as node_exporter answers them, on the same
/// tree: the same status, the same error text, and the same collectors.
#[test]
fn collect_and_exclude_filters_match_node_exporter() {
    let Some(ne_bin) = find_node_exporter() else {
        return;
    };
    let procfs = format!("--path.procfs={}", fixture("proc").display());
    let sysfs = format!("--path.sysfs={}", fixture("sys").display());
    let flags = [
        "--collector.disable-defaults",
        "--collector.loadavg",
        "--collector.meminfo",
        "--collector.stat",
        "--collector.uname",
    ];
    let mut ne_args = vec![procfs.clone(), sysfs.clone()];
    ne_args.extend(flags.iter().map(|s| s.to_string()));
    let ne = NodeExporter::start(&ne_bin, &ne_args);
    let mut ours: Vec<&str> = vec![
        &procfs,
        &sysfs,
        "--no-probe.runqlat",
        "--no-probe.cachestat",
        "--no-probe.drops",
    ];
    ours.extend(flags);
    let d = Daemon::start(&ours);
    let collectors = |body: &str| -> BTreeSet<String> {
        body.lines()
            .filter_map(|l| l.strip_prefix("node_scrape_collector_success{collector=\""))
            .filter_map(|l| l.split('"').next())
            .map(String::from)
            .collect()
    };
    for query in [
        "",
        "?collect[]=meminfo",
        "?collect%5B%5D=meminfo&collect%5B%5D=uname",
        "?exclude[]=stat",
        "?exclude[]=stat&exclude[]=nonesuch",
        "?exclude[]=loadavg&exclude[]=meminfo&exclude[]=stat&exclude[]=uname",
        "?collect[]=nonesuch",
        "?collect[]=zfs",
        "?collect[]=meminfo&exclude[]=stat",
        "?other=1",
    ] {
        let theirs = http_get(ne.addr(), &format!("/metrics{query}"), &[]);
        let mine = d.get(&format!("/metrics{query}"));
        assert_eq!(mine.status, theirs.status, "{query}: {}", mine.text());
        if theirs.status == 200 {
            assert_eq!(
                collectors(&mine.text()),
                collectors(&theirs.text()),
                "{query}"
            );
            let has_meminfo = |b: &str| b.contains("\nnode_memory_MemTotal_bytes ");
            assert_eq!(
                has_meminfo(&mine.text()),
                has_meminfo(&theirs.text()),
                "{query}"
            );
        } else {
            assert_eq!(mine.text().trim(), theirs.text().trim(), "{query}");
        }
    }
    assert!(d.stop().success());
}

/// The resident set of `pid` in kB.
fn rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap()
}

/// A 19 MB textfile raises memory by hundreds of MB; once it is removed,
/// a few scrapes later the daemon is back within 20 MB of where it began
/// (the reused buffers used to keep their peak: 174-219 MB after removal).
#[test]
fn memory_returns_after_a_large_textfile_is_removed() {
    let textfiles = large_textfile(19);
    let dir = format!(
        "--collector.textfile.directory={}",
        textfiles.path().display()
    );
    let d = start(&["--collector.textfile", &dir]);
    let pid = d.child.id();
    let small = |d: &Daemon| {
        for encoding in ["identity", "gzip"] {
            for accept in ["text/plain", "application/openmetrics-text; version=1.0.0"] {
                let r = d.get_with(
                    "/metrics",
                    &[("Accept-Encoding", encoding), ("Accept", accept)],
                );
                assert_eq!(r.status, 200);
            }
        }
    };
    std::fs::rename(
        textfiles.path().join("big.prom"),
        textfiles.path().join("big.prom.away"),
    )
    .unwrap();
    small(&d);
    small(&d);
    let baseline = rss_kb(pid);
    std::fs::rename(
        textfiles.path().join("big.prom.away"),
        textfiles.path().join("big.prom"),
    )
    .unwrap();
    small(&d);
    let peak = rss_kb(pid);
    std::fs::remove_file(textfiles.path().join("big.prom")).unwrap();
    for _ in 0..3 {
        small(&d);
    }
    let after = rss_kb(pid);
    eprintln!("RSS: baseline {baseline} kB, with the 19 MB file {peak} kB, after {after} kB");
    assert!(
        peak > baseline + 40_000,
        "the large file did not cost memory: {peak} kB"
    );
    assert!(
        after <= baseline + 20_000,
        "RSS {after} kB after the file went, baseline {baseline} kB, peak {peak} kB"
    );
    assert!(d.stop().success());
}
