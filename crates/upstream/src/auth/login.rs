//! `mcp-supervisor login NAME` inside the daemon (issue 30 §1, decisions): discovery, the
//! client's identity, PKCE (S256) and a loopback redirect (RFC 8252 §7.3,
//! `http://127.0.0.1:PORT/callback`), the authorization URL handed to the CLI, then the wait
//! for the redirect (or the redirect URL pasted back over SSH) and the code exchange.
//!
//! One login per server at a time: a new `login` replaces the one waiting. The redirect
//! listener serves only the login's owners (issue 47 §2: the uid the control socket saw for
//! `login`, and the `SUDO_UID` it passed when that is root), only `GET /callback` and the start
//! page `GET /start/<nonce>` (the browser is opened there, so the authorization URL is on no
//! command line), and closes with the attempt (answered, timed out, replaced). The `state` must
//! match; an `error` redirect is a denial. `login-wait` and `login-paste` are the owners' too.

use super::discovery::{self, Challenge};
use super::grant::{self, Endpoint, Identity};
use super::redirect::{self, Callback};
use super::store::Record;
use super::{lock, Discovered, SignIn};
use oauth2::basic::BasicClient;
use oauth2::{AuthUrl, ClientId, CsrfToken, PkceCodeChallenge, RedirectUrl, Scope};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::config::Grant;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::info;

/// Why a login did not sign in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoginError {
    /// The server cannot sign in this way (not a url server, a static header, bad settings):
    /// exit 2.
    NotApplicable(String),
    /// Denied, timed out, or discovery/registration/exchange failed: exit 1.
    Failed(String),
    /// The waiting login is another user's (issue 47 §2): exit 1.
    Denied(String),
}

/// What the CLI shows: the URL to open.
#[derive(Debug, Clone)]
pub struct LoginStart {
    /// The authorization URL; `None` when no person is needed (client credentials).
    pub url: Option<String>,
    /// The start page, `http://127.0.0.1:PORT/start/<nonce>` (64 hex digits), which redirects
    /// the owners' browser to [`LoginStart::url`]; `None` when no person is needed.
    pub start: Option<String>,
    /// How long the daemon waits, in seconds.
    pub timeout_s: u64,
}

/// A login waiting for its redirect.
pub struct Pending {
    state: String,
    verifier: String,
    redirect: String,
    identity: Identity,
    discovered: Discovered,
    scope: Option<String>,
    deadline: Instant,
    callbacks: mpsc::Sender<Callback>,
    received: Option<mpsc::Receiver<Callback>>,
    listener: CancellationToken,
    /// The uids whose `login-wait` and `login-paste` (and browser) this login serves.
    owners: Vec<u32>,
    /// Refusal lines, shared with the listener.
    refusals: Arc<std::sync::Mutex<support::logging::LogBudget>>,
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.listener.cancel();
    }
}

/// Reads a redirect URL pasted by the user: its `code`, `state`, `iss`, `error`.
pub fn parse_pasted(url: &str) -> Result<Callback, String> {
    let u = reqwest::Url::parse(url.trim())
        .map_err(|_| "that is not the URL the browser was sent to".to_string())?;
    let cb = Callback::of(&u);
    if cb.code.is_none() && cb.error.is_none() {
        return Err(
            "the URL has no `code` (copy the whole address of the page the browser ended on)"
                .into(),
        );
    }
    Ok(cb)
}

/// Text from the redirect as shown: printable ASCII, at most 200 characters (it comes from
/// whoever sent the browser there).
fn shown(text: &str) -> String {
    text.chars()
        .filter(|c| c.is_ascii_graphic() || *c == ' ')
        .take(200)
        .collect()
}

impl SignIn {
    /// The challenge to discover from: the last one a session saw, else one asked for now
    /// with an `initialize` sent without a token.
    async fn challenge_now(&self) -> Challenge {
        if let Some(c) = lock(&self.challenge).clone() {
            return c;
        }
        let body = serde_json::json!({
            "jsonrpc": "2.0", "id": "mcp-supervisor-login", "method": "initialize",
            "params": {"protocolVersion": vocab::protocol::HANDSHAKE_VERSION, "capabilities": {},
                       "clientInfo": {"name": "mcp-supervisor", "version": env!("CARGO_PKG_VERSION")}}
        });
        let resp = self
            .http
            .post(self.url.clone())
            .header(
                reqwest::header::ACCEPT,
                "application/json, text/event-stream",
            )
            .json(&body)
            .timeout(Duration::from_secs(15))
            .send()
            .await;
        match resp {
            Ok(r) => r
                .headers()
                .get(reqwest::header::WWW_AUTHENTICATE)
                .and_then(|v| v.to_str().ok())
                .map(discovery::parse_challenge)
                .unwrap_or_default(),
            Err(_) => Challenge::default(),
        }
    }

    /// Starts a login for `owners` (uids): discovery, identity, the redirect listener (served
    /// to them only), the authorization URL and the start page. Under client credentials it
    /// gets a token at once (no URL).
    pub async fn begin_login(self: &Arc<Self>, owners: &[u32]) -> Result<LoginStart, LoginError> {
        let timeout_s = self.cfg.login_timeout.as_secs();
        if self.cfg.grant == Grant::ClientCredentials {
            let mut g = self.record().await;
            self.client_credentials_locked(&mut g, None)
                .await
                .map_err(LoginError::Failed)?;
            return Ok(LoginStart {
                url: None,
                start: None,
                timeout_s,
            });
        }
        let c = self.challenge_now().await;
        let d = self.discover(&c).await.map_err(|e| self.failed(e))?;
        let auth_endpoint = d.meta.authorization_endpoint.clone().ok_or_else(|| {
            self.failed("the authorization server has no authorization endpoint".into())
        })?;
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", self.cfg.redirect_port))
            .await
            .map_err(|e| {
                LoginError::Failed(format!(
                    "cannot listen on 127.0.0.1:{} for the redirect: {e}",
                    self.cfg.redirect_port
                ))
            })?;
        let port = listener
            .local_addr()
            .map_err(|e| LoginError::Failed(e.to_string()))?
            .port();
        let redirect = format!("http://127.0.0.1:{port}/callback");
        let scope = self.scope_for(&c, &d, true);
        let identity = self
            .identity(&d, &redirect, scope.as_deref())
            .await
            .map_err(|e| self.failed(e))?;
        let (pkce, verifier) = PkceCodeChallenge::new_random_sha256();
        let client = BasicClient::new(ClientId::new(identity.client_id.clone()))
            .set_auth_uri(
                AuthUrl::new(auth_endpoint)
                    .map_err(|_| self.failed("the authorization endpoint is not a URL".into()))?,
            )
            .set_redirect_uri(
                RedirectUrl::new(redirect.clone())
                    .map_err(|_| LoginError::Failed("bad redirect URI".into()))?,
            );
        let mut req = client
            .authorize_url(CsrfToken::new_random)
            .set_pkce_challenge(pkce);
        for s in scope.iter().flat_map(|s| s.split_whitespace()) {
            req = req.add_scope(Scope::new(s.to_string()));
        }
        if let Some(r) = &d.resource {
            req = req.add_extra_param("resource", r.clone());
        }
        let (url, state) = req.url();
        let nonce: String = rand::random::<[u8; 32]>()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let (tx, rx) = mpsc::channel(4);
        let stop = CancellationToken::new();
        let refusals = redirect::refusal_budget();
        let gate = redirect::Gate::new(
            &self.name,
            owners,
            (state.secret(), &nonce, url.as_str()),
            refusals.clone(),
        );
        tokio::spawn(redirect::serve(
            listener,
            Arc::new(gate),
            tx.clone(),
            stop.clone(),
        ));
        info!(server = %self.name, issuer = %d.issuer, scope = ?scope, redirect = %redirect, "login: waiting for the browser");
        *lock(&self.pending) = Some(Pending {
            state: state.secret().clone(),
            verifier: verifier.secret().clone(),
            redirect,
            identity,
            discovered: d,
            scope,
            deadline: Instant::now() + self.cfg.login_timeout,
            callbacks: tx,
            received: Some(rx),
            listener: stop,
            owners: owners.to_vec(),
            refusals,
        });
        Ok(LoginStart {
            url: Some(url.to_string()),
            start: Some(format!("http://127.0.0.1:{port}/start/{nonce}")),
            timeout_s,
        })
    }

    fn failed(&self, e: String) -> LoginError {
        self.note_error(Some(e.clone()));
        LoginError::Failed(e)
    }

    /// The client's identity: pre-registered, else a client ID metadata document where the
    /// server supports one, else dynamic registration (MCP authorization, "Client
    /// Registration Approaches", in that order).
    async fn identity(
        &self,
        d: &Discovered,
        redirect: &str,
        scope: Option<&str>,
    ) -> Result<Identity, String> {
        if let Some(id) = &self.cfg.client_id {
            let secret = self.secret()?;
            return Ok(Identity {
                auth_method: grant::pre_registered_method(
                    &d.meta,
                    secret.is_some(),
                    self.cfg.private_key_file.is_some(),
                ),
                client_id: id.clone(),
                client_secret: secret,
            });
        }
        if let (Some(u), true) = (
            &self.cfg.client_metadata_url,
            d.meta.client_id_metadata_document_supported,
        ) {
            return Ok(Identity {
                client_id: u.clone(),
                client_secret: None,
                auth_method: "none".into(),
            });
        }
        let Some(ep) = &d.meta.registration_endpoint else {
            return Err("the authorization server offers no dynamic client registration: register a client there and set `oauth.client_id` (and `oauth.client_secret_file`)".into());
        };
        grant::register(&self.http, &d.meta, ep, redirect, scope).await
    }

    /// Hands a redirect URL pasted by `uid` to the waiting login (one of its owners').
    pub fn paste(&self, url: &str, uid: u32) -> Result<(), LoginError> {
        let cb = parse_pasted(url).map_err(LoginError::Failed)?;
        let p = lock(&self.pending);
        let Some(p) = p.as_ref() else {
            return Err(LoginError::Failed(format!(
                "no login of `{}` is waiting (run `mcp-supervisor login {}` first)",
                self.name, self.name
            )));
        };
        if !p.owners.contains(&uid) {
            redirect::log_refusal(
                &p.refusals,
                &self.name,
                Some(uid),
                "refused a pasted redirect: another user started the login waiting",
            );
            return Err(self.not_yours(uid));
        }
        p.callbacks
            .try_send(cb)
            .map_err(|_| LoginError::Failed("the login is not waiting any more".into()))
    }

    /// The refusal of `uid`'s `login-wait` or `login-paste` for a login another user began.
    fn not_yours(&self, uid: u32) -> LoginError {
        LoginError::Denied(format!(
            "the login of `{}` waiting now was started by another user than this one (uid {uid}); a sign-in belongs to the user who started it: run `mcp-supervisor login {}` yourself",
            self.name, self.name
        ))
    }

    /// Waits, for `uid` (one of the login's owners), for the redirect of the login begun
    /// last, then exchanges the code and stores the sign-in.
    pub async fn wait_login(self: &Arc<Self>, uid: u32) -> Result<(), LoginError> {
        let (mut rx, deadline, refusals) = {
            let mut p = lock(&self.pending);
            let Some(p) = p.as_mut() else {
                if self.cfg.grant == Grant::ClientCredentials {
                    // The token was obtained by `begin_login`: nothing to wait for.
                    return Ok(());
                }
                return Err(LoginError::Failed(format!(
                    "no login of `{}` is waiting (another `login` took it, or it ended)",
                    self.name
                )));
            };
            if !p.owners.contains(&uid) {
                return Err(self.not_yours(uid));
            }
            let Some(rx) = p.received.take() else {
                return Err(LoginError::Failed(
                    "another `login` is already waiting".into(),
                ));
            };
            (rx, p.deadline, p.refusals.clone())
        };
        let expected = lock(&self.pending).as_ref().map(|p| p.state.clone());
        let cb = loop {
            let cb = tokio::select! {
                cb = rx.recv() => cb,
                _ = tokio::time::sleep_until(deadline.into()) => None,
            };
            // A redirect without this login's `state` (an old tab pasted) is not this
            // login's: ignored, the wait goes on. (The listener hands on only its own.)
            match cb {
                Some(c) if c.state != expected => {
                    redirect::log_refusal(
                        &refusals,
                        &self.name,
                        None,
                        "a redirect without this login's state was ignored",
                    );
                }
                other => break other,
            }
        };
        // Only this login's own attempt (a newer `login` replaced it otherwise).
        let pending = {
            let mut g = lock(&self.pending);
            if g.as_ref().map(|p| p.state.clone()) == expected {
                g.take()
            } else {
                return Err(LoginError::Failed(
                    "a newer `login` of this server replaced this one".into(),
                ));
            }
        };
        let (Some(cb), Some(p)) = (cb, pending) else {
            return Err(self.failed(format!(
                "no sign-in within login_timeout ({}s); run `mcp-supervisor login {}` again",
                self.cfg.login_timeout.as_secs(),
                self.name
            )));
        };
        // RFC 9207: the redirect names the authorization server that answered; a code from
        // another one than this login's (a mix-up: a hostile server's metadata sending the
        // browser to an honest one) is never sent to this login's token endpoint.
        let issuer_ok = match &cb.iss {
            Some(iss) => iss.trim_end_matches('/') == p.discovered.issuer.trim_end_matches('/'),
            None => {
                !p.discovered
                    .meta
                    .authorization_response_iss_parameter_supported
            }
        };
        if !issuer_ok {
            return Err(self.failed(format!(
                "the redirect comes from another authorization server ({}) than this login's ({}); refusing the code (a mix-up attack, or a misconfigured server)",
                shown(cb.iss.as_deref().unwrap_or("none named")),
                shown(&p.discovered.issuer)
            )));
        }
        if let Some(e) = &cb.error {
            let why = cb
                .error_description
                .as_deref()
                .map(|d| format!(": {}", shown(d)))
                .unwrap_or_default();
            return Err(self.failed(format!("the authorization server said {}{why}", shown(e))));
        }
        let code = cb.code.clone().unwrap_or_default();
        let resource = p.discovered.resource.clone().unwrap_or_default();
        let signer = self.signer().map_err(LoginError::Failed)?;
        let ep = Endpoint {
            http: &self.http,
            token_endpoint: &p.discovered.meta.token_endpoint,
            issuer: &p.discovered.issuer,
            identity: &p.identity,
            signer: signer.as_ref(),
            resource: &resource,
        };
        let t = ep
            .exchange_code(code, p.verifier.clone(), &p.redirect, p.scope.as_deref())
            .await
            .map_err(|e| self.failed(e))?;
        let mut r = Record {
            url: self.url.to_string(),
            resource,
            issuer: p.discovered.issuer.clone(),
            token_endpoint: p.discovered.meta.token_endpoint.clone(),
            client_id: p.identity.client_id.clone(),
            client_secret: if self.cfg.client_secret_file.is_some() {
                None
            } else {
                p.identity.client_secret.clone()
            },
            auth_method: p.identity.auth_method.clone(),
            signed_in_at: grant::now_s(),
            ..Record::default()
        };
        grant::apply(&mut r, t);
        let mut g = self.record().await;
        self.save(&r);
        *g = Some(Some(r));
        lock(&self.shown).status.needs_scope = None;
        *lock(&self.challenge) = None;
        self.note_error(None);
        info!(server = %self.name, "signed in");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::parse_pasted;

    #[test]
    fn a_pasted_redirect_gives_its_code_and_state() {
        let cb = parse_pasted(" http://127.0.0.1:5555/callback?code=abc&state=xyz\n").unwrap();
        assert_eq!(cb.code.as_deref(), Some("abc"));
        assert_eq!(cb.state.as_deref(), Some("xyz"));
        let cb = parse_pasted("http://127.0.0.1:1/callback?error=access_denied").unwrap();
        assert_eq!(cb.error.as_deref(), Some("access_denied"));
        assert!(parse_pasted("http://127.0.0.1:1/callback").is_err());
        assert!(parse_pasted("not a url").is_err());
    }
}
