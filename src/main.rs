//! argv → cli; logging; run; errors → exit codes. Nothing else.

use clap::Parser;
use mcp_supervisor::cli::{self, Cli, Verb};
use mcp_supervisor::{attach, config, daemon, logging};

/// The supervisor's own systemd plumbing, removed from our environment while single-threaded
/// (R18; `std::env::remove_var` is not thread-safe). Children never see it either.
const PLUMBING: &[&str] = &[
    "NOTIFY_SOCKET",
    "LISTEN_PID",
    "LISTEN_FDS",
    "LISTEN_FDNAMES",
    "WATCHDOG_USEC",
    "WATCHDOG_PID",
];

fn main() {
    let cli = Cli::parse();
    let code = match cli.command {
        Verb::CheckConfig { path } => match config::load(&path) {
            Ok(c) => {
                println!("{}: ok ({} servers)", path.display(), c.servers.len());
                0
            }
            Err(e) => {
                eprintln!("mcp-supervisor: invalid configuration: {e}");
                cli::EXIT_CONFIG
            }
        },
        Verb::Run { config } => {
            for k in PLUMBING {
                std::env::remove_var(k);
            }
            match cli::load_config(config) {
                Err(code) => code,
                Ok(cfg) => {
                    logging::init();
                    match runtime().block_on(daemon::run(cfg)) {
                        Ok(()) => 0,
                        Err(e) => {
                            tracing::error!("{e:#}");
                            eprintln!("mcp-supervisor: {e:#}");
                            1
                        }
                    }
                }
            }
        }
        Verb::Attach {
            name,
            config,
            socket,
        } => {
            let path = match socket {
                Some(p) => p,
                None => match cli::load_config(config) {
                    Ok(c) => daemon::socket_path(&c.supervisor.socket_dir, &name),
                    Err(code) => std::process::exit(code),
                },
            };
            match runtime().block_on(attach::run(&path)) {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!(
                        "mcp-supervisor attach: cannot connect to {}: {e} (is `mcp-supervisor run` running with this server?)",
                        path.display()
                    );
                    1
                }
            }
        }
    };
    std::process::exit(code);
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("cannot start the tokio runtime")
}
