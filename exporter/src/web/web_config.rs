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
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::http::{HeaderName, HeaderValue};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use tokio_rustls::rustls;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    tls_server_config: Option<RawTls>,
    http_server_config: Option<RawHttp>,
    #[serde(default, deserialize_with = "unique_keys")]
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
    #[serde(default, deserialize_with = "unique_keys")]
    headers: BTreeMap<String, String>,
    http2: Option<bool>,
}

/// A string-to-string mapping whose keys must be unique, as in
/// exporter-toolkit (Go's strict YAML decoding): a user listed twice is an
/// edit mistake, and silently keeping the last of two hashes would hide it.
/// The YAML decoder checks this for struct fields but not for maps.
fn unique_keys<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, String>, D::Error> {
    struct UniqueKeys;
    impl<'de> Visitor<'de> for UniqueKeys {
        type Value = BTreeMap<String, String>;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a map")
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = BTreeMap::new();
            while let Some((key, value)) = map.next_entry::<String, String>()? {
                if out.contains_key(&key) {
                    // The key (a user or header name) only: values may be secrets.
                    return Err(de::Error::custom(format_args!("duplicate key {key:?}")));
                }
                out.insert(key, value);
            }
            Ok(out)
        }
    }
    d.deserialize_map(UniqueKeys)
}

/// A loaded, validated web configuration.
pub struct WebConfig {
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// TLS requires a verified client certificate (RequireAndVerifyClientCert).
    pub client_certs_required: bool,
    /// user → bcrypt hash
    pub users: BTreeMap<String, String>,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// The configured hash with the highest cost: an unknown user's
    /// password is checked against it (and refused whatever the result), so
    /// that answer takes as long as a known user's and response times do not
    /// reveal which users exist. Empty when there are no users.
    decoy_hash: String,
}

impl WebConfig {
    /// Plain HTTP, no auth: what runs without `--web.config.file`.
    pub fn none() -> WebConfig {
        WebConfig {
            tls: None,
            client_certs_required: false,
            users: BTreeMap::new(),
            headers: Vec::new(),
            decoy_hash: String::new(),
        }
    }

    /// At start-up. An empty file means plain HTTP, as in exporter-toolkit.
    pub fn load(path: &Path) -> Result<WebConfig, String> {
        let raw = read(path)?;
        build(raw, path).map_err(|e| at(path, e))
    }

    /// On SIGHUP, with `running` the configuration in use. Refuses a file
    /// that is empty or would turn TLS, client certificates or basic auth
    /// off: an editor's truncated save or a half-finished deployment must
    /// not silently expose the endpoint. Such a change needs a restart.
    pub fn reload(path: &Path, running: &WebConfig) -> Result<WebConfig, String> {
        let raw = read(path)?;
        if raw.is_empty() {
            return Err(at(
                path,
                "the file is empty, which would turn TLS and basic auth off; restart usescope to do that".into(),
            ));
        }
        let new = build(raw, path).map_err(|e| at(path, e))?;
        match new.weakens(running) {
            Some(what) => Err(at(
                path,
                format!("the new file would {what}; restart usescope to do that"),
            )),
            None => Ok(new),
        }
    }

    /// The hash to check `user`'s password against and whether the user
    /// exists; None when basic auth is off.
    pub fn password_hash(&self, user: &str) -> Option<(&str, bool)> {
        if self.users.is_empty() {
            return None;
        }
        Some(match self.users.get(user) {
            Some(h) => (h.as_str(), true),
            None => (self.decoy_hash.as_str(), false),
        })
    }

    /// What `self` turns off that `running` has on, if anything.
    fn weakens(&self, running: &WebConfig) -> Option<&'static str> {
        if running.tls.is_some() && self.tls.is_none() {
            Some("turn TLS off")
        } else if running.client_certs_required && !self.client_certs_required {
            Some("stop requiring client certificates")
        } else if !running.users.is_empty() && self.users.is_empty() {
            Some("turn basic auth off")
        } else {
            None
        }
    }
}

fn at(path: &Path, msg: String) -> String {
    format!("web config {}: {msg}", path.display())
}

fn read(path: &Path) -> Result<RawConfig, String> {
    let text = std::fs::read_to_string(path).map_err(|e| at(path, format!("cannot read: {e}")))?;
    if text.trim().is_empty() {
        return Ok(RawConfig::default());
    }
    serde_norway::from_str(&text).map_err(|e| at(path, format!("invalid YAML: {e}")))
}

impl RawConfig {
    /// No section at all: whitespace, comments, `{}`.
    fn is_empty(&self) -> bool {
        self.tls_server_config.is_none()
            && self.http_server_config.is_none()
            && self.basic_auth_users.is_empty()
    }
}

fn build(raw: RawConfig, path: &Path) -> Result<WebConfig, String> {
    let base = path.parent().unwrap_or(Path::new("."));
    let client_certs_required = raw
        .tls_server_config
        .as_ref()
        .is_some_and(|t| t.client_auth_type.as_deref() == Some("RequireAndVerifyClientCert"));
    let tls = match raw.tls_server_config {
        Some(t) => Some(Arc::new(build_tls(t, base)?)),
        None => None,
    };
    let mut decoy: Option<(u32, &String)> = None;
    for (user, hash) in &raw.basic_auth_users {
        let cost = bcrypt_cost(hash).ok_or_else(|| {
            format!(
                "basic_auth_users: the password of user {user:?} is not a bcrypt hash ($2a$, $2b$ or $2y$)"
            )
        })?;
        if decoy.is_none_or(|(c, _)| cost > c) {
            decoy = Some((cost, hash));
        }
    }
    let decoy_hash = decoy.map(|(_, h)| h.clone()).unwrap_or_default();
    let mut headers = Vec::new();
    if let Some(h) = raw.http_server_config {
        if h.http2 == Some(true) {
            return Err("http_server_config.http2: usescope serves HTTP/1.1 only".into());
        }
        for (k, v) in h.headers {
            let name = HeaderName::from_bytes(k.as_bytes())
                .map_err(|_| format!("http_server_config.headers: invalid header name {k:?}"))?;
            let value = HeaderValue::from_str(&v)
                .map_err(|_| format!("http_server_config.headers: invalid value for {k:?}"))?;
            headers.push((name, value));
        }
    }
    Ok(WebConfig {
        tls,
        client_certs_required,
        users: raw.basic_auth_users,
        headers,
        decoy_hash,
    })
}

/// The cost of a well-formed bcrypt hash, None for anything else.
fn bcrypt_cost(hash: &str) -> Option<u32> {
    let ok_prefix = ["$2a$", "$2b$", "$2y$"].iter().any(|p| hash.starts_with(p));
    if !ok_prefix || hash.len() != 60 {
        return None;
    }
    hash.parse::<bcrypt::HashParts>().ok().map(|p| p.get_cost())
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
    fn unknown_users_are_checked_against_the_costliest_hash() {
        let cheap = bcrypt::hash("pw", 4).unwrap();
        let dear = bcrypt::hash("pw", 5).unwrap();
        let c = load_str(&format!(
            "basic_auth_users:\n  a: '{cheap}'\n  b: '{dear}'\n  c: '{cheap}'\n"
        ))
        .unwrap();
        assert_eq!(c.password_hash("a"), Some((cheap.as_str(), true)));
        assert_eq!(c.password_hash("nobody"), Some((dear.as_str(), false)));
        assert_eq!(WebConfig::none().password_hash("a"), None);
    }

    fn reload_str(yaml: &str, running: &WebConfig) -> Result<WebConfig, String> {
        let dir = std::env::temp_dir().join(format!("usescope-wcr-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("web.yml");
        std::fs::write(&p, yaml).unwrap();
        let r = WebConfig::reload(&p, running);
        let _ = std::fs::remove_dir_all(&dir);
        r
    }

    #[test]
    fn reload_refuses_empty_files_and_turning_auth_off() {
        let h = bcrypt::hash("pw", 4).unwrap();
        let users = format!("basic_auth_users:\n  a: '{h}'\n");
        let with_users = load_str(&users).unwrap();
        for empty in ["", "  \n", "# all commented out\n", "{}\n"] {
            let e = reload_str(empty, &WebConfig::none()).err().unwrap();
            assert!(e.contains("empty"), "{empty:?}: {e}");
        }
        let headers_only = "http_server_config:\n  headers:\n    X-A: b\n";
        let e = reload_str(headers_only, &with_users).err().unwrap();
        assert!(e.contains("turn basic auth off"), "{e}");
        assert!(reload_str(headers_only, &WebConfig::none()).is_ok());
        let other = format!("basic_auth_users:\n  b: '{h}'\n");
        assert!(reload_str(&other, &with_users).is_ok());
    }

    #[test]
    fn unknown_field_and_bad_yaml() {
        let e = load_str("tls_server_config:\n  certfile: x\n")
            .err()
            .unwrap();
        assert!(
            e.contains("invalid YAML") && e.contains("`certfile`") && e.contains("line 2 column 3"),
            "{e}"
        );
        let e = load_str("tls_server_config: [unclosed").err().unwrap();
        assert!(e.contains("invalid YAML") && e.contains("line 1"), "{e}");
        assert!(load_str("::: [").err().unwrap().contains("invalid YAML"));
    }

    /// exporter-toolkit (Go's strict YAML decoding) refuses a user listed
    /// twice; silently keeping the last hash would hide an edit mistake.
    #[test]
    fn duplicate_user_is_refused() {
        let h = bcrypt::hash("pw", 4).unwrap();
        let e = load_str(&format!("basic_auth_users:\n  a: '{h}'\n  a: '{h}'\n"))
            .err()
            .unwrap();
        assert!(
            e.contains(r#"basic_auth_users: duplicate key "a""#) && !e.contains(&h),
            "{e}"
        );
        let e = load_str("http_server_config:\n  headers:\n    X-A: b\n    X-A: c\n")
            .err()
            .unwrap();
        assert!(e.contains(r#"duplicate key "X-A""#), "{e}");
    }

    /// A YAML error is one log line and does not quote the file's other
    /// lines, which may hold password hashes.
    #[test]
    fn yaml_errors_are_one_line_without_the_file_text() {
        let e = load_str("basic_auth_users:\n  alice: secrethash\nhttp_server_config: [\n")
            .err()
            .unwrap();
        assert!(e.contains("invalid YAML"), "{e}");
        assert!(!e.contains('\n') && !e.contains("secrethash"), "{e}");
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
