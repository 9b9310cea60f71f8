//! The supervisor's own config file: the servers it already has, and the text with the adopted
//! servers appended as `[servers.NAME]` tables (existing content kept byte for byte).
//!
//! Owns: the edit of `supervisor.toml`. The result must pass `config::parse` (what `run` and
//! `check-config` read), or nothing is written.

use super::codex::bad_toml;
use super::entry::Spec;
use super::plan::Server;
use super::AdoptError;
use crate::config;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use toml_edit::{Array, DocumentMut, InlineTable, Item, Table};

/// The first line of a config file `adopt` creates.
const HEADER: &str =
    "# mcp-supervisor configuration (README \"Configuration\"), created by `mcp-supervisor adopt`.\n";

/// The supervisor config as `adopt` found it.
#[derive(Debug, Clone)]
pub struct Current {
    /// Its path (absolute).
    pub path: PathBuf,
    /// Its text, `None` when the file does not exist yet.
    pub text: Option<String>,
    /// `[servers.NAME]` already there, with their spec when it is plain strings.
    pub servers: Vec<(String, Option<Spec>)>,
}

/// Reads the supervisor config at `path` (absent is fine). A file that does not validate is an
/// error: it must be fixed before servers are added to it.
pub fn read(path: &Path) -> Result<Current, AdoptError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Current {
                path: path.to_path_buf(),
                text: None,
                servers: Vec::new(),
            })
        }
        Err(e) => {
            return Err(AdoptError::Io {
                path: path.to_path_buf(),
                action: "read",
                source: e,
            })
        }
    };
    config::parse(path, &text).map_err(|e| AdoptError::BadFile {
        path: path.to_path_buf(),
        line: None,
        message: format!("the supervisor config is invalid; fix it first: {e}"),
    })?;
    let doc: DocumentMut = text.parse().map_err(|e| bad_toml(path, &text, &e))?;
    let mut servers = Vec::new();
    if let Some(t) = doc.get("servers").and_then(Item::as_table_like) {
        for (name, item) in t.iter() {
            servers.push((name.to_string(), item.as_table_like().and_then(spec_of)));
        }
    }
    Ok(Current {
        path: path.to_path_buf(),
        text: Some(text),
        servers,
    })
}

fn spec_of(t: &dyn toml_edit::TableLike) -> Option<Spec> {
    let s = |i: &Item| i.as_str().map(str::to_string);
    let command = t.get("command").and_then(s)?;
    let args = match t.get("args") {
        None => Vec::new(),
        Some(a) => a
            .as_array()?
            .iter()
            .map(|v| v.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()?,
    };
    let mut env = BTreeMap::new();
    if let Some(e) = t.get("env") {
        for (k, v) in e.as_table_like()?.iter() {
            env.insert(k.to_string(), s(v)?);
        }
    }
    let cwd = match t.get("cwd") {
        None => None,
        Some(c) => Some(s(c)?),
    };
    Some(Spec {
        command,
        args,
        env,
        cwd,
    })
}

/// The config text with `new` appended: each a `[servers.NAME]` table preceded by a comment
/// naming the client entries it came from (`sources`, one line each). Checked with
/// `config::parse`.
pub fn append(current: &Current, new: &[(&Server, Vec<String>)]) -> Result<String, AdoptError> {
    let path = &current.path;
    let created = current.text.is_none();
    let base = current.text.clone().unwrap_or_default();
    let mut doc: DocumentMut = base.parse().map_err(|e| bad_toml(path, &base, &e))?;
    let servers = doc
        .entry("servers")
        .or_insert_with(|| {
            let mut t = Table::new();
            t.set_implicit(true);
            Item::Table(t)
        })
        .as_table_mut()
        .ok_or_else(|| AdoptError::BadFile {
            path: path.clone(),
            line: None,
            message:
                "`servers` is not written as [servers.NAME] tables; adopt appends only to those"
                    .to_string(),
        })?;
    for (i, (server, sources)) in new.iter().enumerate() {
        let mut t = Table::new();
        let s = &server.spec;
        t.insert("command", toml_edit::value(s.command.as_str()));
        let mut args = Array::new();
        for a in &s.args {
            args.push(a.as_str());
        }
        t.insert("args", toml_edit::value(args));
        if !s.env.is_empty() {
            let mut env = InlineTable::new();
            for (k, v) in &s.env {
                env.insert(k, v.as_str().into());
            }
            t.insert("env", toml_edit::value(env));
        }
        if let Some(c) = &s.cwd {
            t.insert("cwd", toml_edit::value(c.as_str()));
        }
        let lead = if created && i == 0 { "" } else { "\n" };
        let comment: String = sources
            .iter()
            .map(|s| format!("# adopted from {s}\n"))
            .collect();
        t.decor_mut().set_prefix(format!("{lead}{comment}"));
        servers.insert(&server.name, Item::Table(t));
    }
    let mut out = doc.to_string();
    if created {
        out = format!("{HEADER}\n{out}");
    }
    config::parse(path, &out).map_err(|e| AdoptError::BadFile {
        path: path.clone(),
        line: None,
        message: format!("the servers to add would make it invalid: {e}"),
    })?;
    Ok(out)
}
