//! The core of a server's actor: every decision `Server::handle` makes for an input, as the
//! procedures of one `impl Server` (issue 27 §2). `mod.rs` has the shell half (taking inputs,
//! carrying out effects, the panic path) and the one dispatch that orders the sub-machines for
//! an input; this file has what each kind of input means, in sections:
//!
//! | section | what it decides |
//! |---|---|
//! | lifecycle | spawn, the opener (era probe, handshake, discovery; the answers' meaning is `opening.rs`), exits (what follows is `exits.rs`), restarts, the operator's verbs (`lifecycle.rs`), upstream events |
//! | timers | the next wake-up; held requests, asks and requests past their deadlines; health probes (`probing.rs`) |
//! | demand | the record of an on-demand server, and what holds a child from an idle stop (the starts and stops themselves are `lifecycle.rs`; the `Demand` sub-machine is `demand.rs`) |
//! | clients | a client's messages: requests by state, its handshake, log level, answers, leaving; what the supervisor answers itself is `serving.rs` |
//! | forward | a request toward the upstream: ids, progress tokens, era translation (`forwarding.rs`); the rounds of `input_required` toward handshake clients (`asking.rs`) |
//! | asking | the upstream's own requests: the owner rule, and 2026 clients asked through parked requests (`asking.rs`) |
//! | child | the upstream's responses, malformed replies and messages never relayed (too large, too deep: issue 47 §7); its notifications (`notifying.rs`) |
//! | subs | resource subscriptions and listen streams (`subscribing.rs`) |
//! | outage | the outage status and reason; failing in-flight and held requests and the outage record are `unreachable.rs`, answers from the list cache `serving.rs` |
//!
//! Where a section names a file, its decisions are free functions over a narrow context there
//! (issue 48 §3), as are delivery, the ledger and writes toward the upstream (`outbox.rs`);
//! the methods here that reach them build the context and carry out what they return.
//!
//! State lives in the sub-machines (each its own file, fields private); this file reads and
//! changes it only through their APIs, and decides effects (`effects.rs`) that the shell
//! carries out. The records defined here are shared with the context files: `Owner` and
//! `Asker` are enums they match; `Pending`'s fields are read only here (elsewhere through its
//! constructor and accessors). No `await`, no clock read, no I/O.

use super::asking::{self, Asking, Resumed, Started, MRTR_METHODS};
use super::effects::Lane;
use super::effects::Written;
use super::exits::{self, AfterExit, Ended, FailedStart};
use super::forwarding::{self, Forwarding, Unsent};
use super::life::Life;
use super::lifecycle::{self, Lifecycle};
use super::notifying::{self, Notifying};
use super::opening::{self, Next, Reread};
use super::outbox::{Outbox, Stamp};
use super::probing::{self, Probing, Verdict};
use super::recording::{self, Recording};
use super::replies::{self, Shape};
use super::roster::Client;
use super::serving::{self, Serving, Standing};
use super::subscribing::{self, Subscribing};
use super::subtable::Hold;
use super::telemetry::Telemetry;
use super::unreachable::{self, Answering, Discarded, Failure, Outage, Refused};
use super::util::health_config;
use super::util::level_name;
use super::util::malformed;
use super::util::shareable;
use super::util::tracked;
use super::util::ListPage;
use super::Server;
use super::SpawnOutcome;
use super::State;
use super::STDOUT_CLOSED_GRACE;
use crate::era;
use crate::era::ChildProtocol;
use crate::era::Era;
use crate::era::Handshake;
use crate::health::ProbeMethods;
use crate::ids::id_key;
use crate::outage::ExitReason;
use crate::outage::OutageStatus;
use crate::outage::Reason;
use crate::outage::StopCause;
use crate::record::Record;
use crate::session::ClientId;
use crate::session::SessionEvent;
use crate::session::Transport;
use bytes::Bytes;
use serde_json::json;
use serde_json::value::RawValue;
use serde_json::Value;
use std::borrow::Cow;
use std::time::Duration;
use std::time::Instant;
use support::config::ServerConfig;
use support::config::StartMode;
use support::logging::MSG_EXITED;
use support::logging::MSG_FAILED;
use support::logging::MSG_READY;
use support::logging::MSG_SPAWNED;
use support::observe::Outcome;
use tracing::debug;
use tracing::error;
use tracing::info;
use tracing::warn;
use upstream::Event;
use upstream::Exit;
use upstream::Limit;
use upstream::Lost;
use upstream::Outbound;
use upstream::Queued;
use upstream::Refusal;
use upstream::Unreachable;
use upstream::Upstream;
use upstream::Was;
use vocab::jsonrpc::framing::Line;
use vocab::jsonrpc::message;
use vocab::jsonrpc::message::code;
use vocab::jsonrpc::message::raw;
use vocab::jsonrpc::message::Kind;
use vocab::jsonrpc::message::Message;
use vocab::jsonrpc::message::Out;

// The plain records of the core: read and written only in this file.

#[derive(Debug)]
pub(super) enum Owner {
    Client {
        client: ClientId,
        id: Box<RawValue>,
        progress: Option<Box<RawValue>>,
        /// `resources/subscribe` URI: recorded as subscribed when the child says yes.
        subscribe: Option<String>,
        /// The list page to cache the result of.
        cache: Option<ListPage>,
        /// A modern client's request on a handshake child: add `resultType` to the result.
        add_result_type: bool,
        /// The log level this request asked for (modern `_meta` logLevel, or a handshake
        /// client's level toward a modern child): who may receive `notifications/message`.
        log_level: Option<usize>,
        /// A handshake client's request to a modern child that may come back
        /// `input_required`: the params sent, to retry with (MRTR, issue 6 §4).
        retry_params: Option<Box<RawValue>>,
    },
    /// A 2026 client's request parked while the client answers the child's questions
    /// (the asking section, K26); the round has the owner record.
    Parked {
        round: u64,
    },
    Initialize,
    /// `server/discover` opening a fresh child: the era probe of `auto` (`probe`), or the
    /// readiness check of a child configured for 2026-07-28.
    Discover {
        probe: bool,
    },
    /// The supervisor's own `subscriptions/listen` stream.
    Listen,
    Refresh {
        method: &'static str,
        announce: bool,
    },
    Internal,
}

#[derive(Debug)]
pub(super) struct Pending {
    owner: Owner,
    method: Cow<'static, str>,
    /// When it was written to the child (the health rule for overdue requests).
    written: Instant,
    /// A client's listen stream: whether the child's acknowledgement went to the client.
    acked: bool,
}

impl Pending {
    /// A request of `owner` written to the child at `written` (not acknowledged yet).
    pub(super) fn new(owner: Owner, method: Cow<'static, str>, written: Instant) -> Self {
        Pending {
            owner,
            method,
            written,
            acked: false,
        }
    }

    /// Who owns it.
    pub(super) fn owner(&self) -> &Owner {
        &self.owner
    }

    /// Its method.
    pub(super) fn method(&self) -> &str {
        &self.method
    }

    /// When it was written to the child.
    pub(super) fn written(&self) -> Instant {
        self.written
    }

    /// The child acknowledged it to the client (a client's listen stream).
    pub(super) fn ack(&mut self) {
        self.acked = true;
    }

    /// Its owner, method and writing time.
    pub(super) fn into_parts(self) -> (Owner, Cow<'static, str>, Instant) {
        (self.owner, self.method, self.written)
    }

    /// Whether it is a `subscriptions/listen` stream.
    pub(super) fn is_listen(&self) -> bool {
        self.method == "subscriptions/listen"
    }

    /// Whether it is a client's listen stream the child has acknowledged to the client.
    pub(super) fn acked(&self) -> bool {
        self.acked
    }

    /// Its owning client and the client's id key, when a client's request owns it.
    pub(super) fn client_request(&self) -> Option<(ClientId, String)> {
        match &self.owner {
            Owner::Client { client, id, .. } => Some((*client, id_key(id))),
            _ => None,
        }
    }
}

#[cfg(test)]
impl Pending {
    /// Whether it is a 2026 client's request parked in a round (the simulation's bound check).
    pub(super) fn is_parked(&self) -> bool {
        matches!(self.owner, Owner::Parked { .. })
    }
}

/// Who is waiting for a client's answer to a request the supervisor sent it.
#[derive(Debug)]
pub(super) enum Asker {
    /// The child's own request (handshake era), under the child's id.
    Child(Box<RawValue>),
    /// An input request of a 2026 `input_required` result, answered for the client (MRTR).
    Mrtr { round: u64, key: String },
}

// ==============================================================================================
// The server's lifecycle: spawn, the era opener, operator verbs, exits and what follows
// them (backoff, failed), readiness; the events from the child and from client sessions.
// ==============================================================================================

impl Server {
    /// The outcome of the spawn of instance `generation`: open the session with it (or stop
    /// it at once for a stop asked meanwhile), or handle the spawn error. A result of a spawn
    /// no longer awaited is dropped, which stops its instance.
    pub(super) fn on_spawned(&mut self, generation: u64, spawned: SpawnOutcome) {
        match spawned {
            Ok(child) => {
                let pid = child.describe().pid;
                match self.life.spawned(generation, child) {
                    Err(stale) => {
                        warn!(
                            child_pid = stale.describe().pid,
                            "an instance no longer wanted was spawned; stopping it"
                        );
                    }
                    Ok(cancel) => {
                        info!(
                            message_id = MSG_SPAWNED,
                            child_pid = pid,
                            restart_n = self.instances.restarts(),
                            generation,
                            "spawned"
                        );
                        self.instances.publish_pid(pid.unwrap_or(0));
                        lifecycle::ladder_if_due(&mut self.lifecycle());
                        match cancel {
                            None => self.open_session(),
                            Some(cause) => {
                                info!(
                                    reason = cause.reason(),
                                    "a stop was asked during the spawn; stopping the new instance"
                                )
                            }
                        }
                    }
                }
            }
            Err(e) => {
                let Some(cancel) = self.life.spawn_failed(generation) else {
                    return;
                };
                error!(error = %e, permanent = e.permanent, "spawn failed");
                lifecycle::record_exit(&mut self.lifecycle(), ExitReason::SpawnError);
                // Spawn errors have no stderr; keep the reason where users look for it.
                self.instances.note(&e.to_string());
                match cancel {
                    // The stop asked meanwhile decides: nothing to stop, it stays stopped.
                    Some(StopCause::Shutdown | StopCause::Stop) => {}
                    _ if lifecycle::lazy_start(&self.cfg, &self.demand) => {
                        let now = self.clock.now();
                        lifecycle::after_failed_lazy_start(
                            &mut self.lifecycle(),
                            now,
                            "spawn-error",
                        );
                        self.fail_held(OutageStatus::Failed);
                    }
                    _ if e.permanent => {
                        self.enter_failed(&format!("{e}; fix the command and run `start`"))
                    }
                    _ => {
                        let now = self.clock.now();
                        if lifecycle::schedule_restart(&mut self.lifecycle(), now) {
                            self.fail_held(OutageStatus::Failed);
                        }
                    }
                }
            }
        }
    }

    /// A fresh instance is `starting`: restart the health clock and send the first message,
    /// which pins a dual-era child and kills an old strict one, so the era is decided before
    /// anything else is sent (protocol.md Implications 4).
    fn open_session(&mut self) {
        self.shell.panic_on_spawn(&self.cfg.name);
        if self.opener.take_adopted() {
            // Handed over by the previous image (issue 32 §1): its session is open already.
            if let Some(hs) = self.opener.handshake().cloned() {
                self.health.restart(self.clock.now());
                return self.on_ready(hs);
            }
        }
        let deadline = self
            .life
            .start_deadline()
            .unwrap_or_else(|| base::deadline::after(self.clock.now(), self.cfg.start_timeout));
        self.health.restart(self.clock.now());
        match (&self.cfg.protocol, self.opener.verdict()) {
            (ChildProtocol::Handshake(v), _) => {
                let v = v.clone();
                self.send_initialize(&v);
            }
            (ChildProtocol::Modern, _) | (ChildProtocol::Auto, Some(Era::Modern)) => {
                self.send_discover(false, deadline)
            }
            (ChildProtocol::Auto, Some(Era::Handshake)) => {
                self.send_initialize(era::HANDSHAKE_VERSION)
            }
            (ChildProtocol::Auto, None) => {
                let probe_deadline =
                    base::deadline::after(self.clock.now(), self.cfg.era_probe_timeout);
                self.send_discover(true, probe_deadline.min(deadline));
            }
        }
    }

    pub(super) fn send_initialize(&mut self, version: &str) {
        let deadline = self
            .life
            .start_deadline()
            .unwrap_or_else(|| base::deadline::after(self.clock.now(), self.cfg.start_timeout));
        let params = raw(&era::initialize_params(
            version,
            &self.cfg.client_capabilities,
        ));
        self.send_to_child(Owner::Initialize, "initialize", Some(params), deadline);
    }

    pub(super) fn send_discover(&mut self, probe: bool, deadline: Instant) {
        let params = era::add_envelope(None, &era::supervisor_envelope());
        self.send_to_child(
            Owner::Discover { probe },
            "server/discover",
            Some(params),
            deadline,
        );
    }

    /// The child's era is now known (issue 6 §1): say it once, keep it for the next spawns.
    pub(super) fn set_verdict(&mut self, era: Era, why: &str) {
        if self.opener.set_verdict(era) && self.cfg.protocol == ChildProtocol::Auto {
            let name = match era {
                Era::Modern => era::MODERN_VERSION,
                Era::Handshake => "handshake (2024-11-05 .. 2025-11-25)",
            };
            info!(era = name, "protocol era: {why}");
        }
    }

    /// `failed` for `why` ([`lifecycle::enter_failed`]); what is held fails with it.
    pub(super) fn enter_failed(&mut self, why: &str) {
        lifecycle::enter_failed(&mut self.lifecycle(), why);
        self.fail_held(OutageStatus::Failed);
    }

    /// The lifecycle's context ([`lifecycle`]) at this moment.
    fn lifecycle(&mut self) -> Lifecycle<'_> {
        let at = stamp(&self.cfg.name, self.clock, &self.life);
        Lifecycle::new(
            &mut self.life,
            &mut self.instances,
            &mut self.demand,
            &mut self.outbox,
            &mut self.telemetry,
            at,
            &self.cfg,
        )
    }

    /// The daemon's shutdown: what is held fails, and the child stops for good.
    pub(super) fn begin_shutdown(&mut self) {
        if self.life.state() == State::Stopped {
            return;
        }
        self.fail_held(OutageStatus::Stopped);
        // The shutdown decides what follows the exit, whatever stop was under way.
        lifecycle::stop_for_good(&mut self.lifecycle(), StopCause::Shutdown);
    }

    /// The operator's `stop`: what is held fails, and the child stops for good.
    pub(super) fn operator_stop(&mut self) {
        info!("stop requested");
        self.fail_held(OutageStatus::Stopped);
        // The operator's stop overrules a health or restart stop under way: it stays stopped.
        lifecycle::stop_for_good(&mut self.lifecycle(), StopCause::Stop);
    }

    /// The operator's `start` ([`lifecycle::operator_start`]).
    pub(super) fn operator_start(&mut self) {
        lifecycle::operator_start(&mut self.lifecycle());
    }

    /// The operator's `restart` ([`lifecycle::operator_restart`]).
    pub(super) fn operator_restart(&mut self) {
        lifecycle::operator_restart(&mut self.lifecycle());
    }

    pub(super) fn reconfigure(&mut self, cfg: ServerConfig) {
        if cfg == self.cfg {
            return;
        }
        if cfg.same_child_but_roots(&self.cfg)
            && cfg.roots == self.cfg.roots
            && cfg.client_roots == self.cfg.client_roots
        {
            // Only the HTTP endpoint changed: the daemon's business, not the child's.
            self.cfg = cfg;
            return;
        }
        if cfg.same_child_but_roots(&self.cfg) {
            // The roots policy changes live: the child is told to ask again (K28).
            info!("roots changed; telling the child (notifications/roots/list_changed)");
            self.cfg = cfg;
            if self.life.state() == State::Ready && self.child_era() == Era::Handshake {
                let method = "notifications/roots/list_changed";
                let line = Out::request(None, method, None).encode();
                let out = Outbound::notification(line, Cow::Borrowed(method), false);
                self.write_child(out, Lane::Urgent, "notifications/roots/list_changed");
            }
            return;
        }
        info!("configuration changed; restarting the child with it");
        self.instances.reconfigure(&cfg);
        // A changed command may serve a different protocol or tool set: forget the handshake's
        // ping verdicts, keep the cached lists (compared and announced after the restart).
        self.health
            .reconfigure(health_config(&cfg), self.clock.now());
        self.held.set_limit(cfg.queue_limit);
        self.cfg = cfg;
        let idle = self.life.state() == State::Idle;
        self.opener.forget(idle);
        if idle {
            // Nothing runs: the next request starts the new command, and what the old one
            // said (its handshake, its lists, the record) no longer describes it.
            self.lists.clear();
            return;
        }
        self.operator_restart();
    }

    pub(super) fn on_exit(&mut self, exit: Exit) {
        self.on_end(exit, None)
    }

    /// A remote server's bare HTTP answer to request `id` ([`unreachable::refused`]).
    fn on_refused(&mut self, id: &RawValue, r: Refusal) {
        match unreachable::refused(&mut self.answering(), id, r) {
            Refused::Done => {}
            Refused::StopForAuth => {
                lifecycle::stop_child(&mut self.lifecycle(), StopCause::AuthFailed)
            }
            Refused::AsError(m) => self.on_child_response(m),
        }
    }

    /// How an instance ended: a child's exit, or a remote session's end (`unreachable` set
    /// when the server could not be reached; else it closed because it was stopped).
    pub(super) fn on_end(&mut self, exit: Exit, unreachable: Option<Unreachable>) {
        let Some(ended) = self.life.take() else {
            // Exits are filtered by generation, so this is the current child; be safe anyway.
            warn!("an exit with no child running was ignored");
            return;
        };
        let (child, cause, ready_since) = (ended.child, ended.cause, ended.ready_since);
        self.instances.publish_pid(0);
        let now = self.clock.now();
        let why = match unreachable {
            Some(u) => ExitReason::Unreachable(u),
            None => ExitReason::of(cause, exit),
        };
        let reason = why.to_string();
        let ended = Reason::Ended(why);
        let probing_era = self
            .routing
            .inflight()
            .iter()
            .any(|(_, _, _, p)| matches!(p.owner, Owner::Discover { probe: true }));
        if self.health.exited(exit.requested) {
            warn!("the child exited while a `ping` probe was outstanding; it will not be sent `ping` again (liveness is confirmed with advertised requests instead)");
        }
        if cause == Some(StopCause::Idle) {
            // Not an outage: no exit record, no failure, no backoff (issue 18 §2).
            // No MESSAGE_ID: the journal's "exited" query lists outages, and this is none.
            info!(child_pid = child.describe().pid, "stopped: idle");
            self.fail_inflight(OutageStatus::Idle, ended, None);
            let held = self.held.len() > 0;
            return lifecycle::after_idle_stop(&mut self.lifecycle(), held);
        }
        lifecycle::record_exit(&mut self.lifecycle(), why);
        let tail = self.instances.tail().last_lines(3);
        let operator = exits::by_operator(cause);
        let signal = exit.signal.map(upstream::signal_name);
        if operator {
            info!(message_id = MSG_EXITED, child_pid = child.describe().pid, exit_code = exit.code,
                signal = signal.as_deref(), reason = %reason, restart_n = self.instances.restarts(), "stopped");
        } else {
            warn!(message_id = MSG_EXITED, child_pid = child.describe().pid, exit_code = exit.code,
                signal = signal.as_deref(), reason = %reason, restart_n = self.instances.restarts(),
                stderr_tail = %tail, "exited");
        }
        let status = exits::outage_of(cause, unreachable.is_some());
        // Decide what comes next before failing requests, so errors can say when we retry.
        self.decide_after_exit(
            child.as_ref(),
            exit,
            cause,
            &reason,
            ready_since,
            probing_era && unreachable.is_none(),
        );
        if self.life.state() == State::Backoff && cause != Some(StopCause::Restart) {
            let class = exits::restart_class(status, &exit, unreachable.is_some());
            self.telemetry.metrics().restart(class);
        }
        let retry_after = lifecycle::next_attempt(&self.life, &self.demand)
            .map(|t| t.saturating_duration_since(now));
        self.fail_inflight(status, ended, retry_after);
        if matches!(self.life.state(), State::Failed | State::Idle)
            || (self.opener.handshake().is_none() && !self.life.probe_respawn())
        {
            // Requests held for a child that never became ready learn why at once (K18).
            let status = if self.life.state() == State::Failed {
                OutageStatus::Failed
            } else {
                status
            };
            self.fail_held(status);
        }
    }

    /// What follows an exit: stopped for good, an immediate respawn (era verdict, operator
    /// restart), `failed`, or the backoff of the restart policy.
    fn decide_after_exit(
        &mut self,
        child: &dyn Upstream,
        exit: Exit,
        cause: Option<StopCause>,
        reason: &str,
        ready_since: Option<Instant>,
        probing_era: bool,
    ) {
        let now = self.clock.now();
        let ended = Ended {
            cause,
            exit,
            ready: ready_since.is_some(),
            probing_era,
            remote: self.cfg.remote.is_some(),
            lazy: lifecycle::lazy_start(&self.cfg, &self.demand),
        };
        match exits::after_exit(&ended) {
            AfterExit::Stopped => self.life = Life::Stopped,
            AfterExit::AuthRequired => {
                if self.cfg.remote.as_ref().is_some_and(|r| r.oauth.is_some()) {
                    error!(message_id = MSG_FAILED, reason = "auth-failed",
                        "auth_required: the remote server needs a sign-in (HTTP 401/403); run `mcp-supervisor login {}`", self.cfg.name);
                } else {
                    error!(message_id = MSG_FAILED, reason = "auth-failed",
                        "auth_required: the remote server refused the credential (HTTP 401/403) at the handshake; fix `headers`, then run `mcp-supervisor start {}`", self.cfg.name);
                }
                self.life = Life::AuthRequired;
                self.fail_held(OutageStatus::AuthRequired);
            }
            AfterExit::HandshakeRespawn => {
                self.set_verdict(
                    Era::Handshake,
                    "the child exited on the server/discover probe",
                );
                // Still never two spawns closer than backoff_initial (R9).
                self.life = Life::Backoff {
                    until: base::deadline::after(child.started_at(), self.cfg.backoff_initial)
                        .max(now),
                    probe_respawn: true,
                    restart: true,
                };
            }
            AfterExit::RestartNow => {
                self.life = Life::Backoff {
                    until: now,
                    probe_respawn: false,
                    restart: true,
                };
            }
            AfterExit::LazyFailed => lifecycle::after_failed_lazy_start(
                &mut self.lifecycle(),
                child.started_at(),
                reason,
            ),
            AfterExit::FailedStart => {
                let failed_starts = self.instances.failed_start();
                match exits::after_failed_start(&exit, failed_starts) {
                    FailedStart::CannotRun => self.enter_failed(&format!(
                        "{reason}: the command cannot run (exit codes 126, 127, 78 are not retried)"
                    )),
                    FailedStart::TooMany => self.enter_failed(&format!(
                        "{failed_starts} consecutive failed starts, last {reason}"
                    )),
                    FailedStart::Policy => self.restart_by_policy(child, exit, cause, ready_since),
                }
            }
            AfterExit::Policy => self.restart_by_policy(child, exit, cause, ready_since),
        }
    }

    /// The restart policy after an end ([`lifecycle::after_exit`]); what is held fails when
    /// there is no restart.
    fn restart_by_policy(
        &mut self,
        child: &dyn Upstream,
        exit: Exit,
        cause: Option<StopCause>,
        ready_since: Option<Instant>,
    ) {
        let started_at = child.started_at();
        let held =
            lifecycle::after_exit(&mut self.lifecycle(), started_at, exit, cause, ready_since);
        if let Some(status) = held {
            self.fail_held(status);
        }
    }

    pub(super) fn on_ready(&mut self, hs: Handshake) {
        info!(message_id = MSG_READY, child_pid = self.life.child().and_then(|c| c.describe().pid),
            restart_n = self.instances.restarts(), protocol_version = %hs.protocol_version, "ready");
        let first = self.opener.ready(hs);
        self.life.ready(self.clock.now());
        recording::ready(&mut self.recording());
        self.instances.ready();
        self.open_listen();
        self.reread(!first || self.instances.generation() > 1);
        // Clients whose `initialize` waited for the child (concurrent first handshakes, K10),
        // one at a time (`HeldQueue::pop_oldest`); as many as were held now, so a request held
        // again meanwhile waits for the next release instead of looping here.
        for _ in 0..self.held.len() {
            let Some(h) = self.held.pop_oldest() else {
                break;
            };
            // Already in the ledger since arrival: its duration includes the wait.
            self.dispatch_request(h.client, h.msg);
        }
    }

    /// Asks the child that just became ready what [`opening::after_ready`] says: after a
    /// restart (`restarted`) the replay and the cached lists, then the lists not read yet.
    fn reread(&mut self, restarted: bool) {
        let Some(hs) = self.opener.handshake() else {
            return;
        };
        let handshake_child = self.child_era() == Era::Handshake;
        let asks = opening::after_ready(
            hs,
            restarted,
            handshake_child,
            self.opener.log_level(),
            self.subs.uris(),
            &self.lists.methods(),
        );
        let far = base::deadline::after(self.clock.now(), self.cfg.request_timeout);
        for ask in asks {
            match ask {
                Reread::LogLevel(level) => {
                    let p = raw(&json!({"level": level_name(level)}));
                    self.send_to_child(Owner::Internal, "logging/setLevel", Some(p), far);
                }
                Reread::Subscribe(uri) => {
                    let p = raw(&json!({"uri": uri}));
                    self.send_to_child(Owner::Internal, "resources/subscribe", Some(p), far);
                }
                Reread::List { method, announce } => {
                    let owner = Owner::Refresh { method, announce };
                    self.send_to_child(owner, method, None, far);
                }
            }
        }
    }

    /// An event of the upstream (the seam, `upstream`): one of the current instance's,
    /// or ignored.
    pub(super) fn on_upstream_event(&mut self, ev: Event) {
        if let Event::Connected(g, connected) = ev {
            // The shell makes these `Input::Spawned`; the same outcome either way.
            return self.on_spawned(g, connected);
        }
        if Some(ev.generation()) != self.life.child().map(|c| c.generation()) {
            return;
        }
        match ev {
            Event::Message(_, m) => {
                self.heard();
                self.on_child_message(m);
            }
            Event::Discarded(_, limit, was) => {
                self.heard();
                self.on_discarded(limit, was);
            }
            Event::Malformed(_, id, why) => {
                // Any reply proves life, a malformed one too.
                self.heard();
                self.on_malformed(&id, &why);
            }
            Event::Closed(_) => {
                // MCP: a server may shut down by closing stdout. Give it time to exit by itself;
                // its exit status is the better diagnosis.
                debug!("the child closed its stdout");
                self.life.set_stdout_closed(Some(self.clock.now()));
            }
            Event::Lost(_, Lost::WriteFailed(why)) => {
                warn!("{why}");
                lifecycle::stop_child(&mut self.lifecycle(), StopCause::StdinFailed);
            }
            Event::Lost(_, Lost::Exited(exit)) => self.on_exit(exit),
            Event::Lost(_, Lost::Unreachable(u)) => self.on_end(session_end(false), Some(u)),
            Event::Lost(_, Lost::Closed) => self.on_end(session_end(true), None),
            Event::Refused(_, id, r) => {
                // Any HTTP status proves life (design.md §6).
                self.heard();
                self.on_refused(&id, r);
            }
            Event::Connected(..) => {}
        }
    }

    pub(super) fn heard(&mut self) {
        self.health.heard(self.clock.now());
    }

    pub(super) fn on_session(&mut self, ev: SessionEvent) {
        match ev {
            SessionEvent::Connected(id, tx, peer) => {
                if self.shell.shutting_down() {
                    warn!(client = %id, "refusing a client: shutting down");
                    tx.deliver(message::error_response(
                        &message::raw_null(),
                        code::SERVER_UNAVAILABLE,
                        "mcp-supervisor is shutting down",
                        None,
                    ));
                    tx.kick();
                    return;
                }
                self.outbox.clients_mut().connect(id, tx, peer);
                self.telemetry
                    .metrics()
                    .set_clients(self.outbox.clients().len());
            }
            SessionEvent::Message(id, m) => {
                if self.outbox.clients().contains_key(&id) {
                    self.on_client_message(id, m)
                }
            }
            SessionEvent::Rejected(id, code) => {
                let (uid, pid) = self
                    .outbox
                    .clients()
                    .get(&id)
                    .map(|c| (Some(c.peer().uid), c.peer().pid))
                    .unwrap_or((None, None));
                // Garbage costs a metric always, a log line only within the budget.
                if let Some(suppressed) = self.telemetry.allow_invalid(self.clock.now()) {
                    info!(target: "mcp_supervisor::requests", client = %id, peer_uid = uid, peer_pid = pid,
                        outcome = Outcome::Invalid.as_str(), error_code = code, suppressed, "request finished");
                }
                self.telemetry
                    .metrics()
                    .request("", Outcome::Invalid, Some(code), 0.0);
            }
            SessionEvent::InputClosed(id) => {
                if let Some(c) = self.outbox.clients_mut().get_mut(&id) {
                    c.close_input();
                }
                // It can no longer answer the child's requests.
                self.fail_asks_of(id, "the client that was asked closed its input");
                self.close_if_done(id);
            }
            SessionEvent::Disconnected(id) => self.drop_client(id),
        }
    }
}

// ==============================================================================================
// Timers and health: the next wake-up, deadlines of starts, requests, held requests and
// the child's requests, and the health rules (`actor/health.rs`) applied to the ready child.
// ==============================================================================================

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
            lifecycle::idle_deadline(&self.life, &self.demand, &self.cfg),
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
            lifecycle::stop_child(&mut self.lifecycle(), StopCause::StartTimeout);
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
            lifecycle::stop_child(&mut self.lifecycle(), StopCause::StdoutClosed);
        }
        if matches!(self.life.state(), State::Backoff | State::Failed)
            && self.life.next_spawn().is_some_and(|t| t <= now)
            && lifecycle::admit_spawn(&mut self.lifecycle())
        {
            if self.life.spawn_is_restart() {
                self.instances.count_restart();
            }
            lifecycle::spawn_now(&mut self.lifecycle());
        }
        while let Some(r) = self.routing.inflight_mut().pop_expired(now) {
            self.on_deadline(r.id, r.value);
        }
        self.expire_held(now);
        asking::expire_asks(&mut self.asking(), now);
        if self.life.state() == State::Ready {
            self.check_health(now);
            self.check_idle();
        }
    }

    /// Held requests past their deadlines fail ([`unreachable::expire_held`]).
    fn expire_held(&mut self, at: Instant) {
        if self.held.next_deadline().is_none_or(|t| t > at) {
            return;
        }
        let now = self.outage_now();
        let known = self.opener.handshake().is_some();
        let status = self.outage_status();
        let retry = self
            .life
            .next_spawn()
            .map(|t| t.saturating_duration_since(at));
        unreachable::expire_held(&mut self.answering(), &now, known, status, retry, at);
    }

    pub(super) fn on_deadline(&mut self, child_id: u64, p: Pending) {
        match p.owner {
            Owner::Client { client, id, .. } => {
                self.health.request_expired(p.written);
                self.cancel_upstream(
                    child_id,
                    "request timed out",
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

    /// Applies the health rules (`actor/health.rs`) to the ready child at `now`
    /// ([`probing::check`]), and stops a child they find dead.
    pub(super) fn check_health(&mut self, now: Instant) {
        if self.life.child().is_none_or(|c| c.stopping()) {
            return;
        }
        let methods = self.probe_methods();
        let at = stamp(&self.cfg.name, self.clock, &self.life);
        let mut cx = Probing::new(
            &mut self.health,
            &mut self.routing,
            &mut self.outbox,
            &self.telemetry,
            at,
            methods,
            self.cfg.probe_failures,
        );
        if probing::check(&mut cx, now) == Verdict::Dead {
            lifecycle::stop_child(&mut self.lifecycle(), StopCause::ProbeTimeout);
        }
    }
}

// ==============================================================================================
// Servers on demand and idle stops (issue 18 §1-2).
//
// - `start = "on-demand"`: the actor begins in `idle` with the record of the last run
//   ([`crate::record`]) as its handshake and lists. `initialize`, `ping`,
//   `server/discover`, `logging/setLevel` and the first page of `tools/list`,
//   `prompts/list`, `resources/list`, `resources/templates/list` are answered from it
//   (marked `_meta["mcp-supervisor/cache"]`); any other request, a cursor, a list never
//   seen, or an `initialize` with no record starts the child ([`lifecycle::start_on_demand`]).
//   Requests that arrive while it starts wait up to `start_timeout`, then go through.
// - `idle_stop`: a ready child is stopped through the ladder when no client request has
//   reached it, and no answer come back from it, for that long, and nothing holds it
//   ([`lifecycle::holds_child`]: requests in flight or held, questions asked of clients, resource
//   subscriptions, listen streams). Its exit leaves the server `idle`: no failure, no
//   backoff, no restart counted, `last_exit` untouched.
// ==============================================================================================

impl Server {
    /// The actor's first step: spawn now (`eager`), or wait in `idle` for a request with the
    /// last run's `record`, if any (`on-demand`).
    pub(super) fn begin(&mut self, record: Option<Record>) {
        // Handed over at rest by the previous image (issue 32 §1): it stays as the operator,
        // the backoff or the sign-in left it.
        let resting = self.instances.take_at_rest();
        if resting && self.cfg.start == StartMode::Eager {
            return;
        }
        if self.cfg.start == StartMode::Eager || self.opener.is_adopted() {
            return lifecycle::spawn(&mut self.lifecycle());
        }
        self.demand.open_writer(self.cfg.cache_file.clone());
        if let Some(r) = record {
            self.opener
                .restore(r.handshake, self.cfg.protocol == ChildProtocol::Auto);
            self.lists.restore(r.lists);
            self.demand.restored(r.saved_at);
        }
        info!(
            cached = self.opener.handshake().is_some(),
            "waiting for the first request that needs the child (start = on-demand)"
        );
        if !resting {
            self.life = Life::Idle;
        }
    }

    /// An on-demand command that cannot run (see [`missing_command`]): `failed` at once, as a
    /// spawn of it would be.
    pub(super) fn cannot_start(&mut self, why: &str) {
        error!(error = %why, "the on-demand command cannot run");
        lifecycle::record_exit(&mut self.lifecycle(), ExitReason::SpawnError);
        self.instances.note(why);
        self.enter_failed(&format!("{why}; fix the command and run `start`"));
    }

    /// The record's context ([`recording`]) at this moment.
    fn recording(&mut self) -> Recording<'_> {
        let at = stamp(&self.cfg.name, self.clock, &self.life);
        Recording::new(
            &mut self.demand,
            &mut self.life,
            &self.opener,
            &self.lists,
            at,
            &self.cfg,
        )
    }

    /// Client requests forwarded and not answered yet, listen streams aside (an upgrade
    /// waits for none, issue 32 §1).
    pub(super) fn forwarded_requests(&self) -> usize {
        self.routing
            .inflight()
            .iter()
            .filter(|(_, _, _, p)| {
                matches!(p.owner, Owner::Client { .. } | Owner::Parked { .. })
                    && p.method != "subscriptions/listen"
            })
            .count()
    }

    /// At a timer: stops the ready child when `idle_stop` passed and nothing holds it
    /// ([`lifecycle::idle_stop`]).
    pub(super) fn check_idle(&mut self) {
        let due = lifecycle::idle_deadline(&self.life, &self.demand, &self.cfg);
        if due.is_none_or(|t| t > self.clock.now()) {
            return;
        }
        let busy = lifecycle::holds_child(&self.routing, &self.held, &self.rounds, &self.subs);
        lifecycle::idle_stop(&mut self.lifecycle(), busy);
    }
}

// ==============================================================================================
// Client messages: requests (local answers, duplicate ids, the limits, where a request
// goes), `initialize` and `logging/setLevel` answered here, notifications, responses to the
// child's requests, and a client's departure.
// ==============================================================================================

impl Server {
    pub(super) fn on_client_message(&mut self, client: ClientId, m: Message) {
        match m.kind {
            Kind::Request => self.on_client_request(client, m),
            Kind::Notification => self.on_client_notification(client, m),
            Kind::Response => self.on_client_response(client, m),
        }
    }

    pub(super) fn on_client_request(&mut self, client: ClientId, m: Message) {
        let Some(id) = m.id.as_deref() else { return };
        if m.method() == "subscriptions/listen"
            && self
                .outbox
                .clients()
                .get(&client)
                .is_some_and(|c| c.peer().transport == Transport::Socket)
        {
            let key = id_key(id);
            // A duplicate of an open stream is refused below: it never replaces the line.
            if !subscribing::listen_open(&self.routing, &self.subs, client, &key) {
                let line =
                    Out::request(Some(id), "subscriptions/listen", m.params.as_deref()).encode();
                if let Ok(line) = String::from_utf8(line.to_vec()) {
                    let open: Vec<String> =
                        subscribing::open_listens_of(&self.routing, &self.subs, client);
                    let cap = self.cfg.max_subscriptions.max(1);
                    self.listen_lines
                        .note(client, key, line, cap, |k| open.iter().any(|o| o == k));
                }
            }
        }
        self.shell.panic_on_request(m.method());
        // One lookup: a duplicate finds the first request's entry, a new id opens its own.
        let generation = self.life.child().map(|c| c.generation());
        let (clock, log, traced) = (
            (self.clock.now(), self.clock.wall()),
            self.telemetry.request_log(),
            self.telemetry.traced(),
        );
        let opened = self.outbox.open(client, id_key(id), || {
            tracked(&m, generation, clock, log, traced)
        });
        if opened.is_err() {
            return serving::refuse_duplicate(&mut self.serving(), client, id, m.method());
        }
        if matches!(m.method(), "resources/subscribe" | "subscriptions/listen")
            && subscribing::held_by(&self.routing, &self.subs, &self.held, client)
                >= self.cfg.max_subscriptions
        {
            let msg = format!(
                "client holds {} subscriptions and listen streams on server `{}` (max_subscriptions)",
                subscribing::held_by(&self.routing, &self.subs, &self.held, client),
                self.cfg.name
            );
            return self.refuse_limit(client, id, &msg);
        }
        self.dispatch_request(client, m);
    }

    /// Decides what happens to a client request already in the ledger: answered here,
    /// forwarded, held while the child starts, or failed with the outage record.
    pub(super) fn dispatch_request(&mut self, client: ClientId, m: Message) {
        let Some(id) = m.id.clone() else { return };
        let requested = era::envelope_version(m.params.as_deref());
        let Some(c) = self.outbox.clients_mut().get_mut(&client) else {
            return;
        };
        let client_era = c.settle_era(m.method(), requested.is_some());
        if client_era == Era::Modern {
            c.learn_envelope(m.params.as_deref());
        }
        if client_era == Era::Modern
            && serving::answer_modern(&mut self.serving(), client, &id, &m, requested.as_deref())
        {
            return;
        }
        if client_era == Era::Modern
            && self.child_era() == Era::Handshake
            && MRTR_METHODS.contains(&m.method())
            && self.resume_round(client, &m)
        {
            return;
        }
        let Some(m) = self.answer_locally(client, &id, m, client_era) else {
            return;
        };
        if self.life.state() != State::Ready && serving::from_cache(&mut self.serving(), client, &m)
        {
            return;
        }
        self.route_by_state(client, &id, m);
    }

    /// The context of answers given here ([`serving`]) at this moment.
    fn serving(&mut self) -> Serving<'_> {
        let standing = match self.life.state() {
            State::Ready => Standing::Ready,
            State::Idle => Standing::Idle {
                saved_at: self.demand.saved_at(),
            },
            _ => Standing::Down(self.outage_status()),
        };
        let at = stamp(&self.cfg.name, self.clock, &self.life);
        Serving::new(
            &mut self.outbox,
            &mut self.telemetry,
            at,
            self.opener.handshake(),
            standing,
            &self.lists,
            self.cfg.mark_unavailable,
        )
    }

    /// Requests the supervisor answers itself (`initialize`, `ping`, `logging/setLevel`, served
    /// listen streams, subscriptions it keeps). Gives the request back when it is not one.
    fn answer_locally(
        &mut self,
        client: ClientId,
        id: &RawValue,
        m: Message,
        client_era: Era,
    ) -> Option<Message> {
        match m.method() {
            "initialize" => self.client_initialize(client, m),
            "ping" => serving::ping(&mut self.serving(), client, id),
            "logging/setLevel"
                if self
                    .opener
                    .handshake()
                    .is_some_and(|h| h.has("logging") || h.era == Era::Modern) =>
            {
                self.client_set_level(client, m)
            }
            "subscriptions/listen"
                if client_era == Era::Modern
                    && self.child_era() == Era::Handshake
                    && self.opener.handshake().is_some() =>
            {
                self.serve_listen(client, m)
            }
            // 2026-07-28 has no subscribe: a handshake client's subscriptions to a modern child
            // are kept here (and served from the supervisor's own listen stream).
            "resources/subscribe" | "resources/unsubscribe" if self.child_era() == Era::Modern => {
                self.client_subscription_on_modern(client, m)
            }
            "resources/subscribe" | "resources/unsubscribe"
                if self.local_subscription(client, &m) => {}
            _ => return Some(m),
        }
        None
    }

    /// Where a request for the child goes in the current state: forwarded when ready, held
    /// while a start or restart is under way (bounded by `queue_limit`), failed at once with
    /// the outage record otherwise.
    fn route_by_state(&mut self, client: ClientId, id: &RawValue, m: Message) {
        let held_room = self.held.has_room();
        match self.life.state() {
            State::Ready => self.forward(client, m),
            // The last start failed and its backoff delay has not passed (issue 26 §7).
            State::Idle if lifecycle::lazy_retry_pending(&self.demand, self.clock.now()) => {
                self.outage_reply(client, id, m.method(), OutageStatus::Failed);
            }
            State::Idle => {
                // A request the record cannot answer: the child starts (issue 18 §1).
                lifecycle::start_on_demand(&mut self.lifecycle(), m.method());
                if self.life.state() != State::Idle {
                    self.route_by_state(client, id, m);
                } else {
                    // The spawn itself failed: the start is over, and said so.
                    self.outage_reply(client, id, m.method(), OutageStatus::Failed);
                }
            }
            // A server that was never ready and is backing off gets a fast, explicit error
            // (K19); one that was ready is likely back soon, so its requests wait, as do those
            // of a first start that only waits for the daemon's spawn budget (nothing failed).
            State::Backoff
                if self.opener.handshake().is_none()
                    && !self.life.probe_respawn()
                    && !self.life.awaiting_budget() =>
            {
                self.outage_reply(client, id, m.method(), OutageStatus::Backoff);
            }
            State::Stopping if self.restarting() && held_room => self.hold(client, m),
            State::Starting | State::Backoff if held_room => self.hold(client, m),
            State::Starting | State::Backoff => {
                let status = self.outage_status();
                let reason = Reason::QueueFull(self.held.len());
                let retry = self
                    .life
                    .next_spawn()
                    .map(|t| t.saturating_duration_since(self.clock.now()));
                let method = m.method().to_string();
                self.outage_respond(
                    client,
                    id,
                    &method,
                    status,
                    reason,
                    retry,
                    code::LIMIT_EXCEEDED,
                    Outcome::Denied,
                );
            }
            _ => {
                let status = self.outage_status();
                self.outage_reply(client, id, m.method(), status);
            }
        }
    }

    /// Holds a request until the child is ready, for at most `queue_wait`.
    fn hold(&mut self, client: ClientId, m: Message) {
        let deadline =
            lifecycle::hold_deadline(&self.life, &self.demand, &self.cfg, self.clock.now());
        // Only called with room (`route_by_state`); a full queue would refuse it, never grow.
        let _ = self.held.push(client, m, deadline);
    }

    /// A client's `initialize`: answered from the kept handshake ([`serving::initialize`]);
    /// before the first, the child starts and the request waits for it (bounded by
    /// `start_timeout` and the held queue), or fails at once when no start is under way.
    pub(super) fn client_initialize(&mut self, client: ClientId, m: Message) {
        let Some(id) = m.id.clone() else { return };
        if serving::initialize(&mut self.serving(), client, &m) {
            return;
        }
        // No record of an earlier run: the handshake needs the child (issue 18 §1).
        lifecycle::start_on_demand(&mut self.lifecycle(), "initialize");
        // A first instance the supervisor is stopping to restart (its stdin failed, its
        // stdout closed, ...) is still trying: its exit decides, and says why (K18).
        let trying = match self.life.state() {
            State::Starting => true,
            State::Stopping => self.restarting(),
            // A respawn after the era probe, or a first start waiting for the spawn
            // budget (R11): nothing failed.
            _ => self.life.probe_respawn() || self.life.awaiting_budget(),
        };
        if !trying {
            // Never ready, and not even trying right now: say why at once (K18, K19).
            let status = self.outage_status();
            return self.outage_reply(client, &id, "initialize", status);
        }
        if !self.held.has_room() {
            // The held queue is bounded for handshakes too (issue 12 §6).
            let status = self.outage_status();
            let reason = Reason::QueueFull(self.held.len());
            return self.outage_respond(
                client,
                &id,
                "initialize",
                status,
                reason,
                None,
                code::LIMIT_EXCEEDED,
                Outcome::Denied,
            );
        }
        // Never ready yet: wait for the child (bounded by start_timeout, issue 5 §5).
        let deadline = base::deadline::after(self.clock.now(), self.cfg.start_timeout);
        let _ = self.held.push(client, m, deadline);
    }

    /// A client's `logging/setLevel` ([`serving::set_level`]); the child follows the most
    /// verbose level asked.
    pub(super) fn client_set_level(&mut self, client: ClientId, m: Message) {
        if serving::set_level(&mut self.serving(), client, &m) {
            self.sync_log_level();
        }
    }

    /// The child follows the most verbose level clients asked for
    /// ([`forwarding::sync_log_level`]); the session note records it.
    pub(super) fn sync_log_level(&mut self) {
        let ready = self.life.state() == State::Ready;
        if forwarding::sync_log_level(&mut self.forwarding(), ready) {
            recording::note_session(&mut self.recording());
        }
    }

    pub(super) fn on_client_notification(&mut self, client: ClientId, m: Message) {
        match m.method() {
            "notifications/initialized" => {}
            "notifications/cancelled" => {
                let Some(p) = m.params_object() else { return };
                let Some(rid) = p.get("requestId") else {
                    return;
                };
                let key = rid.to_string();
                if self.end_listener(client, &key) {
                    return;
                }
                // A stream still waiting for the child is never opened: it ends here, like a
                // served one (sim seed 274). Other held requests are answered as usual.
                let stream = |m: &str| m == "subscriptions/listen";
                if self.held.take(client, &key, stream).is_some() {
                    return self.finish(client, &key, Outcome::Cancelled, None);
                }
                forwarding::cancel(&mut self.forwarding(), client, &key, p);
            }
            _ => {
                let ready = self.life.state() == State::Ready;
                forwarding::notify(&mut self.forwarding(), &m, ready);
            }
        }
    }

    /// A client's answer `m` to a request the supervisor sent it: the child's own request
    /// (passed back under the child's id) or an input of a round toward a handshake client
    /// ([`asking::on_input_answer`]).
    pub(super) fn on_client_response(&mut self, client: ClientId, m: Message) {
        let n = m.id.as_deref().and_then(|i| i.get().parse::<u64>().ok());
        let Some(asker) = n.and_then(|n| self.routing.answered(client, n)) else {
            debug!(client = %client, "response to no request of ours: dropped");
            return;
        };
        match asker {
            Asker::Child(child_id) => {
                asking::pass_answer(&mut self.asking(), &child_id, &m);
            }
            Asker::Mrtr { round, key } => {
                if asking::on_input_answer(&mut self.asking(), round, key, &m) {
                    self.retry_round(round);
                }
            }
        }
    }

    pub(super) fn drop_client(&mut self, client: ClientId) {
        let stateless = self
            .outbox
            .clients()
            .get(&client)
            .is_some_and(|c| c.peer().transport == Transport::HttpRequest);
        if stateless {
            asking::detach_rounds_of(&mut self.asking(), client);
        }
        self.listen_lines.forget(client);
        if self.outbox.clients_mut().remove(&client).is_none() {
            return;
        }
        // Cancel its requests toward the child; their late responses are dropped (K09).
        let mine: Vec<String> = self
            .subs
            .listeners()
            .iter()
            .filter(|l| l.client() == client)
            .map(|l| l.key())
            .collect();
        for key in mine {
            self.end_listener(client, &key);
        }
        for key in self.outbox.ledger().keys_of(client) {
            self.finish(client, &key, Outcome::Cancelled, None);
        }
        self.outbox.forget(client);
        self.telemetry
            .metrics()
            .set_clients(self.outbox.clients().len());
        for r in self.routing.inflight_mut().remove_client(client) {
            self.cancel_upstream(
                r.id,
                "client disconnected",
                "notifications/cancelled for a departed client",
            );
        }
        // Release its subscriptions.
        let freed = self.subs.remove_client(client);
        let released = !freed.is_empty();
        for uri in &freed {
            self.unsubscribe_child(uri);
        }
        if released && self.child_era() == Era::Modern {
            self.open_listen();
        }
        // The child's requests routed to it get an error (K06).
        self.fail_asks_of(client, "the client that was asked disconnected");
        asking::drop_rounds_of(&mut self.asking(), client);
        self.held.drop_client(client);
        self.sync_log_level();
    }

    /// Ends the sessions of clients `access` no longer permits ([`Outbox::revoke`]); their
    /// requests are cancelled like any departure.
    pub(super) fn revoke_unpermitted(&mut self, access: &crate::session::Access) {
        for id in self.outbox.revoke(access, &self.cfg.name) {
            self.drop_client(id);
        }
    }

    /// The questions routed to `client` fail ([`asking::fail_asks_of`]).
    fn fail_asks_of(&mut self, client: ClientId, why: &str) {
        asking::fail_asks_of(&mut self.asking(), client, why);
    }

    /// Drops each client whose input closed and that was sent something during this input
    /// ([`Outbox::take_closing`]), once nothing it asked for is pending; dropping one may
    /// send to others, which are asked in turn. Run after each input: a client's last answer
    /// is decided before it is dropped, and every decision in between sees it connected.
    pub(super) fn settle_closing(&mut self) {
        loop {
            let closing = self.outbox.take_closing();
            if closing.is_empty() {
                return;
            }
            for client in closing {
                self.close_if_done(client);
            }
        }
    }

    /// A client whose input closed is dropped once nothing it asked for is pending.
    /// Everything the client is owed counts: requests in flight, held, and rounds of
    /// `input_required` whose original request it is still waiting for the answer to.
    pub(super) fn close_if_done(&mut self, client: ClientId) {
        let done = self
            .outbox
            .clients()
            .get(&client)
            .is_some_and(|c| c.closing() && self.routing.inflight().count_for(client) == 0)
            && !self.held.has_client(client)
            && !self.rounds.all_rounds().any(|(_, r)| r.client() == client);
        if done {
            self.drop_client(client);
        }
    }
}

// ==============================================================================================
// Forwarding a client request to the child: id rewriting, era translation, deadlines, and
// MRTR rounds (`input_required` turned into ordinary requests for handshake clients).
// ==============================================================================================

impl Server {
    /// The context for writing requests toward the upstream ([`forwarding`]) at this moment.
    fn forwarding(&mut self) -> Forwarding<'_> {
        let at = stamp(&self.cfg.name, self.clock, &self.life);
        Forwarding::new(
            &mut self.routing,
            &mut self.opener,
            &mut self.demand,
            &mut self.outbox,
            &mut self.telemetry,
            at,
            &self.cfg,
        )
    }

    /// Forwards a client's request to the ready child ([`forwarding::forward`]).
    pub(super) fn forward(&mut self, client: ClientId, m: Message) {
        if let Err(unsent) = forwarding::forward(&mut self.forwarding(), client, m) {
            self.unsent(unsent);
        }
    }

    /// A request that found no child running: the child is gone and its exit not handled
    /// yet, so a client's request is answered with the outage record like any request that
    /// cannot reach the child.
    fn unsent(&mut self, unsent: Unsent) {
        if let Some((client, id)) = unsent.client {
            self.outage_reply(client, &id, &unsent.method, OutageStatus::Exited);
        }
    }

    /// An `input_required` result for a handshake client ([`asking::start_round`]). Returns
    /// false when the result is not `input_required` (it is then answered as it is).
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
        let started = asking::start_round(
            &mut self.asking(),
            client,
            id,
            method,
            sent,
            result,
            progress,
            log_level,
        );
        match started {
            Started::NotARound => false,
            Started::Handled => true,
            Started::Complete(round) => {
                self.retry_round(round);
                true
            }
        }
    }

    /// Every input of `round` is answered: retry the original request with them
    /// ([`asking::take_retry`]).
    pub(super) fn retry_round(&mut self, round: u64) {
        if let Some(r) = asking::take_retry(&mut self.asking(), round) {
            let key = Some(r.key);
            self.send_with_id(
                r.child_id,
                key,
                r.owner,
                &r.method,
                Some(r.params),
                Some(r.deadline),
            );
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
        self.outbox.era_of(client)
    }

    /// The era the current child is driven in (handshake until known).
    pub(super) fn child_era(&self) -> Era {
        self.opener.child_era()
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
    /// request id text ([`forwarding::send`]).
    pub(super) fn send_with_id(
        &mut self,
        child_id: u64,
        key: Option<String>,
        owner: Owner,
        method: &str,
        params: Option<Box<RawValue>>,
        deadline: Option<Instant>,
    ) -> Option<u64> {
        let sent = forwarding::send(
            &mut self.forwarding(),
            child_id,
            key,
            owner,
            method,
            params,
            deadline,
        );
        match sent {
            Ok(id) => Some(id),
            Err(unsent) => {
                self.unsent(unsent);
                None
            }
        }
    }

    /// The child's queue refused request `child_id` ([`forwarding::on_unwritten`]).
    pub(super) fn on_unwritten(&mut self, child_id: u64, queued: Queued) {
        if let Err(unsent) = forwarding::on_unwritten(&mut self.forwarding(), child_id, queued) {
            self.unsent(unsent);
        }
    }
}

// ==============================================================================================
// The child's requests asked of 2026-07-28 clients (issue 13 §1, K26): `asking.rs` decides;
// these methods build its context and route what it returns.
// ==============================================================================================

impl Server {
    /// The asking context ([`asking`]) at this moment.
    fn asking(&mut self) -> Asking<'_> {
        let at = stamp(&self.cfg.name, self.clock, &self.life);
        Asking::new(
            &mut self.rounds,
            &mut self.routing,
            &mut self.outbox,
            &mut self.telemetry,
            at,
            &self.cfg,
        )
    }

    /// A 2026 client's retry carrying this supervisor's `requestState`
    /// ([`asking::resume_round`]). Returns false when `m` is not such a retry.
    pub(super) fn resume_round(&mut self, client: ClientId, m: &Message) -> bool {
        match asking::resume_round(&mut self.asking(), client, m) {
            Resumed::NotARetry => false,
            Resumed::Done => true,
            Resumed::Answer {
                method,
                owner,
                last,
            } => {
                self.answer_client(&method, *owner, &last);
                true
            }
        }
    }

    /// Ends a round without its retry ([`asking::drop_round`]).
    pub(super) fn drop_round(&mut self, round: u64, why: &str, answer: bool, cancel: bool) {
        asking::drop_round(&mut self.asking(), round, why, answer, cancel);
    }
}

// ==============================================================================================
// Messages from the child: responses routed to their owner (with the K21 shape check),
// the handshake and era verdicts, the child's own requests, notifications and listen
// traffic, malformed replies and those never relayed (too large, too deep).
// ==============================================================================================

impl Server {
    pub(super) fn on_child_message(&mut self, m: Message) {
        match m.kind {
            Kind::Response => self.on_child_response(m),
            Kind::Request => self.on_child_request(m),
            Kind::Notification => self.on_child_notification(m),
        }
    }

    pub(super) fn on_child_response(&mut self, m: Message) {
        let n = m.id.as_deref().and_then(|i| i.get().parse::<u64>().ok());
        if let Some(n) = n {
            let served = self.health.status().ping_served;
            if self.health.answered(n) {
                self.telemetry.metrics().probe("answered");
                if served && !self.health.status().ping_served {
                    warn!("the child answers requests but not `ping`; probing with an advertised list from now on");
                }
                return;
            }
        }
        let Some(removed) = n.and_then(|n| self.routing.inflight_mut().remove(n)) else {
            let id = m.id.as_deref().map(RawValue::get).unwrap_or("none");
            debug!(
                id,
                "response for an id not in flight (cancelled, timed out or never issued): dropped"
            );
            return;
        };
        let pending = removed.value;
        let problem = match &pending.owner {
            Owner::Client { .. } => malformed(&m, &pending.method),
            // The supervisor's own requests read what they need with defaults; the handshake
            // has its own checks (a malformed answer there is a rejection or an era verdict).
            _ => None,
        };
        if let (Some(problem), Owner::Client { client, id, .. }) = (problem, &pending.owner) {
            // K21: a reply of the wrong shape fails that request only, naming the server; the
            // child answered, so it is alive, and nothing else is affected.
            warn!(method = %pending.method, %problem, "the child sent a malformed response");
            let (client, id) = (*client, id.clone());
            return self.fail_malformed(client, &id, &pending.method, &problem);
        }
        match pending.owner {
            owner @ Owner::Client { .. } => self.answer_client(&pending.method, owner, &m),
            Owner::Parked { round } => {
                asking::on_parked_response(&mut self.asking(), round, removed.id, m)
            }
            Owner::Discover { probe } => self.on_discover_answer(&m, probe),
            Owner::Listen => {
                debug!("the child closed the supervisor's listen stream");
                self.opener.listen_ended(removed.id);
            }
            Owner::Initialize => self.on_initialize_answer(&m),
            Owner::Refresh { method, announce } => self.on_refresh_answer(method, announce, &m),
            Owner::Internal => {}
        }
    }

    /// The child's answer `m` to a client's request (`method`, owned by `owner`): an MRTR
    /// round, a subscription or a list to remember, then the response with the client's id.
    pub(super) fn answer_client(&mut self, method: &str, owner: Owner, m: &Message) {
        let Owner::Client {
            client,
            id,
            subscribe,
            cache,
            add_result_type,
            retry_params,
            progress,
            log_level,
        } = owner
        else {
            return;
        };
        self.demand.used(self.clock.now());
        if let (Some(sent), Some(r)) = (&retry_params, &m.result) {
            if self.start_round(client, &id, method, sent, r.as_bytes(), progress, log_level) {
                return;
            }
        }
        if let (Some(uri), Some(_)) = (subscribe, &m.result) {
            if self.outbox.clients().contains_key(&client) {
                self.subs.add(client, &uri, Hold::Direct);
            }
        }
        if let (Some(page), Some(r)) = (cache, &m.result) {
            if let Some(v) = serde_json::from_slice::<Value>(r.as_bytes())
                .ok()
                .filter(shareable)
            {
                match page.cursor {
                    None => {
                        if self.lists.store(page.list, v) {
                            recording::save(&mut self.recording());
                        }
                    }
                    Some(cursor) => self.lists.store_page(page.list, cursor, v),
                }
            }
        }
        // Rewritten results are re-encoded; the common case is spliced (issue 15 §3).
        let shape = if add_result_type {
            Shape::Modern
        } else if self.child_era() == Era::Modern && self.client_era(client) == Era::Handshake {
            Shape::Legacy
        } else {
            Shape::AsIs
        };
        let Some((line, outcome, code)) = replies::client_line(&id, method, m, shape) else {
            return;
        };
        self.respond(client, &id, line, outcome, code);
    }

    /// The child's answer to the supervisor's `initialize` ([`opening::initialize_answer`]).
    fn on_initialize_answer(&mut self, m: &Message) {
        let decided = opening::initialize_answer(m, &self.cfg.protocol);
        self.opened(decided);
    }

    /// The answer to the opening `server/discover` ([`opening::discover_answer`]).
    pub(super) fn on_discover_answer(&mut self, m: &Message, probe: bool) {
        let decided = opening::discover_answer(m, probe, &self.cfg.protocol);
        self.opened(decided);
    }

    /// Records the era verdict an opening answer settled, then carries out what follows it.
    fn opened(&mut self, (verdict, next): (Option<opening::Verdict>, Next)) {
        if let Some(v) = verdict {
            self.set_verdict(v.era, &v.why);
        }
        match next {
            Next::Ready {
                handshake,
                initialized,
            } => {
                if initialized {
                    let method = "notifications/initialized";
                    let line = Out::request(None, method, None).encode();
                    let out = Outbound::notification(line, Cow::Borrowed(method), false);
                    self.write_child(out, Lane::Normal, "notifications/initialized");
                }
                self.on_ready(*handshake);
            }
            Next::Discover => {
                let deadline = self.life.start_deadline().unwrap_or_else(|| {
                    base::deadline::after(self.clock.now(), self.cfg.start_timeout)
                });
                self.send_discover(false, deadline);
            }
            Next::Initialize(version) => self.send_initialize(version),
            Next::Reject => {
                lifecycle::stop_child(&mut self.lifecycle(), StopCause::HandshakeRejected)
            }
            Next::Unsupported(error) => {
                error!(error = ?error.as_deref(), "the child speaks no protocol version this supervisor supports");
                lifecycle::stop_child(&mut self.lifecycle(), StopCause::HandshakeRejected);
            }
            Next::Nothing => {}
        }
    }

    /// A list the supervisor re-read: kept for outages, announced when it changed across a
    /// restart (issue 5 §4).
    fn on_refresh_answer(&mut self, method: &'static str, announce: bool, m: &Message) {
        let Some(r) = &m.result else { return };
        let Some(v) = serde_json::from_slice::<Value>(r.as_bytes())
            .ok()
            .filter(shareable)
        else {
            return;
        };
        let changed = self.lists.store(method, v);
        if changed {
            recording::save(&mut self.recording());
        }
        if changed && announce {
            let note = era::LISTS
                .iter()
                .find(|(l, _, _)| *l == method)
                .map(|(_, n, _)| *n);
            if let Some(note) = note {
                info!(
                    list = method,
                    "the list changed across the restart; notifying clients"
                );
                // On the stream each client's era uses (issue 26 §7): handshake clients get
                // the notification, 2026 clients on their `subscriptions/listen` streams.
                self.broadcast(&Out::request(None, note, None).encode(), |_| true);
                self.feed_listeners(note, None, None);
            }
        }
    }

    /// The child's own request `m`: answered here, or asked of a client by the owner rule
    /// ([`asking::on_child_request`]).
    pub(super) fn on_child_request(&mut self, m: Message) {
        asking::on_child_request(&mut self.asking(), m);
    }

    /// Tells the upstream, urgently, that the supervisor no longer wants the answer to its
    /// request `child_id` (`notifications/cancelled` with `reason`); `what` as for
    /// [`Server::write_child`].
    fn cancel_upstream(&mut self, child_id: u64, reason: &str, what: &'static str) {
        let (out, _, at) = self.out();
        out.cancel_upstream(&at, child_id, reason, what);
    }

    /// Writes `out` to the running child's stdin queue (`lane`), if a child runs; `what`
    /// names it for the log ([`Outbox::write_upstream`]). A full queue (the child has not read
    /// `upstream::child::process::STDIN_QUEUE` lines) drops the line and says so, within the
    /// log budget ([`Server::write_now`]): the stdin writer's own `STDIN_STALL` ends a child
    /// that never reads again. A closed queue means the child is exiting; its exit decides
    /// what follows, so that is only a debug line.
    pub(super) fn write_child(&mut self, out: Outbound, lane: Lane, what: &'static str) {
        let (outbox, _, at) = self.out();
        outbox.write_upstream(&at, out, lane, what);
    }

    /// The shell's half of [`Effect::ToChild`]: sends `out` to the upstream if instance
    /// `generation` still runs. A refused line is logged (within the budget); a refused
    /// request is returned, for [`Server::on_unwritten`].
    pub(super) fn write_now(
        &mut self,
        generation: u64,
        out: Outbound,
        lane: Lane,
        what: Written,
    ) -> Option<(u64, Queued)> {
        let queued = match self.life.child() {
            Some(c) if c.generation() == generation => match lane {
                Lane::Normal => c.send(out),
                Lane::Urgent => c.send_urgent(out),
            },
            _ => Queued::Closed,
        };
        match (what, queued) {
            (_, Queued::Ok) => None,
            (Written::Request(child_id), queued) => Some((child_id, queued)),
            (Written::Line(what), Queued::Closed) => {
                debug!("not written to the child (its input is closed): {what}");
                None
            }
            (Written::Line(what), Queued::Full) => {
                if let Some(suppressed) = self.telemetry.allow_dropped(self.clock.now()) {
                    warn!(
                        suppressed,
                        "the child is not reading its input (its queue is full); dropped: {what}"
                    );
                }
                None
            }
        }
    }

    /// The context for routing the child's notifications ([`notifying`]) at this moment.
    fn notifying(&mut self) -> Notifying<'_> {
        let at = stamp(&self.cfg.name, self.clock, &self.life);
        let starting = self.life.state() == State::Starting;
        Notifying::new(
            &mut self.routing,
            &self.subs,
            &mut self.opener,
            &mut self.outbox,
            &mut self.telemetry,
            at,
            starting,
        )
    }

    /// Routes the child's notification `m` to clients ([`notifying::on_notification`]); a
    /// list it announced is refreshed, to keep the cached copy current for outage answers.
    pub(super) fn on_child_notification(&mut self, m: Message) {
        if let Some(list) = notifying::on_notification(&mut self.notifying(), &m) {
            let far = base::deadline::after(self.clock.now(), self.cfg.request_timeout);
            self.send_to_child(
                Owner::Refresh {
                    method: list,
                    announce: false,
                },
                list,
                None,
                far,
            );
        }
    }

    /// Served listen streams get a handshake child's notification when they asked for it
    /// ([`notifying::feed_listeners`]).
    pub(super) fn feed_listeners(
        &mut self,
        method: &str,
        uri: Option<&str>,
        params: Option<&RawValue>,
    ) {
        notifying::feed_listeners(&mut self.notifying(), method, uri, params);
    }

    /// A reply the envelope parser refused (K21): fails its request only, naming the server.
    pub(super) fn on_malformed(&mut self, id: &RawValue, why: &str) {
        let Some(n) = id.get().parse::<u64>().ok() else {
            return;
        };
        if self.health.answered(n) {
            return;
        }
        let Some(removed) = self.routing.inflight_mut().remove(n) else {
            return;
        };
        match removed.value.owner {
            Owner::Client { client, id, .. } => {
                self.fail_malformed(client, &id, &removed.value.method, why)
            }
            Owner::Parked { round } => asking::on_parked_failure(&mut self.asking(), round, n, why),
            _ => {}
        }
    }

    /// Fails a client request whose reply from the child was malformed (K21): -32603 naming
    /// the server, the method and what is wrong.
    pub(super) fn fail_malformed(
        &mut self,
        client: ClientId,
        id: &RawValue,
        method: &str,
        problem: &str,
    ) {
        let (out, tel, at) = self.out();
        out.fail_malformed(tel, &at, client, id, method, problem);
    }

    /// A message of the upstream that is never relayed ([`unreachable::discarded`]).
    pub(super) fn on_discarded(&mut self, limit: Limit, was: Was) {
        let (size, depth) = (self.cfg.max_message_size, self.cfg.max_message_depth);
        match unreachable::discarded(&mut self.answering(), limit, was, size, depth) {
            Discarded::Done => {}
            Discarded::Parked {
                round,
                child_id,
                why,
            } => asking::on_parked_failure(&mut self.asking(), round, child_id, &why),
            Discarded::AsError(m) => self.on_child_response(m),
        }
    }
}

// ==============================================================================================
// Resource subscriptions (refcounted toward the child) and `subscriptions/listen` streams:
// the supervisor's own on a 2026 child, and served ones for 2026 clients of a handshake child.
// ==============================================================================================

impl Server {
    /// Opens (or re-opens, with the current resource subscriptions) the supervisor's own listen
    /// stream on a modern child, so handshake clients keep receiving list-changed and
    /// resource-updated notifications (issue 6 §4).
    pub(super) fn open_listen(&mut self) {
        if self.child_era() != Era::Modern || self.life.state() != State::Ready {
            return;
        }
        if let Some(old) = self.opener.replace_listen(None) {
            self.routing.inflight_mut().remove(old);
            self.cancel_upstream(
                old,
                "subscriptions changed",
                "notifications/cancelled for the old listen stream",
            );
        }
        let uris: Vec<&String> = self.subs.uris().collect();
        let p = raw(&json!({"notifications": {
            "toolsListChanged": true, "promptsListChanged": true, "resourcesListChanged": true,
            "resourceSubscriptions": uris,
        }}));
        // It lives until it is cancelled: no deadline.
        let id = self.send_to_child(Owner::Listen, "subscriptions/listen", Some(p), None);
        self.opener.replace_listen(id);
    }

    /// The subscription context ([`subscribing`]) at this moment.
    fn subscribing(&mut self) -> Subscribing<'_> {
        let at = stamp(&self.cfg.name, self.clock, &self.life);
        Subscribing::new(&mut self.subs, &mut self.outbox, &mut self.telemetry, at)
    }

    /// A modern client's `subscriptions/listen` on a handshake child
    /// ([`subscribing::serve_listen`]); a ready child is subscribed to the URIs nobody held.
    pub(super) fn serve_listen(&mut self, client: ClientId, m: Message) {
        let can_subscribe = self
            .opener
            .handshake()
            .is_some_and(|h| h.capabilities.pointer("/resources/subscribe") == Some(&json!(true)));
        let room = self.cfg.max_subscriptions.saturating_sub(
            subscribing::held_by(&self.routing, &self.subs, &self.held, client) + 1,
        );
        let fresh =
            subscribing::serve_listen(&mut self.subscribing(), client, m, can_subscribe, room);
        if self.life.state() == State::Ready {
            for uri in fresh {
                let far = base::deadline::after(self.clock.now(), self.cfg.request_timeout);
                self.send_to_child(
                    Owner::Internal,
                    "resources/subscribe",
                    Some(raw(&json!({"uri": uri}))),
                    far,
                );
            }
        }
    }

    /// Ends a client's served listen stream ([`subscribing::end_listener`]), unsubscribing the
    /// child from the URIs nobody holds any more. Returns whether the client had that stream.
    pub(super) fn end_listener(&mut self, client: ClientId, key: &str) -> bool {
        let Some(released) = subscribing::end_listener(&mut self.subscribing(), client, key) else {
            return false;
        };
        for uri in released {
            self.unsubscribe_child(&uri);
        }
        true
    }

    /// `resources/subscribe`/`unsubscribe` from a handshake client of a modern child
    /// ([`subscribing::subscription_on_modern`]); a change re-opens the supervisor's listen
    /// stream.
    pub(super) fn client_subscription_on_modern(&mut self, client: ClientId, m: Message) {
        if subscribing::subscription_on_modern(&mut self.subscribing(), client, m) {
            self.open_listen();
        }
    }

    /// Tells a ready handshake child that nobody holds `uri` any more.
    pub(super) fn unsubscribe_child(&mut self, uri: &str) {
        if self.life.state() == State::Ready && self.child_era() == Era::Handshake {
            let far = base::deadline::after(self.clock.now(), self.cfg.request_timeout);
            self.send_to_child(
                Owner::Internal,
                "resources/unsubscribe",
                Some(raw(&json!({"uri": uri}))),
                far,
            );
        }
    }

    /// Refcounted subscriptions toward a handshake child: true when answered here
    /// ([`subscribing::local_subscription`]).
    pub(super) fn local_subscription(&mut self, client: ClientId, m: &Message) -> bool {
        subscribing::local_subscription(&mut self.subscribing(), client, m)
    }
}

// ==============================================================================================
// Delivery to clients (one outcome per request) and outage answers: the list cache, the
// outage record, failing in-flight and held requests.
// ==============================================================================================

impl Server {
    /// The outbox with what its decisions read beside it: the telemetry handle and the facts
    /// of this moment (disjoint borrows of the server's fields).
    fn out(&mut self) -> (&mut Outbox, &mut Telemetry, Stamp<'_>) {
        let at = stamp(&self.cfg.name, self.clock, &self.life);
        (&mut self.outbox, &mut self.telemetry, at)
    }

    /// Ends a client request with its one outcome ([`Outbox::finish`]).
    pub(super) fn finish(
        &mut self,
        client: ClientId,
        key: &str,
        outcome: Outcome,
        code: Option<i64>,
    ) {
        let (out, tel, at) = self.out();
        out.finish(tel, &at, client, key, outcome, code);
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
        let (out, tel, at) = self.out();
        out.respond_error(tel, &at, client, id, code, msg, data, outcome);
    }

    /// Refuses a client request for a limit (`max_inflight`, `client_max_inflight`,
    /// `max_subscriptions`): -32002 with `msg`, outcome `denied`.
    pub(super) fn refuse_limit(&mut self, client: ClientId, id: &RawValue, msg: &str) {
        self.respond_error(client, id, code::LIMIT_EXCEEDED, msg, None, Outcome::Denied);
    }

    /// Answers a client request and finishes it ([`Outbox::respond`]).
    pub(super) fn respond(
        &mut self,
        client: ClientId,
        id: &RawValue,
        line: impl Into<Line>,
        outcome: Outcome,
        code: Option<i64>,
    ) {
        let (out, tel, at) = self.out();
        out.respond(tel, &at, client, id, line, outcome, code);
    }

    /// Delivers a session-wide line to every initialized client `filter` accepts
    /// ([`Outbox::broadcast`]).
    pub(super) fn broadcast(&mut self, line: &Bytes, filter: impl Fn(&Client) -> bool) {
        self.outbox.broadcast(&self.telemetry, line, filter);
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
                State::AuthRequired => OutageStatus::AuthRequired,
                // Ready but the request cannot reach the child (its input closed): it exits.
                State::Ready => OutageStatus::Exited,
            },
        }
    }

    /// The outage as an answer gives it now ([`Outage`]): the reason known (the
    /// supervisor's own cause while it stops a child that timed out, `start-timeout: ...`,
    /// else the last exit) and the delay until the next attempt.
    pub(super) fn outage_now(&self) -> Outage {
        let known = match self.life.stop_cause() {
            Some(StopCause::StartTimeout) => Some(Reason::StartTimeout(self.cfg.start_timeout)),
            Some(
                c @ (StopCause::ProbeTimeout
                | StopCause::StdinFailed
                | StopCause::StdoutClosed
                | StopCause::HandshakeRejected),
            ) => Some(Reason::Stopping(c)),
            _ => self.instances.last_exit().map(|e| Reason::Ended(e.reason)),
        };
        let retry = lifecycle::next_attempt(&self.life, &self.demand)
            .map(|t| t.saturating_duration_since(self.clock.now()));
        Outage::new(known, retry)
    }

    /// The outage answer's context ([`unreachable`]) at this moment.
    fn answering(&mut self) -> Answering<'_> {
        let signs_in = self.cfg.remote.as_ref().is_some_and(|r| r.oauth.is_some());
        let at = stamp(&self.cfg.name, self.clock, &self.life);
        Answering::new(
            &mut self.routing,
            &mut self.held,
            &mut self.outbox,
            &mut self.telemetry,
            at,
            self.instances.tail(),
            signs_in,
        )
    }

    /// Answers a request that cannot reach the child ([`unreachable::reply`]).
    pub(super) fn outage_reply(
        &mut self,
        client: ClientId,
        id: &RawValue,
        method: &str,
        status: OutageStatus,
    ) {
        let now = self.outage_now();
        unreachable::reply(&mut self.answering(), &now, client, id, method, status);
    }

    /// Answers a client request that failed for an outage, a limit or a deadline with the
    /// documented record ([`unreachable::answer`]), and finishes it in the request log.
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
        let failure = Failure {
            status,
            reason,
            retry,
            code,
            outcome,
        };
        unreachable::answer(&mut self.answering(), client, id, method, failure);
    }

    /// Answers every request in flight with the outage record ([`unreachable::fail_inflight`]);
    /// the rounds of parked requests end without a word.
    pub(super) fn fail_inflight(
        &mut self,
        status: OutageStatus,
        reason: Reason,
        retry: Option<Duration>,
    ) {
        let parked = unreachable::fail_inflight(&mut self.answering(), status, reason, retry);
        for round in parked {
            // The client holds an `input_required` result; its retry will find no round.
            self.drop_round(round, "server exited", false, false);
        }
    }

    /// Answers every held request with the outage record ([`unreachable::fail_all_held`]).
    pub(super) fn fail_held(&mut self, status: OutageStatus) {
        let now = self.outage_now();
        let known = self.opener.handshake().is_some();
        unreachable::fail_all_held(&mut self.answering(), &now, known, status);
    }
}

/// The facts of this moment for server `name`: its running instance (in `life`). A free
/// function, so that the stamp borrows only the name and the server's other fields stay free
/// for a context beside it.
fn stamp<'a>(name: &'a str, clock: super::clock::Clock, life: &Life) -> Stamp<'a> {
    Stamp::new(name, clock, life.child().map(|c| c.generation()))
}

/// The end of a remote session as an [`Exit`]: no code, no signal; `requested` when the
/// supervisor stopped it.
fn session_end(requested: bool) -> Exit {
    Exit {
        code: None,
        signal: None,
        requested,
        limit: None,
    }
}
