//! Finding out what a url server needs for sign-in (issue 30 §1): its `WWW-Authenticate`
//! challenge (RFC 6750 §3), its protected resource metadata (RFC 9728), and its authorization
//! server's metadata (RFC 8414, the OpenID configuration as fallback), with the 2025-03-26
//! fallbacks (the server's own origin as the authorization server, then its default
//! `/authorize`, `/token`, `/register`).
//!
//! The URL lists are pure functions (tested below); the fetches take the supervisor's HTTP
//! client. A metadata document is at most [`MAX_DOCUMENT`] bytes.

use serde::Deserialize;
use serde_json::Value;
use std::time::Duration;

/// Largest metadata or registration document read, in bytes.
pub const MAX_DOCUMENT: usize = 256 << 10;
/// How long one metadata fetch may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(15);

/// A `Bearer` challenge's parameters that matter here.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Challenge {
    /// `resource_metadata` (RFC 9728 §5.1).
    pub resource_metadata: Option<String>,
    /// `scope` (RFC 6750 §3): the scopes the server wants, space-separated.
    pub scope: Option<String>,
    /// `error` (`invalid_token`, `insufficient_scope`, ...).
    pub error: Option<String>,
    /// Whether the header has a `Bearer` challenge at all.
    pub bearer: bool,
}

/// Parses the `Bearer` challenge of a `WWW-Authenticate` value (other schemes and unknown
/// parameters are skipped; quoted strings may hold commas and escaped quotes). Never fails:
/// garbage gives an empty challenge.
pub fn parse_challenge(header: &str) -> Challenge {
    let mut out = Challenge::default();
    let mut rest = header.trim();
    let mut in_bearer = false;
    while !rest.is_empty() {
        // A token: either a scheme (followed by space or end) or a parameter name (followed
        // by `=`).
        let end = rest
            .find(|c: char| c == '=' || c == ',' || c.is_whitespace())
            .unwrap_or(rest.len());
        let token = &rest[..end];
        rest = rest[end..].trim_start();
        if let Some(after) = rest.strip_prefix('=') {
            let after = after.trim_start();
            let (value, next) = if let Some(q) = after.strip_prefix('"') {
                let mut v = String::new();
                let mut chars = q.char_indices();
                let mut stop = q.len();
                while let Some((i, c)) = chars.next() {
                    match c {
                        '\\' => {
                            if let Some((_, n)) = chars.next() {
                                v.push(n);
                            }
                        }
                        '"' => {
                            stop = i + 1;
                            break;
                        }
                        c => v.push(c),
                    }
                }
                (v, &q[stop.min(q.len())..])
            } else {
                let e = after.find(',').unwrap_or(after.len());
                (after[..e].trim().to_string(), &after[e..])
            };
            if in_bearer {
                match token.to_ascii_lowercase().as_str() {
                    "resource_metadata" => out.resource_metadata = Some(value),
                    "scope" => out.scope = Some(value),
                    "error" => out.error = Some(value),
                    _ => {}
                }
            }
            rest = next.trim_start().trim_start_matches(',').trim_start();
        } else {
            if !token.is_empty() {
                in_bearer = token.eq_ignore_ascii_case("bearer");
                out.bearer |= in_bearer;
            }
            rest = rest.trim_start_matches(',').trim_start();
            if token.is_empty() && !rest.is_empty() {
                // A stray character: skip it so the loop always advances.
                let mut c = rest.chars();
                c.next();
                rest = c.as_str();
            }
        }
    }
    out
}

/// Where to look for the protected resource metadata of `server`, in order: the challenge's
/// `resource_metadata` (on the server's origin only), then the path-inserted well-known URL, then the root one (RFC 9728
/// §3.1; MCP authorization, "Protected Resource Metadata Discovery").
pub fn resource_metadata_urls(server: &reqwest::Url, challenge: &Challenge) -> Vec<reqwest::Url> {
    let mut out = Vec::new();
    // Only on the server's own origin: a challenge must not make the daemon fetch an
    // arbitrary address (a link-local metadata service, another pod).
    if let Some(u) = challenge
        .resource_metadata
        .as_deref()
        .and_then(|u| server.join(u).ok())
        .filter(|u| u.origin() == server.origin())
    {
        out.push(u);
    }
    let path = server.path().trim_end_matches('/');
    if !path.is_empty() {
        if let Ok(u) = server.join(&format!("/.well-known/oauth-protected-resource{path}")) {
            out.push(u);
        }
    }
    if let Ok(u) = server.join("/.well-known/oauth-protected-resource") {
        out.push(u);
    }
    out.dedup();
    out
}

/// Where to look for an authorization server's metadata, in order (MCP authorization,
/// "Authorization Server Metadata Discovery"): for an issuer with a path, OAuth path-inserted,
/// OpenID path-inserted, OpenID path-appended; without one, OAuth then OpenID.
pub fn authorization_server_metadata_urls(issuer: &reqwest::Url) -> Vec<reqwest::Url> {
    let path = issuer.path().trim_end_matches('/');
    let at = |p: String| issuer.join(&p).ok();
    let list = if path.is_empty() {
        vec![
            at("/.well-known/oauth-authorization-server".into()),
            at("/.well-known/openid-configuration".into()),
        ]
    } else {
        vec![
            at(format!("/.well-known/oauth-authorization-server{path}")),
            at(format!("/.well-known/openid-configuration{path}")),
            at(format!("{path}/.well-known/openid-configuration")),
        ]
    };
    list.into_iter().flatten().collect()
}

/// The resource identifier of `server` (RFC 8707 §2): its URL without fragment (and without
/// query: the supervisor's URLs are shown and compared without one).
pub fn resource_of(server: &reqwest::Url) -> String {
    let mut u = server.clone();
    u.set_fragment(None);
    u.set_query(None);
    u.to_string()
}

/// Whether the metadata's `resource` may stand for `server` (RFC 9728 §3.3, MCP
/// authorization "Resource Parameter"): same origin, and `server`'s path equals or lies under
/// the resource's path.
pub fn resource_covers(resource: &str, server: &reqwest::Url) -> bool {
    let Ok(r) = reqwest::Url::parse(resource) else {
        return false;
    };
    if r.origin() != server.origin() {
        return false;
    }
    let rp = r.path().trim_end_matches('/');
    let sp = server.path().trim_end_matches('/');
    sp == rp || sp.starts_with(&format!("{rp}/")) || rp.is_empty()
}

/// Protected resource metadata (RFC 9728 §2), the fields used.
#[derive(Debug, Clone, Deserialize)]
pub struct ResourceMetadata {
    /// The protected resource's identifier.
    pub resource: String,
    /// Its authorization servers' issuers.
    #[serde(default)]
    pub authorization_servers: Vec<String>,
    /// Scopes it knows.
    #[serde(default)]
    pub scopes_supported: Option<Vec<String>>,
}

/// Authorization server metadata (RFC 8414 §2), the fields used.
#[derive(Debug, Clone, Deserialize, Default)]
pub struct ServerMetadata {
    /// Its issuer.
    #[serde(default)]
    pub issuer: Option<String>,
    /// Where a person signs in.
    #[serde(default)]
    pub authorization_endpoint: Option<String>,
    /// Where tokens are issued.
    pub token_endpoint: String,
    /// Dynamic client registration (RFC 7591).
    #[serde(default)]
    pub registration_endpoint: Option<String>,
    /// Scopes it knows.
    #[serde(default)]
    pub scopes_supported: Option<Vec<String>>,
    /// How clients may authenticate at the token endpoint.
    #[serde(default)]
    pub token_endpoint_auth_methods_supported: Option<Vec<String>>,
    /// PKCE methods; an absent list is taken as S256 (the MCP specification requires S256).
    #[serde(default)]
    pub code_challenge_methods_supported: Option<Vec<String>>,
    /// Grants it issues.
    #[serde(default)]
    pub grant_types_supported: Option<Vec<String>>,
    /// Whether a URL may be a `client_id` (client ID metadata documents).
    #[serde(default)]
    pub client_id_metadata_document_supported: bool,
    /// Whether its redirects name it in `iss` (RFC 9207); then one without is refused.
    #[serde(default)]
    pub authorization_response_iss_parameter_supported: bool,
}

/// GETs a JSON document; `Ok(None)` for a 4xx (absent), `Err` for the rest.
pub async fn get_json<T: serde::de::DeserializeOwned>(
    http: &reqwest::Client,
    url: &reqwest::Url,
) -> Result<Option<T>, String> {
    let resp = http
        .get(url.clone())
        .header(reqwest::header::ACCEPT, "application/json")
        .timeout(FETCH_TIMEOUT)
        .send()
        .await
        .map_err(|e| format!("{}: {}", shown(url), super::http_error(&e)))?;
    let status = resp.status();
    if status.is_client_error() {
        return Ok(None);
    }
    if !status.is_success() {
        return Err(format!("{}: HTTP {}", shown(url), status.as_u16()));
    }
    let body = super::read_limited(resp, MAX_DOCUMENT)
        .await
        .map_err(|e| format!("{}: {e}", shown(url)))?;
    let v: Value = serde_json::from_slice(&body)
        .map_err(|_| format!("{}: not a JSON document", shown(url)))?;
    serde_json::from_value(v)
        .map(Some)
        .map_err(|e| format!("{}: {e}", shown(url)))
}

/// A URL as logs and errors show it (no query).
pub fn shown(url: &reqwest::Url) -> String {
    support::config::shown_url(url.as_str())
}

#[cfg(test)]
mod tests {
    use super::{
        authorization_server_metadata_urls, parse_challenge, resource_covers,
        resource_metadata_urls, Challenge,
    };
    use proptest::prelude::*;

    fn url(s: &str) -> reqwest::Url {
        reqwest::Url::parse(s).unwrap()
    }

    #[test]
    fn challenges_are_read_with_quotes_commas_and_other_schemes() {
        let c = parse_challenge(
            r#"Basic realm="x", Bearer error="insufficient_scope", scope="a b", resource_metadata="https://s/.well-known/oauth-protected-resource/mcp""#,
        );
        assert_eq!(c.error.as_deref(), Some("insufficient_scope"));
        assert!(c.bearer);
        assert_eq!(c.scope.as_deref(), Some("a b"));
        assert_eq!(
            c.resource_metadata.as_deref(),
            Some("https://s/.well-known/oauth-protected-resource/mcp")
        );
        let c = parse_challenge(r#"Bearer realm="a,\"b", scope=read"#);
        assert_eq!(c.scope.as_deref(), Some("read"));
        assert_eq!(parse_challenge("Basic realm=\"x\""), Challenge::default());
        assert!(parse_challenge("Bearer").bearer);
        assert!(parse_challenge(r#"Bearer resource_metadata="u""#).bearer);
    }

    #[test]
    fn resource_metadata_is_looked_for_in_the_specified_order() {
        let s = url("https://h.example/api/mcp");
        let c = Challenge {
            resource_metadata: Some("https://h.example/custom/prm".into()),
            ..Challenge::default()
        };
        let elsewhere = Challenge {
            resource_metadata: Some("http://169.254.169.254/latest/meta-data".into()),
            ..Challenge::default()
        };
        assert_eq!(resource_metadata_urls(&s, &elsewhere).len(), 2);
        let got: Vec<String> = resource_metadata_urls(&s, &c)
            .into_iter()
            .map(|u| u.to_string())
            .collect();
        assert_eq!(
            got,
            [
                "https://h.example/custom/prm",
                "https://h.example/.well-known/oauth-protected-resource/api/mcp",
                "https://h.example/.well-known/oauth-protected-resource",
            ]
        );
        let root = resource_metadata_urls(&url("https://h.example/"), &Challenge::default());
        assert_eq!(root.len(), 1);
    }

    #[test]
    fn authorization_server_metadata_urls_follow_the_specification() {
        let with_path: Vec<String> =
            authorization_server_metadata_urls(&url("https://as.example/tenant1"))
                .into_iter()
                .map(|u| u.to_string())
                .collect();
        assert_eq!(
            with_path,
            [
                "https://as.example/.well-known/oauth-authorization-server/tenant1",
                "https://as.example/.well-known/openid-configuration/tenant1",
                "https://as.example/tenant1/.well-known/openid-configuration",
            ]
        );
        let bare: Vec<String> = authorization_server_metadata_urls(&url("https://as.example"))
            .into_iter()
            .map(|u| u.to_string())
            .collect();
        assert_eq!(
            bare,
            [
                "https://as.example/.well-known/oauth-authorization-server",
                "https://as.example/.well-known/openid-configuration",
            ]
        );
    }

    #[test]
    fn a_resource_covers_its_own_url_and_paths_under_it_only() {
        let s = url("https://h.example/mcp");
        assert!(resource_covers("https://h.example/mcp", &s));
        assert!(resource_covers("https://h.example/", &s));
        assert!(resource_covers("https://h.example", &s));
        assert!(!resource_covers("https://h.example/other", &s));
        assert!(!resource_covers("https://evil.example/mcp", &s));
        assert!(!resource_covers("http://h.example/mcp", &s));
        assert!(!resource_covers("https://h.example/mc", &s));
        assert!(!resource_covers("not a url", &s));
    }

    proptest! {
        /// Any header a server sends is read without panicking, and always terminates.
        #[test]
        fn any_challenge_text_is_read_without_panicking(h in ".{0,200}") {
            let _ = parse_challenge(&h);
        }
    }
}
