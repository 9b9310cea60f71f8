//! The moment the input being handled was taken: the only clock the actor's decisions read
//! (issue 12 §3). The shell reads the OS clock once per input ([`Clock::read`]); the
//! simulation sets it ([`Clock::at`]).

use std::time::{Instant, SystemTime};

/// A monotonic instant and the wall-clock time of the same moment.
#[derive(Debug, Clone, Copy)]
pub(super) struct Clock {
    now: Instant,
    wall: SystemTime,
}

impl Clock {
    /// The OS clocks now (the shell only).
    pub(super) fn read() -> Self {
        Clock {
            now: Instant::now(),
            wall: SystemTime::now(),
        }
    }

    /// A given moment (the simulation's clock).
    #[cfg(test)]
    pub(super) fn at(now: Instant, wall: SystemTime) -> Self {
        Clock { now, wall }
    }

    /// The monotonic instant: every deadline and duration.
    pub(super) fn now(self) -> Instant {
        self.now
    }

    /// The wall-clock time: only what is shown (`at` in status, log records).
    pub(super) fn wall(self) -> SystemTime {
        self.wall
    }
}
