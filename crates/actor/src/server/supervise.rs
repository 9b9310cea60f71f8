//! The actor's own supervisor (issue 12 §2, issue 26 §2): an actor that ends unexpectedly (a
//! panic) is restarted with backoff and an intensity limit, never in the same poll.
//!
//! The policy is R10 of `reference/supervision.md` applied to the actor: the k-th panic within
//! [`WINDOW`] waits `min(60 s, 1 s · 2^(k-1))`, jittered by U(0.8, 1.2), before a fresh actor
//! starts; the [`MAX_PANICS`]-th panic within the window gives up: the server is `failed`, with
//! the panic message in `status`, until `start NAME` (or `restart`, or a reload that changes
//! the server) clears it, or [`FAILED_RETRY`] passes (one automatic attempt, as for a child).
//!
//! While no actor runs ([`Restarts`] decides, the shell [`supervise`] waits):
//! - during the restart delay, client sessions are *not* read: a client that connects then
//!   waits in the inbox and is served by the new actor (the delay is seconds);
//! - once `failed`, every new client is told why and closed at once, so nobody hangs;
//! - commands are always answered: `status` shows `backoff` or `failed` with the panic message,
//!   `start`/`restart`/`reconfigure` clear the verdict and start an actor now, `stop` keeps it
//!   down, `shutdown` ends.
//!
//! The rest of the daemon keeps running meanwhile: the delay is a timer in this task, never a
//! loop in the same poll.

use super::{Command, Server, State, Status};
use crate::outage::OutageStatus;
use crate::session::SessionEvent;
use base::backoff::{FAILED_RETRY, JITTER};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use std::collections::VecDeque;
use std::sync::atomic::AtomicU32;
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::config::ServerConfig;
use support::observe::metrics;
use tokio::sync::mpsc;
use tracing::{error, info};
use vocab::jsonrpc::message::{self, code};

/// Panics within [`WINDOW`] that make the server `failed` (R10: 5).
pub(super) const MAX_PANICS: usize = 5;
/// The window of the intensity limit (R10: 600 s).
pub(super) const WINDOW: Duration = Duration::from_secs(600);
/// The first restart delay (R9: 1 s).
pub(super) const FIRST_DELAY: Duration = Duration::from_secs(1);
/// The longest restart delay (R9: 60 s).
pub(super) const MAX_DELAY: Duration = Duration::from_secs(60);

/// What follows a panic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Start a fresh actor at this moment.
    RestartAt(Instant),
    /// Too many panics: `failed` until cleared, with one automatic attempt at this moment.
    Failed(Instant),
}

impl Next {
    /// When the next actor may start.
    pub fn at(self) -> Instant {
        match self {
            Next::RestartAt(t) | Next::Failed(t) => t,
        }
    }
}

/// What the actor's supervisor remembers across actor restarts (for `status`).
#[derive(Debug, Default, Clone)]
pub(super) struct ActorHistory {
    restarts: u64,
    last_panic: Option<String>,
}

impl ActorHistory {
    /// Times the actor ended unexpectedly (a panic) and was restarted.
    pub(super) fn restarts(&self) -> u64 {
        self.restarts
    }

    /// The last panic's message.
    pub(super) fn last_panic(&self) -> Option<&str> {
        self.last_panic.as_deref()
    }
}

/// The restart policy's state, sans-IO: panics in the window, and the history `status` shows.
/// Also an endpoint's dispatcher's (`endpoint/mod.rs`).
#[derive(Debug)]
pub struct Restarts {
    recent: VecDeque<Instant>,
    history: ActorHistory,
}

impl Default for Restarts {
    fn default() -> Self {
        Self::new()
    }
}

impl Restarts {
    pub fn new() -> Self {
        Restarts {
            recent: VecDeque::new(),
            history: ActorHistory::default(),
        }
    }

    /// What `status` shows of the actor's restarts.
    pub(super) fn history(&self) -> &ActorHistory {
        &self.history
    }

    /// Panics counted in the window (for `status`'s `consecutive_failures` while down).
    pub(super) fn in_window(&self) -> usize {
        self.recent.len()
    }

    /// Records a panic at `now` with its message; returns what follows.
    pub fn on_panic(&mut self, now: Instant, why: &str, rng: &mut impl Rng) -> Next {
        self.history.restarts = self.history.restarts.saturating_add(1);
        self.history.last_panic = Some(why.to_string());
        while self
            .recent
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) >= WINDOW)
        {
            self.recent.pop_front();
        }
        self.recent.push_back(now);
        let k = self.recent.len();
        if k >= MAX_PANICS {
            return Next::Failed(base::deadline::after(now, FAILED_RETRY));
        }
        let nominal = FIRST_DELAY
            .saturating_mul(1u32 << (k.saturating_sub(1)).min(16))
            .min(MAX_DELAY);
        let delay = nominal.mul_f64(rng.gen_range(JITTER.0..=JITTER.1));
        Next::RestartAt(base::deadline::after(now, delay))
    }

    /// Forgets the panics in the window (an operator's `start`, `restart`, or a reload that
    /// changes the server); the history stays.
    pub(super) fn clear(&mut self) {
        self.recent.clear();
    }
}

/// Runs the actor and restarts it when it panics, by [`Restarts`]' policy. The inboxes outlive
/// the actor, so the server's socket and handle stay valid. After a panic the dead actor's
/// clients are told why and disconnected (they may reconnect at once: the new actor reads
/// them), its child is stopped through the ladder and waited for, and a fresh actor starts
/// with the server's current configuration after the delay.
pub(super) async fn supervise(
    cfg: ServerConfig,
    mut sessions: mpsc::Receiver<SessionEvent>,
    mut commands: mpsc::Receiver<Command>,
    pid: Arc<AtomicU32>,
    adoption: Option<super::Adoption>,
) {
    use futures_util::FutureExt;
    let mut cfg = cfg;
    let mut adoption = adoption;
    let mut restarts = Restarts::new();
    let mut rng = StdRng::from_entropy();
    loop {
        let mut server = Server::new(
            cfg,
            pid.clone(),
            restarts.history().clone(),
            adoption.take(),
        );
        let run = std::panic::AssertUnwindSafe(server.run(&mut sessions, &mut commands));
        let Err(panic) = run.catch_unwind().await else {
            return;
        };
        let why = panic_message(&*panic);
        let next = restarts.on_panic(Instant::now(), &why, &mut rng);
        metrics().restart(server.name(), "actor-panic");
        match next {
            Next::RestartAt(at) => error!(panic = %why, restart_in_ms = ms_until(at),
                "the server's actor panicked; restarting it after a delay"),
            Next::Failed(_) => error!(message_id = support::logging::MSG_FAILED, panic = %why,
                panics = restarts.in_window(), window_s = WINDOW.as_secs(),
                "the server's actor panicked too often; failed until `start`"),
        }
        server.after_panic(&why).await;
        cfg = server.into_config();
        let down = Down {
            cfg: &mut cfg,
            restarts: &mut restarts,
        };
        match down.wait(next, &mut sessions, &mut commands).await {
            Resume::Start => {}
            Resume::End => return,
        }
    }
}

/// How the wait without an actor ends.
enum Resume {
    /// Start a fresh actor.
    Start,
    /// The daemon shut the server down (or its inboxes closed).
    End,
}

/// The server while no actor runs: what it answers.
struct Down<'a> {
    cfg: &'a mut ServerConfig,
    restarts: &'a mut Restarts,
}

impl Down<'_> {
    async fn wait(
        self,
        next: Next,
        sessions: &mut mpsc::Receiver<SessionEvent>,
        commands: &mut mpsc::Receiver<Command>,
    ) -> Resume {
        let failed = matches!(next, Next::Failed(_));
        // `stop` keeps the server down until `start`: no automatic attempt.
        let mut held_stopped = false;
        loop {
            let at = next.at();
            let timer = async {
                if held_stopped {
                    std::future::pending::<()>().await;
                }
                tokio::time::sleep_until(at.into()).await;
            };
            tokio::select! {
                _ = timer => {
                    info!("starting a fresh actor");
                    return Resume::Start;
                }
                // During the short restart delay a connecting client waits in the inbox for
                // the new actor; once failed (or stopped) it is told and closed.
                ev = sessions.recv(), if failed || held_stopped => match ev {
                    Some(ev) => self.refuse(ev, held_stopped),
                    None => return Resume::End,
                },
                cmd = commands.recv() => match cmd {
                    None => return Resume::End,
                    Some(Command::Shutdown(done)) => {
                        let _ = done.send(());
                        return Resume::End;
                    }
                    Some(Command::Stop(done)) => {
                        held_stopped = true;
                        let _ = done.send(());
                    }
                    Some(Command::Start(done)) | Some(Command::Restart(done)) => {
                        self.restarts.clear();
                        info!("start requested while the actor was down");
                        let _ = done.send(());
                        return Resume::Start;
                    }
                    Some(Command::Reconfigure(new, done)) => {
                        *self.cfg = *new;
                        self.restarts.clear();
                        let _ = done.send(());
                        return Resume::Start;
                    }
                    Some(Command::Status(reply)) => {
                        let state = if held_stopped {
                            State::Stopped
                        } else if failed {
                            State::Failed
                        } else {
                            State::Backoff
                        };
                        let _ = reply.send(self.status(state, at));
                    }
                    // No clients are connected while no actor runs.
                    Some(Command::Permit(_)) => {}
                    Some(Command::Busy(reply)) => {
                        let _ = reply.send(0);
                    }
                    // Nothing runs: the next image starts this server afresh.
                    Some(Command::HandOver(_)) => {}
                },
            }
        }
    }

    /// A session event while failed or stopped: a new client is told why and closed; the
    /// dead actor's clients were closed already, so their other events are dropped.
    fn refuse(&self, ev: SessionEvent, stopped: bool) {
        if let SessionEvent::Connected(_, tx, _) = ev {
            let why = self
                .restarts
                .history()
                .last_panic()
                .unwrap_or_default()
                .to_string();
            let (status, text) = if stopped {
                (
                    OutageStatus::Stopped,
                    format!("server `{}` is stopped", self.cfg.name),
                )
            } else {
                (
                    OutageStatus::Failed,
                    format!(
                        "server `{}` failed: its actor panicked {} times within {} s (last: {why}); run `mcp-supervisor start {}`",
                        self.cfg.name,
                        MAX_PANICS,
                        WINDOW.as_secs(),
                        self.cfg.name
                    ),
                )
            };
            tx.deliver(message::error_response(
                &message::raw_null(),
                code::INTERNAL_ERROR,
                &format!("mcp-supervisor: {text}"),
                Some(json!({"server": self.cfg.name, "status": status, "reason": "actor-panic"})),
            ));
            tx.close_after_drain();
        }
    }

    fn status(&self, state: State, next: Instant) -> Status {
        let h = self.restarts.history();
        Status {
            name: self.cfg.name.clone(),
            state,
            pid: None,
            restarts: 0,
            era: None,
            clients: 0,
            uptime_s: None,
            last_heard_s: None,
            probes_sent: 0,
            probes_answered: 0,
            ping_served: true,
            consecutive_failures: u32::try_from(self.restarts.in_window()).unwrap_or(u32::MAX),
            retry_in_ms: (state != State::Stopped).then(|| ms_until(next)),
            last_exit: None,
            stderr_tail: String::new(),
            actor_restarts: h.restarts,
            last_actor_panic: h.last_panic.clone(),
            limits: None,
            remote: self.cfg.remote.as_ref().map(|r| upstream::RemoteStatus {
                url: support::config::shown_url(&r.url),
                ..Default::default()
            }),
            // An actor being restarted has no history yet: empty, in the usual shape.
            traffic: support::observe::history::History::new(Instant::now())
                .summary(Instant::now(), support::observe::history::objective()),
        }
    }
}

/// Milliseconds from now until `t` (0 when past).
fn ms_until(t: Instant) -> u64 {
    u64::try_from(t.saturating_duration_since(Instant::now()).as_millis()).unwrap_or(u64::MAX)
}

/// The message of a caught panic (its payload's text).
pub fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic with no message".to_string())
}

#[cfg(test)]
mod tests {
    use super::{Next, Restarts, MAX_DELAY, MAX_PANICS, WINDOW};
    use rand::rngs::StdRng;
    use rand::SeedableRng;
    use std::time::{Duration, Instant};

    fn delay(next: Next, now: Instant) -> Duration {
        match next {
            Next::RestartAt(t) => t - now,
            Next::Failed(_) => panic!("gave up early"),
        }
    }

    #[test]
    fn panics_back_off_exponentially_with_jitter_and_give_up_at_the_fifth() {
        let mut r = Restarts::new();
        let mut rng = StdRng::seed_from_u64(3);
        let t0 = Instant::now();
        for (i, nominal) in [1u64, 2, 4, 8].iter().enumerate() {
            let now = t0 + Duration::from_secs(i as u64 * 20);
            let d = delay(r.on_panic(now, "boom", &mut rng), now).as_secs_f64();
            let n = *nominal as f64;
            assert!(d >= n * 0.8 - 1e-9 && d <= n * 1.2 + 1e-9, "panic {i}: {d}");
        }
        let now = t0 + Duration::from_secs(100);
        assert!(matches!(r.on_panic(now, "last", &mut rng), Next::Failed(_)));
        assert_eq!(r.history().restarts, MAX_PANICS as u64);
        assert_eq!(r.history().last_panic.as_deref(), Some("last"));
    }

    #[test]
    fn panics_outside_the_window_do_not_count() {
        let mut r = Restarts::new();
        let mut rng = StdRng::seed_from_u64(4);
        let t0 = Instant::now();
        for i in 0..20u64 {
            // One panic every 11 minutes: never more than one in the window.
            let now = t0 + (WINDOW + Duration::from_secs(60)) * i as u32;
            let d = delay(r.on_panic(now, "rare", &mut rng), now);
            assert!(d <= Duration::from_millis(1200), "{d:?}");
        }
        assert_eq!(r.in_window(), 1);
    }

    #[test]
    fn clear_forgets_the_window_but_keeps_the_history() {
        let mut r = Restarts::new();
        let mut rng = StdRng::seed_from_u64(5);
        let now = Instant::now();
        for _ in 0..MAX_PANICS - 1 {
            r.on_panic(now, "x", &mut rng);
        }
        r.clear();
        let d = delay(r.on_panic(now, "y", &mut rng), now);
        assert!(d <= Duration::from_millis(1200));
        assert_eq!(r.history().restarts, MAX_PANICS as u64);
        assert!(MAX_DELAY >= Duration::from_secs(8));
    }
}
