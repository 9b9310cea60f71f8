//! Both protocol eras on both sides (issue 6): the child's era probe, 2026-07-28 children,
//! and translation for clients of the other era. Fake children: `--era legacy|modern|dual|
//! strict-legacy` (tests/fixtures/fake_server.rs, "Eras").

use crate::harness::*;
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;

const V: &str = "2026-07-28";

/// A 2026-07-28 envelope for a modern client named `name`.
fn env(name: &str) -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": V,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": name, "version": "1"},
    })
}

/// A modern request: `params` plus the envelope in `_meta`.
fn modern(c: &mut Client, id: Value, method: &str, mut params: Value, name: &str) -> Value {
    params["_meta"] = env(name);
    c.request(id, method, params)
}

fn lines(log: &Path) -> Vec<Value> {
    child_saw(log)
        .iter()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn server(args: &[&str], log: &Path, extra: &str) -> String {
    let mut a: Vec<&str> = args.to_vec();
    let l = log.to_str().unwrap();
    a.extend(["--log", l]);
    fake_server("fake", &a, extra)
}

#[test]
fn eras_auto_probe_drives_a_modern_only_child_in_2026_and_translates_for_handshake_clients() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("child.log");
    let sup = Supervisor::start(&server(
        &["--era", "modern"],
        &log,
        "probe_interval = \"200ms\"",
    ));
    let mut a = sup.connect("fake");
    let init = a.request(
        json!(0),
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "old-client", "version": "1"}}),
    );
    // The client's own handshake version, the child's capabilities and identity.
    assert_eq!(init["result"]["protocolVersion"], "2025-06-18", "{init}");
    assert_eq!(init["result"]["serverInfo"]["name"], "fake", "{init}");
    assert!(
        init["result"]["capabilities"]["tools"].is_object(),
        "{init}"
    );
    a.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    assert_eq!(
        Client::text(&a.call(json!(1), "echo", json!({"text": "hi"}))),
        "hi"
    );
    assert_eq!(a.request(json!(2), "ping", json!({}))["result"], json!({}));
    assert_eq!(
        a.request(json!(3), "logging/setLevel", json!({"level": "debug"}))["result"],
        json!({})
    );
    // The request reached the child with an envelope built from the client's initialize.
    let seen = lines(&log);
    assert_eq!(
        seen[0]["method"], "server/discover",
        "the era probe comes first: {seen:?}"
    );
    let call = seen
        .iter()
        .find(|m| m["method"] == "tools/call")
        .expect("the call reached the child");
    assert_eq!(
        call["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"],
        V
    );
    assert_eq!(
        call["params"]["_meta"]["io.modelcontextprotocol/clientInfo"]["name"],
        "old-client"
    );
    // Probes use server/discover: wait for a few, then check no ping or initialize was sent.
    assert!(wait_until(Duration::from_secs(5), || child_saw_method(
        &log,
        "server/discover"
    ) >= 4));
    for m in [
        "initialize",
        "ping",
        "logging/setLevel",
        "notifications/initialized",
    ] {
        assert_eq!(
            child_saw_method(&log, m),
            0,
            "a 2026 child must never see {m}"
        );
    }
    assert!(sup.log().contains("protocol era"), "the verdict is logged");
}

#[test]
fn eras_auto_probe_falls_back_to_the_handshake_for_a_legacy_child() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("child.log");
    let sup = Supervisor::start(&server(&[], &log, ""));
    let mut a = sup.client("fake");
    assert_eq!(
        Client::text(&a.call(json!(1), "echo", json!({"text": "x"}))),
        "x"
    );
    let seen = lines(&log);
    assert_eq!(seen[0]["method"], "server/discover");
    assert_eq!(seen[1]["method"], "initialize");
    assert_eq!(seen[2]["method"], "notifications/initialized");
    assert_eq!(child_saw_method(&log, "initialize"), 1);
}

#[test]
fn eras_dual_era_child_is_pinned_to_2026_and_serves_both_kinds_of_clients_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("child.log");
    let sup = Supervisor::start(&server(&["--era", "dual"], &log, ""));
    assert!(
        sup.wait_log("pinned modern", Duration::from_secs(5)),
        "{}",
        sup.log()
    );
    let mut old = sup.client("fake");
    let mut new = sup.connect("fake");
    for i in 0..5 {
        assert_eq!(
            Client::text(&old.call(json!(i), "echo", json!({"text": "old"}))),
            "old"
        );
        let r = modern(
            &mut new,
            json!(i),
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "new"}}),
            "new",
        );
        assert_eq!(Client::text(&r), "new");
        assert_eq!(r["result"]["resultType"], "complete", "{r}");
    }
    assert_eq!(child_saw_method(&log, "initialize"), 0);
    assert!(!sup.log().contains("pinned legacy"));
}

#[test]
fn eras_child_that_exits_on_the_probe_is_respawned_once_in_the_handshake_era() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("child.log");
    let pids = dir.path().join("pids");
    let p = pids.to_str().unwrap().to_string();
    let sup = Supervisor::start(&server(
        &["--era", "strict-legacy", "--pidfile", &p],
        &log,
        "",
    ));
    let mut a = sup.client("fake");
    assert_eq!(
        Client::text(&a.call(json!(1), "echo", json!({"text": "x"}))),
        "x"
    );
    assert_eq!(
        pidfile(&pids).len(),
        2,
        "one respawn after the probe killed it"
    );
    // Not a failed start: the backoff was not touched.
    let out = std::process::Command::new(SUPERVISOR)
        .args(["status", "--json", "-c"])
        .arg(&sup.config)
        .output()
        .unwrap();
    let st: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(st["servers"][0]["state"], "ready", "{st}");
    assert_eq!(st["servers"][0]["consecutive_failures"], 0, "{st}");
    assert!(
        sup.log().contains("exited on the server/discover probe"),
        "{}",
        sup.log()
    );
}

#[test]
fn eras_modern_client_on_a_handshake_child_is_translated() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("child.log");
    let sup = Supervisor::start(&server(&[], &log, ""));
    let mut old = sup.client("fake");
    let mut c = sup.connect("fake");
    // server/discover is answered from the cached initialize result.
    let d = modern(&mut c, json!("d"), "server/discover", json!({}), "new");
    assert_eq!(d["result"]["supportedVersions"], json!([V]), "{d}");
    assert_eq!(d["result"]["cacheScope"], "private");
    assert_eq!(d["result"]["ttlMs"], 0);
    assert_eq!(
        d["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "fake"
    );
    assert_eq!(
        child_saw_method(&log, "server/discover"),
        1,
        "only the era probe reached the child"
    );
    // Requests lose the envelope on the way in; results gain resultType and cache hints.
    let l = modern(&mut c, json!(1), "tools/list", json!({}), "new");
    assert_eq!(l["result"]["resultType"], "complete", "{l}");
    assert_eq!(l["result"]["cacheScope"], "private", "{l}");
    assert!(l["result"]["tools"]
        .as_array()
        .is_some_and(|t| !t.is_empty()));
    let seen = lines(&log);
    let list = seen
        .iter()
        .rev()
        .find(|m| m["method"] == "tools/list")
        .unwrap();
    assert!(
        list["params"].get("_meta").is_none(),
        "envelope stripped: {list}"
    );
    // A version the supervisor cannot serve.
    let mut bad = json!({});
    bad["_meta"] = env("bad");
    bad["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("2099-01-01");
    let r = c.request(json!(2), "tools/list", bad);
    assert_eq!(r["error"]["code"], -32022, "{r}");
    assert_eq!(r["error"]["data"]["supported"], json!([V]));
    // subscriptions/listen is served from the child's session-wide notifications.
    let mut p = json!({"notifications": {"toolsListChanged": true}});
    p["_meta"] = env("new");
    c.send(&json!({"jsonrpc": "2.0", "id": "L", "method": "subscriptions/listen", "params": p}));
    let ack = c
        .notification(
            "notifications/subscriptions/acknowledged",
            Duration::from_secs(5),
        )
        .expect("ack");
    assert_eq!(
        ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], "L",
        "{ack}"
    );
    assert_eq!(ack["params"]["notifications"]["toolsListChanged"], true);
    old.call(json!(9), "list_changed", json!({}));
    let n = c
        .notification("notifications/tools/list_changed", Duration::from_secs(5))
        .expect("on the stream");
    assert_eq!(
        n["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], "L",
        "{n}"
    );
    let plain = old
        .notification("notifications/tools/list_changed", Duration::from_secs(5))
        .expect("legacy broadcast");
    assert!(plain["params"].get("_meta").is_none(), "{plain}");
    // After a cancel, nothing more on that stream.
    c.send(&json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "L"}}));
    // A round trip on the same connection first: the cancel is handled before the change.
    let r = modern(
        &mut c,
        json!(3),
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "sync"}}),
        "new",
    );
    assert_eq!(Client::text(&r), "sync");
    old.call(json!(10), "list_changed", json!({}));
    old.notification("notifications/tools/list_changed", Duration::from_secs(5))
        .expect("legacy broadcast");
    let r = modern(
        &mut c,
        json!(4),
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "sync2"}}),
        "new",
    );
    assert_eq!(Client::text(&r), "sync2");
    assert!(
        c.backlog
            .iter()
            .all(|m| m["method"] != "notifications/tools/list_changed"),
        "{:?}",
        c.backlog
    );
}

#[test]
fn eras_handshake_client_on_a_modern_child_gets_lists_and_updates_from_a_listen_stream() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("child.log");
    let sup = Supervisor::start(&server(&["--era", "modern"], &log, ""));
    let mut a = sup.client("fake");
    assert_eq!(
        a.request(
            json!(1),
            "resources/subscribe",
            json!({"uri": "fake://one"})
        )["result"],
        json!({})
    );
    // Nothing of 2026 reaches a handshake client (issue 13 Why 4).
    let r = a.call(json!(2), "list_changed", json!({}));
    assert!(r["result"].get("resultType").is_none(), "{r}");
    assert!(
        r["result"]["_meta"]
            .get("io.modelcontextprotocol/serverInfo")
            .is_none(),
        "{r}"
    );
    a.notification("notifications/tools/list_changed", Duration::from_secs(5))
        .expect("list_changed reaches the handshake client");
    a.call(json!(3), "update", json!({"uri": "fake://one"}));
    let u = a
        .notification("notifications/resources/updated", Duration::from_secs(5))
        .expect("updated reaches the subscriber");
    assert_eq!(u["params"]["uri"], "fake://one");
    let listens = lines(&log)
        .into_iter()
        .filter(|m| m["method"] == "subscriptions/listen")
        .count();
    assert!(listens >= 1, "the supervisor keeps a listen stream open");
    assert_eq!(
        child_saw_method(&log, "resources/subscribe"),
        0,
        "2026 has no subscribe"
    );
}

#[test]
fn eras_modern_clients_on_a_modern_child_keep_their_own_listen_ids() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("child.log");
    let sup = Supervisor::start(&server(
        &["--era", "modern"],
        &log,
        "request_timeout = \"2s\"",
    ));
    let mut a = sup.connect("fake");
    let mut b = sup.connect("fake");
    for (c, name) in [(&mut a, "a"), (&mut b, "b")] {
        let mut p = json!({"notifications": {"toolsListChanged": true}});
        p["_meta"] = env(name);
        c.send(&json!({"jsonrpc": "2.0", "id": 1, "method": "subscriptions/listen", "params": p}));
        let ack = c
            .notification(
                "notifications/subscriptions/acknowledged",
                Duration::from_secs(5),
            )
            .expect("ack");
        assert_eq!(
            ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], 1,
            "{ack}"
        );
    }
    // A listen stream outlives request_timeout: a request sent after both streams opened
    // times out first (the event that says request_timeout has passed for them too).
    let mut clock = sup.connect("fake");
    let r = modern(
        &mut clock,
        json!("clock"),
        "tools/call",
        json!({"name": "slow", "arguments": {"ms": 30000}}),
        "clock",
    );
    assert_eq!(r["error"]["code"], -32001, "request_timeout passed: {r}");
    let r = modern(
        &mut a,
        json!(2),
        "tools/call",
        json!({"name": "list_changed", "arguments": {}}),
        "a",
    );
    assert_eq!(Client::text(&r), "ok");
    for c in [&mut a, &mut b] {
        let n = c
            .notification("notifications/tools/list_changed", Duration::from_secs(5))
            .expect("each stream");
        assert_eq!(
            n["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], 1,
            "{n}"
        );
        assert!(
            c.backlog.iter().all(|m| m.get("error").is_none()),
            "no timeout error: {:?}",
            c.backlog
        );
    }
}

#[test]
fn eras_input_required_passes_through_to_a_modern_client_and_its_retry_completes() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("child.log");
    let sup = Supervisor::start(&server(&["--era", "modern"], &log, ""));
    let mut c = sup.connect("fake");
    let r = modern(
        &mut c,
        json!(1),
        "tools/call",
        json!({"name": "confirm", "arguments": {"question": "go?"}}),
        "m",
    );
    assert_eq!(r["result"]["resultType"], "input_required", "{r}");
    let state = r["result"]["requestState"].clone();
    let retry = json!({"name": "confirm", "arguments": {"question": "go?"},
        "inputResponses": {"confirm": {"action": "accept", "content": {"ok": true}}}, "requestState": state});
    let done = modern(&mut c, json!(2), "tools/call", retry, "m");
    assert!(Client::text(&done).starts_with("confirmed:"), "{done}");
}

#[test]
fn case_k12_version_echo_clients_are_told_what_the_child_speaks() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("child.log");
    let sup = Supervisor::start(&server(&["--version-only", "2025-06-18"], &log, ""));
    let mut a = sup.connect("fake");
    let mut b = sup.connect("fake");
    let mut c = sup.connect("fake");
    for (cl, asked) in [(&mut a, V), (&mut b, "2025-03-26")] {
        let r = cl.request(
            json!(0),
            "initialize",
            json!({"protocolVersion": asked, "capabilities": {}, "clientInfo": {"name": asked, "version": "1"}}),
        );
        assert_eq!(
            r["result"]["protocolVersion"], "2025-06-18",
            "never the client's own: {r}"
        );
    }
    // C opens with server/discover: a prompt, documented translation (not a hang).
    let d = modern(&mut c, json!(1), "server/discover", json!({}), "c");
    assert_eq!(d["result"]["supportedVersions"], json!([V]), "{d}");
    assert!(
        sup.wait_log_count(
            "answering with the one the child speaks",
            2,
            Duration::from_secs(5)
        ),
        "each mismatch is logged"
    );
}

#[test]
fn eras_input_required_becomes_ordinary_requests_for_a_handshake_client() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("child.log");
    let sup = Supervisor::start(&server(&["--era", "modern"], &log, ""));
    let mut a = sup.connect("fake");
    a.initialize("asker", json!({"elicitation": {}}));
    a.send(&json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "confirm", "arguments": {"question": "deploy?"}}}));
    let q = a
        .server_request("elicitation/create", Duration::from_secs(5))
        .expect("the input request reaches the client");
    assert_eq!(q["params"]["message"], "deploy?", "{q}");
    a.send(&json!({"jsonrpc": "2.0", "id": q["id"], "result": {"action": "accept", "content": {"ok": true}}}));
    let r = a.response(&json!(7));
    assert_eq!(
        Client::text(&r),
        r#"confirmed:{"action":"accept","content":{"ok":true}}"#,
        "one ordinary response: {r}"
    );
    // The retry carried the answers and the opaque state.
    let retry = lines(&log)
        .into_iter()
        .rfind(|m| m["method"] == "tools/call")
        .unwrap();
    assert!(retry["params"]["requestState"].is_string(), "{retry}");
    assert_eq!(
        retry["params"]["inputResponses"]["confirm"]["action"],
        "accept"
    );
    // A client that did not declare elicitation gets an explicit error, not a hang.
    let mut b = sup.client("fake");
    let r = b.call(json!(1), "confirm", json!({}));
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("elicitation"),
        "{r}"
    );
}

/// Issue 13 Why 4: the request log names 2026 clients (from the envelope's `clientInfo`), as it
/// names handshake clients (from `initialize`).
#[test]
fn eras_the_request_log_names_2026_clients() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("child.log");
    let sup = Supervisor::start(&server(&[], &log, ""));
    let mut c = sup.connect("fake");
    let r = modern(
        &mut c,
        json!(1),
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "x"}}),
        "claude-2026",
    );
    assert_eq!(Client::text(&r), "x", "{r}");
    let named = wait_until(Duration::from_secs(5), || {
        sup.log().lines().any(|l| {
            l.contains("request finished")
                && l.contains("method=tools/call")
                && l.contains("client_name=claude-2026")
        })
    });
    assert!(named, "{}", sup.log());
}

/// What a client with the roots `file:///home/alice` gets from calling `tool`: a 2026 client
/// (`modern`) answers each `roots/list` input request of an `input_required` result with
/// them and retries; a handshake client (its `initialize` declared roots) answers each
/// `roots/list` request the supervisor sends it. Returns the final tool text.
fn confirm_with_alices_roots(c: &mut Client, modern_client: bool, tool: &str) -> String {
    let alice = json!({"roots": [{"uri": "file:///home/alice", "name": "alice"}]});
    if modern_client {
        let mut params = json!({"name": tool, "arguments": {}});
        for n in 1..=3 {
            let r = modern(c, json!(n), "tools/call", params.clone(), "m");
            if r["result"]["resultType"] != "input_required" {
                let text = Client::text(&r);
                return if text.is_empty() { r.to_string() } else { text };
            }
            let mut answers = serde_json::Map::new();
            for (k, q) in r["result"]["inputRequests"].as_object().unwrap() {
                assert_eq!(q["method"], "roots/list", "{r}");
                answers.insert(k.clone(), alice.clone());
            }
            params["inputResponses"] = Value::Object(answers);
            params["requestState"] = r["result"]["requestState"].clone();
        }
        panic!("three rounds and no answer");
    }
    c.send(&json!({"jsonrpc": "2.0", "id": 50, "method": "tools/call",
        "params": {"name": tool, "arguments": {}}}));
    loop {
        let m = c.recv();
        if m["id"] == 50 && m.get("method").is_none() {
            let text = Client::text(&m);
            return if text.is_empty() { m.to_string() } else { text };
        }
        if m["method"] == "roots/list" {
            c.send(&json!({"jsonrpc": "2.0", "id": m["id"], "result": alice}));
        }
    }
}

/// Issue 47 §6 (row R1): `client_roots = "none"` holds for every era pair and every path a
/// roots request takes. Two children ask for roots when `confirm` is called
/// (`--confirm-roots`): a handshake-era one with a `roots/list` request, a 2026-07-28 one
/// with an `input_required` round. Clients of both eras call them directly and through an
/// endpoint, each answering with its own roots (`file:///home/alice`) whenever it is asked:
/// the children only ever see the operator's (`file:///srv/shared`). Before, a 2026 client on
/// the 2026 child answered the round itself and its paths reached the child.
#[test]
fn client_roots_none_keeps_every_clients_roots_home_in_every_era_pair() {
    let dir = tempfile::tempdir().unwrap();
    let policy = "client_roots = \"none\"\nroots = [\"file:///srv/shared\"]";
    let servers = fake_server(
        "hc",
        &[
            "--confirm-roots",
            "--tools",
            "echo,confirm",
            "--log",
            dir.path().join("hc.log").to_str().unwrap(),
        ],
        policy,
    ) + &fake_server(
        "mc",
        &[
            "--era",
            "modern",
            "--confirm-roots",
            "--log",
            dir.path().join("mc.log").to_str().unwrap(),
        ],
        &format!("{policy}\nprotocol = \"2026-07-28\""),
    ) + "[endpoints.desk]\nservers = [\"hc\", \"mc\"]\n";
    let sup = Supervisor::start(&servers);
    for child in ["hc", "mc"] {
        assert!(wait_until(Duration::from_secs(10), || sup
            .server_status(child)["state"]
            == "ready"));
    }
    for modern_client in [false, true] {
        for (socket, tool) in [
            ("hc", "confirm".to_string()),
            ("mc", "confirm".to_string()),
            ("desk", "hc__confirm".to_string()),
            ("desk", "mc__confirm".to_string()),
        ] {
            let mut c = sup.connect(socket);
            if !modern_client {
                c.initialize("ide", json!({"roots": {"listChanged": true}}));
            }
            let text = confirm_with_alices_roots(&mut c, modern_client, &tool);
            let case = format!("{socket} {tool}, 2026 client: {modern_client}");
            assert!(text.starts_with("confirmed:"), "{case}: {text}");
            assert!(text.contains("file:///srv/shared"), "{case}: {text}");
            assert!(
                !text.contains("alice"),
                "{case}: the client's roots reached the child: {text}"
            );
        }
    }
    for log in ["hc.log", "mc.log"] {
        let seen = std::fs::read_to_string(dir.path().join(log)).unwrap_or_default();
        assert!(!seen.contains("alice"), "{log}: {seen}");
    }
}
