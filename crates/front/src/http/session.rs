//! Handshake-era HTTP sessions (2025-03-26 ... 2025-11-25 transports §Session Management):
//! `initialize` opens one, `Mcp-Session-Id` names it, DELETE or `http_session_idle` ends it.
//! A session is one client of the server actor for its whole life.
//!
//! Where the actor's lines for the session go is decided by the session's *pump*, the one
//! task that owns its routing table ([`Router`], `router.rs`). The actor addresses each line
//! ([`actor::session::Address`]: a response by its request's id, progress by its token,
//! a request toward the client, a listen stream's traffic, or session-wide), so the pump
//! never parses an outgoing line and takes no lock for one. Streams register with the pump
//! and leave through its control channel ([`Ctl`]), in the order their handlers send them.
//! The routes:
//! - a response to the POST stream that sent its request (by the client's id), SSE or JSON;
//! - `notifications/progress` to the POST stream whose request carried that progress token,
//!   when it is an SSE stream (a JSON body carries only responses);
//! - anything else (the child's requests, log messages, list changes, resource updates) to
//!   the most recently opened SSE POST stream still open, else the newest GET stream still
//!   open (each message on exactly one stream), else: a notification waits in a bounded
//!   backlog delivered when a stream opens ([`BACKLOG`](super::router::BACKLOG) lines; the
//!   oldest are dropped and counted in the log); a request of the child is answered at once,
//!   by the session as the client would, with a JSON-RPC error naming why, so the child's
//!   own fallback runs instead of waiting `request_timeout` (issue 26 §7).
//!
//! A client may open several GET streams (2025-03-26 transports: "the client MAY remain
//! connected to multiple SSE streams simultaneously"); the newest carries the messages, and
//! beyond [`GET_STREAMS`](super::router::GET_STREAMS) the oldest is closed.
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
use super::router::{Routed, Router, STREAM_QUEUE};
use super::saved::{self, Saved};
use super::stream::{self, OnDrop};
use super::{
    accepts_sse, header, header_str, json_body, log_allowed, plain, rpc_error, trim_newline,
    Charge, Entry, Front, HeaderMap, HeaderValue, IntoResponse, Response, StatusCode,
    SESSION_HEADER, VERSION_HEADER,
};
use actor::era;
use actor::ids::id_key;
use actor::seats::Holder;
use actor::session::{ClientId, ClientTx, Outbox, Peer, SessionEvent, Transport};
use bytes::Bytes;
use serde_json::value::RawValue;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};
use vocab::jsonrpc::message::{self, code, Kind, Message};

/// Who a session belongs to for the share of `http_max_sessions`: the caller it answers and
/// the user (or pod) behind it, when known ([`HttpSession::holder`]).
pub(super) type Owner = (Caller, Option<Holder>);

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
    /// The user (or pod) that opened it, when known (not for a session restored from the
    /// last run's record): the share of sessions is kept per caller and holder, so users
    /// sharing one token, or one user with two tokens, are each held to their own (issue 47
    /// §4).
    holder: Option<Holder>,
    client: ClientId,
    events: mpsc::Sender<SessionEvent>,
    /// The pump's control inbox: streams opening and leaving. Unbounded, but each message
    /// stands for one HTTP request being handled (a POST stream's opening and its end, a
    /// GET stream's opening), so it holds at most two per request in progress.
    ctl: mpsc::UnboundedSender<Ctl>,
    /// The next POST stream's number (numbers grow in the order POSTs arrive).
    next_stream: AtomicU64,
    activity: Activity,
    /// Cancelled when the session ends (DELETE, expiry, the actor closed it, shutdown).
    ended: CancellationToken,
    /// The peer's uid and gid as the actor knows them (recorded for a restore).
    peer_ids: (u32, u32),
    /// The client's `initialize` params once sent, and whether it sent
    /// `notifications/initialized`: what a restore replays (issue 32 §2, [`super::saved`]).
    handshake: std::sync::Mutex<(Option<Box<RawValue>>, bool)>,
    /// The front, told when the handshake is known so the session is recorded.
    front: Weak<Front>,
}

/// What a request handler tells the pump ([`pump`]) about the session's streams.
#[derive(Debug)]
enum Ctl {
    /// POST stream `n` opens, awaiting the answers to `pending` (canonical key, id as
    /// written) and the progress of `tokens`; `reply` says whether it was taken (`Err(id)`:
    /// an id another stream awaits). Its end is always followed by [`Ctl::PostGone`].
    Post {
        n: u64,
        pending: Vec<(String, Box<RawValue>)>,
        tokens: Vec<String>,
        sse: bool,
        tx: mpsc::Sender<Bytes>,
        reply: oneshot::Sender<Result<(), Box<RawValue>>>,
    },
    /// POST stream `n` was dropped (answered, closed by the client, or refused).
    PostGone(u64),
    /// A GET stream opens.
    Get(mpsc::Sender<Bytes>),
}

/// When a session was last used and whether a stream of it is open, for `make_room` and
/// the idle reaper, which read it from other tasks (two atomics, no lock).
#[derive(Debug)]
struct Activity {
    epoch: Instant,
    /// Response streams (POST or GET) whose response has not been dropped yet.
    open: AtomicUsize,
    /// Milliseconds after `epoch` of the last stream opened or closed (0: the session's
    /// opening).
    last_ms: AtomicU64,
}

impl Activity {
    fn new() -> Self {
        Activity {
            epoch: Instant::now(),
            open: AtomicUsize::new(0),
            last_ms: AtomicU64::new(0),
        }
    }

    fn touch(&self) {
        let ms = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    /// A response stream opens; each is closed exactly once ([`Activity::closed`], by its
    /// `OnDrop`).
    fn opened(&self) {
        self.open.fetch_add(1, Ordering::Relaxed);
        self.touch();
    }

    fn closed(&self) {
        self.open.fetch_sub(1, Ordering::Relaxed);
        self.touch();
    }

    /// Whether a stream is open, and when one last opened or closed.
    fn rank(&self) -> (bool, Instant) {
        let last = self.epoch + Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
        (self.open.load(Ordering::Relaxed) > 0, last)
    }
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
pub(super) async fn make_room(front: &Front, server: &str, max: usize, caller: Owner) -> bool {
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
        let held_by = |c: Owner| mine.iter().filter(|s| s.key() == c).count();
        let idle_longest = |pool: &mut dyn Iterator<Item = &&Arc<HttpSession>>| {
            pool.filter_map(|s| s.idle_since().map(|t| (s.id.clone(), t)))
                .min_by_key(|(_, t)| *t)
                .map(|(sid, _)| sid)
        };
        let chosen = if held_by(caller) >= share {
            idle_longest(&mut mine.iter().filter(|s| s.key() == caller))
                .map(|sid| (sid, "http_max_sessions are open"))
        } else {
            idle_longest(&mut mine.iter())
                .map(|sid| (sid, "http_max_sessions are open"))
                .or_else(|| {
                    mine.iter()
                        .filter(|s| held_by(s.key()) >= share)
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
    owner: Owner,
) -> Option<Arc<HttpSession>> {
    open_as(front, entry, peer, owner, random_hex(16)).await
}

/// Opens the session a record names again, with its id and owner, and replays its
/// handshake to the actor (issue 32 §2): the answer is dropped (no stream awaits it), the
/// client already has it.
pub(super) async fn restore(front: &Arc<Front>, entry: &Entry, peer: Peer, saved: Saved) -> bool {
    let Saved {
        id,
        owner,
        initialize,
        initialized,
        ..
    } = saved;
    let Some(s) = open_as(front, entry, peer, (owner, None), id).await else {
        return false;
    };
    let line = format!(
        r#"{{"jsonrpc":"2.0","id":"mcp-supervisor-restore","method":"initialize","params":{}}}"#,
        initialize.get()
    );
    let mut msgs = vec![message::parse_one(line.as_bytes())];
    if initialized {
        msgs.push(message::parse_one(
            br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        ));
    }
    *s.handshake.lock().unwrap_or_else(|p| p.into_inner()) = (Some(initialize), initialized);
    for m in msgs.into_iter().flatten() {
        if s.events
            .send(SessionEvent::Message(s.client, m))
            .await
            .is_err()
        {
            s.ended.cancel();
            return false;
        }
    }
    info!(server = %s.server, client = %s.client, "HTTP session restored from the record of the last run");
    true
}

/// Opens session `id`.
async fn open_as(
    front: &Arc<Front>,
    entry: &Entry,
    peer: Peer,
    (owner, holder): Owner,
    id: String,
) -> Option<Arc<HttpSession>> {
    let client = ClientId::next();
    let (tx, outbox) = ClientTx::channel(entry.cfg.client_queue, &front.stop);
    let (ctl, ctl_rx) = mpsc::unbounded_channel();
    let events = entry.handle.sessions.clone();
    let peer = Peer {
        transport: Transport::HttpSession,
        ..peer
    };
    events
        .send(SessionEvent::Connected(client, tx, peer.clone()))
        .await
        .ok()?;
    let s = Arc::new(HttpSession {
        id: id.clone(),
        server: entry.cfg.name.clone(),
        owner,
        holder,
        client,
        events,
        ctl,
        next_stream: AtomicU64::new(0),
        activity: Activity::new(),
        ended: front.stop.child_token(),
        peer_ids: (peer.uid, peer.gid),
        handshake: std::sync::Mutex::new((None, false)),
        front: Arc::downgrade(front),
    });
    front
        .sessions
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(id, s.clone());
    info!(server = %s.server, client = %client, uid = peer.uid, "HTTP session opened");
    debug!(client = %client, session = %s.id, "HTTP session id");
    tokio::spawn(pump(Arc::downgrade(front), s.clone(), outbox, ctl_rx));
    Some(s)
}

/// GET: a stream of the session for the child's requests and notifications (the newest open
/// one carries them; beyond [`GET_STREAMS`](super::router::GET_STREAMS) the oldest is closed).
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
    s.activity.opened();
    let weak = Arc::downgrade(&s);
    let guard = OnDrop::new(move || {
        if let Some(s) = weak.upgrade() {
            s.activity.closed();
        }
    });
    // The pump takes it (and closes the oldest beyond GET_STREAMS); if the session just
    // ended, `tx` is dropped with the message and the stream ends at once.
    let _ = s.ctl.send(Ctl::Get(tx));
    stream::sse_until(rx, guard, Some(front.hand_off().watch()))
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
    /// Its owner for the share of sessions: caller and holder.
    fn key(&self) -> Owner {
        (self.owner, self.holder)
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
            match self.open_stream(pending, tokens, sse).await {
                Ok((rx, guard)) => Some((rx, guard, expected)),
                Err(Refused::Duplicate(id)) => {
                    // K23 at the HTTP layer: an id still unanswered in this session would make
                    // two streams wait for one answer.
                    return rpc_error(
                        StatusCode::OK,
                        Some(&id),
                        code::INVALID_REQUEST,
                        "duplicate request id: a request with this id is still in flight in this session",
                    );
                }
                Err(Refused::Ended) => return not_found(),
            }
        };
        self.note_handshake(&msgs);
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
        let Some((mut rx, guard, expected)) = stream else {
            return StatusCode::ACCEPTED.into_response();
        };
        if sse {
            return stream::sse(rx, guard);
        }
        // JSON: wait for every answer (the pump puts nothing but responses on a JSON stream).
        let mut answers = Vec::with_capacity(expected);
        while answers.len() < expected {
            let Some(b) = rx.recv().await else { break };
            answers.push(b);
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

    /// Keeps what a restore needs from the client's handshake, and has the sessions recorded
    /// when it changed.
    fn note_handshake(&self, msgs: &[Message]) {
        let mut changed = false;
        {
            let mut hs = self.handshake.lock().unwrap_or_else(|p| p.into_inner());
            for m in msgs {
                match (m.kind, m.method()) {
                    (Kind::Request, "initialize") => {
                        // A handshake too large to record: this session is not restored.
                        hs.0 = m
                            .params
                            .as_deref()
                            .filter(|p| p.get().len() <= saved::MAX_PARAMS)
                            .map(ToOwned::to_owned);
                        changed = true;
                    }
                    (Kind::Notification, "notifications/initialized") if !hs.1 => {
                        hs.1 = true;
                        changed = true;
                    }
                    _ => {}
                }
            }
        }
        if changed {
            if let Some(front) = self.front.upgrade() {
                front.save_sessions();
            }
        }
    }

    /// Whether the session ended.
    pub(super) fn is_ended(&self) -> bool {
        self.ended.is_cancelled()
    }

    /// The record of this session, once its handshake is known.
    pub(super) fn saved(&self) -> Option<Saved> {
        let hs = self.handshake.lock().unwrap_or_else(|p| p.into_inner());
        Some(Saved {
            id: self.id.clone(),
            server: self.server.clone(),
            owner: self.owner,
            uid: self.peer_ids.0,
            gid: self.peer_ids.1,
            initialize: hs.0.clone()?,
            initialized: hs.1,
        })
    }

    /// Registers a new POST stream with the pump, awaiting the answers to `pending`
    /// (canonical key, id) and the progress of `tokens`; an `sse` one also takes the lines
    /// waiting for a stream, and may carry the child's requests and notifications. Returns
    /// the stream's receiver and the guard that tells the pump when the stream is dropped.
    /// Registered before any of its requests reaches the actor, so no answer can come first.
    async fn open_stream(
        self: &Arc<Self>,
        pending: Vec<(String, Box<RawValue>)>,
        tokens: Vec<String>,
        sse: bool,
    ) -> Result<(mpsc::Receiver<Bytes>, OnDrop), Refused> {
        let n = self.next_stream.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel(STREAM_QUEUE);
        self.activity.opened();
        // From here the stream's end reaches the pump (after its opening, in order) whatever
        // becomes of this POST, even dropped while it waits for the pump's reply.
        let weak = Arc::downgrade(self);
        let guard = OnDrop::new(move || {
            if let Some(s) = weak.upgrade() {
                s.activity.closed();
                let _ = s.ctl.send(Ctl::PostGone(n));
            }
        });
        let (reply, taken) = oneshot::channel();
        let ctl = Ctl::Post {
            n,
            pending,
            tokens,
            sse,
            tx,
            reply,
        };
        if self.ctl.send(ctl).is_err() {
            return Err(Refused::Ended);
        }
        match taken.await {
            Ok(Ok(())) => Ok((rx, guard)),
            Ok(Err(id)) => Err(Refused::Duplicate(id)),
            Err(_) => Err(Refused::Ended),
        }
    }

    /// What the pump does with a stream's opening or end.
    fn control(&self, router: &mut Router, c: Ctl) {
        match c {
            Ctl::Post {
                n,
                pending,
                tokens,
                sse,
                tx,
                reply,
            } => {
                // A POST dropped meanwhile has its `PostGone` queued behind this.
                let _ = reply.send(router.open_post(n, pending, tokens, sse, tx));
            }
            Ctl::PostGone(n) => self.cancel(router.post_gone(n)),
            Ctl::Get(tx) => router.open_get(tx),
        }
    }

    /// Sends the actor `notifications/cancelled` for requests (ids as the client wrote them)
    /// whose POST stream closed before their answers, as if the client had; nothing once the
    /// session has ended (the actor cancels everything of a departed client).
    fn cancel(&self, ids: Vec<Box<RawValue>>) {
        if self.ended.is_cancelled() {
            return;
        }
        for id in ids {
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

    /// When the session last had a request or a stream, if it has no stream open now.
    fn idle_since(&self) -> Option<Instant> {
        let (open, last) = self.activity.rank();
        (!open).then_some(last)
    }

    /// The order in which a caller's sessions are ended for room: those with no stream open
    /// first, then the least recently active.
    fn eviction_rank(&self) -> (bool, Option<Instant>) {
        let (open, last) = self.activity.rank();
        (open, Some(last))
    }

    /// Idle: no open stream and nothing for `idle`.
    fn idle_for(&self, idle: Duration, now: Instant) -> bool {
        self.idle_since()
            .is_some_and(|t| now.saturating_duration_since(t) >= idle)
    }
}

/// Why a POST stream was not opened.
#[derive(Debug)]
enum Refused {
    /// This id is awaited by another stream of the session.
    Duplicate(Box<RawValue>),
    /// The session ended (its pump is gone).
    Ended,
}

/// Moves the actor's lines for a session to its streams by their addresses, and registers
/// the streams as their handlers open and drop them, until the actor closes the client, the
/// session ends, or the client is kicked; then ends every stream and removes the session.
/// The only owner of the session's [`Router`].
async fn pump(
    front: Weak<Front>,
    s: Arc<HttpSession>,
    mut outbox: Outbox,
    mut ctl: mpsc::UnboundedReceiver<Ctl>,
) {
    let kicked = outbox.kicked();
    let mut router = Router::new(s.client);
    loop {
        tokio::select! {
            biased;
            _ = kicked.cancelled() => break,
            _ = s.ended.cancelled() => break,
            c = ctl.recv() => match c {
                Some(c) => s.control(&mut router, c),
                None => break,
            },
            l = outbox.recv() => {
                let Some((to, l)) = l.filter(|(_, l)| !l.is_empty()) else {
                    break;
                };
                match router.route(to, trim_newline(l.to_bytes())) {
                    Routed::Done => {}
                    Routed::Closed(ids) => s.cancel(ids),
                    Routed::Unanswerable { id, method, why } => {
                        let logged = front.upgrade().and_then(|f| log_allowed(&f.questions_log));
                        if let Some(suppressed) = logged {
                            warn!(server = %s.server, client = %s.client, method, suppressed,
                                "a child's request for an HTTP session answered with an error at once: no stream can carry it ({why})");
                        }
                        s.answer_unanswerable(&id, &method, why);
                    }
                }
            }
        }
    }
    let by_client = !s.ended.is_cancelled();
    s.ended.cancel();
    // Every stream's sender goes with the table, so each response ends; a handler still
    // waiting for the pump's reply is told the session ended.
    drop(router);
    drop(ctl);
    if let Some(front) = front.upgrade() {
        front
            .sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&s.id);
        front.save_sessions();
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

/// `n` random bytes as lowercase hex (the OS's generator).
pub(crate) fn random_hex(n: usize) -> String {
    use rand::RngCore;
    let mut b = vec![0u8; n];
    rand::rngs::OsRng.fill_bytes(&mut b);
    b.iter().map(|x| format!("{x:02x}")).collect()
}
