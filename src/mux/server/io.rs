//! The actor's only doors to the operating system's processes, as traits: the core decides,
//! these carry out (issue 12 §3). The real implementations wrap `child::process`; the
//! simulation (`sim.rs`) uses fakes, so the whole actor runs without processes or a runtime.

use crate::child::process;
use crate::child::process::{ChildEvent, ChildHandle, Queued, StderrTail};
use bytes::Bytes;
use std::time::Instant;
use tokio::sync::mpsc;

/// A running child instance, as the actor sees it.
pub(crate) trait ChildIo: Send {
    /// Generation of this instance (its events carry it).
    fn generation(&self) -> u64;
    /// Process id (= process group id).
    fn pid(&self) -> u32;
    /// When it was spawned.
    fn spawned_at(&self) -> Instant;
    /// Queues a line for its stdin (bounded; never blocks).
    fn send(&self, line: Bytes) -> Queued;
    /// Queues a line ahead of ordinary traffic (cancels, ping answers; bounded).
    fn send_urgent(&self, line: Bytes) -> Queued;
    /// Starts the stop ladder (idempotent); an `Exited` event with `requested` follows.
    fn stop(&mut self);
    /// Whether the stop ladder was started.
    fn stopping(&self) -> bool;
    /// Its tree's memory and tasks at the last sample of its limits (none by default).
    fn usage(&self) -> Option<crate::child::limits::Usage> {
        None
    }
}

/// Starts child instances.
pub(crate) trait Spawner: Send {
    /// Whether a spawn may happen at `now` under the daemon's spawn budget (R11), or when the
    /// next one may. The simulation's fakes always may.
    fn admit(&mut self, _now: Instant) -> Result<(), Instant> {
        Ok(())
    }

    /// Starts spawning instance `generation` of `cfg`, off the actor's thread (issue 27 §3):
    /// returns at once; the outcome reaches the actor as `Input::Spawned`, ahead of every
    /// event of that instance, which go to the actor's child inbox.
    fn start(&mut self, spec: &process::SpawnSpec, generation: u64, tail: StderrTail);
}

impl ChildIo for ChildHandle {
    fn generation(&self) -> u64 {
        self.generation
    }
    fn pid(&self) -> u32 {
        self.pid
    }
    fn spawned_at(&self) -> Instant {
        self.spawned_at
    }
    fn send(&self, line: Bytes) -> Queued {
        ChildHandle::send(self, line)
    }
    fn send_urgent(&self, line: Bytes) -> Queued {
        ChildHandle::send_urgent(self, line)
    }
    fn stop(&mut self) {
        ChildHandle::stop(self)
    }
    fn stopping(&self) -> bool {
        ChildHandle::stopping(self)
    }
    fn usage(&self) -> Option<crate::child::limits::Usage> {
        ChildHandle::usage(self)
    }
}

/// Real processes (`child::process::launch` on the blocking pool, then `Launched::start`), reporting to the actor's child inbox.
pub(crate) struct ProcessSpawner {
    /// The actor's child inbox.
    pub(crate) events: mpsc::Sender<ChildEvent>,
}

impl Spawner for ProcessSpawner {
    fn admit(&mut self, now: Instant) -> Result<(), Instant> {
        crate::child::budget::admit(now)
    }

    /// The blocking half ([`process::launch`]: identity lookups, cgroup setup, fork and exec)
    /// runs on tokio's blocking pool; back on the runtime, a slot of the child inbox is
    /// reserved *before* the instance's tasks start, and `ChildEvent::Spawned` is sent into it
    /// with no await in between, so on the daemon's current-thread runtime it precedes every
    /// event of the instance. If the actor is gone, the instance is started and its handle
    /// dropped, which stops it: a spawn can never leak a process.
    fn start(&mut self, spec: &process::SpawnSpec, generation: u64, tail: StderrTail) {
        let cfg = spec.clone();
        let events = self.events.clone();
        tokio::spawn(async move {
            let command = cfg.command.clone();
            let launched =
                tokio::task::spawn_blocking(move || process::launch(&cfg, generation, tail))
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
                    let spawned = launched.map(|l| l.start(events.clone()));
                    permit.send(ChildEvent::Spawned(generation, spawned));
                }
                Err(_) => drop(launched.map(|l| l.start(events.clone()))),
            }
        });
    }
}
