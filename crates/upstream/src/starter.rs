//! The real [`Starter`] (the upstream seam, this crate's root, issue 27 §4): a child process
//! (`child::process`) or a remote session (`remote`), by the server's configuration. It sits in
//! the upstream layer beside both, so the actor above names neither (issue 48 §2); the actor's
//! simulation starts fakes instead (`actor/server/fakes.rs`), so the whole actor runs without
//! processes or a runtime.

use crate::child::process;
use crate::StderrTail;
use crate::{Description, Event, RemoteStatus, StartError, Starter, Upstream, UpstreamStatus};
use support::config::ServerConfig;
use tokio::sync::mpsc;

/// Real processes (`child::process::launch` on the blocking pool, then `Launched::start`) and
/// remote sessions (`remote::start`), reporting to the actor's upstream inbox.
pub struct ProcessStarter {
    /// The actor's upstream inbox.
    events: mpsc::Sender<Event>,
    /// The instance the previous image handed over (issue 32 §1): adopted by the first
    /// start instead of a spawn.
    inherited: Option<process::Inherited>,
    /// The remote session the previous image handed over (issue 32 §1): gone on with by
    /// the first start instead of a new `initialize`.
    resumed: Option<crate::remote::SessionState>,
}

impl ProcessStarter {
    /// A starter reporting to `events`, whose first start takes over what the previous image
    /// (or a crashed run, through systemd's store) handed over, if anything: `carried` holds
    /// a child's [`process::Inherited`] or a remote session's
    /// [`crate::remote::SessionState`]; anything else is dropped.
    pub fn new(events: mpsc::Sender<Event>, carried: Option<crate::Carried>) -> ProcessStarter {
        let (inherited, resumed) = match carried.map(|c| c.take::<process::Inherited>()) {
            None => (None, None),
            Some(Ok(child)) => (Some(child), None),
            Some(Err(other)) => (None, other.take::<crate::remote::SessionState>().ok()),
        };
        ProcessStarter {
            events,
            inherited,
            resumed,
        }
    }

    /// A remote session (issue 29): set up on the runtime (no blocking work: the headers'
    /// files are small), `Event::Connected` sent before any event of the session.
    fn start_remote(
        &mut self,
        spec: &crate::remote::RemoteSpec,
        generation: u64,
        tail: StderrTail,
    ) {
        let spec = spec.clone();
        let events = self.events.clone();
        let resumed = self.resumed.take();
        tokio::spawn(async move {
            let Ok(permit) = events.reserve().await else {
                return;
            };
            let connected = crate::remote::start(&spec, generation, tail, events.clone(), resumed)
                .map(|h| Box::new(h) as Box<dyn Upstream>);
            permit.send(Event::Connected(generation, connected));
        });
    }
}

impl Starter for ProcessStarter {
    /// A child's limits with its usage (`child::limits`); a url server's session as the
    /// running instance describes it (or, when none runs, its URL and the last line of its
    /// tail as the last error), with its sign-in (`auth`) when OAuth is configured.
    fn status(
        &self,
        cfg: &ServerConfig,
        described: Description,
        tail: &StderrTail,
    ) -> UpstreamStatus {
        UpstreamStatus {
            limits: crate::child::limits::status(&cfg.limits, described.usage),
            remote: cfg.remote.as_ref().map(|r| {
                let mut s = described.remote.unwrap_or_else(|| RemoteStatus {
                    url: support::config::shown_url(&r.url),
                    last_error: Some(tail.last_lines(1)).filter(|l| !l.is_empty()),
                    ..Default::default()
                });
                if r.oauth.is_some() {
                    s.auth = crate::auth::status(&cfg.name);
                }
                s
            }),
        }
    }

    fn admit(&mut self, now: std::time::Instant) -> Result<(), crate::Deferred> {
        use crate::child::budget::{admit, BURST, RATE};
        admit(now).map_err(|until| crate::Deferred {
            until,
            rate: RATE,
            burst: BURST,
        })
    }

    /// The blocking half ([`process::launch`]: identity lookups, cgroup setup, fork and exec)
    /// runs on tokio's blocking pool; back on the runtime, a slot of the upstream inbox is
    /// reserved *before* the instance's tasks start, and `Event::Connected` is sent into it
    /// with no await in between, so on the daemon's current-thread runtime it precedes every
    /// event of the instance. If the actor is gone, the instance is started and its handle
    /// dropped, which stops it: a spawn can never leak a process.
    fn start(&mut self, cfg: &ServerConfig, generation: u64, tail: StderrTail) {
        if let Some(remote) = crate::remote::RemoteSpec::of(cfg) {
            return self.start_remote(&remote, generation, tail);
        }
        let cfg = process::SpawnSpec::of(cfg);
        let events = self.events.clone();
        let inherited = self.inherited.take();
        tokio::spawn(async move {
            let command = cfg.command.clone();
            let launched = tokio::task::spawn_blocking(move || match inherited {
                Some(i) => process::adopt(&cfg, generation, tail, i),
                None => process::launch(&cfg, generation, tail),
            })
            .await
            .unwrap_or_else(|e| {
                Err(process::SpawnError {
                    command,
                    source: std::io::Error::other(format!("the spawn thread failed: {e}")),
                    cwd: None,
                })
            });
            match events.reserve().await {
                Ok(permit) => {
                    let connected = launched
                        .map(|l| Box::new(l.start(events.clone())) as Box<dyn Upstream>)
                        .map_err(StartError::from);
                    permit.send(Event::Connected(generation, connected));
                }
                Err(_) => drop(launched.map(|l| l.start(events.clone()))),
            }
        });
    }
}
