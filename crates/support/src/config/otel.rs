//! `[supervisor]`'s `otel_*` keys: OpenTelemetry traces (issue 17 §4). Off unless
//! `otel_endpoint` is set. Each error names file, line and key.

use super::raw::RawSupervisor;
use super::{ConfigError, Validator};
use toml::Spanned;

/// `[supervisor]`'s `otel_*` keys, present when `otel_endpoint` is set
/// (docs/book/src/guides/monitoring.md, "Traces").
#[derive(Debug, Clone, PartialEq)]
pub struct OtelConfig {
    /// The OTLP/HTTP traces URL spans are POSTed to (protobuf), from `otel_endpoint`: a base
    /// URL gets `/v1/traces` appended to its path, as the OTLP exporter specification says of
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` ("Endpoint URLs for OTLP/HTTP"); a URL whose path already
    /// ends in `/v1/traces` is used as written. `http` only (no TLS stack is linked): send to
    /// a collector on the host or in the pod.
    pub traces_url: String,
    /// `otel_service_name`: the resource's `service.name`. When unset, `OTEL_SERVICE_NAME`
    /// from the environment, else `mcp-supervisor`.
    pub service_name: Option<String>,
    /// `otel_headers`: extra HTTP headers on every export (e.g. an API key), by name.
    /// `OTEL_EXPORTER_OTLP_HEADERS` / `OTEL_EXPORTER_OTLP_TRACES_HEADERS` add to them (and win
    /// on the same name). Values are never logged.
    pub headers: Vec<(String, String)>,
}

/// The path the OTLP specification gives the traces signal.
pub const TRACES_PATH: &str = "/v1/traces";

/// The traces URL for `otel_endpoint` text, or why it is not one (see
/// [`OtelConfig::traces_url`]).
pub fn traces_url(endpoint: &str) -> Result<String, String> {
    let uri: hyper::Uri = endpoint.parse().map_err(|e| {
        format!("`{endpoint}` is not a URL ({e}); write e.g. \"http://127.0.0.1:4318\"")
    })?;
    if uri.authority().is_some_and(|a| a.as_str().contains('@')) {
        // It would be logged with the endpoint, and is not sent as credentials anyway.
        return Err(
            "user information in the URL is not supported; put credentials in otel_headers, e.g. otel_headers = { authorization = \"Basic ...\" }"
                .to_string(),
        );
    }
    match uri.scheme_str() {
        Some("http") => {}
        Some("https") => {
            return Err(format!(
                "`{endpoint}`: https is not supported (no TLS stack is built in); export over http to a collector on this host or in the pod, which forwards over TLS"
            ))
        }
        _ => {
            return Err(format!(
                "`{endpoint}` must start with http://, e.g. \"http://127.0.0.1:4318\""
            ))
        }
    }
    let Some(authority) = uri.authority() else {
        return Err(format!("`{endpoint}` names no host"));
    };
    if uri.query().is_some() {
        return Err(format!("`{endpoint}`: a query string is not allowed"));
    }
    let path = uri.path().trim_end_matches('/');
    let path = if path.ends_with(TRACES_PATH) {
        path.to_string()
    } else {
        format!("{path}{TRACES_PATH}")
    };
    Ok(format!("http://{authority}{path}"))
}

impl Validator<'_> {
    pub(super) fn otel(&self, raw: &RawSupervisor) -> Result<Option<OtelConfig>, ConfigError> {
        let Some(endpoint) = &raw.otel_endpoint else {
            for (set, key) in [
                (
                    raw.otel_service_name.as_ref().map(Spanned::span),
                    "supervisor.otel_service_name",
                ),
                (
                    raw.otel_headers.as_ref().map(Spanned::span),
                    "supervisor.otel_headers",
                ),
            ] {
                if let Some(span) = set {
                    return Err(self.err(
                        span,
                        key,
                        "has no effect without otel_endpoint (traces are off); set otel_endpoint = \"http://127.0.0.1:4318\" or remove it",
                    ));
                }
            }
            return Ok(None);
        };
        let traces_url = traces_url(endpoint.get_ref())
            .map_err(|m| self.err(endpoint.span(), "supervisor.otel_endpoint", &m))?;
        let service_name = match &raw.otel_service_name {
            Some(n) if n.get_ref().trim().is_empty() => {
                return Err(self.err(
                    n.span(),
                    "supervisor.otel_service_name",
                    "must not be empty",
                ))
            }
            Some(n) => Some(n.get_ref().clone()),
            None => None,
        };
        let mut headers = Vec::new();
        if let Some(h) = &raw.otel_headers {
            for (name, value) in h.get_ref() {
                let key = format!("supervisor.otel_headers.{name}");
                if hyper::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
                    return Err(self.err(h.span(), &key, "is not a valid HTTP header name"));
                }
                if hyper::header::HeaderValue::from_str(value).is_err() {
                    // The value may be a secret: not repeated in the message.
                    return Err(self.err(
                        h.span(),
                        &key,
                        "its value is not a valid HTTP header value (visible ASCII only)",
                    ));
                }
                headers.push((name.clone(), value.clone()));
            }
        }
        Ok(Some(OtelConfig {
            traces_url,
            service_name,
            headers,
        }))
    }
}
