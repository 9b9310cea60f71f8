//! # Theory of operation
//!
//! One actor per configured server owns everything about it: the child instance (spawned with
//! [`crate::child::process`]), the MCP session with the child, the id maps, the connected
//! clients, health probing and the restart schedule. It is a single task with a `select!` over
//! three inboxes (sessions, child events, commands) and one timer, so no state is shared and
//! no lock is held anywhere on the message path.
//!
//! Routing rules (issue 3; design decisions 2-5):
//! - every request forwarded to the child gets a fresh child-side id from a counter that never
//!   repeats in the actor's lifetime; the response restores the client's exact id;
//! - `_meta.progressToken` is replaced by the child-side id, so progress maps back to the
//!   owner; `notifications/cancelled` ids are translated both ways;
//! - `initialize`, `notifications/initialized` and `ping` from clients never reach the child;
//!   the child's own `ping` is answered here at once;
//! - a child's request (`sampling/createMessage`, `elicitation/create`, `roots/list`, ...) goes
//!   to the owner rule in [`Server::pick_owner`];
//! - session-wide notifications fan out; `resources/updated` only to subscribers; logging is
//!   filtered per client.
//!
//! Health (issue 4): any message from the child is proof of life; a probe is sent only after
//! `probe_interval` of silence; death is exit, or `probe_failures` consecutive unanswered
//! probes with nothing heard, and never before the oldest in-flight request's deadline.
//!
//! Outages (issue 5): in-flight requests fail at once on exit with a structured record;
//! requests during start-up or backoff wait (bounded) and are forwarded once ready; list
//! requests are answered from the last known result while the child is down.

use crate::child::backoff::{Backoff, FAILED_RETRY, MAX_FAILED_STARTS};
use crate::child::process::{self, ChildEvent, ChildHandle, Exit, Queued, StderrTail};
use crate::config::{RestartPolicy, ServerConfig};
use crate::jsonrpc::message::{self, code, raw, raw_u64, Kind, Message, Out, RawObject};
use crate::logging::{MSG_BACKOFF, MSG_EXITED, MSG_FAILED, MSG_READY, MSG_SPAWNED};
use crate::mux::era::{self, ChildProtocol, Era, Handshake};
use crate::mux::health::{Action, Health, HealthConfig, ProbeMethods};
use crate::mux::ids::Inflight;
use crate::mux::session::{ClientId, ClientTx, Peer, SessionEvent};
use crate::observe::{metrics, Outcome, ServerMetrics};
use bytes::Bytes;
use rand::rngs::StdRng;
use rand::SeedableRng;
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, error, info, warn, Instrument};

/// A child that closed stdout is stopped if still running after this (R15).
const STDOUT_CLOSED_GRACE: Duration = Duration::from_secs(2);

/// Lifecycle state of a server (issue 7's `status` vocabulary).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Spawned, handshake not answered yet.
    Starting,
    /// Handshake answered; traffic flows.
    Ready,
    /// Waiting to respawn after an exit.
    Backoff,
    /// Stop ladder running.
    Stopping,
    /// Not running and not scheduled to run.
    Stopped,
    /// Gave up (permanent error or too many failed starts); retried every 10 minutes.
    Failed,
}

/// The last exit, for status and errors.
#[derive(Debug, Clone, Serialize)]
pub struct LastExit {
    /// Exit code, if it exited.
    pub code: Option<i32>,
    /// Signal number, if a signal ended it.
    pub signal: Option<i32>,
    /// `exited(1)`, `signal(SIGKILL)`, `start-timeout`, `probe-timeout`, `spawn-error`, ...
    pub reason: String,
    /// Wall-clock time of the exit, RFC 3339.
    pub at: String,
}

/// A snapshot for `status` (issue 4 §6 and issue 7).
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    /// Server name.
    pub name: String,
    /// Lifecycle state.
    pub state: State,
    /// Child pid, null when no child runs.
    pub pid: Option<u32>,
    /// Restarts since the supervisor started.
    pub restarts: u64,
    /// Protocol era / negotiated version, when known.
    pub era: Option<String>,
    /// Connected clients.
    pub clients: usize,
    /// Seconds the current child has been running.
    pub uptime_s: Option<f64>,
    /// Seconds since anything was heard from the child.
    pub last_heard_s: Option<f64>,
    /// Probes sent to the current child.
    pub probes_sent: u64,
    /// Probes answered (any reply).
    pub probes_answered: u64,
    /// False once the child was seen not to answer (or to die on) `ping`.
    pub ping_served: bool,
    /// Consecutive failures counted by the backoff.
    pub consecutive_failures: u32,
    /// Milliseconds until the next spawn, in `backoff` or `failed`.
    pub retry_in_ms: Option<u64>,
    /// Last exit, null until the first one.
    pub last_exit: Option<LastExit>,
    /// Last lines of stderr.
    pub stderr_tail: String,
    /// Times this server's actor ended unexpectedly (a panic) and was restarted.
    pub actor_restarts: u64,
    /// The last such panic's message, null if none.
    pub last_actor_panic: Option<String>,
}

/// Commands from the daemon and the control socket (systemctl-like verbs).
#[derive(Debug)]
pub enum Command {
    /// Stop the child through the ladder and end the actor; replies when done.
    Shutdown(oneshot::Sender<()>),
    /// Stop the child and keep it stopped (clients stay connected and get `stopped` errors);
    /// replies once it has exited.
    Stop(oneshot::Sender<()>),
    /// Start the child now if it is not running, clearing `failed` and the backoff (like
    /// `systemctl reset-failed` + `start`).
    Start(oneshot::Sender<()>),
    /// Stop the child (if running) and start it again at once, clearing the backoff.
    Restart(oneshot::Sender<()>),
    /// Use a new configuration; the child is restarted when it changed.
    Reconfigure(Box<ServerConfig>, oneshot::Sender<()>),
    /// Reply with a status snapshot.
    Status(oneshot::Sender<Status>),
}

/// A cheap handle to a running server actor.
#[derive(Debug, Clone)]
pub struct ServerHandle {
    /// Inbox for client sessions.
    pub sessions: mpsc::Sender<SessionEvent>,
    /// Inbox for commands.
    pub commands: mpsc::Sender<Command>,
    /// Pid (= process group id) of the running child, 0 when none: lets the daemon SIGKILL
    /// every group at once on a second signal without waiting for the actor (F25).
    pub pid: Arc<AtomicU32>,
}

impl ServerHandle {
    /// SIGKILLs the current child's process group, if any, right now.
    pub fn kill_now(&self) {
        let pid = self.pid.load(Ordering::SeqCst);
        if pid != 0 {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// Starts the actor for `cfg`; it spawns the child at once. The returned task is the actor's
/// supervisor ([`supervise`]): it ends only when the actor ends normally.
pub fn start(cfg: ServerConfig) -> (ServerHandle, tokio::task::JoinHandle<()>) {
    let (stx, srx) = mpsc::channel(1024);
    let (ctx, crx) = mpsc::channel(16);
    let span = tracing::info_span!("server", server = %cfg.name);
    let pid = Arc::new(AtomicU32::new(0));
    let task = tokio::spawn(supervise(cfg, srx, crx, pid.clone()).instrument(span));
    (
        ServerHandle {
            sessions: stx,
            commands: ctx,
            pid,
        },
        task,
    )
}

/// Why the supervisor itself stopped the child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StopCause {
    StartTimeout,
    ProbeTimeout,
    StdinFailed,
    StdoutClosed,
    HandshakeRejected,
    Shutdown,
    Stop,
    Restart,
}

impl StopCause {
    fn reason(self) -> &'static str {
        match self {
            StopCause::StartTimeout => "start-timeout",
            StopCause::ProbeTimeout => "probe-timeout",
            StopCause::StdinFailed => "stdin-failed",
            StopCause::StdoutClosed => "stdout-closed",
            StopCause::HandshakeRejected => "handshake-rejected",
            StopCause::Shutdown | StopCause::Stop => "stopped",
            StopCause::Restart => "restart-requested",
        }
    }
}

#[derive(Debug)]
enum Owner {
    Client {
        client: ClientId,
        id: Box<RawValue>,
        progress: Option<Box<RawValue>>,
        /// `resources/subscribe` URI: recorded as subscribed when the child says yes.
        subscribe: Option<String>,
        /// The list method to cache the result of (no cursor in the request).
        cache: Option<&'static str>,
        /// A modern client's request on a handshake child: add `resultType` to the result.
        add_result_type: bool,
        /// The log level this request asked for (modern `_meta` logLevel, or a handshake
        /// client's level toward a modern child): who may receive `notifications/message`.
        log_level: Option<usize>,
        /// A handshake client's request to a modern child that may come back
        /// `input_required`: the params sent, to retry with (MRTR, issue 6 §4).
        retry_params: Option<Box<RawValue>>,
    },
    Initialize,
    /// `server/discover` opening a fresh child: the era probe of `auto` (`probe`), or the
    /// readiness check of a child configured for 2026-07-28.
    Discover {
        probe: bool,
    },
    /// The supervisor's own `subscriptions/listen` stream.
    Listen,
    Refresh {
        method: &'static str,
        announce: bool,
    },
    Internal,
}

#[derive(Debug)]
struct Pending {
    owner: Owner,
    method: String,
    /// When it was written to the child (the health rule for overdue requests).
    written: Instant,
}

/// What the request log needs about a client request, from arrival to its one outcome
/// (issue 8). Keyed by client and request id in [`Server::ledger`].
#[derive(Debug)]
struct Tracked {
    /// The id shown to the client in errors and in the log (`r-...`).
    rid: String,
    method: String,
    tool: Option<String>,
    /// Keys of `tools/call` arguments (never their values).
    arg_keys: Vec<String>,
    started: Instant,
    /// The child instance running when the request arrived, if any.
    generation: Option<u64>,
}

/// A modern client's `subscriptions/listen` stream, served by the supervisor from a handshake
/// child's session-wide notifications (issue 6 §3).
#[derive(Debug)]
struct Listener {
    client: ClientId,
    /// The listen request's id: the stream's subscription id.
    id: Box<RawValue>,
    tools: bool,
    prompts: bool,
    resources: bool,
    uris: Vec<String>,
}

impl Listener {
    /// Whether this stream asked for the notification `method` (about `uri`).
    fn wants(&self, method: &str, uri: Option<&str>) -> bool {
        match method {
            "notifications/tools/list_changed" => self.tools,
            "notifications/prompts/list_changed" => self.prompts,
            "notifications/resources/list_changed" => self.resources,
            "notifications/resources/updated" => {
                uri.is_some_and(|u| self.uris.iter().any(|x| x == u))
            }
            _ => false,
        }
    }

    /// `method` on this stream: its params with `_meta.subscriptionId` set to the stream's id.
    fn notification(&self, method: &str, params: Option<&RawValue>) -> Bytes {
        let mut p = params
            .and_then(|p| serde_json::from_str::<Value>(p.get()).ok())
            .unwrap_or(json!({}));
        if !p.is_object() {
            p = json!({});
        }
        let id: Value = serde_json::from_str(self.id.get()).unwrap_or(Value::Null);
        if let Some(o) = p.as_object_mut() {
            o.insert("_meta".into(), json!({ era::META_SUBSCRIPTION_ID: id }));
        }
        Out::request(None, method, Some(&raw(&p))).encode()
    }
}

/// A client request held while the child is not ready.
#[derive(Debug)]
struct Held {
    client: ClientId,
    msg: Message,
    deadline: Instant,
}

/// A child's request forwarded to a client.
#[derive(Debug)]
struct Upstream {
    asker: Asker,
    deadline: Instant,
}

/// Who is waiting for a client's answer to a request the supervisor sent it.
#[derive(Debug)]
enum Asker {
    /// The child's own request (handshake era), under the child's id.
    Child(Box<RawValue>),
    /// An input request of a 2026 `input_required` result, answered for the client (MRTR).
    Mrtr { round: u64, key: String },
}

/// An `input_required` result being turned into handshake-era requests to the client that
/// made the original request (issue 6 §4); once every answer is in, the original request is
/// retried with `inputResponses` and the opaque `requestState`.
#[derive(Debug)]
struct Round {
    client: ClientId,
    /// The client's id for the original request.
    id: Box<RawValue>,
    method: String,
    /// The params the child saw (envelope included), to retry with.
    params: Value,
    /// The child's opaque `requestState`, byte-exact; `None` when it gave none (K25).
    state: Option<Box<RawValue>>,
    answers: Map<String, Value>,
    waiting: usize,
    progress: Option<Box<RawValue>>,
    log_level: Option<usize>,
}

#[derive(Debug)]
struct Client {
    tx: ClientTx,
    peer: Peer,
    /// The client's era, decided by its first request (issue 6 §3: as the SDKs do).
    era: Option<Era>,
    initialized: bool,
    capabilities: Value,
    name: String,
    /// `clientInfo` from its `initialize` (for envelopes toward a modern child).
    info: Value,
    log_level: Option<usize>,
    subs: HashSet<String>,
    /// Input closed: drop the client once its last request is answered.
    closing: bool,
}

/// What the actor's supervisor remembers across actor restarts (for `status`).
#[derive(Debug, Default, Clone)]
struct ActorHistory {
    restarts: u64,
    last_panic: Option<String>,
}

/// Runs the actor and restarts it if it panics (issue 12 §2): the inboxes outlive the actor,
/// so the server's socket and handle stay valid. After a panic, the dead actor's clients are
/// told why and disconnected (they may reconnect at once), its child is stopped through the
/// ladder and waited for, and a fresh actor starts with the server's current configuration.
async fn supervise(
    cfg: ServerConfig,
    mut sessions: mpsc::Receiver<SessionEvent>,
    mut commands: mpsc::Receiver<Command>,
    pid: Arc<AtomicU32>,
) {
    use futures_util::FutureExt;
    let mut cfg = cfg;
    let mut history = ActorHistory::default();
    loop {
        let mut server = Server::new(cfg, pid.clone(), history.clone());
        let run = std::panic::AssertUnwindSafe(server.run(&mut sessions, &mut commands));
        let Err(panic) = run.catch_unwind().await else {
            return;
        };
        let why = panic_message(&*panic);
        error!(panic = %why, "the server's actor panicked; restarting it");
        metrics().restart(&server.cfg.name, "actor-panic");
        history.restarts += 1;
        history.last_panic = Some(why.clone());
        server.after_panic(&why).await;
        cfg = server.cfg.clone();
    }
}

/// The text of a panic payload.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic with no message".to_string())
}

/// A test hook (`MCP_SUPERVISOR_TEST_PANIC=<method>`, read at actor start): a client request
/// for that method panics the actor, so tests can prove the actor is supervised. Unset in
/// production; nothing else reads it.
fn test_panic_method() -> Option<String> {
    std::env::var("MCP_SUPERVISOR_TEST_PANIC")
        .ok()
        .filter(|m| !m.is_empty())
}

/// Panics: the test hook's whole purpose (see [`test_panic_method`]); never reached unless
/// the environment variable is set.
#[allow(clippy::panic)]
fn test_panic(method: &str) -> ! {
    panic!("test hook: MCP_SUPERVISOR_TEST_PANIC={method}")
}

struct Server {
    cfg: ServerConfig,
    /// This server's metric series, resolved once (no lock or label allocation per message).
    metrics: ServerMetrics,
    history: ActorHistory,
    test_panic: Option<String>,
    pid: Arc<AtomicU32>,
    state: State,
    child: Option<ChildHandle>,
    generation: u64,
    events_tx: mpsc::Sender<ChildEvent>,
    events_rx: mpsc::Receiver<ChildEvent>,
    tail: StderrTail,
    backoff: Backoff,
    rng: StdRng,
    failed_starts: u32,
    ready_since: Option<Instant>,
    next_spawn: Option<Instant>,
    stop_cause: Option<StopCause>,
    /// When the current child closed stdout while still running (R15: 2 s grace, then stop).
    stdout_closed_at: Option<Instant>,
    restarts: u64,
    last_exit: Option<LastExit>,
    shutdown_waiters: Vec<oneshot::Sender<()>>,
    /// Replied to once the child has exited (operator `stop`).
    stop_waiters: Vec<oneshot::Sender<()>>,
    /// Shutdown requested: end the actor once stopped.
    exiting: bool,
    // The MCP session with the child.
    inflight: Inflight<Pending>,
    handshake: Option<Handshake>,
    /// `protocol = "auto"`: the era the child was found to speak (kept across restarts).
    verdict: Option<Era>,
    /// The supervisor's own `subscriptions/listen` stream on a modern child (child-side id),
    /// feeding handshake clients their list-changed and resource-updated notifications.
    listen: Option<u64>,
    /// Listen streams of modern clients served by the supervisor on a handshake child.
    listeners: Vec<Listener>,
    /// The pending spawn replaces a child that exited on the era probe: not an outage.
    probe_respawn: bool,
    start_deadline: Option<Instant>,
    lists: HashMap<&'static str, Value>,
    child_log_level: Option<usize>,
    subs: HashMap<String, HashSet<ClientId>>,
    // Clients.
    clients: BTreeMap<ClientId, Client>,
    held: VecDeque<Held>,
    /// Every client request not finished yet (issue 8: exactly one outcome each).
    ledger: HashMap<(ClientId, String), Tracked>,
    next_upstream: u64,
    upstream: HashMap<(ClientId, u64), Upstream>,
    /// MRTR rounds in progress, by round number.
    rounds: HashMap<u64, Round>,
    next_round: u64,
    // Health.
    health: Health,
}

impl Server {
    fn new(cfg: ServerConfig, pid: Arc<AtomicU32>, history: ActorHistory) -> Self {
        let (events_tx, events_rx) = mpsc::channel(256);
        let health = Health::new(health_config(&cfg), Instant::now());
        Server {
            metrics: metrics().server(&cfg.name),
            pid,
            history,
            test_panic: test_panic_method(),
            backoff: Backoff::new(
                cfg.backoff_initial,
                cfg.backoff_max,
                cfg.backoff_reset_after,
            ),
            cfg,
            state: State::Stopped,
            child: None,
            generation: 0,
            events_tx,
            events_rx,
            tail: StderrTail::default(),
            rng: StdRng::from_entropy(),
            failed_starts: 0,
            ready_since: None,
            next_spawn: None,
            stop_cause: None,
            stdout_closed_at: None,
            restarts: 0,
            last_exit: None,
            shutdown_waiters: Vec::new(),
            stop_waiters: Vec::new(),
            exiting: false,
            inflight: Inflight::default(),
            handshake: None,
            verdict: None,
            listen: None,
            listeners: Vec::new(),
            probe_respawn: false,
            start_deadline: None,
            lists: HashMap::new(),
            child_log_level: None,
            subs: HashMap::new(),
            clients: BTreeMap::new(),
            held: VecDeque::new(),
            ledger: HashMap::new(),
            next_upstream: 1,
            rounds: HashMap::new(),
            next_round: 1,
            upstream: HashMap::new(),
            health,
        }
    }

    /// After a panic of [`Server::run`]: the state may be half-updated, but it is memory-safe
    /// and enough to tell the clients, stop the child through the ladder and wait for it.
    async fn after_panic(&mut self, why: &str) {
        let msg = format!(
            "mcp-supervisor: the actor of server `{}` failed ({why}); it restarts now, reconnect",
            self.cfg.name
        );
        for c in self.clients.values() {
            c.tx.deliver(message::error_response(
                &message::raw_null(),
                code::INTERNAL_ERROR,
                &msg,
                Some(json!({"server": self.cfg.name, "status": "actor-restart"})),
            ));
            c.tx.close_after_drain();
        }
        self.clients.clear();
        let Some(mut child) = self.child.take() else {
            return;
        };
        child.stop();
        let generation = child.generation;
        let budget = self.cfg.stop_grace + self.cfg.kill_timeout + Duration::from_secs(5);
        let waited = tokio::time::timeout(budget, async {
            while let Some(ev) = self.events_rx.recv().await {
                if matches!(ev, ChildEvent::Exited(g, _) if g == generation) {
                    return;
                }
            }
        })
        .await;
        if waited.is_err() {
            warn!("the child of the failed actor did not exit within the stop budget");
        }
        self.pid.store(0, Ordering::SeqCst);
    }

    async fn run(
        &mut self,
        sessions: &mut mpsc::Receiver<SessionEvent>,
        commands: &mut mpsc::Receiver<Command>,
    ) {
        self.spawn();
        let (mut sessions_open, mut commands_open) = (true, true);
        let mut exported_state = None;
        loop {
            if exported_state != Some(self.state) {
                exported_state = Some(self.state);
                self.metrics.set_state(self.outage_status_of(self.state));
            }
            if self.state == State::Stopped {
                for w in self.stop_waiters.drain(..) {
                    let _ = w.send(());
                }
                if self.exiting {
                    break;
                }
            }
            let wake = self.next_wake();
            tokio::select! {
                ev = self.events_rx.recv() => {
                    if let Some(ev) = ev { self.on_child_event(ev) }
                }
                ev = sessions.recv(), if sessions_open => match ev {
                    Some(ev) => self.on_session(ev),
                    None => { sessions_open = false; self.exiting = true; self.begin_shutdown(); }
                },
                cmd = commands.recv(), if commands_open => match cmd {
                    Some(Command::Shutdown(done)) => { self.shutdown_waiters.push(done); self.exiting = true; self.begin_shutdown(); }
                    Some(Command::Stop(done)) => { self.stop_waiters.push(done); self.operator_stop(); }
                    Some(Command::Start(done)) => { self.operator_start(); let _ = done.send(()); }
                    Some(Command::Restart(done)) => { self.operator_restart(); let _ = done.send(()); }
                    Some(Command::Reconfigure(cfg, done)) => { self.reconfigure(*cfg); let _ = done.send(()); }
                    Some(Command::Status(reply)) => { let _ = reply.send(self.status()); }
                    None => { commands_open = false; self.exiting = true; self.begin_shutdown(); }
                },
                _ = sleep_until(wake) => self.on_timer(),
            }
        }
        for c in self.clients.values() {
            c.tx.kick();
        }
        for w in self.shutdown_waiters.drain(..) {
            let _ = w.send(());
        }
    }

    // ----- lifecycle -------------------------------------------------------------------------

    fn spawn(&mut self) {
        self.generation += 1;
        self.probe_respawn = false;
        self.tail.clear();
        self.next_spawn = None;
        match process::spawn(
            &self.cfg,
            self.generation,
            self.events_tx.clone(),
            self.tail.clone(),
        ) {
            Ok(child) => {
                info!(
                    message_id = MSG_SPAWNED,
                    child_pid = child.pid,
                    restart_n = self.restarts,
                    generation = self.generation,
                    "spawned"
                );
                self.pid.store(child.pid, Ordering::SeqCst);
                self.child = Some(child);
                self.state = State::Starting;
                self.ready_since = None;
                self.stop_cause = None;
                self.stdout_closed_at = None;
                self.health.restart(Instant::now());
                let deadline = Instant::now() + self.cfg.start_timeout;
                self.start_deadline = Some(deadline);
                // The first message pins a dual-era child and kills an old strict one: decide
                // the era before anything else is sent (protocol.md Implications 4).
                match (&self.cfg.protocol, self.verdict) {
                    (ChildProtocol::Handshake(v), _) => {
                        let v = v.clone();
                        self.send_initialize(&v);
                    }
                    (ChildProtocol::Modern, _) | (ChildProtocol::Auto, Some(Era::Modern)) => {
                        self.send_discover(false, deadline)
                    }
                    (ChildProtocol::Auto, Some(Era::Handshake)) => {
                        self.send_initialize(era::HANDSHAKE_VERSION)
                    }
                    (ChildProtocol::Auto, None) => {
                        let probe_deadline = Instant::now() + self.cfg.era_probe_timeout;
                        self.send_discover(true, probe_deadline.min(deadline));
                    }
                }
            }
            Err(e) => {
                error!(error = %e, permanent = e.permanent(), "spawn failed");
                self.record_exit(None, None, "spawn-error");
                // Spawn errors have no stderr; keep the reason where users look for it.
                self.tail.clear();
                self.tail.note(&e.to_string());
                if e.permanent() {
                    self.enter_failed(&format!("{e}; fix the command and run `start`"));
                } else {
                    self.schedule_restart(Instant::now(), false);
                }
            }
        }
    }

    fn send_initialize(&mut self, version: &str) {
        let deadline = self
            .start_deadline
            .unwrap_or_else(|| Instant::now() + self.cfg.start_timeout);
        let params = raw(&era::initialize_params(
            version,
            &self.cfg.client_capabilities,
        ));
        self.send_to_child(Owner::Initialize, "initialize", Some(params), deadline);
    }

    fn send_discover(&mut self, probe: bool, deadline: Instant) {
        let params = era::add_envelope(None, &era::supervisor_envelope());
        self.send_to_child(
            Owner::Discover { probe },
            "server/discover",
            Some(params),
            deadline,
        );
    }

    /// The child's era is now known (issue 6 §1): say it once, keep it for the next spawns.
    fn set_verdict(&mut self, era: Era, why: &str) {
        if self.cfg.protocol == ChildProtocol::Auto && self.verdict != Some(era) {
            let name = match era {
                Era::Modern => era::MODERN_VERSION,
                Era::Handshake => "handshake (2024-11-05 .. 2025-11-25)",
            };
            info!(era = name, "protocol era: {why}");
        }
        self.verdict = Some(era);
    }

    fn enter_failed(&mut self, why: &str) {
        error!(message_id = MSG_FAILED, reason = %why, restart_n = self.restarts,
            retry_in_s = FAILED_RETRY.as_secs(), "failed: {why}");
        self.state = State::Failed;
        self.next_spawn = Some(Instant::now() + FAILED_RETRY);
        self.fail_held("failed");
    }

    fn begin_shutdown(&mut self) {
        if matches!(self.state, State::Stopped | State::Stopping) && self.child.is_none() {
            self.state = State::Stopped;
            return;
        }
        self.next_spawn = None;
        self.fail_held("stopped");
        if let Some(child) = &mut self.child {
            self.stop_cause = Some(StopCause::Shutdown);
            child.stop();
            self.state = State::Stopping;
        } else {
            self.state = State::Stopped;
        }
    }

    fn operator_stop(&mut self) {
        info!("stop requested");
        self.next_spawn = None;
        self.fail_held("stopped");
        if self.child.is_some() {
            self.stop_child(StopCause::Stop);
            self.state = State::Stopping;
        } else {
            self.state = State::Stopped;
        }
    }

    fn operator_start(&mut self) {
        self.backoff.reset();
        self.failed_starts = 0;
        if self.child.is_none() {
            info!("start requested");
            self.spawn();
        }
    }

    fn operator_restart(&mut self) {
        info!("restart requested");
        self.backoff.reset();
        self.failed_starts = 0;
        if self.child.is_some() {
            self.stop_child(StopCause::Restart);
        } else {
            self.restarts += 1;
            self.spawn();
        }
    }

    fn reconfigure(&mut self, cfg: ServerConfig) {
        if cfg == self.cfg {
            return;
        }
        info!("configuration changed; restarting the child with it");
        self.backoff = Backoff::new(
            cfg.backoff_initial,
            cfg.backoff_max,
            cfg.backoff_reset_after,
        );
        // A changed command may serve a different protocol or tool set: forget the handshake's
        // ping verdicts, keep the cached lists (compared and announced after the restart).
        self.health.reconfigure(health_config(&cfg), Instant::now());
        self.cfg = cfg;
        self.verdict = None;
        self.operator_restart();
    }

    fn stop_child(&mut self, cause: StopCause) {
        if let Some(child) = &mut self.child {
            if !child.stopping() {
                warn!(reason = cause.reason(), "stopping the child");
                self.stop_cause = Some(cause);
                child.stop();
                // No probes, no forwarding while the ladder runs; the exit decides what next.
                self.state = State::Stopping;
            }
        }
    }

    fn record_exit(&mut self, code: Option<i32>, signal: Option<i32>, reason: &str) {
        self.last_exit = Some(LastExit {
            code,
            signal,
            reason: reason.to_string(),
            at: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
        });
    }

    fn on_exit(&mut self, exit: Exit) {
        let Some(child) = self.child.take() else {
            // Exits are filtered by generation, so this is the current child; be safe anyway.
            warn!("an exit with no child running was ignored");
            return;
        };
        self.stdout_closed_at = None;
        self.pid.store(0, Ordering::SeqCst);
        let now = Instant::now();
        let cause = self.stop_cause.take();
        let reason = match cause {
            // The child ended by itself before our stop took effect: its status is the truth.
            _ if !exit.requested => exit.reason(),
            Some(c @ (StopCause::StartTimeout | StopCause::ProbeTimeout)) => c.reason().to_string(),
            Some(c @ (StopCause::Shutdown | StopCause::Stop | StopCause::Restart)) => {
                format!("{} {}", c.reason(), exit.reason())
            }
            Some(c) => format!("{} {}", c.reason(), exit.reason()),
            _ => exit.reason(),
        };
        let was_ready = self.ready_since.is_some();
        let probing_era = self
            .inflight
            .iter()
            .any(|(_, _, _, p)| matches!(p.owner, Owner::Discover { probe: true }));
        if self.health.exited(exit.requested) {
            warn!("the child exited while a `ping` probe was outstanding; it will not be sent `ping` again (liveness is confirmed with advertised requests instead)");
        }
        self.record_exit(exit.code, exit.signal, &reason);
        let tail = self.tail.last_lines(3);
        let operator = matches!(
            cause,
            Some(StopCause::Shutdown | StopCause::Stop | StopCause::Restart)
        );
        let signal = exit.signal.map(process::signal_name);
        if operator {
            info!(message_id = MSG_EXITED, child_pid = child.pid, exit_code = exit.code,
                signal = signal.as_deref(), reason = %reason, restart_n = self.restarts, "stopped");
        } else {
            warn!(message_id = MSG_EXITED, child_pid = child.pid, exit_code = exit.code,
                signal = signal.as_deref(), reason = %reason, restart_n = self.restarts,
                stderr_tail = %tail, "exited");
        }
        let status = if cause
            .is_some_and(|c| matches!(c, StopCause::StartTimeout | StopCause::ProbeTimeout))
        {
            "timeout"
        } else if operator {
            "stopped"
        } else {
            "exited"
        };
        // Decide what comes next before failing requests, so errors can say when we retry.
        if matches!(cause, Some(StopCause::Shutdown | StopCause::Stop)) {
            self.state = State::Stopped;
        } else if probing_era && !exit.requested && !matches!(exit.code, Some(126 | 127 | 78)) {
            // Old strict servers exit when their first message is not `initialize`: that is a
            // verdict, not a failed start. Respawn at once in the handshake era (issue 6 §1).
            self.set_verdict(
                Era::Handshake,
                "the child exited on the server/discover probe",
            );
            self.state = State::Backoff;
            self.probe_respawn = true;
            // Still never two spawns closer than backoff_initial (R9).
            self.next_spawn = Some((child.spawned_at + self.cfg.backoff_initial).max(now));
        } else if cause == Some(StopCause::Restart) {
            self.state = State::Backoff;
            self.next_spawn = Some(now);
        } else if !was_ready {
            self.failed_starts += 1;
            let permanent = matches!(exit.code, Some(126 | 127 | 78));
            if permanent {
                self.enter_failed(&format!(
                    "{reason}: the command cannot run (exit codes 126, 127, 78 are not retried)"
                ));
            } else if self.failed_starts >= MAX_FAILED_STARTS {
                self.enter_failed(&format!(
                    "{} consecutive failed starts, last {reason}",
                    self.failed_starts
                ));
            } else {
                self.after_exit(now, &child, exit, cause);
            }
        } else {
            self.after_exit(now, &child, exit, cause);
        }
        if self.state == State::Backoff && cause != Some(StopCause::Restart) {
            let class = match (status, exit.signal) {
                ("exited", Some(_)) => "signal",
                (s, _) => s,
            };
            self.metrics.restart(class);
        }
        let retry_after = self.next_spawn.map(|t| t.saturating_duration_since(now));
        self.fail_inflight(status, &reason, retry_after);
        self.ready_since = None;
        self.start_deadline = None;
        if self.state == State::Failed || (self.handshake.is_none() && !self.probe_respawn) {
            // Requests held for a child that never became ready learn why at once (K18).
            let status = if self.state == State::Failed {
                "failed"
            } else {
                status
            };
            self.fail_held(status);
        }
    }

    fn after_exit(
        &mut self,
        now: Instant,
        child: &ChildHandle,
        exit: Exit,
        cause: Option<StopCause>,
    ) {
        let restart = match self.cfg.restart {
            RestartPolicy::Always => true,
            RestartPolicy::OnFailure => cause.is_some() || !exit.clean(),
            RestartPolicy::Never => false,
        };
        if restart {
            let delay =
                self.backoff
                    .on_exit(now, child.spawned_at, self.ready_since, &mut self.rng);
            self.state = State::Backoff;
            self.next_spawn = Some(now + delay);
            info!(message_id = MSG_BACKOFF, restart_n = self.restarts + 1,
                backoff_ms = delay.as_millis() as u64, attempt = self.backoff.failures(),
                reason = %exit.reason(), "restarting after backoff");
        } else {
            if exit.clean() {
                info!(policy = ?self.cfg.restart, "not restarting (restart policy)");
            } else {
                error!(message_id = MSG_FAILED, reason = %exit.reason(), restart_n = self.restarts,
                    policy = ?self.cfg.restart, "failed: not restarting (restart policy)");
            }
            self.state = if exit.clean() {
                State::Stopped
            } else {
                State::Failed
            };
            self.next_spawn = None;
            self.fail_held(if exit.clean() { "stopped" } else { "failed" });
        }
    }

    fn schedule_restart(&mut self, now: Instant, _ready: bool) {
        let delay = self.backoff.on_exit(now, now, None, &mut self.rng);
        self.state = State::Backoff;
        self.next_spawn = Some(now + delay);
        info!(
            message_id = MSG_BACKOFF,
            restart_n = self.restarts + 1,
            backoff_ms = delay.as_millis() as u64,
            attempt = self.backoff.failures(),
            reason = "spawn-error",
            "restarting after backoff"
        );
        self.failed_starts += 1;
        if self.failed_starts >= MAX_FAILED_STARTS {
            self.enter_failed("too many consecutive failed starts");
        }
    }

    fn on_ready(&mut self, hs: Handshake) {
        let first = self.handshake.is_none();
        info!(message_id = MSG_READY, child_pid = self.child.as_ref().map(|c| c.pid),
            restart_n = self.restarts, protocol_version = %hs.protocol_version, "ready");
        self.handshake = Some(hs);
        self.state = State::Ready;
        self.ready_since = Some(Instant::now());
        self.failed_starts = 0;
        self.start_deadline = None;
        self.listen = None;
        self.open_listen();
        if !first || self.generation > 1 {
            self.restarts_after_ready();
        }
        self.prefetch_lists();
        // Clients whose `initialize` waited for the child (concurrent first handshakes, K10).
        let held: Vec<Held> = self.held.drain(..).collect();
        for h in held {
            // Already in the ledger since arrival: its duration includes the wait.
            self.dispatch_request(h.client, h.msg);
        }
    }

    /// After a restart: replay log level and subscriptions, then re-read the lists and announce
    /// only real changes (issue 5 §4).
    fn restarts_after_ready(&mut self) {
        let far = Instant::now() + self.cfg.request_timeout;
        let handshake_child = self.child_era() == Era::Handshake;
        if let Some(level) = self.child_log_level.filter(|_| handshake_child) {
            let p = raw(&json!({"level": level_name(level)}));
            self.send_to_child(Owner::Internal, "logging/setLevel", Some(p), far);
        }
        let uris: Vec<String> = if handshake_child {
            self.subs.keys().cloned().collect()
        } else {
            Vec::new()
        };
        for uri in uris {
            self.send_to_child(
                Owner::Internal,
                "resources/subscribe",
                Some(raw(&json!({"uri": uri}))),
                far,
            );
        }
        let cached: Vec<&'static str> = self.lists.keys().copied().collect();
        for method in cached {
            self.send_to_child(
                Owner::Refresh {
                    method,
                    announce: true,
                },
                method,
                None,
                far,
            );
        }
    }

    /// Reads the lists the child advertises and nobody asked for yet, so an outage can be
    /// answered with the last real list from the start (issue 5 §3).
    fn prefetch_lists(&mut self) {
        let Some(hs) = &self.handshake else { return };
        let missing: Vec<&'static str> = era::LISTS
            .iter()
            .filter(|(m, _, cap)| hs.has(cap) && !self.lists.contains_key(m))
            .map(|(m, _, _)| *m)
            .collect();
        let far = Instant::now() + self.cfg.request_timeout;
        for method in missing {
            self.send_to_child(
                Owner::Refresh {
                    method,
                    announce: false,
                },
                method,
                None,
                far,
            );
        }
    }

    // ----- events ----------------------------------------------------------------------------

    fn on_child_event(&mut self, ev: ChildEvent) {
        let current = self.child.as_ref().map(|c| c.generation);
        let generation = match &ev {
            ChildEvent::Message(g, _)
            | ChildEvent::Oversized(g, _, _)
            | ChildEvent::Malformed(g, _, _)
            | ChildEvent::StdoutClosed(g)
            | ChildEvent::StdinFailed(g, _)
            | ChildEvent::Exited(g, _) => *g,
        };
        if Some(generation) != current {
            return;
        }
        match ev {
            ChildEvent::Message(_, m) => {
                self.heard();
                self.on_child_message(m);
            }
            ChildEvent::Oversized(_, len, id) => {
                self.heard();
                self.on_oversized(len, id);
            }
            ChildEvent::Malformed(_, id, why) => {
                // Any reply proves life, a malformed one too.
                self.heard();
                self.on_malformed(&id, &why);
            }
            ChildEvent::StdoutClosed(_) => {
                // MCP: a server may shut down by closing stdout. Give it time to exit by itself;
                // its exit status is the better diagnosis.
                debug!("the child closed its stdout");
                self.stdout_closed_at = Some(Instant::now());
            }
            ChildEvent::StdinFailed(_, why) => {
                warn!("{why}");
                self.stop_child(StopCause::StdinFailed);
            }
            ChildEvent::Exited(_, exit) => self.on_exit(exit),
        }
    }

    fn heard(&mut self) {
        self.health.heard(Instant::now());
    }

    fn on_session(&mut self, ev: SessionEvent) {
        match ev {
            SessionEvent::Connected(id, tx, peer) => {
                if !self.shutdown_waiters.is_empty() {
                    warn!(client = %id, "refusing a client: shutting down");
                    tx.deliver(message::error_response(
                        &message::raw_null(),
                        code::SERVER_UNAVAILABLE,
                        "mcp-supervisor is shutting down",
                        None,
                    ));
                    tx.kick();
                    return;
                }
                self.clients.insert(
                    id,
                    Client {
                        tx,
                        peer,
                        era: None,
                        initialized: false,
                        capabilities: json!({}),
                        name: String::new(),
                        info: Value::Null,
                        log_level: None,
                        subs: HashSet::new(),
                        closing: false,
                    },
                );
                self.metrics.set_clients(self.clients.len());
            }
            SessionEvent::Message(id, m) => {
                if self.clients.contains_key(&id) {
                    self.on_client_message(id, m)
                }
            }
            SessionEvent::Rejected(id, code) => {
                let (uid, pid) = self
                    .clients
                    .get(&id)
                    .map(|c| (Some(c.peer.uid), c.peer.pid))
                    .unwrap_or((None, None));
                info!(target: "mcp_supervisor::requests", client = %id, peer_uid = uid, peer_pid = pid,
                    outcome = Outcome::Invalid.as_str(), error_code = code, "request finished");
                self.metrics.request("", Outcome::Invalid, Some(code), 0.0);
            }
            SessionEvent::InputClosed(id) => {
                if let Some(c) = self.clients.get_mut(&id) {
                    c.closing = true;
                }
                // It can no longer answer the child's requests.
                self.fail_upstream_of(id, "the client that was asked closed its input");
                self.close_if_done(id);
            }
            SessionEvent::Disconnected(id) => self.drop_client(id),
        }
    }

    // ----- clients → child -------------------------------------------------------------------

    fn on_client_message(&mut self, client: ClientId, m: Message) {
        match m.kind {
            Kind::Request => self.on_client_request(client, m),
            Kind::Notification => self.on_client_notification(client, m),
            Kind::Response => self.on_client_response(client, m),
        }
    }

    fn on_client_request(&mut self, client: ClientId, m: Message) {
        let Some(id) = m.id.clone() else { return };
        if self.test_panic.as_deref() == Some(m.method()) {
            test_panic(m.method());
        }
        // One lookup: a duplicate finds the first request's entry, a new id opens its own.
        match self.ledger.entry((client, id_key(&id))) {
            std::collections::hash_map::Entry::Occupied(_) => {
                return self.refuse_duplicate(client, &id, m.method());
            }
            std::collections::hash_map::Entry::Vacant(v) => {
                let generation = self.child.as_ref().map(|c| c.generation);
                v.insert(tracked(&m, generation));
            }
        }
        if matches!(m.method(), "resources/subscribe" | "subscriptions/listen")
            && self.subscriptions_of(client) >= self.cfg.max_subscriptions
        {
            let msg = format!(
                "client holds {} subscriptions and listen streams on server `{}` (max_subscriptions)",
                self.subscriptions_of(client),
                self.cfg.name
            );
            return self.respond_error(
                client,
                &id,
                code::LIMIT_EXCEEDED,
                &msg,
                None,
                Outcome::Denied,
            );
        }
        self.dispatch_request(client, m);
    }

    /// Resource subscriptions and listen streams `client` holds (served here or routed to a
    /// modern child), the table `max_subscriptions` bounds.
    fn subscriptions_of(&self, client: ClientId) -> usize {
        let subs = self.clients.get(&client).map_or(0, |c| c.subs.len());
        let served = self.listeners.iter().filter(|l| l.client == client).count();
        let routed = self
            .inflight
            .iter()
            .filter(|(_, c, _, p)| *c == Some(client) && p.method == "subscriptions/listen")
            .count();
        subs + served + routed
    }

    /// Decides what happens to a client request already in the ledger: answered here,
    /// forwarded, held while the child starts, or failed with the outage record.
    fn dispatch_request(&mut self, client: ClientId, m: Message) {
        let Some(id) = m.id.clone() else { return };
        let requested = era::envelope_version(m.params.as_deref());
        let client_era = match self.clients.get_mut(&client) {
            Some(c) => *c.era.get_or_insert(
                // As the SDKs do: the first request decides. An envelope or `server/discover`
                // means 2026-07-28; `initialize` or anything else, the handshake era.
                if m.method() != "initialize"
                    && (requested.is_some() || m.method() == "server/discover")
                {
                    Era::Modern
                } else {
                    Era::Handshake
                },
            ),
            None => return,
        };
        if client_era == Era::Modern {
            if let Some(v) = requested.as_deref().filter(|v| *v != era::MODERN_VERSION) {
                // A modern version this supervisor cannot serve.
                let data = json!({"supported": [era::MODERN_VERSION], "requested": v});
                info!(client = %client, requested = v, "unsupported protocol version requested");
                return self.respond_error(
                    client,
                    &id,
                    era::UNSUPPORTED_VERSION,
                    "Unsupported protocol version",
                    Some(data),
                    Outcome::Invalid,
                );
            }
            if m.method() == "server/discover" && self.child_era() == Era::Handshake {
                if let Some(hs) = &self.handshake {
                    let line = message::result_response(&id, &hs.discover_result());
                    return self.respond(client, &id, line, Outcome::Ok, None);
                }
            }
        }
        match m.method() {
            "initialize" => return self.client_initialize(client, m),
            "ping" => {
                let line = message::result_response(&id, &json!({}));
                return self.respond(client, &id, line, Outcome::Ok, None);
            }
            "logging/setLevel"
                if self
                    .handshake
                    .as_ref()
                    .is_some_and(|h| h.has("logging") || h.era == Era::Modern) =>
            {
                return self.client_set_level(client, m)
            }
            "subscriptions/listen"
                if client_era == Era::Modern
                    && self.child_era() == Era::Handshake
                    && self.handshake.is_some() =>
            {
                return self.serve_listen(client, m)
            }
            // 2026-07-28 has no subscribe: a handshake client's subscriptions to a modern child
            // are kept here (and served from the supervisor's own listen stream).
            "resources/subscribe" | "resources/unsubscribe" if self.child_era() == Era::Modern => {
                return self.client_subscription_on_modern(client, m)
            }
            "resources/subscribe" | "resources/unsubscribe"
                if self.local_subscription(client, &m) =>
            {
                return;
            }
            _ => {}
        }
        if self.state != State::Ready && self.answer_from_cache(client, &m) {
            return;
        }
        match self.state {
            State::Ready => self.forward(client, m),
            // A server that was never ready and is backing off gets a fast, explicit error
            // (K19); one that was ready is likely back soon, so its requests wait.
            State::Backoff if self.handshake.is_none() && !self.probe_respawn => {
                self.outage_reply(client, &id, m.method(), "backoff");
            }
            State::Stopping if self.restarting() && self.held.len() < self.cfg.queue_limit => {
                let deadline = Instant::now() + self.cfg.queue_wait;
                self.held.push_back(Held {
                    client,
                    msg: m,
                    deadline,
                });
            }
            State::Starting | State::Backoff if self.held.len() < self.cfg.queue_limit => {
                let deadline = Instant::now() + self.cfg.queue_wait;
                self.held.push_back(Held {
                    client,
                    msg: m,
                    deadline,
                });
            }
            State::Starting | State::Backoff => {
                let status = self.outage_status();
                let reason = format!("{} requests already waiting (queue_limit)", self.held.len());
                let retry = self
                    .next_spawn
                    .map(|t| t.saturating_duration_since(Instant::now()));
                let method = m.method().to_string();
                self.outage_respond(
                    client,
                    &id,
                    &method,
                    status,
                    &reason,
                    retry,
                    code::LIMIT_EXCEEDED,
                    Outcome::Denied,
                );
            }
            _ => {
                let status = self.outage_status();
                self.outage_reply(client, &id, m.method(), status);
            }
        }
    }

    /// A request whose id equals one of the same client's unfinished requests (K23): JSON-RPC
    /// ids must be unique among a sender's requests in flight, and two responses under one id
    /// would cross-wire the client (go-sdk#1004). Answered -32600 at once; the first request
    /// and its ledger entry are untouched.
    fn refuse_duplicate(&mut self, client: ClientId, id: &RawValue, method: &str) {
        info!(target: "mcp_supervisor::requests", client = %client, method,
            outcome = Outcome::Invalid.as_str(), error_code = code::INVALID_REQUEST,
            "request finished: duplicate request id");
        self.metrics
            .request(method, Outcome::Invalid, Some(code::INVALID_REQUEST), 0.0);
        let msg = format!(
            "duplicate request id {}: a request with this id is still in flight",
            id.get()
        );
        let line = message::error_response(id, code::INVALID_REQUEST, &msg, None);
        self.reply(client, line);
    }

    fn client_initialize(&mut self, client: ClientId, m: Message) {
        let Some(id) = m.id.clone() else { return };
        let Some(hs) = self.handshake.clone() else {
            if self.state != State::Starting && !self.probe_respawn {
                // Never ready, and not even trying right now: say why at once (K18, K19).
                let status = self.outage_status();
                return self.outage_reply(client, &id, "initialize", status);
            }
            // Never ready yet: wait for the child (bounded by start_timeout, issue 5 §5).
            let deadline = Instant::now() + self.cfg.start_timeout;
            self.held.push_back(Held {
                client,
                msg: m,
                deadline,
            });
            return;
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
        let result = hs.initialize_result(asked);
        if hs.era == Era::Handshake && asked != hs.protocol_version {
            info!(client = %client, client_name = %name, requested = asked, negotiated = %hs.protocol_version,
                "client asked for another protocol version; answering with the one the child speaks");
        }
        if let Some(c) = self.clients.get_mut(&client) {
            debug!(client = %client, uid = c.peer.uid, pid = c.peer.pid, client_name = %name, "client handshake answered from the cache");
            c.capabilities = params.get("capabilities").cloned().unwrap_or(json!({}));
            c.info = params.get("clientInfo").cloned().unwrap_or(Value::Null);
            c.name = name;
            c.initialized = true;
        }
        let line = message::result_response(&id, &result);
        self.respond(client, &id, line, Outcome::Ok, None);
    }

    fn client_set_level(&mut self, client: ClientId, m: Message) {
        let Some(id) = m.id.clone() else { return };
        let level = m.params_object().and_then(|p| {
            p.get("level")
                .and_then(Value::as_str)
                .and_then(era::log_rank)
        });
        let Some(level) = level else {
            return self.respond_error(
                client,
                &id,
                code::INVALID_PARAMS,
                "unknown logging level",
                None,
                Outcome::Invalid,
            );
        };
        if let Some(c) = self.clients.get_mut(&client) {
            c.log_level = Some(level);
        }
        let line = message::result_response(&id, &json!({}));
        self.respond(client, &id, line, Outcome::Ok, None);
        self.sync_log_level();
    }

    /// The child gets the most verbose level any client asked for (issue 3 §3).
    fn sync_log_level(&mut self) {
        let want = self.clients.values().filter_map(|c| c.log_level).min();
        if want.is_some() && want != self.child_log_level && self.child_era() == Era::Handshake {
            self.child_log_level = want;
            if self.state == State::Ready {
                let p = raw(&json!({"level": level_name(want.unwrap_or(0))}));
                let deadline = Instant::now() + self.cfg.request_timeout;
                self.send_to_child(Owner::Internal, "logging/setLevel", Some(p), deadline);
            }
        }
    }

    /// Opens (or re-opens, with the current resource subscriptions) the supervisor's own listen
    /// stream on a modern child, so handshake clients keep receiving list-changed and
    /// resource-updated notifications (issue 6 §4).
    fn open_listen(&mut self) {
        if self.child_era() != Era::Modern || self.state != State::Ready {
            return;
        }
        if let Some(old) = self.listen.take() {
            self.inflight.remove(old);
            let p = raw(&json!({"requestId": old, "reason": "subscriptions changed"}));
            if let Some(c) = &self.child {
                c.send_urgent(Out::request(None, "notifications/cancelled", Some(&p)).encode());
            }
        }
        let uris: Vec<&String> = self.subs.keys().collect();
        let p = raw(&json!({"notifications": {
            "toolsListChanged": true, "promptsListChanged": true, "resourcesListChanged": true,
            "resourceSubscriptions": uris,
        }}));
        let far = Instant::now() + Duration::from_secs(365 * 24 * 3600);
        self.listen = self.send_to_child(Owner::Listen, "subscriptions/listen", Some(p), far);
    }

    /// A modern client's `subscriptions/listen` on a handshake child: acknowledged at once and
    /// fed from the child's session-wide notifications; resource subscriptions are made toward
    /// the child as needed. The request stays open until the client cancels it.
    fn serve_listen(&mut self, client: ClientId, m: Message) {
        let Some(id) = m.id.clone() else { return };
        let filter = m
            .params_object()
            .and_then(|p| p.get("notifications").cloned())
            .unwrap_or(json!({}));
        let flag = |k: &str| filter.get(k).and_then(Value::as_bool).unwrap_or(false);
        let uris: Vec<String> = filter
            .get("resourceSubscriptions")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|u| u.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        let can_subscribe = self
            .handshake
            .as_ref()
            .is_some_and(|h| h.capabilities.pointer("/resources/subscribe") == Some(&json!(true)));
        let honoured_uris: Vec<String> = if can_subscribe { uris } else { Vec::new() };
        for uri in &honoured_uris {
            let new = !self.subs.contains_key(uri);
            self.subs.entry(uri.clone()).or_default().insert(client);
            if new && self.state == State::Ready {
                let far = Instant::now() + self.cfg.request_timeout;
                self.send_to_child(
                    Owner::Internal,
                    "resources/subscribe",
                    Some(raw(&json!({"uri": uri}))),
                    far,
                );
            }
        }
        let l = Listener {
            client,
            id,
            tools: flag("toolsListChanged"),
            prompts: flag("promptsListChanged"),
            resources: flag("resourcesListChanged"),
            uris: honoured_uris,
        };
        let mut honoured = Map::new();
        for (k, v) in [
            ("toolsListChanged", l.tools),
            ("promptsListChanged", l.prompts),
            ("resourcesListChanged", l.resources),
        ] {
            if v {
                honoured.insert(k.into(), json!(true));
            }
        }
        if !l.uris.is_empty() {
            honoured.insert("resourceSubscriptions".into(), json!(l.uris));
        }
        let ack = l.notification(
            "notifications/subscriptions/acknowledged",
            Some(&raw(&json!({"notifications": honoured}))),
        );
        self.listeners.push(l);
        self.reply(client, ack);
    }

    /// Ends a client's served listen stream (its cancel or its departure).
    fn end_listener(&mut self, client: ClientId, key: &str) -> bool {
        let Some(i) = self
            .listeners
            .iter()
            .position(|l| l.client == client && id_key(&l.id) == key)
        else {
            return false;
        };
        let l = self.listeners.remove(i);
        for uri in l.uris {
            let still = self
                .listeners
                .iter()
                .any(|o| o.client == client && o.uris.contains(&uri))
                || self
                    .clients
                    .get(&client)
                    .is_some_and(|c| c.subs.contains(&uri));
            if still {
                continue;
            }
            self.release_sub(client, &uri);
        }
        self.finish(client, key, Outcome::Cancelled, None);
        true
    }

    /// `resources/subscribe`/`unsubscribe` from a handshake client of a modern child: kept here;
    /// updates reach subscribers from the supervisor's listen stream.
    fn client_subscription_on_modern(&mut self, client: ClientId, m: Message) {
        let Some(id) = m.id.clone() else { return };
        let Some(uri) = m
            .params_object()
            .and_then(|p| p.get("uri").and_then(Value::as_str).map(str::to_string))
        else {
            return self.respond_error(
                client,
                &id,
                code::INVALID_PARAMS,
                "missing uri",
                None,
                Outcome::Invalid,
            );
        };
        let before: BTreeSet<String> = self.subs.keys().cloned().collect();
        if m.method() == "resources/subscribe" {
            self.add_sub(client, uri);
        } else {
            self.remove_sub(client, &uri);
        }
        let line = message::result_response(&id, &json!({}));
        self.respond(client, &id, line, Outcome::Ok, None);
        let after: BTreeSet<String> = self.subs.keys().cloned().collect();
        if before != after {
            self.open_listen();
        }
    }

    /// Records `client` as a subscriber of `uri` (both indexes).
    fn add_sub(&mut self, client: ClientId, uri: String) {
        self.subs.entry(uri.clone()).or_default().insert(client);
        if let Some(c) = self.clients.get_mut(&client) {
            c.subs.insert(uri);
        }
    }

    /// Forgets `client` as a subscriber of `uri` (both indexes); true when nobody is left.
    fn remove_sub(&mut self, client: ClientId, uri: &str) -> bool {
        if let Some(c) = self.clients.get_mut(&client) {
            c.subs.remove(uri);
        }
        let Some(s) = self.subs.get_mut(uri) else {
            return false;
        };
        s.remove(&client);
        if s.is_empty() {
            self.subs.remove(uri);
            return true;
        }
        false
    }

    /// Drops `client`'s subscription to `uri`; when it was the last one, a handshake child is
    /// told (`resources/unsubscribe`). Returns whether nobody is subscribed any more.
    fn release_sub(&mut self, client: ClientId, uri: &str) -> bool {
        if !self.remove_sub(client, uri) {
            return false;
        }
        if self.state == State::Ready && self.child_era() == Era::Handshake {
            let far = Instant::now() + self.cfg.request_timeout;
            self.send_to_child(
                Owner::Internal,
                "resources/unsubscribe",
                Some(raw(&json!({"uri": uri}))),
                far,
            );
        }
        true
    }

    /// Refcounted subscriptions: true when answered locally.
    fn local_subscription(&mut self, client: ClientId, m: &Message) -> bool {
        let Some(uri) = m
            .params_object()
            .and_then(|p| p.get("uri").and_then(Value::as_str).map(str::to_string))
        else {
            return false;
        };
        let Some(id) = m.id.clone() else { return false };
        let others = self
            .subs
            .get(&uri)
            .is_some_and(|s| s.iter().any(|c| *c != client));
        if m.method() == "resources/subscribe" {
            if others || self.subs.get(&uri).is_some_and(|s| s.contains(&client)) {
                self.add_sub(client, uri);
                let line = message::result_response(&id, &json!({}));
                self.respond(client, &id, line, Outcome::Ok, None);
                return true;
            }
            false
        } else {
            self.remove_sub(client, &uri);
            if others {
                let line = message::result_response(&id, &json!({}));
                self.respond(client, &id, line, Outcome::Ok, None);
                return true;
            }
            false
        }
    }

    fn forward(&mut self, client: ClientId, m: Message) {
        let Some(id) = m.id.clone() else { return };
        if self.inflight.len() >= self.cfg.max_inflight {
            let msg = format!(
                "server `{}` has {} requests in flight; try again shortly",
                self.cfg.name,
                self.inflight.len()
            );
            return self.respond_error(
                client,
                &id,
                code::LIMIT_EXCEEDED,
                &msg,
                None,
                Outcome::Denied,
            );
        }
        let child_id = self.inflight.allocate();
        let (params, progress) = match m.params.as_deref() {
            Some(p) => match message::swap_progress_token(p, raw_u64(child_id)) {
                Some((np, orig)) => (Some(np), Some(orig)),
                None => (m.params, None),
            },
            None => (None, None),
        };
        let method = m.method.unwrap_or_default();
        let cache = era::LISTS
            .iter()
            .map(|(l, _, _)| *l)
            .find(|l| *l == method)
            .filter(|_| {
                !params
                    .as_deref()
                    .is_some_and(|p| p.get().contains("\"cursor\""))
            });
        let subscribe = if method == "resources/subscribe" {
            params
                .as_deref()
                .and_then(|p| serde_json::from_str::<Value>(p.get()).ok())
                .and_then(|v| v.get("uri").and_then(Value::as_str).map(str::to_string))
        } else {
            None
        };
        // Translate between the client's era and the child's (issue 6 §3, §4).
        let client_era = self.client_era(client);
        let child_era = self.child_era();
        let mut log_level = None;
        let mut add_result_type = false;
        let params = match (client_era, child_era) {
            (Era::Modern, Era::Handshake) => {
                add_result_type = true;
                log_level = era::envelope_field(params.as_deref(), era::META_LOG_LEVEL)
                    .and_then(|l| l.as_str().and_then(era::log_rank));
                if let Some(level) = log_level {
                    self.want_child_log_level(level);
                }
                params.map(|p| era::strip_envelope(&p).into_owned())
            }
            (Era::Handshake, Era::Modern) => {
                let c = self.clients.get(&client);
                log_level = c.and_then(|c| c.log_level);
                let env = era::envelope(
                    &c.map(|c| c.capabilities.clone()).unwrap_or(json!({})),
                    &c.map(|c| c.info.clone()).unwrap_or(Value::Null),
                    log_level.map(level_name),
                );
                Some(era::add_envelope(params.as_deref(), &env))
            }
            (Era::Modern, Era::Modern) => {
                log_level = era::envelope_field(params.as_deref(), era::META_LOG_LEVEL)
                    .and_then(|l| l.as_str().and_then(era::log_rank));
                params
            }
            (Era::Handshake, Era::Handshake) => params,
        };
        // A listen stream lives until it is cancelled: no deadline.
        let timeout = if method == "subscriptions/listen" {
            Duration::from_secs(365 * 24 * 3600)
        } else {
            self.cfg.timeout_for(&method)
        };
        let deadline = Instant::now() + timeout;
        let retry_params = (client_era == Era::Handshake
            && child_era == Era::Modern
            && matches!(
                method.as_str(),
                "tools/call" | "prompts/get" | "resources/read"
            ))
        .then(|| params.clone())
        .flatten();
        let key = id_key(&id);
        let owner = Owner::Client {
            client,
            id,
            progress,
            subscribe,
            cache,
            add_result_type,
            log_level,
            retry_params,
        };
        self.send_with_id(child_id, Some(key), owner, &method, params, deadline);
    }

    /// An `input_required` result for a handshake client: ask the client each input request
    /// as an ordinary handshake-era request (`elicitation/create`, `sampling/createMessage`,
    /// `roots/list`), collect the answers, then retry. Returns false when the result is not
    /// `input_required` (it is then answered as it is).
    #[allow(clippy::too_many_arguments)]
    fn start_round(
        &mut self,
        client: ClientId,
        id: &RawValue,
        method: &str,
        sent: &RawValue,
        result: &RawValue,
        progress: Option<Box<RawValue>>,
        log_level: Option<usize>,
    ) -> bool {
        if !result.get().contains("input_required") {
            return false;
        }
        let Ok(r) = serde_json::from_str::<Value>(result.get()) else {
            return false;
        };
        if r.get("resultType").and_then(Value::as_str) != Some("input_required") {
            return false;
        }
        let requests = r
            .get("inputRequests")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let caps = self
            .clients
            .get(&client)
            .map(|c| c.capabilities.clone())
            .unwrap_or(json!({}));
        if let Some((_, missing)) = requests.iter().find_map(|(k, q)| {
            let m = q.get("method").and_then(Value::as_str).unwrap_or("");
            let cap = era::capability_for_request(m)?;
            caps.get(cap)
                .is_none()
                .then_some((k.clone(), m.to_string()))
        }) {
            let msg = format!("the server needs `{missing}` from the client, which did not declare that capability");
            self.respond_error(
                client,
                id,
                code::INTERNAL_ERROR,
                &msg,
                None,
                Outcome::ProtocolError,
            );
            return true;
        }
        let round = self.next_round;
        self.next_round += 1;
        let deadline = Instant::now() + self.cfg.request_timeout;
        self.rounds.insert(
            round,
            Round {
                client,
                id: id.to_owned(),
                method: method.to_string(),
                params: serde_json::from_str(sent.get()).unwrap_or(json!({})),
                state: request_state(result),
                answers: Map::new(),
                waiting: requests.len(),
                progress,
                log_level,
            },
        );
        debug!(client = %client, round, inputs = requests.len(), "input_required: asking the client");
        for (key, q) in requests {
            let m = q
                .get("method")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            let p = q.get("params").cloned().unwrap_or(json!({}));
            let n = self.next_upstream;
            self.next_upstream += 1;
            self.upstream.insert(
                (client, n),
                Upstream {
                    asker: Asker::Mrtr { round, key },
                    deadline,
                },
            );
            self.reply(
                client,
                Out::request(Some(&raw_u64(n)), &m, Some(&raw(&p))).encode(),
            );
        }
        if self.rounds.get(&round).is_some_and(|r| r.waiting == 0) {
            self.retry_round(round);
        }
        true
    }

    /// Every input of `round` is answered: retry the original request with them.
    fn retry_round(&mut self, round: u64) {
        let Some(r) = self.rounds.remove(&round) else {
            return;
        };
        let mut params = r.params;
        if let Some(p) = params.as_object_mut() {
            p.insert("inputResponses".into(), Value::Object(r.answers));
            p.remove("requestState");
        }
        let params = match &r.state {
            // Spliced in as the child wrote it: re-encoding could change its bytes (K25).
            Some(state) => {
                let mut obj = RawObject::parse(&raw(&params)).unwrap_or_default();
                obj.set("requestState", state.clone());
                obj.to_raw()
            }
            None => raw(&params),
        };
        let child_id = self.inflight.allocate();
        // The retry is a new request: its progress token is its own child-side id.
        let params = match message::swap_progress_token(&params, raw_u64(child_id)) {
            Some((p, _)) => p,
            None => params,
        };
        let deadline = Instant::now() + self.cfg.timeout_for(&r.method);
        let owner = Owner::Client {
            client: r.client,
            id: r.id.clone(),
            progress: r.progress,
            subscribe: None,
            cache: None,
            add_result_type: false,
            log_level: r.log_level,
            retry_params: Some(params.clone()),
        };
        self.send_with_id(
            child_id,
            Some(id_key(&r.id)),
            owner,
            &r.method,
            Some(params),
            deadline,
        );
    }

    /// A round can no longer finish (its client errored, left or did not answer): fail the
    /// original request with `line` and forget the round's other questions.
    fn abandon_round(&mut self, round: u64, outcome: Outcome, code: i64, msg: &str) {
        self.upstream
            .retain(|_, u| !matches!(&u.asker, Asker::Mrtr { round: r, .. } if *r == round));
        if let Some(r) = self.rounds.remove(&round) {
            let line =
                message::error_response(&r.id, code, msg, Some(json!({"server": self.cfg.name})));
            self.respond(r.client, &r.id, line, outcome, Some(code));
        }
    }

    /// The child is being stopped to be replaced (health, timeouts, restart), not for good.
    fn restarting(&self) -> bool {
        !matches!(self.stop_cause, Some(StopCause::Stop | StopCause::Shutdown))
    }

    /// A client's era (handshake until its first request says otherwise).
    fn client_era(&self, client: ClientId) -> Era {
        self.clients
            .get(&client)
            .and_then(|c| c.era)
            .unwrap_or(Era::Handshake)
    }

    /// The era the current child is driven in (handshake until known).
    fn child_era(&self) -> Era {
        self.handshake
            .as_ref()
            .map(|h| h.era)
            .unwrap_or(Era::Handshake)
    }

    /// A modern client asked a handshake child for logs at `level`: the child's session-wide
    /// level must be at least that verbose (never lowered by a modern request).
    fn want_child_log_level(&mut self, level: usize) {
        if self.child_log_level.is_none_or(|l| level < l)
            && self.handshake.as_ref().is_some_and(|h| h.has("logging"))
        {
            self.child_log_level = Some(level);
            let p = raw(&json!({"level": level_name(level)}));
            let deadline = Instant::now() + self.cfg.request_timeout;
            self.send_to_child(Owner::Internal, "logging/setLevel", Some(p), deadline);
        }
    }

    /// Registers and writes a request to the child. Returns its child-side id, or `None` when
    /// it could not be queued (the owner was already answered).
    fn send_to_child(
        &mut self,
        owner: Owner,
        method: &str,
        params: Option<Box<RawValue>>,
        deadline: Instant,
    ) -> Option<u64> {
        let child_id = self.inflight.allocate();
        self.send_with_id(child_id, None, owner, method, params, deadline)
    }

    /// [`Server::send_to_child`] with an id already allocated; `key` is the owning client's
    /// request id text.
    fn send_with_id(
        &mut self,
        child_id: u64,
        key: Option<String>,
        owner: Owner,
        method: &str,
        params: Option<Box<RawValue>>,
        deadline: Instant,
    ) -> Option<u64> {
        let params = if self.child_era() == Era::Modern
            && !matches!(owner, Owner::Client { .. })
            && era::envelope_version(params.as_deref()).is_none()
        {
            Some(era::add_envelope(
                params.as_deref(),
                &era::supervisor_envelope(),
            ))
        } else {
            params
        };
        let line = Out::request(Some(&raw_u64(child_id)), method, params.as_deref()).encode();
        let queued = match &self.child {
            Some(c) => {
                self.metrics.bytes("to_child", line.len());
                c.send(line)
            }
            None => Queued::Closed,
        };
        if queued == Queued::Closed {
            if let Owner::Client { client, id, .. } = owner {
                // The child's input closed: it is exiting and the exit is not handled yet.
                // Answer with the outage record like any request that cannot reach the child.
                self.outage_reply(client, &id, method, "exited");
            }
            return None;
        }
        if queued != Queued::Ok {
            if let Owner::Client { client, id, .. } = owner {
                let why = if queued == Queued::Full {
                    "the child is not reading its input"
                } else {
                    "the child is stopping"
                };
                let msg = format!("server `{}` cannot take requests now: {why}", self.cfg.name);
                let (outcome, code) = if queued == Queued::Full {
                    (Outcome::Denied, code::LIMIT_EXCEEDED)
                } else {
                    (Outcome::Unreachable, code::SERVER_UNAVAILABLE)
                };
                let line = message::error_response(&id, code, &msg, None);
                self.respond(client, &id, line, outcome, Some(code));
            }
            return None;
        }
        let client = match (&owner, key) {
            (Owner::Client { client, .. }, Some(key)) => Some((*client, key)),
            _ => None,
        };
        let pending = Pending {
            owner,
            method: method.to_string(),
            written: Instant::now(),
        };
        self.inflight.insert(child_id, client, deadline, pending);
        self.metrics.set_in_flight(self.inflight.len());
        Some(child_id)
    }

    fn on_client_notification(&mut self, client: ClientId, m: Message) {
        match m.method() {
            "notifications/initialized" => {}
            "notifications/cancelled" => {
                let Some(p) = m.params_object() else { return };
                let Some(rid) = p.get("requestId") else {
                    return;
                };
                let key = rid.to_string();
                if self.end_listener(client, &key) {
                    return;
                }
                let Some(child_id) = self.inflight.lookup(client, &key) else {
                    debug!(client = %client, request_id = %key, "cancel for an unknown request: not forwarded");
                    return;
                };
                self.inflight.remove(child_id);
                self.finish(client, &key, Outcome::Cancelled, None);
                let mut p = p;
                p.insert("requestId".into(), json!(child_id));
                let line = Out::request(
                    None,
                    "notifications/cancelled",
                    Some(&raw(&Value::Object(p))),
                )
                .encode();
                if let Some(c) = &self.child {
                    c.send_urgent(line);
                }
            }
            _ => {
                if self.state == State::Ready {
                    let line = Out::request(None, m.method(), m.params.as_deref()).encode();
                    if let Some(c) = &self.child {
                        c.send(line);
                    }
                }
            }
        }
    }

    fn on_client_response(&mut self, client: ClientId, m: Message) {
        let n = m.id.as_deref().and_then(|i| i.get().parse::<u64>().ok());
        let Some(up) = n.and_then(|n| self.upstream.remove(&(client, n))) else {
            debug!(client = %client, "response to no request of ours: dropped");
            return;
        };
        let child_id = match up.asker {
            Asker::Child(id) => id,
            Asker::Mrtr { round, key } => {
                match (&m.result, &m.error) {
                    (Some(r), _) => {
                        let done = self.rounds.get_mut(&round).map(|rd| {
                            rd.answers
                                .insert(key, serde_json::from_str(r.get()).unwrap_or(Value::Null));
                            rd.waiting = rd.waiting.saturating_sub(1);
                            rd.waiting == 0
                        });
                        if done == Some(true) {
                            self.retry_round(round);
                        }
                    }
                    (_, Some(e)) => {
                        let msg =
                            format!("the client refused an input the server needs: {}", e.get());
                        self.abandon_round(
                            round,
                            Outcome::ProtocolError,
                            code::INTERNAL_ERROR,
                            &msg,
                        );
                    }
                    _ => {}
                }
                return;
            }
        };
        let line = match (&m.result, &m.error) {
            (Some(r), _) => Out::result(&child_id, r).encode(),
            (_, Some(e)) => Out::error(&child_id, e).encode(),
            _ => return,
        };
        if let Some(c) = &self.child {
            c.send(line);
        }
    }

    fn drop_client(&mut self, client: ClientId) {
        let Some(c) = self.clients.remove(&client) else {
            return;
        };
        // Cancel its requests toward the child; their late responses are dropped (K09).
        let mine: Vec<String> = self
            .listeners
            .iter()
            .filter(|l| l.client == client)
            .map(|l| id_key(&l.id))
            .collect();
        for key in mine {
            self.end_listener(client, &key);
        }
        let open: Vec<String> = self
            .ledger
            .keys()
            .filter(|(c, _)| *c == client)
            .map(|(_, k)| k.clone())
            .collect();
        for key in open {
            self.finish(client, &key, Outcome::Cancelled, None);
        }
        self.metrics.set_clients(self.clients.len());
        for r in self.inflight.remove_client(client) {
            let p = raw(&json!({"requestId": r.id, "reason": "client disconnected"}));
            if let Some(ch) = &self.child {
                ch.send_urgent(Out::request(None, "notifications/cancelled", Some(&p)).encode());
            }
        }
        // Release its subscriptions.
        let mut released = false;
        for uri in c.subs {
            released |= self.release_sub(client, &uri);
        }
        if released && self.child_era() == Era::Modern {
            self.open_listen();
        }
        // The child's requests routed to it get an error (K06).
        self.fail_upstream_of(client, "the client that was asked disconnected");
        self.held.retain(|h| h.client != client);
        self.sync_log_level();
    }

    /// Answers the child's requests routed to `client` with an error.
    fn fail_upstream_of(&mut self, client: ClientId, why: &str) {
        let mine: Vec<(ClientId, u64)> = self
            .upstream
            .keys()
            .filter(|(c, _)| *c == client)
            .copied()
            .collect();
        for k in mine {
            if let Some(up) = self.upstream.remove(&k) {
                match up.asker {
                    Asker::Child(id) => self.answer_child_error(&id, code::INTERNAL_ERROR, why),
                    Asker::Mrtr { round, .. } => {
                        self.abandon_round(round, Outcome::Cancelled, code::INTERNAL_ERROR, why)
                    }
                }
            }
        }
    }

    /// A client whose input closed is dropped once nothing it asked for is pending.
    fn close_if_done(&mut self, client: ClientId) {
        let done = self
            .clients
            .get(&client)
            .is_some_and(|c| c.closing && self.inflight.count_for(client) == 0)
            && !self.held.iter().any(|h| h.client == client);
        if done {
            self.drop_client(client);
        }
    }

    // ----- child → clients -------------------------------------------------------------------

    fn on_child_message(&mut self, m: Message) {
        match m.kind {
            Kind::Response => self.on_child_response(m),
            Kind::Request => self.on_child_request(m),
            Kind::Notification => self.on_child_notification(m),
        }
    }

    fn on_child_response(&mut self, m: Message) {
        let n = m.id.as_deref().and_then(|i| i.get().parse::<u64>().ok());
        if let Some(n) = n {
            let served = self.health.status().ping_served;
            if self.health.answered(n) {
                self.metrics.probe("answered");
                if served && !self.health.status().ping_served {
                    warn!("the child answers requests but not `ping`; probing with an advertised list from now on");
                }
                return;
            }
        }
        let Some(removed) = n.and_then(|n| self.inflight.remove(n)) else {
            let id = m.id.as_deref().map(RawValue::get).unwrap_or("none");
            debug!(
                id,
                "response for an id not in flight (cancelled, timed out or never issued): dropped"
            );
            return;
        };
        let pending = removed.value;
        let problem = match &pending.owner {
            Owner::Client { .. } => malformed(&m, &pending.method),
            // The supervisor's own requests read what they need with defaults; the handshake
            // has its own checks (a malformed answer there is a rejection or an era verdict).
            _ => None,
        };
        if let (Some(problem), Owner::Client { client, id, .. }) = (problem, &pending.owner) {
            // K21: a reply of the wrong shape fails that request only, naming the server; the
            // child answered, so it is alive, and nothing else is affected.
            warn!(method = %pending.method, %problem, "the child sent a malformed response");
            let (client, id) = (*client, id.clone());
            return self.fail_malformed(client, &id, &pending.method, &problem);
        }
        match pending.owner {
            Owner::Client {
                client,
                id,
                subscribe,
                cache,
                add_result_type,
                retry_params,
                progress,
                log_level,
            } => {
                if let (Some(sent), Some(r)) = (&retry_params, &m.result) {
                    if self.start_round(client, &id, &pending.method, sent, r, progress, log_level)
                    {
                        return;
                    }
                }
                if let (Some(uri), Some(_)) = (subscribe, &m.result) {
                    self.subs.entry(uri.clone()).or_default().insert(client);
                    if let Some(c) = self.clients.get_mut(&client) {
                        c.subs.insert(uri);
                    }
                }
                if let (Some(method), Some(r)) = (cache, &m.result) {
                    if let Some(v) = serde_json::from_str::<Value>(r.get())
                        .ok()
                        .filter(shareable)
                    {
                        self.lists.insert(method, v);
                    }
                }
                let (line, outcome, code) = match (&m.result, &m.error) {
                    (Some(r), _) => {
                        let outcome = if pending.method == "tools/call" && is_tool_error(r) {
                            Outcome::ToolError
                        } else {
                            Outcome::Ok
                        };
                        let r = if add_result_type {
                            era::modernize_result(r, &pending.method)
                        } else if pending.method == "subscriptions/listen" {
                            // The close result names the stream: the client's id, not ours.
                            let mut v: Value = serde_json::from_str(r.get()).unwrap_or(json!({}));
                            if let Some(meta) = v.get_mut("_meta").and_then(Value::as_object_mut) {
                                let original: Value =
                                    serde_json::from_str(id.get()).unwrap_or(Value::Null);
                                meta.insert(era::META_SUBSCRIPTION_ID.into(), original);
                            }
                            std::borrow::Cow::Owned(raw(&v))
                        } else {
                            std::borrow::Cow::Borrowed(&**r)
                        };
                        (Out::result(&id, &r).encode(), outcome, None)
                    }
                    (_, Some(e)) => (
                        Out::error(&id, e).encode(),
                        Outcome::ProtocolError,
                        m.error_code(),
                    ),
                    _ => return,
                };
                self.respond(client, &id, line, outcome, code);
            }
            Owner::Discover { probe } => self.on_discover_answer(&m, probe),
            Owner::Listen => {
                debug!("the child closed the supervisor's listen stream");
                if self.listen == Some(removed.id) {
                    self.listen = None;
                }
            }
            Owner::Initialize => match (&m.result, &m.error) {
                (Some(r), _) => match serde_json::from_str::<Value>(r.get())
                    .ok()
                    .and_then(Handshake::from_result)
                {
                    Some(hs) => {
                        let line = Out::request(None, "notifications/initialized", None).encode();
                        if let Some(c) = &self.child {
                            c.send(line);
                        }
                        self.on_ready(hs);
                    }
                    None => {
                        error!("the child's initialize result has no protocolVersion");
                        self.stop_child(StopCause::HandshakeRejected);
                    }
                },
                (_, Some(e)) => {
                    let modern = m.error_code() == Some(era::UNSUPPORTED_VERSION)
                        && e.get().contains(era::MODERN_VERSION);
                    if modern && self.cfg.protocol == ChildProtocol::Auto {
                        // The verdict stopped working (a server upgraded to 2026-only, or one a
                        // late era probe already pinned): speak 2026-07-28 to it right away.
                        self.set_verdict(
                            Era::Modern,
                            "initialize was refused in favour of 2026-07-28",
                        );
                        let deadline = self
                            .start_deadline
                            .unwrap_or_else(|| Instant::now() + self.cfg.start_timeout);
                        self.send_discover(false, deadline);
                    } else {
                        error!(error = %e.get(), "the child rejected initialize");
                        self.stop_child(StopCause::HandshakeRejected);
                    }
                }
                _ => {}
            },
            Owner::Refresh { method, announce } => {
                let Some(r) = &m.result else { return };
                let Some(v) = serde_json::from_str::<Value>(r.get())
                    .ok()
                    .filter(shareable)
                else {
                    return;
                };
                let changed = self.lists.get(method) != Some(&v);
                self.lists.insert(method, v);
                if changed && announce {
                    let note = era::LISTS
                        .iter()
                        .find(|(l, _, _)| *l == method)
                        .map(|(_, n, _)| *n);
                    if let Some(note) = note {
                        info!(
                            list = method,
                            "the list changed across the restart; notifying clients"
                        );
                        self.broadcast(&Out::request(None, note, None).encode(), |_| true);
                    }
                }
            }
            Owner::Internal => {}
        }
    }

    /// The answer to the opening `server/discover` (issue 6 §1): a result or -32022 means the
    /// 2026-07-28 era; any other error means the handshake era (then `initialize`).
    fn on_discover_answer(&mut self, m: &Message, probe: bool) {
        let code = m.error_code();
        if let Some(r) = &m.result {
            let v = serde_json::from_str::<Value>(r.get()).unwrap_or(json!({}));
            self.set_verdict(Era::Modern, "the child answered server/discover");
            self.on_ready(Handshake::from_discover(v));
        } else if code == Some(era::UNSUPPORTED_VERSION) {
            // Modern, but not our version: we cannot speak to it; keep it out of rotation.
            self.set_verdict(
                Era::Modern,
                "the child answered server/discover with -32022",
            );
            error!(error = ?m.error.as_deref().map(RawValue::get), "the child speaks no protocol version this supervisor supports");
            self.stop_child(StopCause::HandshakeRejected);
        } else if probe || self.cfg.protocol == ChildProtocol::Auto {
            // The probe's answer, or a remembered 2026 verdict that stopped working (the
            // server was replaced by a handshake-era one): the handshake, on this same child.
            self.set_verdict(
                Era::Handshake,
                &format!(
                    "server/discover was answered with error {}",
                    code.unwrap_or(0)
                ),
            );
            self.send_initialize(era::HANDSHAKE_VERSION);
        } else {
            error!(error = ?m.error.as_deref().map(RawValue::get), "the child rejected server/discover (protocol = 2026-07-28)");
            self.stop_child(StopCause::HandshakeRejected);
        }
    }

    fn on_child_request(&mut self, m: Message) {
        let Some(child_id) = m.id.clone() else { return };
        let method = m.method().to_string();
        if method == "ping" {
            // Answered here, at once, with or without clients (K07).
            if let Some(c) = &self.child {
                c.send_urgent(message::result_response(&child_id, &json!({})));
            }
            return;
        }
        let Some(owner) = self.pick_owner(&method) else {
            let msg = format!("no connected client can answer `{method}` for this server");
            warn!(method = %method, "{msg}");
            return self.answer_child_error(&child_id, code::INTERNAL_ERROR, &msg);
        };
        let n = self.next_upstream;
        self.next_upstream += 1;
        let line = Out::request(Some(&raw_u64(n)), &method, m.params.as_deref()).encode();
        let deadline = Instant::now() + self.cfg.request_timeout;
        self.upstream.insert(
            (owner, n),
            Upstream {
                asker: Asker::Child(child_id),
                deadline,
            },
        );
        self.reply(owner, line);
    }

    /// The ownership rule for a child's request (issue 3 §5, K06). The handshake era has no
    /// field linking it to the client request that caused it, so: among clients that declared
    /// the needed capability and have a request in flight, the one whose request was forwarded
    /// most recently. No such client → `None` (the child gets an error).
    fn pick_owner(&self, method: &str) -> Option<ClientId> {
        let cap = era::capability_for_request(method);
        self.inflight
            .iter()
            .filter_map(|(id, client, _, _)| Some((id, client?)))
            .filter(|(_, c)| {
                self.clients.get(c).is_some_and(|cl| {
                    !cl.closing
                        && match cap {
                            Some(cap) => cl.capabilities.get(cap).is_some_and(|v| !v.is_null()),
                            None => true,
                        }
                })
            })
            .max_by_key(|(id, _)| *id)
            .map(|(_, c)| c)
    }

    fn answer_child_error(&self, child_id: &RawValue, code: i64, msg: &str) {
        if let Some(c) = &self.child {
            c.send_urgent(message::error_response(child_id, code, msg, None));
        }
    }

    fn on_child_notification(&mut self, m: Message) {
        let method = m.method().to_string();
        if self.route_listen_traffic(&method, &m) {
            return;
        }
        match method.as_str() {
            "notifications/progress" => {
                let Some(mut p) = m.params_object() else {
                    return;
                };
                let token = p.get("progressToken").and_then(Value::as_u64);
                let owner =
                    token
                        .and_then(|t| self.inflight.get(t))
                        .and_then(|pend| match &pend.owner {
                            Owner::Client {
                                client,
                                progress: Some(orig),
                                ..
                            } => Some((*client, orig.clone())),
                            _ => None,
                        });
                let Some((client, orig)) = owner else { return };
                p.insert(
                    "progressToken".into(),
                    serde_json::from_str(orig.get()).unwrap_or(Value::Null),
                );
                let line = Out::request(None, &method, Some(&raw(&Value::Object(p)))).encode();
                self.reply(client, line);
            }
            "notifications/cancelled" => {
                // The child gave up on one of its own requests to a client.
                let Some(mut p) = m.params_object() else {
                    return;
                };
                let Some(rid) = p.get("requestId").map(Value::to_string) else {
                    return;
                };
                let key = self
                    .upstream
                    .iter()
                    .find(|(_, u)| matches!(&u.asker, Asker::Child(c) if c.get() == rid))
                    .map(|(k, _)| *k);
                if let Some((client, n)) = key {
                    self.upstream.remove(&(client, n));
                    p.insert("requestId".into(), json!(n));
                    let line = Out::request(None, &method, Some(&raw(&Value::Object(p)))).encode();
                    self.reply(client, line);
                }
            }
            "notifications/message" => {
                let level = m
                    .params_object()
                    .and_then(|p| {
                        p.get("level")
                            .and_then(Value::as_str)
                            .and_then(era::log_rank)
                    })
                    .unwrap_or(0);
                self.route_log_message(level, &m);
            }
            "notifications/resources/updated" => {
                let uri = m
                    .params_object()
                    .and_then(|p| p.get("uri").and_then(Value::as_str).map(str::to_string));
                let subs: Vec<ClientId> = uri
                    .as_ref()
                    .and_then(|u| self.subs.get(u))
                    .map(|s| s.iter().copied().collect())
                    .unwrap_or_default();
                let line = Out::request(None, &method, m.params.as_deref()).encode();
                for c in subs {
                    if self.client_era(c) == Era::Handshake {
                        self.reply(c, line.clone());
                    }
                }
                self.feed_listeners(&method, uri.as_deref(), m.params.as_deref());
            }
            _ => {
                if let Some((list, _, _)) = era::LISTS.iter().find(|(_, n, _)| *n == method) {
                    // Keep the cached list current for outage answers; the child announced it.
                    let far = Instant::now() + self.cfg.request_timeout;
                    self.send_to_child(
                        Owner::Refresh {
                            method: list,
                            announce: false,
                        },
                        list,
                        None,
                        far,
                    );
                }
                let line = Out::request(None, &method, m.params.as_deref()).encode();
                self.broadcast(&line, |_| true);
                self.feed_listeners(&method, None, m.params.as_deref());
            }
        }
    }

    /// Served listen streams of modern clients get a handshake child's notification when they
    /// asked for it, tagged with their subscription id.
    fn feed_listeners(&mut self, method: &str, uri: Option<&str>, params: Option<&RawValue>) {
        let lines: Vec<(ClientId, Bytes)> = self
            .listeners
            .iter()
            .filter(|l| l.wants(method, uri))
            .map(|l| (l.client, l.notification(method, params)))
            .collect();
        for (c, line) in lines {
            self.reply(c, line);
        }
    }

    /// `notifications/message` routing (issue 6 §6). A handshake child's messages are
    /// session-wide: handshake clients get those at or above their `logging/setLevel` (all, if
    /// they never set one). A 2026 message carries no correlation key on a shared stdio
    /// channel, so it goes to every client with a request in flight that asked for logging
    /// (`_meta` logLevel, or a handshake client's level toward a modern child) at or below the
    /// message's level; never to a client that did not ask for logging.
    fn route_log_message(&mut self, level: usize, m: &Message) {
        let asking: HashSet<ClientId> = self
            .inflight
            .iter()
            .filter_map(|(_, _, _, p)| match &p.owner {
                Owner::Client {
                    client,
                    log_level: Some(l),
                    ..
                } if level >= *l => Some(*client),
                _ => None,
            })
            .collect();
        let child_era = self.child_era();
        let line = Out::request(None, "notifications/message", m.params.as_deref()).encode();
        let targets: Vec<ClientId> = self
            .clients
            .iter()
            .filter(
                |(id, c)| match (child_era, c.era.unwrap_or(Era::Handshake)) {
                    (Era::Handshake, Era::Handshake) => {
                        c.initialized && c.log_level.is_none_or(|min| level >= min)
                    }
                    _ => asking.contains(id),
                },
            )
            .map(|(id, _)| *id)
            .collect();
        for c in targets {
            self.reply(c, line.clone());
        }
    }

    /// Traffic of 2026 listen streams on a modern child (`_meta.subscriptionId` = the listen
    /// request's child-side id): a client's stream goes to that client with its own id; the
    /// supervisor's stream is fanned out to handshake clients as session-wide notifications.
    /// Returns whether the notification was listen traffic.
    fn route_listen_traffic(&mut self, method: &str, m: &Message) -> bool {
        let Some(raw_params) = m.params.as_deref() else {
            return false;
        };
        if !raw_params.get().contains(era::META_SUBSCRIPTION_ID)
            && method != "notifications/cancelled"
        {
            return false;
        }
        let Some(mut params) = m.params_object() else {
            return false;
        };
        let sub = if method == "notifications/cancelled" {
            params.get("requestId").and_then(Value::as_u64)
        } else {
            params
                .get("_meta")
                .and_then(|x| x.get(era::META_SUBSCRIPTION_ID))
                .and_then(Value::as_u64)
        };
        let Some(sub) = sub else { return false };
        if Some(sub) == self.listen {
            if method == "notifications/cancelled" {
                self.listen = None;
                return true;
            }
            if let Some(meta) = params.get_mut("_meta").and_then(Value::as_object_mut) {
                meta.remove(era::META_SUBSCRIPTION_ID);
                if meta.is_empty() {
                    params.remove("_meta");
                }
            }
            let line =
                Out::request(None, method, Some(&raw(&Value::Object(params.clone())))).encode();
            match method {
                "notifications/resources/updated" => {
                    let uri = params.get("uri").and_then(Value::as_str).unwrap_or("");
                    let subs: Vec<ClientId> = self
                        .subs
                        .get(uri)
                        .map(|s| s.iter().copied().collect())
                        .unwrap_or_default();
                    for c in subs {
                        self.reply(c, line.clone());
                    }
                }
                "notifications/subscriptions/acknowledged" => {}
                _ => self.broadcast(&line, |c| c.era != Some(Era::Modern)),
            }
            return true;
        }
        let owner = self.inflight.get(sub).and_then(|p| match &p.owner {
            Owner::Client { client, id, .. } if p.method == "subscriptions/listen" => {
                Some((*client, id.clone()))
            }
            _ => None,
        });
        let Some((client, id)) = owner else {
            return false;
        };
        let original: Value = serde_json::from_str(id.get()).unwrap_or(Value::Null);
        if method == "notifications/cancelled" {
            // The child ended the client's stream.
            params.insert("requestId".into(), original);
            if let Some(r) = self.inflight.remove(sub) {
                if let Some((c, key)) = r.client {
                    self.finish(c, &key, Outcome::Cancelled, None);
                }
            }
        } else if let Some(meta) = params.get_mut("_meta").and_then(Value::as_object_mut) {
            meta.insert(era::META_SUBSCRIPTION_ID.into(), original);
        }
        let line = Out::request(None, method, Some(&raw(&Value::Object(params)))).encode();
        self.reply(client, line);
        true
    }

    /// A reply the envelope parser refused (K21): fails its request only, naming the server.
    fn on_malformed(&mut self, id: &RawValue, why: &str) {
        let Some(n) = id.get().parse::<u64>().ok() else {
            return;
        };
        if self.health.answered(n) {
            return;
        }
        let Some(removed) = self.inflight.remove(n) else {
            return;
        };
        if let Owner::Client { client, id, .. } = removed.value.owner {
            self.fail_malformed(client, &id, &removed.value.method, why);
        }
    }

    /// Fails a client request whose reply from the child was malformed (K21): -32603 naming
    /// the server, the method and what is wrong.
    fn fail_malformed(&mut self, client: ClientId, id: &RawValue, method: &str, problem: &str) {
        let msg = format!(
            "server `{}` sent a malformed response to `{method}`: {problem}",
            self.cfg.name
        );
        let data = json!({"server": self.cfg.name, "problem": problem});
        self.respond_error(
            client,
            id,
            code::INTERNAL_ERROR,
            &msg,
            Some(data),
            Outcome::ProtocolError,
        );
    }

    fn on_oversized(&mut self, len: usize, id: Option<Box<RawValue>>) {
        let n = id.as_deref().and_then(|i| i.get().parse::<u64>().ok());
        let Some(child_id) = n.filter(|n| self.inflight.contains(*n)) else {
            warn!(
                bytes = len,
                "an oversized line with no recoverable request id was dropped"
            );
            return;
        };
        let Some(removed) = self.inflight.remove(child_id) else {
            return;
        };
        let p = removed.value;
        if let Owner::Client { client, id, .. } = p.owner {
            let msg = format!(
                "server `{}` answered with a message of {len} bytes, over max_message_size ({} bytes); it was discarded",
                self.cfg.name, self.cfg.max_message_size
            );
            let data = json!({"server": self.cfg.name, "bytes": len});
            self.respond_error(
                client,
                &id,
                code::INTERNAL_ERROR,
                &msg,
                Some(data),
                Outcome::ProtocolError,
            );
        }
    }

    // ----- delivery ----------------------------------------------------------------------------

    /// Ends a client request with its one outcome: the request log line and the metrics.
    fn finish(&mut self, client: ClientId, key: &str, outcome: Outcome, code: Option<i64>) {
        let Some(t) = self.ledger.remove(&(client, key.to_string())) else {
            return;
        };
        let elapsed = t.started.elapsed();
        let (uid, pid, name) = self
            .clients
            .get(&client)
            .map(|c| (Some(c.peer.uid), c.peer.pid, c.name.clone()))
            .unwrap_or((None, None, String::new()));
        info!(
            target: "mcp_supervisor::requests",
            request_id = %t.rid,
            client = %client,
            peer_uid = uid,
            peer_pid = pid,
            client_name = %name,
            method = %t.method,
            tool = t.tool.as_deref().unwrap_or(""),
            arg_keys = %t.arg_keys.join(","),
            duration_ms = (elapsed.as_secs_f64() * 1e6).round() / 1e3,
            outcome = outcome.as_str(),
            error_code = code,
            // The instance that was running at arrival exited or was replaced meanwhile.
            restarted = t.generation.is_some() && t.generation != self.child.as_ref().map(|c| c.generation),
            "request finished"
        );
        self.metrics
            .request(&t.method, outcome, code, elapsed.as_secs_f64());
        self.metrics.set_in_flight(self.inflight.len());
    }

    /// Answers a client request with a JSON-RPC error and finishes it with `outcome`.
    fn respond_error(
        &mut self,
        client: ClientId,
        id: &RawValue,
        code: i64,
        msg: &str,
        data: Option<Value>,
        outcome: Outcome,
    ) {
        let line = message::error_response(id, code, msg, data);
        self.respond(client, id, line, outcome, Some(code));
    }

    /// Answers a client request and finishes it.
    fn respond(
        &mut self,
        client: ClientId,
        id: &RawValue,
        line: Bytes,
        outcome: Outcome,
        code: Option<i64>,
    ) {
        self.finish(client, &id_key(id), outcome, code);
        self.reply(client, line);
    }

    fn reply(&mut self, client: ClientId, line: Bytes) {
        self.metrics.bytes("to_client", line.len());
        let (ok, closing) = match self.clients.get(&client) {
            Some(c) => (c.tx.deliver(line), c.closing),
            None => return,
        };
        if !ok {
            self.drop_client(client);
        } else if closing {
            self.close_if_done(client);
        }
    }

    fn broadcast(&mut self, line: &Bytes, filter: impl Fn(&Client) -> bool) {
        let targets: Vec<ClientId> = self
            .clients
            .iter()
            .filter(|(_, c)| c.initialized && filter(c))
            .map(|(id, _)| *id)
            .collect();
        for c in targets {
            self.reply(c, line.clone());
        }
    }

    // ----- outages -----------------------------------------------------------------------------

    fn outage_status(&self) -> &'static str {
        self.outage_status_of(self.state)
    }

    /// The state's name in status and metrics; also the outage `status` for a waiting state.
    fn outage_status_of(&self, state: State) -> &'static str {
        match state {
            State::Starting => "starting",
            State::Backoff => "backoff",
            State::Failed => "failed",
            State::Stopping | State::Stopped => "stopped",
            State::Ready => "ready",
        }
    }

    /// Answers a list request from the last known result while the child is down (issue 5 §3).
    fn answer_from_cache(&mut self, client: ClientId, m: &Message) -> bool {
        let method = m.method();
        let Some((list, _, _)) = era::LISTS.iter().find(|(l, _, _)| *l == method) else {
            return false;
        };
        if m.params
            .as_deref()
            .is_some_and(|p| p.get().contains("\"cursor\""))
        {
            return false;
        }
        let Some(cached) = self.lists.get(list) else {
            return false;
        };
        let mut result = cached.clone();
        if *list == "tools/list" && self.cfg.mark_unavailable {
            let note = format!(
                " [mcp-supervisor: server `{}` is currently unavailable ({}); calls will fail until it recovers]",
                self.cfg.name,
                self.outage_status()
            );
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
        let Some(id) = m.id.clone() else { return false };
        let line = message::result_response(&id, &result);
        self.respond(client, &id, line, Outcome::Ok, None);
        true
    }

    /// Answers a request that cannot reach the child. `tools/call` gets a tool result with
    /// `isError: true` (the model must read the outage as an outage); everything else a
    /// JSON-RPC error. Both carry the same record (issue 5 §1-2; see README "Errors").
    fn outage_reply(&mut self, client: ClientId, id: &RawValue, method: &str, status: &str) {
        let retry = self
            .next_spawn
            .map(|t| t.saturating_duration_since(Instant::now()));
        let reason = self
            .last_exit
            .as_ref()
            .map(|e| e.reason.clone())
            .unwrap_or_else(|| status.to_string());
        self.outage_respond(
            client,
            id,
            method,
            status,
            &reason,
            retry,
            code::SERVER_UNAVAILABLE,
            Outcome::Unreachable,
        );
    }

    /// Answers a client request that failed for an outage, a limit or a deadline with the
    /// documented record, and finishes it in the request log.
    #[allow(clippy::too_many_arguments)]
    fn outage_respond(
        &mut self,
        client: ClientId,
        id: &RawValue,
        method: &str,
        status: &str,
        reason: &str,
        retry: Option<Duration>,
        code: i64,
        outcome: Outcome,
    ) {
        let request_id = self
            .ledger
            .get(&(client, id_key(id)))
            .map(|t| t.rid.clone())
            .unwrap_or_else(new_request_id);
        let tail = self.tail.last_lines(10);
        let mut record = json!({
            "server": self.cfg.name,
            "status": status,
            "reason": reason,
            "stderr_tail": tail,
            "request_id": request_id,
        });
        let mut text = format!(
            "server={} status={} reason={}",
            self.cfg.name, status, reason
        );
        if let Some(r) = retry {
            if let Some(o) = record.as_object_mut() {
                o.insert("retry_after_ms".into(), json!(r.as_millis() as u64));
            }
            text.push_str(&format!(" retry_after={}", format_secs(r)));
        }
        text.push_str(&format!(" request_id={request_id}"));
        let last = self.tail.last_lines(1);
        if !last.is_empty() {
            text.push_str(&format!(" stderr={last:?}"));
        }
        warn!(request_id = %request_id, method, status, reason, "request failed: {text}");
        let (line, code) = if method == "tools/call" {
            let result = json!({
                "content": [{"type": "text", "text": text}],
                "isError": true,
                "_meta": {"mcp-supervisor/outage": record},
            });
            (message::result_response(id, &result), None)
        } else {
            let msg = match status {
                "timeout" if code == code::REQUEST_TIMEOUT => {
                    format!("request to server `{}` timed out", self.cfg.name)
                }
                _ => format!("server `{}` is unavailable: {text}", self.cfg.name),
            };
            (
                message::error_response(id, code, &msg, Some(record)),
                Some(code),
            )
        };
        self.respond(client, id, line, outcome, code);
    }

    fn fail_inflight(&mut self, status: &str, reason: &str, retry: Option<Duration>) {
        for r in self.inflight.drain() {
            let p = r.value;
            if let Owner::Client { client, id, .. } = p.owner {
                self.outage_respond(
                    client,
                    &id,
                    &p.method,
                    status,
                    reason,
                    retry,
                    code::SERVER_UNAVAILABLE,
                    Outcome::Unreachable,
                );
            }
        }
        // The dead child's requests to clients are void: tell those clients.
        let ups: Vec<(ClientId, u64)> = self
            .upstream
            .iter()
            .filter(|(_, u)| matches!(u.asker, Asker::Child(_)))
            .map(|(k, _)| *k)
            .collect();
        for (client, n) in ups {
            self.upstream.remove(&(client, n));
            let p = raw(&json!({"requestId": n, "reason": "server exited"}));
            self.reply(
                client,
                Out::request(None, "notifications/cancelled", Some(&p)).encode(),
            );
        }
    }

    fn fail_held(&mut self, status: &str) {
        let held: Vec<Held> = self.held.drain(..).collect();
        for h in held {
            let Some(id) = h.msg.id.clone() else { continue };
            if h.msg.method() == "initialize" && self.handshake.is_none() {
                let reason = self
                    .last_exit
                    .as_ref()
                    .map(|e| e.reason.clone())
                    .unwrap_or_else(|| status.into());
                self.outage_respond(
                    h.client,
                    &id,
                    "initialize",
                    status,
                    &reason,
                    None,
                    code::SERVER_UNAVAILABLE,
                    Outcome::Unreachable,
                );
            } else {
                self.outage_reply(h.client, &id, h.msg.method(), status);
            }
        }
    }

    // ----- timers ------------------------------------------------------------------------------

    fn next_wake(&self) -> Option<Instant> {
        let probe_due = match self.state {
            State::Ready => self.health.next_wake(self.probe_methods()),
            _ => None,
        };
        [
            self.start_deadline,
            self.next_spawn,
            self.inflight.next_deadline(),
            self.held.iter().map(|h| h.deadline).min(),
            self.upstream.values().map(|u| u.deadline).min(),
            probe_due,
            self.stdout_closed_at.map(|t| t + STDOUT_CLOSED_GRACE),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn on_timer(&mut self) {
        let now = Instant::now();
        if self.state == State::Starting && self.start_deadline.is_some_and(|t| t <= now) {
            warn!(
                timeout_s = self.cfg.start_timeout.as_secs_f64(),
                "no answer to initialize within start_timeout"
            );
            self.start_deadline = None;
            self.stop_child(StopCause::StartTimeout);
        }
        if self
            .stdout_closed_at
            .is_some_and(|t| t + STDOUT_CLOSED_GRACE <= now)
        {
            self.stdout_closed_at = None;
            warn!(
                "the child closed stdout {}s ago but is still running",
                STDOUT_CLOSED_GRACE.as_secs()
            );
            self.stop_child(StopCause::StdoutClosed);
        }
        if matches!(self.state, State::Backoff | State::Failed)
            && self.next_spawn.is_some_and(|t| t <= now)
        {
            if self.state == State::Backoff {
                self.restarts += 1;
            }
            self.spawn();
        }
        while let Some(r) = self.inflight.pop_expired(now) {
            self.on_deadline(r.id, r.value);
        }
        while let Some(i) = self.held.iter().position(|h| h.deadline <= now) {
            let Some(h) = self.held.remove(i) else { break };
            let Some(id) = h.msg.id.clone() else { continue };
            let status = self.outage_status();
            if h.msg.method() == "initialize" && self.handshake.is_none() {
                let reason = self
                    .last_exit
                    .as_ref()
                    .map(|e| e.reason.clone())
                    .unwrap_or_else(|| "no answer to initialize yet".into());
                let retry = self.next_spawn.map(|t| t.saturating_duration_since(now));
                self.outage_respond(
                    h.client,
                    &id,
                    "initialize",
                    status,
                    &reason,
                    retry,
                    code::SERVER_UNAVAILABLE,
                    Outcome::Unreachable,
                );
            } else {
                self.outage_reply(h.client, &id, h.msg.method(), status);
            }
        }
        let expired: Vec<(ClientId, u64)> = self
            .upstream
            .iter()
            .filter(|(_, u)| u.deadline <= now)
            .map(|(k, _)| *k)
            .collect();
        for (client, n) in expired {
            if let Some(up) = self.upstream.remove(&(client, n)) {
                match up.asker {
                    Asker::Child(id) => self.answer_child_error(
                        &id,
                        code::REQUEST_TIMEOUT,
                        "the client did not answer in time",
                    ),
                    Asker::Mrtr { round, .. } => self.abandon_round(
                        round,
                        Outcome::Timeout,
                        code::REQUEST_TIMEOUT,
                        "the client did not answer the server's input request in time",
                    ),
                }
                let p = raw(&json!({"requestId": n, "reason": "timed out"}));
                self.reply(
                    client,
                    Out::request(None, "notifications/cancelled", Some(&p)).encode(),
                );
            }
        }
        if self.state == State::Ready {
            self.check_health(now);
        }
    }

    fn on_deadline(&mut self, child_id: u64, p: Pending) {
        match p.owner {
            Owner::Client { client, id, .. } => {
                self.health.request_expired(p.written);
                let cancel = raw(&json!({"requestId": child_id, "reason": "request timed out"}));
                if let Some(c) = &self.child {
                    c.send_urgent(
                        Out::request(None, "notifications/cancelled", Some(&cancel)).encode(),
                    );
                }
                let t = self.cfg.timeout_for(&p.method);
                let reason = format!("no response within {}", format_secs(t));
                self.outage_respond(
                    client,
                    &id,
                    "",
                    "timeout",
                    &reason,
                    None,
                    code::REQUEST_TIMEOUT,
                    Outcome::Timeout,
                );
            }
            Owner::Discover { probe: true } if self.state == State::Starting => {
                self.set_verdict(
                    Era::Handshake,
                    "no answer to server/discover within era_probe_timeout",
                );
                self.send_initialize(era::HANDSHAKE_VERSION);
            }
            _ => {}
        }
    }

    // ----- health ------------------------------------------------------------------------------

    /// What this child's era and handshake offer for probing.
    fn probe_methods(&self) -> ProbeMethods {
        ProbeMethods {
            modern: self.child_era() == Era::Modern,
            confirm: self.handshake.as_ref().and_then(Handshake::confirm_method),
        }
    }

    /// Applies the health rules (`mux/health.rs`) to the ready child at `now`.
    fn check_health(&mut self, now: Instant) {
        if self.child.as_ref().is_none_or(|c| c.stopping()) {
            return;
        }
        // Slow is not dead: a client request within its own deadline excuses silence.
        let busy = self
            .inflight
            .iter()
            .any(|(_, client, deadline, _)| client.is_some() && deadline > now);
        let before = self.health.misses();
        let action = self.health.tick(now, busy, self.probe_methods());
        if self.health.misses() > before {
            self.metrics.probe("timeout");
            warn!(
                misses = self.health.misses(),
                limit = self.cfg.probe_failures,
                busy,
                "probe unanswered"
            );
        }
        match action {
            Action::None => {}
            Action::Probe(method) => self.send_probe(method, now),
            Action::Dead { misses } => {
                error!(misses, "the child stopped answering; restarting it");
                self.stop_child(StopCause::ProbeTimeout);
            }
        }
    }

    /// Writes probe `method` with a fresh child-side id. A probe that cannot be queued counts
    /// as sent: a child that does not read its input is as silent as one that does not answer.
    fn send_probe(&mut self, method: &'static str, now: Instant) {
        let id = self.inflight.allocate();
        let params = (self.child_era() == Era::Modern)
            .then(|| era::add_envelope(None, &era::supervisor_envelope()));
        let line = Out::request(Some(&raw_u64(id)), method, params.as_deref()).encode();
        self.metrics.probe("sent");
        debug!(method, "probing the silent child");
        if let Some(c) = &self.child {
            self.metrics.bytes("to_child", line.len());
            c.send(line);
        }
        self.health.sent(id, method, now);
    }

    fn status(&self) -> Status {
        let now = Instant::now();
        let health = self.health.status();
        Status {
            name: self.cfg.name.clone(),
            state: self.state,
            pid: self.child.as_ref().map(|c| c.pid),
            restarts: self.restarts,
            era: self.handshake.as_ref().map(|h| h.protocol_version.clone()),
            clients: self.clients.len(),
            uptime_s: self
                .child
                .as_ref()
                .map(|c| now.duration_since(c.spawned_at).as_secs_f64()),
            last_heard_s: self.child.as_ref().map(|_| {
                now.saturating_duration_since(self.health.last_heard())
                    .as_secs_f64()
            }),
            probes_sent: health.probes_sent,
            probes_answered: health.probes_answered,
            ping_served: health.ping_served,
            consecutive_failures: self.backoff.failures(),
            retry_in_ms: self
                .next_spawn
                .map(|t| t.saturating_duration_since(now).as_millis() as u64),
            last_exit: self.last_exit.clone(),
            stderr_tail: self.tail.text(),
            actor_restarts: self.history.restarts,
            last_actor_panic: self.history.last_panic.clone(),
        }
    }
}

/// What is wrong with a child's response to `method`, if anything (K21): a result must have
/// the shape MCP gives that method's result (`era::check_result_shape`), an error must be an
/// object with an integer `code` and a string `message` (JSON-RPC 2.0 §5.1).
fn malformed(m: &Message, method: &str) -> Option<String> {
    match (&m.result, &m.error) {
        (Some(_), Some(_)) => Some("it has both `result` and `error`".into()),
        // Results that carry payloads (a 13 MB screenshot) are only checked to be an object:
        // the member check would scan the whole payload a second time on the relay path.
        (Some(r), None) if matches!(method, "tools/call" | "resources/read" | "prompts/get") => {
            (!r.get().trim_start().starts_with('{'))
                .then(|| "its `result` is not a JSON object".to_string())
        }
        (Some(r), None) => era::check_result_shape(method, r)
            .err()
            .map(|e| e.to_string()),
        (None, Some(e)) => era::check_error_shape(e).err().map(|e| e.to_string()),
        (None, None) => Some("it has neither `result` nor `error`".into()),
    }
}

/// The `requestState` member of an `input_required` result as the child wrote it, if any.
fn request_state(result: &RawValue) -> Option<Box<RawValue>> {
    #[derive(serde::Deserialize)]
    struct State {
        #[serde(rename = "requestState")]
        state: Option<Box<RawValue>>,
    }
    serde_json::from_str::<State>(result.get())
        .ok()
        .and_then(|s| s.state)
}

/// The name of log level rank `level` (`era::LOG_LEVELS`), `debug` when out of range.
fn level_name(level: usize) -> &'static str {
    era::LOG_LEVELS.get(level).copied().unwrap_or("debug")
}

/// The request-log entry of a client request arriving now (issue 8), while child instance
/// `generation` runs.
fn tracked(m: &Message, generation: Option<u64>) -> Tracked {
    let method = m.method().to_string();
    let (tool, arg_keys) = if method == "tools/call" {
        tool_shape(m.params.as_deref())
    } else {
        (None, Vec::new())
    };
    Tracked {
        rid: new_request_id(),
        method,
        tool,
        arg_keys,
        started: Instant::now(),
        generation,
    }
}

/// The health rules' settings from a server's configuration.
fn health_config(cfg: &ServerConfig) -> HealthConfig {
    HealthConfig {
        probe_interval: cfg.probe_interval,
        probe_timeout: cfg.probe_timeout,
        probe_failures: cfg.probe_failures,
    }
}

async fn sleep_until(t: Option<Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t.into()).await,
        None => std::future::pending().await,
    }
}

/// `2s`, `1.5s`, `250ms`.
fn format_secs(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{}ms", d.as_millis())
    } else if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}

/// The canonical text of a client's request id, as the in-flight table keys it (so a cancel's
/// `requestId` matches however the client spelled the number or string).
fn id_key(id: &RawValue) -> String {
    let text = id.get();
    // Fast path: plain integers and strings without escapes are already canonical.
    let plain_int = !text.is_empty()
        && text
            .bytes()
            .enumerate()
            .all(|(i, b)| b.is_ascii_digit() || (i == 0 && b == b'-'))
        && !(text.len() > 1 && text.trim_start_matches('-').starts_with('0'));
    let plain_str = text.len() >= 2
        && text.starts_with('"')
        && text.ends_with('"')
        && !text[1..text.len() - 1].contains(['\\', '"']);
    if (plain_int && text.len() < 16) || plain_str {
        return text.to_string();
    }
    serde_json::from_str::<Value>(text)
        .map(|v| v.to_string())
        .unwrap_or_else(|_| id.get().to_string())
}

/// A fresh request id for the log and for errors (`r-` and 12 hex digits).
fn new_request_id() -> String {
    format!("r-{:012x}", rand::random::<u64>() & 0xffff_ffff_ffff)
}

/// Whether a `tools/call` result says `isError: true`, without decoding the content (which may
/// be a multi-megabyte screenshot).
fn is_tool_error(result: &RawValue) -> bool {
    // Most results never mention it: skip the parse of a (possibly huge) payload.
    if !result.get().contains("\"isError\"") {
        return false;
    }
    #[derive(serde::Deserialize)]
    struct Probe {
        #[serde(rename = "isError", default)]
        is_error: Option<bool>,
    }
    serde_json::from_str::<Probe>(result.get())
        .ok()
        .and_then(|p| p.is_error)
        .unwrap_or(false)
}

/// The tool name and the argument keys of `tools/call` params (values are skipped, never
/// copied or logged).
fn tool_shape(params: Option<&RawValue>) -> (Option<String>, Vec<String>) {
    #[derive(serde::Deserialize)]
    struct Name {
        name: Option<String>,
    }
    #[derive(serde::Deserialize)]
    struct Args {
        arguments: BTreeMap<String, serde::de::IgnoredAny>,
    }
    let Some(p) = params else {
        return (None, Vec::new());
    };
    let name = serde_json::from_str::<Name>(p.get())
        .ok()
        .and_then(|n| n.name);
    let keys = serde_json::from_str::<Args>(p.get())
        .map(|a| a.arguments.into_keys().collect())
        .unwrap_or_default();
    (name, keys)
}

/// Whether a list result may be kept and served to every client of the child (issue 6 §2): a
/// 2026 result only with `cacheScope: "public"`; a handshake-era result (no hint) always, since
/// every client shares the child's one session. Entries are only served while the child is
/// down, where the 2026 caching rules allow stale entries ("a re-fetch errors").
fn shareable(v: &Value) -> bool {
    if !v.is_object() {
        return false;
    }
    match v.get("cacheScope").and_then(Value::as_str) {
        None => v.get("resultType").is_none(),
        Some(scope) => scope == "public",
    }
}
