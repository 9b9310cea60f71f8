//! Resource limit keys (issue 18 §3; docs/book/src/reference/configuration.md, "Limits"): the
//! per-server `memory_max`, `tasks_max` and `open_files_max` (also in `[defaults]`), and
//! `[supervisor] limits`, the mechanism. Each error names file, line and key. Enforcement is
//! `child::limits`, a layer up.

use super::keys::{self, Key};
use super::raw::{RawServer, RawSupervisor};
use super::{ConfigError, Table, Validator};
use serde::Deserialize;
use toml::Spanned;

/// The smallest `memory_max`: below it nothing runs, and a bare number meant as megabytes
/// (`memory_max = 512`) would kill the child at once.
pub const MEMORY_MAX_MIN: u64 = 1 << 20;

/// A server's resource limits; `None` is no limit. Part of the child's identity: a change
/// restarts the child on reload ([`ServerConfig::same_child`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Limits {
    /// `memory_max`, in bytes: memory of the child's whole process tree. Under cgroup v2 the
    /// cgroup's `memory.max` (swap 0, OOM kills the whole group); otherwise the sum of the
    /// tree's resident set sizes (`/proc/PID/stat` rss), sampled by the supervisor.
    pub memory_max: Option<u64>,
    /// `tasks_max`: processes plus threads of the child's whole process tree. Under cgroup v2
    /// the cgroup's `pids.max`; otherwise counted from `/proc` (`num_threads` of each process).
    pub tasks_max: Option<u64>,
    /// `open_files_max`: `RLIMIT_NOFILE` (soft and hard) of the child, inherited by each of
    /// its processes: a per-process limit, whatever the mechanism.
    pub open_files_max: Option<u64>,
}

impl Limits {
    /// Whether a limit on the whole tree (memory or tasks) is set: what needs a cgroup or
    /// the supervisor's sampling.
    pub fn tree(&self) -> bool {
        self.memory_max.is_some() || self.tasks_max.is_some()
    }

    /// Whether no limit is set at all.
    pub fn is_empty(&self) -> bool {
        !self.tree() && self.open_files_max.is_none()
    }
}

/// `[supervisor] limits`: how the tree limits are enforced. Read at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LimitMode {
    /// A cgroup v2 subtree when ours is delegated and usable, else [`LimitMode::Rlimit`].
    #[default]
    Auto,
    /// A cgroup v2 subtree; the supervisor refuses to start without a usable one.
    Cgroup,
    /// No cgroup: `setrlimit` per process and the supervisor's sampling of the tree.
    Rlimit,
}

impl LimitMode {
    /// `auto`, `cgroup` or `rlimit`, as written in the file.
    pub fn as_str(self) -> &'static str {
        match self {
            LimitMode::Auto => "auto",
            LimitMode::Cgroup => "cgroup",
            LimitMode::Rlimit => "rlimit",
        }
    }
}

/// A limit as written: a number, or a string (a size with a unit, or `"max"`).
#[derive(Deserialize, Clone, Debug)]
#[serde(untagged)]
pub(super) enum LimitText {
    Int(i64),
    Text(String),
}

/// Parses a `memory_max` value: a size such as `"512M"` (10^6 bytes per M), `"512MiB"` or
/// `"1.5G"` (the `bytesize` crate's syntax: SI units are powers of 1000, `Ki`/`Mi`/`Gi` with or
/// without `B` powers of 1024), a number of bytes, or `"max"` (no limit, e.g. to lift a
/// `[defaults]` limit for one server). At least [`MEMORY_MAX_MIN`].
pub(super) fn parse_memory(v: &LimitText) -> Result<Option<u64>, String> {
    let bytes = match v {
        LimitText::Text(t) if is_max(t) => return Ok(None),
        LimitText::Int(n) => u64::try_from(*n).map_err(|_| format!("`{n}` is negative"))?,
        LimitText::Text(t) => t
            .trim()
            .parse::<bytesize::ByteSize>()
            .map_err(|_| {
                format!("`{t}` is not a size; write e.g. \"512M\", \"512MiB\", \"2G\" or \"max\"")
            })?
            .as_u64(),
    };
    if bytes < MEMORY_MAX_MIN {
        let shown = match v {
            LimitText::Int(n) => n.to_string(),
            LimitText::Text(t) => t.clone(),
        };
        return Err(format!(
            "`{shown}` is {bytes} bytes, below the 1 MiB minimum; write a unit, e.g. \"512M\" or \"512MiB\""
        ));
    }
    Ok(Some(bytes))
}

/// Parses a count (`tasks_max`, `open_files_max`): a positive number, or `"max"`.
pub(super) fn parse_count(v: &LimitText) -> Result<Option<u64>, String> {
    match v {
        LimitText::Text(t) if is_max(t) => Ok(None),
        LimitText::Int(n) if *n >= 1 => Ok(u64::try_from(*n).ok()),
        LimitText::Int(n) => Err(format!("`{n}` must be at least 1 (or \"max\": no limit)")),
        LimitText::Text(t) => match t.trim().parse::<u64>() {
            Ok(n) if n >= 1 => Ok(Some(n)),
            _ => Err(format!(
                "`{t}` is not a count; write a number such as 64, or \"max\""
            )),
        },
    }
}

fn is_max(t: &str) -> bool {
    t.trim().eq_ignore_ascii_case("max") || t.trim().eq_ignore_ascii_case("infinity")
}

impl Validator<'_> {
    /// `memory_max`, `tasks_max`, `open_files_max`: the server's own, else `[defaults]`'s.
    pub(super) fn limits(
        &self,
        t: Table,
        s: &RawServer,
        d: &RawServer,
    ) -> Result<Limits, ConfigError> {
        type Parse = fn(&LimitText) -> Result<Option<u64>, String>;
        let one = |key: &Key,
                   own: &Option<Spanned<LimitText>>,
                   default: &Option<Spanned<LimitText>>,
                   parse: Parse| {
            let Some(v) = own.as_ref().or(default.as_ref()) else {
                return Ok(None);
            };
            let path = t.key(key.name, own.is_some());
            let n = parse(v.get_ref()).map_err(|m| self.err(v.span(), &path, &m))?;
            if let Some(n) = n {
                key.check_number(n)
                    .map_err(|m| self.err(v.span(), &path, &m))?;
            }
            Ok(n)
        };
        Ok(Limits {
            memory_max: one(
                &keys::MEMORY_MAX,
                &s.memory_max,
                &d.memory_max,
                parse_memory,
            )?,
            tasks_max: one(&keys::TASKS_MAX, &s.tasks_max, &d.tasks_max, parse_count)?,
            open_files_max: one(
                &keys::OPEN_FILES_MAX,
                &s.open_files_max,
                &d.open_files_max,
                parse_count,
            )?,
        })
    }

    /// `[supervisor] limits`: `auto` (default), `cgroup` or `rlimit`.
    pub(super) fn limit_mode(&self, raw: &RawSupervisor) -> Result<LimitMode, ConfigError> {
        let Some(m) = &raw.limits else {
            return Ok(LimitMode::Auto);
        };
        match m.get_ref().as_str() {
            "auto" => Ok(LimitMode::Auto),
            "cgroup" => Ok(LimitMode::Cgroup),
            "rlimit" => Ok(LimitMode::Rlimit),
            other => Err(self.err(
                m.span(),
                "supervisor.limits",
                &format!("`{other}` is not one of auto, cgroup, rlimit"),
            )),
        }
    }
}
