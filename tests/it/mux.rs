//! Issue 3: many MCP clients multiplexed onto one child (field cases K02, K06-K10).
//!
//! What the child received is read from the fake server's `--log`; what clients receive is read
//! off their sockets. Every wait has a deadline; the few sleeps let time pass in checks of the
//! form "nothing happens during N seconds" (or are part of a case's script, like K09's 200 ms).

use crate::harness::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

const SERVER: &str = "fake";
const ASKS: [&str; 3] = ["roots/list", "sampling/createMessage", "elicitation/create"];

/// A supervisor running one fake child (`--log` and `--pidfile` in a private directory).
struct Rig {
    sup: Supervisor,
    log: PathBuf,
    pids: PathBuf,
    _tmp: tempfile::TempDir,
}

impl Rig {
    fn new(args: &[&str], extra: &str) -> Rig {
        let tmp = tempfile::tempdir().unwrap();
        let log = tmp.path().join("child.log");
        let pids = tmp.path().join("child.pids");
        let mut all = vec![
            "--log",
            log.to_str().unwrap(),
            "--pidfile",
            pids.to_str().unwrap(),
        ];
        all.extend_from_slice(args);
        let sup = Supervisor::start(&fake_server(SERVER, &all, extra));
        Rig {
            sup,
            log,
            pids,
            _tmp: tmp,
        }
    }

    fn client(&self, name: &str, caps: Value) -> Client {
        let mut c = self.sup.connect(SERVER);
        let r = c.initialize(name, caps);
        assert!(r.get("result").is_some(), "initialize failed: {r}");
        c
    }

    /// Raw lines the child read.
    fn raw(&self) -> Vec<String> {
        child_saw(&self.log)
    }

    /// Every JSON message the child read, in order.
    fn saw(&self) -> Vec<Value> {
        self.raw()
            .iter()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    fn saw_method(&self, method: &str) -> Vec<Value> {
        self.saw()
            .into_iter()
            .filter(|m| m["method"] == method)
            .collect()
    }

    /// `requestId`s of the `notifications/cancelled` the child received.
    fn cancels(&self) -> Vec<Value> {
        self.saw_method("notifications/cancelled")
            .into_iter()
            .map(|m| m["params"]["requestId"].clone())
            .collect()
    }

    /// Waits for the child to have read a message matching `pred`.
    fn wait_saw(&self, timeout: Duration, pred: impl Fn(&Value) -> bool) -> Option<Value> {
        let mut found = None;
        wait_until(timeout, || {
            found = self.saw().into_iter().find(|m| pred(m));
            found.is_some()
        });
        found
    }

    /// The child-side id of the `tools/call` whose arguments contain `key: value`.
    fn child_id_of_call(&self, key: &str, value: &Value) -> Value {
        let m = self
            .wait_saw(Duration::from_secs(10), |m| {
                m["method"] == "tools/call" && m["params"]["arguments"][key] == *value
            })
            .unwrap_or_else(|| {
                panic!(
                    "the child never saw a tools/call with {key}={value}; it saw {:#?}",
                    self.raw()
                )
            });
        m["id"].clone()
    }

    fn pids(&self) -> Vec<i32> {
        pidfile(&self.pids).into_iter().map(|(p, _)| p).collect()
    }

    fn first_pid(&self) -> i32 {
        assert!(
            wait_until(Duration::from_secs(10), || !self.pids().is_empty()),
            "the child never started"
        );
        self.pids()[0]
    }
}

fn capable() -> Value {
    json!({"roots": {"listChanged": true}, "sampling": {}, "elicitation": {}})
}

fn send_request(c: &mut Client, id: Value, method: &str, params: Value) {
    c.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
}

fn send_call(c: &mut Client, id: Value, tool: &str, args: Value) {
    send_request(
        c,
        id,
        "tools/call",
        json!({"name": tool, "arguments": args}),
    );
}

fn notify(c: &mut Client, method: &str, params: Value) {
    c.send(&json!({"jsonrpc": "2.0", "method": method, "params": params}));
}

fn cancel(c: &mut Client, request_id: Value) {
    notify(
        c,
        "notifications/cancelled",
        json!({"requestId": request_id, "reason": "user cancelled"}),
    );
}

/// Everything the client has received so far: its backlog plus whatever arrives until the line
/// has been quiet for `quiet`.
fn drain(c: &mut Client, quiet: Duration) -> Vec<Value> {
    let mut out = Vec::new();
    while let Some(m) = c.recv_timeout(quiet) {
        out.push(m);
    }
    out
}

fn is_server_request(m: &Value) -> bool {
    m.get("method").is_some() && m.get("id").is_some()
}

/// A tool's text result, asserting the response is a success.
fn ok_text(resp: &Value) -> String {
    assert!(
        resp.get("result").is_some() && resp["result"]["isError"] != true,
        "expected a successful tool result, got {resp}"
    );
    Client::text(resp)
}

fn echo(c: &mut Client, id: Value, text: &str) {
    let r = c.call(id, "echo", json!({"text": text}));
    assert_eq!(ok_text(&r), text, "echo through the supervisor");
}

fn answer_for(method: &str) -> Value {
    match method {
        "roots/list" => json!({"roots": [{"uri": "file:///home/a/project", "name": "project"}]}),
        "sampling/createMessage" => json!({
            "role": "assistant",
            "content": {"type": "text", "text": "sampled by A"},
            "model": "test-model",
            "stopReason": "endTurn",
        }),
        "elicitation/create" => json!({"action": "accept", "content": {"answer": "yes"}}),
        other => panic!("no answer for {other}"),
    }
}

fn assert_null_id_error(m: &Value, code: i64, what: &str) {
    assert_eq!(m["jsonrpc"], "2.0", "{what}: {m}");
    assert_eq!(
        m.get("id"),
        Some(&Value::Null),
        "{what}: id must be null: {m}"
    );
    assert_eq!(m["error"]["code"], code, "{what}: {m}");
    assert!(m["error"]["message"].is_string(), "{what}: {m}");
    assert!(m.get("result").is_none(), "{what}: {m}");
}

// ---------------------------------------------------------------------------------------------
// K02: garbage and BOMs from clients
// ---------------------------------------------------------------------------------------------

#[test]
fn case_k02_client_garbage_gets_parse_error_and_never_reaches_the_child() {
    let rig = Rig::new(&["--exit-on-garbage"], "");
    let mut a = rig.sup.connect(SERVER);
    // A's very first line is garbage; it must be answered, and A must stay usable.
    a.send_raw(b"not json\n");
    let e = a.recv();
    assert_null_id_error(&e, -32700, "`not json`");
    let init = a.initialize("a", json!({}));
    assert_eq!(init["id"], json!(0));
    assert!(init["result"]["protocolVersion"].is_string(), "{init}");
    let pid: i32 = ok_text(&a.call(json!(1), "pid", json!({})))
        .parse()
        .unwrap();

    // More garbage after the handshake: each line answered, A stays connected.
    let garbage: [&[u8]; 4] = [
        b"not json\n",
        b"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\"\n",
        b"\xff\xfe garbage \xc3\n",
        b"{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"ping\"} trailing junk\n",
    ];
    for (i, g) in garbage.iter().enumerate() {
        a.send_raw(g);
        let e = a.recv();
        assert_null_id_error(
            &e,
            -32700,
            &format!("garbage #{i} {:?}", String::from_utf8_lossy(g)),
        );
        echo(
            &mut a,
            json!(format!("after-garbage-{i}")),
            &format!("still here {i}"),
        );
    }

    // B opens with a byte order mark before its initialize.
    let mut b = rig.sup.connect(SERVER);
    let mut line = b"\xEF\xBB\xBF".to_vec();
    line.extend_from_slice(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "b", "version": "1"}}})
        .to_string()
        .as_bytes(),
    );
    line.push(b'\n');
    b.send_raw(&line);
    let init_b = b.response(&json!(1));
    assert!(
        init_b["result"]["protocolVersion"].is_string(),
        "BOM-prefixed initialize: {init_b}"
    );
    notify(&mut b, "notifications/initialized", json!({}));
    echo(&mut b, json!(2), "b works");

    // The child is the same process and never read any of it.
    let pid_after: i32 = ok_text(&a.call(json!(2), "pid", json!({})))
        .parse()
        .unwrap();
    assert_eq!(pid_after, pid, "the child was replaced");
    assert_eq!(rig.pids().len(), 1, "the child restarted: {:?}", rig.pids());
    assert!(alive(pid));
    for l in rig.raw() {
        assert!(
            serde_json::from_str::<Value>(&l).is_ok(),
            "the child read a line that is not JSON: {l:?}"
        );
        assert!(!l.starts_with('\u{feff}'), "the child read a BOM: {l:?}");
        assert!(
            !l.contains("garbage") && !l.contains("not json") && !l.contains("junk"),
            "{l:?}"
        );
    }
}

#[test]
fn case_k02_valid_json_that_is_not_jsonrpc_gets_invalid_request() {
    let rig = Rig::new(&["--exit-on-garbage"], "");
    let mut a = rig.client("a", json!({}));
    let pid = rig.first_pid();
    // JSON-RPC 2.0 §5.1: valid JSON that is not a valid Request object is -32600, id null.
    let invalid: [&[u8]; 3] = [
        b"42\n",
        b"{\"jsonrpc\":\"2.0\",\"method\":1,\"params\":\"bar\"}\n",
        b"{\"foo\":\"bar\"}\n",
    ];
    for (i, l) in invalid.iter().enumerate() {
        a.send_raw(l);
        let e = a.recv();
        assert_null_id_error(
            &e,
            -32600,
            &format!("invalid request {:?}", String::from_utf8_lossy(l)),
        );
        echo(&mut a, json!(i), "still connected");
    }
    assert_eq!(rig.pids(), vec![pid], "the child restarted");
    for l in rig.raw() {
        assert!(
            !l.contains("foo") && l != "42" && !l.contains("\"bar\""),
            "the child read {l:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// K06: the child asks a client
// ---------------------------------------------------------------------------------------------

#[test]
fn case_k06_child_request_goes_to_the_capable_owner_and_its_answer_returns() {
    let rig = Rig::new(&[], "");
    let mut a = rig.client("a", capable());
    let mut b = rig.client("b", json!({}));
    let mut upstream_ids = HashSet::new();
    for (i, method) in ASKS.iter().enumerate() {
        let call_id = json!(i + 1);
        send_call(
            &mut a,
            call_id.clone(),
            "ask",
            json!({"method": method, "params": {"probe": i}}),
        );
        let req = a
            .server_request(method, Duration::from_secs(5))
            .unwrap_or_else(|| {
                panic!(
                    "A never received the child's {method}; backlog {:?}",
                    a.backlog
                )
            });
        assert!(
            req["id"].is_string() || req["id"].is_number(),
            "{method} reached A without a usable id: {req}"
        );
        assert_eq!(
            req["params"]["probe"],
            json!(i),
            "params pass through: {req}"
        );
        assert!(
            upstream_ids.insert(req["id"].to_string()),
            "the supervisor reused id {} toward A",
            req["id"]
        );
        let answer = answer_for(method);
        a.send(&json!({"jsonrpc": "2.0", "id": req["id"], "result": answer}));
        let resp = a.response(&call_id);
        let text = ok_text(&resp);
        let got: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("ask replied {text:?} ({e}) for {method}"));
        assert_eq!(
            got, answer,
            "A's answer to {method} must reach the child unchanged"
        );
    }

    // A refuses: its error reaches the child too.
    send_call(&mut a, json!(10), "ask", json!({"method": "roots/list"}));
    let req = a
        .server_request("roots/list", Duration::from_secs(5))
        .unwrap();
    a.send(&json!({"jsonrpc": "2.0", "id": req["id"], "error": {"code": -32042, "message": "user refused"}}));
    let text = ok_text(&a.response(&json!(10)));
    let err: Value = serde_json::from_str(text.strip_prefix("error:").unwrap_or_else(|| {
        panic!("expected the child to see A's error, the tool replied {text:?}")
    }))
    .unwrap();
    assert_eq!(err["code"], -32042, "{err}");

    // The child saw its answers under its own ids.
    let answered: HashSet<String> = rig
        .saw()
        .into_iter()
        .filter(|m| {
            m.get("method").is_none() && m["id"].as_str().is_some_and(|s| s.starts_with("srv-"))
        })
        .map(|m| m["id"].as_str().unwrap().to_string())
        .collect();
    let want: HashSet<String> = (1..=4).map(|n| format!("srv-{n}")).collect();
    assert_eq!(
        answered, want,
        "the child's requests answered under their own ids"
    );

    // Never broadcast: B (no capability, nothing in flight) saw none of it.
    let got_b = drain(&mut b, Duration::from_millis(300));
    assert!(
        got_b.iter().all(|m| !is_server_request(m)),
        "B received a child request: {got_b:?}"
    );
}

#[test]
fn case_k06_owner_rule_picks_the_most_recent_capable_client_in_flight() {
    let rig = Rig::new(&[], "");
    let mut a = rig.client("a", capable());
    let mut b = rig.client("b", json!({}));
    let mut c = rig.client("c", capable());

    // A has a long call in flight (forwarded first).
    send_call(
        &mut a,
        json!(1),
        "slow",
        json!({"ms": 20000, "tag": "a-slow"}),
    );
    rig.child_id_of_call("tag", &json!("a-slow"));

    // C's ask is forwarded later: the request goes to C, not A.
    send_call(
        &mut c,
        json!(1),
        "ask",
        json!({"method": "roots/list", "params": {"who": "c"}}),
    );
    let req = c
        .server_request("roots/list", Duration::from_secs(5))
        .expect("C (capable, most recent request in flight) must be asked");
    c.send(
        &json!({"jsonrpc": "2.0", "id": req["id"], "result": {"roots": [{"uri": "file:///c"}]}}),
    );
    let text = ok_text(&c.response(&json!(1)));
    assert!(text.contains("file:///c"), "{text}");

    // B cannot answer roots/list: the only capable client with a request in flight is A.
    send_call(
        &mut b,
        json!(1),
        "ask",
        json!({"method": "roots/list", "params": {"who": "b"}}),
    );
    let req = a
        .server_request("roots/list", Duration::from_secs(5))
        .expect("A (capable, request in flight) must be asked on B's behalf");
    assert_eq!(req["params"]["who"], "b");
    a.send(
        &json!({"jsonrpc": "2.0", "id": req["id"], "result": {"roots": [{"uri": "file:///a"}]}}),
    );
    let text = ok_text(&b.response(&json!(1)));
    assert!(text.contains("file:///a"), "{text}");

    let got_b = drain(&mut b, Duration::from_millis(200));
    assert!(
        got_b.iter().all(|m| !is_server_request(m)),
        "B was asked: {got_b:?}"
    );
    let got_a = drain(&mut a, Duration::from_millis(200));
    assert!(
        got_a.iter().all(|m| !is_server_request(m)),
        "A was asked more than once: {got_a:?}"
    );
}

#[test]
fn case_k06_no_capable_client_means_a_prompt_error_for_the_child() {
    // (roots/list is the exception since K28: it is answered with the configured roots.)
    let rig = Rig::new(&[], "");
    // A declared everything but has nothing in flight; B declared nothing.
    let mut a = rig.client("a", capable());
    let mut b = rig.client("b", json!({}));
    for (i, method) in ASKS.iter().enumerate() {
        send_call(&mut b, json!(i), "ask", json!({"method": method}));
        let resp = b
            .response_timeout(&json!(i), Duration::from_secs(3))
            .unwrap_or_else(|| panic!("the child got no prompt error for {method}: B waited 3 s"));
        let text = ok_text(&resp);
        if *method == "roots/list" {
            // The roots policy (K28): nobody to ask means the configured roots (none here),
            // never a refusal.
            assert_eq!(text, r#"{"roots":[]}"#, "{method}: {text:?}");
            continue;
        }
        assert!(
            text.starts_with("error:"),
            "{method}: the child must get an error, the tool said {text:?}"
        );
    }
    let got_b = drain(&mut b, Duration::from_millis(200));
    assert!(
        got_b.iter().all(|m| !is_server_request(m)),
        "B was asked: {got_b:?}"
    );
    let got_a = drain(&mut a, Duration::from_millis(200));
    assert!(
        got_a.iter().all(|m| !is_server_request(m)),
        "idle A was asked: {got_a:?}"
    );
    // Every child request got a response under its own id: an error, but roots/list a result.
    let answers: Vec<Value> = rig
        .saw()
        .into_iter()
        .filter(|m| m["id"].as_str().is_some_and(|s| s.starts_with("srv-")))
        .collect();
    let errors = answers.iter().filter(|m| m.get("error").is_some()).count();
    assert_eq!(answers.len(), ASKS.len(), "child saw {:#?}", rig.raw());
    assert_eq!(errors, ASKS.len() - 1, "child saw {:#?}", rig.raw());
}

#[test]
fn case_k06_owner_disconnects_before_answering() {
    let rig = Rig::new(&[], "");
    let mut watcher = rig.client("watcher", json!({}));
    for method in ASKS {
        let mut a = rig.client("a", capable());
        let before = rig.saw().len();
        send_call(
            &mut a,
            json!(1),
            "ask",
            json!({"method": method, "params": {"m": method}}),
        );
        let req = a
            .server_request(method, Duration::from_secs(5))
            .unwrap_or_else(|| panic!("A never received {method}"));
        assert_eq!(req["params"]["m"], method);
        let ask_child_id = rig
            .wait_saw(Duration::from_secs(5), |m| {
                m["method"] == "tools/call" && m["params"]["arguments"]["method"] == method
            })
            .unwrap()["id"]
            .clone();
        let t0 = Instant::now();
        drop(a);
        // The child's request is answered with an error promptly (the owner is gone).
        let err = rig.wait_saw(Duration::from_secs(3), |m| {
            m.get("method").is_none()
                && m["id"].as_str().is_some_and(|s| s.starts_with("srv-"))
                && m.get("error").is_some()
        });
        let saw_after: Vec<String> = rig.raw().split_off(before);
        assert!(
            err.is_some() && rig.saw().len() > before,
            "{method}: no error reached the child within 3 s of A leaving ({:?}); the child saw since the call: {saw_after:#?}",
            t0.elapsed()
        );
        // A's own in-flight call is cancelled toward the child.
        assert!(
            wait_until(Duration::from_secs(3), || rig.cancels().contains(&ask_child_id)),
            "{method}: the departing A's `ask` call (child id {ask_child_id}) was not cancelled; cancels {:?}",
            rig.cancels()
        );
        // Tidy for the next round: forget what this round's child saw.
        let _ = std::fs::write(&rig.log, "");
    }
    echo(&mut watcher, json!(1), "the supervisor still works");
    assert_eq!(rig.pids().len(), 1);
}

#[test]
fn case_k06_unanswered_child_request_gets_an_error_at_the_deadline() {
    let rig = Rig::new(
        &[],
        "request_timeout = \"1s\"\nmethod_timeouts = { \"tools/call\" = \"30s\" }",
    );
    let mut a = rig.client("a", capable());
    send_call(
        &mut a,
        json!("q"),
        "ask",
        json!({"method": "elicitation/create"}),
    );
    let req = a.server_request("elicitation/create", Duration::from_secs(5));
    assert!(req.is_some(), "A was not asked");
    // A never answers; the child's request has the 1 s request deadline.
    let resp = a
        .response_timeout(&json!("q"), Duration::from_secs(6))
        .expect("the child's request was never failed after its deadline");
    let text = ok_text(&resp);
    assert!(
        text.starts_with("error:"),
        "the child must get an error, the tool said {text:?}"
    );
    assert_eq!(rig.pids().len(), 1);
}

// ---------------------------------------------------------------------------------------------
// K07: the child pings
// ---------------------------------------------------------------------------------------------

#[test]
fn case_k07_child_pings_are_answered_locally_with_and_without_clients() {
    let rig = Rig::new(&["--ping-client", "1000"], "");
    let pid = rig.first_pid();
    let keepalive_answers = || {
        rig.saw()
            .into_iter()
            .filter(|m| {
                m["id"]
                    .as_str()
                    .is_some_and(|s| s.starts_with("keepalive-"))
            })
            .collect::<Vec<_>>()
    };

    // No clients while the child pings four times (once a second): the fake exits 1 if a
    // ping goes unanswered for 2 s, so four answers span more than its patience.
    assert!(
        wait_until(Duration::from_secs(15), || keepalive_answers().len() >= 4),
        "the child's pings were not answered; log:\n{}",
        rig.sup.log()
    );
    assert!(
        alive(pid),
        "the child died with no clients; log:\n{}",
        rig.sup.log()
    );
    assert_eq!(rig.pids(), vec![pid], "the child restarted");
    let answers = keepalive_answers();
    assert!(
        answers.len() >= 3,
        "only {} keepalive answers",
        answers.len()
    );
    for m in &answers {
        assert_eq!(m["result"], json!({}), "{m}");
        assert_eq!(m["jsonrpc"], "2.0");
        assert!(m.get("error").is_none(), "{m}");
    }

    // Two clients busy while the child pings four more times: they never see a ping, the
    // child keeps living.
    let mut a = rig.client("a", capable());
    let mut b = rig.client("b", capable());
    let before = keepalive_answers().len();
    let end = Instant::now() + Duration::from_secs(15);
    let mut n = 0;
    while keepalive_answers().len() < before + 4 {
        assert!(
            Instant::now() < end,
            "the child's pings stopped being answered; log:\n{}",
            rig.sup.log()
        );
        echo(&mut a, json!(n), "a");
        echo(&mut b, json!(n), "b");
        n += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    for (name, c) in [("A", &mut a), ("B", &mut b)] {
        let got = drain(c, Duration::from_millis(300));
        assert!(
            got.iter().all(|m| m["method"] != "ping"),
            "{name} received the child's ping: {got:?}"
        );
    }
    assert!(alive(pid), "the child died; log:\n{}", rig.sup.log());
    assert_eq!(rig.pids(), vec![pid], "the child restarted");
    let answers = keepalive_answers();
    assert!(
        answers.len() >= 7,
        "only {} keepalive answers",
        answers.len()
    );
    assert!(answers.iter().all(|m| m["result"] == json!({})));
    assert!(
        !rig.sup.log().contains("ping keepalive-"),
        "the child reported a failed keepalive:\n{}",
        rig.sup.log()
    );
}

// ---------------------------------------------------------------------------------------------
// K08: shared child, colliding ids
// ---------------------------------------------------------------------------------------------

#[test]
fn case_k08_colliding_ids_go_to_their_owners_and_list_changed_to_all() {
    let rig = Rig::new(&[], "");
    let mut a = rig.client("a", json!({}));
    let mut b = rig.client("b", json!({}));
    send_call(
        &mut a,
        json!(1),
        "echo",
        json!({"text": "A", "delay_ms": 300}),
    );
    send_call(
        &mut b,
        json!(1),
        "echo",
        json!({"text": "B", "delay_ms": 10}),
    );
    let rb = b.response(&json!(1));
    let ra = a.response(&json!(1));
    assert_eq!(ok_text(&ra), "A");
    assert_eq!(ok_text(&rb), "B");
    assert_eq!(ra["id"], json!(1));
    assert_eq!(rb["id"], json!(1));
    // Neither gets the other's answer later on.
    assert!(a
        .response_timeout(&json!(1), Duration::from_millis(400))
        .is_none());
    assert!(b
        .response_timeout(&json!(1), Duration::from_millis(100))
        .is_none());

    let r = a.call(json!(2), "list_changed", json!({}));
    assert_eq!(ok_text(&r), "ok");
    for (name, c) in [("A", &mut a), ("B", &mut b)] {
        assert!(
            c.notification("notifications/tools/list_changed", Duration::from_secs(5))
                .is_some(),
            "{name} did not get list_changed; backlog {:?}",
            c.backlog
        );
    }
}

/// One stress client: `n` echo calls, at most `window` in flight, ids 0, "0", 1, "1", ... (the
/// same ids every client uses), random delays 0-2 ms, unique texts.
fn stress_client(
    sock: PathBuf,
    idx: usize,
    n: usize,
    window: usize,
    seed: u64,
) -> Result<usize, String> {
    let mut c = Client::connect(&sock);
    c.initialize(&format!("stress-{idx}"), json!({}));
    let mut rng = StdRng::seed_from_u64(seed);
    let mut expected: HashMap<String, String> = HashMap::new();
    let (mut next, mut done) = (0usize, 0usize);
    while done < n {
        let mut batch = Vec::new();
        while next < n && expected.len() < window {
            let id = if next % 2 == 0 {
                json!(next / 2)
            } else {
                json!((next / 2).to_string())
            };
            let text = format!("c{idx}-r{next}-{:08x}", rng.gen::<u32>());
            let delay: u64 = rng.gen_range(0..=2);
            let msg = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                "params": {"name": "echo", "arguments": {"text": text, "delay_ms": delay}}});
            batch.extend_from_slice(msg.to_string().as_bytes());
            batch.push(b'\n');
            expected.insert(id.to_string(), text);
            next += 1;
        }
        if !batch.is_empty() {
            c.send_raw(&batch);
        }
        let m = c.recv_timeout(Duration::from_secs(15)).ok_or_else(|| {
            format!(
                "client {idx}: nothing within 15 s after {done} of {n} responses ({} in flight)",
                expected.len()
            )
        })?;
        let key = m.get("id").map(Value::to_string).unwrap_or_default();
        let want = expected
            .remove(&key)
            .ok_or_else(|| format!("client {idx}: unexpected or duplicate message {m}"))?;
        let got = Client::text(&m);
        if got != want || m.get("result").is_none() {
            return Err(format!("client {idx}: id {key} expected {want:?}, got {m}"));
        }
        done += 1;
    }
    if let Some(m) = c.recv_timeout(Duration::from_millis(200)) {
        return Err(format!(
            "client {idx}: extra message after all responses: {m}"
        ));
    }
    Ok(done)
}

#[test]
fn case_k08_randomised_colliding_ids_from_three_clients_never_cross() {
    let rig = Rig::new(&[], "");
    let sock = rig.sup.socket(SERVER);
    let seed: u64 = rand::random();
    let total = 10_000;
    let per = total / 3 + 1;
    let started = Instant::now();
    let handles: Vec<_> = (0..3)
        .map(|i| {
            let sock = sock.clone();
            std::thread::spawn(move || stress_client(sock, i, per, 64, seed.wrapping_add(i as u64)))
        })
        .collect();
    let mut answered = 0;
    for h in handles {
        match h.join().unwrap() {
            Ok(n) => answered += n,
            Err(e) => panic!("seed {seed}: {e}"),
        }
    }
    eprintln!(
        "k08 stress: {answered} calls from 3 clients in {:?} (seed {seed})",
        started.elapsed()
    );
    assert_eq!(answered, per * 3);
    // Every forwarded request got a fresh child-side id.
    let calls = rig.saw_method("tools/call");
    assert_eq!(calls.len(), per * 3, "the child saw every call once");
    let ids: HashSet<String> = calls.iter().map(|m| m["id"].to_string()).collect();
    assert_eq!(ids.len(), calls.len(), "child-side ids repeat");
    assert_eq!(rig.pids().len(), 1);
}

#[test]
fn case_k08_every_id_shape_is_restored_exactly() {
    let rig = Rig::new(&[], "");
    let mut a = rig.client("a", json!({}));
    let mut b = rig.client("b", json!({}));
    // Written as raw JSON text; compared on the way back as values (type-exact: 1 is not "1",
    // 1 is not 1.0). `case_k08_exact_id_text_survives_the_round_trip` compares bytes.
    let ids = [
        "0",
        "\"0\"",
        "-5",
        "\"\"",
        "1.5",
        "12345678901234",
        "9007199254740993",
        "-9007199254740993",
        "18446744073709551615",
        "\"1\"",
        "1",
        "\"with \\\"quotes\\\" and ünïcode\"",
    ];
    // Three requests per id (forwarded call, forwarded error, local ping), all in flight at once,
    // the same ids from A and B.
    let line = |idx: usize, who: &str, kind: usize| -> String {
        let id = ids[idx];
        match kind {
            0 => format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"{who} #{idx}","delay_ms":50}}}}}}"#
            ),
            1 => format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"no/such/method"}}"#),
            _ => format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#),
        }
    };
    let values: Vec<Value> = ids
        .iter()
        .map(|s| serde_json::from_str(s).unwrap())
        .collect();
    for kind in 0..3 {
        for (who, c) in [("A", &mut a), ("B", &mut b)] {
            let mut all = String::new();
            for idx in 0..ids.len() {
                all.push_str(&line(idx, who, kind));
                all.push('\n');
            }
            c.send_raw(all.as_bytes());
        }
        for (who, c) in [("A", &mut a), ("B", &mut b)] {
            let mut seen = HashSet::new();
            for _ in ids {
                let m = c.recv();
                // `Value` equality distinguishes 0 from "0" and 1 from 1.0.
                let idx = values
                    .iter()
                    .position(|v| *v == m["id"])
                    .unwrap_or_else(|| {
                        panic!("{who} kind {kind}: response with an id never sent: {m}")
                    });
                assert!(
                    seen.insert(idx),
                    "{who} kind {kind}: id {} answered twice",
                    ids[idx]
                );
                match kind {
                    0 => assert_eq!(
                        ok_text(&m),
                        format!("{who} #{idx}"),
                        "{who}: id {} got someone else's answer",
                        ids[idx]
                    ),
                    1 => assert_eq!(m["error"]["code"], -32601, "{m}"),
                    _ => assert_eq!(m["result"], json!({}), "{m}"),
                }
            }
        }
    }
    // The child only ever saw its own fresh ids.
    let forwarded: Vec<Value> = rig
        .saw()
        .into_iter()
        .filter(|m| m["method"] == "tools/call" || m["method"] == "no/such/method")
        .collect();
    assert_eq!(forwarded.len(), ids.len() * 4);
    let child_ids: HashSet<String> = forwarded.iter().map(|m| m["id"].to_string()).collect();
    assert_eq!(
        child_ids.len(),
        forwarded.len(),
        "child-side ids repeat: {forwarded:?}"
    );
    assert_eq!(
        rig.saw_method("ping").len(),
        0,
        "client pings reached the child"
    );
}

#[test]
fn case_k08_exact_id_text_survives_the_round_trip() {
    // The harness parses lines into `serde_json::Value`; this reads raw bytes instead so
    // spellings like `1.5` and `12345678901234` are compared byte for byte.
    use std::io::{BufRead, BufReader, Write};
    let rig = Rig::new(&[], "");
    let c = rig.client("raw", json!({}));
    let ids = [
        "0",
        "\"0\"",
        "-5",
        "\"\"",
        "1.5",
        "12345678901234",
        "9007199254740993",
    ];
    let mut w = c.stream.try_clone().unwrap();
    for id in ids {
        writeln!(
            w,
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"x"}}}}}}"#
        )
        .unwrap();
    }
    let mut r = BufReader::new(c.stream.try_clone().unwrap());
    c.stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut back = Vec::new();
    for _ in ids {
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        #[derive(serde::Deserialize)]
        struct Env {
            id: Box<serde_json::value::RawValue>,
        }
        let env: Env = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line:?}: {e}"));
        back.push(env.id.get().to_string());
    }
    back.sort();
    let mut want: Vec<String> = ids.iter().map(|s| s.to_string()).collect();
    want.sort();
    assert_eq!(back, want, "ids must come back exactly as written");
}

// ---------------------------------------------------------------------------------------------
// K09: cancellation
// ---------------------------------------------------------------------------------------------

#[test]
fn case_k09_cancel_is_translated_forwarded_at_once_and_late_results_dropped() {
    let rig = Rig::new(&[], "");
    let mut a = rig.client("a", json!({}));
    let mut b = rig.client("b", json!({}));

    // A slow call, cancelled after 200 ms.
    send_call(
        &mut a,
        json!(101),
        "slow",
        json!({"ms": 30000, "tag": "k09-slow"}),
    );
    let slow_child = rig.child_id_of_call("tag", &json!("k09-slow"));
    assert_ne!(slow_child, json!(101), "the child saw the client's own id");
    cancel(&mut a, json!(101));
    let seen = rig.wait_saw(Duration::from_secs(2), |m| {
        m["method"] == "notifications/cancelled" && m["params"]["requestId"] == slow_child
    });
    let seen = seen.unwrap_or_else(|| {
        panic!(
            "the child did not get a cancel for child id {slow_child} within 2 s; it saw {:#?}",
            rig.raw()
        )
    });
    assert_eq!(seen["params"]["reason"], "user cancelled", "{seen}");
    assert!(
        seen.get("id").is_none(),
        "a cancel is a notification: {seen}"
    );

    // A call the child answers anyway after the cancel: the late result is dropped, even when
    // A reuses the id right away.
    send_call(
        &mut a,
        json!(102),
        "echo",
        json!({"text": "late", "delay_ms": 700}),
    );
    let late_child = rig.child_id_of_call("text", &json!("late"));
    cancel(&mut a, json!(102));
    assert!(
        rig.wait_saw(Duration::from_secs(2), |m| m["method"]
            == "notifications/cancelled"
            && m["params"]["requestId"] == late_child)
            .is_some(),
        "cancel of 102 not forwarded as {late_child}"
    );
    send_call(
        &mut a,
        json!(102),
        "echo",
        json!({"text": "fresh", "delay_ms": 1500}),
    );
    let r = a.response_timeout(&json!(102), Duration::from_secs(10));
    assert_eq!(
        r.as_ref().map(Client::text).as_deref(),
        Some("fresh"),
        "the late answer to the cancelled 102 was delivered: {r:?}"
    );
    assert!(a
        .response_timeout(&json!(102), Duration::from_millis(300))
        .is_none());
    assert!(
        a.response_timeout(&json!(101), Duration::from_millis(10))
            .is_none(),
        "late 101"
    );

    // Cancels that must never reach the child: unknown ids, an already-cancelled id, the wrong
    // type of a known id, and another client's request id.
    send_call(
        &mut a,
        json!(103),
        "echo",
        json!({"text": "a-103", "delay_ms": 500}),
    );
    rig.child_id_of_call("text", &json!("a-103"));
    cancel(&mut a, json!(999));
    cancel(&mut a, json!(101));
    cancel(&mut a, json!("103"));
    cancel(&mut b, json!(103));
    // Flush both clients' input through the supervisor and the child.
    echo(&mut b, json!("flush-b"), "flush b");
    let r = a.response(&json!(103));
    assert_eq!(
        ok_text(&r),
        "a-103",
        "B's cancel must not cancel A's request"
    );
    echo(&mut a, json!("flush-a"), "flush a");
    let cancels = rig.cancels();
    assert_eq!(
        cancels,
        vec![slow_child, late_child],
        "only the two real cancels may reach the child"
    );
}

#[test]
fn case_k09_cancel_translates_every_id_shape() {
    let rig = Rig::new(&[], "");
    let mut a = rig.client("a", json!({}));
    let ids = [
        json!(0),
        json!("0"),
        json!(""),
        json!(-5),
        json!(12345678901234u64),
        json!("x y"),
    ];
    let mut child_ids = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        send_call(&mut a, id.clone(), "slow", json!({"ms": 30000, "tag": i}));
        child_ids.push(rig.child_id_of_call("tag", &json!(i)));
    }
    for id in &ids {
        cancel(&mut a, id.clone());
    }
    assert!(
        wait_until(Duration::from_secs(3), || rig.cancels().len() >= ids.len()),
        "cancels reached the child for {:?} only; expected child ids {child_ids:?}",
        rig.cancels()
    );
    assert_eq!(rig.cancels(), child_ids);
    echo(&mut a, json!("after"), "still fine");
    assert!(
        drain(&mut a, Duration::from_millis(200))
            .iter()
            .all(|m| m.get("id").is_none()),
        "a cancelled request was answered"
    );
}

/// A has requests in flight (plus a progress stream when `with_progress`), then closes its
/// connection: the child must get a cancel for each of them, and for nothing else.
fn k09_disconnect(with_progress: bool) {
    let rig = Rig::new(&[], "");
    let mut a = rig.client("a", json!({}));
    let mut b = rig.client("b", json!({}));
    send_call(&mut a, json!(1), "slow", json!({"ms": 30000, "tag": "s1"}));
    send_call(
        &mut a,
        json!("two"),
        "slow",
        json!({"ms": 30000, "tag": "s2"}),
    );
    send_call(
        &mut a,
        json!(0),
        "echo",
        json!({"text": "e3", "delay_ms": 20000}),
    );
    let mut mine = vec![
        rig.child_id_of_call("tag", &json!("s1")),
        rig.child_id_of_call("tag", &json!("s2")),
        rig.child_id_of_call("text", &json!("e3")),
    ];
    if with_progress {
        send_request(
            &mut a,
            json!("p"),
            "tools/call",
            json!({"name": "progress", "arguments": {"forever": true, "interval_ms": 50, "tag": "p4"},
                   "_meta": {"progressToken": "tok"}}),
        );
        mine.push(rig.child_id_of_call("tag", &json!("p4")));
        assert!(
            a.notification("notifications/progress", Duration::from_secs(5))
                .is_some(),
            "no progress before the disconnect"
        );
    }
    // B has its own call in flight: it must not be cancelled.
    send_call(
        &mut b,
        json!(1),
        "echo",
        json!({"text": "b-stays", "delay_ms": 1500}),
    );
    let b_child = rig.child_id_of_call("text", &json!("b-stays"));

    drop(a);
    let ok = wait_until(Duration::from_secs(3), || {
        let c = rig.cancels();
        mine.iter().all(|id| c.contains(id))
    });
    assert!(
        ok,
        "3 s after A closed its connection, the child got cancels {:?}; A had in flight {mine:?}; supervisor log:\n{}",
        rig.cancels(),
        rig.sup.log()
    );
    let r = b.response(&json!(1));
    assert_eq!(ok_text(&r), "b-stays");
    let mut got = rig.cancels();
    got.sort_by_key(|v| v.to_string());
    mine.sort_by_key(|v| v.to_string());
    assert_eq!(got, mine, "exactly A's requests are cancelled");
    assert!(!got.contains(&b_child));
    assert_eq!(
        rig.pids().len(),
        1,
        "a client leaving must not restart the child"
    );
}

#[test]
fn case_k09_disconnect_cancels_every_silent_request_in_flight() {
    // Nothing is written to A after it leaves, so only the socket's state tells it is gone.
    k09_disconnect(false);
}

#[test]
fn case_k09_disconnect_cancels_everything_in_flight_including_progress() {
    k09_disconnect(true);
}

// ---------------------------------------------------------------------------------------------
// K10: initialize from every client
// ---------------------------------------------------------------------------------------------

fn k10(variant: &str, kill_with_signal: bool) {
    let rig = Rig::new(
        &["--second-initialize", variant, "--init-delay", "300"],
        "backoff_initial = \"100ms\"",
    );
    let sock = rig.sup.socket(SERVER);
    let barrier = Arc::new(Barrier::new(3));
    let specs = [
        (
            "alpha",
            json!(0),
            json!({"roots": {"listChanged": true}}),
            "2025-11-25",
        ),
        (
            "beta",
            json!("init-b"),
            json!({"sampling": {}}),
            "2025-03-26",
        ),
        ("gamma", json!(-7), json!({}), "2024-11-05"),
    ];
    let handles: Vec<_> = specs
        .iter()
        .cloned()
        .map(|(name, id, caps, version)| {
            let sock = sock.clone();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                let mut c = Client::connect(&sock);
                barrier.wait();
                send_request(
                    &mut c,
                    id.clone(),
                    "initialize",
                    json!({"protocolVersion": version, "capabilities": caps,
                           "clientInfo": {"name": name, "version": "9"}}),
                );
                let r = c.response_timeout(&id, Duration::from_secs(15));
                notify(&mut c, "notifications/initialized", json!({}));
                (c, r)
            })
        })
        .collect();
    let mut clients = Vec::new();
    let mut results = Vec::new();
    for (h, (name, id, _, _)) in handles.into_iter().zip(specs.iter()) {
        let (c, r) = h.join().unwrap();
        let r = r.unwrap_or_else(|| panic!("{name} got no initialize result"));
        assert_eq!(&r["id"], id, "{name} must get its own id back: {r}");
        assert_eq!(r["result"]["protocolVersion"], "2025-11-25", "{name}: {r}");
        assert_eq!(r["result"]["serverInfo"]["name"], "fake", "{name}: {r}");
        results.push(r["result"].clone());
        clients.push(c);
    }
    assert!(
        results.windows(2).all(|w| w[0] == w[1]),
        "same cached result for all: {results:?}"
    );
    for (i, c) in clients.iter_mut().enumerate() {
        echo(c, json!(1), &format!("before-{i}"));
    }
    assert_eq!(
        rig.saw_method("initialize").len(),
        1,
        "child saw {:#?}",
        rig.raw()
    );
    assert_eq!(rig.saw_method("notifications/initialized").len(), 1);
    let pid = rig.first_pid();
    assert_eq!(rig.pids(), vec![pid]);

    // Kill the child while A, B and C stay connected.
    if kill_with_signal {
        let p: i32 = ok_text(&clients[0].call(json!(2), "pid", json!({})))
            .parse()
            .unwrap();
        assert_eq!(p, pid);
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
    } else {
        send_call(&mut clients[0], json!(2), "crash", json!({}));
        let r = clients[0].response(&json!(2));
        assert!(
            r.get("error").is_some() || r["result"]["isError"] == true,
            "the crashed call must fail: {r}"
        );
    }
    assert!(
        wait_until(Duration::from_secs(10), || rig.pids().len() >= 2),
        "no restart; log:\n{}",
        rig.sup.log()
    );
    for (i, c) in clients.iter_mut().enumerate() {
        let r = c.call(json!(3), "echo", json!({"text": format!("after-{i}")}));
        assert_eq!(
            ok_text(&r),
            format!("after-{i}"),
            "client {i} after the restart: {r}"
        );
    }
    let saw = rig.saw();
    let pos = |pred: &dyn Fn(&Value) -> bool| -> Vec<usize> {
        saw.iter()
            .enumerate()
            .filter(|(_, m)| pred(m))
            .map(|(i, _)| i)
            .collect()
    };
    let inits = pos(&|m| m["method"] == "initialize");
    let inited = pos(&|m| m["method"] == "notifications/initialized");
    let after = pos(&|m| {
        m["params"]["arguments"]["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("after-"))
    });
    assert_eq!(
        inits.len(),
        2,
        "one initialize per instance; child saw {:#?}",
        rig.raw()
    );
    assert_eq!(
        inited.len(),
        2,
        "one initialized per instance; child saw {:#?}",
        rig.raw()
    );
    assert!(
        inits[0] < inited[0] && inited[0] < inits[1] && inits[1] < inited[1],
        "order of handshakes: {:#?}",
        rig.raw()
    );
    assert!(
        after.iter().all(|&i| i > inited[1]),
        "traffic reached the new child before its handshake: {:#?}",
        rig.raw()
    );
    assert_eq!(rig.pids().len(), 2, "exactly one restart: {:?}", rig.pids());
}

#[test]
fn case_k10_concurrent_initializes_share_one_child_handshake_error_variant() {
    k10("error", true);
}

#[test]
fn case_k10_concurrent_initializes_share_one_child_handshake_exit_variant() {
    k10("exit", false);
}

// ---------------------------------------------------------------------------------------------
// Progress, logging, subscriptions, back-pressure (issue 3)
// ---------------------------------------------------------------------------------------------

#[test]
fn issue3_progress_tokens_are_rewritten_per_owner() {
    let rig = Rig::new(&[], "");
    let mut a = rig.client("a", json!({}));
    let mut b = rig.client("b", json!({}));
    // (A's token, A's count, B's token, B's count); same token on both sides, then same text of
    // different types.
    let rounds = [
        (json!("same"), 4u64, json!("same"), 6u64),
        (json!(7), 5, json!(7), 3),
        (json!(0), 2, json!("0"), 5),
    ];
    for (round, (ta, na, tb, nb)) in rounds.iter().enumerate() {
        let before = rig.saw_method("tools/call").len();
        let id = json!(round);
        for (c, tok, n) in [(&mut a, ta, na), (&mut b, tb, nb)] {
            send_request(
                c,
                id.clone(),
                "tools/call",
                json!({"name": "progress", "arguments": {"count": n, "interval_ms": 20},
                       "_meta": {"progressToken": tok}}),
            );
        }
        for (name, c, tok, n) in [("A", &mut a, ta, *na), ("B", &mut b, tb, *nb)] {
            let r = c.response(&id);
            assert_eq!(ok_text(&r), "progress done");
            // The child sends every progress before its response; order is kept per client.
            let progress: Vec<Value> = c
                .backlog
                .drain(..)
                .filter(|m| m["method"] == "notifications/progress")
                .collect();
            assert_eq!(
                progress.len() as u64,
                n,
                "round {round}: {name} must get exactly its own {n} progress notifications: {progress:?}"
            );
            for (k, p) in progress.iter().enumerate() {
                assert_eq!(
                    &p["params"]["progressToken"], tok,
                    "round {round} {name}: {p}"
                );
                assert_eq!(
                    p["params"]["total"],
                    json!(n),
                    "round {round} {name}: someone else's progress {p}"
                );
                assert_eq!(
                    p["params"]["progress"],
                    json!(k + 1),
                    "round {round} {name}: {p}"
                );
            }
        }
        let calls = rig.saw_method("tools/call");
        let toks: HashSet<String> = calls[before..]
            .iter()
            .map(|m| m["params"]["_meta"]["progressToken"].to_string())
            .collect();
        assert_eq!(
            toks.len(),
            2,
            "round {round}: the child must see two distinct tokens: {toks:?}"
        );
    }
}

#[test]
fn issue3_log_levels_are_per_client_and_the_child_gets_the_most_verbose() {
    let rig = Rig::new(&[], "");
    let mut a = rig.client("a", json!({}));
    let mut b = rig.client("b", json!({}));
    let r = b.request(json!(1), "logging/setLevel", json!({"level": "debug"}));
    assert_eq!(r["result"], json!({}), "{r}");
    let r = a.request(json!(1), "logging/setLevel", json!({"level": "error"}));
    assert_eq!(r["result"], json!({}), "{r}");

    let r = a.call(json!(2), "log", json!({"level": "info", "data": "info-1"}));
    assert_eq!(ok_text(&r), "ok");
    let r = a.call(
        json!(3),
        "log",
        json!({"level": "error", "data": "error-1"}),
    );
    assert_eq!(ok_text(&r), "ok");

    let levels: Vec<Value> = rig
        .saw_method("logging/setLevel")
        .iter()
        .map(|m| m["params"]["level"].clone())
        .collect();
    assert!(
        levels.contains(&json!("debug")),
        "the child never got level debug: {levels:?}"
    );
    assert_eq!(
        levels.last(),
        Some(&json!("debug")),
        "the child's level must stay debug: {levels:?}"
    );

    let log_data = |msgs: Vec<Value>| -> Vec<Value> {
        msgs.into_iter()
            .filter(|m| m["method"] == "notifications/message")
            .map(|m| m["params"]["data"].clone())
            .collect()
    };
    // B: both messages, in order.
    let got_b = log_data(drain(&mut b, Duration::from_millis(300)));
    assert_eq!(
        got_b,
        vec![json!("info-1"), json!("error-1")],
        "B set level debug"
    );
    // A: only the error. The child sent each message before the tool's response, so everything
    // meant for A is already in its backlog.
    let got_a = log_data(std::mem::take(&mut a.backlog));
    assert_eq!(got_a, vec![json!("error-1")], "A set level error");
}

#[test]
fn issue3_subscriptions_are_refcounted_toward_the_child() {
    let rig = Rig::new(&[], "");
    let uri = "fake://one";
    let mut a = rig.client("a", json!({}));
    let mut b = rig.client("b", json!({}));
    let mut c = rig.client("c", json!({}));
    let r = a.request(json!(1), "resources/subscribe", json!({"uri": uri}));
    assert_eq!(r["result"], json!({}), "{r}");
    let r = b.request(json!(1), "resources/subscribe", json!({"uri": uri}));
    assert_eq!(r["result"], json!({}), "{r}");
    echo(&mut a, json!(2), "flush");
    echo(&mut b, json!(2), "flush");
    assert_eq!(
        rig.saw_method("resources/subscribe").len(),
        1,
        "the child must see one subscribe: {:#?}",
        rig.raw()
    );

    // C (not subscribed) triggers the update.
    let r = c.call(json!(1), "update", json!({"uri": uri}));
    assert_eq!(ok_text(&r), "ok");
    for (name, cl) in [("A", &mut a), ("B", &mut b)] {
        let n = cl
            .notification("notifications/resources/updated", Duration::from_secs(5))
            .unwrap_or_else(|| panic!("{name} got no resources/updated"));
        assert_eq!(n["params"]["uri"], uri);
    }
    assert!(
        c.backlog
            .iter()
            .all(|m| m["method"] != "notifications/resources/updated"),
        "C is not subscribed: {:?}",
        c.backlog
    );

    // A unsubscribes: B still holds it, so the child sees nothing.
    let r = a.request(json!(3), "resources/unsubscribe", json!({"uri": uri}));
    assert_eq!(r["result"], json!({}), "{r}");
    let r = a.call(json!(4), "update", json!({"uri": uri}));
    assert_eq!(ok_text(&r), "ok");
    assert!(
        a.backlog
            .iter()
            .all(|m| m["method"] != "notifications/resources/updated"),
        "A unsubscribed but got an update: {:?}",
        a.backlog
    );
    assert!(b
        .notification("notifications/resources/updated", Duration::from_secs(5))
        .is_some());
    assert_eq!(
        rig.saw_method("resources/unsubscribe").len(),
        0,
        "unsubscribed too early"
    );

    // B leaves: the last subscriber is gone.
    drop(b);
    assert!(
        rig.wait_saw(Duration::from_secs(5), |m| m["method"]
            == "resources/unsubscribe"
            && m["params"]["uri"] == uri)
            .is_some(),
        "the child never got resources/unsubscribe after the last subscriber left; it saw {:#?}",
        rig.raw()
    );
    assert_eq!(rig.saw_method("resources/unsubscribe").len(), 1);
    assert_eq!(rig.saw_method("resources/subscribe").len(), 1);
}

/// Writes `lines` to `c`'s socket from a thread, ignoring errors (the supervisor may hang up).
fn flood(c: &Client, lines: Vec<u8>) -> std::thread::JoinHandle<()> {
    use std::io::Write;
    let mut w = c.stream.try_clone().unwrap();
    std::thread::spawn(move || {
        let _ = w.write_all(&lines);
    })
}

fn slow_reader(rig: &Rig, requests: Vec<u8>) {
    let pid = rig.first_pid();
    let mut b = rig.client("b", json!({}));
    let mut s = rig.client("s", json!({}));
    let writer = flood(&s, requests);
    // B keeps being served while S does not read.
    for i in 0..10 {
        let t = format!("b-{i}");
        let r = b.call(json!(i), "echo", json!({"text": t}));
        assert_eq!(ok_text(&r), t, "B while S floods and does not read");
    }
    assert!(
        rig.sup.wait_log("not reading", Duration::from_secs(15)),
        "the supervisor never disconnected the client that does not read; log tail:\n{}",
        tail(&rig.sup.log(), 40)
    );
    assert!(
        s.closed_within(Duration::from_secs(10)),
        "S's connection is still open"
    );
    writer.join().unwrap();
    for i in 10..15 {
        echo(&mut b, json!(i), &format!("b-after-{i}"));
    }
    assert_eq!(rig.pids(), vec![pid], "the child was restarted");
    assert!(alive(pid));
}

fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

fn requests(n: usize, f: impl Fn(usize) -> Value) -> Vec<u8> {
    let mut out = Vec::new();
    for i in 0..n {
        let mut m = f(i);
        m["jsonrpc"] = json!("2.0");
        m["id"] = json!(i);
        out.extend_from_slice(m.to_string().as_bytes());
        out.push(b'\n');
    }
    out
}

fn big(bytes: usize) -> impl Fn(usize) -> Value {
    move |_| json!({"method": "tools/call", "params": {"name": "big", "arguments": {"bytes": bytes}}})
}

#[test]
fn issue3_client_that_does_not_read_big_responses_is_disconnected() {
    // 20 x 1 MB against a short queue (client_queue counts messages).
    let rig = Rig::new(&[], "client_queue = 8");
    slow_reader(&rig, requests(20, big(1_000_000)));
}

#[test]
fn issue3_client_that_does_not_read_is_disconnected_with_the_default_queue() {
    // Pings are answered by the supervisor itself: S's queue fills without using the child.
    let rig = Rig::new(&[], "");
    slow_reader(&rig, requests(5000, |_| json!({"method": "ping"})));
}

#[test]
fn issue3_client_that_does_not_read_is_disconnected_before_buffering_unbounded_bytes() {
    // Default config: 100 x 1 MB of unread responses is over any sane per-client buffer
    // (reference R17: 1024 messages or 64 MiB) and must end in a disconnect, not 100 MB held.
    let rig = Rig::new(&[], "");
    slow_reader(&rig, requests(100, big(1_000_000)));
}
