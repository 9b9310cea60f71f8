//! The child's requests asked of 2026-07-28 clients (issue 13 §1, K26). A handshake-era child
//! sends `sampling/createMessage`, `elicitation/create` or `roots/list` as JSON-RPC requests; a
//! 2026 client receives them only inside an `input_required` result (MRTR, protocol.md §5).
//! So when the owner rule picks a 2026 client whose `tools/call`, `prompts/get` or
//! `resources/read` is in flight, that request is *parked*: the client gets
//! `{"resultType":"input_required","inputRequests":{..},"requestState":"mcp-supervisor:N.SECRET"}`,
//! the child's request stays open, and the child's own request keeps running. When the client
//! retries with `inputResponses` and that `requestState`, each answer goes back to the child
//! under the child's id, and the retry becomes the owner of the original request: the child's
//! final response (even one that arrived while parked) answers the retry.
//!
//! Bounds: one round per in-flight request (so at most `max_inflight`), and the child's
//! requests waiting in rounds count against `max_inflight` with the ones routed to handshake
//! clients. A round ends with its request: the child's final answer, the request's deadline
//! (the child gets errors for what was asked and a cancel), the client leaving, or the child's
//! exit.

use super::util::malformed;
use super::{Lane, Owner, Pending, Server};
use crate::jsonrpc::message;
use crate::jsonrpc::message::{code, raw, raw_u64, Message, Out};
use crate::mux::era;
use crate::mux::era::Era;
use crate::mux::ids::id_key;
use crate::mux::session::{ClientId, Transport};
use crate::observe::Outcome;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

/// The owner of rounds whose 2026-07-28 HTTP request ended with its `input_required` answer
/// ([`Server::detach_rounds_of`]); never a real client's id (those start at 1).
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

impl Server {
    /// Whether `client` can be asked `method` (a child request) through MRTR on its request
    /// `p`: a 2026 client, a request that may end `input_required`, and the capability
    /// declared in its envelope.
    pub(super) fn can_ask_modern(&self, client: ClientId, p: &Pending, cap: Option<&str>) -> bool {
        let Some(c) = self.clients.get(&client) else {
            return false;
        };
        let parked_or_open = matches!(p.owner, Owner::Client { .. } | Owner::Parked { .. });
        c.era() == Some(Era::Modern)
            && !c.closing()
            && parked_or_open
            && MRTR_METHODS.contains(&&*p.method)
            && cap.is_none_or(|cap| c.has_capability(cap))
    }

    /// Asks the child's request `m` of the 2026 client that owns the in-flight request
    /// `child_rid`, parking that request (or adding to its round when parked already).
    pub(super) fn ask_modern(&mut self, child_rid: u64, child_id: Box<RawValue>, m: Message) {
        let key = self.rounds.next_key();
        let ask = Ask {
            key,
            child_id,
            method: m.method().to_string(),
            params: m.params,
        };
        let round = match self.routing.inflight().get(child_rid).map(|p| &p.owner) {
            Some(Owner::Parked { round }) => *round,
            _ => return self.park(child_rid, ask),
        };
        if let Some(p) = self.rounds.parked_mut(round) {
            p.queued.push(ask);
        }
    }

    /// Parks the client's in-flight request `child_rid` with the first question `ask`.
    fn park(&mut self, child_rid: u64, ask: Ask) {
        let Some(removed) = self.routing.inflight_mut().remove(child_rid) else {
            return;
        };
        let Owner::Client { client, id, .. } = &removed.value.owner else {
            return;
        };
        let (client, id) = (*client, id.clone());
        let (round, secret) = self.rounds.new_parked();
        let key = Some((client, format!("{STATE_PREFIX}{round}")));
        let deadline = crate::deadline::after(self.clock.now(), self.cfg.request_timeout);
        let pending = Pending {
            owner: Owner::Parked { round },
            method: removed.value.method.clone(),
            written: removed.value.written,
        };
        self.routing
            .inflight_mut()
            .insert(child_rid, key, Some(deadline), pending);
        self.rounds.park(
            round,
            Parked {
                client,
                child_rid,
                owner: removed.value.owner,
                method: removed.value.method.into_owned(),
                asked: Vec::new(),
                queued: vec![ask],
                last: None,
                secret,
            },
        );
        self.deliver_round(round, &id);
    }

    /// Ends the client's request `id` with an `input_required` result asking what is queued
    /// in `round`.
    fn deliver_round(&mut self, round: u64, id: &RawValue) {
        let Some(p) = self.rounds.parked_mut(round) else {
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
        self.respond(client, id, line, Outcome::Ok, None);
    }

    /// A 2026 client's retry carrying this supervisor's `requestState`: the answers go to the
    /// child, then the retry owns the parked request (or gets the next round). Returns false
    /// when `m` is not such a retry.
    pub(super) fn resume_round(&mut self, client: ClientId, m: &Message) -> bool {
        let Some(params) = m.params_object() else {
            return false;
        };
        let Some(state) = params.get("requestState").and_then(Value::as_str) else {
            return false;
        };
        let Some(n) = state.strip_prefix(STATE_PREFIX) else {
            return false;
        };
        let Some(id) = m.id.clone() else { return false };
        let stateless = self
            .clients
            .get(&client)
            .is_some_and(|c| c.peer().transport == Transport::HttpRequest);
        let (n, secret) = n.split_once('.').unwrap_or((n, ""));
        let secret = u64::from_str_radix(secret, 16).ok();
        let round = n.parse::<u64>().ok().filter(|r| {
            self.rounds.parked(*r).is_some_and(|p| {
                Some(p.secret) == secret
                    && (p.client == client || (stateless && p.client == DETACHED))
            })
        });
        let Some(round) = round else {
            let msg = format!(
                "requestState `{state}` is unknown or expired: the request it continues has ended (deadline, restart or disconnect); call again"
            );
            self.respond_error(
                client,
                &id,
                code::INVALID_PARAMS,
                &msg,
                None,
                Outcome::Invalid,
            );
            return true;
        };
        let empty = Map::new();
        let answers = params
            .get("inputResponses")
            .and_then(Value::as_object)
            .unwrap_or(&empty);
        let asked = self
            .rounds
            .parked_mut(round)
            .map(|p| std::mem::take(&mut p.asked))
            .unwrap_or_default();
        for a in asked {
            match answers.get(&a.key) {
                Some(v) => {
                    let mut v = v.clone();
                    era::legacy_value(&mut v);
                    self.answer_child(&a.child_id, &v);
                }
                None => self.answer_child_error(
                    &a.child_id,
                    code::INTERNAL_ERROR,
                    &format!("the client gave no answer to `{}`", a.method),
                ),
            }
        }
        let more = self
            .rounds
            .parked(round)
            .is_some_and(|p| !p.queued.is_empty());
        if more {
            // The next round is this retry's: a 2026-07-28 HTTP retry is a new client, and the
            // round may be owned by a detached one that nobody reads any more.
            self.hand_round_to(round, client);
            self.deliver_round(round, &id);
        } else {
            self.unpark(round, client, id, m);
        }
        true
    }

    /// The retry `id` becomes the owner of the parked request; a final response that came
    /// while parked answers it at once.
    fn unpark(&mut self, round: u64, client: ClientId, id: Box<RawValue>, m: &Message) {
        let Some(p) = self.rounds.unpark(round) else {
            return;
        };
        let Some(removed) = self.routing.inflight_mut().remove(p.child_rid) else {
            // Cannot happen while every path that removes a parked entry ends its round; if it
            // ever does, the retry still gets its one answer.
            let msg = format!(
                "server `{}`: the request this retry continues has ended",
                self.cfg.name
            );
            return self.respond_error(
                client,
                &id,
                code::INTERNAL_ERROR,
                &msg,
                None,
                Outcome::ProtocolError,
            );
        };
        let mut owner = p.owner;
        if let Owner::Client {
            client: owner_client,
            id: owner_id,
            progress,
            ..
        } = &mut owner
        {
            // The retry may come from another client: a 2026-07-28 HTTP request is a client
            // of its own (`detach_rounds_of`).
            *owner_client = client;
            *owner_id = id.clone();
            if let Some(token) = era::envelope_field(m.params.as_deref(), "progressToken") {
                *progress = serde_json::value::to_raw_value(&token).ok();
            }
        }
        match p.last {
            Some(last) => match malformed(&last, &p.method) {
                Some(problem) => self.fail_malformed(client, &id, &p.method, &problem),
                None => self.answer_client(&p.method, owner, &last),
            },
            None => {
                let deadline =
                    crate::deadline::after(self.clock.now(), self.cfg.timeout_for(&p.method));
                let pending = Pending {
                    owner,
                    method: p.method.into(),
                    written: removed.value.written,
                };
                self.routing.inflight_mut().insert(
                    p.child_rid,
                    Some((client, id_key(&id))),
                    Some(deadline),
                    pending,
                );
            }
        }
    }

    /// A malformed or oversized reply to a parked request: kept, as the error the retry will
    /// get (K21 for a request that is waiting for its client).
    pub(super) fn on_parked_failure(&mut self, round: u64, child_rid: u64, why: &str) {
        let msg = format!(
            "server `{}` sent a malformed response: {why}",
            self.cfg.name
        );
        let line = message::error_response(&raw_u64(child_rid), code::INTERNAL_ERROR, &msg, None);
        if let Ok(m) = message::parse_one(&line) {
            self.on_parked_response(round, child_rid, m);
        }
    }

    /// The child's final response to a parked request: kept until the client retries.
    pub(super) fn on_parked_response(&mut self, round: u64, child_rid: u64, m: Message) {
        let Some(p) = self.rounds.parked_mut(round) else {
            return;
        };
        // The request stays in the table (so the retry finds it) until the retry comes or the
        // deadline passes; its late questions are void now.
        let void: Vec<Ask> = p.queued.drain(..).collect();
        p.last = Some(m);
        let deadline = crate::deadline::after(self.clock.now(), self.cfg.request_timeout);
        let pending = Pending {
            owner: Owner::Parked { round },
            method: p.method.clone().into(),
            written: self.clock.now(),
        };
        let key = Some((p.client, format!("{STATE_PREFIX}{round}")));
        self.routing
            .inflight_mut()
            .insert(child_rid, key, Some(deadline), pending);
        for a in void {
            self.answer_child_error(&a.child_id, code::INTERNAL_ERROR, "the request ended");
        }
    }

    /// Ends a round without its retry (deadline, the client left, the child exited). What the
    /// child asked gets an error (`answer`: the child is still there to read it), and the
    /// parked request a cancel (`cancel`: it was not cancelled already and is still running).
    pub(super) fn drop_round(&mut self, round: u64, why: &str, answer: bool, cancel: bool) {
        let Some(p) = self.rounds.unpark(round) else {
            return;
        };
        if answer {
            for a in p.asked.into_iter().chain(p.queued) {
                self.answer_child_error(&a.child_id, code::INTERNAL_ERROR, why);
            }
        }
        if cancel && p.last.is_none() {
            let cancel = raw(&json!({"requestId": p.child_rid, "reason": why}));
            let line = Out::request(None, "notifications/cancelled", Some(&cancel)).encode();
            self.write_child(
                line,
                Lane::Urgent,
                "notifications/cancelled for a parked request",
            );
        }
    }

    /// The rounds of a 2026-07-28 HTTP request's client that ended with its `input_required`
    /// answer: that client lived for one request, and the retry comes as a new one. Its
    /// rounds are kept, owned by [`DETACHED`], for any such client presenting the
    /// `requestState` (the parked request's deadline still bounds them).
    pub(super) fn detach_rounds_of(&mut self, client: ClientId) {
        for round in self.rounds_of(client) {
            self.hand_round_to(round, DETACHED);
        }
    }

    /// `round` now belongs to `client` (the request that continues it): its next
    /// `input_required` answer goes there, and the parked entry is keyed to it, so the client
    /// leaving ends or detaches the round like any of its own.
    fn hand_round_to(&mut self, round: u64, client: ClientId) {
        let Some(p) = self.rounds.parked_mut(round) else {
            return;
        };
        if p.client == client {
            return;
        }
        p.client = client;
        let child_rid = p.child_rid;
        let deadline = crate::deadline::after(self.clock.now(), self.cfg.request_timeout);
        if let Some(removed) = self.routing.inflight_mut().remove(child_rid) {
            let key = Some((client, format!("{STATE_PREFIX}{round}")));
            self.routing
                .inflight_mut()
                .insert(child_rid, key, Some(deadline), removed.value);
        }
    }

    /// The rounds `client` was asked in.
    fn rounds_of(&self, client: ClientId) -> Vec<u64> {
        self.rounds
            .all_parked()
            .filter(|(_, p)| p.client == client)
            .map(|(r, _)| r)
            .collect()
    }

    /// Rounds of a client that left.
    pub(super) fn drop_rounds_of(&mut self, client: ClientId) {
        for r in self.rounds_of(client) {
            // Its in-flight entries, the parked ones included, were cancelled already.
            self.drop_round(r, "the client that was asked disconnected", true, false);
        }
    }

    /// The child's requests waiting in rounds (counted with `upstream` against
    /// `max_inflight`).
    pub(super) fn asks_waiting(&self) -> usize {
        self.rounds
            .all_parked()
            .map(|(_, p)| p.asked.len() + p.queued.len())
            .sum()
    }

    /// Answers the child's request `child_id` with `result`.
    fn answer_child(&mut self, child_id: &RawValue, result: &Value) {
        let line = message::result_response(child_id, result);
        self.write_child(line, Lane::Urgent, "an answer to the child's request");
    }
}
