//! Readiness for `GET /readyz` (issue 17 §2): every socket bound, and every server marked
//! `required = true` ready. Liveness (`GET /healthz`) has no state at all: answering proves
//! the supervisor's event loop runs, and it never depends on a child (an upstream outage
//! must not restart the pod, which would restart every child).
//!
//! The table is process-wide, like the metrics: the daemon declares each server (and
//! whether it is required) when it starts or reconfigures it and forgets it when it is
//! removed; the server actor's state reaches it through [`super::ServerMetrics::set_state`],
//! which the actor calls on every change of state.

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};

/// One server as readiness sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    required: bool,
    /// One of [`super::STATES`]; `starting` until the actor says otherwise.
    state: &'static str,
}

/// The readiness table (see the module documentation).
#[derive(Debug, Default)]
pub struct Readiness {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Every configured server's socket is bound (set once start-up is done).
    bound: bool,
    /// The daemon is stopping: never ready again.
    stopping: bool,
    servers: BTreeMap<String, Entry>,
}

/// What `GET /readyz` answers: the status (200 or 503) and a JSON body.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// Ready: sockets bound, not stopping, every required server `ready`.
    pub ready: bool,
    /// `{"ready":…,"sockets":"bound"|"binding","stopping":…,"not_ready":[names],
    /// "servers":{NAME:{"required":…,"state":…}}}`.
    pub body: serde_json::Value,
}

impl Readiness {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // Every update is a single assignment: a poisoned lock holds a consistent table.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Declares `server` (at start and at each reload), keeping its last known state.
    pub fn declare(&self, server: &str, required: bool) {
        self.lock()
            .servers
            .entry(server.to_string())
            .and_modify(|e| e.required = required)
            .or_insert(Entry {
                required,
                state: "starting",
            });
    }

    /// Forgets a server removed from the configuration.
    pub fn forget(&self, server: &str) {
        self.lock().servers.remove(server);
    }

    /// Records `server`'s state (one of [`super::STATES`]); ignored for undeclared servers
    /// (the actor simulation runs actors no daemon declared).
    pub fn set_state(&self, server: &str, state: &str) {
        let Some(known) = super::STATES.iter().find(|s| **s == state) else {
            return;
        };
        if let Some(e) = self.lock().servers.get_mut(server) {
            e.state = known;
        }
    }

    /// `server`'s last recorded state (`ready`, `backoff`, ...), `None` when undeclared.
    pub fn state(&self, server: &str) -> Option<&'static str> {
        self.lock().servers.get(server).map(|e| e.state)
    }

    /// Every socket is bound (`true` once start-up is done).
    pub fn set_bound(&self, bound: bool) {
        self.lock().bound = bound;
    }

    /// The daemon is shutting down: not ready from now on.
    pub fn set_stopping(&self) {
        self.lock().stopping = true;
    }

    /// The answer to `GET /readyz` now.
    pub fn report(&self) -> Report {
        let inner = self.lock();
        let not_ready: Vec<&str> = inner
            .servers
            .iter()
            // An idle server (on demand, issue 18) serves: its next request starts it.
            .filter(|(_, e)| e.required && !matches!(e.state, "ready" | "idle"))
            .map(|(n, _)| n.as_str())
            .collect();
        let ready = inner.bound && !inner.stopping && not_ready.is_empty();
        let servers: serde_json::Map<String, serde_json::Value> = inner
            .servers
            .iter()
            .map(|(n, e)| {
                (
                    n.clone(),
                    serde_json::json!({"required": e.required, "state": e.state}),
                )
            })
            .collect();
        Report {
            ready,
            body: serde_json::json!({
                "ready": ready,
                "sockets": if inner.bound { "bound" } else { "binding" },
                "stopping": inner.stopping,
                "not_ready": not_ready,
                "servers": servers,
            }),
        }
    }
}

/// The process-wide readiness table.
pub fn readiness() -> &'static Readiness {
    static READY: OnceLock<Readiness> = OnceLock::new();
    READY.get_or_init(Readiness::default)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_needs_bound_sockets_and_every_required_server_ready() {
        let r = Readiness::default();
        r.declare("a", true);
        r.declare("b", false);
        assert!(!r.report().ready, "sockets not bound yet");
        r.set_bound(true);
        let rep = r.report();
        assert!(!rep.ready);
        assert_eq!(rep.body["not_ready"], serde_json::json!(["a"]));
        r.set_state("a", "ready");
        r.set_state("b", "backoff");
        let rep = r.report();
        assert!(rep.ready, "{}", rep.body);
        assert_eq!(rep.body["servers"]["b"]["state"], "backoff");
        r.set_state("a", "backoff");
        assert!(!r.report().ready);
        r.set_state("a", "ready");
        r.set_stopping();
        assert!(!r.report().ready);
    }

    #[test]
    fn undeclared_servers_and_unknown_states_change_nothing() {
        let r = Readiness::default();
        r.set_bound(true);
        r.set_state("ghost", "ready");
        r.declare("a", true);
        r.set_state("a", "ready");
        r.set_state("a", "weird");
        let rep = r.report();
        assert!(rep.ready, "{}", rep.body);
        assert!(rep.body["servers"].get("ghost").is_none());
        r.declare("a", false);
        r.set_state("a", "failed");
        assert!(
            r.report().ready,
            "an optional server never blocks readiness"
        );
        r.forget("a");
        assert_eq!(r.report().body["servers"], serde_json::json!({}));
    }
}
