//! Issue 17 §1: the supervisor as PID 1 of a PID namespace (a container's entrypoint) and as
//! a child subreaper outside one. A child whose launcher leaves a `setsid` grandchild (it
//! escapes `killpg`) is restarted many times, by command and by crash; afterwards no
//! grandchild of an old instance and no zombie remains, and SIGTERM exits 0 within the stop
//! budget with nothing left behind. The way tini and dumb-init test themselves: exit codes,
//! signal forwarding, reaping.

use crate::harness::*;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Restarts in each test (half by `mcp-supervisor restart`, half by SIGKILL of the leader).
const RESTARTS: usize = 50;

/// The server: the fake server leaving a setsid grandchild that ignores SIGTERM and stdin
/// EOF, so only the supervisor's marker-based cleanup can end it.
fn escaper() -> String {
    fake_server(
        "esc",
        &["--setsid-grandchild"],
        "stop_grace = \"200ms\"\nkill_timeout = \"500ms\"\nbackoff_initial = \"10ms\"\nbackoff_max = \"100ms\"\n",
    )
}

/// The current child's pid and state from `status --json`.
fn leader(sup: &Supervisor) -> (Option<i32>, String) {
    let st = sup.server_status("esc");
    (
        st["pid"].as_i64().map(|p| p as i32),
        st["state"].as_str().unwrap_or_default().to_string(),
    )
}

/// Waits until a ready child other than `old` runs; returns its pid.
fn next_ready(sup: &Supervisor, old: Option<i32>) -> i32 {
    let mut pid = None;
    let ok = wait_until(Duration::from_secs(10), || {
        let (p, state) = leader(sup);
        pid = p;
        state == "ready" && p.is_some() && p != old
    });
    assert!(ok, "no new ready child after {old:?}\nlog:\n{}", sup.log());
    pid.unwrap()
}

/// The supervisor's live descendants, as the host sees them (pids in a PID namespace are
/// not the host's, so the pidfile cannot name them): marked processes other than the
/// supervisor and `unshare`.
fn descendants(sup: &Supervisor) -> Vec<i32> {
    let outer = sup.child.as_ref().unwrap().id() as i32;
    let me = sup.pid() as i32;
    sup.marked()
        .into_iter()
        .filter(|p| *p != me && *p != outer)
        .collect()
}

/// Waits until the instance runs both its processes (leader and setsid grandchild); returns
/// them with the leader first.
fn instance(sup: &Supervisor) -> (i32, Vec<i32>) {
    let me = sup.pid() as i32;
    let mut found = (0, Vec::new());
    let ok = wait_until(Duration::from_secs(5), || {
        let d = descendants(sup);
        let kids = children_of(me);
        match d.iter().find(|p| kids.contains(p)) {
            Some(&leader) if d.len() == 2 => {
                found = (leader, d);
                true
            }
            _ => false,
        }
    });
    assert!(
        ok,
        "the instance is not one leader and one grandchild: {:?}\nlog:\n{}",
        descendants(sup),
        sup.log()
    );
    found
}

/// [`RESTARTS`] restarts, alternating `mcp-supervisor restart` (the stop ladder) and SIGKILL
/// of the leader (a crash), each time checking that the previous instance's processes,
/// its escaped grandchild included, are gone; then no zombie of the supervisor; then SIGTERM
/// exits 0 in the stop budget and nothing is left.
fn restart_many_times(mut sup: Supervisor) {
    let sup_pid = sup.pid() as i32;
    let mut status_pid = next_ready(&sup, None);
    for i in 0..RESTARTS {
        let (leader, before) = instance(&sup);
        if i % 2 == 0 {
            let out = Command::new(SUPERVISOR)
                .args(["restart", "esc", "-c"])
                .arg(&sup.config)
                .stdin(Stdio::null())
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "restart {i}: {}\nlog:\n{}",
                String::from_utf8_lossy(&out.stderr),
                sup.log()
            );
        } else {
            unsafe {
                libc::kill(leader, libc::SIGKILL);
            }
        }
        status_pid = next_ready(&sup, Some(status_pid));
        for p in before {
            assert!(
                wait_until(Duration::from_secs(5), || !alive(p)),
                "restart {i}: {p} of the previous instance survived\nlog:\n{}",
                sup.log()
            );
        }
    }
    instance(&sup);
    assert!(
        wait_until(Duration::from_secs(5), || zombies_of(sup_pid).is_empty()),
        "zombies of the supervisor: {:?}",
        zombies_of(sup_pid)
    );
    // The stop ladder is 200 ms + 500 ms here; the leader exits on stdin EOF at once: the
    // daemon's exit is awaited for 5 s.
    sup.signal(libc::SIGTERM);
    let st = sup
        .wait_exit(Duration::from_secs(5))
        .unwrap_or_else(|| panic!("still running 5 s after SIGTERM\nlog:\n{}", sup.log()));
    assert_eq!(st.code(), Some(0), "log:\n{}", sup.log());
    assert!(
        sup.marked().is_empty(),
        "left behind after SIGTERM: {:?}",
        sup.marked()
    );
}

/// Whether the log says the supervisor took `role` (text, or JSON: the default as PID 1).
fn took_role(sup: &Supervisor, role: &str) -> bool {
    wait_until(Duration::from_secs(5), || {
        let log = sup.log();
        log.contains(&format!("role=\"{role}\"")) || log.contains(&format!("\"role\":\"{role}\""))
    })
}

#[test]
fn as_pid1_fifty_restarts_of_a_setsid_launcher_leave_no_zombie_and_no_grandchild() {
    let sup = Supervisor::start_in_pid_namespace(&escaper());
    assert!(took_role(&sup, "init"), "log:\n{}", sup.log());
    restart_many_times(sup);
}

#[test]
fn as_subreaper_fifty_restarts_of_a_setsid_launcher_leave_no_zombie_and_no_grandchild() {
    let sup = Supervisor::start(&escaper());
    assert!(took_role(&sup, "subreaper"), "log:\n{}", sup.log());
    restart_many_times(sup);
}

#[test]
fn without_subreaper_escaped_grandchildren_are_still_killed_with_their_instance() {
    let sup = Supervisor::spawn_config("subreaper = false", &escaper(), &[]);
    assert!(wait_until(Duration::from_secs(10), || sup
        .socket("esc")
        .exists()));
    let first = next_ready(&sup, None);
    let (leader, procs) = instance(&sup);
    assert_eq!(leader, first);
    unsafe {
        libc::kill(leader, libc::SIGKILL);
    }
    next_ready(&sup, Some(first));
    for p in procs {
        assert!(
            wait_until(Duration::from_secs(5), || !alive(p)),
            "grandchild {p} survived its crashed instance\nlog:\n{}",
            sup.log()
        );
    }
    // The role is logged before "mcp-supervisor running", and only when orphans come to us.
    assert!(sup.wait_log("mcp-supervisor running", Duration::from_secs(5)));
    assert!(
        !sup.log().contains("reaping orphaned descendants"),
        "{}",
        sup.log()
    );
}

#[test]
fn as_pid1_sigint_stops_cleanly_and_exits_0() {
    let mut sup = Supervisor::start_in_pid_namespace(&escaper());
    next_ready(&sup, None);
    let (_, procs) = instance(&sup);
    sup.signal(libc::SIGINT);
    let st = sup
        .wait_exit(Duration::from_secs(10))
        .expect("no exit after SIGINT");
    assert_eq!(st.code(), Some(0), "log:\n{}", sup.log());
    for p in procs {
        assert!(!alive(p), "{p} outlived the supervisor");
    }
    // PID 1's exit would kill the namespace anyway: the supervisor must have done it itself,
    // by the instance's cleanup (after the exit is reported, on a blocking thread) or, when
    // the shutdown overtook that, by the final sweep.
    let log = sup.log();
    assert!(
        log.contains("killing descendants that escaped the child's process group")
            || log.contains("stopping: killing processes left by children"),
        "log:\n{log}"
    );
}

#[test]
fn as_pid1_an_invalid_config_exits_2_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("supervisor.toml");
    std::fs::write(
        &config,
        "[supervisor]\nlog_format = \"xml\"\n[servers.a]\ncommand = \"x\"\n",
    )
    .unwrap();
    let out = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", SUPERVISOR, "run", "-c"])
        .arg(&config)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("supervisor.log_format") && err.contains(":2"),
        "{err}"
    );
}
