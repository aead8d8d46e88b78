//! `--web.config.file`: TLS, mutual TLS, basic auth and response headers, in
//! the YAML format of Prometheus' exporter-toolkit, so operators reuse the
//! files they already have for node_exporter.
//!
//! ```yaml
//! tls_server_config:
//!   cert_file: server.crt
//!   key_file: server.key
//!   client_auth_type: RequireAndVerifyClientCert   # optional
//!   client_ca_file: ca.crt                          # with client auth
//!   min_version: TLS12                              # TLS12 | TLS13
//! http_server_config:
//!   headers:
//!     Strict-Transport-Security: max-age=31536000
//! basic_auth_users:
//!   prometheus: $2y$10$...                          # bcrypt only
//! ```
//!
//! Every problem is found at load time and reported as one line naming the
//! file and the field; relative paths are relative to the config file, as in
//! exporter-toolkit. Secrets never appear in errors or logs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::http::{HeaderName, HeaderValue};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use serde::Deserialize;
use tokio_rustls::rustls;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    tls_server_config: Option<RawTls>,
    http_server_config: Option<RawHttp>,
    #[serde(default)]
    basic_auth_users: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTls {
    cert_file: Option<PathBuf>,
    key_file: Option<PathBuf>,
    client_auth_type: Option<String>,
    client_ca_file: Option<PathBuf>,
    min_version: Option<String>,
    max_version: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHttp {
    #[serde(default)]
    headers: BTreeMap<String, String>,
    http2: Option<bool>,
}

/// A loaded, validated web configuration.
pub struct WebConfig {
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// user → bcrypt hash
    pub users: BTreeMap<String, String>,
    pub headers: Vec<(HeaderName, HeaderValue)>,
}

impl WebConfig {
    /// Plain HTTP, no auth: what runs without `--web.config.file`.
    pub fn none() -> WebConfig {
        WebConfig {
            tls: None,
            users: BTreeMap::new(),
            headers: Vec::new(),
        }
    }

    pub fn load(path: &Path) -> Result<WebConfig, String> {
        let at = |msg: String| format!("web config {}: {msg}", path.display());
        let text = std::fs::read_to_string(path).map_err(|e| at(format!("cannot read: {e}")))?;
        let raw: RawConfig = if text.trim().is_empty() {
            RawConfig::default()
        } else {
            serde_yaml::from_str(&text).map_err(|e| at(format!("invalid YAML: {e}")))?
        };
        let base = path.parent().unwrap_or(Path::new("."));
        let tls = match raw.tls_server_config {
            Some(t) => Some(Arc::new(build_tls(t, base).map_err(at)?)),
            None => None,
        };
        for (user, hash) in &raw.basic_auth_users {
            if !is_bcrypt(hash) {
                return Err(at(format!(
                    "basic_auth_users: the password of user {user:?} is not a bcrypt hash ($2a$, $2b$ or $2y$)"
                )));
            }
        }
        let mut headers = Vec::new();
        if let Some(h) = raw.http_server_config {
            if h.http2 == Some(true) {
                return Err(at(
                    "http_server_config.http2: usescope serves HTTP/1.1 only".into(),
                ));
            }
            for (k, v) in h.headers {
                let name = HeaderName::from_bytes(k.as_bytes()).map_err(|_| {
                    at(format!(
                        "http_server_config.headers: invalid header name {k:?}"
                    ))
                })?;
                let value = HeaderValue::from_str(&v).map_err(|_| {
                    at(format!(
                        "http_server_config.headers: invalid value for {k:?}"
                    ))
                })?;
                headers.push((name, value));
            }
        }
        Ok(WebConfig {
            tls,
            users: raw.basic_auth_users,
            headers,
        })
    }
}

fn is_bcrypt(hash: &str) -> bool {
    let ok_prefix = ["$2a$", "$2b$", "$2y$"].iter().any(|p| hash.starts_with(p));
    ok_prefix && hash.len() == 60 && hash.parse::<bcrypt::HashParts>().is_ok()
}

fn resolve(base: &Path, p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        base.join(p)
    }
}

fn build_tls(t: RawTls, base: &Path) -> Result<rustls::ServerConfig, String> {
    let cert_file = t
        .cert_file
        .ok_or("tls_server_config.cert_file is required")?;
    let key_file = t.key_file.ok_or("tls_server_config.key_file is required")?;
    let cert_path = resolve(base, &cert_file);
    let key_path = resolve(base, &key_file);
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&cert_path)
        .map_err(|e| format!("tls_server_config.cert_file {}: {e}", cert_path.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("tls_server_config.cert_file {}: {e}", cert_path.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "tls_server_config.cert_file {}: no certificate found",
            cert_path.display()
        ));
    }
    let key = PrivateKeyDer::from_pem_file(&key_path)
        .map_err(|e| format!("tls_server_config.key_file {}: {e}", key_path.display()))?;

    let versions: &[&rustls::SupportedProtocolVersion] = match (
        t.min_version.as_deref(),
        t.max_version.as_deref(),
    ) {
        (None | Some("TLS12"), None | Some("TLS13")) => {
            &[&rustls::version::TLS13, &rustls::version::TLS12]
        }
        (Some("TLS13"), None | Some("TLS13")) => &[&rustls::version::TLS13],
        (None | Some("TLS12"), Some("TLS12")) => &[&rustls::version::TLS12],
        (Some(v @ ("TLS10" | "TLS11")), _) | (_, Some(v @ ("TLS10" | "TLS11"))) => {
            return Err(format!(
                "tls_server_config: {v} is not supported (rustls implements TLS12 and TLS13)"
            ));
        }
        (min, max) => {
            return Err(format!(
                "tls_server_config: invalid version range min_version={min:?} max_version={max:?}"
            ));
        }
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(versions)
        .map_err(|e| format!("tls_server_config: {e}"))?;

    let auth = t.client_auth_type.as_deref().unwrap_or("NoClientCert");
    let verifier = match auth {
        "NoClientCert" => None,
        "RequireAndVerifyClientCert" | "VerifyClientCertIfGiven" => {
            let ca = t.client_ca_file.ok_or_else(|| {
                format!("tls_server_config.client_ca_file is required for client_auth_type {auth}")
            })?;
            let ca_path = resolve(base, &ca);
            let mut roots = rustls::RootCertStore::empty();
            for c in CertificateDer::pem_file_iter(&ca_path).map_err(|e| {
                format!(
                    "tls_server_config.client_ca_file {}: {e}",
                    ca_path.display()
                )
            })? {
                let c = c.map_err(|e| {
                    format!(
                        "tls_server_config.client_ca_file {}: {e}",
                        ca_path.display()
                    )
                })?;
                roots.add(c).map_err(|e| {
                    format!(
                        "tls_server_config.client_ca_file {}: {e}",
                        ca_path.display()
                    )
                })?;
            }
            let mut v = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            );
            if auth == "VerifyClientCertIfGiven" {
                v = v.allow_unauthenticated();
            }
            Some(
                v.build()
                    .map_err(|e| format!("tls_server_config.client_ca_file: {e}"))?,
            )
        }
        "RequestClientCert" | "RequireAnyClientCert" => {
            return Err(format!(
                "tls_server_config.client_auth_type {auth}: accepting unverified client certificates is not supported; use RequireAndVerifyClientCert"
            ));
        }
        other => {
            return Err(format!(
                "tls_server_config.client_auth_type: unknown value {other:?}"
            ));
        }
    };
    let builder = match verifier {
        Some(v) => builder.with_client_cert_verifier(v),
        None => builder.with_no_client_auth(),
    };
    let mut cfg = builder
        .with_single_cert(certs, key)
        .map_err(|e| format!("tls_server_config: certificate and key do not match: {e}"))?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(cfg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load_str(yaml: &str) -> Result<WebConfig, String> {
        let dir =
            std::env::temp_dir().join(format!("usescope-wc-{}-{}", std::process::id(), yaml.len()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("web.yml");
        std::fs::write(&p, yaml).unwrap();
        let r = WebConfig::load(&p);
        let _ = std::fs::remove_dir_all(&dir);
        r
    }

    #[test]
    fn empty_file_is_plain_http() {
        let c = load_str("").unwrap();
        assert!(c.tls.is_none() && c.users.is_empty());
    }

    #[test]
    fn rejects_non_bcrypt_without_leaking_it() {
        let e = load_str("basic_auth_users:\n  alice: hunter2\n")
            .err()
            .unwrap();
        assert!(e.contains("alice") && e.contains("bcrypt"), "{e}");
        assert!(!e.contains("hunter2"));
    }

    #[test]
    fn accepts_bcrypt() {
        let h = bcrypt::hash("pw", 4).unwrap();
        let c = load_str(&format!("basic_auth_users:\n  alice: '{h}'\n")).unwrap();
        assert_eq!(c.users.len(), 1);
    }

    #[test]
    fn unknown_field_and_bad_yaml() {
        assert!(
            load_str("tls_server_config:\n  certfile: x\n")
                .err()
                .unwrap()
                .contains("invalid YAML")
        );
        assert!(load_str("::: [").err().unwrap().contains("invalid YAML"));
    }

    #[test]
    fn missing_cert_names_file() {
        let e = load_str(
            "tls_server_config:\n  cert_file: /nonexistent/c.pem\n  key_file: /nonexistent/k.pem\n",
        )
        .err()
        .unwrap();
        assert!(e.contains("cert_file /nonexistent/c.pem"), "{e}");
    }

    #[test]
    fn unreadable_file() {
        let e = WebConfig::load(Path::new("/nonexistent/web.yml"))
            .err()
            .unwrap();
        assert!(
            e.contains("/nonexistent/web.yml") && e.contains("cannot read"),
            "{e}"
        );
    }
}
