//! One SSE response: JSON-RPC messages from a bounded queue, each as an SSE `message` event,
//! with keep-alive comments ([`super::KEEP_ALIVE`]) while the stream is quiet. When the
//! response is dropped (the client closed it, or it ended) its guard runs once, so whoever
//! fed the queue learns that nobody reads it any more.

use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use std::convert::Infallible;
use tokio::sync::{mpsc, watch};

/// Runs a closure once when dropped.
pub(crate) struct OnDrop(Option<Box<dyn FnOnce() + Send>>);

impl OnDrop {
    /// Runs `f` when this is dropped.
    pub(crate) fn new(f: impl FnOnce() + Send + 'static) -> Self {
        OnDrop(Some(Box::new(f)))
    }
}

impl Drop for OnDrop {
    fn drop(&mut self) {
        if let Some(f) = self.0.take() {
            f();
        }
    }
}

impl std::fmt::Debug for OnDrop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OnDrop")
    }
}

/// An SSE response that sends every message `rx` yields (compact JSON text, no newline) as
/// an SSE `message` event and ends when `rx` ends; `guard` runs when the response is dropped.
pub(crate) fn sse(rx: mpsc::Receiver<Bytes>, guard: OnDrop) -> Response {
    sse_until(rx, guard, None)
}

/// How soon a client whose stream ended for an upgrade should reconnect (the SSE `retry`
/// field, issue 32 §1).
pub(crate) const RETRY_AFTER_HANDOFF: std::time::Duration = std::time::Duration::from_millis(250);

/// [`sse`] for a standalone stream that also ends when `handoff` turns true (an upgrade in
/// place, issue 32 §1): its last event is a `retry` hint, so the client reconnects to the
/// next image at once.
pub(crate) fn sse_until(
    rx: mpsc::Receiver<Bytes>,
    guard: OnDrop,
    handoff: Option<watch::Receiver<bool>>,
) -> Response {
    let state = (rx, guard, handoff, false);
    let events =
        futures_util::stream::unfold(state, |(mut rx, guard, mut handoff, ended)| async move {
            if ended {
                return None;
            }
            let asked = async {
                match handoff.as_mut() {
                    Some(h) => {
                        let _ = h.wait_for(|a| *a).await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            let msg = tokio::select! {
                m = rx.recv() => m?,
                () = asked => {
                    let last = Event::default()
                        .retry(RETRY_AFTER_HANDOFF)
                        .comment("mcp-supervisor is upgrading; reconnect");
                    return Some((Ok::<_, Infallible>(last), (rx, guard, handoff, true)));
                }
            };
            let text = String::from_utf8_lossy(&msg).into_owned();
            Some((
                Ok::<_, Infallible>(Event::default().event("message").data(text)),
                (rx, guard, handoff, false),
            ))
        });
    let mut r = Sse::new(events)
        .keep_alive(KeepAlive::new().interval(super::KEEP_ALIVE))
        .into_response();
    // Reverse proxies (nginx) would otherwise buffer the stream (2026-07-28 transports).
    r.headers_mut().insert(
        "x-accel-buffering",
        axum::http::HeaderValue::from_static("no"),
    );
    r
}
