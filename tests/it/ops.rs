//! Operations (issue 7): the control socket and its CLI verbs, live reload, systemd
//! notifications and socket activation, access control, the socket directory lock, privilege
//! drop. Faults F24-F34 of reference/supervision.md §5.2.

use crate::harness::*;
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixDatagram, UnixListener, UnixStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

// ----- helpers ---------------------------------------------------------------------------------

/// Config text: `[supervisor]` with the harness's socket_dir plus `extra` lines, then servers.
fn config_text(dir: &Path, extra: &str, servers: &str) -> String {
    format!(
        "[supervisor]\nsocket_dir = {:?}\n{extra}\n\n{servers}",
        dir.join("run")
    )
}

fn names(servers: &str) -> Vec<String> {
    servers
        .lines()
        .filter_map(|l| {
            l.trim()
                .strip_prefix("[servers.")?
                .strip_suffix(']')
                .map(str::to_string)
        })
        .collect()
}

/// Starts a supervisor whose `[supervisor]` table also has `extra`, with extra environment;
/// waits for the control socket and every server socket.
fn start_with(extra: &str, servers: &str, env: &[(&str, &str)]) -> Supervisor {
    let dir = tempfile::tempdir().unwrap();
    start_in(dir, extra, servers, env)
}

fn start_in(
    dir: tempfile::TempDir,
    extra: &str,
    servers: &str,
    env: &[(&str, &str)],
) -> Supervisor {
    let config = dir.path().join("supervisor.toml");
    std::fs::write(&config, config_text(dir.path(), extra, servers)).unwrap();
    let mut s = Supervisor::spawn_with(dir, config, env);
    let names = names(servers);
    let ok = wait_until(Duration::from_secs(10), || {
        s.socket("control").exists() && names.iter().all(|n| s.socket(n).exists())
    });
    if !ok {
        s.stop();
        panic!("sockets did not appear; log:\n{}", s.log());
    }
    s
}

/// Rewrites the supervisor's configuration file.
fn rewrite(sup: &Supervisor, extra: &str, servers: &str) {
    std::fs::write(&sup.config, config_text(sup.dir.path(), extra, servers)).unwrap();
}

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

/// Runs `mcp-supervisor ARGS -c <config>`.
fn cli(sup: &Supervisor, args: &[&str]) -> Out {
    cli_at(&sup.config, args)
}

fn cli_at(config: &Path, args: &[&str]) -> Out {
    let out = Command::new(SUPERVISOR)
        .args(args)
        .arg("-c")
        .arg(config)
        .env_remove("MCP_SUPERVISOR_CONFIG")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `status NAME --json`, the one server's object.
fn status_of(sup: &Supervisor, name: &str) -> Value {
    let out = cli(sup, &["status", name, "--json"]);
    assert_eq!(out.code, 0, "status failed: {}\n{}", out.stderr, sup.log());
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    v["servers"][0].clone()
}

fn wait_state(sup: &Supervisor, name: &str, state: &str) -> Value {
    let mut last = Value::Null;
    let ok = wait_until(Duration::from_secs(15), || {
        last = status_of(sup, name);
        last["state"] == state
    });
    assert!(
        ok,
        "{name} never became {state}: {last}\nlog:\n{}",
        sup.log()
    );
    last
}

/// The child pid, from the fake server's `pid` tool.
fn child_pid(c: &mut Client, id: i64) -> i32 {
    let r = c.call(json!(id), "pid", json!({}));
    Client::text(&r)
        .parse()
        .unwrap_or_else(|_| panic!("no pid in {r}"))
}

fn reloaded_lines(sup: &Supervisor) -> usize {
    sup.log().matches("configuration reloaded").count()
}

// ----- control socket and CLI verbs ------------------------------------------------------------

#[test]
fn status_json_has_the_contract_shape() {
    let servers = format!(
        "{}{}",
        fake_server("steady", &["--stderr-line", "hello-tail"], ""),
        fake_server("flaky", &[], "backoff_initial = \"100ms\"")
    );
    let sup = start_with("", &servers, &[]);
    wait_state(&sup, "steady", "ready");
    let mut a = sup.client("steady");
    let mut f = sup.client("flaky");
    f.send(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "exit", "arguments": {"code": 3}}}));
    let flaky = {
        let mut last = Value::Null;
        let ok = wait_until(Duration::from_secs(10), || {
            last = status_of(&sup, "flaky");
            last["state"] == "ready" && last["restarts"] == 1
        });
        assert!(ok, "flaky did not come back: {last}");
        last
    };
    let out = cli(&sup, &["status", "--json"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let v: Value = serde_json::from_str(&out.stdout).expect("status --json is JSON");
    let list = v["servers"].as_array().expect("servers is an array");
    assert_eq!(list.len(), 2);
    for s in list {
        assert!(s["name"].is_string(), "{s}");
        let state = s["state"].as_str().expect("state is a string");
        assert!(
            ["starting", "ready", "backoff", "stopping", "stopped", "failed"].contains(&state),
            "{s}"
        );
        assert!(s["pid"].is_u64() || s["pid"].is_null(), "{s}");
        assert!(s["restarts"].is_u64(), "{s}");
        assert!(s["era"].is_string() || s["era"].is_null(), "{s}");
        assert!(s["clients"].is_u64(), "{s}");
        assert!(s["uptime_s"].is_number() || s["uptime_s"].is_null(), "{s}");
        assert!(
            s["last_exit"].is_object() || s["last_exit"].is_null(),
            "{s}"
        );
        assert!(s["stderr_tail"].is_string(), "{s}");
    }
    let steady = &list[list.iter().position(|s| s["name"] == "steady").unwrap()];
    assert_eq!(steady["state"], "ready");
    assert_eq!(steady["era"], "2025-11-25");
    assert_eq!(steady["clients"], 1);
    assert_eq!(steady["restarts"], 0);
    assert!(steady["last_exit"].is_null(), "{steady}");
    assert!(steady["pid"].as_u64().unwrap() > 0);
    assert!(steady["uptime_s"].as_f64().unwrap() >= 0.0);
    let e = &flaky["last_exit"];
    assert_eq!(e["code"], 3, "{flaky}");
    assert!(e["signal"].is_null(), "{flaky}");
    assert_eq!(e["reason"], "exited(3)");
    assert!(
        humantime::parse_rfc3339(e["at"].as_str().unwrap()).is_ok(),
        "{flaky}"
    );
    // The table names every server with its state.
    let out = cli(&sup, &["status"]);
    assert_eq!(out.code, 0);
    let header = out.stdout.lines().next().unwrap();
    for col in [
        "NAME",
        "ERA",
        "STATE",
        "PID",
        "UPTIME",
        "RESTARTS",
        "CLIENTS",
        "LAST EXIT",
    ] {
        assert!(header.contains(col), "{}", out.stdout);
    }
    let row = out
        .stdout
        .lines()
        .find(|l| l.starts_with("steady"))
        .unwrap();
    assert!(row.contains("ready"), "{}", out.stdout);
    let row = out.stdout.lines().find(|l| l.starts_with("flaky")).unwrap();
    assert!(row.contains("exited(3)"), "{}", out.stdout);
    // `logs` prints the stderr tail.
    let out = cli(&sup, &["logs", "steady"]);
    assert_eq!(out.code, 0);
    assert!(out.stdout.contains("hello-tail"), "{}", out.stdout);
    assert!(a.call(json!(2), "echo", json!({"text": "x"}))["result"].is_object());
}

#[test]
fn stop_start_restart_keep_clients_attached() {
    let sup = start_with("", &fake_server("fake", &[], ""), &[]);
    let mut c = sup.client("fake");
    let pid1 = child_pid(&mut c, 1);

    let out = cli(&sup, &["stop", "fake"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("fake: stopped"), "{}", out.stdout);
    let s = status_of(&sup, "fake");
    assert_eq!(s["state"], "stopped");
    assert!(s["pid"].is_null(), "{s}");
    assert!(wait_until(Duration::from_secs(5), || !alive(pid1)));
    // The client is still connected and told plainly that the server is stopped.
    let r = c.call(json!(2), "echo", json!({"text": "x"}));
    assert_eq!(r["result"]["isError"], true, "{r}");

    let out = cli(&sup, &["start", "fake"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("fake: ready (pid "), "{}", out.stdout);
    assert_eq!(status_of(&sup, "fake")["state"], "ready");
    let pid2 = child_pid(&mut c, 3);
    assert_ne!(pid1, pid2);

    let before = status_of(&sup, "fake")["restarts"].as_u64().unwrap();
    let out = cli(&sup, &["restart", "fake"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let s = status_of(&sup, "fake");
    assert_eq!(s["state"], "ready");
    assert_eq!(s["restarts"].as_u64().unwrap(), before + 1, "{s}");
    assert_ne!(s["pid"].as_u64().unwrap() as i32, pid2);
    assert_eq!(s["clients"], 1, "{s}");
    // The attached client's next call works and reaches the new child.
    let pid3 = child_pid(&mut c, 4);
    assert_eq!(pid3 as u64, s["pid"].as_u64().unwrap());
}

#[test]
fn start_reports_a_server_that_cannot_start() {
    let servers = fake_server("bad", &["--exit-at-start", "78"], "");
    let sup = start_with("", &servers, &[]);
    wait_state(&sup, "bad", "failed");
    let out = cli(&sup, &["start", "bad"]);
    assert_eq!(out.code, 1, "{} {}", out.stdout, out.stderr);
    assert!(
        out.stderr.contains("did not become ready"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("exited(78)"), "{}", out.stderr);
}

#[test]
fn exit_codes_for_unknown_servers_and_a_stopped_supervisor() {
    let mut sup = start_with("", &fake_server("fake", &[], ""), &[]);
    for verb in ["restart", "stop", "start", "logs", "status"] {
        let out = cli(&sup, &[verb, "nope"]);
        assert_eq!(out.code, 4, "{verb}: {}", out.stderr);
        assert!(
            out.stderr.contains("no server named `nope`"),
            "{}",
            out.stderr
        );
    }
    assert_eq!(sup.stop(), Some(0));
    assert!(!sup.socket("control").exists(), "control socket removed");
    let out = cli(&sup, &["status"]);
    assert_eq!(out.code, 3, "{}", out.stderr);
    assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
    assert!(out.stderr.contains("not running"), "{}", out.stderr);
}

// ----- reload ----------------------------------------------------------------------------------

#[test]
fn reload_applies_the_difference() {
    let servers = format!(
        "{}{}{}",
        fake_server("keep", &[], ""),
        fake_server("change", &[], ""),
        fake_server("gone", &[], "")
    );
    let sup = start_with("", &servers, &[]);
    let mut keep = sup.client("keep");
    let mut change = sup.client("change");
    let mut gone = sup.client("gone");
    let keep_pid = child_pid(&mut keep, 1);
    let change_pid = child_pid(&mut change, 1);
    let gone_pid = child_pid(&mut gone, 1);

    let new = format!(
        "{}{}{}",
        fake_server("keep", &[], ""),
        fake_server("change", &["--name", "changed"], ""),
        fake_server("added", &[], "")
    );
    rewrite(&sup, "", &new);
    let out = cli(&sup, &["reload"]);
    assert_eq!(out.code, 0, "{}\n{}", out.stderr, sup.log());
    assert_eq!(
        out.stdout.trim(),
        "reloaded: added added; removed gone; changed change; unchanged keep"
    );
    // Unchanged: same child, same connection.
    assert_eq!(child_pid(&mut keep, 2), keep_pid);
    assert_eq!(status_of(&sup, "keep")["restarts"], 0);
    // Changed: restarted with the new settings, the client stayed connected.
    let s = wait_state(&sup, "change", "ready");
    assert_ne!(s["pid"].as_u64().unwrap() as i32, change_pid);
    assert_eq!(s["clients"], 1, "{s}");
    assert_eq!(child_pid(&mut change, 2) as u64, s["pid"].as_u64().unwrap());
    // Removed: stopped, socket gone, its client disconnected.
    assert!(wait_until(Duration::from_secs(10), || !alive(gone_pid)));
    assert!(!sup.socket("gone").exists());
    assert!(gone.closed_within(Duration::from_secs(5)));
    assert_eq!(cli(&sup, &["status", "gone"]).code, 4);
    // Added: socket bound, child running.
    assert!(sup.socket("added").exists());
    let mut added = sup.client("added");
    assert!(child_pid(&mut added, 1) > 0);
    assert_eq!(reloaded_lines(&sup), 1);
    assert_eq!(
        std::fs::metadata(sup.socket("added")).unwrap().mode() & 0o777,
        0o600
    );
}

#[test]
fn reload_with_an_invalid_file_keeps_the_old_configuration() {
    let sup = start_with("", &fake_server("fake", &[], ""), &[]);
    let mut c = sup.client("fake");
    let pid = child_pid(&mut c, 1);
    // Line 5 of the new file has an unknown key.
    let broken = fake_server("fake", &[], "start_timout = \"1s\"");
    rewrite(&sup, "", &broken);
    let text = std::fs::read_to_string(&sup.config).unwrap();
    let line = text
        .lines()
        .position(|l| l.starts_with("start_timout"))
        .unwrap()
        + 1;
    let out = cli(&sup, &["reload"]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    let at = format!("supervisor.toml:{line}");
    assert!(out.stderr.contains(&at), "{at} not in {}", out.stderr);
    assert!(out.stderr.contains("start_timout"), "{}", out.stderr);
    assert!(sup.wait_log("reload failed", Duration::from_secs(5)));
    assert!(sup.log().contains(&at), "{}", sup.log());
    // SIGHUP with the same file: logged with file:line, nothing changes.
    sup.signal(libc::SIGHUP);
    assert!(sup.wait_log_count("reload failed", 2, Duration::from_secs(15)));
    assert_eq!(child_pid(&mut c, 2), pid);
    assert_eq!(status_of(&sup, "fake")["restarts"], 0);
    assert_eq!(reloaded_lines(&sup), 0);
}

#[test]
fn sighup_storm_is_coalesced_without_flapping() {
    let sup = start_with("", &fake_server("fake", &[], ""), &[]);
    let mut c = sup.client("fake");
    let pid = child_pid(&mut c, 1);
    let start = Instant::now();
    for _ in 0..50 {
        sup.signal(libc::SIGHUP);
        std::thread::sleep(Duration::from_millis(20));
    }
    // The storm lasts about a second; on a loaded machine longer, and R3 allows 3 reloads in
    // each 10 s window it spans.
    let windows = start.elapsed().as_secs() / 10 + 1;
    assert!(sup.wait_log("configuration reloaded", Duration::from_secs(5)));
    // A reload still coalescing the storm's tail may log after the first; no event says the
    // last has run, so this one wait stays (the gate itself: `daemon`'s ReloadGate tests).
    std::thread::sleep(Duration::from_millis(500));
    let n = reloaded_lines(&sup);
    assert!(
        (1..=3 * windows as usize).contains(&n),
        "{n} reloads in {windows} windows:\n{}",
        sup.log()
    );
    assert_eq!(child_pid(&mut c, 2), pid);
    let s = status_of(&sup, "fake");
    assert_eq!(s["restarts"], 0, "{s}");
    assert_eq!(s["pid"].as_u64().unwrap() as i32, pid);
}

// ----- systemd ---------------------------------------------------------------------------------

/// Datagrams received on a NOTIFY_SOCKET the test binds.
struct Notify {
    path: PathBuf,
    got: Arc<Mutex<Vec<(Instant, String)>>>,
}

impl Notify {
    fn bind(dir: &Path) -> Notify {
        let path = dir.join("notify.sock");
        let sock = UnixDatagram::bind(&path).unwrap();
        let got = Arc::new(Mutex::new(Vec::new()));
        let sink = got.clone();
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 65536];
            while let Ok(n) = sock.recv(&mut buf) {
                let text = String::from_utf8_lossy(&buf[..n]).into_owned();
                sink.lock().unwrap().push((Instant::now(), text));
            }
        });
        Notify { path, got }
    }

    fn all(&self) -> Vec<(Instant, String)> {
        self.got.lock().unwrap().clone()
    }

    /// Index of the first datagram at or after `from` with a line starting with `prefix`.
    fn wait(&self, from: usize, prefix: &str) -> Option<usize> {
        let mut found = None;
        wait_until(Duration::from_secs(10), || {
            found = self.all()[from.min(self.all().len())..]
                .iter()
                .position(|(_, m)| m.lines().any(|l| l.starts_with(prefix)))
                .map(|i| i + from);
            found.is_some()
        });
        found
    }
}

fn monotonic_usec() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1000
}

#[test]
fn notify_socket_gets_ready_status_reloading_watchdog_and_stopping() {
    let dir = tempfile::tempdir().unwrap();
    let notify = Notify::bind(dir.path());
    let path = notify.path.to_str().unwrap().to_string();
    let mut sup = start_in(
        dir,
        "",
        &fake_server("fake", &[], ""),
        &[("NOTIFY_SOCKET", &path), ("WATCHDOG_USEC", "200000")],
    );
    let ready = notify.wait(0, "READY=1").expect("READY=1");
    let msgs = notify.all();
    assert!(
        msgs[ready]
            .1
            .lines()
            .any(|l| l.starts_with("STATUS=1 server: ")),
        "{msgs:?}"
    );
    assert!(sup.socket("fake").exists() && sup.socket("control").exists());
    // STATUS= follows the server to ready.
    let mut c = sup.client("fake");
    let pid = child_pid(&mut c, 1);
    let ok = wait_until(Duration::from_secs(5), || {
        notify
            .all()
            .iter()
            .any(|(_, m)| m.contains("STATUS=1 server: 1 ready"))
    });
    assert!(ok, "{:?}", notify.all());
    // The child sees none of the plumbing.
    let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    for kv in env.split(|b| *b == 0) {
        let kv = String::from_utf8_lossy(kv);
        for bad in ["NOTIFY_SOCKET=", "WATCHDOG_", "LISTEN_"] {
            assert!(!kv.starts_with(bad), "child environment has {kv}");
        }
    }
    // WATCHDOG=1 every WATCHDOG_USEC/2 = 100 ms.
    // Ten in a row arrive, none more than 300 ms after the one before.
    let from = notify.all().len();
    let pings_since = |from: usize| -> Vec<Instant> {
        notify.all()[from..]
            .iter()
            .filter(|(_, m)| m == "WATCHDOG=1\n")
            .map(|(t, _)| *t)
            .collect()
    };
    assert!(
        wait_until(Duration::from_secs(5), || pings_since(from).len() >= 10),
        "{:?}",
        notify.all()
    );
    let pings = pings_since(from);
    for w in pings.windows(2) {
        assert!(
            w[1] - w[0] < Duration::from_millis(300),
            "gap {:?}",
            w[1] - w[0]
        );
    }
    // SIGHUP: RELOADING=1 with MONOTONIC_USEC in one datagram, then READY=1.
    let from = notify.all().len();
    let before = monotonic_usec();
    sup.signal(libc::SIGHUP);
    let r = notify.wait(from, "RELOADING=1").expect("RELOADING=1");
    let msg = notify.all()[r].1.clone();
    let usec: u64 = msg
        .lines()
        .find_map(|l| l.strip_prefix("MONOTONIC_USEC="))
        .unwrap_or_else(|| panic!("no MONOTONIC_USEC in {msg:?}"))
        .parse()
        .unwrap();
    assert!(
        usec >= before && usec <= monotonic_usec(),
        "{usec} vs {before}"
    );
    notify
        .wait(r + 1, "READY=1")
        .expect("READY=1 after the reload");
    // A failed reload also ends with READY=1 (never linger in reloading).
    std::fs::write(&sup.config, "[supervisor\n").unwrap();
    let from = notify.all().len();
    sup.signal(libc::SIGHUP);
    let r = notify.wait(from, "RELOADING=1").expect("RELOADING=1");
    notify
        .wait(r + 1, "READY=1")
        .expect("READY=1 after a failed reload");
    // SIGTERM: STOPPING=1.
    let from = notify.all().len();
    assert_eq!(sup.stop(), Some(0));
    assert!(
        notify.wait(from, "STOPPING=1").is_some(),
        "{:?}",
        notify.all()
    );
}

#[test]
fn watchdog_meant_for_another_pid_is_not_sent() {
    let dir = tempfile::tempdir().unwrap();
    let notify = Notify::bind(dir.path());
    let path = notify.path.to_str().unwrap().to_string();
    let sup = start_in(
        dir,
        "",
        &fake_server("fake", &[], ""),
        &[
            ("NOTIFY_SOCKET", &path),
            ("WATCHDOG_USEC", "100000"),
            ("WATCHDOG_PID", "1"),
        ],
    );
    let ready = notify.wait(0, "READY=1").expect("READY=1");
    // The decision, as the daemon states it; then a reload's round trip (RELOADING=1, READY=1)
    // as the later event by which a 50 ms watchdog rhythm would have shown.
    assert!(
        sup.wait_log(
            "WATCHDOG_PID names another process",
            Duration::from_secs(10)
        ),
        "{}",
        sup.log()
    );
    sup.signal(libc::SIGHUP);
    let reloading = notify.wait(ready + 1, "RELOADING=1").expect("RELOADING=1");
    notify
        .wait(reloading + 1, "READY=1")
        .expect("READY=1 after the reload");
    assert!(
        !notify.all().iter().any(|(_, m)| m.contains("WATCHDOG=1")),
        "{:?}",
        notify.all()
    );
}

/// A supervisor started through `sh -c 'export LISTEN_PID=$$; exec ...'` with listening
/// sockets passed as fds 3, 4, ... (socket activation).
struct Activated {
    child: Option<std::process::Child>,
    id: String,
    log: Arc<Mutex<String>>,
}

impl Activated {
    fn spawn(config: &Path, fds: Vec<std::os::fd::RawFd>, names: &str) -> Activated {
        let id = test_id();
        let mut child = activated(config, &id, fds, names).spawn().unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        read_log(child.stderr.take().unwrap(), log.clone());
        Activated {
            child: Some(child),
            id,
            log,
        }
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    fn stop(&mut self) -> Option<i32> {
        terminate(self.child.take()?)
    }
}

impl Drop for Activated {
    fn drop(&mut self) {
        self.stop();
        let clean = wait_until(Duration::from_secs(10), || {
            marked_processes(&self.id).is_empty()
        });
        let left = marked_processes(&self.id);
        for pid in &left {
            unsafe {
                libc::kill(*pid, libc::SIGKILL);
            }
        }
        if !clean && !std::thread::panicking() {
            panic!("processes left behind: {left:?}\nlog:\n{}", self.log());
        }
    }
}

fn socket_inode(l: &UnixListener) -> u64 {
    std::fs::metadata(format!("/proc/self/fd/{}", l.as_raw_fd()))
        .unwrap()
        .ino()
}

#[test]
fn socket_activation_uses_the_passed_listeners_and_never_unlinks_them() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    std::fs::create_dir(&run).unwrap();
    std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o700)).unwrap();
    let act_path = run.join("act.sock");
    let control_path = run.join("control.sock");
    let act = UnixListener::bind(&act_path).unwrap();
    let control = UnixListener::bind(&control_path).unwrap();
    let file_inodes = [
        std::fs::metadata(&act_path).unwrap().ino(),
        std::fs::metadata(&control_path).unwrap().ino(),
    ];
    let config = dir.path().join("supervisor.toml");
    let servers = format!(
        "{}{}",
        fake_server("act", &[], ""),
        fake_server("plain", &[], "")
    );
    std::fs::write(&config, config_text(dir.path(), "", &servers)).unwrap();
    let mut sup = Activated::spawn(
        &config,
        vec![act.as_raw_fd(), control.as_raw_fd()],
        "act:control",
    );
    assert!(
        wait_until(Duration::from_secs(10), || run.join("plain.sock").exists()),
        "{}",
        sup.log()
    );
    // The control socket works through the passed listener.
    let mut status = None;
    wait_until(Duration::from_secs(10), || {
        let out = cli_at(&config, &["status", "act", "--json"]);
        status = Some(out.stdout);
        out.code == 0
    });
    let v: Value = serde_json::from_str(status.as_deref().unwrap()).unwrap();
    assert_eq!(v["servers"][0]["name"], "act");
    // A client connects to the socket the test bound, and the server works.
    let mut c = Client::connect(&act_path);
    c.initialize("t", json!({}));
    let pid = child_pid(&mut c, 1);
    let act_ino = socket_inode(&act);
    let control_ino = socket_inode(&control);
    // The child has neither listener among its fds, nor the plumbing in its environment.
    for e in std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
    {
        let target = std::fs::read_link(e.path())
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        assert_ne!(
            target,
            format!("socket:[{act_ino}]"),
            "child has the listener"
        );
        assert_ne!(
            target,
            format!("socket:[{control_ino}]"),
            "child has the listener"
        );
        let fd: i32 = e.file_name().to_string_lossy().parse().unwrap();
        assert!(fd <= 2, "child has an extra fd {fd} -> {target}");
    }
    let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    for kv in env.split(|b| *b == 0) {
        let kv = String::from_utf8_lossy(kv);
        for bad in ["LISTEN_", "NOTIFY_SOCKET=", "WATCHDOG_"] {
            assert!(!kv.starts_with(bad), "child environment has {kv}");
        }
    }
    assert!(sup.log().contains("using the socket-activated listener"));
    // Shutdown leaves the passed sockets in place (systemd owns them); ours are removed.
    assert_eq!(sup.stop(), Some(0), "{}", sup.log());
    for (p, ino) in [(&act_path, file_inodes[0]), (&control_path, file_inodes[1])] {
        let meta =
            std::fs::symlink_metadata(p).unwrap_or_else(|_| panic!("{} was unlinked", p.display()));
        assert_eq!(meta.ino(), ino, "{} was replaced", p.display());
    }
    assert!(!run.join("plain.sock").exists());
    // Still the test's sockets: a connection is queued on them.
    assert!(UnixStream::connect(&act_path).is_ok());
}

// ----- access control --------------------------------------------------------------------------

#[test]
fn sockets_are_private_by_default() {
    let sup = start_with("", &fake_server("fake", &[], ""), &[]);
    let run = sup.dir.path().join("run");
    assert_eq!(
        std::fs::metadata(&run).unwrap().permissions().mode() & 0o7777,
        0o700
    );
    for name in ["fake", "control"] {
        assert_eq!(
            std::fs::metadata(sup.socket(name))
                .unwrap()
                .permissions()
                .mode()
                & 0o777,
            0o600,
            "{name}.sock"
        );
    }
    assert!(run.join(".lock").exists());
}

#[test]
fn another_uid_is_refused_and_logged() {
    if !needs_root("another_uid_is_refused_and_logged", &["setpriv"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // Let uid 65534 reach the socket through the kernel's permission checks, so SO_PEERCRED
    // is what refuses it.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let sup = start_in(
        dir,
        "socket_mode = \"0666\"",
        &fake_server("fake", &[], ""),
        &[],
    );
    std::fs::set_permissions(&sup.config, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert_eq!(
        std::fs::metadata(sup.socket("fake"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o666
    );
    let as_nobody = |args: &[&str], input: &str| {
        let mut child = Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                SUPERVISOR,
            ])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"n","version":"1"}}}"#;
    let socket = sup.socket("fake");
    let (_, stdout, _) = as_nobody(
        &["attach", "fake", "--socket", socket.to_str().unwrap()],
        &format!("{init}\n"),
    );
    // A refused peer is told so, on a line `attach` does not reconnect after (issue 32 §2),
    // and gets nothing of the server.
    assert!(
        !stdout.contains("serverInfo"),
        "a refused peer got {stdout}"
    );
    assert!(
        stdout.contains("not allowed") && stdout.contains("mcp-supervisor/hangup"),
        "{stdout}"
    );
    assert!(
        sup.wait_log(
            "refused a connection from uid 65534",
            Duration::from_secs(5)
        ),
        "{}",
        sup.log()
    );
    let line = sup
        .log()
        .lines()
        .find(|l| l.contains("refused a connection from uid 65534"))
        .unwrap()
        .to_string();
    assert!(line.contains("peer_pid="), "{line}");
    // The control socket refuses it too.
    let config = sup.config.to_str().unwrap().to_string();
    let (code, _, stderr) = as_nobody(&["status", "-c", &config], "");
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("closed the connection"), "{stderr}");
    // allowed_uids (applied by a reload) lets it in.
    rewrite(
        &sup,
        "socket_mode = \"0666\"\nallowed_uids = [65534]",
        &fake_server("fake", &[], ""),
    );
    std::fs::set_permissions(&sup.config, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = cli(&sup, &["reload"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let (_, stdout, _) = as_nobody(
        &["attach", "fake", "--socket", socket.to_str().unwrap()],
        &format!("{init}\n"),
    );
    assert!(
        stdout.contains("\"serverInfo\""),
        "allowed peer got {stdout:?}"
    );
    // A client is not an operator (issue 14 §2): control.sock still refuses it, and says which
    // keys decide (issue 26 §8: it named allowed_uids, which this uid is already in).
    let (code, _, stderr) = as_nobody(&["status", "-c", &config], "");
    assert_eq!(code, 1, "a client used control.sock: {stderr}");
    assert!(stderr.contains("operator_uids"), "{stderr}");
    assert!(!stderr.contains("allowed_uids"), "{stderr}");
    // ...until operator_uids names it.
    rewrite(
        &sup,
        "socket_mode = \"0666\"\nallowed_uids = [65534]\noperator_uids = [65534]",
        &fake_server("fake", &[], ""),
    );
    std::fs::set_permissions(&sup.config, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert_eq!(cli(&sup, &["reload"]).code, 0);
    let (code, stdout, stderr) = as_nobody(&["status", "-c", &config], "");
    assert_eq!(code, 0, "an operator was refused: {stderr}");
    assert!(stdout.contains("fake"), "{stdout}");
    // A reload that removes the uid ends its live session, with a log line.
    let mut live = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            SUPERVISOR,
        ])
        .args(["attach", "fake", "--socket", socket.to_str().unwrap()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = live.stdin.take().unwrap();
    stdin.write_all(format!("{init}\n").as_bytes()).unwrap();
    let mut out = std::io::BufReader::new(live.stdout.take().unwrap());
    let mut first = String::new();
    std::io::BufRead::read_line(&mut out, &mut first).unwrap();
    assert!(first.contains("serverInfo"), "{first}");
    rewrite(
        &sup,
        "socket_mode = \"0666\"",
        &fake_server("fake", &[], ""),
    );
    assert_eq!(cli(&sup, &["reload"]).code, 0);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    assert!(
        rest.contains("access revoked"),
        "the session was not told: {rest:?}"
    );
    drop(stdin);
    let _ = live.wait();
    assert!(
        sup.wait_log("no longer allowed after a reload", Duration::from_secs(5)),
        "{}",
        sup.log()
    );
}

#[test]
fn a_second_supervisor_on_the_same_socket_dir_exits_100() {
    let sup = start_with("", &fake_server("fake", &[], ""), &[]);
    let mut c = sup.client("fake");
    let pid = child_pid(&mut c, 1);
    let ino = std::fs::metadata(sup.socket("fake")).unwrap().ino();
    let (code, err) = run_expecting_exit(&sup.config, &sup.id);
    assert_eq!(code, 100, "{err}");
    assert!(err.contains("already running"), "{err}");
    // The first one and its sockets are untouched.
    assert_eq!(std::fs::metadata(sup.socket("fake")).unwrap().ino(), ino);
    assert!(sup.socket("control").exists());
    assert_eq!(child_pid(&mut c, 2), pid);
    assert_eq!(cli(&sup, &["status", "fake"]).code, 0);
    let mut d = sup.client("fake");
    assert_eq!(child_pid(&mut d, 1), pid);
}

// ----- privilege drop --------------------------------------------------------------------------

/// Issue 47 §9: a root-only test cannot skip in CI. This test binary, copied where uid 65534
/// can run it, runs the root-only `a_server_can_run_as_another_user` as that uid: with
/// [`REQUIRE_ROOT`] set (as `.ci/run` sets it) the test fails saying why; without it, it
/// skips and says so.
#[test]
fn a_root_only_test_run_as_nobody_with_the_ci_variable_set_fails() {
    if !needs_root(
        "a_root_only_test_run_as_nobody_with_the_ci_variable_set_fails",
        &["setpriv"],
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let exe = dir.path().join("it");
    std::fs::copy(std::env::current_exe().unwrap(), &exe).unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let run = |require: Option<&str>| {
        let mut cmd = Command::new("setpriv");
        cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&exe)
            .args([
                "--exact",
                "ops::a_server_can_run_as_another_user",
                "--nocapture",
                "--test-threads=1",
            ])
            .current_dir(dir.path())
            .env_remove(REQUIRE_ROOT);
        if let Some(v) = require {
            cmd.env(REQUIRE_ROOT, v);
        }
        let out = cmd.output().unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.code(), text)
    };
    let (code, text) = run(Some("1"));
    assert_ne!(
        code,
        Some(0),
        "the root-only test passed as uid 65534:\n{text}"
    );
    assert!(
        text.contains("1 failed") && text.contains("a root-only test may not skip"),
        "{text}"
    );
    let (code, text) = run(None);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("skipped: needs root"), "{text}");
}

#[test]
fn a_server_can_run_as_another_user() {
    if !needs_root("a_server_can_run_as_another_user", &[]) {
        return;
    }
    let servers = fake_server("fake", &[], "user = \"nobody\"");
    // Root's secrets in the supervisor's environment must not reach the user's child.
    let sup = start_with("", &servers, &[("ROOT_ONLY_TOKEN", "s3cret")]);
    let mut c = sup.client("fake");
    let pid = child_pid(&mut c, 1);
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    assert!(
        !String::from_utf8_lossy(&environ).contains("ROOT_ONLY_TOKEN"),
        "root's environment reached the child of user nobody"
    );
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap()
            .split_whitespace()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert!(field("Uid:").iter().all(|u| u == "65534"), "{status}");
    let gid = field("Gid:")[0].clone();
    assert!(field("Gid:").iter().all(|g| *g == gid), "{status}");
    assert!(
        field("Groups:").iter().all(|g| *g != "0"),
        "root's groups survived: {status}"
    );
    let env = |c: &mut Client, id: i64, name: &str| {
        Client::text(&c.call(json!(id), "env", json!({"name": name})))
    };
    assert_eq!(env(&mut c, 2, "USER"), "nobody");
    assert_eq!(env(&mut c, 3, "LOGNAME"), "nobody");
    let home = std::fs::read_to_string("/etc/passwd")
        .unwrap()
        .lines()
        .find(|l| l.starts_with("nobody:"))
        .and_then(|l| l.split(':').nth(5).map(str::to_string))
        .unwrap();
    assert_eq!(env(&mut c, 4, "HOME"), home);
}

// ----- socket_dir is ours or we refuse (issue 14 §1) -------------------------------------------

/// Runs `mcp-supervisor run -c config`, which must exit by itself within 10 s (a refusal).
/// Returns the exit code and stderr.
fn run_expecting_exit(config: &Path, test_id: &str) -> (i32, String) {
    let mut child = Command::new(SUPERVISOR)
        .args(["run", "-c"])
        .arg(config)
        .env("MCPSUP_TEST_ID", test_id)
        .env("NO_COLOR", "1")
        .env_remove("JOURNAL_STREAM")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut status = None;
    wait_until(Duration::from_secs(10), || {
        status = child.try_wait().unwrap();
        status.is_some()
    });
    if status.is_none() {
        let _ = child.kill();
        let _ = child.wait();
        panic!("mcp-supervisor run -c {} did not exit", config.display());
    }
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    (status.and_then(|s| s.code()).unwrap_or(-1), err)
}

/// [`run_expecting_exit`] on a config whose socket_dir is `socket_dir`.
fn run_until_exit(dir: &Path, socket_dir: &Path) -> (i32, String) {
    let config = dir.join("supervisor.toml");
    let servers = fake_server("fake", &[], "");
    std::fs::write(
        &config,
        format!("[supervisor]\nsocket_dir = {socket_dir:?}\n\n{servers}"),
    )
    .unwrap();
    run_expecting_exit(&config, "socket-dir")
}

#[test]
fn a_socket_dir_owned_by_another_user_writable_by_others_or_a_symlink_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    // Group- and world-writable directories (any user can run this part).
    for (name, mode) in [("group-writable", 0o770), ("sticky-world", 0o1777)] {
        let d = dir.path().join(name);
        std::fs::create_dir(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(mode)).unwrap();
        let (code, err) = run_until_exit(dir.path(), &d);
        assert_eq!(code, 2, "{name}: {err}");
        assert!(
            err.contains("writable") && err.contains("chmod"),
            "{name}: {err}"
        );
    }
    let real = dir.path().join("real");
    std::fs::create_dir(&real).unwrap();
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let (code, err) = run_until_exit(dir.path(), &link);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("symbolic link"), "{err}");
    if !needs_root("the other-owner part (chown)", &[]) {
        return;
    }
    let theirs = dir.path().join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
    let (code, err) = run_until_exit(dir.path(), &theirs);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("owned by uid 65534"), "{err}");
}

/// The swap attack of issue 14 Why 1, as a bounded loop: a helper process running as another
/// user keeps trying to replace server sockets with symbolic links to a root-owned file while
/// the supervisor binds 200 of them (200 servers, each socket bound once, twice over). The file
/// outside socket_dir never changes, and the helper never gets anything into socket_dir.
#[test]
fn a_socket_swap_by_another_user_never_changes_a_file_outside_socket_dir() {
    if !needs_root(
        "a_socket_swap_by_another_user_never_changes_a_file_outside_socket_dir",
        &[],
    ) {
        return;
    }
    let victim_dir = tempfile::tempdir().unwrap();
    let victim = victim_dir.path().join("victim");
    std::fs::write(&victim, "secret").unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o640)).unwrap();
    // No child processes: every command is missing, so each server is `failed` at once.
    let servers: String = (0..200)
        .map(|i| format!("[servers.s{i}]\ncommand = \"/nonexistent/mcp-swap-test\"\n"))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let script = format!(
        "while :; do for i in $(seq 0 199); do ln -sf {v:?} {r:?}/s$i.sock 2>/dev/null && echo swapped; done; done",
        v = victim,
        r = run
    );
    let mut helper = Command::new("sh")
        .args(["-c", &script])
        .uid(65534)
        .gid(65534)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let sup = start_in(dir, "", &servers, &[]);
    drop(sup);
    let _ = helper.kill();
    let out = helper.wait_with_output().unwrap();
    let meta = std::fs::symlink_metadata(&victim).unwrap();
    assert_eq!(
        meta.permissions().mode() & 0o7777,
        0o640,
        "the victim's mode changed"
    );
    assert_eq!(meta.uid(), 0, "the victim's owner changed");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "secret");
    assert!(
        out.stdout.is_empty(),
        "the other user changed socket_dir: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// Issue 14 Why 6: a working directory the child cannot enter is named as the problem, not
/// the command: missing (any user), or not searchable by the server's `user` (root only).
#[test]
fn a_cwd_the_child_cannot_enter_is_blamed_not_the_command() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-dir");
    let mut servers = fake_server("gone", &[], &format!("cwd = {missing:?}"));
    let locked = dir.path().join("locked");
    let as_root = needs_root("the part as `user = \"nobody\"`", &[]);
    if as_root {
        std::fs::create_dir(&locked).unwrap();
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o700)).unwrap();
        servers.push_str(&fake_server(
            "private",
            &[],
            &format!("cwd = {locked:?}\nuser = \"nobody\""),
        ));
    }
    let sup = start_with("", &servers, &[]);
    let mut names = vec![("gone", missing.display().to_string())];
    if as_root {
        names.push(("private", locked.display().to_string()));
    }
    for (name, path) in names {
        let mut last = String::new();
        let ok = wait_until(Duration::from_secs(10), || {
            last = sup.server_status(name)["stderr_tail"]
                .as_str()
                .unwrap_or("")
                .to_string()
                + &sup.log();
            last.contains(&format!("working directory {path} cannot be entered"))
        });
        assert!(ok, "{name}: the cwd is not named:\n{last}");
    }
}

/// Issue 27 §3: nothing blocks the loop. Every spawn of server `slow` is held 4 s in the real
/// off-thread spawn path (the test hook `MCP_SUPERVISOR_TEST_SPAWN_DELAY`, slept where identity
/// lookups, cgroup writes and fork/exec run). Meanwhile server `fast` answers calls, `status`
/// answers and shows `slow` starting with no pid, `/healthz` answers 200, and `WATCHDOG=1`
/// keeps its 100 ms rhythm; then `slow` becomes ready and serves the client that waited for it.
/// (With the spawn on the runtime thread, all of these waited the whole 4 s.)
#[test]
fn a_spawn_held_for_seconds_blocks_no_other_server_nor_the_probes_nor_the_watchdog() {
    let dir = tempfile::tempdir().unwrap();
    let notify = Notify::bind(dir.path());
    let path = notify.path.to_str().unwrap().to_string();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let servers = format!(
        "{}{}",
        fake_server("slow", &[], ""),
        fake_server("fast", &[], "")
    );
    let sup = start_in(
        dir,
        &format!("metrics_listen = \"127.0.0.1:{port}\""),
        &servers,
        &[
            ("NOTIFY_SOCKET", &path),
            ("WATCHDOG_USEC", "200000"),
            ("MCP_SUPERVISOR_TEST_SPAWN_DELAY", "slow:4000"),
        ],
    );
    // `slow`'s client asks first; its answer waits for the held spawn.
    let mut s = sup.connect("slow");
    s.send(
        &json!({"jsonrpc": "2.0", "id": "init", "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "waiter", "version": "1"}}}),
    );
    let mut f = sup.client("fast");
    f.initialize("c", json!({}));
    for i in 0..5 {
        let r = f.call(json!(i), "echo", json!({"text": format!("fast {i}")}));
        assert_eq!(Client::text(&r), format!("fast {i}"), "{r}");
    }
    let mut h = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    h.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(h, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut answer = String::new();
    let _ = h.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let st = sup.server_status("slow");
    assert_eq!(st["state"], "starting", "{st}");
    assert!(st["pid"].is_null(), "{st}");
    assert_eq!(sup.server_status("fast")["state"], "ready");
    // All of that happened while `slow`'s spawn was still held: its state above was still
    // `starting`, with no pid.
    // The watchdog kept its rhythm through the held spawn.
    let from = notify.all().len();
    assert!(wait_until(Duration::from_secs(10), || {
        sup.server_status("slow")["state"] == "ready"
    }));
    let pings: Vec<Instant> = notify.all()[from..]
        .iter()
        .filter(|(_, m)| m == "WATCHDOG=1\n")
        .map(|(t, _)| *t)
        .collect();
    assert!(pings.len() >= 5, "{:?}", notify.all());
    for w in pings.windows(2) {
        assert!(
            w[1] - w[0] < Duration::from_secs(1),
            "gap {:?}",
            w[1] - w[0]
        );
    }
    // The waiting client gets its handshake, and the slow server serves.
    let init = s.response(&json!("init"));
    assert!(init["result"]["serverInfo"].is_object(), "{init}");
    s.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let r = s.call(json!(1), "echo", json!({"text": "slow"}));
    assert_eq!(Client::text(&r), "slow", "{r}");
    assert!(!sup.server_status("slow")["pid"].is_null());
}
