//! Endpoints (issue 31): one endpoint in front of several servers, as a client sees it.

use crate::harness::needs_root;
use crate::harness::{fake_server, wait_until, Client, Supervisor};
use serde_json::{json, Value};
use std::time::Duration;

/// Two fake servers and an endpoint `desk` in front of both (and a status tool).
fn two_sources(extra_endpoint: &str) -> String {
    fake_server("alpha", &[], "")
        + &fake_server("beta", &[], "backoff_initial = \"200ms\"\nbackoff_max = \"200ms\"")
        + &format!(
            "[endpoints.desk]\nservers = [\"alpha\", \"beta\"]\ndescriptions = {{ alpha = \"the first fake\" }}\n{extra_endpoint}\n"
        )
}

fn tool_names(list: &Value) -> Vec<String> {
    list["result"]["tools"]
        .as_array()
        .unwrap_or(&Vec::new())
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn an_endpoint_lists_every_sources_tools_prefixed_and_routes_each_call_to_its_source() {
    let sup = Supervisor::start(&two_sources(""));
    let mut c = sup.connect("desk");
    let init = c.initialize("test-client", json!({}));
    assert_eq!(init["result"]["serverInfo"]["name"], "desk", "{init}");
    let instructions = init["result"]["instructions"].as_str().unwrap_or("");
    assert!(
        instructions.contains("## alpha: the first fake"),
        "{instructions}"
    );
    assert!(instructions.contains("## beta"), "{instructions}");
    assert_eq!(init["result"]["capabilities"]["tools"]["listChanged"], true);
    let list = c.request(json!(1), "tools/list", json!({}));
    let names = tool_names(&list);
    assert!(names.contains(&"alpha__echo".to_string()), "{names:?}");
    assert!(names.contains(&"beta__echo".to_string()), "{names:?}");
    assert!(!names.iter().any(|n| n == "echo"), "{names:?}");
    // Each call goes to its own source: the pid tells them apart.
    let a = Client::text(&c.call(json!(2), "alpha__pid", json!({})));
    let b = Client::text(&c.call(json!(3), "beta__pid", json!({})));
    let pa = sup.server_status("alpha")["pid"].to_string();
    let pb = sup.server_status("beta")["pid"].to_string();
    assert_eq!((a, b), (pa, pb));
    let r = c.call(json!(4), "alpha__echo", json!({"text": "hello"}));
    assert_eq!(Client::text(&r), "hello", "{r}");
}

#[test]
fn a_call_by_name_before_any_list_is_routed_and_an_unknown_tool_is_invalid_params() {
    let sup = Supervisor::start(&two_sources(""));
    let mut c = sup.client("desk");
    let r = c.call(json!(1), "beta__add", json!({"a": 2, "b": 3}));
    assert_eq!(Client::text(&r), "5", "{r}");
    let r = c.call(json!(2), "nosuch__tool", json!({}));
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert_eq!(r["error"]["message"], "Unknown tool: nosuch__tool", "{r}");
    // The source's own names are not the endpoint's.
    let r = c.call(json!(3), "echo", json!({"text": "x"}));
    assert_eq!(r["error"]["code"], -32602, "{r}");
}

#[test]
fn a_source_killed_mid_use_stays_listed_its_calls_name_it_and_the_other_keeps_working() {
    let sup = Supervisor::start(&two_sources("status_tool = \"desk_status\""));
    let mut c = sup.client("desk");
    let before = tool_names(&c.request(json!(1), "tools/list", json!({})));
    assert!(before.contains(&"desk_status".to_string()), "{before:?}");
    // beta kills itself; its answer is the outage.
    let r = c.call(json!(2), "beta__crash", json!({}));
    assert_eq!(r["result"]["isError"], true, "{r}");
    let text = Client::text(&r);
    assert!(text.contains("server=beta"), "{text}");
    // While it is down or restarting: alpha answers, beta's tools stay listed.
    let r = c.call(json!(3), "alpha__echo", json!({"text": "still here"}));
    assert_eq!(Client::text(&r), "still here", "{r}");
    let during = tool_names(&c.request(json!(4), "tools/list", json!({})));
    assert_eq!(during, before);
    let status = c.call(json!(5), "desk_status", json!({}));
    let st = Client::text(&status);
    assert!(st.contains("alpha: ready"), "{st}");
    assert!(st.contains("beta: "), "{st}");
    // It comes back; its calls work again through the same connection.
    assert!(wait_until(Duration::from_secs(10), || sup
        .server_status("beta")["state"]
        == "ready"));
    let r = c.call(json!(6), "beta__echo", json!({"text": "back"}));
    assert_eq!(Client::text(&r), "back", "{r}");
    // Nothing changed in its list: no list_changed was sent.
    assert!(c
        .notification(
            "notifications/tools/list_changed",
            Duration::from_millis(300)
        )
        .is_none());
}

#[test]
fn a_sources_request_reaches_the_client_renumbered_and_its_answer_goes_back() {
    let sup = Supervisor::start(&two_sources(""));
    let mut c = sup.connect("desk");
    c.initialize("test-client", json!({"sampling": {}}));
    c.send(&json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "alpha__ask", "arguments": {"method": "sampling/createMessage", "params": {"x": 1}}}}));
    let q = c
        .server_request("sampling/createMessage", Duration::from_secs(10))
        .expect("the source's request reaches the client");
    c.send(&json!({"jsonrpc": "2.0", "id": q["id"], "result": {"answer": 42}}));
    let r = c.response(&json!(7));
    assert_eq!(Client::text(&r), "{\"answer\":42}", "{r}");
}

#[test]
fn progress_reaches_the_client_that_asked() {
    let sup = Supervisor::start(&two_sources(""));
    let mut c = sup.client("desk");
    let mut other = sup.client("desk");
    c.send(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "beta__progress", "arguments": {"count": 2}, "_meta": {"progressToken": "p1"}}}));
    let r = c.response(&json!(1));
    assert_eq!(Client::text(&r), "progress done", "{r}");
    let got = c
        .backlog
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .count();
    assert_eq!(got, 2, "{:?}", c.backlog);
    assert!(other
        .notification("notifications/progress", Duration::from_millis(300))
        .is_none());
}

#[test]
fn stop_on_an_endpoint_acts_on_no_child_and_names_its_servers_and_status_lists_it() {
    let sup = Supervisor::start(&two_sources(""));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mcp-supervisor"))
        .args(["stop", "desk", "--config"])
        .arg(&sup.config)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains("alpha, beta"), "{text}");
    let status = sup.status_json();
    let eps = status["endpoints"].as_array().cloned().unwrap_or_default();
    assert_eq!(eps.len(), 1, "{status}");
    assert_eq!(eps[0]["name"], "desk");
    assert_eq!(eps[0]["servers"][0]["name"], "alpha");
    assert_eq!(sup.server_status("alpha")["state"], "ready");
}

#[test]
fn an_endpoint_named_like_a_server_is_exit_2_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("s.toml");
    std::fs::write(
        &p,
        "[servers.a]\ncommand = \"x\"\n\n[endpoints.a]\nservers = [\"a\"]\n",
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mcp-supervisor"))
        .arg("check-config")
        .arg(&p)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains(":4: key `endpoints.a`"), "{text}");
}

/// Whether a test can connect as another uid (root and `setpriv`); says so when it cannot.
fn can_be_another_uid() -> bool {
    needs_root("connecting as another uid", &["setpriv"])
}

/// `attach desk` run as uid 65534, its stdin and stdout piped.
fn nobody_attach(sup: &Supervisor) -> std::process::Child {
    use std::process::{Command, Stdio};
    Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            env!("CARGO_BIN_EXE_mcp-supervisor"),
            "attach",
            "desk",
            "--socket",
        ])
        .arg(sup.socket("desk"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Runs `attach desk` as uid 65534 with `lines` on its stdin; its stdout, parsed.
fn attach_as_nobody(sup: &Supervisor, lines: &[Value]) -> Vec<Value> {
    use std::io::Write;
    let mut child = nobody_attach(sup);
    let mut input = String::new();
    for l in lines {
        input.push_str(&l.to_string());
        input.push('\n');
    }
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// An endpoint whose socket another uid may reach, with `policy` lines.
fn shared_endpoint(policy: &str) -> Supervisor {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let config = dir.path().join("supervisor.toml");
    let text = format!(
        "[supervisor]\nsocket_dir = {:?}\nsocket_mode = \"0666\"\nallowed_uids = [65534]\n\n{}",
        dir.path().join("run"),
        two_sources(policy)
    );
    std::fs::write(&config, text).unwrap();
    let mut s = Supervisor::spawn_with(dir, config, &[]);
    if !wait_until(Duration::from_secs(10), || {
        s.socket("desk").exists() && s.socket("control").exists()
    }) {
        s.stop();
        panic!("no socket; log:\n{}", s.log());
    }
    s
}

#[test]
fn two_unix_users_see_different_tools_and_a_hidden_call_is_denied_not_an_outage() {
    if !can_be_another_uid() {
        return;
    }
    let sup = shared_endpoint(
        "hide = [\"*__crash\"]\n[endpoints.desk.clients.nobody]\nuids = [65534]\nallow = [\"alpha__*\"]\nhide = [\"alpha__exit\"]\n",
    );
    // root: everything but the hidden-for-all.
    let mut c = sup.client("desk");
    let mine = tool_names(&c.request(json!(1), "tools/list", json!({})));
    assert!(mine.contains(&"beta__echo".to_string()), "{mine:?}");
    assert!(!mine.iter().any(|n| n.ends_with("__crash")), "{mine:?}");
    // nobody: alpha's tools only, without exit.
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "n", "version": "1"}}});
    let out = attach_as_nobody(
        &sup,
        &[
            init,
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "beta__echo", "arguments": {"text": "x"}}}),
            json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "alpha__echo", "arguments": {"text": "ok"}}}),
        ],
    );
    let by_id = |id: i64| {
        out.iter()
            .find(|m| m["id"] == id)
            .cloned()
            .unwrap_or_default()
    };
    let theirs = tool_names(&by_id(1));
    assert!(!theirs.is_empty(), "{out:?}");
    assert!(
        theirs.iter().all(|n| n.starts_with("alpha__")),
        "{theirs:?}"
    );
    assert!(!theirs.contains(&"alpha__exit".to_string()), "{theirs:?}");
    let denied = by_id(2);
    assert_eq!(denied["result"]["isError"], true, "{denied}");
    assert_eq!(
        denied["result"]["_meta"]["mcp-supervisor/outage"]["class"],
        "denied"
    );
    assert!(Client::text(&denied).starts_with("denied:"), "{denied}");
    assert_eq!(Client::text(&by_id(3)), "ok");
    // Counted apart: a policy_denied outcome, under the endpoint's name.
    let m = sup.metrics();
    assert!(
        m.lines()
            .any(|l| l.starts_with("mcp_supervisor_requests_total{")
                && l.contains("server=\"desk\"")
                && l.contains("outcome=\"policy_denied\"")),
        "{m}"
    );
}

#[test]
fn a_reload_that_changes_policy_updates_a_connected_client_without_a_reconnect() {
    let sup = Supervisor::start(&two_sources(""));
    let mut c = sup.client("desk");
    let before = tool_names(&c.request(json!(1), "tools/list", json!({})));
    assert!(before.contains(&"alpha__echo".to_string()));
    let text = std::fs::read_to_string(&sup.config).unwrap();
    std::fs::write(
        &sup.config,
        text.replace(
            "[endpoints.desk]\n",
            "[endpoints.desk]\nhide = [\"alpha__*\"]\n",
        ),
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mcp-supervisor"))
        .args(["reload", "-c"])
        .arg(&sup.config)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(
        c.notification("notifications/tools/list_changed", Duration::from_secs(10))
            .is_some(),
        "the client is told its view changed"
    );
    let after = tool_names(&c.request(json!(2), "tools/list", json!({})));
    assert!(!after.iter().any(|n| n.starts_with("alpha__")), "{after:?}");
    assert!(after.contains(&"beta__echo".to_string()), "{after:?}");
    let r = c.call(json!(3), "alpha__echo", json!({"text": "x"}));
    assert_eq!(
        r["result"]["_meta"]["mcp-supervisor/outage"]["class"], "denied",
        "{r}"
    );
}

/// POSTs `body` to endpoint `desk` over TCP with `token`.
fn post_with(
    s: &crate::http::HttpSup,
    token: &str,
    extra: &[(&str, &str)],
    body: &Value,
) -> crate::http::Resp {
    let auth = format!("Bearer {token}");
    let mut h = vec![
        ("Authorization", auth.as_str()),
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ];
    h.extend_from_slice(extra);
    crate::http::request(&s.tcp(), "POST", "/mcp/desk", &h, &body.to_string())
}

fn named_token(s: &crate::http::HttpSup, label: &str) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mcp-supervisor"))
        .args(["url", "desk", "--json", "--token", label, "-c"])
        .arg(&s.sup.config)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["token"].as_str().unwrap().to_string()
}

#[test]
fn two_named_http_tokens_see_different_tools_in_both_eras() {
    let s = crate::http::HttpSup::start(&two_sources(
        "http = true\n[endpoints.desk.clients.ci]\ntoken = true\nallow = [\"alpha__*\"]\n[endpoints.desk.clients.ops]\ntoken = true\nhide = [\"alpha__*\"]\n",
    ));
    let ci = named_token(&s, "ci");
    let ops = named_token(&s, "ops");
    assert_ne!(ci, ops);
    // 2026-07-28: one request per POST.
    let list = |token: &str| {
        let mut m = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}});
        m["params"] = crate::http::modern(m["params"].clone());
        let r = post_with(
            &s,
            token,
            &[
                ("MCP-Protocol-Version", "2026-07-28"),
                ("Mcp-Method", "tools/list"),
            ],
            &m,
        );
        assert_eq!(r.status, 200);
        tool_names(&r.json())
    };
    let a = list(&ci);
    let b = list(&ops);
    assert!(
        !a.is_empty() && a.iter().all(|n| n.starts_with("alpha__")),
        "{a:?}"
    );
    assert!(
        !b.is_empty() && b.iter().all(|n| n.starts_with("beta__")),
        "{b:?}"
    );
    // The endpoint's own token sees both.
    let all = list(&s.token("desk"));
    assert!(
        all.iter().any(|n| n.starts_with("alpha__")) && all.iter().any(|n| n.starts_with("beta__"))
    );
    // Handshake era, a session under the ci token: a call of a beta tool is denied.
    let init = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
        "protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"it","version":"1"}}});
    let r = post_with(&s, &ci, &[], &init);
    assert_eq!(r.status, 200);
    let sid = r.header("mcp-session-id").unwrap().to_string();
    assert_eq!(r.json()["result"]["serverInfo"]["name"], "desk");
    let h = [
        ("Mcp-Session-Id", sid.as_str()),
        ("MCP-Protocol-Version", "2025-06-18"),
    ];
    assert_eq!(
        post_with(
            &s,
            &ci,
            &h,
            &json!({"jsonrpc":"2.0","method":"notifications/initialized"})
        )
        .status,
        202
    );
    let r = post_with(
        &s,
        &ci,
        &h,
        &json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"beta__echo","arguments":{"text":"x"}}}),
    );
    let v = r.json();
    assert_eq!(
        v["result"]["_meta"]["mcp-supervisor/outage"]["class"], "denied",
        "{v}"
    );
    let r = post_with(
        &s,
        &ci,
        &h,
        &json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"alpha__echo","arguments":{"text":"over http"}}}),
    );
    assert_eq!(Client::text(&r.json()), "over http");
    // A wrong token is refused; a named token of another endpoint would be too.
    let r = post_with(&s, "0123456789abcdef0123", &[], &init);
    assert_eq!(r.status, 401);
}

#[test]
fn a_request_through_an_endpoint_is_logged_and_counted_under_the_endpoint_and_its_source() {
    let sup = Supervisor::start(&two_sources("hide = [\"alpha__exit\"]"));
    let mut c = sup.client("desk");
    let r = c.call(json!(1), "alpha__echo", json!({"text": "hi"}));
    assert_eq!(Client::text(&r), "hi", "{r}");
    let denied = c.call(json!(2), "alpha__exit", json!({}));
    assert_eq!(denied["result"]["isError"], true, "{denied}");
    let rid = denied["result"]["_meta"]["mcp-supervisor/outage"]["request_id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    // A direct client of the same server: no endpoint in its line.
    let mut direct = sup.client("alpha");
    let r = direct.call(json!(1), "echo", json!({"text": "direct"}));
    assert_eq!(Client::text(&r), "direct", "{r}");
    let line = |needle: &str| {
        sup.log()
            .lines()
            .find(|l| l.contains("request finished") && l.contains(needle))
            .map(str::to_string)
    };
    assert!(
        wait_until(Duration::from_secs(5), || line(
            "tool=\"echo\" arg_keys=text"
        )
        .is_some()
            && line(&rid).is_some()
            && sup.log().matches("tool=\"echo\"").count() >= 2),
        "{}",
        sup.log()
    );
    let via: Vec<String> = sup
        .log()
        .lines()
        .filter(|l| l.contains("request finished") && l.contains("tool=\"echo\""))
        .map(str::to_string)
        .collect();
    assert!(
        via.iter().any(|l| l.contains("server{server=alpha}")
            && l.contains("endpoint=\"desk\"")
            && l.contains("outcome=\"ok\"")),
        "{via:?}"
    );
    assert!(
        via.iter()
            .any(|l| l.contains("server{server=alpha}") && !l.contains("endpoint=")),
        "{via:?}"
    );
    // The refusal: its request id is the one the client was shown, source and endpoint named.
    let refused = line(&rid).unwrap_or_default();
    for part in [
        "server{server=alpha}",
        "endpoint=\"desk\"",
        "tool=\"exit\"",
        "outcome=\"policy_denied\"",
    ] {
        assert!(refused.contains(part), "{part}: {refused}");
    }
    let m = sup.metrics();
    let series = |outcome: &str| {
        m.lines().any(|l| {
            l.starts_with("mcp_supervisor_endpoint_requests_total{")
                && l.contains("endpoint=\"desk\"")
                && l.contains("server=\"alpha\"")
                && l.contains("method=\"tools/call\"")
                && l.contains(&format!("outcome=\"{outcome}\""))
        })
    };
    assert!(series("ok") && series("policy_denied"), "{m}");
    // The direct call is the source's, not the endpoint's: two calls, one through `desk`.
    let value = |prefix: &str| {
        m.lines()
            .find(|l| {
                l.starts_with(prefix)
                    && l.contains("server=\"alpha\"")
                    && l.contains("method=\"tools/call\"")
                    && l.contains("outcome=\"ok\"")
            })
            .and_then(|l| l.rsplit(' ').next())
            .map(str::to_string)
    };
    assert_eq!(
        (
            value("mcp_supervisor_requests_total{"),
            value("mcp_supervisor_endpoint_requests_total{")
        ),
        (Some("2".into()), Some("1".into())),
        "{m}"
    );
}

/// The 2026-07-28 envelope of a client named `name`.
fn envelope(name: &str) -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": name, "version": "1"},
    })
}

#[test]
fn a_2026_listen_stream_gets_every_sources_changes_under_its_own_id_until_cancelled() {
    let sup = Supervisor::start(
        &(fake_server("alpha", &[], "")
            + &fake_server("gamma", &["--era", "modern"], "")
            + "[endpoints.desk]\nservers = [\"alpha\", \"gamma\"]\n"),
    );
    let mut c = sup.connect("desk");
    let mut p = json!({"notifications": {"toolsListChanged": true,
        "resourceSubscriptions": ["fake://one"]}});
    p["_meta"] = envelope("listener");
    c.send(&json!({"jsonrpc": "2.0", "id": "L", "method": "subscriptions/listen", "params": p}));
    let ack = c
        .notification(
            "notifications/subscriptions/acknowledged",
            Duration::from_secs(5),
        )
        .expect("the endpoint acknowledges the stream");
    assert_eq!(
        ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], "L",
        "{ack}"
    );
    assert_eq!(
        ack["params"]["notifications"],
        json!({"toolsListChanged": true, "resourceSubscriptions": ["fake://one"]})
    );
    let on_stream = |c: &mut Client, method: &str| {
        let n = c
            .notification(method, Duration::from_secs(5))
            .unwrap_or_else(|| panic!("{method} on the stream: {:?}", c.backlog));
        assert_eq!(
            n["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], "L",
            "{n}"
        );
        n
    };
    // A handshake source's change (made by one of its own clients) reaches the stream.
    let mut direct = sup.client("alpha");
    direct.call(json!(1), "list_changed", json!({}));
    on_stream(&mut c, "notifications/tools/list_changed");
    // So do a 2026 source's change and its resource update, called through the endpoint.
    let call = |c: &mut Client, id: i64, name: &str, args: Value| {
        let mut p = json!({"name": name, "arguments": args});
        p["_meta"] = envelope("listener");
        c.request(json!(id), "tools/call", p)
    };
    let r = call(&mut c, 2, "gamma__list_changed", json!({}));
    assert!(r.get("result").is_some(), "{r}");
    on_stream(&mut c, "notifications/tools/list_changed");
    let r = call(&mut c, 3, "gamma__update", json!({"uri": "fake://one"}));
    assert!(r.get("result").is_some(), "{r}");
    let u = on_stream(&mut c, "notifications/resources/updated");
    assert_eq!(u["params"]["uri"], "fake://one", "{u}");
    // The 2026 source restarts (its child ends the stream with the outage): the stream
    // toward it is opened again, and its next changes reach the same stream.
    let r = call(&mut c, 6, "gamma__crash", json!({}));
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert!(wait_until(Duration::from_secs(10), || sup
        .server_status("gamma")["state"]
        == "ready"));
    let mut id = 100;
    let back = wait_until(Duration::from_secs(15), || {
        id += 1;
        call(&mut c, id, "gamma__list_changed", json!({}));
        c.notification(
            "notifications/tools/list_changed",
            Duration::from_millis(300),
        )
        .is_some()
    });
    assert!(
        back,
        "no change on the stream after the restart: {:?}",
        c.backlog
    );
    // Cancelled: nothing more on it, and the endpoint keeps serving the connection.
    c.send(&json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "L"}}));
    let r = call(&mut c, 4, "alpha__echo", json!({"text": "sync"}));
    assert_eq!(Client::text(&r), "sync", "{r}");
    c.backlog.clear();
    direct.call(json!(2), "list_changed", json!({}));
    direct
        .notification("notifications/tools/list_changed", Duration::from_secs(5))
        .expect("the direct client still hears it");
    let r = call(&mut c, 5, "alpha__echo", json!({"text": "sync2"}));
    assert_eq!(Client::text(&r), "sync2", "{r}");
    assert!(
        c.backlog
            .iter()
            .all(|m| m["method"] != "notifications/tools/list_changed"),
        "{:?}",
        c.backlog
    );
}

#[test]
fn a_handshake_client_asking_to_listen_on_an_endpoint_is_told_it_is_a_2026_method() {
    let sup = Supervisor::start(&two_sources(""));
    let mut c = sup.client("desk");
    let r = c.request(
        json!(1),
        "subscriptions/listen",
        json!({"notifications": {}}),
    );
    assert_eq!(r["error"]["code"], -32601, "{r}");
}

#[test]
fn an_endpoints_clients_count_against_each_sources_max_clients() {
    let servers = two_sources("");
    let sup = Supervisor::spawn_config("max_clients = 2", &servers, &[]);
    assert!(
        wait_until(Duration::from_secs(10), || sup.socket("desk").exists()),
        "{}",
        sup.log()
    );
    let mut direct = sup.client("alpha");
    // The endpoint's client takes alpha's second seat...
    let mut through = sup.client("desk");
    let r = through.call(json!(1), "alpha__echo", json!({"text": "seated"}));
    assert_eq!(Client::text(&r), "seated", "{r}");
    // ...so a third client of alpha's socket is refused, saying why before the close,
    let mut third = sup.connect("alpha");
    let said = third.recv();
    assert!(
        said["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("no free client seat")),
        "{said}"
    );
    assert!(third.closed_within(Duration::from_secs(5)));
    assert!(sup.wait_log("no free client seat", Duration::from_secs(5)));
    // and a second endpoint client is not joined to alpha (beta still serves it).
    let mut second = sup.client("desk");
    let r = second.call(json!(1), "beta__echo", json!({"text": "beta"}));
    assert_eq!(Client::text(&r), "beta", "{r}");
    assert!(
        sup.wait_log(
            "a client of the endpoint is not joined to this source: `alpha` has no free client seat",
            Duration::from_secs(5)
        ),
        "{}",
        sup.log()
    );
    // The seat comes back when the endpoint's client leaves.
    drop(through);
    drop(second);
    let freed = wait_until(Duration::from_secs(10), || {
        let mut c = sup.connect("alpha");
        let _ = std::io::Write::write_all(
            &mut c.stream,
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n",
        );
        c.recv_timeout(Duration::from_secs(2))
            .is_some_and(|r| r["result"] == json!({}))
    });
    assert!(freed, "{}", sup.log());
    assert_eq!(
        direct.request(json!(9), "ping", json!({}))["result"],
        json!({})
    );
}

#[test]
fn a_paged_source_that_is_down_pages_the_same_for_a_client_that_never_listed_it() {
    let sup = Supervisor::start(
        &(fake_server(
            "alpha",
            &["--page-size", "3"],
            "backoff_initial = \"60s\"\nbackoff_max = \"60s\"",
        ) + &fake_server("beta", &[], "")
            + "[endpoints.desk]\nservers = [\"alpha\", \"beta\"]\n"),
    );
    let alpha_of = |list: &Value| -> Vec<String> {
        tool_names(list)
            .into_iter()
            .filter(|n| n.starts_with("alpha__"))
            .collect()
    };
    let mut first = sup.client("desk");
    let before = alpha_of(&first.request(json!(1), "tools/list", json!({})));
    assert!(before.len() > 6, "alpha pages its tools: {before:?}");
    // alpha goes down and stays down (60 s of backoff).
    first.call(json!(2), "alpha__crash", json!({}));
    assert!(
        wait_until(Duration::from_secs(10), || sup.server_status("alpha")
            ["state"]
            == "backoff"),
        "{}",
        sup.server_status("alpha")
    );
    let mut second = sup.client("desk");
    let during = second.request(json!(1), "tools/list", json!({}));
    assert_eq!(alpha_of(&during), before, "{during}");
    // Served from alpha's cache, every page: each marked unavailable.
    let marked = during["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["name"].as_str().is_some_and(|n| n.starts_with("alpha__")))
        .all(|t| {
            t["description"]
                .as_str()
                .is_some_and(|d| d.contains("currently unavailable"))
        });
    assert!(marked, "{during}");
}

#[test]
fn a_panicked_endpoint_dispatcher_cuts_its_clients_and_a_fresh_one_serves_the_next() {
    let sup = Supervisor::spawn_config(
        "",
        &two_sources(""),
        &[("MCP_SUPERVISOR_TEST_PANIC", "@endpoint:desk")],
    );
    assert!(
        wait_until(Duration::from_secs(10), || sup.socket("desk").exists()),
        "{}",
        sup.log()
    );
    // The hook panics the dispatcher at this first connection: the client is cut, not left
    // hanging.
    let mut first = sup.connect("desk");
    assert!(
        first.closed_within(Duration::from_secs(10)),
        "{}",
        sup.log()
    );
    assert!(sup.wait_log("the endpoint's dispatcher panicked", Duration::from_secs(5)));
    // The sources never noticed; a fresh dispatcher (after its delay) serves a new client.
    let mut direct = sup.client("alpha");
    let r = direct.call(json!(1), "echo", json!({"text": "fine"}));
    assert_eq!(Client::text(&r), "fine", "{r}");
    let mut next = sup.client("desk");
    let r = next.call(json!(1), "beta__echo", json!({"text": "again"}));
    assert_eq!(Client::text(&r), "again", "{r}");
    assert!(sup.wait_log(
        "starting a fresh endpoint dispatcher",
        Duration::from_secs(5)
    ));
}

#[test]
fn a_reload_that_no_longer_allows_a_uid_on_the_endpoint_cuts_its_live_session() {
    if !can_be_another_uid() {
        return;
    }
    use std::io::{BufRead, Write};
    use std::process::Command;
    let sup = shared_endpoint("allowed_uids = [65534]");
    let mut child = nobody_attach(&sup);
    let mut stdin = child.stdin.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "n", "version": "1"}}});
    writeln!(stdin, "{init}").unwrap();
    let answered = rx.recv_timeout(Duration::from_secs(10)).unwrap_or_default();
    assert!(answered.contains("\"result\""), "{answered}\n{}", sup.log());
    // The endpoint no longer lets uid 65534 in (its sources still do).
    let text = std::fs::read_to_string(&sup.config).unwrap();
    std::fs::write(
        &sup.config,
        text.replace("}\nallowed_uids = [65534]\n", "}\nallowed_uids = []\n"),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_mcp-supervisor"))
        .args(["reload", "-c"])
        .arg(&sup.config)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let ended = wait_until(Duration::from_secs(10), || {
        child.try_wait().ok().flatten().is_some()
    });
    if !ended {
        let _ = child.kill();
    }
    let _ = child.wait();
    assert!(ended, "the session stayed open\n{}", sup.log());
    assert!(sup.wait_log("no longer allowed on the endpoint", Duration::from_secs(5)));
}

/// Issue 47 N19: two sources whose names differ by a `_` next to the separator, each
/// offering tool names a hostile upstream would pick on purpose. `a` offers `_b` and
/// `b__echo` (its plain names `a___b` and `a__b__echo`); `a_` offers `b` (plain `a___b`
/// too). Endpoint `open` has no policy; `hid` hides every tool of `a` from this uid, `only`
/// allows this uid `a_`'s tools only. Both in one supervisor, so each endpoint's list and
/// calls can be compared with the unfiltered list of `open`.
fn lookalike_sources() -> Supervisor {
    let me = unsafe { libc::geteuid() };
    Supervisor::start(
        &(fake_server(
            "a",
            &["--tools", "_b,b__echo", "--answer-any", "--name", "a"],
            "",
        ) + &fake_server("a_", &["--tools", "b", "--answer-any", "--name", "a_"], "")
            + &format!(
                "[endpoints.open]\nservers = [\"a\", \"a_\"]\n\n\
                 [endpoints.hid]\nservers = [\"a\", \"a_\"]\n\
                 [endpoints.hid.clients.me]\nuids = [{me}]\nhide = [\"a__*\"]\n\n\
                 [endpoints.only]\nservers = [\"a\", \"a_\"]\n\
                 [endpoints.only.clients.me]\nuids = [{me}]\nallow = [\"a___*\"]\n"
            )),
    )
}

/// Each listed tool's exposed name and the source its `_meta` names.
fn tools_with_source(list: &Value) -> Vec<(String, String)> {
    list["result"]["tools"]
        .as_array()
        .unwrap_or(&Vec::new())
        .iter()
        .map(|t| {
            (
                t["name"].as_str().unwrap_or("").to_string(),
                t["_meta"]["mcp-supervisor/source"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
            )
        })
        .collect()
}

/// Through endpoint `ep`, whose policy lets this client use source `allowed`'s tools and
/// nothing of `hidden`: the list holds exactly `allowed`'s tools as `open` lists them, each
/// listed call reaches the source its `_meta` names, and every spelling (each exposed name
/// `open` lists, and each plain `SOURCE__NAME` a source's own names give) either reaches the
/// source `open`'s `_meta` names for it, when that is `allowed`, or is refused: never `hidden`.
fn only_the_allowed_source_is_reachable(sup: &Supervisor, ep: &str, allowed: &str, hidden: &str) {
    let mut open = sup.client("open");
    let all = tools_with_source(&open.request(json!(1), "tools/list", json!({})));
    assert_eq!(
        all.len(),
        3,
        "every tool of both sources is listed: {all:?}"
    );
    let names: Vec<&String> = all.iter().map(|(n, _)| n).collect();
    let mut unique = names.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(
        unique.len(),
        names.len(),
        "exposed names are unique: {all:?}"
    );
    let mut c = sup.client(ep);
    let seen = tools_with_source(&c.request(json!(1), "tools/list", json!({})));
    let expected: Vec<(String, String)> =
        all.iter().filter(|(_, s)| s == allowed).cloned().collect();
    assert!(!expected.is_empty(), "{all:?}");
    assert_eq!(seen, expected, "{ep} lists {allowed}'s tools only");
    let mut spellings: Vec<String> = all.iter().map(|(n, _)| n.clone()).collect();
    spellings.extend(["a___b", "a__b__echo", "a__b", "a__echo"].map(String::from));
    for (i, name) in spellings.iter().enumerate() {
        let r = c.call(json!(100 + i), name, json!({}));
        let text = Client::text(&r);
        assert!(
            !text.starts_with(&format!("{hidden} answered")),
            "{ep}: `{name}` reached the hidden source {hidden}: {r}"
        );
        match all.iter().find(|(n, _)| n == name) {
            Some((_, s)) if s == allowed => {
                assert!(
                    text.starts_with(&format!("{allowed} answered ")),
                    "{ep}: `{name}` is {allowed}'s as listed: {r}"
                );
            }
            Some(_) => assert_eq!(
                r["result"]["_meta"]["mcp-supervisor/outage"]["class"], "denied",
                "{ep}: `{name}` is {hidden}'s: {r}"
            ),
            None => assert_eq!(r["error"]["code"], -32602, "{ep}: `{name}` is no tool: {r}"),
        }
    }
    // What `open` lists reaches the source its `_meta` names, under the source's own name.
    for (i, (name, source)) in all.iter().enumerate() {
        let r = open.call(json!(200 + i), name, json!({}));
        assert!(
            Client::text(&r).starts_with(&format!("{source} answered ")),
            "open: `{name}` listed as {source}'s: {r}"
        );
    }
}

#[test]
fn a_policy_hiding_every_tool_of_a_source_hides_them_by_every_spelling_and_nothing_else() {
    let sup = lookalike_sources();
    only_the_allowed_source_is_reachable(&sup, "hid", "a_", "a");
}

#[test]
fn a_policy_allowing_one_source_allows_its_tools_only_whatever_another_source_names_its_own() {
    let sup = lookalike_sources();
    only_the_allowed_source_is_reachable(&sup, "only", "a_", "a");
    // Each source's own names come back to it through the open endpoint.
    let mut open = sup.client("open");
    let all = tools_with_source(&open.request(json!(1), "tools/list", json!({})));
    let owner = |n: &str| all.iter().find(|(e, _)| e == n).map(|(_, s)| s.clone());
    assert_eq!(owner("a___b").as_deref(), Some("a_"), "{all:?}");
    assert_eq!(owner("a__b__echo").as_deref(), Some("a"), "{all:?}");
    let r = open.call(json!(2), "a__b__echo", json!({}));
    assert_eq!(Client::text(&r), "a answered b__echo", "{r}");
}

/// `check-config FILE` with `text`: its exit code and stderr.
fn check_config(text: &str) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("s.toml");
    std::fs::write(&p, text).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mcp-supervisor"))
        .arg("check-config")
        .arg(&p)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

#[test]
fn a_server_named_with_the_separator_is_exit_2_naming_it_when_an_endpoint_serves_it() {
    // The N19 configuration: source `a__b`'s `echo` and source `a`'s `b__echo` would both be
    // `a__b__echo`.
    let text = "[servers.a]\ncommand = \"x\"\n\n[servers.a__b]\ncommand = \"x\"\n\n[endpoints.desk]\nservers = [\"a\", \"a__b\"]\n";
    let (code, err) = check_config(text);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains(":4: key `servers.a__b`"), "{err}");
    assert!(err.contains("`__`") && err.contains("desk"), "{err}");
    assert!(err.contains("rename it") && err.contains("`a_b`"), "{err}");
    // Served as one of every server ("*") too.
    let (code, err) =
        check_config("[servers.x__y]\ncommand = \"x\"\n\n[endpoints.all]\nservers = [\"*\"]\n");
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains(":1: key `servers.x__y`"), "{err}");
}

#[test]
fn a_server_named_with_the_separator_that_no_endpoint_serves_is_a_warning() {
    let (code, err) = check_config(
        "[servers.a]\ncommand = \"x\"\n\n[servers.a__b]\ncommand = \"x\"\n\n[endpoints.desk]\nservers = [\"a\"]\n",
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("warning"), "{err}");
    assert!(err.contains(":4: key `servers.a__b`"), "{err}");
    assert!(err.contains("rename it"), "{err}");
}
