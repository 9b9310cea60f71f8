//! Issue 16 §8: real, unmodified MCP clients over the Streamable HTTP endpoint: the official
//! Python SDK (both eras), the TypeScript SDK v2 (`auto`) and v1, and the MCP Inspector CLI,
//! over TCP (bearer token) and over `NAME.http.sock`, at the same time as socket clients
//! (`attach`) on the same server-everything child. Each client's scenario round-trips unique
//! text and checks its own answers, so any cross-talk fails it. Versions are pinned in
//! `.ci/install-deps`; these tests fail (never skip) when the software is missing.

use crate::harness::*;
use crate::http::HttpSup;
use crate::interop::{check, Interop};
use std::process::{Child, Command, Stdio};

/// server-everything with `http = true`, and the time server.
fn servers(io: &Interop) -> String {
    io.servers().replace(
        "[servers.everything]\n",
        "[servers.everything]\nhttp = true\n",
    )
}

/// How an HTTP client reaches the endpoint: its `--url`, `--header` and `--unix-socket`
/// arguments.
pub(crate) fn reach(s: &HttpSup, unix: bool) -> Vec<String> {
    if unix {
        let sock = s.sup.dir.path().join("run/everything.http.sock");
        vec![
            "--url".into(),
            "http://localhost/mcp".into(),
            "--unix-socket".into(),
            sock.to_string_lossy().into_owned(),
        ]
    } else {
        vec![
            "--url".into(),
            format!("http://{}/mcp/everything", s.addr),
            "--header".into(),
            format!("Authorization: Bearer {}", s.token("everything")),
        ]
    }
}

/// The Python SDK client over HTTP.
pub(crate) fn py(io: &Interop, s: &HttpSup, unix: bool, era: &str, scenario: &str) -> Child {
    Command::new(io.var("MCPSUP_INTEROP_PYTHON"))
        .arg(io.var("MCPSUP_INTEROP_CLIENT"))
        .args(["--timeout", "90", "--era", era, "--client-name"])
        .arg(format!("py-{era}-{}", if unix { "unix" } else { "tcp" }))
        .arg(scenario)
        .args(reach(s, unix))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot run python")
}

/// The TypeScript SDK client (`sdk` v1 or v2, v2 in `mode`) over HTTP.
pub(crate) fn ts(
    io: &Interop,
    s: &HttpSup,
    unix: bool,
    sdk: &str,
    mode: &str,
    scenario: &str,
) -> Child {
    let mut cmd = Command::new(io.var("MCPSUP_INTEROP_NODE"));
    cmd.arg(io.var("MCPSUP_INTEROP_TS_CLIENT"))
        .args(["--sdk", sdk]);
    if sdk == "v2" {
        cmd.args(["--mode", mode]);
    }
    cmd.arg(scenario)
        .args(reach(s, unix))
        .env(
            "MCPSUP_INTEROP_NODE_MODULES",
            io.var("MCPSUP_INTEROP_NODE_MODULES"),
        )
        .env(
            "MCPSUP_INTEROP_V1_NODE_MODULES",
            io.var("MCPSUP_INTEROP_V1_NODE_MODULES"),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot run node")
}

/// The Python SDK client through `attach` (a socket client of the same child).
pub(crate) fn py_attach(io: &Interop, s: &HttpSup, era: &str) -> Child {
    Command::new(io.var("MCPSUP_INTEROP_PYTHON"))
        .arg(io.var("MCPSUP_INTEROP_CLIENT"))
        .args(["--timeout", "90", "--era", era, "--client-name"])
        .arg(format!("socket-{era}"))
        .args(["everything", "--", SUPERVISOR, "attach", "everything", "-c"])
        .arg(&s.sup.config)
        .env("MCPSUP_TEST_ID", &s.sup.id)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot run python")
}

pub(crate) fn run_all(s: &HttpSup, runs: Vec<(String, Child)>) {
    for (name, child) in runs {
        let out = check(child.wait_with_output().unwrap(), &name, &s.sup);
        assert!(
            out.contains("\"ok\": true") || out.contains("\"ok\":true"),
            "{name}: {out}"
        );
    }
    // One child served everyone.
    let spawns = s
        .sup
        .log()
        .lines()
        .filter(|l| l.contains("server=everything") && l.contains("spawned"))
        .count();
    assert_eq!(
        spawns,
        1,
        "one everything child for all clients:\n{}",
        s.sup.log()
    );
}

/// Over TCP with the bearer token: Python (both eras, with sampling and elicitation as
/// `input_required` rounds in 2026-07-28), TypeScript v2 `auto` and v1, while two socket
/// clients use the same child.
#[test]
fn interop_http_sdk_clients_over_tcp_alongside_socket_clients() {
    let io = Interop::load();
    let s = HttpSup::start(&servers(&io));
    let runs = vec![
        (
            "python handshake everything (tcp)".to_string(),
            py(&io, &s, false, "handshake", "everything"),
        ),
        (
            "python modern features (tcp)".to_string(),
            py(&io, &s, false, "modern", "features"),
        ),
        (
            "ts v2 auto features (tcp)".to_string(),
            ts(&io, &s, false, "v2", "auto", "features"),
        ),
        (
            "ts v1 features (tcp)".to_string(),
            ts(&io, &s, false, "v1", "", "features"),
        ),
        (
            "socket client, handshake".to_string(),
            py_attach(&io, &s, "handshake"),
        ),
        (
            "socket client, modern".to_string(),
            py_attach(&io, &s, "modern"),
        ),
    ];
    run_all(&s, runs);
}

/// Over `everything.http.sock` (no token: `SO_PEERCRED`), the same clients, and the Inspector
/// CLI over TCP (it has no Unix-socket transport).
#[test]
fn interop_http_sdk_clients_over_the_unix_socket_and_the_inspector_cli() {
    let io = Interop::load();
    let s = HttpSup::start(&servers(&io));
    let runs = vec![
        (
            "python handshake features (unix)".to_string(),
            py(&io, &s, true, "handshake", "features"),
        ),
        (
            "python modern everything (unix)".to_string(),
            py(&io, &s, true, "modern", "everything"),
        ),
        (
            "ts v2 auto features (unix)".to_string(),
            ts(&io, &s, true, "v2", "auto", "features"),
        ),
        (
            "ts v1 features (unix)".to_string(),
            ts(&io, &s, true, "v1", "", "features"),
        ),
        (
            "socket client, auto".to_string(),
            py_attach(&io, &s, "auto"),
        ),
    ];
    // The Inspector CLI: list tools, then call echo.
    let url = format!("http://{}/mcp/everything", s.addr);
    let auth = format!("Authorization: Bearer {}", s.token("everything"));
    let inspector = |args: &[&str]| {
        Command::new(io.var("MCPSUP_INSPECTOR_CLI"))
            .arg(&url)
            .args(["--transport", "http"])
            .args(args)
            .args(["--header", &auth])
            .stdin(Stdio::null())
            .output()
            .expect("cannot run the Inspector CLI")
    };
    let list = check(
        inspector(&["--method", "tools/list"]),
        "inspector tools/list",
        &s.sup,
    );
    assert!(list.contains("\"echo\""), "{list}");
    let echo = check(
        inspector(&[
            "--method",
            "tools/call",
            "--tool-name",
            "echo",
            "--tool-arg",
            "message=inspected",
        ]),
        "inspector tools/call",
        &s.sup,
    );
    assert!(echo.contains("inspected"), "{echo}");
    run_all(&s, runs);
}
