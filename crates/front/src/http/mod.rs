//! The Streamable HTTP endpoint in front of each shared child (issue 16).
//!
//! An HTTP client is one more kind of client session of the server actor: the actor sees a
//! [`SessionEvent::Connected`] with a [`ClientTx`] like any socket client, so routing, id
//! rewriting, outage answers and era translation are the same. What this module adds is the
//! mapping between HTTP exchanges and that client's queue:
//!
//! - **Handshake era** (2025-03-26 ... 2025-11-25, [`session`]): `initialize` opens an HTTP
//!   session (`Mcp-Session-Id`), which is one actor client for its whole life. Each POST's
//!   responses go back on that POST's response (one JSON body, or an SSE stream that also
//!   carries the progress of its requests); the child's requests and the other notifications
//!   go on the most recent open POST stream, else the GET stream, else wait (bounded) for one.
//!   DELETE ends the session like a socket client's departure. A POST stream closed before its
//!   answers becomes `notifications/cancelled` for exactly its requests.
//! - **2026-07-28** ([`stateless`]): every request is its own POST and its own short-lived
//!   actor client; the answer is JSON or an SSE stream scoped to that request (its progress
//!   and log messages). Closing the stream is that client's departure: the actor cancels the
//!   request toward the child. Headers are checked against the body (-32020).
//!
//! Access ([`access`]): on TCP a bearer token per server is required, and `Host` and `Origin`
//! are checked (DNS rebinding); on the Unix socket `NAME.http.sock`, `SO_PEERCRED` and the
//! allow-lists apply as on `NAME.sock`, and `Origin` is checked. A session answers only the
//! peer that opened it ([`access::Caller`]: the same token on TCP, the same uid on the Unix
//! socket); a reload that revokes a uid closes its Unix connections (`daemon::sockets`).
//!
//! What no anonymous peer can exhaust (issue 26 §4):
//! - TCP connections that have not passed the access check yet live in a pool of
//!   [`ANONYMOUS_CONNECTIONS`] where a newcomer ends the oldest (`base::admit`), and must pass it
//!   within [`ANONYMOUS_TIMEOUT`] of their accept; the first request that passes moves the
//!   connection to one of [`MAX_CONNECTIONS`] seats. Half-sent heads without a token cannot
//!   keep a client that has one out.
//! - Request bodies are charged to the daemon-wide `client_memory` budget while they are read
//!   and until their messages are handed to the actor; one that would take the total beyond
//!   it is read to its end without being kept and answered 503 (-32002, `Retry-After: 1`).
//! - When `http_max_sessions` sessions of a server are open, `initialize` ends the one idle
//!   longest among those with no stream open (`session::make_room`); only when every one has a
//!   stream open is the newcomer refused (503, -32002).
//! - Refused Host/Origin requests and failed token attempts are logged at most
//!   [`REFUSALS_LOGGED`] per [`REFUSALS_WINDOW`] each, with a count of the suppressed ones
//!   (never the token).
//!
//! HTTP itself is hyper's (HTTP/1.1 with a header-read timeout); SSE framing and keep-alive
//! comments are axum's `Sse`.

use actor::era;
use actor::registry::{Entry, Registry};
use actor::session::{MemoryBudget, Peer};
use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, Method, Request, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http_body_util::BodyExt;
use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use support::config::{HttpConfig, ServerConfig};
use support::logging::LogBudget;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};
use vocab::jsonrpc::message::{self, code, Kind, Message};

pub mod access;

pub mod handoff;
mod router;
pub mod saved;
mod session;
mod stateless;
mod stream;
pub mod url;

/// The header that names a handshake-era session (2025-03-26 transports §Session Management).
pub const SESSION_HEADER: &str = "mcp-session-id";
/// The protocol version header (2025-06-18 and later; required on every 2026-07-28 request).
pub const VERSION_HEADER: &str = "mcp-protocol-version";
/// 2026-07-28: the request's method, checked against the body.
pub const METHOD_HEADER: &str = "mcp-method";
/// 2026-07-28: the tool or prompt name, or the resource URI, of calls that name one.
pub const NAME_HEADER: &str = "mcp-name";
/// JSON-RPC error for HTTP headers that disagree with the body (2026-07-28 §Error Codes).
pub const HEADER_MISMATCH: i64 = -32020;

/// SSE keep-alive comment interval on long streams (issue 16 §3): proxies with idle timeouts
/// of 30-60 s keep the stream open.
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// How long a client may take to send a request head, and how long a kept-alive connection
/// may wait for its next one (hyper's `header_read_timeout`).
const HEADER_TIMEOUT: Duration = Duration::from_secs(30);
/// The most a connection's read buffer holds (hyper's `max_buf_size`; at least 8 KiB): a
/// request head beyond it is refused (431), and a body is read in pieces of at most this.
/// With [`ANONYMOUS_CONNECTIONS`], it bounds what half-sent heads hold to 8 MiB.
const READ_BUFFER: usize = 64 * 1024;
/// Authenticated HTTP connections served at once per listener (on TCP: connections a request
/// of which passed the access check; on `NAME.http.sock`: every connection, `SO_PEERCRED`
/// having passed). On TCP, a request that would need one more gets 503 and its connection is
/// closed; on the Unix socket, the connection is closed at accept.
pub const MAX_CONNECTIONS: usize = 1024;
/// TCP connections that have not passed the access check yet (no complete request head, or
/// no valid token yet), at most: a newcomer beyond this ends the oldest (issue 26 §4).
pub const ANONYMOUS_CONNECTIONS: usize = 128;
/// How long after its accept a TCP connection may stay without a request that passed the
/// access check: then it is closed, answered or not (issue 26 §4; the first head of a
/// well-behaved client comes in milliseconds).
pub const ANONYMOUS_TIMEOUT: Duration = Duration::from_secs(5);
/// Log lines about refused Host/Origin requests, and (separately) about failed token
/// attempts, per [`REFUSALS_WINDOW`]; the rest are counted and the next line says how many.
pub const REFUSALS_LOGGED: u32 = 20;
/// See [`REFUSALS_LOGGED`].
pub const REFUSALS_WINDOW: Duration = Duration::from_secs(10);

/// How a request reached us.
#[derive(Debug, Clone)]
pub enum Via {
    /// The TCP listener (`http_listen`): any server, by path; token, Host and Origin checked.
    Tcp {
        /// The peer's address (for the log).
        addr: std::net::SocketAddr,
        /// Who the peer is for the share of sessions one holder may keep (issue 47 §4): on
        /// loopback the uid the kernel gives for its socket, else its address.
        holder: actor::seats::Holder,
        /// Anonymous until a request of this connection passes the access check.
        admission: Arc<base::admit::Admission>,
    },
    /// A server's `NAME.http.sock`, whose peer passed the `SO_PEERCRED` check.
    Unix {
        /// The server this socket serves.
        server: String,
        /// Who connected.
        peer: Peer,
        /// Cancelled when a reload no longer allows this peer: its requests are refused and
        /// its connection closed.
        revoked: CancellationToken,
    },
}

/// The endpoint's shared state: the servers (the daemon's registry), the `http_*` settings,
/// the TCP tokens and the open handshake-era sessions. One per daemon.
#[derive(Debug)]
pub struct Front {
    registry: Registry,
    settings: RwLock<HttpConfig>,
    tokens: RwLock<HashMap<String, Arc<str>>>,
    /// Each endpoint's named tokens (issue 31 §5): label id and token.
    labelled: RwLock<HashMap<String, Arc<NamedTokens>>>,
    sessions: Mutex<HashMap<String, Arc<session::HttpSession>>>,
    /// Open 2026-07-28 requests per server (against `http_max_requests`).
    requests: Mutex<HashMap<String, usize>>,
    /// The identity given to TCP clients in the actor (token-authenticated: the daemon's own).
    me: Peer,
    /// The daemon-wide `client_memory` budget, which request bodies are charged to.
    memory: Arc<MemoryBudget>,
    /// Log lines about refused Host/Origin requests ([`REFUSALS_LOGGED`]).
    refusals_log: Mutex<LogBudget>,
    /// Log lines about failed token attempts ([`REFUSALS_LOGGED`]).
    tokens_log: Mutex<LogBudget>,
    /// Log lines about a child's questions no stream of their session could carry.
    questions_log: Mutex<LogBudget>,
    /// Log lines about bodies refused over `client_memory` and sessions ended to make room.
    limits_log: Mutex<LogBudget>,
    /// Cancelled at shutdown: every stream and session ends.
    stop: CancellationToken,
    /// Connections parked for an upgrade's hand-over (issue 32 §1).
    handoff: handoff::Handoff,
    /// Where the open handshake-era sessions are recorded (issue 32 §2): set once by
    /// [`Front::restore_sessions`].
    saved: std::sync::OnceLock<base::statefile::Writer>,
    /// Cleared at the start of a shutdown ([`Front::stop_recording`]): the sessions ending then
    /// stay in the record, for the next start to reopen.
    recording: std::sync::atomic::AtomicBool,
    /// `false` from [`Front::expect_restore`] until [`Front::restore_sessions`] is done: a
    /// request naming a session waits for it (a socket accepts before the restore).
    restored: tokio::sync::watch::Sender<bool>,
}

impl Front {
    /// The connections' hand-off for an upgrade (issue 32 §1).
    pub fn hand_off(&self) -> &handoff::Handoff {
        &self.handoff
    }

    /// A front over `registry` with these settings; request bodies are charged to `memory`
    /// (`client_memory`); `stop` ends every stream.
    pub fn new(
        registry: Registry,
        settings: HttpConfig,
        memory: Arc<MemoryBudget>,
        stop: CancellationToken,
    ) -> Arc<Front> {
        let me = Peer {
            uid: nix::unistd::geteuid().as_raw(),
            gid: nix::unistd::getegid().as_raw(),
            pid: None,
            label: None,
            endpoint: None,
            transport: Default::default(),
        };
        let front = Arc::new(Front {
            registry,
            settings: RwLock::new(settings),
            tokens: RwLock::new(HashMap::new()),
            labelled: RwLock::new(HashMap::new()),
            sessions: Mutex::new(HashMap::new()),
            requests: Mutex::new(HashMap::new()),
            me,
            memory,
            refusals_log: Mutex::new(LogBudget::new(REFUSALS_LOGGED, REFUSALS_WINDOW)),
            tokens_log: Mutex::new(LogBudget::new(REFUSALS_LOGGED, REFUSALS_WINDOW)),
            questions_log: Mutex::new(LogBudget::new(REFUSALS_LOGGED, REFUSALS_WINDOW)),
            limits_log: Mutex::new(LogBudget::new(REFUSALS_LOGGED, REFUSALS_WINDOW)),
            stop,
            handoff: handoff::Handoff::default(),
            saved: std::sync::OnceLock::new(),
            recording: std::sync::atomic::AtomicBool::new(true),
            restored: tokio::sync::watch::Sender::new(true),
        });
        tokio::spawn(session::reap(Arc::downgrade(&front)));
        front
    }

    /// New `http_*` settings (a reload): origins, hosts and limits apply to the next request.
    pub fn set_settings(&self, settings: HttpConfig) {
        *self.settings.write().unwrap_or_else(|p| p.into_inner()) = settings;
    }

    fn settings(&self) -> HttpConfig {
        self.settings
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Sets (or, with `None`, forgets) the TCP bearer token of server `name`.
    pub fn set_token(&self, name: &str, token: Option<String>) {
        let mut t = self.tokens.write().unwrap_or_else(|p| p.into_inner());
        match token {
            Some(tok) => {
                t.insert(name.to_string(), tok.into());
            }
            None => {
                t.remove(name);
            }
        }
    }

    /// Sets endpoint `name`'s named tokens (label id, token); empty removes them.
    pub fn set_labelled(&self, name: &str, tokens: Vec<(u64, String)>) {
        let mut t = self.labelled.write().unwrap_or_else(|p| p.into_inner());
        if tokens.is_empty() {
            t.remove(name);
        } else {
            t.insert(name.to_string(), Arc::new(tokens));
        }
    }

    fn labelled(&self, name: &str) -> Arc<NamedTokens> {
        self.labelled
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
            .unwrap_or_default()
    }

    /// Reopens the handshake-era sessions recorded in `<state_dir>/http-sessions-HASH.json`
    /// ([`saved`]) by the last run, then records the open sessions there from now on (issue
    /// 32 §2). A session whose server is gone or no longer served over HTTP, or whose TCP
    /// token changed, is not reopened; an unusable file is logged and ignored.
    pub async fn restore_sessions(
        self: &Arc<Front>,
        state_dir: &std::path::Path,
        socket_dir: &std::path::Path,
    ) {
        let path = state_dir.join(saved::file_name(socket_dir));
        let read_path = path.clone();
        let read = tokio::task::spawn_blocking(move || {
            base::statefile::read_own(&read_path, saved::MAX_FILE)
        })
        .await
        .map_err(|e| std::io::Error::other(e.to_string()))
        .and_then(|r| r);
        let list = match read.map(|text| saved::decode(&text)) {
            Ok(Ok(list)) => list,
            Ok(Err(why)) => {
                warn!(path = %path.display(), "the record of HTTP sessions is not used: {why}; clients of the last run open new sessions");
                Vec::new()
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => {
                warn!(path = %path.display(), error = %e, "the record of HTTP sessions is not used; clients of the last run open new sessions");
                Vec::new()
            }
        };
        let (mut restored, mut skipped) = (0usize, 0usize);
        for s in list {
            let entry = match self.registry.get(&s.server) {
                Some(e) if e.cfg.http => e,
                _ => {
                    skipped += 1;
                    continue;
                }
            };
            let peer = match s.owner {
                access::Caller::Tcp { token, label } => {
                    let current = match label {
                        None => self.token(&s.server).map(|t| access::digest(&t)),
                        Some(l) => self
                            .labelled(&s.server)
                            .iter()
                            .find(|(id, _)| *id == l)
                            .map(|(_, t)| access::digest(t)),
                    };
                    if current != Some(token) {
                        skipped += 1;
                        continue;
                    }
                    Peer {
                        label,
                        ..self.me.clone()
                    }
                }
                access::Caller::Unix { .. } => Peer {
                    uid: s.uid,
                    gid: s.gid,
                    pid: None,
                    label: None,
                    endpoint: None,
                    transport: Default::default(),
                },
            };
            if session::restore(self, &entry, peer, s).await {
                restored += 1;
            } else {
                skipped += 1;
            }
        }
        if restored + skipped > 0 {
            info!(restored, skipped, "HTTP sessions of the last run reopened");
        }
        self.restored.send_replace(true);
        if let Some(w) =
            base::statefile::Writer::start(path, "HTTP sessions will not survive a restart")
        {
            let _ = self.saved.set(w);
        }
        self.save_sessions();
    }

    /// Makes requests naming a session wait until [`Front::restore_sessions`] is done: called
    /// before the first socket accepts, when sessions will be restored.
    pub fn expect_restore(&self) {
        self.restored.send_replace(false);
    }

    /// Waits until the sessions of the last run are reopened (at once when none are expected).
    async fn wait_restored(&self) {
        let mut rx = self.restored.subscribe();
        let _ = rx.wait_for(|done| *done).await;
    }

    /// Stops recording session changes: called when a shutdown begins, so the sessions it
    /// ends stay in the record the next start reopens.
    pub fn stop_recording(&self) {
        self.recording
            .store(false, std::sync::atomic::Ordering::SeqCst);
    }

    /// Records the open sessions whose handshake is known (not once a shutdown began). The
    /// list is built and queued under the table's lock, so an older list is never queued
    /// after a newer one.
    fn save_sessions(&self) {
        if !self.recording.load(std::sync::atomic::Ordering::SeqCst) || self.stop.is_cancelled() {
            return;
        }
        let Some(writer) = self.saved.get() else {
            return;
        };
        let sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        let list: Vec<saved::Saved> = sessions
            .values()
            .filter(|s| !s.is_ended())
            .filter_map(|s| s.saved())
            .collect();
        writer.save(saved::encode(&list));
        drop(sessions);
    }

    fn token(&self, name: &str) -> Option<Arc<str>> {
        self.tokens
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
    }
}

/// An endpoint's named tokens: the label's id ([`support::config::label_id`]) and
/// the token.
type NamedTokens = Vec<(u64, String)>;

/// Whether `budget` allows one more log line now: `Some(suppressed since the last one)`.
fn log_allowed(budget: &Mutex<LogBudget>) -> Option<u64> {
    budget
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .allow(std::time::Instant::now())
}

/// An attacker's header value as it may be logged: at most 128 characters (the log is
/// JSON-escaped or Debug-quoted by the subscriber).
fn loggable(v: &str) -> &str {
    match v.char_indices().nth(128) {
        Some((at, _)) => v.get(..at).unwrap_or(v),
        None => v,
    }
}

/// Serves HTTP/1.1 on one accepted connection until it closes, `close` completes (the
/// connection is dropped at once: revoked, or anonymous for too long) or the front's `stop`
/// fires (a graceful close of at most 2 s).
///
/// An upgrade's hand-off ([`Front::hand_off`], issue 32 §1) stops it taking new requests;
/// once between requests its socket and hyper's read-ahead are parked, not closed.
pub async fn serve_connection<I>(
    io: I,
    front: Arc<Front>,
    via: Via,
    close: impl std::future::Future<Output = ()>,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    I: handoff::IntoFd,
{
    let stop = front.stop.clone();
    let owner = front.clone();
    let _served = owner.handoff.serve();
    let mut asked = owner.handoff.watch();
    let server = match &via {
        Via::Unix { server, .. } => Some(server.clone()),
        Via::Tcp { .. } => None,
    };
    // Boxed, so the connection is `Unpin` and can be driven without shutting its socket.
    type Answer =
        std::pin::Pin<Box<dyn std::future::Future<Output = Result<Response, Infallible>> + Send>>;
    let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
        let front = front.clone();
        let via = via.clone();
        Box::pin(async move {
            let _handling = front.handoff.handling();
            Ok::<_, Infallible>(handle(front.clone(), via, req.map(Body::new)).await)
        }) as Answer
    });
    let builder = base::http1::builder(base::http1::Bounds {
        head_timeout: HEADER_TIMEOUT,
        buffer_max: READ_BUFFER,
        keep_alive: true,
    });
    let mut conn = builder.serve_connection(hyper_util::rt::TokioIo::new(io), service);
    tokio::pin!(close);
    enum Next {
        Done(hyper::Result<()>),
        Closed,
        Stop,
        HandOff,
    }
    let mut handing_off = false;
    loop {
        // The hand-off is looked at first: a connection whose task starts after the daemon
        // found every connection parked (accepted just before, or just after, its quiet point)
        // must park before hyper reads a request of it, or that request would reach an actor
        // that is handing over and its answer would be cut (seen once in twenty upgrades
        // under load: "SSE stream ended without a response").
        let next = tokio::select! {
            biased;
            Ok(_) = asked.wait_for(|a| *a), if !handing_off => Next::HandOff,
            r = std::future::poll_fn(|cx| conn.poll_without_shutdown(cx)) => Next::Done(r),
            () = &mut close => Next::Closed,
            _ = stop.cancelled() => Next::Stop,
        };
        match next {
            Next::HandOff => {
                handing_off = true;
                std::pin::Pin::new(&mut conn).graceful_shutdown();
            }
            Next::Done(Err(e)) => {
                debug!(error = %e, "HTTP connection ended with an error");
                return;
            }
            Next::Done(Ok(())) if handing_off && *asked.borrow() => {
                let parts = conn.into_parts();
                if let Some(fd) = handoff::IntoFd::into_fd(parts.io.into_inner()) {
                    owner.handoff.park(handoff::ParkedConn {
                        fd,
                        read_ahead: parts.read_buf,
                        server,
                    });
                }
                return;
            }
            Next::Done(Ok(())) => return,
            Next::Closed => {
                debug!("HTTP connection closed");
                return;
            }
            Next::Stop => {
                std::pin::Pin::new(&mut conn).graceful_shutdown();
                let _ = tokio::time::timeout(
                    Duration::from_secs(2),
                    std::future::poll_fn(|cx| conn.poll_without_shutdown(cx)),
                )
                .await;
                return;
            }
        }
    }
}

/// Accepts TCP connections for the endpoint until `stop` fires. Each starts anonymous (one
/// of [`ANONYMOUS_CONNECTIONS`], the oldest ended for a newcomer, closed [`ANONYMOUS_TIMEOUT`]
/// after its accept unless a request of it passed the access check) and then holds one of
/// [`MAX_CONNECTIONS`] seats (module documentation). A failing `accept` is retried after a
/// pause.
///
/// `resumed` are connections the previous image handed over between two requests (issue 32
/// §1): served first, each as a new anonymous connection with hyper's read-ahead in front.
pub async fn serve_tcp(
    listener: tokio::net::TcpListener,
    front: Arc<Front>,
    (stop, tracker): (CancellationToken, tokio_util::task::TaskTracker),
    resumed: Vec<handoff::ParkedConn>,
) {
    let anonymous = base::admit::Pool::new(ANONYMOUS_CONNECTIONS);
    let seats = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    // One line per 10 s while the anonymous pool overflows (a flood, or a crowd).
    let mut crowded = LogBudget::new(1, Duration::from_secs(10));
    let mut resumed: std::collections::VecDeque<_> = resumed
        .into_iter()
        .filter_map(|c| {
            let std = std::net::TcpStream::from(c.fd);
            std.set_nonblocking(true).ok()?;
            let stream = tokio::net::TcpStream::from_std(std).ok()?;
            let addr = stream.peer_addr().ok()?;
            Some((handoff::Prefixed::new(c.read_ahead, stream), addr))
        })
        .collect();
    loop {
        let (stream, addr) = match resumed.pop_front() {
            Some(x) => x,
            None => tokio::select! {
                r = listener.accept() => match r {
                    Ok((s, a)) => (handoff::Prefixed::new(Bytes::new(), s), a),
                    Err(e) => {
                        warn!(error = %e, "HTTP accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
                _ = stop.cancelled() => return,
            },
        };
        let (place, evicted) = anonymous.admit();
        if let Some(oldest) = evicted {
            oldest.cancel();
            if let Some(suppressed) = crowded.allow(std::time::Instant::now()) {
                warn!(
                    limit = ANONYMOUS_CONNECTIONS,
                    suppressed,
                    "{ANONYMOUS_CONNECTIONS} HTTP connections without a valid token are open: ending the oldest to make room for each new one"
                );
            }
        }
        let _ = stream.get_ref().set_nodelay(true);
        let holder = holder_of(stream.get_ref(), addr);
        let admission = Arc::new(base::admit::Admission::anonymous(place, seats.clone()));
        let via = Via::Tcp {
            addr,
            holder,
            admission: admission.clone(),
        };
        let front = front.clone();
        tracker.spawn(async move {
            let close = async {
                let (ended, authenticated) = (admission.ended(), admission.authenticated());
                tokio::select! {
                    _ = ended.cancelled() => {}
                    _ = tokio::time::sleep(ANONYMOUS_TIMEOUT) => {
                        if authenticated.is_cancelled() {
                            // Authenticated in time: only the peer or `stop` ends it now.
                            std::future::pending::<()>().await;
                        }
                    }
                }
            };
            serve_connection(stream, front, via, close).await;
        });
    }
}

/// Who holds a TCP connection from `addr` for the share of sessions (issue 47 §4): a
/// loopback peer by the uid the kernel gives for its socket ([`base::loopback`]; many local
/// users come from 127.0.0.1 with one token), any other by its address (a pod).
fn holder_of(stream: &tokio::net::TcpStream, addr: std::net::SocketAddr) -> actor::seats::Holder {
    use actor::seats::Holder;
    let ip = addr.ip().to_canonical();
    if !ip.is_loopback() {
        return Holder::Addr(ip);
    }
    stream
        .local_addr()
        .ok()
        .and_then(|local| base::loopback::tcp_peer_uid(local, addr))
        .map_or(Holder::Addr(ip), Holder::Uid)
}

/// One request: access checks, then POST, GET or DELETE of the MCP endpoint.
async fn handle(front: Arc<Front>, via: Via, req: Request<Body>) -> Response {
    let path = req.uri().path().to_string();
    let (server, peer) = match &via {
        Via::Tcp { .. } => match path
            .strip_prefix("/mcp/")
            .map(|n| n.trim_end_matches('/'))
            .filter(|n| !n.is_empty() && !n.contains('/'))
        {
            Some(n) => (n.to_string(), front.me.clone()),
            None => {
                return plain(
                    StatusCode::NOT_FOUND,
                    "not found: the MCP endpoint of server NAME is /mcp/NAME",
                )
            }
        },
        Via::Unix {
            server,
            peer,
            revoked,
        } => {
            if revoked.is_cancelled() {
                return close_connection(plain(
                    StatusCode::FORBIDDEN,
                    "Forbidden: this uid is no longer allowed (allowed_uids/allowed_gids)",
                ));
            }
            let ok = matches!(path.as_str(), "/" | "/mcp" | "/mcp/")
                || path
                    .strip_prefix("/mcp/")
                    .is_some_and(|n| n.trim_end_matches('/') == server);
            if !ok {
                return plain(StatusCode::NOT_FOUND, "not found: the MCP endpoint is /mcp");
            }
            (server.clone(), peer.clone())
        }
    };
    if req.headers().contains_key(SESSION_HEADER) {
        // A session of the last run may not be reopened yet (issue 32 §2).
        front.wait_restored().await;
    }
    let settings = front.settings();
    let caller = match access::check(&front, &settings, &via, &server, req.headers()) {
        Ok(c) => c,
        Err(refusal) => return *refusal,
    };
    let peer = match caller {
        access::Caller::Tcp { label, .. } => Peer { label, ..peer },
        access::Caller::Unix { .. } => peer,
    };
    if let Via::Tcp { admission, .. } = &via {
        if admission.authenticate().is_err() {
            debug!("HTTP request refused: {MAX_CONNECTIONS} authenticated connections open");
            let mut r = rpc_error(
                StatusCode::SERVICE_UNAVAILABLE,
                None,
                code::LIMIT_EXCEEDED,
                &format!("{MAX_CONNECTIONS} HTTP connections are open; retry shortly"),
            );
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            return close_connection(r);
        }
    }
    let entry = match front.registry.get(&server) {
        Some(e) if e.cfg.http => e,
        _ => return plain(StatusCode::NOT_FOUND, "no such server on this endpoint"),
    };
    let method = req.method().clone();
    let (parts, body) = req.into_parts();
    let headers = parts.headers;
    let holder = match &via {
        Via::Tcp { holder, .. } => *holder,
        Via::Unix { peer, .. } => actor::seats::Holder::Uid(peer.uid),
    };
    let who = Who {
        peer,
        caller,
        holder,
    };
    match method {
        Method::POST => post(&front, &settings, entry, who, headers, body).await,
        Method::GET => session::get(&front, &server, caller, &headers),
        Method::DELETE => session::delete(&front, &server, caller, &headers).await,
        _ => {
            let mut r = plain(StatusCode::METHOD_NOT_ALLOWED, "use POST, GET or DELETE");
            r.headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("GET, POST, DELETE"));
            r
        }
    }
}

/// Who sent a request: the identity the actor sees, and the one sessions are bound to.
#[derive(Debug, Clone)]
struct Who {
    peer: Peer,
    caller: access::Caller,
    /// The user (or pod) behind it, for the share of sessions (issue 47 §4).
    holder: actor::seats::Holder,
}

/// A POST: parsed, then given to its session, a new session (`initialize`), or answered as a
/// 2026-07-28 request.
async fn post(
    front: &Arc<Front>,
    settings: &HttpConfig,
    entry: Entry,
    who: Who,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let cfg = entry.cfg.clone();
    let limits = BodyLimits {
        max: cfg.max_message_size,
        depth: cfg.max_message_depth,
        stall: cfg.client_stall_timeout,
        memory: &front.memory,
        log: &front.limits_log,
    };
    let (body, charge, deep) = match read_body(body, limits).await {
        Ok(b) => b,
        Err(refusal) => return refusal,
    };
    if !accepts_json_post(&headers) {
        return rpc_error(
            StatusCode::NOT_ACCEPTABLE,
            None,
            code::INVALID_REQUEST,
            "Not Acceptable: the client must accept application/json (and text/event-stream for streamed answers)",
        );
    }
    let is_batch = body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[');
    let msgs = match message::parse_line(&body) {
        Ok(v) if !v.is_empty() => v,
        Ok(_) => {
            return rpc_error(
                StatusCode::BAD_REQUEST,
                None,
                code::INVALID_REQUEST,
                "empty batch",
            )
        }
        Err(e) => return rpc_error(StatusCode::BAD_REQUEST, None, e.code(), &e.to_string()),
    };
    let mut parsed = Vec::with_capacity(msgs.len());
    for m in msgs {
        match m {
            Ok(m) => parsed.push(m),
            Err(e) => return rpc_error(StatusCode::BAD_REQUEST, None, e.code(), &e.to_string()),
        }
    }
    if deep {
        // Nested past `max_message_depth` (issue 47 §7): nothing of it reaches the server.
        if let Some(suppressed) = log_allowed(&front.limits_log) {
            warn!(server = %cfg.name, limit = cfg.max_message_depth, suppressed,
                "HTTP request body nested deeper than max_message_depth: refusing it (400)");
        }
        return rpc_error(
            StatusCode::BAD_REQUEST,
            first_id(&parsed),
            code::INVALID_REQUEST,
            &format!(
                "message nested deeper than max_message_depth ({} levels of arrays and objects); not relayed",
                cfg.max_message_depth
            ),
        );
    }
    // The messages share the body's buffer: `charge` goes with them until the actor has them.
    drop(body);
    trace_headers_into_meta(&headers, &mut parsed);
    let sse = accepts_sse(&headers);
    // The era is the body's (2026-07-28 `versioning`: "a request carrying modern per-request
    // `_meta` is served statelessly"); the headers are only checked against it.
    let modern_header =
        header_str(&headers, VERSION_HEADER).is_some_and(|v| !era::HANDSHAKE_VERSIONS.contains(&v));
    if is_modern(&headers, &parsed) {
        if is_batch || parsed.len() != 1 {
            return rpc_error(
                StatusCode::BAD_REQUEST,
                None,
                code::INVALID_REQUEST,
                "2026-07-28 requests are sent one per POST (no batches)",
            );
        }
        let Some(m) = parsed.pop() else {
            return plain(StatusCode::BAD_REQUEST, "empty request");
        };
        return stateless::post(
            front,
            settings,
            &entry,
            who.peer,
            &headers,
            (m, charge),
            sse,
        )
        .await;
    }
    if modern_header {
        // `initialize` under a 2026-07-28 version header.
        return rpc_error(
            StatusCode::BAD_REQUEST,
            first_id(&parsed),
            HEADER_MISMATCH,
            "Header mismatch: MCP-Protocol-Version names 2026-07-28, which has no initialize",
        );
    }
    if let Some(sid) = header_str(&headers, SESSION_HEADER) {
        let Some(s) = session::find(front, &entry.cfg.name, sid, who.caller) else {
            return session::not_found();
        };
        if let Some(bad) = bad_handshake_version(&headers) {
            return bad;
        }
        return s.post((parsed, charge), is_batch, sse).await;
    }
    let initialize = parsed
        .iter()
        .any(|m| m.kind == Kind::Request && m.method() == "initialize");
    if initialize {
        if !session::make_room(
            front,
            &cfg.name,
            settings.max_sessions,
            (who.caller, Some(who.holder)),
        )
        .await
        {
            return rpc_error(
                StatusCode::SERVICE_UNAVAILABLE,
                None,
                code::LIMIT_EXCEEDED,
                &format!(
                    "server `{}` has http_max_sessions ({}) HTTP sessions open, each with a stream open",
                    cfg.name, settings.max_sessions
                ),
            );
        }
        let s = match session::open(front, &entry, who.peer, (who.caller, Some(who.holder))).await {
            Some(s) => s,
            None => return unavailable(&cfg),
        };
        let mut r = s.post((parsed, charge), is_batch, sse).await;
        if let Ok(v) = HeaderValue::from_str(&s.id) {
            r.headers_mut().insert(SESSION_HEADER, v);
        }
        return r;
    }
    if let Some(bad) = bad_handshake_version(&headers) {
        return bad;
    }
    rpc_error(
        StatusCode::BAD_REQUEST,
        first_id(&parsed),
        code::INVALID_REQUEST,
        "Bad Request: Mcp-Session-Id header is required (send initialize first, or use protocol version 2026-07-28 with its per-request _meta)",
    )
}

/// What a POST body may take.
#[derive(Clone, Copy)]
struct BodyLimits<'a> {
    /// `max_message_size`: 413 beyond.
    max: usize,
    /// `max_message_depth`: measured as the body arrives (issue 47 §7).
    depth: usize,
    /// `client_stall_timeout`: the longest pause between two pieces of the body (408 after).
    stall: Duration,
    /// `client_memory`: what every body being read or held, and every socket client's
    /// unfinished line, may hold together (503 beyond).
    memory: &'a Arc<MemoryBudget>,
    /// The log lines of refusals.
    log: &'a Mutex<LogBudget>,
}

/// The bytes of one request body charged to `client_memory`, given back when dropped.
#[derive(Debug)]
struct Charge {
    memory: Arc<MemoryBudget>,
    held: usize,
}

impl Charge {
    /// Charges `now` bytes (it held `self.held`); `false` when that takes the budget's total
    /// beyond its limit (nothing is then held any more).
    fn grow(&mut self, now: usize) -> bool {
        self.memory.update(self.held, now);
        self.held = now;
        if self.memory.used() > self.memory.limit() {
            self.memory.update(self.held, 0);
            self.held = 0;
            return false;
        }
        true
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.memory.update(self.held, 0);
    }
}

/// Reads a POST body within `limits` (see [`BodyLimits`]; a client that stops mid-body
/// cannot hold the connection, as `client_stall_timeout` does on the socket). The body, its
/// [`Charge`] on `client_memory` and whether it nests deeper than `max_message_depth`
/// (measured piece by piece as it arrives, no second pass), or the answer to send instead:
/// - 413 (-32600) beyond `max_message_size`;
/// - 408 (-32600) after `client_stall_timeout` without a byte;
/// - 503 (-32002, `Retry-After: 1`) when holding it would take `client_memory` beyond its
///   limit: the rest of the body is then read and dropped (so the client reads the answer
///   rather than a reset connection), within the same size and time limits.
async fn read_body(body: Body, limits: BodyLimits<'_>) -> Result<(Bytes, Charge, bool), Response> {
    let BodyLimits {
        max,
        depth,
        stall,
        memory,
        log,
    } = limits;
    let mut body = http_body_util::Limited::new(body, max);
    let mut buf = bytes::BytesMut::new();
    let mut charge = Charge {
        memory: memory.clone(),
        held: 0,
    };
    let mut over_budget = false;
    let mut depth = vocab::jsonrpc::depth::Depth::new(depth);
    loop {
        match tokio::time::timeout(stall, body.frame()).await {
            Err(_) => {
                return Err(rpc_error(
                    StatusCode::REQUEST_TIMEOUT,
                    None,
                    code::INVALID_REQUEST,
                    &format!(
                        "no byte of the body for {:.0} s (client_stall_timeout)",
                        stall.as_secs_f64()
                    ),
                ))
            }
            Ok(None) if over_budget => {
                let mut r = rpc_error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    None,
                    code::LIMIT_EXCEEDED,
                    &format!(
                        "the supervisor's client_memory budget ({} bytes) is held by request bodies and clients' unfinished input; retry shortly",
                        memory.limit()
                    ),
                );
                r.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
                return Err(r);
            }
            Ok(None) => return Ok((buf.freeze(), charge, depth.finish())),
            Ok(Some(Ok(frame))) => {
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                if over_budget {
                    continue;
                }
                if !charge.grow(buf.len().saturating_add(data.len())) {
                    if let Some(suppressed) = log_allowed(log) {
                        warn!(
                            held_bytes = buf.len(),
                            total_bytes = memory.used(),
                            suppressed,
                            "HTTP request body over the supervisor's client_memory budget: refusing it (503)"
                        );
                    }
                    over_budget = true;
                    buf = bytes::BytesMut::new();
                    continue;
                }
                let from = buf.len();
                buf.extend_from_slice(&data);
                depth.feed(&buf, from);
            }
            Ok(Some(Err(e))) => {
                let too_big = e
                    .downcast_ref::<http_body_util::LengthLimitError>()
                    .is_some();
                return Err(if too_big {
                    rpc_error(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        None,
                        code::INVALID_REQUEST,
                        &format!("the body exceeds max_message_size ({max} bytes)"),
                    )
                } else {
                    plain(
                        StatusCode::BAD_REQUEST,
                        "the request body could not be read",
                    )
                });
            }
        }
    }
}

/// Whether a POST is a 2026-07-28 one: a message carries the per-request `_meta` envelope
/// (the era is the body's, as in the TypeScript SDK's classification), or the version header
/// names a version after the handshake era on anything but `initialize` (then the envelope's
/// absence is an error, never a silent fall back to the handshake era).
/// Traces on (issue 17 §4): a valid `traceparent` header (with its `tracestate`) becomes
/// `params._meta.traceparent` (and `tracestate`) of every request in the POST whose body has
/// no `_meta.traceparent`, so the actor reads one place. A body that has one keeps it (the
/// MCP conventions carry trace context per message in `_meta`; an invalid one starts a new
/// trace); an invalid header is ignored. Traces off: nothing is read or changed.
fn trace_headers_into_meta(headers: &HeaderMap, msgs: &mut [Message]) {
    use support::observe::trace::{self, context, TraceParent};
    if !trace::enabled() {
        return;
    }
    let Some(parent) =
        header_str(headers, trace::META_TRACEPARENT).filter(|v| TraceParent::parse(v).is_some())
    else {
        return;
    };
    let mut meta = serde_json::Map::new();
    meta.insert(trace::META_TRACEPARENT.into(), parent.into());
    if let Some(state) = header_str(headers, trace::META_TRACESTATE).and_then(context::tracestate) {
        meta.insert(trace::META_TRACESTATE.into(), state.into());
    }
    for m in msgs.iter_mut().filter(|m| m.kind == Kind::Request) {
        let [own] = era::meta_strings(m.params.as_deref(), [trace::META_TRACEPARENT]);
        if own.is_none() && era::can_carry_meta(m.params.as_deref()) {
            m.params = Some(era::add_envelope(m.params.as_deref(), &meta));
        }
    }
}

fn is_modern(headers: &HeaderMap, msgs: &[Message]) -> bool {
    let claim = msgs
        .iter()
        .any(|m| era::envelope_version(m.params.as_deref()).is_some());
    let by_header =
        header_str(headers, VERSION_HEADER).is_some_and(|v| !era::HANDSHAKE_VERSIONS.contains(&v));
    let initialize = msgs
        .iter()
        .any(|m| m.kind == Kind::Request && m.method() == "initialize");
    claim || (by_header && !initialize)
}

/// A handshake-era request whose `MCP-Protocol-Version` names no version we serve: 400
/// (2025-06-18 transports §Protocol Version Header).
fn bad_handshake_version(headers: &HeaderMap) -> Option<Response> {
    let v = header_str(headers, VERSION_HEADER)?;
    if era::HANDSHAKE_VERSIONS.contains(&v) {
        return None;
    }
    Some(rpc_error(
        StatusCode::BAD_REQUEST,
        None,
        code::INVALID_REQUEST,
        &format!(
            "Bad Request: unsupported MCP-Protocol-Version `{v}` (supported: {})",
            era::HANDSHAKE_VERSIONS.join(", ")
        ),
    ))
}

fn first_id(msgs: &[Message]) -> Option<&serde_json::value::RawValue> {
    msgs.iter()
        .find(|m| m.kind == Kind::Request)
        .and_then(|m| m.id.as_deref())
}

/// A header's value as text, when present and visible ASCII.
pub(crate) fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
}

fn accept_has(headers: &HeaderMap, what: &str) -> bool {
    headers.get_all(header::ACCEPT).iter().any(|v| {
        v.to_str().is_ok_and(|v| {
            v.split(',').any(|t| {
                let t = t.split(';').next().unwrap_or("").trim();
                let family = what.split('/').next().unwrap_or("");
                t.eq_ignore_ascii_case(what)
                    || t == "*/*"
                    || t.strip_suffix("/*")
                        .is_some_and(|f| f.eq_ignore_ascii_case(family))
            })
        })
    })
}

/// A POST is answered with SSE when the client accepts it (every SDK client does), else
/// with one JSON body; a client that accepts no JSON gets 406, as does one with no `Accept`
/// (both official SDKs answer 406 there; 2025-03-26 transports §Sending Messages asks
/// clients to list both types).
fn accepts_json_post(headers: &HeaderMap) -> bool {
    accept_has(headers, "application/json")
}

/// Whether the answer may be an SSE stream.
fn accepts_sse(headers: &HeaderMap) -> bool {
    headers.get(header::ACCEPT).is_some() && accept_has(headers, "text/event-stream")
}

/// A plain-text answer.
pub(crate) fn plain(status: StatusCode, text: &'static str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        text,
    )
        .into_response()
}

/// `r`, after which the connection is closed (`Connection: close`).
fn close_connection(mut r: Response) -> Response {
    r.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    r
}

/// A JSON-RPC error as the body of an HTTP answer with `status`.
pub(crate) fn rpc_error(
    status: StatusCode,
    id: Option<&serde_json::value::RawValue>,
    code: i64,
    text: &str,
) -> Response {
    let null = message::raw_null();
    let line = message::error_response(id.unwrap_or(&null), code, text, None);
    json_body(status, trim_newline(line))
}

/// A JSON body.
pub(crate) fn json_body(status: StatusCode, body: Bytes) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// A line without its `\n`.
pub(crate) fn trim_newline(mut b: Bytes) -> Bytes {
    while b.last().is_some_and(|c| *c == b'\n' || *c == b'\r') {
        b.truncate(b.len() - 1);
    }
    b
}

/// The actor did not take the client (it is gone or its inbox is closed).
fn unavailable(cfg: &ServerConfig) -> Response {
    info!(server = %cfg.name, "HTTP request while the server's actor is not accepting clients");
    rpc_error(
        StatusCode::SERVICE_UNAVAILABLE,
        None,
        code::SERVER_UNAVAILABLE,
        &format!("server `{}` is not accepting clients now", cfg.name),
    )
}

#[cfg(test)]
mod tests;
