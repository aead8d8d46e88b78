//! The connection layer under the axum router: our own accept loop, so that
//! every limit an exporter on ten thousand hosts needs is explicit. The
//! defaults are in [`Limits::default`]; docs/security.md is the
//! operator's view.
//!
//! - **Connections**: at most `max_connections` in all (lowered at start to
//!   what `RLIMIT_NOFILE` leaves room for, so connections can never take
//!   the descriptors scrapes need) and `max_connections_per_peer` per peer
//!   (IPv4 address or IPv6 /64), so one client cannot take every slot.
//!   Beyond either, a new connection is closed at once. Both apply at
//!   accept, before TLS and auth.
//! - **Silence**: a TLS handshake must finish within `header_read_timeout`.
//!   hyper's header-read timer starts whenever it begins reading a request
//!   head: right after accept (or the handshake) and again after every
//!   response, so it bounds a connection that never sends anything, a
//!   slowloris, and an idle keep-alive connection alike.
//! - **Stalled readers**: a write that makes no progress for
//!   `write_timeout` fails and closes the connection ([`write_deadline`]).
//! - **Requests**: authentication and the handler together must finish
//!   within `request_timeout`.
//! - **Sizes**: request headers are capped at `max_header_bytes` (hyper
//!   answers 431 beyond it); request bodies are never read.
//! - **Passwords**: bcrypt checks are bounded and cancellable ([`auth`]).
//! - **TLS, basic auth, headers** come from [`crate::web::web_config`], held in
//!   [`WebState`] so SIGHUP can swap them without closing the listener.

mod auth;
pub(crate) mod peers;
mod write_deadline;

use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_rustls::rustls;

use self::auth::{Auth, Verdict};
use self::peers::{PeerCounts, PeerSlot};
use self::write_deadline::WriteDeadline;
use crate::web::log_throttle::Throttle;
use crate::web::web_config::WebConfig;

#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// TLS handshake; then each request head, counted from when hyper
    /// starts waiting for it (so also the idle time between keep-alive
    /// requests).
    pub header_read_timeout: Duration,
    /// Authentication plus the handler.
    pub request_timeout: Duration,
    /// A write that makes no progress for this long closes the connection.
    pub write_timeout: Duration,
    pub max_header_bytes: usize,
    /// In all; lowered to fit `RLIMIT_NOFILE` ([`connection_cap`]).
    pub max_connections: usize,
    /// Per IPv4 address or IPv6 /64.
    pub max_connections_per_peer: usize,
    /// bcrypt checks running at once (see [`auth`]).
    pub concurrent_password_checks: usize,
    /// Logins waiting for or running a bcrypt check, in all and per peer.
    pub max_pending_logins: usize,
    pub max_pending_logins_per_peer: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            header_read_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            write_timeout: Duration::from_secs(10),
            max_header_bytes: 16 * 1024,
            max_connections: 1024,
            // Prometheus holds one connection per target, an HA pair two,
            // a few more behind one NAT address; 64 leaves room for that
            // and still takes 16 addresses to fill `max_connections`.
            max_connections_per_peer: 64,
            concurrent_password_checks: 1,
            // 16 checks at cost 10 are about a second of waiting for the
            // last in line.
            max_pending_logins: 16,
            max_pending_logins_per_peer: 4,
        }
    }
}

/// Marks a request that passed basic auth, for handlers that show more to
/// authenticated clients (the landing page's collector errors).
#[derive(Clone, Copy)]
pub struct Authenticated;

tokio::task_local! {
    /// The peer of the connection a request arrived on. The connection task
    /// runs in this scope and hyper polls the request futures inside it, so
    /// the auth guard can count logins per peer without attaching the
    /// address to every request.
    static PEER: SocketAddr;
}

/// The peer of the connection the current request arrived on; None outside
/// a connection (tests of the router alone).
pub fn current_peer() -> Option<SocketAddr> {
    PEER.try_with(|p| *p).ok()
}

/// The live web configuration and the authentication state.
pub struct WebState {
    config: RwLock<Arc<WebConfig>>,
    auth: Auth,
    request_timeout: Duration,
}

impl WebState {
    pub fn new(config: WebConfig, limits: &Limits) -> Arc<WebState> {
        Arc::new(WebState {
            config: RwLock::new(Arc::new(config)),
            auth: Auth::new(limits),
            request_timeout: limits.request_timeout,
        })
    }

    pub fn current(&self) -> Arc<WebConfig> {
        self.config
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Re-reads `path` ([`WebConfig::reload`] says what is refused) and
    /// swaps it in; on error the running configuration stays.
    pub fn reload(&self, path: &Path) -> Result<(), String> {
        let new = WebConfig::reload(path, &self.current())?;
        *self.config.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(new);
        self.auth.forget();
        Ok(())
    }
}

/// Wraps the router with authentication, the per-request timeout and the
/// configured response headers.
pub fn guard(app: Router, web: Arc<WebState>) -> Router {
    app.layer(axum::middleware::from_fn_with_state(web, guard_request))
}

async fn guard_request(State(web): State<Arc<WebState>>, req: Request, next: Next) -> Response {
    let cfg = web.current();
    let resp = match tokio::time::timeout(
        web.request_timeout,
        authorize_and_run(&web, &cfg, req, next),
    )
    .await
    {
        Ok(r) => r,
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, "request timed out\n").into_response(),
    };
    with_headers(resp, &cfg)
}

async fn authorize_and_run(
    web: &WebState,
    cfg: &WebConfig,
    mut req: Request,
    next: Next,
) -> Response {
    if cfg.users.is_empty() {
        return next.run(req).await;
    }
    // Outside a connection's scope only in tests of the router itself.
    let peer = PEER
        .try_with(|p| *p)
        .unwrap_or(SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)));
    match web
        .auth
        .check(cfg, req.headers().get(header::AUTHORIZATION), peer)
        .await
    {
        Verdict::Allowed => {
            req.extensions_mut().insert(Authenticated);
            next.run(req).await
        }
        Verdict::Denied => {
            let mut r = (StatusCode::UNAUTHORIZED, "Unauthorized\n").into_response();
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"usescope\""),
            );
            r
        }
        Verdict::PeerBusy => retry_later(
            StatusCode::TOO_MANY_REQUESTS,
            "Too many logins in progress from your address\n",
        ),
        Verdict::Busy => retry_later(
            StatusCode::SERVICE_UNAVAILABLE,
            "Too many logins in progress\n",
        ),
    }
}

fn retry_later(status: StatusCode, body: &'static str) -> Response {
    let mut r = (status, body).into_response();
    r.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    r
}

fn with_headers(mut resp: Response, cfg: &WebConfig) -> Response {
    for (k, v) in &cfg.headers {
        resp.headers_mut().insert(k.clone(), v.clone());
    }
    resp
}

/// Descriptors kept free for everything but connections: collectors read
/// files (on a non-procfs tree they reopen them every scrape), accept needs
/// one for a connection it is about to refuse, and logging needs its own.
/// The sysfs attribute descriptors collectors may keep open come on top
/// ([`crate::kernel::source::attribute_fd_budget`]).
const FD_RESERVE: usize = 32;

/// `configured`, or less if the soft `RLIMIT_NOFILE` leaves no room for it
/// next to the descriptors open now and [`FD_RESERVE`]: connections must
/// never take the descriptors a scrape needs, and accept must never fail
/// with EMFILE because of our own connections.
fn connection_cap(configured: usize) -> usize {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0
        || lim.rlim_cur == libc::RLIM_INFINITY
    {
        return configured;
    }
    let open = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count());
    let room = usize::try_from(lim.rlim_cur)
        .unwrap_or(usize::MAX)
        .saturating_sub(open + FD_RESERVE + crate::kernel::source::attribute_fd_budget())
        .max(1);
    if room < configured {
        tracing::warn!(
            max_connections = room,
            open_files_limit = lim.rlim_cur,
            "connection limit lowered to fit the open files limit"
        );
    }
    configured.min(room)
}

type Builder = hyper::server::conn::http1::Builder;

/// Accepts connections until `shutdown` resolves, then waits up to
/// `drain` for in-flight requests before returning.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    web: Arc<WebState>,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
    drain: Duration,
) {
    let graceful = GracefulShutdown::new();
    let connections = Arc::new(Semaphore::new(connection_cap(limits.max_connections)));
    let by_peer = Arc::new(PeerCounts::default());
    let refusals = Throttle::default();
    let mut builder = Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(limits.max_header_bytes.max(8192))
        .keep_alive(true);
    let builder = Arc::new(builder);
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    if let Some(suppressed) = refusals.admit() {
                        tracing::warn!(error = %e, suppressed, "accept failed");
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        // Per peer first, so a peer over its limit never takes a slot of
        // the total. Dropping `stream` closes it.
        let Some(slot) = by_peer.try_acquire(peer.ip(), limits.max_connections_per_peer) else {
            log_refusal(&refusals, peer, "per-peer connection limit reached");
            continue;
        };
        let Ok(permit) = connections.clone().try_acquire_owned() else {
            log_refusal(&refusals, peer, "connection limit reached");
            continue;
        };
        let conn = Connection {
            held: (slot, permit),
            tls: web.current().tls.clone(),
            service: TowerToHyperService::new(app.clone()),
            builder: builder.clone(),
            limits,
            watcher: graceful.watcher(),
        };
        tokio::spawn(PEER.scope(peer, conn.serve(stream, peer)));
    }
    drop(listener);
    if tokio::time::timeout(drain, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("in-flight requests did not finish within {drain:?}; closing them");
    }
}

fn log_refusal(refusals: &Throttle, peer: SocketAddr, reason: &str) {
    if let Some(suppressed) = refusals.admit() {
        tracing::warn!(%peer, reason, suppressed, "connection refused");
    }
}

/// One accepted connection and what it holds until it closes.
struct Connection {
    held: (PeerSlot, OwnedSemaphorePermit),
    tls: Option<Arc<rustls::ServerConfig>>,
    service: TowerToHyperService<Router>,
    builder: Arc<Builder>,
    limits: Limits,
    watcher: Watcher,
}

impl Connection {
    async fn serve(self, stream: TcpStream, peer: SocketAddr) {
        let _ = stream.set_nodelay(true);
        let _held = self.held;
        let io = WriteDeadline::new(stream, self.limits.write_timeout);
        let Some(tls) = self.tls else {
            let conn = self
                .builder
                .serve_connection(TokioIo::new(io), self.service);
            let _ = self.watcher.watch(conn).await;
            return;
        };
        let acceptor = tokio_rustls::TlsAcceptor::from(tls);
        match tokio::time::timeout(self.limits.header_read_timeout, acceptor.accept(io)).await {
            Ok(Ok(s)) => {
                let conn = self.builder.serve_connection(TokioIo::new(s), self.service);
                let _ = self.watcher.watch(conn).await;
            }
            Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
            Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
        }
    }
}
