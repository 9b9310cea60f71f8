//! The daemon's side of endpoints (issue 31): each endpoint's `NAME.sock`, its HTTP side, its
//! place in the registry, and its [`Setup`] (the sources' actors) kept current across
//! reloads.
//!
//! An endpoint is started after every server (its setup holds their handles), and given a
//! new setup whenever a reload adds, removes or restarts servers: clients connected before
//! keep the sources they joined; a source removed closes them there, and they are answered
//! for it as for any source that is gone.

use super::sockets::{accept_loop, server_access, socket_path};
use super::{session_limits, Daemon};
use actor::registry::Entry;
use actor::server::{Command, ServerHandle};
use actor::session::Access;
use front::endpoint::{self, Link, Setup};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use support::config::EndpointConfig;
use tokio::net::UnixListener;
use tokio::sync::{oneshot, watch};
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

/// One running endpoint.
pub(super) struct RunningEndpoint {
    handle: ServerHandle,
    setup: watch::Sender<Arc<Setup>>,
    accept: CancellationToken,
    params: watch::Sender<super::SessionParams>,
    path: PathBuf,
    activated: bool,
    http: Option<(PathBuf, CancellationToken)>,
}

impl Daemon {
    /// Tells each endpoint who may use it now (a reload): its clients no longer allowed are
    /// cut, as a server's are (issue 14 §2).
    pub(super) fn permit_endpoints(&self, revised: &HashMap<String, Access>) {
        for (name, e) in &self.endpoints {
            let Some(access) = revised.get(name) else {
                continue;
            };
            if e.handle
                .commands
                .try_send(Command::Permit(access.clone()))
                .is_err()
            {
                warn!(endpoint = %name, "the endpoint's command queue is full: sessions no longer allowed stay open until they close");
            }
        }
    }

    /// The sources of `cfg` as they run now.
    fn endpoint_setup(&self, cfg: &EndpointConfig) -> Setup {
        let sources = cfg
            .servers
            .iter()
            .map(|s| {
                let running = self.servers.get(s)?;
                let scfg = self.config.servers.get(s)?;
                Some(Link {
                    name: s.clone(),
                    handle: running.handle.clone(),
                    access: server_access(&self.config.supervisor, scfg),
                    queue: scfg.client_queue,
                    seats: running.seats.clone(),
                    per_uid: scfg.max_clients_per_uid,
                })
            })
            .collect();
        Setup {
            cfg: Arc::new(cfg.clone()),
            sources,
            max_clients: self.config.supervisor.max_clients,
            catalogs: Default::default(),
        }
    }

    /// Reads (or creates) endpoint `cfg`'s named tokens into the front (issue 31 §5). A token
    /// that cannot be had is logged; its client cannot use HTTP until the next reload.
    fn load_labelled(&self, cfg: &EndpointConfig) {
        let mut tokens = Vec::new();
        if cfg.front.http {
            for label in cfg
                .policy
                .clients
                .iter()
                .filter(|(_, r)| r.token)
                .map(|(l, _)| l)
            {
                let path = front::http::access::labelled_token_path(&self.dir, &cfg.name, label);
                match front::http::access::ensure_token_file(&path, true, &cfg.name) {
                    Ok(t) => tokens.push((support::config::label_id(label), t)),
                    Err(e) => {
                        error!(endpoint = %cfg.name, client = %label, error = %format!("{e:#}"), "no named HTTP token for this client");
                    }
                }
            }
        }
        self.front.set_labelled(&cfg.name, tokens);
    }

    /// Starts endpoint `cfg` on `listener`: its dispatcher, accept loop, HTTP side and
    /// registry entry.
    pub(super) fn start_endpoint(
        &mut self,
        cfg: EndpointConfig,
        listener: UnixListener,
        activated: bool,
    ) {
        let name = cfg.name.clone();
        let path = socket_path(&self.dir, &name);
        let (handle, setup) = endpoint::start(self.endpoint_setup(&cfg));
        let (params, params_rx) = watch::channel(session_limits(&cfg.front, &self.memory));
        let accept = self.accepting.child_token();
        self.keep_listener(&name, &listener, activated);
        info!(endpoint = %name, socket = %path.display(), sources = ?cfg.servers, "endpoint listening");
        let http = self.start_http(&cfg.front, &accept);
        self.load_labelled(&cfg);
        let seats = Arc::new(actor::seats::Seats::default());
        // The socket clients the previous image handed over (issue 32 §1).
        self.resume_clients(&name, &handle, &params_rx, &seats);
        self.tracker.spawn(accept_loop(
            listener,
            name.clone(),
            handle.clone(),
            params_rx,
            self.shared.clone(),
            seats,
            accept.clone(),
            self.connections.clone(),
            self.tracker.clone(),
        ));
        self.registry.insert(
            &name,
            Entry {
                handle: handle.clone(),
                cfg: Arc::new(cfg.front.clone()),
                sources: Some(cfg.servers.clone()),
                seats: None,
            },
        );
        self.endpoints.insert(
            name,
            RunningEndpoint {
                handle,
                setup,
                accept,
                params,
                path,
                activated,
                http,
            },
        );
    }

    /// Gives every running endpoint the sources as they run now and its current
    /// configuration (after a reload); new clients join those.
    pub(super) fn refresh_endpoints(&mut self) {
        let cfgs: Vec<EndpointConfig> = self.config.endpoints.values().cloned().collect();
        for cfg in cfgs {
            let setup = self.endpoint_setup(&cfg);
            let http_changed = self.registry.get(&cfg.name).is_none_or(|e| {
                e.cfg.http != cfg.front.http || e.cfg.http_token_file != cfg.front.http_token_file
            });
            let Some(r) = self.endpoints.get(&cfg.name) else {
                continue;
            };
            let _ = r.setup.send(Arc::new(setup));
            let _ = r.params.send(session_limits(&cfg.front, &self.memory));
            let handle = r.handle.clone();
            let accept = r.accept.clone();
            if http_changed {
                if let Some((p, stop)) = self
                    .endpoints
                    .get_mut(&cfg.name)
                    .and_then(|r| r.http.take())
                {
                    stop.cancel();
                    let _ = std::fs::remove_file(p);
                }
                let http = self.start_http(&cfg.front, &accept);
                if let Some(r) = self.endpoints.get_mut(&cfg.name) {
                    r.http = http;
                }
            } else if cfg.front.http {
                self.load_token(&cfg.front);
            }
            self.load_labelled(&cfg);
            self.registry.insert(
                &cfg.name,
                Entry {
                    handle,
                    cfg: Arc::new(cfg.front.clone()),
                    sources: Some(cfg.servers.clone()),
                    seats: None,
                },
            );
        }
    }

    /// Stops an endpoint removed from the configuration: no more accepts, its clients
    /// closed, its sockets removed.
    pub(super) async fn retire_endpoint(&mut self, name: &str) {
        let Some(r) = self.endpoints.remove(name) else {
            return;
        };
        self.registry.remove(name);
        r.accept.cancel();
        if !r.activated {
            let _ = std::fs::remove_file(&r.path);
        }
        if let Some((p, _)) = &r.http {
            let _ = std::fs::remove_file(p);
        }
        self.front.set_token(name, None);
        self.front.set_labelled(name, Vec::new());
        let (tx, rx) = oneshot::channel();
        if r.handle.commands.send(Command::Shutdown(tx)).await.is_ok() {
            let _ = rx.await;
        }
    }

    /// Each running endpoint's name and handle (an upgrade asks them, issue 32 §1).
    pub(super) fn endpoint_handles(&self) -> Vec<(String, ServerHandle)> {
        self.endpoints
            .iter()
            .map(|(n, e)| (n.clone(), e.handle.clone()))
            .collect()
    }

    /// At shutdown: every endpoint's clients closed and sockets removed.
    pub(super) async fn stop_endpoints(&mut self) {
        let names: Vec<String> = self.endpoints.keys().cloned().collect();
        for n in names {
            self.retire_endpoint(&n).await;
        }
    }
}
