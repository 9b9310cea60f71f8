//! Command line: `run`, `attach`, `check-config`. Parses argv with clap and maps each verb to
//! its module. Exit codes: 0 success, 1 runtime failure, 2 bad configuration or usage.

use crate::config;
use anyhow::Result;
use clap::{Parser, Subcommand};
use std::path::PathBuf;

/// Exit code for a bad configuration file or bad usage.
pub const EXIT_CONFIG: i32 = 2;

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
        /// The server name from the configuration.
        name: String,
        /// Configuration file, to find socket_dir (same default as `run`).
        #[arg(short, long, conflicts_with = "socket")]
        config: Option<PathBuf>,
        /// The socket path itself, instead of looking it up in the configuration.
        #[arg(long)]
        socket: Option<PathBuf>,
    },
    /// Validate a configuration file and exit (0 valid, 2 invalid with file, line and key).
    CheckConfig {
        /// The file to check.
        path: PathBuf,
    },
}

/// The configuration file used when `-c` is not given.
pub fn default_config_path() -> PathBuf {
    if let Some(p) = std::env::var_os("MCP_SUPERVISOR_CONFIG") {
        return PathBuf::from(p);
    }
    if nix::unistd::geteuid().is_root() {
        return PathBuf::from("/etc/mcp-supervisor/supervisor.toml");
    }
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))
        .unwrap_or_else(|| PathBuf::from("."));
    base.join("mcp-supervisor/supervisor.toml")
}

/// Loads a configuration, printing the error and returning the exit code on failure.
pub fn load_config(path: Option<PathBuf>) -> Result<config::Config, i32> {
    let path = path.unwrap_or_else(default_config_path);
    config::load(&path).map_err(|e| {
        eprintln!("mcp-supervisor: invalid configuration: {e}");
        EXIT_CONFIG
    })
}
