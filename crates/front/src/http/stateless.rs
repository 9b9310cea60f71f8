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
use super::{
    header_str, json_body, plain, rpc_error, trim_newline, unavailable, Charge, Entry, Front,
    HeaderMap, HttpConfig, IntoResponse, Response, StatusCode, HEADER_MISMATCH, METHOD_HEADER,
    NAME_HEADER, VERSION_HEADER,
};
use actor::era;
use actor::ids::id_key;
use actor::session::{Address, ClientId, ClientTx, Peer, SessionEvent, Transport};
use bytes::Bytes;
use serde_json::Value;
use std::sync::Arc;
use tokio::sync::mpsc;
use vocab::jsonrpc::message::{self, code, Kind, Message};

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

/// A header value as the client meant it: `=?base64?...?=` decoded (2026-07-28 transports:
/// values that are not header-safe are sent so), surrounding whitespace dropped.
fn header_value(headers: &HeaderMap, name: &str) -> Option<String> {
    use base64::Engine;
    let v = header_str(headers, name)?;
    match v
        .strip_prefix("=?base64?")
        .and_then(|r| r.strip_suffix("?="))
    {
        Some(b64) => base64::engine::general_purpose::STANDARD
            .decode(b64)
            .ok()
            .and_then(|b| String::from_utf8(b).ok()),
        None => Some(v.to_string()),
    }
}

/// Why a 2026-07-28 request is refused before it reaches the actor, as (HTTP status, JSON-RPC
/// code, message, data), in the order the specification's checks and the conformance suite
/// expect: a header that disagrees with the body (-32020), then a version not served
/// (-32022), then a missing header (-32020), then a missing envelope member (-32602).
fn refusal(headers: &HeaderMap, m: &Message) -> Option<(StatusCode, i64, String, Option<Value>)> {
    let mismatch = |why: String| {
        Some((
            StatusCode::BAD_REQUEST,
            HEADER_MISMATCH,
            format!("Header mismatch: {why}"),
            None,
        ))
    };
    let claim = era::envelope_version(m.params.as_deref());
    let version = header_value(headers, VERSION_HEADER);
    if let (Some(h), Some(b)) = (&version, &claim) {
        if h != b {
            return mismatch(format!(
                "MCP-Protocol-Version header value '{h}' does not match body value '{b}'"
            ));
        }
    }
    let method = header_value(headers, METHOD_HEADER);
    if let Some(h) = &method {
        if h != m.method() {
            return mismatch(format!(
                "Mcp-Method header value '{h}' does not match body value '{}'",
                m.method()
            ));
        }
    }
    let Some(requested) = claim.or(version.clone()) else {
        return mismatch("the MCP-Protocol-Version header is missing".into());
    };
    if requested != era::MODERN_VERSION {
        return Some((
            StatusCode::BAD_REQUEST,
            era::UNSUPPORTED_VERSION,
            "Unsupported protocol version".into(),
            Some(serde_json::json!({"supported": [era::MODERN_VERSION], "requested": requested})),
        ));
    }
    if version.is_none() {
        return mismatch("the MCP-Protocol-Version header is missing".into());
    }
    if method.is_none() {
        return mismatch("the Mcp-Method header is missing".into());
    }
    if let Some(member) = named_by(m.method()) {
        let params: Option<Value> = m
            .params
            .as_deref()
            .and_then(|p| serde_json::from_str(p.get()).ok());
        let body = params
            .as_ref()
            .and_then(|p| p.get(member))
            .and_then(Value::as_str);
        match (header_value(headers, NAME_HEADER), body) {
            (None, _) => return mismatch("the Mcp-Name header is missing".into()),
            (Some(h), Some(b)) if h != b => {
                return mismatch(format!(
                    "Mcp-Name header value '{h}' does not match body value '{b}'"
                ))
            }
            _ => {}
        }
    }
    for key in [era::META_VERSION, era::META_CAPABILITIES] {
        if era::envelope_field(m.params.as_deref(), key).is_none() {
            return Some((
                StatusCode::BAD_REQUEST,
                code::INVALID_PARAMS,
                format!(
                    "Invalid params: the request's _meta has no `{key}` (required in 2026-07-28)"
                ),
                None,
            ));
        }
    }
    None
}

/// Answers one 2026-07-28 POST; the body's `Charge` on `client_memory` ends once the actor
/// has the request.
pub(super) async fn post(
    front: &Arc<Front>,
    settings: &HttpConfig,
    entry: &Entry,
    peer: Peer,
    headers: &HeaderMap,
    (m, charge): (Message, Charge),
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
    if let Some((status, code, why, data)) = refusal(headers, &m) {
        let line = message::error_response(&id, code, &why, data);
        return json_body(status, trim_newline(line));
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
    drop(charge);
    let kicked = outbox.kicked();
    if !sse {
        // JSON: the one answer (notifications have nowhere to go and are dropped).
        loop {
            let line = tokio::select! {
                l = outbox.recv() => l,
                _ = kicked.cancelled() => None,
            };
            let Some((to, line)) = line.filter(|(_, l)| !l.is_empty()) else {
                drop(guard);
                return unavailable(&entry.cfg);
            };
            if answers(&to, &key) {
                drop(guard);
                return json_body(StatusCode::OK, trim_newline(line.to_bytes()));
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
            let Some((to, line)) = line.filter(|(_, l)| !l.is_empty()) else {
                break;
            };
            let last = answers(&to, &key);
            if stx.send(trim_newline(line.to_bytes())).await.is_err() || last {
                break;
            }
        }
    });
    stream::sse(srx, guard)
}

/// Whether a line the actor addressed `to` is the response to the request whose id key is
/// `key` (the stream's last line); read from the address, never from the line.
fn answers(to: &Address, key: &str) -> bool {
    matches!(to, Address::Response(k) if k == key)
}
