//! The table of every configuration key (issue 26 §1): where it may be written, its kind, its
//! default, its bounds and what it means. Validation takes each duration's, size's and count's
//! bounds and default from here (`Validator` in `mod.rs` and its siblings), the property test
//! (`props.rs`) feeds extreme values to every row, and the docs render it (issue 28). A unit
//! test holds the table and the raw serde structs (`raw.rs`) to exactly one row per key.
//!
//! Why bounds at all: a configured duration is added to `Instant::now()` for every deadline,
//! and `start_timeout = "400000000000y"` once passed validation and then panicked the actor on
//! every spawn. Every upper bound below is far below what `Instant` can hold (about 292 years
//! of nanoseconds past boot), also summed (the stop budget adds `start_timeout`, `stop_grace`,
//! `kill_timeout`), so no configured deadline can overflow; `base::deadline` still computes
//! every deadline without panicking, whatever slips past. Within that, each bound is set where
//! an operator running real MCP servers would never want to go (a tool call may take hours, an
//! `npx` cold start minutes), and each row says why.
//!
//! Rules that tie two keys together are listed in [`RULES`] and checked in `mod.rs`.

use std::time::Duration;

/// Where a key may be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    /// `[supervisor]`: daemon-wide.
    Supervisor,
    /// `[defaults]` (for every server) and `[servers.NAME]` (for one).
    Server,
    /// `[servers.NAME]` only (`command`, `args`: what makes a server itself).
    ServerOnly,
    /// A value of a server's `method_timeouts` table (in `[defaults]` or `[servers.NAME]`),
    /// keyed by method name.
    MethodTimeout,
    /// `[endpoints.NAME]` (issue 31).
    Endpoint,
}

impl Section {
    /// The tables as written in a file, e.g. `[defaults]`, `[servers.NAME]`.
    pub fn tables(self) -> &'static str {
        match self {
            Section::Supervisor => "[supervisor]",
            Section::Server => "[defaults], [servers.NAME]",
            Section::ServerOnly => "[servers.NAME]",
            Section::MethodTimeout => "[defaults.method_timeouts], [servers.NAME.method_timeouts]",
            Section::Endpoint => "[endpoints.NAME]",
        }
    }
}

/// What a key's value is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A string with units: `"500ms"`, `"30s"`, `"2m"`, `"1h 30m"`.
    Duration,
    /// A number of bytes (`memory_max` also takes `"512M"`, `"2GiB"`, `"max"`).
    Size,
    /// A whole number.
    Count,
    /// A number strictly between 0 and 1 (`0.999`).
    Ratio,
    /// `true` or `false`.
    Flag,
    /// A string.
    String,
    /// One of the listed strings.
    Choice(&'static [&'static str]),
    /// A file or directory path (relative paths are relative to the config file).
    Path,
    /// `host:port`.
    Address,
    /// An octal file mode as a string, `"0660"`.
    Mode,
    /// A list of numeric uids or gids.
    Ids,
    /// A list of strings.
    Strings,
    /// A table (`{ NAME = "value", ... }`).
    Table,
    /// A user or group, by name or number.
    Account,
}

impl Kind {
    /// A short name for the docs: `duration`, `size`, `count`, ...
    pub fn name(self) -> &'static str {
        match self {
            Kind::Duration => "duration",
            Kind::Size => "size",
            Kind::Count => "count",
            Kind::Ratio => "ratio",
            Kind::Flag => "flag",
            Kind::String => "string",
            Kind::Choice(_) => "choice",
            Kind::Path => "path",
            Kind::Address => "address",
            Kind::Mode => "mode",
            Kind::Ids => "ids",
            Kind::Strings => "strings",
            Kind::Table => "table",
            Kind::Account => "user or group",
        }
    }
}

/// A key's value when the file does not set it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Default {
    /// This duration.
    Duration(Duration),
    /// This number (a size in bytes or a count).
    Number(u64),
    /// This flag.
    Flag(bool),
    /// This TOML value, as written in a file (`"auto"`, `[]`, `{}`).
    Toml(&'static str),
    /// No single value: what happens when the key is unset (`none`, `[supervisor]'s`, ...).
    Prose(&'static str),
}

/// The values a duration, size or count may take (inclusive).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// Not a number: no bound (paths, strings, tables, ...).
    None,
    /// A duration from `min` to `max`. A `min` of [`ABOVE_ZERO`] means "greater than 0": a zero
    /// deadline or interval fires at once (issue 14 Why 6: `probe_timeout = "0s"` killed a
    /// healthy child).
    Duration {
        /// The smallest value.
        min: Duration,
        /// The largest value.
        max: Duration,
    },
    /// A size or a count from `min` to `max`.
    Number {
        /// The smallest value.
        min: u64,
        /// The largest value.
        max: u64,
    },
}

/// The `min` of a duration that must be greater than 0.
pub const ABOVE_ZERO: Duration = Duration::from_nanos(1);

/// One configuration key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key {
    /// The key as written (`start_timeout`); for [`Section::MethodTimeout`], `METHOD`.
    pub name: &'static str,
    /// Where it may be written.
    pub section: Section,
    /// What its value is.
    pub kind: Kind,
    /// Its value when unset.
    pub default: Default,
    /// The values it may take.
    pub bound: Bound,
    /// What it means, in one line.
    pub meaning: &'static str,
    /// Why the bound is where it is ("" for [`Bound::None`]).
    pub why: &'static str,
}

impl Key {
    /// The key's path in a file: `supervisor.NAME`, `servers.NAME.KEY` for `server` (or
    /// `defaults.KEY` when `server` is `None`), `servers.NAME.method_timeouts.METHOD`.
    pub fn path(&self, server: Option<&str>) -> String {
        let table = match server {
            Some(s) => format!("servers.{s}"),
            None => "defaults".to_string(),
        };
        match self.section {
            Section::Supervisor => format!("supervisor.{}", self.name),
            Section::Server | Section::ServerOnly => format!("{table}.{}", self.name),
            Section::MethodTimeout => format!("{table}.method_timeouts.{}", self.name),
            Section::Endpoint => format!("endpoints.{}.{}", server.unwrap_or("NAME"), self.name),
        }
    }

    /// The default duration, for the duration keys that have one (every such row, tested).
    pub fn default_duration(&self) -> Option<Duration> {
        match self.default {
            Default::Duration(d) => Some(d),
            _ => None,
        }
    }

    /// The default number, for the size and count keys that have one.
    pub fn default_number(&self) -> Option<u64> {
        match self.default {
            Default::Number(n) => Some(n),
            _ => None,
        }
    }

    /// Whether `d` is within the bound; the message says which bound and why otherwise.
    /// `written` is the value as the file has it, repeated in the message.
    pub fn check_duration(&self, written: &str, d: Duration) -> Result<(), String> {
        let Bound::Duration { min, max } = self.bound else {
            return Ok(());
        };
        if d < min {
            return Err(if min == ABOVE_ZERO {
                "must be greater than 0".to_string()
            } else {
                format!(
                    "`{written}` is less than {}, the least it may be",
                    show_duration(min)
                )
            });
        }
        if d > max {
            return Err(format!(
                "`{written}` is more than {}, the most it may be: {}",
                show_duration(max),
                self.why
            ));
        }
        Ok(())
    }

    /// Whether the size or count `n` is within the bound; the message says which bound and
    /// why otherwise.
    pub fn check_number(&self, n: u64) -> Result<(), String> {
        let Bound::Number { min, max } = self.bound else {
            return Ok(());
        };
        if n < min {
            return Err(format!("must be at least {}", self.show_number(min)));
        }
        if n > max {
            return Err(format!(
                "`{n}` is more than {}, the most it may be: {}",
                self.show_number(max),
                self.why
            ));
        }
        Ok(())
    }

    /// The bound as the docs show it: `above 0, up to 1h`, `0 to 1h`, `1 to 65536`,
    /// `1 MiB to 1 GiB`; empty for [`Bound::None`].
    pub fn bound_text(&self) -> String {
        match self.bound {
            Bound::None => String::new(),
            Bound::Duration { min, max } if min == ABOVE_ZERO => {
                format!("above 0, up to {}", show_duration(max))
            }
            Bound::Duration { min, max } => {
                format!("{} to {}", show_duration(min), show_duration(max))
            }
            Bound::Number { min, max } => {
                format!("{} to {}", self.show_number(min), self.show_number(max))
            }
        }
    }

    /// The default as the docs show it: a TOML value (`"60s"`, `256`, `true`, `"auto"`) or
    /// prose.
    pub fn default_text(&self) -> String {
        match self.default {
            Default::Duration(d) => format!("\"{}\"", show_duration(d)),
            Default::Number(n) => n.to_string(),
            Default::Flag(b) => b.to_string(),
            Default::Toml(t) | Default::Prose(t) => t.to_string(),
        }
    }

    fn show_number(&self, n: u64) -> String {
        match self.kind {
            Kind::Size => show_size(n),
            _ => n.to_string(),
        }
    }
}

/// A duration in the largest unit that divides it: `7d`, `1h`, `30m`, `60s`, `500ms`; minutes
/// and seconds below ten of the next unit stay in the smaller one (`120s`, not `2m`), as the
/// configuration reference (docs/book/src/reference/configuration.md) writes defaults.
pub fn show_duration(d: Duration) -> String {
    let n = d.as_nanos();
    if n == 0 {
        return "0".to_string();
    }
    const S: u128 = 1_000_000_000;
    for (unit, name, at_least) in [
        (86_400 * S, "d", 1),
        (3_600 * S, "h", 1),
        (60 * S, "m", 10),
        (S, "s", 1),
        (1_000_000, "ms", 1),
        (1_000, "us", 1),
    ] {
        if n >= unit.saturating_mul(at_least) && n.is_multiple_of(unit) {
            return format!("{}{name}", n / unit);
        }
    }
    format!("{n}ns")
}

/// A size in the largest binary unit that divides it (`64 MiB`), else in bytes.
pub fn show_size(n: u64) -> String {
    for (shift, name) in [
        (50, "PiB"),
        (40, "TiB"),
        (30, "GiB"),
        (20, "MiB"),
        (10, "KiB"),
    ] {
        let unit = 1u64 << shift;
        if n >= unit && n.is_multiple_of(unit) {
            return format!("{} {name}", n / unit);
        }
    }
    n.to_string()
}

const fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

const MINUTE: u64 = 60;
const HOUR: u64 = 3_600;
const DAY: u64 = 86_400;

/// Durations that must be greater than 0, up to `max`.
const fn positive(max: Duration) -> Bound {
    Bound::Duration {
        min: ABOVE_ZERO,
        max,
    }
}

/// Durations that may be 0, up to `max`.
const fn zero_to(max: Duration) -> Bound {
    Bound::Duration {
        min: Duration::ZERO,
        max,
    }
}

const fn count(min: u64, max: u64) -> Bound {
    Bound::Number { min, max }
}

/// The most requests, sessions, subscriptions or queued messages a count may allow.
const MANY: u64 = 65_536;
const MANY_WHY: &str = "every unit of it is memory the supervisor holds for a client or the child; 65536 is far past what one stdio child serves";

/// The kernel's default `fs.nr_open`: a process cannot hold more descriptors than this.
const NR_OPEN: u64 = 1 << 20;

/// Shared reasons.
const HOUR_WHY: &str = "longer than an hour is a hung process, not a slow one, and keeps every deadline far from overflow";
const STOP_WHY: &str = "every stop (shutdown, reload, restart) may wait it out; an hour outlasts any service manager's stop timeout";
const LONG_CALL_WHY: &str = "a long tool call may take hours; a week covers any of them and keeps every deadline far from overflow";

macro_rules! key {
    ($name:literal, $section:ident, $kind:expr, $default:expr, $bound:expr, $meaning:literal, $why:expr) => {
        Key {
            name: $name,
            section: Section::$section,
            kind: $kind,
            default: $default,
            bound: $bound,
            meaning: $meaning,
            why: $why,
        }
    };
    ($name:literal, $section:ident, $kind:expr, $default:expr, $meaning:literal) => {
        key!($name, $section, $kind, $default, Bound::None, $meaning, "")
    };
}

// ---- [supervisor] ---------------------------------------------------------------------------

/// `[supervisor] max_clients`.
pub const MAX_CLIENTS: Key = key!(
    "max_clients",
    Supervisor,
    Kind::Count,
    Default::Number(256),
    count(1, NR_OPEN),
    "connections per server beyond which new ones are refused (each reads an error line first); an endpoint's client joined to the server takes one too; one user may hold at most `max_clients_per_uid` of them",
    "each connection is a descriptor, and one process cannot hold more than fs.nr_open (1048576 by default)"
);
/// `[supervisor] client_memory`.
pub const CLIENT_MEMORY: Key = key!(
    "client_memory",
    Supervisor,
    Kind::Size,
    Default::Number(256 << 20),
    count(1 << 20, 1 << 40),
    "bytes every client's unfinished input may hold together; a client that takes the total over it while holding more than an eighth of it gets an error and is disconnected; read at start",
    "below 1 MiB one ordinary message is cut; 1 TiB is past the memory of any host"
);
/// `[supervisor] http_session_idle`.
pub const HTTP_SESSION_IDLE: Key = key!(
    "http_session_idle",
    Supervisor,
    Kind::Duration,
    Default::Duration(secs(30 * MINUTE)),
    positive(secs(7 * DAY)),
    "a handshake-era HTTP session with no request and no open stream this long is ended",
    "a session nobody used for a week is abandoned, and its slot is one of http_max_sessions"
);
/// `[supervisor] http_max_sessions`.
pub const HTTP_MAX_SESSIONS: Key = key!(
    "http_max_sessions",
    Supervisor,
    Kind::Count,
    Default::Number(256),
    count(1, MANY),
    "handshake-era HTTP sessions per server",
    MANY_WHY
);
/// `[supervisor] http_max_requests`.
pub const HTTP_MAX_REQUESTS: Key = key!(
    "http_max_requests",
    Supervisor,
    Kind::Count,
    Default::Number(256),
    count(1, MANY),
    "open 2026-07-28 HTTP requests per server",
    MANY_WHY
);

// ---- [defaults] and [servers.NAME]: durations ------------------------------------------------

/// `start_timeout`.
pub const START_TIMEOUT: Key = key!(
    "start_timeout",
    Server,
    Kind::Duration,
    Default::Duration(secs(60)),
    positive(secs(HOUR)),
    "spawn to `initialize` answered; past it the child is stopped and counts as a failed start",
    "an npx or uvx cold start downloads packages for minutes; a start with no answer to initialize in an hour is hung"
);
/// `request_timeout`.
pub const REQUEST_TIMEOUT: Key = key!(
    "request_timeout",
    Server,
    Kind::Duration,
    Default::Duration(secs(120)),
    positive(secs(7 * DAY)),
    "absolute deadline of each forwarded request",
    LONG_CALL_WHY
);
/// A value of `method_timeouts`.
pub const METHOD_TIMEOUT: Key = key!(
    "METHOD",
    MethodTimeout,
    Kind::Duration,
    Default::Prose("`request_timeout`"),
    positive(secs(7 * DAY)),
    "the deadline of requests with this method, instead of `request_timeout`",
    LONG_CALL_WHY
);
/// `probe_interval`.
pub const PROBE_INTERVAL: Key = key!(
    "probe_interval",
    Server,
    Kind::Duration,
    Default::Duration(secs(30)),
    positive(secs(DAY)),
    "silence after which a ready child is probed",
    "a probe less often than daily finds a hung child a day late; keeps deadlines far from overflow"
);
/// `probe_timeout`.
pub const PROBE_TIMEOUT: Key = key!(
    "probe_timeout",
    Server,
    Kind::Duration,
    Default::Duration(secs(10)),
    positive(secs(HOUR)),
    "how long a probe may go unanswered",
    HOUR_WHY
);
/// `backoff_initial`.
pub const BACKOFF_INITIAL: Key = key!(
    "backoff_initial",
    Server,
    Kind::Duration,
    Default::Duration(secs(1)),
    zero_to(secs(HOUR)),
    "first restart delay, and the minimum time between two spawns",
    "it is also the floor between any two spawns: more than an hour leaves a crashed server down for hours at its first crash"
);
/// `backoff_max`.
pub const BACKOFF_MAX: Key = key!(
    "backoff_max",
    Server,
    Kind::Duration,
    Default::Duration(secs(60)),
    zero_to(secs(DAY)),
    "largest restart delay",
    "a day between restarts is a stopped server (use restart = \"never\" for that)"
);
/// `backoff_reset_after`.
pub const BACKOFF_RESET_AFTER: Key = key!(
    "backoff_reset_after",
    Server,
    Kind::Duration,
    Default::Duration(secs(60)),
    zero_to(secs(DAY)),
    "readiness held this long resets the backoff",
    "a day of readiness is stable by any measure"
);
/// `stop_grace`.
pub const STOP_GRACE: Key = key!(
    "stop_grace",
    Server,
    Kind::Duration,
    Default::Duration(secs(2)),
    zero_to(secs(HOUR)),
    "after closing stdin, before SIGTERM",
    STOP_WHY
);
/// `kill_timeout`.
pub const KILL_TIMEOUT: Key = key!(
    "kill_timeout",
    Server,
    Kind::Duration,
    Default::Duration(secs(5)),
    zero_to(secs(HOUR)),
    "after SIGTERM, before SIGKILL",
    STOP_WHY
);
/// `queue_wait`.
pub const QUEUE_WAIT: Key = key!(
    "queue_wait",
    Server,
    Kind::Duration,
    Default::Duration(secs(5)),
    zero_to(secs(HOUR)),
    "how long a held request waits for the child",
    "a request held an hour for a child that is not there has long been given up by its client"
);
/// `client_stall_timeout`.
pub const CLIENT_STALL_TIMEOUT: Key = key!(
    "client_stall_timeout",
    Server,
    Kind::Duration,
    Default::Duration(secs(30)),
    positive(secs(HOUR)),
    "how long a client may stay silent in the middle of a line before it gets an error and is disconnected (every byte restarts it)",
    "an hour without a byte in the middle of a message is a dead or hostile peer holding memory"
);
/// `first_message_timeout` (issue 47 §4).
pub const FIRST_MESSAGE_TIMEOUT: Key = key!(
    "first_message_timeout",
    Server,
    Kind::Duration,
    Default::Duration(secs(10)),
    positive(secs(10 * 60)),
    "how long a new connection may go without sending a complete JSON-RPC message (any era) before it gets an error line and is closed, so silent connections cannot hold `max_clients` seats",
    "a client that has said nothing for ten minutes holds a seat and a descriptor for nothing"
);
/// `max_clients_per_uid` (issue 47 §4).
pub const MAX_CLIENTS_PER_UID: Key = key!(
    "max_clients_per_uid",
    Server,
    Kind::Count,
    Default::Prose("half of `[supervisor] max_clients`, rounded up"),
    count(1, NR_OPEN),
    "seats of `max_clients` one user other than the supervisor's own and root may hold on this server (its socket connections and endpoint clients), so one user cannot keep the others out (a value above `max_clients` is taken as `max_clients`)",
    "each connection is a descriptor, and one process cannot hold more than fs.nr_open (1048576 by default)"
);
/// `client_idle_timeout`.
pub const CLIENT_IDLE_TIMEOUT: Key = key!(
    "client_idle_timeout",
    Server,
    Kind::Duration,
    Default::Prose("none (never)"),
    positive(secs(7 * DAY)),
    "how long a connection may carry nothing in either direction before it gets an error and is closed; set it only above your longest call",
    "it must be above the longest call, whose request_timeout is at most a week"
);
/// `era_probe_timeout`.
pub const ERA_PROBE_TIMEOUT: Key = key!(
    "era_probe_timeout",
    Server,
    Kind::Duration,
    Default::Duration(secs(10)),
    positive(secs(HOUR)),
    "how long `auto` waits for the `server/discover` probe's answer before settling on the handshake era",
    HOUR_WHY
);
/// `idle_stop`.
pub const IDLE_STOP: Key = key!(
    "idle_stop",
    Server,
    Kind::Duration,
    Default::Toml("\"off\""),
    positive(secs(7 * DAY)),
    "a duration such as `\"10m\"`, or `\"off\"`: a ready child no client request has reached for that long, holding no subscription or listen stream, is stopped and shown `idle`",
    "a child unused for a week is as good as off; write \"off\" for never"
);

// ---- [defaults] and [servers.NAME]: sizes and counts -----------------------------------------

/// `probe_failures`.
pub const PROBE_FAILURES: Key = key!(
    "probe_failures",
    Server,
    Kind::Count,
    Default::Number(3),
    count(1, 1000),
    "consecutive unanswered probes, with nothing heard meanwhile, that mean death",
    "a thousand unanswered probes is a child that stopped answering long ago"
);
/// `max_message_size`.
pub const MAX_MESSAGE_SIZE: Key = key!(
    "max_message_size",
    Server,
    Kind::Size,
    Default::Number(64 << 20),
    count(1 << 10, 1 << 30),
    "largest line accepted from the child or a client, in bytes",
    "a line is held whole in memory and parsed at once; 1 GiB is far past any MCP message (base64 images are megabytes), and under 1 KiB the handshake does not fit"
);
/// `max_message_depth` (issue 47 §7).
pub const MAX_MESSAGE_DEPTH: Key = key!(
    "max_message_depth",
    Server,
    Kind::Count,
    Default::Number(vocab::jsonrpc::depth::SERDE_DEEPEST as u64),
    count(32, 1024),
    "deepest nesting of arrays and objects in a message relayed either way; a deeper one is refused",
    "127 is the deepest serde_json reads (its recursion limit of 128 refuses the 128th level), so Rust clients read whatever is relayed; real MCP messages nest 10 to 15 levels (a tool's schema in `tools/list`), and parsers that recurse give out a little past 1,000 (Python's `json`)"
);
/// `queue_limit`.
pub const QUEUE_LIMIT: Key = key!(
    "queue_limit",
    Server,
    Kind::Count,
    Default::Number(64),
    count(0, MANY),
    "client requests held while the child starts or backs off",
    MANY_WHY
);
/// `max_subscriptions`.
pub const MAX_SUBSCRIPTIONS: Key = key!(
    "max_subscriptions",
    Server,
    Kind::Count,
    Default::Number(256),
    count(1, MANY),
    "resource subscriptions plus `subscriptions/listen` streams one client may hold",
    MANY_WHY
);
/// `max_inflight`.
/// The keys only a url server may set (issue 29 §1); on a `command` server they are an error.
pub const URL_ONLY: &[&str] = &[
    "url",
    "headers",
    "tls_ca_file",
    "tls_skip_verify",
    "allow_plain_http",
    "max_connections",
    "connect_timeout",
    "oauth",
];

/// `max_connections` (url servers, issue 29 §1).
pub const MAX_CONNECTIONS: Key = key!(
    "max_connections",
    Server,
    Kind::Count,
    Default::Number(8),
    count(1, 1024),
    "url servers: connections open to the remote server at once (HTTP/1.1 needs one per open POST stream); requests beyond wait for one",
    "each connection is a socket and a TLS session the supervisor holds; a hosted server that needs more than 1024 at once is rate-limiting anyway"
);

/// `connect_timeout` (url servers, issue 29 §1).
pub const CONNECT_TIMEOUT: Key = key!(
    "connect_timeout",
    Server,
    Kind::Duration,
    Default::Duration(secs(10)),
    positive(secs(HOUR)),
    "url servers: how long DNS, TCP and TLS may take before the server counts as unreachable",
    HOUR_WHY
);

pub const MAX_INFLIGHT: Key = key!(
    "max_inflight",
    Server,
    Kind::Count,
    Default::Number(256),
    count(1, MANY),
    "requests in flight to the child at once",
    MANY_WHY
);
/// `client_max_inflight`.
pub const CLIENT_MAX_INFLIGHT: Key = key!(
    "client_max_inflight",
    Server,
    Kind::Count,
    Default::Prose("three quarters of `max_inflight`"),
    count(1, MANY),
    "requests one client may have in flight at once, so one client cannot take them all (a value above `max_inflight` is taken as `max_inflight`)",
    MANY_WHY
);
/// `client_queue`.
pub const CLIENT_QUEUE: Key = key!(
    "client_queue",
    Server,
    Kind::Count,
    Default::Number(1024),
    count(1, MANY),
    "messages queued toward one client before it is disconnected as too slow",
    MANY_WHY
);
/// `memory_max`.
pub const MEMORY_MAX: Key = key!(
    "memory_max",
    Server,
    Kind::Size,
    Default::Prose("none"),
    count(1 << 20, 1 << 50),
    "memory of the child's whole process tree (`\"512M\"`, `\"512MiB\"`, `\"2G\"`, bytes, or `\"max\"`: none)",
    "below 1 MiB nothing runs (a bare 512 meant as megabytes would kill the child at once); 1 PiB is past any host (write \"max\" for no limit)"
);
/// `tasks_max`.
pub const TASKS_MAX: Key = key!(
    "tasks_max",
    Server,
    Kind::Count,
    Default::Prose("none"),
    count(1, 1 << 22),
    "processes plus threads of the child's whole tree, or `\"max\"`",
    "the kernel has at most 4194304 process ids (PID_MAX_LIMIT); write \"max\" for no limit"
);
/// `open_files_max`.
pub const OPEN_FILES_MAX: Key = key!(
    "open_files_max",
    Server,
    Kind::Count,
    Default::Prose("none (inherited)"),
    count(1, NR_OPEN),
    "open files of each process of the child (`RLIMIT_NOFILE`, soft and hard), or `\"max\"`",
    "the kernel's default fs.nr_open (1048576) is the most a process may open; no MCP server needs more"
);

/// Every key, in the order of the configuration reference's tables
/// (docs/book/src/reference/configuration.md).
pub const KEYS: &[Key] = &[
    key!("socket_dir", Supervisor, Kind::Path, Default::Prose("`$XDG_RUNTIME_DIR/mcp-supervisor` (non-root), else `/run/mcp-supervisor`"),
        "where `NAME.sock` live; created 0700 if missing; must be the supervisor's own"),
    MAX_CLIENTS,
    key!("socket_mode", Supervisor, Kind::Mode, Default::Toml("\"0600\""),
        "mode of every socket (`NAME.sock`, `control.sock`), e.g. `\"0660\"` with `socket_group`"),
    key!("socket_group", Supervisor, Kind::Account, Default::Prose("none"),
        "group (name or gid) given to every socket, and to `socket_dir` when the supervisor creates it"),
    key!("allowed_uids", Supervisor, Kind::Ids, Default::Toml("[]"),
        "clients: peer uids allowed to connect to server sockets besides the supervisor's own uid and root"),
    key!("allowed_gids", Supervisor, Kind::Ids, Default::Toml("[]"),
        "clients: peer primary gids allowed to connect to server sockets"),
    CLIENT_MEMORY,
    key!("operator_uids", Supervisor, Kind::Ids, Default::Toml("[]"),
        "operators: peer uids allowed to use `control.sock` besides the supervisor's own uid and root"),
    key!("operator_gids", Supervisor, Kind::Ids, Default::Toml("[]"),
        "operators: peer primary gids allowed to use `control.sock`"),
    key!("viewer_uids", Supervisor, Kind::Ids, Default::Toml("[]"),
        "viewers: peer uids allowed to `watch` and run `top` on `control.sock`, with a redacted view (no stderr tails, no panics, no verbs)"),
    key!("viewer_gids", Supervisor, Kind::Ids, Default::Toml("[]"),
        "viewers: peer primary gids allowed to `watch`, run `top` and read `status`"),
    key!("availability_objective", Supervisor, Kind::Ratio, Default::Toml("0.999"),
        "the availability objective `status`, `watch` and `top` hold each server's SLI to (its burn rates divide by 1 - this); the same SLI as `deploy/prometheus/recording.yml`"),
    key!("metrics_listen", Supervisor, Kind::Address, Default::Prose("none"),
        "`host:port` serving `GET /metrics`, `/healthz` and `/readyz`, without authentication; read at start"),
    key!("metrics_allow_remote", Supervisor, Kind::Flag, Default::Flag(false),
        "must be `true` for a non-loopback `metrics_listen`, whose endpoints have no authentication"),
    key!("log_format", Supervisor, Kind::Choice(&["auto", "text", "json", "journal"]), Default::Toml("\"auto\""),
        "where and how the daemon logs; read at start"),
    key!("subreaper", Supervisor, Kind::Flag, Default::Flag(true),
        "outside a PID namespace, become a child subreaper so escaped descendants are reaped and killed with their server; read at start"),
    key!("http_listen", Supervisor, Kind::Address, Default::Toml("\"127.0.0.1:8931\""),
        "TCP address of the Streamable HTTP endpoint, or `\"off\"`: Unix sockets only; read at start"),
    key!("http_allow_remote", Supervisor, Kind::Flag, Default::Flag(false),
        "must be `true` for a non-loopback `http_listen`"),
    key!("http_allowed_hosts", Supervisor, Kind::Strings, Default::Toml("[]"),
        "`Host` values accepted on TCP besides loopback names"),
    key!("http_allowed_origins", Supervisor, Kind::Strings, Default::Toml("[]"),
        "`Origin` values accepted besides loopback origins"),
    HTTP_SESSION_IDLE,
    HTTP_MAX_SESSIONS,
    HTTP_MAX_REQUESTS,
    key!("otel_endpoint", Supervisor, Kind::String, Default::Prose("none (traces off)"),
        "OTLP/HTTP collector for OpenTelemetry traces, `http://` only; read at start"),
    key!("otel_service_name", Supervisor, Kind::String, Default::Prose("`$OTEL_SERVICE_NAME`, else `\"mcp-supervisor\"`"),
        "the traces' `service.name`; only with `otel_endpoint`"),
    key!("otel_headers", Supervisor, Kind::Table, Default::Toml("{}"),
        "extra HTTP headers on each export (values are never logged); only with `otel_endpoint`"),
    key!("token_dir", Supervisor, Kind::Path, Default::Prose("systemd's `$STATE_DIRECTORY`, else `/var/lib/mcp-supervisor` as root, else `$XDG_STATE_HOME/mcp-supervisor`"),
        "where sign-ins to url servers are kept (`NAME.json`, mode 0600); must persist across reboots"),
    key!("state_dir", Supervisor, Kind::Path, Default::Prose("systemd's `$STATE_DIRECTORY`, else `socket_dir`"),
        "where each on-demand server keeps the record of its last run, `NAME.cache.json`"),
    key!("limits", Supervisor, Kind::Choice(&["auto", "cgroup", "rlimit"]), Default::Toml("\"auto\""),
        "how `memory_max` and `tasks_max` are enforced; read at start"),
    // ---- [defaults] and [servers.NAME]
    key!("command", ServerOnly, Kind::String, Default::Prose("none; exactly one of `command` and `url`"),
        "program to execute directly, never through a shell"),
    key!("args", ServerOnly, Kind::Strings, Default::Toml("[]"), "arguments"),
    key!("url", ServerOnly, Kind::String, Default::Prose("none; exactly one of `command` and `url`"),
        "a remote MCP server's Streamable HTTP endpoint, `https://…` (`http://` to loopback only, unless `allow_plain_http`)"),
    key!("headers", ServerOnly, Kind::Table, Default::Toml("{}"),
        "url servers: request headers; a value is a string or `{ env = \"VAR\", prefix = \"Bearer \" }` or `{ file = \"PATH\", prefix = \"…\" }`, never shown anywhere"),
    key!("tls_ca_file", ServerOnly, Kind::Path, Default::Prose("none (the system's roots only)"),
        "url servers: PEM file of extra CA certificates trusted besides the system's roots"),
    key!("tls_skip_verify", ServerOnly, Kind::Flag, Default::Flag(false),
        "url servers: accept any certificate (a warning at every start); for a test bench, never production"),
    key!("allow_plain_http", ServerOnly, Kind::Flag, Default::Flag(false),
        "url servers: allow `http://` to a host that is not loopback (a warning at every start)"),
    MAX_CONNECTIONS,
    CONNECT_TIMEOUT,
    key!("oauth", ServerOnly, Kind::Table, Default::Prose("OAuth on, with dynamic client registration, unless `headers` has `Authorization`"),
        "url servers: the sign-in; keys `grant` (`\"authorization_code\"` or `\"client_credentials\"`), `client_id`, `client_secret_file`, `private_key_file`, `signing_algorithm` (`ES256`), `client_metadata_url`, `scopes`, `redirect_port` (0 = any), `login_timeout` (`\"5m\"`), `issuer` (pins the authorization server)"),

    key!("env", Server, Kind::Table, Default::Toml("{}"), "variables added to the environment"),
    key!("cwd", Server, Kind::Path, Default::Prose("the supervisor's"), "working directory"),
    key!("clean_env", Server, Kind::Flag, Default::Prose("`false`, but `true` when `user` is set"),
        "start from an empty environment plus `env_allow`, instead of the supervisor's environment"),
    key!("env_allow", Server, Kind::Strings, Default::Prose("`PATH HOME USER LOGNAME LANG LC_* TZ TMPDIR XDG_RUNTIME_DIR DISPLAY WAYLAND_DISPLAY XAUTHORITY DBUS_SESSION_BUS_ADDRESS`"),
        "what `clean_env` keeps (`PREFIX*` allowed)"),
    key!("restart", Server, Kind::Choice(&["always", "on-failure", "never"]), Default::Toml("\"always\""),
        "when an exit the supervisor did not ask for is followed by a restart"),
    START_TIMEOUT,
    REQUEST_TIMEOUT,
    key!("method_timeouts", Server, Kind::Table, Default::Toml("{}"),
        "per-method deadlines, e.g. `{ \"tools/call\" = \"300s\" }`"),
    METHOD_TIMEOUT,
    PROBE_INTERVAL,
    PROBE_TIMEOUT,
    PROBE_FAILURES,
    BACKOFF_INITIAL,
    BACKOFF_MAX,
    BACKOFF_RESET_AFTER,
    STOP_GRACE,
    KILL_TIMEOUT,
    MAX_MESSAGE_SIZE,
    MAX_MESSAGE_DEPTH,
    QUEUE_LIMIT,
    QUEUE_WAIT,
    MAX_SUBSCRIPTIONS,
    MAX_INFLIGHT,
    CLIENT_MAX_INFLIGHT,
    CLIENT_QUEUE,
    CLIENT_IDLE_TIMEOUT,
    CLIENT_STALL_TIMEOUT,
    FIRST_MESSAGE_TIMEOUT,
    MAX_CLIENTS_PER_UID,
    key!("client_capabilities", Server, Kind::Table, Default::Toml("{ roots = { listChanged = true }, sampling = {}, elicitation = {} }"),
        "what the supervisor declares to the child in `initialize`"),
    key!("roots", Server, Kind::Strings, Default::Prose("none"),
        "the roots the shared child sees whenever no client is asked: URIs or absolute paths"),
    key!("client_roots", Server, Kind::Choice(&["caller", "none"]), Default::Toml("\"caller\""),
        "whose roots the child may see"),
    key!("mark_unavailable", Server, Kind::Flag, Default::Flag(true),
        "during an outage, cached tool descriptions get a note that the server is unavailable"),
    key!("protocol", Server, Kind::String, Default::Toml("\"auto\""),
        "the child's protocol era: `\"auto\"`, a handshake revision (`\"2024-11-05\"` .. `\"2025-11-25\"`), or `\"2026-07-28\"`"),
    ERA_PROBE_TIMEOUT,
    key!("http", Server, Kind::Flag, Default::Flag(false), "also serve this server over Streamable HTTP"),
    key!("start", Server, Kind::Choice(&["eager", "on-demand"]), Default::Toml("\"eager\""),
        "spawn the child when the supervisor starts, or when the first request that needs it arrives"),
    IDLE_STOP,
    key!("required", Server, Kind::Flag, Default::Flag(false),
        "`GET /readyz` answers 503 until this server is ready"),
    key!("http_token_file", Server, Kind::Path, Default::Prose("`<socket_dir>/NAME.http.token` (created, 0600)"),
        "file holding this server's bearer token for the TCP endpoint; an operator's file must exist"),
    key!("allowed_uids", Server, Kind::Ids, Default::Prose("`[supervisor]`'s"),
        "peer uids allowed to connect to this server's socket, replacing `[supervisor]`'s"),
    key!("allowed_gids", Server, Kind::Ids, Default::Prose("`[supervisor]`'s"),
        "peer primary gids allowed to connect to this server's socket, replacing `[supervisor]`'s"),
    key!("user", Server, Kind::Account, Default::Prose("none"),
        "run the child as this user (name or uid; the supervisor must run as root)"),
    key!("group", Server, Kind::Account, Default::Prose("`user`'s primary group"),
        "run the child with this group (name or gid)"),
    MEMORY_MAX,
    TASKS_MAX,
    OPEN_FILES_MAX,
    // ---- [endpoints.NAME] (issue 31)
    key!("servers", Endpoint, Kind::Strings, Default::Prose("none: required"),
        "the endpoint's sources, in order (the first wins a resource template two match), or `[\"*\"]` for every server; a server whose name holds `__` cannot be one (exit 2)"),
    key!("descriptions", Endpoint, Kind::Table, Default::Toml("{}"),
        "what each source is for, `{ SOURCE = \"text\" }`, said in the endpoint's instructions"),
    key!("status_tool", Endpoint, Kind::String, Default::Prose("none (off)"),
        "the name of an extra tool that reports each source's state; reserved among the exposed names"),
    key!("http", Endpoint, Kind::Flag, Default::Flag(false), "also serve this endpoint over Streamable HTTP"),
    key!("http_token_file", Endpoint, Kind::Path, Default::Prose("`<socket_dir>/NAME.http.token` (created, 0600)"),
        "file holding this endpoint's bearer token for the TCP endpoint; an operator's file must exist"),
    key!("allowed_uids", Endpoint, Kind::Ids, Default::Prose("`[supervisor]`'s"),
        "peer uids allowed to connect to this endpoint, replacing `[supervisor]`'s (each source's own list still applies to its tools)"),
    key!("allowed_gids", Endpoint, Kind::Ids, Default::Prose("`[supervisor]`'s"),
        "peer primary gids allowed to connect to this endpoint, replacing `[supervisor]`'s"),
    key!("hide", Endpoint, Kind::Strings, Default::Toml("[]"),
        "patterns of tool and prompt names (`SOURCE__NAME`, a pattern starting with a source's `SOURCE__` about that source only; `*` any run, `?` one character) hidden from every client"),
    key!("hidden_calls", Endpoint, Kind::Choice(&["denied", "unknown"]), Default::Toml("\"denied\""),
        "how a call to a hidden tool is answered: `denied` (an `isError` result, `class=denied`) or exactly like an unknown tool"),
    key!("clients", Endpoint, Kind::Table, Default::Toml("{}"),
        "client identities, `[endpoints.NAME.clients.LABEL]` with `token = true` (a named HTTP token), `uids`, `gids` (who it is), `allow` and `hide` (patterns; deny wins)"),
];

/// A rule between two keys, checked after each key is within its own bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    /// The keys it ties together.
    pub keys: &'static [&'static str],
    /// What must hold, and what happens otherwise.
    pub text: &'static str,
}

/// The rules between keys (checked in `mod.rs`, `Validator::server`).
pub const RULES: &[Rule] = &[
    Rule {
        keys: &["backoff_initial", "backoff_max"],
        text: "backoff_max must not be less than backoff_initial (an error naming whichever of the two the server sets itself)",
    },
    Rule {
        keys: &["client_max_inflight", "max_inflight"],
        text: "client_max_inflight above max_inflight is taken as max_inflight (one client may use all of it, never more)",
    },
    Rule {
        keys: &["max_clients_per_uid", "max_clients"],
        text: "max_clients_per_uid above `[supervisor] max_clients` is taken as max_clients (one user may then hold every seat)",
    },
];
