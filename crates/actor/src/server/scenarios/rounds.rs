//! `input_required` rounds of 2026-07-28 HTTP requests (K26 over HTTP, issue 16): a round
//! outlives the request that was asked, and the retry, a new client, continues it.

use super::*;

/// A 2026-07-28 HTTP request's `tools/call` (id `c1`) on a ready handshake child (seed
/// `seed`): the simulation, the request's client, the child's generation, the call as the
/// child got it.
fn http_call(seed: u64) -> (Sim, ClientId, u64, super::super::sim::Asked) {
    let mut sim = ready(BASE, seed);
    let generation = sim.current_generation().unwrap_or(0);
    let a = sim.connect_via(crate::session::Transport::HttpRequest);
    sim.send(a, &modern_call(a, "c1", json!({})));
    let call = sim.asked.pop().expect("the call reached the child");
    (sim, a, generation, call)
}

/// K26 over HTTP (issue 16): a 2026-07-28 HTTP request is a client of its own, gone once its
/// `input_required` answer is written; the parked call survives that, is not cancelled toward
/// the child, and the retry (a new POST, so a new client) owns it. A socket client cannot
/// adopt another client's round.
#[test]
fn case_k26_an_http_requests_round_outlives_its_client_and_the_next_request_resumes_it() {
    use crate::session::Transport;
    let (mut sim, a, generation, call) = http_call(13);
    sim.child_writes(
        generation,
        r#"{"jsonrpc":"2.0","id":"s1","method":"roots/list"}"#.into(),
    );
    let r = responses(&sim, a).pop().unwrap_or(Value::Null);
    assert_eq!(r["result"]["resultType"], "input_required", "{r}");
    let state = r["result"]["requestState"].clone();
    sim.clients.remove(&a);
    sim.input(Input::Session(SessionEvent::Disconnected(a)));
    let cancelled = |sim: &Sim| {
        written_to_child(sim).iter().any(|v| {
            v["method"] == "notifications/cancelled" && v["params"]["requestId"] == json!(call.id)
        })
    };
    assert!(!cancelled(&sim), "the parked call outlives its client");
    // A socket client presenting the state is refused: only a stateless request adopts it.
    let s = sim.connect();
    sim.send(
        s,
        &modern_call(s, "x", json!({"requestState": state, "inputResponses": {}})),
    );
    let r = responses(&sim, s).pop().unwrap_or(Value::Null);
    assert_eq!(r["error"]["code"], -32602, "{r}");
    // Another HTTP request with a guessed secret is refused too.
    let guessed = state.as_str().map(|t| {
        let (round, _) = t.rsplit_once('.').unwrap_or((t, ""));
        format!("{round}.0000000000000000")
    });
    let g = sim.connect_via(Transport::HttpRequest);
    sim.send(
        g,
        &modern_call(
            g,
            "y",
            json!({"requestState": guessed, "inputResponses": {}}),
        ),
    );
    let r = responses(&sim, g).pop().unwrap_or(Value::Null);
    assert_eq!(r["error"]["code"], -32602, "{r}");
    // The retry, from another HTTP request's client.
    let b = sim.connect_via(Transport::HttpRequest);
    let roots = json!({"roots": [{"uri": "file:///b", "name": "b"}]});
    sim.send(
        b,
        &modern_call(
            b,
            "c2",
            json!({"requestState": state, "inputResponses": {"r0": roots}}),
        ),
    );
    let to_child = written_to_child(&sim);
    assert!(
        to_child
            .iter()
            .any(|v| v["id"] == "s1" && v["result"]["roots"][0]["uri"] == "file:///b"),
        "the answer reached the child: {to_child:?}"
    );
    let fin = json!({"jsonrpc": "2.0", "id": call.id,
        "result": {"content": [{"type": "text", "text": format!("{}-m", b.0)}]}});
    sim.child_writes(generation, fin.to_string());
    let r = responses(&sim, b).pop().unwrap_or(Value::Null);
    assert_eq!(r["id"], "c2", "{r}");
    assert_eq!(r["result"]["resultType"], "complete", "{r}");
    assert!(!cancelled(&sim));
}

/// The field failure of the TypeScript v2 client over HTTP (CI, 2026-12-01): the child asked
/// a second question (`roots/list`) while the first round's `input_required` answer was on its
/// way, so it was queued for the next round. The retry, a new HTTP request, must get that next
/// round under its own id; it went to the detached owner instead, so the retry hung until the
/// client's timeout and the child's question was never asked.
#[test]
fn case_k26_a_question_queued_behind_a_round_reaches_the_http_request_that_retries() {
    use crate::session::Transport;
    let (mut sim, a, generation, call) = http_call(14);
    sim.child_writes(
        generation,
        r#"{"jsonrpc":"2.0","id":"s1","method":"sampling/createMessage","params":{}}"#.into(),
    );
    // The second question arrives before the first request's client is gone.
    sim.child_writes(
        generation,
        r#"{"jsonrpc":"2.0","id":"s2","method":"roots/list"}"#.into(),
    );
    let r = responses(&sim, a).pop().unwrap_or(Value::Null);
    assert_eq!(r["result"]["resultType"], "input_required", "{r}");
    let asked: Vec<String> = r["result"]["inputRequests"]
        .as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default();
    assert_eq!(asked.len(), 1, "{r}");
    let state = r["result"]["requestState"].clone();
    sim.clients.remove(&a);
    sim.input(Input::Session(SessionEvent::Disconnected(a)));

    // The retry answers the first question and is asked the queued one, under its own id.
    let b = sim.connect_via(Transport::HttpRequest);
    let sampled = json!({"role": "assistant", "model": "m",
        "content": {"type": "text", "text": "hi"}});
    sim.send(
        b,
        &modern_call(
            b,
            "c2",
            json!({"requestState": state, "inputResponses": {asked[0].clone(): sampled}}),
        ),
    );
    let r = responses(&sim, b).pop().unwrap_or(Value::Null);
    assert_eq!(r["id"], "c2", "the retry got the next round: {r}");
    assert_eq!(r["result"]["resultType"], "input_required", "{r}");
    let next: Vec<(String, Value)> = r["result"]["inputRequests"]
        .as_object()
        .map(|o| o.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default();
    assert_eq!(next.len(), 1, "{r}");
    assert_eq!(next[0].1["method"], "roots/list", "{r}");
    let state = r["result"]["requestState"].clone();
    sim.clients.remove(&b);
    sim.input(Input::Session(SessionEvent::Disconnected(b)));

    // The third request answers it; the child's result answers that request.
    let c = sim.connect_via(Transport::HttpRequest);
    let roots = json!({"roots": [{"uri": "file:///c"}]});
    sim.send(
        c,
        &modern_call(
            c,
            "c3",
            json!({"requestState": state, "inputResponses": {next[0].0.clone(): roots}}),
        ),
    );
    let to_child = written_to_child(&sim);
    for s in ["s1", "s2"] {
        assert!(
            to_child
                .iter()
                .any(|v| v["id"] == s && v.get("result").is_some()),
            "{s} answered: {to_child:?}"
        );
    }
    let fin = json!({"jsonrpc": "2.0", "id": call.id,
        "result": {"content": [{"type": "text", "text": format!("{}-m", c.0)}]}});
    sim.child_writes(generation, fin.to_string());
    let r = responses(&sim, c).pop().unwrap_or(Value::Null);
    assert_eq!(r["id"], "c3", "{r}");
    assert_eq!(r["result"]["resultType"], "complete", "{r}");
    assert!(sim.server.rounds.parked_rounds() == 0);
    assert_eq!(
        sim.server.outbox.ledger().len(),
        0,
        "every request has its one outcome"
    );
}
