//! argv → cli; systemd plumbing capture; logging; run; errors → exit codes. Nothing else.

#![deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use base::exit;
use base::systemd::Plumbing;
use clap::Parser;
use front::attach;
use mcp_supervisor::cli::{self, Cli, Target, Verb};
use mcp_supervisor::control::{self, Op};
use mcp_supervisor::{adopt, daemon};
use support::{config, logging};

fn main() {
    let cli = Cli::parse();
    let code = match cli.command {
        Verb::CheckConfig {
            path,
            config,
            portable,
        } => {
            let path = path.or(config).unwrap_or_else(config::default_path);
            let checks = if portable {
                config::Checks::Portable
            } else {
                config::Checks::Host
            };
            match config::load_with(&path, checks) {
                Ok(c) if portable => {
                    for w in &c.warnings {
                        eprintln!("mcp-supervisor: warning: {w}");
                    }
                    println!(
                        "{}: ok ({} servers; portable: users, groups and files of this host not checked)",
                        path.display(),
                        c.servers.len()
                    );
                    0
                }
                Ok(c) => {
                    if let Some(w) = config::exposure(&c) {
                        eprintln!("mcp-supervisor: warning: {w}");
                    }
                    for w in &c.warnings {
                        eprintln!("mcp-supervisor: warning: {w}");
                    }
                    let n = c.servers.len();
                    let noun = if n == 1 { "server" } else { "servers" };
                    println!("{}: ok ({n} {noun})", path.display());
                    0
                }
                Err(e) => {
                    eprintln!("mcp-supervisor: invalid configuration: {e}");
                    exit::EXIT_CONFIG
                }
            }
        }
        Verb::Run { config } => {
            // systemd's plumbing (NOTIFY_SOCKET, LISTEN_*, WATCHDOG_*) is read and removed from
            // our environment while single-threaded (R18; `std::env::remove_var` is not
            // thread-safe); the values go to the daemon, children never see them.
            let mut plumbing = Plumbing::take_from_env();
            // An upgrade in place (issue 32 §1): the previous image's record, and the
            // configuration it ran (not the file: a changed file is for `reload`).
            let refuse_hook = std::env::var_os("MCP_SUPERVISOR_TEST_REFUSE_HANDOVER").is_some();
            // SAFETY: single-threaded still (before the runtime); not passed on to children or
            // to the next image.
            unsafe { std::env::remove_var("MCP_SUPERVISOR_TEST_REFUSE_HANDOVER") };
            let handover = match mcp_supervisor::handover::take_from_env() {
                None => None,
                Some(Err(e)) => {
                    eprintln!(
                        "mcp-supervisor: the hand-over record of an upgrade is unusable: {e}"
                    );
                    std::process::exit(exit::EXIT_FAILED);
                }
                Some(Ok(r)) => Some(r),
            };
            let loaded = match &handover {
                None => cli::load_config(config),
                // The test suite's stand-in for a new image that cannot adopt the record.
                Some(r) if r.refused.is_none() && refuse_hook => {
                    refuse_handover(r, "MCP_SUPERVISOR_TEST_REFUSE_HANDOVER is set")
                }
                Some(r) => match config::parse(&r.config.path, &r.config.text) {
                    Ok(c) => Ok(c),
                    Err(e) => refuse_handover(r, &format!("the configuration does not parse: {e}")),
                },
            };
            if let Some(r) = &handover {
                plumbing.notify_socket = r.notify_socket.clone().map(Into::into);
                plumbing.watchdog = r.watchdog_usec.map(std::time::Duration::from_micros);
                // An image from before the store knew nothing of it: FDSTORE is still ours.
                plumbing.fd_store = r.fd_store.or(plumbing.fd_store);
            }
            match loaded {
                Err(code) => code,
                Ok(cfg) => {
                    // Until `logging::finish` below, which writes the queued log lines.
                    logging::init(cfg.supervisor.log_format);
                    let run =
                        runtime().and_then(|rt| rt.block_on(daemon::run(cfg, plumbing, handover)));
                    // The last requests' log lines, still queued for the log thread.
                    logging::requests::flush(std::time::Duration::from_secs(2));
                    // And the last spans (traces on only), with their own deadline.
                    support::observe::trace::flush(std::time::Duration::from_secs(2));
                    let code = match run {
                        Ok(()) => 0,
                        Err(e) => {
                            tracing::error!("{e:#}");
                            eprintln!("mcp-supervisor: {e:#}");
                            if e.downcast_ref::<daemon::AlreadyRunning>().is_some() {
                                exit::EXIT_ALREADY_RUNNING
                            } else if e.downcast_ref::<base::safepath::DirRefused>().is_some()
                                || e.downcast_ref::<upstream::child::limits::LimitsUnavailable>()
                                    .is_some()
                            {
                                exit::EXIT_CONFIG
                            } else {
                                exit::EXIT_FAILED
                            }
                        }
                    };
                    logging::finish();
                    code
                }
            }
        }
        Verb::Attach {
            name,
            config,
            socket,
            reconnect_for,
        } => {
            let path = match socket {
                Some(p) => p,
                None => match cli::load_config(config) {
                    Ok(c) => daemon::socket_path(
                        &c.supervisor.socket_dir,
                        name.as_deref().unwrap_or_default(),
                    ),
                    Err(code) => std::process::exit(code),
                },
            };
            // The name in outage records: NAME, or the socket's file name without `.sock`.
            let server = name.unwrap_or_else(|| {
                let file = path.file_name().unwrap_or_default().to_string_lossy();
                file.strip_suffix(".sock").unwrap_or(&file).to_string()
            });
            let opts = attach::Options {
                server,
                reconnect_for,
            };
            match attach::run(&path, opts) {
                Ok(attach::Ended::Done) => 0,
                Ok(attach::Ended::GaveUp | attach::Ended::HungUp) => 1,
                Err(e) => {
                    eprintln!(
                        "mcp-supervisor attach: cannot connect to {}: {e} (is `mcp-supervisor run` running with this server?)",
                        path.display()
                    );
                    1
                }
            }
        }
        Verb::Status { name, json, target } => operate(target, Op::Status { name }, json),
        Verb::Start { name, target } => operate(target, Op::Start { name }, false),
        Verb::Stop { name, target } => operate(target, Op::Stop { name }, false),
        Verb::Restart { name, target } => operate(target, Op::Restart { name }, false),
        Verb::Reload { target } => operate(target, Op::Reload, false),
        Verb::Upgrade { wait, target } => match cli::control_socket(target.config) {
            Ok(socket) => control::client::upgrade(&socket, wait),
            Err(code) => code,
        },
        Verb::Logs { name, target } => operate(target, Op::Logs { name }, false),
        Verb::Logout { name, target } => operate(target, Op::Logout { name }, false),
        Verb::Login {
            name,
            no_browser,
            target,
        } => match cli::control_socket(target.config) {
            Ok(socket) => mcp_supervisor::control::client::login(&socket, &name, no_browser),
            Err(code) => code,
        },
        Verb::Probe { ready, target } => match cli::load_config(target.config) {
            Err(code) => code,
            Ok(c) => match c.supervisor.metrics_listen {
                None => {
                    eprintln!("mcp-supervisor probe: the configuration has no [supervisor] metrics_listen, where the probes are served");
                    exit::EXIT_CONFIG
                }
                Some(addr) => {
                    let path = if ready { "/readyz" } else { "/healthz" };
                    match cli::probe(addr, path) {
                        Ok((code, body)) => {
                            print!("{body}");
                            if code == 200 {
                                0
                            } else {
                                exit::EXIT_FAILED
                            }
                        }
                        Err(e) => {
                            eprintln!("mcp-supervisor probe: GET {path} on {addr}: {e}");
                            exit::EXIT_FAILED
                        }
                    }
                }
            },
        },
        Verb::Metrics { target } => operate(target, Op::Metrics, false),
        Verb::Watch { json: _, target } => match cli::control_socket(target.config) {
            Ok(socket) => control::client::watch(&socket),
            Err(code) => code,
        },
        Verb::Top { target } => match cli::control_socket(target.config) {
            Ok(socket) => mcp_supervisor::top::run(&socket),
            Err(code) => code,
        },
        Verb::Cleanup { config } => match cli::load_config(config) {
            Err(code) => code,
            Ok(c) => cleanup(&c.supervisor.socket_dir),
        },
        Verb::Url {
            name,
            json,
            token,
            target,
        } => match cli::load_config(target.config) {
            Ok(c) => match front::http::url::endpoint(&c, &name, token.as_deref()) {
                Ok(e) if json => {
                    println!("{}", front::http::url::render_json(&e));
                    0
                }
                Ok(e) => {
                    print!("{}", front::http::url::render(&name, &e));
                    0
                }
                Err(msg) => {
                    eprintln!("mcp-supervisor url: {msg}");
                    exit::EXIT_UNKNOWN_SERVER
                }
            },
            Err(code) => code,
        },
        Verb::Adopt(options) => match adopt::run(&options) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("mcp-supervisor adopt: {e}");
                if e.is_usage() {
                    exit::EXIT_CONFIG
                } else {
                    exit::EXIT_FAILED
                }
            }
        },
    };
    std::process::exit(code);
}

/// `cleanup` (the unit's `ExecStopPost`): ends what the last run on `socket_dir` left, unless
/// systemd's `$SERVICE_RESULT` says the supervisor crashed; says what it did on stderr.
fn cleanup(socket_dir: &std::path::Path) -> i32 {
    let result = std::env::var("SERVICE_RESULT").ok();
    match daemon::cleanup(socket_dir, result.as_deref()) {
        Ok(daemon::Cleanup::Crashed(r)) => {
            eprintln!("mcp-supervisor cleanup: the supervisor crashed (SERVICE_RESULT={r}); its children are left for the restarted supervisor to re-adopt");
            0
        }
        Ok(daemon::Cleanup::NoRun) => {
            eprintln!(
                "mcp-supervisor cleanup: no run recorded in {}; nothing to end",
                socket_dir.display()
            );
            0
        }
        Ok(daemon::Cleanup::Ended(found)) if found.is_empty() => {
            eprintln!("mcp-supervisor cleanup: the last run left nothing running");
            0
        }
        Ok(daemon::Cleanup::Ended(found)) => {
            eprintln!(
                "mcp-supervisor cleanup: ended what the last run left: {}",
                found.join(" ")
            );
            0
        }
        Err(e) => {
            eprintln!("mcp-supervisor cleanup: {e}; nothing ended");
            exit::EXIT_FAILED
        }
    }
}

/// An operator verb: find the daemon's control socket through the configuration, ask it.
fn operate(target: Target, op: Op, json: bool) -> i32 {
    match cli::control_socket(target.config) {
        Ok(socket) => control::client::run(&socket, op, json),
        Err(code) => code,
    }
}

/// The new image cannot adopt record `r`: the old image runs again with it, told why. Returns
/// only if that fails too (the process then exits).
fn refuse_handover(r: &mcp_supervisor::handover::Record, why: &str) -> ! {
    use mcp_supervisor::handover;
    eprintln!("mcp-supervisor: refusing the hand-over: {why}");
    if r.refused.is_some() {
        // Already the old image run again: nothing older to go back to.
        std::process::exit(exit::EXIT_FAILED);
    }
    let mut again = r.clone();
    again.refused = Some(why.to_string());
    let e = handover::exec_old(&again);
    eprintln!("mcp-supervisor: cannot run the old image again: {e}");
    std::process::exit(exit::EXIT_FAILED);
}

/// The daemon's runtime; failing to create it (no threads, no epoll) is an error, not a panic.
fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    use anyhow::Context;
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the tokio runtime")
}
