//! What `attach` decides about each message, sans-IO (issue 32 §2): the framing bridge's state
//! across connections to the supervisor.
//!
//! Owns [`Bridge`]: the client's handshake (its `initialize` line and whether it sent
//! `notifications/initialized`), its log level, its resource subscriptions and open 2026
//! `subscriptions/listen` streams, the requests it sent that are not answered yet, and what it
//! sent while no connection was up. Every method takes one event (a line from the client, a
//! line from the supervisor, the connection lost, a connection made, time passing) and returns
//! [`Out`]: the lines to write each way and the notes for stderr. The shell (`attach/mod.rs`)
//! does the I/O.
//!
//! Rules:
//! - lines are forwarded as they came; the bridge reads only `id`, `method` and the few
//!   `params` it tracks, and never rewrites a client's or the supervisor's message;
//! - a request in flight when the connection is lost is answered once, by the bridge, with the
//!   outage record (`status` `disconnected`, `class` `unreachable`, `detail` `supervisor`;
//!   docs/book/src/reference/errors.md): it may or may not have run, and is never sent again;
//! - on a new connection the client's handshake is replayed under the bridge's own ids
//!   ([`OWN_ID_PREFIX`]), then `notifications/initialized`, the log level and each resource
//!   subscription, then each open listen stream with its own id, then what was held; the
//!   answers to the replayed requests, and the first acknowledgement of each replayed listen
//!   stream, are not shown to the client (it already has them);
//! - while no connection is up, requests and notifications are held, at most [`HOLD_MAX`]
//!   messages and [`HOLD_BYTES`] bytes, each for at most [`HOLD`]; a request that cannot be
//!   held, or is held too long, is answered with the outage record (`reason`
//!   `supervisor-unreachable`: it never ran);
//! - a client's answer to a request the supervisor sent on an earlier connection is dropped
//!   (the supervisor that asked is gone);
//! - every table is bounded ([`TRACK_MAX`] requests, [`SUBSCRIPTIONS_MAX`] subscriptions and
//!   listen streams); past a bound a message is still forwarded, only not tracked.

use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};
use support::logging::requests::RequestId;
use vocab::jsonrpc::framing::Frame;
use vocab::jsonrpc::message::{self, code, Kind};

/// How long a message sent while no connection is up waits for one.
pub const HOLD: Duration = Duration::from_secs(30);

/// Most messages held while no connection is up.
pub const HOLD_MAX: usize = 256;

/// Most bytes held while no connection is up (16 MiB).
pub const HOLD_BYTES: usize = 16 << 20;

/// Most requests tracked in flight (past it, a request is forwarded but not answered by the
/// bridge if the connection is lost).
pub const TRACK_MAX: usize = 65_536;

/// Most resource subscriptions and listen streams each kept for replay.
pub const SUBSCRIPTIONS_MAX: usize = 4096;

/// Prefix of the string ids of the requests the bridge sends itself (the replayed
/// handshake, log level and subscriptions).
pub const OWN_ID_PREFIX: &str = "mcp-supervisor-attach-";

/// What one event produces.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Out {
    /// Lines (without `\n`) for the supervisor, in order.
    pub to_server: Vec<Bytes>,
    /// Lines (without `\n`) for the client, in order.
    pub to_client: Vec<Bytes>,
    /// Lines for stderr (the client's log of this server).
    pub notes: Vec<String>,
}

/// Why the bridge answers a request itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Why {
    /// Sent, then the connection was lost before its answer: it may have run.
    Lost,
    /// Never sent: no connection came up in time, or too much was held.
    Unreachable,
}

impl Why {
    fn reason(self) -> &'static str {
        match self {
            Why::Lost => "supervisor-connection-lost",
            Why::Unreachable => "supervisor-unreachable",
        }
    }
}

/// Whether a connection to the supervisor is up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Link {
    Up,
    Down,
}

/// A message sent while no connection was up.
#[derive(Debug)]
struct Held {
    at: Instant,
    line: Bytes,
    /// The requests in it: (id, method).
    requests: Vec<(String, Cow<'static, str>)>,
}

/// What one of the bridge's own requests was for.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Own {
    Initialize,
    SetLevel,
    Subscribe(String),
}

/// The bridge's state; see the module documentation.
#[derive(Debug)]
pub struct Bridge {
    /// The server's name, for outage records.
    server: String,
    link: Link,
    /// The client's `initialize` params (raw JSON), once it sent one.
    handshake: Option<Box<RawValue>>,
    /// Whether the client sent `notifications/initialized`.
    initialized: bool,
    /// The params of the client's last `logging/setLevel`.
    level: Option<Box<RawValue>>,
    /// Resource subscriptions: URI → the `resources/subscribe` params.
    subscriptions: BTreeMap<String, Box<RawValue>>,
    /// Open `subscriptions/listen` streams: id (compact JSON) → the request line.
    listens: BTreeMap<String, Bytes>,
    /// Requests sent on the current connection and not answered: id (compact JSON) → method.
    inflight: HashMap<String, Cow<'static, str>>,
    /// Messages waiting for a connection, oldest first.
    held: VecDeque<Held>,
    held_bytes: usize,
    /// The bridge's own requests on the current connection: id → what for.
    own: HashMap<String, Own>,
    next_own: u64,
    /// Listen ids replayed on the current connection whose acknowledgement is not shown.
    reacks: HashSet<String>,
    /// Ids of the supervisor's requests to the client on the current connection.
    asked: HashSet<String>,
    /// Ids of the requests the supervisor sent on the previous connection and the client has
    /// not answered (an id the new connection asks again leaves it).
    stale: HashSet<String>,
    /// The client closed its input.
    client_done: bool,
    /// The supervisor ended the session on purpose, saying this (its hangup line).
    hangup: Option<String>,
    /// The supervisor refused the current connection a seat (`max_clients`, or the user's
    /// share of it), saying this (issue 47 §4): retried with backoff, not final.
    busy: Option<String>,
    /// The refusal shown to the client last, until a connection serves: the same refusal on
    /// the next attempts is not shown again.
    busy_shown: Option<String>,
    /// The supervisor answered a request on the current connection (it is serving, not only
    /// accepting and closing).
    answered: bool,
}

/// The members of a line from the supervisor the bridge reads.
#[derive(Deserialize)]
struct Peek<'a> {
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    method: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    params: Option<&'a RawValue>,
}

impl Bridge {
    /// A bridge for server `server` whose first connection is up.
    pub fn new(server: &str) -> Bridge {
        Bridge {
            server: server.to_string(),
            link: Link::Up,
            handshake: None,
            initialized: false,
            level: None,
            subscriptions: BTreeMap::new(),
            listens: BTreeMap::new(),
            inflight: HashMap::new(),
            held: VecDeque::new(),
            held_bytes: 0,
            own: HashMap::new(),
            next_own: 0,
            reacks: HashSet::new(),
            asked: HashSet::new(),
            stale: HashSet::new(),
            client_done: false,
            hangup: None,
            busy: None,
            busy_shown: None,
            answered: false,
        }
    }

    /// Whether a connection is up.
    pub fn is_up(&self) -> bool {
        self.link == Link::Up
    }

    /// Whether nothing is owed to the client: no request in flight or held (listen streams
    /// excepted: they last as long as the connection).
    pub fn idle(&self) -> bool {
        self.inflight.keys().all(|id| self.listens.contains_key(id)) && self.held.is_empty()
    }

    /// The client closed its input.
    pub fn client_done(&mut self) {
        self.client_done = true;
    }

    /// Whether the client closed its input.
    pub fn is_client_done(&self) -> bool {
        self.client_done
    }

    /// Whether the supervisor answered a request on the current connection: a connection
    /// that did serves, one that only accepted and closed (a failed server, a full
    /// `max_clients`) does not reset the backoff.
    pub fn was_served(&self) -> bool {
        self.answered
    }

    /// What the supervisor said when it ended the session on purpose (its hangup line, marked
    /// [`actor::session::HANGUP_KEY`]): no reconnecting after that.
    pub fn hangup(&self) -> Option<&str> {
        self.hangup.as_deref()
    }

    /// What the supervisor said when it refused the current connection a seat (issue 47 §4):
    /// the connection is retried with backoff.
    pub fn busy(&self) -> Option<&str> {
        self.busy.as_deref()
    }

    /// When the oldest held message expires, if any is held.
    pub fn next_expiry(&self) -> Option<Instant> {
        self.held.front().map(|h| h.at + HOLD)
    }

    /// A frame read from the client.
    pub fn from_client(&mut self, frame: Frame, now: Instant) -> Out {
        let mut out = Out::default();
        let line = match frame {
            // `attach` measures no depth (its decoder has no bound): the supervisor does.
            Frame::Line(line) | Frame::TooDeep(line) => line,
            Frame::Oversized { len, id, .. } => {
                // Not even the supervisor's largest limit (1 GiB) holds it: answered here, as
                // the supervisor answers a line over its limit.
                let id = id
                    .as_deref()
                    .and_then(message::raw_from_slice)
                    .unwrap_or_else(message::raw_null);
                out.to_client.push(unframed(message::error_response(
                    &id,
                    code::INVALID_REQUEST,
                    &format!("message of {len} bytes is too large"),
                    None,
                )));
                return out;
            }
        };
        let messages: Vec<message::Message> = message::parse_line(&line)
            .map(|v| v.into_iter().flatten().collect())
            .unwrap_or_default();
        let mut requests = Vec::new();
        let mut stale_answer = false;
        for m in &messages {
            match m.kind {
                Kind::Request => {
                    if let Some(id) = m.id.as_deref() {
                        let method = m.method.clone().unwrap_or(Cow::Borrowed(""));
                        requests.push((id_key(id), method));
                    }
                }
                Kind::Notification => {}
                Kind::Response => {
                    let id = m.id.as_deref().map(id_key).unwrap_or_default();
                    self.asked.remove(&id);
                    stale_answer = self.link == Link::Down || self.stale.remove(&id);
                }
            }
        }
        if stale_answer && requests.is_empty() {
            // An answer to a request of an earlier connection: the supervisor that asked is
            // gone. A batch with requests in it still goes.
            out.notes.push(
                "dropped a response to a request of an earlier connection to the supervisor".into(),
            );
            return out;
        }
        if self.link == Link::Up {
            // What to replay is what the supervisor was sent: a held line counts when it is
            // sent ([`Bridge::connected`]), one answered by the bridge never.
            self.note(&messages, &line);
        }
        match self.link {
            Link::Up => {
                for (id, method) in requests {
                    if self.inflight.len() < TRACK_MAX {
                        self.inflight.insert(id, method);
                    }
                }
                out.to_server.push(line);
            }
            Link::Down => {
                let full = self.held.len() >= HOLD_MAX
                    || self.held_bytes.saturating_add(line.len()) > HOLD_BYTES;
                if full {
                    for (id, method) in requests {
                        self.answer(&mut out, &id, &method, Why::Unreachable);
                    }
                } else {
                    self.held_bytes = self.held_bytes.saturating_add(line.len());
                    self.held.push_back(Held {
                        at: now,
                        line,
                        requests,
                    });
                }
            }
        }
        out
    }

    /// Records what the messages of `line`, sent to the supervisor, change in the state to
    /// replay.
    fn note(&mut self, messages: &[message::Message], line: &Bytes) {
        for m in messages {
            match (m.kind, m.id.as_deref()) {
                (Kind::Request, Some(id)) => {
                    self.note_request(id, m.method(), m.params.as_deref(), line)
                }
                (Kind::Notification, _) => self.note_notification(m),
                _ => {}
            }
        }
    }

    /// Records what a request of the client changes in the state to replay.
    fn note_request(
        &mut self,
        id: &RawValue,
        method: &str,
        params: Option<&RawValue>,
        line: &Bytes,
    ) {
        match method {
            "initialize" => self.handshake = params.map(ToOwned::to_owned),
            "logging/setLevel" => self.level = params.map(ToOwned::to_owned),
            "resources/subscribe" | "resources/unsubscribe" => {
                let Some(uri) = params.and_then(uri_of) else {
                    return;
                };
                if method == "resources/unsubscribe" {
                    self.subscriptions.remove(&uri);
                } else if let Some(p) = params {
                    if self.subscriptions.len() < SUBSCRIPTIONS_MAX
                        || self.subscriptions.contains_key(&uri)
                    {
                        self.subscriptions.insert(uri, p.to_owned());
                    }
                }
            }
            "subscriptions/listen" if self.listens.len() < SUBSCRIPTIONS_MAX => {
                self.listens.insert(id_key(id), line.clone());
            }
            _ => {}
        }
    }

    /// Records what a notification of the client changes.
    fn note_notification(&mut self, m: &message::Message) {
        match m.method() {
            "notifications/initialized" => self.initialized = true,
            "notifications/cancelled" => {
                #[derive(Deserialize)]
                struct Cancelled<'a> {
                    #[serde(borrow, rename = "requestId")]
                    request_id: &'a RawValue,
                }
                let Some(p) = m.params.as_deref() else { return };
                if let Ok(c) = serde_json::from_str::<Cancelled>(p.get()) {
                    // A cancelled request gets no answer (MCP): none is owed at a loss.
                    let id = id_key(c.request_id);
                    self.inflight.remove(&id);
                    self.listens.remove(&id);
                    self.held
                        .iter_mut()
                        .for_each(|h| h.requests.retain(|(r, _)| *r != id));
                }
            }
            _ => {}
        }
    }

    /// A line read from the supervisor: the lines to show the client (none or this one).
    pub fn from_server(&mut self, line: Bytes) -> Out {
        let mut out = Out::default();
        // The common case, read from the first bytes: a result (a large one is never parsed).
        if let Some(key) = result_id(&line) {
            self.answered = true;
            if self.own.remove(key).is_some() {
                return out;
            }
            self.inflight.remove(key);
            self.listens.remove(key);
            self.reacks.remove(key);
            out.to_client.push(line);
            return out;
        }
        let Ok(peek) = serde_json::from_slice::<Peek>(&line) else {
            // A batch's answers (a JSON array): each answered id is done. Anything else is
            // shown as it is.
            if let Ok(batch) = serde_json::from_slice::<Vec<Peek>>(&line) {
                for p in batch {
                    if let (Some(id), None) = (p.id, p.method.as_deref()) {
                        self.answered = true;
                        let key = id_key(id);
                        self.inflight.remove(&key);
                        self.listens.remove(&key);
                    }
                }
            }
            out.to_client.push(line);
            return out;
        };
        match (peek.id, peek.method.as_deref()) {
            (Some(id), None) => {
                self.answered = true;
                let key = id_key(id);
                if let Some(own) = self.own.remove(&key) {
                    if let Some(note) = own_failed(&own, &line) {
                        out.notes.push(note);
                    }
                    return out;
                }
                self.inflight.remove(&key);
                self.listens.remove(&key);
                self.reacks.remove(&key);
            }
            (Some(id), Some(_)) => {
                let key = id_key(id);
                self.stale.remove(&key);
                if self.asked.len() < TRACK_MAX {
                    self.asked.insert(key);
                }
            }
            (None, None) => {
                if let Some((said, reason)) = hangup_of(&line) {
                    match reason.as_str() {
                        // Closed for saying nothing (`first_message_timeout`): the client
                        // sent nothing yet, so there is nothing to tell it; reconnected.
                        actor::session::SILENT => return out,
                        actor::session::BUSY => {
                            let again = self.busy_shown.as_deref() == Some(said.as_str());
                            self.busy = Some(said.clone());
                            self.busy_shown = Some(said);
                            if again {
                                return out;
                            }
                        }
                        _ => self.hangup = Some(said),
                    }
                }
            }
            (None, Some("notifications/subscriptions/acknowledged")) => {
                if let Some(sub) = peek.params.and_then(subscription_id) {
                    if self.reacks.remove(&sub) {
                        return out;
                    }
                }
            }
            _ => {}
        }
        out.to_client.push(line);
        out
    }

    /// The connection was lost: answers every request in flight with the outage record.
    pub fn lost(&mut self) -> Out {
        let mut out = Out::default();
        self.link = Link::Down;
        let inflight = std::mem::take(&mut self.inflight);
        let mut ids: Vec<_> = inflight.into_iter().collect();
        ids.sort();
        for (id, method) in ids {
            if self.listens.contains_key(&id) {
                continue;
            }
            if method == "initialize" {
                // Failed as far as the client knows: it will send another.
                self.handshake = None;
                self.initialized = false;
            }
            self.answer(&mut out, &id, &method, Why::Lost);
        }
        if self.answered {
            self.busy_shown = None;
        }
        self.busy = None;
        self.answered = false;
        self.own.clear();
        self.reacks.clear();
        self.stale = std::mem::take(&mut self.asked);
        out
    }

    /// A new connection is up: the replay, then what was held.
    pub fn connected(&mut self) -> Out {
        let mut out = Out::default();
        self.link = Link::Up;
        self.answered = false;
        if let Some(params) = self.handshake.clone() {
            let id = self.own_id(Own::Initialize);
            out.to_server.push(request(&id, "initialize", &params));
            if self.initialized {
                out.to_server.push(Bytes::from_static(
                    br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
                ));
            }
        }
        if let Some(params) = self.level.clone() {
            let id = self.own_id(Own::SetLevel);
            out.to_server
                .push(request(&id, "logging/setLevel", &params));
        }
        let subscriptions: Vec<_> = self
            .subscriptions
            .iter()
            .map(|(uri, p)| (uri.clone(), p.clone()))
            .collect();
        for (uri, params) in subscriptions {
            let id = self.own_id(Own::Subscribe(uri));
            out.to_server
                .push(request(&id, "resources/subscribe", &params));
        }
        for (id, line) in &self.listens {
            self.reacks.insert(id.clone());
            if self.inflight.len() < TRACK_MAX {
                self.inflight
                    .insert(id.clone(), Cow::Borrowed("subscriptions/listen"));
            }
            out.to_server.push(line.clone());
        }
        let replayed = out.to_server.len();
        for h in std::mem::take(&mut self.held) {
            let messages: Vec<message::Message> = message::parse_line(&h.line)
                .map(|v| v.into_iter().flatten().collect())
                .unwrap_or_default();
            self.note(&messages, &h.line);
            for (id, method) in h.requests {
                if self.inflight.len() < TRACK_MAX {
                    self.inflight.insert(id, method);
                }
            }
            out.to_server.push(h.line);
        }
        self.held_bytes = 0;
        if replayed > 0 {
            out.notes.push(format!(
                "replayed {replayed} message(s): {}",
                self.replay_summary()
            ));
        }
        out
    }

    /// What a replay holds, for the note.
    fn replay_summary(&self) -> String {
        let mut parts = Vec::new();
        if self.handshake.is_some() {
            parts.push("the handshake".to_string());
        }
        if self.level.is_some() {
            parts.push("the log level".to_string());
        }
        if !self.subscriptions.is_empty() {
            parts.push(format!(
                "{} resource subscription(s)",
                self.subscriptions.len()
            ));
        }
        if !self.listens.is_empty() {
            parts.push(format!("{} listen stream(s)", self.listens.len()));
        }
        parts.join(", ")
    }

    /// Time passed: held messages older than [`HOLD`] are given up (requests answered).
    pub fn expire(&mut self, now: Instant) -> Out {
        let mut out = Out::default();
        while let Some(h) = self.held.front() {
            if now.saturating_duration_since(h.at) < HOLD {
                break;
            }
            if let Some(h) = self.held.pop_front() {
                self.held_bytes = self.held_bytes.saturating_sub(h.line.len());
                for (id, method) in h.requests {
                    self.answer(&mut out, &id, &method, Why::Unreachable);
                }
            }
        }
        out
    }

    /// Gives up on every held message (no connection will come).
    pub fn give_up(&mut self) -> Out {
        let mut out = Out::default();
        self.held_bytes = 0;
        for h in std::mem::take(&mut self.held) {
            for (id, method) in h.requests {
                self.answer(&mut out, &id, &method, Why::Unreachable);
            }
        }
        out
    }

    /// A fresh id of the bridge's own, recorded as `what`.
    fn own_id(&mut self, what: Own) -> String {
        self.next_own = self.next_own.wrapping_add(1);
        let id = format!("\"{OWN_ID_PREFIX}{}\"", self.next_own);
        self.own.insert(id.clone(), what);
        id
    }

    /// Answers request `id` (compact JSON) of `method` with the outage record.
    fn answer(&self, out: &mut Out, id: &str, method: &str, why: Why) {
        let Some(raw) = message::raw_from_slice(id.as_bytes()) else {
            return;
        };
        let request_id = RequestId::random().to_string();
        let record = json!({
            "server": self.server,
            "status": "disconnected",
            "reason": why.reason(),
            "class": "unreachable",
            "detail": "supervisor",
            "request_id": request_id,
        });
        let text = format!(
            "server={} status=disconnected reason={} request_id={request_id}",
            self.server,
            why.reason()
        );
        out.notes.push(format!("request failed: {text}"));
        let line = if method == "tools/call" {
            message::result_response(
                &raw,
                &json!({
                    "content": [{"type": "text", "text": text}],
                    "isError": true,
                    "_meta": {"mcp-supervisor/outage": record},
                }),
            )
        } else {
            message::error_response(
                &raw,
                code::SERVER_UNAVAILABLE,
                &format!("server `{}` is unavailable: {text}", self.server),
                Some(record),
            )
        };
        out.to_client.push(unframed(line));
    }
}

/// `line` without the `\n` [`message::Out::encode`] ends it with (the shell adds one).
fn unframed(mut line: Bytes) -> Bytes {
    if line.last() == Some(&b'\n') {
        line.truncate(line.len() - 1);
    }
    line
}

/// The id of a successful response written as the supervisor writes one
/// (`{"jsonrpc":"2.0","id":ID,"result":…`, compact), read from the line's first bytes without
/// looking at the result: its compact JSON text, as [`id_key`] gives it. `None` for any other
/// line (it is then parsed whole). An id is a number or a string of at most
/// [`vocab::jsonrpc::toplevel::ID_MAX`] bytes.
fn result_id(line: &[u8]) -> Option<&str> {
    let rest = line.strip_prefix(br#"{"jsonrpc":"2.0","id":"#)?;
    let max = vocab::jsonrpc::toplevel::ID_MAX;
    let end = if rest.first() == Some(&b'"') {
        let mut escaped = false;
        let mut end = None;
        for (i, &b) in rest.iter().enumerate().skip(1).take(max) {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => {
                    end = Some(i + 1);
                    break;
                }
                _ => {}
            }
        }
        end?
    } else {
        rest.iter()
            .take(max)
            .position(|b| !matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'))?
    };
    let (id, after) = rest.split_at_checked(end)?;
    if id.is_empty() || !after.starts_with(br#","result":"#) {
        return None;
    }
    std::str::from_utf8(id).ok()
}

/// An id as a key: its compact JSON text.
fn id_key(id: &RawValue) -> String {
    message::compact(id).get().to_string()
}

/// The message and reason of a hangup line (an error with id `null` whose `data` has
/// [`actor::session::HANGUP_KEY`], the reason its value).
fn hangup_of(line: &[u8]) -> Option<(String, String)> {
    let v: Value = serde_json::from_slice(line).ok()?;
    let err = v.get("error")?;
    let reason = err.get("data")?.get(actor::session::HANGUP_KEY)?;
    Some((
        err.get("message")?.as_str().unwrap_or_default().to_string(),
        reason.as_str().unwrap_or_default().to_string(),
    ))
}

/// `params.uri` of a subscribe or unsubscribe.
fn uri_of(params: &RawValue) -> Option<String> {
    #[derive(Deserialize)]
    struct P {
        uri: String,
    }
    serde_json::from_str::<P>(params.get()).ok().map(|p| p.uri)
}

/// `params._meta["io.modelcontextprotocol/subscriptionId"]` of a listen notification, as a
/// key.
fn subscription_id(params: &RawValue) -> Option<String> {
    #[derive(Deserialize)]
    struct P<'a> {
        #[serde(borrow, rename = "_meta")]
        meta: Option<HashMap<Cow<'a, str>, &'a RawValue>>,
    }
    let p: P = serde_json::from_str(params.get()).ok()?;
    p.meta?
        .get("io.modelcontextprotocol/subscriptionId")
        .map(|id| id_key(id))
}

/// A request line with `id` (JSON text) and raw `params`.
fn request(id: &str, method: &str, params: &RawValue) -> Bytes {
    Bytes::from(format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{}}}"#,
        params.get()
    ))
}

/// A note when the answer to one of the bridge's own requests is an error.
fn own_failed(own: &Own, line: &[u8]) -> Option<String> {
    let v: Value = serde_json::from_slice(line).ok()?;
    let err = v.get("error")?;
    let what = match own {
        Own::Initialize => "the replayed handshake".to_string(),
        Own::SetLevel => "the replayed log level".to_string(),
        Own::Subscribe(uri) => format!("the replayed subscription to {uri:?}"),
    };
    Some(format!("{what} was refused: {err}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(s: &str) -> Frame {
        Frame::Line(Bytes::copy_from_slice(s.as_bytes()))
    }

    fn text(b: &Bytes) -> Value {
        assert!(!b.contains(&b'\n'), "a line holds a newline: {b:?}");
        serde_json::from_slice(b).unwrap()
    }

    fn now() -> Instant {
        Instant::now()
    }

    const INIT: &str = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}"#;

    fn handshaken() -> Bridge {
        let mut b = Bridge::new("cua");
        let t = now();
        assert_eq!(b.from_client(line(INIT), t).to_server.len(), 1);
        b.from_server(Bytes::from_static(
            br#"{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-06-18","capabilities":{},"serverInfo":{"name":"s","version":"1"}}}"#,
        ));
        b.from_client(
            line(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
            t,
        );
        b
    }

    #[test]
    fn a_request_in_flight_at_a_loss_gets_one_outage_answer_and_is_never_sent_again() {
        let mut b = handshaken();
        let call = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{}}}"#;
        let list = r#"{"jsonrpc":"2.0","id":"x","method":"tools/list"}"#;
        b.from_client(line(call), now());
        b.from_client(line(list), now());
        let out = b.lost();
        assert_eq!(out.to_client.len(), 2, "{out:?}");
        let answers: Vec<Value> = out.to_client.iter().map(text).collect();
        let call_answer = answers.iter().find(|a| a["id"] == 7).unwrap();
        assert_eq!(call_answer["result"]["isError"], true);
        let record = &call_answer["result"]["_meta"]["mcp-supervisor/outage"];
        assert_eq!(record["status"], "disconnected");
        assert_eq!(record["reason"], "supervisor-connection-lost");
        assert_eq!(record["class"], "unreachable");
        assert_eq!(record["detail"], "supervisor");
        assert_eq!(record["server"], "cua");
        let list_answer = answers.iter().find(|a| a["id"] == "x").unwrap();
        assert_eq!(list_answer["error"]["code"], code::SERVER_UNAVAILABLE);
        // The replay holds the handshake, never the lost requests.
        let replay = b.connected();
        let sent: Vec<Value> = replay.to_server.iter().map(text).collect();
        assert_eq!(sent.len(), 2, "{sent:?}");
        assert_eq!(sent[0]["method"], "initialize");
        assert_eq!(sent[0]["params"]["clientInfo"]["name"], "c");
        assert!(sent[0]["id"].as_str().unwrap().starts_with(OWN_ID_PREFIX));
        assert_eq!(sent[1]["method"], "notifications/initialized");
        // A late answer to them (there is none on a new connection) would pass; a second
        // loss owes nothing.
        assert!(b.lost().to_client.is_empty());
    }

    #[test]
    fn answers_to_the_bridges_own_requests_are_not_shown_and_a_refusal_is_noted() {
        let mut b = handshaken();
        b.from_client(
            line(r#"{"jsonrpc":"2.0","id":1,"method":"logging/setLevel","params":{"level":"error"}}"#),
            now(),
        );
        b.from_client(
            line(r#"{"jsonrpc":"2.0","id":2,"method":"resources/subscribe","params":{"uri":"file:///a"}}"#),
            now(),
        );
        b.from_server(Bytes::from_static(
            br#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
        ));
        b.from_server(Bytes::from_static(
            br#"{"jsonrpc":"2.0","id":2,"result":{}}"#,
        ));
        b.lost();
        let replay = b.connected();
        let sent: Vec<Value> = replay.to_server.iter().map(text).collect();
        let methods: Vec<&str> = sent.iter().map(|m| m["method"].as_str().unwrap()).collect();
        assert_eq!(
            methods,
            [
                "initialize",
                "notifications/initialized",
                "logging/setLevel",
                "resources/subscribe"
            ]
        );
        assert_eq!(sent[2]["params"]["level"], "error");
        assert_eq!(sent[3]["params"]["uri"], "file:///a");
        for m in &sent {
            if let Some(id) = m.get("id") {
                let answer = format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{}}}}"#);
                assert!(b.from_server(Bytes::from(answer)).to_client.is_empty());
            }
        }
        // Unsubscribed: no longer replayed; an error answer is a note, not a message.
        b.from_client(
            line(r#"{"jsonrpc":"2.0","id":3,"method":"resources/unsubscribe","params":{"uri":"file:///a"}}"#),
            now(),
        );
        b.lost();
        let replay = b.connected();
        assert_eq!(replay.to_server.len(), 3);
        let init_id = text(&replay.to_server[0])["id"].clone();
        let refusal = format!(
            r#"{{"jsonrpc":"2.0","id":{init_id},"error":{{"code":-32000,"message":"down"}}}}"#
        );
        let out = b.from_server(Bytes::from(refusal));
        assert!(out.to_client.is_empty());
        assert_eq!(out.notes.len(), 1, "{out:?}");
        assert!(out.notes[0].contains("handshake"));
    }

    #[test]
    fn messages_sent_while_down_are_held_then_sent_after_the_replay_or_answered_when_they_wait_too_long(
    ) {
        let mut b = handshaken();
        b.lost();
        let t0 = now();
        let out = b.from_client(
            line(r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"echo"}}"#),
            t0,
        );
        assert_eq!(out, Out::default());
        assert!(!b.idle());
        let replay = b.connected();
        let last = text(replay.to_server.last().unwrap());
        assert_eq!(last["id"], 5);
        // Now in flight: a loss answers it.
        assert_eq!(b.lost().to_client.len(), 1);
        b.from_client(line(r#"{"jsonrpc":"2.0","id":6,"method":"ping"}"#), t0);
        assert!(b.expire(t0 + HOLD / 2).to_client.is_empty());
        assert_eq!(b.next_expiry(), Some(t0 + HOLD));
        let out = b.expire(t0 + HOLD);
        assert_eq!(out.to_client.len(), 1);
        let a = text(&out.to_client[0]);
        assert_eq!(a["id"], 6);
        assert_eq!(a["error"]["data"]["reason"], "supervisor-unreachable");
        assert!(b.idle());
        assert_eq!(b.connected().to_server.len(), 2, "only the handshake");
    }

    #[test]
    fn holding_is_bounded_and_a_request_past_the_bound_is_answered_at_once() {
        let mut b = Bridge::new("s");
        b.lost();
        let t = now();
        for i in 0..HOLD_MAX {
            let out = b.from_client(
                line(&format!(r#"{{"jsonrpc":"2.0","id":{i},"method":"ping"}}"#)),
                t,
            );
            assert!(out.to_client.is_empty());
        }
        let out = b.from_client(line(r#"{"jsonrpc":"2.0","id":"over","method":"ping"}"#), t);
        assert_eq!(out.to_client.len(), 1);
        assert_eq!(text(&out.to_client[0])["id"], "over");
        let out = b.give_up();
        assert_eq!(out.to_client.len(), HOLD_MAX);
    }

    #[test]
    fn a_listen_stream_is_reopened_with_its_own_id_and_its_second_acknowledgement_is_not_shown() {
        let mut b = Bridge::new("s");
        let listen = r#"{"jsonrpc":"2.0","id":"L1","method":"subscriptions/listen","params":{"notifications":{"toolsListChanged":true}}}"#;
        b.from_client(line(listen), now());
        let ack = Bytes::from_static(
            br#"{"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":"L1"}}}"#,
        );
        assert_eq!(b.from_server(ack.clone()).to_client.len(), 1);
        assert!(b.idle(), "an open listen stream owes no answer");
        assert!(
            b.lost().to_client.is_empty(),
            "a listen stream is not answered at a loss"
        );
        let replay = b.connected();
        assert_eq!(
            replay.to_server,
            vec![Bytes::from_static(listen.as_bytes())]
        );
        assert!(b.from_server(ack.clone()).to_client.is_empty());
        assert_eq!(
            b.from_server(ack).to_client.len(),
            1,
            "only the first is hidden"
        );
        // Cancelled by the client: not reopened.
        b.from_client(
            line(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"L1"}}"#),
            now(),
        );
        b.lost();
        assert!(b.connected().to_server.is_empty());
    }

    #[test]
    fn a_response_to_a_request_of_an_earlier_connection_is_dropped() {
        let mut b = handshaken();
        let ask = Bytes::from_static(
            br#"{"jsonrpc":"2.0","id":3,"method":"sampling/createMessage","params":{}}"#,
        );
        assert_eq!(b.from_server(ask.clone()).to_client.len(), 1);
        let answer = r#"{"jsonrpc":"2.0","id":3,"result":{}}"#;
        assert_eq!(b.from_client(line(answer), now()).to_server.len(), 1);
        b.from_server(ask);
        b.lost();
        b.connected();
        let out = b.from_client(line(answer), now());
        assert!(out.to_server.is_empty());
        assert_eq!(out.notes.len(), 1);
    }

    #[test]
    fn garbage_passes_through_when_up_and_an_oversized_request_is_answered() {
        let mut b = Bridge::new("s");
        let out = b.from_client(line("not json"), now());
        assert_eq!(out.to_server.len(), 1);
        let out = b.from_server(Bytes::from_static(b"[1,2]"));
        assert_eq!(out.to_client.len(), 1);
        let out = b.from_client(
            Frame::Oversized {
                len: 5,
                id: Some(Bytes::from_static(b"9")),
                has_method: true,
            },
            now(),
        );
        assert_eq!(
            text(&out.to_client[0])["error"]["code"],
            code::INVALID_REQUEST
        );
        assert_eq!(text(&out.to_client[0])["id"], 9);
    }

    #[test]
    fn a_hangup_line_is_shown_and_remembered() {
        let mut b = handshaken();
        let line = actor::session::hangup_line("access revoked", "revoked");
        assert_eq!(b.from_server(line.clone()).to_client, vec![line]);
        assert_eq!(b.hangup(), Some("access revoked"));
        let mut b = handshaken();
        b.from_server(Bytes::from_static(
            br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}"#,
        ));
        assert_eq!(b.hangup(), None, "a parse error is not a hangup");
    }

    /// Issue 47 §4: a seat refusal is shown once and retried, not a hang-up; a close for
    /// silence is not shown at all.
    #[test]
    fn a_seat_refusal_is_shown_once_and_retried_and_silence_is_not_shown() {
        let mut b = handshaken();
        // The supervisor restarted; the new connection is refused a seat.
        b.lost();
        b.connected();
        let busy = actor::session::hangup_line("no free seat", actor::session::BUSY);
        assert_eq!(b.from_server(busy.clone()).to_client, vec![busy.clone()]);
        assert_eq!(b.busy(), Some("no free seat"));
        assert_eq!(b.hangup(), None, "a refused seat is retried");
        b.lost();
        b.connected();
        assert!(
            b.from_server(busy.clone()).to_client.is_empty(),
            "said once"
        );
        let silent = actor::session::hangup_line("quiet", actor::session::SILENT);
        assert!(b.from_server(silent).to_client.is_empty());
        assert_eq!(b.hangup(), None);
    }

    #[test]
    fn a_batch_answered_with_an_array_owes_nothing_at_a_loss() {
        let mut b = handshaken();
        b.from_client(
            line(r#"[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"ping"}]"#),
            now(),
        );
        let answers = Bytes::from_static(
            br#"[{"jsonrpc":"2.0","id":1,"result":{}},{"jsonrpc":"2.0","id":2,"result":{}}]"#,
        );
        assert_eq!(b.from_server(answers).to_client.len(), 1);
        assert!(b.lost().to_client.is_empty(), "answered twice");
    }

    #[test]
    fn what_was_held_is_sent_once_and_replayed_only_once_it_was_sent() {
        let mut b = Bridge::new("s");
        b.lost();
        let listen = r#"{"jsonrpc":"2.0","id":"L","method":"subscriptions/listen","params":{}}"#;
        b.from_client(line(listen), now());
        let sub =
            r#"{"jsonrpc":"2.0","id":3,"method":"resources/subscribe","params":{"uri":"a:b"}}"#;
        b.from_client(line(sub), now());
        let sent = b.connected().to_server;
        assert_eq!(sent.len(), 2, "{sent:?}");
        // Now they were sent: the next connection replays them.
        b.from_server(Bytes::from_static(
            br#"{"jsonrpc":"2.0","id":3,"result":{}}"#,
        ));
        b.lost();
        let again: Vec<Value> = b.connected().to_server.iter().map(text).collect();
        let methods: Vec<&str> = again
            .iter()
            .map(|m| m["method"].as_str().unwrap_or(""))
            .collect();
        assert_eq!(
            methods,
            ["resources/subscribe", "subscriptions/listen"],
            "{again:?}"
        );
        // Held, then answered by the bridge (too long): never replayed.
        let mut b = Bridge::new("s");
        b.lost();
        let t = now();
        b.from_client(line(sub), t);
        b.expire(t + HOLD);
        assert!(b.connected().to_server.is_empty());
    }

    #[test]
    fn an_initialize_failed_by_a_loss_is_not_replayed() {
        let mut b = Bridge::new("s");
        b.from_client(line(INIT), now());
        assert_eq!(b.lost().to_client.len(), 1);
        assert!(b.connected().to_server.is_empty());
        assert!(!b.was_served());
        b.from_client(line(INIT), now());
        b.from_server(Bytes::from_static(
            br#"{"jsonrpc":"2.0","id":0,"result":{}}"#,
        ));
        assert!(b.was_served());
    }

    #[test]
    fn a_result_is_recognised_from_its_first_bytes_as_the_parser_would() {
        let cases: &[(&[u8], Option<&str>)] = &[
            (br#"{"jsonrpc":"2.0","id":7,"result":{}}"#, Some("7")),
            (
                br#"{"jsonrpc":"2.0","id":-1.5e3,"result":[1]}"#,
                Some("-1.5e3"),
            ),
            (
                br#"{"jsonrpc":"2.0","id":"a\"b,\\","result":{}}"#,
                Some(r#""a\"b,\\""#),
            ),
            (br#"{"jsonrpc":"2.0","id":"x","error":{}}"#, None),
            (br#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#, None),
            (br#"{"jsonrpc":"2.0","method":"n","params":{}}"#, None),
            (br#"{"jsonrpc":"2.0","id":"unterminated"#, None),
            (br#"{"jsonrpc":"2.0","id":,"result":{}}"#, None),
            (br#"{"id":1,"jsonrpc":"2.0","result":{}}"#, None),
        ];
        for (line, want) in cases {
            assert_eq!(result_id(line), *want, "{}", String::from_utf8_lossy(line));
            if let Some(id) = want {
                // The same key the parsed path gives.
                let v: Value = serde_json::from_slice(line).unwrap_or_default();
                let raw =
                    serde_json::value::to_raw_value(&v["id"]).unwrap_or_else(|_| unreachable!());
                let parsed = id_key(&raw);
                let n: Value = serde_json::from_str(id).unwrap_or_default();
                assert_eq!(
                    serde_json::from_str::<Value>(&parsed).unwrap_or_default(),
                    n
                );
            }
        }
        let long = format!(
            r#"{{"jsonrpc":"2.0","id":"{}","result":{{}}}}"#,
            "x".repeat(300)
        );
        assert_eq!(result_id(long.as_bytes()), None);
        // A result of one of the bridge's own requests is hidden by the fast path too.
        let mut b = handshaken();
        b.lost();
        let replay = b.connected();
        let id = text(&replay.to_server[0])["id"].clone();
        let answer = format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{}}}}"#);
        assert!(b.from_server(Bytes::from(answer)).to_client.is_empty());
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        #[derive(Debug, Clone)]
        enum Ev {
            Request(bool),
            /// Two requests in one batch (a JSON array).
            Batch,
            Answer(u8),
            /// Two answers in one array.
            AnswerPair(u8, u8),
            Lost,
            Connected,
            Expire,
        }

        fn ev() -> impl Strategy<Value = Ev> {
            prop_oneof![
                4 => any::<bool>().prop_map(Ev::Request),
                1 => Just(Ev::Batch),
                3 => (0u8..16).prop_map(Ev::Answer),
                1 => (0u8..16, 0u8..16).prop_map(|(i, j)| Ev::AnswerPair(i, j)),
                1 => Just(Ev::Lost),
                1 => Just(Ev::Connected),
                1 => Just(Ev::Expire),
            ]
        }

        proptest! {
            /// Whatever the order of losses, reconnections and answers, every request the
            /// client sent is answered at most once, by the supervisor or by the bridge, and
            /// is sent to the supervisor at most once.
            #[test]
            fn every_request_is_answered_at_most_once_and_sent_at_most_once(evs in proptest::collection::vec(ev(), 0..80)) {
                let mut b = Bridge::new("s");
                let mut t = Instant::now();
                let mut next = 0u32;
                // ids sent to the supervisor on the current connection, not yet answered
                let mut on_wire: Vec<u32> = Vec::new();
                let mut answered: HashMap<u32, u32> = HashMap::new();
                let mut sent: HashMap<u32, u32> = HashMap::new();
                let count = |out: &Out, on_wire: &mut Vec<u32>, answered: &mut HashMap<u32, u32>, sent: &mut HashMap<u32, u32>| {
                    // A line is one message or a batch of them.
                    let ids = |l: &Bytes| -> Vec<u32> {
                        let v: Value = serde_json::from_slice(l).unwrap();
                        let all = match v {
                            Value::Array(items) => items,
                            one => vec![one],
                        };
                        all.iter().filter_map(|m| m["id"].as_u64()).map(|id| id as u32).collect()
                    };
                    for l in &out.to_client {
                        for id in ids(l) {
                            *answered.entry(id).or_default() += 1;
                        }
                    }
                    for l in &out.to_server {
                        for id in ids(l) {
                            *sent.entry(id).or_default() += 1;
                            on_wire.push(id);
                        }
                    }
                };
                for e in evs {
                    let out = match e {
                        Ev::Request(call) => {
                            next += 1;
                            let m = if call { "tools/call" } else { "ping" };
                            b.from_client(line(&format!(r#"{{"jsonrpc":"2.0","id":{next},"method":"{m}"}}"#)), t)
                        }
                        Ev::Batch => {
                            next += 2;
                            let (a, c) = (next - 1, next);
                            b.from_client(line(&format!(r#"[{{"jsonrpc":"2.0","id":{a},"method":"ping"}},{{"jsonrpc":"2.0","id":{c},"method":"tools/call"}}]"#)), t)
                        }
                        Ev::AnswerPair(i, j) => {
                            if on_wire.len() < 2 || !b.is_up() { continue; }
                            let a = on_wire.remove(i as usize % on_wire.len());
                            let c = on_wire.remove(j as usize % on_wire.len());
                            b.from_server(Bytes::from(format!(r#"[{{"jsonrpc":"2.0","id":{a},"result":{{}}}},{{"jsonrpc":"2.0","id":{c},"result":{{}}}}]"#)))
                        }
                        Ev::Answer(i) => {
                            if on_wire.is_empty() || !b.is_up() { continue; }
                            let id = on_wire.remove(i as usize % on_wire.len());
                            b.from_server(Bytes::from(format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{}}}}"#)))
                        }
                        Ev::Lost => {
                            if !b.is_up() { continue; }
                            on_wire.clear();
                            b.lost()
                        }
                        Ev::Connected => {
                            if b.is_up() { continue; }
                            b.connected()
                        }
                        Ev::Expire => {
                            t += HOLD;
                            b.expire(t)
                        }
                    };
                    count(&out, &mut on_wire, &mut answered, &mut sent);
                }
                for (id, n) in &answered {
                    prop_assert!(*n <= 1, "request {} answered {} times", id, n);
                }
                for (id, n) in &sent {
                    prop_assert!(*n <= 1, "request {} sent {} times", id, n);
                }
                // Whatever is neither answered nor on the wire is held (owed later) or
                // nothing is owed.
                if b.idle() {
                    for id in 1..=next {
                        let on = on_wire.contains(&id);
                        prop_assert!(answered.contains_key(&id) || on, "request {} is lost", id);
                    }
                }
            }
        }
    }
}
