//! The daemon's side of the HTTP endpoint (issue 16): each server's `NAME.http.sock` and
//! token, and the TCP listener shared by every server.

use super::sockets::{self, bind_socket};
use super::Daemon;
use anyhow::{Context, Result};
use std::path::PathBuf;
use support::config::ServerConfig;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

impl Daemon {
    /// Server `cfg`'s HTTP endpoint, when `http = true`: its token for the TCP side, and
    /// `NAME.http.sock` with its accept loop (stopped by the returned token, a child of
    /// `accept`). A failure is logged and leaves the server without that part: the
    /// newline-JSON socket and `attach` never depend on HTTP.
    pub(super) fn start_http(
        &mut self,
        cfg: &ServerConfig,
        accept: &CancellationToken,
    ) -> Option<(PathBuf, CancellationToken)> {
        if !cfg.http {
            self.front.set_token(&cfg.name, None);
            return None;
        }
        self.load_token(cfg);
        let path = front::http::url::unix_socket_path(&self.dir, &cfg.name);
        let key = format!("http:{}", cfg.name);
        let inherited = self.inherited(&key).and_then(|(fd, _)| {
            let std = std::os::unix::net::UnixListener::from(fd);
            std.set_nonblocking(true).ok()?;
            tokio::net::UnixListener::from_std(std).ok()
        });
        let bound = match inherited {
            Some(l) => Ok(l),
            None => bind_socket(&path, self.perms),
        };
        let listener = match bound {
            Ok(l) => l,
            Err(e) => {
                error!(server = %cfg.name, socket = %path.display(), error = %format!("{e:#}"), "cannot bind the HTTP Unix socket");
                return None;
            }
        };
        self.keep_listener(&key, &listener, false);
        let stop = accept.child_token();
        info!(server = %cfg.name, socket = %path.display(), "serving Streamable HTTP on the Unix socket");
        let resumed = self.resumed_http(Some(&cfg.name));
        self.tracker.spawn(sockets::http_accept_loop(
            listener,
            cfg.name.clone(),
            self.front.clone(),
            self.shared.clone(),
            (stop.clone(), self.tracker.clone()),
            resumed,
        ));
        Some((path, stop))
    }

    /// Binds the HTTP endpoint's TCP side once some server has `http = true` and
    /// `http_listen` is not `"off"`, and writes the bound address to `<socket_dir>/http.addr`
    /// (for `mcp-supervisor url`). Errors: the address cannot be bound.
    pub(super) async fn ensure_http_listener(&mut self) -> Result<()> {
        let wanted = self.config.servers.values().any(|c| c.http)
            || self.config.endpoints.values().any(|e| e.front.http);
        let Some(addr) = self
            .config
            .supervisor
            .http
            .listen
            .filter(|_| wanted && !self.http_tcp)
        else {
            return Ok(());
        };
        let listener = self
            .tcp_listener("http-tcp", addr)
            .await
            .with_context(|| format!("cannot listen for HTTP on {addr} (http_listen)"))?;
        let bound = listener.local_addr().unwrap_or(addr);
        let file = self.dir.join(front::http::url::ADDR_FILE);
        // Written aside and renamed, so a reader (`mcp-supervisor url`, a test) never sees it
        // empty or half written.
        let partial = self
            .dir
            .join(format!(".{}.partial", front::http::url::ADDR_FILE));
        let written = std::fs::write(&partial, format!("{bound}\n"))
            .and_then(|()| std::fs::rename(&partial, &file));
        if let Err(e) = written {
            let _ = std::fs::remove_file(&partial);
            warn!(path = %file.display(), error = %e, "cannot write the HTTP address file");
        }
        info!(addr = %bound, "serving Streamable HTTP at http://{bound}/mcp/NAME");
        self.http_tcp = true;
        let resumed = self.resumed_http(None);
        self.tracker.spawn(front::http::serve_tcp(
            listener,
            self.front.clone(),
            (self.accepting.clone(), self.tracker.clone()),
            resumed,
        ));
        Ok(())
    }

    /// Reads (or creates) server `cfg`'s bearer token into the front; on failure the TCP
    /// endpoint refuses that server's requests, and says why in the log.
    pub(super) fn load_token(&self, cfg: &ServerConfig) {
        match front::http::access::ensure_token(&self.dir, cfg) {
            Ok(t) => self.front.set_token(&cfg.name, Some(t)),
            Err(e) => {
                self.front.set_token(&cfg.name, None);
                error!(server = %cfg.name, error = %format!("{e:#}"), "no HTTP bearer token: the TCP endpoint refuses this server's requests");
            }
        }
    }
}
