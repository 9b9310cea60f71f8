//! A `url` server (issue 29 §1): a remote MCP server reached over Streamable HTTP instead of a
//! child process. Its keys (`url`, `headers`, `tls_ca_file`, `tls_skip_verify`,
//! `allow_plain_http`, `max_connections`, `connect_timeout`), their checks, and the refusal of
//! child-only keys set on such a server. Each error names file, line and key.
//!
//! Header values are secrets: they are read from the environment or a file when a session is
//! opened (so a rotated token file is picked up at the next reconnect), and no `Debug` or
//! `Display` here ever shows one.

use super::keys;
use super::raw::{RawHeader, RawServer};
use super::{ConfigError, Table, Validator};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// `url` without its query and fragment (a token in a query string must not reach a log).
pub fn shown_url(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut u) => {
            u.set_query(None);
            u.set_fragment(None);
            u.to_string()
        }
        Err(_) => "(invalid url)".into(),
    }
}

/// How a url server is reached: everything the remote session (`remote`) needs to open its session.
#[derive(Clone, PartialEq)]
pub struct RemoteConfig {
    /// The MCP endpoint, `https://…` (or `http://` to loopback, or anywhere with
    /// `allow_plain_http`). Never holds credentials (refused at config).
    pub url: String,
    /// Request headers sent on every request, in the order written.
    pub headers: Vec<(String, HeaderSource)>,
    /// Extra CA certificates (PEM) trusted besides the system's roots.
    pub tls_ca_file: Option<PathBuf>,
    /// `tls_skip_verify = true`: no certificate verification at all (logged as a warning at
    /// every start).
    pub tls_skip_verify: bool,
    /// `allow_plain_http = true`: `http://` to a host that is not loopback (logged as a
    /// warning at every start).
    pub allow_plain_http: bool,
    /// Connections open to the server at once (HTTP/1.1 needs one per open POST stream).
    pub max_connections: usize,
    /// How long DNS, TCP and TLS may take before the server counts as unreachable.
    pub connect_timeout: Duration,
    /// The sign-in (issue 30): `None` when `headers` has a static `Authorization`.
    pub oauth: Option<super::OAuthConfig>,
    /// `[supervisor] token_dir`, where the sign-in is kept.
    pub token_dir: PathBuf,
}

impl std::fmt::Debug for RemoteConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteConfig")
            .field("url", &self.url)
            .field(
                "headers",
                &self.headers.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .field("tls_ca_file", &self.tls_ca_file)
            .field("tls_skip_verify", &self.tls_skip_verify)
            .field("allow_plain_http", &self.allow_plain_http)
            .field("max_connections", &self.max_connections)
            .field("connect_timeout", &self.connect_timeout)
            .field("oauth", &self.oauth)
            .finish()
    }
}

/// Where a header's value comes from. Never printed.
#[derive(Clone, PartialEq)]
pub enum HeaderSource {
    /// Written in the file itself (fine for a non-secret like `X-Org`).
    Literal(String),
    /// `{ env = "VAR", prefix = "Bearer " }`: the supervisor's environment variable `VAR`.
    Env { var: String, prefix: String },
    /// `{ file = "/run/secrets/token", prefix = "Bearer " }`: the file's content, trailing
    /// newline and whitespace trimmed.
    File { path: PathBuf, prefix: String },
}

impl std::fmt::Debug for HeaderSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HeaderSource::Literal(_) => f.write_str("Literal(<redacted>)"),
            HeaderSource::Env { var, .. } => write!(f, "Env({var})"),
            HeaderSource::File { path, .. } => write!(f, "File({})", path.display()),
        }
    }
}

impl HeaderSource {
    /// The value now, or why it cannot be had (the message names the variable or the file,
    /// never a value).
    pub fn resolve(&self) -> Result<String, String> {
        match self {
            HeaderSource::Literal(v) => Ok(v.clone()),
            HeaderSource::Env { var, prefix } => match std::env::var(var) {
                Ok(v) if !v.trim().is_empty() => Ok(format!("{prefix}{}", v.trim())),
                _ => Err(format!("the environment variable {var} is not set")),
            },
            HeaderSource::File { path, prefix } => match std::fs::read_to_string(path) {
                Ok(v) if !v.trim().is_empty() => Ok(format!("{prefix}{}", v.trim())),
                Ok(_) => Err(format!("{} is empty", path.display())),
                Err(e) => Err(format!("cannot read {}: {e}", path.display())),
            },
        }
    }
}

/// Keys that only make sense for a child process: an error when a url server's own table sets
/// one, ignored when inherited from `[defaults]` (issue 29, decisions).
const CHILD_ONLY: &[&str] = &[
    "command",
    "args",
    "env",
    "cwd",
    "clean_env",
    "env_allow",
    "user",
    "group",
    "stop_grace",
    "kill_timeout",
    "memory_max",
    "tasks_max",
    "open_files_max",
];

impl RawServer {
    /// The child-only keys this table sets, by name, with where.
    fn child_only_set(&self) -> Option<(&'static str, std::ops::Range<usize>)> {
        let span = |name: &'static str| -> Option<std::ops::Range<usize>> {
            match name {
                "command" => self.command.as_ref().map(|v| v.span()),
                "args" => self.args.as_ref().map(|v| v.span()),
                "env" => self.env.as_ref().map(|_| 0..0),
                "cwd" => self.cwd.as_ref().map(|_| 0..0),
                "clean_env" => self.clean_env.map(|_| 0..0),
                "env_allow" => self.env_allow.as_ref().map(|_| 0..0),
                "user" => self.user.as_ref().map(|v| v.span()),
                "group" => self.group.as_ref().map(|v| v.span()),
                "stop_grace" => self.stop_grace.as_ref().map(|v| v.span()),
                "kill_timeout" => self.kill_timeout.as_ref().map(|v| v.span()),
                "memory_max" => self.memory_max.as_ref().map(|v| v.span()),
                "tasks_max" => self.tasks_max.as_ref().map(|v| v.span()),
                "open_files_max" => self.open_files_max.as_ref().map(|v| v.span()),
                _ => None,
            }
        };
        CHILD_ONLY.iter().find_map(|k| span(k).map(|s| (*k, s)))
    }

    /// The remote-only keys this table sets, by name, with where.
    fn remote_only_set(&self) -> Option<(&'static str, std::ops::Range<usize>)> {
        let span = |name: &'static str| -> Option<std::ops::Range<usize>> {
            match name {
                "headers" => self.headers.as_ref().map(|v| v.span()),
                "tls_ca_file" => self.tls_ca_file.as_ref().map(|v| v.span()),
                "tls_skip_verify" => self.tls_skip_verify.as_ref().map(|v| v.span()),
                "allow_plain_http" => self.allow_plain_http.as_ref().map(|v| v.span()),
                "max_connections" => self.max_connections.as_ref().map(|v| v.span()),
                "connect_timeout" => self.connect_timeout.as_ref().map(|v| v.span()),
                "oauth" => self.oauth.as_ref().map(|v| v.span()),
                _ => None,
            }
        };
        keys::URL_ONLY.iter().find_map(|k| span(k).map(|s| (*k, s)))
    }
}

/// Whether `host` (as a URL gives it) is a loopback name or address.
pub fn is_loopback_host(host: &str) -> bool {
    let h = host.trim_start_matches('[').trim_end_matches(']');
    h.eq_ignore_ascii_case("localhost")
        || h.parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

impl Validator<'_> {
    /// The url server's remote settings, `None` for a `command` server. Refuses a table that
    /// sets both or neither of `command` and `url`, child-only keys on a url server and
    /// remote-only keys on a command server.
    pub(super) fn remote(
        &self,
        t: Table,
        span: std::ops::Range<usize>,
        s: &RawServer,
        limits: (usize, Duration),
    ) -> Result<Option<RemoteConfig>, ConfigError> {
        let k = |field: &str| t.key(field, true);
        let Some(url) = &s.url else {
            if let Some((key, at)) = s.remote_only_set() {
                return Err(self.err(
                    at,
                    &k(key),
                    &format!("`{key}` is only for a url server (one with `url`, not `command`)"),
                ));
            }
            return Ok(None);
        };
        if let Some(c) = &s.command {
            return Err(self.err(
                c.span(),
                &k("command"),
                "a server has exactly one of `command` (a child process) and `url` (a remote server)",
            ));
        }
        if let Some((key, at)) = s.child_only_set() {
            let at = if at == (0..0) { span.clone() } else { at };
            return Err(self.err(
                at,
                &k(key),
                &format!("`{key}` is for a child process; a url server has none"),
            ));
        }
        let fail = |m: &str| self.err(url.span(), &k("url"), m);
        let parsed =
            reqwest::Url::parse(url.get_ref()).map_err(|e| fail(&format!("not a URL: {e}")))?;
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return Err(fail(
                "credentials in the URL are refused (they would show in logs and status); put them in `headers`",
            ));
        }
        let host = parsed.host_str().unwrap_or("").to_string();
        if host.is_empty() {
            return Err(fail("the URL has no host"));
        }
        let allow_plain_http = s.allow_plain_http.as_ref().is_some_and(|v| *v.get_ref());
        match parsed.scheme() {
            "https" => {}
            "http" if is_loopback_host(&host) || allow_plain_http => {}
            "http" => {
                return Err(fail(&format!(
                    "plain http:// to {host}, which is not loopback, would send the headers unencrypted; use https://, or set `allow_plain_http = true` if the network is trusted"
                )))
            }
            other => {
                return Err(fail(&format!(
                    "scheme `{other}`: only https:// (and http:// to loopback) are served"
                )))
            }
        }
        if parsed.path().trim_end_matches('/').ends_with("/sse") {
            return Err(fail(
                "this looks like a legacy HTTP+SSE endpoint (2024-11-05 transport), which is not supported; use the server's Streamable HTTP endpoint (usually `/mcp`)",
            ));
        }
        let mut headers = Vec::new();
        for (name, value) in s.headers.iter().flat_map(|h| h.get_ref().iter()) {
            let hk = format!("{}.{name}", k("headers"));
            let at = s.headers.as_ref().map(|h| h.span()).unwrap_or(span.clone());
            if reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
                return Err(self.err(at, &hk, "not a valid HTTP header name"));
            }
            let lower = name.to_ascii_lowercase();
            if [
                "mcp-session-id",
                "mcp-protocol-version",
                "content-type",
                "accept",
                "host",
                "content-length",
                "last-event-id",
            ]
            .contains(&lower.as_str())
            {
                return Err(self.err(at, &hk, "this header is the supervisor's to set"));
            }
            let source = match value {
                RawHeader::Literal(v) => HeaderSource::Literal(v.clone()),
                RawHeader::From(f) => match (&f.env, &f.file) {
                    (Some(var), None) => HeaderSource::Env {
                        var: var.clone(),
                        prefix: f.prefix.clone().unwrap_or_default(),
                    },
                    (None, Some(p)) => {
                        let path = self.relative_to_file(p);
                        self.secret_file(&path, at.clone(), &hk)?;
                        HeaderSource::File {
                            path,
                            prefix: f.prefix.clone().unwrap_or_default(),
                        }
                    }
                    _ => {
                        return Err(self.err(
                            at,
                            &hk,
                            "give exactly one of `env` and `file`, e.g. { env = \"TOKEN\", prefix = \"Bearer \" }",
                        ))
                    }
                },
            };
            headers.push((name.clone(), source));
        }
        let tls_ca_file = s
            .tls_ca_file
            .as_ref()
            .map(|p| self.relative_to_file(p.get_ref()));
        if let (Some(p), Some(v), true) = (&tls_ca_file, &s.tls_ca_file, self.host) {
            if !p.is_file() {
                return Err(self.err(
                    v.span(),
                    &k("tls_ca_file"),
                    &format!("{} is not a readable file", p.display()),
                ));
            }
        }
        let (max_connections, connect_timeout) = limits;
        let static_authorization = headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case("authorization"))
            .then(|| s.headers.as_ref().map(|h| h.span()).unwrap_or(span.clone()));
        let oauth = self
            .oauth(t, s.oauth.as_ref(), static_authorization)?
            .map(|o| super::OAuthConfig {
                allow_plain_http,
                ..o
            });
        Ok(Some(RemoteConfig {
            oauth,
            token_dir: PathBuf::new(),
            url: url.get_ref().clone(),
            headers,
            tls_ca_file,
            tls_skip_verify: s.tls_skip_verify.as_ref().is_some_and(|v| *v.get_ref()),
            allow_plain_http,
            max_connections,
            connect_timeout,
        }))
    }

    /// `max_connections` and `connect_timeout`, checked in every table (`[defaults]` too),
    /// whether or not a url server uses them.
    pub(super) fn remote_limits(
        &self,
        t: Table,
        s: &RawServer,
        d: &RawServer,
    ) -> Result<(usize, Duration), ConfigError> {
        let max_connections = self
            .count(
                &keys::MAX_CONNECTIONS,
                &t.key("max_connections", s.max_connections.is_some()),
                &s.max_connections,
                &d.max_connections,
            )?
            .or_else(|| {
                keys::MAX_CONNECTIONS
                    .default_number()
                    .and_then(|n| n.try_into().ok())
            })
            .unwrap_or(8);
        let connect_timeout = self
            .duration(
                &keys::CONNECT_TIMEOUT,
                &t.key("connect_timeout", s.connect_timeout.is_some()),
                &s.connect_timeout,
                &d.connect_timeout,
            )?
            .or(keys::CONNECT_TIMEOUT.default_duration())
            .unwrap_or(Duration::from_secs(10));
        Ok((max_connections, connect_timeout))
    }

    /// A path as written: relative paths are relative to the config file's directory.
    pub(super) fn relative_to_file(&self, p: &str) -> PathBuf {
        let p = PathBuf::from(p);
        if p.is_relative() {
            self.path.parent().unwrap_or(Path::new(".")).join(p)
        } else {
            p
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{is_loopback_host, HeaderSource};

    #[test]
    fn loopback_hosts() {
        for h in ["localhost", "127.0.0.1", "[::1]", "127.8.9.1"] {
            assert!(is_loopback_host(h), "{h}");
        }
        for h in ["example.com", "10.0.0.1", "[fe80::1]", "localhost.evil.com"] {
            assert!(!is_loopback_host(h), "{h}");
        }
    }

    #[test]
    fn header_sources_never_show_a_value() {
        let s = HeaderSource::Literal("s3cret".into());
        assert!(!format!("{s:?}").contains("s3cret"));
        let e = HeaderSource::Env {
            var: "MCP_SUPERVISOR_TEST_UNSET_VAR".into(),
            prefix: "Bearer ".into(),
        };
        assert_eq!(
            e.resolve().unwrap_err(),
            "the environment variable MCP_SUPERVISOR_TEST_UNSET_VAR is not set"
        );
    }
}
