//! The outbox: everything the core sends out, and the one outcome of every client request
//! (issue 48 §3). It owns the connected clients (a line can go only to a client it knows),
//! the ledger (issue 8: exactly one outcome per request) and the effects queue the shell
//! carries out after each input (`effects.rs`: deliveries, hang-ups, writes to the upstream,
//! spawns and stops).
//!
//! Its decisions take what they read beside it as arguments, so their signatures say what
//! they touch: the request records go through the [`Telemetry`] handle (the metrics, the
//! request log's buffer, the traffic history, the trace exporter), and a [`Stamp`] carries the
//! facts of the moment read from the rest of the server. It decides nothing about a client's
//! life: a delivery to a client whose input closed notes that client, and after the input the
//! server asks whether each noted client is done ([`Outbox::take_closing`],
//! `Server::settle_closing`), so no delivery needs more than the outbox.
//!
//! Writes toward the upstream are decided here too ([`Outbox::write_upstream`] and the
//! answers and cancels built on it): they become [`Effect::ToChild`] effects for the
//! instance running at the [`Stamp`], and the shell writes them.
//!
//! No clock read, no I/O: lines become [`Effect::Deliver`] and [`Effect::ToChild`] effects.

use super::clock::Clock;
use super::effects::{Effect, Effects, Lane, Written};
use super::ledger::{Duplicate, Ledger, Tracked};
use super::roster::{Client, Clients};
use super::telemetry::Telemetry;
use crate::era::{self, Era};
use crate::ids::id_key_ref;
use crate::session::{hangup_line, Access, ClientId, To};
use bytes::Bytes;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use std::borrow::Cow;
use support::logging::requests;
use support::observe::{trace, Outcome};
use tracing::warn;
use upstream::Outbound;
use vocab::jsonrpc::framing::Line;
use vocab::jsonrpc::message::{self, raw, Out};

/// The clients, their open requests and the effects decided for this input.
#[derive(Debug, Default)]
pub(super) struct Outbox {
    clients: Clients,
    /// Every client request not finished yet (issue 8: exactly one outcome each).
    ledger: Ledger,
    /// Decided, not yet carried out: the shell takes them after each input.
    effects: Effects,
    /// Clients whose input has closed that were sent something during this input (maybe
    /// their last answer): asked after the input whether they are done. Empty, and not
    /// allocated, unless a closing client is sent a line.
    closing: Vec<ClientId>,
}

/// The facts of the moment a finished request's records need from beyond the outbox.
#[derive(Debug, Clone, Copy)]
pub(super) struct Stamp<'a> {
    /// The server's name (every record names it).
    server: &'a str,
    /// The moment of the input being handled.
    clock: Clock,
    /// The child instance running now, if any (a request that arrived under another was
    /// `restarted`).
    generation: Option<u64>,
}

impl<'a> Stamp<'a> {
    /// The facts for `server` at `clock`, with the running instance's `generation`.
    pub(super) fn new(server: &'a str, clock: Clock, generation: Option<u64>) -> Self {
        Stamp {
            server,
            clock,
            generation,
        }
    }
}

impl Stamp<'_> {
    /// The server's name.
    pub(super) fn server(&self) -> &str {
        self.server
    }

    /// The running instance's generation, if one runs.
    pub(super) fn generation(&self) -> Option<u64> {
        self.generation
    }

    /// The input's monotonic moment (every deadline).
    pub(super) fn now(&self) -> std::time::Instant {
        self.clock.now()
    }

    /// The input's wall-clock moment (records of exits).
    pub(super) fn wall(&self) -> std::time::SystemTime {
        self.clock.wall()
    }
}

impl Outbox {
    /// The connected clients.
    pub(super) fn clients(&self) -> &Clients {
        &self.clients
    }

    /// The connected clients, to change one (its handshake, era, log level) or the table.
    pub(super) fn clients_mut(&mut self) -> &mut Clients {
        &mut self.clients
    }

    /// The open requests (read only: every outcome goes through [`Outbox::finish`]).
    pub(super) fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// Opens `client`'s request `key` on arrival, unless one with that key is still open (K23).
    pub(super) fn open(
        &mut self,
        client: ClientId,
        key: String,
        t: impl FnOnce() -> Tracked,
    ) -> Result<(), Duplicate> {
        self.ledger.open(client, key, t)
    }

    /// Drops `client`'s (empty) table of open requests: it left, and each was finished first.
    pub(super) fn forget(&mut self, client: ClientId) {
        self.ledger.forget(client);
    }

    /// Queues an effect for the shell.
    pub(super) fn push(&mut self, effect: Effect) {
        self.effects.push(effect);
    }

    /// The effects queue (the shell takes it after each input and hands the buffer back).
    pub(super) fn effects(&mut self) -> &mut Effects {
        &mut self.effects
    }

    /// The effects decided and not carried out yet (the scenarios read them).
    #[cfg(test)]
    pub(super) fn pending(&self) -> &Effects {
        &self.effects
    }

    /// Ends `client`'s request `key` with its one outcome: the trace span, the metrics, the
    /// traffic history and the request log's record. Nothing when it was finished already.
    pub(super) fn finish(
        &mut self,
        tel: &mut Telemetry,
        at: &Stamp<'_>,
        client: ClientId,
        key: &str,
        outcome: Outcome,
        code: Option<i64>,
    ) {
        let Some(mut t) = self.ledger.close(client, key) else {
            return;
        };
        let c = self.clients.get(&client);
        let via = c.and_then(|c| c.peer().endpoint.as_deref());
        if let Some(span) = t.span.take() {
            tel.submit_span(
                *span,
                trace::Finish {
                    server: at.server,
                    endpoint: via,
                    rid: t.rid,
                    method: &t.method,
                    id: key,
                    tool: t.tool.as_deref(),
                    outcome,
                    code,
                    end: at.clock.wall(),
                },
            );
        }
        let now = at.clock.now();
        let elapsed = now.saturating_duration_since(t.started);
        tel.metrics()
            .request(&t.method, outcome, code, elapsed.as_secs_f64());
        let (rid, wall) = (t.rid, at.clock.wall());
        let method = support::observe::method_label(&t.method);
        tel.remember(now, outcome, elapsed, || {
            (rid.to_string(), method, wall, code)
        });
        if let Some(e) = via {
            tel.metrics().endpoint_request(e, &t.method, outcome);
        }
        if tel.request_log() {
            // The instance that was running at arrival exited or was replaced meanwhile.
            let restarted = t.generation.is_some() && t.generation != at.generation;
            // Buffered here, written by the log thread (issue 15 §2).
            tel.log_request(requests::Record {
                at: at.clock.wall(),
                server: Cow::Borrowed(at.server),
                request_id: t.rid,
                client: client.0,
                peer_uid: c.map(|c| c.peer().uid),
                peer_pid: c.and_then(|c| c.peer().pid),
                client_name: Cow::Borrowed(c.map_or("", |c| c.name())),
                endpoint: via.map(Cow::Borrowed),
                method: Cow::Borrowed(&t.method),
                tool: t.tool.as_deref().map(Cow::Borrowed),
                arg_keys: Cow::Borrowed(&t.arg_keys),
                duration: elapsed,
                outcome: outcome.as_str(),
                error_code: code,
                restarted,
            });
        }
    }

    /// Delivers a line to `client`, addressed `to` within it (issue 27 §5: a response, a
    /// progress notification, a request toward it, its listen stream's traffic). A client
    /// whose input has closed is noted ([`Outbox::take_closing`]).
    pub(super) fn deliver(
        &mut self,
        tel: &Telemetry,
        client: ClientId,
        to: To<'_>,
        line: impl Into<Line>,
    ) {
        let line = line.into();
        tel.metrics().bytes("to_client", line.len());
        let Some(c) = self.clients.get(&client) else {
            return;
        };
        if c.closing() {
            self.closing.push(client);
        }
        let delivery = c.delivery(client, to, line);
        self.effects.push(delivery);
    }

    /// The clients whose input has closed that were sent something since the last call: the
    /// server asks whether each is done (a client may be named more than once).
    pub(super) fn take_closing(&mut self) -> Vec<ClientId> {
        std::mem::take(&mut self.closing)
    }

    /// Answers `client`'s request `id` with `line` and finishes it with `outcome`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn respond(
        &mut self,
        tel: &mut Telemetry,
        at: &Stamp<'_>,
        client: ClientId,
        id: &RawValue,
        line: impl Into<Line>,
        outcome: Outcome,
        code: Option<i64>,
    ) {
        self.finish(tel, at, client, &id_key_ref(id), outcome, code);
        self.deliver(tel, client, To::Response(id), line);
    }

    /// Answers `client`'s request `id` with a JSON-RPC error (`code`, `msg`, `data`) and
    /// finishes it with `outcome`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn respond_error(
        &mut self,
        tel: &mut Telemetry,
        at: &Stamp<'_>,
        client: ClientId,
        id: &RawValue,
        code: i64,
        msg: &str,
        data: Option<Value>,
        outcome: Outcome,
    ) {
        let line = message::error_response(id, code, msg, data);
        self.respond(tel, at, client, id, line, outcome, Some(code));
    }

    /// Fails `client`'s request `id` (`method`) whose reply from the upstream was malformed
    /// (K21): -32603 naming the server, the method and the `problem`, outcome
    /// `protocol_error`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn fail_malformed(
        &mut self,
        tel: &mut Telemetry,
        at: &Stamp<'_>,
        client: ClientId,
        id: &RawValue,
        method: &str,
        problem: &str,
    ) {
        let server = at.server;
        let msg = format!("server `{server}` sent a malformed response to `{method}`: {problem}");
        let data = json!({"server": server, "problem": problem});
        let code = vocab::jsonrpc::message::code::INTERNAL_ERROR;
        self.respond_error(
            tel,
            at,
            client,
            id,
            code,
            &msg,
            Some(data),
            Outcome::ProtocolError,
        );
    }

    /// Answers `client`'s request `id` with a result the supervisor wrote itself, shaped for
    /// the client's era (issue 13 §2: `resultType` and cache hints for 2026 clients, nothing
    /// of 2026 for handshake clients), and finishes it.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn respond_result(
        &mut self,
        tel: &mut Telemetry,
        at: &Stamp<'_>,
        client: ClientId,
        id: &RawValue,
        method: &str,
        result: Value,
        outcome: Outcome,
    ) {
        let result = era::for_client(result, method, self.era_of(client));
        let line = message::result_response(id, &result);
        self.respond(tel, at, client, id, line, outcome, None);
    }

    /// Delivers a session-wide `line` to every client that finished its handshake and passes
    /// `filter`.
    pub(super) fn broadcast(
        &mut self,
        tel: &Telemetry,
        line: &Bytes,
        filter: impl Fn(&Client) -> bool,
    ) {
        let targets: Vec<ClientId> = self
            .clients
            .iter()
            .filter(|(_, c)| c.initialized() && filter(c))
            .map(|(id, _)| *id)
            .collect();
        for c in targets {
            self.deliver(tel, c, To::Session, line.clone());
        }
    }

    /// Says goodbye to each client `access` no longer permits (a reload removed its uid or
    /// gid from server `server`): an error line saying so, then its connection closes.
    /// Returns them, for the caller to drop like any departure.
    pub(super) fn revoke(&mut self, access: &Access, server: &str) -> Vec<ClientId> {
        let gone: Vec<ClientId> = self
            .clients
            .iter()
            .filter(|(_, c)| !access.permits(c.peer().uid, c.peer().gid))
            .map(|(id, _)| *id)
            .collect();
        for id in &gone {
            let Some(c) = self.clients.get(id) else {
                continue;
            };
            let peer = c.peer();
            warn!(client = %id, peer_uid = peer.uid, peer_gid = peer.gid, peer_pid = peer.pid,
                "ending the session of uid {}: no longer allowed after a reload", peer.uid);
            let msg = format!("server `{server}`: access revoked by a configuration reload");
            let hangup = c.hangup(Line::from(hangup_line(&msg, "revoked")));
            self.effects.push(hangup);
        }
        gone
    }

    /// `client`'s era (handshake until its first request decided it, or when it is gone).
    pub(super) fn era_of(&self, client: ClientId) -> Era {
        self.clients
            .get(&client)
            .and_then(|c| c.era())
            .unwrap_or(Era::Handshake)
    }

    /// Writes `out` to the running upstream instance's queue (`lane`), if one runs (`at`'s
    /// generation); `what` names it for the log. Nothing when none runs: its exit decides
    /// what follows. (A full or closed queue is the shell's to report: `Server::write_now`.)
    pub(super) fn write_upstream(
        &mut self,
        at: &Stamp<'_>,
        out: Outbound,
        lane: Lane,
        what: &'static str,
    ) {
        let Some(generation) = at.generation else {
            return;
        };
        self.effects.push(Effect::ToChild {
            generation,
            out,
            lane,
            what: Written::Line(what),
        });
    }

    /// Tells the upstream, urgently, that the supervisor no longer wants the answer to its
    /// request `child_id` (`notifications/cancelled` with `reason`); `what` as for
    /// [`Outbox::write_upstream`].
    pub(super) fn cancel_upstream(
        &mut self,
        at: &Stamp<'_>,
        child_id: u64,
        reason: &str,
        what: &'static str,
    ) {
        let p = raw(&json!({"requestId": child_id, "reason": reason}));
        let line = Out::request(None, "notifications/cancelled", Some(&p)).encode();
        self.write_upstream(at, Outbound::cancel(line, child_id), Lane::Urgent, what);
    }

    /// Answers the upstream's own request `child_id` with `result`, urgently.
    pub(super) fn answer_upstream(&mut self, at: &Stamp<'_>, child_id: &RawValue, result: &Value) {
        let line = message::result_response(child_id, result);
        let what = "an answer to the child's request";
        self.write_upstream(at, Outbound::response(line), Lane::Urgent, what);
    }

    /// Answers the upstream's own request `child_id` with error `code` and `msg`, urgently.
    pub(super) fn answer_upstream_error(
        &mut self,
        at: &Stamp<'_>,
        child_id: &RawValue,
        code: i64,
        msg: &str,
    ) {
        let line = message::error_response(child_id, code, msg, None);
        let what = "an error answer to the child's request";
        self.write_upstream(at, Outbound::response(line), Lane::Urgent, what);
    }
}
