//! `mcp-supervisor url NAME` (issue 16 §5): the HTTP endpoint of a server, its token header,
//! and ready-to-paste client configurations.
//!
//! The address is the one the running daemon bound (`<socket_dir>/http.addr`, written at
//! start, so `http_listen = "127.0.0.1:0"` works), else `http_listen` from the file. The token
//! is read from the token file (created by the daemon at start).

use serde_json::json;
use std::path::{Path, PathBuf};
use support::config::Config;

/// The file in `socket_dir` where the daemon writes the TCP address it bound.
pub const ADDR_FILE: &str = "http.addr";

/// Where server `name` is reachable over HTTP.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// `http://HOST:PORT/mcp/NAME`, when the TCP endpoint is on.
    pub url: Option<String>,
    /// The bearer token, when its file can be read.
    pub token: Option<String>,
    /// The token file.
    pub token_file: PathBuf,
    /// `<socket_dir>/NAME.http.sock` (path `/mcp` on it; no token).
    pub unix_socket: PathBuf,
}

/// The Unix socket of server `name`'s HTTP endpoint.
pub fn unix_socket_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.http.sock"))
}

/// Finds server `name`'s endpoint. Errors (as text for the operator): no such server, or
/// `http` is not on for it.
pub fn endpoint(config: &Config, name: &str, label: Option<&str>) -> Result<Endpoint, String> {
    let (cfg, table) = match (config.servers.get(name), config.endpoints.get(name)) {
        (Some(c), _) => (c, "servers"),
        (None, Some(e)) => (&e.front, "endpoints"),
        (None, None) => {
            return Err(format!(
                "no server or endpoint `{name}` in {}",
                config.path.display()
            ))
        }
    };
    if !cfg.http {
        return Err(format!(
            "`{name}` has no HTTP endpoint: set `http = true` in [{table}.{name}] and reload"
        ));
    }
    if let Some(l) = label {
        let named = config
            .endpoints
            .get(name)
            .and_then(|e| e.policy.clients.get(l))
            .is_some_and(|c| c.token);
        if !named {
            return Err(format!(
                "`{name}` has no named token `{l}`: add `[endpoints.{name}.clients.{l}]` with `token = true` and reload"
            ));
        }
    }
    let dir = &config.supervisor.socket_dir;
    let bound = std::fs::read_to_string(dir.join(ADDR_FILE))
        .ok()
        .and_then(|s| s.trim().parse::<std::net::SocketAddr>().ok());
    // An address with port 0 is only known once the daemon has bound it and written the file:
    // until then there is no URL (never `http://127.0.0.1:0/...`).
    let addr = bound.or(config.supervisor.http.listen.filter(|a| a.port() != 0));
    let token_file = match label {
        Some(l) => super::access::labelled_token_path(dir, name, l),
        None => super::access::token_path(dir, cfg),
    };
    let token = std::fs::read_to_string(&token_file)
        .ok()
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty());
    Ok(Endpoint {
        url: addr.map(|a| format!("http://{a}/mcp/{name}")),
        token,
        token_file,
        unix_socket: unix_socket_path(dir, name),
    })
}

/// The text `mcp-supervisor url NAME` prints.
pub fn render(name: &str, e: &Endpoint) -> String {
    let mut out = String::new();
    let token = e.token.clone().unwrap_or_else(|| "<TOKEN>".into());
    let bearer = format!("Bearer {token}");
    match &e.url {
        Some(url) => {
            out += &format!("URL:     {url}\n");
            out += &format!("Header:  Authorization: {bearer}\n");
            if e.token.is_none() {
                out += &format!(
                    "         (token file {} not readable yet: start the supervisor, or run as its user)\n",
                    e.token_file.display()
                );
            }
        }
        None => out += "URL:     none (http_listen = \"off\", or a port 0 not bound yet)\n",
    }
    out += &format!(
        "Unix:    {} (HTTP over a Unix socket, path /mcp, no token)\n",
        e.unix_socket.display()
    );
    let Some(url) = &e.url else {
        return out;
    };
    let headers = json!({ "Authorization": bearer });
    let cursor = json!({"mcpServers": {name: {"url": url, "headers": headers}}});
    let vscode = json!({"servers": {name: {"type": "http", "url": url, "headers": headers}}});
    let pretty = |v: &serde_json::Value| serde_json::to_string_pretty(v).unwrap_or_default();
    out += "\nClaude Code:\n";
    out += &format!(
        "  claude mcp add --transport http {name} {url} --header \"Authorization: {bearer}\"\n"
    );
    out += "\nCursor (~/.cursor/mcp.json or .cursor/mcp.json):\n";
    out += &indent(&pretty(&cursor));
    out += "\nVS Code (.vscode/mcp.json; \"servers\" in user settings' \"mcp\"):\n";
    out += &indent(&pretty(&vscode));
    out += "\nCodex (~/.codex/config.toml):\n";
    out += &format!(
        "  [mcp_servers.{name}]\n  url = \"{url}\"\n  http_headers = {{ \"Authorization\" = \"{bearer}\" }}\n"
    );
    out
}

/// The same as JSON (`--json`): `{"url", "token", "header", "token_file", "unix_socket"}`.
pub fn render_json(e: &Endpoint) -> String {
    json!({
        "url": e.url,
        "token": e.token,
        "header": e.token.as_ref().map(|t| format!("Authorization: Bearer {t}")),
        "token_file": e.token_file,
        "unix_socket": e.unix_socket,
    })
    .to_string()
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("  {l}\n")).collect()
}
