//! The hardened HTTP surface against real clients: TLS and mutual TLS
//! (certificates made by openssl, requests made by curl), basic auth with
//! bcrypt, configured headers, bad config files, SIGHUP reload without
//! dropping the listener (and refusing one that would weaken it), stalled
//! TLS handshakes, failed-login logging, what the landing page shows,
//! and oversized headers. Floods, slowloris and resource exhaustion are in
//! web_attacks.rs.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::{Daemon, fixture};

struct Certs {
    /// Removed when the certificates drop.
    _temp: tempfile::TempDir,
    dir: PathBuf,
}

impl Certs {
    fn new() -> Certs {
        let temp = crate::common::temp_dir();
        let dir = temp.path().to_path_buf();
        let run = |args: &[&str]| {
            let out = Command::new("openssl")
                .args(args)
                .current_dir(&dir)
                .output()
                .expect("openssl");
            assert!(
                out.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        run(&[
            &["req", "-x509"][..],
            &ec,
            &[
                "-keyout",
                "ca.key",
                "-out",
                "ca.crt",
                "-days",
                "2",
                "-subj",
                "/CN=usescope test CA",
            ],
        ]
        .concat());
        std::fs::write(
            dir.join("server.ext"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n",
        )
        .unwrap();
        std::fs::write(dir.join("client.ext"), "extendedKeyUsage=clientAuth\n").unwrap();
        for who in ["server", "client"] {
            run(&[
                &["req"][..],
                &ec,
                &[
                    "-keyout",
                    &format!("{who}.key"),
                    "-out",
                    &format!("{who}.csr"),
                    "-subj",
                    &format!("/CN={who}"),
                ],
            ]
            .concat());
            run(&[
                "x509",
                "-req",
                "-in",
                &format!("{who}.csr"),
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                &format!("{who}.crt"),
                "-days",
                "2",
                "-extfile",
                &format!("{who}.ext"),
            ]);
        }
        Certs { _temp: temp, dir }
    }
    fn path(&self, f: &str) -> String {
        self.dir.join(f).display().to_string()
    }
    fn write_config(&self, yaml: &str) -> PathBuf {
        let p = self.dir.join("web.yml");
        std::fs::write(&p, yaml).unwrap();
        p
    }
}

fn start_with(config: &Path) -> Daemon {
    Daemon::start(&[
        &format!("--path.procfs={}", fixture("proc").display()),
        &format!("--web.config.file={}", config.display()),
        "--no-probe.runqlat",
        "--no-probe.cachestat",
        "--no-probe.drops",
    ])
}

/// curl's HTTP status ("000" when the connection or handshake failed).
fn curl(args: &[&str]) -> String {
    let out = Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--max-time",
            "10",
        ])
        .args(args)
        .output()
        .expect("curl");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn tls_serves_https_and_refuses_plain_http() {
    let c = Certs::new();
    let cfg = c.write_config(
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  min_version: TLS12\nhttp_server_config:\n  headers:\n    X-Frame-Options: deny\n",
    );
    let d = start_with(&cfg);
    let url = format!("https://127.0.0.1:{}/metrics", d.addr.port());
    assert_eq!(curl(&["--cacert", &c.path("ca.crt"), &url]), "200");
    let headers = Command::new("curl")
        .args([
            "-s",
            "-D",
            "-",
            "-o",
            "/dev/null",
            "--cacert",
            &c.path("ca.crt"),
            &url,
        ])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&headers.stdout)
            .to_ascii_lowercase()
            .contains("x-frame-options: deny")
    );
    assert_eq!(
        curl(&["--cacert", &c.path("ca.crt"), "--tls-max", "1.1", &url]),
        "000",
        "TLS 1.1 accepted"
    );
    assert_ne!(
        curl(&[&format!("http://127.0.0.1:{}/metrics", d.addr.port())]),
        "200"
    );
}

#[test]
fn mutual_tls_requires_a_client_certificate() {
    let c = Certs::new();
    let cfg = c.write_config(
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n",
    );
    let d = start_with(&cfg);
    let url = format!("https://127.0.0.1:{}/metrics", d.addr.port());
    assert_eq!(curl(&["--cacert", &c.path("ca.crt"), &url]), "000");
    assert_eq!(
        curl(&[
            "--cacert",
            &c.path("ca.crt"),
            "--cert",
            &c.path("client.crt"),
            "--key",
            &c.path("client.key"),
            &url
        ]),
        "200"
    );
}

#[test]
fn basic_auth_and_reload_on_sighup() {
    let c = Certs::new();
    let h1 = bcrypt::hash("first-secret", 4).unwrap();
    let cfg = c.write_config(&format!("basic_auth_users:\n  prometheus: '{h1}'\n"));
    let d = start_with(&cfg);
    let url = format!("http://127.0.0.1:{}/metrics", d.addr.port());
    assert_eq!(curl(&[&url]), "401");
    assert_eq!(curl(&["-u", "prometheus:wrong-secret", &url]), "401");
    assert_eq!(curl(&["-u", "nobody:first-secret", &url]), "401");
    assert_eq!(curl(&["-u", "prometheus:first-secret", &url]), "200");
    // Reload with a new password; the listener stays up throughout.
    let h2 = bcrypt::hash("second-secret", 4).unwrap();
    c.write_config(&format!("basic_auth_users:\n  prometheus: '{h2}'\n"));
    unsafe { kill(d.child.id() as i32, 1) };
    assert!(
        d.wait_for_log("web config reloaded", Duration::from_secs(5))
            .is_some()
    );
    assert_eq!(curl(&["-u", "prometheus:first-secret", &url]), "401");
    assert_eq!(curl(&["-u", "prometheus:second-secret", &url]), "200");
    // A broken file on reload keeps the working configuration.
    c.write_config("basic_auth_users:\n  prometheus: plaintext\n");
    unsafe { kill(d.child.id() as i32, 1) };
    assert!(
        d.wait_for_log("reload refused", Duration::from_secs(5))
            .is_some()
    );
    assert_eq!(curl(&["-u", "prometheus:second-secret", &url]), "200");
    let log = d.log().join("\n");
    for secret in ["first-secret", "second-secret", "wrong-secret", "plaintext"] {
        assert!(!log.contains(secret), "log contains a secret: {secret}");
    }
}

unsafe extern "C" {
    fn kill(pid: i32, sig: i32) -> i32;
}

#[test]
fn bad_config_files_stop_startup_with_one_line() {
    let c = Certs::new();
    let cases: &[(&str, &str)] = &[
        ("tls_server_config: [unclosed", "invalid YAML"),
        (
            "tls_server_config:\n  cert_file: missing.crt\n  key_file: server.key\n",
            "missing.crt",
        ),
        (
            "basic_auth_users:\n  alice: notahash\n",
            "not a bcrypt hash",
        ),
        (
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  min_version: TLS10\n",
            "TLS10",
        ),
        ("unknown_section: 1\n", "unknown field"),
    ];
    for (yaml, needle) in cases {
        let cfg = c.write_config(yaml);
        let out = Command::new(crate::common::bin())
            .args([
                "--web.listen-address=127.0.0.1:0",
                &format!("--web.config.file={}", cfg.display()),
            ])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{yaml}: started anyway");
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err.trim().lines().last().unwrap_or("");
        assert!(
            last.starts_with("usescope: web config") && last.contains(needle),
            "{yaml}: {err}"
        );
        assert!(
            !err.contains("notahash"),
            "the bad hash leaked into the error"
        );
    }
    let out = Command::new(crate::common::bin())
        .args([
            "--web.listen-address=127.0.0.1:0",
            "--web.config.file=/nonexistent/web.yml",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/web.yml"));
}

#[test]
fn oversized_headers_get_431() {
    let d = Daemon::start(&[
        &format!("--path.procfs={}", fixture("proc").display()),
        "--no-probe.runqlat",
        "--no-probe.cachestat",
        "--no-probe.drops",
    ]);
    let big = "x".repeat(64 * 1024);
    let r = crate::common::http_get(d.addr, "/metrics", &[("X-Big", &big)]);
    assert_eq!(r.status, 431);
    assert_eq!(d.get("/metrics").status, 200);
}

fn sighup(d: &Daemon) {
    // SAFETY: signalling our own child by its pid.
    unsafe { kill(d.child.id() as i32, 1) };
}

/// Waits until `n` log lines contain `needle`.
fn wait_for_lines(d: &Daemon, needle: &str, n: usize) -> bool {
    let end = Instant::now() + Duration::from_secs(5);
    while Instant::now() < end {
        if d.log().iter().filter(|l| l.contains(needle)).count() >= n {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

#[test]
fn reload_that_would_weaken_tls_or_auth_is_refused() {
    let c = Certs::new();
    let h1 = bcrypt::hash("first-secret", 4).unwrap();
    let tls = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n";
    let users = format!("basic_auth_users:\n  prometheus: '{h1}'\n");
    let cfg = c.write_config(&format!("{tls}{users}"));
    let d = start_with(&cfg);
    let https = format!("https://127.0.0.1:{}/metrics", d.addr.port());
    let http = format!("http://127.0.0.1:{}/metrics", d.addr.port());
    let ca = c.path("ca.crt");
    let still_protected = |case: &str| {
        assert_eq!(
            curl(&["--cacert", &ca, "-u", "prometheus:first-secret", &https]),
            "200",
            "{case}"
        );
        assert_eq!(
            curl(&["--cacert", &ca, &https]),
            "401",
            "{case}: auth is off"
        );
        assert_ne!(
            curl(&["-u", "prometheus:first-secret", &http]),
            "200",
            "{case}: TLS is off"
        );
    };
    still_protected("start");
    let weaker = [
        ("an empty file", String::new()),
        ("no TLS", users.clone()),
        ("no users", tls.to_string()),
        ("unparseable YAML", "tls_server_config: [".to_string()),
    ];
    for (n, (case, yaml)) in weaker.iter().enumerate() {
        c.write_config(yaml);
        sighup(&d);
        assert!(
            wait_for_lines(&d, "web config reload refused", n + 1),
            "{case}: no refusal logged"
        );
        still_protected(case);
    }
    // New users, certificates and headers are still accepted.
    let h2 = bcrypt::hash("second-secret", 4).unwrap();
    c.write_config(&format!(
        "{tls}basic_auth_users:\n  prometheus: '{h2}'\nhttp_server_config:\n  headers:\n    X-Frame-Options: deny\n"
    ));
    sighup(&d);
    assert!(wait_for_lines(&d, "web config reloaded", 1));
    assert_eq!(
        curl(&["--cacert", &ca, "-u", "prometheus:second-secret", &https]),
        "200"
    );
    assert_eq!(
        curl(&["--cacert", &ca, "-u", "prometheus:first-secret", &https]),
        "401"
    );
    let refusal = d
        .log()
        .into_iter()
        .find(|l| l.contains("reload refused"))
        .unwrap();
    assert!(
        refusal.contains("empty"),
        "the refusal does not say why: {refusal}"
    );
}

#[test]
fn stalled_tls_handshakes_are_closed() {
    let c = Certs::new();
    let cfg =
        c.write_config("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n");
    let d = start_with(&cfg);
    let silent = TcpStream::connect(d.addr).unwrap();
    // A TLS record header that announces a 512-byte ClientHello, then nothing.
    let mut partial = TcpStream::connect(d.addr).unwrap();
    partial.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00]).unwrap();
    let start = Instant::now();
    for (what, mut s) in [("silent", silent), ("partial ClientHello", partial)] {
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let r = s.read(&mut [0u8; 1]);
        let took = start.elapsed();
        assert!(
            matches!(r, Ok(0)) || r.is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset),
            "{what}: not closed"
        );
        assert!(
            took < Duration::from_secs(13),
            "{what}: closed only after {took:?}"
        );
    }
}

fn auth_daemon(extra: &[&str]) -> (Certs, Daemon) {
    let c = Certs::new();
    let h = bcrypt::hash("secret", 4).unwrap();
    let cfg = c.write_config(&format!("basic_auth_users:\n  prometheus: '{h}'\n"));
    let mut args = vec![format!("--web.config.file={}", cfg.display())];
    args.extend(extra.iter().map(|s| s.to_string()));
    if !extra.iter().any(|a| a.starts_with("--path.procfs")) {
        args.push(format!("--path.procfs={}", fixture("proc").display()));
    }
    args.extend(
        [
            "--no-probe.runqlat",
            "--no-probe.cachestat",
            "--no-probe.drops",
        ]
        .map(String::from),
    );
    let d = Daemon::start(&args.iter().map(String::as_str).collect::<Vec<_>>());
    (c, d)
}

fn basic(scheme: &str, user: &str, password: &str) -> String {
    use base64::Engine;
    let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    format!("{scheme} {token}")
}

#[test]
fn basic_scheme_is_case_insensitive() {
    let (_c, d) = auth_daemon(&[]);
    for scheme in ["Basic", "basic", "BASIC"] {
        let r = d.get_with(
            "/metrics",
            &[("Authorization", &basic(scheme, "prometheus", "secret"))],
        );
        assert_eq!(r.status, 200, "scheme {scheme:?}");
    }
    let r = d.get_with(
        "/metrics",
        &[("Authorization", &basic("basic", "prometheus", "wrong"))],
    );
    assert_eq!(r.status, 401);
}

#[test]
fn failed_logins_are_logged_with_the_peer_at_most_once_a_second() {
    let (_c, d) = auth_daemon(&[]);
    let wrong = basic("Basic", "prometheus", "hunter2-guess");
    assert_eq!(
        d.get_with("/metrics", &[("Authorization", &wrong)]).status,
        401
    );
    let line = d
        .wait_for_log("basic authentication failed", Duration::from_secs(5))
        .expect("a failed login is not logged");
    assert!(
        line.contains("level=warn") && line.contains("127.0.0.1"),
        "{line}"
    );
    assert!(!line.contains("hunter2"), "the password is logged: {line}");
    // 100 more failures in quick succession, then one after a quiet second.
    let start = Instant::now();
    for _ in 0..100 {
        assert_eq!(
            d.get_with("/metrics", &[("Authorization", &wrong)]).status,
            401
        );
    }
    let burst = start.elapsed();
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(
        d.get_with("/metrics", &[("Authorization", &wrong)]).status,
        401
    );
    let counted = |l: &String| {
        l.split_whitespace()
            .find_map(|kv| kv.strip_prefix("suppressed="))
            .and_then(|n| n.parse::<u64>().ok())
            .is_some_and(|n| n > 0)
    };
    // The log reaches us through a pipe and a reader thread: wait for it.
    let end = Instant::now() + Duration::from_secs(5);
    while !d.log().iter().any(counted) && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        d.log().iter().any(counted),
        "no count of suppressed failures:\n{}",
        d.log().join("\n")
    );
    let lines = d
        .log()
        .iter()
        .filter(|l| l.contains("basic authentication failed"))
        .count();
    let allowed = 2 + burst.as_secs() as usize + 1;
    assert!(
        lines <= allowed,
        "{lines} log lines for 102 failures in {burst:?} (at most {allowed})"
    );
}

#[test]
fn landing_page_shows_collector_errors_only_behind_auth() {
    let tree_dir = crate::common::copy_tree(&fixture("proc"));
    let tree = tree_dir.path();
    std::fs::write(tree.join("loadavg"), "not a loadavg\n").unwrap();
    let procfs = format!("--path.procfs={}", tree.display());
    let tree_text = tree.display().to_string();

    let d = Daemon::start(&[
        &procfs,
        "--no-probe.runqlat",
        "--no-probe.cachestat",
        "--no-probe.drops",
    ]);
    assert_eq!(d.get("/metrics").status, 200);
    let page = d.get("/").text();
    assert!(page.contains("failed — see the log"), "{page}");
    assert!(
        !page.contains(&tree_text),
        "error text on an open landing page:\n{page}"
    );
    drop(d);

    let (_c, d) = auth_daemon(&[&procfs]);
    let auth = basic("Basic", "prometheus", "secret");
    assert_eq!(
        d.get_with("/metrics", &[("Authorization", &auth)]).status,
        200
    );
    assert_eq!(d.get("/").status, 401);
    let page = d.get_with("/", &[("Authorization", &auth)]).text();
    assert!(
        page.contains(&tree_text),
        "no error text behind auth:\n{page}"
    );
}

#[test]
fn openmetrics_is_not_chosen_at_q_zero() {
    let d = Daemon::start(&[
        &format!("--path.procfs={}", fixture("proc").display()),
        "--collector.disable-defaults",
        "--collector.loadavg",
    ]);
    let text = "text/plain; version=0.0.4; charset=utf-8";
    for (accept, want) in [
        ("application/openmetrics-text;q=0", text),
        (
            "application/openmetrics-text; version=1.0.0; q=0, text/plain",
            text,
        ),
        ("text/plain;q=0.9, application/openmetrics-text;q=0.5", text),
        (
            "application/openmetrics-text;q=0.5, text/plain;q=0.2",
            "application/openmetrics-text",
        ),
        (
            "application/openmetrics-text",
            "application/openmetrics-text",
        ),
    ] {
        let r = d.get_with("/metrics", &[("Accept", accept)]);
        assert_eq!(r.status, 200);
        let got = r.header("content-type").unwrap_or("");
        assert!(got.starts_with(want), "Accept {accept:?} gave {got:?}");
    }
}
