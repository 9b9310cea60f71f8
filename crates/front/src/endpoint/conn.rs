//! One client of an endpoint (issue 31): the decisions that route its messages to the right
//! source and the sources' messages back to it. No I/O and no clock reads: each input returns
//! [`Effect`]s as data, which the shell (`mod.rs`) executes.
//!
//! Owns: the client's era and handshake, the ids minted toward each source (every request
//! the client sends a source gets a fresh number there, so its answer is found by that
//! number alone), the requests the sources ask of the client (renumbered, since two sources
//! may both use `1`), the fan-outs (`initialize`, `server/discover`, the lists,
//! `logging/setLevel`) and the catalog.
//!
//! The client is one client of each source's actor, so the actor's own rules apply unchanged
//! per source: its id rewriting, its cache and outage answers (a tool call to a source that
//! is down gets the actor's `isError` result naming the source), progress tokens (passed
//! through as the client wrote them: only one source ever sees a given request), log levels,
//! subscriptions and roots.

pub use super::catalog::SeedKey;
use super::catalog::{Catalog, ListKind};
use super::listen::{Filter, Listens};
use super::policy::View;
use actor::ids::id_key;
use actor::session::Address;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};
use std::borrow::Cow;
use std::collections::HashMap;
use std::time::{Duration, Instant};
use support::config::HiddenCalls;
use support::logging::requests::RequestId;
use support::observe::Outcome;
use tracing::{debug, info, warn};
use vocab::jsonrpc::framing::Line;
use vocab::jsonrpc::message::{self, code, Kind, Message, Out, RawObject};
use vocab::protocol::{Era, MODERN_VERSION};

/// How long an `initialize`, `server/discover` or list fan-out waits for its slowest source
/// before answering with what it has (a source that is starting must not hold the whole
/// endpoint; its late answer still fills the catalog).
pub const FAN_WAIT: Duration = Duration::from_secs(5);
/// How often a source whose handshake failed is asked again (answered by its actor, from its
/// cache once it has been up): when it succeeds, the client is told the lists changed.
pub const RETRY_INIT: Duration = Duration::from_secs(5);
/// Most pages read from one source for one list (a source that pages forever is cut here).
pub const MAX_PAGES: usize = 64;
/// Items per page of a merged list.
pub const PAGE: usize = 500;
/// Requests held while the catalog is filled (a call by name before any list).
const MAX_WAITING: usize = 256;
/// Resource subscriptions kept for an upgrade's replay (beyond it, later ones are not
/// replayed; the sources hold them as ever until the upgrade).
const MAX_KEPT_SUBSCRIPTIONS: usize = 4096;
/// Longest resource URI or log level kept for an upgrade's replay, in bytes.
const MAX_KEPT_TEXT: usize = 8 * 1024;
/// Requests the sources may have asked of this client and not seen answered; beyond it a
/// source's request is answered with an error at once (its actor bounds them too, and ends
/// them at `request_timeout` with a cancel that frees their place).
pub const MAX_ASKED: usize = 1024;

/// What the connection knows of its endpoint.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The endpoint's name.
    pub name: String,
    /// Its sources, in order: name and optional description.
    pub sources: Vec<(String, Option<String>)>,
    /// The status tool's name, when configured.
    pub status_tool: Option<String>,
}

/// What the shell does for a decision.
#[derive(Debug)]
pub enum Effect {
    /// Send this message to source `.0`'s actor, as this client.
    Source(usize, Message),
    /// Deliver this line to the client at this address.
    Client(Address, Line),
    /// Close the client once what was delivered before is written.
    Close,
    /// A request the endpoint answered itself for one of its sources, which never saw it:
    /// one request log line and its metrics (§7).
    Answered(Answered),
}

/// A request the endpoint answered itself for source `source`: refused by policy
/// (`policy_denied`), or sent after the source's actor had closed this client
/// (`unreachable`).
#[derive(Debug)]
pub struct Answered {
    /// The source's name.
    pub source: String,
    /// The method.
    pub method: String,
    /// The tool of `tools/call`, as the source names it.
    pub tool: Option<String>,
    /// The request id the answer shows (a fresh one when it shows none).
    pub rid: RequestId,
    /// How it ended.
    pub outcome: Outcome,
    /// The JSON-RPC error code answered, if any.
    pub code: Option<i64>,
}

/// Where a source's handshake with this client stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Init {
    /// Not asked (a 2026-07-28 client never is).
    No,
    /// `initialize` sent.
    Sent,
    /// Answered with a result.
    Ok,
    /// Answered with an error (the source is down and has never been up).
    Failed,
}

/// One source as this client sees it.
#[derive(Debug)]
struct Source {
    /// Its actor client is open (false once the actor closed it).
    open: bool,
    init: Init,
    /// The status its last outage answer named (`backoff`, `failed`, ...).
    down: Option<String>,
    /// Its `initialize` result (or discover result).
    hello: Option<Value>,
}

/// What a number minted toward a source stands for.
#[derive(Debug)]
enum Pending {
    /// The client's request `id`, forwarded whole.
    Forward { id: Box<RawValue>, method: String },
    /// Part of fan-out `fan`.
    Part { fan: u64 },
    /// A handshake the endpoint sent on its own (a retry after a failed one).
    Init,
    /// The stream toward this source of the client's `subscriptions/listen` (key of its id).
    Listen(String),
    /// Anything whose answer is dropped.
    Ignore,
}

/// What a fan-out is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FanWhat {
    Initialize,
    Discover,
    List(ListKind),
    SetLevel,
}

/// One source's share of a fan-out.
#[derive(Debug)]
enum Part {
    Waiting { items: Vec<Value>, pages: usize },
    Done(Result<Vec<Value>, Value>),
    Hello(Result<Value, Value>),
}

/// A request sent to every source, answered once all answered or [`FAN_WAIT`] passed.
#[derive(Debug)]
struct Fan {
    /// The client's request id; `None` for the endpoint's own (a fill before a call).
    reply: Option<Box<RawValue>>,
    what: FanWhat,
    /// The params each source gets (lists: without `cursor`).
    params: Option<Box<RawValue>>,
    parts: Vec<Option<Part>>,
    deadline: Instant,
}

impl Fan {
    fn done(&self) -> bool {
        self.parts
            .iter()
            .all(|p| !matches!(p, Some(Part::Waiting { .. })))
    }
}

/// One client of an endpoint.
#[derive(Debug)]
pub struct Conn {
    plan: Plan,
    sources: Vec<Source>,
    era: Option<Era>,
    /// The client's `initialize` params, replayed to a source asked again.
    hello: Option<Box<RawValue>>,
    /// A 2026-07-28 client's envelope (`{"_meta": {…}}` with the protocol keys only), put on
    /// the requests the endpoint sends on its own (a fill before a call), so each source sees
    /// this client in its era from its first request.
    envelope: Option<Box<RawValue>>,
    /// The client sent `notifications/initialized`.
    initialized: bool,
    next: u64,
    pending: HashMap<(usize, u64), Pending>,
    /// The client's request id key → where it was forwarded (for its cancellation).
    forwarded: HashMap<String, (usize, u64)>,
    fans: HashMap<u64, Fan>,
    next_fan: u64,
    /// Requests a source asked of the client: the id the client sees → source, its id.
    asked: HashMap<String, (usize, Box<RawValue>)>,
    next_ask: u64,
    catalog: Catalog,
    /// What this client may see and call.
    view: View,
    /// The last merged tool and prompt lists before the view is applied (to tell, when the
    /// policy changes, whether this client's view changed).
    merged: HashMap<ListKind, Vec<Value>>,
    /// Requests waiting for the catalog to be filled.
    waiting: Vec<Message>,
    /// The last merged list of each kind (for its later pages) and its number.
    snapshots: HashMap<ListKind, (u64, Vec<Value>)>,
    next_snapshot: u64,
    /// A list-changed notification was sent and the client has not listed since.
    notified: HashMap<ListKind, bool>,
    retry_at: Option<Instant>,
    input_closed: bool,
    /// A 2026-07-28 client's `subscriptions/listen` streams.
    listens: Listens,
    /// When the streams toward sources that ended them are opened again (every
    /// [`RETRY_INIT`] while one is ended, and at once when such a source answers).
    relisten_at: Option<Instant>,
    /// A list was merged since the catalog was last taken to share ([`Conn::take_catalog`]).
    merged_since: bool,
    /// The client's last `logging/setLevel` level (replayed after an upgrade).
    level: Option<String>,
    /// The resource URIs the client subscribed to (replayed after an upgrade); at most
    /// [`MAX_KEPT_SUBSCRIPTIONS`], each at most [`MAX_KEPT_TEXT`] bytes.
    subscribed: std::collections::BTreeSet<String>,
}

impl Conn {
    /// A new client; `open[i]` says whether source `i` could be joined at all (a source the
    /// peer may not use, or whose actor is gone, is never asked).
    pub fn new(plan: Plan, open: &[bool], view: View) -> Conn {
        let mut reserved = Vec::new();
        if let Some(t) = &plan.status_tool {
            reserved.push(t.clone());
        }
        let catalog = Catalog::new(
            plan.sources.iter().map(|(n, _)| n.clone()).collect(),
            reserved,
        );
        let sources = plan
            .sources
            .iter()
            .enumerate()
            .map(|(i, _)| Source {
                open: open.get(i).copied().unwrap_or(false),
                init: Init::No,
                down: None,
                hello: None,
            })
            .collect();
        Conn {
            plan,
            sources,
            era: None,
            hello: None,
            envelope: None,
            initialized: false,
            next: 1,
            pending: HashMap::new(),
            forwarded: HashMap::new(),
            fans: HashMap::new(),
            next_fan: 1,
            asked: HashMap::new(),
            next_ask: 1,
            catalog,
            view,
            merged: HashMap::new(),
            waiting: Vec::new(),
            snapshots: HashMap::new(),
            next_snapshot: 1,
            notified: HashMap::new(),
            retry_at: None,
            input_closed: false,
            listens: Listens::default(),
            relisten_at: None,
            merged_since: false,
            level: None,
            subscribed: Default::default(),
        }
    }

    /// Seeds the catalog with one another connection of the endpoint built
    /// ([`Catalog::seed`]), before the first message; ignored when built for other sources.
    pub fn seed(&mut self, catalog: Catalog) {
        if catalog.same_sources(&self.catalog) {
            self.catalog = catalog;
        }
    }

    /// The catalog to share with the endpoint's next connections, once after each merge.
    pub fn take_catalog(&mut self) -> Option<Catalog> {
        std::mem::take(&mut self.merged_since).then(|| self.catalog.seed())
    }

    /// The next moment [`Conn::tick`] has work.
    pub fn next_deadline(&self) -> Option<Instant> {
        let fans = self.fans.values().map(|f| f.deadline).min();
        [fans, self.retry_at, self.relisten_at]
            .into_iter()
            .flatten()
            .min()
    }

    /// Whether nothing is owed to the client (after its input closed: time to close).
    fn idle(&self) -> bool {
        self.fans.values().all(|f| f.reply.is_none())
            && self
                .pending
                .values()
                .all(|p| !matches!(p, Pending::Forward { .. }))
            && self.waiting.is_empty()
    }

    // ---- the client's side -------------------------------------------------------------

    /// A parsed message from the client.
    pub fn on_client(&mut self, m: Message, now: Instant) -> Vec<Effect> {
        let mut out = Vec::new();
        match m.kind {
            Kind::Request => self.client_request(m, now, &mut out),
            Kind::Notification => self.client_notification(m, &mut out),
            Kind::Response => self.client_response(m, &mut out),
        }
        out
    }

    /// Keeps a `resources/subscribe` (forgets on `resources/unsubscribe`) for an upgrade's
    /// replay.
    fn note_subscription(&mut self, m: &Message) {
        let uri = || {
            m.params_object()?
                .get("uri")
                .and_then(Value::as_str)
                .filter(|u| u.len() <= MAX_KEPT_TEXT)
                .map(str::to_string)
        };
        match m.method() {
            "resources/subscribe" => {
                if let Some(uri) = uri() {
                    if self.subscribed.len() < MAX_KEPT_SUBSCRIPTIONS {
                        self.subscribed.insert(uri);
                    }
                }
            }
            "resources/unsubscribe" => {
                if let Some(uri) = uri() {
                    self.subscribed.remove(&uri);
                }
            }
            _ => {}
        }
    }

    /// Client requests not answered yet (forwarded, fanned out, waiting for the catalog) and
    /// requests the sources asked of the client: an upgrade waits for 0 (issue 32 §1). Open
    /// listen streams are not counted (they are replayed).
    pub fn unfinished(&self) -> usize {
        let forwarded = self
            .pending
            .values()
            .filter(|p| matches!(p, Pending::Forward { .. }))
            .count();
        let fans = self.fans.values().filter(|f| f.reply.is_some()).count();
        forwarded
            .saturating_add(fans)
            .saturating_add(self.waiting.len())
            .saturating_add(self.asked.len())
    }

    /// This client's state for the next image of an upgrade (issue 32 §1): its handshake,
    /// `notifications/initialized`, log level and resource subscriptions as requests under
    /// replay ids (their answers are not shown), and its open listen streams under its own
    /// ids (all acknowledged: the endpoint acknowledges at once).
    pub fn hand_over(&self) -> actor::server::ClientState {
        let mut n = 0u64;
        let mut next = || {
            n += 1;
            json!(format!("{}{n}", actor::park::REPLAY_ID_PREFIX))
        };
        let raw = |p: &RawValue| serde_json::from_str::<Value>(p.get()).unwrap_or(Value::Null);
        let mut lines = Vec::new();
        if self.era == Some(Era::Handshake) {
            if let Some(hello) = &self.hello {
                lines.push(
                    json!({"jsonrpc": "2.0", "id": next(), "method": "initialize",
                    "params": raw(hello)}),
                );
                if self.initialized {
                    lines.push(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
                }
            }
            if let Some(level) = &self.level {
                lines.push(json!({"jsonrpc": "2.0", "id": next(),
                    "method": "logging/setLevel", "params": {"level": level}}));
            }
            for uri in &self.subscribed {
                lines.push(json!({"jsonrpc": "2.0", "id": next(),
                    "method": "resources/subscribe", "params": {"uri": uri}}));
            }
        }
        actor::server::ClientState {
            replay: lines.iter().map(Value::to_string).collect(),
            listens: self.listens.requests(self.envelope.as_deref()),
        }
    }

    /// The client closed its input: it is answered what it asked, then closed.
    pub fn input_closed(&mut self) -> Vec<Effect> {
        self.input_closed = true;
        let mut out = Vec::new();
        self.close_if_done(&mut out);
        out
    }

    fn close_if_done(&self, out: &mut Vec<Effect>) {
        if self.input_closed && self.idle() {
            out.push(Effect::Close);
        }
    }

    fn client_request(&mut self, m: Message, now: Instant, out: &mut Vec<Effect>) {
        let Some(id) = m.id.clone() else { return };
        if self.era.is_none() {
            let modern = m.method() == "server/discover" || has_envelope(m.params.as_deref());
            self.era = Some(if modern && m.method() != "initialize" {
                Era::Modern
            } else {
                Era::Handshake
            });
        }
        if self.era == Some(Era::Modern) && self.envelope.is_none() {
            self.envelope = envelope_of(m.params.as_deref());
        }
        match m.method() {
            "initialize" => {
                self.era = Some(Era::Handshake);
                self.hello = m.params.clone();
                for s in &mut self.sources {
                    if s.open {
                        s.init = Init::Sent;
                    }
                }
                self.fan(Some(id), FanWhat::Initialize, m.params, now, out);
            }
            "ping" => self.reply(out, &id, "ping", json!({})),
            "server/discover" => self.fan(Some(id), FanWhat::Discover, m.params, now, out),
            "logging/setLevel" => {
                if let Some(level) = m
                    .params_object()
                    .and_then(|p| p.get("level")?.as_str().map(str::to_string))
                    .filter(|l| l.len() <= MAX_KEPT_TEXT)
                {
                    self.level = Some(level);
                }
                self.fan(Some(id), FanWhat::SetLevel, m.params, now, out)
            }
            "subscriptions/listen" => self.listen(id, &m, out),
            method => {
                if let Some(kind) = ListKind::of_method(method) {
                    return self.list(id, kind, m.params, now, out);
                }
                self.note_subscription(&m);
                self.route(m, now, out);
            }
        }
    }

    /// A list request: a later page from the snapshot its cursor names, or a fresh fan-out.
    fn list(
        &mut self,
        id: Box<RawValue>,
        kind: ListKind,
        params: Option<Box<RawValue>>,
        now: Instant,
        out: &mut Vec<Effect>,
    ) {
        self.notified.insert(kind, false);
        let cursor = params
            .as_deref()
            .and_then(RawObject::parse)
            .and_then(|o| o.get("cursor").map(|c| c.get().to_string()));
        let Some(cursor) = cursor else {
            return self.fan(Some(id), FanWhat::List(kind), params, now, out);
        };
        let at = serde_json::from_str::<String>(&cursor)
            .ok()
            .and_then(|c| parse_cursor(&c));
        match (at, self.snapshots.get(&kind)) {
            (Some((snap, offset)), Some((current, items))) if snap == *current => {
                let page = page_of(kind, items, offset, snap);
                self.reply(out, &id, kind.method(), page);
            }
            _ => error(
                out,
                &id,
                code::INVALID_PARAMS,
                "Invalid cursor: this page is from an older list; list again from the start",
                None,
            ),
        }
    }

    /// A request for one source: found by its tool or prompt name, its resource URI, or its
    /// completion reference; forwarded under a fresh number, the name put back as the
    /// source wrote it.
    fn route(&mut self, m: Message, now: Instant, out: &mut Vec<Effect>) {
        let Some(id) = m.id.clone() else { return };
        let method = m.method().to_string();
        let params = m.params_object().unwrap_or_default();
        let (kind, key) = match method.as_str() {
            "tools/call" => (ListKind::Tools, params.get("name").and_then(Value::as_str)),
            "prompts/get" => (
                ListKind::Prompts,
                params.get("name").and_then(Value::as_str),
            ),
            "resources/read" | "resources/subscribe" | "resources/unsubscribe" => (
                ListKind::Resources,
                params.get("uri").and_then(Value::as_str),
            ),
            "completion/complete" => {
                let r = params.get("ref");
                match r.and_then(|r| r.get("type")).and_then(Value::as_str) {
                    Some("ref/prompt") => (
                        ListKind::Prompts,
                        r.and_then(|r| r.get("name")).and_then(Value::as_str),
                    ),
                    _ => (
                        ListKind::Resources,
                        r.and_then(|r| r.get("uri")).and_then(Value::as_str),
                    ),
                }
            }
            other => {
                return error(
                    out,
                    &id,
                    code::METHOD_NOT_FOUND,
                    &format!("Method not found: {other}"),
                    None,
                )
            }
        };
        let Some(key) = key.map(str::to_string) else {
            let what = if kind == ListKind::Resources {
                "uri"
            } else {
                "name"
            };
            return error(
                out,
                &id,
                code::INVALID_PARAMS,
                &format!("{method} needs params.{what}"),
                None,
            );
        };
        if method == "tools/call" && self.plan.status_tool.as_deref() == Some(key.as_str()) {
            let result = self.status_result();
            return self.reply(out, &id, "tools/call", result);
        }
        let target = match kind {
            ListKind::Tools => self.catalog.tool(&key).map(|r| (r.source, r.name.clone())),
            ListKind::Prompts => self
                .catalog
                .prompt(&key)
                .map(|r| (r.source, r.name.clone())),
            _ => self.catalog.resource(&key).map(|s| (s, key.clone())),
        };
        let Some((source, original)) = target else {
            // Not known yet: fill the catalog once, then try again.
            let kinds: &[ListKind] = if kind == ListKind::Resources {
                &[ListKind::Resources, ListKind::Templates]
            } else if kind == ListKind::Tools {
                &[ListKind::Tools]
            } else {
                &[ListKind::Prompts]
            };
            if kinds.iter().any(|k| !self.catalog.filled(*k)) && self.waiting.len() < MAX_WAITING {
                self.waiting.push(m);
                for k in kinds {
                    if !self.catalog.filled(*k) && !self.filling(*k) {
                        self.fan(None, FanWhat::List(*k), None, now, out);
                    }
                }
                return;
            }
            return match kind {
                ListKind::Tools => error(
                    out,
                    &id,
                    code::INVALID_PARAMS,
                    &format!("Unknown tool: {key}"),
                    None,
                ),
                ListKind::Prompts => error(
                    out,
                    &id,
                    code::INVALID_PARAMS,
                    &format!("Unknown prompt: {key}"),
                    None,
                ),
                _ => error(
                    out,
                    &id,
                    code::LIMIT_EXCEEDED,
                    &format!("Resource not found: {key}"),
                    Some(json!({"uri": key})),
                ),
            };
        };
        if matches!(kind, ListKind::Tools | ListKind::Prompts)
            && !self
                .view
                .visible(self.catalog.source_name(source), &original, &key)
        {
            // Answered like an unknown name: after the same fill an unknown name waits for,
            // so the time taken does not tell hidden from absent.
            if self.view.hidden_calls == HiddenCalls::Unknown
                && !self.catalog.filled(kind)
                && self.waiting.len() < MAX_WAITING
            {
                self.waiting.push(m);
                if !self.filling(kind) {
                    self.fan(None, FanWhat::List(kind), None, now, out);
                }
                return;
            }
            return self.denied(&id, &method, kind, (&key, &original), source, out);
        }
        let params = match (kind, method.as_str()) {
            (ListKind::Tools | ListKind::Prompts, "completion/complete") => {
                rename_ref(m.params.as_deref(), &original)
            }
            (ListKind::Tools | ListKind::Prompts, _) => {
                rename(m.params.as_deref(), "name", &original)
            }
            _ => m.params,
        };
        if !self.sources.get(source).is_some_and(|s| s.open) {
            let (rid, code) = self.closed_answer(source, &id, &method, out);
            out.push(Effect::Answered(Answered {
                source: self.source_name(source).to_string(),
                tool: (method == "tools/call").then_some(original),
                method,
                rid,
                outcome: Outcome::Unreachable,
                code,
            }));
            return;
        }
        self.maybe_reinit(source, out);
        let n = self.mint();
        self.pending.insert(
            (source, n),
            Pending::Forward {
                id: id.clone(),
                method: method.clone(),
            },
        );
        self.forwarded.insert(id_key(&id), (source, n));
        out.push(Effect::Source(
            source,
            request(Some(n), Cow::Owned(method), params),
        ));
    }

    /// Whether a fan-out (the endpoint's own, or a client's) is listing `kind` now.
    fn filling(&self, kind: ListKind) -> bool {
        self.fans.values().any(|f| f.what == FanWhat::List(kind))
    }

    fn client_notification(&mut self, m: Message, out: &mut Vec<Effect>) {
        match m.method() {
            "notifications/initialized" => {
                self.initialized = true;
                for (i, s) in self.sources.iter().enumerate() {
                    if s.open && s.init == Init::Ok {
                        out.push(Effect::Source(i, notification(&m)));
                    }
                }
            }
            "notifications/cancelled" => {
                let Some(p) = m.params_object() else { return };
                let Some(rid) = p.get("requestId") else {
                    return;
                };
                let key = id_key(&message::raw(rid));
                if let Some(streams) = self.listens.cancel(&key) {
                    for (source, n) in streams {
                        self.pending.remove(&(source, n));
                        out.push(Effect::Source(
                            source,
                            request(
                                None,
                                Cow::Borrowed("notifications/cancelled"),
                                Some(message::raw(&json!({"requestId": n}))),
                            ),
                        ));
                    }
                    return;
                }
                let Some((source, n)) = self.forwarded.remove(&key) else {
                    return;
                };
                let mut params = p.clone();
                params.insert("requestId".into(), json!(n));
                out.push(Effect::Source(
                    source,
                    request(
                        None,
                        Cow::Borrowed("notifications/cancelled"),
                        Some(message::raw(&Value::Object(params))),
                    ),
                ));
            }
            _ => {
                for (i, s) in self.sources.iter().enumerate() {
                    if s.open && s.init != Init::Failed {
                        out.push(Effect::Source(i, notification(&m)));
                    }
                }
            }
        }
    }

    /// The client's answer to a request a source asked: back to that source, under its id.
    fn client_response(&mut self, m: Message, out: &mut Vec<Effect>) {
        let Some(id) = m.id.as_deref() else { return };
        let Some((source, original)) = self.asked.remove(&id_key(id)) else {
            debug!(endpoint = %self.plan.name, "an answer to no request of a source; dropped");
            return;
        };
        out.push(Effect::Source(
            source,
            Message {
                kind: Kind::Response,
                id: Some(original),
                method: None,
                params: None,
                result: m.result,
                error: m.error,
            },
        ));
    }

    // ---- the sources' side -------------------------------------------------------------

    /// A line source `source`'s actor delivered to this client, with its address.
    pub fn on_source(
        &mut self,
        source: usize,
        to: Address,
        line: Line,
        now: Instant,
    ) -> Vec<Effect> {
        let mut out = Vec::new();
        let bytes = line.to_bytes();
        let Ok(m) = message::parse_one(&bytes) else {
            debug!(endpoint = %self.plan.name, "an unreadable line from a source's actor; dropped");
            return out;
        };
        match to {
            Address::Response(key) => {
                if let Ok(n) = key.parse::<u64>() {
                    self.source_response(source, n, m, now, &mut out);
                }
            }
            Address::Progress(token) => out.push(Effect::Client(Address::Progress(token), line)),
            Address::Request { id, method } => {
                if self.asked.len() >= MAX_ASKED {
                    warn!(endpoint = %self.plan.name, source = %self.source_name(source), method, "too many requests of the sources wait for this client; answering this one with an error");
                    out.push(Effect::Source(
                        source,
                        Message {
                            kind: Kind::Response,
                            id: Some(id),
                            method: None,
                            params: None,
                            result: None,
                            error: Some(message::raw(&json!({"code": code::LIMIT_EXCEEDED,
                                "message": "the client has too many requests of its servers to answer"}))),
                        },
                    ));
                    return out;
                }
                let ask = self.next_ask;
                self.next_ask += 1;
                let mine = message::raw(&json!(format!("{}-{ask}", self.source_name(source))));
                self.asked.insert(id_key(&mine), (source, id));
                let line = Out::request(Some(&mine), &method, m.params.as_deref()).encode();
                out.push(Effect::Client(
                    Address::Request { id: mine, method },
                    Line::from(line),
                ));
            }
            Address::Listen(key) => {
                if let Ok(n) = key.parse::<u64>() {
                    self.listen_traffic(source, n, m, &mut out);
                }
            }
            Address::Session => self.source_notification(source, m, line, &mut out),
        }
        if self.relisten_at.is_none() && self.listens.any_ended() {
            self.relisten_at = Some(base::deadline::after(now, RETRY_INIT));
        }
        self.close_if_done(&mut out);
        out
    }

    /// Source `source`'s actor closed this client (the server was removed, or the client
    /// refused): what waits on it is answered now.
    pub fn source_closed(&mut self, source: usize, now: Instant) -> Vec<Effect> {
        let mut out = Vec::new();
        if let Some(s) = self.sources.get_mut(source) {
            if !s.open {
                return out;
            }
            s.open = false;
            s.down = Some("stopped".into());
        }
        info!(endpoint = %self.plan.name, source = %self.source_name(source), "the source closed this endpoint client");
        self.listens.source_closed(source);
        let keys: Vec<(usize, u64)> = self
            .pending
            .keys()
            .filter(|(s, _)| *s == source)
            .copied()
            .collect();
        for k in keys {
            match self.pending.remove(&k) {
                Some(Pending::Forward { id, method }) => {
                    self.forwarded.remove(&id_key(&id));
                    // The source finished it already (its client went): no second line.
                    let _ = self.closed_answer(source, &id, &method, &mut out);
                }
                Some(Pending::Part { fan }) => {
                    let gone =
                        json!({"code": code::SERVER_UNAVAILABLE, "message": "source closed"});
                    self.part_error(fan, source, gone, now, &mut out);
                }
                _ => {}
            }
        }
        self.close_if_done(&mut out);
        out
    }

    fn source_name(&self, source: usize) -> &str {
        self.plan
            .sources
            .get(source)
            .map_or("", |(n, _)| n.as_str())
    }

    fn source_response(
        &mut self,
        source: usize,
        n: u64,
        m: Message,
        now: Instant,
        out: &mut Vec<Effect>,
    ) {
        // A source that answers is up: listen streams it ended are opened again.
        if m.result.is_some() {
            for key in self.listens.to_reopen(source) {
                self.open_toward(&key, source, out);
            }
        }
        match self.pending.remove(&(source, n)) {
            Some(Pending::Forward { id, method: _ }) => {
                self.forwarded.remove(&id_key(&id));
                let line = match (&m.result, &m.error) {
                    (Some(r), _) => message::result_line(&id, r),
                    (None, Some(e)) => Line::from(Out::error(&id, e).encode()),
                    (None, None) => return,
                };
                out.push(Effect::Client(Address::Response(id_key(&id)), line));
            }
            Some(Pending::Part { fan }) => match (&m.result, &m.error) {
                (Some(r), _) => {
                    let v: Value = serde_json::from_slice(r.as_bytes()).unwrap_or(Value::Null);
                    self.part_result(fan, source, v, now, out);
                }
                (None, Some(e)) => {
                    let v: Value = serde_json::from_str(e.get()).unwrap_or(Value::Null);
                    self.part_error(fan, source, v, now, out);
                }
                (None, None) => {}
            },
            Some(Pending::Init) => {
                let ok = m.result.is_some();
                let recovered = ok
                    && self
                        .sources
                        .get(source)
                        .is_some_and(|s| s.init == Init::Failed);
                if let Some(s) = self.sources.get_mut(source) {
                    s.init = if ok { Init::Ok } else { Init::Failed };
                    if ok {
                        s.down = None;
                        s.hello = m
                            .result
                            .as_ref()
                            .and_then(|r| serde_json::from_slice(r.as_bytes()).ok());
                    }
                }
                if ok && self.initialized {
                    out.push(Effect::Source(
                        source,
                        request(None, Cow::Borrowed("notifications/initialized"), None),
                    ));
                }
                if recovered {
                    info!(endpoint = %self.plan.name, source = %self.source_name(source), "a source that was down answered its handshake; telling the client its lists changed");
                    for kind in [ListKind::Tools, ListKind::Prompts, ListKind::Resources] {
                        self.announce(kind, out);
                    }
                }
            }
            Some(Pending::Listen(key)) => self.listen_answered(source, n, &m, &key),
            Some(Pending::Ignore) | None => {}
        }
    }

    // ---- listen streams (2026-07-28) ---------------------------------------------------

    /// Source `source` answered its part `n` of the client's stream `key`: a close result or
    /// an outage (the source is down or restarting) ends it, to be opened again; any other
    /// error (a limit, no such method) is a refusal, and that source stays out of the stream.
    fn listen_answered(&mut self, source: usize, n: u64, m: &Message, key: &str) {
        let outage = matches!(
            m.error_code(),
            Some(code::SERVER_UNAVAILABLE | code::REQUEST_TIMEOUT)
        );
        if m.error.is_none() || outage {
            if self.listens.ended(source, n) {
                debug!(endpoint = %self.plan.name, source = %self.source_name(source), stream = key, "a source ended its part of a listen stream; opened again when it answers again");
            }
        } else {
            self.listens.refused(source, n);
            warn!(endpoint = %self.plan.name, source = %self.source_name(source), stream = key, code = m.error_code(), "a source refused its part of a listen stream; the stream goes on without it");
        }
    }

    /// A 2026-07-28 client's `subscriptions/listen`: acknowledged by the endpoint with what it
    /// asked, and opened toward every source (each asked for the resource URIs it serves).
    fn listen(&mut self, id: Box<RawValue>, m: &Message, out: &mut Vec<Effect>) {
        if self.era != Some(Era::Modern) {
            return error(
                out,
                &id,
                code::METHOD_NOT_FOUND,
                "Method not found: subscriptions/listen is a 2026-07-28 method; this session began with initialize",
                None,
            );
        }
        if !self.listens.has_room() {
            return error(
                out,
                &id,
                code::LIMIT_EXCEEDED,
                &format!(
                    "too many listen streams open on this connection to endpoint `{}` ({})",
                    self.plan.name,
                    super::listen::MAX_STREAMS
                ),
                None,
            );
        }
        if self.listens.filter(&id_key(&id)).is_some() || self.forwarded.contains_key(&id_key(&id))
        {
            return error(
                out,
                &id,
                code::INVALID_REQUEST,
                "a request with this id is already open on this connection",
                None,
            );
        }
        let filter = Filter::of(
            &m.params_object().unwrap_or_default(),
            super::listen::MAX_URIS,
        );
        let (to, ack) = self.listens.open(&id, filter);
        out.push(Effect::Client(to, ack));
        let key = id_key(&id);
        for source in 0..self.sources.len() {
            if self.sources.get(source).is_some_and(|s| s.open) {
                self.open_toward(&key, source, out);
            }
        }
    }

    /// Opens the client's stream `key` toward `source`: its filter with the resource URIs
    /// that source serves (or that no source is known to serve), in the client's envelope.
    fn open_toward(&mut self, key: &str, source: usize, out: &mut Vec<Effect>) {
        let Some(filter) = self.listens.filter(key) else {
            return;
        };
        if !self.sources.get(source).is_some_and(|s| s.open) {
            return;
        }
        let uris: Vec<String> = filter
            .uris
            .iter()
            .filter(|u| self.catalog.resource(u).is_none_or(|s| s == source))
            .cloned()
            .collect();
        let notifications = filter.notifications(&uris);
        let mut params = self
            .envelope
            .as_deref()
            .and_then(|e| serde_json::from_str::<Map<String, Value>>(e.get()).ok())
            .unwrap_or_default();
        params.insert("notifications".into(), notifications);
        let n = self.mint();
        self.pending
            .insert((source, n), Pending::Listen(key.to_string()));
        self.listens.toward(key, source, n);
        out.push(Effect::Source(
            source,
            request(
                Some(n),
                Cow::Borrowed("subscriptions/listen"),
                Some(message::raw(&Value::Object(params))),
            ),
        ));
    }

    /// A line of source `source`'s stream `n`: its notifications put on the client's stream
    /// (a list change also marks the catalog stale); its end (a result on the stream)
    /// remembered, to open it again.
    fn listen_traffic(&mut self, source: usize, n: u64, m: Message, out: &mut Vec<Effect>) {
        if m.kind == Kind::Response {
            if let Some(Pending::Listen(key)) = self.pending.remove(&(source, n)) {
                self.listen_answered(source, n, &m, &key);
            }
            return;
        }
        let method = m.method().to_string();
        for k in ListKind::of_changed(&method) {
            self.catalog.stale(*k);
        }
        let params = m.params_object().unwrap_or_default();
        if let Some((to, line)) = self.listens.traffic(source, n, &method, params) {
            out.push(Effect::Client(to, line));
        }
    }

    fn source_notification(
        &mut self,
        source: usize,
        m: Message,
        line: Line,
        out: &mut Vec<Effect>,
    ) {
        let method = m.method().to_string();
        let kinds = ListKind::of_changed(&method);
        if !kinds.is_empty() {
            for k in kinds {
                self.catalog.stale(*k);
            }
            if let Some(first) = kinds.first() {
                self.announce(*first, out);
            }
            return;
        }
        match method.as_str() {
            "notifications/cancelled" => {
                // The source gave up a request it asked of the client.
                let Some(mut p) = m.params_object() else {
                    return;
                };
                let Some(rid) = p.get("requestId") else {
                    return;
                };
                if let Some(n) = rid.as_u64().filter(|n| self.listens.is_stream(source, *n)) {
                    // The source ended a listen stream.
                    self.pending.remove(&(source, n));
                    self.listens.ended(source, n);
                    return;
                }
                let theirs = id_key(&message::raw(rid));
                let mine = self
                    .asked
                    .iter()
                    .find(|(_, (s, id))| *s == source && id_key(id) == theirs)
                    .map(|(k, _)| k.clone());
                let Some(mine) = mine else { return };
                self.asked.remove(&mine);
                let mine: Value = serde_json::from_str(&mine).unwrap_or(Value::Null);
                p.insert("requestId".into(), mine);
                let line = Out::request(
                    None,
                    "notifications/cancelled",
                    Some(&message::raw(&Value::Object(p))),
                )
                .encode();
                out.push(Effect::Client(Address::Session, Line::from(line)));
            }
            "notifications/message" => {
                // Which source says it: its name leads the logger.
                let Some(mut p) = m.params_object() else {
                    return out.push(Effect::Client(Address::Session, line));
                };
                let logger = match p.get("logger").and_then(Value::as_str) {
                    Some(l) => format!("{}/{l}", self.source_name(source)),
                    None => self.source_name(source).to_string(),
                };
                p.insert("logger".into(), Value::String(logger));
                let line = Out::request(
                    None,
                    "notifications/message",
                    Some(&message::raw(&Value::Object(p))),
                )
                .encode();
                out.push(Effect::Client(Address::Session, Line::from(line)));
            }
            _ => out.push(Effect::Client(Address::Session, line)),
        }
    }

    /// Tells the client `kind` changed: a handshake client once until it lists again
    /// (coalesced), a 2026-07-28 client on each listen stream that asked for it.
    fn announce(&mut self, kind: ListKind, out: &mut Vec<Effect>) {
        if self.era == Some(Era::Modern) {
            for (to, line) in self.listens.announce(kind.changed()) {
                out.push(Effect::Client(to, line));
            }
            return;
        }
        if self.era != Some(Era::Handshake) || !self.initialized {
            return;
        }
        let sent = self.notified.entry(kind).or_insert(false);
        if *sent {
            return;
        }
        *sent = true;
        let line = Out::request(None, kind.changed(), None).encode();
        out.push(Effect::Client(Address::Session, Line::from(line)));
    }

    // ---- timers ------------------------------------------------------------------------

    /// Fan-outs past [`FAN_WAIT`] answer with what they have; sources whose handshake failed
    /// are asked again every [`RETRY_INIT`].
    pub fn tick(&mut self, now: Instant) -> Vec<Effect> {
        let mut out = Vec::new();
        let late: Vec<u64> = self
            .fans
            .iter()
            .filter(|(_, f)| f.deadline <= now)
            .map(|(k, _)| *k)
            .collect();
        for fan in late {
            self.finish(fan, now, &mut out);
        }
        if self.relisten_at.is_some_and(|t| t <= now) {
            self.relisten_at = None;
            for source in 0..self.sources.len() {
                for key in self.listens.to_reopen(source) {
                    self.open_toward(&key, source, &mut out);
                }
            }
        }
        if self.retry_at.is_some_and(|t| t <= now) {
            self.retry_at = None;
            let failed: Vec<usize> = self
                .sources
                .iter()
                .enumerate()
                .filter(|(_, s)| s.open && s.init == Init::Failed)
                .map(|(i, _)| i)
                .collect();
            for i in failed {
                self.send_init(i, &mut out);
            }
            self.arm_retry(now);
        }
        self.close_if_done(&mut out);
        out
    }

    fn arm_retry(&mut self, now: Instant) {
        if self.retry_at.is_none()
            && self.era == Some(Era::Handshake)
            && self
                .sources
                .iter()
                .any(|s| s.open && s.init == Init::Failed)
        {
            self.retry_at = Some(base::deadline::after(now, RETRY_INIT));
        }
    }

    /// Before a request to a source whose handshake failed, asks it again (its actor answers
    /// in order, so the request follows the handshake).
    fn maybe_reinit(&mut self, source: usize, out: &mut Vec<Effect>) {
        if self
            .sources
            .get(source)
            .is_some_and(|s| s.init == Init::Failed)
        {
            self.send_init(source, out);
        }
    }

    fn send_init(&mut self, source: usize, out: &mut Vec<Effect>) {
        let Some(hello) = self.hello.clone() else {
            return;
        };
        let n = self.mint();
        self.pending.insert((source, n), Pending::Init);
        if let Some(s) = self.sources.get_mut(source) {
            // Still `Failed` until it answers: a recovery is told apart by that.
            if s.init != Init::Failed {
                s.init = Init::Sent;
            }
        }
        out.push(Effect::Source(
            source,
            request(Some(n), Cow::Borrowed("initialize"), Some(hello)),
        ));
    }

    // ---- fan-outs ----------------------------------------------------------------------

    fn mint(&mut self) -> u64 {
        let n = self.next;
        self.next += 1;
        n
    }

    fn fan(
        &mut self,
        reply: Option<Box<RawValue>>,
        what: FanWhat,
        params: Option<Box<RawValue>>,
        now: Instant,
        out: &mut Vec<Effect>,
    ) {
        let key = self.next_fan;
        self.next_fan += 1;
        let params = match what {
            FanWhat::List(_) => params.map(|p| without(&p, "cursor")),
            _ => params,
        }
        .or_else(|| self.envelope.clone());
        let method = match what {
            FanWhat::Initialize => "initialize",
            FanWhat::Discover => "server/discover",
            FanWhat::SetLevel => "logging/setLevel",
            FanWhat::List(k) => k.method(),
        };
        let mut parts = Vec::with_capacity(self.sources.len());
        for i in 0..self.sources.len() {
            if !self.sources.get(i).is_some_and(|s| s.open) {
                parts.push(None);
                continue;
            }
            if what != FanWhat::Initialize {
                self.maybe_reinit(i, out);
            }
            let n = self.mint();
            self.pending.insert((i, n), Pending::Part { fan: key });
            out.push(Effect::Source(
                i,
                request(Some(n), Cow::Borrowed(method), params.clone()),
            ));
            parts.push(Some(Part::Waiting {
                items: Vec::new(),
                pages: 1,
            }));
        }
        self.fans.insert(
            key,
            Fan {
                reply,
                what,
                params,
                parts,
                deadline: base::deadline::after(now, FAN_WAIT),
            },
        );
        if self.fans.get(&key).is_some_and(Fan::done) {
            self.finish(key, now, out);
        }
    }

    fn part_result(
        &mut self,
        fan: u64,
        source: usize,
        v: Value,
        now: Instant,
        out: &mut Vec<Effect>,
    ) {
        let mut next_page = None;
        let mut list_done = None;
        {
            let Some(f) = self.fans.get_mut(&fan) else {
                return;
            };
            let what = f.what;
            let Some(slot) = f.parts.get_mut(source) else {
                return;
            };
            match what {
                FanWhat::List(kind) => {
                    let Some(Part::Waiting { items, pages }) = slot else {
                        return;
                    };
                    if let Some(a) = v.get(kind.field()).and_then(Value::as_array) {
                        items.extend(a.iter().cloned());
                    }
                    match v.get("nextCursor").and_then(Value::as_str) {
                        Some(c) if *pages < MAX_PAGES => {
                            *pages += 1;
                            next_page = Some((c.to_string(), f.params.clone()));
                        }
                        _ => {
                            let items = std::mem::take(items);
                            list_done = Some((kind, items.clone()));
                            *slot = Some(Part::Done(Ok(items)));
                        }
                    }
                }
                _ => *slot = Some(Part::Hello(Ok(v))),
            }
        }
        if let Some((kind, items)) = list_done {
            self.catalog.set(kind, source, items);
            if let Some(s) = self.sources.get_mut(source) {
                s.down = None;
            }
        }
        if let Some((cursor, params)) = next_page {
            let n = self.mint();
            self.pending.insert((source, n), Pending::Part { fan });
            let method = match self.fans.get(&fan).map(|f| f.what) {
                Some(FanWhat::List(k)) => k.method(),
                _ => return,
            };
            let p = with_cursor(params.as_deref(), &cursor);
            out.push(Effect::Source(
                source,
                request(Some(n), Cow::Borrowed(method), Some(p)),
            ));
            return;
        }
        if self.fans.get(&fan).is_some_and(Fan::done) {
            self.finish(fan, now, out);
        }
    }

    fn part_error(
        &mut self,
        fan: u64,
        source: usize,
        e: Value,
        now: Instant,
        out: &mut Vec<Effect>,
    ) {
        let status = e
            .get("data")
            .and_then(|d| d.get("status"))
            .and_then(Value::as_str)
            .map(str::to_string);
        if let Some(s) = self.sources.get_mut(source) {
            s.down = status.or_else(|| Some("unavailable".into()));
        }
        let Some(f) = self.fans.get_mut(&fan) else {
            return;
        };
        let what = f.what;
        if let Some(slot) = f.parts.get_mut(source) {
            *slot = Some(match what {
                FanWhat::List(_) => Part::Done(Err(e)),
                _ => Part::Hello(Err(e)),
            });
        }
        if self.fans.get(&fan).is_some_and(Fan::done) {
            self.finish(fan, now, out);
        }
    }

    /// Answers a fan-out with what its sources said (or, past its deadline, what they said
    /// so far).
    fn finish(&mut self, fan: u64, now: Instant, out: &mut Vec<Effect>) {
        let Some(f) = self.fans.remove(&fan) else {
            return;
        };
        // Late parts are dropped.
        for p in self.pending.values_mut() {
            if matches!(p, Pending::Part { fan: x } if *x == fan) {
                *p = Pending::Ignore;
            }
        }
        match f.what {
            FanWhat::Initialize | FanWhat::Discover => {
                for (i, part) in f.parts.iter().enumerate() {
                    let Some(s) = self.sources.get_mut(i) else {
                        continue;
                    };
                    match part {
                        Some(Part::Hello(Ok(v))) => {
                            s.hello = Some(v.clone());
                            if f.what == FanWhat::Initialize {
                                s.init = Init::Ok;
                            }
                        }
                        Some(Part::Hello(Err(_))) if f.what == FanWhat::Initialize => {
                            s.init = Init::Failed;
                        }
                        Some(Part::Waiting { .. }) if f.what == FanWhat::Initialize => {
                            // Still starting: its late answer is dropped, so ask again later.
                            s.init = Init::Failed;
                            s.down.get_or_insert_with(|| "starting".into());
                        }
                        _ => {}
                    }
                }
                let result = if f.what == FanWhat::Initialize {
                    self.initialize_result()
                } else {
                    self.discover_result()
                };
                if let Some(id) = &f.reply {
                    reply(out, id, &result);
                }
                self.arm_retry(now);
            }
            FanWhat::SetLevel => {
                if let Some(id) = &f.reply {
                    self.reply(out, id, "logging/setLevel", json!({}));
                }
            }
            FanWhat::List(kind) => {
                let mut missing = Vec::new();
                for (i, part) in f.parts.iter().enumerate() {
                    let done = matches!(part, Some(Part::Done(Ok(_))));
                    if !done && part.is_some() && !self.catalog.known(kind, i) {
                        missing.push(json!({
                            "server": self.source_name(i),
                            "status": self.sources.get(i).and_then(|s| s.down.clone()).unwrap_or_else(|| "starting".into()),
                        }));
                    }
                }
                let mut items = self.catalog.merge(kind, &self.plan.name);
                self.merged_since = true;
                if matches!(kind, ListKind::Tools | ListKind::Prompts) {
                    self.merged.insert(kind, items.clone());
                    items = self.visible_items(kind, &items);
                }
                if kind == ListKind::Tools {
                    if let Some(t) = &self.plan.status_tool {
                        items.push(status_tool(t, &self.plan.name));
                    }
                }
                if kind == ListKind::Templates {
                    self.catalog.merge(ListKind::Resources, &self.plan.name);
                }
                let snap = self.next_snapshot;
                self.next_snapshot += 1;
                if let Some(id) = &f.reply {
                    let mut page = page_of(kind, &items, 0, snap);
                    if !missing.is_empty() {
                        if let Some(o) = page.as_object_mut() {
                            o.insert(
                                "_meta".into(),
                                json!({"mcp-supervisor/unavailable": missing}),
                            );
                        }
                    }
                    self.reply(out, id, kind.method(), page);
                }
                self.snapshots.insert(kind, (snap, items));
                if !self.filling(kind) {
                    self.redispatch(now, out);
                }
            }
        }
    }

    /// Requests that waited for the catalog, taken again.
    fn redispatch(&mut self, now: Instant, out: &mut Vec<Effect>) {
        let still_filling = self
            .fans
            .values()
            .any(|f| matches!(f.what, FanWhat::List(_)));
        if still_filling {
            return;
        }
        for m in std::mem::take(&mut self.waiting) {
            self.route(m, now, out);
        }
    }

    // ---- policy ------------------------------------------------------------------------

    /// Whether merged item `item` of `kind` (tools or prompts) is visible to this client under
    /// `view`: decided on the (source, name) its exposed name routes to (issue 47 §3); an item
    /// the catalog does not route is not.
    fn item_visible(&self, view: &View, kind: ListKind, item: &Value) -> bool {
        let Some(exposed) = item.get("name").and_then(Value::as_str) else {
            return false;
        };
        self.catalog
            .named(kind, exposed)
            .is_some_and(|r| view.visible(self.catalog.source_name(r.source), &r.name, exposed))
    }

    fn visible_items(&self, kind: ListKind, items: &[Value]) -> Vec<Value> {
        items
            .iter()
            .filter(|i| self.item_visible(&self.view, kind, i))
            .cloned()
            .collect()
    }

    /// A new policy (a reload): the client is told the lists changed when what it sees did.
    pub fn set_view(&mut self, view: View) -> Vec<Effect> {
        let mut out = Vec::new();
        let before = std::mem::replace(&mut self.view, view);
        for kind in [ListKind::Tools, ListKind::Prompts] {
            let Some(items) = self.merged.get(&kind) else {
                continue;
            };
            let changed = items.iter().any(|i| {
                self.item_visible(&before, kind, i) != self.item_visible(&self.view, kind, i)
            });
            if changed {
                info!(endpoint = %self.plan.name, kind = kind.method(), "the policy changed what this client sees");
                self.notified.insert(kind, false);
                self.announce(kind, &mut out);
            }
        }
        out
    }

    /// A request for a tool or prompt this client may not use: `denied` (not an outage), or
    /// the unknown-name answer when the operator chose so.
    /// `names` is the name the client asked for and the source's own.
    fn denied(
        &self,
        id: &RawValue,
        method: &str,
        kind: ListKind,
        (key, original): (&str, &str),
        source: usize,
        out: &mut Vec<Effect>,
    ) {
        let what = if kind == ListKind::Tools {
            "tool"
        } else {
            "prompt"
        };
        let rid = RequestId::random();
        let unknown = self.view.hidden_calls == HiddenCalls::Unknown;
        let name = self.source_name(source).to_string();
        out.push(Effect::Answered(Answered {
            source: name.clone(),
            method: method.to_string(),
            tool: (method == "tools/call").then(|| original.to_string()),
            rid,
            outcome: Outcome::PolicyDenied,
            code: (unknown || method != "tools/call").then_some(code::INVALID_PARAMS),
        }));
        if unknown {
            let word = if kind == ListKind::Tools {
                "tool"
            } else {
                "prompt"
            };
            return error(
                out,
                id,
                code::INVALID_PARAMS,
                &format!("Unknown {word}: {key}"),
                None,
            );
        }
        info!(endpoint = %self.plan.name, source = %name, request_id = %rid, clients = ?self.view.labels, method, name = key,
            "refused by the endpoint's policy");
        let record = json!({"server": name, "endpoint": self.plan.name, "status": "ready",
            "reason": "policy", "class": "denied", "detail": "policy", "request_id": rid.to_string()});
        let text = format!(
            "denied: {what} `{key}` of server `{name}` is not available to this client (policy of endpoint `{}`) class=denied request_id={rid}",
            self.plan.name
        );
        if method == "tools/call" {
            let result = json!({"content": [{"type": "text", "text": text}], "isError": true,
                "_meta": {"mcp-supervisor/outage": record}});
            self.reply(out, id, "tools/call", result);
        } else {
            error(out, id, code::INVALID_PARAMS, &text, Some(record));
        }
    }

    // ---- answers the endpoint gives itself ---------------------------------------------

    /// Answers the client's request `id` (`method`) with `result`; a 2026-07-28 client's
    /// result gets `resultType` and, for the cacheable methods, `ttlMs` and `cacheScope`
    /// (absent members only), as its SDK requires.
    fn reply(&self, out: &mut Vec<Effect>, id: &RawValue, method: &str, mut result: Value) {
        if self.era == Some(Era::Modern) {
            if let Some(o) = result.as_object_mut() {
                o.entry("resultType").or_insert_with(|| json!("complete"));
                if actor::era::CACHEABLE.contains(&method) {
                    o.entry("ttlMs").or_insert_with(|| json!(0));
                    o.entry("cacheScope").or_insert_with(|| json!("private"));
                }
            }
        }
        reply(out, id, &result);
    }

    /// The endpoint's `initialize` result: its own name, the union of the sources'
    /// capabilities, and instructions that say which source says what.
    fn initialize_result(&self) -> Value {
        let asked = vocab::protocol::param_string(self.hello.as_deref(), "protocolVersion")
            .unwrap_or_default();
        let version = vocab::protocol::answered_version(&asked);
        json!({
            "protocolVersion": version,
            "capabilities": self.capabilities(),
            "serverInfo": {"name": self.plan.name, "version": env!("CARGO_PKG_VERSION"),
                "title": format!("mcp-supervisor endpoint {}", self.plan.name)},
            "instructions": self.instructions(),
        })
    }

    /// The endpoint's `server/discover` result (2026-07-28).
    fn discover_result(&self) -> Value {
        json!({
            "resultType": "complete",
            "supportedVersions": [MODERN_VERSION],
            "capabilities": self.capabilities(),
            "_meta": {vocab::protocol::META_SERVER_INFO: {"name": self.plan.name, "version": env!("CARGO_PKG_VERSION")}},
            "ttlMs": 0,
            "cacheScope": "private",
            "instructions": self.instructions(),
        })
    }

    /// The union of the sources' capabilities; `tools.listChanged` always (a source that
    /// comes up later is announced).
    fn capabilities(&self) -> Value {
        let mut caps = json!({"tools": {"listChanged": true}});
        for s in &self.sources {
            if let Some(c) = s.hello.as_ref().and_then(|h| h.get("capabilities")) {
                union(&mut caps, c);
            }
        }
        for k in ["prompts", "resources"] {
            if let Some(o) = caps.get_mut(k).and_then(Value::as_object_mut) {
                o.insert("listChanged".into(), json!(true));
            }
        }
        caps
    }

    /// Which source says what: each source's description and state, and its own
    /// instructions beneath.
    fn instructions(&self) -> String {
        let mut text = format!(
            "This is the mcp-supervisor endpoint `{}`: the tools and prompts of {} servers in one place. Each tool and prompt is named SOURCE__NAME after the server it comes from; a call to a server that is down is answered with an error naming it.\n",
            self.plan.name,
            self.plan.sources.len()
        );
        for ((name, description), s) in self.plan.sources.iter().zip(&self.sources) {
            text.push_str(&format!("\n## {name}"));
            if let Some(d) = description {
                text.push_str(&format!(": {d}"));
            }
            text.push('\n');
            if !s.open {
                text.push_str("Not available to this client.\n");
                continue;
            }
            match (&s.hello, &s.down) {
                (None, down) => text.push_str(&format!(
                    "Unavailable ({}); its tools are not known yet.\n",
                    down.as_deref().unwrap_or("starting")
                )),
                (Some(h), _) => {
                    if let Some(i) = h.get("instructions").and_then(Value::as_str) {
                        text.push_str(i.trim());
                        text.push('\n');
                    }
                }
            }
        }
        text
    }

    /// The status tool's answer: each source's state as the daemon knows it now.
    fn status_result(&self) -> Value {
        let mut lines = Vec::new();
        let mut sources = Vec::new();
        for ((name, _), s) in self.plan.sources.iter().zip(&self.sources) {
            let state = if s.open {
                support::observe::readiness()
                    .state(name)
                    .unwrap_or("unknown")
                    .to_string()
            } else {
                "not available to this client".to_string()
            };
            lines.push(format!("{name}: {state}"));
            sources.push(json!({"server": name, "state": state}));
        }
        json!({
            "content": [{"type": "text", "text": lines.join("\n")}],
            "structuredContent": {"endpoint": self.plan.name, "sources": sources},
        })
    }

    /// The answer when the source's actor closed this client: the outage vocabulary, named.
    /// Gives the request id it shows and the JSON-RPC code, if it was an error.
    fn closed_answer(
        &self,
        source: usize,
        id: &RawValue,
        method: &str,
        out: &mut Vec<Effect>,
    ) -> (RequestId, Option<i64>) {
        let rid = RequestId::random();
        let name = self.source_name(source).to_string();
        warn!(endpoint = %self.plan.name, source = %name, request_id = %rid, method,
            "a request for a source this client is no longer joined to");
        let record = json!({"server": name, "status": "stopped", "reason": "disconnected",
            "class": "unreachable", "detail": "connection_dropped", "request_id": rid.to_string()});
        if method == "tools/call" {
            let text = format!("server={name} status=stopped reason=disconnected request_id={rid}");
            let result = json!({"content": [{"type": "text", "text": text}], "isError": true,
                "_meta": {"mcp-supervisor/outage": record}});
            self.reply(out, id, "tools/call", result);
            (rid, None)
        } else {
            error(
                out,
                id,
                code::SERVER_UNAVAILABLE,
                &format!("server `{name}` is unavailable (stopped)"),
                Some(record),
            );
            (rid, Some(code::SERVER_UNAVAILABLE))
        }
    }
}

// ---- helpers -------------------------------------------------------------------------------

fn reply(out: &mut Vec<Effect>, id: &RawValue, result: &Value) {
    out.push(Effect::Client(
        Address::Response(id_key(id)),
        Line::from(message::result_response(id, result)),
    ));
}

fn error(out: &mut Vec<Effect>, id: &RawValue, code: i64, text: &str, data: Option<Value>) {
    out.push(Effect::Client(
        Address::Response(id_key(id)),
        Line::from(message::error_response(id, code, text, data)),
    ));
}

/// A request (`id` given) or notification to a source.
fn request(id: Option<u64>, method: Cow<'static, str>, params: Option<Box<RawValue>>) -> Message {
    Message {
        kind: if id.is_some() {
            Kind::Request
        } else {
            Kind::Notification
        },
        id: id.map(message::raw_u64),
        method: Some(method),
        params,
        result: None,
        error: None,
    }
}

/// A copy of the client's notification.
fn notification(m: &Message) -> Message {
    Message {
        kind: Kind::Notification,
        id: None,
        method: m.method.clone(),
        params: m.params.clone(),
        result: None,
        error: None,
    }
}

/// Whether a connection whose first message is `m` is a 2026-07-28 client (as
/// [`Conn::on_client`] decides it): `server/discover`, or a request with the envelope.
pub fn modern_first(m: &Message) -> bool {
    m.method() != "initialize"
        && (m.method() == "server/discover" || has_envelope(m.params.as_deref()))
}

/// Whether params carry the 2026-07-28 per-request envelope: `params._meta` names a protocol
/// version as a string, read by the envelope parser the actor and the HTTP front read it with
/// ([`vocab::protocol::envelope_version`], issue 48 §4). It was a substring search of the raw
/// text, which took a request whose arguments merely mention the key, a version that is not a
/// string or a `_meta` that is not an object for a 2026-07-28 client.
fn has_envelope(params: Option<&RawValue>) -> bool {
    vocab::protocol::envelope_version(params).is_some()
}

/// `{"_meta": {…}}` holding only the 2026-07-28 envelope keys of `params._meta`.
fn envelope_of(params: Option<&RawValue>) -> Option<Box<RawValue>> {
    let o = RawObject::parse(params?)?;
    let meta = RawObject::parse(o.get("_meta")?)?;
    let kept = RawObject(
        meta.0
            .into_iter()
            .filter(|(k, _)| vocab::protocol::ENVELOPE_KEYS.contains(&k.as_str()))
            .collect(),
    );
    let mut out = RawObject::default();
    out.set("_meta", kept.to_raw());
    Some(out.to_raw())
}

/// `params` with member `key` set to the string `value`.
fn rename(params: Option<&RawValue>, key: &str, value: &str) -> Option<Box<RawValue>> {
    let mut o = params.and_then(RawObject::parse).unwrap_or_default();
    o.set(key, message::raw(&json!(value)));
    Some(o.to_raw())
}

/// `params` with `ref.name` set to `value` (a completion of a prompt's argument).
fn rename_ref(params: Option<&RawValue>, value: &str) -> Option<Box<RawValue>> {
    let mut o = params.and_then(RawObject::parse).unwrap_or_default();
    let r = o.get("ref").map(|r| rename(Some(r), "name", value));
    if let Some(Some(r)) = r {
        o.set("ref", r);
    }
    Some(o.to_raw())
}

/// `params` without member `key`.
fn without(params: &RawValue, key: &str) -> Box<RawValue> {
    match RawObject::parse(params) {
        Some(mut o) => {
            o.0.retain(|(k, _)| k != key);
            o.to_raw()
        }
        None => params.to_owned(),
    }
}

fn with_cursor(params: Option<&RawValue>, cursor: &str) -> Box<RawValue> {
    let mut o = params.and_then(RawObject::parse).unwrap_or_default();
    o.set("cursor", message::raw(&json!(cursor)));
    o.to_raw()
}

/// A page of a merged list: `PAGE` items from `offset`, with the cursor of the next page.
fn page_of(kind: ListKind, items: &[Value], offset: usize, snap: u64) -> Value {
    let end = offset.saturating_add(PAGE).min(items.len());
    let slice = items.get(offset.min(end)..end).unwrap_or(&[]);
    let mut o = Map::new();
    o.insert(kind.field().into(), Value::Array(slice.to_vec()));
    if end < items.len() {
        o.insert("nextCursor".into(), json!(format!("{snap}.{end}")));
    }
    Value::Object(o)
}

fn parse_cursor(c: &str) -> Option<(u64, usize)> {
    let (a, b) = c.split_once('.')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// Deep union of two capability objects: objects merged member by member, `true` winning.
fn union(into: &mut Value, from: &Value) {
    match (into, from) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                match a.get_mut(k) {
                    Some(existing) => union(existing, v),
                    None => {
                        a.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (Value::Bool(a), Value::Bool(b)) => *a = *a || *b,
        _ => {}
    }
}

/// The status tool as it is listed.
fn status_tool(name: &str, endpoint: &str) -> Value {
    json!({
        "name": name,
        "description": format!("Reports the state of each server behind the mcp-supervisor endpoint `{endpoint}` (ready, starting, backoff, failed, stopped, idle, auth_required). Call it when a tool of a server fails as unavailable."),
        "inputSchema": {"type": "object", "properties": {}},
        "_meta": {"mcp-supervisor/source": endpoint},
    })
}

#[cfg(test)]
mod tests;
