//! Deterministic simulation of the health rules (issue 12 §7, the health slice): seeded
//! random children (responsive, ignoring `ping`, busy on one long call, hung for good) under
//! random client traffic on a virtual clock. After every step: at most one probe is awaited
//! and at most two are written per silence (a `ping` and its confirmation); a child that
//! answers is never declared dead; a hung child is declared dead within the bound of the
//! rules. `MCPSUP_SIM_SEED=N` replays one seed; `MCPSUP_SIM_EVENTS=N` sets the total.
use super::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    /// Answers everything within the probe timeout.
    Responsive,
    /// Never answers `ping`; answers everything else promptly.
    IgnoresPing,
    /// One call from `from` to `until` blocks everything (single-threaded); in order after.
    Busy { from: u64, until: u64 },
    /// Silent from `at` on.
    Hung { at: u64 },
}

struct Sim {
    rng: StdRng,
    cfg: HealthConfig,
    methods: ProbeMethods,
    kind: Kind,
    request_timeout: u64,
    now: u64,
    /// Answers the child will write: (due, child-side id or 0 for a non-probe message).
    answers: Vec<(u64, u64)>,
    /// Client requests in flight: (written, deadline, answered at).
    requests: Vec<(u64, u64, Option<u64>)>,
    next_id: u64,
    written_in_silence: u32,
    events: u64,
}

fn ms(d: Duration) -> u64 {
    d.as_millis() as u64
}

impl Sim {
    fn new(seed: u64) -> Sim {
        let mut rng = StdRng::seed_from_u64(seed);
        let cfg = HealthConfig {
            probe_interval: Duration::from_millis(rng.gen_range(100..3000)),
            probe_timeout: Duration::from_millis(rng.gen_range(50..1500)),
            probe_failures: rng.gen_range(1..5),
        };
        let methods = match rng.gen_range(0..3) {
            0 => ProbeMethods {
                modern: false,
                confirm: Some("tools/list"),
            },
            1 => ProbeMethods {
                modern: false,
                confirm: None,
            },
            _ => ProbeMethods {
                modern: true,
                confirm: Some("tools/list"),
            },
        };
        let request_timeout = rng.gen_range(500..20_000);
        let kind = match rng.gen_range(0..4) {
            0 => Kind::Responsive,
            1 if methods.confirm.is_some() || methods.modern => Kind::IgnoresPing,
            1 => Kind::Responsive,
            2 => {
                let from = rng.gen_range(0..20_000);
                Kind::Busy {
                    from,
                    until: from + rng.gen_range(1..request_timeout),
                }
            }
            _ => Kind::Hung {
                at: rng.gen_range(0..30_000),
            },
        };
        Sim {
            rng,
            cfg,
            methods,
            kind,
            request_timeout,
            now: 0,
            answers: Vec::new(),
            requests: Vec::new(),
            next_id: 1,
            written_in_silence: 0,
            events: 0,
        }
    }

    /// When a message written now would be answered, if ever.
    fn answer_time(&mut self, probe_method: Option<&str>) -> Option<u64> {
        let quick = self.rng.gen_range(0..ms(self.cfg.probe_timeout).max(2) / 2);
        match self.kind {
            Kind::Hung { at } if self.now >= at => None,
            Kind::IgnoresPing if probe_method == Some("ping") && !self.methods.modern => None,
            Kind::Busy { from, until } if self.now >= from && self.now < until => {
                Some(until + quick)
            }
            _ => Some(self.now + quick),
        }
    }

    fn hung_since(&self) -> Option<u64> {
        match self.kind {
            Kind::Hung { at } if self.now >= at => Some(at),
            _ => None,
        }
    }

    /// One run: returns the number of events it took.
    fn run(&mut self, h: &mut Health, budget: u64, t0: Instant) -> u64 {
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let step_max = ms(self.cfg.probe_timeout).max(4) / 2;
        while self.events < budget {
            self.events += 1;
            self.now += self.rng.gen_range(1..=step_max);
            // The child's writes that are due, in order.
            self.answers.sort();
            while self
                .answers
                .first()
                .is_some_and(|(due, _)| *due <= self.now)
            {
                let (due, id) = self.answers.remove(0);
                if self.hung_since().is_some_and(|h| due >= h) {
                    continue;
                }
                h.heard(at(due.max(self.now)));
                self.written_in_silence = 0;
                if id != 0 {
                    h.answered(id);
                }
                for r in &mut self.requests {
                    if r.2.is_none() && due >= r.0 {
                        r.2 = Some(due);
                        break;
                    }
                }
            }
            // Client traffic.
            if self.rng.gen_bool(0.2) {
                let written = self.now;
                self.requests
                    .push((written, written + self.request_timeout, None));
                if let Some(t) = self.answer_time(None) {
                    self.answers.push((t, 0));
                }
            }
            let now = self.now;
            let mut expired = Vec::new();
            self.requests.retain(|r| {
                if r.2.is_none() && r.1 <= now {
                    expired.push(r.0);
                    return false;
                }
                r.2.is_none()
            });
            for written in expired {
                h.request_expired(at(written));
            }
            let busy = self.requests.iter().any(|r| r.1 > now);
            match h.tick(at(now), busy, self.methods) {
                Action::None => {}
                Action::Probe(method) => {
                    assert!(
                        self.written_in_silence < 2,
                        "a burst of probes in one silence: {self:?}"
                    );
                    self.written_in_silence += 1;
                    let id = self.next_id;
                    self.next_id += 1;
                    h.sent(id, method, at(now));
                    if let Some(t) = self.answer_time(Some(method)) {
                        self.answers.push((t, id));
                    }
                }
                Action::Dead { .. } => {
                    let Some(since) = self.hung_since() else {
                        panic!("a child that answers was declared dead: {self:?}");
                    };
                    assert!(now >= since, "{self:?}");
                    return self.events;
                }
            }
            if let Some(since) = self.hung_since() {
                let bound = since
                    + ms(self.cfg.probe_interval)
                    + self.request_timeout
                    + ms(self.cfg.probe_timeout) * (u64::from(self.cfg.probe_failures) + 3)
                    + 2 * step_max;
                assert!(
                    now <= bound,
                    "a hung child was not declared dead by {bound} ms: {self:?}"
                );
            }
        }
        self.events
    }
}

impl std::fmt::Debug for Sim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "kind {:?}, cfg {:?}, methods {:?}, request_timeout {} ms, now {} ms",
            self.kind, self.cfg, self.methods, self.request_timeout, self.now
        )
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

#[test]
fn simulation_health_rules_hold_for_random_children() {
    let total = env_u64("MCPSUP_SIM_EVENTS").unwrap_or(1_000_000);
    let seeds: Vec<u64> = match env_u64("MCPSUP_SIM_SEED") {
        Some(s) => vec![s],
        None => (0..).take(100_000).collect(),
    };
    let t0 = Instant::now();
    let mut events = 0u64;
    for seed in seeds {
        if events >= total {
            break;
        }
        let mut sim = Sim::new(seed);
        let mut h = Health::new(sim.cfg, t0);
        let r =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sim.run(&mut h, 20_000, t0)));
        match r {
            Ok(n) => events += n,
            Err(e) => {
                eprintln!(
                    "health simulation failed at seed {seed} (replay: MCPSUP_SIM_SEED={seed})"
                );
                std::panic::resume_unwind(e);
            }
        }
    }
    eprintln!("health simulation: {events} events");
    assert!(events >= total.min(1_000_000), "ran {events} events");
}
