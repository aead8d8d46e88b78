//! The HTTP side: `/metrics` (or `--web.telemetry-path`), the landing page,
//! `/-/healthy` and `/-/ready`.
//!
//! **One scrape at a time.** Collectors keep state between scrapes, so
//! scrapes take turns (`AppState::turn`). A request that waited for its
//! turn while another scrape ran reuses that scrape's body if the scrape
//! started after the request arrived: it is as fresh as a scrape of its
//! own, costs nothing, and concurrent readers share one buffer.
//!
//! **A deadline no read can hold.** The scrape runs as its own task (on the
//! same worker, so it costs no cross-thread wake-up), and the request waits
//! for it only until its deadline: `--web.scrape-timeout`, or less when
//! Prometheus says its own timeout is shorter. A scrape still running then
//! is abandoned: the request gets 503 naming the stuck collector, the turn
//! passes on, and later scrapes skip that collector until its read returns
//! (collector.rs). The stuck read keeps its worker; the other serves.
//!
//! **Memory bounded by `--web.max-requests`.** A request's permit is held
//! by its response body until the last byte is written or the connection
//! is closed (the server's write timeout closes a reader that stalls), so
//! at most max-requests pages are held for readers at once. One peer (IPv4
//! address or IPv6 /64) holds at most `--web.max-requests-per-peer` of
//! them, so a client that never reads its pages cannot take the slots of
//! every other scraper.
//!
//! **Filtered scrapes.** `collect[]=NAME` and `exclude[]=NAME` select
//! collectors as node_exporter does ([`Selection::parse`]); only the
//! selected collectors run.
//!
//! **Hostile headers.** Every header value is bounded before it is
//! converted, and every line a request can cause is logged through a
//! [`Throttle`].

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use axum::Extension;
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use tokio::sync::{Mutex, OwnedSemaphorePermit, Semaphore};

use crate::scrape::collector::{Scraper, Selection};
use crate::scrape::exposition::Format;
use crate::web::gzip::GzipEncoder;
use crate::web::log_throttle::Throttle;
use crate::web::retained::release_excess;
use crate::web::server::peers::{PeerCounts, PeerSlot};
use crate::web::server::{Authenticated, current_peer};

pub struct AppState {
    pub scraper: Arc<Scraper>,
    /// Holding this is a scrape's turn; it keeps the latest bodies.
    turn: Mutex<Latest>,
    /// The encode buffer kept from the last gzip scrape (taken by the
    /// running scrape), and the length of the last body.
    spare: std::sync::Mutex<(Vec<u8>, usize)>,
    /// Kept between scrapes for its buffers; scrapes take turns, so it is
    /// never contended.
    gzip: std::sync::Mutex<GzipEncoder>,
    /// None when `--web.max-requests 0`.
    pub limit: Option<Arc<Semaphore>>,
    /// Requests each peer holds, against `max_requests_per_peer`.
    by_peer: Arc<PeerCounts>,
    max_requests_per_peer: usize,
    pub telemetry_path: String,
    pub ready: AtomicBool,
    scrape_timeout: Duration,
    /// Missed deadlines, refused and malformed requests: a client can cause
    /// these at will, so they are logged at most once a second.
    request_log: Throttle,
}

/// The request limits of [`AppState::new`].
#[derive(Clone, Copy, Debug)]
pub struct RequestLimits {
    /// `--web.max-requests`; 0 is unlimited.
    pub max_requests: usize,
    /// `--web.max-requests-per-peer`; 0 is unlimited.
    pub max_requests_per_peer: usize,
    /// `--web.scrape-timeout`.
    pub scrape_timeout: Duration,
}

impl AppState {
    pub fn new(scraper: Scraper, limits: RequestLimits, telemetry_path: &str) -> Arc<AppState> {
        Arc::new(AppState {
            scraper: Arc::new(scraper),
            turn: Mutex::new(Latest::default()),
            spare: std::sync::Mutex::new((Vec::new(), 64 * 1024)),
            gzip: std::sync::Mutex::new(GzipEncoder::new()),
            limit: (limits.max_requests > 0).then(|| Arc::new(Semaphore::new(limits.max_requests))),
            by_peer: Arc::new(PeerCounts::default()),
            max_requests_per_peer: match limits.max_requests_per_peer {
                0 => usize::MAX,
                n => n,
            },
            telemetry_path: telemetry_path.to_string(),
            ready: AtomicBool::new(true),
            scrape_timeout: limits.scrape_timeout,
            request_log: Throttle::new(),
        })
    }

    /// How long this request waits for its scrape: the configured timeout,
    /// or 95 % of the timeout Prometheus announces if that is shorter (an
    /// answer after Prometheus gave up is wasted), but never less than
    /// [`MIN_DEADLINE`].
    fn deadline(&self, headers: &HeaderMap) -> Duration {
        let announced = headers
            .get("x-prometheus-scrape-timeout-seconds")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok());
        announced_deadline(announced, self.scrape_timeout)
    }

    /// Takes this request's slots: its peer's share first, so that a peer
    /// over its share never takes one of the shared slots.
    fn admit(&self) -> Result<Admitted, Refusal> {
        let peer = match current_peer() {
            Some(addr) => {
                let slot = self
                    .by_peer
                    .try_acquire(addr.ip(), self.max_requests_per_peer);
                if slot.is_none() {
                    if let Some(suppressed) = self.request_log.admit() {
                        tracing::warn!(peer = %addr, suppressed, "scrape refused: the peer holds its share of --web.max-requests");
                    }
                    return Err(Refusal::PeerShare);
                }
                slot
            }
            // Outside a connection's scope only in tests of the router.
            None => None,
        };
        let permit = match &self.limit {
            Some(sem) => Some(
                sem.clone()
                    .try_acquire_owned()
                    .map_err(|_| Refusal::Total)?,
            ),
            None => None,
        };
        Ok(Admitted {
            _permit: permit,
            _peer: peer,
        })
    }

    /// Scrapes and encodes one body (runs inside the scrape task).
    ///
    /// A plain body is the scrape buffer itself, handed over without a copy;
    /// the next scrape then starts from a buffer sized for the last body,
    /// so it does not grow by reallocating. A gzip body is a new buffer, and
    /// the scrape buffer is kept for the next scrape.
    ///
    /// Kept buffers never hold more than the last body needs (plus
    /// [`release_excess`]'s slack): after one huge page (a large textfile
    /// since removed) memory returns to what the current pages take.
    fn encode(
        &self,
        format: Format,
        gzip: bool,
        selection: &Selection,
        abandoned: &AtomicBool,
    ) -> Result<Bytes, String> {
        let mut spare = self.spare.lock().unwrap_or_else(|p| p.into_inner());
        let mut buf = std::mem::take(&mut spare.0);
        let want = spare.1 + spare.1 / 8;
        drop(spare);
        buf.clear();
        release_excess(&mut buf, want);
        buf.reserve(want);
        self.scraper
            .scrape_into(format, &mut buf, abandoned, selection);
        let len = buf.len();
        let (body, keep) = if gzip {
            let mut encoder = self.gzip.lock().unwrap_or_else(|p| p.into_inner());
            (encoder.compress(&buf).map(Bytes::from), buf)
        } else {
            (Ok(Bytes::from(buf)), Vec::new())
        };
        *self.spare.lock().unwrap_or_else(|p| p.into_inner()) = (keep, len);
        body
    }
}

/// The most recent body for each format and encoding, with when its scrape
/// started.
#[derive(Default)]
struct Latest([Option<(Instant, Bytes)>; 4]);

impl Latest {
    fn slot(format: Format, gzip: bool) -> usize {
        usize::from(format == Format::OpenMetrics) * 2 + usize::from(gzip)
    }

    /// A body whose scrape started after `arrived`, if there is one.
    fn fresh_since(&self, format: Format, gzip: bool, arrived: Instant) -> Option<Bytes> {
        match &self.0[Latest::slot(format, gzip)] {
            Some((started, body)) if *started >= arrived => Some(body.clone()),
            _ => None,
        }
    }

    /// Drops bodies no waiting request can still use: a request waits at
    /// most `longest_wait`, and only for a body whose scrape started after
    /// it arrived. Without this a large page stays held in a slot that no
    /// client asks for again.
    fn forget_older_than(&mut self, longest_wait: Duration) {
        let now = Instant::now();
        for slot in &mut self.0 {
            if slot
                .as_ref()
                .is_some_and(|(started, _)| now.duration_since(*started) > longest_wait)
            {
                *slot = None;
            }
        }
    }

    fn store(&mut self, format: Format, gzip: bool, started: Instant, body: Bytes) {
        self.0[Latest::slot(format, gzip)] = Some((started, body));
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

async fn metrics(
    State(st): State<Arc<AppState>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let arrived = Instant::now();
    let admitted = match st.admit() {
        Ok(a) => a,
        Err(refusal) => return refusal.into_response(),
    };
    let selection = match selection(&st.scraper, query.as_deref()) {
        Ok(s) => s,
        Err(e) => {
            if let Some(suppressed) = st.request_log.admit() {
                tracing::warn!(error = %e, suppressed, "filtered scrape refused");
            }
            return (StatusCode::BAD_REQUEST, e).into_response();
        }
    };
    let format = Format::from_accept(headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()));
    let gzip = accepts_gzip(&headers);
    let deadline = st.deadline(&headers);
    let wanted = Wanted {
        format,
        gzip,
        selection,
    };
    let body = match body_for(&st, wanted, arrived, arrived + deadline).await {
        Ok(b) => b,
        Err(resp) => return resp,
    };
    // The body owns the slots: they are released when the last byte has
    // been written or the connection is gone, not when the handler returns.
    let body = Bytes::from_owner(Held {
        body,
        _admitted: admitted,
    });
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

/// The slots one request holds: one of `--web.max-requests`, and one of
/// its peer's share of them.
struct Admitted {
    _permit: Option<OwnedSemaphorePermit>,
    _peer: Option<PeerSlot>,
}

/// Why a request got no slot.
enum Refusal {
    /// Its peer holds its share of `--web.max-requests`.
    PeerShare,
    /// Every one of `--web.max-requests` is held.
    Total,
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        match self {
            Refusal::PeerShare => retry_later(
                StatusCode::TOO_MANY_REQUESTS,
                "Limit of concurrent requests from your address reached, try again later.\n",
            ),
            Refusal::Total => retry_later(
                StatusCode::SERVICE_UNAVAILABLE,
                "Limit of concurrent requests reached, try again later.\n",
            ),
        }
    }
}

/// A response body and the slots it holds.
struct Held {
    body: Bytes,
    _admitted: Admitted,
}

impl AsRef<[u8]> for Held {
    fn as_ref(&self) -> &[u8] {
        &self.body
    }
}

/// What one request asks for.
struct Wanted {
    format: Format,
    gzip: bool,
    selection: Selection,
}

/// The deadline for an announced scrape timeout of `seconds`, clamped
/// before it is converted: any number a header can carry (negative, NaN,
/// 1e300) gives a deadline in [`MIN_DEADLINE`, `configured`].
fn announced_deadline(seconds: Option<f64>, configured: Duration) -> Duration {
    let Some(s) = seconds.filter(|s| s.is_finite() && *s > 0.0) else {
        return configured;
    };
    let ceiling = configured.as_secs_f64();
    let s = (s * 0.95).clamp(MIN_DEADLINE.as_secs_f64().min(ceiling), ceiling);
    Duration::try_from_secs_f64(s).unwrap_or(configured)
}

/// The shortest deadline an announced timeout can set: a scrape takes
/// about a millisecond, so this is only ever reached by a client that asks
/// for the impossible.
const MIN_DEADLINE: Duration = Duration::from_millis(100);

/// The collectors a request's `collect[]` / `exclude[]` parameters select.
fn selection(scraper: &Scraper, query: Option<&str>) -> Result<Selection, String> {
    let (mut collect, mut exclude) = (Vec::new(), Vec::new());
    for pair in query.unwrap_or("").split('&') {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match percent_decode(key).as_str() {
            "collect[]" => collect.push(percent_decode(value)),
            "exclude[]" => exclude.push(percent_decode(value)),
            _ => {}
        }
    }
    let running: Vec<&str> = scraper.names().collect();
    Selection::parse(&running, &collect, &exclude, |name| {
        crate::collectors::find(name).is_some()
            || crate::probes::ALL.iter().any(|p| p.collector == name)
            || matches!(name, "probes" | "probe_stats")
    })
}

/// A query component as `application/x-www-form-urlencoded` decodes it
/// (Go's `url.ParseQuery`): `+` is a space, `%XX` a byte; a malformed
/// escape is kept as it is, and invalid UTF-8 is replaced.
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push((h * 16 + l) as u8);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Waits for this request's turn, then reuses a body fresh enough for it or
/// runs a scrape, all before `give_up`. A filtered scrape's body is neither
/// reused nor kept for others.
async fn body_for(
    st: &Arc<AppState>,
    wanted: Wanted,
    arrived: Instant,
    give_up: Instant,
) -> Result<Bytes, Response> {
    let Wanted {
        format,
        gzip,
        selection,
    } = wanted;
    let shareable = selection == Selection::All;
    let give_up = tokio::time::Instant::from_std(give_up);
    let Ok(mut latest) = tokio::time::timeout_at(give_up, st.turn.lock()).await else {
        return Err(deadline_exceeded(st, "waiting for the scrape before it"));
    };
    latest.forget_older_than(st.scrape_timeout);
    if let Some(body) = latest
        .fresh_since(format, gzip, arrived)
        .filter(|_| shareable)
    {
        return Ok(body);
    }
    let started = Instant::now();
    let abandoned = Arc::new(AtomicBool::new(false));
    let task = tokio::spawn({
        let st = st.clone();
        let abandoned = abandoned.clone();
        async move { st.encode(format, gzip, &selection, &abandoned) }
    });
    // If this request goes away first (its client hung up, so hyper drops
    // it), the scrape stops at its next collector instead of running on
    // beside the next request's.
    let _stop = StopOnDrop(abandoned.clone());
    match tokio::time::timeout_at(give_up, task).await {
        Ok(Ok(Ok(body))) => {
            if shareable {
                latest.store(format, gzip, started, body.clone());
            }
            Ok(body)
        }
        Ok(Ok(Err(e))) => {
            tracing::error!(error = %e, "compressing the scrape failed");
            Err((StatusCode::INTERNAL_SERVER_ERROR, "compression failed\n").into_response())
        }
        Ok(Err(e)) => {
            // A panic in a collector is a bug; the panic hook logged it.
            tracing::error!(error = %e, "the scrape task failed");
            Err((StatusCode::INTERNAL_SERVER_ERROR, "scrape failed\n").into_response())
        }
        Err(_) => {
            abandoned.store(true, Ordering::Relaxed);
            Err(deadline_exceeded(st, "in a collector"))
        }
    }
}

/// Sets the flag when dropped; after the scrape has finished that changes
/// nothing.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

fn deadline_exceeded(st: &AppState, waiting: &str) -> Response {
    let culprit = match st.scraper.stuck(Duration::from_millis(100)) {
        Some((name, inside)) => format!(
            "collector {name} has been inside a read for {:.1} s",
            inside.as_secs_f64()
        ),
        None => "no collector is stuck".to_string(),
    };
    if let Some(suppressed) = st.request_log.admit() {
        tracing::warn!(waiting, %culprit, suppressed, "scrape deadline exceeded; answering 503, later scrapes skip a stuck collector");
    }
    (
        StatusCode::SERVICE_UNAVAILABLE,
        format!("scrape deadline exceeded {waiting}: {culprit}\n"),
    )
        .into_response()
}

/// The landing page. A collector's error text names files and their
/// contents, so it is shown only to requests that passed basic auth; an open
/// page says where to look instead.
async fn landing(
    State(st): State<Arc<AppState>>,
    authenticated: Option<Extension<Authenticated>>,
) -> Html<String> {
    let statuses = st.scraper.statuses();
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

fn retry_later(status: StatusCode, body: &'static str) -> Response {
    let mut r = (status, body).into_response();
    r.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    r
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
    fn announced_timeouts_are_clamped_before_conversion() {
        let ten = Duration::from_secs(10);
        for huge in [1.9e19, 2e19, 1e300, f64::MAX] {
            assert_eq!(announced_deadline(Some(huge), ten), ten);
        }
        for ignored in [
            None,
            Some(0.0),
            Some(-5.0),
            Some(f64::NAN),
            Some(f64::INFINITY),
        ] {
            assert_eq!(announced_deadline(ignored, ten), ten);
        }
        assert_eq!(announced_deadline(Some(1e-300), ten), MIN_DEADLINE);
        assert_eq!(
            announced_deadline(Some(2.0), ten),
            Duration::from_secs_f64(1.9)
        );
        let tiny = Duration::from_millis(20);
        assert_eq!(announced_deadline(Some(5.0), tiny), tiny);
    }

    #[test]
    fn query_components_decode_as_go_does() {
        assert_eq!(percent_decode("collect%5B%5D"), "collect[]");
        assert_eq!(percent_decode("a+b%2"), "a b%2");
        assert_eq!(percent_decode("%zz%"), "%zz%");
        assert_eq!(percent_decode("%ff"), "\u{fffd}");
    }

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
