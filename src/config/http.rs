//! `[supervisor]`'s `http_*` keys: the Streamable HTTP endpoint (issue 16). Each error names
//! file, line and key.

use super::*;

/// `[supervisor]`'s `http_*` keys: the Streamable HTTP endpoint (issue 16, README "HTTP").
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
