//! The record of a server's child instances, across them: which generation comes next and how
//! to start it (the [`Starter`]), the stderr tail of the current one, the restart schedule
//! (backoff with jitter from the injected random source, R9), the consecutive failed starts
//! (R10), the restart count, the last exit and the pid the daemon reads for its emergency
//! SIGKILL (F25).
//!
//! Owns those fields alone. Never decides what follows an exit (that is the lifecycle's, in
//! `core.rs`, over [`super::life::Life`]) and never routes a message.

use super::LastExit;
use crate::outage::ExitReason;
use base::backoff::Backoff;
use rand::rngs::StdRng;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use support::config::ServerConfig;
use upstream::StderrTail;
use upstream::{Deferred, Description, Starter, UpstreamStatus};

/// What the actor remembers about its child instances.
pub(super) struct Instances {
    /// Starts instances (real processes, or the simulation's fakes).
    spawner: Box<dyn Starter>,
    /// The generation of the newest instance started (0 before the first).
    generation: u64,
    /// The stderr tail of the current instance (shared with its reader task).
    tail: StderrTail,
    backoff: Backoff,
    /// The backoff's jitter (seeded in the simulation, so a seed replays exactly).
    rng: StdRng,
    /// Consecutive starts that ended before ready.
    failed_starts: u32,
    /// Restarts since the actor started.
    restarts: u64,
    last_exit: Option<LastExit>,
    /// The previous image handed the server over at rest (stopped, failed, backoff): the
    /// first step keeps it so instead of starting it (issue 32 §1).
    at_rest: bool,
    /// The current instance's pid (= process group), 0 when none; read by the daemon.
    pid: Arc<AtomicU32>,
}

impl Instances {
    /// No instance yet; the schedule from `cfg`.
    pub(super) fn new(
        cfg: &ServerConfig,
        spawner: Box<dyn Starter>,
        rng: StdRng,
        pid: Arc<AtomicU32>,
    ) -> Self {
        Instances {
            spawner,
            generation: 0,
            tail: StderrTail::default(),
            backoff: schedule(cfg),
            rng,
            failed_starts: 0,
            restarts: 0,
            last_exit: None,
            at_rest: false,
            pid,
        }
    }

    /// Whether the daemon's spawn budget (R11) allows a spawn at `now`, or when it will.
    pub(super) fn admit(&mut self, now: Instant) -> Result<(), Deferred> {
        self.spawner.admit(now)
    }

    /// What `status` shows of the upstream (the starter says it, from `cfg`, the running
    /// instance's `described` and the current tail).
    pub(super) fn upstream_status(
        &self,
        cfg: &ServerConfig,
        described: Description,
    ) -> UpstreamStatus {
        self.spawner.status(cfg, described, &self.tail)
    }

    /// The next instance: its generation, with a cleared stderr tail (the spawn itself is
    /// the shell's effect, [`Instances::launch`]).
    pub(super) fn next(&mut self) -> u64 {
        self.generation = self.generation.saturating_add(1);
        self.tail.clear();
        self.generation
    }

    /// Starts spawning instance `generation` of the server configured as `cfg` (returns at
    /// once; the outcome comes back as an event). The shell only, carrying out
    /// `Effect::Spawn`.
    pub(super) fn launch(&mut self, cfg: &ServerConfig, generation: u64, tail: StderrTail) {
        self.spawner.start(cfg, generation, tail);
    }

    /// Goes on from an inherited instance's `generation` (issue 32 §1): the next is it.
    pub(super) fn resume_at(&mut self, generation: u64) {
        self.generation = generation.saturating_sub(1);
    }

    /// The generation of the newest instance started (0 before the first).
    pub(super) fn generation(&self) -> u64 {
        self.generation
    }

    /// The stderr tail of the current instance.
    pub(super) fn tail(&self) -> &StderrTail {
        &self.tail
    }

    /// Replaces the tail's text with `why` (a spawn error or an unrunnable command has no
    /// stderr; the reason goes where users look for it).
    pub(super) fn note(&self, why: &str) {
        self.tail.clear();
        self.tail.note(why);
    }

    /// Tells the daemon the pid of the instance now running (0: none).
    pub(super) fn publish_pid(&self, pid: u32) {
        self.pid.store(pid, Ordering::SeqCst);
    }

    /// Restarts since the actor started.
    pub(super) fn restarts(&self) -> u64 {
        self.restarts
    }

    /// Goes on from the previous image's `restarts` and last exit, and whether it handed the
    /// server over at rest (issue 32 §1).
    pub(super) fn resume(&mut self, restarts: u64, last_exit: Option<LastExit>, at_rest: bool) {
        self.restarts = restarts;
        self.last_exit = last_exit;
        self.at_rest = at_rest;
    }

    /// Whether the server was handed over at rest (once: the first step asks).
    pub(super) fn take_at_rest(&mut self) -> bool {
        std::mem::take(&mut self.at_rest)
    }

    /// Counts a restart.
    pub(super) fn count_restart(&mut self) {
        self.restarts = self.restarts.saturating_add(1);
    }

    /// The backoff's consecutive failures.
    pub(super) fn failures(&self) -> u32 {
        self.backoff.failures()
    }

    /// The delay before the next spawn after an instance spawned at `spawned_at` (ready since
    /// `ready_since`, if it was) ended at `now`; counts the failure.
    pub(super) fn backoff(
        &mut self,
        now: Instant,
        spawned_at: Instant,
        ready_since: Option<Instant>,
    ) -> Duration {
        self.backoff
            .on_exit(now, spawned_at, ready_since, &mut self.rng)
    }

    /// An operator's start or restart: the backoff and the failed starts start over.
    pub(super) fn reset(&mut self) {
        self.backoff.reset();
        self.failed_starts = 0;
    }

    /// A new configuration: a fresh schedule from it.
    pub(super) fn reconfigure(&mut self, cfg: &ServerConfig) {
        self.backoff = schedule(cfg);
    }

    /// Counts a start that ended before ready; returns the consecutive count.
    pub(super) fn failed_start(&mut self) -> u32 {
        self.failed_starts = self.failed_starts.saturating_add(1);
        self.failed_starts
    }

    /// The instance became ready: its failed starts are forgotten.
    pub(super) fn ready(&mut self) {
        self.failed_starts = 0;
    }

    /// Records the exit of the current instance, at `wall`.
    pub(super) fn record_exit(&mut self, reason: ExitReason, wall: SystemTime) {
        let exit = reason.exit();
        self.last_exit = Some(LastExit {
            code: exit.and_then(|e| e.code),
            signal: exit.and_then(|e| e.signal),
            reason,
            at: humantime::format_rfc3339_millis(wall).to_string(),
        });
    }

    /// The last exit, `None` until the first.
    pub(super) fn last_exit(&self) -> Option<&LastExit> {
        self.last_exit.as_ref()
    }
}

/// The restart schedule of `cfg`.
fn schedule(cfg: &ServerConfig) -> Backoff {
    Backoff::new(
        cfg.backoff_initial,
        cfg.backoff_max,
        cfg.backoff_reset_after,
    )
}
