//! Sign-in to url servers (issue 30): OAuth 2.1 as the MCP authorization specification
//! (2025-06-18, 2025-11-25) asks of a client, held once per server by the daemon and used by
//! every client's requests through the server's one session.
//!
//! - [`SignIn`]: one per url server (its name and URL), shared by the session's requests
//!   ([`SignIn::bearer`], [`SignIn::unauthorized`], [`SignIn::forbidden`]) and the control
//!   socket's `login`/`logout` ([`login`]). Its tokens live in the [`store`], 0600.
//! - [`discovery`]: the challenge, the protected resource metadata, the authorization server
//!   metadata.
//! - [`grant`]: the token and registration endpoints.
//!
//! What a session does with a response (issue 30 §3):
//! - `401` with a token that has a refresh token: refresh, send once more;
//! - `401` under `grant = "client_credentials"`: a new token, send once more;
//! - `403` `insufficient_scope` naming scopes not yet held: under client credentials a new
//!   token with the union, send once more; otherwise the server needs a person
//!   ([`Verdict::SignIn`]) and goes `auth_required` naming the scope;
//! - else the refusal stands.
//!
//! Secrets: tokens, secrets, codes and verifiers never reach a log, status, metric or error;
//! only [`SignInStatus`] (booleans, times, scopes, issuer) is shown.

pub mod discovery;
pub mod grant;
pub mod login;
pub mod redirect;
pub mod store;

use discovery::{Challenge, ResourceMetadata, ServerMetadata};
use futures_util::StreamExt;
use grant::{Endpoint, Identity, Signer};
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use store::{Record, Store};
use support::config::{Grant, OAuthConfig};
use tracing::{info, warn};

/// A token this close to its expiry is refreshed before use, in seconds (at most a tenth of
/// its lifetime: a 60 s token is used for 54 s).
const REFRESH_AHEAD: u64 = 30;

/// What the session should do after a refusal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// A new token is in place: send the request once more.
    Retry,
    /// Only a person can fix it (`mcp-supervisor login NAME`); the scope they must grant, if
    /// a step-up named one.
    SignIn(Option<String>),
    /// The refusal stands (nothing to do about it).
    Stands,
}

pub use crate::SignInStatus;

/// Everything sign-in knows about the server's authorization, found by [`SignIn::discover`].
#[derive(Debug, Clone)]
struct Discovered {
    /// The `resource` parameter: the metadata's `resource`, verbatim; `None` in the
    /// 2025-03-26 fallback (no metadata).
    resource: Option<String>,
    issuer: String,
    meta: ServerMetadata,
    prm_scopes: Option<Vec<String>>,
}

/// What `status` shows, and the expiry it counts down from.
#[derive(Default)]
struct Shown {
    status: SignInStatus,
    /// The access token's expiry, Unix seconds.
    expires_at: Option<u64>,
}

/// One url server's sign-in.
pub struct SignIn {
    name: String,
    url: reqwest::Url,
    cfg: OAuthConfig,
    store: Store,
    http: reqwest::Client,
    /// The record, loaded at first use; the lock serializes refreshes.
    record: tokio::sync::Mutex<Option<Option<Record>>>,
    /// The last challenge a session saw (its scope and metadata URL guide `login`).
    challenge: Mutex<Option<Challenge>>,
    /// What `status` shows, kept current.
    shown: Mutex<Shown>,
    /// A `login` in progress.
    pending: Mutex<Option<login::Pending>>,
    /// The secrets held lately (access and refresh tokens, client secrets), newest last, at
    /// most [`KEPT_SECRETS`]: what a url server's errors must not quote (issue 47 §5).
    secrets: Mutex<Vec<String>>,
}

/// Secrets [`SignIn::secrets`] remembers: the current ones and those they replaced lately (an
/// upstream may still quote a token it has just refused).
const KEPT_SECRETS: usize = 8;

impl std::fmt::Debug for SignIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignIn")
            .field("name", &self.name)
            .field("url", &support::config::shown_url(self.url.as_str()))
            .finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The sign-ins of the daemon, by server name.
fn keeper() -> &'static Mutex<HashMap<String, Arc<SignIn>>> {
    static K: OnceLock<Mutex<HashMap<String, Arc<SignIn>>>> = OnceLock::new();
    K.get_or_init(Default::default)
}

/// The sign-in of server `name` for `url` with `cfg`, made once and shared (a reload with
/// another URL, settings or `token_dir` makes a new one; the store on disk is what persists).
/// `http` builds the client toward the authorization server, only when a new sign-in is made
/// (it loads the TLS roots). Errors: `http`'s.
pub fn sign_in_for(
    name: &str,
    url: &reqwest::Url,
    cfg: &OAuthConfig,
    token_dir: &Path,
    http: impl FnOnce() -> Result<reqwest::Client, String>,
) -> Result<Arc<SignIn>, String> {
    let mut k = lock(keeper());
    if let Some(s) = k.get(name) {
        if s.url == *url && s.cfg == *cfg && s.store == Store::new(token_dir, name) {
            return Ok(s.clone());
        }
    }
    let http = http()?;
    let s = Arc::new(SignIn {
        name: name.to_string(),
        url: url.clone(),
        cfg: cfg.clone(),
        store: Store::new(token_dir, name),
        http,
        record: tokio::sync::Mutex::new(None),
        challenge: Mutex::new(None),
        shown: Mutex::new(Shown {
            status: SignInStatus {
                grant: grant_name(&cfg.grant),
                ..SignInStatus::default()
            },
            expires_at: None,
        }),
        pending: Mutex::new(None),
        secrets: Mutex::new(Vec::new()),
    });
    k.insert(name.to_string(), s.clone());
    Ok(s)
}

/// The sign-in of server `name`, once its session has started.
pub fn lookup(name: &str) -> Option<Arc<SignIn>> {
    lock(keeper()).get(name).cloned()
}

/// What `status` shows of server `name`'s sign-in.
pub fn status(name: &str) -> Option<SignInStatus> {
    lookup(name).map(|s| {
        let shown = lock(&s.shown);
        let mut st = shown.status.clone();
        st.expires_in_s = shown
            .expires_at
            .map(|t| (t as i64).saturating_sub(grant::now_s() as i64));
        st
    })
}

fn grant_name(g: &Grant) -> &'static str {
    match g {
        Grant::AuthorizationCode => "authorization_code",
        Grant::ClientCredentials => "client_credentials",
    }
}

/// A reqwest error as one line without URL query or body.
pub fn http_error(e: &reqwest::Error) -> String {
    let kind = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "cannot connect"
    } else if e.is_redirect() {
        "redirected"
    } else {
        "request failed"
    };
    match e.url() {
        Some(u) => format!("{kind} ({})", discovery::shown(u)),
        None => kind.to_string(),
    }
}

/// Reads a response body up to `max` bytes.
pub async fn read_limited(resp: reqwest::Response, max: usize) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    let mut s = resp.bytes_stream();
    while let Some(chunk) = s.next().await {
        let chunk = chunk.map_err(|e| http_error(&e))?;
        if out.len().saturating_add(chunk.len()) > max {
            return Err(format!("the answer is larger than {max} bytes"));
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

/// Whether every scope of `wanted` is in `held`.
fn covered(wanted: &str, held: Option<&str>) -> bool {
    let held: Vec<&str> = held.unwrap_or("").split_whitespace().collect();
    wanted.split_whitespace().all(|w| held.contains(&w))
}

/// `a` and `b`, space-separated, each scope once, in order.
fn union(a: Option<&str>, b: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    for s in a
        .unwrap_or("")
        .split_whitespace()
        .chain(b.split_whitespace())
    {
        if !out.contains(&s) {
            out.push(s);
        }
    }
    out.join(" ")
}

impl SignIn {
    /// The tokens and client secrets this sign-in holds or held lately (see [`KEPT_SECRETS`]),
    /// for the redaction of what the server says back (issue 47 §5). Never shown anywhere.
    pub fn secrets(&self) -> Vec<String> {
        lock(&self.secrets).clone()
    }

    /// Remembers `found` among [`SignIn::secrets`].
    fn keep_secrets<'a>(&self, found: impl IntoIterator<Item = &'a str>) {
        let mut kept = lock(&self.secrets);
        for f in found {
            if f.is_empty() || kept.iter().any(|k| k == f) {
                continue;
            }
            kept.push(f.to_string());
            if kept.len() > KEPT_SECRETS {
                kept.remove(0);
            }
        }
    }

    /// Updates what `status` shows from `record`.
    fn show(&self, record: Option<&Record>) {
        if let Some(r) = record {
            self.keep_secrets(
                [&r.access_token, &r.refresh_token, &r.client_secret]
                    .into_iter()
                    .flatten()
                    .map(String::as_str),
            );
        }
        let mut shown = lock(&self.shown);
        shown.expires_at = record.and_then(|r| r.expires_at);
        let s = &mut shown.status;
        s.signed_in = record.is_some_and(|r| r.access_token.is_some() || r.refresh_token.is_some());
        s.issuer = record.map(|r| r.issuer.clone());
        s.scope = record.and_then(|r| r.scope.clone());
        s.refreshable = record.is_some_and(|r| r.refresh_token.is_some());
    }

    fn note_error(&self, e: Option<String>) {
        // An authorization server's answer can quote what it was sent (issue 47 §5).
        let e = e.map(|e| self.redacted(e));
        if let Some(e) = &e {
            warn!(server = %self.name, error = %e, "sign-in");
        }
        lock(&self.shown).status.last_error = e;
    }

    /// `text` with this sign-in's secrets ([`SignIn::secrets`], 4 bytes or more) replaced by
    /// `<redacted>`.
    fn redacted(&self, mut text: String) -> String {
        for s in lock(&self.secrets).iter().filter(|s| s.len() >= 4) {
            if text.contains(s.as_str()) {
                text = text.replace(s.as_str(), "<redacted>");
            }
        }
        text
    }

    /// The record, loaded from the store at first use. A record for another URL is not used.
    async fn record(&self) -> tokio::sync::MutexGuard<'_, Option<Option<Record>>> {
        let mut g = self.record.lock().await;
        if g.is_none() {
            let loaded = match self.store.load() {
                Ok(Some(r)) if r.url == self.url.as_str() => Some(r),
                Ok(Some(_)) => {
                    info!(server = %self.name, "the stored sign-in is for another URL; not used");
                    None
                }
                Ok(None) => None,
                Err(e) => {
                    self.note_error(Some(e));
                    None
                }
            };
            self.show(loaded.as_ref());
            *g = Some(loaded);
        }
        g
    }

    fn save(&self, r: &Record) {
        if let Err(e) = self.store.save(r) {
            self.note_error(Some(e));
        }
        self.show(Some(r));
    }

    /// The pre-registered client's key, read now.
    fn signer(&self) -> Result<Option<Signer>, String> {
        let Some(p) = &self.cfg.private_key_file else {
            return Ok(None);
        };
        let pem = std::fs::read_to_string(p)
            .map_err(|e| format!("cannot read oauth.private_key_file {}: {e}", p.display()))?;
        Ok(Some(Signer {
            pem,
            algorithm: self.cfg.signing_algorithm.clone(),
        }))
    }

    fn secret(&self) -> Result<Option<String>, String> {
        let Some(p) = &self.cfg.client_secret_file else {
            return Ok(None);
        };
        let secret = std::fs::read_to_string(p)
            .map(|s| s.trim().to_string())
            .map_err(|e| format!("cannot read oauth.client_secret_file {}: {e}", p.display()))?;
        self.keep_secrets([secret.as_str()]);
        Ok(Some(secret))
    }

    /// The bearer token to send now: refreshed first when it is about to expire (and a
    /// refresh token is held), fetched under client credentials when there is none. `None`:
    /// send without (the server's 401 starts discovery).
    pub async fn bearer(&self) -> Option<String> {
        let mut g = self.record().await;
        let rec = g.as_mut().and_then(|r| r.as_mut());
        if let Some(r) = rec {
            let ahead = r
                .lifetime_s
                .map_or(REFRESH_AHEAD, |l| (l / 10).min(REFRESH_AHEAD));
            let fresh = r
                .expires_at
                .is_none_or(|t| t > grant::now_s().saturating_add(ahead));
            if r.access_token.is_some() && fresh {
                return r.access_token.clone();
            }
            if r.refresh_token.is_some() {
                if let Ok(()) = self.refresh_locked(r).await {
                    return r.access_token.clone();
                }
            } else if self.cfg.grant == Grant::ClientCredentials
                && self.client_credentials_locked(&mut g, None).await.is_ok()
            {
                return g.as_ref()?.as_ref()?.access_token.clone();
            }
            return None;
        }
        None
    }

    /// Refreshes `r` in place and stores it. A refused refresh (`invalid_grant`) drops the
    /// tokens: the sign-in must be made again.
    async fn refresh_locked(&self, r: &mut Record) -> Result<(), String> {
        let Some(rt) = r.refresh_token.clone() else {
            return Err("no refresh token".into());
        };
        let identity = Identity {
            client_id: r.client_id.clone(),
            // A pre-registered client's secret stays in its file.
            client_secret: match &r.client_secret {
                Some(s) => Some(s.clone()),
                None => self.secret()?,
            },
            auth_method: r.auth_method.clone(),
        };
        let signer = self.signer()?;
        let ep = Endpoint {
            http: &self.http,
            token_endpoint: &r.token_endpoint,
            issuer: &r.issuer,
            identity: &identity,
            signer: signer.as_ref(),
            resource: &r.resource,
        };
        match ep.refresh(&rt, None).await {
            Ok(t) => {
                grant::apply(r, t);
                info!(server = %self.name, "access token refreshed");
                self.note_error(None);
                self.save(r);
                Ok(())
            }
            Err(e) => {
                if grant::is_invalid_grant(&e) {
                    r.access_token = None;
                    r.refresh_token = None;
                    self.save(r);
                }
                self.note_error(Some(e.clone()));
                Err(e)
            }
        }
    }

    /// Notes the server's challenge (a 401 or 403) for `login`.
    fn remember(&self, c: &Challenge) {
        *lock(&self.challenge) = Some(c.clone());
    }

    /// A `401` to a request sent with `sent` (or no token). Returns [`Verdict::Retry`] when a
    /// new token is in place.
    pub async fn unauthorized(&self, www: Option<&str>, sent: Option<&str>) -> Verdict {
        let c = discovery::parse_challenge(www.unwrap_or(""));
        self.remember(&c);
        let mut g = self.record().await;
        let held = matches!(g.as_ref(), Some(Some(r)) if r.access_token.is_some() || r.refresh_token.is_some());
        if !c.bearer && !held && self.cfg.grant == Grant::AuthorizationCode {
            // A 401 without a Bearer challenge, and no sign-in to renew: not OAuth's to fix.
            return Verdict::Stands;
        }
        if let Some(Some(r)) = g.as_ref() {
            // Another request refreshed meanwhile: use that.
            if r.access_token.is_some() && r.access_token.as_deref() != sent {
                return Verdict::Retry;
            }
        }
        if self.cfg.grant == Grant::ClientCredentials {
            // The configured scopes, else what the server asks for.
            let scope = Some(self.cfg.scopes.join(" "))
                .filter(|s| !s.is_empty())
                .or(c.scope.clone());
            return match self
                .client_credentials_locked(&mut g, scope.as_deref())
                .await
            {
                Ok(()) => Verdict::Retry,
                Err(_) => Verdict::Stands,
            };
        }
        if let Some(Some(r)) = g.as_mut() {
            if r.refresh_token.is_some() && self.refresh_locked(r).await.is_ok() {
                return Verdict::Retry;
            }
            r.access_token = None;
            let r = r.clone();
            self.save(&r);
        }
        Verdict::SignIn(c.scope)
    }

    /// A `403`. Only `insufficient_scope` naming a scope not held is acted on (a step-up,
    /// MCP authorization "Scope Challenge Handling"); one already held stands (asking again
    /// would not help: the retry limit).
    pub async fn forbidden(&self, www: Option<&str>) -> Verdict {
        let c = discovery::parse_challenge(www.unwrap_or(""));
        if c.error.as_deref() != Some("insufficient_scope") {
            return Verdict::Stands;
        }
        self.remember(&c);
        let Some(wanted) = c.scope.clone() else {
            return Verdict::Stands;
        };
        let mut g = self.record().await;
        let held = g
            .as_ref()
            .and_then(|r| r.as_ref())
            .and_then(|r| r.scope.clone());
        if covered(&wanted, held.as_deref()) {
            return Verdict::Stands;
        }
        let allowed = self.cfg.scopes.join(" ");
        if self.cfg.grant == Grant::ClientCredentials
            && !self.cfg.scopes.is_empty()
            && !covered(&wanted, Some(&allowed))
        {
            // No person to ask: never beyond the configured `scopes`.
            return Verdict::Stands;
        }
        let scope = union(held.as_deref(), &wanted);
        if self.cfg.grant == Grant::ClientCredentials {
            return match self.client_credentials_locked(&mut g, Some(&scope)).await {
                Ok(()) => Verdict::Retry,
                Err(_) => Verdict::Stands,
            };
        }
        info!(server = %self.name, scope = ?scope, "the server asks for more scope: a sign-in is needed (mcp-supervisor login {})", self.name);
        lock(&self.shown).status.needs_scope = Some(scope.clone());
        Verdict::SignIn(Some(scope))
    }

    /// Discovery from the challenge `c` (MCP authorization, "Authorization Server
    /// Discovery"), with the 2025-03-26 fallbacks when the server publishes no metadata.
    async fn discover(&self, c: &Challenge) -> Result<Discovered, String> {
        let mut prm: Option<ResourceMetadata> = None;
        for u in discovery::resource_metadata_urls(&self.url, c) {
            if let Some(m) = discovery::get_json::<ResourceMetadata>(&self.http, &u).await? {
                prm = Some(m);
                break;
            }
        }
        let (issuer_url, resource, prm_scopes) = match &prm {
            Some(m) => {
                if !discovery::resource_covers(&m.resource, &self.url) {
                    return Err(format!(
                        "the server's metadata names resource {} which does not match {}; refusing to sign in (tokens for it could be used elsewhere)",
                        support::config::shown_url(&m.resource),
                        discovery::shown(&self.url)
                    ));
                }
                let issuer = m
                    .authorization_servers
                    .first()
                    .ok_or("the server's metadata names no authorization server")?;
                let u = reqwest::Url::parse(issuer)
                    .map_err(|_| "the authorization server is not a URL".to_string())?;
                (u, Some(m.resource.clone()), m.scopes_supported.clone())
            }
            None => {
                let mut origin = self.url.clone();
                origin.set_path("/");
                origin.set_query(None);
                (origin, None, None)
            }
        };
        self.secure_enough(&issuer_url)?;
        let mut meta: Option<ServerMetadata> = None;
        for u in discovery::authorization_server_metadata_urls(&issuer_url) {
            if let Some(m) = discovery::get_json::<ServerMetadata>(&self.http, &u).await? {
                meta = Some(m);
                break;
            }
        }
        let issuer = issuer_url.as_str().trim_end_matches('/').to_string();
        if let (Some(m), true) = (&meta, prm.is_some()) {
            // RFC 8414 §3.3: the metadata is the issuer's own. (Not in the 2025-03-26
            // fallback, where the server's origin stands in for an issuer it never named.)
            let named = m.issuer.as_deref().map(|i| i.trim_end_matches('/'));
            if named.is_some_and(|n| n != issuer) {
                return Err(format!(
                    "the authorization server {} publishes metadata for another issuer; refusing to sign in",
                    discovery::shown(&issuer_url)
                ));
            }
        }
        if let Some(pinned) = &self.cfg.issuer {
            if *pinned != issuer {
                return Err(format!(
                    "the server names authorization server {}, not `oauth.issuer` {}; refusing to sign in there",
                    discovery::shown(&issuer_url),
                    pinned
                ));
            }
        }
        let meta = match meta {
            Some(m) => m,
            None if prm.is_none() => {
                // 2025-03-26: the server's origin, at its default paths.
                let at = |p: &str| {
                    issuer_url
                        .join(p)
                        .map(|u| u.to_string())
                        .unwrap_or_default()
                };
                ServerMetadata {
                    authorization_endpoint: Some(at("/authorize")),
                    token_endpoint: at("/token"),
                    registration_endpoint: Some(at("/register")),
                    ..ServerMetadata::default()
                }
            }
            None => {
                return Err(format!(
                    "the authorization server {} publishes no metadata",
                    discovery::shown(&issuer_url)
                ))
            }
        };
        for ep in [
            Some(&meta.token_endpoint),
            meta.authorization_endpoint.as_ref(),
            meta.registration_endpoint.as_ref(),
        ]
        .into_iter()
        .flatten()
        {
            let u = reqwest::Url::parse(ep)
                .map_err(|_| format!("the authorization server's endpoint {ep:?} is not a URL"))?;
            self.secure_enough(&u)?;
        }
        Ok(Discovered {
            resource,
            issuer: match &prm {
                Some(_) => issuer,
                None => meta.issuer.clone().unwrap_or(issuer),
            },
            meta,
            prm_scopes,
        })
    }

    /// Refuses an authorization server URL that is not `https`, but `http` to loopback or
    /// where the server's `allow_plain_http` says so. Codes, secrets and tokens travel there.
    fn secure_enough(&self, u: &reqwest::Url) -> Result<(), String> {
        match u.scheme() {
            "https" => Ok(()),
            "http"
                if self.cfg.allow_plain_http
                    || support::config::is_loopback_host(u.host_str().unwrap_or_default()) =>
            {
                Ok(())
            }
            _ => Err(format!(
                "the authorization server's URL {} is not https; refusing to send credentials there",
                discovery::shown(u)
            )),
        }
    }

    /// The scope to ask for: configured, else the challenge's, else the resource metadata's
    /// `scopes_supported`; plus `offline_access` for a person's sign-in when the
    /// authorization server lists it (a refresh token). `None`: no `scope` parameter.
    fn scope_for(&self, c: &Challenge, d: &Discovered, person: bool) -> Option<String> {
        let mut s = if !self.cfg.scopes.is_empty() {
            self.cfg.scopes.join(" ")
        } else if let Some(s) = c.scope.clone().filter(|s| !s.trim().is_empty()) {
            s
        } else if let Some(list) = &d.prm_scopes {
            list.join(" ")
        } else {
            String::new()
        };
        let needed = lock(&self.shown).status.needs_scope.clone();
        if let Some(needed) = needed {
            s = union(Some(&s), &needed);
        }
        let offline = d
            .meta
            .scopes_supported
            .as_ref()
            .is_some_and(|l| l.iter().any(|x| x == "offline_access"));
        if person && offline && !s.is_empty() {
            s = union(Some(&s), "offline_access");
        }
        Some(s).filter(|s| !s.trim().is_empty())
    }

    /// The client credentials grant, storing the token. Discovery first when nothing is
    /// known yet.
    async fn client_credentials_locked(
        &self,
        g: &mut tokio::sync::MutexGuard<'_, Option<Option<Record>>>,
        scope: Option<&str>,
    ) -> Result<(), String> {
        let result = self.client_credentials_inner(g, scope).await;
        self.note_error(result.as_ref().err().cloned());
        result
    }

    async fn client_credentials_inner(
        &self,
        g: &mut tokio::sync::MutexGuard<'_, Option<Option<Record>>>,
        scope: Option<&str>,
    ) -> Result<(), String> {
        let c = lock(&self.challenge).clone().unwrap_or_default();
        let d = self.discover(&c).await?;
        let client_id = self
            .cfg
            .client_id
            .clone()
            .ok_or("client_credentials needs oauth.client_id")?;
        let secret = self.secret()?;
        let signer = self.signer()?;
        let identity = Identity {
            auth_method: grant::pre_registered_method(&d.meta, secret.is_some(), signer.is_some()),
            client_id,
            client_secret: secret,
        };
        let scope = scope
            .map(str::to_string)
            .or_else(|| self.scope_for(&c, &d, false));
        let resource = d.resource.clone().unwrap_or_default();
        let ep = Endpoint {
            http: &self.http,
            token_endpoint: &d.meta.token_endpoint,
            issuer: &d.issuer,
            identity: &identity,
            signer: signer.as_ref(),
            resource: &resource,
        };
        let t = ep.client_credentials(scope.as_deref()).await?;
        let mut r = Record {
            url: self.url.to_string(),
            resource,
            issuer: d.issuer.clone(),
            token_endpoint: d.meta.token_endpoint.clone(),
            client_id: identity.client_id.clone(),
            // The configured secret stays in its file.
            client_secret: None,
            auth_method: identity.auth_method.clone(),
            signed_in_at: grant::now_s(),
            ..Record::default()
        };
        grant::apply(&mut r, t);
        info!(server = %self.name, issuer = %r.issuer, scope = ?r.scope, "token obtained (client credentials)");
        self.save(&r);
        **g = Some(Some(r));
        Ok(())
    }

    /// Forgets the sign-in (store and memory).
    pub async fn logout(&self) -> Result<bool, String> {
        let mut g = self.record().await;
        let had = matches!(g.as_ref(), Some(Some(_)));
        self.store.remove()?;
        *g = Some(None);
        self.show(None);
        lock(&self.shown).status.needs_scope = None;
        info!(server = %self.name, "signed out");
        Ok(had)
    }
}

#[cfg(test)]
mod tests {
    use super::{covered, sign_in_for, status, union};
    use support::config::OAuthConfig;

    #[test]
    fn a_sign_in_error_quoting_a_token_is_redacted() {
        let cfg = OAuthConfig::default();
        let url = reqwest::Url::parse("https://mcp.example.com/mcp").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let http = || {
            reqwest::Client::builder()
                .tls_backend_preconfigured(crate::remote::tls::client_config(None, false)?)
                .build()
                .map_err(|e| e.to_string())
        };
        let s = sign_in_for("redact-test", &url, &cfg, dir.path(), http).unwrap();
        s.keep_secrets(["refresh-tok-123456", "ab"]);
        s.note_error(Some("invalid_grant: refresh-tok-123456 ab".into()));
        assert_eq!(
            status("redact-test").unwrap().last_error.as_deref(),
            Some("invalid_grant: <redacted> ab")
        );
        assert_eq!(s.secrets(), ["refresh-tok-123456", "ab"]);
    }

    #[test]
    fn scopes_are_compared_and_joined_as_sets() {
        assert!(covered("a b", Some("b c a")));
        assert!(!covered("a d", Some("a b")));
        assert!(!covered("a", None));
        assert!(covered("", None));
        assert_eq!(union(Some("a b"), "b c"), "a b c");
        assert_eq!(union(None, "x"), "x");
    }
}
