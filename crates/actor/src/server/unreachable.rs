//! Answering a client request that cannot be served (issue 5 §1-2; the record is documented in
//! docs/book/src/reference/errors.md): an outage, a limit or a deadline, as the same record in
//! both shapes. `tools/call` gets a tool result with `isError: true` (a model must read the
//! outage as an outage); every other method, and a call past its own deadline, a JSON-RPC
//! error. A section of the core as a free function over one narrow context ([`Answering`]):
//! it reads the stderr tail and writes only through the outbox.
//!
//! No clock read, no I/O.

use super::core::{Owner, Pending};
use super::held::{Held, HeldQueue};
use super::outbox::{Outbox, Stamp};
use super::routing::Routing;
use super::telemetry::Telemetry;
use crate::ids::id_key_ref;
use crate::outage::{format_secs, Class, OutageStatus, Reason};
use crate::session::ClientId;
use serde_json::json;
use serde_json::value::RawValue;
use std::time::Duration;
use std::time::Instant;
use support::logging::requests::RequestId;
use support::observe::Outcome;
use tracing::{error, warn};
use upstream::{Limit, Refusal, StderrTail, Was};
use vocab::jsonrpc::message::{self, code, raw, raw_u64, Message, Out};

/// What an outage answer touches.
pub(super) struct Answering<'a> {
    /// The requests in flight, failed all at once when the instance is gone.
    routing: &'a mut Routing,
    /// The requests held while the child starts, failed when it cannot.
    held: &'a mut HeldQueue,
    outbox: &'a mut Outbox,
    telemetry: &'a mut Telemetry,
    /// The moment, and the server's name the record gives.
    at: Stamp<'a>,
    /// The server's stderr tail: its last lines go into the record.
    tail: &'a StderrTail,
    /// A url server that signs in with OAuth (issue 30): an `auth_failed` record says how to
    /// sign in again.
    signs_in: bool,
}

impl<'a> Answering<'a> {
    /// The context over the requests in flight and held, the outbox and the telemetry at
    /// `at`, quoting `tail`.
    pub(super) fn new(
        routing: &'a mut Routing,
        held: &'a mut HeldQueue,
        outbox: &'a mut Outbox,
        telemetry: &'a mut Telemetry,
        at: Stamp<'a>,
        tail: &'a StderrTail,
        signs_in: bool,
    ) -> Self {
        Answering {
            routing,
            held,
            outbox,
            telemetry,
            at,
            tail,
            signs_in,
        }
    }
}

/// The outage as an answer gives it now, read by the caller from the lifecycle, the last exit
/// and the restart schedule (the status is each answer's own).
#[derive(Debug, Clone, Copy)]
pub(super) struct Outage {
    /// The supervisor's own cause while it stops a child that timed out (`start-timeout`,
    /// ...), else the last exit; `None` before any.
    known: Option<Reason>,
    /// When the next attempt to start it is due, if one is scheduled.
    retry: Option<Duration>,
}

impl Outage {
    /// The outage for the `known` reason, next tried in `retry`.
    pub(super) fn new(known: Option<Reason>, retry: Option<Duration>) -> Self {
        Outage { known, retry }
    }

    /// The reason an answer gives: the known one, else `fallback`.
    pub(super) fn reason(&self, fallback: Reason) -> Reason {
        self.known.unwrap_or(fallback)
    }
}

/// Why a request failed, as its record says it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Failure {
    /// What the server is doing (`starting`, `backoff`, `timeout`, ...).
    pub(super) status: OutageStatus,
    /// Why (`reason`, `class` and `detail` of the record).
    pub(super) reason: Reason,
    /// When the next attempt to start it is due, if one is scheduled.
    pub(super) retry: Option<Duration>,
    /// The JSON-RPC code of the error shape (-32000 unavailable, -32001 timeout, ...).
    pub(super) code: i64,
    /// The request's one outcome.
    pub(super) outcome: Outcome,
}

/// Answers `client`'s request `id` (`method`) with the record of `f`, and finishes it in the
/// request log.
pub(super) fn answer(
    cx: &mut Answering<'_>,
    client: ClientId,
    id: &RawValue,
    method: &str,
    f: Failure,
) {
    let server = cx.at.server();
    let Failure {
        status,
        reason,
        retry,
        code,
        outcome,
    } = f;
    let request_id = cx
        .outbox
        .ledger()
        .rid(client, &id_key_ref(id))
        .unwrap_or_else(RequestId::random)
        .to_string();
    let tail = cx.tail.last_lines(10);
    let mut record = json!({
        "server": server,
        "status": status,
        "reason": reason.to_string(),
        "class": reason.class(),
        "detail": reason.detail(),
        "stderr_tail": tail,
        "request_id": request_id,
    });
    let mut text = format!("server={server} status={status} reason={reason}");
    if reason.class() == Class::AuthFailed && cx.signs_in {
        // What to do about it, where the user reads it (issue 30 §3).
        let hint = format!("mcp-supervisor login {server}");
        text.push_str(&format!(" hint={hint:?}"));
        if let Some(o) = record.as_object_mut() {
            o.insert("hint".into(), json!(hint));
        }
    }
    if let Some(r) = retry {
        if let Some(o) = record.as_object_mut() {
            o.insert("retry_after_ms".into(), json!(r.as_millis() as u64));
        }
        text.push_str(&format!(" retry_after={}", format_secs(r)));
    }
    text.push_str(&format!(" request_id={request_id}"));
    let last = cx.tail.last_lines(1);
    if !last.is_empty() {
        text.push_str(&format!(" stderr={last:?}"));
    }
    warn!(request_id = %request_id, method, status = status.as_str(), reason = %reason, "request failed: {text}");
    // A call past its own deadline stays the -32001 error of every method (the deadline
    // rule: docs/book/src/guides/troubleshooting.md, "Health"); outages of `tools/call` are
    // tool results.
    if method == "tools/call" && code != code::REQUEST_TIMEOUT {
        let result = json!({
            "content": [{"type": "text", "text": text}],
            "isError": true,
            "_meta": {"mcp-supervisor/outage": record},
        });
        cx.outbox
            .respond_result(cx.telemetry, &cx.at, client, id, method, result, outcome);
        return;
    }
    let msg = match status {
        OutageStatus::Timeout if code == code::REQUEST_TIMEOUT => {
            format!("request to server `{server}` timed out")
        }
        _ => format!("server `{server}` is unavailable: {text}"),
    };
    let line = message::error_response(id, code, &msg, Some(record));
    cx.outbox
        .respond(cx.telemetry, &cx.at, client, id, line, outcome, Some(code));
}

/// Answers `client`'s request `id` (`method`) that cannot reach the child, which is doing
/// `status`: the record gives the reason known `now` (else the status) and the next
/// attempt's delay; -32000 (a tool result for `tools/call`), outcome `unreachable`.
pub(super) fn reply(
    cx: &mut Answering<'_>,
    now: &Outage,
    client: ClientId,
    id: &RawValue,
    method: &str,
    status: OutageStatus,
) {
    let failure = Failure {
        status,
        reason: now.reason(Reason::State(status)),
        retry: now.retry,
        code: code::SERVER_UNAVAILABLE,
        outcome: Outcome::Unreachable,
    };
    answer(cx, client, id, method, failure);
}

/// Answers the held request `h` with the outage record (the server is doing `status`; the
/// next attempt in `retry`). A client's `initialize` held for a child that never became ready
/// (no handshake is `known`) names the reason known `now`, else `unanswered`; any other held
/// request is answered as by [`reply`].
pub(super) fn fail_held(
    cx: &mut Answering<'_>,
    now: &Outage,
    handshake_known: bool,
    h: Held,
    status: OutageStatus,
    unanswered: Reason,
    retry: Option<Duration>,
) {
    let Some(id) = h.msg.id.as_deref() else {
        return;
    };
    if h.msg.method() == "initialize" && !handshake_known {
        let failure = Failure {
            status,
            reason: now.reason(unanswered),
            retry,
            code: code::SERVER_UNAVAILABLE,
            outcome: Outcome::Unreachable,
        };
        answer(cx, h.client, id, "initialize", failure);
    } else {
        reply(cx, now, h.client, id, h.msg.method(), status);
    }
}

/// Answers every held request with the outage record: the server is doing `status` (it
/// cannot start, or stops), and the next attempt is the one known `now`. Oldest first.
pub(super) fn fail_all_held(
    cx: &mut Answering<'_>,
    now: &Outage,
    handshake_known: bool,
    status: OutageStatus,
) {
    for _ in 0..cx.held.len() {
        let Some(h) = cx.held.pop_oldest() else {
            break;
        };
        let unanswered = Reason::State(status);
        fail_held(cx, now, handshake_known, h, status, unanswered, now.retry);
    }
}

/// Held requests past `queue_wait` (or `start_timeout` for `initialize`) at `at` fail with
/// the outage record (the server is doing `status`; the next spawn in `retry`).
pub(super) fn expire_held(
    cx: &mut Answering<'_>,
    now: &Outage,
    handshake_known: bool,
    status: OutageStatus,
    retry: Option<Duration>,
    at: Instant,
) {
    while let Some(h) = cx.held.pop_expired(at) {
        fail_held(
            cx,
            now,
            handshake_known,
            h,
            status,
            Reason::Unanswered,
            retry,
        );
    }
}

/// Answers every request in flight with the outage record (the instance is gone: `status`,
/// `reason`, the next attempt in `retry`; -32000, outcome `unreachable`), and tells each
/// client the child had asked something that the question is void
/// (`notifications/cancelled`, "server exited"). One entry is removed at a time, so a client
/// whose input closed keeps its connection until its last answer is out.
///
/// Returns the rounds of parked requests (their clients hold an `input_required` result):
/// the caller ends them without a word, and a retry finds no round.
pub(super) fn fail_inflight(
    cx: &mut Answering<'_>,
    status: OutageStatus,
    reason: Reason,
    retry: Option<Duration>,
) -> Vec<u64> {
    let ids: Vec<u64> = cx
        .routing
        .inflight()
        .iter()
        .map(|(id, _, _, _)| id)
        .collect();
    let mut parked = Vec::new();
    for child_id in ids {
        let Some(r) = cx.routing.inflight_mut().remove(child_id) else {
            // Removed meanwhile with its client (it left), which recorded its outcome.
            continue;
        };
        let (owner, method, _) = r.value.into_parts();
        match owner {
            Owner::Parked { round } => parked.push(round),
            Owner::Client { client, id, .. } => {
                let failure = Failure {
                    status,
                    reason,
                    retry,
                    code: code::SERVER_UNAVAILABLE,
                    outcome: Outcome::Unreachable,
                };
                answer(cx, client, &id, &method, failure);
            }
            _ => {}
        }
    }
    for (client, n) in cx.routing.take_child_asks() {
        let p = raw(&json!({"requestId": n, "reason": "server exited"}));
        let line = Out::request(None, "notifications/cancelled", Some(&p)).encode();
        cx.outbox
            .deliver(cx.telemetry, client, crate::session::To::Session, line);
    }
    parked
}

/// What became of a remote server's bare HTTP answer to a request ([`refused`]).
#[derive(Debug)]
pub(super) enum Refused {
    /// Handled here (a client's request answered with the outage record, or nothing to do).
    Done,
    /// The credential is refused (HTTP 401/403): the caller stops the session for good
    /// (`auth-failed`; no reconnect loop on a bad credential).
    StopForAuth,
    /// The supervisor's own request (a probe, the era probe, a list read): the caller routes
    /// this JSON-RPC error as the upstream's answer to it.
    AsError(Message),
}

/// A remote server's bare HTTP answer `r` to request `id` (issue 29 §3-4): a client's request
/// gets the outage record with its class (`auth_failed`, `rate_limited`, `upstream_error`)
/// and `Retry-After`; a 401/403 only a person can fix, or one to the handshake, stops the
/// session for good; the supervisor's own requests read it as the JSON-RPC error it stands
/// for (-32603 naming the status).
pub(super) fn refused(cx: &mut Answering<'_>, id: &RawValue, r: Refusal) -> Refused {
    let reason = Reason::Http(r);
    if let Ok(class) = serde_json::to_value(reason.class()) {
        cx.telemetry
            .metrics()
            .refusal(class.as_str().unwrap_or("upstream_error"));
    }
    let n = id.get().parse::<u64>().ok();
    let owner = n
        .and_then(|n| cx.routing.inflight().get(n))
        .map(Pending::owner);
    match owner {
        Some(Owner::Client { .. }) => {
            let Some(removed) = n.and_then(|n| cx.routing.inflight_mut().remove(n)) else {
                return Refused::Done;
            };
            let (owner, method, _) = removed.value.into_parts();
            if let Owner::Client { client, id, .. } = owner {
                let status = if r.sign_in {
                    OutageStatus::AuthRequired
                } else {
                    OutageStatus::Ready
                };
                let failure = Failure {
                    status,
                    reason,
                    retry: r.retry_after,
                    code: code::SERVER_UNAVAILABLE,
                    outcome: Outcome::Unreachable,
                };
                answer(cx, client, &id, &method, failure);
            }
            if r.sign_in {
                // No usable token and only a person can get one (issue 30 §3).
                error!(http_status = r.status, "the remote server needs a sign-in");
                return Refused::StopForAuth;
            }
            Refused::Done
        }
        Some(Owner::Initialize | Owner::Discover { .. }) if reason.class() == Class::AuthFailed => {
            if let Some(n) = n {
                cx.routing.inflight_mut().remove(n);
            }
            error!(
                http_status = r.status,
                "the remote server refused the credential at the handshake"
            );
            Refused::StopForAuth
        }
        _ => {
            let msg = format!("the remote server answered {reason}");
            let line = message::error_response(id, code::INTERNAL_ERROR, &msg, None);
            match message::parse_one(&line) {
                Ok(m) => Refused::AsError(m),
                Err(_) => Refused::Done,
            }
        }
    }
}

/// What became of a message of the upstream that is never relayed ([`discarded`]).
#[derive(Debug)]
pub(super) enum Discarded {
    /// Handled here (counted and logged; answered or failed where it had to be).
    Done,
    /// The answer to a parked request of a 2026 client (`round`, child-side `child_id`): the
    /// caller fails the round with `why`.
    Parked {
        round: u64,
        child_id: u64,
        why: String,
    },
    /// The answer to the supervisor's own request: the caller routes this JSON-RPC error as
    /// the upstream's answer to it.
    AsError(Message),
}

/// A message of the upstream that is never relayed (issue 47 §7; K04, K22): over
/// `max_message_size` or nested deeper than `max_message_depth` (`max_size`, `max_depth`).
/// Counted (`upstream_discarded_total`) and logged within a budget whatever it was; a
/// response fails its request (a client's gets the outage answer, class `upstream_error`,
/// detail `too_large` or `too_deep`; the supervisor's own reads it as an error), a request of
/// the upstream is answered with -32600, a notification is dropped.
pub(super) fn discarded(
    cx: &mut Answering<'_>,
    limit: Limit,
    was: Was,
    max_size: usize,
    max_depth: usize,
) -> Discarded {
    cx.telemetry.metrics().discarded(limit.detail(), was.kind());
    let what = match limit {
        Limit::Size(n) => format!("{n} bytes, over max_message_size ({max_size} bytes)"),
        Limit::Depth => format!("nested deeper than max_message_depth ({max_depth} levels)"),
    };
    let now = cx.at.now();
    let log = |telemetry: &mut Telemetry, id: Option<&str>, note: &str| {
        if let Some(suppressed) = telemetry.allow_discarded(now) {
            warn!(
                kind = was.kind(),
                detail = limit.detail(),
                id,
                suppressed,
                "dropped a {} of the server: {what}{note}",
                was.kind()
            );
        }
    };
    let id = match &was {
        Was::Response(id) => id.clone(),
        Was::Request(id) => {
            log(cx.telemetry, Some(id.get()), "; answered -32600");
            let msg = format!("the request is {what}; mcp-supervisor does not relay it");
            cx.outbox
                .answer_upstream_error(&cx.at, id, code::INVALID_REQUEST, &msg);
            return Discarded::Done;
        }
        Was::Notification => {
            log(cx.telemetry, None, "");
            return Discarded::Done;
        }
    };
    let n = id.as_deref().and_then(|i| i.get().parse::<u64>().ok());
    let Some(child_id) = n.filter(|n| cx.routing.inflight().contains(*n)) else {
        let shown = id.as_deref().map(RawValue::get);
        log(cx.telemetry, shown, "; it answers no request in flight");
        return Discarded::Done;
    };
    log(cx.telemetry, Some(&child_id.to_string()), "");
    let whose = cx
        .routing
        .inflight()
        .get(child_id)
        .map(|p| matches!(p.owner(), Owner::Client { .. } | Owner::Parked { .. }));
    if whose != Some(true) {
        // The supervisor's own request (handshake, probe, list read): an error answer, as the
        // upstream could have sent.
        let line = message::error_response(
            &raw_u64(child_id),
            code::INTERNAL_ERROR,
            &format!("the answer is {what}"),
            None,
        );
        return match message::parse_one(&line) {
            Ok(m) => Discarded::AsError(m),
            Err(_) => Discarded::Done,
        };
    }
    let Some(removed) = cx.routing.inflight_mut().remove(child_id) else {
        return Discarded::Done;
    };
    let (owner, method, _) = removed.value.into_parts();
    match owner {
        Owner::Parked { round } => Discarded::Parked {
            round,
            child_id,
            why: format!("an answer {what}"),
        },
        Owner::Client { client, id, .. } => {
            let reason = match limit {
                Limit::Size(bytes) => Reason::TooLarge {
                    bytes,
                    limit: max_size,
                },
                Limit::Depth => Reason::TooDeep { limit: max_depth },
            };
            let failure = Failure {
                status: OutageStatus::Ready,
                reason,
                retry: None,
                code: code::SERVER_UNAVAILABLE,
                outcome: Outcome::ProtocolError,
            };
            answer(cx, client, &id, &method, failure);
            Discarded::Done
        }
        _ => Discarded::Done,
    }
}
