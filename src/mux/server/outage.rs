//! Delivery to clients (one outcome per request) and outage answers: the list cache, the
//! outage record, failing in-flight and held requests.

use super::held::Held;
use super::roster::Client;
use super::{Owner, Server, State};
use crate::jsonrpc::framing::Line;
use crate::jsonrpc::message;
use crate::jsonrpc::message::{code, raw, Message, Out};
use crate::logging::requests;
use crate::logging::requests::RequestId;
use crate::mux::era;
use crate::mux::ids::id_key_ref;
use crate::mux::outage::{format_secs, Reason};
use crate::mux::outage::{OutageStatus, StopCause};
use crate::mux::session::ClientId;
use crate::mux::session::To;
use crate::observe::{trace, Outcome};
use bytes::Bytes;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use std::borrow::Cow;
use std::time::Duration;
use tracing::warn;

impl Server {
    /// Ends a client request with its one outcome: the request log line and the metrics.
    pub(super) fn finish(
        &mut self,
        client: ClientId,
        key: &str,
        outcome: Outcome,
        code: Option<i64>,
    ) {
        let Some(mut t) = self.ledger.close(client, key) else {
            return;
        };
        if let Some(span) = t.span.take() {
            trace::submit(trace::span_data(
                *span,
                trace::Finish {
                    server: &self.cfg.name,
                    rid: t.rid,
                    method: &t.method,
                    id: key,
                    tool: t.tool.as_deref(),
                    outcome,
                    code,
                    end: self.clock.wall(),
                },
            ));
        }
        let elapsed = self.clock.now().saturating_duration_since(t.started);
        self.telemetry
            .metrics()
            .request(&t.method, outcome, code, elapsed.as_secs_f64());
        if self.telemetry.request_log() {
            // The instance that was running at arrival exited or was replaced meanwhile.
            let restarted =
                t.generation.is_some() && t.generation != self.life.child().map(|c| c.generation());
            let c = self.clients.get(&client);
            // Buffered here, written by the log thread (issue 15 §2).
            self.telemetry.log_request(requests::Record {
                at: self.clock.wall(),
                server: Cow::Borrowed(&self.cfg.name),
                request_id: t.rid,
                client: client.0,
                peer_uid: c.map(|c| c.peer().uid),
                peer_pid: c.and_then(|c| c.peer().pid),
                client_name: Cow::Borrowed(c.map_or("", |c| c.name())),
                method: Cow::Borrowed(&t.method),
                tool: t.tool.as_deref().map(Cow::Borrowed),
                arg_keys: Cow::Borrowed(&t.arg_keys),
                duration: elapsed,
                outcome: outcome.as_str(),
                error_code: code,
                restarted,
            });
        }
        self.telemetry
            .metrics()
            .set_in_flight(self.routing.inflight().len());
    }

    /// Answers a client request with a JSON-RPC error and finishes it with `outcome`.
    pub(super) fn respond_error(
        &mut self,
        client: ClientId,
        id: &RawValue,
        code: i64,
        msg: &str,
        data: Option<Value>,
        outcome: Outcome,
    ) {
        let line = message::error_response(id, code, msg, data);
        self.respond(client, id, line, outcome, Some(code));
    }

    /// Refuses a client request for a limit (`max_inflight`, `client_max_inflight`,
    /// `max_subscriptions`): -32002 with `msg`, outcome `denied`.
    pub(super) fn refuse_limit(&mut self, client: ClientId, id: &RawValue, msg: &str) {
        self.respond_error(client, id, code::LIMIT_EXCEEDED, msg, None, Outcome::Denied);
    }

    /// Answers a client request with a result the supervisor wrote itself, shaped for the
    /// client's era (issue 13 §2: `resultType` and cache hints for 2026 clients, nothing of
    /// 2026 for handshake clients), and finishes it with `outcome`.
    pub(super) fn respond_result(
        &mut self,
        client: ClientId,
        id: &RawValue,
        method: &str,
        result: Value,
        outcome: Outcome,
    ) {
        let result = era::for_client(result, method, self.client_era(client));
        let line = message::result_response(id, &result);
        self.respond(client, id, line, outcome, None);
    }

    /// Answers a client request and finishes it.
    pub(super) fn respond(
        &mut self,
        client: ClientId,
        id: &RawValue,
        line: impl Into<Line>,
        outcome: Outcome,
        code: Option<i64>,
    ) {
        self.finish(client, &id_key_ref(id), outcome, code);
        self.reply_to(client, To::Response(id), line);
    }

    /// Delivers a session-wide line ([`To::Session`]) to a client.
    pub(super) fn reply(&mut self, client: ClientId, line: impl Into<Line>) {
        self.reply_to(client, To::Session, line);
    }

    /// Delivers a line to a client, addressed `to` within it (issue 27 §5: a response, a
    /// progress notification, a request toward it, its listen stream's traffic).
    pub(super) fn reply_to(&mut self, client: ClientId, to: To<'_>, line: impl Into<Line>) {
        let line = line.into();
        self.telemetry.metrics().bytes("to_client", line.len());
        let Some(c) = self.clients.get(&client) else {
            return;
        };
        let closing = c.closing();
        let delivery = c.delivery(client, to, line);
        self.shell.effects().push(delivery);
        if closing {
            self.close_if_done(client);
        }
    }

    pub(super) fn broadcast(&mut self, line: &Bytes, filter: impl Fn(&Client) -> bool) {
        let targets: Vec<ClientId> = self
            .clients
            .iter()
            .filter(|(_, c)| c.initialized() && filter(c))
            .map(|(id, _)| *id)
            .collect();
        for c in targets {
            self.reply(c, line.clone());
        }
    }

    pub(super) fn outage_status(&self) -> OutageStatus {
        match self.life.stop_cause() {
            // The supervisor is stopping a child that did not answer in time: that is what
            // a waiting client must read, not `stopped` (issue 26 §8).
            Some(StopCause::StartTimeout | StopCause::ProbeTimeout) => OutageStatus::Timeout,
            _ => match self.life.state() {
                State::Starting => OutageStatus::Starting,
                State::Backoff => OutageStatus::Backoff,
                State::Failed => OutageStatus::Failed,
                State::Stopping | State::Stopped => OutageStatus::Stopped,
                State::Idle => OutageStatus::Idle,
                // Ready but the request cannot reach the child (its input closed): it exits.
                State::Ready => OutageStatus::Exited,
            },
        }
    }

    /// The reason an outage answer gives now: the supervisor's own cause while it stops a
    /// child that timed out (`start-timeout: ...`), else the last exit, else `fallback`.
    pub(super) fn outage_reason(&self, fallback: Reason) -> Reason {
        match self.life.stop_cause() {
            Some(StopCause::StartTimeout) => Reason::StartTimeout(self.cfg.start_timeout),
            Some(
                c @ (StopCause::ProbeTimeout
                | StopCause::StdinFailed
                | StopCause::StdoutClosed
                | StopCause::HandshakeRejected),
            ) => Reason::Stopping(c),
            _ => self
                .instances
                .last_exit()
                .map(|e| Reason::Ended(e.reason))
                .unwrap_or(fallback),
        }
    }

    /// The note appended to what is served from cache while the child is down.
    pub(super) fn unavailable_note(&self) -> String {
        format!(
            " [mcp-supervisor: server `{}` is currently unavailable ({}); calls will fail until it recovers]",
            self.cfg.name,
            self.outage_status()
        )
    }

    /// Answers a list request from the last known result while the child is down (issue 5 §3).
    pub(super) fn answer_from_cache(&mut self, client: ClientId, m: &Message) -> bool {
        let method = m.method();
        let Some((list, _, _)) = era::LISTS.iter().find(|(l, _, _)| *l == method) else {
            return false;
        };
        if m.params
            .as_deref()
            .is_some_and(|p| message::mentions(p.get(), "\"cursor\""))
        {
            return false;
        }
        let Some(cached) = self.lists.get(list) else {
            return false;
        };
        let mut result = cached.clone();
        if self.life.state() == State::Idle {
            // Idle is not an outage (issue 18 §1): the next call starts the child.
            self.mark_cached(&mut result);
        } else if *list == "tools/list" && self.cfg.mark_unavailable {
            let note = self.unavailable_note();
            if let Some(tools) = result.get_mut("tools").and_then(Value::as_array_mut) {
                for t in tools {
                    let d = t
                        .get("description")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string();
                    t["description"] = Value::String(d + &note);
                }
            }
        }
        let Some(id) = m.id.clone() else { return false };
        self.respond_result(client, &id, method, result, Outcome::Ok);
        true
    }

    /// Answers a request that cannot reach the child. `tools/call` gets a tool result with
    /// `isError: true` (the model must read the outage as an outage); everything else a
    /// JSON-RPC error. Both carry the same record (issue 5 §1-2; see README "Errors").
    pub(super) fn outage_reply(
        &mut self,
        client: ClientId,
        id: &RawValue,
        method: &str,
        status: OutageStatus,
    ) {
        let retry = self
            .next_attempt()
            .map(|t| t.saturating_duration_since(self.clock.now()));
        let reason = self.outage_reason(Reason::State(status));
        self.outage_respond(
            client,
            id,
            method,
            status,
            reason,
            retry,
            code::SERVER_UNAVAILABLE,
            Outcome::Unreachable,
        );
    }

    /// Answers a client request that failed for an outage, a limit or a deadline with the
    /// documented record, and finishes it in the request log.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn outage_respond(
        &mut self,
        client: ClientId,
        id: &RawValue,
        method: &str,
        status: OutageStatus,
        reason: Reason,
        retry: Option<Duration>,
        code: i64,
        outcome: Outcome,
    ) {
        let request_id = self
            .ledger
            .rid(client, &id_key_ref(id))
            .unwrap_or_else(RequestId::random)
            .to_string();
        let tail = self.instances.tail().last_lines(10);
        let mut record = json!({
            "server": self.cfg.name,
            "status": status,
            "reason": reason.to_string(),
            "class": reason.class(),
            "detail": reason.detail(),
            "stderr_tail": tail,
            "request_id": request_id,
        });
        let mut text = format!(
            "server={} status={} reason={}",
            self.cfg.name, status, reason
        );
        if let Some(r) = retry {
            if let Some(o) = record.as_object_mut() {
                o.insert("retry_after_ms".into(), json!(r.as_millis() as u64));
            }
            text.push_str(&format!(" retry_after={}", format_secs(r)));
        }
        text.push_str(&format!(" request_id={request_id}"));
        let last = self.instances.tail().last_lines(1);
        if !last.is_empty() {
            text.push_str(&format!(" stderr={last:?}"));
        }
        warn!(request_id = %request_id, method, status = status.as_str(), reason = %reason, "request failed: {text}");
        // A call past its own deadline stays the -32001 error of every method (README: the
        // deadline rule); outages of `tools/call` are tool results.
        if method == "tools/call" && code != code::REQUEST_TIMEOUT {
            let result = json!({
                "content": [{"type": "text", "text": text}],
                "isError": true,
                "_meta": {"mcp-supervisor/outage": record},
            });
            return self.respond_result(client, id, method, result, outcome);
        }
        let (line, code) = {
            let msg = match status {
                OutageStatus::Timeout if code == code::REQUEST_TIMEOUT => {
                    format!("request to server `{}` timed out", self.cfg.name)
                }
                _ => format!("server `{}` is unavailable: {text}", self.cfg.name),
            };
            (
                message::error_response(id, code, &msg, Some(record)),
                Some(code),
            )
        };
        self.respond(client, id, line, outcome, code);
    }

    pub(super) fn fail_inflight(
        &mut self,
        status: OutageStatus,
        reason: Reason,
        retry: Option<Duration>,
    ) {
        for r in self.routing.inflight_mut().drain() {
            let p = r.value;
            if let Owner::Parked { round } = p.owner {
                // The client holds an `input_required` result; its retry will find no round.
                self.drop_round(round, "server exited", false, false);
                continue;
            }
            if let Owner::Client { client, id, .. } = p.owner {
                self.outage_respond(
                    client,
                    &id,
                    &p.method,
                    status,
                    reason,
                    retry,
                    code::SERVER_UNAVAILABLE,
                    Outcome::Unreachable,
                );
            }
        }
        // The dead child's requests to clients are void: tell those clients.
        for (client, n) in self.routing.take_child_asks() {
            let p = raw(&json!({"requestId": n, "reason": "server exited"}));
            self.reply(
                client,
                Out::request(None, "notifications/cancelled", Some(&p)).encode(),
            );
        }
    }

    pub(super) fn fail_held(&mut self, status: OutageStatus) {
        let retry = self
            .next_attempt()
            .map(|t| t.saturating_duration_since(self.clock.now()));
        for h in self.held.drain() {
            self.fail_one_held(h, status, Reason::State(status), retry);
        }
    }

    /// Answers one held request with the outage record. A client's `initialize` held for a
    /// child that never became ready names the last exit (or `unanswered`) as the reason.
    pub(super) fn fail_one_held(
        &mut self,
        h: Held,
        status: OutageStatus,
        unanswered: Reason,
        retry: Option<Duration>,
    ) {
        let Some(id) = h.msg.id.clone() else { return };
        if h.msg.method() == "initialize" && self.opener.handshake().is_none() {
            let reason = self.outage_reason(unanswered);
            self.outage_respond(
                h.client,
                &id,
                "initialize",
                status,
                reason,
                retry,
                code::SERVER_UNAVAILABLE,
                Outcome::Unreachable,
            );
        } else {
            self.outage_reply(h.client, &id, h.msg.method(), status);
        }
    }
}
