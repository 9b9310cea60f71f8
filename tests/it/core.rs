//! The per-server core under hostile input (issue 12): malformed child replies (K21), nested
//! ids in oversized replies (K22), duplicate in-flight ids (K23), a busy single-threaded
//! child (K24), `requestState` kept byte-exact (K25), and a hung child under steady traffic.

use crate::harness::*;
use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, Instant};

const V: &str = "2026-07-28";

/// A 2026-07-28 request: `params` plus the envelope in `_meta`.
fn modern_request(id: Value, method: &str, mut params: Value) -> Value {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": V,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "modern", "version": "1"},
    });
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

fn server_with_log(args: &[&str], log: &Path, extra: &str) -> String {
    let mut a: Vec<&str> = args.to_vec();
    let l = log.to_str().unwrap();
    a.extend(["--log", l]);
    fake_server("fake", &a, extra)
}

/// The error of a response that must be a JSON-RPC error naming the server.
fn assert_named_error(r: &Value, context: &str) {
    let code = r["error"]["code"].as_i64();
    assert!(
        code.is_some(),
        "{context}: an error with an integer code: {r}"
    );
    let msg = r["error"]["message"].as_str().unwrap_or("");
    assert!(msg.contains("`fake`"), "{context}: names the server: {r}");
}

#[test]
fn case_k21_malformed_child_replies_fail_that_request_only_for_both_eras() {
    let variants = [
        r#""result":[]"#,
        r#""result":5"#,
        r#""result":"x""#,
        r#""error":"oops""#,
        r#""error":{"code":"E1","message":"m"}"#,
        r#""error":{"code":1}"#,
        r#""result":null"#,
        r#""error":null"#,
        r#""result":{},"error":{"code":1,"message":"both"}"#,
    ];
    for raw in variants {
        let sup = Supervisor::start(&fake_server(
            "fake",
            &["--raw-reply", "tools/list", raw],
            "protocol = \"2025-11-25\"\n",
        ));
        // A handshake client and a 2026 client (through the era bridge), on one child.
        let mut a = sup.client("fake");
        let mut m = sup.connect("fake");
        a.send(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}));
        let ra = a
            .response_timeout(&json!(1), Duration::from_secs(10))
            .unwrap_or_else(|| panic!("{raw}: no answer; log:\n{}", sup.log()));
        assert_named_error(&ra, &format!("handshake client, {raw}"));
        m.send(&modern_request(json!("l"), "tools/list", json!({})));
        let rm = m.response(&json!("l"));
        assert_named_error(&rm, &format!("2026 client, {raw}"));
        // The actor lives: the next requests work for both.
        let ok = a.call(json!(2), "echo", json!({"text": "still here"}));
        assert_eq!(Client::text(&ok), "still here", "{raw}: {ok}");
        m.send(&modern_request(
            json!("c"),
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "modern too"}}),
        ));
        let ok = m.response(&json!("c"));
        assert_eq!(Client::text(&ok), "modern too", "{raw}: {ok}");
        let log = sup.log();
        assert!(!log.contains("panicked"), "{raw}: no panic:\n{log}");
    }
}

#[test]
fn case_k22_nested_id_before_the_top_level_id_fails_only_the_right_request() {
    let sup = Supervisor::start(&fake_server(
        "fake",
        &[],
        "max_message_size = 65536\nrequest_timeout = \"20s\"\n",
    ));
    let mut a = sup.client("fake");
    let mut b = sup.client("fake");
    // B's request is in flight; its child-side id is whatever the supervisor chose, so the
    // oversized reply names, in its first bytes, every small id that could be B's.
    b.send(&json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "b", "delay_ms": 1500}}}));
    let mut failures = Vec::new();
    for nested in 1..12 {
        let r = a.call(
            json!(100 + nested),
            "big_id_last",
            json!({"bytes": 200_000, "nested_id": nested}),
        );
        // The outage answer of a discarded answer (issue 47 §7), under A's own id.
        let o = &r["result"]["_meta"]["mcp-supervisor/outage"];
        if r["id"] != json!(100 + nested)
            || o["detail"] != "too_large"
            || !Client::text(&r).contains("max_message_size")
        {
            failures.push(r);
        }
    }
    assert!(
        failures.is_empty(),
        "each oversized reply failed its own request: {failures:?}"
    );
    let rb = b.response(&json!(3));
    assert_eq!(Client::text(&rb), "b", "B's request is untouched: {rb}");
}

#[test]
fn case_k23_duplicate_in_flight_id_is_refused_and_the_first_completes() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("child.log");
    let sup = Supervisor::start(&server_with_log(&[], &log, ""));
    let mut a = sup.client("fake");
    for id in [json!(1), json!("1"), json!("dup")] {
        a.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "slow", "arguments": {"ms": 1500}}}));
        a.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "second"}}}));
        let first = a.response(&id);
        assert_eq!(
            first["error"]["code"], -32600,
            "the duplicate is refused: {first}"
        );
        assert!(
            first["error"]["message"]
                .as_str()
                .unwrap_or("")
                .contains("duplicate request id"),
            "{first}"
        );
        let done = a.response(&id);
        assert_eq!(Client::text(&done), "done", "the first completes: {done}");
        assert!(
            a.response_timeout(&id, Duration::from_millis(300))
                .is_none(),
            "never two responses for one id"
        );
    }
    let echoes = child_saw(&log)
        .iter()
        .filter(|l| l.contains("\"second\""))
        .count();
    assert_eq!(echoes, 0, "no duplicate reached the child");
}

#[test]
fn case_k24_busy_single_threaded_child_gets_one_probe_and_keeps_ping() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("child.log");
    let sup = Supervisor::start(&server_with_log(
        &["--serial"],
        &log,
        "probe_interval = \"1s\"\nprobe_timeout = \"1s\"\nprobe_failures = 2\n\
         request_timeout = \"30s\"\nprotocol = \"2025-11-25\"\n",
    ));
    let mut a = sup.client("fake");
    let r = a.call(json!(1), "slow", json!({"ms": 8000}));
    assert_eq!(Client::text(&r), "done", "{r}");
    let pings = child_saw_method(&log, "ping");
    assert_eq!(pings, 1, "one probe during the 8 s call, never a burst");
    let lists = child_saw_method(&log, "tools/list");
    // One prefetch at ready; no confirming tools/list probes (ping was answered, late).
    assert_eq!(lists, 1, "ping stays the probe; log:\n{}", sup.log());
    let status = sup.status_json();
    assert_eq!(status["servers"][0]["ping_served"], true, "{status}");
    assert_eq!(status["servers"][0]["restarts"], 0, "{status}");
}

#[test]
fn case_k25_request_state_is_omitted_when_absent_and_byte_exact_when_present() {
    for mode in ["none", "tricky"] {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("child.log");
        let sup = Supervisor::start(&server_with_log(
            &["--era", "modern", "--request-state", mode],
            &log,
            "",
        ));
        let mut a = sup.connect("fake");
        a.initialize("asker", json!({"elicitation": {}}));
        a.send(&json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": "confirm", "arguments": {}}}));
        let q = a
            .server_request("elicitation/create", Duration::from_secs(5))
            .expect("the input request reaches the client");
        a.send(&json!({"jsonrpc": "2.0", "id": q["id"], "result": {"action": "accept", "content": {"ok": true}}}));
        let r = a.response(&json!(7));
        assert!(
            Client::text(&r).starts_with("confirmed:"),
            "{mode}: the retry was accepted: {r}"
        );
        let retry = child_saw(&log)
            .into_iter()
            .rfind(|l| l.contains("inputResponses"))
            .unwrap();
        match mode {
            "none" => assert!(!retry.contains("requestState"), "{retry}"),
            _ => assert!(
                retry.contains(r#""requestState":"q\"b\\s\u2028e😀""#),
                "byte-exact state: {retry}"
            ),
        }
    }
}

#[test]
fn hung_child_under_steady_traffic_is_replaced() {
    // Issue 12: a request every 0.5 s must not postpone the verdict on a wedged child.
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    let p = pids.to_str().unwrap();
    let sup = Supervisor::start(&fake_server(
        "fake",
        &["--wedge-after-init", "--pidfile", p, "--ignore-stdin-eof"],
        "request_timeout = \"3s\"\nprobe_interval = \"1s\"\nprobe_timeout = \"1s\"\n\
         probe_failures = 2\nstop_grace = \"200ms\"\nkill_timeout = \"1s\"\n\
         backoff_initial = \"200ms\"\nprotocol = \"2025-11-25\"\n",
    ));
    let mut a = sup.client("fake");
    let start = Instant::now();
    let mut n = 0u64;
    let replaced = loop {
        if pidfile(&pids).len() >= 2 {
            break true;
        }
        if start.elapsed() > Duration::from_secs(30) {
            break false;
        }
        n += 1;
        a.send(&json!({"jsonrpc": "2.0", "id": n, "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "x"}}}));
        // One request every 0.5 s, paced by waiting for nothing in particular.
        let _ = a.response_timeout(&json!(u64::MAX), Duration::from_millis(500));
    };
    assert!(
        replaced,
        "the wedged child was replaced; log:\n{}",
        sup.log()
    );
    // request_timeout 3 s + probe at once + 2 × 1 s: well under 30 s.
    assert!(
        sup.log().contains("probe-timeout"),
        "declared dead by the probes; log:\n{}",
        sup.log()
    );
}

#[test]
fn a_panicked_actor_is_restarted_clients_are_told_and_the_server_serves_again() {
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    let p = pids.to_str().unwrap();
    let config = dir.path().join("supervisor.toml");
    std::fs::write(
        &config,
        format!(
            "[supervisor]\nsocket_dir = {:?}\n\n{}",
            dir.path().join("run"),
            fake_server("fake", &["--pidfile", p], "protocol = \"2025-11-25\"\n")
        ),
    )
    .unwrap();
    let sup = Supervisor::spawn_with(
        tempfile::tempdir().unwrap(),
        config,
        &[("MCP_SUPERVISOR_TEST_PANIC", "test/panic")],
    );
    assert!(wait_until(Duration::from_secs(10), || pidfile(&pids).len() == 1));
    let first = pidfile(&pids)[0].0;
    let socket = dir.path().join("run").join("fake.sock");
    assert!(wait_until(Duration::from_secs(10), || socket.exists()));
    let mut a = Client::connect(&socket);
    a.initialize("a", json!({}));
    let mut b = Client::connect(&socket);
    b.initialize("b", json!({}));
    a.send(&json!({"jsonrpc": "2.0", "id": 9, "method": "test/panic"}));
    // Both clients of the dead actor are told why, then disconnected.
    for c in [&mut a, &mut b] {
        let told = c
            .recv_timeout(Duration::from_secs(10))
            .expect("an error line");
        assert!(
            told["error"]["message"]
                .as_str()
                .unwrap_or("")
                .contains("reconnect"),
            "{told}"
        );
        assert!(c.closed_within(Duration::from_secs(10)), "disconnected");
    }
    // The child was stopped through the ladder and a new one started, one at a time.
    assert!(
        wait_until(Duration::from_secs(15), || pidfile(&pids).len() == 2),
        "a new child; log:\n{}",
        sup.log()
    );
    assert!(!alive(first), "the dead actor's child is gone");
    // A new connection works at once, and status says what happened.
    let mut c = Client::connect(&socket);
    c.initialize("c", json!({}));
    let r = c.call(json!(1), "echo", json!({"text": "back"}));
    assert_eq!(Client::text(&r), "back", "{r}");
    let st = sup.status_json();
    assert_eq!(st["servers"][0]["actor_restarts"], 1, "{st}");
    assert!(
        st["servers"][0]["last_actor_panic"]
            .as_str()
            .unwrap_or("")
            .contains("test hook"),
        "{st}"
    );
    assert!(sup.log().contains("actor panicked"), "{}", sup.log());
}

#[test]
fn subscriptions_per_client_are_bounded_by_max_subscriptions() {
    let sup = Supervisor::start(&fake_server(
        "fake",
        &[],
        "max_subscriptions = 2\nprotocol = \"2025-11-25\"\n",
    ));
    let mut a = sup.client("fake");
    let mut b = sup.client("fake");
    for (i, uri) in ["file:///a", "file:///b"].iter().enumerate() {
        let r = a.request(json!(i), "resources/subscribe", json!({"uri": uri}));
        assert_eq!(r["result"], json!({}), "{r}");
    }
    let r = a.request(json!(9), "resources/subscribe", json!({"uri": "file:///c"}));
    assert_eq!(r["error"]["code"], -32002, "over the limit: {r}");
    // The limit is per client: another client is unaffected.
    let r = b.request(json!(1), "resources/subscribe", json!({"uri": "file:///c"}));
    assert_eq!(r["result"], json!({}), "{r}");
    // Unsubscribing makes room again.
    let r = a.request(
        json!(10),
        "resources/unsubscribe",
        json!({"uri": "file:///a"}),
    );
    assert_eq!(r["result"], json!({}), "{r}");
    let r = a.request(
        json!(11),
        "resources/subscribe",
        json!({"uri": "file:///c"}),
    );
    assert_eq!(r["result"], json!({}), "{r}");
}

/// Issue 13 Why 4: a JSON-RPC batch (2024-11-05, 2025-03-26) is answered as one array: a
/// response per request and an error per invalid member, in one line, while other traffic of
/// the same client passes as usual; a batch of notifications gets nothing.
#[test]
fn a_json_rpc_batch_is_answered_as_one_array_line() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("child.log");
    let sup = Supervisor::start(&server_with_log(&[], &log, ""));
    let mut a = sup.client("fake");
    let batch = json!([
        {"jsonrpc": "2.0", "id": "b1", "method": "tools/call",
            "params": {"name": "slow", "arguments": {"ms": 300}}},
        {"jsonrpc": "2.0", "method": "notifications/progress",
            "params": {"progressToken": "none", "progress": 1}},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "in a batch"}}},
        {"jsonrpc": "1.0", "id": 3, "method": "x"},
    ]);
    a.send(&batch);
    // Outside the batch, answered on its own while the batch waits for its slow member.
    let r = a.call(json!("solo"), "echo", json!({"text": "solo"}));
    assert_eq!(Client::text(&r), "solo", "{r}");
    let arr = a
        .recv_timeout(Duration::from_secs(10))
        .expect("the batch is answered");
    let items = arr
        .as_array()
        .unwrap_or_else(|| panic!("not one array: {arr}"));
    assert_eq!(items.len(), 3, "two responses and one error: {arr}");
    let by_id = |id: Value| items.iter().find(|v| v["id"] == id).cloned();
    assert_eq!(
        by_id(json!("b1")).map(|v| Client::text(&v)),
        Some("done".into())
    );
    assert_eq!(
        by_id(json!(2)).map(|v| Client::text(&v)),
        Some("in a batch".into())
    );
    assert_eq!(
        by_id(Value::Null).map(|v| v["error"]["code"].clone()),
        Some(json!(-32600))
    );
    // Only notifications: no answer at all.
    a.send(&json!([{"jsonrpc": "2.0", "method": "notifications/initialized"}]));
    let r = a.call(json!("after"), "echo", json!({"text": "after"}));
    assert_eq!(Client::text(&r), "after", "{r}");
    assert!(a.backlog.is_empty(), "{:?}", a.backlog);
}

/// The actor's supervisor (issue 26 §2): an actor that panics at every spawn (the child is
/// forked, then the actor dies, as `now + start_timeout` once overflowed) is restarted with
/// backoff, not in the same poll, and after 5 panics the server is `failed` with the panic
/// message; the other server of the daemon serves meanwhile; `start` clears it.
#[test]
fn an_actor_that_panics_at_every_spawn_backs_off_then_fails_and_start_clears_it() {
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    let p = pids.to_str().unwrap();
    let config = dir.path().join("supervisor.toml");
    std::fs::write(
        &config,
        format!(
            "[supervisor]\nsocket_dir = {:?}\n\n{}\n{}",
            dir.path().join("run"),
            fake_server("bad", &["--pidfile", p], "protocol = \"2025-11-25\"\n"),
            fake_server("good", &[], "protocol = \"2025-11-25\"\n"),
        ),
    )
    .unwrap();
    let sup = Supervisor::spawn_with(
        tempfile::tempdir().unwrap(),
        config,
        &[("MCP_SUPERVISOR_TEST_PANIC", "@spawn:bad")],
    );
    let good = dir.path().join("run").join("good.sock");
    assert!(wait_until(Duration::from_secs(10), || good.exists()));
    let mut c = Client::connect(&good);
    c.initialize("c", json!({}));
    // The other server answers while `bad` panics and backs off.
    for i in 0..3 {
        let r = c.call(json!(i), "echo", json!({"text": "alive"}));
        assert_eq!(Client::text(&r), "alive", "{r}");
    }
    // Five panics with delays of about 1, 2, 4 and 8 s between them, then failed.
    let failed = wait_until(Duration::from_secs(40), || {
        sup.server_status("bad")["state"] == "failed"
    });
    let st = sup.server_status("bad");
    assert!(failed, "never failed: {st}\n{}", sup.log());
    assert_eq!(st["actor_restarts"], 5, "{st}");
    assert!(
        st["last_actor_panic"]
            .as_str()
            .unwrap_or("")
            .contains("@spawn:bad"),
        "{st}"
    );
    // One spawn per actor: the restarts were paced, not a fork loop in one poll.
    assert_eq!(pidfile(&pids).len(), 5, "spawns: {:?}", pidfile(&pids));
    for (pid, _) in pidfile(&pids) {
        assert!(
            wait_until(Duration::from_secs(15), || !alive(pid)),
            "child {pid} left behind"
        );
    }
    // A client of the failed server is told why at once, not left hanging.
    let mut d = Client::connect(&dir.path().join("run").join("bad.sock"));
    let told = d.recv_timeout(Duration::from_secs(5)).expect("an error");
    assert!(
        told["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("mcp-supervisor start bad"),
        "{told}"
    );
    assert!(d.closed_within(Duration::from_secs(5)));
    let r = c.call(json!(9), "echo", json!({"text": "still"}));
    assert_eq!(Client::text(&r), "still", "{r}");
    // `start` clears the verdict: a fresh actor spawns again.
    let out = std::process::Command::new(SUPERVISOR)
        .args(["start", "bad", "-c"])
        .arg(&sup.config)
        .output()
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || pidfile(&pids).len() == 6),
        "no spawn after start: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        sup.log()
    );
}

/// Issue 26 §8: the log line of a request that failed names its method (it was empty for a
/// request past its deadline), and the call still gets the -32001 error.
#[test]
fn a_request_past_its_deadline_is_logged_with_its_method() {
    let sup = Supervisor::start(&fake_server(
        "fake",
        &[],
        "request_timeout = \"1s\"\nprotocol = \"2025-11-25\"\n",
    ));
    let mut a = sup.client("fake");
    let r = a.call(json!(1), "slow", json!({"ms": 5000}));
    assert_eq!(r["error"]["code"], -32001, "{r}");
    assert!(sup.wait_log("request failed", Duration::from_secs(5)));
    let log = sup.log();
    let line = log
        .lines()
        .find(|l| l.contains("request failed"))
        .unwrap_or_default();
    assert!(line.contains("tools/call"), "{line}");
}
