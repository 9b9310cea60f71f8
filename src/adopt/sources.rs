//! Where each client keeps its MCP servers, and in which format: the list of files `adopt`
//! reads, per client, scope and operating system.
//!
//! Owns: paths and the location of the servers object inside each file. Never reads a file.
//!
//! Sources (each client's own documentation):
//! - Claude Desktop, "Connect to local MCP servers": `claude_desktop_config.json` in
//!   `~/Library/Application Support/Claude/` (macOS; `~/.config/Claude/` on Linux builds),
//!   `mcpServers` → `{command, args, env}`. Strict JSON.
//! - Claude Code, "Connect Claude Code to tools via MCP": user scope in `~/.claude.json`
//!   (top-level `mcpServers`), local scope in the same file under `projects["/abs/path"].mcpServers`,
//!   project scope in `<project>/.mcp.json` (`mcpServers`). Entries `{type?: "stdio", command,
//!   args, env}` or `{type: "http"|"sse", url, headers}`; `${VAR}` and `${VAR:-default}` are
//!   expanded in command, args, env, url and headers. Strict JSON.
//! - Cursor, "Model Context Protocol": `~/.cursor/mcp.json` (global) and
//!   `<project>/.cursor/mcp.json`, `mcpServers` → `{command, args, env, envFile}` or `{url,
//!   headers}`; `${env:NAME}`, `${userHome}`, `${workspaceFolder}`... are interpolated.
//! - VS Code, "Use MCP servers in VS Code" and the MCP configuration reference:
//!   `<project>/.vscode/mcp.json` and the user profile's `mcp.json` (`servers` → `{type, command,
//!   args, env, envFile, cwd}` or `{type: "http"|"sse", url, headers}`, top-level `inputs`), and
//!   earlier the user `settings.json` key `"mcp": {"servers": {...}}`. JSONC (comments and
//!   trailing commas); `${input:ID}`, `${env:NAME}`, `${workspaceFolder}`... are interpolated.
//!   User directory: `~/.config/Code/User/` (Linux), `~/Library/Application Support/Code/User/`
//!   (macOS).
//! - Codex, "Config reference" (`docs/config.md`): `$CODEX_HOME/config.toml` (default
//!   `~/.codex/config.toml`), `[mcp_servers.NAME]` with `command`, `args`, `env`, `env_vars`,
//!   `cwd`, `enabled`, `startup_timeout_sec`, `tool_timeout_sec`, ... or `url` (streamable HTTP).
//!   No interpolation.

use super::safe::Trust;
use std::path::{Path, PathBuf};

/// The MCP clients whose configurations `adopt` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Client {
    /// Anthropic's desktop app.
    ClaudeDesktop,
    /// Anthropic's CLI.
    ClaudeCode,
    /// The Cursor editor.
    Cursor,
    /// Visual Studio Code.
    VsCode,
    /// OpenAI's Codex CLI (and IDE extension, which share its file).
    Codex,
}

impl Client {
    /// The name shown in the plan.
    pub fn label(self) -> &'static str {
        match self {
            Client::ClaudeDesktop => "Claude Desktop",
            Client::ClaudeCode => "Claude Code",
            Client::Cursor => "Cursor",
            Client::VsCode => "VS Code",
            Client::Codex => "Codex",
        }
    }

    /// Whether the client expands `${...}` in an entry's strings (so the text in the file is
    /// not what the server receives, and the supervisor would not expand it the same way).
    pub fn interpolates(self) -> bool {
        matches!(self, Client::ClaudeCode | Client::Cursor | Client::VsCode)
    }
}

/// Which of a client's configurations an entry comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// The user's own configuration, for every project.
    User,
    /// Claude Code's local scope: the user's file, one project.
    Local,
    /// A file inside the project (checked in, shared with the team).
    Project,
}

/// The syntax of a client file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// JSON; comments and trailing commas are accepted on reading (VS Code documents them, the
    /// others ignore or refuse them) and kept as they are.
    Json,
    /// TOML (Codex).
    Toml,
}

/// One servers object inside a client file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    /// The client that reads it.
    pub client: Client,
    /// User, local or project.
    pub scope: Scope,
    /// Object keys from the top of the file to the servers object, e.g. `["mcp", "servers"]`.
    pub pointer: Vec<String>,
}

impl Section {
    /// "Cursor (project)", "Claude Code (local)"...
    pub fn label(&self) -> String {
        let scope = match self.scope {
            Scope::User => "user",
            Scope::Local => "local",
            Scope::Project => "project",
        };
        match self.client {
            Client::ClaudeDesktop | Client::Codex => self.client.label().to_string(),
            c => format!("{} ({scope})", c.label()),
        }
    }
}

/// A file `adopt` may read and rewrite, with the servers objects it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientFile {
    /// Absolute path.
    pub path: PathBuf,
    /// JSON(C) or TOML.
    pub format: Format,
    /// Servers objects inside it (two for `~/.claude.json`: user and local scope).
    pub sections: Vec<Section>,
    /// The project directory when the file's entries run there (relative paths are resolved
    /// against it).
    pub project: Option<PathBuf>,
    /// The uid whose file it is: the owner of the home for user files, of the project for
    /// project files (issue 26 §3).
    pub owner: u32,
}

impl ClientFile {
    /// Who may own the file and the directories on its way (see `safe.rs`).
    pub fn trust(&self) -> Trust {
        Trust::Files { owner: self.owner }
    }

    /// The uid its servers run as when it is not the running user's (nor root's): root
    /// adopting another user's file. Its client ran them as that user, and so does the
    /// supervisor.
    pub fn run_as(&self) -> Option<u32> {
        (self.owner != 0 && self.owner != super::safe::me()).then_some(self.owner)
    }
}

/// The directories the paths are built from.
#[derive(Debug, Clone)]
pub struct Places {
    /// The user's home (`--home`, else `$HOME`).
    pub home: PathBuf,
    /// The project (`--project`, else the current directory), absolute.
    pub project: PathBuf,
    /// `$XDG_CONFIG_HOME` (only without `--home`), else `<home>/.config`.
    pub config_home: PathBuf,
    /// `$CODEX_HOME` (only without `--home`), else `<home>/.codex`.
    pub codex_home: PathBuf,
    /// The owner of the home (its files, `$XDG_CONFIG_HOME`'s and `$CODEX_HOME`'s included).
    pub home_owner: u32,
    /// The owner of the project.
    pub project_owner: u32,
}

fn keys(k: &[&str]) -> Vec<String> {
    k.iter().map(|s| s.to_string()).collect()
}

/// Every file of every client, in the order the plan lists them (and names are chosen in):
/// Claude Desktop, Claude Code, Cursor, VS Code, Codex; user before project. A path that two
/// roles share (the project is the home directory) is listed once, in its first role.
pub fn client_files(p: &Places) -> Vec<ClientFile> {
    let user = |client, pointer: &[&str]| Section {
        client,
        scope: Scope::User,
        pointer: keys(pointer),
    };
    let project = |client, pointer: &[&str]| Section {
        client,
        scope: Scope::Project,
        pointer: keys(pointer),
    };
    let json = |path: PathBuf, sections: Vec<Section>, in_project: bool| ClientFile {
        path,
        format: Format::Json,
        sections,
        project: in_project.then(|| p.project.clone()),
        owner: if in_project {
            p.project_owner
        } else {
            p.home_owner
        },
    };
    let mac = p.home.join("Library/Application Support");
    let servers = ["mcpServers"];
    let project_key = p.project.to_string_lossy().into_owned();
    let mut files = vec![
        json(
            p.config_home.join("Claude/claude_desktop_config.json"),
            vec![user(Client::ClaudeDesktop, &servers)],
            false,
        ),
        json(
            mac.join("Claude/claude_desktop_config.json"),
            vec![user(Client::ClaudeDesktop, &servers)],
            false,
        ),
        ClientFile {
            path: p.home.join(".claude.json"),
            format: Format::Json,
            sections: vec![
                user(Client::ClaudeCode, &servers),
                Section {
                    client: Client::ClaudeCode,
                    scope: Scope::Local,
                    pointer: keys(&["projects", &project_key, "mcpServers"]),
                },
            ],
            // Only the local-scope section runs in the project; see `Section::runs_in`.
            project: Some(p.project.clone()),
            owner: p.home_owner,
        },
        json(
            p.project.join(".mcp.json"),
            vec![project(Client::ClaudeCode, &servers)],
            true,
        ),
        json(
            p.home.join(".cursor/mcp.json"),
            vec![user(Client::Cursor, &servers)],
            false,
        ),
        json(
            p.project.join(".cursor/mcp.json"),
            vec![project(Client::Cursor, &servers)],
            true,
        ),
    ];
    for dir in [p.config_home.join("Code/User"), mac.join("Code/User")] {
        files.push(json(
            dir.join("settings.json"),
            vec![user(Client::VsCode, &["mcp", "servers"])],
            false,
        ));
        files.push(json(
            dir.join("mcp.json"),
            vec![user(Client::VsCode, &["servers"])],
            false,
        ));
    }
    files.push(json(
        p.project.join(".vscode/mcp.json"),
        vec![project(Client::VsCode, &["servers"])],
        true,
    ));
    files.push(ClientFile {
        path: p.codex_home.join("config.toml"),
        format: Format::Toml,
        sections: vec![user(Client::Codex, &["mcp_servers"])],
        project: None,
        owner: p.home_owner,
    });
    let mut seen: Vec<PathBuf> = Vec::new();
    files.retain(|f| {
        if seen.contains(&f.path) {
            false
        } else {
            seen.push(f.path.clone());
            true
        }
    });
    files
}

impl Section {
    /// The directory this section's entries run in, when the client starts them in a project
    /// (`.mcp.json`, `.cursor/mcp.json`, `.vscode/mcp.json`, Claude Code's local scope).
    pub fn runs_in<'a>(&self, file: &'a ClientFile) -> Option<&'a Path> {
        match self.scope {
            Scope::User => None,
            Scope::Local | Scope::Project => file.project.as_deref(),
        }
    }
}

/// `path` with the home directory written as `~`, for the plan.
pub fn show(path: &Path, home: &Path) -> String {
    match path.strip_prefix(home) {
        Ok(rest) if !home.as_os_str().is_empty() => format!("~/{}", rest.display()),
        _ => path.display().to_string(),
    }
}
