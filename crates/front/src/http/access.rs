//! Who may use the HTTP endpoint (issue 16 §4). TCP has no `SO_PEERCRED`, so there:
//! - a bearer token per server is required (`Authorization: Bearer <token>`, compared in
//!   constant time): 401 with `WWW-Authenticate: Bearer` without it;
//! - `Host` must be a loopback name (`localhost`, `127.0.0.1`, `[::1]`, any port) or one of
//!   `http_allowed_hosts`: 403 otherwise (DNS rebinding: a page on `evil.example` resolved to
//!   127.0.0.1 sends `Host: evil.example`);
//! - `Origin`, when present, must be a loopback origin or one of `http_allowed_origins`: 403
//!   otherwise (2025-06-18 transports §Security Warning: servers MUST validate `Origin`).
//!
//! On `NAME.http.sock` the peer already passed `SO_PEERCRED` and the allow-lists; `Origin` is
//! still checked. Token files: [`ensure_token`].
//!
//! A request that passes is from a [`Caller`], which a session is bound to (issue 26 §5).
//! Refusals are logged (issue 26 §6): a foreign Host or Origin, and a missing or wrong token
//! (never the token itself), each at most [`super::REFUSALS_LOGGED`] lines per
//! [`super::REFUSALS_WINDOW`],
//! the next line saying how many were suppressed.

use super::{
    header, header_str, log_allowed, loggable, plain, session, Front, HeaderMap, HeaderValue,
    HttpConfig, Response, ServerConfig, StatusCode, Via,
};
use sha2::Digest;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use subtle::ConstantTimeEq;
use tracing::{info, warn};

/// Who a request that passed the access check comes from, as far as sessions are concerned:
/// a session answers only the caller that opened it (issue 26 §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    /// TCP, with the server's bearer token: its SHA-256 (a rotated token is another caller).
    Tcp {
        /// SHA-256 of the token the request carried.
        token: [u8; 32],
        /// The endpoint's named token it was (issue 31 §5): [`support::config::label_id`]
        /// of its label; `None` for the server's (or endpoint's) own token.
        label: Option<u64>,
    },
    /// `NAME.http.sock`, from this uid (`SO_PEERCRED`).
    Unix {
        /// The peer's uid.
        uid: u32,
    },
}

/// The SHA-256 of a bearer token: what a [`Caller::Tcp`] holds of it.
pub fn digest(token: &str) -> [u8; 32] {
    sha2::Sha256::digest(token.as_bytes()).into()
}

/// Checks a request's credentials and origin: the [`Caller`], or the answer to send instead.
pub(super) fn check(
    front: &Front,
    settings: &HttpConfig,
    via: &Via,
    server: &str,
    headers: &HeaderMap,
) -> Result<Caller, Box<Response>> {
    let server = loggable(server);
    let addr = match via {
        Via::Tcp { addr, .. } => Some(*addr),
        Via::Unix { .. } => None,
    };
    if let Some(origin) = header_str(headers, "origin") {
        if !origin_allowed(origin, &settings.allowed_origins) {
            if let Some(suppressed) = log_allowed(&front.refusals_log) {
                let origin = loggable(origin);
                warn!(server, origin, peer = ?addr, suppressed, "HTTP request refused: Origin not allowed");
            }
            return Err(Box::new(plain(
                StatusCode::FORBIDDEN,
                "Forbidden: Origin not allowed (add it to http_allowed_origins)",
            )));
        }
    }
    let Some(addr) = addr else {
        let uid = match via {
            Via::Unix { peer, .. } => peer.uid,
            Via::Tcp { .. } => 0,
        };
        return Ok(Caller::Unix { uid });
    };
    let host = header_str(headers, "host").unwrap_or("");
    if !host_allowed(host, &settings.allowed_hosts) {
        if let Some(suppressed) = log_allowed(&front.refusals_log) {
            let host = loggable(host);
            warn!(server, host, peer = %addr, suppressed, "HTTP request refused: Host not allowed");
        }
        return Err(Box::new(plain(
            StatusCode::FORBIDDEN,
            "Forbidden: Host not allowed (add it to http_allowed_hosts)",
        )));
    }
    let given = header_str(headers, "authorization").map(|v| {
        v.strip_prefix("Bearer ")
            .or_else(|| v.strip_prefix("bearer "))
            .map(str::trim)
    });
    let known = front.token(server);
    let matched = match (&known, given) {
        (Some(want), Some(Some(given))) => bool::from(given.as_bytes().ct_eq(want.as_bytes())),
        _ => false,
    };
    // An endpoint's named tokens: each compared in constant time, all of them every time.
    let label = match given {
        Some(Some(given)) if !matched => {
            front
                .labelled(server)
                .iter()
                .fold(None, |found, (id, want)| {
                    let eq = bool::from(given.as_bytes().ct_eq(want.as_bytes()));
                    if eq && found.is_none() {
                        Some(*id)
                    } else {
                        found
                    }
                })
        }
        _ => None,
    };
    if matched || label.is_some() {
        let token = digest(given.flatten().unwrap_or(""));
        return Ok(Caller::Tcp { token, label });
    }
    if let Some(suppressed) = log_allowed(&front.tokens_log) {
        // Never the token: only which kind of failure it was.
        let why = match (given, known.is_some()) {
            (None, _) => "no bearer token",
            (Some(None), _) => "an Authorization header that is not Bearer",
            (Some(Some(_)), true) => "wrong bearer token",
            // Unknown server, or its token file could not be read: the client is told the
            // same as for a wrong token, so a scan cannot tell which names exist.
            (Some(Some(_)), false) => "a bearer token for a server with no HTTP token",
        };
        warn!(server, peer = %addr, suppressed, "HTTP request refused: {why}");
    }
    Err(Box::new(unauthorized()))
}

fn unauthorized() -> Response {
    let mut r = plain(
        StatusCode::UNAUTHORIZED,
        "Unauthorized: send Authorization: Bearer <token> (mcp-supervisor url NAME prints it)",
    );
    r.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"mcp-supervisor\""),
    );
    r
}

/// The host part of a `Host` value or of an origin's authority, lowercased, without port.
fn host_part(authority: &str) -> String {
    let a = authority.trim().to_ascii_lowercase();
    if let Some(rest) = a.strip_prefix('[') {
        // [::1]:8931
        return match rest.split_once(']') {
            Some((h, _)) => format!("[{h}]"),
            None => a,
        };
    }
    match a.rsplit_once(':') {
        Some((h, port)) if port.chars().all(|c| c.is_ascii_digit()) => h.to_string(),
        _ => a,
    }
}

fn loopback_host(h: &str) -> bool {
    matches!(h, "localhost" | "127.0.0.1" | "[::1]")
        || h.ends_with(".localhost")
        || h.parse::<std::net::Ipv4Addr>()
            .is_ok_and(|a| a.is_loopback())
}

/// Whether a `Host` header value is allowed: a loopback name, or listed (host, or host:port).
pub fn host_allowed(host: &str, allowed: &[String]) -> bool {
    let h = host_part(host);
    loopback_host(&h)
        || allowed
            .iter()
            .any(|a| a.eq_ignore_ascii_case(host.trim()) || host_part(a) == h && !a.contains(':'))
}

/// Whether an `Origin` header value is allowed: `http(s)://` a loopback host (any port), or
/// listed exactly. `null` (sandboxed documents, file URLs) is refused unless listed.
pub fn origin_allowed(origin: &str, allowed: &[String]) -> bool {
    let o = origin.trim();
    if allowed
        .iter()
        .any(|a| a.trim_end_matches('/').eq_ignore_ascii_case(o))
    {
        return true;
    }
    let rest = o
        .strip_prefix("http://")
        .or_else(|| o.strip_prefix("https://"));
    match rest {
        Some(authority) if !authority.contains('/') && !authority.contains('@') => {
            loopback_host(&host_part(authority))
        }
        _ => false,
    }
}

/// Where server `name`'s token lives: `http_token_file`, else `<socket_dir>/NAME.http.token`.
pub fn token_path(dir: &Path, cfg: &ServerConfig) -> PathBuf {
    cfg.http_token_file
        .clone()
        .unwrap_or_else(|| dir.join(format!("{}.http.token", cfg.name)))
}

/// Reads server `name`'s bearer token, creating the default token file (32 random bytes as
/// hex, mode 0600, created exclusively) when it is missing. An operator's `http_token_file`
/// is never created: it must exist and hold a token of at least 16 characters.
///
/// Errors: the file cannot be read or created, or holds too short a token.
pub fn ensure_token(dir: &Path, cfg: &ServerConfig) -> anyhow::Result<String> {
    let path = token_path(dir, cfg);
    ensure_token_file(&path, cfg.http_token_file.is_none(), &cfg.name)
}

/// Where endpoint `endpoint`'s named token `label` lives (issue 31 §5):
/// `<socket_dir>/ENDPOINT.LABEL.http.token`, created like the default token file.
pub fn labelled_token_path(dir: &Path, endpoint: &str, label: &str) -> PathBuf {
    dir.join(format!("{endpoint}.{label}.http.token"))
}

/// Reads the token in `path`, creating it (32 random bytes as hex, 0600, exclusively) when
/// it is missing and `create`; `name` is for the log line.
///
/// Errors: the file cannot be read or created, or holds too short a token.
pub fn ensure_token_file(path: &Path, create: bool, name: &str) -> anyhow::Result<String> {
    match std::fs::read_to_string(path) {
        Ok(t) => {
            let t = t.trim().to_string();
            if t.len() < 16 {
                anyhow::bail!(
                    "{}: the token is shorter than 16 characters",
                    path.display()
                );
            }
            Ok(t)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && create => {
            let token = session::random_hex(32);
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(path)
                .map_err(|e| anyhow::anyhow!("{}: cannot create: {e}", path.display()))?;
            f.write_all(format!("{token}\n").as_bytes())
                .map_err(|e| anyhow::anyhow!("{}: cannot write: {e}", path.display()))?;
            info!(server = %name, path = %path.display(), "created the HTTP bearer token file");
            Ok(token)
        }
        Err(e) => anyhow::bail!("{}: cannot read the HTTP token: {e}", path.display()),
    }
}
