//! The hardened HTTP surface against real clients: TLS and mutual TLS
//! (certificates made by openssl, requests made by curl), basic auth with
//! bcrypt, configured headers, bad config files, SIGHUP reload without
//! dropping the listener, oversized headers and slowloris connections.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Daemon, fixture};

struct Certs {
    dir: PathBuf,
}

impl Certs {
    fn new(tag: &str) -> Certs {
        let dir = std::env::temp_dir().join(format!("usescope-tls-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
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
        Certs { dir }
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

impl Drop for Certs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
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
    let c = Certs::new("tls");
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
    let c = Certs::new("mtls");
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
    let c = Certs::new("auth");
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
        d.wait_for_log("reload failed", Duration::from_secs(5))
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
    let c = Certs::new("bad");
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
        let out = Command::new(common::bin())
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
    let out = Command::new(common::bin())
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
    let r = common::http_get(d.addr, "/metrics", &[("X-Big", &big)]);
    assert_eq!(r.status, 431);
    assert_eq!(d.get("/metrics").status, 200);
}

#[test]
fn slowloris_does_not_block_a_scrape() {
    let d = Daemon::start(&[
        &format!("--path.procfs={}", fixture("proc").display()),
        "--no-probe.runqlat",
        "--no-probe.cachestat",
        "--no-probe.drops",
    ]);
    // 200 connections that send half a request and then go quiet.
    let mut slow = Vec::new();
    for _ in 0..200 {
        let mut s = TcpStream::connect(d.addr).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            .unwrap();
        slow.push(s);
    }
    let start = Instant::now();
    let r = d.get("/metrics");
    let took = start.elapsed();
    assert_eq!(r.status, 200);
    assert!(
        took < Duration::from_secs(1),
        "scrape took {took:?} with 200 slow clients"
    );
    drop(slow);
}
