//! `[endpoints.NAME]` (issue 31): one endpoint in front of many servers, served on
//! `NAME.sock`, `attach NAME` and the HTTP front like a server, with namespaced tools.
//!
//! Owns: the endpoint keys' validation. The names of endpoints and servers share one
//! namespace (`control` reserved): a collision is an error naming the endpoint's table.

use super::raw::{RawEndpoint, RawServer};
use super::{ConfigError, ServerConfig, Validator, SUN_PATH_MAX};
use std::collections::BTreeMap;
use std::path::Path;

/// The longest exposed name most clients accept (`^[a-zA-Z0-9_-]{1,64}$`, the strictest
/// common client rule for tool names).
pub const NAME_MAX: usize = 64;

/// One validated `[endpoints.NAME]`.
#[derive(Debug, Clone, PartialEq)]
pub struct EndpointConfig {
    /// Its name: `NAME.sock`, `attach NAME`, `/mcp/NAME`.
    pub name: String,
    /// Its sources, in the order written (`["*"]`: every server, in name order). The order
    /// decides which of two sources offering the same resource URI or template wins.
    pub servers: Vec<String>,
    /// `descriptions`: what each source is for, said in the endpoint's instructions.
    pub descriptions: BTreeMap<String, String>,
    /// `status_tool`: the name of a tool that reports each source's state; off when `None`.
    /// The name is reserved: no source's tool can take it.
    pub status_tool: Option<String>,
    /// Who sees and may call what.
    pub policy: Policy,
    /// What faces the endpoint's clients: `[defaults]`'s client limits (`client_queue`,
    /// `max_message_size`, `client_stall_timeout`, `client_idle_timeout`) with the endpoint's
    /// own `http`, `http_token_file`, `allowed_uids` and `allowed_gids`. Its `command` is empty:
    /// an endpoint runs no child.
    pub front: ServerConfig,
}

/// An endpoint's policy (issue 31 §5): patterns over exposed tool and prompt names
/// (`SOURCE__NAME`; `*` any run of characters, `?` one), deny winning.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Policy {
    /// `hide`: hidden from every client.
    pub hide: Vec<String>,
    /// `hidden_calls`: a call to a hidden tool is answered `denied` (the default: a tool
    /// result with `isError` and `class=denied`), or `unknown` (exactly like a tool that does
    /// not exist).
    pub hidden_calls: HiddenCalls,
    /// `[endpoints.NAME.clients.LABEL]`: per client identity, by label.
    pub clients: BTreeMap<String, ClientRule>,
}

/// How a call to a hidden tool is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HiddenCalls {
    /// `isError` result, `class=denied`, counted `policy_denied`.
    #[default]
    Denied,
    /// -32602 `Unknown tool: NAME`, as for a tool no source has.
    Unknown,
}

/// One client identity: who it is (Unix peers by uid or primary gid) and what it may see.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ClientRule {
    /// `token`: this client has a named HTTP token of its own
    /// (`<socket_dir>/ENDPOINT.LABEL.http.token`, created 0600; `mcp-supervisor url ENDPOINT
    /// --token LABEL` prints it): a request bearing it is this client.
    pub token: bool,
    /// Peer uids that are this client.
    pub uids: Vec<u32>,
    /// Peer primary gids that are this client.
    pub gids: Vec<u32>,
    /// `allow`: when set, only names matching one of these are visible to it.
    pub allow: Option<Vec<String>>,
    /// `hide`: hidden from it.
    pub hide: Vec<String>,
}

impl Validator<'_> {
    /// Validates one `[endpoints.NAME]` against the servers already validated. `defaults` is
    /// `[defaults]` on its own ([`Validator::server`] with no server table).
    pub(super) fn endpoint(
        &self,
        name: &toml::Spanned<String>,
        raw: &toml::Spanned<RawEndpoint>,
        servers: &BTreeMap<String, ServerConfig>,
        defaults: &ServerConfig,
        socket_dir: &Path,
    ) -> Result<EndpointConfig, ConfigError> {
        let n = name.get_ref();
        let table = format!("endpoints.{n}");
        let key = |k: &str| format!("{table}.{k}");
        if n.is_empty()
            || !n
                .bytes()
                .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-'))
            || n == "control"
        {
            return Err(self.err(
                name.span(),
                &table,
                "endpoint names must match [a-z0-9_-]+ (and `control` is reserved for the control socket)",
            ));
        }
        if servers.contains_key(n) {
            return Err(self.err(
                name.span(),
                &table,
                &format!("`{n}` is already a server: endpoints and servers share one namespace (one socket `{n}.sock`)"),
            ));
        }
        let sock = socket_dir.join(format!("{n}.sock"));
        let len = sock.as_os_str().len();
        if len > SUN_PATH_MAX {
            return Err(self.err(
                name.span(),
                &table,
                &format!(
                    "its socket path {} is {len} bytes, over the {SUN_PATH_MAX} a Unix socket path may have; use a shorter socket_dir or endpoint name",
                    sock.display()
                ),
            ));
        }
        let r = raw.get_ref();
        let Some(list) = &r.servers else {
            return Err(self.err(
                raw.span(),
                &key("servers"),
                "an endpoint needs `servers`: a list of server names, or [\"*\"] for every server",
            ));
        };
        let written = list.get_ref();
        let mut sources = Vec::new();
        if written.iter().any(|s| s == "*") {
            if written.len() != 1 {
                return Err(self.err(
                    list.span(),
                    &key("servers"),
                    "\"*\" means every server and stands alone",
                ));
            }
            sources.extend(servers.keys().cloned());
        } else {
            for s in written {
                if !servers.contains_key(s) {
                    return Err(self.err(
                        list.span(),
                        &key("servers"),
                        &format!("`{s}` is not a configured server"),
                    ));
                }
                if sources.contains(s) {
                    return Err(self.err(
                        list.span(),
                        &key("servers"),
                        &format!("`{s}` is listed twice"),
                    ));
                }
                sources.push(s.clone());
            }
        }
        if sources.is_empty() {
            return Err(self.err(
                list.span(),
                &key("servers"),
                "an endpoint needs at least one server",
            ));
        }
        let mut descriptions = BTreeMap::new();
        if let Some(d) = &r.descriptions {
            for (source, text) in d.get_ref() {
                if !sources.contains(source) {
                    return Err(self.err(
                        d.span(),
                        &key("descriptions"),
                        &format!("`{source}` is not one of this endpoint's servers"),
                    ));
                }
                descriptions.insert(source.clone(), text.clone());
            }
        }
        let status_tool = match &r.status_tool {
            None => None,
            Some(t) => {
                let v = t.get_ref();
                if v.is_empty()
                    || v.len() > NAME_MAX
                    || !v
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
                {
                    return Err(self.err(
                        t.span(),
                        &key("status_tool"),
                        &format!(
                            "a tool name matches [a-zA-Z0-9_-] and has 1 to {NAME_MAX} characters"
                        ),
                    ));
                }
                Some(v.clone())
            }
        };
        let policy = self.policy(&table, r)?;
        let mut front = defaults.clone();
        front.name = n.clone();
        front.command = String::new();
        front.args = Vec::new();
        front.remote = None;
        front.http = r.http.unwrap_or(false);
        front.allowed_uids = r.allowed_uids.clone();
        front.allowed_gids = r.allowed_gids.clone();
        front.http_token_file = match &r.http_token_file {
            None => None,
            Some(v) => Some(self.token_path(v, &key("http_token_file"), front.http)?),
        };
        Ok(EndpointConfig {
            name: n.clone(),
            servers: sources,
            descriptions,
            status_tool,
            policy,
            front,
        })
    }

    fn policy(&self, table: &str, r: &RawEndpoint) -> Result<Policy, ConfigError> {
        let patterns = |v: &Option<toml::Spanned<Vec<String>>>, key: &str| {
            let Some(v) = v else {
                return Ok(Vec::new());
            };
            for p in v.get_ref() {
                if p.is_empty() || p.len() > 256 {
                    return Err(self.err(
                        v.span(),
                        key,
                        "a pattern has 1 to 256 characters (`*` any run, `?` one character)",
                    ));
                }
            }
            Ok(v.get_ref().clone())
        };
        let hide = patterns(&r.hide, &format!("{table}.hide"))?;
        let hidden_calls = match &r.hidden_calls {
            None => HiddenCalls::Denied,
            Some(v) => match v.get_ref().as_str() {
                "denied" => HiddenCalls::Denied,
                "unknown" => HiddenCalls::Unknown,
                _ => {
                    return Err(self.err(
                        v.span(),
                        &format!("{table}.hidden_calls"),
                        "must be \"denied\" or \"unknown\"",
                    ))
                }
            },
        };
        let mut clients = BTreeMap::new();
        for (label, c) in r.clients.iter().flatten() {
            let l = label.get_ref();
            let key = format!("{table}.clients.{l}");
            if l.is_empty()
                || !l
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
            {
                return Err(self.err(label.span(), &key, "client labels match [A-Za-z0-9_-]+"));
            }
            let c = c.get_ref();
            let allow = match &c.allow {
                None => None,
                some => Some(patterns(some, &format!("{key}.allow"))?),
            };
            clients.insert(
                l.clone(),
                ClientRule {
                    token: c.token.unwrap_or(false),
                    uids: c.uids.clone().unwrap_or_default(),
                    gids: c.gids.clone().unwrap_or_default(),
                    allow,
                    hide: patterns(&c.hide, &format!("{key}.hide"))?,
                },
            );
        }
        Ok(Policy {
            hide,
            hidden_calls,
            clients,
        })
    }
}

/// `[defaults]` validated alone, as the base of every endpoint's client limits.
pub(super) fn defaults_alone(
    v: &Validator<'_>,
    defaults: &RawServer,
) -> Result<ServerConfig, ConfigError> {
    v.server(super::Table(None), 0..0, defaults, &RawServer::default())
}

/// The id a named token's label travels under in a `Peer`: the first 8 bytes of its
/// SHA-256 (a `Peer` stays `Copy`; labels are the operator's, so no collision is sought).
pub fn label_id(label: &str) -> u64 {
    use sha2::{Digest, Sha256};
    let d = Sha256::digest(label.as_bytes());
    let mut b = [0u8; 8];
    for (o, i) in b.iter_mut().zip(d.iter()) {
        *o = *i;
    }
    u64::from_be_bytes(b)
}
