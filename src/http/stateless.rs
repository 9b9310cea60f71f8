//! 2026-07-28 requests over HTTP: no session, every request its own POST (2026-07-28
//! transports). Each request is a short-lived client of the server actor: connected, given
//! the one request, and gone when its answer is written or its response stream is closed. So
//! the actor's departure rule is the HTTP rule: closing the stream cancels the request toward
//! the child (issue 16 §3), and a `subscriptions/listen` stream lives exactly as long as its
//! response.
//!
//! Checked before anything reaches the actor: the headers against the body (`MCP-Protocol-
//! Version` = the envelope's version, `Mcp-Method` = `method`, `Mcp-Name` = the tool or prompt
//! name or the resource URI): a mismatch or a missing header is 400 with -32020; a method the
//! 2026-07-28 revision does not have is 404 with -32601.

use super::stream::{self, OnDrop};
use super::*;
use crate::mux::ids::id_key;
use crate::mux::session::{ClientId, ClientTx, SessionEvent, Transport};
use serde_json::Value;
use tokio::sync::mpsc;

/// The client requests of 2026-07-28 (`initialize`, `ping`, `logging/setLevel` and
/// `resources/(un)subscribe` were removed; protocol.md §4.4), plus the tasks extension's.
pub const MODERN_REQUESTS: &[&str] = &[
    "server/discover",
    "tools/list",
    "tools/call",
    "prompts/list",
    "prompts/get",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "completion/complete",
    "subscriptions/listen",
    "tasks/get",
    "tasks/update",
    "tasks/cancel",
];

/// The member of `params` that `Mcp-Name` repeats, for the methods that name something.
fn named_by(method: &str) -> Option<&'static str> {
    match method {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" => Some("uri"),
        _ => None,
    }
}

/// Why the headers disagree with the body, if they do.
fn header_mismatch(headers: &HeaderMap, m: &Message) -> Option<String> {
    let body_version = era::envelope_version(m.params.as_deref());
    match (header_str(headers, VERSION_HEADER), body_version.as_deref()) {
        (None, _) => return Some("the MCP-Protocol-Version header is missing".into()),
        (Some(h), Some(b)) if h != b => {
            return Some(format!(
                "MCP-Protocol-Version header `{h}` does not match the request's _meta protocol version `{b}`"
            ))
        }
        _ => {}
    }
    match header_str(headers, METHOD_HEADER) {
        None => return Some("the Mcp-Method header is missing".into()),
        Some(h) if h != m.method() => {
            return Some(format!(
                "Mcp-Method header `{h}` does not match the body's method `{}`",
                m.method()
            ))
        }
        _ => {}
    }
    if let Some(member) = named_by(m.method()) {
        let params: Option<Value> = m
            .params
            .as_deref()
            .and_then(|p| serde_json::from_str(p.get()).ok());
        let body_name = params
            .as_ref()
            .and_then(|p| p.get(member))
            .and_then(Value::as_str);
        match (header_str(headers, NAME_HEADER), body_name) {
            (None, _) => return Some("the Mcp-Name header is missing".into()),
            (Some(h), Some(b)) if h != b => {
                return Some(format!(
                    "Mcp-Name header `{h}` does not match the body's `{member}` `{b}`"
                ))
            }
            _ => {}
        }
    }
    None
}

/// Answers one 2026-07-28 POST.
pub(super) async fn post(
    front: &Arc<Front>,
    settings: &HttpConfig,
    entry: &Entry,
    peer: Peer,
    headers: &HeaderMap,
    m: Message,
    sse: bool,
) -> Response {
    match m.kind {
        // No session carries a notification or response anywhere: a cancel is a closed
        // stream in this revision, and a server never asks a 2026 client anything directly.
        Kind::Notification | Kind::Response => return StatusCode::ACCEPTED.into_response(),
        Kind::Request => {}
    }
    let Some(id) = m.id.clone() else {
        return plain(StatusCode::BAD_REQUEST, "a request without an id");
    };
    if let Some(why) = header_mismatch(headers, &m) {
        return rpc_error(StatusCode::BAD_REQUEST, Some(&id), HEADER_MISMATCH, &why);
    }
    if !MODERN_REQUESTS.contains(&m.method()) {
        return rpc_error(
            StatusCode::NOT_FOUND,
            Some(&id),
            code::METHOD_NOT_FOUND,
            &format!(
                "Method not found: `{}` is not a 2026-07-28 request",
                m.method()
            ),
        );
    }
    let name = entry.cfg.name.clone();
    {
        let mut open = front.requests.lock().unwrap_or_else(|p| p.into_inner());
        let n = open.entry(name.clone()).or_insert(0);
        if *n >= settings.max_requests {
            return rpc_error(
                StatusCode::SERVICE_UNAVAILABLE,
                Some(&id),
                code::LIMIT_EXCEEDED,
                &format!(
                    "server `{name}` has http_max_requests ({}) HTTP requests open",
                    settings.max_requests
                ),
            );
        }
        *n += 1;
    }
    let client = ClientId::next();
    let events = entry.handle.sessions.clone();
    // Whatever happens from here, the count and the actor's client end with this guard: when
    // the answer is written, or when the client closes the stream (the actor then cancels
    // the request toward the child).
    let guard = {
        let front = Arc::downgrade(front);
        let events = events.clone();
        let name = name.clone();
        OnDrop::new(move || {
            if let Some(f) = front.upgrade() {
                let mut open = f.requests.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(n) = open.get_mut(&name) {
                    *n = n.saturating_sub(1);
                }
            }
            let ev = SessionEvent::Disconnected(client);
            if let Err(mpsc::error::TrySendError::Full(ev)) = events.try_send(ev) {
                tokio::spawn(async move {
                    let _ = events.send(ev).await;
                });
            }
        })
    };
    let (tx, mut outbox) = ClientTx::channel(entry.cfg.client_queue, &front.stop);
    let peer = Peer {
        transport: Transport::HttpRequest,
        ..peer
    };
    let key = id_key(&id);
    if events
        .send(SessionEvent::Connected(client, tx, peer))
        .await
        .is_err()
        || events.send(SessionEvent::Message(client, m)).await.is_err()
    {
        return unavailable(&entry.cfg);
    }
    let kicked = outbox.kicked();
    if !sse {
        // JSON: the one answer (notifications have nowhere to go and are dropped).
        loop {
            let line = tokio::select! {
                l = outbox.recv() => l,
                _ = kicked.cancelled() => None,
            };
            let Some(line) = line.filter(|l| !l.is_empty()) else {
                drop(guard);
                return unavailable(&entry.cfg);
            };
            let b = trim_newline(line.to_bytes());
            if answers(&b, &key) {
                drop(guard);
                return json_body(StatusCode::OK, b);
            }
        }
    }
    let (stx, srx) = mpsc::channel::<Bytes>(64);
    // The pump: the actor's lines for this request onto its stream, until the answer.
    tokio::spawn(async move {
        loop {
            let line = tokio::select! {
                l = outbox.recv() => l,
                _ = kicked.cancelled() => None,
                _ = stx.closed() => None,
            };
            let Some(line) = line.filter(|l| !l.is_empty()) else {
                break;
            };
            let b = trim_newline(line.to_bytes());
            let last = answers(&b, &key);
            if stx.send(b).await.is_err() || last {
                break;
            }
        }
    });
    stream::sse(srx, guard)
}

/// Whether `line` is the response to the request whose id key is `key`.
fn answers(line: &Bytes, key: &str) -> bool {
    message::parse_shared(line).is_ok_and(|m| {
        m.kind == Kind::Response && m.id.as_deref().is_some_and(|i| id_key(i) == key)
    })
}
