//! The metrics listener: `GET /metrics`, and the probes `GET /healthz` and `GET /readyz`
//! (issue 17 §2), on hyper like the HTTP endpoint (issue 26 §4).
//!
//! `/healthz` is the liveness probe of a Kubernetes pod, and the port is open to whoever can
//! reach the pod: no connection flood may make it fail (40 idle connections once made it
//! answer 503, which would have had the pod restarted). So:
//! - every connection is in one [`Pool`] of [`Limits::connections`] places in which a
//!   newcomer always has a place (the oldest connection is closed for it): idle and half-sent
//!   heads only shorten each other's lives, and a probe, which sends its head at once, is
//!   answered;
//! - a connection serves one request (`Connection: close`), must send its head (at most
//!   [`HEAD_MAX`] bytes) within [`Limits::head`], and is closed [`Limits::lifetime`] after its
//!   accept, answered or not;
//! - the probes need nothing else: their answers are a few bytes, computed at once;
//! - `/metrics` renders and sends at most [`Limits::metrics_at_once`] answers at once (each
//!   holds its permit until its connection ends); more get `503` with `Retry-After: 1`, and
//!   never take anything from the probes.
//!
//! A failing `accept` (`EMFILE`, `ENOBUFS`, ...) is retried after a pause doubling from
//! [`Limits::backoff_min`] to [`Limits::backoff_max`] (reset by the next success), logged at
//! most once per [`Limits::log_every`], instead of spinning. Connection tasks are tracked:
//! when `stop` fires they end, and [`serve_http`] returns once they have.

use super::metrics;
use axum::body::Body;
use axum::http::{header, HeaderValue, Method, Request, Response, StatusCode};
use base::admit::Pool;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

/// Limits of the metrics listener (module documentation).
#[derive(Debug, Clone, Copy)]
pub(super) struct Limits {
    /// Connections open at once; a newcomer beyond them closes the oldest.
    pub(super) connections: usize,
    /// How long a connection may take to send its request head.
    pub(super) head: Duration,
    /// How long a connection may live in all (its head, and taking its answer).
    pub(super) lifetime: Duration,
    /// `/metrics` answers in progress at once; more get 503.
    pub(super) metrics_at_once: usize,
    /// The first pause after a failed `accept`, doubled while failures go on.
    pub(super) backoff_min: Duration,
    /// The longest pause after a failed `accept`.
    pub(super) backoff_max: Duration,
    /// At most one log line per this long about failing `accept`s.
    pub(super) log_every: Duration,
}

/// The largest request head read, in bytes (hyper's `max_buf_size`, at least 8 KiB): with
/// [`Limits::connections`], what a flood can make the listener hold is 1 MiB.
const HEAD_MAX: usize = 16 * 1024;

/// The limits `metrics_listen` is served with.
pub(super) const LIMITS: Limits = Limits {
    connections: 64,
    head: Duration::from_secs(2),
    lifetime: Duration::from_secs(5),
    metrics_at_once: 4,
    backoff_min: Duration::from_millis(10),
    backoff_max: Duration::from_secs(1),
    log_every: Duration::from_secs(10),
};

/// Serves `GET /metrics` (OpenMetrics text), `GET /healthz` and `GET /readyz` on `listener`
/// until `stop` is cancelled: at most 64 connections (a newcomer closes the oldest), 2 s to
/// send the head, 5 s in all, one request each, 4 `/metrics` answers at once (module
/// documentation).
pub async fn serve_http(listener: tokio::net::TcpListener, stop: CancellationToken) {
    serve_http_with(listener, stop, LIMITS).await;
}

pub(super) async fn serve_http_with(
    listener: tokio::net::TcpListener,
    stop: CancellationToken,
    limits: Limits,
) {
    let tracker = tokio_util::task::TaskTracker::new();
    let pool = Pool::new(limits.connections);
    let renders = Arc::new(Semaphore::new(limits.metrics_at_once));
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
        let (place, oldest) = pool.admit();
        if let Some(oldest) = oldest {
            oldest.cancel();
        }
        let stop = stop.clone();
        let renders = renders.clone();
        tracker.spawn(async move {
            let ended = place.ended();
            tokio::select! {
                _ = serve_one(conn, limits, renders) => {}
                _ = ended.cancelled() => {}
                _ = tokio::time::sleep(limits.lifetime) => {}
                _ = stop.cancelled() => {}
            }
            drop(place);
        });
    }
    tracker.close();
    // Every task ends on `stop`, which has fired, so this is prompt.
    tracker.wait().await;
}

/// Serves one request on `conn` (hyper, no keep-alive): the `/metrics` permit it may take is
/// held until the connection ends.
async fn serve_one(conn: tokio::net::TcpStream, limits: Limits, renders: Arc<Semaphore>) {
    let held: Arc<Mutex<Option<OwnedSemaphorePermit>>> = Arc::default();
    let slot = held.clone();
    let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
        let answer = answer(&req, &renders, &slot);
        async move { Ok::<_, Infallible>(answer) }
    });
    let bounds = base::http1::Bounds {
        head_timeout: limits.head,
        buffer_max: HEAD_MAX,
        keep_alive: false,
    };
    base::http1::serve(conn, bounds, service).await;
    drop(held);
}

/// The answer to one request: `GET /metrics` (OpenMetrics text; 503 when
/// [`Limits::metrics_at_once`] are in progress), `GET /healthz` (200 `{"status":"ok"}`
/// whenever this event loop answers; never tied to a child), `GET /readyz` (200 or 503 with
/// [`super::ready::Report`]'s JSON body), another path 404, another method 405. A query
/// string is ignored.
fn answer(
    req: &Request<hyper::body::Incoming>,
    renders: &Arc<Semaphore>,
    held: &Mutex<Option<OwnedSemaphorePermit>>,
) -> Response<Body> {
    const JSON: &str = "application/json";
    if req.method() != Method::GET {
        let mut r = reply(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain; charset=utf-8",
            "use GET\n".into(),
        );
        r.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET"));
        return r;
    }
    match req.uri().path() {
        "/healthz" => reply(StatusCode::OK, JSON, "{\"status\":\"ok\"}\n".into()),
        "/readyz" => {
            let r = super::readiness().report();
            let status = if r.ready {
                StatusCode::OK
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            };
            reply(status, JSON, format!("{}\n", r.body))
        }
        "/metrics" => match renders.clone().try_acquire_owned() {
            Ok(permit) => {
                *held.lock().unwrap_or_else(|p| p.into_inner()) = Some(permit);
                reply(
                    StatusCode::OK,
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    metrics().render(),
                )
            }
            Err(_) => {
                let mut r = reply(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "text/plain; charset=utf-8",
                    "busy: other /metrics answers are in progress; retry\n".into(),
                );
                r.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
                r
            }
        },
        _ => reply(
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            "served here: GET /metrics, /healthz, /readyz\n".into(),
        ),
    }
}

fn reply(status: StatusCode, ctype: &'static str, body: String) -> Response<Body> {
    let mut r = Response::new(Body::from(body));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(ctype));
    r
}
