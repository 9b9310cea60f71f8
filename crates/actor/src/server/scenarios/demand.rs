//! Servers on demand and idle stops (issue 18 §1-2) on the fake clock.

use super::*;
use crate::era::Handshake;
use std::collections::BTreeMap;

/// BASE's handshake child, started on demand and stopped after 10 s unused; calls may take
/// a minute.
fn on_demand() -> String {
    r#"
[servers.sim]
command = "/nonexistent/sim-child"
protocol = "2025-11-25"
request_timeout = "60s"
queue_wait = "1s"
queue_limit = 8
backoff_initial = "100ms"
backoff_max = "1s"
start_timeout = "5s"
start = "on-demand"
idle_stop = "10s"
"#
    .to_string()
}

fn spawns(sim: &Sim) -> usize {
    lock_world_spawned(sim).len()
}

const INIT: &str = r#"{"jsonrpc":"2.0","id":"i","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
const LIST: &str = r#"{"jsonrpc":"2.0","id":"l","method":"tools/list","params":{}}"#;

/// Moves the clock by `ms` and fires the timer.
fn after(sim: &mut Sim, ms: u64) {
    sim.now += Duration::from_millis(ms);
    sim.input(Input::Timer);
}

/// An on-demand simulation holding the record of an earlier run (as `begin` loads it).
fn with_record() -> Sim {
    let mut sim = Sim::with_config(&on_demand(), 21);
    let hs = Handshake::from_result(json!({"protocolVersion": "2025-11-25",
        "capabilities": {"tools": {"listChanged": true}},
        "serverInfo": {"name": "sim", "version": "1"}}));
    let mut lists = BTreeMap::new();
    lists.insert(
        "tools/list",
        json!({"tools": [{"name": "echo", "description": "Echo"}]}),
    );
    sim.server.begin(hs.map(|handshake| crate::record::Record {
        handshake,
        lists,
        saved_at: "2026-12-01T00:00:00Z".into(),
    }));
    sim
}

#[test]
fn an_on_demand_server_answers_the_handshake_and_lists_from_its_record_without_spawning() {
    let mut sim = with_record();
    assert_eq!(sim.server.life.state(), State::Idle);
    let a = sim.connect();
    sim.send(a, INIT);
    sim.send(a, LIST);
    sim.send(a, r#"{"jsonrpc":"2.0","id":"p","method":"ping"}"#);
    let r = responses(&sim, a);
    assert_eq!(r.len(), 3, "{r:?}");
    assert_eq!(r[0]["result"]["serverInfo"]["name"], "sim", "{r:?}");
    assert_eq!(
        r[0]["result"]["_meta"]["mcp-supervisor/cache"]["status"], "idle",
        "{r:?}"
    );
    assert_eq!(
        r[1]["result"]["tools"][0]["description"], "Echo",
        "not marked unavailable"
    );
    assert_eq!(
        r[1]["result"]["_meta"]["mcp-supervisor/cache"]["saved_at"],
        "2026-12-01T00:00:00Z"
    );
    assert_eq!(spawns(&sim), 0, "nothing needed the child");
    assert_eq!(sim.server.life.state(), State::Idle);
    assert_eq!(sim.server.instances.failures(), 0);
    // A later page is not in the record: that one needs the child.
    sim.send(
        a,
        r#"{"jsonrpc":"2.0","id":"n","method":"tools/list","params":{"cursor":"2"}}"#,
    );
    assert_eq!(spawns(&sim), 1);
}

#[test]
fn a_call_starts_the_child_once_for_every_waiting_client_and_idle_stop_is_no_failure() {
    let mut sim = with_record();
    let clients: Vec<ClientId> = (0..3).map(|_| sim.connect()).collect();
    for (n, c) in clients.iter().enumerate() {
        sim.send(*c, &call(*c, n as u64));
    }
    assert_eq!(spawns(&sim), 1, "one spawn for three calls");
    assert_eq!(sim.server.life.state(), State::Starting);
    // The child takes 4 s to answer its handshake: past queue_wait (1 s), within
    // start_timeout (5 s), which is what a request that started the child waits.
    after(&mut sim, 4_000);
    for c in &clients {
        assert!(responses(&sim, *c).is_empty(), "still waiting at 4 s");
    }
    answer_all(&mut sim);
    answer_all(&mut sim);
    for c in &clients {
        let r = responses(&sim, *c);
        assert_eq!(r.len(), 1, "{r:?}");
        assert_eq!(
            r[0]["result"]["content"][0]["text"],
            format!("{}-x", c.0),
            "{r:?}"
        );
    }
    assert_eq!(sim.server.life.state(), State::Ready);
    let generation = sim.current_generation().unwrap_or(0);
    // 9.9 s unused: still running; 10 s: stopped through the ladder.
    after(&mut sim, 9_900);
    assert!(sim.stops().is_empty(), "not idle yet");
    after(&mut sim, 200);
    assert_eq!(sim.stops(), vec![generation], "stopped when idle");
    sim.child_exits(false);
    assert_eq!(sim.server.life.state(), State::Idle);
    assert_eq!(
        sim.server.instances.failures(),
        0,
        "an idle stop is no failure"
    );
    assert_eq!(sim.server.instances.restarts(), 0);
    assert!(sim.server.instances.last_exit().is_none(), "not an outage");
    // Lists still answer from memory, marked idle; the next call starts it again.
    let a = clients[0];
    sim.send(a, LIST);
    assert_eq!(
        responses(&sim, a).pop().unwrap_or(Value::Null)["result"]["_meta"]["mcp-supervisor/cache"]
            ["status"],
        "idle"
    );
    sim.send(a, &call(a, 9));
    assert_eq!(spawns(&sim), 2);
    answer_all(&mut sim);
    answer_all(&mut sim);
    let r = responses(&sim, a).pop().unwrap_or(Value::Null);
    assert_eq!(r["id"], 9, "{r}");
    assert_eq!(r["result"]["content"][0]["text"], format!("{}-x", a.0));
}

#[test]
fn with_no_record_the_first_initialize_starts_the_child_and_waits_for_it() {
    let mut sim = Sim::with_config(&on_demand(), 22);
    assert_eq!(sim.server.life.state(), State::Idle);
    let a = sim.connect();
    sim.send(a, INIT);
    assert_eq!(spawns(&sim), 1);
    assert!(responses(&sim, a).is_empty());
    answer_all(&mut sim);
    let r = responses(&sim, a);
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(r[0]["result"]["protocolVersion"], "2025-11-25", "{r:?}");
    assert!(
        r[0]["result"].get("_meta").is_none(),
        "from the child: {r:?}"
    );
}

#[test]
fn a_held_subscription_or_a_call_in_flight_keeps_the_child_from_idling() {
    let mut sim = with_record();
    let a = sim.connect();
    sim.send(a, &call(a, 1));
    answer_all(&mut sim);
    answer_all(&mut sim);
    // A call the child has not answered: 30 s pass, no idle stop.
    sim.send(a, &call(a, 2));
    after(&mut sim, 30_000);
    assert!(sim.stops().is_empty(), "a call is in flight");
    answer_all(&mut sim);
    // A subscription held: no idle stop either.
    sim.send(
        a,
        r#"{"jsonrpc":"2.0","id":3,"method":"resources/subscribe","params":{"uri":"file:///x"}}"#,
    );
    answer_all(&mut sim);
    after(&mut sim, 30_000);
    after(&mut sim, 30_000);
    assert!(sim.stops().is_empty(), "a subscription is held");
    // Its client leaves: the subscription goes, and 10 s later so does the child.
    sim.clients.remove(&a);
    sim.input(Input::Session(SessionEvent::Disconnected(a)));
    after(&mut sim, 10_000);
    after(&mut sim, 10_000);
    assert_eq!(sim.stops().len(), 1, "idle once nothing holds it");
}

#[test]
fn a_request_during_the_idle_stop_waits_and_starts_the_child_again() {
    let mut sim = with_record();
    let a = sim.connect();
    sim.send(a, &call(a, 1));
    answer_all(&mut sim);
    answer_all(&mut sim);
    after(&mut sim, 10_000);
    assert_eq!(sim.server.life.state(), State::Stopping);
    sim.send(a, &call(a, 2));
    sim.child_exits(false);
    assert_eq!(spawns(&sim), 2, "started again at once");
    answer_all(&mut sim);
    answer_all(&mut sim);
    let r = responses(&sim, a).pop().unwrap_or(Value::Null);
    assert_eq!(r["id"], 2, "{r}");
    assert_eq!(sim.server.instances.failures(), 0);
}

#[test]
fn the_idle_clock_starts_at_readiness_when_nothing_was_forwarded() {
    let mut sim = Sim::with_config(&on_demand(), 23);
    after(&mut sim, 8_000);
    let a = sim.connect();
    // Only `initialize`: it starts the child (no record) and is answered here.
    sim.send(a, INIT);
    answer_all(&mut sim);
    answer_all(&mut sim);
    assert_eq!(sim.server.life.state(), State::Ready);
    after(&mut sim, 9_000);
    assert!(
        sim.stops().is_empty(),
        "idle_stop counts from readiness, not from the actor's start"
    );
    after(&mut sim, 1_100);
    assert_eq!(sim.stops().len(), 1);
}

#[test]
fn a_reload_that_changes_the_command_of_an_idle_server_forgets_its_record() {
    let mut sim = with_record();
    let mut cfg = sim.server.cfg.clone();
    cfg.args = vec!["--other".into()];
    let (tx, _rx) = tokio::sync::oneshot::channel();
    sim.input(Input::Command(Command::Reconfigure(Box::new(cfg), tx)));
    assert_eq!(
        sim.server.life.state(),
        State::Idle,
        "nothing runs, nothing restarts"
    );
    let a = sim.connect();
    sim.send(a, INIT);
    assert_eq!(spawns(&sim), 1, "the old record no longer answers");
    answer_all(&mut sim);
    let r = responses(&sim, a).pop().unwrap_or(Value::Null);
    assert!(
        r["result"].get("_meta").is_none(),
        "from the new child: {r}"
    );
}

#[test]
fn restart_of_an_idle_server_is_a_start_and_counts_no_restart() {
    let mut sim = with_record();
    let (tx, _rx) = tokio::sync::oneshot::channel();
    sim.input(Input::Command(Command::Restart(tx)));
    assert_eq!(spawns(&sim), 1);
    assert_eq!(sim.server.instances.restarts(), 0);
}

/// Issue 26 §7: a failed on-demand start is retried by the first demand after its backoff
/// delay, never by a burst of automatic attempts ending in the ten-minute `failed`; calls in
/// between get the outage answer with `retry_after`, and the held ones fail at once.
#[test]
fn a_failed_lazy_start_is_retried_by_the_first_demand_after_its_backoff_never_failed() {
    let mut sim = with_record();
    let a = sim.connect();
    // Ten starts in a row fail, each the instant the child was spawned by a request.
    for round in 0..10u64 {
        sim.send(a, &call(a, 100 + round));
        assert_eq!(spawns(&sim), round as usize + 1, "one spawn per demand");
        sim.child_exits(true);
        assert_eq!(sim.server.life.state(), State::Idle, "back to idle");
        let st = sim.server.status();
        assert_eq!(
            st.last_exit
                .as_ref()
                .map(|e| e.reason.to_string())
                .as_deref(),
            Some("exited(1)")
        );
        let retry = st.retry_in_ms.expect("when the next start may happen");
        // The held call failed at once, saying when to retry.
        let r = responses(&sim, a);
        let last = r.last().expect("an answer");
        assert!(
            last["error"]["data"]["retry_after_ms"].is_u64() || last["result"]["isError"] == true,
            "{last}"
        );
        // A call inside the delay: the outage answer, no spawn.
        sim.send(a, &call(a, 200 + round));
        assert_eq!(
            spawns(&sim),
            round as usize + 1,
            "no spawn inside the delay"
        );
        assert!(retry <= 1_200, "capped at backoff_max (1 s, +20%): {retry}");
        after(&mut sim, retry + 1);
        assert_eq!(spawns(&sim), round as usize + 1, "nothing starts by itself");
    }
    assert_ne!(sim.server.life.state(), State::Failed);
    // Fixed: the next demand starts it and the call is answered.
    sim.send(a, &call(a, 999));
    answer_all(&mut sim);
    answer_all(&mut sim);
    assert_eq!(sim.server.life.state(), State::Ready);
    let r = responses(&sim, a);
    assert_eq!(r.last().map(|v| v["id"].clone()), Some(json!(999)), "{r:?}");
    assert!(r.last().is_some_and(|v| v.get("result").is_some()), "{r:?}");
}

/// Issue 26 §8: an eager server with `idle_stop` (no record on disk) answers lists from memory
/// while idle, and says when that copy was taken: `saved_at` is a time, never null.
#[test]
fn lists_answered_from_memory_after_an_idle_stop_say_when_they_were_taken() {
    let toml = on_demand().replace("start = \"on-demand\"\n", "");
    let mut sim = ready(&toml, 23);
    let a = sim.connect();
    sim.send(a, LIST);
    answer_all(&mut sim);
    after(&mut sim, 10_100);
    sim.child_exits(false);
    assert_eq!(sim.server.life.state(), State::Idle);
    sim.send(a, LIST);
    let r = responses(&sim, a).pop().unwrap_or(Value::Null);
    let cache = &r["result"]["_meta"]["mcp-supervisor/cache"];
    assert_eq!(cache["status"], "idle", "{r}");
    assert!(cache["saved_at"].is_string(), "{r}");
}

/// R11 with on-demand starts: a first start that waits for the daemon's spawn budget has not
/// failed, so the request that caused it waits for the child like any request during a start
/// (it was once answered at once with a `backoff` outage, as for a child that died before its
/// handshake, which made ten servers started together refuse their first clients).
#[test]
fn a_first_start_deferred_by_the_spawn_budget_holds_its_request_until_the_child_answers() {
    let mut sim = Sim::with_config(&on_demand(), 21);
    assert_eq!(sim.server.life.state(), State::Idle);
    let mut bucket = upstream::child::budget::Bucket::default();
    let now = sim.world_start();
    while bucket.take(now).is_ok() {}
    lock(&sim.world).budget = Some(bucket);
    let a = sim.connect();
    sim.send(a, INIT);
    assert_eq!(
        sim.server.life.state(),
        State::Backoff,
        "waits for the budget"
    );
    let received = sim.clients.get(&a).map(|c| c.received.clone());
    assert!(
        received.as_ref().is_some_and(|r| r.is_empty()),
        "not refused: {received:?}"
    );
    for _ in 0..40 {
        after(&mut sim, 100);
        sim.answer_all_good();
    }
    let answers = &sim
        .clients
        .get(&a)
        .map(|c| c.received.clone())
        .unwrap_or_default();
    let init = answers
        .iter()
        .find(|v| v["id"] == "i")
        .unwrap_or_else(|| panic!("initialize answered: {answers:?}"));
    assert!(init.get("result").is_some(), "{init}");
}
