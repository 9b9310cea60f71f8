//! Issue 18 §3: per-server resource limits. A server over `memory_max` or `tasks_max` is
//! ended and reported as such (status, the outage record, the metrics), counts as a failure
//! and comes back through the backoff; `open_files_max` is the child's `RLIMIT_NOFILE`.
//! Tests 1-3 pin `limits = "rlimit"` (the supervisor's sampling of `/proc`), which works on
//! any Linux; the cgroup v2 path runs only where a delegated subtree exists (test 4).

use crate::harness::*;
use serde_json::{json, Value};
use std::time::Duration;
use upstream::child::limits::cgroup::{self, Detection};

/// Restarts come quickly, so a test waits for seconds, not a minute.
const FAST: &str = "backoff_initial = \"100ms\"\nbackoff_max = \"200ms\"\nstop_grace = \"200ms\"\nkill_timeout = \"500ms\"\n";

/// The value of the limit kills counter of `server` for `reason` (0 when absent).
fn limit_kills(text: &str, server: &str, reason: &str) -> f64 {
    let series = format!(
        "mcp_supervisor_child_limit_kills_total{{server=\"{server}\",reason=\"{reason}\"}} "
    );
    text.lines()
        .find_map(|l| l.strip_prefix(&series))
        .map(|v| v.trim().parse().unwrap())
        .unwrap_or(0.0)
}

/// Starts a supervisor with the `[supervisor]` lines `keys` and waits for `name`'s socket.
fn start(keys: &str, name: &str, servers: &str) -> Supervisor {
    let sup = Supervisor::spawn_config(keys, servers, &[]);
    assert!(
        wait_until(Duration::from_secs(10), || sup.socket(name).exists()),
        "no socket; log:\n{}",
        sup.log()
    );
    sup
}

/// Waits until `name` is ready with a pid other than `old`; returns the pid.
fn ready_pid(sup: &Supervisor, name: &str, old: Option<i64>) -> i64 {
    let mut pid = None;
    let ok = wait_until(Duration::from_secs(15), || {
        let st = sup.server_status(name);
        pid = st["pid"].as_i64();
        st["state"] == "ready" && pid.is_some() && pid != old
    });
    assert!(
        ok,
        "{name} is not ready with a new child\nlog:\n{}",
        sup.log()
    );
    pid.unwrap()
}

/// Waits until `name`'s last exit has `reason`; returns the status.
fn exited_for(sup: &Supervisor, name: &str, reason: &str) -> Value {
    let mut st = Value::Null;
    let ok = wait_until(Duration::from_secs(15), || {
        st = sup.server_status(name);
        st["last_exit"]["reason"] == reason
    });
    assert!(ok, "no exit for {reason}: {st}\nlog:\n{}", sup.log());
    st
}

/// The outage record of a failed call (a `tools/call` gets it in a tool result).
fn outage(r: &Value) -> &Value {
    assert_eq!(r["result"]["isError"], true, "{r}");
    &r["result"]["_meta"]["mcp-supervisor/outage"]
}

/// A memory hog over `memory_max` while the supervisor samples the tree: the in-flight call
/// fails with the limit's reason, status shows it with a failure counted, the metrics count
/// it, and the server is back through the backoff for the next call.
fn memory_hog_is_ended(keys: &str, expected: &str) {
    let sup = start(
        keys,
        "hog",
        &fake_server("hog", &[], &format!("memory_max = \"64M\"\n{FAST}")),
    );
    let mut c = sup.client("hog");
    let first = ready_pid(&sup, "hog", None);
    let limits = &sup.server_status("hog")["limits"];
    assert_eq!(limits["memory_max"], 64_000_000, "{limits}");
    let r = c.call(json!(1), "hog", json!({"mib": 256}));
    let record = outage(&r);
    assert_eq!(record["reason"], expected, "{r}");
    assert_eq!(record["status"], "exited", "{r}");
    assert!(
        record["stderr_tail"].as_str().unwrap().contains(expected),
        "the tail says why: {r}"
    );
    assert!(
        Client::text(&r).contains(&format!("reason={expected}")),
        "{r}"
    );
    let st = exited_for(&sup, "hog", expected);
    assert_eq!(st["last_exit"]["signal"], 9, "{st}");
    assert!(
        st["consecutive_failures"].as_u64().unwrap() >= 1,
        "a limit kill is a failure for the backoff: {st}"
    );
    assert!(!alive(first as i32), "the hog {first} survived");
    ready_pid(&sup, "hog", Some(first));
    assert_eq!(
        Client::text(&c.call(json!(2), "echo", json!({"text": "back"}))),
        "back"
    );
    let text = sup.metrics();
    assert_eq!(limit_kills(&text, "hog", expected), 1.0, "{text}");
    // The restart it caused is filed under the limit, not under `signal`.
    let restarts =
        format!("mcp_supervisor_child_restarts_total{{server=\"hog\",reason=\"{expected}\"}} 1");
    assert!(text.lines().any(|l| l == restarts), "{text}");
    assert!(
        sup.log().contains(&format!("reason=\"{expected}\""))
            || sup.log().contains(&format!("reason={expected}")),
        "the log names the limit:\n{}",
        sup.log()
    );
}

/// (1) Without a cgroup the supervisor's sampling ends the tree over `memory_max`.
#[test]
fn a_server_over_memory_max_is_killed_as_memory_limit_and_restarted() {
    memory_hog_is_ended("limits = \"rlimit\"", "memory-limit");
}

/// (2) A server that starts 20 processes over `tasks_max = 8` is ended as `tasks-limit`,
/// and none of the instance's processes survive.
#[test]
fn a_server_over_tasks_max_is_killed_with_all_its_processes() {
    let sup = start(
        "limits = \"rlimit\"",
        "forks",
        &fake_server("forks", &[], &format!("tasks_max = 8\n{FAST}")),
    );
    let mut c = sup.client("forks");
    let leader = ready_pid(&sup, "forks", None);
    let pidfile = sup.path("sleepers");
    let r = c.call(
        json!(1),
        "spawn",
        json!({"count": 20, "pidfile": pidfile.to_str().unwrap()}),
    );
    // The reply may come first (then it lists the pids), or the kill may (an outage).
    let mut pids: Vec<i32> = pidfile_pids(&pidfile);
    if r["result"]["isError"] != true {
        pids.extend(
            Client::text(&r)
                .split_whitespace()
                .map(|p| p.parse::<i32>().unwrap()),
        );
    } else {
        assert_eq!(outage(&r)["reason"], "tasks-limit", "{r}");
    }
    let st = exited_for(&sup, "forks", "tasks-limit");
    assert!(st["consecutive_failures"].as_u64().unwrap() >= 1, "{st}");
    pids.extend(pidfile_pids(&pidfile));
    pids.push(leader as i32);
    pids.sort_unstable();
    pids.dedup();
    // Over 8 tasks means at least 8 copies were started, each listed once it was (one may have
    // been killed between its start and the line).
    assert!(pids.len() >= 8, "the tool started its processes: {pids:?}");
    for p in &pids {
        assert!(
            wait_until(Duration::from_secs(5), || !alive(*p)),
            "process {p} of the killed instance survived\nlog:\n{}",
            sup.log()
        );
    }
    let next = ready_pid(&sup, "forks", Some(leader));
    assert_ne!(next, leader);
    assert_eq!(limit_kills(&sup.metrics(), "forks", "tasks-limit"), 1.0);
    // The new instance is under the limit and is sampled.
    let ok = wait_until(Duration::from_secs(5), || {
        sup.server_status("forks")["limits"]["tasks"].as_u64() == Some(1)
    });
    assert!(ok, "{}", sup.server_status("forks"));
}

/// Pids the tool listed (it appends `<pid> <ms>` as it starts each copy).
fn pidfile_pids(path: &std::path::Path) -> Vec<i32> {
    pidfile(path).into_iter().map(|(p, _)| p).collect()
}

/// (3) The child runs with `RLIMIT_NOFILE` = `open_files_max`, soft and hard; status says so.
#[test]
fn open_files_max_is_the_childs_rlimit_nofile() {
    let sup = start(
        "",
        "files",
        &fake_server("files", &[], "open_files_max = 100\n"),
    );
    let mut c = sup.client("files");
    let r = c.call(json!(1), "nofile", json!({}));
    assert_eq!(Client::text(&r), "100 100", "{r}");
    let limits = &sup.server_status("files")["limits"];
    assert_eq!(limits["open_files_max"], 100, "{limits}");
    assert_eq!(limits["mechanism"], "rlimit", "{limits}");
    assert_eq!(limits["memory_max"], Value::Null, "{limits}");
}

/// (4) cgroup v2, behind the capability check: where a delegated subtree exists, the memory
/// hog is ended by the kernel's OOM killer (`oom-killed`). Elsewhere (this machine: cgroup
/// v1 hybrid, no v2 controllers) the detection says why not, `limits = "auto"` falls back to
/// sampling, and `limits = "cgroup"` refuses to start with exit 2.
#[test]
fn cgroup_v2_where_delegated_and_a_clear_refusal_elsewhere() {
    let found = cgroup::detect();
    match &found {
        Detection::Delegated { dir, how } => {
            eprintln!(
                "cgroup v2 is delegated here ({}; {how}): running the OOM test",
                dir.display()
            );
            memory_hog_is_ended("limits = \"cgroup\"", "oom-killed");
            return;
        }
        Detection::Usable { dir } => {
            // Writable but not marked delegated: `limits = "cgroup"` would take over the
            // test runner's cgroup, so only the fallback of `auto` is checked.
            eprintln!(
                "cgroup v2 at {} is writable but not delegated: the OOM test does not run here",
                dir.display()
            );
        }
        Detection::Unavailable(why) => {
            eprintln!("cgroup v2 is not delegated here ({why}): the OOM test does not run here");
            let mut sup = Supervisor::spawn_config(
                "limits = \"cgroup\"",
                &fake_server("cg", &[], "memory_max = \"64M\""),
                &[],
            );
            let exit = sup.wait_exit(Duration::from_secs(10));
            assert_eq!(exit.and_then(|s| s.code()), Some(2), "log:\n{}", sup.log());
            assert!(
                sup.log().contains("no cgroup v2 subtree can be used"),
                "{}",
                sup.log()
            );
        }
    }
    assert!(!found.delegated());
    let sup = start(
        "",
        "auto",
        &fake_server("auto", &[], "memory_max = \"64M\"\ntasks_max = 64\n"),
    );
    ready_pid(&sup, "auto", None);
    let limits = &sup.server_status("auto")["limits"];
    assert_eq!(limits["mechanism"], "rlimit", "{limits}");
    assert!(
        sup.log().contains("limits:"),
        "the log says why there is no cgroup:\n{}",
        sup.log()
    );
}
