//! Issue 13 §5: the same feature check run directly against real servers and through
//! `mcp-supervisor attach`, with the official clients hosts ship (the TypeScript SDK v2 in
//! `auto`, pinned-2026 and legacy modes, the TypeScript SDK v1, the Python SDK in both eras)
//! and real servers (server-everything, a fastmcp 4.x server, server-filesystem). A feature
//! that works directly must work through the supervisor. Versions are pinned in
//! `.ci/install-deps`; these tests fail (never skip) when the software is missing.

use crate::harness::*;
use crate::interop::{check, Interop};
use std::process::{Command, Output, Stdio};

/// The TypeScript client script with `args` (options, scenario), against `command`.
pub(crate) fn ts(io: &Interop, args: &[&str], command: &[&str]) -> Output {
    Command::new(io.var("MCPSUP_INTEROP_NODE"))
        .arg(io.var("MCPSUP_INTEROP_TS_CLIENT"))
        .args(args)
        .arg("--")
        .args(command)
        .env(
            "MCPSUP_INTEROP_NODE_MODULES",
            io.var("MCPSUP_INTEROP_NODE_MODULES"),
        )
        .env(
            "MCPSUP_INTEROP_V1_NODE_MODULES",
            io.var("MCPSUP_INTEROP_V1_NODE_MODULES"),
        )
        .stdin(Stdio::null())
        .output()
        .expect("cannot run node")
}

/// The Python SDK client script with `args` (options, scenario), against `command`.
pub(crate) fn py(io: &Interop, args: &[&str], command: &[&str]) -> Output {
    Command::new(io.var("MCPSUP_INTEROP_PYTHON"))
        .arg(io.var("MCPSUP_INTEROP_CLIENT"))
        .args(["--timeout", "90"])
        .args(args)
        .arg("--")
        .args(command)
        .stdin(Stdio::null())
        .output()
        .expect("cannot run python")
}

/// `mcp-supervisor attach NAME` on `sup`, as a command line.
pub(crate) fn attach<'a>(sup: &'a Supervisor, name: &'a str) -> Vec<&'a str> {
    let config = sup.config.to_str().unwrap_or("");
    vec![SUPERVISOR, "attach", name, "-c", config]
}

/// A direct run must pass (else the comparison proves nothing).
fn direct_ok(out: Output, what: &str) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{what} fails directly, so the comparison proves nothing:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn everything_cmd(io: &Interop) -> Vec<String> {
    let mut cmd = vec![io.var("MCPSUP_EVERYTHING_SERVER").to_string()];
    cmd.extend(
        io.var("MCPSUP_EVERYTHING_ARGS")
            .split_whitespace()
            .map(str::to_string),
    );
    cmd
}

/// TypeScript v2 (`auto`, pinned 2026-07-28, legacy) and v1: tools, prompts, resources (read,
/// subscribe and updates), progress, sampling and elicitation on server-everything through `attach`, as directly (K26
/// with the real TS SDK).
#[test]
fn interop_typescript_clients_get_every_feature_of_server_everything_through_attach() {
    let io = Interop::load();
    let cmd = everything_cmd(&io);
    let cmd: Vec<&str> = cmd.iter().map(String::as_str).collect();
    direct_ok(ts(&io, &["--mode", "auto", "features"], &cmd), "TS v2 auto");
    direct_ok(ts(&io, &["--sdk", "v1", "features"], &cmd), "TS v1");
    direct_ok(
        ts(&io, &["--mode", "auto", "subscribe"], &cmd),
        "TS v2 auto subscribe",
    );
    let sup = Supervisor::start(&io.servers());
    let via = attach(&sup, "everything");
    for (args, what) in [
        (vec!["--mode", "auto", "--expect-era", "modern"], "v2 auto"),
        (
            vec!["--mode", "2026-07-28", "--expect-era", "modern"],
            "v2 pinned 2026",
        ),
        (
            vec!["--mode", "legacy", "--expect-era", "handshake"],
            "v2 legacy",
        ),
        (vec!["--sdk", "v1"], "v1"),
    ] {
        let mut a = args.clone();
        a.push("features");
        let stdout = check(
            ts(&io, &a, &via),
            &format!("TS {what} through attach"),
            &sup,
        );
        for step in [
            "prompts",
            "resources",
            "sampling",
            "elicitation",
            "progress",
        ] {
            assert!(
                stdout.contains(&format!("\"step\":\"{step}\",\"ok\":true")),
                "{what}: {step} missing:\n{stdout}"
            );
        }
        // Resource subscriptions: a 2026 client through `subscriptions/listen` served by the
        // supervisor, a handshake client through `resources/subscribe`.
        let mut a = args.clone();
        a.push("subscribe");
        let stdout = check(ts(&io, &a, &via), &format!("TS {what} subscribe"), &sup);
        assert!(
            stdout.contains("\"step\":\"updated\",\"ok\":true"),
            "{what}:\n{stdout}"
        );
    }
}

/// A fastmcp 4.x server. Driven in the handshake era (`protocol = "2025-11-25"`), its
/// request-style elicitation works for clients of both eras through the supervisor (2026
/// clients by `input_required` rounds), as it does directly for a handshake client; driven in
/// 2026-07-28 (`auto` finds it modern), tools and progress work for both eras, and elicitation
/// fails exactly as it does directly for a 2026 client (fastmcp 4.2 refuses request-style
/// elicitation on 2026 connections: README, "Known server behaviour").
#[test]
fn interop_fastmcp_server_through_attach_in_both_eras_for_both_client_eras() {
    let io = Interop::load();
    let fm = [
        io.var("MCPSUP_FASTMCP_PYTHON"),
        io.var("MCPSUP_FASTMCP_SERVER"),
    ];
    direct_ok(
        py(&io, &["--era", "handshake", "fastmcp"], &fm),
        "python handshake",
    );
    direct_ok(
        py(&io, &["--era", "modern", "--skip-elicit", "fastmcp"], &fm),
        "python modern",
    );
    let servers = format!(
        "[servers.fm_handshake]\ncommand = {:?}\nargs = [{:?}]\nprotocol = \"2025-11-25\"\nstart_timeout = \"60s\"\n\n[servers.fm_auto]\ncommand = {:?}\nargs = [{:?}]\nstart_timeout = \"60s\"\n",
        fm[0], fm[1], fm[0], fm[1]
    );
    let sup = Supervisor::start(&servers);
    for (server, era, extra) in [
        ("fm_handshake", "handshake", None),
        ("fm_handshake", "modern", None),
        ("fm_auto", "handshake", Some("--skip-elicit")),
        ("fm_auto", "modern", Some("--skip-elicit")),
    ] {
        let mut args = vec!["--era", era];
        args.extend(extra);
        args.push("fastmcp");
        let what = format!("python {era} on {server}");
        let stdout = check(py(&io, &args, &attach(&sup, server)), &what, &sup);
        assert!(stdout.contains("\"progress\""), "{what}:\n{stdout}");
        if extra.is_none() {
            assert!(stdout.contains("\"elicitation\""), "{what}:\n{stdout}");
        }
    }
    // The TypeScript SDK on the same two servers: v2 in each mode and v1.
    direct_ok(
        ts(&io, &["--mode", "legacy", "fastmcp"], &fm),
        "TS v2 legacy",
    );
    direct_ok(ts(&io, &["--sdk", "v1", "fastmcp"], &fm), "TS v1");
    for (server, args) in [
        ("fm_handshake", &["--mode", "auto", "fastmcp"][..]),
        ("fm_handshake", &["--mode", "2026-07-28", "fastmcp"]),
        ("fm_handshake", &["--mode", "legacy", "fastmcp"]),
        ("fm_handshake", &["--sdk", "v1", "fastmcp"]),
        ("fm_auto", &["--mode", "auto", "--skip-elicit", "fastmcp"]),
        ("fm_auto", &["--sdk", "v1", "--skip-elicit", "fastmcp"]),
    ] {
        let what = format!("TS {args:?} on {server}");
        let stdout = check(ts(&io, args, &attach(&sup, server)), &what, &sup);
        assert!(
            stdout.contains("\"step\":\"progress\",\"ok\":true"),
            "{what}:\n{stdout}"
        );
    }
    let log = sup.log();
    assert!(
        log.lines().any(|l| l.contains("server=fm_auto")
            && l.contains("protocol era")
            && l.contains("2026-07-28")),
        "fm_auto was not driven in 2026-07-28:\n{log}"
    );
}

/// K28 with real software: server-filesystem started with no directory takes its allowed
/// directories from roots. Directly, the client's roots become the allowed directories.
/// Through the supervisor the shared child sees the operator's `roots`, never a client's:
/// a client declaring other roots neither replaces them nor adds to them; with no `roots`
/// configured, no client's roots reach it.
#[test]
fn case_k28_server_filesystem_sees_the_operators_roots_never_a_clients() {
    let io = Interop::load();
    let dir = tempfile::tempdir().unwrap();
    let (shared, mine) = (dir.path().join("shared"), dir.path().join("mine"));
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::create_dir_all(&mine).unwrap();
    let (shared, mine) = (shared.to_str().unwrap(), mine.to_str().unwrap());
    let mine_uri = format!("file://{mine}");
    let node = io.var("MCPSUP_INTEROP_NODE");
    let fs_js = io.var("MCPSUP_FILESYSTEM_JS");
    direct_ok(
        ts(&io, &["--roots", &mine_uri, "roots"], &[node, fs_js]),
        "roots directly",
    );
    let servers = format!(
        "[servers.fs]\ncommand = {node:?}\nargs = [{fs_js:?}]\nroots = [{shared:?}]\n\n[servers.fs_bare]\ncommand = {node:?}\nargs = [{fs_js:?}]\n"
    );
    let sup = Supervisor::start(&servers);
    for mode in ["auto", "legacy"] {
        let args = [
            "--mode",
            mode,
            "--roots",
            &mine_uri,
            "--expect-dirs",
            shared,
            "--forbid-dirs",
            mine,
            "roots",
        ];
        check(
            ts(&io, &args, &attach(&sup, "fs")),
            &format!("fs, {mode}"),
            &sup,
        );
    }
    let args = [
        "--roots",
        &mine_uri,
        "--expect-dirs",
        "",
        "--forbid-dirs",
        mine,
        "roots",
    ];
    check(ts(&io, &args, &attach(&sup, "fs_bare")), "fs_bare", &sup);
    // The Python SDK: the same, directly and through the supervisor, in both eras.
    direct_ok(
        py(
            &io,
            &["--era", "auto", "--roots", &mine_uri, "roots"],
            &[node, fs_js],
        ),
        "python roots directly",
    );
    for era in ["auto", "modern", "handshake"] {
        let args = [
            "--era",
            era,
            "--roots",
            &mine_uri,
            "--expect-dirs",
            shared,
            "--forbid-dirs",
            mine,
            "roots",
        ];
        check(
            py(&io, &args, &attach(&sup, "fs")),
            &format!("python fs {era}"),
            &sup,
        );
    }
    // The child's roots/list at start was answered with the operator's root, not refused:
    // its own stderr says so (and no "Failed to request roots" line).
    let st = sup.server_status("fs");
    let tail = st["stderr_tail"].as_str().unwrap_or("");
    assert!(
        tail.contains("Updated allowed directories from MCP roots: 1 valid"),
        "{st}"
    );
    assert!(!tail.to_lowercase().contains("failed"), "{st}");
}
