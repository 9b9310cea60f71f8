//! Issue 32: clients survive crashes and restarts of the supervisor itself. `attach` as a
//! reconnecting framing bridge against a SIGKILLed and restarted supervisor, as a client sees
//! it on its stdin and stdout.

use crate::harness::*;
use crate::http::{request, HttpSup};
use crate::interop::Interop;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// `mcp-supervisor attach` run as an MCP client runs it (or an SDK client script): lines on
/// its stdin, JSON lines read from its stdout on a thread, stderr kept.
pub(crate) struct Attached {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<Value>,
    /// Every line read so far, in order.
    pub seen: Vec<Value>,
    stderr: Arc<Mutex<String>>,
}

impl Attached {
    pub(crate) fn start(sup: &Supervisor, name: &str, extra: &[&str]) -> Attached {
        let mut cmd = Command::new(SUPERVISOR);
        cmd.args(["attach", name, "-c"])
            .arg(&sup.config)
            .args(extra);
        Self::spawn(sup, cmd)
    }

    /// Runs `cmd` (for `sup`'s test: its processes carry the marker) with its stdin, stdout
    /// (JSON lines) and stderr piped.
    pub(crate) fn spawn(sup: &Supervisor, mut cmd: Command) -> Attached {
        let mut child = cmd
            .env("MCPSUP_TEST_ID", &sup.id)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, lines) = channel();
        let out = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                let v = serde_json::from_str(&line).unwrap_or_else(|e| {
                    panic!("attach wrote a line that is not JSON ({e}): {line}")
                });
                if tx.send(v).is_err() {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        read_log(child.stderr.take().unwrap(), stderr.clone());
        Attached {
            stdin: child.stdin.take(),
            child,
            lines,
            seen: Vec::new(),
            stderr,
        }
    }

    pub(crate) fn send(&mut self, v: &Value) {
        self.send_text(&v.to_string());
    }

    /// Writes `text` and a newline to its stdin.
    pub(crate) fn send_text(&mut self, text: &str) {
        let stdin = self.stdin.as_mut().expect("stdin closed");
        stdin.write_all(format!("{text}\n").as_bytes()).unwrap();
        stdin.flush().unwrap();
    }

    /// Waits for the first line (from now on, or already seen) that `pred` accepts.
    pub(crate) fn wait_for(
        &mut self,
        timeout: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> Option<Value> {
        if let Some(v) = self.seen.iter().find(|v| pred(v)) {
            return Some(v.clone());
        }
        let end = Instant::now() + timeout;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(v) => {
                    self.seen.push(v.clone());
                    if pred(&v) {
                        return Some(v);
                    }
                }
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => return None,
            }
        }
    }

    /// Waits for a line `pred` accepts among those seen from index `from` on (already seen, or
    /// coming within `timeout`).
    pub(crate) fn wait_new(
        &mut self,
        from: usize,
        timeout: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> Option<Value> {
        if let Some(v) = self
            .seen
            .get(from..)
            .unwrap_or_default()
            .iter()
            .find(|v| pred(v))
        {
            return Some(v.clone());
        }
        let end = Instant::now() + timeout;
        while let Ok(v) = self
            .lines
            .recv_timeout(end.saturating_duration_since(Instant::now()))
        {
            self.seen.push(v.clone());
            if pred(&v) {
                return Some(v);
            }
        }
        None
    }

    /// The answer to request `id` (waits up to `timeout`), or a panic naming what was seen.
    pub(crate) fn response(&mut self, id: Value, timeout: Duration) -> Value {
        let found = self.wait_for(timeout, |v| v["id"] == id && v.get("method").is_none());
        found.unwrap_or_else(|| {
            panic!(
                "no answer to {id} within {timeout:?}; seen {:?}; attach stderr:\n{}",
                self.seen,
                self.stderr()
            )
        })
    }

    /// How many answers to `id` the client got.
    pub(crate) fn answers(&self, id: Value) -> usize {
        self.seen
            .iter()
            .filter(|v| v["id"] == id && v.get("method").is_none())
            .count()
    }

    pub(crate) fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Closes stdin and waits (up to `timeout`) for attach to exit: its exit code.
    pub(crate) fn finish(&mut self, timeout: Duration) -> Option<i32> {
        self.stdin = None;
        self.wait(timeout)
    }

    /// Waits up to `timeout` for attach to exit: its exit code.
    pub(crate) fn wait(&mut self, timeout: Duration) -> Option<i32> {
        let end = Instant::now() + timeout;
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                // Whatever it wrote last.
                while let Ok(v) = self.lines.recv_timeout(Duration::from_millis(200)) {
                    self.seen.push(v);
                }
                return st.code();
            }
            if Instant::now() > end {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Attached {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn handshake(a: &mut Attached) {
    a.send(
        &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "survivor", "version": "1"}}}),
    );
    let r = a.response(json!(0), Duration::from_secs(10));
    assert!(r["result"]["serverInfo"].is_object(), "{r}");
    a.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
}

fn call(id: u64, tool: &str, args: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": tool, "arguments": args}})
}

/// The record of an outage answer (a tool result's `_meta`, or an error's `data`).
fn record(r: &Value) -> Value {
    r["result"]["_meta"]["mcp-supervisor/outage"]
        .as_object()
        .map(|o| Value::Object(o.clone()))
        .unwrap_or_else(|| r["error"]["data"].clone())
}

/// Issue 32 §2: the supervisor is SIGKILLed while an `attach` client has a call in flight and
/// a resource subscription; it is run again. The call in flight gets exactly one outage
/// answer; a call made during the gap is answered after the restart; the client's handshake
/// and subscription are replayed without the client seeing a second handshake answer; the
/// client never re-initializes and `attach` never exits.
#[test]
fn attach_outlives_a_supervisor_crash_with_one_outage_answer_and_its_session_replayed() {
    let saw = tempfile::tempdir().unwrap();
    let log = saw.path().join("saw.jsonl");
    let mut sup = Supervisor::start(&fake_server("fake", &["--log", log.to_str().unwrap()], ""));
    let mut a = Attached::start(&sup, "fake", &[]);
    handshake(&mut a);
    a.send(
        &json!({"jsonrpc": "2.0", "id": 1, "method": "resources/subscribe",
        "params": {"uri": "file:///watched"}}),
    );
    a.response(json!(1), Duration::from_secs(10));
    a.send(&call(2, "slow", json!({"ms": 120_000})));
    assert!(
        wait_until(Duration::from_secs(10), || child_saw(&log)
            .iter()
            .any(|l| l.contains("\"slow\""))),
        "the child never got the call; {}",
        sup.log()
    );

    sup.kill();
    let r = a.response(json!(2), Duration::from_secs(10));
    assert_eq!(r["result"]["isError"], true, "{r}");
    let text = r["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.contains("server=fake status=disconnected"), "{text}");
    let rec = record(&r);
    assert_eq!(rec["class"], "unreachable", "{rec}");
    assert_eq!(rec["detail"], "supervisor", "{rec}");
    assert_eq!(rec["reason"], "supervisor-connection-lost", "{rec}");

    // Made while no supervisor runs: held, then served by the next one.
    a.send(&call(3, "echo", json!({"text": "across the gap"})));
    sup.run_again();
    let r = a.response(json!(3), Duration::from_secs(20));
    assert_eq!(Client::text(&r), "across the gap", "{r}");

    // The subscription was replayed to the new supervisor (and the new child).
    a.send(&call(4, "update", json!({"uri": "file:///watched"})));
    a.response(json!(4), Duration::from_secs(10));
    let updated = a.wait_for(Duration::from_secs(10), |v| {
        v["method"] == "notifications/resources/updated" && v["params"]["uri"] == "file:///watched"
    });
    assert!(
        updated.is_some(),
        "no update after the restart; seen {:?}",
        a.seen
    );

    // Exactly one answer each; nothing of the bridge's own requests.
    for id in 0..=4 {
        assert_eq!(a.answers(json!(id)), 1, "answers to {id}: {:?}", a.seen);
    }
    assert!(
        !a.seen.iter().any(|v| v["id"]
            .as_str()
            .is_some_and(|s| s.starts_with("mcp-supervisor-attach-"))),
        "{:?}",
        a.seen
    );
    // Its notes come on stderr, written as it goes: wait for them.
    assert!(
        wait_until(Duration::from_secs(5), || a
            .stderr()
            .contains("reconnected")),
        "{}",
        a.stderr()
    );
    assert!(a.stderr().contains("the handshake"), "{}", a.stderr());
    assert_eq!(a.finish(Duration::from_secs(10)), Some(0), "{}", a.stderr());
}

/// Issue 32 §2: with no supervisor to come back, `attach` tries for `--reconnect-for`, then
/// answers what it held with the outage record (it never ran) and exits 1 saying so.
#[test]
fn attach_gives_up_after_reconnect_for_and_answers_what_it_held() {
    let mut sup = Supervisor::start(&fake_server("fake", &[], ""));
    let mut a = Attached::start(&sup, "fake", &["--reconnect-for", "2s"]);
    handshake(&mut a);
    sup.kill();
    assert!(
        wait_until(Duration::from_secs(10), || a
            .stderr()
            .contains("reconnecting")),
        "{}",
        a.stderr()
    );
    a.send(&json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list"}));
    let r = a.response(json!(9), Duration::from_secs(20));
    assert_eq!(r["error"]["code"], -32000, "{r}");
    assert_eq!(
        r["error"]["data"]["reason"], "supervisor-unreachable",
        "{r}"
    );
    assert_eq!(a.wait(Duration::from_secs(10)), Some(1));
    assert!(
        wait_until(Duration::from_secs(5), || a.stderr().contains("gave up")),
        "{}",
        a.stderr()
    );
}

/// Issue 32 "Done when": the official Python SDK, one client over stdio through `attach` and
/// one over HTTP on `NAME.http.sock` (a handshake-era session), while the supervisor is
/// SIGKILLed and run again. The call the stdio client had in flight gets one outage answer;
/// after the restart each client's next call succeeds in the same session, without a new
/// `initialize` on the client side (the HTTP client keeps its `Mcp-Session-Id`).
#[test]
fn interop_sdk_clients_through_attach_and_http_outlive_a_supervisor_sigkill() {
    let io = Interop::load();
    let saw = tempfile::tempdir().unwrap();
    let log = saw.path().join("saw.jsonl");
    let mut sup = Supervisor::start(&fake_server(
        "fake",
        &["--log", log.to_str().unwrap()],
        "http = true",
    ));
    let script = |args: &[&str]| {
        let mut cmd = Command::new(io.var("MCPSUP_INTEROP_PYTHON"));
        cmd.arg(io.var("MCPSUP_INTEROP_CLIENT"))
            .args(["--timeout", "120"])
            .args(args);
        cmd
    };
    let config = sup.config.to_string_lossy().into_owned();
    let http_sock = sup.dir.path().join("run/fake.http.sock");
    let mut stdio = Attached::spawn(
        &sup,
        script(&[
            "--era",
            "handshake",
            "--client-name",
            "py-stdio",
            "--in-flight-tool",
            "slow",
            "survive",
            "--",
            SUPERVISOR,
            "attach",
            "fake",
            "-c",
            &config,
        ]),
    );
    let mut http = Attached::spawn(
        &sup,
        script(&[
            "--era",
            "handshake",
            "--client-name",
            "py-http",
            "survive",
            "--url",
            "http://localhost/mcp",
            "--unix-socket",
            http_sock.to_str().unwrap(),
        ]),
    );
    for (c, what) in [(&mut stdio, "stdio"), (&mut http, "http")] {
        let ready = c.wait_for(Duration::from_secs(60), |v| v["step"] == "ready");
        assert!(
            ready.is_some(),
            "{what} client never ready: {:?}\n{}\n{}",
            c.seen,
            c.stderr(),
            sup.log()
        );
    }
    assert!(
        wait_until(Duration::from_secs(20), || child_saw(&log)
            .iter()
            .any(|l| l.contains("\"slow\""))),
        "the child never got the call in flight; {}",
        sup.log()
    );
    // The HTTP session is recorded where the next run finds it (`http-sessions-HASH.json` in
    // the socket directory, written off the actor's path): a crash before that loses the
    // session, so the kill waits for the record (it once lost that race under load).
    let run = sup.dir.path().join("run");
    assert!(
        wait_until(Duration::from_secs(20), || std::fs::read_dir(&run)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| is_record(p))
            .any(|p| std::fs::read_to_string(p).is_ok_and(|t| t
                .contains("py-http")
                && t.contains("\"initialized\":true")))),
        "the HTTP session was never recorded; {}",
        sup.log()
    );
    sup.kill();
    let in_flight = stdio.wait_for(Duration::from_secs(30), |v| v["step"] == "in_flight");
    assert_eq!(
        in_flight.as_ref().map(|v| v["ok"].clone()),
        Some(json!(true)),
        "{:?}\n{}",
        stdio.seen,
        stdio.stderr()
    );
    sup.run_again();
    assert!(
        wait_until(Duration::from_secs(20), || sup.socket("fake").exists()
            && http_sock.exists()
            && sup.log().contains("HTTP session restored")),
        "{}",
        sup.log()
    );
    for (c, what) in [(&mut stdio, "stdio"), (&mut http, "http")] {
        c.send_text("go");
        let after = c.wait_for(Duration::from_secs(60), |v| v["step"] == "after");
        assert_eq!(
            after.as_ref().map(|v| v["ok"].clone()),
            Some(json!(true)),
            "{what}: {:?}\nstderr:\n{}\nsupervisor:\n{}",
            c.seen,
            c.stderr(),
            sup.log()
        );
        assert_eq!(
            c.wait(Duration::from_secs(30)),
            Some(0),
            "{what}: {}",
            c.stderr()
        );
        // One handshake per client, ever: the restart was not seen as a new session.
        let connects = c.seen.iter().filter(|v| v["step"] == "connect").count();
        assert_eq!(connects, 1, "{what}: {:?}", c.seen);
    }
}

/// How the supervisor of an HTTP test goes away before it is run again.
enum Gone {
    /// SIGKILL (a crash).
    Killed,
    /// SIGTERM (`systemctl restart`).
    Stopped,
}

/// Ends `hs`'s supervisor, runs `meanwhile` while none runs, runs it again and waits for its
/// TCP address (an ephemeral port: new each run).
fn run_again_after(hs: &mut HttpSup, gone: Gone, meanwhile: impl FnOnce()) {
    match gone {
        Gone::Killed => hs.sup.kill(),
        Gone::Stopped => {
            hs.sup.stop();
        }
    }
    let addr_file = hs.sup.dir.path().join("run/http.addr");
    let _ = std::fs::remove_file(&addr_file);
    meanwhile();
    hs.sup.run_again();
    let addr = || std::fs::read_to_string(&addr_file).unwrap_or_default();
    assert!(
        wait_until(Duration::from_secs(20), || !addr().trim().is_empty()),
        "{}",
        hs.sup.log()
    );
    hs.addr = addr().trim().to_string();
}

/// Issue 32 §2 and §3: a handshake-era HTTP session outlives a SIGKILL of the supervisor, and
/// a graceful restart, under the same `Mcp-Session-Id`, for the caller that opened it only; a
/// record that is not the supervisor's own (a link planted in its place) or not intact is
/// ignored with a log line, and its sessions get 404 as the transport specifies.
#[test]
fn http_sessions_outlive_a_crash_for_their_owner_only_and_a_planted_record_is_ignored() {
    let mut hs = HttpSup::start(&fake_server("fake", &[], "http = true"));
    let sid = hs.session("fake");
    let echo = |hs: &HttpSup, sid: &str, text: &str| {
        hs.post(
            "fake",
            &[
                ("Mcp-Session-Id", sid),
                ("MCP-Protocol-Version", "2025-06-18"),
            ],
            &call(7, "echo", json!({"text": text})),
        )
    };
    assert_eq!(echo(&hs, &sid, "before").status, 200);
    // `http-sessions-<hash of socket_dir>.json` in state_dir (socket_dir here).
    let run = hs.sup.dir.path().join("run");
    let find = || {
        std::fs::read_dir(&run)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| is_record(p))
    };
    assert!(
        wait_until(Duration::from_secs(10), || find().is_some()),
        "{}",
        hs.sup.log()
    );
    let record = find().unwrap();
    let recorded = |sid: &str| {
        wait_until(Duration::from_secs(10), || {
            std::fs::read_to_string(&record)
                .is_ok_and(|t| t.contains(sid) && t.contains("\"initialized\":true"))
        })
    };
    assert!(
        recorded(&sid),
        "the session was not recorded; {}",
        hs.sup.log()
    );
    let text = std::fs::read_to_string(&record).unwrap();
    assert!(
        !text.contains(&hs.token("fake")),
        "the token itself is on disk: {text}"
    );
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&record).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600);

    run_again_after(&mut hs, Gone::Killed, || {});
    let r = echo(&hs, &sid, "after");
    assert_eq!(r.status, 200, "{}", hs.sup.log());
    let v = r.json();
    assert_eq!(Client::text(&v), "after", "{v}");
    // Another caller naming it (this uid on NAME.http.sock, not the token) does not find it.
    let other = request(
        &hs.unix("fake"),
        "POST",
        "/mcp",
        &[
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("Mcp-Session-Id", &sid),
            ("MCP-Protocol-Version", "2025-06-18"),
        ],
        &call(8, "echo", json!({"text": "theirs"})).to_string(),
    );
    assert_eq!(other.status, 404);

    // A graceful stop (`systemctl restart`) keeps the record: the session works after it too.
    run_again_after(&mut hs, Gone::Stopped, || {});
    assert_eq!(
        echo(&hs, &sid, "after a stop").status,
        200,
        "{}",
        hs.sup.log()
    );

    let refusals = |hs: &HttpSup| {
        hs.sup
            .log()
            .matches("the record of HTTP sessions is not used")
            .count()
    };
    // A link planted where the record goes, pointing at an intact copy: not read.
    let copy = hs.sup.dir.path().join("copy.json");
    run_again_after(&mut hs, Gone::Killed, || {
        std::fs::copy(&record, &copy).unwrap();
        std::fs::remove_file(&record).unwrap();
        std::os::unix::fs::symlink(&copy, &record).unwrap();
    });
    assert!(
        wait_until(Duration::from_secs(10), || refusals(&hs) == 1),
        "{}",
        hs.sup.log()
    );
    assert_eq!(echo(&hs, &sid, "gone").status, 404);

    // A damaged record: ignored whole.
    let sid = hs.session("fake");
    assert!(recorded(&sid), "{}", hs.sup.log());
    run_again_after(&mut hs, Gone::Killed, || {
        let text = std::fs::read_to_string(&record).unwrap();
        std::fs::write(
            &record,
            text.replace("\"initialized\":true", "\"initialized\":1"),
        )
        .unwrap();
    });
    assert!(
        wait_until(Duration::from_secs(10), || refusals(&hs) == 2),
        "{}",
        hs.sup.log()
    );
    assert_eq!(echo(&hs, &sid, "gone").status, 404);
}

/// A supervisor SIGKILLed while its child, which ignores the end of its input, runs on: the
/// dead supervisor and the child's pid.
fn crashed_leaving_a_child() -> (Supervisor, i32) {
    let mut sup = Supervisor::start(&fake_server("fake", &["--ignore-stdin-eof"], ""));
    let mut c = sup.client("fake");
    let old = Client::text(&c.call(json!(1), "pid", json!({})))
        .parse::<i32>()
        .unwrap();
    drop(c);
    sup.kill();
    assert!(
        alive(old),
        "the child should outlive the supervisor: it ignores end of input"
    );
    (sup, old)
}

/// The crashed run's child `old` ends, and `fake` serves again from a new child.
fn assert_replaced(sup: &Supervisor, old: i32) {
    assert!(
        wait_until(Duration::from_secs(10), || !alive(old)),
        "the crashed run's child {old} still runs\n{}",
        sup.log()
    );
    assert!(wait_until(Duration::from_secs(10), || sup
        .socket("fake")
        .exists()));
    let mut c = sup.client("fake");
    let new = Client::text(&c.call(json!(2), "pid", json!({})))
        .parse::<i32>()
        .unwrap();
    assert_ne!(new, old);
}

/// Issue 32 §3: a child is never run twice at once. A child that ignores the end of its input
/// outlives a SIGKILLed supervisor; the next run on the same `socket_dir` ends it (its marker
/// names the dead run) before starting its own, and says so.
#[test]
fn a_child_left_by_a_crashed_run_is_ended_by_the_next_run_before_it_starts_its_own() {
    let (mut sup, old) = crashed_leaving_a_child();
    sup.run_again();
    assert!(
        sup.wait_log(
            "ended the processes a previous run left",
            Duration::from_secs(5)
        ),
        "{}",
        sup.log()
    );
    assert_replaced(&sup, old);
}

/// The unit's `ExecStopPost` (`mcp-supervisor cleanup`, issue 32 decisions): after a crash
/// (systemd's `$SERVICE_RESULT=signal`) it leaves the child the dead run left, for the restart
/// to re-adopt; after a stop (`success`) it ends it; while a supervisor runs on the directory
/// it refuses and ends nothing.
#[test]
fn cleanup_on_stop_ends_what_the_run_left_but_not_after_a_crash_nor_while_one_runs() {
    let (mut sup, old) = crashed_leaving_a_child();
    let (config, id) = (sup.config.clone(), sup.id.clone());
    let cleanup = |result: Option<&str>| {
        let mut cmd = std::process::Command::new(SUPERVISOR);
        cmd.args(["cleanup", "-c"])
            .arg(&config)
            .env("MCPSUP_TEST_ID", &id)
            .env_remove("SERVICE_RESULT");
        if let Some(r) = result {
            cmd.env("SERVICE_RESULT", r);
        }
        let out = cmd.output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let (code, said) = cleanup(Some("signal"));
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains("crashed"), "{said}");
    assert!(alive(old), "a crash leaves the children for the restart");
    let (code, said) = cleanup(Some("success"));
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains(&old.to_string()), "{said}");
    assert!(
        wait_until(Duration::from_secs(10), || !alive(old)),
        "{old} still runs after the cleanup"
    );
    // With a supervisor running on the directory: refused, its child untouched.
    sup.run_again();
    let mut c = sup.client("fake");
    let new = Client::text(&c.call(json!(2), "pid", json!({})))
        .parse::<i32>()
        .unwrap();
    let (code, said) = cleanup(None);
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("already running"), "{said}");
    assert!(alive(new));
    assert_eq!(
        Client::text(&c.call(json!(3), "echo", json!({"text": "still"}))),
        "still"
    );
    sup.stop();
}

/// Whether `p` is a record of HTTP sessions (`http-sessions-HASH.json`, not the writer's
/// temporary file beside it).
fn is_record(p: &std::path::Path) -> bool {
    let name = p.file_name().unwrap_or_default().to_string_lossy();
    name.starts_with("http-sessions-") && name.ends_with(".json")
}

/// Issue 32 §2: a 2026-07-28 client's `subscriptions/listen` stream through `attach` is opened
/// again on the supervisor that comes back after a SIGKILL, under the client's own id; the
/// client sees one acknowledgement in all, and the list changes of the new run on its stream.
#[test]
fn attach_reopens_a_listen_stream_across_a_supervisor_crash() {
    let mut sup = Supervisor::start(&fake_server("fake", &[], ""));
    let mut a = Attached::start(&sup, "fake", &[]);
    a.send(
        &json!({"jsonrpc": "2.0", "id": "L", "method": "subscriptions/listen",
        "params": modern(json!({"notifications": {"toolsListChanged": true}}))}),
    );
    let ack = |v: &Value| v["method"] == "notifications/subscriptions/acknowledged";
    assert!(
        a.wait_for(Duration::from_secs(10), ack).is_some(),
        "{:?}",
        a.seen
    );
    let changed = |v: &Value| {
        v["method"] == "notifications/tools/list_changed"
            && v["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == "L"
    };
    a.send(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": modern(json!({"name": "list_changed", "arguments": {}}))}));
    a.response(json!(1), Duration::from_secs(10));
    assert!(
        a.wait_for(Duration::from_secs(10), changed).is_some(),
        "{:?}",
        a.seen
    );
    let before = a.seen.len();

    sup.kill();
    sup.run_again();
    assert!(
        wait_until(Duration::from_secs(20), || a
            .stderr()
            .contains("reconnected")),
        "{}",
        a.stderr()
    );
    a.send(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": modern(json!({"name": "list_changed", "arguments": {}}))}));
    a.response(json!(2), Duration::from_secs(20));
    let after = a.wait_new(before, Duration::from_secs(10), changed);
    assert!(
        after.is_some(),
        "no change on the reopened stream: {:?}\n{}",
        a.seen,
        sup.log()
    );
    assert_eq!(a.seen.iter().filter(|v| ack(v)).count(), 1, "{:?}", a.seen);
    // The stream is not answered as failed at the loss: it was open, not in flight.
    assert_eq!(a.answers(json!("L")), 0, "{:?}", a.seen);
    a.send(
        &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": "L"}}),
    );
    assert_eq!(a.finish(Duration::from_secs(10)), Some(0), "{}", a.stderr());
}

/// Issue 32 §3 (nothing lost, nothing doubled), under load: three `attach` clients keep calls
/// in flight while the supervisor is SIGKILLed and run again five times. Every call gets
/// exactly one answer (the echo, or the outage record when it was in flight at a crash), no
/// `attach` exits, and each client's last call after the last restart succeeds.
#[test]
fn attach_answers_every_call_exactly_once_across_repeated_crashes_under_load() {
    let mut sup = Supervisor::start(&fake_server("fake", &[], ""));
    let mut clients: Vec<Attached> = (0..3).map(|_| Attached::start(&sup, "fake", &[])).collect();
    for c in &mut clients {
        handshake(c);
    }
    let mut next = 100u64;
    let mut sent: Vec<Vec<u64>> = vec![Vec::new(); clients.len()];
    let mut burst = |clients: &mut [Attached], sent: &mut [Vec<u64>], n: usize| {
        for (k, c) in clients.iter_mut().enumerate() {
            for _ in 0..n {
                next += 1;
                c.send(&call(
                    next,
                    "echo",
                    json!({"text": format!("c{k} {next}"), "delay_ms": 20}),
                ));
                sent[k].push(next);
            }
        }
    };
    for round in 1..=5 {
        burst(&mut clients, &mut sent, 20);
        sup.kill();
        // Sent while no supervisor runs: held, then served.
        burst(&mut clients, &mut sent, 5);
        sup.run_again();
        // This run is up and every client is on it.
        let up = |sup: &Supervisor, clients: &[Attached]| {
            sup.log().matches("mcp-supervisor running").count() == round + 1
                && clients
                    .iter()
                    .all(|c| c.stderr().matches("reconnected").count() == round)
        };
        assert!(
            wait_until(Duration::from_secs(20), || up(&sup, &clients)),
            "{}",
            sup.log()
        );
    }
    burst(&mut clients, &mut sent, 3);
    for (k, c) in clients.iter_mut().enumerate() {
        for id in &sent[k] {
            let r = c.response(json!(id), Duration::from_secs(30));
            let text = Client::text(&r);
            let ok = text == format!("c{k} {id}");
            let outage = r["result"]["isError"] == true && text.contains("status=disconnected");
            assert!(ok || outage, "client {k}, call {id}: {r}");
        }
        // The last burst came after the last restart: served.
        for id in sent[k].iter().rev().take(3) {
            assert_eq!(
                Client::text(&c.response(json!(id), Duration::from_secs(5))),
                format!("c{k} {id}")
            );
        }
        assert_eq!(c.finish(Duration::from_secs(10)), Some(0), "{}", c.stderr());
        for id in &sent[k] {
            assert_eq!(
                c.answers(json!(id)),
                1,
                "client {k}, call {id}: {:?}",
                c.seen
            );
        }
    }
}

/// A stand-in for systemd's notify socket with a file descriptor store: it keeps what
/// `FDSTORE=1` sends under its `FDNAME` (duplicates appended, as systemd does), drops what
/// `FDSTOREREMOVE=1` names, and gives the kept descriptors back for the next run.
struct FdStore {
    path: std::path::PathBuf,
    held: Arc<Mutex<Vec<(String, std::os::fd::OwnedFd)>>>,
}

impl FdStore {
    fn bind(dir: &std::path::Path) -> FdStore {
        use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
        use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
        let path = dir.join("notify.sock");
        let sock = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
        let held: Arc<Mutex<Vec<(String, OwnedFd)>>> = Arc::default();
        let keep = held.clone();
        std::thread::spawn(move || loop {
            let mut buf = vec![0u8; 65536];
            let mut space = nix::cmsg_space!([std::os::fd::RawFd; 16]);
            let mut iov = [std::io::IoSliceMut::new(&mut buf)];
            let Ok(msg) = recvmsg::<()>(
                sock.as_raw_fd(),
                &mut iov,
                Some(&mut space),
                MsgFlags::MSG_CMSG_CLOEXEC,
            ) else {
                return;
            };
            let mut fds = Vec::new();
            for c in msg.cmsgs().into_iter().flatten() {
                if let ControlMessageOwned::ScmRights(got) = c {
                    // SAFETY: the kernel just gave these descriptors to this process.
                    fds.extend(got.into_iter().map(|f| unsafe { OwnedFd::from_raw_fd(f) }));
                }
            }
            let n = msg.bytes;
            let text = String::from_utf8_lossy(&buf[..n]).into_owned();
            let name = text
                .lines()
                .find_map(|l| l.strip_prefix("FDNAME="))
                .unwrap_or("stored")
                .to_string();
            let mut held = keep.lock().unwrap();
            if text.lines().any(|l| l == "FDSTOREREMOVE=1") {
                held.retain(|(n, _)| *n != name);
            } else if text.lines().any(|l| l == "FDSTORE=1") {
                held.extend(fds.into_iter().map(|f| (name.clone(), f)));
            }
        });
        FdStore { path, held }
    }

    fn names(&self) -> Vec<String> {
        let mut n: Vec<String> = self
            .held
            .lock()
            .unwrap()
            .iter()
            .map(|(n, _)| n.clone())
            .collect();
        n.sort();
        n
    }

    /// The text of the stored record named `name`, read through a fresh open of the memfd.
    fn record(&self, name: &str) -> Option<Value> {
        use std::os::fd::AsRawFd;
        let held = self.held.lock().unwrap();
        let (_, fd) = held.iter().find(|(n, _)| n == name)?;
        let text = std::fs::read(format!("/proc/self/fd/{}", fd.as_raw_fd())).ok()?;
        serde_json::from_slice(&text).ok()
    }

    /// The one instance kept (`NAME.N`) when the store holds exactly its four parts.
    fn instance(&self) -> Option<String> {
        let names = self.names();
        let key = names
            .first()?
            .strip_prefix("child.")?
            .rsplit_once('.')?
            .0
            .to_string();
        let want: Vec<String> = ["record", "stderr", "stdin", "stdout"]
            .iter()
            .map(|p| format!("child.{key}.{p}"))
            .collect();
        (names == want).then_some(key)
    }

    /// What systemd passes the next run: copies of every kept descriptor, which stay kept.
    fn passed(&self) -> Vec<(String, std::os::fd::OwnedFd)> {
        let held = self.held.lock().unwrap();
        held.iter()
            .map(|(n, f)| (n.clone(), f.try_clone().unwrap()))
            .collect()
    }
}

/// Issue 32 §2 "Done when", the file descriptor store path: under a stand-in for systemd
/// (`NOTIFY_SOCKET` with `FDSTORE=64`, as `FileDescriptorStoreMax=64` sets it), the
/// supervisor keeps each running child's pipes and session record in the store. It is
/// SIGKILLed; the child goes on running (`KillMode=process`); the next run, passed the stored
/// descriptors as systemd passes them (`LISTEN_FDS`, `LISTEN_FDNAMES`), re-adopts the child:
/// same pid, never a second `initialize`, a client's call answered, no restart counted. When
/// that child later dies, its exit status is unknown and it is started again; a stop empties
/// the store.
#[test]
fn children_kept_in_the_fd_store_outlive_a_crash_and_are_re_adopted() {
    let side = tempfile::tempdir().unwrap();
    let store = FdStore::bind(side.path());
    let saw = side.path().join("saw.jsonl");
    let notify = store.path.to_str().unwrap().to_string();
    let env = [("NOTIFY_SOCKET", notify.as_str()), ("FDSTORE", "64")];
    let mut sup = Supervisor::spawn_config(
        "",
        &fake_server("fake", &["--log", saw.to_str().unwrap()], ""),
        &env,
    );
    assert!(
        wait_until(Duration::from_secs(10), || sup.socket("fake").exists()),
        "{}",
        sup.log()
    );
    let mut c = sup.client("fake");
    c.request(json!(0), "logging/setLevel", json!({"level": "debug"}));
    let r = c.call(json!(1), "echo", json!({"text": "before"}));
    assert_eq!(Client::text(&r), "before", "{r}");
    let child = sup.server_status("fake")["pid"].as_i64().unwrap() as i32;
    let mut key = String::new();
    assert!(
        wait_until(Duration::from_secs(10), || {
            key = store.instance().unwrap_or_default();
            key.starts_with("fake.")
                && store
                    .record(&format!("child.{key}.record"))
                    .is_some_and(|r| r["session"]["handshake"].is_object())
        }),
        "{:?}\n{}",
        store.names(),
        sup.log()
    );
    let record = store.record(&format!("child.{key}.record")).unwrap();
    assert_eq!(record["pid"], json!(child), "{record}");
    assert_eq!(record["session"]["log_level"], json!(0), "{record}");
    drop(c);

    sup.kill();
    assert!(alive(child), "the child should outlive the crash");
    sup.run_again_passing(&env, store.passed());
    assert!(
        sup.wait_log("re-adopting the child", Duration::from_secs(10)),
        "{}",
        sup.log()
    );
    assert!(wait_until(Duration::from_secs(10), || sup
        .socket("fake")
        .exists()));
    let mut c = sup.client("fake");
    let r = c.call(json!(2), "echo", json!({"text": "after"}));
    assert_eq!(Client::text(&r), "after", "{r}\n{}", sup.log());
    let s = sup.server_status("fake");
    assert_eq!(s["pid"], json!(child), "{s}\n{}", sup.log());
    assert_eq!(s["restarts"], json!(0), "{s}");
    assert_eq!(
        child_saw_method(&saw, "initialize"),
        1,
        "{:?}",
        child_saw(&saw)
    );
    assert!(
        !sup.log()
            .contains("ended the processes a previous run left"),
        "{}",
        sup.log()
    );
    // The new run keeps the re-adopted child in the store again, as the same instance.
    assert!(
        wait_until(Duration::from_secs(10), || store.instance()
            == Some(key.clone())),
        "{:?}",
        store.names()
    );

    // Its end is noticed through its pidfd; how it ended is unknown; it is started again.
    unsafe {
        libc::kill(child, libc::SIGKILL);
    }
    let mut fresh = 0;
    assert!(
        wait_until(Duration::from_secs(15), || {
            fresh = sup.server_status("fake")["pid"].as_i64().unwrap_or(0) as i32;
            fresh != 0 && fresh != child
        }),
        "{}",
        sup.log()
    );
    let s = sup.server_status("fake");
    assert_eq!(s["last_exit"]["reason"], json!("exited(unknown)"), "{s}");
    let r = c.call(json!(3), "echo", json!({"text": "again"}));
    assert_eq!(Client::text(&r), "again", "{r}\n{}", sup.log());
    // The new instance replaced the old one's entries.
    assert!(
        wait_until(Duration::from_secs(10), || store.instance().is_some_and(
            |k| k != key
                && store
                    .record(&format!("child.{k}.record"))
                    .is_some_and(|r| r["pid"] == json!(fresh))
        )),
        "{:?}",
        store.names()
    );
    drop(c);
    assert_eq!(sup.stop(), Some(0), "{}", sup.log());
    assert!(store.names().is_empty(), "{:?}", store.names());
}

/// Issue 32 §2 and §3: a child in the file descriptor store whose server changed while the
/// supervisor was down (here its arguments) is not re-adopted: the next run says why, ends it
/// with the rest of the crashed run, and starts the new command.
#[test]
fn a_stored_child_whose_server_changed_is_ended_not_re_adopted() {
    let side = tempfile::tempdir().unwrap();
    let store = FdStore::bind(side.path());
    let notify = store.path.to_str().unwrap().to_string();
    let env = [("NOTIFY_SOCKET", notify.as_str()), ("FDSTORE", "64")];
    let mut sup =
        Supervisor::spawn_config("", &fake_server("fake", &["--ignore-stdin-eof"], ""), &env);
    assert!(wait_until(Duration::from_secs(10), || sup
        .socket("fake")
        .exists()));
    let mut c = sup.client("fake");
    let old = Client::text(&c.call(json!(1), "pid", json!({})))
        .parse::<i32>()
        .unwrap();
    let mut key = String::new();
    assert!(
        wait_until(Duration::from_secs(10), || {
            key = store.instance().unwrap_or_default();
            !key.is_empty()
        }),
        "{:?}",
        store.names()
    );
    drop(c);
    sup.kill();
    assert!(alive(old));
    let text = std::fs::read_to_string(&sup.config).unwrap();
    let changed = text.replacen(
        "\"--ignore-stdin-eof\"",
        "\"--ignore-stdin-eof\", \"--name\", \"renamed\"",
        1,
    );
    assert_ne!(text, changed, "{text}");
    std::fs::write(&sup.config, changed).unwrap();
    sup.run_again_passing(&env, store.passed());
    assert!(
        sup.wait_log(
            "its server's configuration changed",
            Duration::from_secs(10)
        ),
        "{}",
        sup.log()
    );
    assert_replaced(&sup, old);
    // The refused instance's entries left the store; the new one's are there.
    assert!(
        wait_until(Duration::from_secs(10), || store
            .instance()
            .is_some_and(|k| k != key)),
        "{:?}",
        store.names()
    );
    sup.stop();
}
