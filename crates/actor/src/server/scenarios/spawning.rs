//! Spawns off the actor's thread (issue 27 §3) on the fake clock: while a spawn is held the
//! server is `starting` with no pid, requests wait for it, and a stop, a restart or the
//! `start_timeout` asked meanwhile is carried out as soon as the instance exists.

use super::*;

const INIT: &str = r#"{"jsonrpc":"2.0","id":"i","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;

/// Lets the held spawns through.
fn release(sim: &mut Sim) {
    lock(&sim.world).hold_spawns = false;
    sim.deliver_spawns();
}

#[test]
fn a_held_spawn_is_starting_with_no_pid_and_its_waiting_client_is_served_once_it_exists() {
    let mut sim = Sim::with_spawns_held(BASE, 1);
    let st = sim.server.status();
    assert_eq!(st.state, State::Starting);
    assert_eq!(st.pid, None);
    assert_eq!(lock(&sim.world).pending.len(), 1, "one spawn under way");
    let c = sim.connect();
    sim.send(c, INIT);
    sim.send(c, &call(c, 1));
    sim.at(500);
    // A start asked meanwhile makes no second instance.
    let (tx, _rx) = oneshot::channel();
    sim.input(Input::Command(Command::Start(tx)));
    assert_eq!(lock(&sim.world).pending.len(), 1, "still one spawn");
    assert!(
        responses(&sim, c).is_empty(),
        "nothing answered before the child exists"
    );
    release(&mut sim);
    assert_eq!(sim.server.status().pid, Some(10_001));
    answer_all(&mut sim);
    answer_all(&mut sim);
    answer_all(&mut sim);
    let got = responses(&sim, c);
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(got[1]["result"]["content"][0]["text"], format!("{}-x", c.0));
}

#[test]
fn a_stop_asked_during_a_held_spawn_stops_the_instance_as_soon_as_it_exists() {
    let mut sim = Sim::with_spawns_held(BASE, 2);
    let (tx, _rx) = oneshot::channel();
    sim.input(Input::Command(Command::Stop(tx)));
    assert_eq!(sim.server.status().state, State::Stopping);
    release(&mut sim);
    assert_eq!(sim.stops(), vec![1], "the new instance is stopped at once");
    assert!(
        sim.written_methods().is_empty(),
        "nothing is sent to an instance that is being stopped"
    );
    sim.child_exits(false);
    assert_eq!(sim.server.status().state, State::Stopped);
}

#[test]
fn a_restart_asked_during_a_held_spawn_replaces_the_instance_once_it_exists() {
    let mut sim = Sim::with_spawns_held(BASE, 3);
    let (tx, _rx) = oneshot::channel();
    sim.input(Input::Command(Command::Restart(tx)));
    release(&mut sim);
    assert_eq!(sim.stops(), vec![1]);
    sim.child_exits(false);
    sim.at(10);
    answer_all(&mut sim);
    assert_eq!(sim.server.status().state, State::Ready);
    assert_eq!(sim.current_generation(), Some(2));
}

#[test]
fn a_spawn_held_past_start_timeout_ends_as_start_timeout_once_the_instance_exists() {
    let mut sim = Sim::with_spawns_held(BASE, 4);
    let c = sim.connect();
    sim.send(c, INIT);
    sim.at(5_000);
    assert_eq!(sim.server.status().state, State::Stopping);
    release(&mut sim);
    assert_eq!(sim.stops(), vec![1]);
    sim.child_exits(false);
    let st = sim.server.status();
    assert_eq!(st.state, State::Backoff, "a failed start is retried");
    assert_eq!(
        st.last_exit.map(|e| e.reason.to_string()).as_deref(),
        Some("start-timeout")
    );
}

#[test]
fn a_failed_held_spawn_is_a_spawn_error_and_a_stop_asked_meanwhile_keeps_it_stopped() {
    let mut sim = Sim::with_spawns_held(BASE, 5);
    // The first spawn succeeds but is held; make the next one fail.
    let (tx, _rx) = oneshot::channel();
    sim.input(Input::Command(Command::Restart(tx)));
    release(&mut sim);
    lock(&sim.world).fail_next_spawn = true;
    lock(&sim.world).hold_spawns = true;
    sim.child_exits(false);
    sim.at(10);
    let (tx, _rx) = oneshot::channel();
    sim.input(Input::Command(Command::Stop(tx)));
    release(&mut sim);
    let st = sim.server.status();
    assert_eq!(st.state, State::Stopped, "the stop decides");
    assert_eq!(
        st.last_exit.map(|e| e.reason.to_string()).as_deref(),
        Some("spawn-error")
    );
    assert!(
        st.stderr_tail.contains("simulated spawn failure"),
        "{}",
        st.stderr_tail
    );
}

/// A client that sends its `initialize` and a call, then closes its input while the child
/// starts (README's one-shot `printf ... | mcp-supervisor attach`) gets both answers: releasing
/// the held queue answers `initialize` first, and the call still held keeps the client (it was
/// once dropped then, as nothing was in flight and the queue had been drained into a list,
/// and the call was never answered).
#[test]
fn a_client_that_closes_its_input_while_the_child_starts_gets_every_answer() {
    let mut sim = Sim::with_spawns_held(BASE, 5);
    let c = sim.connect();
    sim.send(c, INIT);
    sim.send(
        c,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    );
    sim.send(c, &call(c, 2));
    sim.input(Input::Session(SessionEvent::InputClosed(c)));
    assert!(
        responses(&sim, c).is_empty(),
        "nothing yet: the child does not exist"
    );
    release(&mut sim);
    answer_all(&mut sim); // the handshake: ready, the held requests are released
    answer_all(&mut sim); // the call (and the list prefetch)
    let got = responses(&sim, c);
    let ids: Vec<Value> = got.iter().map(|v| v["id"].clone()).collect();
    assert_eq!(ids, vec![json!("i"), json!(2)], "{got:?}");
    assert!(
        !sim.server.outbox.clients().contains_key(&c),
        "then, with nothing left to answer, the client is closed"
    );
}
