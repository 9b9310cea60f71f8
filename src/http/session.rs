//! Handshake-era HTTP sessions (2025-03-26 ... 2025-11-25 transports §Session Management):
//! `initialize` opens one, `Mcp-Session-Id` names it, DELETE or `http_session_idle` ends it.
//! A session is one client of the server actor for its whole life.
//!
//! Where the actor's lines for the session go (the session's *pump*):
//! - a response to the POST stream that sent its request (by the client's id), SSE or JSON;
//! - `notifications/progress` to the POST stream whose request carried that progress token,
//!   when it is an SSE stream (a JSON body carries only responses);
//! - anything else (the child's requests, log messages, list changes, resource updates) to
//!   the most recently opened SSE POST stream still open, else the newest GET stream still
//!   open (each message on exactly one stream), else: a notification waits in a bounded
//!   backlog delivered when a stream opens ([`BACKLOG`] lines; the oldest are dropped and
//!   counted in the log); a request of the child is answered at once, by the session as the
//!   client would, with a JSON-RPC error naming why, so the child's own fallback runs
//!   instead of waiting `request_timeout` (issue 26 §7).
//!
//! A client may open several GET streams (2025-03-26 transports: "the client MAY remain
//! connected to multiple SSE streams simultaneously"); the newest carries the messages, and
//! beyond [`GET_STREAMS`] the oldest is closed.
//!
//! A session answers only the [`Caller`] that opened it: a request naming it from another
//! (another transport, token or uid) gets the same 404 as an unknown id (issue 26 §5). Its
//! id is logged at debug level only.
//!
//! When a server's `http_max_sessions` sessions are open, `initialize` ends the session idle
//! longest among those with no stream open ([`make_room`]), rather than being refused. A
//! caller holding [`caller_share`] (three quarters) of them may end only its own, and when
//! every session has a stream open, another caller's newcomer ends the least active session
//! of such a caller: one token holder never keeps the others out (issue 26 §4).
//!
//! A POST stream dropped with requests unanswered (the client closed it) sends
//! `notifications/cancelled` for each to the actor, as if the client had (issue 16 §3); late
//! answers to them are dropped.

use super::access::Caller;
use super::stream::{self, OnDrop};
use super::{
    accepts_sse, header, header_str, json_body, log_allowed, plain, rpc_error, trim_newline,
    Charge, Entry, Front, HeaderMap, HeaderValue, IntoResponse, Response, StatusCode,
    SESSION_HEADER, VERSION_HEADER,
};
use crate::jsonrpc::framing::Line;
use crate::jsonrpc::message::{self, code, Kind, Message};
use crate::mux::era;
use crate::mux::ids::id_key;
use crate::mux::session::{ClientId, ClientTx, Outbox, Peer, SessionEvent, Transport};
use bytes::Bytes;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

/// Lines kept for a session with no open stream.
pub const BACKLOG: usize = 256;
/// GET streams open at once per session; a newer one closes the oldest.
pub const GET_STREAMS: usize = 4;
/// Lines queued toward one HTTP response stream before it is closed as too slow.
const STREAM_QUEUE: usize = 1024;
/// How often idle sessions are looked for.
const REAP_EVERY: Duration = Duration::from_secs(10);

/// One handshake-era session.
#[derive(Debug)]
pub struct HttpSession {
    /// The `Mcp-Session-Id` (128 random bits, hex).
    pub id: String,
    /// The server it belongs to.
    pub server: String,
    /// Who opened it: the only caller it answers.
    owner: Caller,
    client: ClientId,
    events: mpsc::Sender<SessionEvent>,
    routes: Mutex<Routes>,
    /// Cancelled when the session ends (DELETE, expiry, the actor closed it, shutdown).
    ended: CancellationToken,
}

#[derive(Debug, Default)]
struct Routes {
    next_stream: u64,
    /// Unanswered request id (canonical key) → the POST stream awaiting it.
    by_id: HashMap<String, u64>,
    /// Progress token (canonical key) → the POST stream of the request that carries it.
    by_token: HashMap<String, u64>,
    /// Open POST streams.
    streams: BTreeMap<u64, PostStream>,
    /// The GET streams, oldest first (at most [`GET_STREAMS`]); closed ones are pruned.
    gets: Vec<mpsc::Sender<Bytes>>,
    backlog: VecDeque<Bytes>,
    /// Requests whose stream closed before their answer: their late answers are dropped.
    abandoned: HashSet<String>,
    last_active: Option<Instant>,
}

#[derive(Debug)]
struct PostStream {
    tx: mpsc::Sender<Bytes>,
    /// An SSE stream (it may carry requests and notifications); else a JSON body, which
    /// carries only the responses to its requests.
    sse: bool,
    /// Ids (canonical keys) not answered yet, with the id as the client wrote it.
    pending: Vec<(String, Box<serde_json::value::RawValue>)>,
    tokens: Vec<String>,
}

/// The session `sid` of `server`, if open and opened by `caller` (to anyone else it does not
/// exist).
pub(super) fn find(
    front: &Front,
    server: &str,
    sid: &str,
    caller: Caller,
) -> Option<Arc<HttpSession>> {
    let s = front
        .sessions
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(sid)
        .cloned()?;
    if s.server != server || s.ended.is_cancelled() {
        return None;
    }
    if s.owner != caller {
        debug!(server, client = %s.client, session = %s.id, "HTTP request naming a session another peer opened: answered as unknown");
        return None;
    }
    Some(s)
}

/// The most sessions of one server a single [`Caller`] (one token on TCP, one uid on
/// `NAME.http.sock`) may make room for by ending others': three quarters of
/// `http_max_sessions`, at least 1 (issue 26 §4).
pub fn caller_share(max: usize) -> usize {
    max.saturating_sub(max / 4).max(1)
}

/// Makes room for one more session of `server` opened by `caller` (`max`:
/// `http_max_sessions`); `false` when there is none (the newcomer is then refused). Below
/// `max` there is room. At `max`, a caller holding [`caller_share`] or more may end only one of
/// its own sessions: the one idle longest with no stream open. Any other caller ends the
/// session idle longest with no stream open, of anyone; when every one has a stream open, the
/// least active session of a caller holding its share or more (so one token holder that keeps
/// a stream open on every session never keeps the others out, and cannot end theirs).
pub(super) async fn make_room(front: &Front, server: &str, max: usize, caller: Caller) -> bool {
    let now = Instant::now();
    let victim = {
        let mut all = front.sessions.lock().unwrap_or_else(|p| p.into_inner());
        let mine: Vec<&Arc<HttpSession>> = all
            .values()
            .filter(|s| s.server == server && !s.ended.is_cancelled())
            .collect();
        if mine.len() < max {
            return true;
        }
        let share = caller_share(max);
        let held_by = |c: Caller| mine.iter().filter(|s| s.owner == c).count();
        let idle_longest = |pool: &mut dyn Iterator<Item = &&Arc<HttpSession>>| {
            pool.filter_map(|s| s.idle_since().map(|t| (s.id.clone(), t)))
                .min_by_key(|(_, t)| *t)
                .map(|(sid, _)| sid)
        };
        let chosen = if held_by(caller) >= share {
            idle_longest(&mut mine.iter().filter(|s| s.owner == caller))
                .map(|sid| (sid, "http_max_sessions are open"))
        } else {
            idle_longest(&mut mine.iter())
                .map(|sid| (sid, "http_max_sessions are open"))
                .or_else(|| {
                    mine.iter()
                        .filter(|s| held_by(s.owner) >= share)
                        .min_by_key(|s| s.eviction_rank())
                        .map(|s| (s.id.clone(), "a caller holds its share of http_max_sessions, each with a stream open"))
                })
        };
        let Some((sid, why)) = chosen else {
            return false;
        };
        // Out of the table now, so a concurrent `initialize` does not pick it too.
        all.remove(&sid).map(|s| (s, why))
    };
    let Some((s, why)) = victim else {
        return false;
    };
    let idle = now.saturating_duration_since(s.eviction_rank().1.unwrap_or(now));
    if let Some(suppressed) = log_allowed(&front.limits_log) {
        info!(server, client = %s.client, idle_s = idle.as_secs(), max, suppressed,
            "HTTP sessions full ({why}): ended the least active one to make room for a new one");
    }
    s.ended.cancel();
    let _ = s.events.send(SessionEvent::Disconnected(s.client)).await;
    true
}

/// Opens a session for `caller`: a new client of the actor, and its pump. `None` when the
/// actor is gone.
pub(super) async fn open(
    front: &Arc<Front>,
    entry: &Entry,
    peer: Peer,
    owner: Caller,
) -> Option<Arc<HttpSession>> {
    let id = random_hex(16);
    let client = ClientId::next();
    let (tx, outbox) = ClientTx::channel(entry.cfg.client_queue, &front.stop);
    let events = entry.handle.sessions.clone();
    let peer = Peer {
        transport: Transport::HttpSession,
        ..peer
    };
    events
        .send(SessionEvent::Connected(client, tx, peer))
        .await
        .ok()?;
    let s = Arc::new(HttpSession {
        id: id.clone(),
        server: entry.cfg.name.clone(),
        owner,
        client,
        events,
        routes: Mutex::new(Routes {
            last_active: Some(Instant::now()),
            ..Routes::default()
        }),
        ended: front.stop.child_token(),
    });
    front
        .sessions
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(id, s.clone());
    info!(server = %s.server, client = %client, uid = peer.uid, "HTTP session opened");
    debug!(client = %client, session = %s.id, "HTTP session id");
    tokio::spawn(pump(Arc::downgrade(front), s.clone(), outbox));
    Some(s)
}

/// GET: a stream of the session for the child's requests and notifications (the newest open
/// one carries them; beyond [`GET_STREAMS`] the oldest is closed).
pub(super) fn get(front: &Front, server: &str, caller: Caller, headers: &HeaderMap) -> Response {
    let Some(sid) = header_str(headers, SESSION_HEADER) else {
        if header_str(headers, VERSION_HEADER)
            .is_some_and(|v| !era::HANDSHAKE_VERSIONS.contains(&v))
        {
            return method_not_allowed("2026-07-28 has no GET stream: use subscriptions/listen");
        }
        return rpc_error(
            StatusCode::BAD_REQUEST,
            None,
            code::INVALID_REQUEST,
            "Bad Request: Mcp-Session-Id header is required",
        );
    };
    let Some(s) = find(front, server, sid, caller) else {
        return not_found();
    };
    if !accepts_sse(headers) {
        return rpc_error(
            StatusCode::NOT_ACCEPTABLE,
            None,
            code::INVALID_REQUEST,
            "Not Acceptable: the GET stream is text/event-stream",
        );
    }
    let (tx, rx) = mpsc::channel(STREAM_QUEUE);
    {
        let mut r = s.lock();
        r.gets.retain(|g| !g.is_closed());
        if r.gets.len() >= GET_STREAMS {
            // Its sender dropped: that response ends.
            r.gets.remove(0);
            debug!(client = %s.client, "a newer GET stream of the HTTP session: closing the oldest");
        }
        r.last_active = Some(Instant::now());
        while let Some(b) = r.backlog.pop_front() {
            let _ = tx.try_send(b);
        }
        r.gets.push(tx);
    }
    let weak = Arc::downgrade(&s);
    stream::sse(
        rx,
        OnDrop::new(move || {
            if let Some(s) = weak.upgrade() {
                let mut r = s.lock();
                r.gets.retain(|g| !g.is_closed());
                r.last_active = Some(Instant::now());
            }
        }),
    )
}

/// DELETE: ends the session like a socket client's departure (its requests are cancelled
/// toward the child).
pub(super) async fn delete(
    front: &Front,
    server: &str,
    caller: Caller,
    headers: &HeaderMap,
) -> Response {
    let Some(sid) = header_str(headers, SESSION_HEADER) else {
        return method_not_allowed("DELETE needs an Mcp-Session-Id (2026-07-28 has no sessions)");
    };
    let Some(s) = find(front, server, sid, caller) else {
        return not_found();
    };
    info!(server = %s.server, client = %s.client, "HTTP session deleted by the client");
    s.ended.cancel();
    let _ = s.events.send(SessionEvent::Disconnected(s.client)).await;
    StatusCode::OK.into_response()
}

/// A request naming a session that is not open: 404 with -32001, as the TypeScript SDK
/// answers (2025-03-26 transports: the client must then initialize again without the id).
pub(super) fn not_found() -> Response {
    rpc_error(
        StatusCode::NOT_FOUND,
        None,
        code::REQUEST_TIMEOUT,
        "Session not found: it ended (DELETE, idle expiry or restart); initialize again",
    )
}

fn method_not_allowed(text: &'static str) -> Response {
    let mut r = plain(StatusCode::METHOD_NOT_ALLOWED, text);
    r.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static("POST"));
    r
}

impl HttpSession {
    fn lock(&self) -> std::sync::MutexGuard<'_, Routes> {
        self.routes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A POST in this session: notifications and responses are passed on (202); requests get
    /// their answers on this POST's response, as SSE when `sse` (with their progress), else
    /// as one JSON body (an array for a batch). The body's `Charge` on `client_memory` ends
    /// once the actor has the messages.
    pub(super) async fn post(
        self: &Arc<Self>,
        (msgs, charge): (Vec<Message>, Charge),
        batch: bool,
        sse: bool,
    ) -> Response {
        let mut pending = Vec::new();
        let mut tokens = Vec::new();
        for m in &msgs {
            if m.kind != Kind::Request {
                continue;
            }
            let Some(id) = m.id.as_deref() else { continue };
            if pending.iter().any(|(k, _)| *k == id_key(id)) {
                return rpc_error(
                    StatusCode::BAD_REQUEST,
                    Some(id),
                    code::INVALID_REQUEST,
                    "duplicate request id in one POST",
                );
            }
            pending.push((id_key(id), id.to_owned()));
            if let Some(t) = progress_token(m) {
                tokens.push(t);
            }
        }
        let stream = if pending.is_empty() {
            None
        } else {
            let expected = pending.len();
            match self.open_stream(pending, tokens, sse) {
                Ok((n, rx)) => Some((n, rx, expected)),
                Err(id) => {
                    // K23 at the HTTP layer: an id still unanswered in this session would make
                    // two streams wait for one answer.
                    return rpc_error(
                        StatusCode::OK,
                        Some(&id),
                        code::INVALID_REQUEST,
                        "duplicate request id: a request with this id is still in flight in this session",
                    );
                }
            }
        };
        for m in msgs {
            if self
                .events
                .send(SessionEvent::Message(self.client, m))
                .await
                .is_err()
            {
                self.ended.cancel();
                return rpc_error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    None,
                    code::SERVER_UNAVAILABLE,
                    "the server is not accepting messages now",
                );
            }
        }
        drop(charge);
        let Some((n, mut rx, expected)) = stream else {
            return StatusCode::ACCEPTED.into_response();
        };
        let weak = Arc::downgrade(self);
        let guard = OnDrop::new(move || {
            if let Some(s) = weak.upgrade() {
                s.stream_gone(n);
            }
        });
        if sse {
            return stream::sse(rx, guard);
        }
        // JSON: wait for every answer (only responses go in a JSON body).
        let mut answers = Vec::with_capacity(expected);
        while answers.len() < expected {
            let Some(b) = rx.recv().await else { break };
            if is_response(&b) {
                answers.push(b);
            }
        }
        drop(guard);
        if answers.is_empty() {
            return rpc_error(
                StatusCode::SERVICE_UNAVAILABLE,
                None,
                code::SERVER_UNAVAILABLE,
                "the session ended before the answer",
            );
        }
        let body = if batch {
            let mut v = Vec::with_capacity(answers.iter().map(Bytes::len).sum::<usize>() + 2);
            v.push(b'[');
            for (i, a) in answers.iter().enumerate() {
                if i > 0 {
                    v.push(b',');
                }
                v.extend_from_slice(a);
            }
            v.push(b']');
            Bytes::from(v)
        } else {
            answers.swap_remove(0)
        };
        json_body(StatusCode::OK, body)
    }

    /// Registers a POST stream awaiting the answers to `pending` (canonical key, id) and the
    /// progress of `tokens`; an `sse` one also takes the lines waiting for a stream, and may
    /// carry the child's requests and notifications. `Err(id)` when an id is already awaited
    /// by another stream of this session.
    fn open_stream(
        &self,
        pending: Vec<(String, Box<serde_json::value::RawValue>)>,
        tokens: Vec<String>,
        sse: bool,
    ) -> Result<(u64, mpsc::Receiver<Bytes>), Box<serde_json::value::RawValue>> {
        let mut r = self.lock();
        if let Some((_, id)) = pending.iter().find(|(k, _)| r.by_id.contains_key(k)) {
            return Err(id.clone());
        }
        let (tx, rx) = mpsc::channel(STREAM_QUEUE);
        r.last_active = Some(Instant::now());
        let n = r.next_stream;
        r.next_stream += 1;
        for (k, _) in &pending {
            r.abandoned.remove(k);
            r.by_id.insert(k.clone(), n);
        }
        for t in &tokens {
            r.by_token.insert(t.clone(), n);
        }
        if sse {
            while let Some(b) = r.backlog.pop_front() {
                if tx.try_send(b).is_err() {
                    break;
                }
            }
        }
        r.streams.insert(
            n,
            PostStream {
                tx,
                sse,
                pending,
                tokens,
            },
        );
        Ok((n, rx))
    }

    /// A POST stream was dropped: requests still unanswered on it are cancelled toward the
    /// actor (the client closed the stream), and their late answers dropped.
    fn stream_gone(&self, n: u64) {
        let cancels = {
            let mut r = self.lock();
            r.last_active = Some(Instant::now());
            let Some(st) = r.streams.remove(&n) else {
                return;
            };
            for t in &st.tokens {
                if r.by_token.get(t) == Some(&n) {
                    r.by_token.remove(t);
                }
            }
            let mut cancels = Vec::new();
            for (k, id) in st.pending {
                if r.by_id.get(&k) == Some(&n) {
                    r.by_id.remove(&k);
                    r.abandoned.insert(k);
                    cancels.push(id);
                }
            }
            cancels
        };
        if self.ended.is_cancelled() {
            return;
        }
        for id in cancels {
            debug!(client = %self.client, id = id.get(), "HTTP response stream closed before its answer: cancelling the request");
            let params = serde_json::json!({
                "requestId": serde_json::from_str::<serde_json::Value>(id.get()).unwrap_or_default(),
                "reason": "the HTTP response stream was closed",
            });
            let line = message::Out::request(
                None,
                "notifications/cancelled",
                Some(&message::raw(&params)),
            )
            .encode();
            if let Ok(m) = message::parse_shared(&line) {
                let ev = SessionEvent::Message(self.client, m);
                if let Err(mpsc::error::TrySendError::Full(ev)) = self.events.try_send(ev) {
                    let events = self.events.clone();
                    tokio::spawn(async move {
                        let _ = events.send(ev).await;
                    });
                }
            }
        }
    }

    /// Routes one line from the actor (module documentation): delivered, dropped, kept in
    /// the backlog, or, for a request of the child that no stream can carry, returned as
    /// [`Routed::Unanswerable`] for the pump to answer.
    fn route(&self, line: Bytes) -> Routed {
        let msg = trim_newline(line);
        let parsed = message::parse_shared(&msg).ok();
        let mut r = self.lock();
        match parsed.as_ref() {
            Some(m) if m.kind == Kind::Response => {
                let key = m.id.as_deref().map(id_key);
                match key {
                    Some(k) if r.abandoned.remove(&k) => return Routed::Done,
                    Some(k) => match r.by_id.remove(&k) {
                        Some(n) => {
                            let done = r.streams.get_mut(&n).map(|st| {
                                st.pending.retain(|(p, _)| *p != k);
                                st.pending.is_empty()
                            });
                            let full = r.streams.get(&n).is_some_and(|st| {
                                matches!(
                                    st.tx.try_send(msg),
                                    Err(mpsc::error::TrySendError::Full(_))
                                )
                            });
                            if full {
                                // A client that does not read its stream is closed, as a slow
                                // socket client is (R17); its other requests are cancelled.
                                drop(r);
                                warn!(client = %self.client, "HTTP response stream not read ({STREAM_QUEUE} lines queued): closing it");
                                self.stream_gone(n);
                                return Routed::Done;
                            }
                            if done == Some(true) {
                                // Every answer is in: the stream ends after it.
                                if let Some(st) = r.streams.remove(&n) {
                                    for t in st.tokens {
                                        r.by_token.remove(&t);
                                    }
                                }
                            }
                            return Routed::Done;
                        }
                        // A response nobody awaits (its stream ended): dropped, never given to
                        // another stream. Only id-less errors (`id: null`) go on below.
                        None if k != "null" => {
                            debug!(client = %self.client, id = %k, "response for no open stream dropped");
                            return Routed::Done;
                        }
                        None => {}
                    },
                    None => {}
                }
            }
            Some(m) if m.method() == "notifications/progress" => {
                let st = notified_token(m)
                    .and_then(|t| r.by_token.get(&t).copied())
                    .and_then(|n| r.streams.get(&n));
                match st {
                    Some(st) if st.sse => {
                        let _ = st.tx.try_send(msg);
                    }
                    // A JSON body carries no progress; or its request was answered or its
                    // stream closed: nobody waits for it.
                    _ => debug!(client = %self.client, "progress for no open SSE stream dropped"),
                }
                return Routed::Done;
            }
            _ => {}
        }
        // Anything else: the newest SSE POST stream, else the newest GET stream.
        let post = r
            .streams
            .values()
            .rev()
            .find(|st| st.sse && !st.tx.is_closed());
        if post.is_some_and(|st| st.tx.try_send(msg.clone()).is_ok()) {
            return Routed::Done;
        }
        r.gets.retain(|g| !g.is_closed());
        if r.gets
            .last()
            .is_some_and(|g| g.try_send(msg.clone()).is_ok())
        {
            return Routed::Done;
        }
        if let Some(m) = parsed.filter(|m| m.kind == Kind::Request) {
            let json_only = r.streams.values().any(|st| !st.sse);
            let open = !r.gets.is_empty() || r.streams.values().any(|st| st.sse);
            drop(r);
            if let Some(id) = m.id.clone() {
                let why = match (open, json_only) {
                    (true, _) => "its streams are not being read",
                    (false, true) => "its POST accepts only JSON (no text/event-stream) and it has no GET stream open",
                    (false, false) => "it has no POST stream or GET stream open",
                };
                return Routed::Unanswerable {
                    id,
                    method: m.method().to_string(),
                    why,
                };
            }
            return Routed::Done;
        }
        if r.backlog.len() >= BACKLOG {
            r.backlog.pop_front();
            warn!(client = %self.client, "HTTP session has no open stream and {BACKLOG} lines waiting: dropped the oldest");
        }
        r.backlog.push_back(msg);
        Routed::Done
    }

    /// Answers the actor, as the client would, a request of the child that no stream of this
    /// session can carry: a JSON-RPC error for its id (the actor passes it to the child).
    fn answer_unanswerable(&self, id: &serde_json::value::RawValue, method: &str, why: &str) {
        let text = format!(
            "the HTTP client cannot be asked `{method}` now: no stream can carry it ({why})"
        );
        let line = message::error_response(id, code::INTERNAL_ERROR, &text, None);
        let Ok(m) = message::parse_shared(&trim_newline(line)) else {
            return;
        };
        let ev = SessionEvent::Message(self.client, m);
        if let Err(mpsc::error::TrySendError::Full(ev)) = self.events.try_send(ev) {
            let events = self.events.clone();
            tokio::spawn(async move {
                let _ = events.send(ev).await;
            });
        }
    }

    /// Ends every stream (their senders are dropped, so each response ends).
    fn close_streams(&self) {
        let mut r = self.lock();
        r.streams.clear();
        r.gets.clear();
        r.by_id.clear();
        r.by_token.clear();
    }

    /// When the session last had a request or a stream, if it has no stream open now.
    fn idle_since(&self) -> Option<Instant> {
        let r = self.lock();
        let open = !r.streams.is_empty() || r.gets.iter().any(|g| !g.is_closed());
        if open {
            return None;
        }
        r.last_active
    }

    /// The order in which a caller's sessions are ended for room: those with no stream open
    /// first, then the least recently active.
    fn eviction_rank(&self) -> (bool, Option<Instant>) {
        let r = self.lock();
        let open = !r.streams.is_empty() || r.gets.iter().any(|g| !g.is_closed());
        (open, r.last_active)
    }

    /// Idle: no open stream and nothing for `idle`.
    fn idle_for(&self, idle: Duration, now: Instant) -> bool {
        self.idle_since()
            .is_some_and(|t| now.saturating_duration_since(t) >= idle)
    }
}

/// What became of a line from the actor ([`HttpSession::route`]).
#[derive(Debug)]
enum Routed {
    /// Delivered, dropped or kept: nothing more to do.
    Done,
    /// A request of the child that no stream can carry: the pump answers it with an error.
    Unanswerable {
        id: Box<serde_json::value::RawValue>,
        method: String,
        why: &'static str,
    },
}

/// Moves the actor's lines for a session to its streams until the actor closes it, the
/// session ends, or the client is kicked; then removes the session.
async fn pump(front: Weak<Front>, s: Arc<HttpSession>, mut outbox: Outbox) {
    let kicked = outbox.kicked();
    loop {
        let line: Option<Line> = tokio::select! {
            // The address is not read yet: `route` still finds it in the line.
            l = outbox.recv() => l.map(|(_, l)| l),
            _ = kicked.cancelled() => None,
            _ = s.ended.cancelled() => None,
        };
        let Some(l) = line.filter(|l| !l.is_empty()) else {
            break;
        };
        if let Routed::Unanswerable { id, method, why } = s.route(l.to_bytes()) {
            let logged = front.upgrade().and_then(|f| log_allowed(&f.questions_log));
            if let Some(suppressed) = logged {
                warn!(server = %s.server, client = %s.client, method, suppressed,
                    "a child's request for an HTTP session answered with an error at once: no stream can carry it ({why})");
            }
            s.answer_unanswerable(&id, &method, why);
        }
    }
    let by_client = !s.ended.is_cancelled();
    s.ended.cancel();
    s.close_streams();
    if let Some(front) = front.upgrade() {
        front
            .sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&s.id);
    }
    if by_client {
        let _ = s.events.send(SessionEvent::Disconnected(s.client)).await;
    }
    info!(server = %s.server, client = %s.client, "HTTP session ended");
}

/// Ends sessions idle past `http_session_idle`, every [`REAP_EVERY`], while the front lives.
pub(super) async fn reap(front: Weak<Front>) {
    loop {
        tokio::time::sleep(REAP_EVERY).await;
        let Some(f) = front.upgrade() else { return };
        if f.stop.is_cancelled() {
            return;
        }
        let idle = f.settings().session_idle;
        let now = Instant::now();
        let expired: Vec<Arc<HttpSession>> = f
            .sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .filter(|s| s.idle_for(idle, now))
            .cloned()
            .collect();
        drop(f);
        for s in expired {
            info!(server = %s.server, client = %s.client, idle_s = idle.as_secs(), "HTTP session idle past http_session_idle: ending it");
            s.ended.cancel();
            let _ = s.events.send(SessionEvent::Disconnected(s.client)).await;
        }
    }
}

/// `params._meta.progressToken` as a canonical key.
fn progress_token(m: &Message) -> Option<String> {
    let p = m.params.as_deref()?;
    if !p.get().contains("progressToken") {
        return None;
    }
    let v: serde_json::Value = serde_json::from_str(p.get()).ok()?;
    let t = v.get("_meta")?.get("progressToken")?;
    let raw = serde_json::value::to_raw_value(t).ok()?;
    Some(id_key(&raw))
}

/// `params.progressToken` of a `notifications/progress`, as a canonical key.
pub(super) fn notified_token(m: &Message) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(m.params.as_deref()?.get()).ok()?;
    let raw = serde_json::value::to_raw_value(v.get("progressToken")?).ok()?;
    Some(id_key(&raw))
}

/// Whether a line is a JSON-RPC response.
fn is_response(line: &Bytes) -> bool {
    message::parse_shared(line).is_ok_and(|m| m.kind == Kind::Response)
}

/// `n` random bytes as lowercase hex (the OS's generator).
pub(crate) fn random_hex(n: usize) -> String {
    use rand::RngCore;
    let mut b = vec![0u8; n];
    rand::rngs::OsRng.fill_bytes(&mut b);
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
mod props {
    use super::*;
    use proptest::prelude::*;

    fn session() -> (Arc<HttpSession>, mpsc::Receiver<SessionEvent>) {
        let (events, inbox) = mpsc::channel(1024);
        let s = Arc::new(HttpSession {
            id: "test".into(),
            server: "s".into(),
            owner: Caller::Unix { uid: 0 },
            client: ClientId(1),
            events,
            routes: Mutex::new(Routes::default()),
            ended: CancellationToken::new(),
        });
        (s, inbox)
    }

    /// An opened stream: its receiver (None once closed), the ids it awaits, its number,
    /// whether it is SSE.
    type OpenedStream = (Option<mpsc::Receiver<Bytes>>, Vec<String>, u64, bool);

    #[derive(Debug, Clone)]
    enum Op {
        /// A POST with requests of these ids (small, so they collide across streams), whose
        /// answer is an SSE stream (else one JSON body).
        Open(Vec<u8>, bool),
        /// The actor answers id.
        Respond(u8),
        /// The actor sends a notification (progress for a token, or anything else).
        Notify(Option<u8>),
        /// The child asks the client something (a request of its own).
        Ask,
        /// The client closes the n-th stream it opened.
        Close(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (proptest::collection::vec(0u8..12, 1..4), any::<bool>())
                .prop_map(|(ids, sse)| Op::Open(ids, sse)),
            (0u8..12).prop_map(Op::Respond),
            proptest::option::of(0u8..12).prop_map(Op::Notify),
            Just(Op::Ask),
            (0usize..8).prop_map(Op::Close),
        ]
    }

    proptest! {
        /// Whatever the order of POSTs, answers, notifications, the child's questions and
        /// closed streams: a response reaches only the stream that sent a request with its
        /// id, at most once; a JSON stream gets nothing but responses; each question of the
        /// child goes on exactly one SSE stream, or is handed back to be answered with an
        /// error; a closed stream's unanswered requests are cancelled toward the actor.
        #[test]
        fn responses_reach_only_their_own_stream(ops in proptest::collection::vec(op(), 1..60)) {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async move {
                let (s, mut inbox) = session();
                let mut streams: Vec<OpenedStream> = Vec::new();
                let mut got: Vec<Vec<serde_json::Value>> = Vec::new();
                let mut cancelled = 0usize;
                let mut asked = 0usize;
                let mut unanswerable = 0usize;
                for op in ops {
                    match op {
                        Op::Ask => {
                            asked += 1;
                            let line = format!(r#"{{"jsonrpc":"2.0","id":"s{asked}","method":"elicitation/create","params":{{}}}}"#);
                            if let Routed::Unanswerable { id, .. } = s.route(Bytes::from(line)) {
                                prop_assert_eq!(id.get(), format!("\"s{asked}\""));
                                unanswerable += 1;
                            }
                        }
                        Op::Open(ids, sse) => {
                            let mut pending: Vec<(String, Box<serde_json::value::RawValue>)> = Vec::new();
                            for i in ids {
                                let raw = message::raw_u64(u64::from(i));
                                let k = id_key(&raw);
                                if !pending.iter().any(|(p, _)| *p == k) {
                                    pending.push((k, raw));
                                }
                            }
                            let keys: Vec<String> = pending.iter().map(|(k, _)| k.clone()).collect();
                            let tokens = keys.iter().map(|k| format!("t{k}")).collect();
                            if let Ok((n, rx)) = s.open_stream(pending, tokens, sse) {
                                streams.push((Some(rx), keys, n, sse));
                                got.push(Vec::new());
                            }
                        }
                        Op::Respond(i) => {
                            let _ = s.route(Bytes::from(format!(r#"{{"jsonrpc":"2.0","id":{i},"result":{{}}}}"#)));
                        }
                        Op::Notify(Some(t)) => {
                            let _ = s.route(Bytes::from(format!(
                                r#"{{"jsonrpc":"2.0","method":"notifications/progress","params":{{"progressToken":"t{t}","progress":1}}}}"#
                            )));
                        }
                        Op::Notify(None) => {
                            let _ = s.route(Bytes::from_static(
                                br#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":1}}"#,
                            ));
                        }
                        Op::Close(i) => {
                            if let Some((rx, _, n, _)) = streams.get_mut(i) {
                                if let Some(mut rx) = rx.take() {
                                    while let Ok(b) = rx.try_recv() {
                                        got[i].push(serde_json::from_slice(&b).unwrap());
                                    }
                                    drop(rx);
                                    s.stream_gone(*n);
                                }
                            }
                        }
                    }
                    while let Ok(ev) = inbox.try_recv() {
                        if let SessionEvent::Message(_, m) = ev {
                            prop_assert_eq!(m.method(), "notifications/cancelled");
                            cancelled += 1;
                        }
                    }
                }
                for (i, (rx, _, _, _)) in streams.iter_mut().enumerate() {
                    if let Some(rx) = rx.as_mut() {
                        while let Ok(b) = rx.try_recv() {
                            got[i].push(serde_json::from_slice(&b).unwrap());
                        }
                    }
                }
                let mut questions = HashSet::new();
                for (i, lines) in got.iter().enumerate() {
                    let mine = &streams[i].1;
                    if !streams[i].3 {
                        prop_assert!(
                            lines.iter().all(|v| v.get("method").is_none()),
                            "JSON stream {} got {:?}", i, lines
                        );
                    }
                    for v in lines.iter().filter(|v| v["method"] == "elicitation/create") {
                        prop_assert!(questions.insert(v["id"].to_string()), "question {} on two streams", v["id"]);
                    }
                    let mut seen = HashSet::new();
                    for v in lines.iter().filter(|v| v.get("method").is_none() && !v["id"].is_null()) {
                        let k = v["id"].to_string();
                        prop_assert!(mine.contains(&k), "stream {} got a response to {} (awaits {:?})", i, k, mine);
                        prop_assert!(seen.insert(k.clone()), "stream {} got {} twice", i, k);
                    }
                    for v in lines.iter().filter(|v| v["method"] == "notifications/progress") {
                        let t = v["params"]["progressToken"].as_str().unwrap_or("").trim_start_matches('t').to_string();
                        prop_assert!(mine.contains(&t), "stream {} got progress for token {}", i, t);
                    }
                }
                // With no GET stream in play, every question the streams could not carry was
                // handed back: none waits in the backlog.
                prop_assert_eq!(questions.len() + unanswerable, asked);
                let _ = cancelled;
                Ok(())
            })?;
        }
    }
}
