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

use super::*;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use subtle::ConstantTimeEq;

/// Checks a request's credentials and origin; `Err` is the answer to send instead.
pub(super) fn check(
    front: &Front,
    settings: &HttpConfig,
    via: &Via,
    server: &str,
    headers: &HeaderMap,
) -> Result<(), Box<Response>> {
    if let Some(origin) = header_str(headers, "origin") {
        if !origin_allowed(origin, &settings.allowed_origins) {
            warn!(server, origin, "HTTP request refused: Origin not allowed");
            return Err(Box::new(plain(
                StatusCode::FORBIDDEN,
                "Forbidden: Origin not allowed (add it to http_allowed_origins)",
            )));
        }
    }
    if !matches!(via, Via::Tcp) {
        return Ok(());
    }
    let host = header_str(headers, "host").unwrap_or("");
    if !host_allowed(host, &settings.allowed_hosts) {
        warn!(server, host, "HTTP request refused: Host not allowed");
        return Err(Box::new(plain(
            StatusCode::FORBIDDEN,
            "Forbidden: Host not allowed (add it to http_allowed_hosts)",
        )));
    }
    let Some(want) = front.token(server) else {
        // Unknown server, or its token file could not be read: refuse the same way, so a
        // scan cannot tell which names exist.
        return Err(Box::new(unauthorized()));
    };
    let given = header_str(headers, "authorization")
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim)
        .unwrap_or("");
    if bool::from(given.as_bytes().ct_eq(want.as_bytes())) {
        Ok(())
    } else {
        Err(Box::new(unauthorized()))
    }
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
    match std::fs::read_to_string(&path) {
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
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && cfg.http_token_file.is_none() => {
            let token = session::random_hex(32);
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
                .map_err(|e| anyhow::anyhow!("{}: cannot create: {e}", path.display()))?;
            f.write_all(format!("{token}\n").as_bytes())
                .map_err(|e| anyhow::anyhow!("{}: cannot write: {e}", path.display()))?;
            info!(server = %cfg.name, path = %path.display(), "created the HTTP bearer token file");
            Ok(token)
        }
        Err(e) => anyhow::bail!("{}: cannot read the HTTP token: {e}", path.display()),
    }
}
