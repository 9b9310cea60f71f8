//! The real [`Starter`] (the upstream seam, this crate's root, issue 27 §4): a child process
//! (`child::process`) or a remote session (`remote`), by the server's configuration. It sits in
//! the upstream layer beside both, so the actor above names neither (issue 48 §2); the actor's
//! simulation starts fakes instead (`actor/server/fakes.rs`), so the whole actor runs without
//! processes or a runtime.

use crate::child::process;
use crate::StderrTail;
use crate::{Event, StartError, Starter, Upstream};
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
    /// handed over (`inherited` for a child, `resumed` for a remote session), if anything.
    pub fn new(
        events: mpsc::Sender<Event>,
        inherited: Option<process::Inherited>,
        resumed: Option<crate::remote::SessionState>,
    ) -> ProcessStarter {
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
    fn admit(&mut self, now: std::time::Instant) -> Result<(), std::time::Instant> {
        crate::child::budget::admit(now)
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
