//! The configuration file as TOML gives it: every key optional and spanned, so validation
//! (`mod.rs`, `fields.rs`, ...) can name file, line and key.

use super::limits;
use serde::Deserialize;
use std::collections::BTreeMap;
use toml::Spanned;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFile {
    #[serde(default)]
    pub(super) supervisor: RawSupervisor,
    /// Not `Spanned`: toml cannot span a table made only by its sub-tables' headers
    /// (`[defaults.env]` alone), and would refuse the file.
    #[serde(default)]
    pub(super) defaults: Option<RawServer>,
    #[serde(default)]
    pub(super) servers: BTreeMap<Spanned<String>, Spanned<RawServer>>,
    #[serde(default)]
    pub(super) endpoints: BTreeMap<Spanned<String>, Spanned<RawEndpoint>>,
}

/// `[endpoints.NAME]` (issue 31).
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawEndpoint {
    pub(super) servers: Option<Spanned<Vec<String>>>,
    pub(super) descriptions: Option<Spanned<BTreeMap<String, String>>>,
    pub(super) status_tool: Option<Spanned<String>>,
    pub(super) http: Option<bool>,
    pub(super) http_token_file: Option<Spanned<String>>,
    pub(super) allowed_uids: Option<Vec<u32>>,
    pub(super) allowed_gids: Option<Vec<u32>>,
    pub(super) hide: Option<Spanned<Vec<String>>>,
    pub(super) hidden_calls: Option<Spanned<String>>,
    pub(super) clients: Option<BTreeMap<Spanned<String>, Spanned<RawClient>>>,
}

/// `[endpoints.NAME.clients.LABEL]` (issue 31 §5): one client identity's rules.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawClient {
    pub(super) token: Option<bool>,
    pub(super) uids: Option<Vec<u32>>,
    pub(super) gids: Option<Vec<u32>>,
    pub(super) allow: Option<Spanned<Vec<String>>>,
    pub(super) hide: Option<Spanned<Vec<String>>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSupervisor {
    pub(super) socket_dir: Option<String>,
    pub(super) max_clients: Option<Spanned<usize>>,
    pub(super) socket_mode: Option<Spanned<String>>,
    pub(super) socket_group: Option<Spanned<String>>,
    pub(super) allowed_uids: Option<Vec<u32>>,
    pub(super) allowed_gids: Option<Vec<u32>>,
    pub(super) operator_uids: Option<Vec<u32>>,
    pub(super) operator_gids: Option<Vec<u32>>,
    pub(super) viewer_uids: Option<Vec<u32>>,
    pub(super) viewer_gids: Option<Vec<u32>>,
    pub(super) availability_objective: Option<Spanned<f64>>,
    pub(super) client_memory: Option<Spanned<usize>>,
    pub(super) metrics_listen: Option<Spanned<String>>,
    pub(super) metrics_allow_remote: Option<bool>,
    pub(super) http_listen: Option<Spanned<String>>,
    pub(super) http_allow_remote: Option<bool>,
    pub(super) http_allowed_origins: Option<Vec<String>>,
    pub(super) http_allowed_hosts: Option<Vec<String>>,
    pub(super) http_session_idle: Dur,
    pub(super) http_max_sessions: Option<Spanned<usize>>,
    pub(super) http_max_requests: Option<Spanned<usize>>,
    pub(super) log_format: Option<Spanned<String>>,
    pub(super) subreaper: Option<bool>,
    pub(super) otel_endpoint: Option<Spanned<String>>,
    pub(super) otel_service_name: Option<Spanned<String>>,
    pub(super) otel_headers: Option<Spanned<BTreeMap<String, String>>>,
    pub(super) state_dir: Option<String>,
    pub(super) token_dir: Option<String>,
    pub(super) limits: Option<Spanned<String>>,
}

pub(super) type Dur = Option<Spanned<DurText>>;

/// A duration as written: a string, or a bare number that is then refused with a message
/// saying how to write it (`probe_timeout = 10` is the likely mistake).
#[derive(Deserialize, Clone, Debug)]
#[serde(untagged)]
pub(super) enum DurText {
    Text(String),
    Int(i64),
    Float(f64),
}

impl DurText {
    pub(super) fn text(&self) -> String {
        match self {
            DurText::Text(s) => s.clone(),
            DurText::Int(i) => i.to_string(),
            DurText::Float(f) => f.to_string(),
        }
    }
}

#[derive(Deserialize, Default, Clone)]
#[serde(deny_unknown_fields)]
pub(super) struct RawServer {
    pub(super) command: Option<Spanned<String>>,
    pub(super) args: Option<Spanned<Vec<String>>>,
    pub(super) env: Option<BTreeMap<String, String>>,
    pub(super) cwd: Option<String>,
    pub(super) clean_env: Option<bool>,
    pub(super) env_allow: Option<Vec<String>>,
    pub(super) restart: Option<Spanned<String>>,
    pub(super) start_timeout: Dur,
    pub(super) request_timeout: Dur,
    pub(super) method_timeouts: Option<BTreeMap<String, Spanned<DurText>>>,
    pub(super) probe_interval: Dur,
    pub(super) probe_timeout: Dur,
    pub(super) probe_failures: Option<Spanned<u32>>,
    pub(super) backoff_initial: Dur,
    pub(super) backoff_max: Dur,
    pub(super) backoff_reset_after: Dur,
    pub(super) stop_grace: Dur,
    pub(super) kill_timeout: Dur,
    pub(super) max_message_size: Option<Spanned<usize>>,
    pub(super) max_message_depth: Option<Spanned<usize>>,
    pub(super) queue_limit: Option<Spanned<usize>>,
    pub(super) max_subscriptions: Option<Spanned<usize>>,
    pub(super) queue_wait: Dur,
    pub(super) max_inflight: Option<Spanned<usize>>,
    pub(super) client_max_inflight: Option<Spanned<usize>>,
    pub(super) client_queue: Option<Spanned<usize>>,
    pub(super) client_stall_timeout: Dur,
    pub(super) client_idle_timeout: Dur,
    pub(super) first_message_timeout: Dur,
    pub(super) max_clients_per_uid: Option<Spanned<usize>>,
    pub(super) client_capabilities: Option<toml::Table>,
    pub(super) mark_unavailable: Option<bool>,
    pub(super) protocol: Option<Spanned<String>>,
    pub(super) era_probe_timeout: Dur,
    pub(super) roots: Option<Spanned<Vec<String>>>,
    pub(super) client_roots: Option<Spanned<String>>,
    pub(super) allowed_uids: Option<Vec<u32>>,
    pub(super) allowed_gids: Option<Vec<u32>>,
    pub(super) user: Option<Spanned<String>>,
    pub(super) group: Option<Spanned<String>>,
    pub(super) http: Option<bool>,
    pub(super) http_token_file: Option<Spanned<String>>,
    pub(super) required: Option<bool>,
    pub(super) start: Option<Spanned<String>>,
    pub(super) idle_stop: Dur,
    pub(super) memory_max: Option<Spanned<limits::LimitText>>,
    pub(super) tasks_max: Option<Spanned<limits::LimitText>>,
    pub(super) open_files_max: Option<Spanned<limits::LimitText>>,
    pub(super) url: Option<Spanned<String>>,
    pub(super) headers: Option<Spanned<BTreeMap<String, RawHeader>>>,
    pub(super) tls_ca_file: Option<Spanned<String>>,
    pub(super) tls_skip_verify: Option<Spanned<bool>>,
    pub(super) allow_plain_http: Option<Spanned<bool>>,
    pub(super) max_connections: Option<Spanned<usize>>,
    pub(super) connect_timeout: Dur,
    pub(super) oauth: Option<Spanned<RawOAuth>>,
}

/// `[servers.NAME.oauth]` (issue 30).
#[derive(Deserialize, Clone, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawOAuth {
    pub(super) grant: Option<Spanned<String>>,
    pub(super) client_id: Option<Spanned<String>>,
    pub(super) client_secret_file: Option<Spanned<String>>,
    pub(super) private_key_file: Option<Spanned<String>>,
    pub(super) signing_algorithm: Option<Spanned<String>>,
    pub(super) client_metadata_url: Option<Spanned<String>>,
    pub(super) scopes: Option<Spanned<Vec<String>>>,
    pub(super) redirect_port: Option<Spanned<u16>>,
    pub(super) login_timeout: Option<Spanned<String>>,
    pub(super) issuer: Option<Spanned<String>>,
}

/// A url server's header value: a string, or where to read it.
#[derive(Deserialize, Clone)]
#[serde(untagged)]
pub(super) enum RawHeader {
    Literal(String),
    From(RawHeaderFrom),
}

/// `{ env = "VAR", prefix = "Bearer " }` or `{ file = "PATH", prefix = "…" }`.
#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHeaderFrom {
    pub(super) env: Option<String>,
    pub(super) file: Option<String>,
    pub(super) prefix: Option<String>,
}
