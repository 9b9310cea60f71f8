//! The second upstream on the seam (issue 29; design.md §6): one Streamable HTTP session with
//! a remote MCP server, owned by the supervisor and shared by every client of that server.
//!
//! The core drives it exactly as it drives a child: it sends lines ([`Upstream::send`]) and
//! reads [`Event`]s. Here each line becomes one POST:
//! - `initialize` is sent alone and awaited; its response's `Mcp-Session-Id` and the
//!   negotiated `protocolVersion` go on every later request (`MCP-Protocol-Version`);
//!   `notifications/initialized` is awaited too, then the GET stream for the server's own
//!   messages is opened (405 means the server offers none: fine);
//! - a 2026-07-28 message (its `_meta` names that version) carries the standard headers
//!   (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`) and no session;
//! - responses come as one JSON body or as an SSE stream; each message is an
//!   [`Event::Message`]; an SSE stream that drops before its answer is resumed with GET and
//!   `Last-Event-ID` after the server's `retry` (the answer is an outage only if that fails);
//! - any HTTP status is an answer: a JSON-RPC body is passed on as it is, a bare status of a
//!   request is an [`Event::Refused`] (the core answers with `auth_failed`, `rate_limited` or
//!   `upstream_error`); `404` on a request that carried the session id means the session is
//!   gone and the request never ran: the session re-initializes (the same `initialize`, then
//!   `notifications/initialized`) and the request is sent once more;
//! - only a failed connection (DNS, TCP, TLS, connect timeout) is a death:
//!   [`Lost::Unreachable`], once, and the core reconnects with its backoff.
//! - [`Upstream::stop`] sends `DELETE` for the session (bounded by `connect_timeout`), then
//!   [`Lost::Closed`];
//! - an upgrade in place (issue 32 §1) never DELETEs: [`Upstream::hand_over_session`] stops the
//!   session's tasks and returns its [`SessionState`] (session id, version, `initialize`, the
//!   GET stream's last event id) for the hand-over record; [`start`] given it goes on with that
//!   session (no `initialize`) and opens the GET stream again with `Last-Event-ID`.
//!
//! Bounds: `max_connections` POSTs at once (a semaphore; more wait in order), bodies and SSE
//! events over `max_message_size` or nested past `max_message_depth` are never relayed
//! ([`Event::Discarded`], issue 47 §7), redirects are never
//! followed to another origin (credentials stay with the server they are for), and the queue
//! from the core is bounded like a child's stdin queue.
//!
//! Secrets: header values are resolved at start and live only in the request headers; no log
//! line, status, error or metric here includes one, nor the URL's query string. What the
//! server says back in a JSON-RPC error, and the outage texts, have them (and the sign-in's
//! tokens) replaced by `<redacted>` ([`redact`], issue 47 §5); results are not rewritten. The
//! environment's proxies never carry a request to loopback ([`proxy`]).

mod classify;
pub mod proxy;
pub mod redact;
mod sse;
pub mod tls;

use crate::auth::Verdict;
use crate::{Event, Limit, Lost, Queued, Refusal, StartError, StartFailure, Upstream, Was};
use crate::{Outbound, Outgoing, RemoteStatus, StderrTail};
use bytes::Bytes;
use futures_util::StreamExt;
use reqwest::header::{
    HeaderMap, HeaderName, HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE, WWW_AUTHENTICATE,
};
use reqwest::StatusCode;
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::Value;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::config::{RemoteConfig, ServerConfig};
use tokio::sync::{mpsc, Semaphore};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};
use vocab::jsonrpc::message;

/// Lines queued toward the server before `send` reports the queue full (as a child's stdin).
const QUEUE: usize = 1024;
/// How long an SSE stream without a `retry` field waits before it is resumed.
const DEFAULT_RETRY: Duration = Duration::from_secs(1);
/// Resumptions of one dropped POST stream before its request gets the outage answer.
const RESUME_ATTEMPTS: u32 = 3;
/// Header names (lowercase) of the session and the protocol.
const SESSION: &str = "mcp-session-id";
const VERSION: &str = "mcp-protocol-version";
const METHOD: &str = "mcp-method";
const NAME: &str = "mcp-name";
const LAST_EVENT_ID: &str = "last-event-id";
/// Cancelled ids remembered for 429 waits before the set is cleared (a bound, not a
/// correctness limit: an id is removed when its exchange ends).
const CANCELLED_KEEP: usize = 4096;
/// How long an idle connection to a remote server (or its authorization server) is kept for
/// reuse: under the 5 s after which Node.js servers close idle keep-alive connections (its
/// `keepAliveTimeout` default; undici keeps them 4 s for the same reason). A POST sent on a
/// connection the server is closing that moment fails as `unreachable` though the server is
/// fine, so a connection idle that long is not reused.
pub const POOL_IDLE: Duration = Duration::from_secs(4);
/// Margin kept before a request's deadline when deciding to wait out a 429.
const DEADLINE_MARGIN: Duration = Duration::from_millis(100);

/// What starting a remote session needs, built from the server's configuration alone.
#[derive(Debug, Clone, PartialEq)]
pub struct RemoteSpec {
    /// The server's name (for the log).
    pub name: String,
    /// Where and how to connect.
    pub config: RemoteConfig,
    /// The largest message accepted (a JSON body or one SSE event), in bytes.
    pub max_message_size: usize,
    /// The deepest nesting of a message relayed (issue 47 §7).
    pub max_message_depth: usize,
    /// The deadline of a request with each method, as the core sets it (`request_timeout`,
    /// `method_timeouts`): a 429 is waited out only within it.
    pub request_timeout: Duration,
    pub method_timeouts: std::collections::BTreeMap<String, Duration>,
}

impl RemoteSpec {
    /// The spec of a url server; `None` for a child.
    pub fn of(cfg: &ServerConfig) -> Option<RemoteSpec> {
        Some(RemoteSpec {
            name: cfg.name.clone(),
            config: cfg.remote.clone()?,
            max_message_size: cfg.max_message_size,
            max_message_depth: cfg.max_message_depth,
            request_timeout: cfg.request_timeout,
            method_timeouts: cfg.method_timeouts.clone(),
        })
    }

    /// The URL as logs and status show it: scheme, host, port and path, never the query.
    pub fn shown_url(&self) -> String {
        support::config::shown_url(&self.config.url)
    }
}

/// A session as one image hands it to the next at an upgrade in place (issue 32 §1; the
/// hand-over record's `servers[].remote`). Its `Debug` never shows the session id (a bearer
/// of the session for whoever holds it).
#[derive(Clone, Default, Serialize, serde::Deserialize)]
pub struct SessionState {
    /// The server's `Mcp-Session-Id`, if it gave one.
    pub session_id: Option<String>,
    /// The negotiated protocol version.
    pub protocol_version: Option<String>,
    /// The `initialize` request as the core sent it (replayed if the server forgets the
    /// session later), its JSON text as it was (the record's shape is the object itself).
    pub initialize: Option<Box<RawValue>>,
    /// The id of the last event the GET stream delivered, for `Last-Event-ID`.
    pub last_event_id: Option<String>,
    /// Whether the GET stream is to be opened (the session was initialized).
    pub listening: bool,
    /// How long the session had been open, in seconds.
    pub age_s: u64,
}

impl PartialEq for SessionState {
    fn eq(&self, other: &SessionState) -> bool {
        self.session_id == other.session_id
            && self.protocol_version == other.protocol_version
            && self.initialize.as_deref().map(RawValue::get)
                == other.initialize.as_deref().map(RawValue::get)
            && self.last_event_id == other.last_event_id
            && self.listening == other.listening
            && self.age_s == other.age_s
    }
}

impl std::fmt::Debug for SessionState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionState")
            .field("session_id", &self.session_id.as_ref().map(|_| "(kept)"))
            .field("protocol_version", &self.protocol_version)
            .field(
                "last_event_id",
                &self.last_event_id.as_ref().map(|_| "(kept)"),
            )
            .field("listening", &self.listening)
            .field("age_s", &self.age_s)
            .finish_non_exhaustive()
    }
}

/// The session's facts shared between its tasks and the handle's `status`.
#[derive(Default)]
struct Facts {
    session_id: Option<String>,
    session_since: Option<Instant>,
    protocol_version: Option<String>,
    /// Bumped at every (re-)initialization, so concurrent 404s re-initialize once.
    epoch: u64,
    /// The `initialize` request as the core sent it, replayed when the session is gone.
    initialize: Option<Bytes>,
    last_http_status: Option<u16>,
    last_error: Option<String>,
    get_stream: bool,
    /// Whether `notifications/initialized` went out (the GET stream is then expected).
    initialized: bool,
    /// The id of the last event the GET stream delivered.
    get_last_event_id: Option<String>,
}

impl Facts {
    /// Facts that go on from a handed-over session.
    fn resumed(state: SessionState) -> Facts {
        let since = Instant::now()
            .checked_sub(Duration::from_secs(state.age_s))
            .unwrap_or_else(Instant::now);
        Facts {
            session_since: state.session_id.as_ref().map(|_| since),
            session_id: state.session_id,
            protocol_version: state.protocol_version,
            initialize: state.initialize.map(|i| Bytes::from(i.get().to_owned())),
            initialized: state.listening,
            get_last_event_id: state.last_event_id,
            ..Facts::default()
        }
    }

    /// What the next image goes on with.
    fn handed_over(&self) -> SessionState {
        SessionState {
            session_id: self.session_id.clone(),
            protocol_version: self.protocol_version.clone(),
            // The core's own line, kept as sent: checked as JSON text, never read into a tree.
            initialize: self.initialize.as_ref().and_then(|line| {
                RawValue::from_string(String::from_utf8_lossy(line).into_owned()).ok()
            }),
            last_event_id: self.get_last_event_id.clone(),
            listening: self.initialized,
            age_s: self.session_since.map_or(0, |t| t.elapsed().as_secs()),
        }
    }
}

/// One running remote session, as the core holds it.
pub struct RemoteHandle {
    generation: u64,
    started_at: Instant,
    normal: mpsc::Sender<Outbound>,
    urgent: mpsc::Sender<Outbound>,
    session: Arc<Session>,
    stopping: bool,
}

/// Everything a session's tasks share.
struct Session {
    generation: u64,
    name: String,
    url: reqwest::Url,
    shown: String,
    client: reqwest::Client,
    headers: HeaderMap,
    /// What the configured headers hold: never quoted back to a client (issue 47 §5).
    secrets: redact::Secrets,
    max_message_size: usize,
    max_message_depth: usize,
    connect_timeout: Duration,
    events: mpsc::Sender<Event>,
    facts: Mutex<Facts>,
    /// Held while the session re-initializes.
    reinit: tokio::sync::Mutex<()>,
    permits: Semaphore,
    /// The request deadlines by method (from [`RemoteSpec`]).
    request_timeout: Duration,
    method_timeouts: std::collections::BTreeMap<String, Duration>,
    /// Ids (JSON text) of requests the core cancelled (its `notifications/cancelled`, at its
    /// deadline or a client's cancel): a 429 wait for one of them ends without a resend.
    /// Bounded: cleared past [`CANCELLED_KEEP`].
    cancelled: Mutex<std::collections::HashSet<String>>,
    cancel: CancellationToken,
    /// Set once the instance's one [`Event::Lost`] is sent.
    lost: AtomicBool,
    /// Set while a GET stream task runs (there is at most one).
    listening: AtomicBool,
    tail: StderrTail,
    /// The sign-in (issue 30), for every request's bearer token and its 401/403.
    auth: Option<Arc<crate::auth::SignIn>>,
}

/// Starts a remote session: builds the client (TLS, proxies from the environment except for
/// loopback ([`proxy`]), redirect policy) and resolves the headers now; the first connection is made by the core's first
/// message. With `resumed` (what the previous image handed over, issue 32 §1) the session
/// goes on: no `initialize` is needed, and the GET stream is opened again at once with
/// `Last-Event-ID`. Errors: an unreadable `tls_ca_file` or a header whose variable or file is
/// missing (retried with backoff: a secret may be mounted late).
pub fn start(
    spec: &RemoteSpec,
    generation: u64,
    tail: StderrTail,
    events: mpsc::Sender<Event>,
    resumed: Option<SessionState>,
) -> Result<RemoteHandle, StartError> {
    let cfg = &spec.config;
    let fail = |message: String| StartError {
        message,
        permanent: false,
        failure: StartFailure::Remote,
    };
    let url = reqwest::Url::parse(&cfg.url).map_err(|e| fail(format!("url: {e}")))?;
    let shown = spec.shown_url();
    if cfg.tls_skip_verify {
        warn!(server = %spec.name, url = %shown, "tls_skip_verify = true: the server's certificate is NOT verified; anyone on the path can read this server's credentials");
    }
    if url.scheme() == "http"
        && !support::config::is_loopback_host(url.host_str().unwrap_or_default())
    {
        warn!(server = %spec.name, url = %shown, "allow_plain_http = true: requests and their headers go unencrypted over the network");
    }
    let tls = tls::client_config(cfg.tls_ca_file.as_deref(), cfg.tls_skip_verify).map_err(fail)?;
    let mut headers = HeaderMap::new();
    let mut secrets = redact::Secrets::default();
    for (name, source) in &cfg.headers {
        let value = source
            .resolve()
            .map_err(|e| fail(format!("header {name}: {e}")))?;
        secrets.add_header(&value);
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| fail(format!("header {name}: not a valid name")))?;
        let mut value = HeaderValue::from_str(&value).map_err(|_| {
            fail(format!(
                "header {name}: the value is not a valid header value"
            ))
        })?;
        value.set_sensitive(true);
        headers.append(name, value);
    }
    let origin = url.origin();
    // The environment's proxies, never for loopback (issue 47 §5).
    let client = proxy::apply(reqwest::Client::builder())
        .tls_backend_preconfigured(tls)
        .connect_timeout(cfg.connect_timeout)
        .pool_max_idle_per_host(cfg.max_connections)
        .pool_idle_timeout(POOL_IDLE)
        .user_agent(concat!("mcp-supervisor/", env!("CARGO_PKG_VERSION")))
        .redirect(reqwest::redirect::Policy::custom(move |attempt| {
            // Same origin only, and not forever: credentials never follow a redirect away.
            if attempt.previous().len() >= 5 || attempt.url().origin() != origin {
                attempt.stop()
            } else {
                attempt.follow()
            }
        }))
        .build()
        .map_err(|e| fail(format!("HTTP client: {e}")))?;
    let auth = sign_in_of(&spec.name, cfg).map_err(fail)?;
    let (normal_tx, normal_rx) = mpsc::channel(QUEUE);
    let (urgent_tx, urgent_rx) = mpsc::channel(QUEUE);
    let session = Arc::new(Session {
        generation,
        name: spec.name.clone(),
        url,
        shown,
        client,
        headers,
        secrets,
        max_message_size: spec.max_message_size,
        max_message_depth: spec.max_message_depth,
        connect_timeout: cfg.connect_timeout,
        events,
        facts: Mutex::new(resumed.clone().map(Facts::resumed).unwrap_or_default()),
        reinit: tokio::sync::Mutex::new(()),
        permits: Semaphore::new(cfg.max_connections.max(1)),
        request_timeout: spec.request_timeout,
        method_timeouts: spec.method_timeouts.clone(),
        cancelled: Mutex::new(std::collections::HashSet::new()),
        cancel: CancellationToken::new(),
        lost: AtomicBool::new(false),
        listening: AtomicBool::new(false),
        tail,
        auth,
    });
    match &resumed {
        Some(r) => {
            info!(server = %spec.name, url = %session.shown, generation, session = r.session_id.is_some(), "remote session handed over by the previous image: going on with it");
            if r.listening {
                tokio::spawn(session.clone().listen());
            }
        }
        None => {
            info!(server = %spec.name, url = %session.shown, generation, "remote session starting")
        }
    }
    tokio::spawn(drive(session.clone(), normal_rx, urgent_rx));
    // A session handed over goes on from when it was opened.
    let started_at = lock(&session.facts)
        .session_since
        .unwrap_or_else(Instant::now);
    Ok(RemoteHandle {
        generation,
        started_at,
        normal: normal_tx,
        urgent: urgent_tx,
        session,
        stopping: false,
    })
}

/// The sign-in of url server `name` (issue 30), `None` when it uses a static
/// `Authorization` header. Shared with the control socket's `login`. Errors: the TLS settings
/// cannot be read.
pub fn sign_in_of(
    name: &str,
    cfg: &RemoteConfig,
) -> Result<Option<Arc<crate::auth::SignIn>>, String> {
    let Some(o) = &cfg.oauth else {
        return Ok(None);
    };
    let url = reqwest::Url::parse(&cfg.url).map_err(|e| format!("url: {e}"))?;
    let http = || {
        // The environment's proxies, never for loopback (issue 47 §5).
        proxy::apply(reqwest::Client::builder())
            .tls_backend_preconfigured(tls::client_config(
                cfg.tls_ca_file.as_deref(),
                cfg.tls_skip_verify,
            )?)
            .connect_timeout(cfg.connect_timeout)
            .pool_idle_timeout(POOL_IDLE)
            .user_agent(concat!("mcp-supervisor/", env!("CARGO_PKG_VERSION")))
            // Token requests carry secrets: never sent on to another place.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("HTTP client: {e}"))
    };
    crate::auth::sign_in_for(name, &url, o, &cfg.token_dir, http).map(Some)
}

impl Upstream for RemoteHandle {
    fn generation(&self) -> u64 {
        self.generation
    }

    fn started_at(&self) -> Instant {
        self.started_at
    }

    fn send(&self, out: Outbound) -> Queued {
        queue(&self.normal, out, self.stopping)
    }

    fn send_urgent(&self, out: Outbound) -> Queued {
        queue(&self.urgent, out, self.stopping)
    }

    fn stop(&mut self) {
        if self.stopping {
            return;
        }
        self.stopping = true;
        let session = self.session.clone();
        tokio::spawn(async move {
            session.cancel.cancel();
            session.delete().await;
            session.lose(Lost::Closed).await;
        });
    }

    fn stopping(&self) -> bool {
        self.stopping
    }

    /// Stops the session's tasks without a `DELETE` (the next image goes on with the session)
    /// and returns what it needs. `None` (and the session left running, for the exec to cut)
    /// once stopping, while a handshake-era session is not initialized yet, or while it
    /// re-initializes, or when the actor says the session is not ready: the next image then
    /// opens a session of its own. The [`SessionState`] is inside the [`Carried`] value.
    ///
    /// [`Carried`]: crate::Carried
    fn hand_over(&mut self, session_ready: bool) -> Option<crate::Carried> {
        if self.stopping || !session_ready {
            return None;
        }
        let settled = self.session.reinit.try_lock().is_ok();
        let state = {
            let f = lock(&self.session.facts);
            let handshake_era = f.initialize.is_some();
            if !settled || handshake_era && !f.initialized {
                return None;
            }
            f.handed_over()
        };
        self.stopping = true;
        self.session.cancel.cancel();
        Some(crate::Carried::new(state))
    }

    /// No process and no usage: the session's facts (never its id).
    fn describe(&self) -> crate::Description {
        let f = lock(&self.session.facts);
        let remote = Some(RemoteStatus {
            url: self.session.shown.clone(),
            session: f.session_id.is_some(),
            session_age_s: f.session_since.map(|t| t.elapsed().as_secs()),
            protocol_version: f.protocol_version.clone(),
            last_http_status: f.last_http_status,
            last_error: f.last_error.clone(),
            auth: None,
        });
        crate::Description {
            pid: None,
            usage: None,
            remote,
        }
    }
}

impl Drop for RemoteHandle {
    fn drop(&mut self) {
        self.session.cancel.cancel();
    }
}

fn queue(tx: &mpsc::Sender<Outbound>, out: Outbound, stopping: bool) -> Queued {
    if stopping {
        return Queued::Closed;
    }
    match tx.try_send(out) {
        Ok(()) => Queued::Ok,
        Err(mpsc::error::TrySendError::Full(_)) => Queued::Full,
        Err(mpsc::error::TrySendError::Closed(_)) => Queued::Closed,
    }
}

/// The session's facts, whatever a panicking holder left (they are plain values).
fn lock(m: &Mutex<Facts>) -> std::sync::MutexGuard<'_, Facts> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One message as a POST: its body, and what its headers need taken from what the core said
/// of it ([`Outbound`], issue 48 §2), never from its line, which goes out as the body unread.
struct Post {
    line: Bytes,
    /// The request's id (a request), `None` for a notification or a response.
    id: Option<Box<RawValue>>,
    method: Option<String>,
    /// `Mcp-Name` for a 2026-07-28 request that names something.
    name: Option<String>,
    /// Whether its `_meta` names 2026-07-28 (no session, the standard headers).
    modern: bool,
    /// For `notifications/cancelled`: the request it cancels.
    cancels: Option<u64>,
}

impl Post {
    /// The GET stream's stand-in: no line, no id, no method.
    fn is_get_stream(&self) -> bool {
        self.method.is_none() && self.id.is_none() && self.line.is_empty()
    }

    fn of(out: Outbound) -> Post {
        let (id, method, name, cancels) = match out.kind {
            Outgoing::Request { id, method, name } => (
                serde_json::value::to_raw_value(&id).ok(),
                Some(method.into_owned()),
                name,
                None,
            ),
            Outgoing::Notification { method, cancels } => {
                (None, Some(method.into_owned()), None, cancels)
            }
            Outgoing::Response => (None, None, None, None),
        };
        Post {
            line: out.line,
            id,
            method,
            name,
            modern: out.modern,
            cancels,
        }
    }

    /// A message the session sends of its own accord (`notifications/initialized` after a
    /// re-initialization).
    fn notification(line: &'static [u8], method: &'static str) -> Post {
        Post {
            line: Bytes::from_static(line),
            id: None,
            method: Some(method.to_string()),
            name: None,
            modern: false,
            cancels: None,
        }
    }
}

/// Reads the core's messages, urgent ones first, and sends each: `initialize` and
/// `notifications/initialized` in order and awaited, everything else concurrently. A line is
/// never parsed here: what it is comes with it ([`Outbound`]).
async fn drive(
    session: Arc<Session>,
    mut normal: mpsc::Receiver<Outbound>,
    mut urgent: mpsc::Receiver<Outbound>,
) {
    loop {
        let next = tokio::select! {
            biased;
            _ = session.cancel.cancelled() => return,
            Some(o) = urgent.recv() => o,
            Some(o) = normal.recv() => o,
            else => return,
        };
        let out = Post::of(next);
        if let Some(id) = out.cancels {
            session.note_cancel(id);
        }
        match out.method.as_deref() {
            Some("initialize") => {
                lock(&session.facts).initialize = Some(out.line.clone());
                session.clone().exchange(out).await;
            }
            Some("notifications/initialized") => {
                session.clone().exchange(out).await;
                lock(&session.facts).initialized = true;
                tokio::spawn(session.clone().listen());
            }
            _ => {
                let s = session.clone();
                tokio::spawn(async move {
                    tokio::select! {
                        _ = s.cancel.cancelled() => {}
                        _ = s.clone().exchange(out) => {}
                    }
                });
            }
        }
    }
}

/// How one POST ended, for its request.
enum Sent {
    /// Answered (or nothing to answer).
    Done,
    /// A 401/403 after which the sign-in holds a new token: send once more.
    AuthRetry,
    /// 429 with `Retry-After`: not answered yet; the caller waits or refuses.
    RateLimited(Duration),
    /// `404` with the session id: the session is gone and the request never ran.
    SessionGone(u64),
}

impl Session {
    /// Sends one message and delivers what comes back; a request whose session is gone is
    /// sent once more on a fresh session.
    async fn exchange(self: Arc<Self>, out: Post) {
        let Ok(_permit) = self.permits.acquire().await else {
            return;
        };
        let deadline = base::deadline::after(
            Instant::now(),
            out.method
                .as_deref()
                .and_then(|m| self.method_timeouts.get(m))
                .copied()
                .unwrap_or(self.request_timeout),
        );
        let mut sent = self.post(&out).await;
        // 429: wait for `Retry-After` within the request's own deadline, then send again;
        // past it, or once the core cancelled the request, the caller gets `rate_limited`
        // with `retry_after` (issue 29, decisions).
        while let Sent::RateLimited(wait) = sent {
            let id = out.id.as_ref().map(|i| i.get().to_string());
            let resend_at =
                base::deadline::after(base::deadline::after(Instant::now(), wait), DEADLINE_MARGIN);
            if resend_at >= deadline || self.was_cancelled(&id) {
                self.refuse(&out, 429, Some(wait), "").await;
                self.forget_cancel(&id);
                return;
            }
            debug!(server = %self.name, wait_ms = wait.as_millis() as u64, "429: waiting for Retry-After within the request's deadline");
            tokio::time::sleep(wait).await;
            if self.was_cancelled(&id) {
                self.forget_cancel(&id);
                return;
            }
            sent = self.post(&out).await;
        }
        self.forget_cancel(&out.id.as_ref().map(|i| i.get().to_string()));
        match sent {
            Sent::Done | Sent::RateLimited(_) | Sent::AuthRetry => {}
            Sent::SessionGone(epoch) => {
                info!(server = %self.name, method = ?out.method, "the server does not know the session any more (404): re-initializing, then sending again; the request had not run");
                if self.reinitialize(epoch).await {
                    // The new session's GET stream (a no-op while one still runs).
                    if lock(&self.facts).initialized {
                        tokio::spawn(self.clone().listen());
                    }
                    match self.post(&out).await {
                        Sent::SessionGone(_) => {
                            self.refuse(&out, 404, None, "404 again on a fresh session")
                                .await
                        }
                        Sent::RateLimited(wait) => self.refuse(&out, 429, Some(wait), "").await,
                        Sent::Done | Sent::AuthRetry => {}
                    }
                }
            }
        }
    }

    /// A POST toward the endpoint with the configured headers, a JSON body, and both answer
    /// forms accepted.
    fn post_builder(&self) -> reqwest::RequestBuilder {
        self.client
            .post(self.url.clone())
            .headers(self.headers.clone())
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, "application/json, text/event-stream")
    }

    /// One POST of `out`, its answer delivered; sent once more when the sign-in put a new
    /// token in place after a 401/403 (issue 30 §3).
    async fn post(&self, out: &Post) -> Sent {
        match self.post_once(out, true).await {
            Sent::AuthRetry => match self.post_once(out, false).await {
                Sent::AuthRetry => Sent::Done,
                s => s,
            },
            s => s,
        }
    }

    /// The bearer token to send now, as a header value no log shows.
    async fn bearer(&self) -> Option<(String, HeaderValue)> {
        let token = self.auth.as_ref()?.bearer().await?;
        let mut v = HeaderValue::from_str(&format!("Bearer {token}")).ok()?;
        v.set_sensitive(true);
        Some((token, v))
    }

    async fn post_once(&self, out: &Post, auth_retry: bool) -> Sent {
        let (session_id, version, epoch) = {
            let f = lock(&self.facts);
            (f.session_id.clone(), f.protocol_version.clone(), f.epoch)
        };
        let mut req = self.post_builder();
        if out.modern {
            req = req.header(VERSION, vocab::protocol::MODERN_VERSION);
            if let Some(m) = &out.method {
                req = req.header(METHOD, m.as_str());
            }
            if let Some(n) = &out.name {
                req = req.header(NAME, header_safe(n));
            }
        } else {
            if let Some(id) = &session_id {
                req = req.header(SESSION, id.as_str());
            }
            if let Some(v) = &version {
                req = req.header(VERSION, v.as_str());
            }
        }
        let token = match self.bearer().await {
            Some((t, v)) => {
                req = req.header(AUTHORIZATION, v);
                Some(t)
            }
            None => None,
        };
        let resp = match req.body(out.line.clone()).send().await {
            Ok(r) => r,
            Err(e) => {
                self.unreachable(&e).await;
                return Sent::Done;
            }
        };
        let status = resp.status();
        self.note_status(status.as_u16(), None);
        if out.method.as_deref() == Some("initialize") && status.is_success() {
            if let Some(id) = resp.headers().get(SESSION).and_then(|v| v.to_str().ok()) {
                let mut f = lock(&self.facts);
                f.session_id = Some(id.to_string());
                f.session_since = Some(Instant::now());
            }
        }
        if status == StatusCode::NOT_FOUND
            && session_id.is_some()
            && !out.modern
            && out.method.as_deref() != Some("initialize")
        {
            lock(&self.facts).session_id = None;
            return Sent::SessionGone(epoch);
        }
        if let (Some(auth), StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) = (&self.auth, status)
        {
            let www = resp
                .headers()
                .get(WWW_AUTHENTICATE)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            let verdict = if status == StatusCode::UNAUTHORIZED {
                auth.unauthorized(www.as_deref(), token.as_deref()).await
            } else {
                auth.forbidden(www.as_deref()).await
            };
            match verdict {
                Verdict::Retry if auth_retry => return Sent::AuthRetry,
                Verdict::SignIn(scope) if out.id.is_some() => {
                    let hint = format!("sign in with `mcp-supervisor login {}`", self.name);
                    self.refuse_sign_in(out, status.as_u16(), scope, &hint)
                        .await;
                    return Sent::Done;
                }
                _ => {}
            }
        }
        if status == StatusCode::ACCEPTED || out.id.is_none() && status.is_success() {
            return Sent::Done;
        }
        let retry_after = classify::retry_after(resp.headers());
        if let (StatusCode::TOO_MANY_REQUESTS, Some(wait), Some(_)) = (status, retry_after, &out.id)
        {
            return Sent::RateLimited(wait);
        }
        let content_type = resp
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_ascii_lowercase();
        if content_type.starts_with("text/event-stream") {
            self.read_sse(resp, out).await;
            return Sent::Done;
        }
        let answered = match self.read_body(resp, out).await {
            Some((body, deep)) => self.deliver_json(&body, out, deep).await,
            None => true,
        };
        if !answered {
            if out.id.is_some() {
                // A bare status, or a body without the answer (an error with `"id": null`,
                // as the SDKs send for a request they refuse before reading its id).
                self.refuse(out, status.as_u16(), retry_after, "").await;
            } else if !status.is_success() {
                warn!(server = %self.name, status = status.as_u16(), method = ?out.method, "the remote server refused a notification or response");
            }
        }
        Sent::Done
    }

    /// Notes the request a `notifications/cancelled` names (its `requestId`, as JSON text).
    fn note_cancel(&self, id: u64) {
        let mut set = self.cancelled.lock().unwrap_or_else(|p| p.into_inner());
        if set.len() >= CANCELLED_KEEP {
            set.clear();
        }
        set.insert(id.to_string());
    }

    fn was_cancelled(&self, id: &Option<String>) -> bool {
        id.as_ref().is_some_and(|id| {
            self.cancelled
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains(id)
        })
    }

    fn forget_cancel(&self, id: &Option<String>) {
        if let Some(id) = id {
            self.cancelled
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(id);
        }
    }

    /// Opens a fresh session after a 404: the `initialize` the core sent first, as it was (its
    /// answer goes nowhere), then `notifications/initialized`. Only
    /// one re-initialization per lost session, however many requests found it gone. Returns
    /// whether a session is open.
    async fn reinitialize(&self, epoch: u64) -> bool {
        let _guard = self.reinit.lock().await;
        let init = {
            let f = lock(&self.facts);
            if f.epoch != epoch {
                return f.session_id.is_some();
            }
            f.initialize.clone()
        };
        // The same line, its id included: its answer is read here and dropped, so the id
        // reaches nobody (and the line is never parsed to change it).
        let Some(line) = init else {
            return false;
        };
        let mut req = self.post_builder();
        if let Some(v) = lock(&self.facts).protocol_version.clone() {
            req = req.header(VERSION, v);
        }
        if let Some((_, v)) = self.bearer().await {
            req = req.header(AUTHORIZATION, v);
        }
        let resp = match req.body(line).send().await {
            Ok(r) => r,
            Err(e) => {
                self.unreachable(&e).await;
                return false;
            }
        };
        self.note_status(resp.status().as_u16(), None);
        let Some(id) = resp
            .headers()
            .get(SESSION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
        else {
            self.note_status(
                resp.status().as_u16(),
                Some("re-initialize got no Mcp-Session-Id".into()),
            );
            return false;
        };
        // Its answer is read and dropped (the core's handshake result stands).
        let _ = resp.bytes().await;
        {
            let mut f = lock(&self.facts);
            f.session_id = Some(id);
            f.session_since = Some(Instant::now());
            f.epoch = f.epoch.wrapping_add(1);
            f.get_last_event_id = None;
        }
        let note = Post::notification(
            br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            "notifications/initialized",
        );
        let _ = self.post(&note).await;
        true
    }

    /// Reads a JSON body up to `max_message_size`, measuring its nesting as it arrives (issue
    /// 47 §7): the body and whether it nests past `max_message_depth`. Over the size, the
    /// request fails as too large (the actor counts and logs it).
    async fn read_body(&self, resp: reqwest::Response, out: &Post) -> Option<(Bytes, bool)> {
        let mut body = Vec::new();
        let mut depth = vocab::jsonrpc::depth::Depth::new(self.max_message_depth);
        let mut stream = resp.bytes_stream();
        while let Some(chunk) = stream.next().await {
            match chunk {
                Ok(c) => {
                    if body.len().saturating_add(c.len()) > self.max_message_size {
                        if let Some(id) = out.id.clone() {
                            let _ = self
                                .events
                                .send(Event::Discarded(
                                    self.generation,
                                    Limit::Size(body.len() + c.len()),
                                    Was::Response(Some(id)),
                                ))
                                .await;
                        }
                        return None;
                    }
                    let from = body.len();
                    body.extend_from_slice(&c);
                    depth.feed(&body, from);
                }
                Err(e) => {
                    self.dropped(out, &e).await;
                    return None;
                }
            }
        }
        Some((Bytes::from(body), depth.finish()))
    }

    /// Delivers a JSON body's messages; returns whether the answer to `out` was among them
    /// (an error status with a JSON-RPC error body for its id is an answer like any other). A
    /// response with a null id answers nothing the core sent: it is logged and dropped. A
    /// body nested past `max_message_depth` (`deep`) is never relayed: each of its messages
    /// reaches the core as discarded (issue 47 §7).
    async fn deliver_json(&self, body: &Bytes, out: &Post, deep: bool) -> bool {
        if body.iter().all(u8::is_ascii_whitespace) {
            return false;
        }
        let want = out.id.as_ref().map(|i| i.get());
        let msgs = match message::parse_line(body) {
            Ok(m) => m,
            Err(e) => vec![Err(e)],
        };
        let mut any = false;
        for m in msgs {
            match m {
                Ok(m) if deep => {
                    let id = m.id.as_deref().map(RawValue::get);
                    any |= m.kind == message::Kind::Response && id.is_some() && id == want;
                    let was = Was::of(m.kind, m.id);
                    if self
                        .events
                        .send(Event::Discarded(self.generation, Limit::Depth, was))
                        .await
                        .is_err()
                    {
                        return true;
                    }
                }
                Ok(mut m) => {
                    if let Some(redacted) = m.error.as_deref().and_then(|e| self.secrets().error(e))
                    {
                        // The server's error quoted a credential (issue 47 §5).
                        debug!(server = %self.name, "a secret in the server's error was redacted");
                        m.error = Some(redacted);
                    }
                    let response = m.method.is_none();
                    let id = m.id.as_deref().map(RawValue::get);
                    if response && id.is_none_or(|i| i == "null") {
                        debug!(server = %self.name, "a response without an id (the server could not read the request's): dropped");
                        continue;
                    }
                    if out.method.as_deref() == Some("initialize") {
                        self.learn_version(&m);
                    }
                    any |= response && id.is_some() && id == want;
                    if self
                        .events
                        .send(Event::Message(self.generation, m))
                        .await
                        .is_err()
                    {
                        return true;
                    }
                }
                Err(e) => {
                    if let Some(id) = vocab::jsonrpc::message::malformed_reply_id(body) {
                        any |= Some(id.get()) == want;
                        let why = self.secrets().text(&e.to_string()).into_owned();
                        let _ = self
                            .events
                            .send(Event::Malformed(self.generation, id, why))
                            .await;
                    } else {
                        debug!(server = %self.name, error = %e, "a response body that is not JSON-RPC");
                    }
                }
            }
        }
        any
    }

    /// The negotiated version from the answer to `initialize`.
    fn learn_version(&self, m: &message::Message) {
        let Some(r) = &m.result else { return };
        let v: Option<String> = serde_json::from_str::<Value>(r.get())
            .ok()
            .and_then(|v| v.get("protocolVersion")?.as_str().map(str::to_string));
        if let Some(v) = v {
            lock(&self.facts).protocol_version = Some(v);
        }
    }

    /// Reads a POST's SSE stream: every event's `data` is a message; a stream that ends or
    /// drops before the request's answer is resumed with `Last-Event-ID` if the server gave
    /// event ids, else the request gets the outage answer.
    async fn read_sse(&self, resp: reqwest::Response, out: &Post) {
        let mut state = sse::Resume::default();
        let mut answered = self.pump_sse(resp, out, &mut state).await;
        let mut attempts = 0;
        while !answered && out.id.is_some() {
            let Some(last) = state.last_id.clone() else {
                break;
            };
            if attempts >= RESUME_ATTEMPTS {
                break;
            }
            attempts += 1;
            tokio::time::sleep(state.retry.unwrap_or(DEFAULT_RETRY)).await;
            debug!(server = %self.name, attempt = attempts, "resuming a dropped SSE stream with Last-Event-ID");
            let resp = match self.get(Some(&last)).await.send().await {
                Ok(r) if r.status().is_success() => r,
                Ok(r) => {
                    self.note_status(r.status().as_u16(), None);
                    break;
                }
                Err(_) => break,
            };
            answered = self.pump_sse(resp, out, &mut state).await;
        }
        if !answered {
            if let Some(id) = out.id.clone() {
                self.refuse_id(id, 0, None, "the response stream ended before the answer")
                    .await;
            }
        }
    }

    /// Delivers one SSE response's events; returns whether `out`'s answer was among them.
    async fn pump_sse(&self, resp: reqwest::Response, out: &Post, state: &mut sse::Resume) -> bool {
        let want = out.id.as_ref().map(|i| i.get().to_string());
        let mut answered = false;
        let mut events = sse::events(resp, self.max_message_size);
        while let Some(ev) = events.next().await {
            match ev {
                sse::Item::Event { id, retry, data } => {
                    state.note(id, retry);
                    if data.is_empty() {
                        if out.is_get_stream() {
                            lock(&self.facts).get_last_event_id = state.last_id.clone();
                        }
                        continue;
                    }
                    let line = Bytes::from(data);
                    if let (Some(w), Ok(msgs)) = (&want, message::parse_line(&line)) {
                        answered |= msgs.iter().any(|m| {
                            m.as_ref().is_ok_and(|m| {
                                m.method.is_none()
                                    && m.id.as_deref().map(RawValue::get) == Some(w.as_str())
                            })
                        });
                    }
                    // The event's data as the SSE parser joined it, measured in one pass.
                    let deep = vocab::jsonrpc::depth::deeper_than(&line, self.max_message_depth);
                    self.deliver_json(&line, out, deep).await;
                    if out.is_get_stream() {
                        // Delivered: the next image resumes after it (issue 32 §1).
                        lock(&self.facts).get_last_event_id = state.last_id.clone();
                    }
                }
                sse::Item::Oversized(len) => {
                    if let Some(id) = out.id.clone() {
                        answered = true;
                        let _ = self
                            .events
                            .send(Event::Discarded(
                                self.generation,
                                Limit::Size(len),
                                Was::Response(Some(id)),
                            ))
                            .await;
                    } else {
                        warn!(server = %self.name, bytes = len, limit = self.max_message_size, "discarded an SSE event over max_message_size");
                    }
                    break;
                }
                sse::Item::Failed(why) => {
                    debug!(server = %self.name, %why, "an SSE stream dropped");
                    break;
                }
            }
            if answered {
                break;
            }
        }
        answered
    }

    /// A GET toward the endpoint with the session's headers.
    async fn get(&self, last_event_id: Option<&str>) -> reqwest::RequestBuilder {
        let (session_id, version) = {
            let f = lock(&self.facts);
            (f.session_id.clone(), f.protocol_version.clone())
        };
        let mut req = self
            .client
            .get(self.url.clone())
            .headers(self.headers.clone())
            .header(ACCEPT, "text/event-stream");
        if let Some(id) = session_id {
            req = req.header(SESSION, id);
        }
        if let Some(v) = version {
            req = req.header(VERSION, v);
        }
        if let Some(l) = last_event_id {
            req = req.header(LAST_EVENT_ID, l);
        }
        if let Some((_, v)) = self.bearer().await {
            req = req.header(AUTHORIZATION, v);
        }
        req
    }

    /// The GET stream for the server's own messages, while the session lives: 405 (or any
    /// other refusal) means the server offers none, which is fine; a stream that ends is
    /// opened again after the server's `retry`, resuming from its last event id.
    async fn listen(self: Arc<Self>) {
        if self.listening.swap(true, Ordering::SeqCst) {
            return;
        }
        /// Clears `listening` however the task ends.
        struct Listening<'a>(&'a AtomicBool);
        impl Drop for Listening<'_> {
            fn drop(&mut self) {
                self.0.store(false, Ordering::SeqCst);
            }
        }
        let _listening = Listening(&self.listening);
        let mut state = sse::Resume {
            last_id: lock(&self.facts).get_last_event_id.clone(),
            retry: None,
        };
        let none = Post {
            line: Bytes::new(),
            id: None,
            method: None,
            name: None,
            modern: false,
            cancels: None,
        };
        loop {
            let req = self.get(state.last_id.as_deref()).await;
            let resp = tokio::select! {
                _ = self.cancel.cancelled() => return,
                r = req.send() => r,
            };
            let resp = match resp {
                Ok(r) if r.status().is_success() => r,
                Ok(r) => {
                    debug!(server = %self.name, status = r.status().as_u16(), "the server offers no GET stream");
                    return;
                }
                // The next POST tells whether the server is reachable.
                Err(_) => return,
            };
            lock(&self.facts).get_stream = true;
            tokio::select! {
                _ = self.cancel.cancelled() => return,
                _ = self.pump_sse(resp, &none, &mut state) => {}
            }
            lock(&self.facts).get_stream = false;
            tokio::select! {
                _ = self.cancel.cancelled() => return,
                _ = tokio::time::sleep(state.retry.unwrap_or(DEFAULT_RETRY)) => {}
            }
        }
    }

    /// `DELETE` for the session, if there is one; bounded by `connect_timeout`, errors only
    /// logged (the server may be gone).
    async fn delete(&self) {
        let (id, version) = {
            let f = lock(&self.facts);
            (f.session_id.clone(), f.protocol_version.clone())
        };
        let Some(id) = id else { return };
        let mut req = self
            .client
            .delete(self.url.clone())
            .headers(self.headers.clone())
            .header(SESSION, id);
        if let Some((_, v)) = self.bearer().await {
            req = req.header(AUTHORIZATION, v);
        }
        if let Some(v) = version {
            req = req.header(VERSION, v);
        }
        match tokio::time::timeout(self.connect_timeout, req.send()).await {
            Ok(Ok(r)) => {
                debug!(server = %self.name, status = r.status().as_u16(), "session deleted")
            }
            Ok(Err(e)) => debug!(server = %self.name, error = %e, "DELETE of the session failed"),
            Err(_) => debug!(server = %self.name, "DELETE of the session timed out"),
        }
        lock(&self.facts).session_id = None;
    }

    /// The server could not be reached: the instance is lost (once).
    async fn unreachable(&self, e: &reqwest::Error) {
        if self.cancel.is_cancelled() {
            return;
        }
        let (kind, detail) = classify::unreachable(e);
        let detail = self.secrets().text(&detail).into_owned();
        let text = format!("unreachable ({}): {detail}", kind.as_str());
        warn!(server = %self.name, url = %self.shown, class = "unreachable", detail = kind.as_str(), error = %detail, "cannot reach the remote server");
        self.note_outage(text);
        self.lose(Lost::Unreachable(kind)).await;
    }

    /// A response stream that broke after its headers: the request was in flight and gets the
    /// outage answer (never a replay); the server answered, so it is not lost.
    async fn dropped(&self, out: &Post, e: &reqwest::Error) {
        if let Some(id) = out.id.clone() {
            self.refuse_id(id, 0, None, &format!("the connection dropped: {e}"))
                .await;
        }
    }

    /// Sends the instance's one [`Event::Lost`] and stops its tasks.
    async fn lose(&self, lost: Lost) {
        if self.lost.swap(true, Ordering::SeqCst) {
            return;
        }
        self.cancel.cancel();
        let _ = self.events.send(Event::Lost(self.generation, lost)).await;
    }

    /// The request of `out` was answered with a bare HTTP status.
    async fn refuse(&self, out: &Post, status: u16, retry_after: Option<Duration>, why: &str) {
        if let Some(id) = out.id.clone() {
            self.refuse_id(id, status, retry_after, why).await;
        }
    }

    async fn refuse_id(
        &self,
        id: Box<RawValue>,
        status: u16,
        retry_after: Option<Duration>,
        why: &str,
    ) {
        let text = if status == 0 {
            why.to_string()
        } else if why.is_empty() {
            format!("HTTP {status}")
        } else {
            format!("HTTP {status}: {why}")
        };
        let refusal = Refusal {
            status,
            retry_after,
            sign_in: false,
        };
        self.send_refusal(id, refusal, text).await;
    }

    /// Tells the core that request `id` got `refusal` (noted in the tail and `status` as
    /// `text`).
    async fn send_refusal(&self, id: Box<RawValue>, refusal: Refusal, text: String) {
        self.note_outage(text);
        let _ = self
            .events
            .send(Event::Refused(self.generation, id, refusal))
            .await;
    }

    /// The request of `out` was refused for want of a sign-in only a person can make.
    async fn refuse_sign_in(&self, out: &Post, status: u16, scope: Option<String>, why: &str) {
        let Some(id) = out.id.clone() else { return };
        let text = match scope {
            Some(s) => format!("HTTP {status}: the server asks for scope `{s}`; {why}"),
            None => format!("HTTP {status}: {why}"),
        };
        let refusal = Refusal {
            status,
            retry_after: None,
            sign_in: true,
        };
        self.send_refusal(id, refusal, text).await;
    }

    fn note_status(&self, status: u16, error: Option<String>) {
        let error = error.map(|e| self.secrets().text(&e).into_owned());
        let mut f = lock(&self.facts);
        f.last_http_status = Some(status);
        if error.is_some() {
            f.last_error = error;
        }
    }

    /// An outage's text, for the instance's tail (outage records' `stderr_tail`) and
    /// `status`'s `last_error`, secrets redacted (issue 47 §5).
    fn note_outage(&self, text: String) {
        let text = self.secrets().text(&text).into_owned();
        self.tail.note(&text);
        lock(&self.facts).last_error = Some(text);
    }

    /// Every secret the server must not read back to a client: the configured headers' and
    /// the sign-in's current and recent tokens (issue 47 §5).
    fn secrets(&self) -> std::borrow::Cow<'_, redact::Secrets> {
        match &self.auth {
            Some(a) => self.secrets.with(&a.secrets()),
            None => std::borrow::Cow::Borrowed(&self.secrets),
        }
    }
}

/// A header value as 2026-07-28 sends a value that is not header-safe: `=?base64?…?=`.
fn header_safe(v: &str) -> String {
    use base64::Engine;
    if v.bytes().all(|b| (0x20..0x7f).contains(&b)) && v.trim() == v {
        v.to_string()
    } else {
        format!(
            "=?base64?{}?=",
            base64::engine::general_purpose::STANDARD.encode(v)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::{header_safe, Post};
    use crate::Outbound;
    use bytes::Bytes;
    use std::borrow::Cow;
    use support::config::shown_url;

    #[test]
    fn shown_urls_never_carry_a_query() {
        assert_eq!(
            shown_url("https://mcp.example.com/mcp?token=s3cret#x"),
            "https://mcp.example.com/mcp"
        );
        assert_eq!(shown_url("::"), "(invalid url)");
    }

    #[test]
    fn outgoing_messages_take_their_headers_from_the_core_never_from_the_line() {
        // Not JSON at all: the session never reads the line, only what the core said of it.
        let line = Bytes::from_static(b"not json: the core's own bytes");
        let o = Post::of(Outbound::request(
            line.clone(),
            7,
            Cow::Borrowed("tools/call"),
            Some("echo".into()),
            true,
        ));
        assert_eq!(o.id.unwrap().get(), "7");
        assert_eq!(o.method.as_deref(), Some("tools/call"));
        assert_eq!(o.name.as_deref(), Some("echo"));
        assert!(o.modern);
        assert_eq!(o.line, line, "sent as it came");
        let n = Post::of(Outbound::notification(
            Bytes::from_static(b"{}"),
            Cow::Borrowed("notifications/initialized"),
            false,
        ));
        assert!(n.id.is_none() && !n.modern && n.cancels.is_none());
        let c = Post::of(Outbound::cancel(Bytes::from_static(b"{}"), 41));
        assert_eq!(c.cancels, Some(41));
        assert_eq!(c.method.as_deref(), Some("notifications/cancelled"));
        let r = Post::of(Outbound::response(Bytes::from_static(b"{}")));
        assert!(r.id.is_none() && r.method.is_none());
        assert_eq!(header_safe("échec"), "=?base64?w6ljaGVj?=");
        assert_eq!(header_safe("echo"), "echo");
    }
}
