//! The server's lifecycle: spawn, the era opener, operator verbs, exits and what follows
//! them (backoff, failed), readiness; the events from the child and from client sessions.

use super::effects::Effect;
use super::held::Held;
use super::life::Life;
use super::util::{health_config, level_name};
use super::{Lane, Owner, Server, SpawnOutcome, State};
use crate::child::backoff::{FAILED_RETRY, MAX_FAILED_STARTS};
use crate::child::process;
use crate::child::process::Exit;
use crate::config::{RestartPolicy, ServerConfig};
use crate::jsonrpc::message;
use crate::jsonrpc::message::{code, raw, Out};
use crate::logging::{MSG_BACKOFF, MSG_EXITED, MSG_FAILED, MSG_READY, MSG_SPAWNED};
use crate::mux::era;
use crate::mux::era::{ChildProtocol, Era, Handshake};
use crate::mux::outage::{ExitReason, OutageStatus, Reason, StopCause};
use crate::mux::session::SessionEvent;
use crate::observe::Outcome;
use crate::upstream::Upstream;
use crate::upstream::{Event, Lost, Spec};
use serde_json::json;
use std::time::Instant;
use tracing::{debug, error, info, warn};

impl Server {
    /// Spawns the next instance now, or, when the daemon's spawn budget is spent (R11), as
    /// soon as it allows (the state waits in `backoff`; no failure is counted).
    pub(super) fn spawn(&mut self) {
        if self.admit_spawn() {
            self.spawn_now();
        }
    }

    /// Whether the spawn budget allows a spawn now; if not, the pending spawn is moved to when
    /// it does and this says so in the log.
    pub(super) fn admit_spawn(&mut self) -> bool {
        match self.instances.admit(self.clock.now()) {
            Ok(()) => true,
            Err(at) => {
                let wait = at.saturating_duration_since(self.clock.now());
                info!(
                    spawn_in_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                    "the daemon's spawn budget is spent ({} per second, burst {}); spawning later",
                    crate::child::budget::RATE,
                    crate::child::budget::BURST
                );
                self.life.defer_spawn(at);
                false
            }
        }
    }

    /// Starts spawning the next instance, off the actor's thread (issue 27 §3): the state is
    /// `starting` (`Life::Spawning`) until [`Server::on_spawned`] gets the outcome.
    pub(super) fn spawn_now(&mut self) {
        let generation = self.instances.next();
        self.shell.effects().push(Effect::Spawn {
            spec: Spec::Process(Box::new(process::SpawnSpec::of(&self.cfg))),
            generation,
            tail: self.instances.tail().clone(),
        });
        self.life = Life::Spawning {
            generation,
            deadline: crate::deadline::after(self.clock.now(), self.cfg.start_timeout),
            cancel: None,
        };
    }

    /// The outcome of the spawn of instance `generation`: open the session with it (or stop
    /// it at once for a stop asked meanwhile), or handle the spawn error. A result of a spawn
    /// no longer awaited is dropped, which stops its instance.
    pub(super) fn on_spawned(&mut self, generation: u64, spawned: SpawnOutcome) {
        match spawned {
            Ok(child) => {
                let pid = child.pid();
                match self.life.spawned(generation, child) {
                    Err(stale) => {
                        warn!(
                            child_pid = stale.pid(),
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
                        self.ladder_if_due();
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
                self.record_exit(ExitReason::SpawnError);
                // Spawn errors have no stderr; keep the reason where users look for it.
                self.instances.note(&e.to_string());
                match cancel {
                    // The stop asked meanwhile decides: nothing to stop, it stays stopped.
                    Some(StopCause::Shutdown | StopCause::Stop) => {}
                    _ if self.lazy_start() => {
                        self.after_failed_lazy_start(self.clock.now(), "spawn-error");
                        self.fail_held(OutageStatus::Failed);
                    }
                    _ if e.permanent => {
                        self.enter_failed(&format!("{e}; fix the command and run `start`"))
                    }
                    _ => self.schedule_restart(self.clock.now(), false),
                }
            }
        }
    }

    /// A fresh instance is `starting`: restart the health clock and send the first message,
    /// which pins a dual-era child and kills an old strict one, so the era is decided before
    /// anything else is sent (protocol.md Implications 4).
    fn open_session(&mut self) {
        self.shell.panic_on_spawn(&self.cfg.name);
        let deadline = self
            .life
            .start_deadline()
            .unwrap_or_else(|| crate::deadline::after(self.clock.now(), self.cfg.start_timeout));
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
                    crate::deadline::after(self.clock.now(), self.cfg.era_probe_timeout);
                self.send_discover(true, probe_deadline.min(deadline));
            }
        }
    }

    pub(super) fn send_initialize(&mut self, version: &str) {
        let deadline = self
            .life
            .start_deadline()
            .unwrap_or_else(|| crate::deadline::after(self.clock.now(), self.cfg.start_timeout));
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

    pub(super) fn enter_failed(&mut self, why: &str) {
        error!(message_id = MSG_FAILED, reason = %why, restart_n = self.instances.restarts(),
            retry_in_s = FAILED_RETRY.as_secs(), "failed: {why}");
        self.life = Life::Failed {
            retry_at: Some(self.clock.now() + FAILED_RETRY),
        };
        self.fail_held(OutageStatus::Failed);
    }

    pub(super) fn begin_shutdown(&mut self) {
        if self.life.state() == State::Stopped {
            return;
        }
        self.fail_held(OutageStatus::Stopped);
        // The shutdown decides what follows the exit, whatever stop was under way.
        if !self.stop_life(StopCause::Shutdown, true) {
            self.life = Life::Stopped;
        }
    }

    pub(super) fn operator_stop(&mut self) {
        info!("stop requested");
        self.fail_held(OutageStatus::Stopped);
        // The operator's stop overrules a health or restart stop under way: it stays stopped.
        if !self.stop_life(StopCause::Stop, true) {
            self.life = Life::Stopped;
        }
    }

    pub(super) fn operator_start(&mut self) {
        self.instances.reset();
        if !self.life.has_instance() {
            info!("start requested");
            self.spawn();
        }
    }

    pub(super) fn operator_restart(&mut self) {
        if self.life.state() == State::Idle {
            // Nothing to restart: a start, not a restart.
            return self.operator_start();
        }
        info!("restart requested");
        self.instances.reset();
        if self.life.has_instance() {
            self.stop_child(StopCause::Restart);
        } else {
            self.instances.count_restart();
            self.spawn();
        }
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
                let line = Out::request(None, "notifications/roots/list_changed", None).encode();
                self.write_child(line, Lane::Urgent, "notifications/roots/list_changed");
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

    /// [`Life::stop`], and the stop ladder's effect when it moved a child to `stopping`.
    fn stop_life(&mut self, cause: StopCause, overrule: bool) -> bool {
        let stopping = self.life.stop(cause, overrule);
        self.ladder_if_due();
        stopping
    }

    /// Decides the stop ladder of a child that entered `stopping` (`Effect::Stop`).
    fn ladder_if_due(&mut self) {
        if let Some(generation) = self.life.stop_due() {
            self.shell.effects().push(Effect::Stop { generation });
        }
    }

    pub(super) fn stop_child(&mut self, cause: StopCause) {
        if self.life.can_stop() {
            if cause == StopCause::Idle {
                info!(reason = cause.reason(), "stopping the child");
            } else {
                warn!(reason = cause.reason(), "stopping the child");
            }
            // No probes, no forwarding while the ladder runs; the exit decides what next.
            self.stop_life(cause, false);
        }
    }

    pub(super) fn record_exit(&mut self, reason: ExitReason) {
        self.instances.record_exit(reason, self.clock.wall());
    }

    pub(super) fn on_exit(&mut self, exit: Exit) {
        let Some(ended) = self.life.take() else {
            // Exits are filtered by generation, so this is the current child; be safe anyway.
            warn!("an exit with no child running was ignored");
            return;
        };
        let (child, cause, ready_since) = (ended.child, ended.cause, ended.ready_since);
        self.instances.publish_pid(0);
        let now = self.clock.now();
        let why = ExitReason::of(cause, exit);
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
            info!(child_pid = child.pid(), "stopped: idle");
            self.fail_inflight(OutageStatus::Idle, ended, None);
            return self.after_idle_stop();
        }
        self.record_exit(why);
        let tail = self.instances.tail().last_lines(3);
        let operator = matches!(
            cause,
            Some(StopCause::Shutdown | StopCause::Stop | StopCause::Restart)
        );
        let signal = exit.signal.map(process::signal_name);
        if operator {
            info!(message_id = MSG_EXITED, child_pid = child.pid(), exit_code = exit.code,
                signal = signal.as_deref(), reason = %reason, restart_n = self.instances.restarts(), "stopped");
        } else {
            warn!(message_id = MSG_EXITED, child_pid = child.pid(), exit_code = exit.code,
                signal = signal.as_deref(), reason = %reason, restart_n = self.instances.restarts(),
                stderr_tail = %tail, "exited");
        }
        let status = if cause
            .is_some_and(|c| matches!(c, StopCause::StartTimeout | StopCause::ProbeTimeout))
        {
            OutageStatus::Timeout
        } else if operator {
            OutageStatus::Stopped
        } else {
            OutageStatus::Exited
        };
        // Decide what comes next before failing requests, so errors can say when we retry.
        self.decide_after_exit(
            child.as_ref(),
            exit,
            cause,
            &reason,
            ready_since,
            probing_era,
        );
        if self.life.state() == State::Backoff && cause != Some(StopCause::Restart) {
            let class = match (status, exit.signal, exit.limit) {
                // A limit's kill is a SIGKILL, but the operator's question is which limit.
                (_, _, Some(limit)) => limit.reason(),
                (OutageStatus::Exited, Some(_), None) => "signal",
                (s, _, None) => s.as_str(),
            };
            self.telemetry.metrics().restart(class);
        }
        let retry_after = self
            .next_attempt()
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
        if matches!(cause, Some(StopCause::Shutdown | StopCause::Stop)) {
            self.life = Life::Stopped;
        } else if probing_era && !exit.requested && !matches!(exit.code, Some(126 | 127 | 78)) {
            // Old strict servers exit when their first message is not `initialize`: that is a
            // verdict, not a failed start. Respawn at once in the handshake era (issue 6 §1).
            self.set_verdict(
                Era::Handshake,
                "the child exited on the server/discover probe",
            );
            // Still never two spawns closer than backoff_initial (R9).
            self.life = Life::Backoff {
                until: crate::deadline::after(child.started_at(), self.cfg.backoff_initial)
                    .max(now),
                probe_respawn: true,
                restart: true,
            };
        } else if cause == Some(StopCause::Restart) {
            self.life = Life::Backoff {
                until: now,
                probe_respawn: false,
                restart: true,
            };
        } else if ready_since.is_none() && self.lazy_start() {
            self.after_failed_lazy_start(child.started_at(), reason);
        } else if ready_since.is_none() {
            let failed_starts = self.instances.failed_start();
            let permanent = matches!(exit.code, Some(126 | 127 | 78));
            if permanent {
                self.enter_failed(&format!(
                    "{reason}: the command cannot run (exit codes 126, 127, 78 are not retried)"
                ));
            } else if failed_starts >= MAX_FAILED_STARTS {
                self.enter_failed(&format!(
                    "{failed_starts} consecutive failed starts, last {reason}"
                ));
            } else {
                self.after_exit(now, child, exit, cause, ready_since);
            }
        } else {
            self.after_exit(now, child, exit, cause, ready_since);
        }
    }

    pub(super) fn after_exit(
        &mut self,
        now: Instant,
        child: &dyn Upstream,
        exit: Exit,
        cause: Option<StopCause>,
        ready_since: Option<Instant>,
    ) {
        let restart = match self.cfg.restart {
            RestartPolicy::Always => true,
            RestartPolicy::OnFailure => cause.is_some() || !exit.clean(),
            RestartPolicy::Never => false,
        };
        if restart {
            let delay = self.instances.backoff(now, child.started_at(), ready_since);
            self.life = Life::Backoff {
                until: crate::deadline::after(now, delay),
                probe_respawn: false,
                restart: true,
            };
            info!(message_id = MSG_BACKOFF, restart_n = self.instances.restarts() + 1,
                backoff_ms = delay.as_millis() as u64, attempt = self.instances.failures(),
                reason = %exit.reason(), "restarting after backoff");
        } else {
            if exit.clean() {
                info!(policy = ?self.cfg.restart, "not restarting (restart policy)");
            } else {
                error!(message_id = MSG_FAILED, reason = %exit.reason(), restart_n = self.instances.restarts(),
                    policy = ?self.cfg.restart, "failed: not restarting (restart policy)");
            }
            self.life = if exit.clean() {
                Life::Stopped
            } else {
                Life::Failed { retry_at: None }
            };
            self.fail_held(if exit.clean() {
                OutageStatus::Stopped
            } else {
                OutageStatus::Failed
            });
        }
    }

    pub(super) fn schedule_restart(&mut self, now: Instant, _ready: bool) {
        let delay = self.instances.backoff(now, now, None);
        self.life = Life::Backoff {
            until: crate::deadline::after(now, delay),
            probe_respawn: false,
            restart: true,
        };
        info!(
            message_id = MSG_BACKOFF,
            restart_n = self.instances.restarts() + 1,
            backoff_ms = delay.as_millis() as u64,
            attempt = self.instances.failures(),
            reason = "spawn-error",
            "restarting after backoff"
        );
        if self.instances.failed_start() >= MAX_FAILED_STARTS {
            self.enter_failed("too many consecutive failed starts");
        }
    }

    pub(super) fn on_ready(&mut self, hs: Handshake) {
        info!(message_id = MSG_READY, child_pid = self.life.child().map(|c| c.pid()),
            restart_n = self.instances.restarts(), protocol_version = %hs.protocol_version, "ready");
        let first = self.opener.ready(hs);
        self.life.ready(self.clock.now());
        self.demand_ready();
        self.instances.ready();
        self.open_listen();
        if !first || self.instances.generation() > 1 {
            self.restarts_after_ready();
        }
        self.prefetch_lists();
        // Clients whose `initialize` waited for the child (concurrent first handshakes, K10).
        let held: Vec<Held> = self.held.drain();
        for h in held {
            // Already in the ledger since arrival: its duration includes the wait.
            self.dispatch_request(h.client, h.msg);
        }
    }

    /// After a restart: replay log level and subscriptions, then re-read the lists and announce
    /// only real changes (issue 5 §4).
    pub(super) fn restarts_after_ready(&mut self) {
        let far = crate::deadline::after(self.clock.now(), self.cfg.request_timeout);
        let handshake_child = self.child_era() == Era::Handshake;
        if let Some(level) = self.opener.log_level().filter(|_| handshake_child) {
            let p = raw(&json!({"level": level_name(level)}));
            self.send_to_child(Owner::Internal, "logging/setLevel", Some(p), far);
        }
        let uris: Vec<String> = if handshake_child {
            self.subs.uris().cloned().collect()
        } else {
            Vec::new()
        };
        for uri in uris {
            self.send_to_child(
                Owner::Internal,
                "resources/subscribe",
                Some(raw(&json!({"uri": uri}))),
                far,
            );
        }
        let cached = self.lists.methods();
        for method in cached {
            self.send_to_child(
                Owner::Refresh {
                    method,
                    announce: true,
                },
                method,
                None,
                far,
            );
        }
    }

    /// Reads the lists the child advertises and nobody asked for yet, so an outage can be
    /// answered with the last real list from the start (issue 5 §3).
    pub(super) fn prefetch_lists(&mut self) {
        let Some(hs) = self.opener.handshake() else {
            return;
        };
        let missing: Vec<&'static str> = era::LISTS
            .iter()
            .filter(|(m, _, cap)| hs.has(cap) && !self.lists.has(m))
            .map(|(m, _, _)| *m)
            .collect();
        let far = crate::deadline::after(self.clock.now(), self.cfg.request_timeout);
        for method in missing {
            self.send_to_child(
                Owner::Refresh {
                    method,
                    announce: false,
                },
                method,
                None,
                far,
            );
        }
    }

    /// An event of the upstream (the seam, `crate::upstream`): one of the current instance's,
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
            Event::Oversized(_, len, id) => {
                self.heard();
                self.on_oversized(len, id);
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
                self.stop_child(StopCause::StdinFailed);
            }
            Event::Lost(_, Lost::Exited(exit)) => self.on_exit(exit),
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
                self.clients.connect(id, tx, peer);
                self.telemetry.metrics().set_clients(self.clients.len());
            }
            SessionEvent::Message(id, m) => {
                if self.clients.contains_key(&id) {
                    self.on_client_message(id, m)
                }
            }
            SessionEvent::Rejected(id, code) => {
                let (uid, pid) = self
                    .clients
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
                if let Some(c) = self.clients.get_mut(&id) {
                    c.close_input();
                }
                // It can no longer answer the child's requests.
                self.fail_upstream_of(id, "the client that was asked closed its input");
                self.close_if_done(id);
            }
            SessionEvent::Disconnected(id) => self.drop_client(id),
        }
    }
}
