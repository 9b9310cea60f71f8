//! Single values of the configuration: durations, file modes, users and groups, the default
//! socket directory, environment name patterns. Each parser returns a message that names what
//! to write instead.

use std::path::PathBuf;
use std::time::Duration;

/// Parses `"500ms"`, `"30s"`, `"2m"`, `"1h 30m"` (humantime syntax). A bare number is refused:
/// durations carry units.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    if t.is_empty() || t.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "`{s}` is not a duration: write a number with a unit, like \"500ms\" or \"30s\""
        ));
    }
    humantime::parse_duration(t).map_err(|e| {
        format!("`{s}` is not a duration ({e}); write e.g. \"500ms\", \"30s\", \"2m\"")
    })
}

/// Parses an octal file mode such as `"0660"` or `"660"`. The owner must keep read and write
/// (the supervisor's own `status` and `attach` connect as the owner).
pub fn parse_mode(s: &str) -> Result<u32, String> {
    let t = s.trim();
    let digits = t.strip_prefix("0o").unwrap_or(t);
    let mode = u32::from_str_radix(digits, 8)
        .ok()
        .filter(|m| *m <= 0o777 && !digits.is_empty())
        .ok_or_else(|| format!("`{s}` is not an octal file mode like \"0600\" or \"0660\""))?;
    if mode & 0o600 != 0o600 {
        return Err(format!(
            "`{s}` must let the owner read and write the socket (at least 0600)"
        ));
    }
    Ok(mode)
}

/// A user given by name or numeric uid: its uid, primary gid, name and home directory. A
/// numeric uid without a passwd entry has no name or home.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserInfo {
    /// Numeric uid.
    pub uid: u32,
    /// Primary gid (from the passwd entry; the uid's value when there is no entry).
    pub gid: u32,
    /// Login name, when known.
    pub name: Option<String>,
    /// Home directory, when known.
    pub home: Option<PathBuf>,
}

/// Looks up a user by name or numeric uid.
pub fn resolve_user(spec: &str) -> Result<UserInfo, String> {
    use nix::unistd::{Uid, User};
    let found = match spec.parse::<u32>() {
        Ok(n) => User::from_uid(Uid::from_raw(n)),
        Err(_) => User::from_name(spec),
    }
    .map_err(|e| format!("cannot look up user `{spec}`: {e}"))?;
    match (found, spec.parse::<u32>()) {
        (Some(u), _) => Ok(UserInfo {
            uid: u.uid.as_raw(),
            gid: u.gid.as_raw(),
            name: Some(u.name),
            home: Some(u.dir),
        }),
        (None, Ok(n)) => Ok(UserInfo {
            uid: n,
            gid: n,
            name: None,
            home: None,
        }),
        (None, Err(_)) => Err(format!("no such user `{spec}`")),
    }
}

/// Looks up a group by name or numeric gid.
pub fn resolve_group(spec: &str) -> Result<u32, String> {
    if let Ok(n) = spec.parse::<u32>() {
        return Ok(n);
    }
    match nix::unistd::Group::from_name(spec) {
        Ok(Some(g)) => Ok(g.gid.as_raw()),
        Ok(None) => Err(format!("no such group `{spec}`")),
        Err(e) => Err(format!("cannot look up group `{spec}`: {e}")),
    }
}

/// `$XDG_RUNTIME_DIR/mcp-supervisor` for a non-root user with a runtime dir, else
/// `/run/mcp-supervisor`.
pub fn default_socket_dir() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) if !nix::unistd::geteuid().is_root() => PathBuf::from(d).join("mcp-supervisor"),
        _ => PathBuf::from("/run/mcp-supervisor"),
    }
}

/// Whether `name` matches a pattern list entry (exact, or a `PREFIX*`).
pub fn env_matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => pattern == name,
    }
}
