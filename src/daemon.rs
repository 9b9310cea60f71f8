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

use crate::config::{Config, ServerConfig, SupervisorConfig};
use crate::control::server::{self as ctl, Entry, Registry, ReloadOutcome};
use crate::control::{self, ErrorBody, ErrorKind, ReloadReport};
use crate::logging::{MSG_REFUSED, MSG_RELOADED, MSG_RELOAD_FAILED};
use crate::mux::server::{self, Command, ServerHandle};
use crate::mux::session::{self, Peer};
use crate::systemd::{self, Notifier, Plumbing};
use anyhow::{bail, Context, Result};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::os::fd::OwnedFd;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};
use tokio::net::{UnixListener, UnixStream};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, error, info, warn};

/// At most this many reloads run per [`RELOAD_WINDOW`] (R3); more requests wait, coalesced.
pub const RELOAD_BURST: usize = 3;
/// See [`RELOAD_BURST`].
pub const RELOAD_WINDOW: Duration = Duration::from_secs(10);
/// How often the `STATUS=` line is recomputed (it is sent only when it changed).
const STATUS_EVERY: Duration = Duration::from_secs(1);
/// How long the main loop waits for an actor to take a command during a reload.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(5);

/// Another supervisor owns this socket directory: `run` exits with code 100 and touches
/// nothing of the other's.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct AlreadyRunning(pub String);

/// Mode and group of the sockets we bind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SocketPerms {
    /// File mode (default 0600).
    pub mode: u32,
    /// Group to give them, if any.
    pub group: Option<u32>,
}

impl From<&SupervisorConfig> for SocketPerms {
    fn from(s: &SupervisorConfig) -> Self {
        SocketPerms {
            mode: s.socket_mode,
            group: s.socket_group,
        }
    }
}

impl Default for SocketPerms {
    fn default() -> Self {
        SocketPerms {
            mode: 0o600,
            group: None,
        }
    }
}

/// Creates `dir` when missing: mode 0700, or 0710 (0711 when the sockets are open to others)
/// with `perms.group` when the sockets are shared with a group, so the group can reach them.
/// An existing directory is used as it is, unless anyone may write to it (F31).
pub fn prepare_socket_dir(dir: &Path, perms: SocketPerms) -> Result<()> {
    if !dir.exists() {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create socket directory {}", dir.display()))?;
        let mut mode = 0o700;
        if perms.group.is_some() && perms.mode & 0o060 != 0 {
            mode |= 0o010;
        }
        if perms.mode & 0o006 != 0 {
            mode |= 0o011;
        }
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))
            .with_context(|| format!("cannot set mode {mode:04o} on {}", dir.display()))?;
        if let Some(g) = perms.group {
            nix::unistd::chown(dir, None, Some(nix::unistd::Gid::from_raw(g)))
                .with_context(|| format!("cannot give {} to group {g}", dir.display()))?;
        }
    } else if !dir.is_dir() {
        bail!("socket_dir {} exists and is not a directory", dir.display());
    }
    let mode = std::fs::metadata(dir)
        .with_context(|| format!("cannot inspect {}", dir.display()))?
        .permissions()
        .mode();
    if mode & 0o002 != 0 && mode & 0o1000 == 0 {
        bail!(
            "socket_dir {} is writable by everyone (mode {:04o}); refusing to put sockets there",
            dir.display(),
            mode & 0o7777
        );
    }
    Ok(())
}

/// Takes `<dir>/.lock` (flock, held until exit). A held lock means another supervisor owns
/// this directory: [`AlreadyRunning`].
pub fn lock_socket_dir(dir: &Path) -> Result<nix::fcntl::Flock<std::fs::File>> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join(".lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("cannot open the lock file {}", path.display()))?;
    match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock) {
        Ok(lock) => Ok(lock),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => Err(AlreadyRunning(format!(
            "another mcp-supervisor is already running on socket_dir {} (it holds {}); leaving its sockets alone",
            dir.display(),
            path.display()
        ))
        .into()),
        Err((_, e)) => Err(e).with_context(|| format!("cannot lock {}", path.display())),
    }
}

/// Binds `path` with `perms`. A stale socket (connect refused) is replaced; a live one is
/// [`AlreadyRunning`]; a path that is not a socket is refused and left alone (F29-F31).
pub fn bind_socket(path: &Path, perms: SocketPerms) -> Result<UnixListener> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {
            match std::os::unix::net::UnixStream::connect(path) {
                Ok(_) => {
                    return Err(AlreadyRunning(format!(
                        "{} is in use by a running process (another mcp-supervisor?); refusing to start",
                        path.display()
                    ))
                    .into())
                }
                Err(_) => {
                    info!(path = %path.display(), "replacing a stale socket");
                    std::fs::remove_file(path).with_context(|| {
                        format!("cannot remove stale socket {}", path.display())
                    })?;
                }
            }
        }
        Ok(_) => bail!(
            "{} exists and is not a socket; refusing to replace it",
            path.display()
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("cannot inspect {}", path.display())),
    }
    let listener =
        UnixListener::bind(path).with_context(|| format!("cannot bind {}", path.display()))?;
    let setup = || -> Result<()> {
        if let Some(g) = perms.group {
            nix::unistd::chown(path, None, Some(nix::unistd::Gid::from_raw(g)))
                .with_context(|| format!("cannot give {} to group {g}", path.display()))?;
        }
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(perms.mode))
            .with_context(|| format!("cannot set mode {:04o} on {}", perms.mode, path.display()))
    };
    if let Err(e) = setup() {
        let _ = std::fs::remove_file(path);
        return Err(e);
    }
    Ok(listener)
}

/// The socket of server `name` under `dir`.
pub fn socket_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.sock"))
}

/// Who may connect: our own uid, root, and the configured allow-lists (issue 7 §4, R20).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Access {
    /// Our effective uid.
    pub me: u32,
    /// `allowed_uids`.
    pub uids: Vec<u32>,
    /// `allowed_gids` (matched against the peer's primary gid).
    pub gids: Vec<u32>,
}

impl Access {
    /// From `[supervisor]`.
    pub fn new(s: &SupervisorConfig) -> Access {
        Access {
            me: nix::unistd::geteuid().as_raw(),
            uids: s.allowed_uids.clone(),
            gids: s.allowed_gids.clone(),
        }
    }

    /// Whether a peer with these credentials may connect.
    pub fn permits(&self, uid: u32, gid: u32) -> bool {
        uid == self.me || uid == 0 || self.uids.contains(&uid) || self.gids.contains(&gid)
    }
}

/// Settings the accept loops read at each accept, so a reload applies them to new
/// connections.
#[derive(Debug)]
struct Shared {
    access: RwLock<Access>,
    max_clients: AtomicUsize,
}

/// What a new session of a server needs: `(client_queue, max_message_size)`.
type SessionParams = (usize, usize);

/// Accepts the next connection that passes the `SO_PEERCRED` check; refused ones are logged
/// (uid, gid, pid) and closed. `None` when `stop` fires.
async fn accept_checked(
    listener: &UnixListener,
    shared: &Shared,
    socket: &str,
    stop: &CancellationToken,
) -> Option<(UnixStream, Peer)> {
    loop {
        let stream = tokio::select! {
            r = listener.accept() => match r {
                Ok((s, _)) => s,
                Err(e) => {
                    warn!(socket, error = %e, "accept failed");
                    // EMFILE and friends: do not spin.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = stop.cancelled() => return None,
        };
        let cred = match stream.peer_cred() {
            Ok(c) => c,
            Err(e) => {
                warn!(socket, error = %e, "cannot read peer credentials; refusing the connection");
                continue;
            }
        };
        let allowed = shared
            .access
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .permits(cred.uid(), cred.gid());
        if !allowed {
            let pid = cred
                .pid()
                .map(|p| p.to_string())
                .unwrap_or_else(|| "?".into());
            warn!(
                message_id = MSG_REFUSED,
                socket,
                peer_uid = cred.uid(),
                peer_gid = cred.gid(),
                peer_pid = cred.pid(),
                "refused a connection from uid {} (pid {pid}): not our uid, not root, not in allowed_uids/allowed_gids",
                cred.uid()
            );
            continue;
        }
        return Some((
            stream,
            Peer {
                uid: cred.uid(),
                pid: cred.pid(),
            },
        ));
    }
}

#[allow(clippy::too_many_arguments)]
async fn accept_loop(
    listener: UnixListener,
    name: String,
    server: ServerHandle,
    params: watch::Receiver<SessionParams>,
    shared: Arc<Shared>,
    stop: CancellationToken,
    connections: CancellationToken,
    tracker: TaskTracker,
) {
    let live = Arc::new(AtomicUsize::new(0));
    while let Some((stream, peer)) = accept_checked(&listener, &shared, &name, &stop).await {
        let max_clients = shared.max_clients.load(Ordering::Relaxed);
        if live.load(Ordering::Relaxed) >= max_clients {
            warn!(server = %name, max_clients, "refused a connection: max_clients reached");
            continue;
        }
        let (queue, max_message) = *params.borrow();
        let events = server.sessions.clone();
        let token = connections.clone();
        let live = live.clone();
        live.fetch_add(1, Ordering::Relaxed);
        tracker.spawn(async move {
            session::run(stream, peer, events, queue, max_message, token).await;
            live.fetch_sub(1, Ordering::Relaxed);
        });
    }
}

async fn control_loop(
    listener: UnixListener,
    ctx: ctl::Ctx,
    shared: Arc<Shared>,
    stop: CancellationToken,
    connections: CancellationToken,
    tracker: TaskTracker,
) {
    while let Some((stream, peer)) =
        accept_checked(&listener, &shared, control::SOCKET_NAME, &stop).await
    {
        debug!(
            peer_uid = peer.uid,
            peer_pid = peer.pid,
            "control connection"
        );
        tracker.spawn(ctl::serve(stream, ctx.clone(), connections.clone()));
    }
}

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
            Some(t) => (*t + RELOAD_WINDOW).max(now),
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
}

/// The daemon's state, owned by the main loop.
struct Daemon {
    config: Config,
    dir: PathBuf,
    perms: SocketPerms,
    shared: Arc<Shared>,
    registry: Registry,
    servers: BTreeMap<String, Running>,
    /// Removed by a reload and still stopping.
    retiring: Vec<(String, ServerHandle, JoinHandle<()>)>,
    /// Socket-activated descriptors by name; a dup of one is used for each listener, so a
    /// server removed and added again by reloads gets its socket back.
    activated: HashMap<String, OwnedFd>,
    accepting: CancellationToken,
    connections: CancellationToken,
    tracker: TaskTracker,
    notifier: Notifier,
}

impl Daemon {
    /// A listener for `name` at `path`: the socket-activated one when systemd passed it,
    /// else a freshly bound socket. Returns whether it was activated.
    fn listener_for(&self, name: &str, path: &Path) -> Result<(UnixListener, bool)> {
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
        let (params, params_rx) = watch::channel((cfg.client_queue, cfg.max_message_size));
        let entry_cfg = Arc::new(cfg.clone());
        let (handle, task) = server::start(cfg);
        let accept = self.accepting.child_token();
        info!(server = %name, socket = %path.display(), activated, "listening");
        self.tracker.spawn(accept_loop(
            listener,
            name.clone(),
            handle.clone(),
            params_rx,
            self.shared.clone(),
            accept.clone(),
            self.connections.clone(),
            self.tracker.clone(),
        ));
        self.registry.insert(
            &name,
            Entry {
                handle: handle.clone(),
                cfg: entry_cfg,
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
        r.accept.cancel();
        if !r.activated {
            let _ = std::fs::remove_file(&r.path);
        }
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
        let new = crate::config::load(&self.config.path).map_err(|e| ErrorBody {
            kind: ErrorKind::InvalidConfig,
            message: e.to_string(),
        })?;
        let (old_s, new_s) = (&self.config.supervisor, &new.supervisor);
        if old_s.socket_dir != new_s.socket_dir
            || old_s.socket_mode != new_s.socket_mode
            || old_s.socket_group != new_s.socket_group
        {
            warn!("socket_dir, socket_mode and socket_group changes take effect when the supervisor restarts");
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
        // Bind every new socket first: if one cannot be bound, nothing changes.
        let mut bound = Vec::new();
        for name in &report.added {
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
        {
            let mut access = self
                .shared
                .access
                .write()
                .unwrap_or_else(|p| p.into_inner());
            *access = Access::new(new_s);
        }
        self.shared
            .max_clients
            .store(new_s.max_clients, Ordering::Relaxed);
        for name in &report.removed {
            self.retire(name).await;
        }
        for name in &report.changed {
            let (Some(cfg), Some(r)) = (new.servers.get(name).cloned(), self.servers.get(name))
            else {
                continue;
            };
            let _ = r.params.send((cfg.client_queue, cfg.max_message_size));
            self.registry.insert(
                name,
                Entry {
                    handle: r.handle.clone(),
                    cfg: Arc::new(cfg.clone()),
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
        for (name, listener, activated) in bound {
            if let Some(cfg) = new.servers.get(&name).cloned() {
                self.start_server(cfg, listener, activated);
            }
        }
        // Keep the socket directory the daemon runs with.
        let mut new = new;
        new.supervisor.socket_dir = self.dir.clone();
        self.config = new;
        Ok(report)
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
    systemd::summary(&statuses)
}

/// Runs the daemon until SIGTERM/SIGINT. Returns after every child is stopped.
///
/// `plumbing` is what systemd passed (read from the environment before the runtime started):
/// the notify socket, the watchdog period, socket-activated listeners.
pub async fn run(config: Config, mut plumbing: Plumbing) -> Result<()> {
    for note in &plumbing.notes {
        warn!("{note}");
    }
    let notifier = Notifier::new(plumbing.notify_socket.as_ref()).unwrap_or_else(|e| {
        warn!(error = %e, "NOTIFY_SOCKET is unusable; not notifying systemd");
        Notifier::default()
    });
    let dir = config.supervisor.socket_dir.clone();
    let perms = SocketPerms::from(&config.supervisor);
    prepare_socket_dir(&dir, perms)?;
    let _lock = lock_socket_dir(&dir)?;
    let mut activated = HashMap::new();
    for (name, fd) in plumbing.listeners.drain(..) {
        if name != control::SOCKET_NAME && !config.servers.contains_key(&name) {
            warn!(socket = %name, "a socket-activated descriptor matches no configured server; keeping it for a later reload");
        }
        activated.insert(name, fd);
    }
    let accepting = CancellationToken::new();
    let mut daemon = Daemon {
        dir: dir.clone(),
        perms,
        shared: Arc::new(Shared {
            access: RwLock::new(Access::new(&config.supervisor)),
            max_clients: AtomicUsize::new(config.supervisor.max_clients),
        }),
        registry: Registry::default(),
        servers: BTreeMap::new(),
        retiring: Vec::new(),
        activated,
        accepting: accepting.clone(),
        connections: CancellationToken::new(),
        tracker: TaskTracker::new(),
        notifier: notifier.clone(),
        config,
    };

    // Bind everything first: a live socket or a non-socket path aborts before any child runs
    // (and removes what we bound).
    let mut listeners = Vec::new();
    let control_path = control::socket_path(&dir);
    let mut bind_all = || -> Result<()> {
        let c = daemon.listener_for(control::SOCKET_NAME, &control_path)?;
        listeners.push((control::SOCKET_NAME.to_string(), c));
        for name in daemon.config.servers.keys() {
            let l = daemon.listener_for(name, &socket_path(&dir, name))?;
            listeners.push((name.clone(), l));
        }
        Ok(())
    };
    if let Err(e) = bind_all() {
        for (name, (l, act)) in listeners {
            drop(l);
            if !act {
                let _ = std::fs::remove_file(dir.join(format!("{name}.sock")));
            }
        }
        return Err(e);
    }
    // Signal handlers before READY=1 (a SIGHUP from systemd must never kill us).
    let mut sigterm = signal(SignalKind::terminate())?;
    let mut sigint = signal(SignalKind::interrupt())?;
    let mut sighup = signal(SignalKind::hangup())?;

    let (reload_tx, mut reload_rx) = mpsc::channel::<oneshot::Sender<ReloadOutcome>>(64);
    let mut control_activated = false;
    for (name, (listener, act)) in listeners {
        if name == control::SOCKET_NAME {
            control_activated = act;
            info!(socket = %control_path.display(), activated = act, "control socket listening");
            daemon.tracker.spawn(control_loop(
                listener,
                ctl::Ctx {
                    registry: daemon.registry.clone(),
                    reloads: reload_tx.clone(),
                },
                daemon.shared.clone(),
                accepting.clone(),
                daemon.connections.clone(),
                daemon.tracker.clone(),
            ));
        } else {
            if let Some(cfg) = daemon.config.servers.get(&name).cloned() {
                daemon.start_server(cfg, listener, act);
            }
        }
    }
    drop(reload_tx);
    if let Some(addr) = daemon.config.supervisor.metrics_listen {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot listen for metrics on {addr}"))?;
        info!(%addr, "serving GET /metrics");
        daemon
            .tracker
            .spawn(crate::observe::serve_http(listener, accepting.clone()));
    }
    // A status round trip proves each actor has spawned its child (it spawns before it reads
    // its inbox), so READY=1 means "sockets bound, children spawned" (R1).
    let status_line = summary(&daemon.registry).await;
    notifier.ready_with_status(&status_line);
    info!(servers = daemon.servers.len(), config = %daemon.config.path.display(), "mcp-supervisor running");
    if notifier.enabled() {
        daemon.tracker.spawn(status_loop(
            daemon.registry.clone(),
            notifier.clone(),
            status_line,
            accepting.clone(),
        ));
    }

    let watchdog = plumbing
        .watchdog
        .map(|w| (w / 2).max(Duration::from_millis(1)));
    let mut wd = tokio::time::interval(watchdog.unwrap_or(Duration::from_secs(3600)));
    wd.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    if let Some(p) = watchdog {
        info!(
            every_ms = p.as_millis() as u64,
            "sending WATCHDOG=1 from the main loop"
        );
    }

    let mut gate = ReloadGate::default();
    let mut pending = false;
    let mut waiters: Vec<oneshot::Sender<ReloadOutcome>> = Vec::new();
    loop {
        let at = gate.next_allowed(Instant::now());
        tokio::select! {
            _ = sigterm.recv() => { info!("SIGTERM: stopping"); break; }
            _ = sigint.recv() => { info!("SIGINT: stopping"); break; }
            _ = sighup.recv() => {
                if !pending {
                    info!("SIGHUP: reloading the configuration");
                }
                pending = true;
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
                let outcome = daemon.reload().await;
                for w in waiters.drain(..) {
                    let _ = w.send(outcome.clone());
                }
            }
            _ = wd.tick(), if watchdog.is_some() => notifier.watchdog(),
        }
    }

    // ----- shutdown ------------------------------------------------------------------------
    notifier.stopping();
    reload_rx.close();
    drop(waiters);
    accepting.cancel();
    let mut stops = Vec::new();
    for r in daemon.servers.values() {
        let (tx, rx) = oneshot::channel();
        let _ = r.handle.commands.send(Command::Shutdown(tx)).await;
        stops.push(rx);
    }
    let mut retiring = std::mem::take(&mut daemon.retiring);
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
            _ = sigterm.recv() => break true,
            _ = sigint.recv() => break true,
            // The stop ladder can take seconds; keep the watchdog fed meanwhile.
            _ = wd.tick(), if watchdog.is_some() => notifier.watchdog(),
        }
    };
    if forced {
        warn!("second signal: killing every child process group now");
        for r in daemon.servers.values() {
            r.handle.kill_now();
        }
        for (h, t) in &retiring_kill {
            h.kill_now();
            t.abort();
        }
    }
    daemon.connections.cancel();
    let servers = std::mem::take(&mut daemon.servers);
    for (name, r) in servers {
        if forced {
            r.task.abort();
        } else if let Err(e) = r.task.await {
            error!(server = %name, error = %e, "server task failed");
        }
        if !r.activated {
            let _ = std::fs::remove_file(&r.path);
        }
    }
    if !control_activated {
        let _ = std::fs::remove_file(&control_path);
    }
    daemon.tracker.close();
    if !forced {
        daemon.tracker.wait().await;
    }
    info!("stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reload_gate_allows_three_per_ten_seconds() {
        let mut g = ReloadGate::default();
        let t0 = Instant::now();
        for i in 0..3 {
            let t = t0 + Duration::from_millis(i * 10);
            assert_eq!(g.next_allowed(t), t);
            g.record(t);
        }
        let t = t0 + Duration::from_millis(50);
        assert_eq!(g.next_allowed(t), t0 + RELOAD_WINDOW);
        g.record(t0 + RELOAD_WINDOW);
        assert_eq!(
            g.next_allowed(t0 + RELOAD_WINDOW),
            t0 + Duration::from_millis(10) + RELOAD_WINDOW
        );
    }

    #[test]
    fn access_allows_us_root_and_the_lists() {
        let a = Access {
            me: 1000,
            uids: vec![1001],
            gids: vec![50],
        };
        assert!(a.permits(1000, 1000));
        assert!(a.permits(0, 0));
        assert!(a.permits(1001, 1001));
        assert!(a.permits(1002, 50));
        assert!(!a.permits(1002, 1002));
    }

    #[test]
    fn lock_is_exclusive() {
        let dir = tempfile::tempdir().unwrap();
        let held = lock_socket_dir(dir.path()).unwrap();
        let again = lock_socket_dir(dir.path()).unwrap_err();
        assert!(
            again.downcast_ref::<AlreadyRunning>().is_some(),
            "{again:#}"
        );
        drop(held);
        lock_socket_dir(dir.path()).unwrap();
    }

    #[test]
    fn world_writable_socket_dir_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("run");
        std::fs::create_dir(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(prepare_socket_dir(&d, SocketPerms::default()).is_err());
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o1777)).unwrap();
        prepare_socket_dir(&d, SocketPerms::default()).unwrap();
    }
}
