//! The metrics listener: `GET /metrics`, and the probes `GET /healthz` and `GET /readyz`
//! (issue 17 §2); a minimal, bounded HTTP/1.x responder (connection cap, timeouts, accept
//! backoff, tracked tasks).

use super::*;

/// Limits of the metrics listener.
#[derive(Debug, Clone, Copy)]
pub(super) struct HttpLimits {
    /// Connections served at once; more are answered `503` and closed at once.
    pub(super) max_connections: usize,
    /// How long a client may take to send its request head, and again to take the answer.
    pub(super) timeout: std::time::Duration,
    /// The first pause after a failed `accept`, doubled while failures go on.
    pub(super) backoff_min: std::time::Duration,
    /// The longest pause after a failed `accept`.
    pub(super) backoff_max: std::time::Duration,
    /// At most one log line per this long about failing `accept`s.
    pub(super) log_every: std::time::Duration,
}

pub(super) const HTTP_LIMITS: HttpLimits = HttpLimits {
    max_connections: 32,
    timeout: std::time::Duration::from_secs(5),
    backoff_min: std::time::Duration::from_millis(10),
    backoff_max: std::time::Duration::from_secs(1),
    log_every: std::time::Duration::from_secs(10),
};

/// Largest request head read, in bytes.
pub(super) const HTTP_HEAD_MAX: usize = 16 * 1024;

/// The answer to a connection over the cap.
pub(super) const HTTP_BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nRetry-After: 1\r\nConnection: close\r\n\r\n";

/// Serves `GET /metrics` (OpenMetrics text) on `listener` until `stop` is cancelled. A minimal
/// HTTP/1.x responder: one request per connection, anything else gets 404.
///
/// Bounded: at most 32 connections at once (more get `503` and are closed at once, never
/// queued), 5 s to send the request head and 5 s to take the answer, a head of at most 16 KiB.
/// A failing `accept` (`EMFILE`, `ENOBUFS`, ...) is retried after a pause of 10 ms doubling to
/// 1 s (reset by the next success) and logged at most once per 10 s, instead of spinning.
/// Connection tasks are tracked: when `stop` fires they end, and this returns once they have.
pub async fn serve_http(
    listener: tokio::net::TcpListener,
    stop: tokio_util::sync::CancellationToken,
) {
    serve_http_with(listener, stop, HTTP_LIMITS).await;
}

pub(super) async fn serve_http_with(
    listener: tokio::net::TcpListener,
    stop: tokio_util::sync::CancellationToken,
    limits: HttpLimits,
) {
    let tracker = tokio_util::task::TaskTracker::new();
    let slots = std::sync::Arc::new(tokio::sync::Semaphore::new(limits.max_connections));
    let mut pause = limits.backoff_min;
    let mut last_log: Option<tokio::time::Instant> = None;
    let mut unlogged = 0u64;
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = stop.cancelled() => break,
        };
        let conn = match accepted {
            Ok((conn, _)) => {
                pause = limits.backoff_min;
                conn
            }
            Err(e) => {
                // Out of descriptors or memory: retrying at once would spin on the same error.
                if last_log.is_none_or(|t| t.elapsed() >= limits.log_every) {
                    tracing::warn!(error = %e, pause_ms = pause.as_millis() as u64,
                        failures_not_logged = unlogged, "cannot accept a metrics connection");
                    last_log = Some(tokio::time::Instant::now());
                    unlogged = 0;
                } else {
                    unlogged += 1;
                }
                tokio::select! {
                    _ = tokio::time::sleep(pause) => {}
                    _ = stop.cancelled() => break,
                }
                pause = pause.saturating_mul(2).min(limits.backoff_max);
                continue;
            }
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            // Over the cap: refuse at once rather than queue (a scraper retries; a flood must
            // not hold descriptors). A fresh socket's send buffer is empty, so this never waits.
            let _ = conn.try_write(HTTP_BUSY);
            continue;
        };
        let stop = stop.clone();
        tracker.spawn(async move {
            let _permit = permit;
            tokio::select! {
                _ = answer_http(conn, limits.timeout) => {}
                _ = stop.cancelled() => {}
            }
        });
    }
    tracker.close();
    // Every task ends on `stop`, which has fired, so this is prompt.
    tracker.wait().await;
}

/// The answer to a request line: `GET /metrics` (OpenMetrics text), `GET /healthz` (200
/// `{"status":"ok"}` whenever this event loop answers; never tied to a child), `GET /readyz`
/// (200 or 503 with [`super::ready::Report`]'s JSON body), anything else 404. A query string
/// is ignored; `HEAD` is not served (kubelet and Docker use `GET`).
pub(super) fn route(line: &[u8]) -> (&'static str, &'static str, String) {
    let path = line
        .strip_prefix(b"GET ")
        .and_then(|rest| rest.split(|b| *b == b' ').next())
        .map(|target| target.split(|b| *b == b'?').next().unwrap_or_default());
    const JSON: &str = "application/json";
    match path {
        Some(b"/metrics") => (
            "200 OK",
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            metrics().render(),
        ),
        Some(b"/healthz") => ("200 OK", JSON, "{\"status\":\"ok\"}\n".to_string()),
        Some(b"/readyz") => {
            let r = super::readiness().report();
            let status = if r.ready {
                "200 OK"
            } else {
                "503 Service Unavailable"
            };
            (status, JSON, format!("{}\n", r.body))
        }
        _ => (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "served here: GET /metrics, /healthz, /readyz\n".to_string(),
        ),
    }
}

/// Reads one request head (within `timeout`) and answers it (within `timeout` again).
pub(super) async fn answer_http(mut conn: tokio::net::TcpStream, timeout: std::time::Duration) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    let read = async {
        loop {
            // Only the new bytes (and the 3 before them) can complete the blank line.
            let from = head.len().saturating_sub(3);
            let n = match conn.read(&mut buf).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => n,
            };
            head.extend_from_slice(buf.get(..n).unwrap_or_default());
            if head
                .get(from..)
                .is_some_and(|t| t.windows(4).any(|w| w == b"\r\n\r\n"))
            {
                return true;
            }
            if head.len() >= HTTP_HEAD_MAX {
                return true;
            }
        }
    };
    if !matches!(tokio::time::timeout(timeout, read).await, Ok(true)) {
        return;
    }
    let line = head.split(|b| *b == b'\n').next().unwrap_or_default();
    let (status, ctype, body) = route(line);
    let reply = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let write = async {
        let _ = conn.write_all(reply.as_bytes()).await;
        let _ = conn.shutdown().await;
    };
    let _ = tokio::time::timeout(timeout, write).await;
}
