//! Deadlines on the fake clock (issue 48 §6): what the integration tests asserted with elapsed
//! wall-clock time is asserted here to the millisecond, on virtual time: an answer comes no
//! earlier than its deadline and no later.

use super::{call, ready, responses, Sim, BASE};
use crate::server::State;

/// Milliseconds of virtual time since the first spawn.
fn now_ms(sim: &Sim) -> u64 {
    sim.now
        .saturating_duration_since(sim.world_start())
        .as_millis() as u64
}

/// A `tools/call` of `slow` with `_meta.progressToken` `token`.
fn call_with_progress(id: u64, token: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"slow","arguments":{{}},"_meta":{{"progressToken":"{token}"}}}}}}"#
    )
}

/// Replaces `tests/it/health.rs`'s wall-clock bound on
/// `progress_forever_does_not_extend_the_method_deadline`: progress every 50 ms relays to the
/// caller and never moves the method's deadline (`method_timeouts`, absolute from the send).
#[test]
fn progress_every_50_ms_reaches_the_caller_and_never_moves_the_method_deadline() {
    let toml = BASE.replace(
        "request_timeout = \"2s\"",
        "request_timeout = \"30s\"\nmethod_timeouts = { \"tools/call\" = \"1s\" }",
    );
    let mut sim = ready(&toml, 11);
    let a = sim.connect();
    let t0 = now_ms(&sim);
    // The harness checks progress reaches its own client by the token's `p-CLIENT-` prefix.
    let mine = format!("p-{}-forever", a.0);
    sim.send(a, &call_with_progress(7, &mine));
    let asked = sim.asked.pop().expect("the child was asked");
    let token = asked.progress.clone().expect("the actor put a token on it");
    let mut step = 0;
    while t0 + (step + 1) * 50 < t0 + 1000 {
        step += 1;
        sim.at(t0 + step * 50);
        let line = serde_json::json!({"jsonrpc": "2.0", "method": "notifications/progress",
            "params": {"progressToken": token, "progress": step}});
        sim.child_writes(asked.generation, line.to_string());
    }
    sim.at(t0 + 999);
    assert!(
        responses(&sim, a).is_empty(),
        "no answer before the 1 s method deadline"
    );
    let relayed = sim.clients[&a]
        .received
        .iter()
        .filter(|m| {
            m["method"] == "notifications/progress" && m["params"]["progressToken"] == mine.as_str()
        })
        .count();
    assert_eq!(relayed as u64, step, "every progress reached the caller");
    sim.at(t0 + 1000);
    let r = responses(&sim, a);
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(r[0]["id"], 7, "{r:?}");
    assert_eq!(r[0]["error"]["code"], -32001, "{r:?}");
}

/// Replaces `tests/it/health.rs`'s wall-clock bound on
/// `request_during_backoff_fails_past_queue_wait_with_retry_after` and on the crash loop's
/// "fast" answers (K19): a request sent during a 4 s backoff is held for `queue_wait`
/// (300 ms), then answered with the backoff outage and when the next attempt comes.
#[test]
fn a_request_during_a_long_backoff_fails_at_queue_wait_with_retry_after() {
    let toml = BASE
        .replace("backoff_initial = \"100ms\"", "backoff_initial = \"4s\"")
        .replace("backoff_max = \"1s\"", "backoff_max = \"8s\"")
        .replace("queue_wait = \"1s\"", "queue_wait = \"300ms\"");
    let mut sim = ready(&toml, 12);
    let a = sim.connect();
    sim.child_exits(true);
    assert_eq!(sim.server.status().state, State::Backoff);
    let t0 = now_ms(&sim);
    sim.send(a, &call(a, 3));
    sim.at(t0 + 299);
    assert!(responses(&sim, a).is_empty(), "held until queue_wait");
    sim.at(t0 + 300);
    let r = responses(&sim, a);
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(r[0]["result"]["isError"], true, "a tool result: {r:?}");
    let record = &r[0]["result"]["_meta"]["mcp-supervisor/outage"];
    assert_eq!(record["status"], "backoff", "{r:?}");
    let retry = record["retry_after_ms"].as_u64().expect("retry_after_ms");
    assert!(
        (1..=8000).contains(&retry),
        "the next attempt is within the backoff: {r:?}"
    );
}
