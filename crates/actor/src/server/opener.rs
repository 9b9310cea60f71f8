//! What the actor knows about the session it opened with the current child, and keeps across
//! restarts where the next child is the same command: the handshake (or the 2026 discovery
//! result, in the same shape), the era verdict of `protocol = "auto"` (issue 6 §1), the child-side
//! id of the supervisor's own `subscriptions/listen` stream on a 2026 child, and the log level
//! the child was set to for handshake clients (replayed after a restart, issue 5 §4).
//!
//! Owns those fields alone. The messages that open a session (the era probe, `initialize`,
//! `server/discover`) are written by the lifecycle (`core.rs`, lifecycle); this never writes to the
//! child and never answers a client.

use crate::era::{Era, Handshake};

/// The session with the child, as far as the actor knows it.
#[derive(Debug, Default)]
pub(super) struct Opener {
    /// The last handshake (or discovery) answered; kept while the child is down, so the
    /// outage answers and `initialize` of new clients can use it.
    handshake: Option<Handshake>,
    /// `protocol = "auto"`: the era the child was found to speak.
    verdict: Option<Era>,
    /// The supervisor's own listen stream on a 2026 child (child-side id).
    listen: Option<u64>,
    /// The level the child's logging was set to (handshake children).
    log_level: Option<usize>,
    /// The session was opened by the previous image and handed over (issue 32 §1): the
    /// adopted child is not sent a handshake again.
    adopted: bool,
}

impl Opener {
    /// The last handshake, if any.
    pub(super) fn handshake(&self) -> Option<&Handshake> {
        self.handshake.as_ref()
    }

    /// The child answered its handshake (or discovery) with `hs`; returns whether it is the
    /// first since the actor started (or since a reconfiguration forgot the last).
    pub(super) fn ready(&mut self, hs: Handshake) -> bool {
        let first = self.handshake.is_none();
        self.handshake = Some(hs);
        self.listen = None;
        first
    }

    /// The era the current child is driven in (handshake until known).
    pub(super) fn child_era(&self) -> Era {
        self.handshake.as_ref().map_or(Era::Handshake, |h| h.era)
    }

    /// The era `auto` found, if it did.
    pub(super) fn verdict(&self) -> Option<Era> {
        self.verdict
    }

    /// Records the era found; returns whether it changed.
    pub(super) fn set_verdict(&mut self, era: Era) -> bool {
        let changed = self.verdict != Some(era);
        self.verdict = Some(era);
        changed
    }

    /// The handshake (and, with `auto`, its era) of an on-demand server's saved record.
    pub(super) fn restore(&mut self, hs: Handshake, auto: bool) {
        if auto {
            self.verdict = Some(hs.era);
        }
        self.handshake = Some(hs);
    }

    /// A session the previous image opened with the child it hands over (issue 32 §1).
    pub(super) fn adopt(&mut self, hs: Handshake, auto: bool, log_level: Option<usize>) {
        self.restore(hs, auto);
        self.log_level = log_level;
        self.adopted = true;
    }

    /// Whether a handed-over session waits for its instance.
    pub(super) fn is_adopted(&self) -> bool {
        self.adopted
    }

    /// Whether the instance now starting is the handed-over one (asked once).
    pub(super) fn take_adopted(&mut self) -> bool {
        std::mem::take(&mut self.adopted)
    }

    /// A new command: what the old one said no longer describes it. `idle` (nothing runs)
    /// also forgets its handshake; a running child keeps it until the restart replaces it.
    pub(super) fn forget(&mut self, idle: bool) {
        self.verdict = None;
        if idle {
            self.handshake = None;
        }
    }

    /// The supervisor's listen stream (child-side id), if open.
    pub(super) fn listen(&self) -> Option<u64> {
        self.listen
    }

    /// The listen stream was opened as child-side id `id` (or could not be: `None`); returns
    /// the old one, which the caller cancels.
    pub(super) fn replace_listen(&mut self, id: Option<u64>) -> Option<u64> {
        std::mem::replace(&mut self.listen, id)
    }

    /// The child ended stream `id`; returns whether it was the supervisor's listen stream.
    pub(super) fn listen_ended(&mut self, id: u64) -> bool {
        let ours = self.listen == Some(id);
        if ours {
            self.listen = None;
        }
        ours
    }

    /// The level the child's logging was last set to.
    pub(super) fn log_level(&self) -> Option<usize> {
        self.log_level
    }

    /// The child's logging is to be at least as verbose as `level` (lower is more verbose):
    /// returns whether that changes the level to send.
    pub(super) fn raise_log_level(&mut self, level: usize) -> bool {
        if self.log_level.is_some_and(|l| l <= level) {
            return false;
        }
        self.log_level = Some(level);
        true
    }

    /// The child's logging is to be exactly `level`: returns whether that changes it.
    pub(super) fn set_log_level(&mut self, level: usize) -> bool {
        if self.log_level == Some(level) {
            return false;
        }
        self.log_level = Some(level);
        true
    }
}
