//! Finding `socket_dir` in a file that may not validate (the operator verbs still reach the
//! daemon whose file was broken after it started).

use super::values::default_socket_dir;
use super::{parse, read, ConfigError};
use std::path::{Path, PathBuf};

/// The `socket_dir` a file names, found even when the file is otherwise invalid (so the
/// operator verbs can reach a daemon whose file was broken after it started, and `reload` can
/// report the error from the daemon's side). Falls back to a line scan of `[supervisor]` when
/// the TOML does not parse, then to the default. Errors only when the file cannot be read.
pub fn socket_dir_of(path: &Path) -> Result<PathBuf, ConfigError> {
    let text = read(path)?;
    if let Ok(c) = parse(path, &text) {
        return Ok(c.supervisor.socket_dir);
    }
    let named = match toml::from_str::<toml::Table>(&text) {
        Ok(t) => t
            .get("supervisor")
            .and_then(|s| s.get("socket_dir"))
            .and_then(|d| d.as_str())
            .map(str::to_string),
        Err(_) => {
            let mut in_supervisor = false;
            let mut found = None;
            for line in text.lines().map(str::trim) {
                if line.starts_with('[') {
                    in_supervisor =
                        line.trim_matches(|c| c == '[' || c == ']').trim() == "supervisor";
                } else if in_supervisor {
                    if let Some((k, v)) = line.split_once('=') {
                        if k.trim() == "socket_dir" {
                            found = toml::from_str::<toml::Table>(&format!("v = {}", v.trim()))
                                .ok()
                                .and_then(|t| {
                                    t.get("v").and_then(|v| v.as_str()).map(str::to_string)
                                });
                        }
                    }
                }
            }
            found
        }
    };
    Ok(match named {
        Some(d) if Path::new(&d).is_relative() => path.parent().unwrap_or(Path::new(".")).join(d),
        Some(d) => PathBuf::from(d),
        None => default_socket_dir(),
    })
}

/// The configuration file used when `-c` is not given.
pub fn default_path() -> PathBuf {
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
