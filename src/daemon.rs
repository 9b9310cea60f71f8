//! The composition root of `mcp-supervisor run`: binds one socket per server, starts one
//! server actor per server, accepts clients, and handles SIGTERM/SIGINT.
//!
//! Owns: the socket directory and socket files, the accept loops, the shutdown order. Never
//! touches MCP messages.
//!
//! Shutdown (issue 2 §8, F24-F25): stop accepting, stop every child in parallel through the
//! ladder, remove the sockets, exit 0; a second signal SIGKILLs every process group and exits
//! at once.

use crate::config::Config;
use crate::mux::server::{self, Command, ServerHandle};
use crate::mux::session::{self, Peer};
use anyhow::{bail, Context, Result};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use tokio::net::{UnixListener, UnixStream};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{error, info, warn};

/// Creates `dir` with mode 0700 when missing. An existing directory is used as it is.
pub fn prepare_socket_dir(dir: &Path) -> Result<()> {
    if !dir.exists() {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create socket directory {}", dir.display()))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .with_context(|| format!("cannot set mode 0700 on {}", dir.display()))?;
    } else if !dir.is_dir() {
        bail!("socket_dir {} exists and is not a directory", dir.display());
    }
    Ok(())
}

/// Binds `path` with mode 0600. A stale socket (connect refused) is replaced; a live one, or a
/// path that is not a socket, is refused and left alone (issue 3 §1, F29-F31).
pub fn bind_socket(path: &Path) -> Result<UnixListener> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {
            match std::os::unix::net::UnixStream::connect(path) {
                Ok(_) => bail!(
                "{} is in use by a running process (another mcp-supervisor?); refusing to start",
                path.display()
            ),
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
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("cannot set mode 0600 on {}", path.display()))?;
    Ok(listener)
}

/// The socket of server `name` under `dir`.
pub fn socket_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.sock"))
}

/// Runs the daemon until SIGTERM/SIGINT. Returns after every child is stopped.
pub async fn run(config: Config) -> Result<()> {
    let dir = config.supervisor.socket_dir.clone();
    prepare_socket_dir(&dir)?;
    // Bind everything first: a live socket or a non-socket path aborts before any child runs.
    let mut listeners = Vec::new();
    for name in config.servers.keys() {
        let path = socket_path(&dir, name);
        listeners.push((name.clone(), path.clone(), bind_socket(&path)?));
    }
    let mut sigterm = signal(SignalKind::terminate())?;
    let mut sigint = signal(SignalKind::interrupt())?;

    let accepting = CancellationToken::new();
    let connections = CancellationToken::new();
    let tracker = TaskTracker::new();
    let mut servers: Vec<(String, ServerHandle, tokio::task::JoinHandle<()>)> = Vec::new();
    for (name, path, listener) in listeners {
        let cfg = config.servers[&name].clone();
        let (queue, max) = (cfg.client_queue, cfg.max_message_size);
        let (handle, task) = server::start(cfg);
        info!(server = %name, socket = %path.display(), "listening");
        tracker.spawn(accept_loop(
            listener,
            handle.clone(),
            queue,
            max,
            config.supervisor.max_clients,
            accepting.clone(),
            connections.clone(),
            tracker.clone(),
        ));
        servers.push((name, handle, task));
    }
    info!(servers = servers.len(), config = %config.path.display(), "mcp-supervisor running");

    tokio::select! {
        _ = sigterm.recv() => info!("SIGTERM: stopping"),
        _ = sigint.recv() => info!("SIGINT: stopping"),
    }
    accepting.cancel();
    let mut stops = Vec::new();
    for (_, h, _) in &servers {
        let (tx, rx) = oneshot::channel();
        let _ = h.commands.send(Command::Shutdown(tx)).await;
        stops.push(rx);
    }
    let all_stopped = async {
        for rx in stops {
            let _ = rx.await;
        }
    };
    let forced = tokio::select! {
        _ = all_stopped => false,
        _ = sigterm.recv() => true,
        _ = sigint.recv() => true,
    };
    if forced {
        warn!("second signal: killing every child process group now");
        for (_, h, _) in &servers {
            h.kill_now();
        }
    }
    connections.cancel();
    for (name, _, task) in servers {
        if forced {
            task.abort();
        } else if let Err(e) = task.await {
            error!(server = %name, error = %e, "server task failed");
        }
        let _ = std::fs::remove_file(socket_path(&dir, &name));
    }
    tracker.close();
    if !forced {
        tracker.wait().await;
    }
    info!("stopped");
    Ok(())
}

#[allow(clippy::too_many_arguments)]
async fn accept_loop(
    listener: UnixListener,
    server: ServerHandle,
    queue: usize,
    max_message: usize,
    max_clients: usize,
    accepting: CancellationToken,
    connections: CancellationToken,
    tracker: TaskTracker,
) {
    let me = nix::unistd::geteuid().as_raw();
    let live = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    loop {
        let stream: UnixStream = tokio::select! {
            r = listener.accept() => match r {
                Ok((s, _)) => s,
                Err(e) => { warn!(error = %e, "accept failed"); continue; }
            },
            _ = accepting.cancelled() => return,
        };
        let peer = match stream.peer_cred() {
            Ok(c) => Peer {
                uid: c.uid(),
                pid: c.pid(),
            },
            Err(e) => {
                warn!(error = %e, "cannot read peer credentials; refusing the connection");
                continue;
            }
        };
        if peer.uid != me && peer.uid != 0 {
            warn!(
                peer_uid = peer.uid,
                peer_pid = peer.pid,
                "refused a connection from another user"
            );
            continue;
        }
        if live.load(std::sync::atomic::Ordering::Relaxed) >= max_clients {
            warn!(max_clients, "refused a connection: max_clients reached");
            continue;
        }
        let events = server.sessions.clone();
        let token = connections.clone();
        let live = live.clone();
        live.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tracker.spawn(async move {
            session::run(stream, peer, events, queue, max_message, token).await;
            live.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        });
    }
}
