//! `[supervisor]`'s `http_*` keys: the Streamable HTTP endpoint (issue 16). Each error names
//! file, line and key.

use super::keys;
use super::raw::{RawServer, RawSupervisor};
use super::{ConfigError, Table, Validator};
use std::path::{Path, PathBuf};
use std::time::Duration;
use toml::Spanned;

/// `[supervisor]`'s `http_*` keys: the Streamable HTTP endpoint (issue 16,
/// docs/book/src/guides/http.md).
#[derive(Debug, Clone, PartialEq)]
pub struct HttpConfig {
    /// `http_listen`: the TCP address, `None` for `"off"`. A non-loopback address is refused
    /// unless `http_allow_remote = true` (issue 16 §1).
    pub listen: Option<std::net::SocketAddr>,
    /// `http_allowed_origins`: `Origin` values accepted besides loopback origins
    /// (`http://localhost:*`, `http://127.0.0.1:*`, `http://[::1]:*`, and https). A request
    /// with any other `Origin` gets 403 (DNS rebinding, 2025-06-18 transports §Security).
    pub allowed_origins: Vec<String>,
    /// `http_allowed_hosts`: `Host` names accepted besides `localhost`, `127.0.0.1` and `[::1]`
    /// (any port). Others get 403 on TCP. Ignored on the Unix sockets.
    pub allowed_hosts: Vec<String>,
    /// `http_session_idle`: a handshake-era HTTP session with no request and no open stream
    /// for this long is ended (its next request gets 404). Default 30 min.
    pub session_idle: Duration,
    /// `http_max_sessions`: handshake-era sessions per server; more `initialize` get 503.
    /// Default 256.
    pub max_sessions: usize,
    /// `http_max_requests`: 2026-07-28 requests (each its own POST) open at once per server;
    /// more get 503. Default 256.
    pub max_requests: usize,
}

/// The default `http_listen`.
pub const DEFAULT_HTTP_LISTEN: &str = "127.0.0.1:8931";

impl Validator<'_> {
    pub(super) fn http(&self, raw: &RawSupervisor) -> Result<HttpConfig, ConfigError> {
        let listen = match &raw.http_listen {
            Some(a) if a.get_ref() == "off" => None,
            Some(a) => {
                let addr: std::net::SocketAddr = a.get_ref().parse().map_err(|e| {
                    self.err(
                        a.span(),
                        "supervisor.http_listen",
                        &format!(
                            "`{}` is not host:port ({e}); write e.g. \"127.0.0.1:8931\", or \"off\"",
                            a.get_ref()
                        ),
                    )
                })?;
                if !addr.ip().is_loopback() && raw.http_allow_remote != Some(true) {
                    return Err(self.err(
                        a.span(),
                        "supervisor.http_listen",
                        &format!(
                            "{addr} is not a loopback address: set http_allow_remote = true to serve MCP beyond this host (a bearer token is still required)"
                        ),
                    ));
                }
                Some(addr)
            }
            None => DEFAULT_HTTP_LISTEN.parse().ok(),
        };
        Ok(HttpConfig {
            listen,
            allowed_origins: raw.http_allowed_origins.clone().unwrap_or_default(),
            allowed_hosts: raw.http_allowed_hosts.clone().unwrap_or_default(),
            session_idle: self
                .duration(
                    &keys::HTTP_SESSION_IDLE,
                    "supervisor.http_session_idle",
                    &raw.http_session_idle,
                    &None,
                )?
                .or(keys::HTTP_SESSION_IDLE.default_duration())
                .unwrap_or_default(),
            max_sessions: self
                .supervisor_count(&keys::HTTP_MAX_SESSIONS, &raw.http_max_sessions)?,
            max_requests: self
                .supervisor_count(&keys::HTTP_MAX_REQUESTS, &raw.http_max_requests)?,
        })
    }
}

/// The fewest characters an operator's token may have (`http::access::ensure_token` refuses a
/// shorter one at start; checked here first so `check-config` says so).
pub const TOKEN_MIN: usize = 16;

impl Validator<'_> {
    /// `http_token_file` (own, else `[defaults]`'s), relative to the config file. When the
    /// server is served over HTTP (`http = true`) the file is read at start and never created,
    /// so it must exist now, be a regular file and, when it can be read here, hold a token of
    /// at least [`TOKEN_MIN`] characters (issue 26 §8: a missing one passed `check-config`).
    /// Errors never repeat the token.
    pub(super) fn token_file(
        &self,
        t: Table,
        s: &RawServer,
        d: &RawServer,
    ) -> Result<Option<PathBuf>, ConfigError> {
        let Some(v) = s.http_token_file.as_ref().or(d.http_token_file.as_ref()) else {
            return Ok(None);
        };
        let key = t.key("http_token_file", s.http_token_file.is_some());
        let check = s.http.or(d.http) == Some(true);
        self.token_path(v, &key, check).map(Some)
    }

    /// `http_token_file`'s path (relative to the config file), checked when `check` and the
    /// host is checked: an operator's token file must exist, be a regular file, and hold at
    /// least [`TOKEN_MIN`] characters when readable. Errors name `key` at `v`'s line.
    pub(super) fn token_path(
        &self,
        v: &Spanned<String>,
        key: &str,
        check: bool,
    ) -> Result<PathBuf, ConfigError> {
        let p = PathBuf::from(v.get_ref());
        let p = if p.is_relative() {
            self.path.parent().unwrap_or(Path::new(".")).join(p)
        } else {
            p
        };
        if !check || !self.host {
            return Ok(p);
        }
        let fail = |m: String| self.err(v.span(), key, &m);
        match std::fs::metadata(&p) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(fail(format!(
                    "{} does not exist: an operator's token file is never created; write a token of at least {TOKEN_MIN} characters into it, or remove the key to use the generated <socket_dir>/NAME.http.token",
                    p.display()
                )))
            }
            Err(e) => return Err(fail(format!("cannot read {}: {e}", p.display()))),
            Ok(m) if !m.is_file() => {
                return Err(fail(format!("{} is not a regular file", p.display())))
            }
            Ok(_) => {}
        }
        // Whoever may write it chooses the token (issue 47 §5, N14).
        self.secret_file(&p, v.span(), key)?;
        // Unreadable here (another user's file, checked by an operator) is not an error: the
        // supervisor may run as that user.
        if let Ok(text) = std::fs::read_to_string(&p) {
            if text.trim().len() < TOKEN_MIN {
                return Err(fail(format!(
                    "{} holds a token shorter than {TOKEN_MIN} characters",
                    p.display()
                )));
            }
        }
        Ok(p)
    }
}
