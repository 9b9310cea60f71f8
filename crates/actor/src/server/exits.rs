//! What follows the end of an instance (a child's exit or a remote session's end): pure
//! decisions over the facts of the end, carried out by the caller (`core.rs`, `on_end`), which
//! sets the lifecycle, logs and fails what waited.
//!
//! The rules, in the order they are tried ([`after_exit`]):
//! 1. The operator's or the daemon's stop (`stop`, shutdown): stopped for good.
//! 2. A credential refused at the handshake (HTTP 401/403, issue 29): `auth_required`, no
//!    reconnect loop.
//! 3. A hosted server (`url`) reconnects with backoff forever: its outage never becomes the
//!    `failed` of a crashing child (issue 29, decisions), unless it is an operator restart or a
//!    failed on-demand start.
//! 4. A child that exits on the era probe (`server/discover`) without being asked to, and not
//!    with a code that says it cannot run: an old strict server, a verdict, not a failed start
//!    (issue 6 §1). It is respawned at once in the handshake era, still no two spawns closer
//!    than `backoff_initial` (R9).
//! 5. An operator restart: respawn now.
//! 6. A failed start of an on-demand child: back to `idle`, the next request after the
//!    backoff delay starts it (issue 26 §7).
//! 7. Any other child that never became ready: a failed start. A command that cannot run
//!    (exit codes 126, 127, 78) is `failed` at once; so is the [`MAX_FAILED_STARTS`]-th in a row;
//!    else as rule 8 ([`after_failed_start`]).
//! 8. The restart policy ([`restarts`]): backoff and a restart, or stopped (a clean exit) or
//!    `failed` (any other) for good.
//!
//! No clock, no I/O, no state.

use crate::outage::{OutageStatus, StopCause};
use base::backoff::MAX_FAILED_STARTS;
use support::config::RestartPolicy;
use upstream::Exit;

/// Exit codes that say the command cannot run at all (126: not executable, 127: not found,
/// 78: `EX_CONFIG`): never retried.
const CANNOT_RUN: [i32; 3] = [126, 127, 78];

/// The facts of an instance's end that decide what follows.
#[derive(Debug, Clone, Copy)]
pub(super) struct Ended {
    /// Why the supervisor stopped it, if it did.
    pub(super) cause: Option<StopCause>,
    /// How it ended.
    pub(super) exit: Exit,
    /// Whether it had answered its handshake.
    pub(super) ready: bool,
    /// Whether the era probe (`server/discover`) was still unanswered (a child's exit only).
    pub(super) probing_era: bool,
    /// A hosted server (`url`).
    pub(super) remote: bool,
    /// A start judged as an on-demand one (the server starts on demand, or a request started
    /// this instance).
    pub(super) lazy: bool,
}

/// What follows an end, for the caller to carry out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum AfterExit {
    /// Rule 1: stopped for good.
    Stopped,
    /// Rule 2: `auth_required` until a sign-in or a `start`.
    AuthRequired,
    /// Rule 4: the handshake era is the verdict; respawn at once (within `backoff_initial` of
    /// the last spawn).
    HandshakeRespawn,
    /// Rule 5: respawn now.
    RestartNow,
    /// Rule 6: back to `idle` until the next request after the backoff delay.
    LazyFailed,
    /// Rule 7: a failed start; the caller counts it and asks [`after_failed_start`].
    FailedStart,
    /// Rules 3 and 8: the restart policy decides ([`restarts`]).
    Policy,
}

/// What follows the end `e` (the rules of this module, in order).
pub(super) fn after_exit(e: &Ended) -> AfterExit {
    match e.cause {
        Some(StopCause::Shutdown | StopCause::Stop) => return AfterExit::Stopped,
        Some(StopCause::AuthFailed) => return AfterExit::AuthRequired,
        _ => {}
    }
    let restart = e.cause == Some(StopCause::Restart);
    let lazy_failed = !e.ready && e.lazy;
    if e.remote && !restart && !lazy_failed {
        AfterExit::Policy
    } else if e.probing_era && !e.exit.requested && !cannot_run(&e.exit) {
        AfterExit::HandshakeRespawn
    } else if restart {
        AfterExit::RestartNow
    } else if lazy_failed {
        AfterExit::LazyFailed
    } else if !e.ready {
        AfterExit::FailedStart
    } else {
        AfterExit::Policy
    }
}

/// A failed start, the `failed_starts`-th in a row (counted by the caller).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FailedStart {
    /// The command cannot run (exit codes 126, 127, 78): `failed` now.
    CannotRun,
    /// [`MAX_FAILED_STARTS`] in a row: `failed` now.
    TooMany,
    /// The restart policy decides ([`restarts`]).
    Policy,
}

/// What follows a failed start that ended with `exit`, the `failed_starts`-th in a row.
pub(super) fn after_failed_start(exit: &Exit, failed_starts: u32) -> FailedStart {
    if cannot_run(exit) {
        FailedStart::CannotRun
    } else if failed_starts >= MAX_FAILED_STARTS {
        FailedStart::TooMany
    } else {
        FailedStart::Policy
    }
}

/// Whether `policy` restarts an instance that ended with `exit` (`cause`: the supervisor's own
/// stop, which counts as a failure for `on-failure`).
pub(super) fn restarts(policy: RestartPolicy, cause: Option<StopCause>, exit: &Exit) -> bool {
    match policy {
        RestartPolicy::Always => true,
        RestartPolicy::OnFailure => cause.is_some() || !exit.clean(),
        RestartPolicy::Never => false,
    }
}

/// What a request in flight when the instance ended is told the server is doing: `timeout`
/// when the supervisor stopped it for not answering, `stopped` for the operator's stop or
/// restart, `backoff` for a hosted server that could not be reached, else `exited`.
pub(super) fn outage_of(cause: Option<StopCause>, unreachable: bool) -> OutageStatus {
    if matches!(
        cause,
        Some(StopCause::StartTimeout | StopCause::ProbeTimeout)
    ) {
        OutageStatus::Timeout
    } else if by_operator(cause) {
        OutageStatus::Stopped
    } else if unreachable {
        OutageStatus::Backoff
    } else {
        OutageStatus::Exited
    }
}

/// Whether the operator (or the daemon's shutdown) ended it: logged as `stopped`, not as an
/// outage.
pub(super) fn by_operator(cause: Option<StopCause>) -> bool {
    matches!(
        cause,
        Some(StopCause::Shutdown | StopCause::Stop | StopCause::Restart)
    )
}

/// The `class` label of the restart counted for an end that led to a backoff (`status`: as
/// [`outage_of`] gave it): the limit that killed it, `signal`, `unreachable`, or the status.
pub(super) fn restart_class(status: OutageStatus, exit: &Exit, unreachable: bool) -> &'static str {
    match (status, exit.signal, exit.limit) {
        // A limit's kill is a SIGKILL, but the operator's question is which limit.
        (_, _, Some(limit)) => limit.reason(),
        (OutageStatus::Exited, Some(_), None) => "signal",
        _ if unreachable => "unreachable",
        (s, _, None) => s.as_str(),
    }
}

fn cannot_run(exit: &Exit) -> bool {
    exit.code.is_some_and(|c| CANNOT_RUN.contains(&c))
}

#[cfg(test)]
mod tests {
    use super::{after_exit, after_failed_start, outage_of, restarts, AfterExit, Ended};
    use super::{restart_class, FailedStart};
    use crate::outage::{OutageStatus, StopCause};
    use base::backoff::MAX_FAILED_STARTS;
    use support::config::RestartPolicy;
    use upstream::Exit;

    fn exit(code: Option<i32>, signal: Option<i32>, requested: bool) -> Exit {
        Exit {
            code,
            signal,
            requested,
            limit: None,
        }
    }

    fn ended(cause: Option<StopCause>, code: i32, ready: bool) -> Ended {
        Ended {
            cause,
            exit: exit(Some(code), None, cause.is_some()),
            ready,
            probing_era: false,
            remote: false,
            lazy: false,
        }
    }

    #[test]
    fn the_operators_stop_and_a_refused_credential_win_over_everything_else() {
        for cause in [StopCause::Stop, StopCause::Shutdown] {
            let mut e = ended(Some(cause), 1, false);
            e.remote = true;
            e.probing_era = true;
            e.lazy = true;
            assert_eq!(after_exit(&e), AfterExit::Stopped, "{cause:?}");
        }
        let mut e = ended(Some(StopCause::AuthFailed), 0, false);
        e.remote = true;
        assert_eq!(after_exit(&e), AfterExit::AuthRequired);
    }

    #[test]
    fn a_hosted_server_reconnects_by_policy_even_if_it_never_was_ready() {
        let mut e = ended(None, 1, false);
        e.remote = true;
        assert_eq!(after_exit(&e), AfterExit::Policy);
        // Unless the operator restarts it, or it is an on-demand start that failed.
        e.cause = Some(StopCause::Restart);
        assert_eq!(after_exit(&e), AfterExit::RestartNow);
        e.cause = None;
        e.lazy = true;
        assert_eq!(after_exit(&e), AfterExit::LazyFailed);
    }

    #[test]
    fn an_exit_on_the_era_probe_is_a_verdict_unless_the_command_cannot_run_or_was_stopped() {
        let mut e = ended(None, 1, false);
        e.probing_era = true;
        assert_eq!(after_exit(&e), AfterExit::HandshakeRespawn);
        for code in [126, 127, 78] {
            e.exit = exit(Some(code), None, false);
            assert_eq!(after_exit(&e), AfterExit::FailedStart, "exit {code}");
        }
        e.exit = exit(None, Some(libc::SIGTERM), true);
        e.cause = Some(StopCause::StartTimeout);
        assert_eq!(after_exit(&e), AfterExit::FailedStart);
    }

    #[test]
    fn a_child_that_never_was_ready_is_a_failed_start_and_a_ready_one_follows_the_policy() {
        assert_eq!(after_exit(&ended(None, 1, false)), AfterExit::FailedStart);
        assert_eq!(after_exit(&ended(None, 1, true)), AfterExit::Policy);
        let mut lazy = ended(None, 1, false);
        lazy.lazy = true;
        assert_eq!(after_exit(&lazy), AfterExit::LazyFailed);
        // A lazy child that was ready is not a failed start.
        lazy.ready = true;
        assert_eq!(after_exit(&lazy), AfterExit::Policy);
        let restart = ended(Some(StopCause::Restart), 0, true);
        assert_eq!(after_exit(&restart), AfterExit::RestartNow);
    }

    #[test]
    fn failed_starts_stop_at_a_command_that_cannot_run_or_at_the_limit() {
        let e = exit(Some(127), None, false);
        assert_eq!(after_failed_start(&e, 1), FailedStart::CannotRun);
        let e = exit(Some(1), None, false);
        assert_eq!(after_failed_start(&e, 1), FailedStart::Policy);
        let limit = MAX_FAILED_STARTS;
        assert_eq!(after_failed_start(&e, limit - 1), FailedStart::Policy);
        assert_eq!(after_failed_start(&e, limit), FailedStart::TooMany);
        assert_eq!(after_failed_start(&e, u32::MAX), FailedStart::TooMany);
    }

    #[test]
    fn the_restart_policy_counts_the_supervisors_stops_as_failures() {
        let clean = exit(Some(0), None, false);
        let crash = exit(Some(1), None, false);
        assert!(restarts(RestartPolicy::Always, None, &clean));
        assert!(!restarts(RestartPolicy::Never, None, &crash));
        assert!(!restarts(RestartPolicy::OnFailure, None, &clean));
        assert!(restarts(RestartPolicy::OnFailure, None, &crash));
        let stopped = exit(None, Some(libc::SIGTERM), true);
        let cause = Some(StopCause::ProbeTimeout);
        assert!(restarts(RestartPolicy::OnFailure, cause, &stopped));
    }

    #[test]
    fn requests_in_flight_are_told_what_ended_the_instance() {
        let timeout = Some(StopCause::StartTimeout);
        assert_eq!(outage_of(timeout, true), OutageStatus::Timeout);
        let probe = Some(StopCause::ProbeTimeout);
        assert_eq!(outage_of(probe, false), OutageStatus::Timeout);
        for c in [StopCause::Stop, StopCause::Shutdown, StopCause::Restart] {
            assert_eq!(outage_of(Some(c), true), OutageStatus::Stopped, "{c:?}");
        }
        assert_eq!(outage_of(None, true), OutageStatus::Backoff);
        assert_eq!(outage_of(None, false), OutageStatus::Exited);
        let stdin = Some(StopCause::StdinFailed);
        assert_eq!(outage_of(stdin, false), OutageStatus::Exited);
    }

    #[test]
    fn a_restart_is_counted_by_the_limit_the_signal_or_the_status() {
        let killed = exit(None, Some(libc::SIGKILL), false);
        assert_eq!(
            restart_class(OutageStatus::Exited, &killed, false),
            "signal"
        );
        let crash = exit(Some(1), None, false);
        assert_eq!(restart_class(OutageStatus::Exited, &crash, false), "exited");
        assert_eq!(
            restart_class(OutageStatus::Backoff, &crash, true),
            "unreachable"
        );
        assert_eq!(
            restart_class(OutageStatus::Timeout, &killed, false),
            "timeout"
        );
    }
}
