//! The socket directory and the sockets: permissions, the `.lock`, binding (stale, live and
//! non-socket paths), the `SO_PEERCRED` allow-list, and the accept loops of the server and
//! control sockets.

use super::*;

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
pub(super) struct Shared {
    pub(super) access: RwLock<Access>,
    pub(super) max_clients: AtomicUsize,
}

/// What a new session of a server needs: `(client_queue, max_message_size)`.
pub(super) type SessionParams = (usize, usize);

/// Accepts the next connection that passes the `SO_PEERCRED` check; refused ones are logged
/// (uid, gid, pid) and closed. `None` when `stop` fires.
pub(super) async fn accept_checked(
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
pub(super) async fn accept_loop(
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

pub(super) async fn control_loop(
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
