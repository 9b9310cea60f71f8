//! `mcp-supervisor upgrade` (issue 32 §1), the daemon's side: check the new binary, wait for
//! the servers to be quiet, stop accepting, take each server's hand-over, write the record and
//! execute the new image in this process (same pid). On a failed `execve` the old image runs
//! again with the same record; the new image does the same when it refuses the record.
//!
//! What is handed over today: the `socket_dir` lock, every listening socket (control, servers,
//! endpoints, `NAME.http.sock`, the HTTP TCP side), each stdio server's running child (pid,
//! pipes, unframed stdout bytes, handshake, lists, log level, child-side ids). Connected
//! clients are not: their connections end at the hand-over (`attach` reconnects and replays
//! its client's handshake; HTTP sessions are reopened from their record).

use super::Daemon;
use crate::handover::{
    self, ChildRecord, ClientRecord, ConfigText, EndpointRecord, HttpConn, Listener, Record,
    ServerRecord,
};
use actor::server::Command;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;
use tracing::{error, info, warn};
use upstream::child::process::ChildTakeover;
use upstream::Carried;

/// How long an upgrade waits for every client request to be answered before it is refused.
pub const QUIET_WAIT: Duration = Duration::from_secs(10);

/// How long the new binary's `check-config` may take.
const PREFLIGHT: Duration = Duration::from_secs(10);

/// How long HTTP connections may take to finish what they are sending and park.
const HTTP_PARK_WAIT: Duration = Duration::from_secs(2);

/// How long a server's hand-over (and its child's pipe tasks' pause) may take.
const HANDOVER_WAIT: Duration = Duration::from_secs(5);

/// What an upgrade runs and passes on: fixed at start (or taken from the record).
#[derive(Debug, Clone)]
pub struct Image {
    /// The path the daemon was started from.
    pub binary: PathBuf,
    /// Its argv.
    pub argv: Vec<String>,
    /// The configuration text it runs.
    pub config_text: String,
    /// systemd's `NOTIFY_SOCKET`.
    pub notify_socket: Option<String>,
    /// systemd's `WATCHDOG_USEC`.
    pub watchdog_usec: Option<u64>,
    /// systemd's `FDSTORE`.
    pub fd_store: Option<usize>,
    /// Upgrades so far.
    pub upgrades: u64,
}

impl Daemon {
    /// Upgrades in place. Returns only when refused, with why (the daemon serves on);
    /// otherwise this process becomes the new image.
    pub(super) async fn upgrade(&mut self, lock: &impl AsRawFd) -> String {
        let binary = match handover::resolve_binary(&self.image.binary) {
            Ok(b) => b,
            Err(e) => return e,
        };
        test_pause().await;
        if let Err(e) = preflight(&binary, &self.config.path).await {
            return e;
        }
        // Socket clients stop being read at a line boundary (what they send meanwhile waits
        // in their connection for the next image); then every request taken must be answered.
        let parking = self.shared.parking.clone();
        parking.pause();
        // HTTP connections take no new request; each parks once between two.
        self.front.hand_off().ask();
        if let Err(why) = self.quiet().await {
            parking.resume();
            self.front.hand_off().cancel();
            return why;
        }
        info!(binary = %binary.path().display(), "upgrading in place: handing over to the new image");
        let old_image = match handover::open_old_image() {
            Ok(fd) => fd,
            Err(e) => {
                parking.resume();
                self.front.hand_off().cancel();
                return format!("cannot keep the running image open: {e}");
            }
        };
        self.accepting.cancel();
        // Endpoints first: their client tasks stop before the sources' actors freeze.
        let endpoints = self.hand_over_endpoints().await;
        let mut servers = self.hand_over_servers().await;
        // What the actors decided is written before the connections change hands.
        let written = until(HANDOVER_WAIT, || parking.drained()).await;
        if !written {
            warn!("a client's answers were not all written in time; the rest may be lost");
        }
        let front = self.front.clone();
        if !front.hand_off().all_parked() {
            warn!("some HTTP connections stayed busy (long streams); they end at the hand-over");
        }
        let parked = parking.parked();
        let records = |clients: ReplayOf| -> Vec<ClientRecord> {
            clients
                .into_iter()
                .filter_map(|(id, state)| {
                    let p = parked.get(&id)?;
                    Some(ClientRecord {
                        fd: p.fd,
                        uid: p.peer.uid,
                        gid: p.peer.gid,
                        pid: p.peer.pid,
                        pending: handover::b64(&p.pending),
                        replay: state.replay,
                        listens: state.listens,
                    })
                })
                .collect()
        };
        for (s, clients) in &mut servers {
            s.clients = records(std::mem::take(clients));
        }
        let endpoints = endpoints
            .into_iter()
            .map(|(name, clients)| EndpointRecord {
                name,
                clients: records(clients),
            })
            .collect();
        let servers = servers.into_iter().map(|(s, _)| s).collect();
        let record = Record {
            version: handover::VERSION,
            upgrades: self.image.upgrades.saturating_add(1),
            binary: self.image.binary.clone(),
            argv: self.image.argv.clone(),
            config: ConfigText {
                path: self.config.path.clone(),
                text: self.image.config_text.clone(),
            },
            old_image: old_image.as_raw_fd(),
            lock: lock.as_raw_fd(),
            notify_socket: self.image.notify_socket.clone(),
            watchdog_usec: self.image.watchdog_usec,
            fd_store: self.image.fd_store,
            refused: None,
            run_token: base::reaper::token().to_string(),
            instances: base::reaper::instances(),
            listeners: self
                .listening
                .iter()
                .map(|(name, (fd, activated))| Listener {
                    name: name.clone(),
                    fd: fd.as_raw_fd(),
                    activated: *activated,
                })
                .collect(),
            servers,
            endpoints,
            http: front
                .hand_off()
                .parked()
                .into_iter()
                .map(|(fd, read_ahead, server)| HttpConn {
                    fd,
                    read_ahead: handover::b64(&read_ahead),
                    server,
                })
                .collect(),
        };
        info!(
            servers = record.servers.len(),
            children = record.servers.iter().filter(|s| s.child.is_some()).count(),
            socket_clients = record
                .servers
                .iter()
                .map(|s| s.clients.len())
                .sum::<usize>(),
            http_connections = record.http.len(),
            "hand-over record written; executing the new image"
        );
        if let Err(e) = record.validate() {
            error!(error = %e, "the hand-over record is not valid; running this image again");
        }
        support::logging::requests::flush(Duration::from_millis(500));
        // The writer thread's queue would die with the exec; what is logged after this is
        // dropped (a failed exec is said again by the image that runs next).
        support::logging::finish();
        let e = handover::exec(&record, binary.fd(), binary.script());
        error!(binary = %binary.path().display(), error = %e, "cannot execute the new image; running this one again");
        let mut again = record;
        again.refused = Some(format!(
            "cannot execute {} (execveat): {e}",
            binary.path().display()
        ));
        let e = handover::exec_old(&again);
        error!(error = %e, "cannot execute the old image again either; exiting");
        std::process::exit(base::exit::EXIT_FAILED);
    }

    /// Waits until every socket session has parked and every client request is answered.
    async fn quiet(&self) -> Result<(), String> {
        let parking = self.shared.parking.clone();
        if !until(HANDOVER_WAIT, || parking.all_parked()).await {
            return Err(format!(
                "the client connections did not pause within {}s; try again",
                HANDOVER_WAIT.as_secs()
            ));
        }
        let asked = Instant::now();
        let deadline = asked + QUIET_WAIT;
        let front = self.front.clone();
        loop {
            let busy = self.unfinished().await;
            // Every HTTP connection parked (so no request is on its way to an actor), or,
            // past a bound, only long streams left and no request being handled.
            let http = front.hand_off().all_parked()
                || (asked.elapsed() >= HTTP_PARK_WAIT && front.hand_off().none_handling());
            if busy == 0 && http {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "{busy} client requests were still unfinished after {}s; try again",
                    QUIET_WAIT.as_secs()
                ));
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// Client requests unfinished, all servers and endpoints (one that does not answer
    /// counts as one).
    async fn unfinished(&self) -> usize {
        let mut n = 0usize;
        let handles = self
            .servers
            .values()
            .map(|r| r.handle.clone())
            .chain(self.endpoint_handles().into_iter().map(|(_, h)| h));
        for handle in handles {
            let (tx, rx) = oneshot::channel();
            let _ = handle.commands.send(Command::Busy(tx)).await;
            n = n.saturating_add(
                tokio::time::timeout(HANDOVER_WAIT, rx)
                    .await
                    .ok()
                    .and_then(Result::ok)
                    .unwrap_or(1),
            );
        }
        n
    }

    /// Each server's hand-over, its child's pipe tasks paused (a server or child that does
    /// not hand over in time is left out: the new image starts it afresh).
    async fn hand_over_servers(&mut self) -> Vec<(ServerRecord, ReplayOf)> {
        let mut out = Vec::new();
        for (name, r) in &self.servers {
            let (tx, rx) = oneshot::channel();
            let _ = r.handle.commands.send(Command::HandOver(tx)).await;
            let Ok(Ok(h)) = tokio::time::timeout(HANDOVER_WAIT, rx).await else {
                warn!(server = %name, "no hand-over from the server in time; the new image starts it afresh");
                continue;
            };
            // What the instance left (opaque to the actor): a child's paused pipes or a url
            // server's session.
            let (takeover, remote) = match h.carried.map(|c| c.take::<ChildTakeover>()) {
                None => (None, None),
                Some(Ok(c)) => (Some(c), None),
                Some(Err(other)) => (None, other.take::<upstream::remote::SessionState>().ok()),
            };
            let child = match takeover {
                Some(c) => {
                    let pending = tokio::time::timeout(HANDOVER_WAIT, c.pending).await;
                    let flushed = tokio::time::timeout(HANDOVER_WAIT, c.flushed).await;
                    match (pending, flushed) {
                        (Ok(Ok(pending)), Ok(Ok(()))) => Some(ChildRecord {
                            pid: c.pid,
                            stdin: c.fds.0,
                            stdout: c.fds.1,
                            stderr: c.fds.2,
                            marker: c.marker,
                            since: c.since,
                            pending: handover::b64(&pending),
                            tail: h.tail.clone(),
                        }),
                        _ => {
                            warn!(server = %name, "the child's pipes did not pause in time; it is not handed over");
                            None
                        }
                    }
                }
                None => None,
            };
            out.push((
                ServerRecord {
                    name: name.clone(),
                    generation: h.generation,
                    next_id: h.next_id,
                    handshake: h.handshake,
                    log_level: h.log_level,
                    child,
                    remote,
                    restarts: h.restarts,
                    last_exit: h.last_exit,
                    rest: h.rest,
                    clients: Vec::new(),
                },
                h.clients,
            ));
        }
        out
    }

    /// Each endpoint's socket clients' states (an endpoint that does not hand over in time is
    /// left out: its clients' connections end at the exec).
    async fn hand_over_endpoints(&self) -> Vec<(String, ReplayOf)> {
        let mut out = Vec::new();
        for (name, handle) in self.endpoint_handles() {
            let (tx, rx) = oneshot::channel();
            let _ = handle.commands.send(Command::HandOver(tx)).await;
            match tokio::time::timeout(HANDOVER_WAIT.saturating_mul(2), rx).await {
                Ok(Ok(h)) => out.push((name, h.clients)),
                _ => {
                    warn!(endpoint = %name, "no hand-over from the endpoint in time; its clients' connections end at the upgrade")
                }
            }
        }
        out
    }

    /// The TCP listener named `name` (`http-tcp`, `metrics`): the one the previous image
    /// handed over, else a new one bound to `addr`; kept for the next hand-over. Errors: the
    /// bind failed.
    pub(super) async fn tcp_listener(
        &mut self,
        name: &str,
        addr: std::net::SocketAddr,
    ) -> std::io::Result<tokio::net::TcpListener> {
        let inherited = self.inherited(name).and_then(|(fd, _)| {
            let std = std::net::TcpListener::from(fd);
            std.set_nonblocking(true).ok()?;
            tokio::net::TcpListener::from_std(std).ok()
        });
        let listener = match inherited {
            Some(l) => l,
            None => tokio::net::TcpListener::bind(addr).await?,
        };
        self.keep_listener(name, &listener, false);
        Ok(listener)
    }

    /// Keeps a listener's descriptor for a hand-over (a duplicate: the accept loop owns its
    /// own), by name.
    pub(super) fn keep_listener(
        &mut self,
        name: &str,
        fd: &impl std::os::fd::AsFd,
        activated: bool,
    ) {
        match fd.as_fd().try_clone_to_owned() {
            Ok(dup) => {
                self.listening.insert(name.to_string(), (dup, activated));
            }
            Err(e) => {
                warn!(socket = %name, error = %e, "cannot keep the listener for an upgrade; an upgrade will rebind it")
            }
        }
    }

    /// Serves the socket clients of server `name` the previous image handed over: each
    /// resumes with its replay lines and pending bytes, in a seat of the server's.
    pub(super) fn resume_clients(
        &mut self,
        name: &str,
        handle: &actor::server::ServerHandle,
        params: &tokio::sync::watch::Receiver<super::SessionParams>,
        seats: &std::sync::Arc<actor::seats::Seats>,
    ) {
        for c in self.adopted_clients.remove(name).unwrap_or_default() {
            let std = std::os::unix::net::UnixStream::from(c.fd);
            let stream = match std
                .set_nonblocking(true)
                .and_then(|()| tokio::net::UnixStream::from_std(std))
            {
                Ok(s) => s,
                Err(e) => {
                    warn!(server = %name, error = %e, "cannot resume a handed-over client");
                    continue;
                }
            };
            let seat = seats.take(
                actor::seats::Rule::UNLIMITED,
                actor::seats::Holder::Uid(c.peer.uid),
            );
            let limits = params.borrow().clone();
            let events = handle.sessions.clone();
            let token = self.connections.clone();
            let parking = self.shared.parking.clone();
            self.tracker.spawn(async move {
                actor::session::run(
                    stream,
                    c.peer,
                    events,
                    limits,
                    token,
                    (parking, Some(c.resume)),
                )
                .await;
                drop(seat);
            });
        }
    }

    /// The HTTP connections the previous image handed over for `server`'s `NAME.http.sock`
    /// (`None`: the TCP listener's), taken.
    pub(super) fn resumed_http(
        &mut self,
        server: Option<&str>,
    ) -> Vec<front::http::handoff::ParkedConn> {
        let (mine, rest) = std::mem::take(&mut self.adopted_http)
            .into_iter()
            .partition(|c| c.server.as_deref() == server);
        self.adopted_http = rest;
        mine
    }

    /// An inherited listener's descriptor, taken (once).
    pub(super) fn inherited(&self, name: &str) -> Option<(OwnedFd, bool)> {
        self.inherited
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(name)
    }
}

/// Each socket client's replay lines, by client.
type ReplayOf = std::collections::BTreeMap<actor::session::ClientId, actor::server::ClientState>;

/// Polls `cond` every 2 ms until it holds (true) or `within` passed (false).
async fn until(within: Duration, cond: impl Fn() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while !cond() {
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    true
}

/// The path this daemon was started as, which an upgrade resolves and checks again: `argv[0]`
/// when it names a path (made absolute), so a link the operator re-points is followed and its
/// own ancestors are checked too (issue 47 §1); else the running executable.
pub(super) fn started_as() -> PathBuf {
    let exe = || std::env::current_exe().unwrap_or_else(|_| PathBuf::from("/proc/self/exe"));
    match std::env::args_os().next().map(PathBuf::from) {
        Some(p) if p.is_absolute() => p,
        Some(p) if p.components().count() > 1 => std::env::current_dir()
            .map(|d| d.join(&p))
            .unwrap_or_else(|_| exe()),
        _ => exe(),
    }
}

/// The test hook (`MCP_SUPERVISOR_TEST_UPGRADE_PAUSE=PATH`, issue 47 §1): after the checks of
/// the new binary, `upgrade` creates `PATH.paused` and waits until it is removed (60 s at
/// most), so a test can swap what is on disk in between, as a user owning an ancestor could.
async fn test_pause() {
    let Some(path) = std::env::var_os("MCP_SUPERVISOR_TEST_UPGRADE_PAUSE") else {
        return;
    };
    let paused = std::path::Path::new(&path).with_extension("paused");
    if std::fs::write(&paused, b"").is_err() {
        return;
    }
    let _ = until(Duration::from_secs(60), || !paused.exists()).await;
}

/// Runs `BINARY check-config CONFIG` within [`PREFLIGHT`] from the open, checked file
/// (`execveat` in the forked child, issue 47 §1): the new binary must run and accept the
/// configuration before this process becomes it. Errors say why, naming the binary, with its
/// last words.
async fn preflight(bin: &handover::Binary, config: &std::path::Path) -> Result<(), String> {
    use std::os::unix::ffi::OsStrExt;
    let binary = bin.path();
    let argv: Vec<&[u8]> = vec![
        binary.as_os_str().as_bytes(),
        b"check-config",
        config.as_os_str().as_bytes(),
    ];
    let args = handover::ExecArgs::new(&argv, &handover::environment_but(&[]));
    let (fd, script) = (bin.fd().as_raw_fd(), bin.script());
    // The program named here is never executed: `pre_exec` replaces the child with the open
    // file first, or fails the spawn with why.
    let mut cmd = tokio::process::Command::new("/nonexistent/mcp-supervisor-preflight");
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    // SAFETY: runs in the forked child before exec: `fcntl` and `execveat` only, on memory
    // prepared before the fork (nothing allocated, no lock taken).
    unsafe {
        cmd.pre_exec(move || {
            if script {
                // A script's interpreter opens /dev/fd/N: keep it open across the exec.
                if libc::fcntl(fd, libc::F_SETFD, 0) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Err(args.execveat(fd))
        });
    }
    let child = {
        let mut owned = base::reaper::spawn_guard();
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot run {} (execveat): {e}", binary.display()))?;
        if let Some(pid) = child.id() {
            owned.insert(pid as i32);
        }
        child
    };
    let pid = child.id();
    let out = tokio::time::timeout(PREFLIGHT, child.wait_with_output()).await;
    if let Some(pid) = pid {
        base::reaper::disown(pid);
    }
    match out {
        Err(_) => Err(format!(
            "{} check-config did not finish within {}s",
            binary.display(),
            PREFLIGHT.as_secs()
        )),
        Ok(Err(e)) => Err(format!("cannot run {}: {e}", binary.display())),
        Ok(Ok(o)) if o.status.success() => Ok(()),
        Ok(Ok(o)) => {
            let said = String::from_utf8_lossy(&o.stderr);
            let last = said
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("");
            Err(format!(
                "the new binary {} failed `check-config` ({}): {}",
                binary.display(),
                o.status,
                last.chars().take(500).collect::<String>()
            ))
        }
    }
}

/// What the new image takes from a validated record: every descriptor owned (and
/// close-on-exec again), by what it is for.
pub(super) struct Adopted {
    /// The `socket_dir` lock's open file.
    pub(super) lock: OwnedFd,
    /// What the next upgrade runs and passes on.
    pub(super) image: Image,
    /// Why the last hand-over was refused, if it was.
    pub(super) refused: Option<String>,
    listeners: Vec<(String, OwnedFd, bool)>,
    /// What each server adopts.
    pub(super) servers: std::collections::HashMap<String, actor::server::Adoption>,
    /// Each server's socket clients: their connections and what they resume with.
    pub(super) clients: std::collections::HashMap<String, Vec<AdoptedClient>>,
    /// HTTP connections between two requests.
    pub(super) http: Vec<front::http::handoff::ParkedConn>,
}

/// A socket client handed over.
#[derive(Debug)]
pub(super) struct AdoptedClient {
    /// Its connection.
    pub(super) fd: OwnedFd,
    /// Who it is.
    pub(super) peer: actor::session::Peer,
    /// Its pending bytes and replay lines.
    pub(super) resume: actor::park::Resume,
}

impl Adopted {
    /// The listeners by hand-over name.
    pub(super) fn listeners(&self) -> std::collections::HashMap<String, (OwnedFd, bool)> {
        self.listeners
            .iter()
            .filter_map(|(n, fd, a)| fd.try_clone().ok().map(|fd| (n.clone(), (fd, *a))))
            .collect()
    }
}

/// A socket client of the record, its connection owned by `own`.
fn adopted_client(c: ClientRecord, own: &impl Fn(RawFd) -> OwnedFd) -> AdoptedClient {
    AdoptedClient {
        fd: own(c.fd),
        peer: actor::session::Peer {
            uid: c.uid,
            gid: c.gid,
            pid: c.pid,
            ..Default::default()
        },
        resume: actor::park::Resume {
            pending: handover::unb64(&c.pending, "pending").unwrap_or_default(),
            replay: c.replay,
            listens: c.listens,
        },
    }
}

/// Takes ownership of a validated record's descriptors.
pub(super) fn adopt(r: Record) -> Adopted {
    // SAFETY (every `own` below): `r` was validated (`Record::decode`): each descriptor is
    // open, of its kind, named once, and nothing else in this image owns it.
    let own = |fd| {
        base::fds::close_on_exec(fd);
        unsafe { Record::own(fd) }
    };
    drop(own(r.old_image));
    let lock = own(r.lock);
    let listeners = r
        .listeners
        .iter()
        .map(|l| (l.name.clone(), own(l.fd), l.activated))
        .collect();
    let mut servers = std::collections::HashMap::new();
    let mut clients = std::collections::HashMap::new();
    for s in r.servers {
        let adopted: Vec<AdoptedClient> = s
            .clients
            .into_iter()
            .map(|c| adopted_client(c, &own))
            .collect();
        clients.insert(s.name.clone(), adopted);
        let inherited = s.child.map(|c| upstream::child::process::Inherited {
            pid: c.pid,
            stdin: own(c.stdin),
            stdout: own(c.stdout),
            stderr: own(c.stderr),
            marker: c.marker,
            since: c.since,
            pending: handover::unb64(&c.pending, "pending").unwrap_or_default(),
            tail: c.tail,
        });
        servers.insert(
            s.name,
            actor::server::Adoption {
                running: inherited.is_some() || s.remote.is_some(),
                carried: match (inherited, s.remote) {
                    (Some(child), _) => Some(Carried::new(child)),
                    (None, Some(session)) => Some(Carried::new(session)),
                    (None, None) => None,
                },
                restarts: s.restarts,
                last_exit: s.last_exit,
                rest: s.rest,
                generation: s.generation,
                next_id: s.next_id,
                handshake: s.handshake,
                log_level: s.log_level,
            },
        );
    }
    for e in r.endpoints {
        let adopted = e
            .clients
            .into_iter()
            .map(|c| adopted_client(c, &own))
            .collect();
        clients.insert(e.name, adopted);
    }
    Adopted {
        lock,
        image: Image {
            binary: r.binary,
            argv: r.argv,
            config_text: r.config.text,
            notify_socket: r.notify_socket,
            watchdog_usec: r.watchdog_usec,
            fd_store: r.fd_store,
            upgrades: r.upgrades,
        },
        refused: r.refused,
        listeners,
        servers,
        clients,
        http: r
            .http
            .iter()
            .map(|c| front::http::handoff::ParkedConn {
                fd: own(c.fd),
                read_ahead: handover::unb64(&c.read_ahead, "read-ahead")
                    .unwrap_or_default()
                    .into(),
                server: c.server.clone(),
            })
            .collect(),
    }
}
