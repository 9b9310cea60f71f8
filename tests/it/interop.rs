//! Interop with real, unmodified MCP software installed by `.ci/install-deps`: the official
//! Python SDK client (`mcp` on PyPI) connected through `mcp-supervisor attach`, against the
//! real servers `@modelcontextprotocol/server-everything` (npm, `stdio` mode) and
//! `mcp-server-time` (PyPI). Versions are pinned in `.ci/install-deps`.
//!
//! These tests fail (they do not skip) when the software is missing: run `.ci/install-deps`.

use crate::harness::*;
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

pub(crate) struct Interop {
    vars: HashMap<String, String>,
}

impl Interop {
    pub(crate) fn load() -> Interop {
        let env = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".interop/env.sh");
        let text = std::fs::read_to_string(&env).unwrap_or_else(|e| {
            panic!(
                "{}: {e}; the interop tests need real MCP software: run .ci/install-deps first",
                env.display()
            )
        });
        let vars = text
            .lines()
            .filter_map(|l| l.strip_prefix("export "))
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.trim_matches('"').to_string()))
            .collect();
        Interop { vars }
    }

    pub(crate) fn var(&self, k: &str) -> &str {
        self.vars
            .get(k)
            .unwrap_or_else(|| panic!("{k} missing from .interop/env.sh"))
    }

    /// `[servers.everything]` and `[servers.time]` tables.
    pub(crate) fn servers(&self) -> String {
        let args: Vec<String> = self
            .var("MCPSUP_EVERYTHING_ARGS")
            .split_whitespace()
            .map(|a| format!("{a:?}"))
            .collect();
        format!(
            "[servers.everything]\ncommand = {:?}\nargs = [{}]\nstart_timeout = \"60s\"\n\n[servers.time]\ncommand = {:?}\nstart_timeout = \"60s\"\n",
            self.var("MCPSUP_EVERYTHING_SERVER"),
            args.join(", "),
            self.var("MCPSUP_TIME_SERVER"),
        )
    }

    /// Starts the official SDK client script on `scenario` through `attach NAME`.
    fn client(
        &self,
        sup: &Supervisor,
        name: &str,
        scenario: &str,
        extra: &[&str],
    ) -> std::process::Child {
        Command::new(self.var("MCPSUP_INTEROP_PYTHON"))
            .arg(self.var("MCPSUP_INTEROP_CLIENT"))
            .args(extra)
            .args([
                "--timeout",
                "90",
                scenario,
                "--",
                SUPERVISOR,
                "attach",
                name,
                "-c",
            ])
            .arg(&sup.config)
            .env("MCPSUP_TEST_ID", &sup.id)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("cannot run the interop client")
    }
}

pub(crate) fn check(out: Output, what: &str, sup: &Supervisor) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{what} failed ({}):\nstdout:\n{stdout}\nstderr:\n{}\nsupervisor log:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        sup.log()
    );
    stdout
}

#[test]
fn interop_python_sdk_client_with_server_everything_through_attach() {
    let io = Interop::load();
    let sup = Supervisor::start(&io.servers());
    let out = io
        .client(&sup, "everything", "everything", &["--era", "handshake"])
        .wait_with_output()
        .unwrap();
    let stdout = check(out, "the SDK client (everything)", &sup);
    for step in ["echo", "get-sum", "progress"] {
        assert!(stdout.contains(step), "step {step} missing from:\n{stdout}");
    }
}

#[test]
fn interop_python_sdk_client_with_mcp_server_time_through_attach() {
    let io = Interop::load();
    let sup = Supervisor::start(&io.servers());
    let out = io
        .client(&sup, "time", "time", &["--era", "handshake"])
        .wait_with_output()
        .unwrap();
    let stdout = check(out, "the SDK client (time)", &sup);
    assert!(stdout.contains("get_current_time"), "{stdout}");
}

#[test]
fn interop_two_sdk_clients_share_one_child_concurrently() {
    let io = Interop::load();
    let sup = Supervisor::start(&io.servers());
    let a = io.client(
        &sup,
        "everything",
        "everything",
        &["--era", "handshake", "--repeat", "3", "--client-name", "a"],
    );
    let b = io.client(
        &sup,
        "everything",
        "everything",
        &[
            "--era",
            "auto",
            "--repeat",
            "3",
            "--concurrent",
            "--client-name",
            "b",
        ],
    );
    check(a.wait_with_output().unwrap(), "client a", &sup);
    check(b.wait_with_output().unwrap(), "client b", &sup);
    // One child served both: exactly one spawn of the everything server.
    assert_eq!(
        sup.log().matches("spawned").count(),
        2,
        "one spawn per server:\n{}",
        sup.log()
    );
}

/// Issue 6: the official Python SDK as a 2026-07-28 client and as a handshake client,
/// concurrently, against a dual-era Python SDK server (`mcp-server-time`, pinned to 2026 by the
/// supervisor's era probe) and a handshake-only server (`server-everything`): all four
/// combinations list and call tools at once.
#[test]
fn interop_both_eras_of_clients_on_both_eras_of_children_at_once() {
    let io = Interop::load();
    let sup = Supervisor::start(&io.servers());
    let runs = [
        ("time", "time", "modern"),
        ("time", "time", "handshake"),
        ("everything", "everything", "modern"),
        ("everything", "everything", "handshake"),
    ];
    let children: Vec<_> = runs
        .iter()
        .map(|(server, scenario, era)| {
            let name = format!("{server}-{era}");
            (
                name.clone(),
                io.client(
                    &sup,
                    server,
                    scenario,
                    &["--era", era, "--repeat", "2", "--client-name", &name],
                ),
            )
        })
        .collect();
    for (name, child) in children {
        let out = check(child.wait_with_output().unwrap(), &name, &sup);
        assert!(out.contains("\"ok\": true"), "{name}: {out}");
    }
    let log = sup.log();
    let verdict = |server: &str, era: &str| {
        log.lines().any(|l| {
            l.contains(&format!("server={server}")) && l.contains("protocol era") && l.contains(era)
        })
    };
    assert!(verdict("time", "2026-07-28"), "time pinned to 2026:\n{log}");
    assert!(
        verdict("everything", "handshake"),
        "everything in the handshake era:\n{log}"
    );
}

/// K26 with real software: the server's own sampling and elicitation requests, answered by
/// the official Python SDK's callbacks. Directly, an `auto` client falls back to the handshake
/// (server-everything does not answer `server/discover`); through the supervisor it settles on
/// 2026-07-28 and gets them as `input_required` rounds. Each way must give what direct does.
#[test]
fn case_k26_sdk_sampling_and_elicitation_work_through_attach_as_they_do_directly() {
    let io = Interop::load();
    let args: Vec<&str> = io
        .var("MCPSUP_EVERYTHING_ARGS")
        .split_whitespace()
        .collect();
    let direct = Command::new(io.var("MCPSUP_INTEROP_PYTHON"))
        .arg(io.var("MCPSUP_INTEROP_CLIENT"))
        .args(["--timeout", "90", "features", "--era", "auto", "--"])
        .arg(io.var("MCPSUP_EVERYTHING_SERVER"))
        .args(&args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        direct.status.success(),
        "the feature check fails directly, so it proves nothing:\n{}\n{}",
        String::from_utf8_lossy(&direct.stdout),
        String::from_utf8_lossy(&direct.stderr)
    );
    let sup = Supervisor::start(&io.servers());
    for (era, expect) in [
        ("auto", "modern"),
        ("modern", "modern"),
        ("handshake", "handshake"),
    ] {
        let out = io
            .client(
                &sup,
                "everything",
                "features",
                &["--era", era, "--expect-era", expect],
            )
            .wait_with_output()
            .unwrap();
        let stdout = check(
            out,
            &format!("the SDK client (features, --era {era})"),
            &sup,
        );
        for step in ["\"sampling\"", "\"elicitation\""] {
            assert!(
                stdout.contains(step),
                "{era}: step {step} missing:\n{stdout}"
            );
        }
    }
}

/// K27 with real software: the child is stopped; the official Python SDK connects in `auto`
/// and pinned-2026 modes (so `server/discover` is answered from the last known result), lists
/// the cached tools and reads the outage from a call, with no schema validation error; the
/// handshake mode gets the same. Both a handshake-era child (server-everything) and a
/// 2026-era child (the fake server in `--era modern`) are tried.
#[test]
fn case_k27_sdk_clients_of_both_eras_connect_list_and_read_the_outage_of_a_stopped_child() {
    let io = Interop::load();
    let modern = format!(
        "[servers.modern]\ncommand = {FAKE:?}\nargs = [\"--era\", \"modern\"]\nprotocol = \"2026-07-28\"\n"
    );
    let sup = Supervisor::start(&format!("{}\n{modern}", io.servers()));
    for name in ["everything", "modern"] {
        // Ready once (the lists are cached), then stopped by the operator.
        let ok = wait_until(Duration::from_secs(60), || {
            sup.server_status(name)["state"] == "ready"
        });
        assert!(ok, "{name} never ready\n{}", sup.log());
        let stop = Command::new(SUPERVISOR)
            .args(["stop", name, "-c"])
            .arg(&sup.config)
            .output()
            .unwrap();
        assert!(stop.status.success(), "{stop:?}");
        let ok = wait_until(Duration::from_secs(15), || {
            sup.server_status(name)["state"] == "stopped"
        });
        assert!(ok, "{name} not stopped\n{}", sup.log());
        for era in ["auto", "modern", "handshake"] {
            let out = io
                .client(&sup, name, "outage", &["--era", era])
                .wait_with_output()
                .unwrap();
            let stdout = check(out, &format!("{name}: outage, --era {era}"), &sup);
            assert!(stdout.contains("outage_call"), "{name} {era}:\n{stdout}");
        }
        // The TypeScript SDK: v2 in each mode, and v1.
        let via = crate::interop_matrix::attach(&sup, name);
        for args in [
            &["--mode", "auto", "outage"][..],
            &["--mode", "2026-07-28", "outage"],
            &["--mode", "legacy", "outage"],
            &["--sdk", "v1", "outage"],
        ] {
            let out = crate::interop_matrix::ts(&io, args, &via);
            let stdout = check(out, &format!("{name}: TS {args:?}"), &sup);
            assert!(stdout.contains("outage_call"), "{name} {args:?}:\n{stdout}");
        }
    }
}
