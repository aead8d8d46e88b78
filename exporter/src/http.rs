//! The HTTP side: `/metrics` (or `--web.telemetry-path`), the landing page,
//! `/-/healthy` and `/-/ready`.
//!
//! A scrape runs inline on the tokio worker that received the request,
//! under an async mutex: collectors keep state between scrapes, so scrapes
//! are serialised anyway, and waiting requests yield instead of parking a
//! thread. Handing each scrape to the blocking pool instead cost two
//! cross-thread wake-ups per request, which on a VM was a third of a
//! scrape's CPU (BENCHMARKS.md). A scrape is a few hundred microseconds on
//! a typical host, a few milliseconds on a 1024-CPU one; the runtime's
//! second worker keeps accepting and serving meanwhile. The
//! `--web.max-requests` semaphore turns excess concurrent scrapes into 503s
//! instead of an unbounded queue.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Extension;
use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use tokio::sync::{Mutex, Semaphore};

use crate::collector::Scraper;
use crate::exposition::Format;
use crate::server::Authenticated;

pub struct AppState {
    pub scraper: Mutex<Scraper>,
    /// None when `--web.max-requests 0`.
    pub limit: Option<Arc<Semaphore>>,
    pub telemetry_path: String,
    pub ready: AtomicBool,
}

impl AppState {
    pub fn new(scraper: Scraper, max_requests: usize, telemetry_path: &str) -> Arc<AppState> {
        Arc::new(AppState {
            scraper: Mutex::new(scraper),
            limit: (max_requests > 0).then(|| Arc::new(Semaphore::new(max_requests))),
            telemetry_path: telemetry_path.to_string(),
            ready: AtomicBool::new(true),
        })
    }
}

pub fn router(state: Arc<AppState>) -> Router {
    let path = state.telemetry_path.clone();
    Router::new()
        .route(&path, get(metrics))
        .route("/", get(landing))
        .route("/-/healthy", get(|| async { "Healthy\n" }))
        .route("/-/ready", get(ready))
        .fallback(|| async { (StatusCode::NOT_FOUND, "404 page not found\n") })
        .with_state(state)
}

async fn ready(State(st): State<Arc<AppState>>) -> Response {
    if st.ready.load(Ordering::Relaxed) {
        "Ready\n".into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "Not ready\n").into_response()
    }
}

fn accepts_gzip(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|enc| {
            let mut parts = enc.split(';');
            let name = parts.next().unwrap_or("").trim();
            let q_zero = parts.any(|p| {
                p.trim()
                    .strip_prefix("q=")
                    .and_then(|q| q.trim().parse::<f32>().ok())
                    == Some(0.0)
            });
            name.eq_ignore_ascii_case("gzip") && !q_zero
        })
}

/// libdeflate level 1 (level 0 would only store). Compression levels are
/// 0..=12, so this constant is always valid.
const GZIP_LEVEL: libdeflater::CompressionLvl = match libdeflater::CompressionLvl::new(1) {
    Ok(l) => l,
    Err(_) => panic!("libdeflate level 1 exists"),
};

async fn metrics(State(st): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    let _permit = match &st.limit {
        Some(sem) => match sem.clone().try_acquire_owned() {
            Ok(p) => Some(p),
            Err(_) => {
                return (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "Limit of concurrent requests reached, try again later.\n",
                )
                    .into_response();
            }
        },
        None => None,
    };
    let format = Format::from_accept(headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()));
    let gzip = accepts_gzip(&headers);
    let body = {
        let mut scraper = st.scraper.lock().await;
        let out = scraper.scrape(format);
        if gzip {
            let mut c = libdeflater::Compressor::new(GZIP_LEVEL);
            let mut z = vec![0u8; c.gzip_compress_bound(out.len())];
            match c.gzip_compress(out, &mut z) {
                Ok(n) => {
                    z.truncate(n);
                    z
                }
                Err(e) => {
                    tracing::error!(error = %e, "compressing the scrape failed");
                    return (StatusCode::INTERNAL_SERVER_ERROR, "compression failed\n")
                        .into_response();
                }
            }
        } else {
            out.to_vec()
        }
    };
    let mut resp = Response::new(Body::from(body));
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(format.content_type()),
    );
    if gzip {
        h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    }
    h.insert(
        header::VARY,
        HeaderValue::from_static("Accept, Accept-Encoding"),
    );
    resp
}

/// The landing page. A collector's error text names files and their
/// contents, so it is shown only to requests that passed basic auth; an open
/// page says where to look instead.
async fn landing(
    State(st): State<Arc<AppState>>,
    authenticated: Option<Extension<Authenticated>>,
) -> Html<String> {
    let statuses = st.scraper.lock().await.statuses();
    let mut rows = String::new();
    for s in statuses {
        let (state, class) = match s.last_success {
            None => ("not scraped yet", "pending"),
            Some(true) => ("ok", "ok"),
            Some(false) => ("failed", "failed"),
        };
        let err = match (s.last_error, &authenticated) {
            (Some(e), Some(_)) => html_escape(&e),
            (Some(_), None) => "failed — see the log".to_string(),
            (None, _) => String::new(),
        };
        rows.push_str(&format!(
            "<tr class=\"{class}\"><td>{}</td><td>enabled</td><td>{state}</td><td>{:.6}</td><td>{err}</td></tr>\n",
            s.name, s.last_duration_seconds
        ));
    }
    let path = html_escape(&st.telemetry_path);
    Html(format!(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>usescope</title>\
<style>body{{font-family:sans-serif}} td,th{{padding:2px 10px;text-align:left}} .failed{{color:#b00}}</style></head>\n\
<body><h1>usescope {version}</h1><p>Linux USE-method exporter.</p>\
<p><a href=\"{path}\">Metrics</a> · <a href=\"/-/healthy\">healthy</a> · <a href=\"/-/ready\">ready</a></p>\n\
<h2>Collectors</h2><table><tr><th>name</th><th>enabled</th><th>last scrape</th><th>duration (s)</th><th>last error</th></tr>\n{rows}</table></body></html>\n",
        version = env!("CARGO_PKG_VERSION"),
    ))
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gzip_negotiation() {
        let mut h = HeaderMap::new();
        assert!(!accepts_gzip(&h));
        h.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("br, gzip;q=0.5"),
        );
        assert!(accepts_gzip(&h));
        h.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("gzip;q=0"),
        );
        assert!(!accepts_gzip(&h));
        h.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("identity"),
        );
        assert!(!accepts_gzip(&h));
    }
}
