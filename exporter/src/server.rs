//! The connection layer under the axum router: our own accept loop, so that
//! every limit an exporter on ten thousand hosts needs is explicit.
//!
//! - **Slow clients** (slowloris): a connection must deliver its request
//!   headers within `header_read_timeout`, and a TLS client must finish its
//!   handshake within the same bound, or it is closed. Half-open connections
//!   never reach the scrape semaphore, so they cannot pin a scrape slot.
//! - **Sizes**: request headers are capped at `max_header_bytes` (hyper
//!   answers 431 beyond it); request bodies are never read.
//! - **Connections**: at most `max_connections` are open; beyond it new ones
//!   are closed at once instead of queueing without bound.
//! - **Requests**: each one must finish within `request_timeout`.
//! - **TLS, basic auth, headers** come from [`crate::web_config`], held in
//!   [`WebState`] so SIGHUP can swap them without closing the listener.

use std::collections::HashSet;
use std::future::Future;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::web_config::WebConfig;

#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub header_read_timeout: Duration,
    pub request_timeout: Duration,
    pub max_header_bytes: usize,
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            header_read_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            max_header_bytes: 16 * 1024,
            max_connections: 1024,
        }
    }
}

/// The live web configuration plus the cache of verified credentials.
pub struct WebState {
    config: RwLock<Arc<WebConfig>>,
    /// `Authorization` header values that passed bcrypt, so a scrape every
    /// 15 s does not pay ~50 ms of bcrypt each time. Cleared on reload.
    verified: Mutex<HashSet<String>>,
    request_timeout: Duration,
}

const VERIFIED_CACHE_MAX: usize = 256;

impl WebState {
    pub fn new(config: WebConfig, limits: &Limits) -> Arc<WebState> {
        Arc::new(WebState {
            config: RwLock::new(Arc::new(config)),
            verified: Mutex::new(HashSet::new()),
            request_timeout: limits.request_timeout,
        })
    }

    pub fn current(&self) -> Arc<WebConfig> {
        match self.config.read() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    pub fn replace(&self, config: WebConfig) {
        match self.config.write() {
            Ok(mut g) => *g = Arc::new(config),
            Err(p) => *p.into_inner() = Arc::new(config),
        }
        if let Ok(mut v) = self.verified.lock() {
            v.clear();
        }
    }
}

/// Wraps the router with authentication, the per-request timeout and the
/// configured response headers.
pub fn guard(app: Router, web: Arc<WebState>) -> Router {
    app.layer(axum::middleware::from_fn_with_state(web, guard_request))
}

async fn guard_request(State(web): State<Arc<WebState>>, req: Request, next: Next) -> Response {
    let cfg = web.current();
    let credentials = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    if !cfg.users.is_empty() && !authorized(&web, &cfg, credentials).await {
        let mut r = (StatusCode::UNAUTHORIZED, "Unauthorized\n").into_response();
        r.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"usescope\""),
        );
        return with_headers(r, &cfg);
    }
    let resp = match tokio::time::timeout(web.request_timeout, next.run(req)).await {
        Ok(r) => r,
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, "request timed out\n").into_response(),
    };
    with_headers(resp, &cfg)
}

fn with_headers(mut resp: Response, cfg: &WebConfig) -> Response {
    for (k, v) in &cfg.headers {
        resp.headers_mut().insert(k.clone(), v.clone());
    }
    resp
}

async fn authorized(web: &Arc<WebState>, cfg: &WebConfig, credentials: Option<String>) -> bool {
    let Some(value) = credentials else {
        return false;
    };
    if web.verified.lock().is_ok_and(|v| v.contains(&value)) {
        return true;
    }
    let Some((user, password)) = decode_basic(&value) else {
        return false;
    };
    // An unknown user still costs one bcrypt run, so response time does
    // not reveal which user names exist.
    const DUMMY: &str = "$2y$10$QOauhQNbBCuQDKes6eFzPeMqBSjb7Mr5DUmpZ/VcEd00UAV/LDeSi";
    let hash = cfg.users.get(&user).cloned();
    let known = hash.is_some();
    let hash = hash.unwrap_or_else(|| DUMMY.to_string());
    let ok = tokio::task::spawn_blocking(move || bcrypt::verify(password, &hash).unwrap_or(false))
        .await
        .unwrap_or(false)
        && known;
    if ok {
        if let Ok(mut v) = web.verified.lock() {
            if v.len() >= VERIFIED_CACHE_MAX {
                v.clear();
            }
            v.insert(value);
        }
    } else {
        tracing::debug!(user = %user, "basic authentication failed");
    }
    ok
}

fn decode_basic(value: &str) -> Option<(String, String)> {
    let b64 = value.strip_prefix("Basic ")?.trim();
    let raw = base64::engine::general_purpose::STANDARD.decode(b64).ok()?;
    let s = String::from_utf8(raw).ok()?;
    let (u, p) = s.split_once(':')?;
    Some((u.to_string(), p.to_string()))
}

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
    let connections = Arc::new(Semaphore::new(limits.max_connections));
    let mut builder = hyper::server::conn::http1::Builder::new();
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
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let Ok(permit) = connections.clone().try_acquire_owned() else {
            tracing::debug!(%peer, "connection limit reached, closing");
            continue;
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(app.clone());
        let builder = builder.clone();
        let tls = web.current().tls.clone();
        let handshake_timeout = limits.header_read_timeout;
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let _permit = permit;
            match tls {
                None => {
                    let conn = builder.serve_connection(TokioIo::new(stream), service);
                    let _ = watcher.watch(conn).await;
                }
                Some(tls) => {
                    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
                    match tokio::time::timeout(handshake_timeout, acceptor.accept(stream)).await {
                        Ok(Ok(s)) => {
                            let conn = builder.serve_connection(TokioIo::new(s), service);
                            let _ = watcher.watch(conn).await;
                        }
                        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                    }
                }
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(drain, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("in-flight requests did not finish within {drain:?}; closing them");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_basic() {
        let v = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode("alice:pa:ss")
        );
        assert_eq!(
            decode_basic(&v),
            Some(("alice".to_string(), "pa:ss".to_string()))
        );
        assert_eq!(decode_basic("Bearer x"), None);
        assert_eq!(decode_basic("Basic !!!"), None);
    }
}
