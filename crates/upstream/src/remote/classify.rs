//! What went wrong with an HTTP exchange, in the outage vocabulary (design.md §6): a failure
//! to reach the server at all ([`Unreachable`]: DNS, TCP refused, connect timeout, TLS), and
//! `Retry-After`. An HTTP status is never a death: it is an answer, classified by
//! the actor (`actor::outage`).

use crate::Unreachable;
use std::error::Error as _;
use std::time::Duration;

/// The kind of a failed connection, read from the error chain of reqwest, hyper, std::io and
/// rustls, and a one-line detail for the log (no URL query, no header).
pub fn unreachable(e: &reqwest::Error) -> (Unreachable, String) {
    let mut kind = if e.is_timeout() {
        Unreachable::ConnectTimeout
    } else if e.is_connect() {
        Unreachable::Connect
    } else {
        Unreachable::Dropped
    };
    let mut detail = String::new();
    let mut src: Option<&(dyn std::error::Error + 'static)> = e.source();
    while let Some(s) = src {
        let text = s.to_string();
        if s.downcast_ref::<rustls::Error>().is_some() || text.contains("certificate") {
            kind = Unreachable::Tls;
        } else if let Some(io) = s.downcast_ref::<std::io::Error>() {
            match io.kind() {
                std::io::ErrorKind::ConnectionRefused => kind = Unreachable::ConnectRefused,
                std::io::ErrorKind::TimedOut => kind = Unreachable::ConnectTimeout,
                _ if io
                    .get_ref()
                    .is_some_and(|inner| inner.downcast_ref::<rustls::Error>().is_some()) =>
                {
                    kind = Unreachable::Tls
                }
                _ => {}
            }
        }
        if kind == Unreachable::Connect
            && (text.contains("dns error") || text.contains("failed to lookup address"))
        {
            kind = Unreachable::Dns;
        }
        detail = text;
        src = s.source();
    }
    if detail.is_empty() {
        detail = e.to_string();
    }
    if let Some(clear) = tls_words(&detail) {
        detail = clear;
    }
    (kind, detail)
}

/// Plain words for a TLS refusal whose library text names no fix (issue 47 §8, N23): the
/// server's certificate is a CA certificate (`CaUsedAsEndEntity`), which is what a
/// self-signed certificate made with `openssl req -x509` is, and which happens when
/// `tls_ca_file` names the server's own certificate.
fn tls_words(detail: &str) -> Option<String> {
    detail.contains("CaUsedAsEndEntity").then(|| {
        "the server's own certificate is a CA certificate (CaUsedAsEndEntity), as a self-signed one made with `openssl req -x509` is: tls_ca_file must name the CA that signed the server's certificate, not the server's certificate itself; make a small CA and sign a server certificate with it (see Remote servers, TLS), or for a test bench only set tls_skip_verify = true".to_string()
    })
}

#[cfg(test)]
mod words {
    #[test]
    fn a_ca_used_as_the_servers_own_certificate_is_said_plainly() {
        let s = super::tls_words("invalid peer certificate: Other(OtherError(CaUsedAsEndEntity))")
            .unwrap_or_default();
        assert!(s.contains("tls_ca_file must name the CA"), "{s}");
        assert!(super::tls_words("invalid peer certificate: UnknownIssuer").is_none());
    }
}

/// `Retry-After` as a delay: seconds, or an HTTP date (RFC 9110 §10.2.3); `None` when absent
/// or unreadable. Capped at a day so a hostile value cannot push a deadline out of range.
pub fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let v = headers
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    let d = match v.parse::<u64>() {
        Ok(secs) => Duration::from_secs(secs),
        Err(_) => httpdate(v)?,
    };
    Some(d.min(Duration::from_secs(86_400)))
}

/// The delay until an HTTP date (any of RFC 9110 §5.6.7's three forms), zero if past.
fn httpdate(v: &str) -> Option<Duration> {
    let t = httpdate::parse_http_date(v).ok()?;
    Some(
        t.duration_since(std::time::SystemTime::now())
            .unwrap_or_default(),
    )
}

#[cfg(test)]
mod tests {
    use super::retry_after;
    use reqwest::header::{HeaderMap, HeaderValue, RETRY_AFTER};
    use std::time::Duration;

    fn with(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(RETRY_AFTER, HeaderValue::from_str(v).unwrap());
        h
    }

    #[test]
    fn retry_after_in_seconds_dates_and_garbage() {
        assert_eq!(retry_after(&with("7")), Some(Duration::from_secs(7)));
        assert_eq!(
            retry_after(&with("99999999999")),
            Some(Duration::from_secs(86_400))
        );
        assert_eq!(
            retry_after(&with("Sun, 06 Nov 1994 08:49:37 GMT")),
            Some(Duration::ZERO)
        );
        assert_eq!(
            retry_after(&with("Sunday, 06-Nov-94 08:49:37 GMT")),
            Some(Duration::ZERO)
        );
        assert_eq!(
            retry_after(&with("Sun Nov  6 08:49:37 1994")),
            Some(Duration::ZERO)
        );
        let later =
            httpdate::fmt_http_date(std::time::SystemTime::now() + Duration::from_secs(3600));
        let d = retry_after(&with(&later)).unwrap_or_default();
        assert!(
            d > Duration::from_secs(3500) && d <= Duration::from_secs(3600),
            "{d:?}"
        );
        assert_eq!(retry_after(&with("Sun, 06 Nov 1994 08:49:37 UTC")), None);
        assert_eq!(retry_after(&with("soon")), None);
        assert_eq!(retry_after(&with("-3")), None);
        assert_eq!(retry_after(&HeaderMap::new()), None);
    }
}
