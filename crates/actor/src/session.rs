//! One connected client: frames its socket input, answers garbage with -32700, hands parsed
//! messages to the server actor, and writes the actor's output from a bounded queue.
//!
//! Owns: the connection's two halves and its outbound queue. Never routes, never blocks the
//! child or other clients: the actor only ever `try_send`s into [`ClientTx`], and a full queue
//! disconnects this client (issue 3 §7, R17).

use crate::batch::{Offer, SharedBatches};
use crate::ids::id_key;
use crate::park::{Parked, Parking, Resume};
use serde_json::value::RawValue;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};
use vocab::jsonrpc::framing::{Frame, Line, LineBatch, LineDecoder, BATCH_SLICES};
use vocab::jsonrpc::message::{self, code, Message};

pub use crate::client::{Access, ClientId, Peer, Transport};

/// Bytes queued toward one client beyond which it is disconnected as too slow (R17), unless
/// the queue is empty (one message larger than this still goes through).
pub const CLIENT_QUEUE_BYTES: usize = 64 * 1024 * 1024;

/// Most messages the writer takes from the queue for one vectored write.
const BATCH_LINES: usize = BATCH_SLICES;
/// The writer stops taking more queued messages for one write once it holds this many bytes
/// (the last one taken may be large: lines are never copied or split).
const BATCH_BYTES: usize = 64 * 1024;

/// A read buffer idle with more capacity than this (after a huge line) is replaced by a small
/// one.
const READ_BUFFER_KEEP: usize = 1024 * 1024;

/// Where an outgoing line goes within its client, as the actor says it at delivery time
/// (issue 27 §5): transport-neutral keys borrowed from the actor's own state. A socket client
/// ignores it (one ordered stream carries everything) and pays nothing for it; a client whose
/// queue is addressed ([`ClientTx::channel`]) receives it as an [`Address`], so the HTTP
/// front routes each line with no parse and no lookup of its own.
#[derive(Debug, Clone, Copy)]
pub enum To<'a> {
    /// The response to the client's request with this id (as the client wrote it). An
    /// id-less error (`null`) answers no request: the HTTP front treats it as [`To::Session`].
    Response(&'a RawValue),
    /// `notifications/progress` for the client's progress token (as the client wrote it).
    Progress(&'a RawValue),
    /// A request toward the client (the child's, or the supervisor's own MRTR question) with
    /// the id the client sees, and its method: it must be delivered or answered at once.
    Request(&'a RawValue, &'a str),
    /// Traffic of the client's listen stream opened by its request with this id
    /// (`subscriptions/listen`: its acknowledgement, notifications and end).
    Listen(&'a RawValue),
    /// Anything else: session-wide notifications, the child's cancels of its own requests,
    /// id-less errors before a close.
    Session,
}

impl To<'_> {
    /// The owned form an addressed queue carries, keys in [`id_key`]'s canonical text.
    pub fn address(&self) -> Address {
        match *self {
            To::Response(id) => Address::Response(id_key(id)),
            To::Progress(token) => Address::Progress(id_key(token)),
            To::Request(id, method) => Address::Request {
                id: id.to_owned(),
                method: method.to_string(),
            },
            To::Listen(id) => Address::Listen(id_key(id)),
            To::Session => Address::Session,
        }
    }
}

/// [`To`] as an addressed queue carries it beside each line: the request and token keys are
/// the canonical text of [`id_key`] (the key the HTTP front files a POST's ids and tokens
/// under).
#[derive(Debug, Clone)]
pub enum Address {
    /// The response to the client's request whose id key this is (`"null"`: an id-less
    /// error).
    Response(String),
    /// Progress for the client's progress token whose key this is.
    Progress(String),
    /// A request toward the client: its id as the client sees it, and its method.
    Request {
        /// The id the client must answer under.
        id: Box<RawValue>,
        /// Its method, for the error that answers it when nothing can carry it.
        method: String,
    },
    /// Traffic of the listen stream opened by the client's request whose id key this is.
    Listen(String),
    /// Anything else (session-wide).
    Session,
}

/// The queue behind a [`ClientTx`]: bare lines toward a socket connection (its writer needs
/// no address), or lines with their [`Address`] toward an HTTP session or request.
#[derive(Debug, Clone)]
enum Queue {
    Lines(mpsc::Sender<Line>),
    Addressed(mpsc::Sender<(Address, Line)>),
}

/// The actor's side of a client's outbound queue: bounded in messages (`client_queue`) and in
/// bytes ([`CLIENT_QUEUE_BYTES`]).
#[derive(Debug, Clone)]
pub struct ClientTx {
    tx: Queue,
    queued: Arc<AtomicUsize>,
    kick: CancellationToken,
}

#[cfg(test)]
impl ClientTx {
    /// A queue of `capacity` lines with no connection behind it: what the actor writes to a
    /// client, for tests that drive the actor without sockets (the simulation).
    pub(crate) fn detached(capacity: usize) -> (ClientTx, mpsc::Receiver<Line>) {
        let (tx, rx) = mpsc::channel(capacity);
        let tx = ClientTx {
            tx: Queue::Lines(tx),
            queued: Arc::new(AtomicUsize::new(0)),
            kick: CancellationToken::new(),
        };
        (tx, rx)
    }
}

/// The reading side of a client's outbound queue, for a client that is not a socket
/// connection (an HTTP session or request, [`front::http`]): [`Outbox::recv`] keeps the
/// queue's byte count, and [`Outbox::kicked`] fires when the actor (or a slow read) ends the
/// client.
#[derive(Debug)]
pub struct Outbox {
    rx: mpsc::Receiver<(Address, Line)>,
    queued: Arc<AtomicUsize>,
    kick: CancellationToken,
}

impl Outbox {
    /// The next line with the address the actor gave it, `None` once the actor dropped its
    /// [`ClientTx`] and the queue is drained. An empty line is
    /// [`ClientTx::close_after_drain`]'s marker: close after what came before.
    pub async fn recv(&mut self) -> Option<(Address, Line)> {
        let (to, line) = self.rx.recv().await?;
        self.queued.fetch_sub(line.len(), Ordering::Relaxed);
        Some((to, line))
    }

    /// Fires when the client must be closed now (too slow, revoked, shutdown).
    pub fn kicked(&self) -> CancellationToken {
        self.kick.clone()
    }
}

impl ClientTx {
    /// A queue of `capacity` addressed lines toward a client that is not a socket connection,
    /// ended (kicked) when `parent` is cancelled.
    pub fn channel(capacity: usize, parent: &CancellationToken) -> (ClientTx, Outbox) {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        let queued = Arc::new(AtomicUsize::new(0));
        let kick = parent.child_token();
        let out = Outbox {
            rx,
            queued: queued.clone(),
            kick: kick.clone(),
        };
        let tx = ClientTx {
            tx: Queue::Addressed(tx),
            queued,
            kick,
        };
        (tx, out)
    }

    /// Queues a session-wide line ([`To::Session`]) without waiting: [`ClientTx::deliver_to`].
    pub fn deliver(&self, line: impl Into<Line>) -> bool {
        self.deliver_to(To::Session, line)
    }

    /// Queues a line addressed `to` without waiting; only an addressed queue
    /// ([`ClientTx::channel`]) makes the [`Address`] (a socket's ignores it). `false` means the
    /// client is gone or too slow; the caller must then drop the client ([`ClientTx::kick`]
    /// was already called).
    pub fn deliver_to(&self, to: To<'_>, line: impl Into<Line>) -> bool {
        self.deliver_at(self.address(to), line.into())
    }

    /// The [`Address`] this queue carries for `to`: `None` for a socket's queue, which needs
    /// none (so a socket client's delivery never builds one).
    pub fn address(&self, to: To<'_>) -> Option<Address> {
        match self.tx {
            Queue::Lines(_) => None,
            Queue::Addressed(_) => Some(to.address()),
        }
    }

    /// [`ClientTx::deliver_to`] with the address already made ([`ClientTx::address`]; `None`
    /// on an addressed queue means session-wide).
    pub fn deliver_at(&self, address: Option<Address>, line: Line) -> bool {
        let len = line.len();
        let before = self.queued.fetch_add(len, Ordering::Relaxed);
        if before > 0 && before + len > CLIENT_QUEUE_BYTES {
            self.queued.fetch_sub(len, Ordering::Relaxed);
            if !self.kick.is_cancelled() {
                warn!(
                    queued_bytes = before,
                    "client is not reading its messages (over {} MiB queued); disconnecting it",
                    CLIENT_QUEUE_BYTES >> 20
                );
            }
            self.kick.cancel();
            return false;
        }
        let sent = match &self.tx {
            Queue::Lines(tx) => tx.try_send(line).map_err(unit),
            Queue::Addressed(tx) => tx
                .try_send((address.unwrap_or(Address::Session), line))
                .map_err(unit),
        };
        match sent {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(())) => {
                self.queued.fetch_sub(len, Ordering::Relaxed);
                // Said once per client: the deliveries that follow the kick fail silently.
                if !self.kick.is_cancelled() {
                    warn!("client is not reading its messages (outbound queue full); disconnecting it");
                }
                self.kick.cancel();
                false
            }
            Err(mpsc::error::TrySendError::Closed(())) => {
                self.queued.fetch_sub(len, Ordering::Relaxed);
                self.kick.cancel();
                false
            }
        }
    }

    /// Closes the connection.
    pub fn kick(&self) {
        self.kick.cancel();
    }

    /// Whether the connection was closed ([`ClientTx::kick`], or a failed delivery).
    pub fn is_closed(&self) -> bool {
        self.kick.is_cancelled()
    }

    /// Closes the connection once every line queued before this call is written (an empty
    /// line is the marker: real lines are never empty). Used to say why before hanging up.
    pub fn close_after_drain(&self) {
        let sent = match &self.tx {
            Queue::Lines(tx) => tx.try_send(Line::default()).is_ok(),
            Queue::Addressed(tx) => tx.try_send((Address::Session, Line::default())).is_ok(),
        };
        if !sent {
            self.kick.cancel();
        }
    }
}

/// A refused send without the value it refused (dropped here).
fn unit<T>(e: mpsc::error::TrySendError<T>) -> mpsc::error::TrySendError<()> {
    match e {
        mpsc::error::TrySendError::Full(_) => mpsc::error::TrySendError::Full(()),
        mpsc::error::TrySendError::Closed(_) => mpsc::error::TrySendError::Closed(()),
    }
}

/// What a session reports to its server actor.
#[derive(Debug)]
pub enum SessionEvent {
    /// A new client with its outbound queue.
    Connected(ClientId, ClientTx, Peer),
    /// A parsed message from the client.
    Message(ClientId, Message),
    /// A line was rejected as malformed with this JSON-RPC code (already answered); reported
    /// for the request log and metrics (outcome `invalid`).
    Rejected(ClientId, i64),
    /// The client closed its write side (EOF): it is answered its requests in flight, then
    /// its connection is closed (half-close, issue 3 §2).
    InputClosed(ClientId),
    /// The client is gone (read error, kicked): drop it now.
    Disconnected(ClientId),
}

/// The bytes every client's unfinished input holds, against `client_memory` (issue 14 §3:
/// eight clients each holding 60 MiB of one line took the supervisor to 516 MB). A client whose
/// read takes the total over the limit while it holds more than an eighth of the limit (so the
/// large consumers, not the small ones, pay) gets an error and is disconnected.
#[derive(Debug)]
pub struct MemoryBudget {
    limit: usize,
    used: AtomicUsize,
}

impl MemoryBudget {
    /// A budget of `limit` bytes.
    pub fn new(limit: usize) -> Self {
        MemoryBudget {
            limit,
            used: AtomicUsize::new(0),
        }
    }

    /// Records that one client now holds `now` bytes (it held `before`); returns whether it
    /// must be cut off.
    pub fn update(&self, before: usize, now: usize) -> bool {
        let total = if now >= before {
            self.used.fetch_add(now - before, Ordering::Relaxed) + (now - before)
        } else {
            self.used.fetch_sub(before - now, Ordering::Relaxed) - (before - now)
        };
        total > self.limit && now > self.limit / 8
    }

    /// Bytes held now.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// The budget in bytes (`client_memory`). HTTP request bodies must stay within it as a
    /// whole (`front::http`, issue 26 §4), not only the large holders.
    pub fn limit(&self) -> usize {
        self.limit
    }
}

/// What one connection may use (from the server's configuration at accept time).
#[derive(Debug, Clone)]
pub struct SessionLimits {
    /// `client_queue`: messages queued toward the client.
    pub queue: usize,
    /// `max_message_size`: the longest line.
    pub max_message: usize,
    /// `max_message_depth`: the deepest nesting of a line relayed (issue 47 §7).
    pub max_depth: usize,
    /// The daemon-wide budget for what clients' partial lines hold (`client_memory`).
    pub memory: Arc<MemoryBudget>,
    /// `client_stall_timeout`: how long the client may stay silent in the middle of a line
    /// before it is told and closed (issue 14 §3: 300 connections each holding half a line
    /// filled `max_clients`). A slow but moving upload is never cut: every byte restarts it.
    pub stall: std::time::Duration,
    /// `client_idle_timeout`: how long a connection may carry nothing in either direction
    /// before it is told and closed; `None` (the default) never.
    pub idle: Option<std::time::Duration>,
    /// `first_message_timeout`: how long a new connection may go without a complete JSON-RPC
    /// message (any era: a 2026-07-28 client sends no `initialize`) before it is told and
    /// closed, so silent connections cannot hold seats (issue 47 §4).
    pub first_message: std::time::Duration,
    /// `max_clients_per_uid` as configured (`None`: the default, half of `max_clients`): the
    /// seats one user may hold ([`crate::seats::Rule::of`]). Read at accept; not used by
    /// the session.
    pub per_uid: Option<usize>,
    /// The server's (or endpoint's) name, for the metrics of a refusal.
    pub server: Arc<str>,
}

/// Runs one connection until it closes. `events` is the server actor's inbox. `parking` is
/// where it parks for an upgrade's hand-over; `resume` is what a connection handed over by
/// the previous image starts with (issue 32 §1).
pub async fn run(
    stream: UnixStream,
    peer: Peer,
    events: mpsc::Sender<SessionEvent>,
    limits: SessionLimits,
    shutdown: CancellationToken,
    (parking, resume): (Arc<Parking>, Option<Resume>),
) {
    let _live = parking.enter();
    let mut paused = parking.watch();
    let SessionLimits {
        queue,
        max_message,
        max_depth,
        memory,
        stall,
        idle,
        first_message,
        per_uid: _,
        server,
    } = limits;
    // Activity for `idle`: milliseconds since `epoch` of the last byte read or written.
    let epoch = tokio::time::Instant::now();
    let last_write = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut last_read = epoch;
    // What this client's unfinished input holds, as last told to `memory`.
    let mut held = 0;
    let id = ClientId::next();
    let (out_tx, out_rx) = mpsc::channel::<Line>(queue);
    let kick = shutdown.child_token();
    let queued = Arc::new(AtomicUsize::new(0));
    let tx = ClientTx {
        tx: Queue::Lines(out_tx),
        queued: queued.clone(),
        kick: kick.clone(),
    };
    if events
        .send(SessionEvent::Connected(id, tx.clone(), peer.clone()))
        .await
        .is_err()
    {
        return;
    }
    info!(client = %id, uid = peer.uid, pid = peer.pid, "client connected");
    let fd = stream.as_raw_fd();
    let (mut rd, wr) = stream.into_split();
    let batches = Arc::new(SharedBatches::default());
    let resume = resume.unwrap_or_default();
    let replayed = replay_requests(&resume.replay);
    let listens = replay_requests(&resume.listens);
    let writer = tokio::spawn(write_loop(
        out_rx,
        wr,
        (queued.clone(), crate::park::Mute::of(&replayed, &listens)),
        kick.clone(),
        batches.clone(),
        (epoch, last_write.clone()),
    ));
    // Handed over: the client's state first (answers dropped by the writer), then what the
    // previous image had read of its next line.
    for m in replayed.into_iter().chain(listens) {
        if events.send(SessionEvent::Message(id, m)).await.is_err() {
            return;
        }
    }

    // The nesting is measured in the walk that finds each line's end (issue 47 §7).
    let mut dec = LineDecoder::with_depth(max_message, max_depth);
    dec.extend(&resume.pending);
    let mut clean_eof = false;
    // Until its first complete message (issue 47 §4); a connection handed over by an upgrade
    // spoke before.
    let heard = std::sync::atomic::AtomicBool::new(!resume.replay.is_empty());
    let first_by = epoch + first_message;
    // Rejected-line warnings of this connection: 20 per 10 s, the rest counted (issue 26 §6:
    // a client sending garbage produced 34,748 warnings in 3 s).
    let rejections = std::sync::Mutex::new(support::logging::LogBudget::new(
        20,
        std::time::Duration::from_secs(10),
    ));
    if !resume.pending.is_empty() {
        let link = Link {
            tx: &tx,
            id,
            events: &events,
            batches: &batches,
            rejections: &rejections,
            heard: &heard,
        };
        if !pass_frames(&mut dec, false, &link, (max_message, max_depth)).await {
            return;
        }
    }
    let mut park = false;
    'read: loop {
        let dec_mid_line = dec.mid_line();
        let buf = dec.buffer_mut();
        // A new buffer only when this one is nearly full (parsed lines may still share it).
        if buf.capacity() - buf.len() < 1024 {
            buf.reserve(16 * 1024);
        }
        let mid_line = !buf.is_empty() || dec_mid_line;
        let written = epoch + std::time::Duration::from_millis(last_write.load(Ordering::Relaxed));
        let idle_at = idle.map(|d| last_read.max(written) + d);
        let eof = tokio::select! {
            r = rd.read_buf(buf) => match r {
                Ok(0) => { clean_eof = true; true }
                Ok(_) => { last_read = tokio::time::Instant::now(); false }
                Err(_) => true,
            },
            // Nothing either way for `client_idle_timeout` (off unless configured).
            _ = tokio::time::sleep_until(idle_at.unwrap_or(epoch)), if idle_at.is_some() => {
                let written = epoch + std::time::Duration::from_millis(last_write.load(Ordering::Relaxed));
                let quiet = last_read.max(written);
                if idle.is_some_and(|d| quiet + d <= tokio::time::Instant::now()) {
                    info!(client = %id, "client idle past client_idle_timeout; disconnecting it");
                    tx.deliver(message::error_response(&message::raw_null(), code::INVALID_REQUEST,
                        "idle past client_idle_timeout; closing the connection", None));
                    tx.close_after_drain();
                    break 'read;
                }
                continue 'read;
            }
            _ = kick.cancelled() => break 'read,
            // No complete message yet within `first_message_timeout`: told and closed, so
            // connections that say nothing cannot hold the server's seats (issue 47 §4, S4).
            _ = tokio::time::sleep_until(first_by), if !heard.load(Ordering::Relaxed) => {
                info!(client = %id, timeout_s = first_message.as_secs_f64(),
                    "client sent no message within first_message_timeout; disconnecting it");
                support::observe::metrics().client_refused(&server, "silent");
                let why = format!(
                    "no JSON-RPC message within {} (first_message_timeout); closing the connection",
                    humantime::format_duration(first_message)
                );
                tx.deliver(hangup_line(&why, SILENT));
                tx.close_after_drain();
                break 'read;
            }
            // An upgrade's hand-over (issue 32 §1): stop reading at this line boundary and
            // leave the connection for the next image; the writer goes on. A refused upgrade
            // lets it read on.
            Ok(_) = paused.wait_for(|p| *p) => { park = true; false }
            // Half a line and then silence (slowloris): the client is told and closed, so it
            // cannot hold a connection slot and a line buffer forever (issue 14 §3).
            _ = tokio::time::sleep(stall), if mid_line => {
                warn!(client = %id, timeout_s = stall.as_secs_f64(),
                    "client stalled in the middle of a line; disconnecting it");
                let why = format!(
                    "no byte for {:.0} s in the middle of a line; closing the connection",
                    stall.as_secs_f64()
                );
                tx.deliver(message::error_response(&message::raw_null(), code::INVALID_REQUEST, &why, None));
                tx.close_after_drain();
                break 'read;
            }
        };
        if std::mem::take(&mut park) {
            parking.park(
                id,
                Parked {
                    fd,
                    pending: dec.pending().map(<[u8]>::to_vec).unwrap_or_default(),
                    peer: peer.clone(),
                    queued: queued.clone(),
                },
            );
            let _ = paused.wait_for(|p| !*p).await;
            parking.unpark(id);
            continue 'read;
        }
        let link = Link {
            tx: &tx,
            id,
            events: &events,
            batches: &batches,
            rejections: &rejections,
            heard: &heard,
        };
        if !pass_frames(&mut dec, eof, &link, (max_message, max_depth)).await {
            break 'read;
        }
        if eof {
            break;
        }
        // Give back the memory of a huge line once it is parsed.
        dec.shrink_if_idle(READ_BUFFER_KEEP);
        let now = dec.held();
        let over = memory.update(held, now);
        held = now;
        if over {
            warn!(client = %id, held_bytes = now, total_bytes = memory.used(),
                "client input over the supervisor's client_memory budget; disconnecting it");
            let why = format!(
                "this connection holds {now} bytes of unfinished input and the supervisor's client_memory budget is spent; closing it"
            );
            tx.deliver(message::error_response(
                &message::raw_null(),
                code::INVALID_REQUEST,
                &why,
                None,
            ));
            tx.close_after_drain();
            break 'read;
        }
    }
    memory.update(held, 0);
    // EOF after `shutdown(SHUT_WR)` is a half-close: the client still reads its answers. EOF
    // after `close()` also hangs up our write side (POLLHUP): nobody is left to answer.
    let hung_up = clean_eof && peer_hung_up(rd.as_ref().as_raw_fd());
    debug!(client = %id, clean_eof, hung_up, "client input closed");
    let ev = if clean_eof && !hung_up && !kick.is_cancelled() {
        SessionEvent::InputClosed(id)
    } else {
        SessionEvent::Disconnected(id)
    };
    let _ = events.send(ev).await;
    // The actor drops its ClientTx when it is done with the client; once every sender is gone
    // the writer has drained the queue and closes the connection.
    drop(tx);
    let _ = writer.await;
    let _ = events.send(SessionEvent::Disconnected(id)).await;
    info!(client = %id, "client disconnected");
}

/// What [`pass_frames`] needs of its connection.
struct Link<'a> {
    tx: &'a ClientTx,
    id: ClientId,
    events: &'a mpsc::Sender<SessionEvent>,
    batches: &'a SharedBatches,
    /// The budget of this connection's rejected-line warnings.
    rejections: &'a std::sync::Mutex<support::logging::LogBudget>,
    /// Set once a complete JSON-RPC message was handed on (`first_message_timeout`).
    heard: &'a std::sync::atomic::AtomicBool,
}

/// Hands every complete frame in `dec` to the actor (all of them at `eof`): messages as they
/// are, garbage, oversized and too deep lines answered here with -32700/-32600 and reported
/// as rejected. A batch line opens a group so its answers go out as one array
/// ([`crate::batch`]). Returns false when the actor is gone.
async fn pass_frames(
    dec: &mut LineDecoder,
    eof: bool,
    link: &Link<'_>,
    (max_message, max_depth): (usize, usize),
) -> bool {
    let (tx, id, events) = (link.tx, link.id, link.events);
    let reject = |code: i64, why: &str| reject(tx, id, code, why, link.rejections);
    loop {
        if tx.is_closed() {
            // Kicked (too slow, revoked): what is left of its input is not read.
            return true;
        }
        let frame = if eof { dec.finish() } else { dec.next_frame() };
        let Some(frame) = frame else { return true };
        let (msgs, is_batch) = match frame {
            Frame::Line(line) => match message::parse_line(&line) {
                Ok(m) => (
                    m,
                    line.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'['),
                ),
                Err(e) => {
                    reject(e.code(), &e.to_string());
                    let _ = events.send(SessionEvent::Rejected(id, e.code())).await;
                    continue;
                }
            },
            Frame::TooDeep(line) => {
                if !refuse_too_deep(link, &line, max_depth).await {
                    return false;
                }
                continue;
            }
            Frame::Oversized {
                len,
                id: rid,
                has_method,
            } => {
                let rid = rid.filter(|_| has_method);
                reject_oversized(tx, id, len, rid.as_deref(), max_message, link.rejections);
                // Reported like any rejected line, so it gets an outcome in the request log.
                let _ = events
                    .send(SessionEvent::Rejected(id, code::INVALID_REQUEST))
                    .await;
                continue;
            }
        };
        if is_batch {
            open_batch(link, &msgs);
        }
        for m in msgs {
            match m {
                Ok(m) => {
                    link.heard.store(true, Ordering::Relaxed);
                    if m.method() == "notifications/cancelled" {
                        batch_member_cancelled(link, &m);
                    }
                    if events.send(SessionEvent::Message(id, m)).await.is_err() {
                        return false;
                    }
                }
                Err(e) => {
                    if !is_batch {
                        reject(e.code(), &e.to_string());
                    }
                    let _ = events.send(SessionEvent::Rejected(id, e.code())).await;
                }
            }
        }
    }
}

/// A client line nested deeper than `max_message_depth` (issue 47 §7): nothing of it reaches
/// the server. Each request gets -32600 under its own id (in one array for a batch); a
/// response (the client's answer to the server's question) reaches the actor as a -32600
/// error instead, so the server is not left waiting; a notification, or what is no message,
/// gets -32600 with id `null`, as garbage does. Logged within the connection's budget; the
/// connection stays open. Returns false when the actor is gone.
async fn refuse_too_deep(link: &Link<'_>, line: &bytes::Bytes, max_depth: usize) -> bool {
    let (tx, client, events) = (link.tx, link.id, link.events);
    let why = format!(
        "message nested deeper than max_message_depth ({max_depth} levels of arrays and objects); not relayed"
    );
    let msgs = match message::parse_line(line) {
        Ok(m) => m,
        Err(e) => {
            // Not JSON-RPC at all: the same answer as any such line.
            reject(tx, client, e.code(), &e.to_string(), link.rejections);
            let _ = events.send(SessionEvent::Rejected(client, e.code())).await;
            return true;
        }
    };
    if let Some(suppressed) = allowed(link.rejections) {
        warn!(client = %client, code = code::INVALID_REQUEST, suppressed, "rejected a client line: {why}");
    }
    let mut answers = Vec::new();
    for m in msgs {
        let Ok(m) = m else {
            answers.push(message::error_response(
                &message::raw_null(),
                code::INVALID_REQUEST,
                &why,
                None,
            ));
            continue;
        };
        let id = m.id.as_deref().filter(|i| i.get() != "null");
        match (m.kind, id) {
            (message::Kind::Request, Some(id)) => {
                answers.push(message::error_response(
                    id,
                    code::INVALID_REQUEST,
                    &why,
                    None,
                ));
                let _ = events
                    .send(SessionEvent::Rejected(client, code::INVALID_REQUEST))
                    .await;
            }
            (message::Kind::Response, Some(id)) => {
                let instead = message::error_response(
                    id,
                    code::INVALID_REQUEST,
                    &format!("the client's answer was {why}"),
                    None,
                );
                if let Ok(err) = message::parse_one(&instead) {
                    if events
                        .send(SessionEvent::Message(client, err))
                        .await
                        .is_err()
                    {
                        return false;
                    }
                }
                answers.push(message::error_response(
                    &message::raw_null(),
                    code::INVALID_REQUEST,
                    &why,
                    None,
                ));
            }
            _ => answers.push(message::error_response(
                &message::raw_null(),
                code::INVALID_REQUEST,
                &why,
                None,
            )),
        }
    }
    let is_batch = line.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[');
    if is_batch {
        if let Some(array) = link.batches.open(&[], answers) {
            tx.deliver(array);
        }
    } else {
        for a in answers {
            tx.deliver(a);
        }
    }
    true
}

/// Opens the batch group of a batch line before any member reaches the actor (so no answer
/// can come first); its invalid members' errors are part of the array.
fn open_batch(link: &Link<'_>, msgs: &[Result<Message, message::ParseError>]) {
    let mut ids = Vec::new();
    let mut rejected = Vec::new();
    for m in msgs {
        match m {
            Ok(m) if m.kind == message::Kind::Request => {
                ids.extend(m.id.as_deref().map(id_key));
            }
            Ok(_) => {}
            Err(e) => {
                warn!(client = %link.id, code = e.code(), "rejected a batch member: {e}");
                rejected.push(message::error_response(
                    &message::raw_null(),
                    e.code(),
                    &e.to_string(),
                    None,
                ));
            }
        }
    }
    let now = link.batches.open(&ids, rejected);
    if let Some(line) = now {
        link.tx.deliver(line);
    }
}

/// A client's cancel of a batch member: the group stops waiting for it (no response comes
/// for a cancelled request), and may be complete now.
fn batch_member_cancelled(link: &Link<'_>, m: &Message) {
    let Some(rid) = m
        .params_object()
        .and_then(|p| p.get("requestId").cloned())
        .and_then(|v| serde_json::value::to_raw_value(&v).ok())
    else {
        return;
    };
    let done = link.batches.cancelled(&id_key(&rid));
    if let Some((line, counted)) = done {
        if link.tx.deliver(line) {
            link.tx.queued.fetch_sub(counted, Ordering::Relaxed);
        }
    }
}

/// The writer of one connection: drains the client's queue, several queued lines per write.
/// An empty line (from [`ClientTx::close_after_drain`]) closes after what came before it.
async fn write_loop(
    mut out_rx: mpsc::Receiver<Line>,
    mut wr: tokio::net::unix::OwnedWriteHalf,
    (queued, mut mute): (Arc<AtomicUsize>, crate::park::Mute),
    kick: CancellationToken,
    batches: Arc<SharedBatches>,
    (epoch, last_write): (tokio::time::Instant, Arc<std::sync::atomic::AtomicU64>),
) {
    let mut batch = LineBatch::new();
    loop {
        tokio::select! {
            line = out_rx.recv() => match line {
                Some(line) => {
                    // Whatever else is already queued goes out in the same write.
                    let mut close = line.is_empty();
                    // Queue bytes released once the write is done.
                    let mut release = 0;
                    if !close && mute.drops(&line) {
                        // Of a hand-over's replay: not the client's (`park::Mute`).
                        queued.fetch_sub(line.len(), Ordering::Relaxed);
                        continue;
                    }
                    if !close {
                        release += take(&mut batch, line, &batches);
                    }
                    while !close && batch.len() < BATCH_LINES && batch.bytes() < BATCH_BYTES {
                        match out_rx.try_recv() {
                            Ok(line) if line.is_empty() => close = true,
                            Ok(line) if mute.drops(&line) => {
                                queued.fetch_sub(line.len(), Ordering::Relaxed);
                            }
                            Ok(line) => release += take(&mut batch, line, &batches),
                            Err(_) => break,
                        }
                    }
                    let ok = batch.is_empty() || batch.write_all(&mut wr).await.is_ok();
                    let ms = u64::try_from(epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
                    last_write.store(ms, Ordering::Relaxed);
                    queued.fetch_sub(release, Ordering::Relaxed);
                    batch.clear();
                    if !ok || close { kick.cancel(); break }
                }
                None => break,
            },
            _ = kick.cancelled() => break,
        }
    }
    // `None` means every sender is gone and the queue is drained: close our write side.
    // A kick (too slow, shutdown) closes without draining: that client is not reading.
    let _ = wr.shutdown().await;
}

/// The requests and notifications of a hand-over's replay lines (unparsable ones are
/// dropped: the previous image wrote them).
fn replay_requests(lines: &[String]) -> Vec<Message> {
    lines
        .iter()
        .filter_map(|l| message::parse_line(&bytes::Bytes::from(l.clone())).ok())
        .flatten()
        .filter_map(Result::ok)
        .collect()
}

/// Puts an outgoing line in the write batch, unless it is a batch member's response to hold
/// ([`Batches::offer`]); returns the queue bytes released by what was put in.
fn take(batch: &mut LineBatch, line: Line, batches: &SharedBatches) -> usize {
    match batches.offer(line) {
        Offer::Pass(line) => {
            let n = line.len();
            batch.push_line(line);
            n
        }
        Offer::Held => 0,
        Offer::Complete { line, counted } => {
            batch.push_line(line);
            counted
        }
    }
}

/// A client line over `max_message_size`: a request gets the -32600 error under its own
/// top-level id `rid` (K04, K22); anything else (a response to the child, a notification, no
/// id) under `null`.
fn reject_oversized(
    tx: &ClientTx,
    client: ClientId,
    len: usize,
    rid: Option<&[u8]>,
    max_message: usize,
    budget: &std::sync::Mutex<support::logging::LogBudget>,
) {
    let msg = format!("message of {len} bytes exceeds max_message_size ({max_message} bytes)");
    let rid = rid
        .and_then(message::raw_from_slice)
        .filter(|r| r.get() != "null");
    match rid {
        Some(rid) => {
            if let Some(suppressed) = allowed(budget) {
                warn!(client = %client, code = code::INVALID_REQUEST, suppressed,
                    "rejected a client request: {msg}");
            }
            tx.deliver(message::error_response(
                &rid,
                code::INVALID_REQUEST,
                &msg,
                None,
            ));
        }
        None => reject(tx, client, code::INVALID_REQUEST, &msg, budget),
    }
}

/// Whether the peer closed both directions (POLLHUP), as opposed to only its write side.
fn peer_hung_up(fd: std::os::fd::RawFd) -> bool {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: one valid pollfd, zero timeout; `fd` is open for the duration of the call.
    let n = unsafe { libc::poll(&mut pfd, 1, 0) };
    n > 0 && pfd.revents & (libc::POLLHUP | libc::POLLERR) != 0
}

/// Whether the connection's warning budget allows a line now: `Some(suppressed since)`.
fn allowed(budget: &std::sync::Mutex<support::logging::LogBudget>) -> Option<u64> {
    budget
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .allow(std::time::Instant::now())
}

/// Answers an unparsable line with `id: null` (JSON-RPC 2.0 §5: the id cannot be known); the
/// client stays connected and nothing reaches the child (K02). The warning is rate-limited
/// per connection (`budget`), with the count of what was suppressed.
fn reject(
    tx: &ClientTx,
    id: ClientId,
    code: i64,
    why: &str,
    budget: &std::sync::Mutex<support::logging::LogBudget>,
) {
    if let Some(suppressed) = allowed(budget) {
        warn!(client = %id, code, suppressed, "rejected a client line: {why}");
    }
    tx.deliver(message::error_response(
        &message::raw_null(),
        code,
        why,
        None,
    ));
}

/// The `error.data` key that marks a session's last line when the supervisor ends it on
/// purpose (issue 32 §2): `attach` passes the line on and does not reconnect.
pub const HANGUP_KEY: &str = "mcp-supervisor/hangup";

/// The hang-up reason of a connection closed for saying nothing within
/// `first_message_timeout` (issue 47 §4): `attach` reconnects quietly after it.
pub const SILENT: &str = "silent";

/// The hang-up reason of a connection refused a seat (`max_clients` or
/// `max_clients_per_uid`, issue 47 §4): `attach` shows it and retries with backoff.
pub const BUSY: &str = "busy";

/// The line a session gets before the supervisor ends it on purpose: a `-32000` error with id
/// `null`, `message`, and `data` `{"mcp-supervisor/hangup": reason}` (`denied`: the peer is
/// not allowed at all; `revoked`: a reload no longer allows it).
pub fn hangup_line(message: &str, reason: &str) -> bytes::Bytes {
    vocab::jsonrpc::message::error_response(
        &vocab::jsonrpc::message::raw_null(),
        vocab::jsonrpc::message::code::SERVER_UNAVAILABLE,
        message,
        Some(serde_json::json!({ HANGUP_KEY: reason })),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncBufReadExt, BufReader};

    #[tokio::test]
    async fn oversized_request_is_answered_under_its_top_level_id_case_k22() {
        let (client, server) = UnixStream::pair().unwrap();
        let (events, mut inbox) = mpsc::channel(16);
        let shutdown = CancellationToken::new();
        let limits = SessionLimits {
            queue: 16,
            max_message: 64,
            max_depth: 127,
            memory: Arc::new(MemoryBudget::new(1 << 20)),
            stall: std::time::Duration::from_secs(30),
            idle: None,
            first_message: std::time::Duration::from_secs(10),
            per_uid: None,
            server: Arc::from("test"),
        };
        let session = tokio::spawn(run(
            server,
            Peer::default(),
            events,
            limits,
            shutdown.clone(),
            (Arc::default(), None),
        ));
        assert!(matches!(
            inbox.recv().await,
            Some(SessionEvent::Connected(..))
        ));
        let (rd, mut wr) = client.into_split();
        let pad = "x".repeat(100);
        let request = format!(
            r#"{{"jsonrpc":"2.0","method":"tools/call","params":{{"arguments":{{"id":3,"t":"{pad}"}}}},"id":7}}"#
        );
        // A response to the child (no `method`) is not a request: answered under null.
        let response = format!(r#"{{"jsonrpc":"2.0","result":{{"t":"{pad}"}},"id":"s-1"}}"#);
        wr.write_all(format!("{request}\n{response}\n").as_bytes())
            .await
            .unwrap();
        let mut lines = BufReader::new(rd).lines();
        for want_id in [serde_json::json!(7), serde_json::Value::Null] {
            let line = lines.next_line().await.unwrap().unwrap();
            let v: serde_json::Value = serde_json::from_str(&line).unwrap();
            assert_eq!(v["id"], want_id, "{line}");
            assert_eq!(v["error"]["code"], code::INVALID_REQUEST, "{line}");
            assert!(matches!(
                inbox.recv().await,
                Some(SessionEvent::Rejected(_, code::INVALID_REQUEST))
            ));
        }
        shutdown.cancel();
        drop(inbox);
        session.await.unwrap();
    }

    fn limits() -> SessionLimits {
        SessionLimits {
            queue: 16,
            max_message: 1 << 16,
            max_depth: 127,
            memory: Arc::new(MemoryBudget::new(1 << 20)),
            stall: std::time::Duration::from_secs(30),
            idle: None,
            first_message: std::time::Duration::from_secs(10),
            per_uid: None,
            server: Arc::from("test"),
        }
    }

    /// Issue 32 §1: a paused session stops at a line boundary with the half line it holds;
    /// resumed in the next image it replays first, drops the replay's answers, frames the
    /// half line's rest, and passes every other line.
    #[tokio::test]
    async fn a_parked_session_keeps_its_half_line_and_a_resumed_one_replays_silently() {
        let (client, server) = UnixStream::pair().unwrap();
        let (events, mut inbox) = mpsc::channel(16);
        let parking = Arc::new(Parking::default());
        let shutdown = CancellationToken::new();
        let session = tokio::spawn(run(
            server,
            Peer::default(),
            events,
            limits(),
            shutdown.clone(),
            (parking.clone(), None),
        ));
        assert!(matches!(
            inbox.recv().await,
            Some(SessionEvent::Connected(..))
        ));
        let (_rd, mut wr) = client.into_split();
        wr.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n{\"jsonrpc\":")
            .await
            .unwrap();
        assert!(matches!(
            inbox.recv().await,
            Some(SessionEvent::Message(..))
        ));
        parking.pause();
        for _ in 0..200 {
            if parking.all_parked() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        let parked = parking.parked();
        let p = parked.values().next().expect("parked");
        assert_eq!(p.pending, b"{\"jsonrpc\":");
        // Sent while parked: not read by this image.
        wr.write_all(b"\"2.0\",\"id\":2,\"method\":\"ping\"}\n")
            .await
            .unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(inbox.try_recv().is_err());
        shutdown.cancel();
        parking.resume();
        drop(inbox);
        let _ = session.await;

        // The next image: the same bytes arrive on a resumed session.
        let (client, server) = UnixStream::pair().unwrap();
        let (events, mut inbox) = mpsc::channel(16);
        let replay = vec![
            r#"{"jsonrpc":"2.0","id":"mcp-supervisor-handover-1","method":"initialize","params":{}}"#.to_string(),
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.to_string(),
        ];
        let session = tokio::spawn(run(
            server,
            Peer::default(),
            events,
            limits(),
            CancellationToken::new(),
            (
                Arc::new(Parking::default()),
                Some(Resume {
                    pending: b"{\"jsonrpc\":".to_vec(),
                    replay,
                    listens: vec![],
                }),
            ),
        ));
        let (rd, mut wr) = client.into_split();
        wr.write_all(b"\"2.0\",\"id\":2,\"method\":\"ping\"}\n")
            .await
            .unwrap();
        let Some(SessionEvent::Connected(id, tx, _)) = inbox.recv().await else {
            panic!("not connected first")
        };
        let mut methods = Vec::new();
        for _ in 0..3 {
            match inbox.recv().await {
                Some(SessionEvent::Message(c, m)) if c == id => {
                    methods.push(m.method().to_string())
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(methods, ["initialize", "notifications/initialized", "ping"]);
        // The replay's answer is dropped; the client's own goes through.
        tx.deliver(message::error_response(
            &message::raw(&serde_json::json!("mcp-supervisor-handover-1")),
            -32601,
            "x",
            None,
        ));
        tx.deliver(message::error_response(
            &message::raw(&serde_json::json!(2)),
            -32601,
            "y",
            None,
        ));
        let mut lines = BufReader::new(rd).lines();
        let line = lines.next_line().await.unwrap().unwrap();
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["id"], 2, "{line}");
        drop(wr);
        drop(tx);
        drop(inbox);
        let _ = session.await;
    }
}
