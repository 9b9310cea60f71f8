//! The simulation's fake child (test-only): a `Starter` and `Upstream` that record what the
//! actor writes and asks, in a `World` the simulation reads and drives; the fake child's
//! answers (`good_answer`) and a scripted 2026 client's calls (`modern_call`).

use super::sim::Asked;
use super::*;
use crate::era;
use bytes::Bytes;
use serde_json::value::RawValue;
use serde_json::Value;
use std::collections::VecDeque;
use std::sync::Mutex;
use support::config::ServerConfig;
use upstream::child::process;
use upstream::StderrTail;
use upstream::{Outbound, Queued, StartError, Starter, Upstream};

/// What the fake children share with the simulation.
#[derive(Default)]
pub(super) struct World {
    /// Generations spawned and not yet reported exited.
    pub(super) live: Vec<u64>,
    /// Lines written to a child's stdin (urgent ones too), with its generation.
    pub(super) stdin: Vec<(u64, Bytes)>,
    /// Generations whose stop ladder was started.
    pub(super) stops: Vec<u64>,
    /// The next spawn fails (a transient OS error).
    pub(super) fail_next_spawn: bool,
    pub(super) spawns: u64,
    /// When each instance was spawned (virtual time).
    pub(super) spawned: Vec<Instant>,
    /// Every line written to a child, kept for scenario tests: (generation, line).
    pub(super) written: Vec<(u64, Bytes)>,
    /// What the core said of each line it wrote ([`Outbound`] without the line), in order.
    pub(super) envelopes: Vec<(upstream::Outgoing, bool)>,
    /// The daemon's spawn budget (R11), when a scenario turns it on (off by default).
    pub(super) budget: Option<upstream::child::budget::Bucket>,
    /// Spawns started and not yet reported to the actor (`Input::Spawned`), in order.
    pub(super) pending: VecDeque<(u64, Result<FakeChild, StartError>)>,
    /// Spawns are slow: their outcomes wait in `pending` until this is cleared (issue 27 §3).
    pub(super) hold_spawns: bool,
    /// The fake child speaks 2026-07-28 (`server/discover`, listen streams, `input_required`)
    /// instead of the handshake era.
    pub(super) modern: bool,
    /// The fake child advertises `logging` (the random run; scenarios keep it off).
    pub(super) logging: bool,
    /// The child stopped reading its input: its stdin queue refuses every line (`Full`).
    pub(super) stdin_full: bool,
}

pub(super) struct FakeChild {
    generation: u64,
    spawned_at: Instant,
    world: Arc<Mutex<World>>,
    stopping: bool,
}

pub(super) fn lock(w: &Mutex<World>) -> std::sync::MutexGuard<'_, World> {
    w.lock().unwrap_or_else(|p| p.into_inner())
}

impl Upstream for FakeChild {
    fn generation(&self) -> u64 {
        self.generation
    }
    fn describe(&self) -> upstream::Description {
        upstream::Description {
            pid: Some(10_000 + self.generation as u32),
            ..Default::default()
        }
    }
    fn started_at(&self) -> Instant {
        self.spawned_at
    }
    fn send(&self, out: Outbound) -> Queued {
        let line = out.line;
        if self.stopping {
            return Queued::Closed;
        }
        let mut w = lock(&self.world);
        if w.stdin_full {
            return Queued::Full;
        }
        w.envelopes.push((out.kind, out.modern));
        w.written.push((self.generation, line.clone()));
        w.stdin.push((self.generation, line));
        Queued::Ok
    }
    fn send_urgent(&self, out: Outbound) -> Queued {
        self.send(out)
    }
    fn stop(&mut self) {
        if !self.stopping {
            self.stopping = true;
            lock(&self.world).stops.push(self.generation);
        }
    }
    fn stopping(&self) -> bool {
        self.stopping
    }
}

pub(super) struct FakeStarter {
    pub(super) world: Arc<Mutex<World>>,
    /// The simulation's clock, read at spawn time (the actor's `now` of that input).
    pub(super) now: Arc<Mutex<Instant>>,
}

impl Starter for FakeStarter {
    fn admit(&mut self, now: Instant) -> Result<(), upstream::Deferred> {
        match &mut lock(&self.world).budget {
            Some(b) => b.take(now).map_err(|until| upstream::Deferred {
                until,
                rate: upstream::child::budget::RATE,
                burst: upstream::child::budget::BURST,
            }),
            None => Ok(()),
        }
    }

    fn start(&mut self, _cfg: &ServerConfig, generation: u64, _tail: StderrTail) {
        let mut w = lock(&self.world);
        if std::mem::take(&mut w.fail_next_spawn) {
            let failed = Err(StartError::from(process::SpawnError {
                command: "sim".into(),
                source: std::io::Error::other("simulated spawn failure"),
                cwd: None,
            }));
            w.pending.push_back((generation, failed));
            return;
        }
        assert!(
            w.live.is_empty(),
            "spawn of generation {generation} while {:?} still alive",
            w.live
        );
        w.live.push(generation);
        // A new process reads its input.
        w.stdin_full = false;
        w.spawns += 1;
        let at = *self.now.lock().unwrap_or_else(|p| p.into_inner());
        w.spawned.push(at);
        let spawned_at = *self.now.lock().unwrap_or_else(|p| p.into_inner());
        let child = FakeChild {
            generation,
            spawned_at,
            world: self.world.clone(),
            stopping: false,
        };
        w.pending.push_back((generation, Ok(child)));
    }
}

/// The next spawn outcome to report to the actor, unless spawns are held.
pub(super) fn next_spawned(world: &Mutex<World>) -> Option<(u64, SpawnOutcome)> {
    let mut w = lock(world);
    if w.hold_spawns {
        return None;
    }
    let (generation, spawned) = w.pending.pop_front()?;
    Some((
        generation,
        spawned.map(|c| Box::new(c) as Box<dyn Upstream>),
    ))
}

/// A 2026 client's `tools/call` of `echo` with `text`, declaring sampling, elicitation and
/// roots; `extra` merged into params (a retry's state and answers).
pub(super) fn modern_call(id: &str, text: &str, extra: Option<Value>) -> String {
    let mut params = json!({"name": "echo", "arguments": {"text": text},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities":
                {"sampling": {}, "elicitation": {}, "roots": {}},
            "io.modelcontextprotocol/clientInfo": {"name": "sim-modern", "version": "1"}}});
    if let (Some(p), Some(Value::Object(e))) = (params.as_object_mut(), extra) {
        p.extend(e);
    }
    let id: Value = serde_json::from_str(id).unwrap_or(Value::Null);
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}).to_string()
}

/// The fake child's proper answer to `a`: a handshake-era server with one tool, `echo`, or
/// (`a.modern`) a 2026-07-28 one. A 2026 `tools/call` retried with a `requestState` is
/// answered like a first call; `input_required` is the simulation's choice ([`input_required`]).
pub(super) fn good_answer(a: &Asked) -> String {
    if a.modern {
        return modern_answer(a);
    }
    let mut caps = json!({"tools": {"listChanged": true}, "resources": {"subscribe": true}});
    if a.logging {
        caps["logging"] = json!({});
    }
    let result = match a.method.as_str() {
        "initialize" => json!({"protocolVersion": "2025-11-25",
            "capabilities": caps,
            "serverInfo": {"name": "sim", "version": "1"}}),
        "tools/list" => json!({"tools": [{"name": "echo", "inputSchema": {"type": "object"}}]}),
        "tools/call" => {
            json!({"content": [{"type": "text", "text": a.text.clone().unwrap_or_default()}]})
        }
        "ping" | "resources/subscribe" | "resources/unsubscribe" | "logging/setLevel" => json!({}),
        _ => return method_not_found(a.id),
    };
    json!({"jsonrpc": "2.0", "id": a.id, "result": result}).to_string()
}

fn method_not_found(id: u64) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":-32601,"message":"Method not found"}}}}"#
    )
}

/// A 2026-07-28 child's answer to `a` (as `tests/fixtures/fake_server.rs --era modern`): the
/// discovery result, -32022 to `initialize`, results with `resultType`, -32601 to what the
/// era has no more (`ping`, `logging/setLevel`, `resources/subscribe`).
fn modern_answer(a: &Asked) -> String {
    let info = json!({era::META_SERVER_INFO: {"name": "sim-2026", "version": "1"}});
    let mut caps = json!({"tools": {"listChanged": true}, "resources": {}});
    if a.logging {
        caps["logging"] = json!({});
    }
    let result = match a.method.as_str() {
        "server/discover" => json!({"resultType": "complete",
            "supportedVersions": [era::MODERN_VERSION], "capabilities": caps,
            "_meta": info, "ttlMs": 60000, "cacheScope": "public"}),
        "initialize" => {
            return json!({"jsonrpc": "2.0", "id": a.id, "error": {"code": era::UNSUPPORTED_VERSION,
                "message": "Unsupported protocol version",
                "data": {"supported": [era::MODERN_VERSION], "requested": "2025-11-25"}}})
            .to_string()
        }
        "tools/list" => json!({"resultType": "complete", "_meta": info,
            "tools": [{"name": "echo", "inputSchema": {"type": "object"}}]}),
        "tools/call" => json!({"resultType": "complete", "_meta": info,
            "content": [{"type": "text", "text": a.text.clone().unwrap_or_default()}]}),
        // The end of a listen stream.
        "subscriptions/listen" => json!({"resultType": "complete",
            "_meta": {era::META_SUBSCRIPTION_ID: a.id}}),
        _ => return method_not_found(a.id),
    };
    json!({"jsonrpc": "2.0", "id": a.id, "result": result}).to_string()
}

/// A 2026-07-28 child's `input_required` answer to the `tools/call` `a`: one or two questions
/// (sampling, roots) and its own opaque `requestState`.
pub(super) fn input_required(a: &Asked, two: bool) -> String {
    let mut asks = json!({"q1": {"method": "sampling/createMessage",
        "params": {"messages": [], "maxTokens": 1}}});
    if two {
        asks["q2"] = json!({"method": "roots/list", "params": {}});
    }
    json!({"jsonrpc": "2.0", "id": a.id, "result": {"resultType": "input_required",
        "inputRequests": asks, "requestState": format!("fake-{}-{}", a.generation, a.id)}})
    .to_string()
}

/// The exact text of a response line's top-level `id` (as the client wrote it).
pub(super) fn id_text(line: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct Id<'a> {
        #[serde(borrow)]
        id: &'a RawValue,
    }
    serde_json::from_slice::<Id>(line)
        .map(|i| i.id.get().to_string())
        .unwrap_or_default()
}

pub(super) fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}
