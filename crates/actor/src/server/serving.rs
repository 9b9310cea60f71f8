//! What the supervisor answers a client itself, without the upstream: a request id already in
//! flight (K23), `initialize` from the handshake it keeps (issue 5 §3, issue 18 §1),
//! `logging/setLevel` (issue 3 §3), a 2026-07-28 client's unsupported version and its
//! `server/discover` (issue 13 §2, K27), and list requests answered from the last known lists
//! while the child is not ready (issue 5 §3; later pages by cursor, issue 31).
//!
//! A copy served while the child is not ready says so: idle (an on-demand server between
//! runs, not an outage) marks it `_meta["mcp-supervisor/cache"]`; down marks it
//! `_meta["mcp-supervisor/unavailable"]` with the outage status, and a note at the end of
//! `instructions` or of each cached tool's description (`mark_unavailable = true`).
//!
//! A section of the core as free functions over one narrow context ([`Serving`]): they read
//! the kept handshake and lists and write only through the outbox. What the caller must still
//! do is returned: whether there was anything to answer from, whether a log level changed.
//!
//! No clock read, no I/O.

use super::lists::ListCache;
use super::outbox::{Outbox, Stamp};
use super::telemetry::Telemetry;
use super::util::list_to_cache;
use crate::era::{self, Era, Handshake};
use crate::outage::OutageStatus;
use crate::session::{ClientId, To};
use serde_json::value::RawValue;
use serde_json::{json, Value};
use support::observe::Outcome;
use tracing::{debug, info};
use vocab::jsonrpc::message::{self, code, Message};

/// Where the child stands, as a copy served without it is marked.
#[derive(Debug, Clone, Copy)]
pub(super) enum Standing<'a> {
    /// Ready: what is served here needs no mark.
    Ready,
    /// Idle between runs of an on-demand server (not an outage: the next call starts it),
    /// with when the record was saved (RFC 3339), if it was.
    Idle { saved_at: Option<&'a str> },
    /// Not ready, with the status an outage answer would give now.
    Down(OutageStatus),
}

/// What a local answer touches.
pub(super) struct Serving<'a> {
    outbox: &'a mut Outbox,
    telemetry: &'a mut Telemetry,
    /// The moment, and the server's name the marks give.
    at: Stamp<'a>,
    /// The child's handshake as last seen (kept across restarts, or read from the record);
    /// `None` before the first.
    handshake: Option<&'a Handshake>,
    /// How a copy served now is marked.
    standing: Standing<'a>,
    /// The last known lists and their later pages.
    lists: &'a ListCache,
    /// `mark_unavailable`: cached tool descriptions end with the outage note.
    mark_tools: bool,
}

impl<'a> Serving<'a> {
    /// The context over the outbox and the telemetry at `at`, answering from `handshake` and
    /// `lists` as `standing` marks them.
    pub(super) fn new(
        outbox: &'a mut Outbox,
        telemetry: &'a mut Telemetry,
        at: Stamp<'a>,
        handshake: Option<&'a Handshake>,
        standing: Standing<'a>,
        lists: &'a ListCache,
        mark_tools: bool,
    ) -> Self {
        Serving {
            outbox,
            telemetry,
            at,
            handshake,
            standing,
            lists,
            mark_tools,
        }
    }
}

/// A request whose id equals one of the same client's unfinished requests (K23): JSON-RPC
/// ids must be unique among a sender's requests in flight, and two responses under one id
/// would cross-wire the client (go-sdk#1004). Answered -32600 at once; the first request
/// and its ledger entry are untouched.
pub(super) fn refuse_duplicate(
    cx: &mut Serving<'_>,
    client: ClientId,
    id: &RawValue,
    method: &str,
) {
    info!(target: "mcp_supervisor::requests", client = %client, method,
        outcome = Outcome::Invalid.as_str(), error_code = code::INVALID_REQUEST,
        "request finished: duplicate request id");
    cx.telemetry
        .metrics()
        .request(method, Outcome::Invalid, Some(code::INVALID_REQUEST), 0.0);
    let msg = format!(
        "duplicate request id {}: a request with this id is still in flight",
        id.get()
    );
    let line = message::error_response(id, code::INVALID_REQUEST, &msg, None);
    cx.outbox
        .deliver(cx.telemetry, client, To::Response(id), line);
}

/// `ping`: answered here, whatever the child's state.
pub(super) fn ping(cx: &mut Serving<'_>, client: ClientId, id: &RawValue) {
    let (out, tel, at) = (&mut *cx.outbox, &mut *cx.telemetry, &cx.at);
    out.respond_result(tel, at, client, id, "ping", json!({}), Outcome::Ok);
}

/// A client's `initialize` (`m`), answered from the kept handshake: the child's result for
/// the version the client asked (the handshake era answers with the child's own version),
/// marked cached while idle; the client's capabilities and name are recorded. Returns false,
/// answering nothing, when no handshake is kept yet (the caller waits for the child).
pub(super) fn initialize(cx: &mut Serving<'_>, client: ClientId, m: &Message) -> bool {
    let Some(hs) = cx.handshake else {
        return false;
    };
    let Some(id) = m.id.as_deref() else {
        return true;
    };
    let params = m.params_object().unwrap_or_default();
    let asked = params
        .get("protocolVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    let name = params
        .get("clientInfo")
        .and_then(|i| i.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let mut result = hs.initialize_result(asked);
    if let Standing::Idle { saved_at } = cx.standing {
        mark_cached(&mut result, cx.at.server(), saved_at);
    }
    if hs.era == Era::Handshake && asked != hs.protocol_version {
        info!(client = %client, client_name = %name, requested = asked, negotiated = %hs.protocol_version,
            "client asked for another protocol version; answering with the one the child speaks");
    }
    if let Some(c) = cx.outbox.clients_mut().get_mut(&client) {
        debug!(client = %client, uid = c.peer().uid, pid = c.peer().pid, client_name = %name, "client handshake answered from the cache");
        c.initialize(
            params.get("capabilities").cloned().unwrap_or(json!({})),
            params.get("clientInfo").cloned().unwrap_or(Value::Null),
            name,
        );
    }
    let line = message::result_response(id, &result);
    let (out, tel, at) = (&mut *cx.outbox, &mut *cx.telemetry, &cx.at);
    out.respond(tel, at, client, id, line, Outcome::Ok, None);
    true
}

/// A client's `logging/setLevel` (`m`): the level is recorded for the client (its
/// notifications are filtered by it) and answered; an unknown level gets -32602. Returns
/// whether a level was recorded (the caller brings the child to the most verbose one).
pub(super) fn set_level(cx: &mut Serving<'_>, client: ClientId, m: &Message) -> bool {
    let Some(id) = m.id.as_deref() else {
        return false;
    };
    let level = m.params_object().and_then(|p| {
        p.get("level")
            .and_then(Value::as_str)
            .and_then(era::log_rank)
    });
    let (out, tel, at) = (&mut *cx.outbox, &mut *cx.telemetry, &cx.at);
    let Some(level) = level else {
        let (code, msg) = (code::INVALID_PARAMS, "unknown logging level");
        out.respond_error(tel, at, client, id, code, msg, None, Outcome::Invalid);
        return false;
    };
    if let Some(c) = out.clients_mut().get_mut(&client) {
        c.set_log_level(level);
    }
    out.respond_result(tel, at, client, id, m.method(), json!({}), Outcome::Ok);
    true
}

/// What a 2026-07-28 client is answered here: a version this supervisor cannot serve
/// (`requested`, from the request's envelope), or `server/discover` while the child is a
/// handshake-era one (described here always) or a 2026 one that is not ready (its last
/// discovery result, marked: K27). Returns whether the request was answered.
pub(super) fn answer_modern(
    cx: &mut Serving<'_>,
    client: ClientId,
    id: &RawValue,
    m: &Message,
    requested: Option<&str>,
) -> bool {
    if let Some(v) = requested.filter(|v| *v != era::MODERN_VERSION) {
        let data = json!({"supported": [era::MODERN_VERSION], "requested": v});
        info!(client = %client, requested = v, "unsupported protocol version requested");
        let (out, tel, at) = (&mut *cx.outbox, &mut *cx.telemetry, &cx.at);
        let (code, msg) = (era::UNSUPPORTED_VERSION, "Unsupported protocol version");
        out.respond_error(tel, at, client, id, code, msg, Some(data), Outcome::Invalid);
        return true;
    }
    if m.method() != "server/discover" {
        return false;
    }
    let Some(hs) = cx.handshake else {
        return false;
    };
    let mut result = match (hs.era, cx.standing) {
        (Era::Handshake, _) => hs.discover_result(),
        (Era::Modern, Standing::Ready) => return false,
        (Era::Modern, _) => hs.result.clone(),
    };
    match cx.standing {
        Standing::Ready => {}
        Standing::Idle { saved_at } => mark_cached(&mut result, cx.at.server(), saved_at),
        Standing::Down(status) => mark_unavailable(&mut result, cx.at.server(), status),
    }
    let (out, tel, at) = (&mut *cx.outbox, &mut *cx.telemetry, &cx.at);
    out.respond_result(tel, at, client, id, "server/discover", result, Outcome::Ok);
    true
}

/// Answers a list request (`m`) from the last known result while the child is not ready:
/// the first page, or a later one read before with the same cursor (issue 31). Returns false,
/// answering nothing, when `m` is no list request or nothing is known for it.
pub(super) fn from_cache(cx: &mut Serving<'_>, client: ClientId, m: &Message) -> bool {
    let method = m.method();
    let Some(page) = list_to_cache(method, m.params.as_deref()) else {
        return false;
    };
    let cached = match &page.cursor {
        None => cx.lists.get(page.list),
        Some(c) => cx.lists.page(page.list, c),
    };
    let Some(cached) = cached else {
        return false;
    };
    let Some(id) = m.id.as_deref() else {
        return false;
    };
    let mut result = cached.clone();
    match cx.standing {
        Standing::Ready => {}
        // Idle is not an outage (issue 18 §1): the next call starts the child.
        Standing::Idle { saved_at } => mark_cached(&mut result, cx.at.server(), saved_at),
        Standing::Down(status) if page.list == "tools/list" && cx.mark_tools => {
            let note = unavailable_note(cx.at.server(), status);
            if let Some(tools) = result.get_mut("tools").and_then(Value::as_array_mut) {
                for t in tools {
                    let d = t
                        .get("description")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string();
                    t["description"] = Value::String(d + &note);
                }
            }
        }
        Standing::Down(_) => {}
    }
    let (out, tel, at) = (&mut *cx.outbox, &mut *cx.telemetry, &cx.at);
    out.respond_result(tel, at, client, id, method, result, Outcome::Ok);
    true
}

/// Marks a result answered from the record while `server` is idle:
/// `_meta["mcp-supervisor/cache"] = {"server", "status": "idle", "saved_at"}`.
fn mark_cached(result: &mut Value, server: &str, saved_at: Option<&str>) {
    let Some(o) = result.as_object_mut() else {
        return;
    };
    let meta = o.entry("_meta").or_insert_with(|| json!({}));
    if let Some(meta) = meta.as_object_mut() {
        meta.insert(
            "mcp-supervisor/cache".into(),
            json!({"server": server, "status": "idle", "saved_at": saved_at}),
        );
    }
}

/// Marks a description served while `server` is down (a cached `server/discover`):
/// `instructions` end with the note cached tool descriptions get, and
/// `_meta["mcp-supervisor/unavailable"]` gives the status (issue 13 §2).
fn mark_unavailable(result: &mut Value, server: &str, status: OutageStatus) {
    let note = unavailable_note(server, status);
    let Some(o) = result.as_object_mut() else {
        return;
    };
    let text = o
        .get("instructions")
        .and_then(Value::as_str)
        .unwrap_or("")
        .trim_start()
        .to_string();
    let joined = if text.is_empty() {
        note.trim_start().to_string()
    } else {
        text + &note
    };
    o.insert("instructions".into(), Value::String(joined));
    let meta = o.entry("_meta").or_insert_with(|| json!({}));
    if let Some(meta) = meta.as_object_mut() {
        meta.insert(
            "mcp-supervisor/unavailable".into(),
            json!({"server": server, "status": status}),
        );
    }
}

/// The note appended to what is served from cache while `server` is down.
fn unavailable_note(server: &str, status: OutageStatus) -> String {
    format!(
        " [mcp-supervisor: server `{server}` is currently unavailable ({status}); calls will fail until it recovers]"
    )
}

#[cfg(test)]
mod tests {
    use super::{mark_cached, mark_unavailable};
    use crate::outage::OutageStatus;
    use serde_json::json;

    #[test]
    fn a_copy_served_while_idle_says_when_it_was_saved() {
        let mut r = json!({"tools": []});
        mark_cached(&mut r, "files", Some("2026-12-07T00:00:00Z"));
        assert_eq!(
            r["_meta"]["mcp-supervisor/cache"],
            json!({"server": "files", "status": "idle", "saved_at": "2026-12-07T00:00:00Z"})
        );
    }

    #[test]
    fn a_description_served_while_down_says_so_in_its_instructions_and_meta() {
        let mut r = json!({"instructions": "  Use me.", "_meta": {"x": 1}});
        mark_unavailable(&mut r, "files", OutageStatus::Backoff);
        let text = r["instructions"].as_str().unwrap();
        assert!(
            text.starts_with(
                "Use me. [mcp-supervisor: server `files` is currently unavailable (backoff)"
            ),
            "{text}"
        );
        assert_eq!(r["_meta"]["x"], 1);
        assert_eq!(
            r["_meta"]["mcp-supervisor/unavailable"],
            json!({"server": "files", "status": "backoff"})
        );
        let mut bare = json!({});
        mark_unavailable(&mut bare, "files", OutageStatus::Failed);
        assert!(bare["instructions"]
            .as_str()
            .unwrap()
            .starts_with("[mcp-supervisor:"));
        // Not an object: left as it is.
        let mut odd = json!([1]);
        mark_unavailable(&mut odd, "files", OutageStatus::Failed);
        assert_eq!(odd, json!([1]));
    }
}
