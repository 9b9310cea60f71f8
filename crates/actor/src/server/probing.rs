//! Probing the ready upstream (issue 4): the health rules of `crate::health` applied at a
//! timer, and the probe they ask for written. A section of the core as free functions over
//! one narrow context ([`Probing`]): the borrow checker shows that a health decision reads the
//! in-flight table, changes only the health record and the in-flight id counter, and sends
//! only through the outbox; whether the child is stopped is returned to the caller
//! ([`Verdict`]), which owns the lifecycle.
//!
//! No clock read, no I/O: `now` is the input's moment.

use super::effects::Lane;
use super::outbox::{Outbox, Stamp};
use super::routing::Routing;
use super::telemetry::Telemetry;
use crate::health::{Action, Health, ProbeMethods};
use std::borrow::Cow;
use std::time::Instant;
use tracing::{debug, error, warn};
use upstream::Outbound;
use vocab::jsonrpc::message::{raw_u64, Out};

/// What a health decision touches.
pub(super) struct Probing<'a> {
    health: &'a mut Health,
    /// The in-flight table: read for the requests that excuse silence; its id counter gives
    /// each probe a fresh child-side id.
    routing: &'a mut Routing,
    outbox: &'a mut Outbox,
    telemetry: &'a Telemetry,
    /// The moment and the running instance the probe is written to.
    at: Stamp<'a>,
    /// What the child's era and handshake offer for probing.
    methods: ProbeMethods,
    /// `probe_failures` (named in the warning for each unanswered probe).
    failures: u32,
}

/// What the health rules decided about the child.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Alive, or not yet known to be dead (a probe may have been written).
    Alive,
    /// Dead by the rules (`probe_failures` probes unanswered with nothing heard): the caller
    /// stops it with cause `probe-timeout`.
    Dead,
}

impl<'a> Probing<'a> {
    /// The context over the server's health record, in-flight table, outbox and telemetry,
    /// at `at`, for a child probed with `methods`.
    pub(super) fn new(
        health: &'a mut Health,
        routing: &'a mut Routing,
        outbox: &'a mut Outbox,
        telemetry: &'a Telemetry,
        at: Stamp<'a>,
        methods: ProbeMethods,
        failures: u32,
    ) -> Self {
        Probing {
            health,
            routing,
            outbox,
            telemetry,
            at,
            methods,
            failures,
        }
    }
}

/// Applies the health rules to the running child at `now` (the caller checked that a child
/// runs and is not being stopped). Slow is not dead: a client request within its own deadline
/// excuses silence. A listen stream has none (it lives until cancelled) and excuses nothing:
/// a child holding one open is probed like any other (it once had a year's deadline, which
/// kept a hung 2026 child with a client's listen stream from ever being probed).
pub(super) fn check(cx: &mut Probing<'_>, now: Instant) -> Verdict {
    let busy = cx
        .routing
        .inflight()
        .iter()
        .any(|(_, client, deadline, _)| client.is_some() && deadline.is_some_and(|d| d > now));
    let before = cx.health.misses();
    let action = cx.health.tick(now, busy, cx.methods);
    if cx.health.misses() > before {
        cx.telemetry.metrics().probe("timeout");
        warn!(
            misses = cx.health.misses(),
            limit = cx.failures,
            busy,
            "probe unanswered"
        );
    }
    match action {
        Action::None => Verdict::Alive,
        Action::Probe(method) => {
            send(cx, method, now);
            Verdict::Alive
        }
        Action::Dead { misses } => {
            error!(misses, "the child stopped answering; restarting it");
            Verdict::Dead
        }
    }
}

/// Writes probe `method` with a fresh child-side id. A probe that cannot be queued counts as
/// sent: a child that does not read its input is as silent as one that does not answer.
fn send(cx: &mut Probing<'_>, method: &'static str, now: Instant) {
    let id = cx.routing.inflight_mut().allocate();
    let modern = cx.methods.modern;
    let params = modern.then(|| crate::era::add_envelope(None, &crate::era::supervisor_envelope()));
    let line = Out::request(Some(&raw_u64(id)), method, params.as_deref()).encode();
    cx.telemetry.metrics().probe("sent");
    debug!(method, "probing the silent child");
    cx.telemetry.metrics().bytes("to_child", line.len());
    let out = Outbound::request(line, id, Cow::Borrowed(method), None, modern);
    cx.outbox
        .write_upstream(&cx.at, out, Lane::Normal, "a probe");
    cx.health.sent(id, method, now);
}
