//! A url server's sign-in (issue 30): the `[servers.NAME.oauth]` table. OAuth 2.1 per the MCP
//! authorization specification is on for every url server that has no static `Authorization`
//! header; this table only configures it (a pre-registered client, a client ID metadata
//! document, scopes, a headless grant). A static `Authorization` header together with this
//! table is an error: one server has one way to authenticate.
//!
//! Secrets (a client secret, a private key) are read from files named here when they are
//! needed; the file's content is never shown. Each error names file, line and key.

use super::raw::RawOAuth;
use super::{ConfigError, Table, Validator};
use std::path::PathBuf;
use std::time::Duration;

/// How the supervisor gets a token for a url server.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum Grant {
    /// `grant = "authorization_code"` (default): a person signs in once with
    /// `mcp-supervisor login NAME` (a browser, PKCE S256, a loopback redirect).
    #[default]
    AuthorizationCode,
    /// `grant = "client_credentials"`: no person; the client authenticates with
    /// `client_secret_file` or `private_key_file` (a signed JWT assertion, RFC 7523).
    ClientCredentials,
}

/// `[servers.NAME.oauth]`, resolved. No field holds a secret: secrets stay in their files.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct OAuthConfig {
    /// The grant.
    pub grant: Grant,
    /// `client_id`: a client registered with the authorization server beforehand
    /// (pre-registration). Without it: a client ID metadata document when
    /// `client_metadata_url` is set and the server supports it, else dynamic registration.
    pub client_id: Option<String>,
    /// `client_secret_file`: the pre-registered client's secret (trimmed).
    pub client_secret_file: Option<PathBuf>,
    /// `private_key_file`: a PEM private key (PKCS#8) for `private_key_jwt`.
    pub private_key_file: Option<PathBuf>,
    /// `signing_algorithm`: the JWT assertion's algorithm, `ES256` (default), `ES384`,
    /// `RS256`, `PS256` or `EdDSA`.
    pub signing_algorithm: String,
    /// `client_metadata_url`: a public `https://` URL serving this client's metadata document
    /// (used as its `client_id` where the authorization server supports it).
    pub client_metadata_url: Option<String>,
    /// `scopes`: the scopes to ask for; empty = what the server asks for (its
    /// `WWW-Authenticate` scope, else its metadata's `scopes_supported`, else none).
    pub scopes: Vec<String>,
    /// `redirect_port`: the loopback port of the redirect (0 = any free port; a
    /// pre-registered client may need a fixed one).
    pub redirect_port: u16,
    /// `login_timeout`: how long `login` waits for the browser (default 300 s).
    pub login_timeout: Duration,
    /// `issuer`: the authorization server this server must use; another named by the server's
    /// metadata is refused (pins where a configured secret or key may go).
    pub issuer: Option<String>,
    /// The server's own `allow_plain_http`: only then may the authorization server be plain
    /// `http://` beyond loopback.
    pub allow_plain_http: bool,
}

/// Default `login_timeout`.
pub const LOGIN_TIMEOUT: Duration = Duration::from_secs(300);

const ALGORITHMS: &[&str] = &[
    "ES256", "ES384", "RS256", "RS384", "RS512", "PS256", "EdDSA",
];

impl Validator<'_> {
    /// The server's sign-in, `None` when it has a static `Authorization` header (and no
    /// `oauth` table). Errors: a key of the table is wrong, or both ways are configured.
    pub(super) fn oauth(
        &self,
        t: Table,
        raw: Option<&toml::Spanned<RawOAuth>>,
        static_authorization: Option<std::ops::Range<usize>>,
    ) -> Result<Option<OAuthConfig>, ConfigError> {
        let k = |field: &str| format!("{}.{field}", t.key("oauth", true));
        let Some(raw) = raw else {
            return Ok(if static_authorization.is_some() {
                None
            } else {
                Some(OAuthConfig {
                    signing_algorithm: "ES256".into(),
                    login_timeout: LOGIN_TIMEOUT,
                    ..OAuthConfig::default()
                })
            });
        };
        if static_authorization.is_some() {
            return Err(self.err(
                raw.span(),
                &t.key("oauth", true),
                "a static `Authorization` header and `oauth` on one server: choose one (remove `headers.Authorization` to sign in with OAuth)",
            ));
        }
        let o = raw.get_ref();
        let at = raw.span();
        // Where a key is written, else the table's header.
        let span_of = |v: Option<std::ops::Range<usize>>| v.unwrap_or(at.clone());
        let grant = match o.grant.as_ref().map(|g| g.get_ref().as_str()) {
            None | Some("authorization_code") => Grant::AuthorizationCode,
            Some("client_credentials") => Grant::ClientCredentials,
            Some(other) => {
                return Err(self.err(
                    span_of(o.grant.as_ref().map(|g| g.span())),
                    &k("grant"),
                    &format!(
                        "`{other}`: expected \"authorization_code\" or \"client_credentials\""
                    ),
                ))
            }
        };
        let file = |p: &Option<toml::Spanned<String>>,
                    key: &str|
         -> Result<Option<PathBuf>, ConfigError> {
            let Some(p) = p else { return Ok(None) };
            let path = self.relative_to_file(p.get_ref());
            if self.host && !path.is_file() {
                return Err(self.err(
                    p.span(),
                    &k(key),
                    &format!("{} is not a readable file", path.display()),
                ));
            }
            self.secret_file(&path, p.span(), &k(key))?;
            Ok(Some(path))
        };
        let client_secret_file = file(&o.client_secret_file, "client_secret_file")?;
        let private_key_file = file(&o.private_key_file, "private_key_file")?;
        if client_secret_file.is_some() && private_key_file.is_some() {
            return Err(self.err(
                span_of(o.private_key_file.as_ref().map(|v| v.span())),
                &k("private_key_file"),
                "give one of `client_secret_file` and `private_key_file`",
            ));
        }
        if (client_secret_file.is_some() || private_key_file.is_some()) && o.client_id.is_none() {
            return Err(self.err(
                at,
                &k("client_id"),
                "a client secret or key belongs to a pre-registered client: set `client_id` too",
            ));
        }
        if grant == Grant::ClientCredentials
            && client_secret_file.is_none()
            && private_key_file.is_none()
        {
            return Err(self.err(
                span_of(o.grant.as_ref().map(|g| g.span())),
                &k("grant"),
                "client_credentials needs `client_id` with `client_secret_file` or `private_key_file`",
            ));
        }
        let signing_algorithm = o
            .signing_algorithm
            .as_ref()
            .map(|a| a.get_ref().clone())
            .unwrap_or_else(|| "ES256".into());
        if !ALGORITHMS.contains(&signing_algorithm.as_str()) {
            return Err(self.err(
                span_of(o.signing_algorithm.as_ref().map(|v| v.span())),
                &k("signing_algorithm"),
                &format!(
                    "`{signing_algorithm}`: expected one of {}",
                    ALGORITHMS.join(", ")
                ),
            ));
        }
        if let Some(u) = &o.client_metadata_url {
            let ok = reqwest::Url::parse(u.get_ref())
                .is_ok_and(|p| p.scheme() == "https" && p.path() != "/" && p.host_str().is_some());
            if !ok {
                return Err(self.err(
                    u.span(),
                    &k("client_metadata_url"),
                    "must be an https:// URL with a path (the client ID metadata document)",
                ));
            }
        }
        if let Some(i) = &o.issuer {
            let ok = reqwest::Url::parse(i.get_ref())
                .is_ok_and(|u| matches!(u.scheme(), "https" | "http") && u.host_str().is_some());
            if !ok {
                return Err(self.err(
                    i.span(),
                    &k("issuer"),
                    "must be the authorization server's issuer URL, e.g. \"https://auth.example.com\"",
                ));
            }
        }
        let login_timeout = match &o.login_timeout {
            None => LOGIN_TIMEOUT,
            Some(text) => super::parse_duration(text.get_ref())
                .ok()
                .filter(|d| !d.is_zero() && *d <= Duration::from_secs(3600))
                .ok_or_else(|| {
                    self.err(
                        text.span(),
                        &k("login_timeout"),
                        "a duration between 1s and 1h, e.g. \"5m\"",
                    )
                })?,
        };
        if let Some(list) = &o.scopes {
            for s in list.get_ref() {
                if s.is_empty()
                    || s.chars()
                        .any(|c| c.is_whitespace() || c == '"' || c == '\\')
                {
                    return Err(self.err(
                        list.span(),
                        &k("scopes"),
                        &format!("`{s}` is not a scope token"),
                    ));
                }
            }
        }
        Ok(Some(OAuthConfig {
            grant,
            client_id: o.client_id.as_ref().map(|c| c.get_ref().clone()),
            client_secret_file,
            private_key_file,
            signing_algorithm,
            client_metadata_url: o.client_metadata_url.as_ref().map(|u| u.get_ref().clone()),
            scopes: o
                .scopes
                .as_ref()
                .map(|s| s.get_ref().clone())
                .unwrap_or_default(),
            redirect_port: o.redirect_port.as_ref().map(|p| *p.get_ref()).unwrap_or(0),
            issuer: o
                .issuer
                .as_ref()
                .map(|i| i.get_ref().trim_end_matches('/').to_string()),
            allow_plain_http: false,
            login_timeout,
        }))
    }
}
