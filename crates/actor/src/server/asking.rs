//! The upstream's questions to clients, in both eras' shapes: the owner rule for the child's
//! own requests, and the multi-round-trip rounds (MRTR) that carry questions across an era
//! boundary in either direction. Both directions share one sub-machine (`Rounds`) and one
//! context ([`Asking`]).
//!
//! **A handshake-era child asking a 2026-07-28 client** (issue 13 §1, K26). The child sends
//! `sampling/createMessage`, `elicitation/create` or `roots/list` as JSON-RPC requests; a
//! 2026 client receives them only inside an `input_required` result (MRTR, protocol.md §5).
//! So when the owner rule picks a 2026 client whose `tools/call`, `prompts/get` or
//! `resources/read` is in flight, that request is *parked*: the client gets
//! `{"resultType":"input_required","inputRequests":{..},"requestState":"mcp-supervisor:N.SECRET"}`,
//! the child's request stays open, and the child's own request keeps running. When the client
//! retries with `inputResponses` and that `requestState`, each answer goes back to the child
//! under the child's id, and the retry becomes the owner of the original request: the child's
//! final response (even one that arrived while parked) answers the retry.
//!
//! **A 2026-07-28 child asking a handshake-era client** (issue 6 §4): its `input_required`
//! result becomes ordinary requests to the client, and the original request is retried with
//! the answers and the child's `requestState`, byte-exact (K25); see the second half of this
//! file ([`start_round`]).
//!
//! Bounds: one round per in-flight request (so at most `max_inflight`), and the child's
//! requests waiting in rounds count against `max_inflight` with the ones routed to handshake
//! clients. A round ends with its request: the child's final answer, the request's deadline
//! (the child gets errors for what was asked and a cancel), the client leaving, or the child's
//! exit.
//!
//! Who is asked at all is the owner rule ([`on_child_request`]): a `ping` is answered here, a
//! `roots/list` by the configured roots unless `client_roots = "caller"` (K28), anything else by
//! the client whose request most likely caused it (K06), a 2026 client through the rounds
//! above.
//!
//! A section of the core as free functions over one narrow context ([`Asking`]): the rounds,
//! the in-flight table and the outbox. What the caller must still do is returned: a final
//! response that came while the request was parked ([`Resumed::Answer`]), a round complete at
//! once ([`Started::Complete`]), the retry to write toward the upstream ([`Retry`]).
//!
//! No clock read, no I/O.

use super::core::{Asker, Owner, Pending};
use super::effects::Lane;
use super::outbox::{Outbox, Stamp};
use super::roster::Clients;
use super::rounds::Rounds;
use super::routing::Routing;
use super::telemetry::Telemetry;
use super::util::malformed;
use super::util::{input_requests, missing_capability, request_state};
use crate::era::{self, Era};
use crate::ids::id_key;
use crate::session::{ClientId, To, Transport};
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};
use std::time::Instant;
use support::config::{ClientRoots, ServerConfig};
use support::observe::Outcome;
use tracing::{debug, warn};
use upstream::Outbound;
use vocab::jsonrpc::message::{self, code, raw, raw_u64, Message, Out, RawObject};

/// The owner of rounds whose 2026-07-28 HTTP request ended with its `input_required` answer
/// ([`detach_rounds_of`]); never a real client's id (those start at 1).
pub(super) const DETACHED: ClientId = ClientId(0);

/// The prefix of the `requestState` this supervisor gives out (opaque to clients).
const STATE_PREFIX: &str = "mcp-supervisor:";

/// Methods that may end with `input_required` (protocol.md §5: only these three).
pub(super) const MRTR_METHODS: &[&str] = &["tools/call", "prompts/get", "resources/read"];

/// A child request waiting for a 2026 client's answer.
#[derive(Debug)]
pub(super) struct Ask {
    /// The key in `inputRequests` / `inputResponses`.
    key: String,
    /// The child's id for its request.
    child_id: Box<RawValue>,
    method: String,
    params: Option<Box<RawValue>>,
}

/// One parked request of a 2026 client.
#[derive(Debug)]
pub(super) struct Parked {
    client: ClientId,
    /// The child-side id of the parked request (still in flight in the child).
    child_rid: u64,
    /// The request's owner record, restored (with the retry's id) when the client retries.
    owner: Owner,
    method: String,
    /// Asked in the `input_required` result the client holds now.
    asked: Vec<Ask>,
    /// Arrived since; asked in the next round.
    queued: Vec<Ask>,
    /// The child's final response, when it came while the request was parked.
    last: Option<Message>,
    /// Random, in the `requestState` only: a round cannot be continued by guessing its number
    /// (a detached round may be continued by any 2026-07-28 HTTP request of the server).
    secret: u64,
}

/// What a decision about the upstream's questions touches (both directions).
pub(super) struct Asking<'a> {
    rounds: &'a mut Rounds,
    routing: &'a mut Routing,
    outbox: &'a mut Outbox,
    telemetry: &'a mut Telemetry,
    /// The moment and the running instance.
    at: Stamp<'a>,
    /// `request_timeout` and the per-method timeouts bound the rounds; the name is in errors.
    cfg: &'a ServerConfig,
}

impl<'a> Asking<'a> {
    /// The context over the rounds, the in-flight table, the outbox and the telemetry at `at`.
    pub(super) fn new(
        rounds: &'a mut Rounds,
        routing: &'a mut Routing,
        outbox: &'a mut Outbox,
        telemetry: &'a mut Telemetry,
        at: Stamp<'a>,
        cfg: &'a ServerConfig,
    ) -> Self {
        Asking {
            rounds,
            routing,
            outbox,
            telemetry,
            at,
            cfg,
        }
    }
}

/// What a client's request carrying a `requestState` turned out to be.
#[derive(Debug)]
pub(super) enum Resumed {
    /// Not a retry of this supervisor's round: the request goes its usual way.
    NotARetry,
    /// Handled: answered (an unknown round, the next round) or waiting for the child.
    Done,
    /// The child's final response came while the request was parked: the caller routes
    /// `last` to `owner` (now the retry) as the answer to `method`.
    Answer {
        method: String,
        owner: Box<Owner>,
        last: Box<Message>,
    },
}

/// Whether `client` can be asked `method` (a child request) through MRTR on its request `p`:
/// a 2026 client, a request that may end `input_required`, and the capability declared in its
/// envelope.
pub(super) fn can_ask_modern(
    clients: &Clients,
    client: ClientId,
    p: &Pending,
    cap: Option<&str>,
) -> bool {
    let Some(c) = clients.get(&client) else {
        return false;
    };
    let parked_or_open = matches!(p.owner(), Owner::Client { .. } | Owner::Parked { .. });
    c.era() == Some(Era::Modern)
        && !c.closing()
        && parked_or_open
        && MRTR_METHODS.contains(&p.method())
        && cap.is_none_or(|cap| c.has_capability(cap))
}

/// Asks the child's request `m` (its id `child_id`) of the 2026 client that owns the in-flight
/// request `child_rid`, parking that request (or adding to its round when parked already).
pub(super) fn ask_modern(cx: &mut Asking<'_>, child_rid: u64, child_id: Box<RawValue>, m: Message) {
    let key = cx.rounds.next_key();
    let ask = Ask {
        key,
        child_id,
        method: m.method().to_string(),
        params: m.params,
    };
    let round = match cx.routing.inflight().get(child_rid).map(Pending::owner) {
        Some(Owner::Parked { round }) => *round,
        _ => return park(cx, child_rid, ask),
    };
    if let Some(p) = cx.rounds.parked_mut(round) {
        p.queued.push(ask);
    }
}

/// Parks the client's in-flight request `child_rid` with the first question `ask`.
fn park(cx: &mut Asking<'_>, child_rid: u64, ask: Ask) {
    let Some(removed) = cx.routing.inflight_mut().remove(child_rid) else {
        return;
    };
    let (owner, method, written) = removed.value.into_parts();
    let Owner::Client { client, id, .. } = &owner else {
        return;
    };
    let (client, id) = (*client, id.clone());
    let (round, secret) = cx.rounds.new_parked();
    let key = Some((client, format!("{STATE_PREFIX}{round}")));
    let deadline = base::deadline::after(cx.at.now(), cx.cfg.request_timeout);
    let pending = Pending::new(Owner::Parked { round }, method.clone(), written);
    cx.routing
        .inflight_mut()
        .insert(child_rid, key, Some(deadline), pending);
    cx.rounds.park(
        round,
        Parked {
            client,
            child_rid,
            owner,
            method: method.into_owned(),
            asked: Vec::new(),
            queued: vec![ask],
            last: None,
            secret,
        },
    );
    deliver_round(cx, round, &id);
}

/// Ends the client's request `id` with an `input_required` result asking what is queued in
/// `round`.
fn deliver_round(cx: &mut Asking<'_>, round: u64, id: &RawValue) {
    let Some(p) = cx.rounds.parked_mut(round) else {
        return;
    };
    p.asked = std::mem::take(&mut p.queued);
    let mut requests = Map::new();
    for a in &p.asked {
        let params = a
            .params
            .as_deref()
            .and_then(|r| serde_json::from_str::<Value>(r.get()).ok())
            .unwrap_or(json!({}));
        requests.insert(a.key.clone(), json!({"method": a.method, "params": params}));
    }
    let client = p.client;
    let result = json!({
        "resultType": "input_required",
        "inputRequests": requests,
        "requestState": format!("{STATE_PREFIX}{round}.{:016x}", p.secret),
    });
    let line = message::result_response(id, &result);
    cx.outbox
        .respond(cx.telemetry, &cx.at, client, id, line, Outcome::Ok, None);
}

/// A 2026 client's request `m` that may be a retry carrying this supervisor's `requestState`:
/// the answers go to the child, then the retry owns the parked request (or gets the next
/// round).
pub(super) fn resume_round(cx: &mut Asking<'_>, client: ClientId, m: &Message) -> Resumed {
    let Some(params) = m.params_object() else {
        return Resumed::NotARetry;
    };
    let Some(state) = params.get("requestState").and_then(Value::as_str) else {
        return Resumed::NotARetry;
    };
    let Some(n) = state.strip_prefix(STATE_PREFIX) else {
        return Resumed::NotARetry;
    };
    let Some(id) = m.id.clone() else {
        return Resumed::NotARetry;
    };
    let stateless = cx
        .outbox
        .clients()
        .get(&client)
        .is_some_and(|c| c.peer().transport == Transport::HttpRequest);
    let (n, secret) = n.split_once('.').unwrap_or((n, ""));
    let secret = u64::from_str_radix(secret, 16).ok();
    let round = n.parse::<u64>().ok().filter(|r| {
        cx.rounds.parked(*r).is_some_and(|p| {
            Some(p.secret) == secret && (p.client == client || (stateless && p.client == DETACHED))
        })
    });
    let Some(round) = round else {
        let msg = format!(
            "requestState `{state}` is unknown or expired: the request it continues has ended (deadline, restart or disconnect); call again"
        );
        cx.outbox.respond_error(
            cx.telemetry,
            &cx.at,
            client,
            &id,
            code::INVALID_PARAMS,
            &msg,
            None,
            Outcome::Invalid,
        );
        return Resumed::Done;
    };
    let empty = Map::new();
    let answers = params
        .get("inputResponses")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let asked = cx
        .rounds
        .parked_mut(round)
        .map(|p| std::mem::take(&mut p.asked))
        .unwrap_or_default();
    for a in asked {
        match answers.get(&a.key) {
            Some(v) => {
                let mut v = v.clone();
                era::legacy_value(&mut v);
                cx.outbox.answer_upstream(&cx.at, &a.child_id, &v);
            }
            None => cx.outbox.answer_upstream_error(
                &cx.at,
                &a.child_id,
                code::INTERNAL_ERROR,
                &format!("the client gave no answer to `{}`", a.method),
            ),
        }
    }
    let more = cx
        .rounds
        .parked(round)
        .is_some_and(|p| !p.queued.is_empty());
    if more {
        // The next round is this retry's: a 2026-07-28 HTTP retry is a new client, and the
        // round may be owned by a detached one that nobody reads any more.
        hand_round_to(cx, round, client);
        deliver_round(cx, round, &id);
        Resumed::Done
    } else {
        unpark(cx, round, client, id, m)
    }
}

/// The retry `id` becomes the owner of the parked request; a final response that came while
/// parked is returned, to answer it at once.
fn unpark(
    cx: &mut Asking<'_>,
    round: u64,
    client: ClientId,
    id: Box<RawValue>,
    m: &Message,
) -> Resumed {
    let Some(p) = cx.rounds.unpark(round) else {
        return Resumed::Done;
    };
    let Some(removed) = cx.routing.inflight_mut().remove(p.child_rid) else {
        // Cannot happen while every path that removes a parked entry ends its round; if it
        // ever does, the retry still gets its one answer.
        let msg = format!(
            "server `{}`: the request this retry continues has ended",
            cx.at.server()
        );
        cx.outbox.respond_error(
            cx.telemetry,
            &cx.at,
            client,
            &id,
            code::INTERNAL_ERROR,
            &msg,
            None,
            Outcome::ProtocolError,
        );
        return Resumed::Done;
    };
    let mut owner = p.owner;
    if let Owner::Client {
        client: owner_client,
        id: owner_id,
        progress,
        ..
    } = &mut owner
    {
        // The retry may come from another client: a 2026-07-28 HTTP request is a client of
        // its own (`detach_rounds_of`).
        *owner_client = client;
        *owner_id = id.clone();
        if let Some(token) = era::envelope_field(m.params.as_deref(), "progressToken") {
            *progress = serde_json::value::to_raw_value(&token).ok();
        }
    }
    match p.last {
        Some(last) => match malformed(&last, &p.method) {
            Some(problem) => {
                cx.outbox
                    .fail_malformed(cx.telemetry, &cx.at, client, &id, &p.method, &problem);
                Resumed::Done
            }
            None => Resumed::Answer {
                method: p.method,
                owner: Box::new(owner),
                last: Box::new(last),
            },
        },
        None => {
            let deadline = base::deadline::after(cx.at.now(), cx.cfg.timeout_for(&p.method));
            let pending = Pending::new(owner, p.method.into(), removed.value.written());
            cx.routing.inflight_mut().insert(
                p.child_rid,
                Some((client, id_key(&id))),
                Some(deadline),
                pending,
            );
            Resumed::Done
        }
    }
}

/// A malformed or oversized reply (`why`) to the parked request `child_rid` of `round`: kept,
/// as the error the retry will get (K21 for a request that is waiting for its client).
pub(super) fn on_parked_failure(cx: &mut Asking<'_>, round: u64, child_rid: u64, why: &str) {
    let msg = format!(
        "server `{}` sent a malformed response: {why}",
        cx.at.server()
    );
    let line = message::error_response(&raw_u64(child_rid), code::INTERNAL_ERROR, &msg, None);
    if let Ok(m) = message::parse_one(&line) {
        on_parked_response(cx, round, child_rid, m);
    }
}

/// The child's final response `m` to the parked request `child_rid` of `round`: kept until the
/// client retries.
pub(super) fn on_parked_response(cx: &mut Asking<'_>, round: u64, child_rid: u64, m: Message) {
    let Some(p) = cx.rounds.parked_mut(round) else {
        return;
    };
    // The request stays in the table (so the retry finds it) until the retry comes or the
    // deadline passes; its late questions are void now.
    let void: Vec<Ask> = p.queued.drain(..).collect();
    p.last = Some(m);
    let now = cx.at.now();
    let deadline = base::deadline::after(now, cx.cfg.request_timeout);
    let pending = Pending::new(Owner::Parked { round }, p.method.clone().into(), now);
    let key = Some((p.client, format!("{STATE_PREFIX}{round}")));
    cx.routing
        .inflight_mut()
        .insert(child_rid, key, Some(deadline), pending);
    for a in void {
        cx.outbox.answer_upstream_error(
            &cx.at,
            &a.child_id,
            code::INTERNAL_ERROR,
            "the request ended",
        );
    }
}

/// Ends `round` without its retry (deadline, the client left, the child exited), for `why`.
/// What the child asked gets an error (`answer`: the child is still there to read it), and
/// the parked request a cancel (`cancel`: it was not cancelled already and is still running).
pub(super) fn drop_round(cx: &mut Asking<'_>, round: u64, why: &str, answer: bool, cancel: bool) {
    let Some(p) = cx.rounds.unpark(round) else {
        return;
    };
    if answer {
        for a in p.asked.into_iter().chain(p.queued) {
            cx.outbox
                .answer_upstream_error(&cx.at, &a.child_id, code::INTERNAL_ERROR, why);
        }
    }
    if cancel && p.last.is_none() {
        cx.outbox.cancel_upstream(
            &cx.at,
            p.child_rid,
            why,
            "notifications/cancelled for a parked request",
        );
    }
}

/// The rounds of a 2026-07-28 HTTP request's client that ended with its `input_required`
/// answer: that client lived for one request, and the retry comes as a new one. Its rounds
/// are kept, owned by [`DETACHED`], for any such client presenting the `requestState` (the
/// parked request's deadline still bounds them).
pub(super) fn detach_rounds_of(cx: &mut Asking<'_>, client: ClientId) {
    for round in rounds_of(cx.rounds, client) {
        hand_round_to(cx, round, DETACHED);
    }
}

/// `round` now belongs to `client` (the request that continues it): its next `input_required`
/// answer goes there, and the parked entry is keyed to it, so the client leaving ends or
/// detaches the round like any of its own.
fn hand_round_to(cx: &mut Asking<'_>, round: u64, client: ClientId) {
    let Some(p) = cx.rounds.parked_mut(round) else {
        return;
    };
    if p.client == client {
        return;
    }
    p.client = client;
    let child_rid = p.child_rid;
    let deadline = base::deadline::after(cx.at.now(), cx.cfg.request_timeout);
    if let Some(removed) = cx.routing.inflight_mut().remove(child_rid) {
        let key = Some((client, format!("{STATE_PREFIX}{round}")));
        cx.routing
            .inflight_mut()
            .insert(child_rid, key, Some(deadline), removed.value);
    }
}

/// The rounds `client` was asked in.
fn rounds_of(rounds: &Rounds, client: ClientId) -> Vec<u64> {
    rounds
        .all_parked()
        .filter(|(_, p)| p.client == client)
        .map(|(r, _)| r)
        .collect()
}

/// Ends the rounds of a client that left.
pub(super) fn drop_rounds_of(cx: &mut Asking<'_>, client: ClientId) {
    for r in rounds_of(cx.rounds, client) {
        // Its in-flight entries, the parked ones included, were cancelled already.
        drop_round(cx, r, "the client that was asked disconnected", true, false);
    }
}

/// The child's requests waiting in rounds (counted with the ones routed to handshake clients
/// against `max_inflight`).
pub(super) fn asks_waiting(rounds: &Rounds) -> usize {
    rounds
        .all_parked()
        .map(|(_, p)| p.asked.len() + p.queued.len())
        .sum()
}

/// The child's own request `m`. A `ping` is answered here, at once, with or without clients
/// (K07); the child's requests waiting for clients are bounded by `max_inflight` (issue 12
/// §6); `roots/list` is answered with the configured roots unless `client_roots = "caller"`
/// and a client can be asked (K28: never a refusal); anything else goes to the client the
/// owner rule picks ([`pick_owner`]), a 2026 client inside an `input_required` result (K26),
/// or the child gets an error when no client can answer.
pub(super) fn on_child_request(cx: &mut Asking<'_>, m: Message) {
    let Some(child_id) = m.id.clone() else { return };
    let method = m.method().to_string();
    if method == "ping" {
        let line = message::result_response(&child_id, &json!({}));
        let what = "the answer to the child's ping";
        cx.outbox
            .write_upstream(&cx.at, Outbound::response(line), Lane::Urgent, what);
        return;
    }
    let waiting = cx.routing.asks() + asks_waiting(cx.rounds);
    if waiting >= cx.cfg.max_inflight {
        let msg = format!("{waiting} requests to clients are already waiting (max_inflight)");
        cx.outbox
            .answer_upstream_error(&cx.at, &child_id, code::LIMIT_EXCEEDED, &msg);
        return;
    }
    let caller = cx.cfg.client_roots == ClientRoots::Caller;
    let picked = if method == "roots/list" && !caller {
        None
    } else {
        pick_owner(cx, &method)
    };
    if method == "roots/list" && picked.is_none() {
        debug!(
            roots = cx.cfg.roots.len(),
            "roots/list answered with the configured roots"
        );
        let line = message::result_response(&child_id, &json!({"roots": cx.cfg.roots}));
        let what = "the configured roots";
        cx.outbox
            .write_upstream(&cx.at, Outbound::response(line), Lane::Urgent, what);
        return;
    }
    let Some((owner, via)) = picked else {
        let msg = format!("no connected client can answer `{method}` for this server");
        warn!(method = %method, "{msg}");
        cx.outbox
            .answer_upstream_error(&cx.at, &child_id, code::INTERNAL_ERROR, &msg);
        return;
    };
    if cx.outbox.era_of(owner) == Era::Modern {
        return ask_modern(cx, via, child_id, m);
    }
    let deadline = base::deadline::after(cx.at.now(), cx.cfg.request_timeout);
    let n = cx.routing.ask(owner, Asker::Child(child_id), deadline);
    let line = Out::request(Some(&raw_u64(n)), &method, m.params.as_deref()).encode();
    cx.outbox
        .deliver(cx.telemetry, owner, To::Request(&raw_u64(n), &method), line);
}

/// The ownership rule for a child's request `method` (issue 3 §5, K06). The handshake era
/// has no field linking it to the client request that caused it, so: among clients that can
/// be asked and have a request in flight, the one whose request was forwarded most recently,
/// preferring requests that can make a server ask ([`can_ask`]) over those that cannot
/// (lists, `ping`: an endpoint's fan-outs keep those in flight at every source, issue 31).
/// A handshake client can be asked when it declared the needed capability; a 2026 client
/// when it declared it in its envelope and its request may end `input_required` (K26).
/// Returns the client and the child-side id of that request; `None` → the child gets an
/// error.
fn pick_owner(cx: &Asking<'_>, method: &str) -> Option<(ClientId, u64)> {
    let cap = era::capability_for_request(method);
    let clients = cx.outbox.clients();
    cx.routing
        .inflight()
        .iter()
        .filter_map(|(id, client, _, p)| Some((id, client?, p)))
        .filter(|(_, c, p)| {
            clients.get(c).is_some_and(|cl| match cl.era() {
                Some(Era::Modern) => can_ask_modern(clients, *c, p, cap),
                _ => {
                    !cl.closing()
                        && matches!(p.owner(), Owner::Client { .. })
                        && cap.is_none_or(|cap| cl.has_capability(cap))
                }
            })
        })
        .max_by_key(|(id, _, p)| (can_ask(p.method()), *id))
        .map(|(id, c, _)| (c, id))
}

/// Whether a client request of `method` is one a server may ask the client something while
/// handling (the owner rule's preference, [`pick_owner`]).
fn can_ask(method: &str) -> bool {
    matches!(
        method,
        "tools/call" | "prompts/get" | "resources/read" | "completion/complete"
    )
}

/// A client's answer `m` to the child's request it was asked (the owner rule), passed back to
/// the child under the child's id `child_id`.
pub(super) fn pass_answer(cx: &mut Asking<'_>, child_id: &RawValue, m: &Message) {
    let line = match (&m.result, &m.error) {
        (Some(r), _) => Out::result(child_id, &r.raw()).encode(),
        (_, Some(e)) => Out::error(child_id, e).encode(),
        _ => return,
    };
    let what = "a client's answer to the child's request";
    cx.outbox
        .write_upstream(&cx.at, Outbound::response(line), Lane::Normal, what);
}

// ----------------------------------------------------------------------------------------------
// The other direction: a 2026-07-28 child's `input_required` result answered for a
// handshake-era client (MRTR, issue 6 §4). Each input request becomes an ordinary
// handshake-era request to the client that made the original request (`elicitation/create`,
// `sampling/createMessage`, `roots/list`); once every answer is in, the original request is
// retried with `inputResponses` and the child's opaque `requestState`, byte-exact (K25). Under
// `client_roots = "none"` the client is not asked for roots: the configured roots answer (K28).
// The retry itself is returned ([`Retry`]): the caller writes it toward the upstream like any
// forwarded request.
// ----------------------------------------------------------------------------------------------

/// An `input_required` result being turned into handshake-era requests to the client that
/// made the original request; once every answer is in, the original request is retried.
#[derive(Debug)]
pub(super) struct Round {
    client: ClientId,
    /// The client's id for the original request.
    id: Box<RawValue>,
    method: String,
    /// The params the child saw (envelope included), to retry with.
    params: Value,
    /// The child's opaque `requestState`, byte-exact; `None` when it gave none (K25).
    state: Option<Box<RawValue>>,
    answers: Map<String, Value>,
    waiting: usize,
    progress: Option<Box<RawValue>>,
    log_level: Option<usize>,
}

impl Round {
    /// The client whose request it answers (and who is asked).
    pub(super) fn client(&self) -> ClientId {
        self.client
    }

    /// Records the client's answer to input `key`. Returns whether every input is answered.
    pub(super) fn answer(&mut self, key: String, value: Value) -> bool {
        self.answers.insert(key, value);
        self.waiting = self.waiting.saturating_sub(1);
        self.waiting == 0
    }
}

/// What became of a response to a handshake client's request that may be a round.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Started {
    /// Not `input_required`: the caller answers the client with it as it is.
    NotARound,
    /// Answered (a capability the client lacks, a client that closed its input) or asking.
    Handled,
    /// Every input was answered at once (the roots policy): the caller retries `round` now.
    Complete(u64),
}

/// The original request of a finished round, to be written toward the upstream again under
/// a fresh child-side id. Plain data, read by the caller.
#[derive(Debug)]
pub(super) struct Retry {
    /// The fresh child-side id; the progress token is this id.
    pub(super) child_id: u64,
    /// The client's id key for the request (the in-flight entry's key).
    pub(super) key: String,
    pub(super) owner: Owner,
    pub(super) method: String,
    /// The params with `inputResponses` and the child's `requestState`.
    pub(super) params: Box<RawValue>,
    pub(super) deadline: Instant,
}

/// The child answered `client`'s request `id` (`method`, sent with params `sent`) with
/// `result`: when it is `input_required`, ask the client each input request as an ordinary
/// handshake-era request and collect the answers.
#[allow(clippy::too_many_arguments)]
pub(super) fn start_round(
    cx: &mut Asking<'_>,
    client: ClientId,
    id: &RawValue,
    method: &str,
    sent: &RawValue,
    result: &[u8],
    progress: Option<Box<RawValue>>,
    log_level: Option<usize>,
) -> Started {
    let Some(requests) = input_requests(result) else {
        return Started::NotARound;
    };
    let caps = cx
        .outbox
        .clients()
        .get(&client)
        .map(|c| c.capabilities().clone())
        .unwrap_or(json!({}));
    let caps = match (&cx.cfg.client_roots, caps) {
        // Roots are not asked of the client under `client_roots = "none"`.
        (ClientRoots::None, mut caps) => {
            if let Some(o) = caps.as_object_mut() {
                o.insert("roots".into(), json!({}));
            }
            caps
        }
        (_, caps) => caps,
    };
    if let Some(missing) = missing_capability(&requests, &caps) {
        let msg = format!(
            "the server needs `{missing}` from the client, which did not declare that capability"
        );
        cx.outbox.respond_error(
            cx.telemetry,
            &cx.at,
            client,
            id,
            code::INTERNAL_ERROR,
            &msg,
            None,
            Outcome::ProtocolError,
        );
        return Started::Handled;
    }
    if cx
        .outbox
        .clients()
        .get(&client)
        .is_some_and(|c| c.closing())
    {
        // A client whose input closed can never answer the server's questions: the request
        // fails now (as a round pending at its close does), instead of a round that can only
        // time out while the client waits for its answer.
        cx.outbox.respond_error(
            cx.telemetry,
            &cx.at,
            client,
            id,
            code::INTERNAL_ERROR,
            "the client that was asked closed its input",
            Some(json!({"server": cx.at.server()})),
            Outcome::Cancelled,
        );
        return Started::Handled;
    }
    let deadline = base::deadline::after(cx.at.now(), cx.cfg.request_timeout);
    let round = cx.rounds.open(Round {
        client,
        id: id.to_owned(),
        method: method.to_string(),
        params: serde_json::from_str(sent.get()).unwrap_or(json!({})),
        state: request_state(result),
        answers: Map::new(),
        waiting: requests.len(),
        progress,
        log_level,
    });
    debug!(client = %client, round, inputs = requests.len(), "input_required: asking the client");
    ask_inputs(cx, client, round, requests, deadline);
    if cx.rounds.round(round).is_some_and(|r| r.waiting == 0) {
        return Started::Complete(round);
    }
    Started::Handled
}

/// Sends `client` each input request of `round` as an ordinary request with a fresh id.
fn ask_inputs(
    cx: &mut Asking<'_>,
    client: ClientId,
    round: u64,
    requests: Map<String, Value>,
    deadline: Instant,
) {
    for (key, q) in requests {
        let m = q
            .get("method")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let p = q.get("params").cloned().unwrap_or(json!({}));
        if m == "roots/list" && cx.cfg.client_roots == ClientRoots::None {
            // The roots policy (K28): the client is not asked.
            let roots = json!({"roots": cx.cfg.roots});
            if let Some(r) = cx.rounds.round_mut(round) {
                r.answer(key, roots);
            }
            continue;
        }
        let n = cx.routing.ask(client, Asker::Mrtr { round, key }, deadline);
        cx.outbox.deliver(
            cx.telemetry,
            client,
            To::Request(&raw_u64(n), &m),
            Out::request(Some(&raw_u64(n)), &m, Some(&raw(&p))).encode(),
        );
    }
}

/// Every input of `round` is answered: closes it and returns its original request with the
/// answers, for the caller to write toward the upstream. `None` when the round has ended.
pub(super) fn take_retry(cx: &mut Asking<'_>, round: u64) -> Option<Retry> {
    let r = cx.rounds.close(round)?;
    let mut params = r.params;
    if let Some(p) = params.as_object_mut() {
        p.insert("inputResponses".into(), Value::Object(r.answers));
        p.remove("requestState");
    }
    let params = match &r.state {
        // Spliced in as the child wrote it: re-encoding could change its bytes (K25).
        Some(state) => {
            let mut obj = RawObject::parse(&raw(&params)).unwrap_or_default();
            obj.set("requestState", state.clone());
            obj.to_raw()
        }
        None => raw(&params),
    };
    let child_id = cx.routing.inflight_mut().allocate();
    // The retry is a new request: its progress token is its own child-side id.
    let params = match message::swap_progress_token(&params, || raw_u64(child_id)) {
        Some((p, _)) => p,
        None => params,
    };
    let deadline = base::deadline::after(cx.at.now(), cx.cfg.timeout_for(&r.method));
    let owner = Owner::Client {
        client: r.client,
        id: r.id.clone(),
        progress: r.progress,
        subscribe: None,
        cache: None,
        add_result_type: false,
        log_level: r.log_level,
        retry_params: Some(params.clone()),
    };
    Some(Retry {
        child_id,
        key: id_key(&r.id),
        owner,
        method: r.method,
        params,
        deadline,
    })
}

/// `round` can no longer finish (its client errored, left or did not answer): fail the
/// original request with error `code`, `msg` and `outcome`, and forget the round's other
/// questions.
pub(super) fn abandon_round(
    cx: &mut Asking<'_>,
    round: u64,
    outcome: Outcome,
    code: i64,
    msg: &str,
) {
    cx.routing.forget_round(round);
    if let Some(r) = cx.rounds.close(round) {
        let data = Some(json!({"server": cx.at.server()}));
        cx.outbox.respond_error(
            cx.telemetry,
            &cx.at,
            r.client,
            &r.id,
            code,
            msg,
            data,
            outcome,
        );
    }
}

/// The questions to clients (the child's own requests routed to them, and inputs of rounds
/// toward handshake clients) past their deadlines at `now`: the asker gets an error
/// (-32001; a round's original request fails, outcome `timeout`), and the client a
/// `notifications/cancelled` for the question it was asked.
pub(super) fn expire_asks(cx: &mut Asking<'_>, now: Instant) {
    for ((client, n), asker) in cx.routing.take_expired_asks(now) {
        match asker {
            Asker::Child(id) => cx.outbox.answer_upstream_error(
                &cx.at,
                &id,
                code::REQUEST_TIMEOUT,
                "the client did not answer in time",
            ),
            Asker::Mrtr { round, .. } => abandon_round(
                cx,
                round,
                Outcome::Timeout,
                code::REQUEST_TIMEOUT,
                "the client did not answer the server's input request in time",
            ),
        }
        let p = raw(&json!({"requestId": n, "reason": "timed out"}));
        let line = Out::request(None, "notifications/cancelled", Some(&p)).encode();
        cx.outbox.deliver(cx.telemetry, client, To::Session, line);
    }
}

/// The questions routed to `client` that it will never answer (it left, or closed its
/// input): each asker gets an error (-32603 with `why`; a round's original request fails,
/// outcome `cancelled`).
pub(super) fn fail_asks_of(cx: &mut Asking<'_>, client: ClientId, why: &str) {
    for asker in cx.routing.take_asks_of(client) {
        match asker {
            Asker::Child(id) => {
                cx.outbox
                    .answer_upstream_error(&cx.at, &id, code::INTERNAL_ERROR, why)
            }
            Asker::Mrtr { round, .. } => {
                abandon_round(cx, round, Outcome::Cancelled, code::INTERNAL_ERROR, why)
            }
        }
    }
}

/// The client's answer `m` to input `key` of `round`: a result is recorded (returns whether
/// every input is answered now: the caller retries the round); an error abandons the round
/// (the original request fails, -32603, outcome `protocol_error`).
pub(super) fn on_input_answer(cx: &mut Asking<'_>, round: u64, key: String, m: &Message) -> bool {
    match (&m.result, &m.error) {
        (Some(r), _) => cx.rounds.round_mut(round).is_some_and(|rd| {
            rd.answer(
                key,
                serde_json::from_slice(r.as_bytes()).unwrap_or(Value::Null),
            )
        }),
        (_, Some(e)) => {
            let msg = format!("the client refused an input the server needs: {}", e.get());
            abandon_round(
                cx,
                round,
                Outcome::ProtocolError,
                code::INTERNAL_ERROR,
                &msg,
            );
            false
        }
        _ => false,
    }
}
