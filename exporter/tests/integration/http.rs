//! The HTTP surface of the real binary: formats, compression, routes,
//! status codes, and bad command lines.

use std::io::Read;

use crate::common::{Daemon, fixture, http_request};

fn fixture_daemon() -> Daemon {
    let proc = fixture("proc");
    Daemon::start(&[
        &format!("--path.procfs={}", proc.display()),
        "--collector.disable-defaults",
        "--collector.loadavg",
    ])
}

#[test]
fn metrics_text_format_by_default() {
    let d = fixture_daemon();
    let r = d.get("/metrics");
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    let body = r.text();
    assert!(body.contains("# TYPE node_load1 gauge\n"));
    assert!(body.contains("# TYPE process_cpu_seconds_total counter\n"));
    assert!(!body.contains("# EOF"));
}

#[test]
fn openmetrics_when_asked() {
    let d = fixture_daemon();
    let r = d.get_with(
        "/metrics",
        &[(
            "Accept",
            "application/openmetrics-text;version=1.0.0,text/plain;q=0.5",
        )],
    );
    assert_eq!(r.status, 200);
    assert!(
        r.header("content-type")
            .unwrap()
            .starts_with("application/openmetrics-text")
    );
    let body = r.text();
    assert!(body.ends_with("# EOF\n"));
    assert!(body.contains("# TYPE process_cpu_seconds counter\n"));
    assert!(body.contains("\nprocess_cpu_seconds_total "));
}

#[test]
fn gzip_when_accepted() {
    let d = fixture_daemon();
    let r = d.get_with("/metrics", &[("Accept-Encoding", "gzip")]);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    let mut out = String::new();
    flate2::read::GzDecoder::new(&r.body[..])
        .read_to_string(&mut out)
        .unwrap();
    assert!(out.contains("node_load1 "));
    // The same node_* series as an uncompressed scrape (values may move;
    // the probes' series, when they run, may gain a label value between
    // two scrapes).
    let series = |body: &str| -> Vec<String> {
        body.lines()
            .filter(|l| {
                let name = l.strip_prefix("# HELP ").or(l.strip_prefix("# TYPE "));
                name.unwrap_or(l).starts_with("node_")
            })
            .map(|l| l.rsplit_once(' ').map_or(l, |(k, _)| k).to_string())
            .collect()
    };
    assert_eq!(series(&out), series(&d.get("/metrics").text()));
}

#[test]
fn routes_and_methods() {
    let d = fixture_daemon();
    assert_eq!(d.get("/-/healthy").status, 200);
    assert_eq!(d.get("/-/ready").status, 200);
    assert_eq!(d.get("/nope").status, 404);
    assert_eq!(http_request(d.addr, "POST", "/metrics", &[]).status, 405);
    let landing = d.get("/");
    assert_eq!(landing.status, 200);
    let html = landing.text();
    assert!(html.contains("href=\"/metrics\""));
    assert!(html.contains("loadavg"));
}

#[test]
fn custom_telemetry_path() {
    let proc = fixture("proc");
    let d = Daemon::start(&[
        &format!("--path.procfs={}", proc.display()),
        "--web.telemetry-path=/m",
    ]);
    assert_eq!(d.get("/m").status, 200);
    assert_eq!(d.get("/metrics").status, 404);
}

#[test]
fn sigterm_exits_zero() {
    let d = fixture_daemon();
    let _ = d.scrape();
    let status = d.stop();
    assert!(status.success(), "{status:?}");
}

#[test]
fn bad_flag_exits_nonzero_with_one_line() {
    let out = std::process::Command::new(crate::common::bin())
        .arg("--web.bogus")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("--web.bogus"));
}

#[test]
fn unusable_listen_address_exits_nonzero_with_one_line() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let out = std::process::Command::new(crate::common::bin())
        .arg(format!("--web.listen-address={addr}"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    let last = err.trim().lines().last().unwrap();
    assert!(
        last.contains("cannot listen on") && last.contains(&addr.to_string()),
        "{err}"
    );
}

#[test]
fn signals_right_after_start_are_handled() {
    // SIGTERM at once after "listening", many times: always a clean exit 0,
    // never death by the default signal action.
    for _ in 0..10 {
        let d = fixture_daemon();
        let status = d.stop();
        assert_eq!(status.code(), Some(0), "{status:?}");
    }
    // SIGHUP without --web.config.file is logged and ignored.
    let d = fixture_daemon();
    unsafe { kill(d.child.id() as i32, 1) };
    assert!(
        d.wait_for_log(
            "no --web.config.file to reload",
            std::time::Duration::from_secs(5)
        )
        .is_some()
    );
    assert_eq!(d.get("/-/healthy").status, 200);
    assert!(d.stop().success());
}

unsafe extern "C" {
    fn kill(pid: i32, sig: i32) -> i32;
}
