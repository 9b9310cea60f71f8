//! The lifecycle's own decisions: spawning under the daemon's spawn budget (R11), the stop
//! ladder, the operator's verbs, `failed`, the restart policy's backoff, and the on-demand
//! starts and idle stops (issue 18 §1-2, issue 26 §7). What follows an end is decided in
//! `exits.rs`; this file carries out the part of it that is the lifecycle's.
//!
//! A section of the core as free functions over one narrow context ([`Lifecycle`]): the
//! lifecycle, the instances, the demand, and the outbox (for the `Spawn` and `Stop` effects).
//! What the caller must still do is returned: the status held requests now fail with, when
//! the server can no longer start them. Requests in flight, the handshake and the lists are
//! the caller's.
//!
//! No clock read (the moment is the stamp's), no I/O.

use super::core::{Owner, Pending};
use super::demand::Demand;
use super::effects::Effect;
use super::held::HeldQueue;
use super::instances::Instances;
use super::life::Life;
use super::outbox::{Outbox, Stamp};
use super::rounds::Rounds;
use super::routing::Routing;
use super::subtable::Subscriptions;
use super::telemetry::Telemetry;
use super::State;
use crate::outage::{ExitReason, OutageStatus, StopCause};
use base::backoff::{FAILED_RETRY, MAX_FAILED_STARTS};
use std::time::Instant;
use support::config::{ServerConfig, StartMode};
use support::logging::{MSG_BACKOFF, MSG_FAILED};
use tracing::{error, info, warn};
use upstream::Exit;

/// What a lifecycle decision touches.
pub(super) struct Lifecycle<'a> {
    life: &'a mut Life,
    /// The spawn budget, the generations, restarts and failures, the last exit.
    instances: &'a mut Instances,
    /// On-demand starts: who started the instance, the retry after a failed start, the idle
    /// clock.
    demand: &'a mut Demand,
    /// Where the `Spawn` and `Stop` effects go.
    outbox: &'a mut Outbox,
    /// The on-demand metrics.
    telemetry: &'a mut Telemetry,
    /// The moment.
    at: Stamp<'a>,
    /// `start_timeout`, `start`, `restart`, `idle_stop`, `queue_wait`.
    cfg: &'a ServerConfig,
}

impl<'a> Lifecycle<'a> {
    /// The context over the lifecycle, the instances, the demand and the outbox at `at`.
    pub(super) fn new(
        life: &'a mut Life,
        instances: &'a mut Instances,
        demand: &'a mut Demand,
        outbox: &'a mut Outbox,
        telemetry: &'a mut Telemetry,
        at: Stamp<'a>,
        cfg: &'a ServerConfig,
    ) -> Self {
        Lifecycle {
            life,
            instances,
            demand,
            outbox,
            telemetry,
            at,
            cfg,
        }
    }
}

/// Spawns the next instance now, or, when the daemon's spawn budget is spent (R11), as soon as
/// it allows (the state waits in `backoff`; no failure is counted).
pub(super) fn spawn(cx: &mut Lifecycle<'_>) {
    if admit_spawn(cx) {
        spawn_now(cx);
    }
}

/// Whether the spawn budget allows a spawn now; if not, the pending spawn is moved to when it
/// does and this says so in the log.
pub(super) fn admit_spawn(cx: &mut Lifecycle<'_>) -> bool {
    let now = cx.at.now();
    match cx.instances.admit(now) {
        Ok(()) => true,
        Err(deferred) => {
            let wait = deferred.until.saturating_duration_since(now);
            info!(
                spawn_in_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                "the daemon's spawn budget is spent ({} per second, burst {}); spawning later",
                deferred.rate,
                deferred.burst
            );
            cx.life.defer_spawn(deferred.until);
            false
        }
    }
}

/// Starts spawning the next instance, off the actor's thread (issue 27 §3): the state is
/// `starting` (`Life::Spawning`) until the shell reports the outcome.
pub(super) fn spawn_now(cx: &mut Lifecycle<'_>) {
    let generation = cx.instances.next();
    cx.outbox.push(Effect::Spawn {
        generation,
        tail: cx.instances.tail().clone(),
    });
    *cx.life = Life::Spawning {
        generation,
        deadline: base::deadline::after(cx.at.now(), cx.cfg.start_timeout),
        cancel: None,
    };
}

/// [`Life::stop`], and the stop ladder's effect when it moved a child to `stopping`. Returns
/// whether a stop is under way.
pub(super) fn stop(cx: &mut Lifecycle<'_>, cause: StopCause, overrule: bool) -> bool {
    let stopping = cx.life.stop(cause, overrule);
    ladder_if_due(cx);
    stopping
}

/// Decides the stop ladder of a child that entered `stopping` (`Effect::Stop`).
pub(super) fn ladder_if_due(cx: &mut Lifecycle<'_>) {
    if let Some(generation) = cx.life.stop_due() {
        cx.outbox.push(Effect::Stop { generation });
    }
}

/// Stops the child for `cause`, when it can be stopped: no probes, no forwarding while the
/// ladder runs; the exit decides what next.
pub(super) fn stop_child(cx: &mut Lifecycle<'_>, cause: StopCause) {
    if cx.life.can_stop() {
        if cause == StopCause::Idle {
            info!(reason = cause.reason(), "stopping the child");
        } else {
            warn!(reason = cause.reason(), "stopping the child");
        }
        stop(cx, cause, false);
    }
}

/// The last exit is `reason`, now.
pub(super) fn record_exit(cx: &mut Lifecycle<'_>, reason: ExitReason) {
    cx.instances.record_exit(reason, cx.at.wall());
}

/// `failed` for `why`, tried again once after [`FAILED_RETRY`]; the caller fails what is
/// held with `failed`.
pub(super) fn enter_failed(cx: &mut Lifecycle<'_>, why: &str) {
    error!(message_id = MSG_FAILED, reason = %why, restart_n = cx.instances.restarts(),
        retry_in_s = FAILED_RETRY.as_secs(), "failed: {why}");
    *cx.life = Life::Failed {
        retry_at: Some(cx.at.now() + FAILED_RETRY),
    };
}

/// The operator's `stop` (`cause` `Stop`) or the daemon's shutdown (`Shutdown`): it overrules
/// a health or restart stop under way, and the server stays stopped. The caller fails what is
/// held with `stopped`.
pub(super) fn stop_for_good(cx: &mut Lifecycle<'_>, cause: StopCause) {
    if !stop(cx, cause, true) {
        *cx.life = Life::Stopped;
    }
}

/// The operator's `start`: the failure counts start again, and a spawn when nothing runs.
pub(super) fn operator_start(cx: &mut Lifecycle<'_>) {
    cx.instances.reset();
    if !cx.life.has_instance() {
        info!("start requested");
        spawn(cx);
    }
}

/// The operator's `restart` (or a changed configuration): a start when idle; else the child
/// is stopped and respawned, or spawned when none runs.
pub(super) fn operator_restart(cx: &mut Lifecycle<'_>) {
    if cx.life.state() == State::Idle {
        // Nothing to restart: a start, not a restart.
        return operator_start(cx);
    }
    info!("restart requested");
    cx.instances.reset();
    if cx.life.has_instance() {
        stop_child(cx, StopCause::Restart);
    } else {
        cx.instances.count_restart();
        spawn(cx);
    }
}

/// A spawn failed (the error is logged by the caller): backoff, counted as a failed start.
/// Returns true when that was the [`MAX_FAILED_STARTS`]-th in a row and the server is
/// `failed` now (the caller fails what is held).
pub(super) fn schedule_restart(cx: &mut Lifecycle<'_>, now: Instant) -> bool {
    let delay = cx.instances.backoff(now, now, None);
    *cx.life = Life::Backoff {
        until: base::deadline::after(now, delay),
        probe_respawn: false,
        restart: true,
    };
    info!(
        message_id = MSG_BACKOFF,
        restart_n = cx.instances.restarts() + 1,
        backoff_ms = delay.as_millis() as u64,
        attempt = cx.instances.failures(),
        reason = "spawn-error",
        "restarting after backoff"
    );
    if cx.instances.failed_start() >= MAX_FAILED_STARTS {
        enter_failed(cx, "too many consecutive failed starts");
        return true;
    }
    false
}

/// The restart policy after an end (`exit`, `cause`) of an instance spawned at `started_at`
/// and ready since `ready_since`: backoff and a restart, or stopped (a clean exit) or
/// `failed`. Returns the status held requests now fail with, when there is no restart.
pub(super) fn after_exit(
    cx: &mut Lifecycle<'_>,
    started_at: Instant,
    exit: Exit,
    cause: Option<StopCause>,
    ready_since: Option<Instant>,
) -> Option<OutageStatus> {
    let now = cx.at.now();
    if super::exits::restarts(cx.cfg.restart, cause, &exit) {
        let delay = cx.instances.backoff(now, started_at, ready_since);
        *cx.life = Life::Backoff {
            until: base::deadline::after(now, delay),
            probe_respawn: false,
            restart: true,
        };
        info!(message_id = MSG_BACKOFF, restart_n = cx.instances.restarts() + 1,
            backoff_ms = delay.as_millis() as u64, attempt = cx.instances.failures(),
            reason = %exit.reason(), "restarting after backoff");
        return None;
    }
    if exit.clean() {
        info!(policy = ?cx.cfg.restart, "not restarting (restart policy)");
        *cx.life = Life::Stopped;
        Some(OutageStatus::Stopped)
    } else {
        error!(message_id = MSG_FAILED, reason = %exit.reason(), restart_n = cx.instances.restarts(),
            policy = ?cx.cfg.restart, "failed: not restarting (restart policy)");
        *cx.life = Life::Failed { retry_at: None };
        Some(OutageStatus::Failed)
    }
}

/// Starts the child for a client request (`method`), when it is idle (and, after a failed
/// start, once its backoff delay passed: [`lazy_retry_pending`]).
pub(super) fn start_on_demand(cx: &mut Lifecycle<'_>, method: &str) {
    if cx.life.state() != State::Idle || lazy_retry_pending(cx.demand, cx.at.now()) {
        return;
    }
    info!(method, "starting the child on demand");
    cx.telemetry.metrics().demand("on-demand-start");
    cx.demand.start_by_request();
    spawn(cx);
}

/// An on-demand start failed (the spawn, or the child exited or timed out before it was
/// ready; issue 26 §7): no automatic retry and never the ten-minute `failed`, which would
/// disable the server long after its cause is fixed. It goes back to `idle` (the record still
/// answers what it can), and the first request after the backoff delay (capped at
/// `backoff_max`) starts it again; `status` keeps the exit and its stderr tail.
pub(super) fn after_failed_lazy_start(cx: &mut Lifecycle<'_>, spawned_at: Instant, reason: &str) {
    let now = cx.at.now();
    let delay = cx.instances.backoff(now, spawned_at, None);
    cx.demand.start_failed(base::deadline::after(now, delay));
    warn!(
        reason,
        retry_in_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
        attempt = cx.instances.failures(),
        "the on-demand start failed; the first request after the backoff delay starts it again"
    );
    *cx.life = Life::Idle;
}

/// At a timer, with `idle_stop` passed: stops the ready child unless something holds it
/// (`busy`), in which case the idle clock starts again.
pub(super) fn idle_stop(cx: &mut Lifecycle<'_>, busy: bool) {
    if busy {
        cx.demand.used(cx.at.now());
        return;
    }
    info!(
        idle_s = cx.cfg.idle_stop.map(|d| d.as_secs_f64()),
        "no client used the child for idle_stop; stopping it"
    );
    cx.telemetry.metrics().demand("idle-stop");
    stop_child(cx, StopCause::Idle);
}

/// After the exit of an idle stop: `idle`, or straight back up when requests arrived during
/// the stop (`held`: they were held).
pub(super) fn after_idle_stop(cx: &mut Lifecycle<'_>, held: bool) {
    cx.demand.settled(false);
    *cx.life = Life::Idle;
    if held {
        info!("requests arrived during the idle stop; starting the child again");
        start_on_demand(cx, "held");
    }
}

/// Whether the failed start of an on-demand child is still inside its backoff delay at
/// `now`: a request gets the outage answer (with `retry_after`) instead of a start.
pub(super) fn lazy_retry_pending(demand: &Demand, now: Instant) -> bool {
    demand.retry_at().is_some_and(|t| t > now)
}

/// When the next start may happen: the lifecycle's next spawn (`backoff`, `failed`), or,
/// idle after a failed on-demand start, when the next request may start it.
pub(super) fn next_attempt(life: &Life, demand: &Demand) -> Option<Instant> {
    life.next_spawn().or(match life.state() {
        State::Idle => demand.retry_at(),
        _ => None,
    })
}

/// Whether a failed start is judged as an on-demand one ([`after_failed_lazy_start`]): the
/// server starts on demand, or this instance was started by a request.
pub(super) fn lazy_start(cfg: &ServerConfig, demand: &Demand) -> bool {
    cfg.start == StartMode::OnDemand || demand.by_request()
}

/// How long a request held at `now` may wait: `start_timeout` from the spawn when a request
/// started the child (an `npx` server may take that long), else `queue_wait`.
pub(super) fn hold_deadline(
    life: &Life,
    demand: &Demand,
    cfg: &ServerConfig,
    now: Instant,
) -> Instant {
    let wait = base::deadline::after(now, cfg.queue_wait);
    match life.start_deadline() {
        Some(t) if demand.by_request() => t.max(wait),
        _ => wait,
    }
}

/// When the ready child becomes idle enough to stop, if `idle_stop` is set.
pub(super) fn idle_deadline(life: &Life, demand: &Demand, cfg: &ServerConfig) -> Option<Instant> {
    let after = cfg.idle_stop?;
    (life.state() == State::Ready).then_some(base::deadline::after(demand.last_use(), after))
}

/// Whether something still holds the child from an idle stop: client requests in flight
/// (`routing`) or `held`, the child's questions waiting for clients, rounds, subscriptions,
/// served or routed listen streams (`subs`).
pub(super) fn holds_child(
    routing: &Routing,
    held: &HeldQueue,
    rounds: &Rounds,
    subs: &Subscriptions,
) -> bool {
    let listen = |p: &Pending| p.method() == "subscriptions/listen";
    let client_request = routing.inflight().iter().any(|(_, _, _, p)| {
        matches!(p.owner(), Owner::Client { .. } | Owner::Parked { .. }) && !listen(p)
    });
    let listening = routing
        .inflight()
        .iter()
        .any(|(_, c, _, p)| c.is_some() && listen(p));
    client_request
        || listening
        || held.len() > 0
        || routing.asks() > 0
        || rounds.open_rounds() > 0
        || rounds.parked_rounds() > 0
        || subs.uris().next().is_some()
        || !subs.listeners().is_empty()
}
