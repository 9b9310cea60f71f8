//! Issue 32 §1: `mcp-supervisor upgrade` executes the binary again in the daemon's own process
//! (same pid), keeping its listeners, its children (same pids, never initialized again) and
//! their sessions; a new binary that fails its check is refused and the daemon serves on.

use crate::harness::*;
use serde_json::{json, Value};
use std::process::Command;
use std::time::Duration;

/// Runs `mcp-supervisor upgrade` against `sup` (optionally with `extra` arguments): its exit
/// code and what it printed.
pub(crate) fn upgrade(sup: &Supervisor) -> (Option<i32>, String) {
    let out = Command::new(SUPERVISOR)
        .args(["upgrade", "-c"])
        .arg(&sup.config)
        .env("MCPSUP_TEST_ID", &sup.id)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

fn pid_of(sup: &Supervisor, name: &str) -> u64 {
    sup.server_status(name)["pid"].as_u64().unwrap_or(0)
}

/// Server `name`'s status once its actor has taken up the child handed over: `upgrade` returns
/// when the new image answers, and an actor may still be adopting (`starting`, no pid) for a
/// moment after. Waits for `ready`, up to 10 s.
fn adopted(sup: &Supervisor, name: &str) -> Value {
    wait_until(Duration::from_secs(10), || {
        sup.server_status(name)["state"] == "ready"
    });
    sup.server_status(name)
}

#[test]
fn an_upgrade_keeps_the_daemon_pid_the_child_and_its_session() {
    let saw = tempfile::tempdir().unwrap();
    let log = saw.path().join("saw.jsonl");
    let mut sup = Supervisor::start(&fake_server("fake", &["--log", log.to_str().unwrap()], ""));
    let mut c = sup.client("fake");
    c.request(json!(0), "logging/setLevel", json!({"level": "debug"}));
    let r = c.call(json!(1), "echo", json!({"text": "before"}));
    assert_eq!(Client::text(&r), "before", "{r}");
    let daemon = sup.pid();
    let child = pid_of(&sup, "fake");
    assert!(child > 0);

    for n in 1..=3 {
        let (code, said) = upgrade(&sup);
        assert_eq!(code, Some(0), "upgrade {n}: {said}\n{}", sup.log());
        assert!(said.contains(&format!("upgrade {n}")), "{said}");
        assert!(
            sup.wait_exit(Duration::from_millis(10)).is_none(),
            "the daemon exited"
        );
        assert_eq!(sup.pid(), daemon);
        assert_eq!(
            pid_of(&sup, "fake"),
            child,
            "the child was replaced\n{}",
            sup.log()
        );
        // The same connection goes on, its handshake kept, answers never doubled.
        let r = c.call(json!(10 + n), "echo", json!({"text": format!("after {n}")}));
        assert_eq!(Client::text(&r), format!("after {n}"), "{r}\n{}", sup.log());
        // A new one is served too.
        let mut d = sup.client("fake");
        let r = d.call(json!(2), "echo", json!({"text": "new"}));
        assert_eq!(Client::text(&r), "new", "{r}");
    }
    assert!(
        c.recv_timeout(Duration::from_millis(300))
            .is_none_or(|v| v["id"].is_null() && v["method"].is_string()),
        "an extra line"
    );
    // The child was never sent a second handshake.
    assert_eq!(
        child_saw_method(&log, "initialize"),
        1,
        "{:?}",
        child_saw(&log)
    );
    assert_eq!(
        sup.server_status("fake")["restarts"],
        Value::from(0),
        "{}",
        sup.log()
    );
    sup.stop();
}

/// A copy of the binary in a directory of its own (mode 755), to run the daemon from and then
/// replace as an operator installing a new version would (a rename over it).
fn installed() -> (tempfile::TempDir, std::path::PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = dir.path().join("mcp-supervisor");
    std::fs::copy(SUPERVISOR, &bin).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    (dir, bin)
}

/// Installs `script` over `bin` (written aside, then renamed: the running image is kept).
fn install_script(bin: &std::path::Path, script: &str) {
    use std::os::unix::fs::PermissionsExt;
    let aside = bin.with_extension("new");
    std::fs::write(&aside, script).unwrap();
    std::fs::set_permissions(&aside, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::rename(&aside, bin).unwrap();
}

/// Runs the daemon from `bin` on `servers`.
fn start_from(bin: &std::path::Path, servers: &str) -> Supervisor {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("supervisor.toml");
    std::fs::write(
        &config,
        format!(
            "[supervisor]\nsocket_dir = {:?}\n\n{servers}",
            dir.path().join("run")
        ),
    )
    .unwrap();
    let sup = Supervisor::spawn_binary(bin, dir, config);
    assert!(
        wait_until(Duration::from_secs(10), || sup.socket("fake").exists()),
        "{}",
        sup.log()
    );
    sup
}

#[test]
fn a_new_binary_that_fails_its_check_or_refuses_the_hand_over_leaves_the_daemon_serving() {
    let (_dir, bin) = installed();
    let mut sup = start_from(&bin, &fake_server("fake", &[], ""));
    let mut c = sup.client("fake");
    let r = c.call(json!(1), "echo", json!({"text": "before"}));
    assert_eq!(Client::text(&r), "before", "{r}");
    let daemon = sup.pid();
    let child = pid_of(&sup, "fake");

    // Not even a program that runs `check-config`: refused before anything changes hands.
    install_script(&bin, "#!/bin/sh\necho 'broken build' >&2\nexit 3\n");
    let (code, said) = upgrade(&sup);
    assert_eq!(code, Some(1), "{said}");
    assert!(
        said.contains("check-config") && said.contains("broken build"),
        "{said}"
    );
    let r = c.call(json!(2), "echo", json!({"text": "still"}));
    assert_eq!(Client::text(&r), "still", "{r}");

    // Writable by others: refused by its mode.
    install_script(&bin, "#!/bin/sh\nexit 0\n");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    let (code, said) = upgrade(&sup);
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("written by others"), "{said}");

    // It passes the check, then refuses the hand-over: the old image runs again with it.
    install_script(
        &bin,
        &format!(
            "#!/bin/sh\nif [ \"$1\" = check-config ]; then exec {SUPERVISOR:?} \"$@\"; fi\nMCP_SUPERVISOR_TEST_REFUSE_HANDOVER=1 exec {SUPERVISOR:?} \"$@\"\n"
        ),
    );
    let (code, said) = upgrade(&sup);
    assert_eq!(code, Some(1), "{said}\n{}", sup.log());
    assert!(
        said.contains("MCP_SUPERVISOR_TEST_REFUSE_HANDOVER"),
        "{said}"
    );
    assert_eq!(sup.pid(), daemon);
    assert_eq!(pid_of(&sup, "fake"), child, "{}", sup.log());
    let r = c.call(json!(3), "echo", json!({"text": "served on"}));
    assert_eq!(Client::text(&r), "served on", "{r}\n{}", sup.log());

    // And a working binary afterwards upgrades.
    install_script(&bin, &format!("#!/bin/sh\nexec {SUPERVISOR:?} \"$@\"\n"));
    let (code, said) = upgrade(&sup);
    assert_eq!(code, Some(0), "{said}\n{}", sup.log());
    let r = c.call(json!(4), "echo", json!({"text": "upgraded"}));
    assert_eq!(Client::text(&r), "upgraded", "{r}");
    assert_eq!(pid_of(&sup, "fake"), child);
    sup.stop();
}

/// The done-when test of issue 32 §1: twenty upgrades in a row while clients keep calling a
/// tool without pause: a raw socket client, the official Python SDK through `attach` (stdio),
/// and the SDK over Streamable HTTP in both eras, on `NAME.http.sock` and on TCP (kept-alive
/// connections). No client disconnects, no call fails, every call is answered once with its
/// own text, the child is never restarted and the daemon keeps its pid.
#[test]
fn interop_twenty_upgrades_under_load_lose_no_call_and_restart_nothing() {
    use crate::http::HttpSup;
    use crate::interop::Interop;
    use crate::survive::Attached;
    let io = Interop::load();
    let saw = tempfile::tempdir().unwrap();
    let log = saw.path().join("saw.jsonl");
    let hs = HttpSup::start(&fake_server(
        "fake",
        &["--log", log.to_str().unwrap()],
        "http = true",
    ));
    let sup = &hs.sup;
    let daemon = sup.pid();
    let child = pid_of(sup, "fake");
    let config = sup.config.to_string_lossy().into_owned();
    let http_sock = sup.dir.path().join("run/fake.http.sock");
    let auth = format!("Authorization: Bearer {}", hs.token("fake"));
    let tcp_url = format!("http://{}/mcp/fake", hs.addr);
    let script = |args: &[&str]| {
        let mut cmd = Command::new(io.var("MCPSUP_INTEROP_PYTHON"));
        cmd.arg(io.var("MCPSUP_INTEROP_CLIENT"))
            .args(["--timeout", "600"])
            .args(args);
        cmd
    };
    let sock = http_sock.to_str().unwrap();
    let clients: Vec<(&str, Vec<&str>)> = vec![
        (
            "py-attach",
            vec![
                "--era",
                "handshake",
                "--client-name",
                "py-attach",
                "loop",
                "--",
                SUPERVISOR,
                "attach",
                "fake",
                "-c",
                &config,
            ],
        ),
        (
            "py-http-handshake",
            vec![
                "--era",
                "handshake",
                "--client-name",
                "py-http-handshake",
                "loop",
                "--url",
                "http://localhost/mcp",
                "--unix-socket",
                sock,
            ],
        ),
        (
            "py-http-modern",
            vec![
                "--era",
                "modern",
                "--client-name",
                "py-http-modern",
                "loop",
                "--url",
                "http://localhost/mcp",
                "--unix-socket",
                sock,
            ],
        ),
        (
            "py-tcp-handshake",
            vec![
                "--era",
                "handshake",
                "--client-name",
                "py-tcp-handshake",
                "loop",
                "--url",
                &tcp_url,
                "--header",
                &auth,
            ],
        ),
    ];
    let mut running: Vec<(&str, Attached)> = clients
        .iter()
        .map(|(name, args)| (*name, Attached::spawn(sup, script(args))))
        .collect();
    for (name, c) in &mut running {
        let ready = c.wait_for(Duration::from_secs(60), |v| v["step"] == "ready");
        assert!(
            ready.is_some(),
            "{name} never ready: {:?}\n{}\n{}",
            c.seen,
            c.stderr(),
            sup.log()
        );
    }
    // A raw socket client calling as fast as it is answered, on one connection.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let raw = {
        let mut c = sup.client("fake");
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                n += 1;
                let text = format!("raw {n}");
                c.send(&json!({"jsonrpc": "2.0", "id": n, "method": "tools/call",
                    "params": {"name": "echo", "arguments": {"text": text}}}));
                let r = c
                    .response_timeout(&json!(n), Duration::from_secs(30))
                    .unwrap_or_else(|| panic!("raw call {n} unanswered"));
                assert_eq!(Client::text(&r), text, "{r}");
            }
            n
        })
    };

    for n in 1..=20 {
        let (code, said) = upgrade(sup);
        assert_eq!(code, Some(0), "upgrade {n}: {said}\n{}", sup.log());
        assert_eq!(sup.pid(), daemon);
        assert_eq!(
            adopted(sup, "fake")["pid"],
            child,
            "upgrade {n} replaced the child"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let raw_calls = raw.join().expect("the raw socket client failed");
    assert!(raw_calls > 20, "{raw_calls}");
    for (name, c) in &mut running {
        c.send_text("stop");
        let done = c.wait_for(Duration::from_secs(60), |v| v["step"] == "calls");
        assert!(
            done.is_some(),
            "{name}: {:?}\n{}\n{}",
            c.seen.iter().rev().take(5).collect::<Vec<_>>(),
            c.stderr(),
            sup.log()
        );
        assert_eq!(
            c.wait(Duration::from_secs(30)),
            Some(0),
            "{name}: {}",
            c.stderr()
        );
        let failed: Vec<&Value> = c.seen.iter().filter(|v| v["ok"] == false).collect();
        assert!(failed.is_empty(), "{name}: {failed:?}");
        let calls = done.unwrap()["count"].as_u64().unwrap_or(0);
        assert!(calls > 20, "{name} made only {calls} calls");
        let connects = c.seen.iter().filter(|v| v["step"] == "connect").count();
        assert_eq!(connects, 1, "{name}");
    }
    assert_eq!(child_saw_method(&log, "initialize"), 1);
    assert_eq!(sup.server_status("fake")["restarts"], Value::from(0));
    // What was handed over: the socket clients each time, kept-alive HTTP connections.
    let records: Vec<String> = sup
        .log()
        .lines()
        .filter(|l| l.contains("hand-over record written"))
        .map(str::to_string)
        .collect();
    assert_eq!(records.len(), 20, "{records:?}");
    assert!(
        records.iter().all(|l| l.contains("socket_clients=2")),
        "{records:?}"
    );
    assert!(
        records.iter().any(|l| !l.contains("http_connections=0")),
        "no HTTP connection was ever handed over: {records:?}"
    );
    eprintln!("{}", records.join("\n"));
}

/// Issue 32 §1 with issue 18 §3: a limited server's watchdog is resumed by the image that
/// adopts it. After an upgrade the same child (never restarted) going over `memory_max` is
/// still ended as `memory-limit`, and comes back.
#[test]
fn an_adopted_child_is_still_held_to_its_limits() {
    let servers = fake_server(
        "hog",
        &[],
        "memory_max = \"64M\"\nbackoff_initial = \"100ms\"\nbackoff_max = \"200ms\"\n",
    );
    let mut sup = Supervisor::spawn_config("limits = \"rlimit\"", &servers, &[]);
    assert!(
        wait_until(Duration::from_secs(10), || sup.socket("hog").exists()),
        "{}",
        sup.log()
    );
    let mut c = sup.client("hog");
    let r = c.call(json!(1), "echo", json!({"text": "before"}));
    assert_eq!(Client::text(&r), "before", "{r}");
    let child = pid_of(&sup, "hog");
    let (code, said) = upgrade(&sup);
    assert_eq!(code, Some(0), "{said}\n{}", sup.log());
    assert_eq!(adopted(&sup, "hog")["pid"], child);
    let r = c.call(json!(2), "hog", json!({"mib": 256}));
    assert_eq!(r["result"]["isError"], true, "{r}\n{}", sup.log());
    assert_eq!(
        r["result"]["_meta"]["mcp-supervisor/outage"]["reason"], "memory-limit",
        "{r}"
    );
    assert!(
        wait_until(Duration::from_secs(15), || {
            let p = pid_of(&sup, "hog");
            p != 0 && p != child
        }),
        "{}",
        sup.log()
    );
    let r = c.call(json!(3), "echo", json!({"text": "back"}));
    assert_eq!(Client::text(&r), "back", "{r}");
    drop(c);
    sup.stop();
}

/// Issue 32 §1 ("the record covers ... 2026 listen streams"): a socket client's open
/// `subscriptions/listen` stream goes on across an upgrade, under the client's own id, both
/// when the supervisor serves it from a handshake-era child and when it is forwarded to a
/// 2026-07-28 child; the client sees one acknowledgement in all and the list changes of the
/// adopted child on its stream.
#[test]
fn a_socket_clients_listen_stream_goes_on_across_an_upgrade() {
    for era in ["legacy", "modern"] {
        let mut sup = Supervisor::start(&fake_server("fake", &["--era", era], ""));
        let mut c = sup.connect("fake");
        c.send(
            &json!({"jsonrpc": "2.0", "id": "L", "method": "subscriptions/listen",
            "params": modern(json!({"notifications": {"toolsListChanged": true}}))}),
        );
        let mut seen = Vec::new();
        let ack = |v: &Value| v["method"] == "notifications/subscriptions/acknowledged";
        let changed = |v: &Value| {
            v["method"] == "notifications/tools/list_changed"
                && v["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == "L"
        };
        let wait = |c: &mut Client, seen: &mut Vec<Value>, what: &dyn Fn(&Value) -> bool| {
            let end = std::time::Instant::now() + Duration::from_secs(10);
            while std::time::Instant::now() < end {
                if let Some(v) = c.recv_timeout(Duration::from_millis(200)) {
                    let hit = what(&v);
                    seen.push(v);
                    if hit {
                        return true;
                    }
                }
            }
            false
        };
        assert!(
            wait(&mut c, &mut seen, &ack),
            "{era}: {seen:?}\n{}",
            sup.log()
        );
        for n in 1..=2 {
            let (code, said) = upgrade(&sup);
            assert_eq!(code, Some(0), "{era}: {said}\n{}", sup.log());
            c.send(&json!({"jsonrpc": "2.0", "id": n, "method": "tools/call",
                "params": modern(json!({"name": "list_changed", "arguments": {}}))}));
            let before = seen.len();
            assert!(
                wait(&mut c, &mut seen, &|v: &Value| v["id"] == json!(n)),
                "{era}: {seen:?}"
            );
            let done = seen[before..].iter().any(changed) || wait(&mut c, &mut seen, &changed);
            assert!(
                done,
                "{era}, upgrade {n}: no change on the stream: {seen:?}\n{}",
                sup.log()
            );
        }
        assert_eq!(seen.iter().filter(|v| ack(v)).count(), 1, "{era}: {seen:?}");
        assert!(
            !seen.iter().any(|v| v["id"] == json!("L")),
            "{era}: the stream was answered: {seen:?}"
        );
        assert!(
            !seen.iter().any(|v| v["id"]
                .as_str()
                .is_some_and(|s| s.starts_with("mcp-supervisor"))),
            "{era}: {seen:?}"
        );
        drop(c);
        sup.stop();
    }
}

/// The counters `status` shows go on across an upgrade: a server restarted once before still
/// says `restarts: 1` and the same `last_exit` after it (its child kept: same pid), and its
/// uptime goes on.
#[test]
fn an_upgrade_keeps_the_restart_count_the_last_exit_and_the_uptime() {
    let mut sup = Supervisor::start(&fake_server("fake", &[], ""));
    let mut c = sup.client("fake");
    assert_eq!(
        Client::text(&c.call(json!(1), "echo", json!({"text": "a"}))),
        "a"
    );
    let out = Command::new(SUPERVISOR)
        .args(["restart", "fake", "-c"])
        .arg(&sup.config)
        .env("MCPSUP_TEST_ID", &sup.id)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let restarted = || {
        let st = sup.server_status("fake");
        st["state"] == "ready" && st["restarts"] == 1
    };
    assert!(
        wait_until(Duration::from_secs(20), restarted),
        "{}",
        sup.server_status("fake")
    );
    let child = pid_of(&sup, "fake");
    let uptime_now = || {
        sup.server_status("fake")["uptime_s"]
            .as_f64()
            .unwrap_or(0.0)
    };
    assert!(wait_until(Duration::from_secs(10), || uptime_now() >= 1.0));
    let uptime = uptime_now();
    let before = sup.server_status("fake")["last_exit"].clone();
    assert!(before["reason"].is_string(), "{before}");
    let (code, said) = upgrade(&sup);
    assert_eq!(code, Some(0), "{said}\n{}", sup.log());
    let st = adopted(&sup, "fake");
    assert_eq!(st["restarts"], 1, "{st}");
    assert_eq!(st["pid"], child, "{st}");
    assert_eq!(st["last_exit"], before, "{st}");
    // Its uptime goes on from the child's start (whole clock ticks: within 50 ms).
    assert!(
        st["uptime_s"].as_f64().unwrap_or(0.0) >= uptime - 0.05,
        "{st} (before: {uptime})"
    );
    assert_eq!(
        Client::text(&c.call(json!(2), "echo", json!({"text": "b"}))),
        "b"
    );
    sup.stop();
}

/// An endpoint's socket clients stay connected across an upgrade (issue 32 §1): a handshake
/// client keeps its session (no second `initialize` from it, its replayed requests' answers
/// never shown) and a 2026-07-28 client's listen stream goes on under its own id, with no
/// second acknowledgement; the sources' children are kept.
#[test]
fn an_endpoints_clients_stay_connected_across_an_upgrade_in_both_eras() {
    let saw = tempfile::tempdir().unwrap();
    let log = saw.path().join("alpha.jsonl");
    let mut sup = Supervisor::start(
        &(fake_server("alpha", &["--log", log.to_str().unwrap()], "")
            + &fake_server("gamma", &["--era", "modern"], "")
            + "[endpoints.desk]\nservers = [\"alpha\", \"gamma\"]\n"),
    );
    let mut h = sup.connect("desk");
    let init = h.initialize("handshake-client", json!({}));
    assert_eq!(init["result"]["serverInfo"]["name"], "desk", "{init}");
    let r = h.request(json!(1), "logging/setLevel", json!({"level": "debug"}));
    assert!(r.get("result").is_some(), "{r}");
    let r = h.call(json!(2), "alpha__echo", json!({"text": "before"}));
    assert_eq!(Client::text(&r), "before", "{r}");

    let mut m = sup.connect("desk");
    m.send(
        &json!({"jsonrpc": "2.0", "id": "L", "method": "subscriptions/listen",
        "params": modern(json!({"notifications": {"toolsListChanged": true}}))}),
    );
    m.notification(
        "notifications/subscriptions/acknowledged",
        Duration::from_secs(5),
    )
    .expect("the endpoint acknowledges the stream");
    let (alpha, gamma) = (pid_of(&sup, "alpha"), pid_of(&sup, "gamma"));

    for n in 1..=2 {
        let (code, said) = upgrade(&sup);
        assert_eq!(code, Some(0), "upgrade {n}: {said}\n{}", sup.log());
        // The handshake client's connection goes on: a call by name, answered once.
        let r = h.call(
            json!(10 + n),
            "alpha__echo",
            json!({"text": format!("after {n}")}),
        );
        assert_eq!(Client::text(&r), format!("after {n}"), "{r}\n{}", sup.log());
        // The 2026 client's stream goes on: a change of a source reaches it, once.
        let mut direct = sup.client("alpha");
        direct.call(json!(1), "list_changed", json!({}));
        let change = m
            .notification("notifications/tools/list_changed", Duration::from_secs(10))
            .unwrap_or_else(|| panic!("no change on the stream: {:?}\n{}", m.backlog, sup.log()));
        assert_eq!(
            change["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], "L",
            "{change}"
        );
        let r = m.request(
            json!(20 + n),
            "tools/call",
            modern(json!({"name": "gamma__echo", "arguments": {"text": "m"}})),
        );
        assert_eq!(Client::text(&r), "m", "{r}");
        assert!(
            m.backlog
                .iter()
                .all(|v| v["method"] != "notifications/subscriptions/acknowledged"),
            "a second acknowledgement: {:?}",
            m.backlog
        );
        m.backlog.clear();
    }
    // Nothing else reached the handshake client: no answer to a replayed request.
    while let Some(v) = h.recv_timeout(Duration::from_millis(300)) {
        assert!(
            v["id"].is_null() && v["method"].is_string(),
            "an extra line: {v}"
        );
    }
    assert_eq!(
        (pid_of(&sup, "alpha"), pid_of(&sup, "gamma")),
        (alpha, gamma)
    );
    assert_eq!(
        child_saw_method(&log, "initialize"),
        1,
        "{:?}",
        child_saw(&log)
    );
    sup.stop();
}

/// A server the operator stopped stays stopped across an upgrade (the new image does not
/// start it), and `start` still starts it.
#[test]
fn a_stopped_server_stays_stopped_across_an_upgrade() {
    let mut sup =
        Supervisor::start(&(fake_server("fake", &[], "") + &fake_server("other", &[], "")));
    let verb = |v: &str| {
        Command::new(SUPERVISOR)
            .args([v, "other", "-c"])
            .arg(&sup.config)
            .env("MCPSUP_TEST_ID", &sup.id)
            .output()
            .unwrap()
    };
    let ready = wait_until(Duration::from_secs(20), || {
        sup.server_status("other")["state"] == "ready"
    });
    assert!(ready, "{}\n{}", sup.server_status("other"), sup.log());
    let out = verb("stop");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(sup.server_status("other")["state"], "stopped");
    let (code, said) = upgrade(&sup);
    assert_eq!(code, Some(0), "{said}\n{}", sup.log());
    assert!(
        sup.wait_log("handed over at rest: it stays so", Duration::from_secs(10)),
        "{}",
        sup.log()
    );
    let st = sup.server_status("other");
    assert_eq!(st["state"], "stopped", "{st}\n{}", sup.log());
    assert!(st["pid"].is_null(), "{st}");
    let out = verb("start");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(sup.server_status("other")["state"], "ready");
    sup.stop();
}

/// The daemon's pid's executable: (device, inode) of `/proc/PID/exe`.
fn exe_of(pid: u32) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(format!("/proc/{pid}/exe")).unwrap();
    (m.dev(), m.ino())
}

/// Issue 47 §1 (N15): `upgrade` executes exactly the file it checked. The test plays the
/// user who owns a directory above the binary: at a pause point after the checks (test hook
/// `MCP_SUPERVISOR_TEST_UPGRADE_PAUSE`), it renames the checked directory away and puts its
/// own in its place, with a program that leaves a mark and then runs the real binary. Neither
/// the preflight nor the hand-over runs that program: the new image's executable is the checked
/// file (same device and inode), and no mark appears.
#[test]
fn an_upgrade_runs_the_checked_file_even_when_its_directory_is_swapped_after_the_checks() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let top = tempfile::tempdir().unwrap();
    std::fs::set_permissions(top.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bindir = top.path().join("bin");
    std::fs::create_dir(&bindir).unwrap();
    std::fs::set_permissions(&bindir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = bindir.join("mcp-supervisor");
    std::fs::copy(SUPERVISOR, &bin).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let checked = {
        let m = std::fs::metadata(&bin).unwrap();
        (m.dev(), m.ino())
    };
    let pause = top.path().join("pause");
    let mark = top.path().join("planted-ran");

    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("supervisor.toml");
    std::fs::write(
        &config,
        format!(
            "[supervisor]\nsocket_dir = {:?}\n\n{}",
            dir.path().join("run"),
            fake_server("fake", &[], "")
        ),
    )
    .unwrap();
    let mut sup = Supervisor::spawn_binary_with(
        &bin,
        dir,
        config,
        &[("MCP_SUPERVISOR_TEST_UPGRADE_PAUSE", pause.to_str().unwrap())],
    );
    assert!(
        wait_until(Duration::from_secs(10), || sup.socket("fake").exists()),
        "{}",
        sup.log()
    );
    let mut c = sup.client("fake");
    let r = c.call(json!(1), "echo", json!({"text": "before"}));
    assert_eq!(Client::text(&r), "before", "{r}");
    let daemon = sup.pid();

    let upgrading = {
        let config = sup.config.clone();
        let id = sup.id.clone();
        std::thread::spawn(move || {
            Command::new(SUPERVISOR)
                .args(["upgrade", "-c"])
                .arg(&config)
                .env("MCPSUP_TEST_ID", &id)
                .output()
                .unwrap()
        })
    };
    let paused = pause.with_extension("paused");
    assert!(
        wait_until(Duration::from_secs(20), || paused.exists()),
        "the upgrade never reached its pause point\n{}",
        sup.log()
    );
    // The swap: the checked directory moves away; the attacker's takes its name.
    std::fs::rename(&bindir, top.path().join("bin.checked")).unwrap();
    std::fs::create_dir(&bindir).unwrap();
    std::fs::set_permissions(&bindir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(
        &bin,
        format!("#!/bin/sh\necho ran >> {mark:?}\nexec {SUPERVISOR:?} \"$@\"\n"),
    )
    .unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::remove_file(&paused).unwrap();

    let out = upgrading.join().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "{said}\n{}", sup.log());
    assert!(
        !mark.exists(),
        "the planted program ran: {}\n{}",
        std::fs::read_to_string(&mark).unwrap_or_default(),
        sup.log()
    );
    assert_eq!(sup.pid(), daemon);
    assert_eq!(
        exe_of(daemon),
        checked,
        "the new image is not the checked file\n{}",
        sup.log()
    );
    let r = c.call(json!(2), "echo", json!({"text": "after"}));
    assert_eq!(Client::text(&r), "after", "{r}\n{}", sup.log());
    sup.stop();
}

/// Issue 47 §1 (N15): every ancestor directory of the new binary is checked as `socket_dir`'s
/// are: one that another user owns (who could swap what is below it) refuses the upgrade, and
/// so does one reached through a link in a directory another user owns (the link's ancestors
/// and its target's are both checked). The daemon serves on.
#[test]
fn an_upgrade_refuses_a_binary_below_a_directory_another_user_owns() {
    use std::os::unix::fs::PermissionsExt;
    if !needs_root(
        "an_upgrade_refuses_a_binary_below_a_directory_another_user_owns",
        &[],
    ) {
        return;
    }
    let top = tempfile::tempdir().unwrap();
    std::fs::set_permissions(top.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    // theirs/ (uid 65534) / mine/ (root) / mcp-supervisor (root, 0755)
    let theirs = top.path().join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mine = theirs.join("mine");
    std::fs::create_dir(&mine).unwrap();
    std::fs::set_permissions(&mine, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
    let bin = mine.join("mcp-supervisor");
    std::fs::copy(SUPERVISOR, &bin).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();

    let mut sup = start_from(&bin, &fake_server("fake", &[], ""));
    let mut c = sup.client("fake");
    let (code, said) = upgrade(&sup);
    assert_eq!(code, Some(1), "{said}");
    assert!(
        said.contains(&theirs.display().to_string()) && said.contains("65534"),
        "the refusal does not name the directory and its owner: {said}"
    );
    let r = c.call(json!(1), "echo", json!({"text": "served on"}));
    assert_eq!(Client::text(&r), "served on", "{r}");
    sup.stop();

    // Through a link: the real binary is in a directory of root's, the link in one of theirs.
    let safe = top.path().join("safe");
    std::fs::create_dir(&safe).unwrap();
    std::fs::set_permissions(&safe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let real = safe.join("mcp-supervisor");
    std::fs::copy(SUPERVISOR, &real).unwrap();
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o755)).unwrap();
    let link = theirs.join("via");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let mut sup = start_from(&link, &fake_server("fake", &[], ""));
    let (code, said) = upgrade(&sup);
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains(&theirs.display().to_string()), "{said}");
    sup.stop();
}
