//! `--web.config.file`: TLS and basic auth in the format of Prometheus' exporter-toolkit, so
//! admins reuse what they wrote for node exporter.
//!
//! ```yaml
//! tls_server_config:
//!   cert_file: server.crt      # relative paths are relative to this file
//!   key_file: server.key
//!   min_version: TLS12         # optional: TLS12 (default) or TLS13
//! basic_auth_users:
//!   prometheus: $2y$10$...     # bcrypt hashes (htpasswd -nBC 10 "" | tr -d ':\n')
//! ```
//!
//! Keys this exporter does not implement (client certificates, cipher lists, HTTP headers) are
//! refused with a sentence, never silently ignored: a config that asks for client
//! certificates must not quietly serve without them.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use pki_types::pem::PemObject;
use pki_types::{CertificateDer, PrivateKeyDer};
use serde::Deserialize;
use tokio_rustls::rustls;

/// Successful logins remembered so that bcrypt (tens of ms) runs once per credential.
const AUTH_CACHE_ENTRIES: usize = 64;

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    tls_server_config: Option<TlsFileConfig>,
    #[serde(default)]
    basic_auth_users: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TlsFileConfig {
    cert_file: PathBuf,
    key_file: PathBuf,
    min_version: Option<String>,
}

/// A loaded web config: the TLS acceptor if any, and the users allowed in.
#[derive(Clone, Default)]
pub(crate) struct WebConfig {
    pub(crate) tls: Option<tokio_rustls::TlsAcceptor>,
    pub(crate) auth: Option<Arc<BasicAuth>>,
}

impl std::fmt::Debug for WebConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebConfig")
            .field("tls", &self.tls.is_some())
            .field("auth", &self.auth.is_some())
            .finish()
    }
}

/// Users and their bcrypt hashes, with a small cache of credentials already verified.
pub(crate) struct BasicAuth {
    users: BTreeMap<String, String>,
    /// Verified against when the user is unknown, so that unknown and known users take as long.
    dummy_hash: String,
    verified: Mutex<HashSet<(String, String)>>,
    /// One bcrypt at a time. Each costs tens of ms of a core and a wrong password is never
    /// remembered, so without a turn a flood of wrong passwords from the network took every
    /// core of the training machine; now it takes one at most, and a scrape whose password
    /// was verified once never waits for a turn.
    bcrypt_turn: Arc<tokio::sync::Semaphore>,
    verifying: AtomicUsize,
    most_verifying: AtomicUsize,
}

impl BasicAuth {
    /// Whether `user`/`password` is allowed: at once for a credential verified before, else
    /// after bcrypt on the blocking pool, in its turn.
    pub(crate) async fn allows(self: &Arc<Self>, user: String, password: String) -> bool {
        if self.remembered(&user, &password) {
            return true;
        }
        let Ok(turn) = self.bcrypt_turn.clone().acquire_owned().await else {
            return false;
        };
        let auth = self.clone();
        // The turn goes into the blocking task: a client that hangs up while bcrypt runs
        // must not free the turn for a second bcrypt beside it.
        tokio::task::spawn_blocking(move || {
            let _turn = turn;
            auth.check(&user, &password)
        })
        .await
        .unwrap_or(false)
    }

    fn remembered(&self, user: &str, password: &str) -> bool {
        lock(&self.verified).contains(&(user.to_string(), password.to_string()))
    }

    /// Whether `user`/`password` is allowed. Blocks for bcrypt's cost on a first login: call
    /// it through [`BasicAuth::allows`], which runs it off the async workers and in turn.
    pub(crate) fn check(&self, user: &str, password: &str) -> bool {
        // Checked again: the same credential may have been verified while this one waited
        // for its turn (a Prometheus scraping several paths at once after a restart).
        if self.remembered(user, password) {
            return true;
        }
        let now = self.verifying.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_verifying.fetch_max(now, Ordering::SeqCst);
        let ok = self.verify(user, password);
        self.verifying.fetch_sub(1, Ordering::SeqCst);
        if ok {
            let mut verified = lock(&self.verified);
            if verified.len() >= AUTH_CACHE_ENTRIES {
                verified.clear();
            }
            verified.insert((user.to_string(), password.to_string()));
        }
        ok
    }

    fn verify(&self, user: &str, password: &str) -> bool {
        let (hash, known) = match self.users.get(user) {
            Some(hash) => (hash.as_str(), true),
            None => (self.dummy_hash.as_str(), false),
        };
        bcrypt::verify(password, hash).unwrap_or(false) && known
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Reads and checks `path`; every error is a sentence that names the file.
pub(crate) fn load(path: &Path) -> Result<WebConfig, String> {
    let text = read_bounded(path)?;
    let parsed: FileConfig = if text.trim().is_empty() {
        FileConfig::default()
    } else {
        serde_norway::from_str(&text).map_err(|e| {
            format!(
                "the web config {} is not valid: {e} (torchtop supports tls_server_config \
                 with cert_file, key_file and min_version, and basic_auth_users)",
                path.display()
            )
        })?
    };
    let base = path.parent().unwrap_or(Path::new("."));
    let tls = match &parsed.tls_server_config {
        Some(tls) => Some(tls_acceptor(tls, base, path)?),
        None => None,
    };
    let auth = if parsed.basic_auth_users.is_empty() {
        None
    } else {
        Some(Arc::new(auth_from(parsed.basic_auth_users, path)?))
    };
    Ok(WebConfig { tls, auth })
}

fn read_bounded(path: &Path) -> Result<String, String> {
    crate::config::read_text(path, "the web config", "it should be a few lines of YAML")
}

fn auth_from(users: BTreeMap<String, String>, path: &Path) -> Result<BasicAuth, String> {
    let mut cost = bcrypt::DEFAULT_COST;
    for (user, hash) in &users {
        match hash.parse::<bcrypt::HashParts>() {
            Ok(parts) => cost = parts.get_cost(),
            Err(_) => {
                return Err(format!(
                    "the password of user {user:?} in {} is not a bcrypt hash; make one with \
                 `htpasswd -nBC 10 \"\" | tr -d ':\\n'`",
                    path.display()
                ))
            }
        }
    }
    let dummy_hash = bcrypt::hash("torchtop: no such user", cost)
        .map_err(|e| format!("cannot prepare password checks: {e}"))?;
    Ok(BasicAuth {
        users,
        dummy_hash,
        verified: Mutex::new(HashSet::new()),
        bcrypt_turn: Arc::new(tokio::sync::Semaphore::new(1)),
        verifying: AtomicUsize::new(0),
        most_verifying: AtomicUsize::new(0),
    })
}

fn tls_acceptor(
    tls: &TlsFileConfig,
    base: &Path,
    path: &Path,
) -> Result<tokio_rustls::TlsAcceptor, String> {
    let cert_path = base.join(&tls.cert_file);
    let key_path = base.join(&tls.key_file);
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&cert_path)
        .and_then(std::iter::Iterator::collect)
        .map_err(|e| format!("cannot read the certificate {}: {e}", cert_path.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "the certificate file {} holds no PEM certificate",
            cert_path.display()
        ));
    }
    let key = PrivateKeyDer::from_pem_file(&key_path)
        .map_err(|e| format!("cannot read the private key {}: {e}", key_path.display()))?;
    let versions: &[&rustls::SupportedProtocolVersion] = match tls.min_version.as_deref() {
        None | Some("TLS12") => &[&rustls::version::TLS13, &rustls::version::TLS12],
        Some("TLS13") => &[&rustls::version::TLS13],
        Some(other) => {
            return Err(format!(
                "min_version {other:?} in {} is not supported; use TLS12 or TLS13",
                path.display()
            ))
        }
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .map_err(|e| format!("cannot set up TLS: {e}"))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| {
            format!(
                "the certificate {} and key {} do not make a TLS identity: {e}",
                cert_path.display(),
                key_path.display()
            )
        })?;
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn basic_auth_checks_bcrypt_and_refuses_unknown_users() {
        let dir = tempfile::tempdir().unwrap();
        let hash = bcrypt::hash("s3cret", 4).unwrap();
        let path = write(
            dir.path(),
            "web.yml",
            &format!("basic_auth_users:\n  prom: '{hash}'\n"),
        );
        let config = load(&path).unwrap();
        assert!(config.tls.is_none());
        let auth = config.auth.unwrap();
        assert!(auth.check("prom", "s3cret"));
        assert!(auth.check("prom", "s3cret"), "cached");
        assert!(!auth.check("prom", "wrong"));
        assert!(!auth.check("nobody", "s3cret"));
    }

    /// A flood of wrong passwords (and of unknown users) gets one bcrypt at a time, and a
    /// password verified once is let in without waiting for a turn.
    #[test]
    fn wrong_passwords_take_bcrypt_one_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let hash = bcrypt::hash("s3cret", 6).unwrap();
        let path = write(
            dir.path(),
            "web.yml",
            &format!("basic_auth_users:\n  prom: '{hash}'\n"),
        );
        let auth = load(&path).unwrap().auth.unwrap();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(4)
            .build()
            .unwrap();
        let allowed = runtime.block_on(async {
            let floods: Vec<_> = (0..12)
                .map(|i| {
                    let auth = auth.clone();
                    let user = if i % 3 == 0 { "mallory" } else { "prom" };
                    tokio::spawn(async move { auth.allows(user.into(), format!("guess{i}")).await })
                })
                .collect();
            let mut allowed = Vec::new();
            for flood in floods {
                allowed.push(flood.await.unwrap());
            }
            allowed
        });
        assert!(allowed.iter().all(|&ok| !ok), "{allowed:?}");
        assert_eq!(auth.most_verifying.load(Ordering::SeqCst), 1);
        assert!(runtime.block_on(auth.allows("prom".into(), "s3cret".into())));
        // Remembered: let in even while another request holds the turn.
        let _held = runtime.block_on(auth.bcrypt_turn.clone().acquire_owned());
        assert!(runtime.block_on(auth.allows("prom".into(), "s3cret".into())));
    }

    #[test]
    fn unsupported_keys_and_bad_hashes_are_refused_with_a_sentence() {
        let dir = tempfile::tempdir().unwrap();
        let client_ca = write(
            dir.path(),
            "a.yml",
            "tls_server_config:\n  cert_file: a\n  key_file: b\n  client_ca_file: c\n",
        );
        let error = load(&client_ca).unwrap_err();
        assert!(error.contains("client_ca_file"), "{error}");
        let plain = write(dir.path(), "b.yml", "basic_auth_users:\n  prom: hunter2\n");
        let error = load(&plain).unwrap_err();
        assert!(error.contains("not a bcrypt hash"), "{error}");
        let missing = write(
            dir.path(),
            "c.yml",
            "tls_server_config:\n  cert_file: nope.crt\n  key_file: nope.key\n",
        );
        let error = load(&missing).unwrap_err();
        assert!(error.contains("nope.crt"), "{error}");
        assert!(load(&dir.path().join("absent.yml")).is_err());
    }

    #[test]
    fn an_empty_file_means_no_tls_and_no_auth() {
        let dir = tempfile::tempdir().unwrap();
        let config = load(&write(dir.path(), "e.yml", "")).unwrap();
        assert!(config.tls.is_none() && config.auth.is_none());
    }
}
