//! Decisions of the actor tested on a fake clock (issue 12 §8): the real `Server` driven by
//! the simulation's harness (`sim.rs`: a fake child, detached client queues, virtual time), one
//! scripted scenario per rule. What only real processes show (pipes, signals, process groups,
//! sockets, real SDKs) stays in `tests/it/`.

use super::fakes::{good_answer, lock};
use super::sim::Sim;
use super::*;
use crate::outage::StopCause;
use serde_json::Value;

/// A server whose child speaks the handshake era, with short, round settings.
const BASE: &str = r#"
[servers.sim]
command = "/nonexistent/sim-child"
protocol = "2025-11-25"
request_timeout = "2s"
probe_interval = "700ms"
probe_timeout = "300ms"
probe_failures = 2
queue_wait = "1s"
queue_limit = 2
backoff_initial = "100ms"
backoff_max = "1s"
start_timeout = "5s"
"#;

/// Answers everything the child was asked (`initialize` first: it becomes ready).
fn answer_all(sim: &mut Sim) {
    while let Some(a) = sim.asked.pop() {
        let line = good_answer(&a);
        sim.child_writes(a.generation, line);
    }
}

/// A simulation whose child has answered its opener and the first list reads: ready.
fn ready(toml: &str, seed: u64) -> Sim {
    let mut sim = Sim::with_config(toml, seed);
    answer_all(&mut sim);
    answer_all(&mut sim);
    sim
}

/// The responses `client` received (also after the actor closed it).
fn responses(sim: &Sim, client: ClientId) -> Vec<Value> {
    sim.clients
        .get(&client)
        .map(|c| &c.received)
        .or_else(|| sim.departed.get(&client))
        .map(|received| {
            received
                .iter()
                .filter(|v| v.get("method").is_none())
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

/// A `tools/call` of `echo` whose text names the client (the harness checks it comes back to
/// that client only).
fn call(client: ClientId, id: u64) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"{}-x"}}}}}}"#,
        client.0
    )
}

#[test]
fn failed_starts_back_off_exponentially_with_jitter_then_fail_after_five() {
    let mut sim = Sim::with_config(BASE, 1);
    let mut ms = 0;
    // Every instance dies before it is ready; the next spawn is awaited in 10 ms steps.
    while sim.server.life.state() != State::Failed && ms < 60_000 {
        if sim.server.life.child().is_some() {
            sim.child_exits(true);
        }
        ms += 10;
        sim.at(ms);
    }
    assert_eq!(
        sim.server.life.state(),
        State::Failed,
        "failed after five starts"
    );
    let spawned = lock_world_spawned(&sim);
    assert_eq!(spawned.len(), 5, "five starts, then failed");
    let gaps: Vec<u64> = spawned
        .windows(2)
        .map(|w| w[1].saturating_duration_since(w[0]).as_millis() as u64)
        .collect();
    // backoff_initial 100 ms doubling, times a factor in [0.8, 1.2], never under 100 ms,
    // observed on a 10 ms grid.
    for (n, gap) in gaps.iter().enumerate() {
        let nominal = 100u64 << n;
        let low = (nominal * 8 / 10).max(100);
        let high = nominal * 12 / 10 + 10;
        assert!(
            (low..=high).contains(gap),
            "gap {n} is {gap} ms, expected {low}..={high}: {gaps:?}"
        );
    }
}

fn lock_world_spawned(sim: &Sim) -> Vec<Instant> {
    sim.world
        .lock()
        .map(|w| w.spawned.clone())
        .unwrap_or_default()
}

/// R11 (issue 26 §2): with the daemon's spawn budget on, a child that dies as soon as it is
/// ready, with no backoff, is respawned at most 8 times at once and then 4 times per second;
/// the wait is `backoff` (the next spawn is shown), counts no failure, and every spawn after
/// the first is a restart.
#[test]
fn the_daemon_spawn_budget_paces_a_restart_loop_at_four_per_second_after_a_burst_of_eight() {
    let toml = BASE
        .replace("backoff_initial = \"100ms\"", "backoff_initial = \"0s\"")
        .replace("backoff_max = \"1s\"", "backoff_max = \"0s\"");
    let mut sim = Sim::with_config(&toml, 11);
    lock(&sim.world).budget = Some(upstream::child::budget::Bucket::default());
    let mut deferred = false;
    for step in 0..300u64 {
        answer_all(&mut sim);
        if sim.server.life.state() == State::Ready {
            sim.child_exits(true);
        }
        if sim.server.life.state() == State::Backoff && sim.server.life.child().is_none() {
            deferred |= sim.server.status().retry_in_ms.is_some();
        }
        sim.at(step * 10);
    }
    let spawned = lock_world_spawned(&sim);
    let t0 = spawned[0];
    let within = |ms: u64| {
        spawned
            .iter()
            .filter(|t| t.saturating_duration_since(t0) < Duration::from_millis(ms))
            .count()
    };
    assert!(deferred, "the budget made the server wait in backoff");
    assert!(within(10) <= 8, "burst: {}", within(10));
    // 3 s: the burst of 8 plus 4 per second (a token may land on the boundary).
    let n = within(3000);
    assert!((18..=21).contains(&n), "{n} spawns in 3 s");
    assert_eq!(sim.server.instances.restarts() as usize, spawned.len() - 1);
    assert_ne!(sim.server.life.state(), State::Failed);
}

#[test]
fn a_request_held_while_the_child_starts_fails_at_queue_wait_with_the_outage_record() {
    let mut sim = Sim::with_config(BASE, 2);
    let a = sim.connect();
    sim.send(
        a,
        r#"{"jsonrpc":"2.0","id":0,"method":"tools/list","params":{}}"#,
    );
    // tools/list with no cached list: held (the child has not answered initialize).
    sim.at(999);
    assert!(responses(&sim, a).is_empty(), "still held at 999 ms");
    sim.at(1000);
    let r = responses(&sim, a);
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(r[0]["error"]["code"], -32000, "{r:?}");
    assert_eq!(r[0]["error"]["data"]["status"], "starting", "{r:?}");
    assert_eq!(r[0]["error"]["data"]["server"], "sim", "{r:?}");
}

/// Issue 26 §8: a client's `initialize` held through a start that times out is told
/// `timeout` / `start-timeout`, not `stopped` / "no answer to initialize yet".
#[test]
fn an_initialize_held_through_a_start_timeout_is_told_start_timeout() {
    let mut sim = Sim::with_config(BASE, 2);
    let a = sim.connect();
    sim.send(
        a,
        r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"a","version":"1"}}}"#,
    );
    sim.at(4999);
    assert!(responses(&sim, a).is_empty(), "held until start_timeout");
    sim.at(5000);
    let r = responses(&sim, a);
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(r[0]["error"]["data"]["status"], "timeout", "{r:?}");
    let reason = r[0]["error"]["data"]["reason"].as_str().unwrap_or("");
    assert!(reason.starts_with("start-timeout"), "{r:?}");
}

/// K18, a race seen in CI: the first instance died before reading stdin, so the write of its
/// opener failed and the supervisor is stopping it when a client's `initialize` arrives. The
/// request waits for the exit and is told the exit, not `stopped`.
#[test]
fn case_k18_an_initialize_during_the_stop_after_a_failed_stdin_write_is_told_the_exit() {
    let mut sim = Sim::with_config(BASE, 2);
    let generation = sim.current_generation().unwrap_or(0);
    sim.input(Input::Upstream(Event::Lost(
        generation,
        Lost::WriteFailed("Broken pipe (os error 32)".into()),
    )));
    assert_eq!(sim.server.life.state(), State::Stopping);
    let a = sim.connect();
    sim.send(
        a,
        r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"a","version":"1"}}}"#,
    );
    assert!(responses(&sim, a).is_empty(), "waits for the exit");
    sim.child_exits(true);
    let r = responses(&sim, a);
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(r[0]["error"]["data"]["status"], "exited", "{r:?}");
    let reason = r[0]["error"]["data"]["reason"].as_str().unwrap_or("");
    assert!(reason.starts_with("stdin-failed"), "{r:?}");
}

#[test]
fn held_requests_beyond_queue_limit_fail_at_once_and_the_rest_are_forwarded_when_ready() {
    let mut sim = Sim::with_config(BASE, 3);
    let a = sim.connect();
    for id in 1..=3 {
        sim.send(a, &call(a, id));
    }
    let r = responses(&sim, a);
    assert_eq!(r.len(), 1, "the third is over queue_limit = 2: {r:?}");
    assert_eq!(r[0]["id"], 3);
    assert_eq!(
        r[0]["result"]["isError"], true,
        "a tool call gets an isError result"
    );
    answer_all(&mut sim); // initialize: ready, the two held calls are forwarded
    answer_all(&mut sim); // the calls (and the list prefetch)
    let r = responses(&sim, a);
    let ids: Vec<Value> = r.iter().map(|v| v["id"].clone()).collect();
    assert_eq!(ids.len(), 3, "{r:?}");
    assert_eq!(ids[0], 3, "refused at once");
    assert!(ids.contains(&json!(1)) && ids.contains(&json!(2)), "{r:?}");
    assert!(
        r[1..].iter().all(|v| v["result"]["isError"].is_null()),
        "the held calls succeed: {r:?}"
    );
    // Both held calls reached the child, once each.
    let calls: Vec<u64> = sim
        .world
        .lock()
        .map(|w| {
            w.written
                .iter()
                .filter_map(|(_, l)| serde_json::from_slice::<Value>(l).ok())
                .filter(|v| v["method"] == "tools/call")
                .filter_map(|v| v["id"].as_u64())
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(calls.len(), 2, "{calls:?}");
}

/// A client with two calls in flight that closes its input, then the child exits: both calls
/// get the outage answer before the client is closed (answering the first once dropped the
/// client, the in-flight table having been emptied first, and the second was never answered).
#[test]
fn every_call_of_a_closing_client_is_answered_when_the_child_exits() {
    let mut sim = ready(BASE, 8);
    let a = sim.connect();
    sim.send(a, &call(a, 1));
    sim.send(a, &call(a, 2));
    sim.input(Input::Session(SessionEvent::InputClosed(a)));
    assert!(responses(&sim, a).is_empty(), "both in flight");
    sim.child_exits(true);
    let r = responses(&sim, a);
    let ids: Vec<Value> = r.iter().map(|v| v["id"].clone()).collect();
    assert_eq!(ids.len(), 2, "both answered: {r:?}");
    assert!(ids.contains(&json!(1)) && ids.contains(&json!(2)), "{r:?}");
    assert!(
        r.iter().all(|v| v["result"]["isError"] == true),
        "as outages: {r:?}"
    );
    assert!(
        !sim.server.outbox.clients().contains_key(&a),
        "then it is closed"
    );
}

#[test]
fn a_silent_ready_child_gets_one_ping_then_its_confirmation_then_is_stopped() {
    let mut sim = Sim::with_config(BASE, 4);
    answer_all(&mut sim); // ready at 0 ms
    answer_all(&mut sim); // the tools/list prefetch: last heard at 0 ms
    let probes = |sim: &Sim| {
        sim.written_methods()
            .into_iter()
            .filter(|(_, m)| m == "ping" || m == "tools/list")
            .map(|(_, m)| m)
            .collect::<Vec<_>>()
    };
    let before = probes(&sim).len(); // the prefetch
    sim.at(699);
    assert_eq!(probes(&sim).len(), before, "no probe before probe_interval");
    sim.at(700);
    assert_eq!(probes(&sim)[before..], ["ping"]);
    sim.at(999);
    assert_eq!(
        probes(&sim).len(),
        before + 1,
        "one probe awaited at a time"
    );
    sim.at(1000);
    assert_eq!(
        probes(&sim)[before..],
        ["ping", "tools/list"],
        "ping confirmed"
    );
    sim.at(1299);
    assert!(sim.stops().is_empty(), "not dead before the second miss");
    sim.at(1300);
    assert_eq!(sim.stops(), [1], "two misses: the child is stopped");
    // While it is stopped (the ladder runs until it exits), it is neither probed nor counted
    // ready: `tests/it/health.rs`'s `a_child_being_stopped_for_silence_is_not_probed_and_
    // status_says_stopping` on the fake clock (issue 48 §6).
    let sent = probes(&sim).len();
    let probes_sent = sim.server.status().probes_sent;
    for t in [1301, 2000, 2700, 3400, 4100] {
        sim.at(t);
        assert_eq!(sim.server.status().state, State::Stopping, "at {t} ms");
        assert_eq!(
            probes(&sim).len(),
            sent,
            "no probe while stopping, at {t} ms"
        );
        assert_eq!(sim.server.status().probes_sent, probes_sent, "at {t} ms");
    }
}

#[test]
fn any_reply_even_an_error_to_ping_proves_life_case_k13() {
    let mut sim = ready(BASE, 5);
    for round in 1..=20u64 {
        sim.at(round * 700);
        let id = sim
            .asked
            .iter()
            .rfind(|a| a.method == "ping")
            .map(|a| (a.generation, a.id));
        if let Some((generation, id)) = id {
            sim.asked.retain(|a| a.id != id);
            sim.child_writes(
                generation,
                format!(r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":-32601,"message":"Unknown method: ping"}}}}"#),
            );
        }
    }
    assert!(sim.stops().is_empty(), "never stopped");
    assert_eq!(sim.server.instances.restarts(), 0);
    assert!(
        sim.server.status().ping_served,
        "an error answer is an answer"
    );
}

#[test]
fn a_request_past_its_deadline_gets_minus_32001_and_the_child_a_cancel() {
    let mut sim = ready(BASE, 6);
    let a = sim.connect();
    sim.send(a, &call(a, 9));
    sim.at(1999);
    assert!(responses(&sim, a).is_empty());
    sim.at(2000);
    let r = responses(&sim, a);
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(r[0]["error"]["code"], -32001, "{r:?}");
    let cancels = sim
        .written_methods()
        .into_iter()
        .filter(|(_, m)| m == "notifications/cancelled")
        .count();
    assert_eq!(cancels, 1, "the child is told");
}

#[test]
fn an_operator_stop_during_a_health_stop_keeps_the_server_stopped() {
    let mut sim = Sim::with_config(BASE, 7);
    // start_timeout (5 s) passes with no answer: the supervisor starts the stop ladder.
    sim.at(5000);
    assert_eq!(sim.server.life.state(), State::Stopping);
    assert_eq!(sim.server.life.stop_cause(), Some(StopCause::StartTimeout));
    // The operator says stop while that ladder runs; then the child exits.
    let (tx, _rx) = oneshot::channel();
    sim.input(Input::Command(Command::Stop(tx)));
    sim.child_exits(false);
    assert_eq!(sim.server.life.state(), State::Stopped, "not respawned");
    sim.at(60_000);
    assert_eq!(
        sim.server.life.state(),
        State::Stopped,
        "still stopped later"
    );
    assert_eq!(lock_world_spawned(&sim).len(), 1, "one instance only");
}

#[test]
fn a_listen_stream_cannot_grow_subscriptions_past_max_subscriptions() {
    let toml = format!("{BASE}max_subscriptions = 4\n");
    let mut sim = ready(&toml, 8);
    let a = sim.connect();
    let uris: Vec<String> = (0..10).map(|i| format!("file:///{i}")).collect();
    let line = json!({"jsonrpc": "2.0", "id": "l", "method": "subscriptions/listen",
        "params": {"notifications": {"resourceSubscriptions": uris},
            "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "m", "version": "1"}}}});
    sim.send(a, &line.to_string());
    let ack = sim.clients[&a]
        .received
        .iter()
        .find(|v| v["method"] == "notifications/subscriptions/acknowledged")
        .cloned()
        .unwrap_or(Value::Null);
    let honoured = ack
        .pointer("/params/notifications/resourceSubscriptions")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    assert_eq!(
        honoured, 3,
        "the stream plus three URIs fill the four: {ack}"
    );
    assert_eq!(sim.server.subs.len(), 3);
    let subscribes = sim
        .written_methods()
        .into_iter()
        .filter(|(_, m)| m == "resources/subscribe")
        .count();
    assert_eq!(subscribes, 3, "only the honoured URIs reach the child");
}

#[test]
fn subscribes_in_flight_count_against_max_subscriptions() {
    // Found by the simulation: five subscribes sent before the child answers any of them all
    // passed the check, and the client ended with five subscriptions under a limit of four.
    let toml = format!("{BASE}max_subscriptions = 4\n");
    let mut sim = ready(&toml, 9);
    let a = sim.connect();
    for i in 0..5 {
        let line = format!(
            r#"{{"jsonrpc":"2.0","id":{i},"method":"resources/subscribe","params":{{"uri":"file:///{i}"}}}}"#
        );
        sim.send(a, &line);
    }
    let refused = responses(&sim, a);
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0]["error"]["code"], -32002);
    answer_all(&mut sim);
    assert_eq!(sim.server.subs.direct_count(a), 4);
}

#[test]
fn a_direct_unsubscribe_leaves_the_same_clients_listen_stream_subscribed() {
    // Found in review (issue 12): one client holding a URI both directly and through its
    // listen stream lost the stream's updates when it unsubscribed directly, and the child was
    // told to unsubscribe while the stream still wanted the URI.
    let mut sim = ready(BASE, 10);
    let a = sim.connect();
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "m", "version": "1"}});
    let listen = json!({"jsonrpc": "2.0", "id": "l", "method": "subscriptions/listen",
        "params": {"notifications": {"resourceSubscriptions": ["file:///u"]}, "_meta": meta}});
    sim.send(a, &listen.to_string());
    answer_all(&mut sim);
    for (id, method) in [(1, "resources/subscribe"), (2, "resources/unsubscribe")] {
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method,
            "params": {"uri": "file:///u", "_meta": meta}});
        sim.send(a, &line.to_string());
        answer_all(&mut sim);
    }
    let to_child: Vec<String> = sim
        .written_methods()
        .into_iter()
        .map(|(_, m)| m)
        .filter(|m| m.ends_with("subscribe"))
        .collect();
    assert_eq!(to_child, ["resources/subscribe"], "the child keeps the URI");
    let generation = sim.current_generation().unwrap_or(0);
    sim.child_writes(
        generation,
        r#"{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"file:///u"}}"#.into(),
    );
    let updates = sim.clients[&a]
        .received
        .iter()
        .filter(|v| v["method"] == "notifications/resources/updated")
        .count();
    assert_eq!(updates, 1, "the stream still gets the URI's updates");
}

/// Lines the supervisor wrote to the child, parsed.
fn written_to_child(sim: &Sim) -> Vec<Value> {
    sim.world
        .lock()
        .map(|w| {
            w.written
                .iter()
                .filter_map(|(_, l)| serde_json::from_slice(l).ok())
                .collect()
        })
        .unwrap_or_default()
}

/// A 2026 client's `tools/call` of `echo` (its text names the client), declaring every
/// client capability; `extra` is merged into params (a retry's `requestState` and answers).
fn modern_call(client: ClientId, id: &str, extra: Value) -> String {
    super::fakes::modern_call(
        &json!(id).to_string(),
        &format!("{}-m", client.0),
        Some(extra),
    )
}

#[test]
fn case_k26_a_handshake_childs_requests_reach_a_2026_client_as_input_required_rounds() {
    let mut sim = ready(BASE, 11);
    let generation = sim.current_generation().unwrap_or(0);
    let a = sim.connect();
    sim.send(a, &modern_call(a, "c1", json!({})));
    let call = sim.asked.pop().expect("the call reached the child");
    assert_eq!(call.method, "tools/call");
    let mut answers = Vec::new();
    let mut id = "c1".to_string();
    for (n, (method, answer)) in [
        (
            "sampling/createMessage",
            json!({"role": "assistant", "model": "m",
            "content": {"type": "text", "text": "hi"}}),
        ),
        (
            "elicitation/create",
            json!({"action": "accept", "content": {"ok": true}}),
        ),
        ("roots/list", json!({"roots": [{"uri": "file:///w"}]})),
    ]
    .into_iter()
    .enumerate()
    {
        // The child asks while handling the call (child-side id 900 + n).
        sim.child_writes(
            generation,
            json!({"jsonrpc": "2.0", "id": 900 + n, "method": method, "params": {"n": n}})
                .to_string(),
        );
        let r = responses(&sim, a).pop().unwrap_or(Value::Null);
        assert_eq!(r["id"], json!(id), "{r}");
        assert_eq!(r["result"]["resultType"], "input_required", "{r}");
        let asks = r["result"]["inputRequests"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        assert_eq!(asks.len(), 1, "{r}");
        let (key, ask) = asks
            .iter()
            .next()
            .map(|(k, v)| (k.clone(), v.clone()))
            .unwrap();
        assert_eq!(ask["method"], method);
        assert_eq!(ask["params"], json!({"n": n}));
        // The retry: a new id, the state echoed, the answer keyed like the question.
        id = format!("c1-retry{n}");
        let state = r["result"]["requestState"].clone();
        sim.send(
            a,
            &modern_call(
                a,
                &id,
                json!({"requestState": state,
                "inputResponses": {key: answer.clone()}}),
            ),
        );
        answers.push((900 + n, answer));
    }
    // Every answer reached the child under the child's own id; the retries did not.
    let to_child = written_to_child(&sim);
    for (cid, answer) in &answers {
        let got = to_child
            .iter()
            .find(|v| v["id"] == json!(cid) && v.get("method").is_none());
        assert_eq!(
            got.map(|v| v["result"].clone()),
            Some(answer.clone()),
            "{to_child:?}"
        );
    }
    let calls = to_child
        .iter()
        .filter(|v| v["method"] == "tools/call")
        .count();
    assert_eq!(calls, 1, "a retry reached the child: {to_child:?}");
    // The child's final result answers the last retry, as a complete 2026 result.
    let text = format!("{}-m", a.0);
    let fin = json!({"jsonrpc": "2.0", "id": call.id,
        "result": {"content": [{"type": "text", "text": text}]}});
    sim.child_writes(generation, fin.to_string());
    let r = responses(&sim, a).pop().unwrap_or(Value::Null);
    assert_eq!(r["id"], json!(id), "{r}");
    assert_eq!(r["result"]["resultType"], "complete", "{r}");
    assert_eq!(r["result"]["content"][0]["text"], json!(text));
    assert!(sim.server.rounds.parked_rounds() == 0);
    assert_eq!(
        sim.server.outbox.ledger().len(),
        0,
        "every request has its one outcome"
    );
}

/// A 2026 client's `tools/call` (id `c1`) on a ready handshake child (seed `seed`), parked by
/// the child's request `ask`: the simulation, the client, the child's generation, the call as
/// the child got it, and the `requestState` the client was given.
fn parked(seed: u64, ask: &str) -> (Sim, ClientId, u64, super::sim::Asked, Value) {
    let mut sim = ready(BASE, seed);
    let generation = sim.current_generation().unwrap_or(0);
    let a = sim.connect();
    sim.send(a, &modern_call(a, "c1", json!({})));
    let call = sim.asked.pop().expect("the call reached the child");
    sim.child_writes(generation, ask.into());
    let r = responses(&sim, a).pop().unwrap_or(Value::Null);
    let state = r["result"]["requestState"].clone();
    (sim, a, generation, call, state)
}

#[test]
fn case_k26_a_result_while_parked_waits_for_the_retry_and_a_silent_client_times_out() {
    let (mut sim, a, generation, call, state) =
        parked(12, r#"{"jsonrpc":"2.0","id":"s1","method":"roots/list"}"#);
    // The child gives up waiting and answers anyway: kept for the retry.
    let text = format!("{}-m", a.0);
    let fin = json!({"jsonrpc": "2.0", "id": call.id,
        "result": {"content": [{"type": "text", "text": text}]}});
    sim.child_writes(generation, fin.to_string());
    assert_eq!(responses(&sim, a).len(), 1, "nothing until the retry");
    sim.send(
        a,
        &modern_call(
            a,
            "c2",
            json!({"requestState": state,
            "inputResponses": {"r0": {"roots": []}}}),
        ),
    );
    let r = responses(&sim, a).pop().unwrap_or(Value::Null);
    assert_eq!(r["id"], "c2", "{r}");
    assert_eq!(r["result"]["content"][0]["text"], json!(text), "{r}");

    // Second call: the client never retries. At the deadline the child's question gets an
    // error and its call a cancel; a late retry is told the state expired.
    sim.send(a, &modern_call(a, "c3", json!({})));
    let call = sim.asked.pop().expect("the call reached the child");
    sim.child_writes(
        generation,
        r#"{"jsonrpc":"2.0","id":"s2","method":"sampling/createMessage","params":{}}"#.into(),
    );
    let r = responses(&sim, a).pop().unwrap_or(Value::Null);
    let state = r["result"]["requestState"].clone();
    sim.at(60_000);
    let to_child = written_to_child(&sim);
    assert!(
        to_child
            .iter()
            .any(|v| v["id"] == "s2" && v["error"]["code"].is_i64()),
        "{to_child:?}"
    );
    assert!(
        to_child
            .iter()
            .any(|v| v["method"] == "notifications/cancelled"
                && v["params"]["requestId"] == json!(call.id)),
        "{to_child:?}"
    );
    sim.send(
        a,
        &modern_call(
            a,
            "c4",
            json!({"requestState": state, "inputResponses": {}}),
        ),
    );
    let r = responses(&sim, a).pop().unwrap_or(Value::Null);
    assert_eq!(r["id"], "c4");
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert!(sim.server.rounds.parked_rounds() == 0);
}

/// A handshake client that declared roots (its `initialize` answered from the cache).
fn roots_client(sim: &mut Sim) -> ClientId {
    let a = sim.connect();
    let init = json!({"jsonrpc": "2.0", "id": "i", "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {"roots": {"listChanged": true}},
        "clientInfo": {"name": "ide", "version": "1"}}});
    sim.send(a, &init.to_string());
    sim.send(
        a,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    );
    a
}

/// The child asks `roots/list` under id `id`; returns the supervisor's answer to it, if any.
fn child_asks_roots(sim: &mut Sim, id: &str) -> Option<Value> {
    let generation = sim.current_generation().unwrap_or(0);
    sim.child_writes(
        generation,
        json!({"jsonrpc": "2.0", "id": id, "method": "roots/list"}).to_string(),
    );
    written_to_child(sim)
        .into_iter()
        .find(|v| v["id"] == json!(id) && v.get("method").is_none())
}

/// Requests the supervisor sent client `c` (not responses, not notifications).
fn requests_to(sim: &Sim, c: ClientId) -> Vec<Value> {
    sim.clients[&c]
        .received
        .iter()
        .filter(|v| v.get("method").is_some() && v.get("id").is_some())
        .cloned()
        .collect()
}

#[test]
fn case_k28_roots_outside_a_request_are_the_operators_and_never_refused() {
    let toml = format!("{BASE}roots = [\"/srv/shared\", \"file:///opt/data\"]\n");
    let mut sim = ready(&toml, 13);
    let configured = json!({"roots": [
        {"uri": "file:///srv/shared", "name": "shared"}, {"uri": "file:///opt/data"}]});
    // At start, with no client at all.
    let r = child_asks_roots(&mut sim, "start").expect("answered");
    assert_eq!(r["result"], configured, "{r}");
    // A client's list_changed reaches the child; the child's next roots/list is answered by
    // the policy: the client has no request in flight, so it is not asked.
    let a = roots_client(&mut sim);
    sim.send(
        a,
        r#"{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}"#,
    );
    let forwarded = written_to_child(&sim)
        .iter()
        .any(|v| v["method"] == "notifications/roots/list_changed");
    assert!(forwarded, "the client's list_changed reached the child");
    let r = child_asks_roots(&mut sim, "after-change").expect("answered");
    assert_eq!(r["result"], configured, "{r}");
    assert!(
        requests_to(&sim, a).is_empty(),
        "A was asked outside its request"
    );
    // During A's call the caller answers (client_roots = "caller", the default).
    sim.send(a, &call(a, 1));
    assert!(child_asks_roots(&mut sim, "during-call").is_none());
    let asked = requests_to(&sim, a);
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(asked[0]["method"], "roots/list");
}

#[test]
fn case_k28_client_roots_none_keeps_every_clients_roots_from_the_child() {
    let toml = format!("{BASE}client_roots = \"none\"\n");
    let mut sim = ready(&toml, 14);
    let a = roots_client(&mut sim);
    sim.send(a, &call(a, 1));
    let r = child_asks_roots(&mut sim, "during-call").expect("answered at once");
    assert_eq!(r["result"], json!({"roots": []}), "{r}");
    assert!(requests_to(&sim, a).is_empty(), "A was asked");
}

#[test]
fn case_k28_changing_roots_by_reload_tells_the_child_without_a_restart() {
    let mut sim = ready(BASE, 15);
    let mut cfg = sim.server.cfg.clone();
    cfg.roots = vec![json!({"uri": "file:///new"})];
    let (tx, _rx) = oneshot::channel();
    sim.input(Input::Command(Command::Reconfigure(Box::new(cfg), tx)));
    assert!(sim.stops().is_empty(), "restarted for a roots change");
    let told = written_to_child(&sim)
        .iter()
        .any(|v| v["method"] == "notifications/roots/list_changed");
    assert!(told);
    let r = child_asks_roots(&mut sim, "again").expect("answered");
    assert_eq!(r["result"], json!({"roots": [{"uri": "file:///new"}]}));
}

#[test]
fn case_k26_a_malformed_reply_to_a_parked_request_is_the_retrys_answer() {
    // Found by the actor simulation (seed 84): a malformed reply to a parked request removed
    // it from the in-flight table but left its round, so the client's retry got no answer.
    let (mut sim, a, generation, call, state) = parked(
        16,
        r#"{"jsonrpc":"2.0","id":"s1","method":"sampling/createMessage","params":{}}"#,
    );
    sim.child_writes(
        generation,
        format!(r#"{{"jsonrpc":"2.0","id":{},"error":"oops"}}"#, call.id),
    );
    sim.send(
        a,
        &modern_call(
            a,
            "c2",
            json!({"requestState": state,
            "inputResponses": {"r0": {"role": "assistant", "model": "m",
                "content": {"type": "text", "text": "x"}}}}),
        ),
    );
    let r = responses(&sim, a).pop().unwrap_or(Value::Null);
    assert_eq!(r["id"], "c2", "{r}");
    assert_eq!(r["error"]["code"], -32603, "{r}");
    assert_eq!(sim.server.outbox.ledger().len(), 0);
}

#[test]
fn one_client_cannot_take_all_of_max_inflight() {
    // Issue 14 §3: with max_inflight = 4 a client may hold 3 (three quarters); the fourth
    // gets -32002 while another client is still served.
    let toml = format!("{BASE}max_inflight = 4\n");
    let mut sim = ready(&toml, 17);
    let (a, b) = (sim.connect(), sim.connect());
    for i in 0..4 {
        sim.send(a, &call(a, i));
    }
    let refused = responses(&sim, a);
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0]["error"]["code"], -32002, "{refused:?}");
    assert!(refused[0]["error"]["message"]
        .as_str()
        .unwrap_or("")
        .contains("client_max_inflight"));
    sim.send(b, &call(b, 1));
    assert!(responses(&sim, b).is_empty(), "B was refused");
    answer_all(&mut sim);
    assert_eq!(responses(&sim, b).len(), 1);
}

mod deadlines;
mod demand;
mod modern;
mod rounds;
mod spawning;

/// Found in issue 27 §7 ("no deadline" as a type): a client's listen stream to a 2026 child
/// had a year's deadline, and a client request within its deadline excuses the child's
/// silence, so a hung 2026 child with a listen stream open was never probed and never
/// declared dead. A listen stream has no deadline now, and excuses nothing.
#[test]
fn a_hung_2026_child_holding_a_clients_listen_stream_is_probed_and_stopped() {
    let toml = BASE.replace("protocol = \"2025-11-25\"", "protocol = \"2026-07-28\"");
    let mut sim = Sim::with_config(&toml, 12);
    // The child answers the opener as a 2026 server, and the list reads.
    for _ in 0..4 {
        while let Some(a) = sim.asked.pop() {
            let line = if a.method == "server/discover" {
                json!({"jsonrpc": "2.0", "id": a.id,
                    "result": {"capabilities": {"tools": {"listChanged": true}}}})
                .to_string()
            } else {
                good_answer(&a)
            };
            sim.child_writes(a.generation, line);
        }
    }
    assert_eq!(sim.server.life.state(), State::Ready);
    let a = sim.connect();
    let listen = json!({"jsonrpc": "2.0", "id": "l", "method": "subscriptions/listen",
        "params": {"notifications": {"toolsListChanged": true},
            "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "m", "version": "1"}}}});
    sim.send(a, &listen.to_string());
    assert!(
        sim.written_methods()
            .iter()
            .any(|(_, m)| m == "subscriptions/listen"),
        "the client's stream reached the child"
    );
    // From now on the child says nothing at all.
    sim.asked.clear();
    let start = sim.now;
    let mut ms = 0;
    while sim.stops().is_empty() && ms < 20_000 {
        ms += 50;
        sim.now = start + Duration::from_millis(ms);
        sim.input(Input::Timer);
        sim.asked.clear();
    }
    assert_eq!(sim.stops(), vec![1], "the silent child was stopped");
    assert_eq!(sim.server.life.stop_cause(), Some(StopCause::ProbeTimeout));
}

/// Issue 29 (decisions: "2026-07-28 only on a result with the 2026 shape"): a handshake-era
/// server that answers any method with an empty result (the conformance suite's client
/// scenarios do) is not taken for a 2026 server under `auto`: it gets `initialize` on the
/// same instance, and is ready in the handshake era.
#[test]
fn an_empty_result_to_the_era_probe_means_the_handshake_era() {
    let toml = BASE.replace("protocol = \"2025-11-25\"", "protocol = \"auto\"");
    let mut sim = Sim::with_config(&toml, 29);
    let probe = sim.asked.pop().expect("the era probe");
    assert_eq!(probe.method, "server/discover");
    sim.child_writes(
        probe.generation,
        json!({"jsonrpc": "2.0", "id": probe.id, "result": {}}).to_string(),
    );
    let next = sim.asked.pop().expect("the handshake");
    assert_eq!(next.method, "initialize", "after an empty probe result");
    sim.child_writes(next.generation, good_answer(&next));
    assert_eq!(sim.server.life.state(), State::Ready);
    assert_eq!(
        sim.server.opener.verdict(),
        Some(crate::era::Era::Handshake)
    );
    assert_eq!(next.generation, probe.generation, "the same instance");
    assert!(sim.stops().is_empty());
}

/// The same rule for a naive server that takes any first message for `initialize` (field
/// scripts do): its initialize result to the probe is its handshake, already done; it is
/// ready in the handshake era and is not sent `initialize` again.
#[test]
fn an_initialize_result_to_the_era_probe_is_the_handshake() {
    let toml = BASE.replace("protocol = \"2025-11-25\"", "protocol = \"auto\"");
    let mut sim = Sim::with_config(&toml, 30);
    let probe = sim.asked.pop().expect("the era probe");
    assert_eq!(probe.method, "server/discover");
    sim.child_writes(
        probe.generation,
        json!({"jsonrpc": "2.0", "id": probe.id, "result": {"protocolVersion": "2025-06-18",
            "capabilities": {"tools": {}}, "serverInfo": {"name": "naive", "version": "1"}}})
        .to_string(),
    );
    assert_eq!(sim.server.life.state(), State::Ready);
    assert_eq!(
        sim.server.opener.verdict(),
        Some(crate::era::Era::Handshake)
    );
    let methods: Vec<String> = sim.written_methods().into_iter().map(|(_, m)| m).collect();
    assert!(!methods.iter().any(|m| m == "initialize"), "{methods:?}");
    assert!(
        methods.iter().any(|m| m == "notifications/initialized"),
        "{methods:?}"
    );
}

/// Issue 27 §1: a decision is data before the shell carries it out. A `ping` from a socket
/// client and one from an HTTP session are each answered with exactly one delivery effect,
/// addressed only where the queue carries addresses (the HTTP session's, as the response to
/// its id); nothing reaches a queue until the shell drains the sink.
#[test]
fn a_ping_is_answered_by_one_delivery_effect_that_only_the_shell_carries_out() {
    use super::effects::Effect;
    use crate::session::{Address, ClientTx, Peer, Transport};
    let mut sim = ready(BASE, 3);
    let socket = sim.connect();
    let (tx, mut outbox) = ClientTx::channel(16, &tokio_util::sync::CancellationToken::new());
    let http = ClientId(77);
    let peer = Peer {
        uid: 0,
        gid: 0,
        pid: None,
        label: None,
        endpoint: None,
        transport: Transport::HttpSession,
    };
    sim.input(Input::Session(SessionEvent::Connected(http, tx, peer)));
    for (client, id) in [(socket, 5), (http, 7)] {
        let line = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#);
        let m = message::parse_one(line.as_bytes()).expect("a valid ping");
        sim.server
            .handle(Input::Session(SessionEvent::Message(client, m)));
        let pending = sim.server.outbox.pending().pending();
        assert_eq!(pending.len(), 1, "one effect: {pending:?}");
        let Effect::Deliver {
            client: to,
            address,
            line,
            ..
        } = &pending[0]
        else {
            panic!("not a delivery: {pending:?}");
        };
        assert_eq!(*to, client);
        let answer: Value = serde_json::from_slice(line.to_bytes().as_ref()).expect("JSON");
        assert_eq!(answer["id"], id, "{answer}");
        assert_eq!(answer["result"], json!({}), "{answer}");
        match (client == http, address) {
            (false, None) => {}
            (true, Some(Address::Response(key))) => assert_eq!(key, "7"),
            other => panic!("wrong address for {client:?}: {other:?}"),
        }
        sim.server.step(Input::Timer);
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    let (address, line) = rt
        .block_on(outbox.recv())
        .expect("the HTTP answer, once drained");
    assert!(matches!(address, Address::Response(k) if k == "7"));
    assert!(String::from_utf8_lossy(&line.to_bytes()).contains("\"id\":7"));
}

/// Issue 27 §1: the stop ladder and the spawn are effects too. An operator's `stop` leaves the
/// child running until the shell carries out the `Stop` the core decided; the `start` that
/// follows decides a `Spawn` of the next generation, and no spawn happens before the shell
/// carries it out.
#[test]
fn stop_and_spawn_are_effects_the_shell_carries_out() {
    use super::effects::Effect;
    let mut sim = ready(BASE, 4);
    let generation = sim.current_generation().expect("a child runs");
    let (done, _wait) = oneshot::channel();
    sim.server.handle(Input::Command(Command::Stop(done)));
    let pending = sim.server.outbox.pending().pending();
    assert!(
        matches!(pending, [Effect::Stop { generation: g }] if *g == generation),
        "{pending:?}"
    );
    assert!(
        sim.server.life.child().is_some_and(|c| !c.stopping()),
        "the ladder waits for the shell"
    );
    sim.server.step(Input::Timer);
    assert!(sim.server.life.child().is_some_and(|c| c.stopping()));
    assert_eq!(sim.stops(), vec![generation]);
    sim.child_exits(false);
    assert_eq!(sim.server.life.state(), State::Stopped);
    let spawned = lock(&sim.world).spawns;
    let (done, _wait) = oneshot::channel();
    sim.server.handle(Input::Command(Command::Start(done)));
    let pending = sim.server.outbox.pending().pending();
    assert!(
        matches!(pending, [Effect::Spawn { generation: g, .. }] if *g == generation + 1),
        "{pending:?}"
    );
    assert_eq!(lock(&sim.world).spawns, spawned, "not spawned yet");
    sim.server.step(Input::Timer);
    assert_eq!(lock(&sim.world).spawns, spawned + 1, "spawned by the shell");
}

/// Issue 27 §1 (`Effect::ToChild`, `Input::Unwritten`): a child whose stdin queue is full
/// refuses a forwarded request when the shell writes it; the client is answered -32002 at
/// once (one outcome, nothing left in flight), another client's later request goes through
/// once the child reads again.
#[test]
fn a_request_the_childs_full_queue_refuses_is_answered_limit_exceeded_at_once() {
    let mut sim = ready(BASE, 5);
    let (a, b) = (sim.connect(), sim.connect());
    lock(&sim.world).stdin_full = true;
    sim.send(a, &call(a, 1));
    let refused = responses(&sim, a);
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0]["id"], 1, "{refused:?}");
    assert_eq!(refused[0]["error"]["code"], -32002, "{refused:?}");
    assert!(refused[0]["error"]["message"]
        .as_str()
        .unwrap_or("")
        .contains("not reading its input"));
    assert_eq!(sim.server.routing.inflight().len(), 0, "not in flight");
    assert_eq!(
        sim.server.outbox.ledger().len(),
        0,
        "its one outcome is written"
    );
    lock(&sim.world).stdin_full = false;
    sim.send(b, &call(b, 2));
    assert_eq!(sim.server.routing.inflight().len(), 1, "written this time");
    answer_all(&mut sim);
    assert_eq!(responses(&sim, b).len(), 1);
}

/// The `requests_in_flight` gauge of server `name`, as the metrics endpoint renders it.
fn in_flight_gauge(name: &str) -> Option<u64> {
    let text = support::observe::metrics().render();
    let key = format!("mcp_supervisor_requests_in_flight{{server=\"{name}\"}} ");
    let line = text.lines().find(|l| l.starts_with(&key))?;
    line[key.len()..].trim().parse().ok()
}

/// The `requests_in_flight` gauge is the in-flight table's size after every input, whichever
/// decision removed an entry: a request the child's full queue refused, a round trip, and the
/// requests failed at once by the child's exit. (A snapshot taken before a removal once left
/// it one too high after a refused write.)
#[test]
fn the_in_flight_gauge_is_the_tables_size_after_every_input() {
    let name = "gauge-after-every-input";
    let mut sim = ready(
        &BASE.replace("[servers.sim]", &format!("[servers.{name}]")),
        7,
    );
    let a = sim.connect();
    lock(&sim.world).stdin_full = true;
    sim.send(a, &call(a, 1));
    assert_eq!(responses(&sim, a).len(), 1, "refused at once");
    assert_eq!(in_flight_gauge(name), Some(0), "after the refused write");
    lock(&sim.world).stdin_full = false;
    sim.send(a, &call(a, 2));
    assert_eq!(in_flight_gauge(name), Some(1), "written");
    answer_all(&mut sim);
    assert_eq!(in_flight_gauge(name), Some(0), "answered");
    sim.send(a, &call(a, 3));
    sim.send(a, &call(a, 4));
    assert_eq!(in_flight_gauge(name), Some(2), "two written");
    sim.child_exits(true);
    assert_eq!(in_flight_gauge(name), Some(0), "failed by the exit");
}

#[test]
fn case_k06_a_list_in_flight_does_not_take_a_sampling_request_from_a_call() {
    // Issue 31: an endpoint's fan-outs keep lists in flight at every source; the child's
    // request goes to the client whose call can cause it, not to a later list.
    let mut sim = ready(BASE, 18);
    let sampler = |sim: &mut Sim, name: &str| {
        let c = sim.connect();
        let init = json!({"jsonrpc": "2.0", "id": "i", "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {"sampling": {}},
            "clientInfo": {"name": name, "version": "1"}}});
        sim.send(c, &init.to_string());
        sim.send(
            c,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        );
        c
    };
    let (a, b) = (sampler(&mut sim, "caller"), sampler(&mut sim, "lister"));
    sim.send(a, &call(a, 1));
    sim.send(b, r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#);
    let generation = sim.current_generation().unwrap_or(0);
    sim.child_writes(
        generation,
        r#"{"jsonrpc":"2.0","id":"s1","method":"sampling/createMessage","params":{}}"#.into(),
    );
    let asked: Vec<Value> = requests_to(&sim, a);
    assert!(
        asked
            .iter()
            .any(|v| v["method"] == "sampling/createMessage"),
        "{asked:?}"
    );
    assert!(requests_to(&sim, b).is_empty(), "the lister was asked");
}
