//! Issue 29: url servers, remote MCP servers over Streamable HTTP as upstreams. Real HTTP MCP
//! servers started on loopback (server-everything in its Streamable HTTP mode, a fastmcp HTTP
//! server) serve the same SDK clients as children do, on every client path; the three field
//! incidents (a server that refuses `ping`, a POST-only server that answers GET with 405, a
//! server that forgets sessions and refuses requests before `notifications/initialized`)
//! are reproduced by `tests/fixtures/http_incidents.py`; HTTP error statuses, an unreachable
//! server, credentials and TLS are checked as a user sees them.

use crate::harness::*;
use crate::http::HttpSup;
use crate::interop::Interop;
use crate::interop_http::{py, py_attach, run_all, ts};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A server process on loopback, terminated when dropped.
pub(crate) struct Remote {
    child: Option<Child>,
    pub(crate) port: u16,
    /// Its request log (http_incidents.py only).
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Remote {
    fn drop(&mut self) {
        if let Some(c) = self.child.take() {
            terminate(c);
        }
    }
}

impl Remote {
    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    /// The same server's URL at `host` (it must listen there: `--bind`).
    pub(crate) fn url_at(&self, host: &str) -> String {
        format!("http://{host}:{}/mcp", self.port)
    }

    /// Its log file's text (tinyproxy's log for [`tinyproxy`]).
    pub(crate) fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The JSON lines the fixture logged, one per HTTP request.
    pub(crate) fn requests(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// How many requests carried JSON-RPC method `rpc` over HTTP method `http`.
    pub(crate) fn count(&self, http: &str, rpc: &str) -> usize {
        self.requests()
            .iter()
            .filter(|r| r["method"] == http && r["rpc"] == rpc)
            .count()
    }
}

pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub(crate) fn wait_port(port: u16) -> bool {
    wait_until(Duration::from_secs(60), || {
        TcpStream::connect(("127.0.0.1", port)).is_ok()
    })
}

/// `tests/fixtures/http_incidents.py` with `args`, on `port` (0: any).
pub(crate) fn incidents_on(port: u16, args: &[&str]) -> Remote {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("requests.jsonl");
    let mut child = Command::new("python3")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/http_incidents.py"
        ))
        .args(["--port", &port.to_string(), "--log"])
        .arg(&log)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("python3");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line
        .trim()
        .strip_prefix("listening ")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("http_incidents.py said {line:?}"));
    Remote {
        child: Some(child),
        port,
        log,
        _dir: dir,
    }
}

pub(crate) fn incidents(args: &[&str]) -> Remote {
    incidents_on(0, args)
}

/// server-everything in its Streamable HTTP mode (`PORT`), as installed by `.ci/install-deps`.
pub(crate) fn everything_http(io: &Interop) -> Remote {
    let port = free_port();
    let js = io
        .var("MCPSUP_EVERYTHING_ARGS")
        .split_whitespace()
        .next()
        .unwrap()
        .to_string();
    let child = Command::new(io.var("MCPSUP_EVERYTHING_SERVER"))
        .args([js.as_str(), "streamableHttp"])
        .env("PORT", port.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("node");
    let r = Remote {
        child: Some(child),
        port,
        log: PathBuf::new(),
        _dir: tempfile::tempdir().unwrap(),
    };
    assert!(
        wait_port(port),
        "server-everything did not listen on {port}"
    );
    r
}

/// The fastmcp test server over HTTP.
fn fastmcp_http(io: &Interop) -> Remote {
    let port = free_port();
    let child = Command::new(io.var("MCPSUP_FASTMCP_PYTHON"))
        .arg(io.var("MCPSUP_FASTMCP_SERVER"))
        .args(["--http", &port.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("fastmcp");
    let r = Remote {
        child: Some(child),
        port,
        log: PathBuf::new(),
        _dir: tempfile::tempdir().unwrap(),
    };
    assert!(wait_port(port), "fastmcp did not listen on {port}");
    r
}

pub(crate) fn wait_state(sup: &Supervisor, name: &str, state: &str) -> bool {
    wait_until(Duration::from_secs(30), || {
        sup.server_status(name)["state"] == state
    })
}

/// A client of `name` that finished its handshake.
pub(crate) fn ready_client(sup: &Supervisor, name: &str) -> Client {
    assert!(
        wait_state(sup, name, "ready"),
        "{name} never ready: {}\n{}",
        sup.server_status(name),
        sup.log()
    );
    let mut c = sup.client(name);
    c.initialize("remote-test", json!({}));
    c
}

fn echo(c: &mut Client, id: i64, text: &str) -> Value {
    c.call(json!(id), "echo", json!({"text": text}))
}

/// The outage record of a tool call's result.
pub(crate) fn outage(resp: &Value) -> &Value {
    &resp["result"]["_meta"]["mcp-supervisor/outage"]
}

#[test]
fn remote_server_everything_serves_sdk_clients_on_every_client_path() {
    let io = Interop::load();
    let remote = everything_http(&io);
    let s = HttpSup::start(&format!(
        "[servers.everything]\nurl = {:?}\nhttp = true\n",
        remote.url()
    ));
    assert!(wait_state(&s.sup, "everything", "ready"), "{}", s.sup.log());
    let runs = vec![
        (
            "python handshake everything (http front end)".to_string(),
            py(&io, &s, false, "handshake", "everything"),
        ),
        (
            "python modern features (http front end)".to_string(),
            py(&io, &s, false, "modern", "features"),
        ),
        (
            "ts v2 auto features (http front end)".to_string(),
            ts(&io, &s, false, "v2", "auto", "features"),
        ),
        (
            "socket client through attach, handshake".to_string(),
            py_attach(&io, &s, "handshake"),
        ),
        (
            "socket client through attach, modern".to_string(),
            py_attach(&io, &s, "modern"),
        ),
    ];
    run_all(&s, runs);
    let st = s.sup.server_status("everything");
    assert_eq!(st["pid"], Value::Null);
    assert_eq!(st["remote"]["session"], true, "{st}");
    assert_eq!(st["remote"]["url"], remote.url());
    assert_eq!(st["restarts"], 0, "{st}");
}

/// A fastmcp 4 server over HTTP speaks both eras: pinned to the handshake era it serves
/// everything (elicitation included); under `auto` the supervisor settles on 2026-07-28 (its
/// `server/discover` over HTTP, with the standard headers), where fastmcp 4.2 refuses
/// request-style elicitation exactly as it does to a direct 2026 client, so that step is
/// skipped there (as in the stdio matrix, `interop_matrix.rs`).
#[test]
fn remote_fastmcp_http_server_in_both_eras_through_attach() {
    let io = Interop::load();
    let remote = fastmcp_http(&io);
    let sup = Supervisor::start(&format!(
        "[servers.fm]\nurl = {url:?}\nprotocol = \"2025-11-25\"\n\n[servers.fm26]\nurl = {url:?}\n",
        url = remote.url()
    ));
    for (name, extra, era) in [
        ("fm", &[][..], "2025-11-25"),
        ("fm26", &["--skip-elicit"][..], "2026-07-28"),
    ] {
        assert!(wait_state(&sup, name, "ready"), "{}", sup.log());
        assert_eq!(sup.server_status(name)["era"], era);
        let out = Command::new(io.var("MCPSUP_INTEROP_PYTHON"))
            .arg(io.var("MCPSUP_INTEROP_CLIENT"))
            .args(["--timeout", "90"])
            .args(extra)
            .args(["fastmcp", "--", SUPERVISOR, "attach", name, "-c"])
            .arg(&sup.config)
            .env("MCPSUP_TEST_ID", &sup.id)
            .output()
            .unwrap();
        crate::interop::check(
            out,
            &format!("the SDK client (fastmcp over HTTP, {era})"),
            &sup,
        );
    }
}

/// Incident 1 (Slack): `ping` refused with -32601 is an answer; the server stays ready.
#[test]
fn remote_incident_a_server_that_refuses_ping_stays_ready() {
    let remote = incidents(&["--refuse-ping"]);
    let sup = Supervisor::start(&format!(
        "[servers.slack]\nurl = {:?}\nprobe_interval = \"200ms\"\n",
        remote.url()
    ));
    let mut c = ready_client(&sup, "slack");
    assert!(
        sup.wait_probes_answered("slack", 3, Duration::from_secs(30)),
        "{}",
        sup.server_status("slack")
    );
    assert_eq!(Client::text(&echo(&mut c, 1, "still here")), "still here");
    let st = sup.server_status("slack");
    assert_eq!(
        (st["state"].as_str(), st["restarts"].as_u64()),
        (Some("ready"), Some(0)),
        "{st}"
    );
    assert!(remote.count("POST", "ping") >= 3);
    assert_eq!(
        remote.count("POST", "initialize"),
        1,
        "{:?}",
        remote.requests()
    );
}

/// Incident 2 (Tableau): a POST-only server answers GET with 405; it is ready, never probed
/// with GET, and serves calls.
#[test]
fn remote_incident_a_post_only_server_answering_get_with_405_is_ready() {
    let remote = incidents(&["--post-only"]);
    let sup = Supervisor::start(&format!(
        "[servers.tableau]\nurl = {:?}\nprobe_interval = \"200ms\"\n",
        remote.url()
    ));
    let mut c = ready_client(&sup, "tableau");
    assert!(sup.wait_probes_answered("tableau", 2, Duration::from_secs(30)));
    assert_eq!(Client::text(&echo(&mut c, 1, "post only")), "post only");
    let gets: Vec<Value> = remote
        .requests()
        .into_iter()
        .filter(|r| r["method"] == "GET")
        .collect();
    // At most the one optional stream the session offers to open; never a GET probe.
    assert!(gets.len() <= 1, "{gets:?}");
    assert!(gets.iter().all(|g| g["status"] == 405), "{gets:?}");
    assert_eq!(sup.server_status("tableau")["restarts"], 0);
}

/// Incident 3 (Salesforce behind a registry): a server that refuses every request before
/// `notifications/initialized` and forgets sessions: the supervisor always sends it first, and a
/// request that finds its session gone is sent again on a fresh one, never lost.
#[test]
fn remote_incident_strict_sessions_that_expire_never_lose_a_call() {
    let remote = incidents(&["--strict-session"]);
    let sup = Supervisor::start(&format!(
        "[servers.sf]\nurl = {:?}\nprobe_interval = \"1h\"\n",
        remote.url()
    ));
    let mut c = ready_client(&sup, "sf");
    assert_eq!(Client::text(&echo(&mut c, 1, "first")), "first");
    // The server forgets the session (as one does when a session expires).
    assert_eq!(
        Client::text(&c.call(json!(9), "expire", json!({}))),
        "expired"
    );
    assert_eq!(Client::text(&echo(&mut c, 2, "second")), "second");
    let reqs = remote.requests();
    let initializes = remote.count("POST", "initialize");
    assert_eq!(initializes, 2, "a fresh session after the expiry: {reqs:?}");
    // Every initialize is followed by notifications/initialized before any other request.
    for (i, r) in reqs.iter().enumerate() {
        if r["rpc"] == "initialize" {
            let next = reqs[i + 1..]
                .iter()
                .find(|n| n["method"] == "POST")
                .unwrap();
            assert_eq!(next["rpc"], "notifications/initialized", "{reqs:?}");
        }
    }
    assert!(
        reqs.iter().any(|r| r["status"] == 404),
        "the expiry was seen: {reqs:?}"
    );
    let st = sup.server_status("sf");
    assert_eq!(
        (st["state"].as_str(), st["restarts"].as_u64()),
        (Some("ready"), Some(0)),
        "{st}"
    );
}

/// Bare HTTP statuses are answers with a stable class; the server stays ready.
#[test]
fn remote_http_error_statuses_reach_the_caller_with_their_class() {
    let remote = incidents(&[]);
    // Calls get 5 s: the 429 below (Retry-After 7 s) cannot be waited out within it.
    let sup = Supervisor::start(&format!(
        "[servers.api]\nurl = {:?}\nmethod_timeouts = {{ \"tools/call\" = \"5s\" }}\n",
        remote.url()
    ));
    let mut c = ready_client(&sup, "api");
    let limited = c.call(json!(1), "status", json!({"code": 429, "retry_after": 7}));
    assert_eq!(limited["result"]["isError"], true, "{limited}");
    let o = outage(&limited);
    assert_eq!(
        (o["class"].as_str(), o["server"].as_str()),
        (Some("rate_limited"), Some("api")),
        "{o}"
    );
    assert_eq!(o["retry_after_ms"], 7000, "{o}");
    for (id, code, class) in [
        (2, 503, "upstream_error"),
        (3, 401, "auth_failed"),
        (4, 403, "auth_failed"),
        (5, 400, "upstream_error"),
    ] {
        let r = c.call(json!(id), "status", json!({"code": code}));
        assert_eq!(outage(&r)["class"], class, "{code}: {r}");
        assert!(Client::text(&r).contains(&format!("HTTP {code}")), "{r}");
    }
    // A non-tool request refused the same way is a JSON-RPC error with the same record.
    assert_eq!(Client::text(&echo(&mut c, 6, "fine")), "fine");
    let st = sup.server_status("api");
    assert_eq!(
        (st["state"].as_str(), st["restarts"].as_u64()),
        (Some("ready"), Some(0)),
        "{st}"
    );
    assert_eq!(st["remote"]["last_http_status"], 200, "{st}");
    let metrics = sup.metrics();
    for (class, n) in [
        ("rate_limited", 1),
        ("auth_failed", 2),
        ("upstream_error", 2),
    ] {
        let line = format!(
            "mcp_supervisor_upstream_refusals_total{{server=\"api\",class=\"{class}\"}} {n}"
        );
        assert!(metrics.contains(&line), "{line} missing:\n{metrics}");
    }
}

/// A server that cannot be reached is `unreachable` (with the detail), retried with backoff
/// forever (never `failed`), and served again as soon as it listens.
#[test]
fn remote_unreachable_server_backs_off_forever_and_comes_back() {
    let port = free_port();
    let sup = Supervisor::start(&format!(
        "[servers.down]\nurl = \"http://127.0.0.1:{port}/mcp\"\nbackoff_initial = \"50ms\"\nbackoff_max = \"200ms\"\nqueue_wait = \"0s\"\n"
    ));
    // Past the five failed starts that fail a child.
    assert!(
        wait_until(Duration::from_secs(30), || {
            let st = sup.server_status("down");
            st["consecutive_failures"].as_u64().unwrap_or(0) >= 7
        }),
        "{}",
        sup.server_status("down")
    );
    let st = sup.server_status("down");
    assert_ne!(st["state"], "failed", "{st}");
    assert_eq!(
        st["last_exit"]["reason"], "unreachable(connect_refused)",
        "{st}"
    );
    assert!(
        st["remote"]["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("connect_refused")),
        "{st}"
    );
    let mut c = sup.client("down");
    c.initialize("remote-test", json!({}));
    let r = echo(&mut c, 1, "anyone?");
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert_eq!(outage(&r)["class"], "unreachable", "{r}");
    assert_eq!(outage(&r)["detail"], "connect_refused", "{r}");
    let remote = incidents_on(port, &[]);
    assert!(wait_state(&sup, "down", "ready"), "{}", sup.log());
    assert_eq!(Client::text(&echo(&mut c, 2, "back")), "back");
    drop(remote);
}

/// Credentials come from the environment and from files, reach the server, and are shown
/// nowhere: not in the log, `status`, metrics or `check-config`. A refused credential stops
/// the session without a reconnect loop, and calls say `auth_failed`.
#[test]
fn remote_credentials_reach_the_server_and_are_shown_nowhere() {
    const SECRET: &str = "tok-5ecret-6f1d2c";
    let remote = incidents(&[
        "--require-header",
        &format!("Authorization=Bearer {SECRET}"),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let wrong = dir.path().join("wrong.token");
    std::fs::write(&wrong, "not-the-token\n").unwrap();
    let servers = format!(
        "[servers.good]\nurl = {url:?}\nheaders = {{ Authorization = {{ env = \"REMOTE_TEST_TOKEN\", prefix = \"Bearer \" }} }}\n\n[servers.bad]\nurl = {url:?}\nheaders = {{ Authorization = {{ file = {wrong:?}, prefix = \"Bearer \" }} }}\n",
        url = remote.url(),
    );
    let mut sup = Supervisor::spawn_config(
        "metrics_listen = \"127.0.0.1:0\"",
        &servers,
        &[("REMOTE_TEST_TOKEN", SECRET)],
    );
    assert!(
        wait_until(Duration::from_secs(10), || sup.socket("good").exists()
            && sup.socket("bad").exists()),
        "{}",
        sup.log()
    );
    let mut c = ready_client(&sup, "good");
    assert_eq!(Client::text(&echo(&mut c, 1, "authorized")), "authorized");
    assert!(
        wait_state(&sup, "bad", "auth_required"),
        "{}",
        sup.server_status("bad")
    );
    let bad = sup.server_status("bad");
    assert!(
        bad["last_exit"]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("auth-failed")),
        "{bad}"
    );
    let mut b = sup.client("bad");
    b.initialize("remote-test", json!({}));
    let r = echo(&mut b, 1, "let me in");
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert_eq!(outage(&r)["class"], "auth_failed", "{r}");
    assert_eq!(outage(&r)["status"], "auth_required", "{r}");
    // No reconnect loop: one refused request, and no retry scheduled.
    let refused = remote
        .requests()
        .iter()
        .filter(|r| r["status"] == 401)
        .count();
    assert_eq!(refused, 1, "{:?}", remote.requests());
    assert_eq!(sup.server_status("bad")["retry_in_ms"], Value::Null);
    let check = Command::new(SUPERVISOR)
        .args(["check-config", "-c"])
        .arg(&sup.config)
        .env("REMOTE_TEST_TOKEN", SECRET)
        .output()
        .unwrap();
    let shown = [
        sup.log(),
        sup.status_json().to_string(),
        sup.metrics(),
        String::from_utf8_lossy(&check.stdout).into_owned(),
        String::from_utf8_lossy(&check.stderr).into_owned(),
        r.to_string(),
        std::fs::read_to_string(&remote.log).unwrap(),
    ];
    for text in shown {
        assert!(
            !text.contains(SECRET) && !text.contains("not-the-token"),
            "a secret is shown:\n{text}"
        );
    }
    sup.stop();
}

/// TLS: a CA and a server certificate made here; the server is trusted through
/// `tls_ca_file`, refused without it (`unreachable`, detail `tls`), and accepted with the
/// loudly logged `tls_skip_verify`.
#[test]
fn remote_tls_with_a_private_ca() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = make_certificates(dir.path());
    let remote = incidents(&[
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ]);
    let url = format!("https://localhost:{}/mcp", remote.port);
    let sup = Supervisor::start(&format!(
        "[servers.trusted]\nurl = {url:?}\ntls_ca_file = {ca:?}\n\n[servers.untrusted]\nurl = {url:?}\nbackoff_initial = \"100ms\"\nbackoff_max = \"200ms\"\n\n[servers.skip]\nurl = {url:?}\ntls_skip_verify = true\n"
    ));
    let mut c = ready_client(&sup, "trusted");
    assert_eq!(Client::text(&echo(&mut c, 1, "over tls")), "over tls");
    let mut s = ready_client(&sup, "skip");
    assert_eq!(Client::text(&echo(&mut s, 1, "unverified")), "unverified");
    assert!(sup.log().contains("NOT verified"), "{}", sup.log());
    assert!(
        wait_until(Duration::from_secs(30), || sup.server_status("untrusted")
            ["last_exit"]["reason"]
            == "unreachable(tls)"),
        "{}",
        sup.server_status("untrusted")
    );
    assert_ne!(sup.server_status("untrusted")["state"], "ready");
}

/// Issue 47 §8 (N23): `tls_ca_file` naming the server's own self-signed certificate (a CA
/// certificate, as `openssl req -x509` makes) is refused by rustls as `CaUsedAsEndEntity`;
/// status and the log say what is wrong and what to do instead.
#[test]
fn remote_tls_ca_file_naming_the_servers_own_certificate_says_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "self.key",
            "-out",
            "self.pem",
            "-days",
            "2",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost",
        ])
        .current_dir(dir.path())
        .output()
        .expect("openssl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (cert, key) = (dir.path().join("self.pem"), dir.path().join("self.key"));
    let remote = incidents(&[
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ]);
    let url = format!("https://localhost:{}/mcp", remote.port);
    let sup = Supervisor::start(&format!(
        "[servers.self]\nurl = {url:?}\ntls_ca_file = {cert:?}\nbackoff_initial = \"100ms\"\nbackoff_max = \"200ms\"\n"
    ));
    assert!(
        wait_until(Duration::from_secs(30), || sup.log().contains(
            "tls_ca_file must name the CA that signed the server's certificate"
        )),
        "{}",
        sup.log()
    );
    let status = sup.server_status("self").to_string();
    assert!(status.contains("tls_ca_file must name the CA"), "{status}");
}

/// A CA and a certificate for `localhost` signed by it, made with the `openssl` command.
fn make_certificates(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let run = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=mcp-supervisor test CA",
    ]);
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=localhost",
    ]);
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\n",
    )
    .unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "2",
        "-extfile",
        "ext.cnf",
    ]);
    (
        dir.join("ca.pem"),
        dir.join("server.pem"),
        dir.join("server.key"),
    )
}

/// Runs one client scenario of the pinned conformance suite with `driver` (a script under
/// `tests/conformance/`) as the client, and returns every check it recorded and the suite's
/// own output (for failure messages).
fn conformance_client(io: &Interop, scenario: &str, driver: &str) -> (Vec<Value>, String) {
    let out_dir = tempfile::tempdir().unwrap();
    let dir = out_dir.path().join("out");
    let out = Command::new(io.var("MCPSUP_INTEROP_NODE"))
        .arg("--require")
        .arg(io.var("MCPSUP_NODE20_SHIM"))
        .args([
            io.var("MCPSUP_CONFORMANCE_STABLE"),
            "client",
            "--scenario",
            scenario,
            "--timeout",
            "90000",
            "--command",
        ])
        .arg(format!(
            "python3 {}/tests/conformance/{driver} {SUPERVISOR}",
            env!("CARGO_MANIFEST_DIR")
        ))
        .arg("-o")
        .arg(&dir)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    // `<out>/<scenario>-<time>/checks.json`; an `auth/x` scenario is one directory deeper.
    let mut checks: Vec<Value> = Vec::new();
    let mut dirs = vec![dir.clone()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.file_name().is_some_and(|n| n == "checks.json") {
                let text = std::fs::read_to_string(&p).unwrap_or_default();
                checks.extend(serde_json::from_str::<Vec<Value>>(&text).unwrap_or_default());
            }
        }
    }
    let report = format!(
        "{scenario}: {}\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (checks, report)
}

/// The checks of a scenario that are neither SUCCESS nor INFO (the suite fails a scenario on
/// any FAILURE or WARNING).
fn not_passed(checks: &[Value]) -> Vec<&Value> {
    checks
        .iter()
        .filter(|c| c["status"] != "SUCCESS" && c["status"] != "INFO")
        .collect()
}

/// The official conformance suite's client scenarios that need no authorization pass with the
/// supervisor as the client: `tests/conformance/client_driver.py` puts the scenario's URL into
/// a config as a url server and calls through `attach`; the suite checks what the supervisor
/// sends (the handshake, the tool call, elicitation relayed to the caller, SSE resumed after
/// the server's `retry` with `Last-Event-ID`). Every check must be SUCCESS or INFO.
#[test]
fn remote_conformance_client_scenarios_pass_with_the_supervisor_as_the_client() {
    let io = Interop::load();
    for scenario in [
        "initialize",
        "tools_call",
        "elicitation-sep1034-client-defaults",
        "sse-retry",
    ] {
        let (checks, report) = conformance_client(&io, scenario, "client_driver.py");
        assert!(
            checks.iter().any(|c| c["status"] == "SUCCESS"),
            "no check passed; {report}"
        );
        let bad = not_passed(&checks);
        assert!(bad.is_empty(), "{bad:?}\n{report}");
    }
}

/// Issue 30 §4: every `auth/*` client scenario of the pinned conformance suite, one at a time,
/// with the supervisor as the OAuth client (`tests/conformance/auth_driver.py`: a url server
/// configured as an operator would, `login` with a `$BROWSER` that follows the redirects,
/// calls through `attach`). All pass but cross-app access (SEP-990: an enterprise IdP's ID
/// token exchanged for an ID-JAG), which the supervisor has no configuration for: exactly its
/// two flow checks fail (docs/CONFORMANCE.md says why).
#[test]
fn remote_conformance_auth_scenarios_pass_with_the_supervisor_as_the_oauth_client() {
    let io = Interop::load();
    let listed = Command::new(io.var("MCPSUP_INTEROP_NODE"))
        .arg("--require")
        .arg(io.var("MCPSUP_NODE20_SHIM"))
        .args([io.var("MCPSUP_CONFORMANCE_STABLE"), "list"])
        .output()
        .unwrap();
    let scenarios: Vec<String> = String::from_utf8_lossy(&listed.stdout)
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with("auth/"))
        .map(str::to_string)
        .collect();
    assert!(scenarios.len() >= 20, "{scenarios:?}");
    let mut failed = Vec::new();
    for scenario in &scenarios {
        let (checks, report) = conformance_client(&io, scenario, "auth_driver.py");
        let bad: Vec<String> = not_passed(&checks)
            .iter()
            .map(|c| c["id"].as_str().unwrap_or("?").to_string())
            .collect();
        if scenario == "auth/cross-app-access-complete-flow" {
            assert_eq!(
                bad,
                ["complete-flow-token-exchange", "complete-flow-jwt-bearer"],
                "{report}"
            );
            continue;
        }
        if checks.is_empty() || !bad.is_empty() {
            failed.push(format!("{bad:?}\n{report}"));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
}

/// tinyproxy (installed by `.ci/install-deps`) on a free loopback port, with a log at level
/// `Connect` (a `Connect (file descriptor N)` line per connection and the request line of
/// each): [`Remote::log_text`].
pub(crate) fn tinyproxy() -> Remote {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let log = dir.path().join("tinyproxy.log");
    let conf = dir.path().join("tinyproxy.conf");
    std::fs::write(
        &conf,
        format!(
            "Port {port}\nListen 127.0.0.1\nTimeout 60\nLogFile {:?}\nLogLevel Connect\nMaxClients 20\nAllow 127.0.0.1\n",
            log
        ),
    )
    .unwrap();
    let tinyproxy = ["/usr/bin/tinyproxy", "/usr/sbin/tinyproxy"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("tinyproxy (installed by .ci/install-deps)");
    let proxy = Command::new(tinyproxy)
        .arg("-d")
        .arg("-c")
        .arg(&conf)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("tinyproxy");
    let proxy = Remote {
        child: Some(proxy),
        port,
        log,
        _dir: dir,
    };
    assert!(wait_port(port), "tinyproxy did not listen");
    proxy
}

/// An IPv4 address of this machine that is not loopback (`ip -4 addr show scope global`,
/// iproute2 from `.ci/install-deps`): a url server there is not loopback to the supervisor,
/// so the environment's proxy applies to it (issue 47 §5).
pub(crate) fn non_loopback_address() -> String {
    let out = Command::new("ip")
        .args(["-o", "-4", "addr", "show", "scope", "global"])
        .output()
        .expect("ip (iproute2, installed by .ci/install-deps)");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .skip_while(|w| *w != "inet")
        .nth(1)
        .and_then(|a| a.split('/').next())
        .map(str::to_string)
        .expect("this machine has no non-loopback IPv4 address to test the proxy with")
}

/// `HTTP_PROXY`/`HTTPS_PROXY` in the supervisor's environment are honoured for a url server
/// that is not on loopback (on loopback they never are, issue 47 §5: `wire.rs`): a real
/// forward proxy (tinyproxy, installed by `.ci/install-deps`) carries the session, and once the
/// proxy is gone the server is unreachable although it still runs.
#[test]
fn remote_requests_go_through_the_proxy_the_environment_names() {
    let host = non_loopback_address();
    let remote = incidents(&["--bind", "0.0.0.0"]);
    let proxy = tinyproxy();
    let via = format!("http://127.0.0.1:{}", proxy.port);
    let mut sup = Supervisor::spawn_config(
        "",
        &format!(
            "[servers.proxied]\nurl = {:?}\nallow_plain_http = true\nbackoff_initial = \"100ms\"\nqueue_wait = \"0s\"\n",
            remote.url_at(&host)
        ),
        &[
            ("HTTP_PROXY", via.as_str()),
            ("HTTPS_PROXY", via.as_str()),
            ("NO_PROXY", ""),
            ("no_proxy", ""),
        ],
    );
    assert!(
        wait_until(Duration::from_secs(10), || sup.socket("proxied").exists()),
        "{}",
        sup.log()
    );
    let mut c = ready_client(&sup, "proxied");
    assert_eq!(Client::text(&echo(&mut c, 1, "via proxy")), "via proxy");
    let seen = proxy.log_text();
    assert!(
        seen.contains(&format!("{host}:{}", remote.port)),
        "the proxy did not carry the session:\n{seen}"
    );
    drop(proxy);
    let r = echo(&mut c, 2, "no proxy");
    assert_eq!(outage(&r)["class"], "unreachable", "{r}");
    sup.stop();
}

fn verb(sup: &Supervisor, args: &[&str]) -> std::process::Output {
    Command::new(SUPERVISOR)
        .args(args)
        .arg("-c")
        .arg(&sup.config)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// The operator's verbs on a url server: `restart` DELETEs the session and opens a new one,
/// `stop` DELETEs it and stays stopped (calls say so), `start` opens one again, and `logs`
/// shows the instance's last errors (there is no stderr).
#[test]
fn remote_operator_verbs_delete_and_reopen_the_session() {
    let remote = incidents(&[]);
    let sup = Supervisor::start(&format!(
        "[servers.ops]\nurl = {:?}\nprobe_interval = \"1h\"\n",
        remote.url()
    ));
    let mut c = ready_client(&sup, "ops");
    let r = c.call(json!(1), "status", json!({"code": 502}));
    assert_eq!(outage(&r)["class"], "upstream_error");
    let logs = verb(&sup, &["logs", "ops"]);
    assert!(
        String::from_utf8_lossy(&logs.stdout).contains("HTTP 502"),
        "{}",
        String::from_utf8_lossy(&logs.stdout)
    );
    assert!(verb(&sup, &["restart", "ops"]).status.success());
    assert!(wait_state(&sup, "ops", "ready"));
    let deletes = || {
        remote
            .requests()
            .iter()
            .filter(|r| r["method"] == "DELETE")
            .count()
    };
    assert_eq!(deletes(), 1, "{:?}", remote.requests());
    assert_eq!(remote.count("POST", "initialize"), 2);
    assert_eq!(
        Client::text(&echo(&mut c, 2, "after restart")),
        "after restart"
    );
    assert!(verb(&sup, &["stop", "ops"]).status.success());
    assert!(wait_state(&sup, "ops", "stopped"));
    assert_eq!(deletes(), 2);
    let r = echo(&mut c, 3, "stopped?");
    assert_eq!(outage(&r)["status"], "stopped", "{r}");
    let st = sup.server_status("ops");
    assert_eq!(st["remote"]["session"], false, "{st}");
    assert!(verb(&sup, &["start", "ops"]).status.success());
    assert!(wait_state(&sup, "ops", "ready"));
    assert_eq!(Client::text(&echo(&mut c, 4, "started")), "started");
    assert_eq!(remote.count("POST", "initialize"), 3);
}

/// A 429 with `Retry-After` is waited out when the call's own deadline allows, and the call
/// is sent again (the caller sees only the answer); when it does not, the caller gets
/// `rate_limited` at once, with `retry_after_ms`.
#[test]
fn remote_rate_limits_are_waited_out_within_the_calls_deadline() {
    let remote = incidents(&[]);
    let sup = Supervisor::start(&format!(
        "[servers.patient]\nurl = {url:?}\n\n[servers.hurried]\nurl = {url:?}\nmethod_timeouts = {{ \"tools/call\" = \"500ms\" }}\n",
        url = remote.url()
    ));
    let mut c = ready_client(&sup, "patient");
    let r = c.call(
        json!(1),
        "limited",
        json!({"key": "patient", "retry_after": 1}),
    );
    assert_eq!(Client::text(&r), "limited ok", "{r}");
    let statuses: Vec<Value> = remote
        .requests()
        .iter()
        .filter(|r| r["rpc"] == "tools/call")
        .map(|r| r["status"].clone())
        .collect();
    assert_eq!(statuses, [json!(429), json!(200)]);
    let mut h = ready_client(&sup, "hurried");
    let r = h.call(
        json!(1),
        "limited",
        json!({"key": "hurried", "retry_after": 2}),
    );
    assert_eq!(outage(&r)["class"], "rate_limited", "{r}");
    assert_eq!(outage(&r)["retry_after_ms"], 2000, "{r}");
}

/// Issue 32 §1 on a url server: an upgrade hands the remote session over. The server sees
/// one `initialize` and no `DELETE`; every POST after the upgrade carries the same
/// `Mcp-Session-Id`; the GET stream is opened again with `Last-Event-ID` naming the last event
/// the old image read; the client's connection and calls go on; `status` still shows the
/// session's age.
#[test]
fn remote_an_upgrade_keeps_the_session_and_resumes_its_stream() {
    let remote = incidents(&["--event-ids"]);
    let sup = Supervisor::start(&format!(
        "[servers.hosted]\nurl = {:?}\nprobe_interval = \"1h\"\n",
        remote.url()
    ));
    let mut c = ready_client(&sup, "hosted");
    assert_eq!(Client::text(&echo(&mut c, 1, "before")), "before");
    let gets = || -> Vec<Value> {
        remote
            .requests()
            .into_iter()
            .filter(|r| r["method"] == "GET" && r["status"] == 200)
            .collect()
    };
    // Events the GET streams sent (each logged just before it is written).
    let events = || {
        remote
            .requests()
            .iter()
            .filter(|r| r["method"] == "EVENT")
            .count()
    };
    // The GET stream is open and has sent at least two events (one a second: the third is
    // logged after the second was written).
    assert!(
        wait_until(Duration::from_secs(20), || gets().len() == 1
            && events() >= 3),
        "{:?}",
        remote.requests()
    );
    let session = gets()[0]["session"].as_str().unwrap().to_string();
    for n in 1..=2 {
        let (code, said) = crate::upgrade::upgrade(&sup);
        assert_eq!(code, Some(0), "upgrade {n}: {said}\n{}", sup.log());
        let r = echo(&mut c, 10 + n, &format!("after {n}"));
        assert_eq!(Client::text(&r), format!("after {n}"), "{r}\n{}", sup.log());
        assert!(
            wait_until(Duration::from_secs(20), || gets().len() == 1 + n as usize),
            "no GET after upgrade {n}: {:?}",
            remote.requests()
        );
        // The resumed stream sends on (its first event at once, then one a second) for two
        // seconds before the next upgrade.
        let sent = events();
        assert!(
            wait_until(Duration::from_secs(20), || events() >= sent + 3),
            "{:?}",
            remote.requests()
        );
    }
    let log = remote.requests();
    assert_eq!(remote.count("POST", "initialize"), 1, "{log:?}");
    assert!(!log.iter().any(|r| r["method"] == "DELETE"), "{log:?}");
    // After the `initialize` (the era probe before it is refused: a handshake-era server).
    let first = log.iter().position(|r| r["rpc"] == "initialize").unwrap();
    for r in log[first + 1..].iter().filter(|r| r["method"] != "EVENT") {
        assert_eq!(r["session"], Value::from(session.as_str()), "{r}");
        assert_eq!(r["status"].as_u64().unwrap_or(0) / 100, 2, "{r}");
    }
    // Each later GET resumed the stream from an event the earlier one sent.
    let gets = gets();
    assert_eq!(gets[0]["last_event_id"], Value::Null);
    for g in &gets[1..] {
        let id = g["last_event_id"].as_str().unwrap_or_else(|| panic!("{g}"));
        let n: u64 = id
            .strip_prefix(&format!("{session}-"))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{id}"));
        assert!(n >= 2, "{id}");
    }
    let st = sup.server_status("hosted");
    assert_eq!(st["remote"]["session"], true, "{st}");
    assert!(
        st["remote"]["session_age_s"].as_u64().unwrap_or(0) >= 4,
        "{st}"
    );
    assert_eq!(st["restarts"], Value::from(0), "{st}");
}
