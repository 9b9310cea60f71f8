//! The watcher of one child instance: waits for the leader, runs the stop ladder (R14), and
//! ends what the instance leaves behind: the rest of its process group at once, and the
//! descendants that escaped the group (issue 17 §1, [`base::reaper`]). Meanwhile the
//! instance's limits are enforced ([`crate::child::limits::Guard`], issue 18 §3).

use super::{Exit, Ladder};
use crate::child::limits::Guard;
use base::reaper;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use std::process::ExitStatus;
use tokio::sync::oneshot;
use tracing::{debug, info, warn};

/// What the watcher needs to end an instance: its leader (also its process group) and its
/// marker, for the descendants that left the group.
pub(super) struct Watched {
    pub(super) server: String,
    pub(super) pid: u32,
    pub(super) marker: String,
    pub(super) since: u64,
    /// Its limits: the watchdog, the verdict on its exit, its cgroup's removal.
    pub(super) guard: Guard,
    /// The search for escaped descendants, started when the leader is gone.
    pub(super) cleanup: Option<tokio::task::JoinHandle<usize>>,
}

impl Watched {
    /// Sends `sig` to the descendants that left the group (off the runtime's threads: it
    /// reads `/proc`).
    async fn signal_escaped(&self, sig: Signal) {
        let (marker, since, pgid) = (self.marker.clone(), self.since, self.pid as i32);
        let _ =
            tokio::task::spawn_blocking(move || reaper::signal_escaped(&marker, since, pgid, sig))
                .await;
    }

    /// The leader is gone: tokio has its status (so its pid leaves the owned table), the rest
    /// of its group is SIGKILLed at once (R14; `ESRCH`, nothing left, is success), and the
    /// search for descendants that escaped the group starts on a blocking thread (issue 17
    /// §1). It is not awaited here: the exit must reach the actor without waiting for a scan
    /// of `/proc` (else a write to the dead child's stdin fails first and the exit is taken
    /// for a requested stop); the watcher task awaits it after the exit is reported.
    /// The exit carries the limit that ended the instance, if one did (issue 18 §3); the
    /// cleanup also removes the instance's cgroup.
    async fn reaped(
        &mut self,
        status: std::io::Result<Option<ExitStatus>>,
        requested: bool,
    ) -> Exit {
        reaper::disown(self.pid);
        // A re-adopted leader (`Ok(None)`) was reaped by its parent, maybe long ago: its
        // group's number may name another group now. What is left of it is found by its
        // marker instead (the cleanup below).
        if !matches!(status, Ok(None)) {
            let _ = killpg(Pid::from_raw(self.pid as i32), Signal::SIGKILL);
        }
        let mut exit = match status {
            Ok(Some(s)) => Exit::from_status(s, requested),
            Ok(None) => {
                info!("the re-adopted child exited; its exit status is unknown (its parent is another process)");
                Exit {
                    code: None,
                    signal: None,
                    requested,
                    limit: None,
                }
            }
            Err(e) => {
                warn!(error = %e, "waiting for the child failed");
                Exit {
                    code: None,
                    signal: None,
                    requested,
                    limit: None,
                }
            }
        };
        // Before the cleanup removes the cgroup whose events it may read.
        exit.limit = self.guard.verdict(&exit).await;
        let (server, marker, since, pgid) = (
            self.server.clone(),
            self.marker.clone(),
            self.since,
            self.pid as i32,
        );
        let guard = self.guard.clone();
        self.cleanup = Some(tokio::task::spawn_blocking(move || {
            let killed = reaper::kill_escaped(&server, &marker, since, pgid);
            guard.cleanup();
            killed
        }));
        exit
    }
}

/// Waits for the leader to exit, running the stop ladder when asked (or when the handle is
/// dropped). Whatever ends the leader, the rest of its group and its escaped descendants are
/// SIGKILLed at once (R14, [`Watched::reaped`]).
pub(super) async fn watch(
    child: &mut super::leader::Leader,
    me: &mut Watched,
    stop_rx: oneshot::Receiver<()>,
    close_stdin: oneshot::Sender<()>,
    ladder: Ladder,
) -> Exit {
    let pgid = Pid::from_raw(me.pid as i32);
    let guard = me.guard.clone();
    tokio::select! {
        status = child.wait() => return me.reaped(status, false).await,
        _ = stop_rx => {}
        // Over a limit: the watchdog killed the tree; the exit says which limit.
        _ = guard.enforce() => {
            let status = child.wait().await;
            return me.reaped(status, false).await;
        }
    }
    let _ = close_stdin.send(());
    debug!("stop: stdin closed, waiting {:?}", ladder.stop_grace);
    if let Ok(status) = tokio::time::timeout(ladder.stop_grace, child.wait()).await {
        return me.reaped(status, true).await;
    }
    info!(
        "stop: no exit {:?} after closing stdin, sending SIGTERM to the process group",
        ladder.stop_grace
    );
    let _ = killpg(pgid, Signal::SIGTERM);
    let _ = killpg(pgid, Signal::SIGCONT);
    me.signal_escaped(Signal::SIGTERM).await;
    if let Ok(status) = tokio::time::timeout(ladder.kill_timeout, child.wait()).await {
        return me.reaped(status, true).await;
    }
    warn!(
        "stop: no exit {:?} after SIGTERM, sending SIGKILL to the process group",
        ladder.kill_timeout
    );
    let _ = killpg(pgid, Signal::SIGKILL);
    let status = child.wait().await;
    me.reaped(status, true).await
}
