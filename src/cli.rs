//! Command line: `run`, `attach`, `check-config`, and the operator verbs that talk to a running
//! daemon over its control socket (`status`, `start`, `stop`, `restart`, `reload`, `logs`).
//! Parses argv with clap and maps each verb to its module.
//!
//! Exit codes: [`base::exit`].

use anyhow::Result;
use base::exit::EXIT_CONFIG;
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use support::config;

/// mcp-supervisor: run stdio MCP servers once, share them with many clients over Unix sockets.
#[derive(Debug, Parser)]
#[command(name = "mcp-supervisor", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Verb,
}

/// The verbs.
#[derive(Debug, Subcommand)]
pub enum Verb {
    /// Run the supervisor in the foreground: start every server, serve its socket, stop on
    /// SIGTERM/SIGINT.
    Run {
        /// Configuration file [default: $MCP_SUPERVISOR_CONFIG, else
        /// ~/.config/mcp-supervisor/supervisor.toml, or /etc/mcp-supervisor/supervisor.toml as root].
        #[arg(short, long)]
        config: Option<PathBuf>,
    },
    /// Bridge stdin/stdout to server NAME's socket; use it as the `command` of an MCP client.
    Attach {
        /// The server name from the configuration (not needed with `--socket`).
        #[arg(required_unless_present = "socket")]
        name: Option<String>,
        /// Configuration file, to find socket_dir (same default as `run`).
        #[arg(short, long, conflicts_with = "socket")]
        config: Option<PathBuf>,
        /// The socket path itself, instead of looking it up in the configuration.
        #[arg(long)]
        socket: Option<PathBuf>,
        /// After the connection to the supervisor is lost (it crashed or was restarted), how
        /// long to keep reconnecting before giving up (exit 1); `0` gives up at once.
        #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = humantime::parse_duration)]
        reconnect_for: std::time::Duration,
    },
    /// Validate a configuration file and exit (0 valid, 2 invalid with file, line and key).
    CheckConfig {
        /// The file to check (same default as `run`; `-c PATH` works too).
        path: Option<PathBuf>,
        /// The file to check, as the other verbs take it.
        #[arg(short, long, conflicts_with = "path")]
        config: Option<PathBuf>,
        /// Check the syntax and every value, but nothing of this host: users and groups need
        /// not exist, nor files the configuration names (an `http_token_file`). For a file
        /// that runs elsewhere: a container image, a Kubernetes ConfigMap, a docs snippet.
        #[arg(long)]
        portable: bool,
    },
    /// Show every server (or NAME): era, state, pid, uptime, restarts, clients, last exit.
    Status {
        /// One server only.
        name: Option<String>,
        /// Print JSON (`{"servers": [...]}`, a stable contract) instead of a table.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        target: Target,
    },
    /// Start server NAME now, clearing `failed` and the backoff (like `systemctl
    /// reset-failed` + `start`); waits until it is ready or gave up.
    Start {
        /// The server name.
        name: String,
        #[command(flatten)]
        target: Target,
    },
    /// Stop server NAME and keep it stopped (its clients stay connected and get errors);
    /// waits until the child has exited.
    Stop {
        /// The server name.
        name: String,
        #[command(flatten)]
        target: Target,
    },
    /// Restart server NAME (clients stay connected); waits until it is ready again.
    Restart {
        /// The server name.
        name: String,
        #[command(flatten)]
        target: Target,
    },
    /// Re-read the configuration file the supervisor was started with (like SIGHUP) and print
    /// what changed; exits 2 with the error when the new file is invalid.
    Reload {
        #[command(flatten)]
        target: Target,
    },
    /// Upgrade in place: the supervisor executes its binary again in its own process (same
    /// pid), keeping its sockets, children and sessions; exits 0 when upgraded, 1 when refused
    /// (the running supervisor serves on and the reason is printed), 3 when none runs.
    Upgrade {
        /// How long to wait for the upgraded supervisor to answer.
        #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
        wait: std::time::Duration,
        #[command(flatten)]
        target: Target,
    },
    /// End what the last run left running (every process carrying its marker), for the
    /// unit's `ExecStopPost`: does nothing when systemd's `$SERVICE_RESULT` names a crash
    /// (the restarted supervisor re-adopts the children). Exits 0 when done, 1 when a
    /// supervisor runs on this socket_dir (nothing is ended), 2 on a bad configuration.
    Cleanup {
        /// Configuration file, to find socket_dir (same default as `run`).
        #[arg(short, long)]
        config: Option<PathBuf>,
    },
    /// Stream what `status` shows as JSON lines: a snapshot at once, then each change
    /// (servers and endpoints whose status changed, names removed), until the supervisor
    /// stops; exits 0 then, 1 when refused, 3 when none runs.
    Watch {
        /// Print JSON lines (the only form so far; required so a table can come later).
        #[arg(long, required = true)]
        json: bool,
        #[command(flatten)]
        target: Target,
    },
    /// A live full-screen view of every server and endpoint: state, restarts, requests/s,
    /// errors, p99, the last exit, sparklines and a detail pane; keys start, stop and restart
    /// a server (operators). Exits 0 on q, 1 when refused, 3 when no supervisor runs.
    Top {
        #[command(flatten)]
        target: Target,
    },
    /// Print every metric in the Prometheus/OpenMetrics text format.
    Metrics {
        #[command(flatten)]
        target: Target,
    },
    /// Print server NAME's Streamable HTTP endpoint: the URL, the token header, the Unix
    /// socket, and ready-to-paste configurations for Claude Code, Cursor, VS Code and Codex.
    Url {
        /// The server or endpoint name.
        name: String,
        /// Print JSON (`{"url", "token", "header", "token_file", "unix_socket"}`).
        #[arg(long)]
        json: bool,
        /// An endpoint's named token: the client `LABEL` of `[endpoints.NAME.clients.LABEL]`
        /// with `token = true`.
        #[arg(long, value_name = "LABEL")]
        token: Option<String>,
        #[command(flatten)]
        target: Target,
    },
    /// Ask the running supervisor's metrics listener (`metrics_listen`) for `GET /healthz`,
    /// or `GET /readyz` with `--ready`; print the body and exit 0 on 200, else 1. A Docker
    /// HEALTHCHECK for images without curl.
    Probe {
        /// Readiness (`/readyz`) instead of liveness (`/healthz`).
        #[arg(long)]
        ready: bool,
        #[command(flatten)]
        target: Target,
    },
    /// Sign in to url server NAME (OAuth): the supervisor discovers the server's
    /// authorization server and prints the URL to open; a browser is opened where there is
    /// one. Waits until the sign-in is done and the server is started (exit 0), denied or
    /// timed out (1); 2 when NAME does not sign in (not a url server, a static header).
    Login {
        /// The server name.
        name: String,
        /// Do not open a browser: print the URL and read the address the browser ended on,
        /// pasted back (for SSH sessions).
        #[arg(long)]
        no_browser: bool,
        #[command(flatten)]
        target: Target,
    },
    /// Forget the sign-in of url server NAME (its tokens) and restart its session.
    Logout {
        /// The server name.
        name: String,
        #[command(flatten)]
        target: Target,
    },
    /// Print the last 64 KiB of server NAME's stderr.
    Logs {
        /// The server name.
        name: String,
        #[command(flatten)]
        target: Target,
    },
    /// Move the stdio MCP servers of Claude Desktop, Claude Code, Cursor, VS Code and Codex
    /// into the supervisor config and point each client entry at `mcp-supervisor attach NAME`
    /// (a plan first; backups of every file; `--undo` restores them).
    Adopt(crate::adopt::Options),
}

/// How the operator verbs find the daemon: its configuration (for `socket_dir`), as `run`.
#[derive(Debug, Clone, clap::Args)]
pub struct Target {
    /// Configuration file the supervisor runs with, to find socket_dir (same default as `run`).
    #[arg(short, long)]
    pub config: Option<PathBuf>,
}

/// The control socket of the daemon that runs with this configuration (an otherwise invalid
/// file still names its `socket_dir`), printing the error and returning the exit code when the
/// file cannot be read.
pub fn control_socket(path: Option<PathBuf>) -> Result<PathBuf, i32> {
    let path = path.unwrap_or_else(config::default_path);
    match config::socket_dir_of(&path) {
        Ok(dir) => Ok(crate::control::socket_path(&dir)),
        Err(e) => {
            eprintln!("mcp-supervisor: {e}");
            Err(EXIT_CONFIG)
        }
    }
}

/// Loads a configuration, printing the error and returning the exit code on failure.
pub fn load_config(path: Option<PathBuf>) -> Result<config::Config, i32> {
    let path = path.unwrap_or_else(config::default_path);
    config::load(&path).map_err(|e| {
        eprintln!("mcp-supervisor: invalid configuration: {e}");
        EXIT_CONFIG
    })
}

/// `GET path` on the metrics listener at `addr` (an unspecified address such as `0.0.0.0` is
/// asked on loopback) within 5 s: the status code and the body.
pub fn probe(addr: std::net::SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    use std::io::{Read, Write};
    let mut addr = addr;
    if addr.ip().is_unspecified() {
        addr.set_ip(match addr {
            std::net::SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            std::net::SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    let timeout = std::time::Duration::from_secs(5);
    let mut s = std::net::TcpStream::connect_timeout(&addr, timeout)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut reply = Vec::new();
    s.take(1 << 20).read_to_end(&mut reply)?;
    let text = String::from_utf8_lossy(&reply);
    let bad = || std::io::Error::other(format!("not an HTTP answer: {text:.80}"));
    let code = text
        .get(9..12)
        .and_then(|c| c.parse().ok())
        .ok_or_else(bad)?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    Ok((code, body.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use base::doc_table;
    use base::exit::*;
    use clap::CommandFactory;
    use std::collections::{BTreeMap, BTreeSet};

    /// The command-line reference, read at test time.
    const PAGE: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/book/src/reference/cli.md"
    );

    /// The verbs clap knows, `help` included (clap adds it when the command is built).
    fn verbs() -> BTreeSet<String> {
        let mut cli = Cli::command();
        cli.build();
        cli.get_subcommands()
            .map(|c| c.get_name().to_string())
            .collect()
    }

    /// Every `pub const EXIT_NAME: i32 = N;` of `exit.rs`: name → N.
    fn exit_constants() -> BTreeMap<String, i32> {
        include_str!("../crates/base/src/exit.rs")
            .lines()
            .filter_map(|l| l.trim().strip_prefix("pub const EXIT_"))
            .filter_map(|l| l.split_once(": i32 = "))
            .filter_map(|(name, value)| {
                let value = value.trim_end_matches(';').parse().ok()?;
                Some((format!("EXIT_{name}"), value))
            })
            .collect()
    }

    /// The `--long` flags of every verb.
    fn long_flags() -> BTreeSet<String> {
        let mut cli = Cli::command();
        cli.build();
        cli.get_subcommands()
            .flat_map(|c| c.get_arguments().filter_map(|a| a.get_long()))
            .map(|l| format!("--{l}"))
            .collect()
    }

    /// What the reference `page` (named `name`) says wrong about the code: the `| verb | what
    /// it does |` table against `verbs`, the `| code | meaning |` table against 0 and the
    /// values of `exits`, and `flags` that the page never names.
    fn cli_page_drift(
        name: &str,
        page: &str,
        verbs: &BTreeSet<String>,
        exits: &BTreeMap<String, i32>,
        flags: &BTreeSet<String>,
    ) -> Vec<String> {
        let mut out = Vec::new();
        match doc_table::rows(page, &["verb", "what it does"]) {
            Err(e) => out.push(format!("{name}: {e}")),
            Ok(rows) => {
                let mut named = Vec::new();
                for row in rows {
                    match doc_table::code(&row.cells[0]) {
                        Some(v) => named.push((row.line, v.to_string())),
                        None => out.push(format!(
                            "{name}:{}: the first cell is not one `verb`: {}",
                            row.line, row.cells[0]
                        )),
                    }
                }
                out.extend(doc_table::drift(name, "verb", verbs, &named));
            }
        }
        match doc_table::rows(page, &["code", "meaning"]) {
            Err(e) => out.push(format!("{name}: {e}")),
            Ok(rows) => {
                let mut named = Vec::new();
                for row in rows {
                    let cell = row.cells[0].trim_matches('`');
                    match cell.parse::<i32>() {
                        Ok(code) => named.push((row.line, code.to_string())),
                        Err(_) => out.push(format!(
                            "{name}:{}: the first cell is not an exit code: {}",
                            row.line, row.cells[0]
                        )),
                    }
                }
                let codes = std::iter::once(0)
                    .chain(exits.values().copied())
                    .map(|c| c.to_string())
                    .collect();
                out.extend(doc_table::drift(name, "exit code", &codes, &named));
            }
        }
        for flag in flags {
            let named = page.match_indices(flag.as_str()).any(|(at, _)| {
                !page[at + flag.len()..]
                    .starts_with(|c: char| c.is_ascii_alphanumeric() || c == '-')
            });
            if !named {
                out.push(format!("{name}: the flag {flag} is never named"));
            }
        }
        out
    }

    #[test]
    fn the_exit_constants_are_read_from_this_file() {
        let exits = exit_constants();
        assert_eq!(exits.get("EXIT_FAILED"), Some(&EXIT_FAILED));
        assert_eq!(exits.get("EXIT_CONFIG"), Some(&EXIT_CONFIG));
        assert_eq!(exits.get("EXIT_NOT_RUNNING"), Some(&EXIT_NOT_RUNNING));
        assert_eq!(exits.get("EXIT_UNKNOWN_SERVER"), Some(&EXIT_UNKNOWN_SERVER));
        assert_eq!(
            exits.get("EXIT_ALREADY_RUNNING"),
            Some(&EXIT_ALREADY_RUNNING)
        );
        assert_eq!(exits.len(), 5, "{exits:?}");
        assert!(verbs().contains("check-config") && verbs().contains("help"));
        assert!(long_flags().contains("--portable"));
    }

    #[test]
    fn the_cli_reference_names_every_verb_exit_code_and_flag() {
        let page = std::fs::read_to_string(PAGE).unwrap_or_else(|e| panic!("{PAGE}: {e}"));
        let drift = cli_page_drift(
            "docs/book/src/reference/cli.md",
            &page,
            &verbs(),
            &exit_constants(),
            &long_flags(),
        );
        assert!(drift.is_empty(), "{}", drift.join("\n"));
    }

    #[test]
    fn cli_reference_drift_is_reported() {
        let page = "# CLI\n\n| verb | what it does |\n|---|---|\n| `run` | runs |\n| `frobnicate` | no such verb |\n| run it | not a name |\n\nUse `--config` or --configure.\n\n| code | meaning |\n|---|---|\n| 0 | done |\n| `2` | bad usage |\n| 7 | nothing |\n";
        let verbs: BTreeSet<String> = ["run", "attach"].iter().map(|s| s.to_string()).collect();
        let exits: BTreeMap<String, i32> = [("EXIT_CONFIG", 2), ("EXIT_NOT_RUNNING", 3)]
            .iter()
            .map(|(n, v)| (n.to_string(), *v))
            .collect();
        let flags: BTreeSet<String> = ["--config", "--conf", "--socket"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(
            cli_page_drift("c.md", page, &verbs, &exits, &flags),
            [
                "c.md:7: the first cell is not one `verb`: run it",
                "c.md:6: row `frobnicate` is no verb of the code",
                "c.md: no row for verb `attach`",
                "c.md:15: row `7` is no exit code of the code",
                "c.md: no row for exit code `3`",
                "c.md: the flag --conf is never named",
                "c.md: the flag --socket is never named",
            ]
        );
        assert_eq!(
            cli_page_drift("c.md", "# CLI\n", &verbs, &exits, &BTreeSet::new()),
            [
                "c.md: no table | verb | what it does |",
                "c.md: no table | code | meaning |"
            ]
        );
    }
}
