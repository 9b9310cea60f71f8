//! Forwarding a client request to the child: id rewriting, era translation, deadlines, and
//! MRTR rounds (`input_required` turned into ordinary requests for handshake clients).

use super::effects::{Effect, Written};
use super::util::{
    input_requests, level_name, list_to_cache, missing_capability, request_state, subscribe_uri,
};
use super::{Asker, Lane, Owner, Pending, Round, Server};
use crate::config::ClientRoots;
use crate::jsonrpc::message;
use crate::jsonrpc::message::{code, raw, raw_u64, Message, Out, RawObject};
use crate::mux::era;
use crate::mux::era::Era;
use crate::mux::ids::id_key;
use crate::mux::outage::{OutageStatus, StopCause};
use crate::mux::session::ClientId;
use crate::mux::session::To;
use crate::observe::Outcome;
use crate::upstream::Queued;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};
use std::time::Instant;
use tracing::debug;

impl Server {
    pub(super) fn forward(&mut self, client: ClientId, m: Message) {
        let Message {
            id, method, params, ..
        } = m;
        let Some(id) = id else { return };
        if self.routing.inflight().len() >= self.cfg.max_inflight {
            let msg = format!(
                "server `{}` has {} requests in flight; try again shortly",
                self.cfg.name,
                self.routing.inflight().len()
            );
            return self.refuse_limit(client, &id, &msg);
        }
        let mine = self.routing.inflight().count_for(client);
        if mine >= self.cfg.client_max_inflight {
            // One client may not take all of `max_inflight` (issue 14 §3).
            let msg = format!(
                "this client has {mine} requests in flight to server `{}` (client_max_inflight); try again shortly",
                self.cfg.name
            );
            return self.refuse_limit(client, &id, &msg);
        }
        self.used();
        let child_id = self.routing.inflight_mut().allocate();
        let (params, progress) = match params.as_deref() {
            Some(p) => match message::swap_progress_token(p, || raw_u64(child_id)) {
                Some((np, orig)) => (Some(np), Some(orig)),
                None => (params, None),
            },
            None => (None, None),
        };
        let method = method.unwrap_or_default();
        let cache = list_to_cache(&method, params.as_deref());
        let subscribe = subscribe_uri(&method, params.as_deref());
        let (client_era, child_era) = (self.client_era(client), self.child_era());
        let (params, log_level) = self.translate_params(client, params);
        let key = id_key(&id);
        // Traces on (issue 17 §4): the child gets our span as its parent, and the client's
        // `tracestate`. Off, the params pass as they are, with no lookup.
        let span = if self.telemetry.traced() && era::can_carry_meta(params.as_deref()) {
            self.ledger.span(client, &key)
        } else {
            None
        };
        let params = match span {
            Some(span) => Some(era::add_envelope(params.as_deref(), &span.meta())),
            None => params,
        };
        let add_result_type = client_era == Era::Modern && child_era == Era::Handshake;
        // A listen stream lives until it is cancelled: no deadline.
        let deadline = (method != "subscriptions/listen")
            .then(|| crate::deadline::after(self.clock.now(), self.cfg.timeout_for(&method)));
        let retry_params = (client_era == Era::Handshake
            && child_era == Era::Modern
            && matches!(&*method, "tools/call" | "prompts/get" | "resources/read"))
        .then(|| params.clone())
        .flatten();
        let owner = Owner::Client {
            client,
            id,
            progress,
            subscribe,
            cache,
            add_result_type,
            log_level,
            retry_params,
        };
        self.send_with_id(child_id, Some(key), owner, &method, params, deadline);
    }

    /// Translates a client request's params between the client's era and the child's (issue
    /// 6 §3, §4). Returns them with the log level the request asks for, if any.
    fn translate_params(
        &mut self,
        client: ClientId,
        params: Option<Box<RawValue>>,
    ) -> (Option<Box<RawValue>>, Option<usize>) {
        let envelope_level = |p: Option<&RawValue>| {
            era::envelope_field(p, era::META_LOG_LEVEL)
                .and_then(|l| l.as_str().and_then(era::log_rank))
        };
        match (self.client_era(client), self.child_era()) {
            (Era::Modern, Era::Handshake) => {
                let log_level = envelope_level(params.as_deref());
                if let Some(level) = log_level {
                    self.want_child_log_level(level);
                }
                (
                    params.map(|p| era::strip_envelope(&p).into_owned()),
                    log_level,
                )
            }
            (Era::Handshake, Era::Modern) => {
                let c = self.clients.get(&client);
                let log_level = c.and_then(|c| c.log_level());
                let env = era::envelope(
                    &c.map(|c| c.capabilities().clone()).unwrap_or(json!({})),
                    &c.map(|c| c.info().clone()).unwrap_or(Value::Null),
                    log_level.map(level_name),
                );
                (Some(era::add_envelope(params.as_deref(), &env)), log_level)
            }
            (Era::Modern, Era::Modern) => {
                let log_level = envelope_level(params.as_deref());
                (params, log_level)
            }
            (Era::Handshake, Era::Handshake) => (params, None),
        }
    }

    /// An `input_required` result for a handshake client: ask the client each input request
    /// as an ordinary handshake-era request (`elicitation/create`, `sampling/createMessage`,
    /// `roots/list`), collect the answers, then retry. Returns false when the result is not
    /// `input_required` (it is then answered as it is).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn start_round(
        &mut self,
        client: ClientId,
        id: &RawValue,
        method: &str,
        sent: &RawValue,
        result: &[u8],
        progress: Option<Box<RawValue>>,
        log_level: Option<usize>,
    ) -> bool {
        let Some(requests) = input_requests(result) else {
            return false;
        };
        let caps = self
            .clients
            .get(&client)
            .map(|c| c.capabilities().clone())
            .unwrap_or(json!({}));
        let caps = match (&self.cfg.client_roots, caps) {
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
            let msg = format!("the server needs `{missing}` from the client, which did not declare that capability");
            self.respond_error(
                client,
                id,
                code::INTERNAL_ERROR,
                &msg,
                None,
                Outcome::ProtocolError,
            );
            return true;
        }
        let deadline = crate::deadline::after(self.clock.now(), self.cfg.request_timeout);
        let round = self.rounds.open(Round {
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
        self.ask_inputs(client, round, requests, deadline);
        if self.rounds.round(round).is_some_and(|r| r.waiting == 0) {
            self.retry_round(round);
        }
        true
    }

    /// Sends `client` each input request of `round` as an ordinary request with a fresh id.
    fn ask_inputs(
        &mut self,
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
            if m == "roots/list" && self.cfg.client_roots == ClientRoots::None {
                // The roots policy (K28): the client is not asked.
                let roots = self.roots_result();
                if let Some(r) = self.rounds.round_mut(round) {
                    r.answers.insert(key, roots);
                    r.waiting = r.waiting.saturating_sub(1);
                }
                continue;
            }
            let n = self
                .routing
                .ask(client, Asker::Mrtr { round, key }, deadline);
            self.reply_to(
                client,
                To::Request(&raw_u64(n), &m),
                Out::request(Some(&raw_u64(n)), &m, Some(&raw(&p))).encode(),
            );
        }
    }

    /// Every input of `round` is answered: retry the original request with them.
    pub(super) fn retry_round(&mut self, round: u64) {
        let Some(r) = self.rounds.close(round) else {
            return;
        };
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
        let child_id = self.routing.inflight_mut().allocate();
        // The retry is a new request: its progress token is its own child-side id.
        let params = match message::swap_progress_token(&params, || raw_u64(child_id)) {
            Some((p, _)) => p,
            None => params,
        };
        let deadline = crate::deadline::after(self.clock.now(), self.cfg.timeout_for(&r.method));
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
        self.send_with_id(
            child_id,
            Some(id_key(&r.id)),
            owner,
            &r.method,
            Some(params),
            Some(deadline),
        );
    }

    /// A round can no longer finish (its client errored, left or did not answer): fail the
    /// original request with `line` and forget the round's other questions.
    pub(super) fn abandon_round(&mut self, round: u64, outcome: Outcome, code: i64, msg: &str) {
        self.routing.forget_round(round);
        if let Some(r) = self.rounds.close(round) {
            let line =
                message::error_response(&r.id, code, msg, Some(json!({"server": self.cfg.name})));
            self.respond(r.client, &r.id, line, outcome, Some(code));
        }
    }

    /// The child is being stopped to be replaced (health, timeouts, restart), not for good.
    pub(super) fn restarting(&self) -> bool {
        !matches!(
            self.life.stop_cause(),
            Some(StopCause::Stop | StopCause::Shutdown)
        )
    }

    /// A client's era (handshake until its first request says otherwise).
    pub(super) fn client_era(&self, client: ClientId) -> Era {
        self.clients
            .get(&client)
            .and_then(|c| c.era())
            .unwrap_or(Era::Handshake)
    }

    /// The era the current child is driven in (handshake until known).
    pub(super) fn child_era(&self) -> Era {
        self.opener.child_era()
    }

    /// A modern client asked a handshake child for logs at `level`: the child's session-wide
    /// level must be at least that verbose (never lowered by a modern request).
    pub(super) fn want_child_log_level(&mut self, level: usize) {
        if self.opener.handshake().is_some_and(|h| h.has("logging"))
            && self.opener.raise_log_level(level)
        {
            let p = raw(&json!({"level": level_name(level)}));
            let deadline = crate::deadline::after(self.clock.now(), self.cfg.request_timeout);
            self.send_to_child(Owner::Internal, "logging/setLevel", Some(p), deadline);
        }
    }

    /// Registers and writes a request to the child. Returns its child-side id, or `None` when
    /// it could not be queued (the owner was already answered).
    pub(super) fn send_to_child(
        &mut self,
        owner: Owner,
        method: &str,
        params: Option<Box<RawValue>>,
        deadline: impl Into<Option<Instant>>,
    ) -> Option<u64> {
        let child_id = self.routing.inflight_mut().allocate();
        self.send_with_id(child_id, None, owner, method, params, deadline.into())
    }

    /// [`Server::send_to_child`] with an id already allocated; `key` is the owning client's
    /// request id text.
    pub(super) fn send_with_id(
        &mut self,
        child_id: u64,
        key: Option<String>,
        owner: Owner,
        method: &str,
        params: Option<Box<RawValue>>,
        deadline: Option<Instant>,
    ) -> Option<u64> {
        let params = if self.child_era() == Era::Modern
            && !matches!(owner, Owner::Client { .. })
            && era::envelope_version(params.as_deref()).is_none()
        {
            Some(era::add_envelope(
                params.as_deref(),
                &era::supervisor_envelope(),
            ))
        } else {
            params
        };
        let line = message::request_line(child_id, method, params.as_deref());
        let Some(generation) = self.life.child().map(|c| c.generation()) else {
            if let Owner::Client { client, id, .. } = owner {
                // The child is gone and the exit is not handled yet: answer with the outage
                // record like any request that cannot reach the child.
                self.outage_reply(client, &id, method, OutageStatus::Exited);
            }
            return None;
        };
        self.telemetry.metrics().bytes("to_child", line.len());
        // In flight from now; a refusal of the child's queue comes back as `Unwritten`.
        self.shell.effects().push(Effect::ToChild {
            generation,
            line,
            lane: Lane::Normal,
            what: Written::Request(child_id),
        });
        let client = match (&owner, key) {
            (Owner::Client { client, .. }, Some(key)) => Some((*client, key)),
            _ => None,
        };
        let pending = Pending {
            owner,
            method: message::method_name(method),
            written: self.clock.now(),
        };
        self.routing
            .inflight_mut()
            .insert(child_id, client, deadline, pending);
        self.telemetry
            .metrics()
            .set_in_flight(self.routing.inflight().len());
        Some(child_id)
    }

    /// The child's queue refused request `child_id` (the shell's report of an
    /// [`Effect::ToChild`]): it leaves the in-flight table, and a client's request is
    /// answered: closed input means the child is exiting (the outage record, as for any
    /// request that cannot reach it); a full queue means it is not reading (-32002, denied).
    pub(super) fn on_unwritten(&mut self, child_id: u64, queued: Queued) {
        let Some(removed) = self.routing.inflight_mut().remove(child_id) else {
            return;
        };
        self.telemetry
            .metrics()
            .set_in_flight(self.routing.inflight().len());
        let method = removed.value.method;
        match removed.value.owner {
            Owner::Client { client, id, .. } if queued == Queued::Closed => {
                self.outage_reply(client, &id, &method, OutageStatus::Exited);
            }
            Owner::Client { client, id, .. } => {
                let msg = format!(
                    "server `{}` cannot take requests now: the child is not reading its input",
                    self.cfg.name
                );
                let code = code::LIMIT_EXCEEDED;
                let line = message::error_response(&id, code, &msg, None);
                self.respond(client, &id, line, Outcome::Denied, Some(code));
            }
            Owner::Listen => {
                self.opener.listen_ended(child_id);
            }
            _ => {
                debug!(method = %method, "a request of the supervisor's own was not written to the child")
            }
        }
    }
}
