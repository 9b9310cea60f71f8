//! A 2026-07-28 child on the fake clock (issue 27 §6): what the whole-actor simulation found
//! with children of that era, one scripted scenario each.

use super::*;
use crate::era;

const INIT: &str = r#"{"jsonrpc":"2.0","id":"i","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;

/// [`BASE`] with a child configured for 2026-07-28 (the fake answers `server/discover`).
fn modern() -> String {
    BASE.replace(r#"protocol = "2025-11-25""#, r#"protocol = "2026-07-28""#)
}

/// A 2026 client's `subscriptions/listen` for list changes, with id `id`.
fn listen(id: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "subscriptions/listen", "params": {
        "notifications": {"toolsListChanged": true},
        "_meta": {era::META_VERSION: era::MODERN_VERSION,
            era::META_CAPABILITIES: {}, era::META_CLIENT_INFO: {"name": "m", "version": "1"}}}})
    .to_string()
}

/// Seed 124 of the simulation: a 2026 client's listen stream on a 2026 child ended (the
/// client left; its cancel may cross the child's next notifications), and the child's late
/// traffic on that stream was taken for a session-wide notification: every client got it,
/// handshake ones included, with the child-side `subscriptionId` of a stream they never
/// opened. Traffic of a stream that is no longer open now reaches nobody.
#[test]
fn late_traffic_of_an_ended_listen_stream_reaches_nobody() {
    let mut sim = ready(&modern(), 31);
    let generation = sim.current_generation().unwrap_or(0);
    let h = sim.connect();
    sim.send(h, INIT);
    let m = sim.connect();
    sim.send(m, &listen("L"));
    let stream = written_to_child(&sim)
        .iter()
        .rev()
        .find(|v| v["method"] == "subscriptions/listen")
        .and_then(|v| v["id"].as_u64())
        .unwrap_or(0);
    let tagged = |stream: u64| {
        json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed",
            "params": {"_meta": {era::META_SUBSCRIPTION_ID: stream}}})
        .to_string()
    };
    // While the stream is open, its traffic goes to its client alone, under its own id.
    sim.child_writes(generation, tagged(stream));
    let got = |sim: &Sim, c: ClientId| {
        sim.clients
            .get(&c)
            .map(|c| c.received.clone())
            .unwrap_or_default()
    };
    let on_stream = got(&sim, m);
    assert_eq!(
        on_stream
            .last()
            .map(|v| v["params"]["_meta"][era::META_SUBSCRIPTION_ID].clone()),
        Some(json!("L")),
        "{on_stream:?}"
    );
    sim.clients.remove(&m);
    sim.input(Input::Session(SessionEvent::Disconnected(m)));
    let before = got(&sim, h).len();
    sim.child_writes(generation, tagged(stream));
    let late = got(&sim, h);
    assert_eq!(
        late.len(),
        before,
        "late stream traffic reached a handshake client: {late:?}"
    );
}

/// Seed 274 of the simulation: a 2026 client's `subscriptions/listen` waiting for a starting
/// child was cancelled by the client; the cancel found no request in flight and was dropped,
/// so the stream was opened once the child was ready: a stream its client had closed, fed
/// forever. A cancelled held stream now ends there (no answer, like any cancelled stream).
#[test]
fn a_listen_stream_cancelled_while_held_is_never_opened() {
    for (toml, seed) in [(BASE.to_string(), 32), (modern(), 33)] {
        let mut sim = Sim::with_config(&toml, seed);
        let m = sim.connect();
        sim.send(m, &listen("L"));
        assert_eq!(sim.server.held.len(), 1, "held while the child starts");
        sim.send(
            m,
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"L"}}"#,
        );
        answer_all(&mut sim);
        answer_all(&mut sim);
        let opened = written_to_child(&sim)
            .iter()
            .filter(|v| v["method"] == "subscriptions/listen")
            .count();
        let own = usize::from(toml.contains("2026-07-28"));
        assert_eq!(
            opened, own,
            "only the supervisor's own stream reaches the child"
        );
        assert!(sim.server.subs.listeners().is_empty(), "no stream served");
        assert_eq!(sim.server.held.len(), 0);
        assert_eq!(
            sim.server.outbox.ledger().len(),
            0,
            "the stream's request is finished"
        );
        let got = sim.clients.get(&m).map(|c| c.received.clone());
        assert_eq!(got, Some(vec![]), "nothing for the cancelled stream");
    }
}

/// Issue 47 §6 (row R1): `client_roots = "none"` holds for every era pair and every path a
/// roots request takes. The operator's roots (`file:///srv/shared`) are what the child sees;
/// a client's own (`file:///home/alice`) never reach it, whether the child asks with a
/// handshake-era `roots/list` request (a handshake or a 2026 client in flight) or inside a
/// 2026-07-28 `input_required` round (a handshake client, whose round the supervisor runs,
/// or a 2026 client, which answers the round itself: the hole).
#[test]
fn client_roots_none_holds_for_every_era_pair() {
    let none = "client_roots = \"none\"\nroots = [\"file:///srv/shared\"]\n";
    let configured = json!({"roots": [{"uri": "file:///srv/shared"}]});
    let alice = json!({"roots": [{"uri": "file:///home/alice", "name": "alice"}]});
    let leaked = |sim: &Sim| {
        written_to_child(sim)
            .iter()
            .any(|v| v.to_string().contains("file:///home/alice"))
    };
    for (child_modern, client_modern, seed) in [
        (false, false, 41),
        (false, true, 42),
        (true, false, 43),
        (true, true, 44),
    ] {
        let base = if child_modern {
            modern()
        } else {
            BASE.to_string()
        };
        let mut sim = ready(&format!("{base}{none}"), seed);
        let generation = sim.current_generation().unwrap_or(0);
        let pair = format!("child modern {child_modern}, client modern {client_modern}");
        let c = if client_modern {
            let c = sim.connect();
            sim.send(c, &modern_call(c, "c1", json!({})));
            c
        } else {
            let c = roots_client(&mut sim);
            sim.send(c, &call(c, 1));
            c
        };
        let asked = sim.asked.pop().expect("the call reached the child");
        if !child_modern {
            // The child asks with a request while the call is in flight.
            let r = child_asks_roots(&mut sim, "r").expect("answered");
            assert_eq!(r["result"], configured, "{pair}: {r}");
            assert!(
                requests_to(&sim, c).is_empty(),
                "{pair}: the client was asked"
            );
            continue;
        }
        // A 2026 child answers the call with a round asking for roots.
        let round = json!({"jsonrpc": "2.0", "id": asked.id, "result": {
            "resultType": "input_required", "requestState": "st",
            "inputRequests": {"r": {"method": "roots/list"}}}});
        sim.child_writes(generation, round.to_string());
        if client_modern {
            // The client gets the round and answers it with its own roots.
            let got = responses(&sim, c).pop().unwrap_or(Value::Null);
            assert_eq!(
                got["result"]["resultType"], "input_required",
                "{pair}: {got}"
            );
            sim.send(
                c,
                &modern_call(
                    c,
                    "c2",
                    json!({"requestState": "st", "inputResponses": {"r": alice}}),
                ),
            );
        } else {
            assert!(
                requests_to(&sim, c).is_empty(),
                "{pair}: the client was asked"
            );
        }
        let retry = written_to_child(&sim)
            .into_iter()
            .rev()
            .find(|v| v["method"] == "tools/call")
            .unwrap_or(Value::Null);
        assert_eq!(
            retry["params"]["inputResponses"]["r"], configured,
            "{pair}: {retry}"
        );
        assert!(
            !leaked(&sim),
            "{pair}: the client's roots reached the child"
        );
    }
}

/// Issue 48 §2: what the core hands the upstream with each request is what it knows of it,
/// so a remote session never parses a line. A 2026-07-28 `tools/call` carries its era and the
/// tool's name (`Mcp-Name`); on a handshake-era child the same call carries neither (its
/// POST would have no `Mcp-Name`, so the core does not read the name at all).
#[test]
fn each_request_reaches_the_upstream_with_its_id_method_era_and_a_2026_calls_tool_name() {
    use upstream::Outgoing;
    let last_call = |sim: &Sim| {
        let w = lock(&sim.world);
        let (kind, modern) = w
            .envelopes
            .iter()
            .rev()
            .find(|(k, _)| matches!(k, Outgoing::Request { method, .. } if method == "tools/call"))
            .cloned()
            .expect("a tools/call went to the child");
        let written = w
            .written
            .iter()
            .rev()
            .filter_map(|(_, l)| serde_json::from_slice::<Value>(l).ok())
            .find(|v| v["method"] == "tools/call")
            .expect("its line");
        (kind, modern, written)
    };

    let mut sim = ready(&modern(), 41);
    let m = sim.connect();
    sim.send(m, &modern_call(m, "c1", json!({})));
    let (kind, modern_era, line) = last_call(&sim);
    assert!(modern_era, "a 2026 request says so");
    match kind {
        Outgoing::Request { id, name, .. } => {
            assert_eq!(json!(id), line["id"], "the id the core put on the line");
            assert_eq!(name.as_deref(), Some("echo"), "the tool, for Mcp-Name");
        }
        other => panic!("a request: {other:?}"),
    }

    let mut sim = ready(BASE, 42);
    let h = sim.connect();
    sim.send(h, &call(h, 1));
    let (kind, modern_era, line) = last_call(&sim);
    assert!(!modern_era);
    match kind {
        Outgoing::Request { id, name, .. } => {
            assert_eq!(json!(id), line["id"]);
            assert_eq!(name, None, "not read for a handshake-era request");
        }
        other => panic!("a request: {other:?}"),
    }
}
