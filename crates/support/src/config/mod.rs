//! `supervisor.toml`: TOML text → raw serde structs → validated [`Config`].
//!
//! Owns: every default value and every validation rule. Never touches processes or sockets.
//! Errors name the file, the line and the key (issue 2: a bad file exits 2 with such a message).
//!
//! Shape (a contract; see `supervisor.toml.example` and docs/book/src/reference/configuration.md):
//! `[supervisor]` (daemon-wide), `[defaults]` (any server key except `command`/`args`, applied to
//! every server), and `[servers.NAME]` with NAME matching `[a-z0-9_-]+`.

use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;
use toml::Spanned;

mod demand;
mod endpoint;
mod exposure;
mod fields;
mod http;
pub mod keys;
mod limits;
mod locate;
mod logs;
mod oauth;
mod otel;
mod raw;
mod remote;
mod secrets;
mod values;

pub use demand::StartMode;
pub use endpoint::{label_id, ClientRule, EndpointConfig, HiddenCalls, Policy, NAME_MAX};
pub use exposure::exposure;
pub use fields::{ClientRoots, RestartPolicy};
pub use http::{HttpConfig, DEFAULT_HTTP_LISTEN};
use keys::Key;
pub use limits::{LimitMode, Limits, MEMORY_MAX_MIN};
pub use locate::{default_path, socket_dir_of};
pub use logs::LogFormat;
pub use oauth::{Grant, OAuthConfig, LOGIN_TIMEOUT};
pub use otel::{traces_url, OtelConfig, TRACES_PATH};
use raw::{Dur, RawFile, RawServer, RawSupervisor};
pub use remote::{is_loopback_host, shown_url, HeaderSource, RemoteConfig};
/// The default availability objective (`[supervisor] availability_objective`), which
/// `observe::history` measures against.
pub const DEFAULT_OBJECTIVE: f64 = 0.999;

pub use values::{
    default_socket_dir, env_matches, parse_duration, parse_mode, resolve_group, resolve_user,
    UserInfo,
};

/// Environment variables a clean child environment keeps (`clean_env = true`) unless
/// `env_allow` says otherwise; `reference/supervision.md` §4.10.
pub const DEFAULT_ENV_ALLOW: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LC_*",
    "TZ",
    "TMPDIR",
    "XDG_RUNTIME_DIR",
    "DISPLAY",
    "WAYLAND_DISPLAY",
    "XAUTHORITY",
    "DBUS_SESSION_BUS_ADDRESS",
];

/// The supervisor's own plumbing, never passed to a child (R18): exact names or `PREFIX*`.
pub const ENV_NEVER: &[&str] = &[
    "NOTIFY_SOCKET",
    "LISTEN_*",
    "WATCHDOG_*",
    "JOURNAL_STREAM",
    "INVOCATION_ID",
];

/// A validated configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The file it came from.
    pub path: PathBuf,
    /// Daemon-wide settings.
    pub supervisor: SupervisorConfig,
    /// Servers by name, in name order.
    pub servers: BTreeMap<String, ServerConfig>,
    /// Endpoints by name, in name order (issue 31): names shared with `servers`, never equal.
    pub endpoints: BTreeMap<String, EndpointConfig>,
    /// The keys that set values which may be secrets (a non-empty `env` table, or
    /// `otel_headers`), as dotted paths where they are written (`servers.NAME.env`,
    /// `defaults.env`, `supervisor.otel_headers`): what [`exposure`] names.
    pub secrets: Vec<String>,
    /// What is valid but should change, each naming the file, line and key as an error does
    /// (a server name holding `__` that no endpoint serves, issue 47 §3): `check-config`
    /// prints them, `run` and `reload` log them.
    pub warnings: Vec<ConfigError>,
}

/// `[supervisor]`.
#[derive(Debug, Clone, PartialEq)]
pub struct SupervisorConfig {
    /// Directory of `<name>.sock` sockets. Default: `$XDG_RUNTIME_DIR/mcp-supervisor` when that
    /// variable is set and we are not root, else `/run/mcp-supervisor`. A relative path is taken
    /// relative to the config file's directory.
    pub socket_dir: PathBuf,
    /// `state_dir`: where on-demand servers keep the record of their last run
    /// (`NAME.cache.json`). Default: systemd's `$STATE_DIRECTORY`, else `socket_dir`. It gets
    /// `socket_dir`'s ownership checks when some server needs it (issue 26 §5).
    pub state_dir: PathBuf,
    /// `token_dir`: where sign-ins to url servers are kept (issue 30), a persistent directory
    /// (never a tmpfs): `$STATE_DIRECTORY` under systemd, else `$XDG_STATE_HOME/mcp-supervisor`
    /// (`~/.local/state/mcp-supervisor`), or `/var/lib/mcp-supervisor` as root.
    pub token_dir: PathBuf,
    /// Connected clients per server beyond which new connections are refused (R24). Default 256.
    pub max_clients: usize,
    /// Mode of every socket the supervisor binds (server sockets and `control.sock`). Default
    /// 0600 (issue 7 §4); `socket_mode = "0660"` with `socket_group` shares them with a group.
    pub socket_mode: u32,
    /// Group given to every socket the supervisor binds (and to `socket_dir` when the supervisor
    /// creates it). Default: none (the supervisor's own group).
    pub socket_group: Option<u32>,
    /// Peer uids allowed to connect besides the supervisor's own uid and root (`SO_PEERCRED`).
    pub allowed_uids: Vec<u32>,
    /// Peer primary gids allowed to connect (`SO_PEERCRED` reports the primary gid only).
    pub allowed_gids: Vec<u32>,
    /// Bytes every client's unfinished input may hold together, beyond which the large holders
    /// are disconnected with an error (issue 14 §3). Default 256 MiB; read at start.
    pub client_memory: usize,
    /// Peer uids allowed to use `control.sock` (the operators: status, logs, stop, start,
    /// restart, reload) besides the supervisor's own uid and root. Default none (issue 14 §2:
    /// a client is not an operator).
    pub operator_uids: Vec<u32>,
    /// Peer primary gids allowed to use `control.sock`. Default none.
    pub operator_gids: Vec<u32>,
    /// Peer uids allowed to `watch` on `control.sock` (and run `top`) with a redacted view:
    /// no stderr tails, no panic messages, no verbs (issue 33). Default none.
    pub viewer_uids: Vec<u32>,
    /// Peer primary gids allowed to watch, likewise. Default none.
    pub viewer_gids: Vec<u32>,
    /// The availability objective of every server's SLI, strictly between 0 and 1 (issue 33;
    /// default 0.999, [`DEFAULT_OBJECTIVE`]).
    pub availability_objective: f64,
    /// `host:port` of an HTTP endpoint serving `GET /metrics` for Prometheus (issue 8).
    /// Default: none (metrics only through `mcp-supervisor metrics`). It has no authentication:
    /// keep it on loopback unless the network is trusted.
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// The Streamable HTTP endpoint's TCP side (issue 16): one address for every server with
    /// `http = true`, each at `/mcp/NAME`. Default `127.0.0.1:8931`; `"off"` serves HTTP on
    /// the Unix sockets (`NAME.http.sock`) only. Only bound when some server has `http = true`.
    pub http: HttpConfig,
    /// `log_format`: `"auto"` (default), `"text"`, `"json"` or `"journal"` (issue 17 §3).
    pub log_format: LogFormat,
    /// `subreaper`: outside a PID namespace, become a child subreaper so descendants that
    /// leave a child's process group are reparented to us and killed with it (issue 17 §1).
    /// Default true; as PID 1 it does not apply (every orphan comes to PID 1).
    pub subreaper: bool,
    /// OpenTelemetry traces (issue 17 §4): `None` (the default) unless `otel_endpoint` is set.
    /// Read at start: a reload that changes these keys takes effect at the next start.
    pub otel: Option<OtelConfig>,
    /// `limits`: how `memory_max`/`tasks_max` are enforced (issue 18 §3). Read at start.
    pub limits: LimitMode,
}

/// One `[servers.NAME]` table after defaults are applied.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerConfig {
    /// The server's name (`[a-z0-9_-]+`); socket `<socket_dir>/<name>.sock`.
    pub name: String,
    /// Program to execute directly (never through a shell); looked up in `PATH` if bare, and
    /// relative to the config file's directory if it is a relative path with a `/`.
    pub command: String,
    /// Arguments. Default empty.
    pub args: Vec<String>,
    /// Variables added to the child's environment.
    pub env: BTreeMap<String, String>,
    /// Working directory. Default: the supervisor's.
    pub cwd: Option<PathBuf>,
    /// Start the child from an empty environment plus `env_allow` and `env`. Default false,
    /// but true when `user` is set (issue 14 §4: root's environment is not the user's).
    pub clean_env: bool,
    /// Variables kept by `clean_env` (names, or prefixes ending in `*`). Default [`DEFAULT_ENV_ALLOW`].
    pub env_allow: Vec<String>,
    /// Restart policy. Default `always`.
    pub restart: RestartPolicy,
    /// Spawn → handshake answered; past it the start failed. Default 60 s (R7).
    pub start_timeout: Duration,
    /// Deadline of each forwarded request. Default 120 s.
    pub request_timeout: Duration,
    /// Per-method deadlines overriding `request_timeout` (`[servers.x.method_timeouts]`).
    pub method_timeouts: BTreeMap<String, Duration>,
    /// Silence after which a ready child is probed. Default 30 s (R13).
    pub probe_interval: Duration,
    /// How long a probe may stay unanswered. Default 10 s (R13).
    pub probe_timeout: Duration,
    /// Consecutive unanswered probes, with nothing heard meanwhile, that mean death. Default 3.
    pub probe_failures: u32,
    /// First restart delay. Default 1 s (R9).
    pub backoff_initial: Duration,
    /// Largest restart delay. Default 60 s (R9).
    pub backoff_max: Duration,
    /// Readiness held this long resets the backoff. Default 60 s (R9).
    pub backoff_reset_after: Duration,
    /// After closing stdin, before SIGTERM. Default 2 s (R14).
    pub stop_grace: Duration,
    /// After SIGTERM, before SIGKILL. Default 5 s (R14).
    pub kill_timeout: Duration,
    /// Largest message accepted from the child or a client, in bytes. Default 64 MiB.
    pub max_message_size: usize,
    /// Deepest nesting of arrays and objects in a message relayed either way (issue 47 §7).
    /// Default 127, the deepest serde_json reads.
    pub max_message_depth: usize,
    /// Requests held while the child starts or backs off. Default 64.
    pub queue_limit: usize,
    /// Resource subscriptions plus served `subscriptions/listen` streams one client may hold
    /// at once (issue 12 §6: every table input can grow has a limit). Default 256.
    pub max_subscriptions: usize,
    /// How long a held request may wait for the child. Default 5 s.
    pub queue_wait: Duration,
    /// Requests in flight to the child at once (R24). Default 256.
    pub max_inflight: usize,
    /// Requests one client may have in flight to the child at once, so one client cannot take
    /// all of `max_inflight` (issue 14 §3). Default three quarters of `max_inflight`.
    pub client_max_inflight: usize,
    /// Messages queued toward one client before it is disconnected as too slow (R17). Default 1024.
    pub client_queue: usize,
    /// How long a client may stay silent in the middle of a line before it gets an error and
    /// is disconnected (issue 14 §3, slowloris). Every byte restarts it. Default 30 s.
    pub client_stall_timeout: Duration,
    /// How long a connection may carry nothing in either direction before it gets an error and
    /// is closed (issue 14 §3). Default none (never): a client waiting on a long call, or
    /// holding a subscription, is silent and must not be cut unless the operator says so.
    pub client_idle_timeout: Option<Duration>,
    /// How long a new connection may go without a complete JSON-RPC message before it gets an
    /// error line and is closed (issue 47 §4, row S4). Default 10 s.
    pub first_message_timeout: Duration,
    /// Seats of `[supervisor] max_clients` one user (not the supervisor's own, not root) may
    /// hold (issue 47 §4); `None`: half of `max_clients`, rounded up (the daemon applies it,
    /// taking a value above `max_clients` as `max_clients`).
    pub max_clients_per_uid: Option<usize>,
    /// Client capabilities the supervisor declares to the child in `initialize`.
    /// Default `{"roots":{},"sampling":{},"elicitation":{}}`: the child's requests of these kinds
    /// are routed to a client that declared them, or answered with an error (issue 3 §5).
    pub client_capabilities: Value,
    /// Append an "unavailable" note to cached tool descriptions served during an outage.
    /// Default true (issue 5 §3).
    pub mark_unavailable: bool,
    /// Which protocol era to drive the child in: `"auto"` (default: probe with
    /// `server/discover` first and remember the verdict), a handshake revision
    /// (`"2024-11-05"` .. `"2025-11-25"`), or `"2026-07-28"` (issue 6 §1).
    pub protocol: vocab::protocol::ChildProtocol,
    /// How long `auto` waits for an answer to its `server/discover` probe before it decides the
    /// child is of the handshake era. Default 10 s (a slow-starting `uvx`/Python server must
    /// have time to answer; a legacy server that ignores unknown requests costs this once).
    pub era_probe_timeout: Duration,
    /// The roots the shared child sees whenever no client is asked (K28): `file://` URIs, in
    /// order. Configured as URIs or absolute paths (a path becomes a `file://` URI named after
    /// its last component). Default: none (an empty list, never a refusal).
    pub roots: Vec<Value>,
    /// Whose roots the child sees: `"caller"` (default) or `"none"`; see [`ClientRoots`].
    pub client_roots: ClientRoots,
    /// Peer uids allowed to connect to this server's socket, replacing `[supervisor]`'s
    /// `allowed_uids` (the supervisor's uid and root always may). Default: `[supervisor]`'s.
    pub allowed_uids: Option<Vec<u32>>,
    /// Peer primary gids allowed to connect to this server, replacing `[supervisor]`'s.
    pub allowed_gids: Option<Vec<u32>>,
    /// Run the child as this user (name or numeric uid); only when the supervisor runs as root.
    /// HOME, USER and LOGNAME are set for that user unless `env` sets them. Default: none.
    pub user: Option<String>,
    /// Run the child with this group (name or numeric gid). Default: the primary group of
    /// `user`, else unchanged.
    pub group: Option<String>,
    /// `http = true`: serve this server over Streamable HTTP too (issue 16): on
    /// `[supervisor] http_listen` at `/mcp/NAME` (bearer token required) and on
    /// `<socket_dir>/NAME.http.sock` (`SO_PEERCRED` and the allow-lists, like `NAME.sock`).
    /// Default false.
    pub http: bool,
    /// `http_token_file`: the file holding the bearer token for the TCP endpoint (the operator
    /// writes it). Default `<socket_dir>/NAME.http.token`, created with a random token, mode
    /// 0600, when missing.
    pub http_token_file: Option<PathBuf>,
    /// `required = true`: `GET /readyz` answers 503 until this server is ready (issue 17 §2).
    /// Default false: an optional server's outage never takes the pod out of a Service.
    pub required: bool,
    /// `start`: spawn at supervisor start (`eager`, default) or on the first request that needs
    /// the child (`on-demand`, issue 18 §1).
    pub start: StartMode,
    /// `idle_stop`: a ready child no client has used for this long, holding no subscription or
    /// listen stream, is stopped through the ladder and shown `idle` (issue 18 §2). Default
    /// none.
    pub idle_stop: Option<Duration>,
    /// The record of the last run (handshake, lists) of an on-demand server:
    /// `<state_dir>/NAME.cache.json` (issue 18 §1).
    pub cache_file: PathBuf,
    /// `memory_max`, `tasks_max`, `open_files_max` (issue 18 §3). Default: none.
    pub limits: Limits,
    /// A url server's remote settings (issue 29): `Some` means the upstream is a remote
    /// Streamable HTTP session, and `command`, `args`, `env`, `cwd`, the identity and the
    /// limits are unused (empty). `None` for a child process.
    pub remote: Option<RemoteConfig>,
}

impl ServerConfig {
    /// The deadline for a request with this method.
    pub fn timeout_for(&self, method: &str) -> Duration {
        self.method_timeouts
            .get(method)
            .copied()
            .unwrap_or(self.request_timeout)
    }

    /// The settings that make a child different: a change means a restart on reload.
    pub fn same_child(&self, other: &ServerConfig) -> bool {
        self == other
    }

    /// Whether only `roots`/`client_roots` differ: applied without a restart (the child is
    /// sent `notifications/roots/list_changed`).
    pub fn same_child_but_roots(&self, other: &ServerConfig) -> bool {
        let mut a = self.clone();
        a.roots.clone_from(&other.roots);
        a.client_roots = other.client_roots;
        // The HTTP endpoint is the daemon's, not the child's (issue 16): no restart for it.
        a.http = other.http;
        a.http_token_file.clone_from(&other.http_token_file);
        // Readiness is the daemon's too, and so are when the child starts and stops.
        a.required = other.required;
        a.start = other.start;
        a.idle_stop = other.idle_stop;
        a.cache_file.clone_from(&other.cache_file);
        a == *other
    }
}

/// A configuration error: file, line (1-based, 0 when unknown), key and message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    /// The file.
    pub path: PathBuf,
    /// 1-based line, or 0 when the error is not tied to a line (unreadable file).
    pub line: usize,
    /// Dotted key path such as `servers.cua.start_timeout`, or empty.
    pub key: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.path.display())?;
        if self.line > 0 {
            write!(f, ":{}", self.line)?;
        }
        if !self.key.is_empty() {
            write!(f, ": key `{}`", self.key)?;
        }
        write!(f, ": {}", self.message)
    }
}

/// The longest Unix socket path (`sun_path` is 108 bytes including the terminating NUL).
pub const SUN_PATH_MAX: usize = 107;

/// What validation checks besides the file's syntax and values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Checks {
    /// Also what this host has: users and groups exist (`user`, `group`, `socket_group`), and
    /// the files the configuration says must exist (an operator's `http_token_file`). What
    /// `run`, `reload` and `check-config` use.
    #[default]
    Host,
    /// Syntax and values only (`check-config --portable`): for a file that runs elsewhere (a
    /// container image, a Kubernetes ConfigMap, a documentation snippet). The `Config` is for
    /// checking only: a `socket_group` name this host lacks becomes `None`, `user` and `group`
    /// are kept as written unresolved.
    Portable,
}

/// Reads and validates a file.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    load_with(path, Checks::Host)
}

/// Reads and validates a file with the given checks.
pub fn load_with(path: &Path, checks: Checks) -> Result<Config, ConfigError> {
    parse_with(path, &read(path)?, checks)
}

fn read(path: &Path) -> Result<String, ConfigError> {
    let bytes = std::fs::read(path).map_err(|e| ConfigError {
        path: path.to_path_buf(),
        line: 0,
        key: String::new(),
        message: format!("cannot read: {e}"),
    })?;
    String::from_utf8(bytes).map_err(|e| {
        // Name the line of the first byte that is not UTF-8 (issue 14 Why 6).
        let at = e.utf8_error().valid_up_to();
        let line = e
            .as_bytes()
            .iter()
            .take(at)
            .filter(|b| **b == b'\n')
            .count()
            + 1;
        ConfigError {
            path: path.to_path_buf(),
            line,
            key: String::new(),
            message: format!("the file is not UTF-8 (byte {at} is not): TOML files must be UTF-8"),
        }
    })
}

/// Validates TOML text; `path` names the file in errors and anchors a relative `socket_dir`.
pub fn parse(path: &Path, text: &str) -> Result<Config, ConfigError> {
    parse_with(path, text, Checks::Host)
}

/// Validates TOML text with the given checks (see [`parse`]).
pub fn parse_with(path: &Path, text: &str, checks: Checks) -> Result<Config, ConfigError> {
    let v = Validator {
        path,
        text,
        host: checks == Checks::Host,
        warnings: Default::default(),
    };
    let raw: RawFile = toml::from_str(text).map_err(|e| v.toml_error(&e))?;
    let supervisor = v.supervisor(&raw.supervisor)?;
    let defaults = match &raw.defaults {
        Some(d) => {
            if let Some(c) = &d.command {
                return Err(v.err(
                    c.span(),
                    "defaults.command",
                    "`command` belongs in [servers.NAME]",
                ));
            }
            if let Some(a) = &d.args {
                return Err(v.err(
                    a.span(),
                    "defaults.args",
                    "`args` belongs in [servers.NAME]",
                ));
            }
            // A url server's address and credentials are its own: a default would send one
            // server's token to every other (issue 29, decisions).
            for (key, at) in [
                ("url", d.url.as_ref().map(|v| v.span())),
                ("headers", d.headers.as_ref().map(|v| v.span())),
                ("tls_ca_file", d.tls_ca_file.as_ref().map(|v| v.span())),
                (
                    "tls_skip_verify",
                    d.tls_skip_verify.as_ref().map(|v| v.span()),
                ),
                (
                    "allow_plain_http",
                    d.allow_plain_http.as_ref().map(|v| v.span()),
                ),
                // A sign-in is one server's (issue 30).
                ("oauth", d.oauth.as_ref().map(|v| v.span())),
            ] {
                if let Some(at) = at {
                    return Err(v.err(
                        at,
                        &format!("defaults.{key}"),
                        &format!("`{key}` belongs in [servers.NAME]"),
                    ));
                }
            }
            // On its own first, so its errors name `defaults.KEY` even when no server uses it.
            v.server(Table(None), 0..0, d, &RawServer::default())?;
            d.clone()
        }
        None => RawServer::default(),
    };
    let mut servers = BTreeMap::new();
    for (name, server) in &raw.servers {
        let n = name.get_ref();
        if n.is_empty()
            || !n
                .bytes()
                .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-'))
            || n == "control"
        {
            return Err(v.err(
                name.span(),
                &format!("servers.{n}"),
                "server names must match [a-z0-9_-]+ (and `control` is reserved for the control socket)",
            ));
        }
        let mut cfg = v.server(Table(Some(n)), server.span(), server.get_ref(), &defaults)?;
        cfg.cache_file = supervisor.state_dir.join(format!("{n}.cache.json"));
        if let Some(r) = cfg.remote.as_mut() {
            r.token_dir = supervisor.token_dir.clone();
        }
        servers.insert(n.clone(), cfg);
        // A socket path must fit `sun_path` (108 bytes with its NUL): caught here rather than
        // as a bind error after start (issue 14 Why 6).
        let sock = supervisor.socket_dir.join(format!("{n}.sock"));
        let len = sock.as_os_str().len();
        if len > SUN_PATH_MAX {
            return Err(v.err(
                name.span(),
                &format!("servers.{n}"),
                &format!(
                    "its socket path {} is {len} bytes, over the {SUN_PATH_MAX} a Unix socket path may have; use a shorter socket_dir or server name",
                    sock.display()
                ),
            ));
        }
    }
    let mut endpoints = BTreeMap::new();
    if !raw.endpoints.is_empty() {
        let base = endpoint::defaults_alone(&v, &defaults)?;
        for (name, e) in &raw.endpoints {
            let cfg = v.endpoint(name, e, &servers, &base, &supervisor.socket_dir)?;
            endpoints.insert(name.get_ref().clone(), cfg);
        }
    }
    let mut warnings = separator_in_names(&v, &raw, &endpoints)?;
    warnings.extend(v.warnings.take());
    let mut secrets = Vec::new();
    if raw
        .supervisor
        .otel_headers
        .as_ref()
        .is_some_and(|h| !h.get_ref().is_empty())
    {
        secrets.push("supervisor.otel_headers".to_string());
    }
    if defaults.env.as_ref().is_some_and(|e| !e.is_empty()) {
        secrets.push("defaults.env".to_string());
    }
    for (name, server) in &raw.servers {
        if server.get_ref().env.as_ref().is_some_and(|e| !e.is_empty()) {
            secrets.push(format!("servers.{}.env", name.get_ref()));
        }
    }
    Ok(Config {
        path: path.to_path_buf(),
        supervisor,
        servers,
        endpoints,
        secrets,
        warnings,
    })
}

/// A server name holding `__`, the separator of an endpoint's exposed names (issue 47 §3,
/// N19): an error naming the server, its line and a rename when an endpoint serves it (its
/// names would be spelled like another source's: `a` + `b__echo` and `a__b` + `echo`), a
/// warning otherwise (it could not be added to an endpoint).
fn separator_in_names(
    v: &Validator<'_>,
    raw: &RawFile,
    endpoints: &BTreeMap<String, EndpointConfig>,
) -> Result<Vec<ConfigError>, ConfigError> {
    let mut warnings = Vec::new();
    for name in raw.servers.keys() {
        let n = name.get_ref();
        if !n.contains("__") {
            continue;
        }
        let taken = |c: &str| {
            raw.servers.keys().any(|k| k.get_ref() == c)
                || raw.endpoints.keys().any(|k| k.get_ref() == c)
        };
        let rename = rename_without_separator(n, taken);
        let key = format!("servers.{n}");
        match endpoints.values().find(|e| e.servers.contains(n)) {
            Some(e) => {
                return Err(v.err(
                    name.span(),
                    &key,
                    &format!(
                        "server `{n}` is a source of endpoint `{}` and its name holds `__`, which separates an endpoint's source from a tool's name (SOURCE__NAME): another source's tools could be spelled like its own; rename it, for example to `{rename}`",
                        e.name
                    ),
                ))
            }
            None => warnings.push(v.err(
                name.span(),
                &key,
                &format!(
                    "server `{n}`'s name holds `__`, which separates an endpoint's source from a tool's name (SOURCE__NAME), so no endpoint can serve it; rename it, for example to `{rename}`"
                ),
            )),
        }
    }
    Ok(warnings)
}

/// `name` with each run of `_` two or more long made one `_` (or one `-` when that name is
/// `taken`), then `-2`, `-3`… until it is not taken.
fn rename_without_separator(name: &str, taken: impl Fn(&str) -> bool) -> String {
    let collapse = |with: char| {
        let mut out = String::with_capacity(name.len());
        let mut run = 0usize;
        for c in name.chars() {
            if c == '_' {
                run += 1;
                continue;
            }
            match run {
                0 => {}
                1 => out.push('_'),
                _ => out.push(with),
            }
            run = 0;
            out.push(c);
        }
        match run {
            0 => {}
            1 => out.push('_'),
            _ => out.push(with),
        }
        out
    };
    let first = collapse('_');
    if !taken(&first) {
        return first;
    }
    let second = collapse('-');
    if !taken(&second) {
        return second;
    }
    (2u32..)
        .map(|k| format!("{first}-{k}"))
        .find(|c| !taken(c))
        .unwrap_or(first)
}

struct Validator<'a> {
    path: &'a Path,
    text: &'a str,
    /// Whether to check what exists on this host (files named by the configuration).
    host: bool,
    /// Warnings found while validating (a secret file others may read), for
    /// [`Config::warnings`].
    warnings: std::cell::RefCell<Vec<ConfigError>>,
}

/// Whose values `Validator::server` reads, and so whose keys its errors name: server NAME's own
/// table falling back to `[defaults]` (`Table(Some(NAME))`), or `[defaults]` alone
/// (`Table(None)`), validated on its own so that its errors name `defaults.KEY` at its line,
/// even when no server uses the value.
#[derive(Debug, Clone, Copy)]
struct Table<'a>(Option<&'a str>);

impl Table<'_> {
    /// The dotted key of `field` where its value is written: `servers.NAME.field` when the
    /// server's own table sets it (`own`), else `defaults.field`.
    fn key(self, field: &str, own: bool) -> String {
        match self.0 {
            Some(name) if own => format!("servers.{name}.{field}"),
            _ => format!("defaults.{field}"),
        }
    }
}

impl Validator<'_> {
    fn line_of(&self, offset: usize) -> usize {
        // Bytes, not a `str` slice: an offset inside a character must not panic.
        self.text
            .bytes()
            .take(offset)
            .filter(|b| *b == b'\n')
            .count()
            + 1
    }

    /// Records a warning (see [`Config::warnings`]).
    fn warn(&self, w: ConfigError) {
        self.warnings.borrow_mut().push(w);
    }

    fn err(&self, span: std::ops::Range<usize>, key: &str, message: &str) -> ConfigError {
        ConfigError {
            path: self.path.to_path_buf(),
            line: self.line_of(span.start),
            key: key.to_string(),
            message: message.to_string(),
        }
    }

    /// Turns a TOML/serde error into one naming line and key. The key is the TOML path of the
    /// table holding the error plus the key on the offending line (or the one serde names).
    fn toml_error(&self, e: &toml::de::Error) -> ConfigError {
        let message = e.message().trim().to_string();
        let (line, key) = match e.span() {
            Some(span) => {
                let line = self.line_of(span.start);
                (line, self.key_at(line, &message))
            }
            None => (0, String::new()),
        };
        ConfigError {
            path: self.path.to_path_buf(),
            line,
            key,
            message,
        }
    }

    /// Best-effort dotted key for an error on `line`: the enclosing `[table]` plus the key on
    /// that line, or the key serde quotes in the message (``unknown field `x` ``).
    fn key_at(&self, line: usize, message: &str) -> String {
        let lines: Vec<&str> = self.text.lines().collect();
        let here = lines
            .get(line.saturating_sub(1))
            .copied()
            .unwrap_or("")
            .trim();
        let quoted = message
            .split('`')
            .nth(1)
            .filter(|_| message.contains("field `"))
            .map(str::to_string);
        if let Some(header) = here.strip_prefix('[') {
            let table = header.trim_end_matches(']').trim().to_string();
            return match quoted {
                // An unknown table (`[server.a]`): the key is the unknown name itself.
                Some(k) if table == k || table.starts_with(&format!("{k}.")) => k,
                Some(k) => format!("{table}.{k}"),
                None => table,
            };
        }
        let table = lines
            .iter()
            .take(line.saturating_sub(1))
            .rev()
            .map(|l| l.trim())
            .find(|l| l.starts_with('['))
            .map(|l| l.trim_matches(|c| c == '[' || c == ']').trim().to_string());
        let local = here
            .split_once('=')
            .map(|(k, _)| k.trim().trim_matches('"').to_string())
            .filter(|k| !k.is_empty())
            .or(quoted)
            .unwrap_or_default();
        match table {
            Some(t) if !local.is_empty() => format!("{t}.{local}"),
            Some(t) => t,
            None => local,
        }
    }

    fn supervisor(&self, raw: &RawSupervisor) -> Result<SupervisorConfig, ConfigError> {
        let socket_dir = match &raw.socket_dir {
            Some(d) => {
                let p = PathBuf::from(d);
                if p.is_relative() {
                    self.path.parent().unwrap_or(Path::new(".")).join(p)
                } else {
                    p
                }
            }
            None => default_socket_dir(),
        };
        let socket_mode = match &raw.socket_mode {
            Some(m) => parse_mode(m.get_ref())
                .map_err(|msg| self.err(m.span(), "supervisor.socket_mode", &msg))?,
            None => 0o600,
        };
        let availability_objective = match &raw.availability_objective {
            Some(o) if *o.get_ref() > 0.0 && *o.get_ref() < 1.0 => *o.get_ref(),
            Some(o) => {
                return Err(self.err(
                    o.span(),
                    "supervisor.availability_objective",
                    &format!(
                        "{} is not strictly between 0 and 1; write e.g. 0.999 (99.9%)",
                        o.get_ref()
                    ),
                ))
            }
            None => DEFAULT_OBJECTIVE,
        };
        let socket_group = match &raw.socket_group {
            Some(g) if self.host => Some(
                resolve_group(g.get_ref())
                    .map_err(|msg| self.err(g.span(), "supervisor.socket_group", &msg))?,
            ),
            Some(g) => resolve_group(g.get_ref()).ok(),
            None => None,
        };
        let metrics_listen = match &raw.metrics_listen {
            Some(a) => {
                let addr: std::net::SocketAddr = a.get_ref().parse().map_err(|e| {
                    self.err(
                        a.span(),
                        "supervisor.metrics_listen",
                        &format!(
                            "`{}` is not host:port ({e}); write e.g. \"127.0.0.1:9464\"",
                            a.get_ref()
                        ),
                    )
                })?;
                // As `http_listen` (issue 26 §8): /metrics, /healthz and /readyz have no
                // authentication, so serving them beyond this host is said out loud.
                if !addr.ip().is_loopback() && raw.metrics_allow_remote != Some(true) {
                    return Err(self.err(
                        a.span(),
                        "supervisor.metrics_listen",
                        &format!(
                            "{addr} is not a loopback address: set metrics_allow_remote = true to serve /metrics, /healthz and /readyz beyond this host (they have no authentication)"
                        ),
                    ));
                }
                Some(addr)
            }
            None => None,
        };
        let http = self.http(raw)?;
        let log_format = self.log_format(raw)?;
        let otel = self.otel(raw)?;
        Ok(SupervisorConfig {
            http,
            log_format,
            subreaper: raw.subreaper.unwrap_or(true),
            limits: self.limit_mode(raw)?,
            otel,
            metrics_listen,
            state_dir: self.state_dir(raw, &socket_dir),
            token_dir: self.token_dir(raw),
            socket_dir,
            max_clients: self.supervisor_count(&keys::MAX_CLIENTS, &raw.max_clients)?,
            socket_mode,
            socket_group,
            allowed_uids: raw.allowed_uids.clone().unwrap_or_default(),
            allowed_gids: raw.allowed_gids.clone().unwrap_or_default(),
            operator_uids: raw.operator_uids.clone().unwrap_or_default(),
            client_memory: self.supervisor_count(&keys::CLIENT_MEMORY, &raw.client_memory)?,
            operator_gids: raw.operator_gids.clone().unwrap_or_default(),
            viewer_uids: raw.viewer_uids.clone().unwrap_or_default(),
            viewer_gids: raw.viewer_gids.clone().unwrap_or_default(),
            availability_objective,
        })
    }

    /// A duration key (`key`, written under `path`): the own value, else `default`'s,
    /// parsed and held to the key's bound ([`keys::Key::check_duration`]); `None` when
    /// neither sets it.
    fn duration(
        &self,
        key: &Key,
        path: &str,
        own: &Dur,
        default: &Dur,
    ) -> Result<Option<Duration>, ConfigError> {
        let Some(s) = own.as_ref().or(default.as_ref()) else {
            return Ok(None);
        };
        let text = s.get_ref().text();
        let d = parse_duration(&text).map_err(|m| self.err(s.span(), path, &m))?;
        key.check_duration(&text, d)
            .map_err(|m| self.err(s.span(), path, &m))?;
        Ok(Some(d))
    }

    /// One server's configuration from its own table `s` (at `span`) and `[defaults]` (`d`);
    /// with `Table(None)`, `s` is `[defaults]` itself (and `d` empty), validated on its own.
    fn server(
        &self,
        t: Table,
        span: std::ops::Range<usize>,
        s: &RawServer,
        d: &RawServer,
    ) -> Result<ServerConfig, ConfigError> {
        let limits = self.remote_limits(t, s, d)?;
        let remote = match t.0 {
            Some(_) => self.remote(t, span.clone(), s, limits)?,
            None => None,
        };
        let command = match t.0 {
            Some(_) if remote.is_none() => self.command(t, s, span.clone())?,
            _ => String::new(),
        };
        let restart = self.restart(t, s, d)?;
        let mut env = d.env.clone().unwrap_or_default();
        env.extend(s.env.clone().unwrap_or_default());
        let method_timeouts = self.method_timeouts(t, s, d)?;
        // `dur!(field, KEY)` and `count!(field, KEY)`: the server's own value, else
        // `[defaults]`, else the table's default, held to the table's bound; errors name the
        // key.
        macro_rules! dur {
            ($f:ident, $key:expr) => {
                self.duration(&$key, &t.key($key.name, s.$f.is_some()), &s.$f, &d.$f)?
                    .or($key.default_duration())
                    .unwrap_or_default()
            };
        }
        macro_rules! count {
            ($f:ident, $key:expr) => {
                self.count(&$key, &t.key($key.name, s.$f.is_some()), &s.$f, &d.$f)?
                    .or_else(|| $key.default_number().and_then(|n| n.try_into().ok()))
                    .unwrap_or_default()
            };
        }
        let cfg = ServerConfig {
            name: t.0.unwrap_or_default().to_string(),
            command,
            args: s.args.clone().map(Spanned::into_inner).unwrap_or_default(),
            env,
            cwd: s.cwd.clone().or(d.cwd.clone()).map(PathBuf::from),
            // A child run as another `user` starts from a clean environment unless the operator
            // says otherwise: root's tokens and agent sockets are not the user's (issue 14 §4).
            clean_env: s
                .clean_env
                .or(d.clean_env)
                .unwrap_or(s.user.is_some() || d.user.is_some()),
            env_allow: s
                .env_allow
                .clone()
                .or(d.env_allow.clone())
                .unwrap_or_else(|| DEFAULT_ENV_ALLOW.iter().map(|s| s.to_string()).collect()),
            restart,
            start_timeout: dur!(start_timeout, keys::START_TIMEOUT),
            request_timeout: dur!(request_timeout, keys::REQUEST_TIMEOUT),
            method_timeouts,
            probe_interval: dur!(probe_interval, keys::PROBE_INTERVAL),
            probe_timeout: dur!(probe_timeout, keys::PROBE_TIMEOUT),
            probe_failures: count!(probe_failures, keys::PROBE_FAILURES),
            backoff_initial: dur!(backoff_initial, keys::BACKOFF_INITIAL),
            backoff_max: dur!(backoff_max, keys::BACKOFF_MAX),
            backoff_reset_after: dur!(backoff_reset_after, keys::BACKOFF_RESET_AFTER),
            stop_grace: dur!(stop_grace, keys::STOP_GRACE),
            kill_timeout: dur!(kill_timeout, keys::KILL_TIMEOUT),
            max_message_size: count!(max_message_size, keys::MAX_MESSAGE_SIZE),
            max_message_depth: count!(max_message_depth, keys::MAX_MESSAGE_DEPTH),
            queue_limit: count!(queue_limit, keys::QUEUE_LIMIT),
            max_subscriptions: count!(max_subscriptions, keys::MAX_SUBSCRIPTIONS),
            queue_wait: dur!(queue_wait, keys::QUEUE_WAIT),
            max_inflight: count!(max_inflight, keys::MAX_INFLIGHT),
            client_max_inflight: 0,
            client_queue: count!(client_queue, keys::CLIENT_QUEUE),
            client_stall_timeout: dur!(client_stall_timeout, keys::CLIENT_STALL_TIMEOUT),
            client_idle_timeout: self.duration(
                &keys::CLIENT_IDLE_TIMEOUT,
                &t.key("client_idle_timeout", s.client_idle_timeout.is_some()),
                &s.client_idle_timeout,
                &d.client_idle_timeout,
            )?,
            first_message_timeout: dur!(first_message_timeout, keys::FIRST_MESSAGE_TIMEOUT),
            max_clients_per_uid: self.count(
                &keys::MAX_CLIENTS_PER_UID,
                &t.key("max_clients_per_uid", s.max_clients_per_uid.is_some()),
                &s.max_clients_per_uid,
                &d.max_clients_per_uid,
            )?,
            client_capabilities: fields::client_capabilities(s, d),
            mark_unavailable: s.mark_unavailable.or(d.mark_unavailable).unwrap_or(true),
            protocol: self.protocol(t, s, d)?,
            era_probe_timeout: dur!(era_probe_timeout, keys::ERA_PROBE_TIMEOUT),
            roots: self.roots(t, s, d)?,
            client_roots: self.client_roots(t, s, d)?,
            allowed_uids: s.allowed_uids.clone().or(d.allowed_uids.clone()),
            allowed_gids: s.allowed_gids.clone().or(d.allowed_gids.clone()),
            user: self.identity(t, "user", s.user.as_ref(), d.user.as_ref(), |u| {
                resolve_user(u).map(|_| ())
            })?,
            group: self.identity(t, "group", s.group.as_ref(), d.group.as_ref(), |g| {
                resolve_group(g).map(|_| ())
            })?,
            http: s.http.or(d.http).unwrap_or(false),
            start: self.start_mode(t, s, d)?,
            idle_stop: self.idle_stop(t, s, d)?,
            // Set by `parse` once `[supervisor]` is known.
            cache_file: PathBuf::new(),
            required: s.required.or(d.required).unwrap_or(false),
            limits: self.limits(t, s, d)?,
            http_token_file: self.token_file(t, s, d)?,
            remote,
        };
        let mut cfg = cfg;
        // A url server's default is `none`: local paths must not leak to a hosted service
        // (issue 29, decisions); only the server's own `client_roots` changes that.
        if cfg.remote.is_some() && s.client_roots.is_none() {
            cfg.client_roots = ClientRoots::None;
        }
        // Child-only keys inherited from `[defaults]` are ignored by a url server (issue 29,
        // decisions): cleared, so nothing downstream mistakes them for its settings.
        if cfg.remote.is_some() {
            cfg.env.clear();
            cfg.cwd = None;
            cfg.clean_env = false;
            cfg.user = None;
            cfg.group = None;
            cfg.limits = Limits::default();
        }
        // `client_max_inflight` above `max_inflight` is taken as `max_inflight` (keys::RULES).
        let share = (cfg.max_inflight.saturating_mul(3) / 4).max(1);
        cfg.client_max_inflight = self
            .count(
                &keys::CLIENT_MAX_INFLIGHT,
                &t.key("client_max_inflight", s.client_max_inflight.is_some()),
                &s.client_max_inflight,
                &d.client_max_inflight,
            )?
            .unwrap_or(share)
            .min(cfg.max_inflight);
        // keys::RULES: the error names backoff_max where it is written, else backoff_initial
        // (which alone took the delay over backoff_max's default).
        if cfg.backoff_max < cfg.backoff_initial {
            let max = s.backoff_max.as_ref().or(d.backoff_max.as_ref());
            let initial = s.backoff_initial.as_ref().or(d.backoff_initial.as_ref());
            let own_initial = s.backoff_initial.is_some() && s.backoff_max.is_none();
            return Err(match (max, initial) {
                (Some(_), Some(i)) if own_initial => self.err(
                    i.span(),
                    &t.key("backoff_initial", true),
                    &format!(
                        "must not be more than backoff_max ({}, from [defaults])",
                        keys::show_duration(cfg.backoff_max)
                    ),
                ),
                (None, Some(i)) => self.err(
                    i.span(),
                    &t.key("backoff_initial", s.backoff_initial.is_some()),
                    &format!(
                        "must not be more than backoff_max ({}, its default)",
                        keys::show_duration(cfg.backoff_max)
                    ),
                ),
                (Some(m), _) => self.err(
                    m.span(),
                    &t.key("backoff_max", s.backoff_max.is_some()),
                    "must not be less than backoff_initial",
                ),
                // The defaults keep the rule; reached only if they stop to.
                (None, None) => self.err(
                    span,
                    &t.key("backoff_max", true),
                    "must not be less than backoff_initial",
                ),
            });
        }
        Ok(cfg)
    }
}

#[cfg(test)]
mod props;
#[cfg(test)]
mod tests;
