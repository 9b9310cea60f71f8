//! Liveness of one child instance, sans-IO: the health rules written once (issue 4, issue 12
//! §4; design decision 6).
//!
//! Owns: when the child was last heard, the one probe being awaited, the count of consecutive
//! probe timeouts, whether a client request went past its deadline unanswered, and what the
//! child was seen to do with `ping`. Knows nothing about bytes, clients or processes and never
//! reads a clock: every call takes `now`, so the rules are tested on a fake clock (`tests`
//! below).
//!
//! # The rules
//! - **Any message proves life** ([`Health::heard`]): a result, any error code, a notification,
//!   even a late answer. Hearing resets the miss count and the overdue mark.
//! - **A probe is sent only after `probe_interval` of silence**, only to a ready child, and
//!   **at most one probe is awaited at a time**: no new probe while one is unanswered, so a
//!   busy single-threaded child never finds a burst of queued probes after a long call (K24).
//!   Each `probe_timeout` that passes with the probe unanswered and nothing heard counts one
//!   miss. An awaited probe is given up ("lost") only when the child is heard meanwhile (it is
//!   processing past it) or when a confirming request replaces an unanswered `ping` (below).
//! - **Death** is `probe_failures` consecutive misses with nothing heard meanwhile, while no
//!   client request is still within its deadline ("slow is not dead"), or, once a client
//!   request has passed its deadline with nothing heard since it was written
//!   ([`Health::request_expired`]), as soon as the misses reach `probe_failures`: new traffic
//!   never postpones that verdict, and an overdue child with no probe out is probed at once.
//! - **`ping` may not be served** (K13, K14): an unanswered `ping` on a child that advertises a
//!   list is confirmed with that list request before it counts toward death; if the list is
//!   answered, `ping` is not sent again (the list is the probe from then on). A `ping` answered
//!   late but in order still proves that `ping` is served (K24). A child that exits while a
//!   `ping` is awaited is never sent `ping` again.

use std::time::{Duration, Instant};

/// The settings the rules use, from the server's configuration (`probe_*` keys).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthConfig {
    /// Silence before a probe is sent.
    pub probe_interval: Duration,
    /// How long one probe is waited for before it counts as a miss.
    pub probe_timeout: Duration,
    /// Consecutive misses that mean death (at least 1).
    pub probe_failures: u32,
}

/// What a probe asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeKind {
    /// `ping` (handshake era).
    Ping,
    /// Any other method: an advertised list confirming an unanswered `ping`, a list used
    /// because `ping` is not served, or `server/discover` (2026-07-28).
    Other,
}

/// What the child's era and handshake offer for probing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeMethods {
    /// The child speaks 2026-07-28: probe with `server/discover`, never `ping`.
    pub modern: bool,
    /// The cheapest list the child advertises (`tools/list`, ...), if any.
    pub confirm: Option<&'static str>,
}

/// What the core must do after a call into [`Health`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Nothing.
    None,
    /// Send this probe now and report it with [`Health::sent`].
    Probe(&'static str),
    /// The child is dead by the rules: stop it (reason `probe-timeout`).
    Dead {
        /// Consecutive misses when the verdict was reached.
        misses: u32,
    },
}

/// A probe written to the child and not answered yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Awaited {
    id: u64,
    kind: ProbeKind,
    /// When it was written.
    sent: Instant,
    /// When the current miss window started (the send, or the end of the previous window).
    window: Instant,
}

/// The health state of the current child instance (see the module doc for the rules).
#[derive(Debug, Clone)]
pub struct Health {
    cfg: HealthConfig,
    last_heard: Instant,
    awaited: Option<Awaited>,
    /// A `ping` given up on in the current silence (replaced by a confirming request); a late
    /// answer to it still proves `ping` is served.
    lost_ping: Option<u64>,
    misses: u32,
    /// In the current silence a `ping` went unanswered / a confirming request did too.
    ping_missed: bool,
    confirm_missed: bool,
    /// A client request passed its deadline with nothing heard since it was written.
    overdue: bool,
    /// Seen: `ping` is not answered (a confirming request was) / the child dies on `ping`.
    ping_unserved: bool,
    ping_kills: bool,
    probes_sent: u64,
    probes_answered: u64,
}

/// A snapshot for `status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthStatus {
    /// Probes sent to the current instance.
    pub probes_sent: u64,
    /// Probes answered by the current instance (any reply).
    pub probes_answered: u64,
    /// False once the child was seen not to answer (or to die on) `ping`.
    pub ping_served: bool,
}

impl Health {
    /// Rules with `cfg`; the child counts as heard at `now`.
    pub fn new(cfg: HealthConfig, now: Instant) -> Self {
        Health {
            cfg,
            last_heard: now,
            awaited: None,
            lost_ping: None,
            misses: 0,
            ping_missed: false,
            confirm_missed: false,
            overdue: false,
            ping_unserved: false,
            ping_kills: false,
            probes_sent: 0,
            probes_answered: 0,
        }
    }

    /// A new instance was spawned at `now`: per-instance state is cleared; what was learned
    /// about `ping` is kept (the same command serves the same methods).
    pub fn restart(&mut self, now: Instant) {
        *self = Health {
            cfg: self.cfg,
            ping_unserved: self.ping_unserved,
            ping_kills: self.ping_kills,
            ..Health::new(self.cfg, now)
        };
    }

    /// The configuration changed: new settings, and the `ping` verdicts are forgotten (a new
    /// command may serve other methods).
    pub fn reconfigure(&mut self, cfg: HealthConfig, now: Instant) {
        *self = Health::new(cfg, now);
    }

    /// Consecutive misses in the current silence.
    pub fn misses(&self) -> u32 {
        self.misses
    }

    /// When the child was last heard.
    pub fn last_heard(&self) -> Instant {
        self.last_heard
    }

    /// For `status`.
    pub fn status(&self) -> HealthStatus {
        HealthStatus {
            probes_sent: self.probes_sent,
            probes_answered: self.probes_answered,
            ping_served: !(self.ping_unserved || self.ping_kills),
        }
    }

    /// Whether a probe is awaited (for tests and the simulation's invariant).
    pub fn awaiting(&self) -> bool {
        self.awaited.is_some()
    }

    /// The child wrote a message at `now` (any message: proof of life). An awaited probe that
    /// the child has processed past is given up, so the next silence gets a fresh probe.
    pub fn heard(&mut self, now: Instant) {
        self.last_heard = now;
        self.misses = 0;
        self.overdue = false;
        self.confirm_missed = false;
        if let Some(a) = self.awaited {
            if now.saturating_duration_since(a.sent) >= self.cfg.probe_timeout {
                // Answered later traffic but not the probe within its timeout: lost.
                if a.kind == ProbeKind::Ping {
                    self.lost_ping = Some(a.id);
                    self.ping_missed = true;
                }
                self.awaited = None;
            }
        } else {
            self.ping_missed = self.ping_missed && self.lost_ping.is_some();
        }
    }

    /// The answer to child-side request `id` arrived. Returns whether it was a probe (then it
    /// is not routed anywhere). [`Health::heard`] is called separately for every message.
    pub fn answered(&mut self, id: u64) -> bool {
        if self.lost_ping == Some(id) {
            // Late but in order: `ping` is served after all (K24).
            self.lost_ping = None;
            self.ping_missed = false;
            self.ping_unserved = false;
            self.probes_answered += 1;
            return true;
        }
        let Some(a) = self.awaited.filter(|a| a.id == id) else {
            return false;
        };
        self.awaited = None;
        self.probes_answered += 1;
        match a.kind {
            ProbeKind::Ping => {
                self.ping_missed = false;
                self.ping_unserved = false;
            }
            ProbeKind::Other => {
                if self.lost_ping.is_some() {
                    // The confirming request was answered, the `ping` before it never was.
                    self.ping_unserved = true;
                }
            }
        }
        true
    }

    /// The method to probe with now, if any (see the module doc).
    pub fn probe_method(&self, m: ProbeMethods) -> Option<&'static str> {
        if m.modern {
            // 2026-07-28 has no ping; discover is side-effect free and must be served.
            return Some("server/discover");
        }
        if self.ping_unserved || self.ping_kills || self.ping_missed {
            // Without an advertised list there is nothing else to ask; a child that dies on
            // ping is then watched through its process status alone.
            return m.confirm.or(Some("ping").filter(|_| !self.ping_kills));
        }
        Some("ping")
    }

    /// The probe `id` asking `method` was written at `now`.
    pub fn sent(&mut self, id: u64, method: &str, now: Instant) {
        let kind = if method == "ping" {
            ProbeKind::Ping
        } else {
            ProbeKind::Other
        };
        self.awaited = Some(Awaited {
            id,
            kind,
            sent: now,
            window: now,
        });
        self.probes_sent += 1;
    }

    /// The next moment [`Health::tick`] has something to do, for a ready child.
    pub fn next_wake(&self, m: ProbeMethods) -> Option<Instant> {
        match self.awaited {
            Some(a) => Some(base::deadline::after(a.window, self.cfg.probe_timeout)),
            None if self.overdue => self.probe_method(m).map(|_| self.last_heard),
            None => self
                .probe_method(m)
                .map(|_| base::deadline::after(self.last_heard, self.cfg.probe_interval)),
        }
    }

    /// A client request written at `written` passed its deadline at `now` unanswered. If
    /// nothing was heard since it was written, the child is overdue: the probes decide at once.
    pub fn request_expired(&mut self, written: Instant) {
        if self.last_heard <= written {
            self.overdue = true;
        }
    }

    /// Applies the rules at `now` to a ready child. `busy`: a client request is in flight
    /// within its deadline.
    pub fn tick(&mut self, now: Instant, busy: bool, m: ProbeMethods) -> Action {
        let Some(a) = self.awaited else {
            let due = if self.overdue {
                true
            } else {
                now >= base::deadline::after(self.last_heard, self.cfg.probe_interval)
            };
            return match self.probe_method(m) {
                Some(method) if due => Action::Probe(method),
                _ => Action::None,
            };
        };
        if now < base::deadline::after(a.window, self.cfg.probe_timeout) {
            return Action::None;
        }
        // A full window passed with the probe unanswered (hearing anything would have ended
        // the wait or reset the count): one miss; the same probe is awaited for another window.
        self.misses = self.misses.saturating_add(1);
        self.awaited = Some(Awaited { window: now, ..a });
        match a.kind {
            ProbeKind::Ping => self.ping_missed = true,
            ProbeKind::Other => self.confirm_missed = true,
        }
        let excused = busy && !self.overdue;
        let confirm = m.confirm.filter(|_| !m.modern);
        if a.kind == ProbeKind::Ping && !self.confirm_missed && !excused {
            if let Some(method) = confirm {
                // An unanswered ping alone is not death while an advertised request is untried.
                self.lost_ping = Some(a.id);
                self.awaited = None;
                return Action::Probe(method);
            }
        }
        if self.misses >= self.cfg.probe_failures && !excused {
            return Action::Dead {
                misses: self.misses,
            };
        }
        Action::None
    }

    /// The child exited by itself (`requested`: our stop did it). Returns true when this shows
    /// the child dies on `ping` (it exited while a `ping` was awaited; K14), the first time.
    pub fn exited(&mut self, requested: bool) -> bool {
        let on_ping = self.awaited.is_some_and(|a| a.kind == ProbeKind::Ping);
        self.awaited = None;
        self.lost_ping = None;
        if on_ping && !requested && !self.ping_kills {
            self.ping_kills = true;
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    //! Table tests on a fake clock: `t(ms)` is a moment, every call gets it explicitly.
    use super::*;

    fn cfg(interval: u64, timeout: u64, failures: u32) -> HealthConfig {
        HealthConfig {
            probe_interval: Duration::from_millis(interval),
            probe_timeout: Duration::from_millis(timeout),
            probe_failures: failures,
        }
    }

    struct Clock(Instant);
    impl Clock {
        fn t(&self, ms: u64) -> Instant {
            self.0 + Duration::from_millis(ms)
        }
    }

    const TOOLS: ProbeMethods = ProbeMethods {
        modern: false,
        confirm: Some("tools/list"),
    };
    const BARE: ProbeMethods = ProbeMethods {
        modern: false,
        confirm: None,
    };
    const MODERN: ProbeMethods = ProbeMethods {
        modern: true,
        confirm: Some("tools/list"),
    };

    /// Drives `h` every `step` ms from `from` to `to`, sending each asked probe with ids from
    /// `next`, and returns (time, action) of every non-empty action, up to a death.
    #[allow(clippy::too_many_arguments)]
    fn run(
        h: &mut Health,
        c: &Clock,
        from: u64,
        to: u64,
        step: u64,
        busy: impl Fn(u64) -> bool,
        m: ProbeMethods,
        next: &mut u64,
    ) -> Vec<(u64, Action)> {
        let mut out = Vec::new();
        let mut ms = from;
        while ms <= to {
            let a = h.tick(c.t(ms), busy(ms), m);
            if let Action::Probe(method) = a {
                h.sent(*next, method, c.t(ms));
                *next += 1;
            }
            if a != Action::None {
                out.push((ms, a));
            }
            if matches!(a, Action::Dead { .. }) {
                // The core stops the child: no more ticks for this instance.
                break;
            }
            ms += step;
        }
        out
    }

    #[test]
    fn no_probe_before_probe_interval_of_silence() {
        let c = Clock(Instant::now());
        let mut h = Health::new(cfg(1000, 500, 2), c.t(0));
        assert_eq!(h.tick(c.t(999), false, BARE), Action::None);
        assert_eq!(h.tick(c.t(1000), false, BARE), Action::Probe("ping"));
        assert_eq!(h.next_wake(BARE), Some(c.t(1000)));
    }

    #[test]
    fn hearing_anything_postpones_the_probe() {
        let c = Clock(Instant::now());
        let mut h = Health::new(cfg(1000, 500, 2), c.t(0));
        h.heard(c.t(800));
        assert_eq!(h.tick(c.t(1000), false, BARE), Action::None);
        assert_eq!(h.next_wake(BARE), Some(c.t(1800)));
    }

    #[test]
    fn a_silent_child_dies_after_probe_failures_misses_of_one_probe() {
        let c = Clock(Instant::now());
        let mut h = Health::new(cfg(1000, 500, 3), c.t(0));
        let mut next = 1;
        let got = run(&mut h, &c, 0, 4000, 50, |_| false, BARE, &mut next);
        assert_eq!(
            got,
            vec![
                (1000, Action::Probe("ping")),
                (2500, Action::Dead { misses: 3 })
            ]
        );
        assert_eq!(next, 2, "one probe, awaited across three windows");
    }

    #[test]
    fn case_k24_busy_child_gets_one_probe_and_a_late_ping_proves_ping_served() {
        // probe_interval 1 s, probe_timeout 1 s, probe_failures 2; a call of 8 s within its
        // 30 s deadline keeps the child busy.
        let c = Clock(Instant::now());
        let mut h = Health::new(cfg(1000, 1000, 2), c.t(0));
        let mut next = 1;
        let got = run(&mut h, &c, 0, 8000, 10, |_| true, TOOLS, &mut next);
        assert_eq!(
            got,
            vec![(1000, Action::Probe("ping"))],
            "one probe, no death"
        );
        assert!(h.awaiting());
        // At 8 s the call's result arrives, then the ping's answer (in order).
        h.heard(c.t(8000));
        h.heard(c.t(8001));
        assert!(h.answered(1), "the late answer is the probe's");
        assert!(h.status().ping_served);
        assert_eq!(h.probe_method(TOOLS), Some("ping"), "ping stays the probe");
    }

    #[test]
    fn case_k14_unanswered_ping_is_confirmed_then_the_list_is_the_probe() {
        let c = Clock(Instant::now());
        let mut h = Health::new(cfg(1000, 500, 2), c.t(0));
        let mut next = 1;
        let got = run(&mut h, &c, 0, 1500, 50, |_| false, TOOLS, &mut next);
        assert_eq!(
            got,
            vec![
                (1000, Action::Probe("ping")),
                (1500, Action::Probe("tools/list"))
            ]
        );
        // The list is answered; the ping never is.
        h.heard(c.t(1510));
        assert!(h.answered(2));
        assert!(!h.status().ping_served);
        assert_eq!(h.probe_method(TOOLS), Some("tools/list"));
        let got = run(&mut h, &c, 1550, 2600, 50, |_| false, TOOLS, &mut next);
        assert_eq!(got, vec![(2550, Action::Probe("tools/list"))]);
    }

    #[test]
    fn an_unanswered_ping_and_confirm_mean_death() {
        let c = Clock(Instant::now());
        let mut h = Health::new(cfg(1000, 500, 2), c.t(0));
        let mut next = 1;
        let got = run(&mut h, &c, 0, 3000, 50, |_| false, TOOLS, &mut next);
        assert_eq!(
            got,
            vec![
                (1000, Action::Probe("ping")),
                (1500, Action::Probe("tools/list")),
                (2000, Action::Dead { misses: 2 }),
            ]
        );
    }

    #[test]
    fn slow_is_not_dead_while_a_request_is_within_its_deadline() {
        let c = Clock(Instant::now());
        let mut h = Health::new(cfg(1000, 500, 2), c.t(0));
        let mut next = 1;
        let got = run(&mut h, &c, 0, 10_000, 50, |ms| ms < 6000, BARE, &mut next);
        assert_eq!(
            got,
            vec![
                (1000, Action::Probe("ping")),
                (6000, Action::Dead { misses: 10 })
            ]
        );
    }

    #[test]
    fn an_overdue_request_ends_the_excuse_and_new_traffic_cannot_postpone_it() {
        // A hung child under a request every 0.5 s with a 3 s request timeout: every new
        // request keeps "busy" true, but the first request that expired with nothing heard
        // since it was written makes the probes decide.
        let c = Clock(Instant::now());
        let mut h = Health::new(cfg(30_000, 1000, 2), c.t(0));
        let mut next = 1;
        // Request written at 100 ms, expired at 3100 ms; nothing heard.
        assert_eq!(h.tick(c.t(3000), true, BARE), Action::None);
        h.request_expired(c.t(100));
        assert_eq!(h.next_wake(BARE), Some(c.t(0)), "probe at once");
        let got = run(&mut h, &c, 3100, 10_000, 50, |_| true, BARE, &mut next);
        assert_eq!(
            got,
            vec![
                (3100, Action::Probe("ping")),
                (5100, Action::Dead { misses: 2 })
            ]
        );
    }

    #[test]
    fn an_expired_request_is_not_overdue_when_the_child_spoke_since() {
        let c = Clock(Instant::now());
        let mut h = Health::new(cfg(30_000, 1000, 2), c.t(0));
        h.heard(c.t(2000));
        h.request_expired(c.t(100));
        assert_eq!(h.tick(c.t(3100), true, BARE), Action::None);
        assert_eq!(h.next_wake(BARE), Some(c.t(32_000)));
    }

    #[test]
    fn any_message_during_the_wait_resets_the_misses() {
        let c = Clock(Instant::now());
        let mut h = Health::new(cfg(1000, 500, 2), c.t(0));
        let mut next = 1;
        run(&mut h, &c, 0, 1500, 50, |_| false, BARE, &mut next);
        // One miss at 1500; the child then says something (a notification).
        h.heard(c.t(1700));
        assert!(
            !h.awaiting(),
            "the unanswered probe is given up once the child speaks"
        );
        let got = run(&mut h, &c, 1750, 4000, 50, |_| false, BARE, &mut next);
        assert_eq!(
            got,
            vec![
                (2700, Action::Probe("ping")),
                (3700, Action::Dead { misses: 2 })
            ],
            "a fresh count: two new misses"
        );
    }

    #[test]
    fn modern_children_are_probed_with_discover_only() {
        let c = Clock(Instant::now());
        let mut h = Health::new(cfg(1000, 500, 1), c.t(0));
        let mut next = 1;
        let got = run(&mut h, &c, 0, 2000, 50, |_| false, MODERN, &mut next);
        assert_eq!(
            got,
            vec![
                (1000, Action::Probe("server/discover")),
                (1500, Action::Dead { misses: 1 })
            ]
        );
    }

    #[test]
    fn a_child_that_dies_on_ping_is_never_pinged_again() {
        let c = Clock(Instant::now());
        let mut h = Health::new(cfg(1000, 500, 2), c.t(0));
        h.sent(1, "ping", c.t(1000));
        assert!(h.exited(false));
        h.restart(c.t(2000));
        assert_eq!(h.probe_method(BARE), None);
        assert_eq!(h.probe_method(TOOLS), Some("tools/list"));
        assert!(!h.status().ping_served);
        h.reconfigure(cfg(1000, 500, 2), c.t(3000));
        assert_eq!(
            h.probe_method(BARE),
            Some("ping"),
            "a new command is tried again"
        );
    }

    #[test]
    fn a_requested_stop_during_a_ping_proves_nothing() {
        let c = Clock(Instant::now());
        let mut h = Health::new(cfg(1000, 500, 2), c.t(0));
        h.sent(1, "ping", c.t(1000));
        assert!(!h.exited(true));
        assert!(h.status().ping_served);
    }

    #[test]
    fn answers_to_other_ids_are_not_probes() {
        let c = Clock(Instant::now());
        let mut h = Health::new(cfg(1000, 500, 2), c.t(0));
        h.sent(7, "ping", c.t(1000));
        assert!(!h.answered(8));
        assert!(h.answered(7));
        assert!(!h.answered(7), "one answer per probe");
        assert_eq!(h.status().probes_answered, 1);
    }
}

#[cfg(test)]
#[path = "health_sim.rs"]
mod simulation;
