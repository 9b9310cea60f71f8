//! What `status` shows of a running instance, as its upstream describes it: the resources a
//! child's tree uses, the state of a remote session. Never a secret (no session id, no token).

use serde::Serialize;

/// What an upstream says of a running instance ([`super::Upstream::describe`]), each part
/// present only where it means something: a child has a process and a usage, a remote
/// session has its session facts.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Description {
    /// The process id (= process group id) of a child; `None` for an upstream with no process.
    pub pid: Option<u32>,
    /// What its tree used at the last sample of its limits; `None` before the first sample
    /// and for an upstream with no process.
    pub usage: Option<Usage>,
    /// A remote session's state; `None` for a child.
    pub remote: Option<RemoteStatus>,
}

/// What an instance's tree uses, as last sampled.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Usage {
    /// Bytes: `memory.current` (cgroup), or the sum of the processes' RSS (`rlimit`).
    pub memory_bytes: u64,
    /// Processes plus threads: `pids.current` (cgroup), or the sum of `num_threads`.
    pub tasks: u64,
}

/// What `status` shows of a remote session (issue 29, decisions): never its id.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct RemoteStatus {
    /// The endpoint, without query.
    pub url: String,
    /// Whether a session is open (an `Mcp-Session-Id` was given and not lost).
    pub session: bool,
    /// How long the session has been open, in seconds.
    pub session_age_s: Option<u64>,
    /// The negotiated protocol version, once known.
    pub protocol_version: Option<String>,
    /// The status of the last HTTP response.
    pub last_http_status: Option<u16>,
    /// The last error (a connect failure, an HTTP error status), secrets never included.
    pub last_error: Option<String>,
    /// The sign-in (issue 30): whether signed in, the scopes, the expiry; never a token.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auth: Option<SignInStatus>,
}

/// What `status` shows of a sign-in to a remote server (issue 30; filled by `auth`): never a
/// token.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct SignInStatus {
    /// `authorization_code` or `client_credentials`.
    pub grant: &'static str,
    /// Whether a token (or a refresh token) is held.
    pub signed_in: bool,
    /// The authorization server's issuer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
    /// The scopes held.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// Seconds until the access token expires (negative: expired).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_in_s: Option<i64>,
    /// Whether a refresh token is held.
    pub refreshable: bool,
    /// The scope a step-up asked for that a person must grant.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub needs_scope: Option<String>,
    /// The last sign-in error (discovery, registration, a refused refresh).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// A server's limits in `status` (null when it has none; filled by `child::limits`).
#[derive(Debug, Clone, Serialize)]
pub struct LimitStatus {
    /// `cgroup` or `rlimit`: what enforces `memory_max` and `tasks_max` for this server.
    pub mechanism: &'static str,
    /// `memory_max` in bytes.
    pub memory_max: Option<u64>,
    /// `tasks_max`.
    pub tasks_max: Option<u64>,
    /// `open_files_max` (`RLIMIT_NOFILE` of each process).
    pub open_files_max: Option<u64>,
    /// The running instance's tree memory, in bytes, at the last sample (every second,
    /// `child::limits::LIMIT_SAMPLE`; null before the first, or without a tree limit).
    pub memory_bytes: Option<u64>,
    /// The running instance's tree tasks at the last sample.
    pub tasks: Option<u64>,
}

/// What `status` shows of a server's upstream beyond the actor's own facts, running or not
/// (issue 48 §2: the starter says it, so the actor names neither a process nor a remote
/// session): its limits and usage (a child), its remote session and sign-in (a url server).
#[derive(Debug, Clone, Default)]
pub struct UpstreamStatus {
    /// The configured limits with the running instance's usage; `None` without limits.
    pub limits: Option<LimitStatus>,
    /// The remote session; `None` for a child.
    pub remote: Option<RemoteStatus>,
}
