//! The composition root of `mcp-supervisor run`: takes the socket directory's lock, binds (or
//! adopts from systemd) one socket per server plus `control.sock`, starts one server actor per
//! server, accepts clients, and runs the main event loop: signals, reloads, the systemd
//! watchdog.
//!
//! Owns: the socket directory, its lock and socket files, the accept loops and their
//! `SO_PEERCRED` check, the set of running servers (changed only here, at start-up and on
//! reload), the `sd_notify` calls, the shutdown order. Never touches MCP messages.
//!
//! Reload (issue 7 §2, R3, F26-F28): SIGHUP or the control socket's `reload` re-reads the
//! file the daemon was started with. Unchanged servers are untouched (same pid, same clients),
//! removed ones are stopped and their socket removed, added ones bound and started, changed
//! ones get `Command::Reconfigure` (the actor restarts the child; clients stay connected). An
//! invalid file keeps the old configuration. Requests are coalesced: one reload at a time, in
//! the main loop, at most [`RELOAD_BURST`] per [`RELOAD_WINDOW`].
//!
//! Shutdown (issue 2 §8, F24-F25): `STOPPING=1`, stop accepting, stop every child in parallel
//! through the ladder, remove the sockets we bound (never socket-activated ones), exit 0; a
//! second signal SIGKILLs every process group and exits at once.

use crate::control::server::{self as ctl, ReloadOutcome};
use crate::control::{self, ErrorBody, ErrorKind, ReloadReport};
use actor::registry::{Entry, Registry};
use actor::server::{self, Command, ServerHandle};
use actor::session::{self, Access};
use anyhow::{bail, Context, Result};
use base::systemd::{Notifier, Plumbing};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};
use support::config::{Config, ServerConfig};
use support::logging::{MSG_RELOADED, MSG_RELOAD_FAILED};
use tokio::net::UnixListener;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{error, info, warn};

mod endpoints;
mod http;
mod previous;
mod sockets;
mod upgrade;
use base::safepath::prepare_state_dir;
pub use previous::{cleanup, Cleanup};
use sockets::{accept_loop, control_loop, SessionParams, Shared};
pub use sockets::{
    bind_socket, client_access, lock_socket_dir, operator_access, prepare_socket_dir,
    server_access, socket_path, viewer_access, SocketPerms,
};

/// At most this many reloads run per [`RELOAD_WINDOW`] (R3); more requests wait, coalesced.
pub const RELOAD_BURST: usize = 3;
/// See [`RELOAD_BURST`].
pub const RELOAD_WINDOW: Duration = Duration::from_secs(10);
/// How often the `STATUS=` line is recomputed (it is sent only when it changed).
const STATUS_EVERY: Duration = Duration::from_secs(1);
/// How long the main loop waits for an actor to take a command during a reload.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(5);
/// At exit, how long the supervisor waits to reap what it killed last (issue 17 §1).
const REAP_AT_EXIT: Duration = Duration::from_secs(1);

/// Another supervisor owns this socket directory: `run` exits with code 100 and touches
/// nothing of the other's.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct AlreadyRunning(pub String);

/// Coalesces reload requests: at most [`RELOAD_BURST`] reloads in any [`RELOAD_WINDOW`].
#[derive(Debug, Default)]
pub struct ReloadGate {
    recent: VecDeque<Instant>,
}

impl ReloadGate {
    /// The earliest moment the next reload may run.
    pub fn next_allowed(&self, now: Instant) -> Instant {
        if self.recent.len() < RELOAD_BURST {
            return now;
        }
        // The reload RELOAD_BURST ago opens the window; `recent` holds at most that many.
        match self.recent.iter().rev().nth(RELOAD_BURST - 1) {
            Some(t) => base::deadline::after(*t, RELOAD_WINDOW).max(now),
            None => now,
        }
    }

    /// Records a reload that ran at `now`.
    pub fn record(&mut self, now: Instant) {
        self.recent.push_back(now);
        while self.recent.len() > RELOAD_BURST {
            self.recent.pop_front();
        }
    }
}

/// One configured, running server.
struct Running {
    handle: ServerHandle,
    task: JoinHandle<()>,
    /// Stops this server's accept loop only (a child of the daemon-wide token).
    accept: CancellationToken,
    params: watch::Sender<SessionParams>,
    path: PathBuf,
    /// Socket-activated: never unlinked.
    activated: bool,
    /// `NAME.http.sock` and the token that stops its accept loop, when `http = true`.
    http: Option<(PathBuf, CancellationToken)>,
    /// Its client seats (`max_clients`): its socket's connections and the endpoint clients
    /// joined to it.
    seats: Arc<actor::seats::Seats>,
}

/// The daemon's state, owned by the main loop.
struct Daemon {
    config: Config,
    dir: PathBuf,
    /// What every client's unfinished input may hold together (`client_memory`).
    memory: Arc<session::MemoryBudget>,
    perms: SocketPerms,
    shared: Arc<Shared>,
    registry: Registry,
    servers: BTreeMap<String, Running>,
    /// The endpoints (issue 31), started after the servers.
    endpoints: BTreeMap<String, endpoints::RunningEndpoint>,
    /// Removed by a reload and still stopping.
    retiring: Vec<(String, ServerHandle, JoinHandle<()>)>,
    /// Socket-activated descriptors by name; a dup of one is used for each listener, so a
    /// server removed and added again by reloads gets its socket back.
    activated: HashMap<String, OwnedFd>,
    accepting: CancellationToken,
    connections: CancellationToken,
    tracker: TaskTracker,
    notifier: Notifier,
    /// The Streamable HTTP endpoint's shared state (issue 16).
    front: Arc<front::http::Front>,
    /// Whether the TCP side of the HTTP endpoint is bound (at start or by a reload that
    /// turned `http` on for a first server).
    http_tcp: bool,
    /// What an upgrade runs and passes on (issue 32 §1).
    image: upgrade::Image,
    /// Every listener's descriptor (a duplicate) by hand-over name, and whether systemd
    /// passed it.
    listening: BTreeMap<String, (OwnedFd, bool)>,
    /// Listeners the previous image handed over, taken as each is needed.
    inherited: std::sync::Mutex<HashMap<String, (OwnedFd, bool)>>,
    /// What each server adopts from the previous image.
    adoptions: HashMap<String, server::Adoption>,
    /// Each server's socket clients handed over by the previous image.
    adopted_clients: HashMap<String, Vec<upgrade::AdoptedClient>>,
    /// HTTP connections handed over by the previous image, until their listener starts.
    adopted_http: Vec<front::http::handoff::ParkedConn>,
    /// Upgrades so far and the last refusal, for `upgraded`.
    upgraded: control::Upgraded,
}

impl Daemon {
    /// A listener for `name` at `path`: the socket-activated one when systemd passed it,
    /// else a freshly bound socket. Returns whether it was activated.
    fn listener_for(&self, name: &str, path: &Path) -> Result<(UnixListener, bool)> {
        if let Some((fd, activated)) = self.inherited(name) {
            let std = std::os::unix::net::UnixListener::from(fd);
            std.set_nonblocking(true)?;
            let l = UnixListener::from_std(std)
                .with_context(|| format!("cannot use the handed-over `{name}`"))?;
            return Ok((l, activated));
        }
        if let Some(fd) = self.activated.get(name) {
            let dup = fd
                .try_clone()
                .with_context(|| format!("cannot duplicate the socket-activated `{name}`"))?;
            let accepting =
                nix::sys::socket::getsockopt(&dup, nix::sys::socket::sockopt::AcceptConn)
                    .with_context(|| format!("socket-activated `{name}` is not a socket"))?;
            if !accepting {
                bail!("socket-activated `{name}` is not a listening socket");
            }
            let std = std::os::unix::net::UnixListener::from(dup);
            std.set_nonblocking(true)?;
            let l = UnixListener::from_std(std)
                .with_context(|| format!("cannot use the socket-activated `{name}`"))?;
            info!(socket = %name, "using the socket-activated listener");
            return Ok((l, true));
        }
        Ok((bind_socket(path, self.perms)?, false))
    }

    fn start_server(&mut self, cfg: ServerConfig, listener: UnixListener, activated: bool) {
        let name = cfg.name.clone();
        let path = socket_path(&self.dir, &name);
        let (params, params_rx) = watch::channel(session_limits(&cfg, &self.memory));
        let entry_cfg = Arc::new(cfg.clone());
        support::observe::readiness().declare(&name, cfg.required);
        self.keep_listener(&name, &listener, activated);
        let adoption = self.adoptions.remove(&name);
        let (handle, task) = server::start_adopting(cfg, adoption);
        let accept = self.accepting.child_token();
        info!(server = %name, socket = %path.display(), activated, "listening");
        let http = self.start_http(&entry_cfg, &accept);
        let seats = Arc::new(actor::seats::Seats::default());
        self.resume_clients(&name, &handle, &params_rx, &seats);
        self.tracker.spawn(accept_loop(
            listener,
            name.clone(),
            handle.clone(),
            params_rx,
            self.shared.clone(),
            seats.clone(),
            accept.clone(),
            self.connections.clone(),
            self.tracker.clone(),
        ));
        self.registry.insert(
            &name,
            Entry {
                handle: handle.clone(),
                cfg: entry_cfg,
                sources: None,
                seats: Some(seats.clone()),
            },
        );
        self.servers.insert(
            name,
            Running {
                handle,
                task,
                accept,
                params,
                path,
                activated,
                http,
                seats,
            },
        );
    }

    /// Stops a server removed from the configuration: no more accepts, socket removed, child
    /// stopped in the background (joined at shutdown).
    async fn retire(&mut self, name: &str) {
        let Some(r) = self.servers.remove(name) else {
            return;
        };
        self.registry.remove(name);
        self.listening.remove(name);
        self.listening.remove(&format!("http:{name}"));
        support::observe::readiness().forget(name);
        r.accept.cancel();
        if !r.activated {
            let _ = std::fs::remove_file(&r.path);
        }
        if let Some((p, _)) = &r.http {
            let _ = std::fs::remove_file(p);
        }
        self.front.set_token(name, None);
        let (tx, _rx) = oneshot::channel();
        let _ = tokio::time::timeout(
            COMMAND_TIMEOUT,
            r.handle.commands.send(Command::Shutdown(tx)),
        )
        .await;
        info!(server = %name, "removed from the configuration: stopping it");
        self.retiring.push((name.to_string(), r.handle, r.task));
    }

    /// Runs one reload with its notifications and log line.
    async fn reload(&mut self) -> ReloadOutcome {
        self.notifier.reloading();
        self.retiring.retain(|(_, _, t)| !t.is_finished());
        let outcome = self.apply_reload().await;
        match &outcome {
            Ok(r) => info!(
                message_id = MSG_RELOADED,
                added = ?r.added,
                removed = ?r.removed,
                changed = ?r.changed,
                unchanged = r.unchanged.len(),
                "configuration reloaded from {}: {} added, {} removed, {} changed, {} unchanged",
                self.config.path.display(),
                r.added.len(),
                r.removed.len(),
                r.changed.len(),
                r.unchanged.len()
            ),
            Err(e) => error!(
                message_id = MSG_RELOAD_FAILED,
                reason = %e.message,
                "reload failed; the old configuration keeps running: {}",
                e.message
            ),
        }
        // Never linger in "reloading", also after a failed reload (F27).
        self.notifier.ready();
        outcome
    }

    async fn apply_reload(&mut self) -> ReloadOutcome {
        let new = support::config::load(&self.config.path).map_err(|e| ErrorBody {
            kind: ErrorKind::InvalidConfig,
            message: e.to_string(),
        })?;
        if let Some(w) = support::config::exposure(&new) {
            warn!("{w}");
        }
        for w in &new.warnings {
            warn!("{w}");
        }
        let (old_s, new_s) = (&self.config.supervisor, &new.supervisor);
        if old_s.socket_dir != new_s.socket_dir
            || old_s.socket_mode != new_s.socket_mode
            || old_s.socket_group != new_s.socket_group
        {
            warn!("socket_dir, socket_mode and socket_group changes take effect when the supervisor restarts");
        }
        if old_s.otel != new_s.otel || old_s.limits != new_s.limits {
            warn!("otel_* and limits changes take effect when the supervisor restarts");
        }
        let mut report = ReloadReport::default();
        for (name, cfg) in &new.servers {
            match self.config.servers.get(name) {
                None => report.added.push(name.clone()),
                Some(old) if old.same_child(cfg) => report.unchanged.push(name.clone()),
                Some(_) => report.changed.push(name.clone()),
            }
        }
        report.removed = self
            .config
            .servers
            .keys()
            .filter(|n| !new.servers.contains_key(*n))
            .cloned()
            .collect();
        // Endpoints (issue 31): the same report, by name.
        let mut endpoints_added = Vec::new();
        let mut endpoints_removed = Vec::new();
        for (name, cfg) in &new.endpoints {
            match self.config.endpoints.get(name) {
                None => endpoints_added.push(name.clone()),
                Some(old) if old == cfg => report.unchanged.push(name.clone()),
                Some(_) => report.changed.push(name.clone()),
            }
        }
        for name in self.config.endpoints.keys() {
            if !new.endpoints.contains_key(name) {
                endpoints_removed.push(name.clone());
            }
        }
        report.added.extend(endpoints_added.iter().cloned());
        report.removed.extend(endpoints_removed.iter().cloned());
        // The records' directory, if a server now needs it, is checked before anything changes.
        prepare_records_dir(&new, &self.dir).map_err(|e| ErrorBody {
            kind: ErrorKind::InvalidConfig,
            message: format!("{e:#}"),
        })?;
        // Bind every new socket first: if one cannot be bound, nothing changes.
        let mut bound = Vec::new();
        for name in &report.added {
            if endpoints_added.contains(name) {
                // Bound below, after the servers (their names may not collide).
                continue;
            }
            let path = socket_path(&self.dir, name);
            match self.listener_for(name, &path) {
                Ok((l, activated)) => bound.push((name.clone(), l, activated)),
                Err(e) => {
                    for (n, l, activated) in bound {
                        drop(l);
                        if !activated {
                            let _ = std::fs::remove_file(socket_path(&self.dir, &n));
                        }
                    }
                    return Err(ErrorBody {
                        kind: ErrorKind::Failed,
                        message: format!("cannot add server `{name}`: {e:#}"),
                    });
                }
            }
        }
        let mut bound_endpoints = Vec::new();
        for name in &endpoints_added {
            let path = socket_path(&self.dir, name);
            match self.listener_for(name, &path) {
                Ok((l, activated)) => bound_endpoints.push((name.clone(), l, activated)),
                Err(e) => {
                    for (n, l, activated) in bound.into_iter().chain(bound_endpoints) {
                        drop(l);
                        if !activated {
                            let _ = std::fs::remove_file(socket_path(&self.dir, &n));
                        }
                    }
                    return Err(ErrorBody {
                        kind: ErrorKind::Failed,
                        message: format!("cannot add endpoint `{name}`: {e:#}"),
                    });
                }
            }
        }
        let revised = client_table(&new);
        *self
            .shared
            .clients
            .write()
            .unwrap_or_else(|p| p.into_inner()) = revised.clone();
        *self
            .shared
            .operators
            .write()
            .unwrap_or_else(|p| p.into_inner()) = operator_access(new_s);
        *self
            .shared
            .viewers
            .write()
            .unwrap_or_else(|p| p.into_inner()) = viewer_access(new_s);
        support::observe::history::set_objective(new_s.availability_objective);
        // Live sessions of peers no longer allowed end now (issue 14 §2), and their HTTP
        // connections on NAME.http.sock close (issue 26 §5).
        self.shared.close_revoked_http();
        for (name, access) in &revised {
            if let Some(r) = self.servers.get(name) {
                if r.handle
                    .commands
                    .try_send(Command::Permit(access.clone()))
                    .is_err()
                {
                    warn!(server = %name, "the server's command queue is full: sessions no longer allowed stay open until they close");
                }
            }
        }
        self.permit_endpoints(&revised);
        self.shared
            .max_clients
            .store(new_s.max_clients, Ordering::Relaxed);
        for name in &endpoints_removed {
            self.retire_endpoint(name).await;
            info!(endpoint = %name, "removed from the configuration");
        }
        for name in &report.removed {
            if !endpoints_removed.contains(name) {
                self.retire(name).await;
            }
        }
        for name in &report.changed {
            if let Some(cfg) = new.servers.get(name).cloned() {
                self.reconfigure(name, cfg).await;
            }
        }
        for (name, listener, activated) in bound {
            if let Some(cfg) = new.servers.get(&name).cloned() {
                self.start_server(cfg, listener, activated);
            }
        }
        // Keep the socket directory the daemon runs with.
        let mut new = new;
        new.supervisor.socket_dir = self.dir.clone();
        if self.http_tcp && new.supervisor.http.listen != self.config.supervisor.http.listen {
            warn!("an http_listen change takes effect when the supervisor restarts");
            new.supervisor.http.listen = self.config.supervisor.http.listen;
        }
        self.front.set_settings(new.supervisor.http.clone());
        // Tokens are read again, so a deleted (or rewritten) token file rotates the token.
        for cfg in new.servers.values().filter(|c| c.http) {
            self.load_token(cfg);
        }
        self.config = new;
        // Endpoints last: they join the servers as they now run.
        self.refresh_endpoints();
        for (name, listener, activated) in bound_endpoints {
            if let Some(cfg) = self.config.endpoints.get(&name).cloned() {
                self.start_endpoint(cfg, listener, activated);
            }
        }
        if let Err(e) = self.ensure_http_listener().await {
            error!(error = %format!("{e:#}"), "the HTTP endpoint's TCP side is not served");
        }
        Ok(report)
    }

    /// Gives a running server its changed configuration: session limits at once, the actor
    /// through `Command::Reconfigure` (it restarts the child when the command changed).
    async fn reconfigure(&mut self, name: &str, cfg: ServerConfig) {
        let Some(r) = self.servers.get(name) else {
            return;
        };
        let _ = r.params.send(session_limits(&cfg, &self.memory));
        let http_changed = self
            .registry
            .get(name)
            .is_none_or(|e| e.cfg.http != cfg.http || e.cfg.http_token_file != cfg.http_token_file);
        if http_changed {
            let accept = r.accept.clone();
            if let Some((p, stop)) = self.servers.get_mut(name).and_then(|r| r.http.take()) {
                stop.cancel();
                let _ = std::fs::remove_file(p);
            }
            let http = self.start_http(&cfg, &accept);
            if let Some(r) = self.servers.get_mut(name) {
                r.http = http;
            }
        }
        let Some(r) = self.servers.get(name) else {
            return;
        };
        support::observe::readiness().declare(name, cfg.required);
        self.registry.insert(
            name,
            Entry {
                handle: r.handle.clone(),
                cfg: Arc::new(cfg.clone()),
                sources: None,
                seats: Some(r.seats.clone()),
            },
        );
        let (tx, rx) = oneshot::channel();
        let sent = tokio::time::timeout(
            COMMAND_TIMEOUT,
            r.handle
                .commands
                .send(Command::Reconfigure(Box::new(cfg), tx)),
        )
        .await;
        if matches!(sent, Ok(Ok(()))) {
            let _ = tokio::time::timeout(COMMAND_TIMEOUT, rx).await;
        } else {
            warn!(server = %name, "the server did not take its new configuration in time");
        }
    }
}

/// Checks `state_dir` ([`prepare_state_dir`]) when a server of `config` keeps a record there
/// (`start = "on-demand"`, or HTTP sessions: `http = true` on a server or an endpoint) and it
/// is not `socket_dir` (checked already).
fn prepare_records_dir(config: &Config, socket_dir: &Path) -> Result<()> {
    let dir = &config.supervisor.state_dir;
    let needed = config
        .servers
        .values()
        .any(|s| s.start == support::config::StartMode::OnDemand || s.http)
        || config.endpoints.values().any(|e| e.front.http);
    if needed && dir != socket_dir {
        prepare_state_dir(dir)?;
    }
    Ok(())
}

/// Who may connect to each socket: every server's and every endpoint's allow-lists (or
/// `[supervisor]`'s).
fn client_table(config: &Config) -> HashMap<String, Access> {
    let s = &config.supervisor;
    config
        .servers
        .iter()
        .map(|(n, c)| (n.clone(), server_access(s, c)))
        .chain(
            config
                .endpoints
                .iter()
                .map(|(n, e)| (n.clone(), server_access(s, &e.front))),
        )
        .collect()
}

/// A server's per-connection limits, with the daemon-wide client memory budget.
fn session_limits(
    cfg: &ServerConfig,
    memory: &Arc<session::MemoryBudget>,
) -> session::SessionLimits {
    session::SessionLimits {
        queue: cfg.client_queue,
        max_message: cfg.max_message_size,
        max_depth: cfg.max_message_depth,
        memory: memory.clone(),
        stall: cfg.client_stall_timeout,
        idle: cfg.client_idle_timeout,
        first_message: cfg.first_message_timeout,
        per_uid: cfg.max_clients_per_uid,
        server: Arc::from(cfg.name.as_str()),
    }
}

/// Recomputes the `STATUS=` line every [`STATUS_EVERY`] and sends it when it changed.
async fn status_loop(
    registry: Registry,
    notifier: Notifier,
    mut last: String,
    stop: CancellationToken,
) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(STATUS_EVERY) => {}
            _ = stop.cancelled() => return,
        }
        let line = summary(&registry).await;
        if line != last {
            notifier.status(&line);
            last = line;
        }
    }
}

async fn summary(registry: &Registry) -> String {
    let mut statuses = Vec::new();
    for (_, e) in registry.all() {
        if let Some(s) = ctl::query(&e.handle).await {
            statuses.push(s);
        }
    }
    actor::server::summary(&statuses)
}

/// Runs the daemon until SIGTERM/SIGINT. Returns after every child is stopped.
///
/// `plumbing` is what systemd passed (read from the environment before the runtime started):
/// the notify socket, the watchdog period, socket-activated listeners.
pub async fn run(
    config: Config,
    mut plumbing: Plumbing,
    handover: Option<crate::handover::Record>,
) -> Result<()> {
    for note in &plumbing.notes {
        warn!("{note}");
    }
    if let Some(w) = support::config::exposure(&config) {
        warn!("{w}");
    }
    for w in &config.warnings {
        warn!("{w}");
    }
    let notifier = Notifier::new(plumbing.notify_socket.as_ref()).unwrap_or_else(|e| {
        warn!(error = %e, "NOTIFY_SOCKET is unusable; not notifying systemd");
        Notifier::default()
    });
    let mut handover = handover;
    if let Some(r) = &handover {
        base::reaper::resume(&r.run_token, r.instances);
        match &r.refused {
            None => info!(
                upgrades = r.upgrades,
                "upgraded in place: adopting what the previous image handed over"
            ),
            Some(why) => {
                warn!(upgrades = r.upgrades, reason = %why, "the upgrade was refused; this image runs again and adopts what it handed over")
            }
        }
    }
    // Inherited children are ours before the orphan sweep starts.
    for s in handover.iter().flat_map(|r| &r.servers) {
        if let Some(c) = &s.child {
            base::reaper::spawn_guard().insert(c.pid as i32);
        }
    }
    // Before any child exists: as PID 1 or a subreaper, orphans below us are ours to reap.
    let role = base::reaper::setup(config.supervisor.subreaper);
    if role.adopts() {
        info!(
            role = role.as_str(),
            "reaping orphaned descendants (PID 1 or child subreaper)"
        );
    }
    // Before any child exists too: a cgroup v2 subtree for the limits, or none (issue 18 §3).
    upstream::child::limits::setup(config.supervisor.limits)?;
    let sweep = CancellationToken::new();
    let sweeper = tokio::spawn(base::reaper::run(sweep.clone()));
    let dir = config.supervisor.socket_dir.clone();
    let perms = SocketPerms::from(&config.supervisor);
    prepare_socket_dir(&dir, perms)?;
    let mut adopted = handover.take().map(upgrade::adopt);
    let lock = match &adopted {
        // The previous image's lock, on the same open file: still held.
        Some(a) => nix::fcntl::Flock::lock(
            std::fs::File::from(a.lock.try_clone()?),
            nix::fcntl::FlockArg::LockExclusiveNonblock,
        )
        .map_err(|(_, e)| anyhow::anyhow!("cannot keep the handed-over lock: {e}"))?,
        None => lock_socket_dir(&dir)?,
    };
    prepare_records_dir(&config, &dir)?;
    // With the lock held and before any child exists: what a crashed run left goes (not
    // after an upgrade in place: the run goes on, its children are adopted).
    // Children a crashed run left in systemd's file descriptor store are re-adopted (issue
    // 32 §2) when they are still the instances it recorded; anything else of that run ends.
    if plumbing.fd_store.is_some() {
        upstream::child::fdstore::enable(notifier.clone());
    }
    let (stored, notes) = upstream::child::fdstore::collect(&mut plumbing.listeners);
    for note in notes {
        warn!("{note}");
    }
    let mut revived = HashMap::new();
    if adopted.is_none() {
        revived = previous::end_previous_run(&dir, stored, &config).await;
    }
    // Before any actor exists: each reads once whether traces are on.
    if let Some(otel) = &config.supervisor.otel {
        support::observe::trace::start(otel)?;
    }
    let mut activated = HashMap::new();
    for (name, fd) in plumbing.listeners.drain(..) {
        if name != control::SOCKET_NAME
            && !config.servers.contains_key(&name)
            && !config.endpoints.contains_key(&name)
        {
            warn!(socket = %name, "a socket-activated descriptor matches no configured server; keeping it for a later reload");
        }
        activated.insert(name, fd);
    }
    let registry = Registry::default();
    let connections = CancellationToken::new();
    let memory = Arc::new(session::MemoryBudget::new(config.supervisor.client_memory));
    support::observe::history::set_objective(config.supervisor.availability_objective);
    let mut daemon = Daemon {
        dir: dir.clone(),
        memory: memory.clone(),
        perms,
        shared: Arc::new(Shared {
            clients: RwLock::new(client_table(&config)),
            operators: RwLock::new(operator_access(&config.supervisor)),
            viewers: RwLock::new(viewer_access(&config.supervisor)),
            refused_log: std::sync::Mutex::new(support::logging::LogBudget::new(
                20,
                Duration::from_secs(10),
            )),
            max_clients: AtomicUsize::new(config.supervisor.max_clients),
            http_peers: Default::default(),
            parking: Default::default(),
        }),
        registry: registry.clone(),
        servers: BTreeMap::new(),
        endpoints: BTreeMap::new(),
        retiring: Vec::new(),
        activated,
        accepting: CancellationToken::new(),
        connections: connections.clone(),
        tracker: TaskTracker::new(),
        notifier: notifier.clone(),
        front: front::http::Front::new(
            registry.clone(),
            config.supervisor.http.clone(),
            memory,
            connections.clone(),
        ),
        http_tcp: false,
        image: upgrade::Image {
            binary: adopted
                .as_ref()
                .map_or_else(upgrade::started_as, |a| a.image.binary.clone()),
            argv: adopted.as_ref().map_or_else(
                || {
                    std::env::args_os()
                        .map(|a| a.to_string_lossy().into_owned())
                        .collect()
                },
                |a| a.image.argv.clone(),
            ),
            config_text: adopted.as_ref().map_or_else(
                || std::fs::read_to_string(&config.path).unwrap_or_default(),
                |a| a.image.config_text.clone(),
            ),
            notify_socket: plumbing
                .notify_socket
                .as_ref()
                .map(|s| s.to_string_lossy().into_owned()),
            watchdog_usec: plumbing
                .watchdog
                .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX)),
            fd_store: plumbing.fd_store,
            upgrades: adopted.as_ref().map_or(0, |a| a.image.upgrades),
        },
        listening: BTreeMap::new(),
        upgraded: control::Upgraded {
            pid: std::process::id(),
            upgrades: adopted.as_ref().map_or(0, |a| a.image.upgrades),
            refused: adopted.as_ref().and_then(|a| a.refused.clone()),
        },
        inherited: std::sync::Mutex::new(
            adopted.as_ref().map(|a| a.listeners()).unwrap_or_default(),
        ),
        adopted_http: adopted
            .as_mut()
            .map(|a| std::mem::take(&mut a.http))
            .unwrap_or_default(),
        adopted_clients: adopted
            .as_mut()
            .map(|a| std::mem::take(&mut a.clients))
            .unwrap_or_default(),
        adoptions: adopted.map(|a| a.servers).unwrap_or(revived),
        config,
    };
    let listeners = daemon.bind_all()?;
    // Signal handlers before READY=1 (a SIGHUP from systemd must never kill us).
    let mut signals = Signals {
        term: signal(SignalKind::terminate())?,
        int: signal(SignalKind::interrupt())?,
        hup: signal(SignalKind::hangup())?,
    };
    let (reload_tx, reload_rx) = mpsc::channel::<oneshot::Sender<ReloadOutcome>>(64);
    let (upgrade_tx, upgrade_rx) = mpsc::channel::<oneshot::Sender<String>>(4);
    let control_activated = daemon.start_all(listeners, reload_tx, upgrade_tx).await?;
    let mut watchdog = Watchdog::new(plumbing.watchdog);
    daemon
        .main_loop(&mut signals, (reload_rx, upgrade_rx), &mut watchdog, &*lock)
        .await;
    daemon.shutdown(&mut signals, &mut watchdog).await;
    if !control_activated {
        let _ = std::fs::remove_file(control::socket_path(&dir));
    }
    // Every child has exited; whatever its descendants left (escaped, or adopted) goes now.
    let _ = tokio::task::spawn_blocking(|| base::reaper::finish(REAP_AT_EXIT)).await;
    sweep.cancel();
    let _ = sweeper.await;
    info!("stopped");
    Ok(())
}

/// The signals the main loop and the shutdown listen to.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

/// `WATCHDOG=1` every half of systemd's `WatchdogSec`, from the main loop (R18).
struct Watchdog {
    every: Option<Duration>,
    tick: tokio::time::Interval,
}

impl Watchdog {
    fn new(watchdog: Option<Duration>) -> Self {
        let every = watchdog.map(|w| (w / 2).max(Duration::from_millis(1)));
        let mut tick = tokio::time::interval(every.unwrap_or(Duration::from_secs(3600)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        if let Some(p) = every {
            info!(
                every_ms = p.as_millis() as u64,
                "sending WATCHDOG=1 from the main loop"
            );
        }
        Watchdog { every, tick }
    }
}

/// Listeners bound at start: name → (listener, socket-activated).
type Bound = Vec<(String, (UnixListener, bool))>;

impl Daemon {
    /// Binds the control socket and every server's socket first: a live socket or a non-socket
    /// path aborts before any child runs, and removes what was bound.
    fn bind_all(&mut self) -> Result<Bound> {
        let mut listeners = Vec::new();
        let control_path = control::socket_path(&self.dir);
        let bind = |listeners: &mut Bound| -> Result<()> {
            let c = self.listener_for(control::SOCKET_NAME, &control_path)?;
            listeners.push((control::SOCKET_NAME.to_string(), c));
            for name in self.config.servers.keys() {
                let l = self.listener_for(name, &socket_path(&self.dir, name))?;
                listeners.push((name.clone(), l));
            }
            for name in self.config.endpoints.keys() {
                let l = self.listener_for(name, &socket_path(&self.dir, name))?;
                listeners.push((name.clone(), l));
            }
            Ok(())
        };
        if let Err(e) = bind(&mut listeners) {
            for (name, (l, act)) in listeners {
                drop(l);
                if !act {
                    let _ = std::fs::remove_file(self.dir.join(format!("{name}.sock")));
                }
            }
            return Err(e);
        }
        Ok(listeners)
    }

    /// Starts the control loop, every server and the metrics listener, then says READY=1.
    /// Returns whether the control socket was socket-activated.
    async fn start_all(
        &mut self,
        listeners: Bound,
        reload_tx: mpsc::Sender<oneshot::Sender<ReloadOutcome>>,
        upgrade_tx: mpsc::Sender<oneshot::Sender<String>>,
    ) -> Result<bool> {
        let mut control_activated = false;
        let mut endpoints = Vec::new();
        let restore = self.config.servers.values().any(|s| s.http)
            || self.config.endpoints.values().any(|e| e.front.http);
        if restore {
            // `NAME.http.sock` accepts as each server starts: requests naming a session wait
            // for the restore below.
            self.front.expect_restore();
        }
        for (name, (listener, act)) in listeners {
            if name == control::SOCKET_NAME {
                control_activated = act;
                let control_path = control::socket_path(&self.dir);
                info!(socket = %control_path.display(), activated = act, "control socket listening");
                self.keep_listener(control::SOCKET_NAME, &listener, act);
                self.tracker.spawn(control_loop(
                    listener,
                    ctl::Ctx {
                        registry: self.registry.clone(),
                        reloads: reload_tx.clone(),
                        upgrades: upgrade_tx.clone(),
                        upgraded: self.upgraded.clone(),
                    },
                    self.shared.clone(),
                    self.accepting.clone(),
                    self.connections.clone(),
                    self.tracker.clone(),
                ));
            } else if let Some(cfg) = self.config.servers.get(&name).cloned() {
                self.start_server(cfg, listener, act);
            } else if let Some(cfg) = self.config.endpoints.get(&name).cloned() {
                endpoints.push((cfg, listener, act));
            }
        }
        // After every server: an endpoint joins their actors.
        for (cfg, listener, act) in endpoints {
            self.start_endpoint(cfg, listener, act);
        }
        // Sessions of the last run, before the TCP listener (issue 32 §2).
        if restore {
            self.front
                .restore_sessions(&self.config.supervisor.state_dir, &self.dir)
                .await;
        }
        self.ensure_http_listener().await?;
        // Handed-over HTTP connections no listener took (their server is gone) close now.
        self.adopted_http.clear();
        if let Some(addr) = self.config.supervisor.metrics_listen {
            let listener = self
                .tcp_listener("metrics", addr)
                .await
                .with_context(|| format!("cannot listen for metrics on {addr}"))?;
            info!(%addr, "serving GET /metrics, /healthz and /readyz");
            self.tracker.spawn(support::observe::serve_http(
                listener,
                self.accepting.clone(),
            ));
        }
        // A status round trip proves each actor has spawned its child (it spawns before it
        // reads its inbox), so READY=1 means "sockets bound, children spawned" (R1).
        let status_line = summary(&self.registry).await;
        support::observe::readiness().set_bound(true);
        self.notifier.ready_with_status(&status_line);
        info!(servers = self.servers.len(), config = %self.config.path.display(), "mcp-supervisor running");
        if self.notifier.enabled() {
            self.tracker.spawn(status_loop(
                self.registry.clone(),
                self.notifier.clone(),
                status_line,
                self.accepting.clone(),
            ));
        }
        Ok(control_activated)
    }

    /// The main loop: signals, coalesced reloads (at most [`RELOAD_BURST`] per
    /// [`RELOAD_WINDOW`]), the watchdog. Returns on SIGTERM or SIGINT.
    async fn main_loop(
        &mut self,
        signals: &mut Signals,
        (mut reload_rx, mut upgrade_rx): (
            mpsc::Receiver<oneshot::Sender<ReloadOutcome>>,
            mpsc::Receiver<oneshot::Sender<String>>,
        ),
        watchdog: &mut Watchdog,
        lock: &impl std::os::fd::AsRawFd,
    ) {
        let mut gate = ReloadGate::default();
        let mut pending = false;
        let mut waiters: Vec<oneshot::Sender<ReloadOutcome>> = Vec::new();
        loop {
            let at = gate.next_allowed(Instant::now());
            tokio::select! {
                _ = signals.term.recv() => { info!("SIGTERM: stopping"); break; }
                _ = signals.int.recv() => { info!("SIGINT: stopping"); break; }
                _ = signals.hup.recv() => {
                    if !pending {
                        info!("SIGHUP: reloading the configuration");
                    }
                    pending = true;
                }
                Some(w) = upgrade_rx.recv() => {
                    info!("upgrade requested on the control socket");
                    let why = self.upgrade(lock).await;
                    warn!(reason = %why, "upgrade refused; serving on");
                    let _ = w.send(why);
                }
                Some(w) = reload_rx.recv() => {
                    if !pending {
                        info!("reload requested on the control socket");
                    }
                    pending = true;
                    waiters.push(w);
                }
                _ = tokio::time::sleep_until(at.into()), if pending => {
                    pending = false;
                    gate.record(Instant::now());
                    let outcome = self.reload().await;
                    for w in waiters.drain(..) {
                        let _ = w.send(outcome.clone());
                    }
                }
                _ = watchdog.tick.tick(), if watchdog.every.is_some() => self.notifier.watchdog(),
            }
        }
        self.notifier.stopping();
        reload_rx.close();
    }

    /// Shutdown (F24-F25): stop accepting, stop every child in parallel through its ladder
    /// (a second signal SIGKILLs every group at once), then close connections and sockets.
    async fn shutdown(&mut self, signals: &mut Signals, watchdog: &mut Watchdog) {
        support::observe::readiness().set_stopping();
        // The HTTP sessions this shutdown ends stay recorded, for the next start (issue 32).
        self.front.stop_recording();
        self.accepting.cancel();
        self.stop_endpoints().await;
        let mut stops = Vec::new();
        for r in self.servers.values() {
            let (tx, rx) = oneshot::channel();
            let _ = r.handle.commands.send(Command::Shutdown(tx)).await;
            stops.push(rx);
        }
        let mut retiring = std::mem::take(&mut self.retiring);
        let retiring_kill: Vec<_> = retiring
            .iter()
            .map(|(_, h, t)| (h.clone(), t.abort_handle()))
            .collect();
        let all_stopped = async {
            for rx in stops {
                let _ = rx.await;
            }
            for (_, _, t) in &mut retiring {
                let _ = t.await;
            }
        };
        tokio::pin!(all_stopped);
        let forced = loop {
            tokio::select! {
                _ = &mut all_stopped => break false,
                _ = signals.term.recv() => break true,
                _ = signals.int.recv() => break true,
                // The stop ladder can take seconds; keep the watchdog fed meanwhile.
                _ = watchdog.tick.tick(), if watchdog.every.is_some() => self.notifier.watchdog(),
            }
        };
        if forced {
            warn!("second signal: killing every child process group now");
            for r in self.servers.values() {
                r.handle.kill_now();
            }
            for (h, t) in &retiring_kill {
                h.kill_now();
                t.abort();
            }
        }
        self.connections.cancel();
        let servers = std::mem::take(&mut self.servers);
        for (name, r) in servers {
            if forced {
                r.task.abort();
            } else if let Err(e) = r.task.await {
                error!(server = %name, error = %e, "server task failed");
            }
            if !r.activated {
                let _ = std::fs::remove_file(&r.path);
            }
            if let Some((p, _)) = &r.http {
                let _ = std::fs::remove_file(p);
            }
        }
        if self.http_tcp {
            let _ = std::fs::remove_file(self.dir.join(front::http::url::ADDR_FILE));
        }
        self.tracker.close();
        if !forced {
            self.tracker.wait().await;
        }
    }
}

#[cfg(test)]
mod tests;
