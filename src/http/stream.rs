//! One SSE response: JSON-RPC messages from a bounded queue, each as an SSE `message` event,
//! with keep-alive comments ([`super::KEEP_ALIVE`]) while the stream is quiet. When the
//! response is dropped (the client closed it, or it ended) its guard runs once, so whoever
//! fed the queue learns that nobody reads it any more.

use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use std::convert::Infallible;
use tokio::sync::mpsc;

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
    let events = futures_util::stream::unfold((rx, guard), |(mut rx, guard)| async move {
        let msg = rx.recv().await?;
        let text = String::from_utf8_lossy(&msg).into_owned();
        Some((
            Ok::<_, Infallible>(Event::default().event("message").data(text)),
            (rx, guard),
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
