//! Layer 3 (docs/ARCHITECTURE.md "Layers"). This crate's root is the upstream seam (issue 27 §4;
//! design.md §6): whatever a server's actor talks to, as one
//! small interface. Start it ([`Starter::start`], which builds what its upstream needs from the
//! server's configuration), send it a message ([`Upstream::send`]), stop it ([`Upstream::stop`]), and read the
//! [`Event`]s it produces: connected, a message, closed, lost with a cause.
//!
//! Routing, the opener (era probe, handshake, discovery), health, the list cache and the
//! outage answers see only this module's types; they never learn whether the upstream is a
//! child process (`child::process`) or a remote session (`remote`): this module names neither
//! (ARCHITECTURE "Layers"). The types both sides share live here: [`Exit`], [`StderrTail`],
//! [`Usage`], [`RemoteStatus`], what is sent ([`Outbound`]), and the opaque hand-over value
//! [`Carried`].
//!
//! Every event carries the generation of the instance it is about, so events of an instance
//! that was replaced are recognisable and ignored.
//!
//! Owns nothing at run time: plain types and two traits.

pub mod auth;
pub mod child;
pub mod remote;
pub mod starter;

mod exit;
mod facts;
mod outbound;
mod tail;

pub use exit::{signal_name, Exit, LimitKill};
pub use facts::{Description, LimitStatus, RemoteStatus, SignInStatus, UpstreamStatus, Usage};
pub use outbound::{Outbound, Outgoing};
pub use tail::{StderrTail, STDERR_TAIL};

use serde_json::value::RawValue;
use std::any::Any;
use std::time::Instant;
use support::config::ServerConfig;
use vocab::jsonrpc::message::Message;

/// One running instance of an upstream, as the core sees it. Sending never blocks; stopping
/// is asynchronous and ends with [`Event::Lost`] carrying [`Lost::Exited`].
pub trait Upstream: Send {
    /// Generation of this instance (its events carry it).
    fn generation(&self) -> u64;
    /// What `status` and the logs show of it: its process id, usage, remote session
    /// ([`Description`]; issue 48 §2: one description, not a method per kind of upstream).
    fn describe(&self) -> Description;
    /// When it was started.
    fn started_at(&self) -> Instant;
    /// Queues a message, behind earlier ones (bounded; never blocks). The message comes with
    /// what the core knows of it ([`Outbound`]), so the upstream never parses its line.
    fn send(&self, out: Outbound) -> Queued;
    /// Queues a message ahead of ordinary traffic (cancels, answers to the upstream's own
    /// requests; bounded, never blocks): field case K09.
    fn send_urgent(&self, out: Outbound) -> Queued;
    /// Starts stopping it (idempotent): for a child, the ladder (close stdin, SIGTERM,
    /// SIGKILL the group); [`Lost::Exited`] with `requested` follows.
    fn stop(&mut self);
    /// Whether [`Upstream::stop`] was called.
    fn stopping(&self) -> bool;
    /// Hands the instance over to the next image at an upgrade in place (issue 32 §1): a
    /// child's pipe tasks are paused; a remote session's tasks end without a `DELETE`, but
    /// only when `session_ready` (else it is left to expire and the next image opens its own).
    /// What comes back is opaque here: the actor carries it into the hand-over record, and
    /// the upstream's own code reads it there. `None` for an instance that cannot be handed
    /// over (a stopping one).
    fn hand_over(&mut self, _session_ready: bool) -> Option<Carried> {
        None
    }
    /// Records the open session (handshake and lists in `actor::record`'s shape, the log level)
    /// where the next run finds it after a crash (`child::fdstore`, issue 32 §2); a no-op for
    /// upstreams that keep no such record.
    fn note_session(&mut self, _handshake: serde_json::Value, _log_level: Option<usize>) {}
    /// Whether [`Upstream::note_session`] keeps anything (so the actor encodes the record
    /// only then): a child while the daemon runs with systemd's file descriptor store.
    fn keeps_sessions(&self) -> bool {
        false
    }
}

/// Starts instances of an upstream.
pub trait Starter: Send {
    /// Whether a start may happen at `now` under the daemon's spawn budget (R11), or when the
    /// next one may. The simulation's fakes always may.
    fn admit(&mut self, _now: Instant) -> Result<(), Deferred> {
        Ok(())
    }

    /// Starts instance `generation` of the server configured as `cfg` off the actor's thread
    /// (issue 27 §3): the starter builds what its upstream needs from `cfg` (a process's
    /// command and identity, a remote session's URL and headers), so the core never names
    /// either. Returns at once; [`Event::Connected`] reaches the actor's upstream inbox ahead
    /// of every other event of that instance. Its diagnostic output goes to `tail`.
    fn start(&mut self, cfg: &ServerConfig, generation: u64, tail: StderrTail);

    /// What `status` shows of the upstream of the server configured as `cfg` (issue 48 §2),
    /// given the running instance's description (`described`, the default when none runs)
    /// and its diagnostic output (`tail`). The simulation's fakes show what `described` says.
    fn status(
        &self,
        _cfg: &ServerConfig,
        described: Description,
        _tail: &StderrTail,
    ) -> UpstreamStatus {
        UpstreamStatus {
            limits: None,
            remote: described.remote,
        }
    }
}

/// A start the budget does not allow yet ([`Starter::admit`]): when the next may happen, and
/// the budget (for the log line that says so).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deferred {
    /// When the next start is allowed.
    pub until: Instant,
    /// Starts per second, sustained.
    pub rate: u32,
    /// Starts allowed at once after a quiet period.
    pub burst: u32,
}

/// Outcome of queueing a message toward an upstream. Must be looked at: a full queue drops
/// the message (issue 27 §7).
#[must_use = "a full queue drops the line; say so or fail the request"]
#[derive(Debug, PartialEq, Eq)]
pub enum Queued {
    /// Accepted.
    Ok,
    /// The queue is full (the upstream is not reading).
    Full,
    /// The instance is stopping or gone.
    Closed,
}

/// Something that happened to an upstream instance; `.0` is always its generation.
pub enum Event {
    /// The start of instance `generation` ended: connected (for a child: forked and
    /// executed), or why it could not be. Queued ahead of every other event of the instance.
    Connected(u64, Result<Box<dyn Upstream>, StartError>),
    /// A message it sent.
    Message(u64, Message),
    /// A message that is never relayed (issue 47 §7): over `max_message_size` or nested
    /// deeper than `max_message_depth`, and what it was as far as it could be read.
    Discarded(u64, Limit, Was),
    /// A reply to request `.1` that is not a valid JSON-RPC response (K21), and what is wrong.
    Malformed(u64, Box<RawValue>, String),
    /// Its output ended (a child's stdout at EOF). Not a death by itself.
    Closed(u64),
    /// The session with it is lost, and why.
    Lost(u64, Lost),
    /// Request `.1` was answered with a bare HTTP status and no JSON-RPC message (a remote
    /// server's 401, 429, 5xx, ...; status 0 when its response stream broke before the
    /// answer). The server answered, so it is alive; the request is over.
    Refused(u64, Box<RawValue>, Refusal),
}

/// The limit an upstream's message went past (issue 47 §7): the `detail` of the outage answer
/// its request gets (`too_large`, `too_deep`, class `upstream_error`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// Over `max_message_size`: its length in bytes.
    Size(usize),
    /// Nested deeper than `max_message_depth`.
    Depth,
}

impl Limit {
    /// The outage record's `detail` and the metric's `reason`: `too_large`, `too_deep`.
    pub fn detail(self) -> &'static str {
        match self {
            Limit::Size(_) => "too_large",
            Limit::Depth => "too_deep",
        }
    }
}

/// What a discarded message of the upstream was, as far as it could be read.
#[derive(Debug, Clone)]
pub enum Was {
    /// A response (or what could not be told from one): the id it answers, as the upstream
    /// wrote it, when it could be read. Its request gets the outage answer.
    Response(Option<Box<RawValue>>),
    /// A request of the upstream, with its id in the upstream's own namespace (never one of
    /// ours): answered with an error, never relayed.
    Request(Box<RawValue>),
    /// A notification: dropped.
    Notification,
}

impl Was {
    /// Its kind, for the metric and the log: `response`, `request`, `notification`.
    pub fn kind(&self) -> &'static str {
        match self {
            Was::Response(_) => "response",
            Was::Request(_) => "request",
            Was::Notification => "notification",
        }
    }

    /// What a message of `kind` with top-level `id` (none, or `null`: absent) was.
    pub fn of(kind: vocab::jsonrpc::message::Kind, id: Option<Box<RawValue>>) -> Was {
        use vocab::jsonrpc::message::Kind;
        let id = id.filter(|i| i.get() != "null");
        match (kind, id) {
            (Kind::Request, Some(id)) => Was::Request(id),
            (Kind::Request | Kind::Notification, _) => Was::Notification,
            (Kind::Response, id) => Was::Response(id),
        }
    }
}

/// A remote server's answer that is only an HTTP status (issue 29 §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    /// The HTTP status; 0 when the response stream broke before the answer.
    pub status: u16,
    /// `Retry-After`, when the server gave one.
    pub retry_after: Option<std::time::Duration>,
    /// A 401/403 only a person can fix (`mcp-supervisor login NAME`, issue 30): the server
    /// goes `auth_required` (the scope a step-up asked for is in its sign-in status).
    pub sign_in: bool,
}

impl Event {
    /// The generation of the instance the event is about.
    pub fn generation(&self) -> u64 {
        match self {
            Event::Connected(g, _)
            | Event::Message(g, _)
            | Event::Discarded(g, _, _)
            | Event::Malformed(g, _, _)
            | Event::Closed(g)
            | Event::Lost(g, _)
            | Event::Refused(g, _, _) => *g,
        }
    }
}

impl std::fmt::Debug for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Event::Connected(g, Ok(_)) => write!(f, "Connected({g}, Ok(..))"),
            Event::Connected(g, Err(e)) => write!(f, "Connected({g}, Err({e}))"),
            Event::Message(g, m) => write!(f, "Message({g}, {m:?})"),
            Event::Discarded(g, l, w) => write!(f, "Discarded({g}, {l:?}, {w:?})"),
            Event::Malformed(g, id, why) => write!(f, "Malformed({g}, {id}, {why:?})"),
            Event::Closed(g) => write!(f, "Closed({g})"),
            Event::Lost(g, l) => write!(f, "Lost({g}, {l:?})"),
            Event::Refused(g, id, r) => write!(f, "Refused({g}, {id}, {r:?})"),
        }
    }
}

/// Why a session with an upstream is lost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lost {
    /// The instance ended: a child's exit (code, signal, limit kill; `requested` when the
    /// supervisor's stop caused it). The instance is gone.
    Exited(Exit),
    /// A message could not be written (a child's stdin write failed, or stalled for
    /// `STDIN_STALL`): the core stops the instance, and its `Exited` follows.
    WriteFailed(String),
    /// A remote server could not be reached (DNS, TCP, TLS, connect timeout). The session is
    /// gone; the core reconnects with backoff.
    Unreachable(Unreachable),
    /// A remote session was closed because the supervisor stopped it (after `DELETE`): a
    /// remote instance's end of [`Upstream::stop`], as `Exited` with `requested` is a child's.
    Closed,
}

/// Why a remote server could not be reached: the `detail` of class `unreachable`
/// (design.md §6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unreachable {
    /// The name did not resolve.
    Dns,
    /// TCP was refused.
    ConnectRefused,
    /// DNS, TCP or TLS took longer than `connect_timeout`.
    ConnectTimeout,
    /// The TLS handshake failed (certificate, protocol).
    Tls,
    /// Another connection failure.
    Connect,
    /// The connection broke before any response.
    Dropped,
}

impl Unreachable {
    /// Every kind, for reading one back from its token.
    pub const ALL: [Unreachable; 6] = [
        Unreachable::Dns,
        Unreachable::ConnectRefused,
        Unreachable::ConnectTimeout,
        Unreachable::Tls,
        Unreachable::Connect,
        Unreachable::Dropped,
    ];

    /// Its stable token.
    pub fn as_str(self) -> &'static str {
        match self {
            Unreachable::Dns => "dns",
            Unreachable::ConnectRefused => "connect_refused",
            Unreachable::ConnectTimeout => "connect_timeout",
            Unreachable::Tls => "tls",
            Unreachable::Connect => "connect",
            Unreachable::Dropped => "connection_dropped",
        }
    }
}

/// Why an instance could not be started.
#[derive(Debug)]
pub struct StartError {
    /// What failed, for the log and the stderr tail (`cannot start `cmd`: ...`).
    pub message: String,
    /// Whether retrying cannot help (R8: the server goes to `failed` at once).
    pub permanent: bool,
    /// The failure's kind.
    pub failure: StartFailure,
}

/// The kind of a failed start, as the outage vocabulary names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartFailure {
    /// A child could not be spawned (`spawn-error`).
    Spawn,
    /// A remote session could not be set up (TLS files, a header's variable or file).
    Remote,
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// What an instance leaves for the next image at an upgrade in place
/// ([`Upstream::hand_over`]): a value only the upstream that made it can read
/// ([`Carried::take`]), which the core carries without looking inside.
pub struct Carried(Box<dyn Any + Send>);

impl Carried {
    /// Wraps `value`.
    pub fn new<T: Any + Send>(value: T) -> Carried {
        Carried(Box::new(value))
    }

    /// The value, when it is a `T`; else itself back.
    pub fn take<T: Any>(self) -> Result<T, Carried> {
        match self.0.downcast::<T>() {
            Ok(v) => Ok(*v),
            Err(other) => Err(Carried(other)),
        }
    }
}

impl std::fmt::Debug for Carried {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Carried(..)")
    }
}
