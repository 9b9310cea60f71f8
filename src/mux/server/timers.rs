//! Timers and health: the next wake-up, deadlines of starts, requests, held requests and
//! the child's requests, and the health rules (`mux/health.rs`) applied to the ready child.

use super::{Asker, Lane, Owner, Pending, Server, State, STDOUT_CLOSED_GRACE};
use crate::jsonrpc::message::{code, raw, raw_u64, Out};
use crate::mux::era;
use crate::mux::era::{Era, Handshake};
use crate::mux::health::{Action, ProbeMethods};
use crate::mux::outage::{OutageStatus, Reason, StopCause};
use crate::observe::Outcome;
use serde_json::json;
use std::time::Instant;
use tracing::{debug, error, warn};

impl Server {
    pub(super) fn next_wake(&self) -> Option<Instant> {
        let probe_due = match self.life.state() {
            State::Ready => self.health.next_wake(self.probe_methods()),
            _ => None,
        };
        [
            self.life.start_deadline(),
            self.life.next_spawn(),
            self.routing.inflight().next_deadline(),
            self.held.next_deadline(),
            self.routing.next_ask_deadline(),
            probe_due,
            self.life.stdout_closed().map(|t| t + STDOUT_CLOSED_GRACE),
            self.idle_deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    pub(super) fn on_timer(&mut self) {
        let now = self.clock.now();
        if self.life.start_deadline().is_some_and(|t| t <= now) {
            warn!(
                timeout_s = self.cfg.start_timeout.as_secs_f64(),
                "no answer to initialize within start_timeout"
            );
            self.stop_child(StopCause::StartTimeout);
        }
        if self
            .life
            .stdout_closed()
            .is_some_and(|t| t + STDOUT_CLOSED_GRACE <= now)
        {
            self.life.set_stdout_closed(None);
            warn!(
                "the child closed stdout {}s ago but is still running",
                STDOUT_CLOSED_GRACE.as_secs()
            );
            self.stop_child(StopCause::StdoutClosed);
        }
        if matches!(self.life.state(), State::Backoff | State::Failed)
            && self.life.next_spawn().is_some_and(|t| t <= now)
            && self.admit_spawn()
        {
            if self.life.spawn_is_restart() {
                self.instances.count_restart();
            }
            self.spawn_now();
        }
        while let Some(r) = self.routing.inflight_mut().pop_expired(now) {
            self.on_deadline(r.id, r.value);
        }
        self.expire_held();
        self.expire_upstream();
        if self.life.state() == State::Ready {
            self.check_health(now);
            self.check_idle();
        }
    }

    /// Held requests past `queue_wait` (or `start_timeout` for `initialize`) fail with the
    /// outage record.
    fn expire_held(&mut self) {
        let now = self.clock.now();
        while let Some(h) = self.held.pop_expired(now) {
            let status = self.outage_status();
            let retry = self
                .life
                .next_spawn()
                .map(|t| t.saturating_duration_since(now));
            self.fail_one_held(h, status, Reason::Unanswered, retry);
        }
    }

    /// The child's requests to clients (and MRTR input requests) that were not answered in
    /// time: the asker gets an error, the client a cancel.
    fn expire_upstream(&mut self) {
        let now = self.clock.now();
        for ((client, n), asker) in self.routing.take_expired_asks(now) {
            {
                match asker {
                    Asker::Child(id) => self.answer_child_error(
                        &id,
                        code::REQUEST_TIMEOUT,
                        "the client did not answer in time",
                    ),
                    Asker::Mrtr { round, .. } => self.abandon_round(
                        round,
                        Outcome::Timeout,
                        code::REQUEST_TIMEOUT,
                        "the client did not answer the server's input request in time",
                    ),
                }
                let p = raw(&json!({"requestId": n, "reason": "timed out"}));
                self.reply(
                    client,
                    Out::request(None, "notifications/cancelled", Some(&p)).encode(),
                );
            }
        }
    }

    pub(super) fn on_deadline(&mut self, child_id: u64, p: Pending) {
        match p.owner {
            Owner::Client { client, id, .. } => {
                self.health.request_expired(p.written);
                let cancel = raw(&json!({"requestId": child_id, "reason": "request timed out"}));
                let line = Out::request(None, "notifications/cancelled", Some(&cancel)).encode();
                self.write_child(
                    line,
                    Lane::Urgent,
                    "notifications/cancelled for a request past its deadline",
                );
                let t = self.cfg.timeout_for(&p.method);
                self.outage_respond(
                    client,
                    &id,
                    &p.method,
                    OutageStatus::Timeout,
                    Reason::Deadline(t),
                    None,
                    code::REQUEST_TIMEOUT,
                    Outcome::Timeout,
                );
            }
            Owner::Parked { round } => {
                self.drop_round(round, "the client did not answer in time", true, true);
            }
            Owner::Discover { probe: true } if self.life.state() == State::Starting => {
                self.set_verdict(
                    Era::Handshake,
                    "no answer to server/discover within era_probe_timeout",
                );
                self.send_initialize(era::HANDSHAKE_VERSION);
            }
            _ => {}
        }
    }

    /// What this child's era and handshake offer for probing.
    pub(super) fn probe_methods(&self) -> ProbeMethods {
        ProbeMethods {
            modern: self.child_era() == Era::Modern,
            confirm: self.opener.handshake().and_then(Handshake::confirm_method),
        }
    }

    /// Applies the health rules (`mux/health.rs`) to the ready child at `now`.
    pub(super) fn check_health(&mut self, now: Instant) {
        if self.life.child().is_none_or(|c| c.stopping()) {
            return;
        }
        // Slow is not dead: a client request within its own deadline excuses silence. A
        // listen stream has none (it lives until cancelled) and excuses nothing: a child
        // holding one open is probed like any other (it once had a year's deadline, which kept
        // a hung 2026 child with a client's listen stream from ever being probed).
        let busy = self
            .routing
            .inflight()
            .iter()
            .any(|(_, client, deadline, _)| client.is_some() && deadline.is_some_and(|d| d > now));
        let before = self.health.misses();
        let action = self.health.tick(now, busy, self.probe_methods());
        if self.health.misses() > before {
            self.telemetry.metrics().probe("timeout");
            warn!(
                misses = self.health.misses(),
                limit = self.cfg.probe_failures,
                busy,
                "probe unanswered"
            );
        }
        match action {
            Action::None => {}
            Action::Probe(method) => self.send_probe(method, now),
            Action::Dead { misses } => {
                error!(misses, "the child stopped answering; restarting it");
                self.stop_child(StopCause::ProbeTimeout);
            }
        }
    }

    /// Writes probe `method` with a fresh child-side id. A probe that cannot be queued counts
    /// as sent: a child that does not read its input is as silent as one that does not answer.
    pub(super) fn send_probe(&mut self, method: &'static str, now: Instant) {
        let id = self.routing.inflight_mut().allocate();
        let params = (self.child_era() == Era::Modern)
            .then(|| era::add_envelope(None, &era::supervisor_envelope()));
        let line = Out::request(Some(&raw_u64(id)), method, params.as_deref()).encode();
        self.telemetry.metrics().probe("sent");
        debug!(method, "probing the silent child");
        self.telemetry.metrics().bytes("to_child", line.len());
        self.write_child(line, Lane::Normal, "a probe");
        self.health.sent(id, method, now);
    }
}
