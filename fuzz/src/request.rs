//! The `request` fuzz target: one `/metrics` request, its query and headers
//! taken from the input, through the daemon's real router and guard (basic
//! auth, request timeout, the scrape handler) on a real scraper. Any panic
//! (the fuzzer's crash) or 500 answer is a bug: no header or query may
//! crash a request.
//!
//! Input: the first line is the request target (path and query); every
//! further line is a header, `name: value`. Lines that no client could send
//! (an invalid header name or value) are skipped, as hyper would refuse
//! them. If the first byte is odd, the router requires basic auth (one
//! user, bcrypt cost 4), so the `Authorization` parser is fuzzed too.
//!
//! Included (`#[path]`) by `fuzz_targets/request.rs` and
//! `exporter/tests/integration/hostile_requests.rs` (which includes this file with
//! `#[path]` and runs the seeds in `fuzz/corpus/request/`).

use std::sync::OnceLock;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderName, HeaderValue, Request, StatusCode};
use tower_service::Service;
use usescope::collectors::{self, Settings};
use usescope::scrape::collector::Scraper;
use usescope::scrape::self_metrics::SelfMetrics;
use usescope::web::http::{self, AppState, RequestLimits};
use usescope::web::server::{self, Limits, WebState};
use usescope::web::web_config::WebConfig;

/// The fixture tree the scraper reads, relative to this file.
const PROCFS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../exporter/tests/fixtures/proc"
);

/// "fuzz" hashed with bcrypt at cost 4.
const USER_HASH: &str = "$2b$04$hL5HMUueMxNndGGji6JjLeB/w44pKhJ.s26A9k2qZFecQW1VnUsbK";

struct Harness {
    runtime: tokio::runtime::Runtime,
    open: Router,
    with_auth: Router,
}

fn router(users: bool) -> Router {
    let settings = Settings::with_roots(PROCFS, "/nonexistent");
    let mut scraper = Scraper::new(SelfMetrics::new());
    for name in ["loadavg", "meminfo", "stat"] {
        let spec = collectors::find(name).expect("a registered collector");
        scraper.add(spec.name, (spec.build)(&settings));
    }
    let state = AppState::new(
        scraper,
        RequestLimits {
            max_requests: 4,
            max_requests_per_peer: 1,
            scrape_timeout: Duration::from_secs(10),
        },
        "/metrics",
    );
    let config = if users {
        let dir = std::env::temp_dir().join(format!("usescope-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        let file = dir.join("web.yml");
        std::fs::write(&file, format!("basic_auth_users:\n  fuzz: '{USER_HASH}'\n"))
            .expect("the web config");
        WebConfig::load(&file).expect("a valid web config")
    } else {
        WebConfig::none()
    };
    let web = WebState::new(config, &Limits::default());
    server::guard(http::router(state), web)
}

fn harness() -> &'static Harness {
    static HARNESS: OnceLock<Harness> = OnceLock::new();
    HARNESS.get_or_init(|| Harness {
        runtime: tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime"),
        open: router(false),
        with_auth: router(true),
    })
}

/// Runs one request made from `data`; panics on a 500.
pub fn request(data: &[u8]) {
    let mut lines = data.split(|&b| b == b'\n');
    let target = lines.next().unwrap_or_default();
    let Ok(target) = std::str::from_utf8(target) else {
        return;
    };
    let uri = if target.starts_with('/') {
        target.to_string()
    } else {
        format!("/metrics?{target}")
    };
    let Ok(mut req) = Request::get(uri.as_str()).body(Body::empty()) else {
        return;
    };
    for line in lines {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(&line[..colon]),
            HeaderValue::from_bytes(line[colon + 1..].trim_ascii()),
        ) else {
            continue;
        };
        req.headers_mut().append(name, value);
    }
    let h = harness();
    let mut router = if data.first().is_some_and(|b| b % 2 == 1) {
        h.with_auth.clone()
    } else {
        h.open.clone()
    };
    let response = h
        .runtime
        .block_on(async move {
            let response = router.call(req).await?;
            let status = response.status();
            let body = axum::body::to_bytes(response.into_body(), usize::MAX).await;
            Ok::<_, std::convert::Infallible>((status, body.map(|b| b.len())))
        })
        .expect("the router is infallible");
    assert_ne!(
        response.0,
        StatusCode::INTERNAL_SERVER_ERROR,
        "request {:?}",
        String::from_utf8_lossy(data)
    );
}
