//! The token endpoint and the registration endpoint (issue 30 §1-§2): the authorization code
//! exchange (PKCE verifier, loopback redirect, `resource`), the refresh, the client
//! credentials grant, dynamic client registration (RFC 7591), and the client's
//! authentication: `none`, `client_secret_basic`, `client_secret_post` (RFC 6749 §2.3) or
//! `private_key_jwt` (RFC 7523 §2.2, a signed assertion).
//!
//! The token requests go through the `oauth2` crate, with the supervisor's own reqwest client
//! underneath (its TLS roots, no redirects). Errors are one line naming the endpoint and the
//! server's `error` code, never a token, secret or code.

use super::discovery::ServerMetadata;
use super::store::Record;
use oauth2::basic::BasicClient;
use oauth2::{
    AuthType, AuthorizationCode, ClientId, ClientSecret, PkceCodeVerifier, RedirectUrl,
    RefreshToken, RequestTokenError, Scope, TokenResponse, TokenUrl,
};
use serde_json::{json, Value};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long one token or registration request may take.
const TOKEN_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a JWT client assertion is valid.
const ASSERTION_LIFETIME: u64 = 300;
/// Largest token or registration answer read, in bytes.
const MAX_ANSWER: usize = 256 << 10;

/// Who the client is at the authorization server.
#[derive(Clone)]
pub struct Identity {
    /// `client_id`.
    pub client_id: String,
    /// Its secret, for `client_secret_basic` / `client_secret_post`.
    pub client_secret: Option<String>,
    /// `none`, `client_secret_basic`, `client_secret_post` or `private_key_jwt`.
    pub auth_method: String,
}

/// A private key and algorithm for `private_key_jwt`.
#[derive(Clone)]
pub struct Signer {
    /// The PEM text.
    pub pem: String,
    /// `ES256`, `RS256`, ...
    pub algorithm: String,
}

/// What a token request got.
pub struct Tokens {
    /// The access token.
    pub access_token: String,
    /// A refresh token, when one was issued.
    pub refresh_token: Option<String>,
    /// When the access token expires, Unix seconds.
    pub expires_at: Option<u64>,
    /// Its lifetime (`expires_in`), seconds.
    pub lifetime_s: Option<u64>,
    /// The scopes granted (the server's `scope`, else those asked for).
    pub scope: Option<String>,
}

/// Seconds since the epoch.
pub fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The token request's context: where, who, for which resource.
pub struct Endpoint<'a> {
    /// The supervisor's client toward the authorization server.
    pub http: &'a reqwest::Client,
    /// The token endpoint.
    pub token_endpoint: &'a str,
    /// The issuer (a JWT assertion's audience).
    pub issuer: &'a str,
    /// The client.
    pub identity: &'a Identity,
    /// Its key, for `private_key_jwt`.
    pub signer: Option<&'a Signer>,
    /// The `resource` parameter (RFC 8707).
    pub resource: &'a str,
}

impl Endpoint<'_> {
    fn client(
        &self,
    ) -> Result<
        BasicClient<
            oauth2::EndpointNotSet,
            oauth2::EndpointNotSet,
            oauth2::EndpointNotSet,
            oauth2::EndpointNotSet,
            oauth2::EndpointSet,
        >,
        String,
    > {
        let token_url = TokenUrl::new(self.token_endpoint.to_string())
            .map_err(|_| "the token endpoint is not a URL".to_string())?;
        let mut c = BasicClient::new(ClientId::new(self.identity.client_id.clone()))
            .set_token_uri(token_url)
            .set_auth_type(if self.identity.auth_method == "client_secret_basic" {
                AuthType::BasicAuth
            } else {
                AuthType::RequestBody
            });
        if matches!(
            self.identity.auth_method.as_str(),
            "client_secret_basic" | "client_secret_post"
        ) {
            if let Some(s) = &self.identity.client_secret {
                c = c.set_client_secret(ClientSecret::new(s.clone()));
            }
        }
        Ok(c)
    }

    /// `client_assertion` and its type, for `private_key_jwt`.
    fn assertion(&self) -> Result<Vec<(&'static str, String)>, String> {
        if self.identity.auth_method != "private_key_jwt" {
            return Ok(Vec::new());
        }
        let signer = self
            .signer
            .ok_or("private_key_jwt needs `oauth.private_key_file`")?;
        let jwt = client_assertion(signer, &self.identity.client_id, self.issuer)?;
        Ok(vec![
            (
                "client_assertion_type",
                "urn:ietf:params:oauth:client-assertion-type:jwt-bearer".to_string(),
            ),
            ("client_assertion", jwt),
        ])
    }

    /// Exchanges an authorization code (with its PKCE verifier and redirect).
    pub async fn exchange_code(
        &self,
        code: String,
        verifier: String,
        redirect: &str,
        asked_scope: Option<&str>,
    ) -> Result<Tokens, String> {
        let client = self.client()?.set_redirect_uri(
            RedirectUrl::new(redirect.to_string()).map_err(|_| "bad redirect URI".to_string())?,
        );
        let mut req = client
            .exchange_code(AuthorizationCode::new(code))
            .set_pkce_verifier(PkceCodeVerifier::new(verifier))
            .add_extra_param("resource", self.resource);
        for (k, v) in self.assertion()? {
            req = req.add_extra_param(k, v);
        }
        tokens(
            req.request_async(&Http(self.http)).await,
            asked_scope,
            "authorization code",
        )
    }

    /// Refreshes (RFC 6749 §6), for the same resource.
    pub async fn refresh(
        &self,
        refresh_token: &str,
        scope: Option<&str>,
    ) -> Result<Tokens, String> {
        let client = self.client()?;
        let token = RefreshToken::new(refresh_token.to_string());
        let mut req = client
            .exchange_refresh_token(&token)
            .add_extra_param("resource", self.resource);
        for (k, v) in self.assertion()? {
            req = req.add_extra_param(k, v);
        }
        let mut t = tokens(req.request_async(&Http(self.http)).await, scope, "refresh")?;
        // A server that does not rotate refresh tokens keeps the old one valid.
        if t.refresh_token.is_none() {
            t.refresh_token = Some(refresh_token.to_string());
        }
        Ok(t)
    }

    /// The client credentials grant (RFC 6749 §4.4), asking for `scope`.
    pub async fn client_credentials(&self, scope: Option<&str>) -> Result<Tokens, String> {
        let client = self.client()?;
        let mut req = client
            .exchange_client_credentials()
            .add_extra_param("resource", self.resource);
        for s in scope.iter().flat_map(|s| s.split_whitespace()) {
            req = req.add_scope(Scope::new(s.to_string()));
        }
        for (k, v) in self.assertion()? {
            req = req.add_extra_param(k, v);
        }
        tokens(
            req.request_async(&Http(self.http)).await,
            scope,
            "client credentials",
        )
    }
}

/// A signed JWT client assertion (RFC 7523 §3): `iss` = `sub` = the client id, `aud` = the
/// issuer, 5 minutes, a random `jti`.
pub fn client_assertion(signer: &Signer, client_id: &str, issuer: &str) -> Result<String, String> {
    use jsonwebtoken::{Algorithm, EncodingKey, Header};
    let alg: Algorithm = signer
        .algorithm
        .parse()
        .map_err(|_| format!("signing algorithm {} is not known", signer.algorithm))?;
    let pem = signer.pem.as_bytes();
    let key = match alg {
        Algorithm::ES256 | Algorithm::ES384 => EncodingKey::from_ec_pem(pem),
        Algorithm::EdDSA => EncodingKey::from_ed_pem(pem),
        _ => EncodingKey::from_rsa_pem(pem),
    }
    .map_err(|_| "the private key file is not a PEM key of that algorithm".to_string())?;
    let now = now_s();
    let claims = json!({
        "iss": client_id,
        "sub": client_id,
        "aud": issuer,
        "iat": now,
        "exp": now.saturating_add(ASSERTION_LIFETIME),
        "jti": format!("{:032x}", rand::random::<u128>()),
    });
    jsonwebtoken::encode(&Header::new(alg), &claims, &key)
        .map_err(|_| "cannot sign the client assertion with that key".to_string())
}

/// Dynamic client registration (RFC 7591 §3): a native public client with this loopback
/// redirect. Returns the identity the server gave.
pub async fn register(
    http: &reqwest::Client,
    meta: &ServerMetadata,
    endpoint: &str,
    redirect: &str,
    scope: Option<&str>,
) -> Result<Identity, String> {
    let supported = meta
        .token_endpoint_auth_methods_supported
        .clone()
        .unwrap_or_default();
    // A public client (no secret) where the server takes one; else what it supports.
    let method = ["none", "client_secret_basic", "client_secret_post"]
        .into_iter()
        .find(|m| supported.is_empty() || supported.iter().any(|s| s == m))
        .unwrap_or("none");
    let mut body = json!({
        "client_name": "mcp-supervisor",
        "redirect_uris": [redirect],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": method,
        "application_type": "native",
    });
    if let (Some(s), Some(o)) = (scope, body.as_object_mut()) {
        o.insert("scope".into(), json!(s));
    }
    let resp = http
        .post(endpoint)
        .json(&body)
        .timeout(TOKEN_TIMEOUT)
        .send()
        .await
        .map_err(|e| format!("registration: {}", super::http_error(&e)))?;
    let status = resp.status();
    let bytes = super::read_limited(resp, MAX_ANSWER)
        .await
        .map_err(|e| format!("registration: {e}"))?;
    let v: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    if !status.is_success() {
        return Err(format!(
            "registration refused: HTTP {}{}",
            status.as_u16(),
            error_code(&v)
        ));
    }
    let field = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
    let client_id = field("client_id").ok_or("registration: the answer has no client_id")?;
    let client_secret = field("client_secret");
    let auth_method = field("token_endpoint_auth_method").unwrap_or_else(|| {
        if client_secret.is_some() {
            "client_secret_basic".into()
        } else {
            "none".into()
        }
    });
    Ok(Identity {
        client_id,
        client_secret,
        auth_method,
    })
}

/// ` (error: invalid_grant)` from an OAuth error body, or nothing.
fn error_code(v: &Value) -> String {
    v.get("error")
        .and_then(Value::as_str)
        .map(|e| format!(" (error: {})", safe(e)))
        .unwrap_or_default()
}

/// An error code as shown: short, printable.
fn safe(s: &str) -> String {
    s.chars()
        .filter(|c| c.is_ascii_graphic())
        .take(64)
        .collect()
}

/// Whether a token request failed because the grant (the refresh token, the code) is no
/// longer good: the sign-in must be made again.
pub fn is_invalid_grant(message: &str) -> bool {
    message.contains("invalid_grant")
}

type TokenResult = Result<
    oauth2::basic::BasicTokenResponse,
    RequestTokenError<HttpError, oauth2::basic::BasicErrorResponse>,
>;

fn tokens(r: TokenResult, asked: Option<&str>, what: &str) -> Result<Tokens, String> {
    let t = r.map_err(|e| match e {
        RequestTokenError::ServerResponse(r) => {
            format!("{what}: refused (error: {})", safe(r.error().as_ref()))
        }
        RequestTokenError::Request(e) => format!("{what}: {e}"),
        RequestTokenError::Parse(_, _) => format!("{what}: the answer is not a token response"),
        RequestTokenError::Other(m) => format!("{what}: {}", safe(&m)),
    })?;
    let scope = t
        .scopes()
        .map(|s| {
            s.iter()
                .map(|x| x.to_string())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .or_else(|| asked.map(str::to_string));
    Ok(Tokens {
        access_token: t.access_token().secret().clone(),
        refresh_token: t.refresh_token().map(|r| r.secret().clone()),
        expires_at: t.expires_in().map(|d| now_s().saturating_add(d.as_secs())),
        lifetime_s: t.expires_in().map(|d| d.as_secs()),
        scope,
    })
}

/// A token request's transport failure (never carries the body).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct HttpError(String);

/// The supervisor's client as `oauth2`'s HTTP client (a named type: its futures are `Send`).
struct Http<'a>(&'a reqwest::Client);

impl<'c> oauth2::AsyncHttpClient<'c> for Http<'_> {
    type Error = HttpError;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<oauth2::HttpResponse, HttpError>> + Send + 'c>,
    >;

    fn call(&'c self, request: oauth2::HttpRequest) -> Self::Future {
        Box::pin(send(self.0, request))
    }
}

/// `oauth2`'s request through reqwest: no redirects (the client is built so), bounded
/// answer, a timeout.
async fn send(
    http: &reqwest::Client,
    req: oauth2::HttpRequest,
) -> Result<oauth2::HttpResponse, HttpError> {
    let (parts, body) = req.into_parts();
    let resp = http
        .request(parts.method, parts.uri.to_string())
        .headers(parts.headers)
        .body(body)
        .timeout(TOKEN_TIMEOUT)
        .send()
        .await
        .map_err(|e| HttpError(super::http_error(&e)))?;
    let mut out = http::Response::builder().status(resp.status());
    for (k, v) in resp.headers() {
        out = out.header(k, v);
    }
    let bytes = super::read_limited(resp, MAX_ANSWER)
        .await
        .map_err(HttpError)?;
    out.body(bytes).map_err(|e| HttpError(e.to_string()))
}

/// The record after a token request.
pub fn apply(record: &mut Record, t: Tokens) {
    record.access_token = Some(t.access_token);
    if t.refresh_token.is_some() {
        record.refresh_token = t.refresh_token;
    }
    record.expires_at = t.expires_at;
    record.lifetime_s = t.lifetime_s;
    if t.scope.is_some() {
        record.scope = t.scope;
    }
}

/// The token endpoint's authentication chosen for a pre-registered client: `private_key_jwt`
/// with a key; with a secret, `client_secret_basic` unless the server lists only
/// `client_secret_post`; else `none`.
pub fn pre_registered_method(meta: &ServerMetadata, secret: bool, key: bool) -> String {
    if key {
        return "private_key_jwt".into();
    }
    if !secret {
        return "none".into();
    }
    let supported = meta
        .token_endpoint_auth_methods_supported
        .clone()
        .unwrap_or_default();
    if supported.iter().any(|m| m == "client_secret_post")
        && !supported.iter().any(|m| m == "client_secret_basic")
    {
        "client_secret_post".into()
    } else {
        "client_secret_basic".into()
    }
}

#[cfg(test)]
mod tests {
    use super::{client_assertion, pre_registered_method, Signer};
    use crate::auth::discovery::ServerMetadata;

    #[test]
    fn pre_registered_clients_authenticate_the_way_the_server_takes() {
        let mut m = ServerMetadata::default();
        assert_eq!(
            pre_registered_method(&m, true, false),
            "client_secret_basic"
        );
        m.token_endpoint_auth_methods_supported = Some(vec!["client_secret_post".into()]);
        assert_eq!(pre_registered_method(&m, true, false), "client_secret_post");
        assert_eq!(pre_registered_method(&m, false, false), "none");
        assert_eq!(pre_registered_method(&m, false, true), "private_key_jwt");
    }

    #[test]
    fn a_bad_key_is_an_error_that_shows_no_key() {
        let s = Signer {
            pem: "-----BEGIN PRIVATE KEY-----\nSECRETSECRET\n-----END PRIVATE KEY-----\n".into(),
            algorithm: "ES256".into(),
        };
        let e = client_assertion(&s, "c", "https://as").unwrap_err();
        assert!(!e.contains("SECRET"), "{e}");
    }
}
