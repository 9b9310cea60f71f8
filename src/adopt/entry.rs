//! One client entry → what `adopt` does with it: a stdio server it takes over ([`Spec`]), an
//! entry that already attaches, or an entry it leaves alone and why.
//!
//! Owns: the rules of what is understood. Pure: reads no file, except that a project entry's
//! relative argument is checked for existence in the project directory (the `cwd` rule).

use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::path::Path;

/// A stdio server as the supervisor will run it: `[servers.NAME]` `command`, `args`, `env`,
/// `cwd`, `user`. Two entries with equal specs are the same server (merged into one).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Spec {
    /// The program (a bare name looked up in `PATH`, or an absolute path).
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Variables added to its environment (copied as they are: possibly secrets).
    pub env: BTreeMap<String, String>,
    /// Its working directory (absolute), when it matters.
    pub cwd: Option<String>,
    /// The uid it runs as (`user`, with `allowed_uids` that uid): the owner of the file it was
    /// adopted from when root adopts another user's files (issue 26 §3). `None`: as the
    /// supervisor. Set by the caller of [`classify`], which reads no owner.
    pub user: Option<u32>,
}

/// What `adopt` does with one client entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// A stdio server it understands: moved into the supervisor, the entry rewritten.
    Adopt(Spec),
    /// Already `mcp-supervisor attach NAME` (`None` when the name is missing): left alone.
    Attached(Option<String>),
    /// Left untouched, with the reason shown in the plan.
    Skip(String),
}

/// How the client that owns an entry reads it.
#[derive(Debug, Clone, Copy)]
pub struct Dialect<'a> {
    /// The client expands `${...}` in the entry's strings.
    pub interpolates: bool,
    /// Codex's TOML keys (`enabled`, `env_vars`) rather than the JSON clients'.
    pub codex: bool,
    /// The directory the client starts the server in, for project entries.
    pub project: Option<&'a Path>,
}

fn skip(reason: impl Into<String>) -> Verdict {
    Verdict::Skip(reason.into())
}

/// Classifies one entry (its value in the servers object).
pub fn classify(value: &Value, d: Dialect<'_>) -> Verdict {
    let Some(o) = value.as_object() else {
        return skip("malformed: not an object");
    };
    if o.get("disabled") == Some(&Value::Bool(true))
        || o.get("enabled") == Some(&Value::Bool(false))
    {
        return skip("disabled");
    }
    for key in ["url", "serverUrl", "httpUrl"] {
        if o.contains_key(key) {
            return skip(format!(
                "remote server (`{key}`): HTTP/SSE, not a command to run"
            ));
        }
    }
    match o.get("type") {
        None => {}
        Some(Value::String(t)) if t == "stdio" => {}
        Some(t) => return skip(format!("type {t} is not stdio")),
    }
    let command = match o.get("command") {
        Some(Value::String(c)) if !c.trim().is_empty() => c.clone(),
        Some(_) => return skip("malformed: `command` is not a non-empty string"),
        None => return skip("malformed: no `command` and no `url`"),
    };
    let args = match o.get("args") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => match a
            .iter()
            .map(|v| v.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()
        {
            Some(a) => a,
            None => return skip("malformed: `args` is not a list of strings"),
        },
        Some(_) => return skip("malformed: `args` is not a list of strings"),
    };
    let env = match strings(o.get("env")) {
        Ok(e) => e,
        Err(key) => return skip(format!("malformed: env `{key}` is not a string")),
    };
    if o.contains_key("envFile") {
        return skip("`envFile`: the supervisor reads no env files");
    }
    if d.codex
        && o.get("env_vars")
            .is_some_and(|v| v != &Value::Array(vec![]))
    {
        return skip("`env_vars` passes variables from Codex's own environment, which the supervisor does not have");
    }
    let cwd = match o.get("cwd") {
        None | Some(Value::Null) => None,
        Some(Value::String(c)) => Some(c.clone()),
        Some(_) => return skip("malformed: `cwd` is not a string"),
    };
    if d.interpolates {
        let mut texts = vec![&command];
        texts.extend(args.iter());
        texts.extend(env.values());
        texts.extend(cwd.iter());
        if texts.iter().any(|t| t.contains("${input:")) {
            return skip("asks for `${input:...}` when it starts, which a shared server cannot");
        }
        if texts.iter().any(|t| t.contains("${")) {
            return skip(
                "uses `${...}` variables, which the client expands and the supervisor would not",
            );
        }
    }
    if is_attach(&command, &args) {
        return Verdict::Attached(args.get(1).cloned());
    }
    resolve(
        Spec {
            command,
            args,
            env,
            cwd,
            user: None,
        },
        d.project,
    )
}

/// `env`: absent, or an object of strings (`Err(key)` names the first value that is not one).
fn strings(v: Option<&Value>) -> Result<BTreeMap<String, String>, String> {
    let empty = Map::new();
    let o = match v {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(o)) => o,
        Some(_) => return Err("(the whole `env`)".to_string()),
    };
    o.iter()
        .map(|(k, v)| match v {
            Value::String(s) => Ok((k.clone(), s.clone())),
            _ => Err(k.clone()),
        })
        .collect()
}

/// `mcp-supervisor attach ...`, whichever path the binary is at.
pub fn is_attach(command: &str, args: &[String]) -> bool {
    Path::new(command).file_name().and_then(|f| f.to_str()) == Some("mcp-supervisor")
        && args.first().map(String::as_str) == Some("attach")
}

/// Relative paths made absolute against the project, and the project as `cwd` where the
/// server depends on it (see docs/book/src/guides/share-servers.md, "Moving a desktop onto
/// the supervisor").
fn resolve(mut s: Spec, project: Option<&Path>) -> Verdict {
    let relative_command = s.command.contains('/') && Path::new(&s.command).is_relative();
    let relative_cwd = s.cwd.as_deref().is_some_and(|c| Path::new(c).is_relative());
    let Some(dir) = project else {
        if relative_command || relative_cwd {
            return skip("relative path in a user-wide entry: no directory to resolve it against");
        }
        return Verdict::Adopt(s);
    };
    if relative_command {
        s.command = lexical_join(dir, &s.command);
    }
    match &s.cwd {
        Some(c) if relative_cwd => s.cwd = Some(lexical_join(dir, c)),
        Some(_) => {}
        None if relative_command || s.args.iter().any(|a| names_project_path(a, dir)) => {
            s.cwd = Some(dir.to_string_lossy().into_owned());
        }
        None => {}
    }
    Verdict::Adopt(s)
}

/// An argument that means something relative to the directory the client started the server
/// in: `.`, `..`, `./x`, `../x`, or a relative path that exists in the project.
fn names_project_path(arg: &str, dir: &Path) -> bool {
    if arg == "." || arg == ".." || arg.starts_with("./") || arg.starts_with("../") {
        return true;
    }
    !arg.is_empty()
        && !arg.starts_with('-')
        && Path::new(arg).is_relative()
        && !arg.contains("://")
        && dir.join(arg).exists()
}

/// `dir` joined with the relative `path`, with `.` components dropped (`./bin/srv` in
/// `/p` is `/p/bin/srv`); `..` is kept, since a symlink may stand before it.
fn lexical_join(dir: &Path, path: &str) -> String {
    let mut out = dir.to_path_buf();
    for c in Path::new(path).components() {
        if c != std::path::Component::CurDir {
            out.push(c);
        }
    }
    out.to_string_lossy().into_owned()
}
