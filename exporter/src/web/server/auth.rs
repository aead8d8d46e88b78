//! Basic authentication with bcrypt, bounded so that wrong passwords cannot
//! buy unbounded CPU.
//!
//! bcrypt is slow on purpose (cost 10: 50–130 ms of one core), so every
//! password we check is CPU an attacker spends of ours. Hence:
//!
//! - **One check at a time** (`Limits::concurrent_password_checks`). On the
//!   small hosts an exporter runs on (2 vCPUs, 2 runtime workers) that
//!   leaves a core for scrapes and for scrapers whose credential is already
//!   cached, and one core still checks 8–20 passwords a second, far more
//!   than legitimate scrapers need: each credential is checked once, then
//!   cached.
//! - **Bounded waiting**: at most `max_pending_logins` requests wait for or
//!   run a check, at most `max_pending_logins_per_peer` of them from one
//!   peer (IPv4 address or IPv6 /64). Beyond either bound the answer is
//!   429 or 503 at once, with no hashing.
//! - **Abandoned work is dropped**: waiting for the check is an async wait
//!   in the request's future. hyper drops that future when the client hangs
//!   up (while a request is in flight it watches the socket for EOF), and
//!   the request timeout drops it too. Only a check already running on the
//!   blocking pool finishes, and there are at most
//!   `concurrent_password_checks` of those.
//! - **Cache**: a verified credential is remembered as an HMAC-SHA256 under
//!   a key made at start-up, never as the password; at most
//!   `VERIFIED_MAX` of them, forgotten on reload.
//! - **Unknown users** cost one check against the costliest configured hash
//!   (`WebConfig::password_hash`), like a known user with a wrong password.
//! - **Failures** are logged at warn with the peer, at most once a second,
//!   with the number of failures not logged since.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use axum::http::HeaderValue;
use base64::Engine;
use ring::hmac;
use tokio::sync::Semaphore;

use super::peers::PeerCounts;
use super::{Limits, Throttle};
use crate::web::web_config::WebConfig;

/// Verified credentials kept; a full cache is emptied (only correct
/// passwords get in, so only legitimate users can fill it).
const VERIFIED_MAX: usize = 256;

pub enum Verdict {
    Allowed,
    Denied,
    /// This peer already has `max_pending_logins_per_peer` logins waiting.
    PeerBusy,
    /// `max_pending_logins` logins are waiting.
    Busy,
}

pub struct Auth {
    key: hmac::Key,
    verified: Mutex<HashSet<[u8; 32]>>,
    checks: Arc<Semaphore>,
    pending: Arc<Semaphore>,
    pending_by_peer: Arc<PeerCounts>,
    max_pending_per_peer: usize,
    failures: Throttle,
}

impl Auth {
    pub fn new(limits: &Limits) -> Auth {
        let rng = ring::rand::SystemRandom::new();
        Auth {
            // Fails only without a system random source, which rustls
            // needs as much; there is nothing to fall back to.
            key: hmac::Key::generate(hmac::HMAC_SHA256, &rng)
                .expect("the system random number generator works"),
            verified: Mutex::new(HashSet::new()),
            checks: Arc::new(Semaphore::new(limits.concurrent_password_checks)),
            pending: Arc::new(Semaphore::new(limits.max_pending_logins)),
            pending_by_peer: Arc::new(PeerCounts::default()),
            max_pending_per_peer: limits.max_pending_logins_per_peer,
            failures: Throttle::default(),
        }
    }

    /// After a reload: a password that was right may not be any more.
    pub fn forget(&self) {
        self.verified_set().clear();
    }

    pub async fn check(
        &self,
        cfg: &WebConfig,
        header: Option<&HeaderValue>,
        peer: SocketAddr,
    ) -> Verdict {
        let Some(header) = header else {
            // A browser's first request, or a scraper without credentials:
            // not worth a log line.
            return Verdict::Denied;
        };
        let Some(credentials) = Credentials::parse(header) else {
            self.log_failure(peer, "malformed Authorization header", None);
            return Verdict::Denied;
        };
        let tag = self.tag(&credentials);
        if self.verified_set().contains(&tag) {
            return Verdict::Allowed;
        }
        let Some(_peer_slot) = self
            .pending_by_peer
            .try_acquire(peer.ip(), self.max_pending_per_peer)
        else {
            self.log_failure(peer, "too many logins pending from this peer", None);
            return Verdict::PeerBusy;
        };
        let Ok(_pending) = self.pending.clone().try_acquire_owned() else {
            self.log_failure(peer, "too many logins pending", None);
            return Verdict::Busy;
        };
        let user = credentials.user().to_string();
        match self.verify(cfg, credentials).await {
            Checked::Right => {
                self.remember(tag);
                Verdict::Allowed
            }
            Checked::WrongPassword => {
                self.log_failure(peer, "wrong password", Some(&user));
                Verdict::Denied
            }
            Checked::UnknownUser => {
                self.log_failure(peer, "unknown user", None);
                Verdict::Denied
            }
        }
    }

    /// One bcrypt check, after waiting for a free check slot. The wait is
    /// where a flood queues, and it ends if this future is dropped.
    async fn verify(&self, cfg: &WebConfig, credentials: Credentials) -> Checked {
        let Some((hash, known)) = cfg.password_hash(credentials.user()) else {
            return Checked::UnknownUser;
        };
        let hash = hash.to_string();
        let Ok(permit) = self.checks.clone().acquire_owned().await else {
            return Checked::WrongPassword;
        };
        let matched = tokio::task::spawn_blocking(move || {
            // Held until the hash is done, even if the request is gone, so
            // abandoned checks cannot pile up on the blocking pool.
            let _permit = permit;
            bcrypt::verify(credentials.password(), &hash).unwrap_or(false)
        })
        .await
        .unwrap_or(false);
        match (known, matched) {
            (false, _) => Checked::UnknownUser,
            (true, true) => Checked::Right,
            (true, false) => Checked::WrongPassword,
        }
    }

    fn tag(&self, credentials: &Credentials) -> [u8; 32] {
        let mut tag = [0; 32];
        // HMAC-SHA256 tags are 32 bytes.
        tag.copy_from_slice(hmac::sign(&self.key, credentials.text.as_bytes()).as_ref());
        tag
    }

    fn verified_set(&self) -> std::sync::MutexGuard<'_, HashSet<[u8; 32]>> {
        self.verified.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn remember(&self, tag: [u8; 32]) {
        let mut set = self.verified_set();
        if set.len() >= VERIFIED_MAX {
            set.clear();
        }
        set.insert(tag);
    }

    /// Logs at most once a second. The user name is logged only when it
    /// exists: names that do not are attacker-chosen text, or a password
    /// typed into the wrong field.
    fn log_failure(&self, peer: SocketAddr, reason: &str, user: Option<&str>) {
        if let Some(suppressed) = self.failures.admit() {
            tracing::warn!(
                %peer,
                reason,
                user = user.unwrap_or(""),
                suppressed,
                "basic authentication failed"
            );
        }
    }
}

enum Checked {
    Right,
    WrongPassword,
    UnknownUser,
}

/// A decoded `Authorization: Basic` value, `user:password`.
struct Credentials {
    text: String,
    colon: usize,
}

impl Credentials {
    /// RFC 7617: the scheme name is case-insensitive; the password may
    /// contain colons, the user name may not.
    fn parse(value: &HeaderValue) -> Option<Credentials> {
        let (scheme, token) = value.to_str().ok()?.trim().split_once(' ')?;
        if !scheme.eq_ignore_ascii_case("basic") {
            return None;
        }
        let raw = base64::engine::general_purpose::STANDARD
            .decode(token.trim())
            .ok()?;
        let text = String::from_utf8(raw).ok()?;
        let colon = text.find(':')?;
        Some(Credentials { text, colon })
    }

    fn user(&self) -> &str {
        &self.text[..self.colon]
    }

    fn password(&self) -> &str {
        &self.text[self.colon + 1..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(v: &str) -> Option<(String, String)> {
        let c = Credentials::parse(&HeaderValue::from_str(v).unwrap())?;
        Some((c.user().to_string(), c.password().to_string()))
    }

    #[test]
    fn decodes_basic_in_any_case() {
        let token = base64::engine::general_purpose::STANDARD.encode("alice:pa:ss");
        let want = Some(("alice".to_string(), "pa:ss".to_string()));
        for scheme in ["Basic", "basic", "BASIC"] {
            assert_eq!(parse(&format!("{scheme} {token}")), want);
        }
        assert_eq!(parse(&format!("Basic   {token}")), want);
        assert_eq!(parse(&format!("Bearer {token}")), None);
        assert_eq!(parse("Basic !!!"), None);
        assert_eq!(parse("Basic"), None);
        let no_colon = base64::engine::general_purpose::STANDARD.encode("alice");
        assert_eq!(parse(&format!("Basic {no_colon}")), None);
    }
}
