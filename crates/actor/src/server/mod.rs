//! # Theory of operation
//!
//! One actor per configured server owns everything about it: the child instance (spawned with
//! [`upstream::child::process`]), the MCP session with the child, the id maps, the connected
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
//!   to the owner rule (`asking.rs`, `pick_owner`);
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

use crate::health::Health;
use crate::outage::ExitReason;
use crate::session::{ClientId, SessionEvent};
use clock::Clock;
use effects::Effect;
use held::HeldQueue;
use instances::Instances;
use life::Life;
use lists::ListCache;
use opener::Opener;
use outbox::Outbox;
use rand::rngs::StdRng;
use rand::SeedableRng;
use rounds::Rounds;
use routing::Routing;
use serde::Serialize;
use serde_json::json;
use shell::Shell;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use subtable::Subscriptions;
use supervise::ActorHistory;
use support::config::ServerConfig;
use telemetry::Telemetry;
use tokio::sync::{mpsc, oneshot};
use tracing::{warn, Instrument};
use upstream::starter::ProcessStarter;
use upstream::{Event, Lost, Queued, StartError, Starter, Upstream};
use util::health_config;
use vocab::jsonrpc::message::{self, code};

mod asking;
mod clock;
mod core;
mod demand;
mod effects;
mod exits;
#[cfg(test)]
mod fakes;
mod forwarding;
mod handover;
pub use handover::{Adoption, ClientState, HandOver, Rest};
pub use summary::summary;
mod held;
mod instances;
mod ledger;
mod life;
mod lifecycle;
mod lists;
mod notifying;
mod opener;
mod opening;
mod outbox;
mod probing;
mod recording;
mod replies;
mod roster;
mod rounds;
mod routing;
#[cfg(test)]
mod scenarios;
mod serving;
mod shell;
#[cfg(test)]
mod sim;
mod subscribing;
mod subtable;
mod summary;
mod supervise;
pub use supervise::{panic_message, Restarts};
mod telemetry;
mod unreachable;
mod util;

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
    /// Not running, by design: started by the next request that needs it (issue 18).
    Idle,
    /// A url server refused the credential at the handshake (HTTP 401/403): not retried
    /// until the operator fixes `headers` and runs `start` (issue 29; the sign-in issue
    /// signs in from here).
    #[serde(rename = "auth_required")]
    AuthRequired,
}

impl State {
    /// Its name in `status` and the `child_state` metric's label.
    pub fn name(self) -> &'static str {
        match self {
            State::Starting => "starting",
            State::Ready => "ready",
            State::Backoff => "backoff",
            State::Stopping => "stopping",
            State::Stopped => "stopped",
            State::Failed => "failed",
            State::Idle => "idle",
            State::AuthRequired => "auth_required",
        }
    }
}

/// The last exit, for status and errors (and in an upgrade's hand-over record).
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct LastExit {
    /// Exit code, if it exited.
    pub code: Option<i32>,
    /// Signal number, if a signal ended it.
    pub signal: Option<i32>,
    /// `exited(1)`, `signal(SIGKILL)`, `start-timeout`, `probe-timeout`, `spawn-error`,
    /// `oom-killed`, `memory-limit`, `tasks-limit`, ... (serialized as that text).
    pub reason: ExitReason,
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
    /// Resource limits, their mechanism and the last sample (issue 18 §3); null without.
    pub limits: Option<upstream::LimitStatus>,
    /// A url server's session (issue 29): URL without query, whether a session is open and
    /// its age (never its id), the negotiated version, the last HTTP status and error; null
    /// for a child.
    pub remote: Option<upstream::RemoteStatus>,
    /// Recent traffic (issue 33): requests/s, the SLI's error rate, p50/p99, availability
    /// against the objective, burn rates, per-minute counts and the last failures.
    pub traffic: support::observe::history::Traffic,
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
    /// Who may be a client now (a reload changed the allow-lists): connected clients this
    /// no longer permits are told and disconnected (issue 14 §2).
    Permit(crate::session::Access),
    /// How many client requests are unfinished (an upgrade waits for 0, issue 32 §1).
    Busy(oneshot::Sender<usize>),
    /// Hand over to the next image (issue 32 §1): the child's pipe tasks pause, each socket
    /// client's state is told, and the actor freezes (it handles nothing more).
    HandOver(oneshot::Sender<HandOver>),
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
    start_adopting(cfg, None)
}

/// [`start`], adopting what the previous image handed over (issue 32 §1), if anything.
pub fn start_adopting(
    cfg: ServerConfig,
    adoption: Option<Adoption>,
) -> (ServerHandle, tokio::task::JoinHandle<()>) {
    let (stx, srx) = mpsc::channel(1024);
    let (ctx, crx) = mpsc::channel(16);
    let span = tracing::info_span!("server", server = %cfg.name);
    let pid = Arc::new(AtomicU32::new(0));
    let task =
        tokio::spawn(supervise::supervise(cfg, srx, crx, pid.clone(), adoption).instrument(span));
    (
        ServerHandle {
            sessions: stx,
            commands: ctx,
            pid,
        },
        task,
    )
}

/// What a spawn ended with: the new instance, or why there is none.
type SpawnOutcome = Result<Box<dyn Upstream>, StartError>;

/// One input to the actor, taken by the shell ([`Server::run`]) from its inboxes and timer.
enum Input {
    Upstream(Event),
    /// The outcome of a spawn started by [`Starter::start`], for instance `generation`.
    Spawned(u64, SpawnOutcome),
    Session(SessionEvent),
    /// A delivery to this client failed (it is gone or too slow): the shell's report of an
    /// effect ([`effects::Effects::execute`]).
    ClientGone(ClientId),
    /// The child's queue refused request `.0` (the shell's report of an effect).
    Unwritten(u64, Queued),
    SessionsClosed,
    Command(Command),
    CommandsClosed,
    Timer,
}

struct Server {
    /// The moment the input being handled was taken (set by the shell in [`Server::run`]).
    clock: Clock,
    cfg: ServerConfig,
    /// Metrics, the request log buffer and the warning budgets.
    telemetry: Telemetry,
    /// The lifecycle sub-machine: the state and what it owns (the child, its deadlines).
    life: Life,
    /// The child inbox, the waiters, the supervisor's history.
    shell: Shell,
    /// The child instances: spawning, the restart schedule, the last exit.
    instances: Instances,
    // The MCP session with the child.
    /// The in-flight table and the requests sent to clients.
    routing: Routing,
    /// The session opened with the child: handshake, era verdict, listen stream, log level.
    opener: Opener,
    /// The last list results (outage answers, restart comparison).
    lists: ListCache,
    /// Who holds which resource subscription, directly or through a served listen stream.
    subs: Subscriptions,
    /// Socket clients' `subscriptions/listen` requests as they came, replayed by the next
    /// image after an upgrade (issue 32 §1).
    listen_lines: handover::ListenLines,
    // Clients.
    /// The connected clients, their open requests (the ledger) and the effects decided.
    outbox: Outbox,
    held: HeldQueue,
    /// The input-required rounds of both directions.
    rounds: Rounds,
    /// On-demand start and idle stop (issue 18 §1-2).
    demand: demand::Demand,
    // Health.
    health: Health,
}

impl Server {
    /// An actor for `cfg` on real processes.
    /// An actor for `cfg` on real processes, adopting `adoption` (issue 32 §1) if given.
    fn new(
        cfg: ServerConfig,
        pid: Arc<AtomicU32>,
        history: ActorHistory,
        adoption: Option<Adoption>,
    ) -> Self {
        let (events, events_rx) = mpsc::channel(256);
        let mut adoption = adoption;
        let spawner = Box::new(ProcessStarter::new(
            events,
            adoption.as_mut().and_then(|a| a.carried.take()),
        ));
        let rng = StdRng::from_entropy();
        let mut server = Server::with_spawner(cfg, pid, history, spawner, events_rx, rng);
        if let Some(a) = &adoption {
            server.adopt(a);
        }
        server
    }

    /// An actor for `cfg` whose children come from `spawner` and report to `events_rx`, with
    /// `rng` for the backoff's jitter (seeded in the simulation, so a seed replays exactly).
    fn with_spawner(
        cfg: ServerConfig,
        pid: Arc<AtomicU32>,
        history: ActorHistory,
        spawner: Box<dyn Starter>,
        events_rx: mpsc::Receiver<Event>,
        mut rng: StdRng,
    ) -> Self {
        let health = Health::new(health_config(&cfg), Instant::now());
        let held = HeldQueue::new(cfg.queue_limit);
        Server {
            clock: Clock::read(),
            telemetry: Telemetry::new(&cfg.name, Instant::now()),
            instances: Instances::new(
                &cfg,
                spawner,
                StdRng::seed_from_u64(rand::Rng::gen(&mut rng)),
                pid,
            ),
            cfg,
            life: Life::Stopped,
            shell: Shell::new(events_rx, history),
            routing: Routing::default(),
            opener: Opener::default(),
            lists: ListCache::default(),
            subs: Subscriptions::default(),
            listen_lines: handover::ListenLines::default(),
            outbox: Outbox::default(),
            held,
            rounds: Rounds::new(rng),
            demand: demand::Demand::new(Instant::now()),
            health,
        }
    }

    /// After a panic of [`Server::run`]: the state may be half-updated, but it is memory-safe
    /// and enough to tell the clients, stop the child through the ladder and wait for it.
    async fn after_panic(&mut self, why: &str) {
        let msg = format!(
            "mcp-supervisor: the actor of server `{}` failed ({why}); it restarts shortly, reconnect",
            self.cfg.name
        );
        for c in self.outbox.clients().values() {
            c.say_and_close(message::error_response(
                &message::raw_null(),
                code::INTERNAL_ERROR,
                &msg,
                Some(json!({"server": self.cfg.name, "status": "actor-restart"})),
            ));
        }
        self.outbox.clients_mut().clear();
        // Effects decided before the panic are dropped, not carried out: a spawn among them
        // never started, so there is no instance to wait for.
        let unspawned: Vec<u64> = self
            .outbox
            .effects()
            .take()
            .into_iter()
            .filter_map(|e| match e {
                Effect::Spawn { generation, .. } => Some(generation),
                _ => None,
            })
            .collect();
        if self.life.spawning().is_some_and(|g| unspawned.contains(&g)) {
            return;
        }
        let mut child = match (self.life.spawning(), self.life.take()) {
            (_, Some(ended)) => ended.child,
            // A spawn under way: wait for its instance, so no second one runs beside the
            // next actor's (dropping the result would stop it too, but unawaited).
            (Some(generation), None) => match self.spawned_instance(generation).await {
                Some(child) => child,
                None => return,
            },
            (None, None) => return,
        };
        child.stop();
        let generation = child.generation();
        let budget = base::deadline::sum(&[
            self.cfg.stop_grace,
            self.cfg.kill_timeout,
            Duration::from_secs(5),
        ]);
        let waited = tokio::time::timeout(budget, async {
            while let Some(ev) = self.shell.events().recv().await {
                if matches!(ev, Event::Lost(g, Lost::Exited(_)) if g == generation) {
                    return;
                }
            }
        })
        .await;
        if waited.is_err() {
            warn!("the child of the failed actor did not exit within the stop budget");
        }
        self.instances.publish_pid(0);
    }

    /// Waits (at most `start_timeout` and 5 s) for the outcome of the spawn of `generation`:
    /// its instance, or none if it failed or did not come.
    async fn spawned_instance(&mut self, generation: u64) -> Option<Box<dyn Upstream>> {
        let budget = base::deadline::sum(&[self.cfg.start_timeout, Duration::from_secs(5)]);
        let wait = async {
            while let Some(ev) = self.shell.events().recv().await {
                if let Event::Connected(g, connected) = ev {
                    if g == generation {
                        return connected.ok();
                    }
                }
            }
            None
        };
        tokio::time::timeout(budget, wait).await.ok().flatten()
    }

    /// The server's name.
    fn name(&self) -> &str {
        &self.cfg.name
    }

    /// The configuration this actor ran with (a fresh actor takes it after a panic).
    fn into_config(self) -> ServerConfig {
        self.cfg
    }

    async fn run(
        &mut self,
        sessions: &mut mpsc::Receiver<SessionEvent>,
        commands: &mut mpsc::Receiver<Command>,
    ) {
        let record = match self.cfg.start {
            support::config::StartMode::OnDemand => crate::record::load(&self.cfg).await,
            support::config::StartMode::Eager => None,
        };
        self.tick_clock();
        self.begin(record);
        if self.life.state() == State::Idle {
            // Not spawned, so not tested: a command that cannot run is said now, not at the
            // first use (an idle server counts as ready).
            if let Some(why) = demand::missing_command(&self.cfg) {
                self.cannot_start(&why);
            }
        }
        self.carry_out();
        let (mut sessions_open, mut commands_open) = (true, true);
        let mut exported_state = None;
        let mut watched = None;
        loop {
            let state = self.life.state();
            if exported_state != Some(state) {
                exported_state = Some(state);
                self.telemetry.metrics().set_state(state.name());
            }
            // What `watch` streams (issue 33): told when it may have changed, not polled.
            let seen = self.watched();
            if watched != Some(seen) {
                watched = Some(seen);
                support::observe::changed();
            }
            if state == State::Stopped {
                self.shell.stopped();
                if self.shell.exiting() {
                    break;
                }
            }
            if self.telemetry.has_lines()
                && self.shell.events().is_empty()
                && sessions.is_empty()
                && commands.is_empty()
            {
                // About to wait: the request log lines of this burst go to the log thread (a
                // queue push; no syscall unless the thread waits for work, which it does only
                // after a quiet `GATHER`). Not after a `yield_now`: that costs the runtime one
                // more `epoll_wait` per burst.
                self.telemetry.flush();
            }
            if self.shell.frozen() {
                // Handed over to the next image (issue 32 §1): nothing more is handled; the
                // process executes the next image (or, failing that, the old one) shortly.
                std::future::pending::<()>().await;
            }
            let wake = self.next_wake();
            let input = tokio::select! {
                ev = self.shell.events().recv() => match ev {
                    Some(Event::Connected(g, connected)) => Input::Spawned(g, connected),
                    Some(ev) => Input::Upstream(ev),
                    None => continue,
                },
                ev = sessions.recv(), if sessions_open => match ev {
                    Some(ev) => Input::Session(ev),
                    None => { sessions_open = false; Input::SessionsClosed }
                },
                cmd = commands.recv(), if commands_open => match cmd {
                    Some(cmd) => Input::Command(cmd),
                    None => { commands_open = false; Input::CommandsClosed }
                },
                _ = sleep_until(wake) => Input::Timer,
            };
            self.tick_clock();
            self.step(input);
        }
        self.telemetry.flush();
        for c in self.outbox.clients().values() {
            c.kick();
        }
        self.shell.ended();
    }

    /// Reads the clock: once per input, here in the shell.
    fn tick_clock(&mut self) {
        self.clock = Clock::read();
    }

    /// Handles `input`, then carries out what was decided; a failed delivery is handled as
    /// the input [`Input::ClientGone`] (at most once per client, so this ends).
    fn step(&mut self, input: Input) {
        self.handle(input);
        self.carry_out();
    }

    /// Carries out the effects decided so far, in order (the shell's half of [`Server::step`],
    /// also after [`Server::begin`]).
    fn carry_out(&mut self) {
        loop {
            let mut effects = self.outbox.effects().take();
            let mut gone: Vec<ClientId> = Vec::new();
            let mut unwritten: Vec<(u64, Queued)> = Vec::new();
            for effect in effects.drain(..) {
                match effect {
                    Effect::Deliver {
                        client,
                        tx,
                        address,
                        line,
                    } => {
                        if !tx.deliver_at(address, line) && !gone.contains(&client) {
                            gone.push(client);
                        }
                    }
                    Effect::Spawn { generation, tail } => {
                        self.instances.launch(&self.cfg, generation, tail)
                    }
                    Effect::Stop { generation } => self.life.start_ladder(generation),
                    Effect::Hangup { tx, line } => {
                        tx.deliver(line);
                        tx.close_after_drain();
                    }
                    Effect::ToChild {
                        generation,
                        out,
                        lane,
                        what,
                    } => unwritten.extend(self.write_now(generation, out, lane, what)),
                }
            }
            self.outbox.effects().reuse(effects);
            if gone.is_empty() && unwritten.is_empty() {
                return;
            }
            for (child_id, queued) in unwritten {
                self.handle(Input::Unwritten(child_id, queued));
            }
            for client in gone {
                self.handle(Input::ClientGone(client));
            }
        }
    }

    /// Everything the actor decides, for one input at `self.clock.now()`.
    fn handle(&mut self, input: Input) {
        match input {
            Input::Upstream(ev) => self.on_upstream_event(ev),
            Input::Spawned(generation, spawned) => self.on_spawned(generation, spawned),
            Input::Session(ev) => self.on_session(ev),
            Input::SessionsClosed | Input::CommandsClosed => {
                self.shell.exit(None);
                self.begin_shutdown();
            }
            Input::Timer => self.on_timer(),
            Input::ClientGone(client) => self.drop_client(client),
            Input::Unwritten(child_id, queued) => self.on_unwritten(child_id, queued),
            Input::Command(cmd) => match cmd {
                Command::Shutdown(done) => {
                    self.shell.exit(Some(done));
                    self.begin_shutdown();
                }
                Command::Stop(done) => {
                    self.shell.wait_stop(done);
                    self.operator_stop();
                }
                Command::Start(done) => {
                    self.operator_start();
                    let _ = done.send(());
                }
                Command::Restart(done) => {
                    self.operator_restart();
                    let _ = done.send(());
                }
                Command::Reconfigure(cfg, done) => {
                    self.reconfigure(*cfg);
                    let _ = done.send(());
                }
                Command::Status(reply) => {
                    let _ = reply.send(self.status());
                }
                Command::Permit(access) => self.revoke_unpermitted(&access),
                Command::Busy(reply) => {
                    let _ = reply.send(self.unfinished());
                }
                Command::HandOver(reply) => {
                    let _ = reply.send(self.hand_over());
                    self.shell.freeze();
                }
            },
        }
        self.settle_closing();
        // Once per input, from the table itself: a decision that removes an entry never has
        // to say so.
        let inflight = self.routing.inflight().len();
        self.telemetry.metrics().set_in_flight(inflight);
    }

    /// What a change of `status` that `watch` reports is made of: the state, the instance,
    /// the restarts, the clients (an exit changes the state). Cheap (no allocation): read
    /// every step.
    fn watched(&self) -> (State, u64, u64, usize) {
        (
            self.life.state(),
            self.instances.generation(),
            self.instances.restarts(),
            self.outbox.clients().len(),
        )
    }

    fn status(&self) -> Status {
        let now = self.clock.now();
        let health = self.health.status();
        let described = self.life.child().map(|c| c.describe()).unwrap_or_default();
        let pid = described.pid;
        let shown = self.instances.upstream_status(&self.cfg, described);
        Status {
            name: self.cfg.name.clone(),
            state: self.life.state(),
            pid,
            restarts: self.instances.restarts(),
            era: self.opener.handshake().map(|h| h.protocol_version.clone()),
            clients: self.outbox.clients().len(),
            uptime_s: self
                .life
                .child()
                .map(|c| now.saturating_duration_since(c.started_at()).as_secs_f64()),
            last_heard_s: self.life.child().map(|_| {
                now.saturating_duration_since(self.health.last_heard())
                    .as_secs_f64()
            }),
            probes_sent: health.probes_sent,
            probes_answered: health.probes_answered,
            ping_served: health.ping_served,
            consecutive_failures: self.instances.failures(),
            retry_in_ms: lifecycle::next_attempt(&self.life, &self.demand)
                .map(|t| t.saturating_duration_since(now).as_millis() as u64),
            last_exit: self.instances.last_exit().cloned(),
            stderr_tail: self.instances.tail().text(),
            actor_restarts: self.shell.history().restarts(),
            last_actor_panic: self.shell.history().last_panic().map(str::to_string),
            limits: shown.limits,
            remote: shown.remote,
            traffic: self.telemetry.traffic(now),
        }
    }
}

/// Sleeps until `t`, or forever without one (the shell's timer).
async fn sleep_until(t: Option<Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t.into()).await,
        None => std::future::pending().await,
    }
}
