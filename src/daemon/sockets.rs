//! The socket directory and the sockets: permissions, the `.lock`, binding (stale, live and
//! non-socket paths), the `SO_PEERCRED` allow-list, and the accept loops of the server and
//! control sockets.

use super::AlreadyRunning;
use crate::control::{self, server as ctl};
use actor::seats::{shares, Holder, Refused, Rule, Seats};
use actor::server::ServerHandle;
use actor::session::{self, Access, Peer};
use anyhow::{bail, Context, Result};
use base::safepath::{check_ancestors, refuse_key};
use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};
use support::config::{ServerConfig, SupervisorConfig};
use support::logging::MSG_REFUSED;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

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

fn refuse(dir: &Path, what: &str, fix: &str) -> anyhow::Error {
    refuse_key("socket_dir", "put sockets there", dir, what, fix)
}

/// The directory bits the sockets need: search for the group when they are shared with
/// `socket_group`, for others when others may connect.
fn needed_dir_bits(perms: SocketPerms) -> u32 {
    let mut bits = 0;
    if perms.group.is_some() && perms.mode & 0o060 != 0 {
        bits |= 0o010;
    }
    if perms.mode & 0o006 != 0 {
        bits |= 0o001;
    }
    bits
}

/// Makes sure `dir` is ours and nobody else can change what is in it (issue 14 §1, F31):
///
/// - created when missing, mode 0700 plus the search bits the sockets need (0710 with
///   `socket_group` for group sockets, 0711 for sockets open to others);
/// - never a symbolic link (checked with `lstat`, then opened `O_NOFOLLOW | O_DIRECTORY`, and
///   every later check and change goes through that descriptor);
/// - owned by the supervisor's euid, or by root;
/// - writable by nobody else (no group or other write bit, sticky or not);
/// - every ancestor owned by root or by us and not writable by others unless sticky (so nobody
///   can move the directory away and put theirs in its place);
/// - a pre-existing directory we own gets the search bits and group the sockets need (what
///   `RuntimeDirectoryMode=0700` leaves is fixed, not silently unusable).
///
/// Errors are [`DirRefused`] (exit 2) naming the problem and the fix.
pub fn prepare_socket_dir(dir: &Path, perms: SocketPerms) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    let me = nix::unistd::geteuid().as_raw();
    match std::fs::symlink_metadata(dir) {
        Ok(m) if m.file_type().is_symlink() => {
            let target = std::fs::read_link(dir)
                .map(|t| t.display().to_string())
                .unwrap_or_default();
            return Err(refuse(
                dir,
                &format!("is a symbolic link (to {target})"),
                "set socket_dir to the real directory, owned by the supervisor's user",
            ));
        }
        Ok(m) if !m.is_dir() => {
            return Err(refuse(
                dir,
                "exists and is not a directory",
                "remove it or choose another path",
            ))
        }
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if let Some(parent) = dir.parent() {
                std::fs::create_dir_all(parent)
                    .with_context(|| format!("cannot create {}", parent.display()))?;
            }
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(dir)
                .with_context(|| {
                    // The usual cause: a user other than root without `XDG_RUNTIME_DIR` (under
                    // `su`, in some ssh sessions and containers) gets the root default.
                    let hint = if me != 0 && std::env::var_os("XDG_RUNTIME_DIR").is_none() {
                        "; XDG_RUNTIME_DIR is not set, so the default is root's: set it, or \
                         `socket_dir` in [supervisor]"
                    } else {
                        ""
                    };
                    format!("cannot create socket directory {}{hint}", dir.display())
                })?;
        }
        Err(e) => return Err(e).with_context(|| format!("cannot inspect {}", dir.display())),
    }
    check_ancestors(dir, me, "socket_dir", "put sockets there")?;
    let file = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
            .open(dir)
            .with_context(|| format!("cannot open socket directory {}", dir.display()))?
    };
    let meta = file
        .metadata()
        .with_context(|| format!("cannot inspect {}", dir.display()))?;
    let st = DirStat {
        st_mode: meta.mode(),
        st_uid: meta.uid(),
        st_gid: meta.gid(),
    };
    let mode = st.st_mode & 0o7777;
    if st.st_uid != me && st.st_uid != 0 {
        return Err(refuse(
            dir,
            &format!(
                "is owned by uid {}, not by the supervisor's uid {me} or root",
                st.st_uid
            ),
            "use a directory the supervisor's user owns, e.g. /run/mcp-supervisor, or chown it",
        ));
    }
    if mode & 0o002 != 0 {
        return Err(refuse(
            dir,
            &format!("is writable by everyone (mode {mode:04o})"),
            "chmod o-w it, or use a directory of the supervisor's own",
        ));
    }
    if mode & 0o020 != 0 {
        return Err(refuse(
            dir,
            &format!("is writable by its group {} (mode {mode:04o})", st.st_gid),
            "chmod g-w it: members could replace the sockets",
        ));
    }
    let bits = needed_dir_bits(perms);
    let group_ok = perms
        .group
        .is_none_or(|g| bits & 0o010 == 0 || st.st_gid == g);
    if mode & bits != bits || !group_ok {
        if st.st_uid != me {
            return Err(refuse(
                dir,
                &format!("(mode {mode:04o}, group {}) does not let socket_group or socket_mode reach the sockets, and is not ours to change", st.st_gid),
                "chmod/chgrp it as socket_group and socket_mode need, or use a directory of the supervisor's own",
            ));
        }
        let new_mode = mode | bits;
        if !group_ok {
            std::os::unix::fs::fchown(&file, None, perms.group)
                .with_context(|| format!("cannot give {} to socket_group", dir.display()))?;
        }
        file.set_permissions(std::fs::Permissions::from_mode(new_mode))
            .with_context(|| format!("cannot set mode {new_mode:04o} on {}", dir.display()))?;
        info!(dir = %dir.display(), from = format!("{mode:04o}"), to = format!("{new_mode:04o}"), group = ?perms.group,
            "socket_dir adjusted so socket_group/socket_mode can reach the sockets");
    }
    Ok(())
}

/// What [`prepare_socket_dir`] reads of the opened directory.
struct DirStat {
    st_mode: u32,
    st_uid: u32,
    st_gid: u32,
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
        .custom_flags(libc::O_NOFOLLOW)
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
    bind_in_private(path, perms)
}

static BIND_SEQ: AtomicUsize = AtomicUsize::new(0);

/// Binds a socket at `path` with `perms` and no path-based change after it is in place: the
/// socket is bound in a fresh private directory (mode 0700, ours) next to `path`, given its
/// group and mode there, then renamed into position (issue 14 §1: nobody can swap the path
/// for a symbolic link between `bind` and `chmod`).
fn bind_in_private(path: &Path, perms: SocketPerms) -> Result<UnixListener> {
    use std::os::unix::fs::DirBuilderExt;
    let dir = path.parent().unwrap_or(Path::new("."));
    let n = BIND_SEQ.fetch_add(1, Ordering::Relaxed);
    let private = dir.join(format!(".bind-{}-{n}", std::process::id()));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&private)
        .with_context(|| format!("cannot create {}", private.display()))?;
    let staged = private.join("s");
    let result = (|| -> Result<UnixListener> {
        let listener = UnixListener::bind(&staged)
            .with_context(|| format!("cannot bind {}", path.display()))?;
        if let Some(g) = perms.group {
            nix::unistd::chown(&staged, None, Some(nix::unistd::Gid::from_raw(g)))
                .with_context(|| format!("cannot give {} to group {g}", path.display()))?;
        }
        std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(perms.mode))
            .with_context(|| format!("cannot set mode {:04o} on {}", perms.mode, path.display()))?;
        std::fs::rename(&staged, path)
            .with_context(|| format!("cannot move the socket into {}", path.display()))?;
        Ok(listener)
    })();
    let _ = std::fs::remove_file(&staged);
    let _ = std::fs::remove_dir(&private);
    result
}

/// The socket of server `name` under `dir`.
pub fn socket_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.sock"))
}

/// The client access of `[supervisor]` (`allowed_uids`/`allowed_gids`).
pub fn client_access(s: &SupervisorConfig) -> Access {
    Access {
        me: nix::unistd::geteuid().as_raw(),
        uids: s.allowed_uids.clone(),
        gids: s.allowed_gids.clone(),
    }
}

/// The operator access of `[supervisor]` (`operator_uids`/`operator_gids`): who may use
/// `control.sock` (issue 14 §2). By default only the supervisor's own uid and root.
pub fn operator_access(s: &SupervisorConfig) -> Access {
    Access {
        me: nix::unistd::geteuid().as_raw(),
        uids: s.operator_uids.clone(),
        gids: s.operator_gids.clone(),
    }
}

/// The viewer access of `[supervisor]` (`viewer_uids`/`viewer_gids`, issue 33): who may
/// `watch` `control.sock` with the redacted view. Lists only: the supervisor's own uid and
/// root are operators already.
pub fn viewer_access(s: &SupervisorConfig) -> Access {
    Access {
        me: nix::unistd::geteuid().as_raw(),
        uids: s.viewer_uids.clone(),
        gids: s.viewer_gids.clone(),
    }
}

/// The client access of one server: its own `allowed_uids`/`allowed_gids` when it sets them
/// (a server may be more private, or more open, than the default), else `[supervisor]`'s.
pub fn server_access(s: &SupervisorConfig, cfg: &ServerConfig) -> Access {
    let mut a = client_access(s);
    if let Some(u) = &cfg.allowed_uids {
        a.uids.clone_from(u);
    }
    if let Some(g) = &cfg.allowed_gids {
        a.gids.clone_from(g);
    }
    a
}

/// Which socket a connection came in on, for the access check.
#[derive(Debug, Clone, Copy)]
pub(super) enum Role<'a> {
    /// `control.sock`: operators.
    Control,
    /// A server's socket: its clients.
    Server(&'a str),
}

/// Settings the accept loops read at each accept, so a reload applies them to new
/// connections.
#[derive(Debug)]
pub(super) struct Shared {
    /// Log lines for refused connections: 20 per 10 s, the rest counted (issue 14 §3).
    pub(super) refused_log: std::sync::Mutex<support::logging::LogBudget>,
    /// Client access per server (each server's own lists, or `[supervisor]`'s).
    pub(super) clients: RwLock<HashMap<String, Access>>,
    /// Operator access (`control.sock`).
    pub(super) operators: RwLock<Access>,
    /// Viewer access (`control.sock`, `watch` only, redacted; issue 33).
    pub(super) viewers: RwLock<Access>,
    pub(super) max_clients: AtomicUsize,
    /// The HTTP connections open on the servers' `NAME.http.sock`, so that a reload that
    /// revokes a peer closes them (issue 26 §5; [`Shared::close_revoked_http`]).
    pub(super) http_peers: std::sync::Mutex<HttpPeers>,
    /// Where the socket sessions park for an upgrade's hand-over (issue 32 §1).
    pub(super) parking: Arc<actor::park::Parking>,
}

/// The connections open on every `NAME.http.sock`: by a number of their own, the server,
/// the peer, and the token that closes the connection.
#[derive(Debug, Default)]
pub(super) struct HttpPeers {
    next: u64,
    open: HashMap<u64, (String, Peer, CancellationToken)>,
}

impl Shared {
    fn http_peers(&self) -> std::sync::MutexGuard<'_, HttpPeers> {
        // Every change is one insert or remove: a poisoned lock holds a consistent map.
        self.http_peers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records an HTTP connection of `peer` to server `server`'s `NAME.http.sock`: its
    /// number (for [`Shared::forget_http`]) and the token that closes it.
    fn register_http(&self, server: &str, peer: Peer) -> (u64, CancellationToken) {
        let mut p = self.http_peers();
        let n = p.next;
        p.next = p.next.wrapping_add(1);
        let revoked = CancellationToken::new();
        p.open
            .insert(n, (server.to_string(), peer, revoked.clone()));
        (n, revoked)
    }

    fn forget_http(&self, n: u64) {
        self.http_peers().open.remove(&n);
    }

    /// Closes every `NAME.http.sock` connection whose peer the client access in force no
    /// longer permits (called by a reload once the new lists are in place, as
    /// `Command::Permit` ends their sessions in the actors). Returns how many were closed.
    pub(super) fn close_revoked_http(&self) -> usize {
        let revoked: Vec<(String, Peer, CancellationToken)> = {
            let mut p = self.http_peers();
            let gone: Vec<u64> = p
                .open
                .iter()
                .filter(|(_, (server, peer, _))| {
                    !self.permits(Role::Server(server), peer.uid, peer.gid)
                })
                .map(|(n, _)| *n)
                .collect();
            gone.iter().filter_map(|n| p.open.remove(n)).collect()
        };
        // One line per server and uid.
        let mut by_peer: BTreeMap<(String, u32), usize> = BTreeMap::new();
        for (server, peer, token) in &revoked {
            token.cancel();
            *by_peer.entry((server.clone(), peer.uid)).or_default() += 1;
        }
        for ((server, uid), connections) in by_peer {
            warn!(server = %server, peer_uid = uid, connections,
                "closed the HTTP connections of uid {uid}: no longer allowed after a reload");
        }
        revoked.len()
    }

    /// Whether a control connection of this peer is an operator's (else a viewer's).
    fn is_operator(&self, uid: u32, gid: u32) -> bool {
        self.operators
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .permits(uid, gid)
    }

    /// Who this peer is on `control.sock` under the lists in force (`None`: neither).
    fn role_of(&self, uid: u32, gid: u32) -> Option<ctl::Who> {
        if self.is_operator(uid, gid) {
            Some(ctl::Who::Operator)
        } else if self.permits(Role::Control, uid, gid) {
            Some(ctl::Who::Viewer)
        } else {
            None
        }
    }

    fn permits(&self, role: Role<'_>, uid: u32, gid: u32) -> bool {
        match role {
            Role::Control => {
                self.is_operator(uid, gid)
                    || self
                        .viewers
                        .read()
                        .unwrap_or_else(|p| p.into_inner())
                        .permits(uid, gid)
            }
            Role::Server(name) => self
                .clients
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .get(name)
                .is_some_and(|a| a.permits(uid, gid)),
        }
    }
}

/// What a new session of a server needs (from its configuration, updated by reloads).
pub(super) type SessionParams = session::SessionLimits;

/// Accepts the next connection that passes the `SO_PEERCRED` check; refused ones are logged
/// (uid, gid, pid) and closed, after the hangup line when `say_hangup` (a server's line-based
/// socket, `NAME.sock`: never `NAME.http.sock`, whose peers speak HTTP). `None` when `stop`
/// fires.
pub(super) async fn accept_checked(
    listener: &UnixListener,
    shared: &Shared,
    role: Role<'_>,
    say_hangup: bool,
    stop: &CancellationToken,
) -> Option<(UnixStream, Peer)> {
    let socket = match role {
        Role::Control => control::SOCKET_NAME,
        Role::Server(name) => name,
    };
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
        let allowed = shared.permits(role, cred.uid(), cred.gid());
        if !allowed {
            if let (Role::Server(name), true) = (role, say_hangup) {
                // Said once, without waiting (a refused peer gets no more of our time): the
                // marked line tells `attach` not to reconnect (issue 32 §2).
                let line = actor::session::hangup_line(
                    &format!("this user is not allowed to use `{name}`"),
                    "denied",
                );
                let _ = stream.try_write(&line);
            }
            let budget = shared
                .refused_log
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .allow(Instant::now());
            let Some(suppressed) = budget else { continue };
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
                suppressed,
                "refused a connection from uid {} (pid {pid}): not our uid, not root, not in {}",
                cred.uid(),
                match role {
                    Role::Control => "operator_uids/operator_gids nor viewer_uids/viewer_gids",
                    Role::Server(_) => "allowed_uids/allowed_gids",
                }
            );
            continue;
        }
        return Some((
            stream,
            Peer {
                uid: cred.uid(),
                gid: cred.gid(),
                pid: cred.pid(),
                label: None,
                endpoint: None,
                transport: Default::default(),
            },
        ));
    }
}

#[allow(clippy::too_many_arguments)]
pub(super) async fn accept_loop(
    listener: UnixListener,
    name: String,
    server: ServerHandle,
    params: watch::Receiver<SessionParams>,
    shared: Arc<Shared>,
    seats: Arc<Seats>,
    stop: CancellationToken,
    connections: CancellationToken,
    tracker: TaskTracker,
) {
    while let Some((stream, peer)) =
        accept_checked(&listener, &shared, Role::Server(&name), true, &stop).await
    {
        let limits = params.borrow().clone();
        let max_clients = shared.max_clients.load(Ordering::Relaxed);
        let rule = Rule::of(
            max_clients,
            limits.per_uid,
            shares(peer.uid, nix::unistd::geteuid().as_raw()),
        );
        let seat = match seats.take(rule, Holder::Uid(peer.uid)) {
            Ok(seat) => seat,
            Err(refused) => {
                refuse_seat(&stream, &name, &refused, peer.uid, &shared);
                continue;
            }
        };
        let events = server.sessions.clone();
        let token = connections.clone();
        let parking = shared.parking.clone();
        tracker.spawn(async move {
            session::run(stream, peer, events, limits, token, (parking, None)).await;
            drop(seat);
        });
    }
}

/// Tells a peer refused a seat why, in one JSON-RPC error line written without waiting (a
/// refused peer gets no more of our time; `attach` shows it and retries with backoff), counts
/// it, and logs it within the refusal budget (issue 47 §4).
fn refuse_seat(stream: &UnixStream, server: &str, refused: &Refused, uid: u32, shared: &Shared) {
    let line = actor::session::hangup_line(&refused.message(server), session::BUSY);
    let _ = stream.try_write(&line);
    support::observe::metrics().client_refused(server, refused.reason());
    let budget = shared
        .refused_log
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .allow(Instant::now());
    if let Some(suppressed) = budget {
        warn!(server = %server, peer_uid = uid, reason = refused.reason(), suppressed,
            "refused a connection: {}", refused.message(server));
    }
}

/// Control connections viewers may hold open at once (issue 33): an operator's are not
/// counted (operators are trusted as the supervisor's own uid is).
pub const MAX_VIEWER_CONNECTIONS: usize = 64;

/// One of the [`MAX_VIEWER_CONNECTIONS`], given back when dropped.
struct ViewerSeat(Arc<AtomicUsize>);

impl ViewerSeat {
    fn take(open: &Arc<AtomicUsize>) -> Option<ViewerSeat> {
        open.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < MAX_VIEWER_CONNECTIONS).then_some(n + 1)
        })
        .ok()
        .map(|_| ViewerSeat(open.clone()))
    }
}

impl Drop for ViewerSeat {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

pub(super) async fn control_loop(
    listener: UnixListener,
    ctx: ctl::Ctx,
    shared: Arc<Shared>,
    stop: CancellationToken,
    connections: CancellationToken,
    tracker: TaskTracker,
) {
    let viewers = Arc::new(AtomicUsize::new(0));
    while let Some((stream, peer)) =
        accept_checked(&listener, &shared, Role::Control, false, &stop).await
    {
        let who = shared.role_of(peer.uid, peer.gid);
        let viewer = match who {
            Some(ctl::Who::Viewer) => match ViewerSeat::take(&viewers) {
                Some(seat) => Some(seat),
                None => {
                    warn!(
                        peer_uid = peer.uid,
                        "refused a viewer's control connection: {MAX_VIEWER_CONNECTIONS} already open"
                    );
                    continue;
                }
            },
            _ => None,
        };
        debug!(
            peer_uid = peer.uid,
            peer_pid = peer.pid,
            ?who,
            "control connection"
        );
        // Asked again at each request and watch pass: a reload applies to open connections.
        let role: ctl::Role = {
            let shared = shared.clone();
            let (uid, gid) = (peer.uid, peer.gid);
            Arc::new(move || shared.role_of(uid, gid))
        };
        let serve = ctl::serve(stream, ctx.clone(), role, peer.uid, connections.clone());
        tracker.spawn(async move {
            serve.await;
            drop(viewer);
        });
    }
}

/// Accepts connections on server `name`'s `NAME.http.sock` (the same `SO_PEERCRED` check as
/// `NAME.sock`) and serves HTTP on each until `stop` fires (issue 16 §1, §4), or until a
/// reload no longer allows its peer ([`Shared::close_revoked_http`], issue 26 §5).
pub(super) async fn http_accept_loop(
    listener: UnixListener,
    name: String,
    front: Arc<front::http::Front>,
    shared: Arc<Shared>,
    (stop, tracker): (CancellationToken, TaskTracker),
    resumed: Vec<front::http::handoff::ParkedConn>,
) {
    let live = Arc::new(AtomicUsize::new(0));
    // Connections the previous image handed over between two requests (issue 32 §1): their
    // peers passed this check when they connected; they are checked again all the same.
    let mut resumed: std::collections::VecDeque<_> = resumed
        .into_iter()
        .filter_map(|c| {
            let std = std::os::unix::net::UnixStream::from(c.fd);
            std.set_nonblocking(true).ok()?;
            let stream = tokio::net::UnixStream::from_std(std).ok()?;
            let cred = stream.peer_cred().ok()?;
            shared
                .permits(Role::Server(&name), cred.uid(), cred.gid())
                .then(|| {
                    let peer = Peer {
                        uid: cred.uid(),
                        gid: cred.gid(),
                        pid: cred.pid(),
                        label: None,
                        endpoint: None,
                        transport: Default::default(),
                    };
                    (
                        front::http::handoff::Prefixed::new(c.read_ahead, stream),
                        peer,
                    )
                })
        })
        .collect();
    loop {
        let (stream, peer) = match resumed.pop_front() {
            Some(x) => x,
            None => {
                match accept_checked(&listener, &shared, Role::Server(&name), false, &stop).await {
                    Some((stream, peer)) => (
                        front::http::handoff::Prefixed::new(bytes::Bytes::new(), stream),
                        peer,
                    ),
                    None => break,
                }
            }
        };
        if live.load(Ordering::Relaxed) >= front::http::MAX_CONNECTIONS {
            debug!(server = %name, "HTTP connection refused: too many open");
            continue;
        }
        live.fetch_add(1, Ordering::Relaxed);
        let live = live.clone();
        let (n, revoked) = shared.register_http(&name, peer.clone());
        let via = front::http::Via::Unix {
            server: name.clone(),
            peer,
            revoked: revoked.clone(),
        };
        let front = front.clone();
        let shared = shared.clone();
        tracker.spawn(async move {
            front::http::serve_connection(stream, front, via, revoked.cancelled_owned()).await;
            shared.forget_http(n);
            live.fetch_sub(1, Ordering::Relaxed);
        });
    }
}
