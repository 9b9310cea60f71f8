//! The lifecycle sub-machine (issue 12 §3): one enum whose variants carry the child instance
//! and the deadlines that belong to that state, so an impossible combination (a child in
//! `backoff`, a spawn time while `starting`, a stop cause without a stop) cannot be written.
//! Plain data: no clock (every moment is passed in), no I/O beyond `Upstream::stop`.

use super::State;
use crate::outage::StopCause;
use std::time::Instant;
use upstream::Upstream;

/// Where the server is in its lifecycle, with what each state owns.
pub(super) enum Life {
    /// Instance `generation` is being spawned off the actor's thread (issue 27 §3): identity
    /// lookups, cgroup setup, fork and exec; its outcome arrives as an `Input::Spawned`.
    /// `deadline`: `start_timeout`, counted from the request to spawn. `cancel`: a stop asked
    /// meanwhile, carried out as soon as the instance exists (shown as `stopping`).
    Spawning {
        generation: u64,
        deadline: Instant,
        cancel: Option<StopCause>,
    },
    /// Spawned; the handshake is not answered yet. `deadline`: `start_timeout` (when it
    /// passes, the stop moves the server to `Stopping`).
    Starting {
        child: Box<dyn Upstream>,
        deadline: Instant,
        stdout_closed: Option<Instant>,
    },
    /// The handshake was answered at `since`; traffic flows.
    Ready {
        child: Box<dyn Upstream>,
        since: Instant,
        stdout_closed: Option<Instant>,
    },
    /// The stop ladder runs for `cause`; the exit decides what next. `ready_since`: when the
    /// instance had become ready, if it had (the backoff's reset rule needs it).
    Stopping {
        child: Box<dyn Upstream>,
        cause: StopCause,
        ready_since: Option<Instant>,
        stdout_closed: Option<Instant>,
    },
    /// Waiting to spawn at `until`. `probe_respawn`: the last instance exited on the era probe,
    /// which is a verdict, not an outage. `restart`: the spawn replaces an instance (counted
    /// in `restarts`); false for a first start that only waits for the daemon's spawn budget.
    Backoff {
        until: Instant,
        probe_respawn: bool,
        restart: bool,
    },
    /// Gave up; retried at `retry_at` (never, when the restart policy says so).
    Failed { retry_at: Option<Instant> },
    /// Not running and not scheduled to run.
    Stopped,
    /// A url server refused the credential at the handshake: not running, not retried until
    /// the operator's `start` (issue 29).
    AuthRequired,
    /// Not running; the next client request that needs the child starts it (`start =
    /// "on-demand"` before its first start, or after an `idle_stop`; issue 18).
    Idle,
}

/// What was running when the child exited.
pub(super) struct Ended {
    pub(super) child: Box<dyn Upstream>,
    /// Why the supervisor was stopping it, if it was.
    pub(super) cause: Option<StopCause>,
    /// When it had become ready, if it had.
    pub(super) ready_since: Option<Instant>,
}

impl Life {
    /// The state's name (`status`, metrics, outage records).
    pub(super) fn state(&self) -> State {
        match self {
            Life::Spawning { cancel: None, .. } | Life::Starting { .. } => State::Starting,
            Life::Spawning {
                cancel: Some(_), ..
            } => State::Stopping,
            Life::Ready { .. } => State::Ready,
            Life::Stopping { .. } => State::Stopping,
            Life::Backoff { .. } => State::Backoff,
            Life::Failed { .. } => State::Failed,
            Life::Stopped => State::Stopped,
            Life::Idle => State::Idle,
            Life::AuthRequired => State::AuthRequired,
        }
    }

    /// The running instance, if any.
    pub(super) fn child(&self) -> Option<&dyn Upstream> {
        match self {
            Life::Starting { child, .. }
            | Life::Ready { child, .. }
            | Life::Stopping { child, .. } => Some(child.as_ref()),
            _ => None,
        }
    }

    /// The running instance, mutable (an upgrade's hand-over pauses its pipes).
    pub(super) fn child_mut(&mut self) -> Option<&mut Box<dyn Upstream>> {
        match self {
            Life::Starting { child, .. }
            | Life::Ready { child, .. }
            | Life::Stopping { child, .. } => Some(child),
            _ => None,
        }
    }

    /// When the next spawn is due (`backoff`, `failed`).
    pub(super) fn next_spawn(&self) -> Option<Instant> {
        match self {
            Life::Backoff { until, .. } => Some(*until),
            Life::Failed { retry_at } => *retry_at,
            _ => None,
        }
    }

    /// The `start_timeout` deadline, while starting.
    pub(super) fn start_deadline(&self) -> Option<Instant> {
        match self {
            Life::Starting { deadline, .. }
            | Life::Spawning {
                deadline,
                cancel: None,
                ..
            } => Some(*deadline),
            _ => None,
        }
    }

    /// When the running child closed its stdout, if it did.
    pub(super) fn stdout_closed(&self) -> Option<Instant> {
        match self {
            Life::Starting { stdout_closed, .. }
            | Life::Ready { stdout_closed, .. }
            | Life::Stopping { stdout_closed, .. } => *stdout_closed,
            _ => None,
        }
    }

    /// Records (or clears) when the running child closed its stdout.
    pub(super) fn set_stdout_closed(&mut self, at: Option<Instant>) {
        match self {
            Life::Starting { stdout_closed, .. }
            | Life::Ready { stdout_closed, .. }
            | Life::Stopping { stdout_closed, .. } => *stdout_closed = at,
            _ => {}
        }
    }

    /// Whether the pending spawn (`backoff`) replaces an instance, so counts as a restart.
    pub(super) fn spawn_is_restart(&self) -> bool {
        matches!(self, Life::Backoff { restart: true, .. })
    }

    /// Moves the pending spawn to `at` (the daemon's spawn budget is spent until then, R11):
    /// a `backoff` or `failed` state keeps what it was waiting for; any other state without a
    /// child waits in `backoff` for a first start (not a restart). A state with a child is
    /// left alone.
    pub(super) fn defer_spawn(&mut self, at: Instant) {
        match self {
            Life::Backoff { until, .. } => *until = at,
            Life::Failed { retry_at } => *retry_at = Some(at),
            Life::Stopped | Life::Idle | Life::AuthRequired => {
                *self = Life::Backoff {
                    until: at,
                    probe_respawn: false,
                    restart: false,
                }
            }
            Life::Spawning { .. }
            | Life::Starting { .. }
            | Life::Ready { .. }
            | Life::Stopping { .. } => {}
        }
    }

    /// A first start that only waits for the daemon's spawn budget (R11): no instance failed,
    /// so requests wait for it as for a starting child.
    pub(super) fn awaiting_budget(&self) -> bool {
        matches!(self, Life::Backoff { restart: false, .. })
    }

    /// The pending spawn replaces a child that exited on the era probe.
    pub(super) fn probe_respawn(&self) -> bool {
        matches!(
            self,
            Life::Backoff {
                probe_respawn: true,
                ..
            }
        )
    }

    /// Why the running child is being stopped, if it is.
    pub(super) fn stop_cause(&self) -> Option<StopCause> {
        match self {
            Life::Stopping { cause, .. } => Some(*cause),
            _ => None,
        }
    }

    /// The generation whose stop ladder must start: a child in `stopping` whose ladder was
    /// not started yet (the core turns it into an `Effect::Stop`).
    pub(super) fn stop_due(&self) -> Option<u64> {
        match self {
            Life::Stopping { child, .. } if !child.stopping() => Some(child.generation()),
            _ => None,
        }
    }

    /// Starts the stop ladder of instance `generation`, if it is the one stopping (the
    /// shell, carrying out `Effect::Stop`; idempotent).
    pub(super) fn start_ladder(&mut self, generation: u64) {
        if let Life::Stopping { child, .. } = self {
            if child.generation() == generation {
                child.stop();
            }
        }
    }

    /// The handshake was answered at `now`: `starting` becomes `ready`.
    pub(super) fn ready(&mut self, now: Instant) {
        if let Life::Starting { .. } = self {
            if let Life::Starting {
                child,
                stdout_closed,
                ..
            } = std::mem::replace(self, Life::Stopped)
            {
                *self = Life::Ready {
                    child,
                    since: now,
                    stdout_closed,
                };
            }
        }
    }

    /// Starts the stop ladder for `cause`. A child already stopping keeps its ladder; its
    /// cause is replaced only when `overrule` (an operator's stop or the daemon's shutdown
    /// decides what follows the exit). Returns whether a child is being stopped.
    pub(super) fn stop(&mut self, cause: StopCause, overrule: bool) -> bool {
        match self {
            Life::Spawning { cancel, .. } => {
                if cancel.is_none() || overrule {
                    *cancel = Some(cause);
                }
                true
            }
            Life::Stopping { cause: c, .. } => {
                if overrule {
                    *c = cause;
                }
                true
            }
            Life::Starting { .. } | Life::Ready { .. } => {
                let ready_since = match self {
                    Life::Ready { since, .. } => Some(*since),
                    _ => None,
                };
                if let Life::Starting {
                    child,
                    stdout_closed,
                    ..
                }
                | Life::Ready {
                    child,
                    stdout_closed,
                    ..
                } = std::mem::replace(self, Life::Stopped)
                {
                    // The ladder itself is the shell's effect ([`Life::stop_due`]).
                    *self = Life::Stopping {
                        child,
                        cause,
                        ready_since,
                        stdout_closed,
                    };
                }
                true
            }
            _ => false,
        }
    }

    /// Whether an instance exists or is being spawned (a start would make a second one).
    pub(super) fn has_instance(&self) -> bool {
        matches!(self, Life::Spawning { .. }) || self.child().is_some()
    }

    /// Whether a stop would start one: an instance (or a spawn) not already being stopped.
    pub(super) fn can_stop(&self) -> bool {
        match self {
            Life::Spawning { cancel, .. } => cancel.is_none(),
            _ => self.child().is_some_and(|c| !c.stopping()),
        }
    }

    /// The generation being spawned, if a spawn is under way.
    pub(super) fn spawning(&self) -> Option<u64> {
        match self {
            Life::Spawning { generation, .. } => Some(*generation),
            _ => None,
        }
    }

    /// Instance `generation` was spawned: `starting` with it (its `start_timeout` counted
    /// from the request to spawn), or, when a stop was asked meanwhile, `stopping` it at once
    /// for that cause. A result for a spawn no longer awaited is handed back (dropping it
    /// stops the instance).
    pub(super) fn spawned(
        &mut self,
        generation: u64,
        child: Box<dyn Upstream>,
    ) -> Result<Option<StopCause>, Box<dyn Upstream>> {
        let Life::Spawning {
            generation: g,
            deadline,
            cancel,
        } = *self
        else {
            return Err(child);
        };
        if g != generation {
            return Err(child);
        }
        *self = match cancel {
            None => Life::Starting {
                child,
                deadline,
                stdout_closed: None,
            },
            Some(cause) => {
                // Stopped by the shell's effect ([`Life::stop_due`]).
                Life::Stopping {
                    child,
                    cause,
                    ready_since: None,
                    stdout_closed: None,
                }
            }
        };
        Ok(cancel)
    }

    /// The spawn of instance `generation` failed: `stopped` until the caller decides what
    /// follows, with the stop asked meanwhile, if any; `None` (nothing changed) when that
    /// spawn was not awaited.
    pub(super) fn spawn_failed(&mut self, generation: u64) -> Option<Option<StopCause>> {
        match *self {
            Life::Spawning {
                generation: g,
                cancel,
                ..
            } if g == generation => {
                *self = Life::Stopped;
                Some(cancel)
            }
            _ => None,
        }
    }

    /// The running child exited: what was running, leaving `stopped` until the caller decides
    /// what follows.
    pub(super) fn take(&mut self) -> Option<Ended> {
        match std::mem::replace(self, Life::Stopped) {
            Life::Starting { child, .. } => Some(Ended {
                child,
                cause: None,
                ready_since: None,
            }),
            Life::Ready { child, since, .. } => Some(Ended {
                child,
                cause: None,
                ready_since: Some(since),
            }),
            Life::Stopping {
                child,
                cause,
                ready_since,
                ..
            } => Some(Ended {
                child,
                cause: Some(cause),
                ready_since,
            }),
            other => {
                *self = other;
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use upstream::Outbound;
    use upstream::{Queued, Upstream};

    struct Child {
        stopped: bool,
    }
    impl Upstream for Child {
        fn generation(&self) -> u64 {
            1
        }
        fn describe(&self) -> upstream::Description {
            upstream::Description {
                pid: Some(1),
                ..Default::default()
            }
        }
        fn started_at(&self) -> Instant {
            Instant::now()
        }
        fn send(&self, _: Outbound) -> Queued {
            Queued::Ok
        }
        fn send_urgent(&self, _: Outbound) -> Queued {
            Queued::Ok
        }
        fn stop(&mut self) {
            self.stopped = true;
        }
        fn stopping(&self) -> bool {
            self.stopped
        }
    }

    fn starting(now: Instant) -> Life {
        Life::Starting {
            child: Box::new(Child { stopped: false }),
            deadline: now + Duration::from_secs(5),
            stdout_closed: None,
        }
    }

    #[test]
    fn ready_then_stopped_keeps_when_it_became_ready() {
        let now = Instant::now();
        let mut l = starting(now);
        assert_eq!(l.start_deadline(), Some(now + Duration::from_secs(5)));
        l.ready(now);
        assert_eq!(l.state(), State::Ready);
        assert_eq!(l.start_deadline(), None);
        assert!(l.stop(StopCause::ProbeTimeout, false));
        assert_eq!(l.state(), State::Stopping);
        let due = l.stop_due();
        assert!(due.is_some(), "the ladder is due");
        l.start_ladder(due.unwrap_or_default());
        assert!(
            l.child().is_some_and(|c| c.stopping()),
            "the ladder was started"
        );
        assert_eq!(l.stop_due(), None, "and is not due twice");
        let ended = l.take().map(|e| (e.cause, e.ready_since));
        assert_eq!(ended, Some((Some(StopCause::ProbeTimeout), Some(now))));
        assert_eq!(l.state(), State::Stopped);
    }

    #[test]
    fn an_operator_stop_overrules_a_health_stop_in_progress() {
        let now = Instant::now();
        let mut l = starting(now);
        l.stop(StopCause::StartTimeout, false);
        l.stop(StopCause::Restart, false);
        assert_eq!(
            l.stop_cause(),
            Some(StopCause::StartTimeout),
            "the first cause stays"
        );
        l.stop(StopCause::Stop, true);
        assert_eq!(
            l.stop_cause(),
            Some(StopCause::Stop),
            "the operator decides"
        );
    }

    #[test]
    fn no_child_no_stop_and_no_exit() {
        let now = Instant::now();
        let mut l = Life::Backoff {
            until: now,
            probe_respawn: true,
            restart: true,
        };
        assert!(!l.stop(StopCause::Stop, true));
        assert!(l.take().is_none());
        assert_eq!(l.state(), State::Backoff, "unchanged");
        assert!(l.probe_respawn());
        assert_eq!(l.next_spawn(), Some(now));
    }

    #[test]
    fn stdout_closed_belongs_to_the_running_child() {
        let now = Instant::now();
        let mut l = starting(now);
        l.set_stdout_closed(Some(now));
        l.ready(now);
        assert_eq!(l.stdout_closed(), Some(now), "kept across readiness");
        l.take();
        assert_eq!(l.stdout_closed(), None, "gone with the child");
    }
}
