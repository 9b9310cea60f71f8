//! Servers on demand and idle stops (issue 18 §1-2).
//!
//! - `start = "on-demand"`: the actor begins in `idle` with the record of the last run
//!   ([`crate::mux::record`]) as its handshake and lists. `initialize`, `ping`,
//!   `server/discover`, `logging/setLevel` and the first page of `tools/list`,
//!   `prompts/list`, `resources/list`, `resources/templates/list` are answered from it
//!   (marked `_meta["mcp-supervisor/cache"]`); any other request, a cursor, a list never
//!   seen, or an `initialize` with no record starts the child ([`Server::start_on_demand`]).
//!   Requests that arrive while it starts wait up to `start_timeout`, then go through.
//! - `idle_stop`: a ready child is stopped through the ladder when no client request has
//!   reached it, and no answer come back from it, for that long, and nothing holds it
//!   ([`Server::busy`]: requests in flight or held, questions asked of clients, resource
//!   subscriptions, listen streams). Its exit leaves the server `idle`: no failure, no
//!   backoff, no restart counted, `last_exit` untouched.

use super::life::Life;
use super::{Owner, Server, State};
use crate::config::{ServerConfig, StartMode};
use crate::mux::era::ChildProtocol;
use crate::mux::outage::{ExitReason, StopCause};
use crate::mux::record::{self, Record, Writer};
use serde_json::{json, Value};
use std::time::Instant;
use tracing::{error, info, warn};

/// What the actor keeps for on-demand starts and idle stops.
#[derive(Debug)]
pub(super) struct Demand {
    /// The last moment the child was used: a client request forwarded to it, or its answer
    /// to one delivered. The idle clock runs from here.
    last_use: Instant,
    /// The running instance was started by a request (its waiters get `start_timeout`).
    started_by_request: bool,
    /// When the handshake and lists now answered from were taken (RFC 3339): read from the
    /// record on disk, or the last time this actor updated them.
    saved_at: Option<String>,
    /// After a failed start of an on-demand child (issue 26 §7): the first request from this
    /// moment starts it again; requests before it get the outage answer with `retry_after`.
    retry_at: Option<Instant>,
    /// Writes the record of this run (on-demand servers only; `None` in the simulation).
    writer: Option<Writer>,
}

impl Demand {
    pub(super) fn new(now: Instant) -> Self {
        Demand {
            last_use: now,
            started_by_request: false,
            saved_at: None,
            retry_at: None,
            writer: None,
        }
    }
}

impl Server {
    /// The actor's first step: spawn now (`eager`), or wait in `idle` for a request with the
    /// last run's `record`, if any (`on-demand`).
    pub(super) fn begin(&mut self, record: Option<Record>) {
        if self.cfg.start == StartMode::Eager {
            return self.spawn();
        }
        self.demand.writer = Writer::start(self.cfg.cache_file.clone());
        if let Some(r) = record {
            self.opener
                .restore(r.handshake, self.cfg.protocol == ChildProtocol::Auto);
            self.lists.restore(r.lists);
            self.demand.saved_at = Some(r.saved_at);
        }
        info!(
            cached = self.opener.handshake().is_some(),
            "waiting for the first request that needs the child (start = on-demand)"
        );
        self.life = Life::Idle;
    }

    /// An on-demand command that cannot run (see [`missing_command`]): `failed` at once, as a
    /// spawn of it would be.
    pub(super) fn cannot_start(&mut self, why: &str) {
        error!(error = %why, "the on-demand command cannot run");
        self.record_exit(ExitReason::SpawnError);
        self.instances.note(why);
        self.enter_failed(&format!("{why}; fix the command and run `start`"));
    }

    /// Starts the child for a client request, when it is idle (and, after a failed start,
    /// once its backoff delay passed: [`Server::lazy_retry_pending`]).
    pub(super) fn start_on_demand(&mut self, method: &str) {
        if self.life.state() != State::Idle || self.lazy_retry_pending() {
            return;
        }
        self.demand.retry_at = None;
        info!(method, "starting the child on demand");
        self.telemetry.metrics().demand("on-demand-start");
        self.demand.started_by_request = true;
        self.spawn();
    }

    /// Whether the failed start of an on-demand child is still inside its backoff delay: a
    /// request now gets the outage answer (with `retry_after`) instead of a start.
    pub(super) fn lazy_retry_pending(&self) -> bool {
        self.demand.retry_at.is_some_and(|t| t > self.clock.now())
    }

    /// When the next start may happen: the lifecycle's next spawn (`backoff`, `failed`), or,
    /// idle after a failed on-demand start, when the next request may start it.
    pub(super) fn next_attempt(&self) -> Option<Instant> {
        self.life.next_spawn().or(match self.life.state() {
            State::Idle => self.demand.retry_at,
            _ => None,
        })
    }

    /// Whether a failed start is judged as an on-demand one ([`Server::after_failed_lazy_start`]):
    /// the server starts on demand, or this instance was started by a request.
    pub(super) fn lazy_start(&self) -> bool {
        self.cfg.start == StartMode::OnDemand || self.demand.started_by_request
    }

    /// An on-demand start failed (the spawn, or the child exited or timed out before it was ready;
    /// issue 26 §7): no automatic retry and never the ten-minute `failed`, which would disable
    /// the server long after its cause is fixed. It goes back to `idle` (the record still
    /// answers what it can), and the first request after the backoff delay (capped at
    /// `backoff_max`) starts it again; `status` keeps the exit and its stderr tail.
    pub(super) fn after_failed_lazy_start(&mut self, spawned_at: Instant, reason: &str) {
        let delay = self.instances.backoff(self.clock.now(), spawned_at, None);
        self.demand.retry_at = Some(crate::deadline::after(self.clock.now(), delay));
        self.demand.started_by_request = false;
        warn!(
            reason,
            retry_in_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
            attempt = self.instances.failures(),
            "the on-demand start failed; the first request after the backoff delay starts it again"
        );
        self.life = Life::Idle;
    }

    /// How long a request held now may wait: `start_timeout` from the spawn when a request
    /// started the child (an `npx` server may take that long), else `queue_wait`.
    pub(super) fn hold_deadline(&self) -> Instant {
        match self.life.start_deadline() {
            Some(t) if self.demand.started_by_request => t.max(crate::deadline::after(
                self.clock.now(),
                self.cfg.queue_wait,
            )),
            _ => crate::deadline::after(self.clock.now(), self.cfg.queue_wait),
        }
    }

    /// The child was used now (a request forwarded, or its answer delivered).
    pub(super) fn used(&mut self) {
        self.demand.last_use = self.clock.now();
    }

    /// When the ready child becomes idle enough to stop, if `idle_stop` is set.
    pub(super) fn idle_deadline(&self) -> Option<Instant> {
        let after = self.cfg.idle_stop?;
        (self.life.state() == State::Ready)
            .then_some(crate::deadline::after(self.demand.last_use, after))
    }

    /// Whether something still holds the child: client requests in flight or held, the
    /// child's questions waiting for clients, subscriptions, served or routed listen streams.
    pub(super) fn busy(&self) -> bool {
        let client_request = self.routing.inflight().iter().any(|(_, _, _, p)| {
            matches!(p.owner, Owner::Client { .. } | Owner::Parked { .. })
                && p.method != "subscriptions/listen"
        });
        let listening = self
            .routing
            .inflight()
            .iter()
            .any(|(_, c, _, p)| c.is_some() && p.method == "subscriptions/listen");
        client_request
            || listening
            || self.held.len() > 0
            || self.routing.asks() > 0
            || self.rounds.open_rounds() > 0
            || self.rounds.parked_rounds() > 0
            || self.subs.uris().next().is_some()
            || !self.subs.listeners().is_empty()
    }

    /// At a timer: stops the ready child when `idle_stop` passed and nothing holds it. While
    /// something holds it, the idle clock starts again.
    pub(super) fn check_idle(&mut self) {
        let Some(at) = self.idle_deadline() else {
            return;
        };
        if at > self.clock.now() {
            return;
        }
        if self.busy() {
            self.used();
            return;
        }
        info!(
            idle_s = self.cfg.idle_stop.map(|d| d.as_secs_f64()),
            "no client used the child for idle_stop; stopping it"
        );
        self.telemetry.metrics().demand("idle-stop");
        self.stop_child(StopCause::Idle);
    }

    /// After the exit of an idle stop: `idle`, or straight back up when requests arrived
    /// during the stop (they were held).
    pub(super) fn after_idle_stop(&mut self) {
        self.demand.started_by_request = false;
        if self.held.len() > 0 {
            info!("requests arrived during the idle stop; starting the child again");
            self.life = Life::Idle;
            self.start_on_demand("held");
        } else {
            self.life = Life::Idle;
        }
    }

    /// Marks a result answered from the record while the child is idle:
    /// `_meta["mcp-supervisor/cache"] = {"server", "status": "idle", "saved_at"}`.
    pub(super) fn mark_cached(&self, result: &mut Value) {
        let Some(o) = result.as_object_mut() else {
            return;
        };
        let meta = o.entry("_meta").or_insert_with(|| json!({}));
        if let Some(meta) = meta.as_object_mut() {
            meta.insert(
                "mcp-supervisor/cache".into(),
                json!({"server": self.cfg.name, "status": "idle",
                    "saved_at": self.demand.saved_at}),
            );
        }
    }

    /// The child answered its handshake: the record is written, and later holds wait
    /// `queue_wait` again.
    pub(super) fn demand_ready(&mut self) {
        self.demand.started_by_request = false;
        self.demand.retry_at = None;
        // The idle clock starts at readiness at the latest (a start whose only request was
        // answered here, such as `initialize`, forwarded nothing).
        self.used();
        self.save_record();
    }

    /// Queues the record of this run for writing (on-demand servers, after the handshake and
    /// whenever a list changes).
    pub(super) fn save_record(&mut self) {
        if self.demand.writer.is_none() && self.cfg.start == StartMode::OnDemand {
            // A reload made this server on-demand.
            self.demand.writer = Writer::start(self.cfg.cache_file.clone());
        }
        let Some(hs) = self.opener.handshake() else {
            return;
        };
        // Kept whether or not a record is written: an eager server that went idle after an
        // idle stop answers from memory, and says when that copy was taken.
        let at = humantime::format_rfc3339_seconds(self.clock.wall()).to_string();
        if let Some(w) = &self.demand.writer {
            w.save(record::encode(&self.cfg, hs, self.lists.all(), &at));
        }
        self.demand.saved_at = Some(at);
    }
}

/// Why `cfg.command` cannot run, if it cannot: a path with `/` must be an executable file; a
/// bare name must be one in a directory of `PATH` (the child's `env` PATH when set, else the
/// supervisor's). A few `stat` calls, at actor start only.
pub(super) fn missing_command(cfg: &ServerConfig) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let runs = |p: &std::path::Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if cfg.command.contains('/') {
        let p = std::path::Path::new(&cfg.command);
        let p = match &cfg.cwd {
            Some(dir) if p.is_relative() => dir.join(p),
            _ => p.to_path_buf(),
        };
        return (!runs(&p)).then(|| format!("`{}` is not an executable file", p.display()));
    }
    let path = cfg
        .env
        .get("PATH")
        .cloned()
        .or_else(|| std::env::var("PATH").ok())
        .unwrap_or_default();
    let found = std::env::split_paths(&path).any(|d| runs(&d.join(&cfg.command)));
    (!found).then(|| format!("`{}` is not found in PATH ({path})", cfg.command))
}
