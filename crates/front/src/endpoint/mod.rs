//! Endpoints (issue 31): one MCP server in front of many, with namespaced tools, stable
//! discovery while a source is down, and answers that name the failing source.
//!
//! An endpoint looks like a server to everything in front of it: it has a
//! [`ServerHandle`] whose `sessions` inbox takes the same [`SessionEvent`]s, so
//! `NAME.sock`, `attach NAME` and the HTTP front serve it with no code of their own. Behind
//! it, each client of the endpoint is one client of each source's actor (an addressed
//! [`ClientTx::channel`], as the HTTP front's), so the sources' id rewriting, caches, outage
//! answers, limits and health apply unchanged, and no second child or upstream session is
//! ever made.
//!
//! Owns: the dispatcher task (one per endpoint: hands each client's events to its task) and
//! one task per client that executes the decisions of [`conn::Conn`] and pumps each source's
//! outbox into it. Never routes by itself: every decision is `conn.rs`'s.

pub mod catalog;
pub mod conn;
pub mod listen;
pub mod names;
pub mod policy;

use actor::seats::{shares, Holder, Rule, Seats};
use actor::server::{panic_message, Command, Restarts, ServerHandle};
use actor::session::{Access, Address, ClientId, ClientTx, Peer, SessionEvent};
use conn::{Conn, Effect, Plan};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::config::EndpointConfig;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn, Instrument};
use vocab::jsonrpc::framing::Line;

/// Events queued toward one client's task before the client is cut off as stuck.
const CONN_INBOX: usize = 1024;
/// Lines queued from all sources toward one client's task (each source's own outbox is
/// bounded too: a client that does not keep up is closed by the source, as any client).
const SOURCE_LINES: usize = 1024;

/// One source as an endpoint reaches it.
#[derive(Debug, Clone)]
pub struct Link {
    /// The server's name.
    pub name: String,
    /// Its actor.
    pub handle: ServerHandle,
    /// Who may use it (its `allowed_uids`/`allowed_gids`): a peer it refuses does not see it.
    pub access: Access,
    /// Its `client_queue`.
    pub queue: usize,
    /// Its client seats: an endpoint client takes one of each source it joins, as its end
    /// client's uid (issue 47 §4).
    pub seats: Arc<Seats>,
    /// Its `max_clients_per_uid` (`None`: half of `max_clients`).
    pub per_uid: Option<usize>,
}

/// What an endpoint's clients are joined to: its configuration and its sources' actors
/// (replaced by a reload; clients keep the one they connected with).
#[derive(Debug, Clone)]
pub struct Setup {
    /// The endpoint's configuration.
    pub cfg: Arc<EndpointConfig>,
    /// Its sources in order; `None` for one whose actor is not running.
    pub sources: Vec<Option<Link>>,
    /// `[supervisor] max_clients`: a source whose seats are all taken is not joined.
    pub max_clients: usize,
    /// The catalogs its connections share (`catalog::SharedCatalogs`); a reload starts afresh.
    pub catalogs: Arc<catalog::SharedCatalogs>,
}

/// Starts an endpoint: its handle (served like a server's) and the sender that gives it a
/// new [`Setup`] on reload.
pub fn start(setup: Setup) -> (ServerHandle, watch::Sender<Arc<Setup>>) {
    let (stx, srx) = mpsc::channel(1024);
    let (ctx, crx) = mpsc::channel(16);
    let name = setup.cfg.name.clone();
    let (wtx, wrx) = watch::channel(Arc::new(setup));
    let span = tracing::info_span!("endpoint", endpoint = %name);
    tokio::spawn(supervise(name, srx, crx, wrx).instrument(span));
    (
        ServerHandle {
            sessions: stx,
            commands: ctx,
            pid: Arc::new(AtomicU32::new(0)),
        },
        wtx,
    )
}

/// A client's task as the dispatcher holds it.
struct Held {
    inbox: mpsc::Sender<ClientEvent>,
    tx: ClientTx,
    /// Its peer's uid and gid (a reload's new `allowed_*` may cut it).
    uid: u32,
    gid: u32,
    /// Its requests queued toward its task or not answered yet (an upgrade's quiet point).
    busy: Arc<Busy>,
}

/// One client's requests not finished, for an upgrade's quiet point (issue 32 §1): those the
/// dispatcher queued toward its task and the task has not taken yet, and those its
/// [`Conn::unfinished`] counted at the task's last step.
#[derive(Debug, Default)]
struct Busy {
    queued: AtomicUsize,
    unfinished: AtomicUsize,
}

impl Busy {
    fn now(&self) -> usize {
        self.queued
            .load(Ordering::Acquire)
            .saturating_add(self.unfinished.load(Ordering::Acquire))
    }

    /// The task took a request the dispatcher queued.
    fn taken(&self) {
        let _ = self
            .queued
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
    }
}

/// How long the dispatcher waits for one client's task to hand over (issue 32 §1).
const HANDOVER_WAIT: Duration = Duration::from_secs(2);

/// What the dispatcher hands a client's task.
enum ClientEvent {
    Message(vocab::jsonrpc::message::Message),
    Closed,
    /// A reload changed the endpoint's configuration: its policy applies now.
    Setup(Arc<Setup>),
    /// An upgrade (issue 32 §1): the client's state for the next image; the task then does
    /// nothing more (the process executes the next image).
    HandOver(oneshot::Sender<actor::server::ClientState>),
}

/// The test hook (`MCP_SUPERVISOR_TEST_PANIC=@endpoint:NAME`): endpoint NAME's dispatcher
/// panics at the first client connection of the process, so tests can prove it is supervised.
/// Unset in production.
const TEST_PANIC: &str = "@endpoint:";

/// Runs the dispatcher and starts a fresh one when it panics, by the actors' policy
/// ([`Restarts`]: 1 s doubling to 60 s, jittered; the intensity limit's verdict only lengthens
/// the wait). Its clients were cut with it (they reconnect); during the delay new connections
/// wait in the inbox for the fresh dispatcher, and `Shutdown` is answered.
async fn supervise(
    name: String,
    mut sessions: mpsc::Receiver<SessionEvent>,
    mut commands: mpsc::Receiver<Command>,
    mut setup: watch::Receiver<Arc<Setup>>,
) {
    use futures_util::FutureExt;
    use rand::SeedableRng;
    let hook = std::env::var("MCP_SUPERVISOR_TEST_PANIC")
        .ok()
        .is_some_and(|v| v.strip_prefix(TEST_PANIC) == Some(name.as_str()));
    let mut restarts = Restarts::new();
    let mut rng = rand::rngs::StdRng::from_entropy();
    // Outlive a panic of the dispatcher: its clients, to cut them; the last reload's access,
    // for the connections that waited through the restart.
    let mut conns: HashMap<ClientId, Held> = HashMap::new();
    let mut permit: Option<Access> = None;
    loop {
        let run = std::panic::AssertUnwindSafe(dispatch(
            &mut sessions,
            &mut commands,
            &mut setup,
            &mut conns,
            &mut permit,
            hook,
        ));
        let Err(panic) = run.catch_unwind().await else {
            return;
        };
        for (_, h) in conns.drain() {
            h.tx.kick();
        }
        let why = panic_message(&*panic);
        let next = restarts.on_panic(Instant::now(), &why, &mut rng);
        support::observe::metrics().restart(&name, "actor-panic");
        let wait = next.at().saturating_duration_since(Instant::now());
        error!(panic = %why, restart_in_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
            "the endpoint's dispatcher panicked; its clients were cut; restarting it after a delay");
        let timer = tokio::time::sleep(wait);
        tokio::pin!(timer);
        loop {
            tokio::select! {
                _ = &mut timer => break,
                cmd = commands.recv() => match cmd {
                    Some(Command::Shutdown(done)) => {
                        let _ = done.send(());
                        return;
                    }
                    Some(Command::Permit(access)) => permit = Some(access),
                    Some(_) => {}
                    None => return,
                },
            }
        }
        info!("starting a fresh endpoint dispatcher");
    }
}

/// Panics for the test hook ([`TEST_PANIC`]), once per process.
#[allow(clippy::panic)]
fn test_panic() {
    static DONE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !DONE.swap(true, std::sync::atomic::Ordering::Relaxed) {
        panic!("test hook: MCP_SUPERVISOR_TEST_PANIC={TEST_PANIC}");
    }
}

/// Hands each client's events to its task; ends at `Shutdown` or when every sender is gone.
async fn dispatch(
    sessions: &mut mpsc::Receiver<SessionEvent>,
    commands: &mut mpsc::Receiver<Command>,
    setup: &mut watch::Receiver<Arc<Setup>>,
    conns: &mut HashMap<ClientId, Held>,
    permit: &mut Option<Access>,
    hook: bool,
) {
    let stop = CancellationToken::new();
    // A panic unwinding out of here cuts every client task (they see the token).
    let _cut = stop.clone().drop_guard();
    loop {
        tokio::select! {
            biased;
            ev = sessions.recv() => {
                let Some(ev) = ev else { break };
                match ev {
                    SessionEvent::Connected(id, tx, peer) => {
                        // Accepted before a reload that no longer allows it.
                        if permit.as_ref().is_some_and(|a| !a.permits(peer.uid, peer.gid)) {
                            warn!(client = %id, peer_uid = peer.uid, "refusing a session of uid {}: no longer allowed on the endpoint after a reload", peer.uid);
                            tx.deliver(actor::session::hangup_line(
                                &format!("endpoint `{}`: access revoked by a configuration reload", setup.borrow().cfg.name),
                                "revoked",
                            ));
                            tx.close_after_drain();
                            continue;
                        }
                        // Clients whose task ended before their session said so (amortized
                        // here rather than on every message).
                        conns.retain(|_, h| !h.inbox.is_closed());
                        let (itx, irx) = mpsc::channel(CONN_INBOX);
                        let s = setup.borrow().clone();
                        let busy = Arc::new(Busy::default());
                        conns.insert(id, Held { inbox: itx, tx: tx.clone(), uid: peer.uid, gid: peer.gid, busy: busy.clone() });
                        if hook {
                            test_panic();
                        }
                        let span = tracing::debug_span!("client", client = %id);
                        tokio::spawn(client_task(s, tx, peer, irx, stop.child_token(), busy).instrument(span));
                    }
                    SessionEvent::Message(id, m) => {
                        if let Some(h) = conns.get(&id) {
                            let request = m.kind == vocab::jsonrpc::message::Kind::Request;
                            if request {
                                h.busy.queued.fetch_add(1, Ordering::AcqRel);
                            }
                            if h.inbox.try_send(ClientEvent::Message(m)).is_err() {
                                if request {
                                    h.busy.taken();
                                }
                                warn!(client = %id, "the endpoint is not keeping up with this client; disconnecting it");
                                h.tx.kick();
                            }
                        }
                    }
                    SessionEvent::Rejected(..) => {}
                    SessionEvent::InputClosed(id) => {
                        if let Some(h) = conns.get(&id) {
                            let _ = h.inbox.try_send(ClientEvent::Closed);
                        }
                    }
                    SessionEvent::Disconnected(id) => {
                        // Dropping the inbox ends the task, which leaves every source.
                        conns.remove(&id);
                    }
                }
            }
            changed = setup.changed() => {
                if changed.is_err() {
                    // The daemon dropped the sender: the endpoint is being removed.
                    break;
                }
                let s = setup.borrow_and_update().clone();
                for (id, h) in conns.iter() {
                    if h.inbox.try_send(ClientEvent::Setup(s.clone())).is_err() {
                        warn!(client = %id, "the endpoint is not keeping up with this client; disconnecting it");
                        h.tx.kick();
                    }
                }
            }
            cmd = commands.recv() => match cmd {
                Some(Command::Shutdown(done)) => {
                    stop.cancel();
                    let _ = done.send(());
                    break;
                }
                // A reload: clients no longer allowed on the endpoint are cut (issue 14 §2).
                Some(Command::Permit(access)) => {
                    *permit = Some(access.clone());
                    conns.retain(|id, h| {
                        let keep = access.permits(h.uid, h.gid);
                        if !keep {
                            warn!(client = %id, peer_uid = h.uid, "ending the session of uid {}: no longer allowed on the endpoint after a reload", h.uid);
                            h.tx.deliver(actor::session::hangup_line(
                                &format!("endpoint `{}`: access revoked by a configuration reload", setup.borrow().cfg.name),
                                "revoked",
                            ));
                            h.tx.close_after_drain();
                        }
                        keep
                    });
                }
                // An upgrade's quiet point and hand-over (issue 32 §1).
                // The select is biased toward `sessions`: every message a session sent before
                // it parked is queued (and counted) before this is answered.
                Some(Command::Busy(reply)) => {
                    let busy = conns
                        .values()
                        .filter(|h| !h.inbox.is_closed())
                        .map(|h| h.busy.now())
                        .fold(0usize, usize::saturating_add);
                    let _ = reply.send(busy);
                }
                Some(Command::HandOver(reply)) => {
                    let _ = reply.send(hand_over(conns).await);
                }
                // An endpoint has no child: the other commands are the daemon's to refuse.
                Some(_) => {}
                None => break,
            },
        }
    }
    stop.cancel();
}

/// Each client's state for the next image (a task that does not answer within
/// [`HANDOVER_WAIT`] is left out: its client's connection ends at the exec). Only the
/// `clients` of the [`actor::server::HandOver`] mean anything for an endpoint.
async fn hand_over(conns: &HashMap<ClientId, Held>) -> actor::server::HandOver {
    let asked: Vec<_> = conns
        .iter()
        .filter_map(|(id, h)| {
            let (tx, rx) = oneshot::channel();
            h.inbox.try_send(ClientEvent::HandOver(tx)).ok()?;
            Some(async move { (*id, tokio::time::timeout(HANDOVER_WAIT, rx).await) })
        })
        .collect();
    let mut clients = std::collections::BTreeMap::new();
    // All at once, under one deadline.
    for (id, answer) in futures_util::future::join_all(asked).await {
        match answer {
            Ok(Ok(state)) => {
                clients.insert(id, state);
            }
            _ => {
                warn!(client = %id, "a client of the endpoint did not hand over in time; its connection ends at the upgrade")
            }
        }
    }
    info!(
        clients = clients.len(),
        "endpoint handing over to the next image"
    );
    actor::server::HandOver::of_clients(clients)
}

/// What a source's pump hands the client's task.
enum FromSource {
    Line(usize, Address, Line),
    Closed(usize),
}

/// One client of the endpoint: joins each source it may use, then executes its
/// [`Conn`]'s decisions until the client or the endpoint goes.
async fn client_task(
    setup: Arc<Setup>,
    down: ClientTx,
    peer: Peer,
    mut inbox: mpsc::Receiver<ClientEvent>,
    stop: CancellationToken,
    busy: Arc<Busy>,
) {
    let (src_tx, mut src_rx) = mpsc::channel(SOURCE_LINES);
    // Each source sees this client as one of its own, named as the endpoint's (§7).
    let as_source = Peer {
        endpoint: Some(Arc::from(setup.cfg.name.as_str())),
        ..peer.clone()
    };
    let mut joined: Vec<Option<(ClientId, mpsc::Sender<SessionEvent>)>> = Vec::new();
    // Held while this client is joined to each source (`max_clients`), by source.
    let mut seats: Vec<Option<actor::seats::Seat>> = Vec::new();
    for (i, link) in setup.sources.iter().enumerate() {
        let Some(link) = link
            .as_ref()
            .filter(|l| l.access.permits(peer.uid, peer.gid))
        else {
            joined.push(None);
            seats.push(None);
            continue;
        };
        let rule = Rule::of(
            setup.max_clients,
            link.per_uid,
            shares(peer.uid, link.access.me),
        );
        let seat = match link.seats.take(rule, Holder::Uid(peer.uid)) {
            Ok(seat) => seat,
            Err(refused) => {
                support::observe::metrics().client_refused(&link.name, refused.reason());
                warn!(endpoint = %setup.cfg.name, source = %link.name, peer_uid = peer.uid, reason = refused.reason(),
                    "a client of the endpoint is not joined to this source: {}", refused.message(&link.name));
                joined.push(None);
                seats.push(None);
                continue;
            }
        };
        let sub = ClientId::next();
        let (tx, outbox) = ClientTx::channel(link.queue, &stop);
        if link
            .handle
            .sessions
            .send(SessionEvent::Connected(sub, tx, as_source.clone()))
            .await
            .is_err()
        {
            joined.push(None);
            seats.push(None);
            continue;
        }
        tokio::spawn(pump(i, outbox, src_tx.clone()));
        joined.push(Some((sub, link.handle.sessions.clone())));
        seats.push(Some(seat));
    }
    drop(src_tx);
    let open: Vec<bool> = joined.iter().map(Option::is_some).collect();
    let plan = Plan {
        name: setup.cfg.name.clone(),
        sources: setup
            .cfg
            .servers
            .iter()
            .map(|s| (s.clone(), setup.cfg.descriptions.get(s).cloned()))
            .collect(),
        status_tool: setup.cfg.status_tool.clone(),
    };
    let view = policy::View::of(&setup.cfg.policy, &setup.cfg.servers, &peer);
    if !view.labels.is_empty() {
        debug!(clients = ?view.labels, "client identities");
    }
    let mut conn = Conn::new(plan, &open, view);
    let endpoint = setup.cfg.name.clone();
    // Decided by the first message: which shared catalog this connection reads and feeds.
    let mut seed: Option<conn::SeedKey> = None;
    'run: loop {
        let deadline = conn.next_deadline();
        let effects = tokio::select! {
            input = inbox.recv() => match input {
                Some(ClientEvent::Message(m)) => {
                    if m.kind == vocab::jsonrpc::message::Kind::Request {
                        busy.taken();
                    }
                    // The era is decided by the first request, as the `Conn` decides it.
                    if seed.is_none() && m.kind == vocab::jsonrpc::message::Kind::Request {
                        let key = (conn::modern_first(&m), open.clone());
                        if let Some(c) = setup.catalogs.get(&key) {
                            conn.seed(c);
                        }
                        seed = Some(key);
                    }
                    conn.on_client(m, Instant::now())
                }
                Some(ClientEvent::Closed) => conn.input_closed(),
                Some(ClientEvent::Setup(s)) => {
                    conn.set_view(policy::View::of(&s.cfg.policy, &s.cfg.servers, &peer))
                }
                Some(ClientEvent::HandOver(reply)) => {
                    let _ = reply.send(conn.hand_over());
                    // Handed over: nothing more (leaving the sources now would tell them this
                    // client is gone, and closing `down` would end its connection); the
                    // process executes the next image.
                    stop.cancelled().await;
                    break 'run;
                }
                None => break,
            },
            from = src_rx.recv() => match from {
                Some(FromSource::Line(i, to, line)) => conn.on_source(i, to, line, Instant::now()),
                Some(FromSource::Closed(i)) => {
                    // Its seat goes back to that source at once.
                    if let Some(seat) = seats.get_mut(i) {
                        seat.take();
                    }
                    conn.source_closed(i, Instant::now())
                }
                None => Vec::new(),
            },
            _ = sleep_until(deadline) => conn.tick(Instant::now()),
            _ = stop.cancelled() => break,
        };
        busy.unfinished.store(conn.unfinished(), Ordering::Release);
        if let (Some(key), Some(c)) = (&seed, conn.take_catalog()) {
            setup.catalogs.put(key.clone(), c);
        }
        for e in effects {
            match e {
                Effect::Source(i, m) => {
                    let Some(Some((sub, events))) = joined.get(i) else {
                        continue;
                    };
                    if events.send(SessionEvent::Message(*sub, m)).await.is_err() {
                        debug!(source = i, "a source's actor is gone");
                    }
                }
                Effect::Client(to, line) => {
                    if !down.deliver_at(Some(to), line) {
                        break 'run;
                    }
                }
                Effect::Close => {
                    down.close_after_drain();
                    break 'run;
                }
                Effect::Answered(a) => answered(&endpoint, &peer, a),
            }
        }
    }
    busy.unfinished.store(0, Ordering::Release);
    for (sub, events) in joined.into_iter().flatten() {
        let _ = events.send(SessionEvent::Disconnected(sub)).await;
    }
}

/// Counts and logs a request the endpoint answered itself (§7): under the endpoint's name in
/// `mcp_supervisor_requests_total`, under the endpoint and the source in
/// `mcp_supervisor_endpoint_requests_total`, and one request log line naming both.
fn answered(endpoint: &str, peer: &Peer, a: conn::Answered) {
    let m = support::observe::metrics();
    m.request(endpoint, &a.method, a.outcome, a.code, 0.0);
    m.endpoint_request(endpoint, &a.source, &a.method, a.outcome);
    if support::logging::requests::enabled() {
        support::logging::requests::log_one(support::logging::requests::Record {
            at: std::time::SystemTime::now(),
            server: a.source.into(),
            request_id: a.rid,
            client: 0,
            peer_uid: Some(peer.uid),
            peer_pid: peer.pid,
            client_name: "".into(),
            endpoint: Some(endpoint.into()),
            method: a.method.into(),
            tool: a.tool.map(Into::into),
            arg_keys: "".into(),
            duration: Duration::ZERO,
            outcome: a.outcome.as_str(),
            error_code: a.code,
            restarted: false,
        });
    }
}

/// Sleeps until `t`, or forever when there is no deadline.
async fn sleep_until(t: Option<Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t.into()).await,
        None => std::future::pending().await,
    }
}

/// Moves source `i`'s lines for this client into the client's task, until the source closes
/// the client.
async fn pump(i: usize, mut outbox: actor::session::Outbox, to: mpsc::Sender<FromSource>) {
    let kicked = outbox.kicked();
    loop {
        tokio::select! {
            line = outbox.recv() => match line {
                Some((_, line)) if line.is_empty() => break,
                Some((addr, line)) => {
                    if to.send(FromSource::Line(i, addr, line)).await.is_err() {
                        return;
                    }
                }
                None => break,
            },
            _ = kicked.cancelled() => break,
        }
    }
    let _ = to.send(FromSource::Closed(i)).await;
}
