//! Health and outages (issues 4 and 5): any reply proves life, restarts happen only on exit or
//! timeout, request deadlines are absolute, and outages are explicit, structured and brief.
//!
//! Facts are taken from what a user can see: responses on the socket, the child's `--log` of
//! what it received, its `--pidfile` (one line per instance), real signals.

use crate::harness::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Short probe settings: a silent child is probed every 200 ms.
const PROBE: &str = "probe_interval = \"200ms\"\nprobe_timeout = \"300ms\"\n";

/// The lists a child advertising only `tools` must never be probed with (K15).
const UNADVERTISED: [&str; 3] = ["resources/list", "prompts/list", "resources/templates/list"];

// ---------------------------------------------------------------------------------------------
// Fixture helpers
// ---------------------------------------------------------------------------------------------

/// A supervisor running one fake server `fake` that logs what it receives and its pids.
struct Fx {
    sup: Supervisor,
    /// The child's `--log`: every line it received, all instances appended.
    log: PathBuf,
    /// The child's `--pidfile`: one `<pid> <unix ms>` line per instance.
    pids: PathBuf,
    /// Scratch files (tools file, markers); dropped after the supervisor.
    _files: tempfile::TempDir,
}

impl Fx {
    /// Every instance runs the fake with `args`.
    fn start(args: &[&str], extra: &str) -> Fx {
        Self::start_with(|log, pids, _| {
            let mut all: Vec<&str> = vec!["--log", log, "--pidfile", pids];
            all.extend_from_slice(args);
            fake_server("fake", &all, extra)
        })
    }

    /// The first instance runs the fake with `first`, every later one with `then` (a shell
    /// wrapper that `exec`s the fake, so the pid is the fake's).
    fn start_first_then(first: &[&str], then: &[&str], extra: &str) -> Fx {
        Self::start_with(|log, pids, dir| {
            let common = format!(
                "exec {} --log {} --pidfile {}",
                sh_quote(FAKE),
                sh_quote(log),
                sh_quote(pids)
            );
            let join = |a: &[&str]| a.iter().map(|s| sh_quote(s)).collect::<Vec<_>>().join(" ");
            let mark = sh_quote(&dir.join("first-done").to_string_lossy());
            let script = format!(
                "if [ -e {mark} ]; then {common} {}; else : > {mark}; {common} {}; fi",
                join(then),
                join(first)
            );
            format!("[servers.fake]\ncommand = \"/bin/sh\"\nargs = [\"-c\", {script:?}]\n{extra}\n")
        })
    }

    fn start_with(toml: impl FnOnce(&str, &str, &Path) -> String) -> Fx {
        let files = tempfile::tempdir().unwrap();
        let log = files.path().join("child.log");
        let pids = files.path().join("child.pids");
        let servers = toml(
            &log.to_string_lossy(),
            &pids.to_string_lossy(),
            files.path(),
        );
        let sup = Supervisor::start(&servers);
        Fx {
            sup,
            log,
            pids,
            _files: files,
        }
    }

    /// Number of instances started so far.
    fn instances(&self) -> usize {
        pidfile(&self.pids).len()
    }

    /// Pids of all instances, in start order.
    fn pids(&self) -> Vec<i32> {
        pidfile(&self.pids).into_iter().map(|(p, _)| p).collect()
    }

    /// Parsed lines the child received after its `n`-th `initialize` (1-based), i.e. what the
    /// `n`-th instance (and later ones) saw, starting with that `initialize`.
    fn saw_from_init(&self, n: usize) -> Vec<Value> {
        let lines: Vec<Value> = child_saw(&self.log)
            .iter()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        let mut seen = 0;
        for (i, v) in lines.iter().enumerate() {
            if v["method"] == "initialize" {
                seen += 1;
                if seen == n {
                    return lines[i..].to_vec();
                }
            }
        }
        Vec::new()
    }

    fn saw(&self, method: &str) -> usize {
        child_saw_method(&self.log, method)
    }

    /// Probes the supervisor sent while no client asked for lists: `ping` plus `tools/list`.
    fn probes(&self) -> usize {
        self.saw("ping") + self.saw("tools/list")
    }

    fn connect_client(&self) -> Client {
        self.sup.client("fake")
    }
}

fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

fn count(lines: &[Value], method: &str) -> usize {
    lines.iter().filter(|v| v["method"] == method).count()
}

static IDS: AtomicU64 = AtomicU64::new(1000);

/// A fresh request id (unique within the test binary).
fn next_id() -> Value {
    json!(IDS.fetch_add(1, Ordering::Relaxed))
}

fn echo(c: &mut Client, text: &str) -> Value {
    c.call(next_id(), "echo", json!({"text": text}))
}

fn pid_of(c: &mut Client) -> i32 {
    let r = c.call(next_id(), "pid", json!({}));
    Client::text(&r)
        .parse()
        .unwrap_or_else(|_| panic!("pid tool answered {r}"))
}

fn kill9(pid: i32) {
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn tool_names(list_response: &Value) -> Vec<String> {
    list_response["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("not a tools/list result: {list_response}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap_or_default().to_string())
        .collect()
}

fn tools_list(c: &mut Client) -> Value {
    c.request(next_id(), "tools/list", json!({}))
}

/// Whether a response is any kind of failure: a JSON-RPC error or a tool result with
/// `isError: true`.
fn is_failure(r: &Value) -> bool {
    r.get("error").is_some() || r["result"]["isError"] == json!(true)
}

/// Checks the fields every outage record carries and returns it.
fn check_record(record: &Value, statuses: &[&str], context: &Value) {
    assert_eq!(
        record["server"], "fake",
        "record names the server: {context}"
    );
    let status = record["status"].as_str().unwrap_or_default();
    assert!(
        statuses.contains(&status),
        "status {status:?} is one of {statuses:?}: {context}"
    );
    assert!(
        record["reason"].as_str().is_some_and(|r| !r.is_empty()),
        "record has a reason: {context}"
    );
    assert!(
        record["stderr_tail"].is_string(),
        "record carries stderr_tail: {context}"
    );
    assert!(
        record["request_id"]
            .as_str()
            .is_some_and(|r| r.starts_with("r-")),
        "record carries request_id r-…: {context}"
    );
    if let Some(ms) = record.get("retry_after_ms") {
        assert!(ms.is_u64(), "retry_after_ms is a number: {context}");
    }
}

/// A `tools/call` outage failure: a result with `isError: true`, a one-line text
/// `server=… status=… reason=… [retry_after=…] request_id=…`, and the same record in
/// `_meta["mcp-supervisor/outage"]`. Returns the record.
fn outage_result(r: &Value, statuses: &[&str]) -> Value {
    assert!(
        r.get("error").is_none(),
        "a tools/call outage is a tool result, not a JSON-RPC error: {r}"
    );
    assert_eq!(r["result"]["isError"], json!(true), "isError: {r}");
    let record = r["result"]["_meta"]["mcp-supervisor/outage"].clone();
    assert!(record.is_object(), "outage record in _meta: {r}");
    check_record(&record, statuses, r);
    let text = Client::text(r);
    for part in [
        format!("server={}", record["server"].as_str().unwrap()),
        format!("status={}", record["status"].as_str().unwrap()),
        format!("reason={}", record["reason"].as_str().unwrap()),
        format!("request_id={}", record["request_id"].as_str().unwrap()),
    ] {
        assert!(text.contains(&part), "text {text:?} has {part:?}");
    }
    if record.get("retry_after_ms").is_some() {
        assert!(
            text.contains("retry_after="),
            "text {text:?} has retry_after"
        );
    }
    record
}

/// A non-`tools/call` outage failure: a JSON-RPC error naming the server, with the record in
/// `data`. Returns the record.
fn outage_error(r: &Value, statuses: &[&str]) -> Value {
    let e = &r["error"];
    assert!(e.is_object(), "a JSON-RPC error: {r}");
    assert!(e["code"].is_i64(), "error code: {r}");
    let msg = e["message"].as_str().unwrap_or_default();
    assert!(msg.contains("fake"), "message names the server: {r}");
    let record = e["data"].clone();
    check_record(&record, statuses, r);
    record
}

/// Calls `echo` until it succeeds (each failure must be an explicit outage result), within
/// `timeout`. Returns the successful response.
fn echo_until_ok(c: &mut Client, text: &str, timeout: Duration) -> Value {
    let end = Instant::now() + timeout;
    loop {
        let r = echo(c, text);
        if !is_failure(&r) {
            assert_eq!(Client::text(&r), text, "{r}");
            return r;
        }
        outage_result(&r, &["exited", "starting", "backoff"]);
        assert!(
            Instant::now() < end,
            "echo did not succeed within {timeout:?}; last {r}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Whether a `notifications/tools/list_changed` arrives within `timeout`.
fn got_list_changed(c: &mut Client, timeout: Duration) -> bool {
    c.notification("notifications/tools/list_changed", timeout)
        .is_some()
}

/// Lets time pass while a client calls `echo` every `every` until `done` holds or `timeout`
/// passes; every call must succeed. Returns whether `done` held.
fn calls_while(
    c: &mut Client,
    every: Duration,
    timeout: Duration,
    mut done: impl FnMut() -> bool,
) -> bool {
    let end = Instant::now() + timeout;
    let mut n = 0;
    loop {
        n += 1;
        let text = format!("tick-{n}");
        let r = echo(c, &text);
        assert_eq!(Client::text(&r), text, "call {n} during probing: {r}");
        if wait_until(every, &mut done) {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Issue 4: any reply proves life (K11, K13, K14, K15)
// ---------------------------------------------------------------------------------------------

/// K13: the child answers `ping` with an error of `code`; ten-plus probes later nothing has
/// been restarted and every call worked.
fn ping_error_is_proof_of_life(code: &str) {
    let fx = Fx::start(&["--ping", code], PROBE);
    let mut a = fx.connect_client();
    let pid = pid_of(&mut a);
    let pinged = calls_while(
        &mut a,
        Duration::from_millis(700),
        Duration::from_secs(15),
        || fx.saw("ping") >= 12,
    );
    assert!(
        pinged,
        "the silent child was probed with ping at least 12 times (saw {})",
        fx.saw("ping")
    );
    assert_eq!(fx.instances(), 1, "zero restarts; log:\n{}", fx.sup.log());
    assert_eq!(pid_of(&mut a), pid, "same child");
    assert!(alive(pid));
    assert_eq!(fx.saw("initialize"), 1);
    assert!(
        !got_list_changed(&mut a, Duration::from_millis(300)),
        "no list_changed churn"
    );
}

#[test]
fn case_k13_ping_answered_method_not_found_is_proof_of_life() {
    ping_error_is_proof_of_life("-32601");
}

#[test]
fn case_k13_ping_answered_internal_error_is_proof_of_life() {
    ping_error_is_proof_of_life("-32603");
}

#[test]
fn case_k13_ping_answered_invalid_request_is_proof_of_life() {
    ping_error_is_proof_of_life("-32600");
}

/// Two clients keep `echo` calls (900 ms each) in flight while the silent gaps get probed.
fn probed_under_concurrent_load(ping: &str) {
    let fx = Fx::start(&["--ping", ping], PROBE);
    let mut a = fx.connect_client();
    let b = fx.connect_client();
    let pid = pid_of(&mut a);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let workers: Vec<_> = [a, b]
        .into_iter()
        .enumerate()
        .map(|(k, mut c)| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut n = 0;
                while !stop.load(Ordering::SeqCst) {
                    n += 1;
                    let text = format!("c{k}-{n}");
                    let r = c.call(next_id(), "echo", json!({"text": text, "delay_ms": 900}));
                    assert_eq!(Client::text(&r), text, "client {k} call {n}: {r}");
                }
                (c, n)
            })
        })
        .collect();
    let probed = wait_until(Duration::from_secs(15), || fx.probes() >= 10);
    stop.store(true, Ordering::SeqCst);
    let mut clients = Vec::new();
    for w in workers {
        let (c, n) = w.join().expect("a client saw a failed call");
        assert!(n >= 2, "each client made calls");
        clients.push(c);
    }
    assert!(
        probed,
        "at least 10 probes during the load (saw {})",
        fx.probes()
    );
    assert_eq!(fx.instances(), 1, "zero restarts; log:\n{}", fx.sup.log());
    assert_eq!(pid_of(&mut clients[0]), pid);
    assert_eq!(fx.saw("initialize"), 1);
}

#[test]
fn case_k13_ping_not_implemented_under_concurrent_client_load() {
    probed_under_concurrent_load("-32601");
}

#[test]
fn case_k14_a_ping_never_answered_under_concurrent_client_load() {
    probed_under_concurrent_load("ignore");
}

#[test]
fn case_k14_a_ping_never_answered_is_not_death_and_is_remembered() {
    let fx = Fx::start(&["--ping", "ignore"], PROBE);
    let mut a = fx.connect_client();
    let pid = pid_of(&mut a);
    // No client asks for tools/list here: every tools/list the child sees is a probe.
    let probed = calls_while(
        &mut a,
        Duration::from_millis(1000),
        Duration::from_secs(15),
        || fx.probes() >= 12,
    );
    assert!(probed, "12 probes (saw {})", fx.probes());
    assert_eq!(fx.instances(), 1, "zero restarts; log:\n{}", fx.sup.log());
    assert_eq!(pid_of(&mut a), pid);
    // Remembered: once a ping went unanswered while tools/list was answered, the supervisor
    // stops sending ping and proves life with the advertised request instead.
    assert!(
        fx.saw("ping") <= 2,
        "ping was not sent again after it was seen unanswered: {} pings, {} tools/list",
        fx.saw("ping"),
        fx.saw("tools/list")
    );
    assert!(fx.saw("tools/list") >= 10);
}

#[test]
fn case_k14_b_child_that_dies_on_ping_is_restarted_with_backoff_and_not_pinged_again() {
    let fx = Fx::start(
        &["--ping", "exit139"],
        &format!("{PROBE}backoff_initial = \"300ms\"\n"),
    );
    let mut a = fx.connect_client();
    // The first probe kills the first instance: a real crash, restarted after backoff.
    assert!(
        wait_until(Duration::from_secs(10), || fx.instances() >= 2),
        "restarted after the ping crash; log:\n{}",
        fx.sup.log()
    );
    let starts = pidfile(&fx.pids);
    assert!(
        starts[1].1 - starts[0].1 >= 300,
        "the restart waited for the backoff (never less than backoff_initial between spawns): {starts:?}"
    );
    // The second instance is probed many times, never with ping.
    let probed = wait_until(Duration::from_secs(10), || {
        count(&fx.saw_from_init(2), "tools/list") >= 8
    });
    let second = fx.saw_from_init(2);
    assert!(
        probed,
        "the second instance is still probed (with an advertised request): {second:?}"
    );
    assert_eq!(
        count(&second, "ping"),
        0,
        "the second instance was never sent ping"
    );
    assert_eq!(
        fx.instances(),
        2,
        "no further restarts; log:\n{}",
        fx.sup.log()
    );
    let pids = fx.pids();
    assert!(alive(pids[1]));
    assert_eq!(pid_of(&mut a), pids[1]);
    // The log says why ping is no longer sent.
    let log = fx.sup.log();
    assert!(
        log.lines()
            .any(|l| (l.contains("WARN") || l.contains("ERROR"))
                && l.contains("ping")
                && !l.contains("probe unanswered")),
        "the log explains that ping killed the child and is not sent again:\n{log}"
    );
}

#[test]
fn case_k11_probes_never_reinitialize_with_or_without_clients() {
    let fx = Fx::start(&["--second-initialize", "error"], PROBE);
    // Without any client.
    assert!(
        wait_until(Duration::from_secs(10), || fx.saw("ping") >= 10),
        "probed while no client is attached (saw {} pings)",
        fx.saw("ping")
    );
    // With clients attached (their initialize is answered by the supervisor).
    let mut a = fx.connect_client();
    let init = a.initialize("second", json!({}));
    assert!(init["result"]["protocolVersion"].is_string(), "{init}");
    let pid = pid_of(&mut a);
    let probed = calls_while(
        &mut a,
        Duration::from_millis(700),
        Duration::from_secs(15),
        || fx.saw("ping") >= 22,
    );
    assert!(probed, "probed with a client attached");
    assert_eq!(
        fx.saw("initialize"),
        1,
        "the child saw exactly one initialize: {:?}",
        child_saw(&fx.log)
    );
    assert_eq!(
        fx.instances(),
        1,
        "healthy: zero restarts; log:\n{}",
        fx.sup.log()
    );
    assert_eq!(pid_of(&mut a), pid);
}

#[test]
fn no_probe_before_the_handshake_completes() {
    let fx = Fx::start(
        &["--init-delay", "1000"],
        &format!("{PROBE}start_timeout = \"10s\"\n"),
    );
    assert!(wait_until(Duration::from_secs(10), || fx.saw("ping") >= 3));
    let saw = fx.saw_from_init(1);
    let initialized = saw
        .iter()
        .position(|v| v["method"] == "notifications/initialized")
        .expect("the handshake completed");
    assert_eq!(
        initialized, 1,
        "nothing between initialize and notifications/initialized: {saw:?}"
    );
    let first_ping = saw.iter().position(|v| v["method"] == "ping").unwrap();
    assert!(first_ping > initialized);
    assert_eq!(fx.instances(), 1);
}

/// K15: a child advertising only tools is never probed with unadvertised methods, stays
/// healthy, and a client's `resources/list` gets the child's own -32601.
fn only_advertised_methods(extra_args: &[&str]) {
    let mut args = vec!["--capabilities", r#"{"tools":{}}"#];
    args.extend_from_slice(extra_args);
    let fx = Fx::start(&args, PROBE);
    let mut a = fx.connect_client();
    let pid = pid_of(&mut a);
    let probed = calls_while(
        &mut a,
        Duration::from_millis(800),
        Duration::from_secs(15),
        || fx.probes() >= 12,
    );
    assert!(probed, "12 probes (saw {})", fx.probes());
    for m in UNADVERTISED {
        assert_eq!(
            fx.saw(m),
            0,
            "the supervisor never sent {m}: {:?}",
            child_saw(&fx.log)
        );
    }
    // A client asking for an unadvertised list gets the child's answer, unchanged.
    for m in UNADVERTISED {
        let r = a.request(next_id(), m, json!({}));
        assert!(r.get("result").is_none(), "not an empty success: {r}");
        assert_eq!(r["error"]["code"], -32601, "{r}");
        assert_eq!(
            r["error"]["message"],
            format!("Method not found: {m}"),
            "the child's error, unchanged: {r}"
        );
        assert_eq!(fx.saw(m), 1, "{m} reached the child once (the client's)");
    }
    // Seeing a client use them does not make the supervisor probe with them.
    let before = fx.probes();
    assert!(calls_while(
        &mut a,
        Duration::from_millis(800),
        Duration::from_secs(10),
        || fx.probes() >= before + 5
    ));
    for m in UNADVERTISED {
        assert_eq!(fx.saw(m), 1, "{m} still only the client's");
    }
    assert_eq!(
        fx.instances(),
        1,
        "healthy: zero restarts; log:\n{}",
        fx.sup.log()
    );
    assert_eq!(pid_of(&mut a), pid);
}

#[test]
fn case_k15_tools_only_child_is_never_probed_with_unadvertised_lists() {
    only_advertised_methods(&[]);
}

#[test]
fn case_k15_tools_only_child_ignoring_ping_is_confirmed_with_tools_list_only() {
    only_advertised_methods(&["--ping", "ignore"]);
}

// ---------------------------------------------------------------------------------------------
// Issue 4: death by timeout, slowness, absolute deadlines
// ---------------------------------------------------------------------------------------------

const WEDGE: &str = "probe_interval = \"200ms\"\nprobe_timeout = \"300ms\"\nprobe_failures = 3\n\
stop_grace = \"300ms\"\nkill_timeout = \"1s\"\nbackoff_initial = \"200ms\"\n";

#[test]
fn wedged_child_is_restarted_within_the_probe_budget_and_clients_recover() {
    let fx = Fx::start_first_then(&["--wedge-after-init"], &[], WEDGE);
    // The first instance answered initialize (the client got it) and then wedged.
    let mut a = fx.connect_client();
    let mut b = fx.connect_client();
    let ready_ms = unix_ms();
    assert!(
        wait_until(Duration::from_secs(10), || fx.instances() >= 2),
        "the wedged child was restarted; log:\n{}",
        fx.sup.log()
    );
    let starts = pidfile(&fx.pids);
    // When: probe_interval + probe_failures × probe_timeout, the stop ladder, the backoff, to
    // the millisecond on the fake clock (scenarios `a_silent_ready_child_gets_one_ping_then_
    // its_confirmation_then_is_stopped`, `failed_starts_back_off_exponentially_with_jitter_
    // then_fail_after_five`); here, that it happened, and in order.
    assert!(starts[1].1 >= ready_ms, "restarted after the handshake");
    assert!(!alive(starts[0].0), "the wedged instance is gone");
    // Both clients are still connected and their next requests work.
    echo_until_ok(&mut a, "a after", Duration::from_secs(10));
    echo_until_ok(&mut b, "b after", Duration::from_secs(10));
    assert_eq!(pid_of(&mut a), starts[1].0);
}

#[test]
fn wedged_child_in_flight_request_fails_instead_of_hanging() {
    let fx = Fx::start_first_then(
        &["--wedge-after-init"],
        &[],
        &format!("{WEDGE}request_timeout = \"1500ms\"\n"),
    );
    let mut a = fx.connect_client();
    let mut b = fx.connect_client();
    let id = next_id();
    a.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "lost"}}}));
    // request_timeout, then the probe budget and the stop ladder: an error, never a hang.
    let r = a
        .response_timeout(&id, Duration::from_secs(8))
        .expect("the in-flight request failed instead of hanging");
    assert!(is_failure(&r), "an error, not a success: {r}");
    let said = r.to_string();
    assert!(said.contains("fake"), "the failure names the server: {r}");
    // When it fails (at request_timeout, or at the stop for silence, never before) is
    // asserted on the fake clock: scenarios `a_request_past_its_deadline_gets_minus_32001_and_
    // the_child_a_cancel` and `a_silent_ready_child_gets_one_ping_then_its_confirmation_then_is_stopped`.
    assert!(
        wait_until(Duration::from_secs(10), || fx.instances() >= 2),
        "the wedged child was restarted; log:\n{}",
        fx.sup.log()
    );
    echo_until_ok(&mut a, "a after", Duration::from_secs(10));
    echo_until_ok(&mut b, "b after", Duration::from_secs(10));
}

#[test]
fn busy_child_within_request_timeout_is_not_restarted() {
    // Single-threaded busy: probes get no answer at all (ping ignored, nothing advertised to
    // confirm with) while one call runs far longer than probe_interval × probe_failures.
    let fx = Fx::start(
        &["--ping", "ignore", "--capabilities", "{}"],
        &format!("{PROBE}probe_failures = 5\nrequest_timeout = \"10s\"\n"),
    );
    let mut a = fx.connect_client();
    let pid = pid_of(&mut a);
    let r = a.call(next_id(), "slow", json!({"ms": 3000}));
    let log = fx.sup.log();
    assert_eq!(Client::text(&r), "done", "the long call succeeds: {r}");
    assert_eq!(fx.instances(), 1, "not restarted while busy; log:\n{log}");
    assert!(alive(pid));
    // One probe is awaited across the whole call: never a pile of queued probes (K24).
    assert_eq!(
        fx.saw("ping"),
        1,
        "the busy child was probed once meanwhile; log:\n{log}"
    );
    assert!(
        !log.contains("probe-timeout"),
        "not declared dead while the call was within its deadline:\n{log}"
    );
}

/// Finds the id the child saw for the `tools/call` of `tool`.
fn child_id_of_call(fx: &Fx, tool: &str) -> Option<Value> {
    fx.saw_from_init(1)
        .into_iter()
        .find(|v| v["method"] == "tools/call" && v["params"]["name"] == tool)
        .map(|v| v["id"].clone())
}

fn cancelled_ids(fx: &Fx) -> Vec<Value> {
    fx.saw_from_init(1)
        .into_iter()
        .filter(|v| v["method"] == "notifications/cancelled")
        .map(|v| v["params"]["requestId"].clone())
        .collect()
}

#[test]
fn progress_forever_does_not_extend_the_method_deadline() {
    let fx = Fx::start(
        &[],
        "request_timeout = \"30s\"\nmethod_timeouts = { \"tools/call\" = \"1s\" }\n",
    );
    let mut a = fx.connect_client();
    let pid = pid_of(&mut a);
    let id = next_id();
    a.send(
        &json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "progress", "arguments": {"forever": true, "interval_ms": 50},
        "_meta": {"progressToken": "tok-forever"}}}),
    );
    let r = a
        .response_timeout(&id, Duration::from_secs(6))
        .expect("the request failed at its absolute deadline");
    assert_eq!(r["error"]["code"], -32001, "a timeout error: {r}");
    let msg = r["error"]["message"].as_str().unwrap_or_default();
    assert!(
        msg.contains("fake") && msg.contains("timed out"),
        "the message names the server and says it timed out: {r}"
    );
    // That it fails at the 1 s method deadline to the millisecond, progress or not, is
    // asserted on the fake clock (scenario `progress_every_50_ms_reaches_the_caller_and_never_
    // moves_the_method_deadline`); here, the request's 30 s default did not apply.
    let progress = a
        .backlog
        .iter()
        .filter(|m| {
            m["method"] == "notifications/progress" && m["params"]["progressToken"] == "tok-forever"
        })
        .count();
    assert!(progress >= 3, "progress flowed meanwhile: {:?}", a.backlog);
    let child_id = child_id_of_call(&fx, "progress").expect("the child saw the call");
    assert!(
        wait_until(Duration::from_secs(3), || cancelled_ids(&fx)
            .contains(&child_id)),
        "the child got notifications/cancelled for {child_id}: {:?}",
        child_saw(&fx.log)
    );
    // A timeout alone does not restart the child.
    assert_eq!(Client::text(&echo(&mut a, "still here")), "still here");
    assert_eq!(pid_of(&mut a), pid);
    assert_eq!(fx.instances(), 1);
}

#[test]
fn request_timeout_fails_the_call_cancels_it_and_keeps_the_child() {
    let fx = Fx::start(&[], &format!("{PROBE}request_timeout = \"1s\"\n"));
    let mut a = fx.connect_client();
    let pid = pid_of(&mut a);
    let id = json!("slow-1");
    a.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "slow", "arguments": {"ms": 30000}}}));
    let r = a
        .response_timeout(&id, Duration::from_secs(6))
        .expect("the request failed at request_timeout");
    assert_eq!(r["error"]["code"], -32001, "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("fake") && m.contains("timed out")),
        "{r}"
    );
    // Not before the deadline: scenario `a_request_past_its_deadline_gets_minus_32001_and_the_
    // child_a_cancel` (nothing at 1999 ms, -32001 at 2000 ms).
    let child_id = child_id_of_call(&fx, "slow").expect("the child saw the call");
    assert!(
        wait_until(Duration::from_secs(3), || cancelled_ids(&fx)
            .contains(&child_id)),
        "the child got notifications/cancelled for {child_id}"
    );
    assert_eq!(Client::text(&echo(&mut a, "ok")), "ok");
    assert_eq!(pid_of(&mut a), pid);
    assert_eq!(fx.instances(), 1, "a timeout alone restarts nothing");
}

// ---------------------------------------------------------------------------------------------
// Issue 5: outages are visible, never silent (K16, K18, K19)
// ---------------------------------------------------------------------------------------------

#[test]
fn case_k16_outage_gap_serves_last_known_tools_and_explicit_call_failures() {
    let fx = Fx::start(
        &["--tools", "echo,add", "--init-delay", "1500"],
        "start_timeout = \"20s\"\nqueue_wait = \"200ms\"\nbackoff_initial = \"300ms\"\n",
    );
    let mut a = fx.connect_client();
    let before = tools_list(&mut a);
    assert_eq!(tool_names(&before), vec!["echo", "add"]);
    assert_eq!(
        Client::text(&a.call(next_id(), "add", json!({"a": 2, "b": 3}))),
        "5"
    );
    let pid = pid_of(&mut a);
    kill9(pid);
    assert!(
        fx.sup.wait_log("signal(SIGKILL)", Duration::from_secs(5)),
        "the supervisor saw the kill; log:\n{}",
        fx.sup.log()
    );
    // The gap: backoff (≥ 240 ms) plus the replacement's 1.5 s before answering initialize.
    let during = tools_list(&mut a);
    assert!(during.get("error").is_none(), "{during}");
    assert_eq!(
        tool_names(&during),
        vec!["echo", "add"],
        "last known list, never empty: {during}"
    );
    for t in during["result"]["tools"].as_array().unwrap() {
        let d = t["description"].as_str().unwrap_or_default();
        assert!(
            d.starts_with(&format!("fake tool {}", t["name"].as_str().unwrap()))
                && d.contains("unavailable"),
            "description marked unavailable: {d:?}"
        );
    }
    let r = echo(&mut a, "in the gap");
    let record = outage_result(&r, &["starting", "backoff"]);
    let rid = record["request_id"].as_str().unwrap();
    // The log is read from the supervisor's stderr by another thread: wait for the line.
    assert!(
        fx.sup.wait_log(rid, Duration::from_secs(5)),
        "the request id {rid} is in the supervisor log"
    );
    // A client connecting during the outage gets initialize from the cache, while the
    // replacement has not completed its handshake yet.
    let mut c = fx.sup.connect("fake");
    let init = c.initialize("late", json!({}));
    assert_eq!(init["result"]["serverInfo"]["name"], "fake", "{init}");
    assert_eq!(
        fx.saw("notifications/initialized"),
        1,
        "answered before the replacement was ready (from the cache)"
    );
    // Afterwards calls succeed with no client action.
    echo_until_ok(&mut a, "after", Duration::from_secs(15));
    let after = tools_list(&mut a);
    assert_eq!(tool_names(&after), vec!["echo", "add"]);
    for t in after["result"]["tools"].as_array().unwrap() {
        assert!(
            !t["description"]
                .as_str()
                .unwrap_or_default()
                .contains("unavailable"),
            "no outage note once recovered: {after}"
        );
    }
    assert!(
        !got_list_changed(&mut a, Duration::from_millis(500)),
        "no list_changed: the list did not change"
    );
    assert_eq!(fx.instances(), 2);
}

/// A 2026-07-28 client holding a `subscriptions/listen` stream for tool list changes (served
/// by the supervisor on a handshake-era child).
fn modern_listener(fx: &Fx) -> Client {
    let mut c = fx.sup.connect("fake");
    c.send(
        &json!({"jsonrpc": "2.0", "id": "L", "method": "subscriptions/listen", "params": {
        "notifications": {"toolsListChanged": true},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "listener", "version": "1"},
        }}}),
    );
    c.notification(
        "notifications/subscriptions/acknowledged",
        Duration::from_secs(5),
    )
    .expect("the listen stream is acknowledged");
    c
}

/// Kill -9 the child during a call from A while B is idle and C (a 2026 client) holds a
/// listen stream; with `change`, the tools file is edited first so the replacement advertises
/// another list. With `announce`, every instance announces `tools/list_changed` at startup
/// (issue 26 §7: that alone must reach nobody).
fn kill_during_call(change: bool, announce: bool) {
    let files = tempfile::tempdir().unwrap();
    let tools_file = files.path().join("tools");
    std::fs::write(&tools_file, "echo,add").unwrap();
    let tf = tools_file.to_string_lossy().to_string();
    let mut args = vec!["--tools-file", &tf, "--stderr-line", "fake boot banner"];
    if announce {
        args.push("--announce-at-start");
    }
    let fx = Fx::start(&args, "backoff_initial = \"300ms\"\n");
    let mut a = fx.connect_client();
    let mut b = fx.connect_client();
    assert_eq!(tool_names(&tools_list(&mut a)), vec!["echo", "add"]);
    assert_eq!(tool_names(&tools_list(&mut b)), vec!["echo", "add"]);
    // The first instance's announcement, if it came after A or B was initialized, came before
    // their list answers: forget it, only the restart's count.
    a.backlog.clear();
    b.backlog.clear();
    let mut c = modern_listener(&fx);
    let pid = pid_of(&mut a);
    let id = json!("a-slow");
    a.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "slow", "arguments": {"ms": 30000}}}));
    assert!(wait_until(Duration::from_secs(5), || child_id_of_call(
        &fx, "slow"
    )
    .is_some()));
    if change {
        std::fs::write(&tools_file, "echo,add,pid").unwrap();
    }
    kill9(pid);
    let r = a
        .response_timeout(&id, Duration::from_secs(5))
        .expect("A's in-flight call failed");
    // Answered by the exit itself (its record says `exited`, not a timeout); that the answer
    // goes out at the exit's instant is the scenario `every_call_of_a_closing_client_is_
    // answered_when_the_child_exits`.
    let record = outage_result(&r, &["exited"]);
    assert_eq!(record["reason"], "signal(SIGKILL)", "{r}");
    // The stable vocabulary beside today's text (design.md §6).
    assert_eq!(record["class"], "exited", "{r}");
    assert_eq!(record["detail"], "signal(SIGKILL)", "{r}");
    assert!(
        record["retry_after_ms"].is_u64(),
        "the restart time is known: {r}"
    );
    assert!(
        record["stderr_tail"]
            .as_str()
            .unwrap()
            .contains("fake boot banner"),
        "stderr tail: {r}"
    );
    let rid = record["request_id"].as_str().unwrap();
    assert!(
        fx.sup.wait_log(rid, Duration::from_secs(5)),
        "request id {rid} in the log"
    );
    // Both clients stay connected; their next calls succeed after the restart.
    echo_until_ok(&mut a, "a after", Duration::from_secs(10));
    echo_until_ok(&mut b, "b after", Duration::from_secs(10));
    assert_eq!(fx.instances(), 2);
    // In-flight requests are never replayed to the replacement.
    let second = fx.saw_from_init(2);
    assert!(
        !second
            .iter()
            .any(|v| v["method"] == "tools/call" && v["params"]["name"] == "slow"),
        "the slow call was not replayed: {second:?}"
    );
    if change {
        assert!(
            got_list_changed(&mut b, Duration::from_secs(5)),
            "B is told the list changed across the restart"
        );
        assert!(got_list_changed(&mut a, Duration::from_secs(5)));
        let n = c
            .notification("notifications/tools/list_changed", Duration::from_secs(5))
            .expect("the 2026 client is told on its listen stream");
        assert_eq!(
            n["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], "L",
            "{n}"
        );
        assert_eq!(tool_names(&tools_list(&mut b)), vec!["echo", "add", "pid"]);
        assert!(
            !got_list_changed(&mut b, Duration::from_millis(500)),
            "exactly one list_changed"
        );
        assert!(!got_list_changed(&mut c, Duration::from_millis(100)));
    } else {
        assert!(
            !got_list_changed(&mut b, Duration::from_millis(500)),
            "no list_changed when the list did not change, though the child announced one"
        );
        assert!(!got_list_changed(&mut a, Duration::from_millis(100)));
        assert!(!got_list_changed(&mut c, Duration::from_millis(100)));
        assert_eq!(tool_names(&tools_list(&mut b)), vec!["echo", "add"]);
    }
}

#[test]
fn kill9_during_a_call_fails_it_promptly_and_clients_recover_without_list_changed() {
    kill_during_call(false, true);
}

#[test]
fn kill9_during_a_call_then_changed_tools_sends_one_list_changed() {
    kill_during_call(true, true);
}

/// Issue 26 §7: the change found after a restart reaches a 2026 client's listen stream too,
/// with no announcement of the child's to carry it.
#[test]
fn kill9_then_changed_tools_reaches_a_2026_listen_stream_without_the_child_announcing() {
    kill_during_call(true, false);
}

#[test]
fn in_flight_request_fails_at_once_on_exit_with_structured_error() {
    // The first instance accepts requests and never answers; the replacement works.
    let fx = Fx::start_first_then(
        &[
            "--wedge-after-init",
            "--stderr-line",
            "first instance banner",
        ],
        &[],
        "backoff_initial = \"300ms\"\n",
    );
    let mut a = fx.connect_client();
    let id = json!("read-1");
    a.send(
        &json!({"jsonrpc": "2.0", "id": id, "method": "resources/read",
        "params": {"uri": "fake://one"}}),
    );
    // The actor handles one client's messages in order: once this ping is answered, the
    // read has been written to the (wedged) child.
    let r = a.request(json!("sync"), "ping", json!({}));
    assert_eq!(r["result"], json!({}));
    let pid = fx.pids()[0];
    kill9(pid);
    let r = a
        .response_timeout(&id, Duration::from_secs(5))
        .expect("the in-flight request failed");
    // Answered by the exit itself (its record says `exited`, not a timeout); that the answer
    // goes out at the exit's instant is the scenario `every_call_of_a_closing_client_is_
    // answered_when_the_child_exits`.
    let record = outage_error(&r, &["exited"]);
    let msg = r["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("signal(SIGKILL)"),
        "the message names the exit: {msg}"
    );
    assert_eq!(record["reason"], "signal(SIGKILL)");
    assert!(record["retry_after_ms"].is_u64(), "{r}");
    assert!(
        record["stderr_tail"]
            .as_str()
            .unwrap()
            .contains("first instance banner"),
        "{r}"
    );
    let rid = record["request_id"].as_str().unwrap();
    assert!(
        fx.sup.wait_log(rid, Duration::from_secs(5)),
        "request id {rid} in the log"
    );
    // Not replayed; the next request works on the replacement.
    let r = a.request(next_id(), "resources/read", json!({"uri": "fake://one"}));
    assert_eq!(
        r["result"]["contents"][0]["text"], "fake content of fake://one",
        "{r}"
    );
    assert_eq!(count(&fx.saw_from_init(2), "resources/read"), 1);
}

#[test]
fn tools_list_of_a_server_never_ready_is_an_explicit_error() {
    let fx = Fx::start(
        &["--init-delay", "8000"],
        "start_timeout = \"20s\"\nqueue_wait = \"300ms\"\n",
    );
    // A pipelining client: initialize, initialized and tools/list without waiting.
    let mut a = fx.sup.connect("fake");
    a.send(
        &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "eager", "version": "1"}}}),
    );
    a.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    a.send(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}));
    let r = a
        .response_timeout(&json!(1), Duration::from_secs(4))
        .expect("tools/list is answered after queue_wait");
    assert!(r.get("result").is_none(), "never an (empty) success: {r}");
    outage_error(&r, &["starting"]);
}

#[test]
fn outage_lists_are_the_last_known_results_as_is_when_mark_unavailable_is_off() {
    let fx = Fx::start(
        &["--tools", "echo,add"],
        "mark_unavailable = false\nbackoff_initial = \"3s\"\nbackoff_max = \"6s\"\n",
    );
    let mut a = fx.connect_client();
    let lists = ["tools/list", "prompts/list", "resources/list"];
    let before: Vec<Value> = lists
        .iter()
        .map(|m| a.request(next_id(), m, json!({})))
        .collect();
    for r in &before {
        assert!(r["result"].is_object(), "{r}");
    }
    let r = a.call(next_id(), "crash", json!({}));
    outage_result(&r, &["exited"]);
    for (m, b) in lists.iter().zip(&before) {
        let during = a.request(next_id(), m, json!({}));
        assert_eq!(
            during["result"], b["result"],
            "{m} during the outage is the last known result, as is"
        );
    }
    assert_eq!(fx.instances(), 1, "still in backoff");
}

#[test]
fn request_during_backoff_is_forwarded_when_the_child_returns_within_queue_wait() {
    let fx = Fx::start(&[], "backoff_initial = \"1s\"\nqueue_wait = \"5s\"\n");
    let mut a = fx.connect_client();
    let r = a.call(next_id(), "crash", json!({}));
    outage_result(&r, &["exited"]);
    // Sent during the backoff: held, then forwarded to the replacement.
    let r = echo(&mut a, "waited");
    assert_eq!(Client::text(&r), "waited", "{r}");
    assert_eq!(fx.instances(), 2);
    assert_eq!(count(&fx.saw_from_init(2), "tools/call"), 1);
}

#[test]
fn request_during_backoff_fails_past_queue_wait_with_retry_after() {
    let fx = Fx::start(
        &["--stderr-line", "banner before crash"],
        "backoff_initial = \"4s\"\nbackoff_max = \"8s\"\nqueue_wait = \"300ms\"\n",
    );
    let mut a = fx.connect_client();
    let r = a.call(next_id(), "crash", json!({}));
    outage_result(&r, &["exited"]);
    // Held for queue_wait (300 ms), not the 4 s backoff: on the fake clock, scenario
    // `a_request_during_a_long_backoff_fails_at_queue_wait_with_retry_after`.
    let r = echo(&mut a, "too early");
    let record = outage_result(&r, &["backoff"]);
    let retry = record["retry_after_ms"]
        .as_u64()
        .unwrap_or_else(|| panic!("retry_after_ms during backoff: {r}"));
    assert!(retry > 0 && retry <= 4800, "retry_after_ms {retry}");
    assert_eq!(record["reason"], "signal(SIGKILL)", "{r}");
    assert!(record["stderr_tail"]
        .as_str()
        .unwrap()
        .contains("banner before crash"));
    let r = a.request(next_id(), "resources/read", json!({"uri": "fake://one"}));
    let record = outage_error(&r, &["backoff"]);
    assert!(record["retry_after_ms"].is_u64(), "{r}");
    assert_eq!(fx.instances(), 1, "still in backoff");
}

#[test]
fn requests_beyond_queue_limit_fail_at_once_with_a_documented_status() {
    let fx = Fx::start(
        &[],
        "backoff_initial = \"2s\"\nqueue_wait = \"6s\"\nqueue_limit = 1\n",
    );
    let mut a = fx.connect_client();
    let r = a.call(next_id(), "crash", json!({}));
    outage_result(&r, &["exited"]);
    a.send(
        &json!({"jsonrpc": "2.0", "id": "held", "method": "resources/read",
        "params": {"uri": "fake://one"}}),
    );
    let r = a.request(
        json!("over"),
        "resources/read",
        json!({"uri": "fake://one"}),
    );
    let record = outage_error(&r, &["backoff"]);
    assert!(record["retry_after_ms"].is_u64(), "{r}");
    let r = a.response(&json!("held"));
    assert_eq!(
        r["result"]["contents"][0]["text"], "fake content of fake://one",
        "the held request was forwarded once the child was back: {r}"
    );
}

#[test]
fn restart_replays_subscriptions_and_log_level() {
    let fx = Fx::start(&[], "backoff_initial = \"300ms\"\n");
    let mut a = fx.connect_client();
    let r = a.request(next_id(), "logging/setLevel", json!({"level": "debug"}));
    assert_eq!(r["result"], json!({}), "{r}");
    let r = a.request(
        next_id(),
        "resources/subscribe",
        json!({"uri": "fake://one"}),
    );
    assert_eq!(r["result"], json!({}), "{r}");
    kill9(pid_of(&mut a));
    assert!(
        wait_until(Duration::from_secs(10), || {
            let second = fx.saw_from_init(2);
            second
                .iter()
                .any(|v| v["method"] == "resources/subscribe" && v["params"]["uri"] == "fake://one")
                && second
                    .iter()
                    .any(|v| v["method"] == "logging/setLevel" && v["params"]["level"] == "debug")
        }),
        "the replacement got the subscription and the log level: {:?}",
        fx.saw_from_init(2)
    );
    let second = fx.saw_from_init(2);
    assert_eq!(
        second.get(1).map(|v| v["method"].clone()),
        Some(json!("notifications/initialized")),
        "re-initialized by the supervisor first: {second:?}"
    );
    assert_eq!(count(&second, "initialize"), 1);
    echo_until_ok(&mut a, "back", Duration::from_secs(10));
    let r = a.call(next_id(), "update", json!({"uri": "fake://one"}));
    assert_eq!(Client::text(&r), "ok");
    let n = a
        .notification("notifications/resources/updated", Duration::from_secs(5))
        .expect("the subscription works on the replacement");
    assert_eq!(n["params"]["uri"], "fake://one");
}

#[test]
fn case_k18_child_sigkilled_on_tool_call_fails_the_caller_with_stderr_tail() {
    let fx = Fx::start(
        &["--stderr-line", "boot banner"],
        "backoff_initial = \"300ms\"\n",
    );
    let mut a = fx.connect_client();
    let mut b = fx.connect_client();
    // The caller learns from the exit itself (its record names the signal), at the exit's
    // instant: scenario `every_call_of_a_closing_client_is_answered_when_the_child_exits`.
    let r = a.call(next_id(), "crash", json!({}));
    let record = outage_result(&r, &["exited"]);
    assert_eq!(record["reason"], "signal(SIGKILL)", "{r}");
    assert!(Client::text(&r).contains("reason=signal(SIGKILL)"));
    assert!(
        record["stderr_tail"]
            .as_str()
            .unwrap()
            .contains("boot banner"),
        "{r}"
    );
    // Then the restart policy applies and the next calls succeed.
    echo_until_ok(&mut a, "after crash", Duration::from_secs(10));
    echo_until_ok(&mut b, "b after crash", Duration::from_secs(10));
    assert_eq!(fx.instances(), 2);
}

#[test]
fn case_k18_child_dying_at_startup_fails_waiting_clients_with_exit_and_stderr() {
    let fx = Fx::start(
        &[
            "--stderr-line",
            "Error: EXAMPLE_API_KEY is not set",
            "--exit-at-start",
            "1",
        ],
        "start_timeout = \"3s\"\nbackoff_initial = \"100ms\"\nbackoff_max = \"200ms\"\n",
    );
    let mut a = fx.sup.connect("fake");
    let id = json!(0);
    a.send(
        &json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "k18", "version": "1"}}}),
    );
    let r = a
        .response_timeout(&id, Duration::from_secs(6))
        .expect("initialize is answered within start_timeout");
    let record = outage_error(&r, &["starting", "backoff", "failed", "exited"]);
    // The child exits at once with 1; when the supervisor's first write to it lost the race
    // with that exit (EPIPE), the reason names that cause first: `stdin-failed exited(1)`.
    let reason = record["reason"].as_str().unwrap_or("");
    assert!(
        reason == "exited(1)" || reason == "stdin-failed exited(1)",
        "names the exit status: {r}"
    );
    assert_eq!(record["class"], "exited", "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("exited(1)")),
        "the message names the exit: {r}"
    );
    assert!(
        record["stderr_tail"]
            .as_str()
            .unwrap()
            .contains("EXAMPLE_API_KEY"),
        "the user reads EXAMPLE_API_KEY: {r}"
    );
}

#[test]
fn case_k19_crash_loop_gives_fast_explicit_errors_with_retry_after_and_stderr() {
    let fx = Fx::start(
        &[
            "--stderr-line",
            "missing EXAMPLE_TOKEN",
            "--exit-after",
            "400",
        ],
        "backoff_initial = \"300ms\"\nbackoff_max = \"2s\"\nqueue_wait = \"200ms\"\n",
    );
    let clients: Vec<Client> = (0..4).map(|_| fx.connect_client()).collect();
    let end = Instant::now() + Duration::from_secs(5);
    let workers: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(k, mut c)| {
            std::thread::spawn(move || {
                let mut explained = 0;
                let mut with_retry = 0;
                let mut n = 0;
                while Instant::now() < end {
                    n += 1;
                    // Fast: held at most queue_wait, never the backoff (on the fake clock:
                    // `a_request_during_a_long_backoff_fails_at_queue_wait_with_retry_after`).
                    let r = c.request(next_id(), "tools/list", json!({}));
                    if r.get("error").is_some() {
                        outage_error(&r, &["starting", "backoff", "exited"]);
                    } else {
                        assert!(!tool_names(&r).is_empty(), "never an empty list: {r}");
                    }
                    let text = format!("c{k}-{n}");
                    let r = c.call(next_id(), "echo", json!({"text": text}));
                    if is_failure(&r) {
                        let record = outage_result(&r, &["starting", "backoff", "exited"]);
                        if record["status"] != "starting" {
                            assert!(
                                record["stderr_tail"]
                                    .as_str()
                                    .unwrap()
                                    .contains("missing EXAMPLE_TOKEN"),
                                "the last stderr line: {r}"
                            );
                            assert!(
                                Client::text(&r).contains("missing EXAMPLE_TOKEN"),
                                "the text carries the last stderr line: {r}"
                            );
                        }
                        if record["status"] == "backoff" {
                            assert!(record["retry_after_ms"].is_u64(), "{r}");
                            with_retry += 1;
                        }
                        explained += 1;
                    } else {
                        assert_eq!(Client::text(&r), text);
                    }
                    std::thread::sleep(Duration::from_millis(150));
                }
                (explained, with_retry)
            })
        })
        .collect();
    // At most one live instance at any time.
    while Instant::now() < end {
        let live = fx.pids().into_iter().filter(|p| alive(*p)).count();
        assert!(live <= 1, "{live} live instances");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut explained = 0;
    let mut with_retry = 0;
    for w in workers {
        let (e, r) = w.join().expect("a client saw a bad answer");
        explained += e;
        with_retry += r;
    }
    assert!(explained > 0, "the crash loop was visible to clients");
    assert!(
        with_retry > 0,
        "clients were told when the next attempt comes (retry_after)"
    );
    assert!(fx.instances() >= 3, "a crash loop happened");
}

/// Regression (found in a new-user trial): while a child declared dead is stopped through the
/// ladder, the supervisor neither probes it nor spins; `status` says `stopping`.
#[test]
fn a_child_being_stopped_for_silence_is_not_probed_and_status_says_stopping() {
    let sup = Supervisor::start(&fake_server(
        "fake",
        &["--wedge-after-init"],
        "probe_interval = \"200ms\"\nprobe_timeout = \"200ms\"\nprobe_failures = 1\nstop_grace = \"3s\"",
    ));
    let status = || -> serde_json::Value {
        let out = std::process::Command::new(SUPERVISOR)
            .args(["status", "--json", "-c"])
            .arg(&sup.config)
            .output()
            .unwrap();
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()["servers"][0].clone()
    };
    assert!(
        sup.wait_log("the child stopped answering", Duration::from_secs(10)),
        "{}",
        sup.log()
    );
    let first = status();
    assert_eq!(first["state"], "stopping", "{first}");
    // That the probe count does not move within stop_grace is asserted on the fake clock
    // (scenario `a_silent_ready_child_gets_one_ping_then_its_confirmation_then_is_stopped`,
    // through four probe intervals of the stop), not by sleeping here.
}
