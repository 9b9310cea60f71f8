//! Keys of issue 18 §1-2: when a child starts (`start`), when an unused one stops
//! (`idle_stop`), and where what a child said is kept between runs (`[supervisor] state_dir`).

use super::keys;
use super::raw::{RawServer, RawSupervisor};
use super::{ConfigError, Table, Validator};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// When a server's child is spawned (issue 18 §1; docs/book/src/guides/on-demand.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartMode {
    /// At supervisor start and after every exit the restart policy restarts (default).
    Eager,
    /// When the first client request that needs the child arrives. Until then `initialize`,
    /// `server/discover` and first pages of the lists are answered from the last run's record
    /// (`<state_dir>/NAME.cache.json`), marked as from cache.
    OnDemand,
}

impl Validator<'_> {
    /// `start`: `"eager"` (default) or `"on-demand"`.
    pub(super) fn start_mode(
        &self,
        t: Table,
        s: &RawServer,
        d: &RawServer,
    ) -> Result<StartMode, ConfigError> {
        Ok(match s.start.as_ref().or(d.start.as_ref()) {
            None => StartMode::Eager,
            Some(v) => match v.get_ref().as_str() {
                "eager" => StartMode::Eager,
                "on-demand" => StartMode::OnDemand,
                other => {
                    return Err(self.err(
                        v.span(),
                        &t.key("start", s.start.is_some()),
                        &format!("`{other}` is not one of eager, on-demand"),
                    ))
                }
            },
        })
    }

    /// `idle_stop`: a duration (`"10m"`), or `"off"` (the default: never stopped for idling).
    pub(super) fn idle_stop(
        &self,
        t: Table,
        s: &RawServer,
        d: &RawServer,
    ) -> Result<Option<Duration>, ConfigError> {
        let key = t.key("idle_stop", s.idle_stop.is_some());
        match s.idle_stop.as_ref().or(d.idle_stop.as_ref()) {
            None => Ok(None),
            Some(v) if v.get_ref().text() == "off" => Ok(None),
            Some(_) => self.duration(&keys::IDLE_STOP, &key, &s.idle_stop, &d.idle_stop),
        }
    }

    /// `[supervisor] state_dir`: where each on-demand server's record of its last run is kept.
    /// Default: systemd's `$STATE_DIRECTORY` (its first entry) when set, else `socket_dir`.
    /// A relative path is taken relative to the config file's directory.
    pub(super) fn state_dir(&self, raw: &RawSupervisor, socket_dir: &Path) -> PathBuf {
        let named = raw
            .state_dir
            .clone()
            .or_else(|| {
                std::env::var("STATE_DIRECTORY")
                    .ok()
                    .and_then(|v| v.split(':').next().map(str::to_string))
                    .filter(|v| !v.is_empty())
            })
            .map(PathBuf::from);
        match named {
            Some(p) if p.is_relative() => self.path.parent().unwrap_or(Path::new(".")).join(p),
            Some(p) => p,
            None => socket_dir.to_path_buf(),
        }
    }

    /// `token_dir` as written (relative to the config file), else the persistent default:
    /// `$STATE_DIRECTORY` (systemd), `$XDG_STATE_HOME/mcp-supervisor`,
    /// `$HOME/.local/state/mcp-supervisor`, or `/var/lib/mcp-supervisor` as root (issue 30,
    /// decisions).
    pub(super) fn token_dir(&self, raw: &RawSupervisor) -> PathBuf {
        if let Some(p) = &raw.token_dir {
            let p = PathBuf::from(p);
            return if p.is_relative() {
                self.path.parent().unwrap_or(Path::new(".")).join(p)
            } else {
                p
            };
        }
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        if let Some(v) =
            env("STATE_DIRECTORY").and_then(|v| v.split(':').next().map(str::to_string))
        {
            return PathBuf::from(v);
        }
        if nix::unistd::geteuid().is_root() {
            return PathBuf::from("/var/lib/mcp-supervisor");
        }
        if let Some(x) = env("XDG_STATE_HOME").filter(|x| x.starts_with('/')) {
            return PathBuf::from(x).join("mcp-supervisor");
        }
        match env("HOME") {
            Some(h) => PathBuf::from(h).join(".local/state/mcp-supervisor"),
            None => PathBuf::from("/var/lib/mcp-supervisor"),
        }
    }
}
