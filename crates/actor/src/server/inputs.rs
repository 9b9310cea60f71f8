//! A 2026-07-28 child's `input_required` result answered for a handshake-era client (MRTR,
//! issue 6 §4): each input request becomes an ordinary handshake-era request to the client that
//! made the original request (`elicitation/create`, `sampling/createMessage`, `roots/list`);
//! once every answer is in, the original request is retried with `inputResponses` and the
//! child's opaque `requestState`, byte-exact (K25). Under `client_roots = "none"` the client is
//! not asked for roots: the configured roots answer (K28).
//!
//! A section of the core as free functions over one narrow context ([`Inputs`]): the rounds,
//! the in-flight table's ask ids and the outbox. The retry itself is returned ([`Retry`]): the
//! caller writes it toward the upstream like any forwarded request.
//!
//! No clock read, no I/O.

use super::core::{Asker, Owner};
use super::outbox::{Outbox, Stamp};
use super::rounds::Rounds;
use super::routing::Routing;
use super::telemetry::Telemetry;
use super::util::{input_requests, missing_capability, request_state};
use crate::ids::id_key;
use crate::session::{ClientId, To};
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};
use std::time::Instant;
use support::config::{ClientRoots, ServerConfig};
use support::observe::Outcome;
use tracing::debug;
use vocab::jsonrpc::message::{self, code, raw, raw_u64, Message, Out, RawObject};

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

/// What a decision about a round toward a handshake client touches.
pub(super) struct Inputs<'a> {
    rounds: &'a mut Rounds,
    /// Its ask ids and deadlines (the questions to the client); its request ids (the retry).
    routing: &'a mut Routing,
    outbox: &'a mut Outbox,
    telemetry: &'a mut Telemetry,
    /// The moment, and the server's name the errors give.
    at: Stamp<'a>,
    /// `request_timeout`, the per-method timeouts, `client_roots` and `roots`.
    cfg: &'a ServerConfig,
}

impl<'a> Inputs<'a> {
    /// The context over the rounds, the in-flight table, the outbox and the telemetry at `at`.
    pub(super) fn new(
        rounds: &'a mut Rounds,
        routing: &'a mut Routing,
        outbox: &'a mut Outbox,
        telemetry: &'a mut Telemetry,
        at: Stamp<'a>,
        cfg: &'a ServerConfig,
    ) -> Self {
        Inputs {
            rounds,
            routing,
            outbox,
            telemetry,
            at,
            cfg,
        }
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
    cx: &mut Inputs<'_>,
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
    cx: &mut Inputs<'_>,
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
pub(super) fn take_retry(cx: &mut Inputs<'_>, round: u64) -> Option<Retry> {
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
    cx: &mut Inputs<'_>,
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

/// The client's answer `m` to input `key` of `round`: a result is recorded (returns whether
/// every input is answered now: the caller retries the round); an error abandons the round
/// (the original request fails, -32603, outcome `protocol_error`).
pub(super) fn on_input_answer(cx: &mut Inputs<'_>, round: u64, key: String, m: &Message) -> bool {
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
