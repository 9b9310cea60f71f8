//! The supervisor's own config file: the servers it already has, and the text with the adopted
//! servers appended as `[servers.NAME]` tables (existing content kept byte for byte).
//!
//! Owns: the edit of `supervisor.toml`, and what its `[supervisor]` socket settings must be for
//! the users whose servers root adopts to reach them (issue 26 §3). The result must pass
//! `config::parse` (what `run` and `check-config` read), or nothing is written.

use super::codex::bad_toml;
use super::endpoint::Fold;
use super::entry::Spec;
use super::plan::{Plan, Server};
use super::safe::{self, Meta, Place, Trust};
use super::AdoptError;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use support::config;
use toml_edit::{Array, DocumentMut, InlineTable, Item, Table};

/// The socket mode `adopt` adds when another user must open the sockets: the file mode lets
/// everyone connect, `SO_PEERCRED` and each server's `allowed_uids` decide who is served
/// (docs/book/src/reference/security.md, "Access"). `socket_mode` is one setting for every
/// socket, so a mode for one user (or one group) cannot serve two users adopted from.
pub const OPEN_SOCKET_MODE: &str = "0666";

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
    /// Its mode and owner, when it exists.
    pub meta: Option<Meta>,
    /// `[servers.NAME]` already there, with their spec when it is plain strings (and, for a
    /// server with `user`, that user may connect to it).
    pub servers: Vec<(String, Option<Spec>)>,
    /// `[endpoints.NAME]` already there, with their `servers` as written (`["*"]` kept).
    pub endpoints: Vec<(String, Vec<String>)>,
    /// `socket_dir` (the default when unset).
    pub socket_dir: PathBuf,
    /// `socket_mode` as it applies (0600 by default).
    pub socket_mode: u32,
    /// Whether the file sets `socket_mode` itself.
    pub socket_mode_set: bool,
    /// `socket_group`.
    pub socket_group: Option<u32>,
}

impl Current {
    /// The socket of server `name`.
    pub fn socket_of(&self, name: &str) -> PathBuf {
        crate::daemon::socket_path(&self.socket_dir, name)
    }
}

/// Who may own the supervisor config and its directories: the running user or root (a config
/// another user can change is theirs to run as us).
pub fn trust() -> Trust {
    Trust::Files { owner: safe::me() }
}

/// Reads the supervisor config at `path` (absent is fine). A file that does not validate is an
/// error: it must be fixed before servers are added to it.
pub fn read(path: &Path) -> Result<Current, AdoptError> {
    let found = match Place::find(path, trust(), None)? {
        Some(p) => p.read()?,
        None => None,
    };
    let (text, meta) = match found {
        Some(r) => {
            let text = String::from_utf8(r.bytes).map_err(|_| AdoptError::BadFile {
                path: path.to_path_buf(),
                line: None,
                message: "not UTF-8 text".to_string(),
            })?;
            (Some(text), Some(r.meta))
        }
        None => (None, None),
    };
    let body = text.as_deref().unwrap_or_default();
    let cfg = config::parse(path, body).map_err(|e| AdoptError::BadFile {
        path: path.to_path_buf(),
        line: None,
        message: format!("the supervisor config is invalid; fix it first: {e}"),
    })?;
    let doc: DocumentMut = body.parse().map_err(|e| bad_toml(path, body, &e))?;
    let mut servers = Vec::new();
    if let Some(t) = doc.get("servers").and_then(Item::as_table_like) {
        for (name, item) in t.iter() {
            let spec = item.as_table_like().and_then(spec_of).filter(|spec| {
                // A server that runs as a user is reused for that user only if they may
                // connect to it.
                let allowed = cfg.servers.get(name).map(|s| {
                    s.allowed_uids
                        .as_ref()
                        .unwrap_or(&cfg.supervisor.allowed_uids)
                });
                spec.user
                    .is_none_or(|u| allowed.is_some_and(|a| a.contains(&u)))
            });
            servers.push((name.to_string(), spec));
        }
    }
    let mut endpoints = Vec::new();
    if let Some(t) = doc.get("endpoints").and_then(Item::as_table_like) {
        for (name, item) in t.iter() {
            let list = item
                .as_table_like()
                .and_then(|e| e.get("servers"))
                .and_then(Item::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default();
            endpoints.push((name.to_string(), list));
        }
    }
    let socket_mode_set = doc
        .get("supervisor")
        .and_then(Item::as_table_like)
        .is_some_and(|t| t.contains_key("socket_mode"));
    Ok(Current {
        path: path.to_path_buf(),
        text,
        meta,
        servers,
        endpoints,
        socket_dir: cfg.supervisor.socket_dir.clone(),
        socket_mode: cfg.supervisor.socket_mode,
        socket_mode_set,
        socket_group: cfg.supervisor.socket_group,
    })
}

/// What `[supervisor]` needs for the users of a plan's servers to open their sockets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sockets {
    /// Nothing to change (no server runs as another user, or the sockets already let them in).
    Enough,
    /// `socket_mode` is unset (0600, root's only): add [`OPEN_SOCKET_MODE`].
    AddMode,
}

/// The users servers of `plan` run as (sorted, once each).
pub fn users_of(plan: &Plan) -> Vec<u32> {
    let mut uids: Vec<u32> = plan.servers.iter().filter_map(|s| s.spec.user).collect();
    uids.sort_unstable();
    uids.dedup();
    uids
}

/// The groups of `uid` (primary and supplementary); just `uid` as a gid when it has no entry in
/// the password database.
fn groups_of(uid: u32) -> Vec<u32> {
    let user = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten();
    let Some(user) = user else {
        return vec![uid];
    };
    let mut out = vec![user.gid.as_raw()];
    if let Ok(name) = std::ffi::CString::new(user.name) {
        if let Ok(list) = nix::unistd::getgrouplist(&name, user.gid) {
            out.extend(list.iter().map(|g| g.as_raw()));
        }
    }
    out
}

/// Decides what the socket settings need so that every user a server of `plan` runs as can
/// connect: a socket is opened with write permission on it and search permission on every
/// directory above it; who is then served is `allowed_uids` (`SO_PEERCRED`). An explicit
/// `socket_mode` that keeps such a user out is the operator's choice and is not changed: the
/// error says what to set. So is a directory above `socket_dir` that user cannot search.
pub fn sockets_for(current: &Current, plan: &Plan) -> Result<Sockets, AdoptError> {
    let uids = users_of(plan);
    if uids.is_empty() {
        return Ok(Sockets::Enough);
    }
    let key = |k: &str| format!("{} [supervisor] {k}", current.path.display());
    let mut out = Sockets::Enough;
    let mut mode = current.socket_mode;
    for &uid in &uids {
        let groups = groups_of(uid);
        let by_group = current
            .socket_group
            .is_some_and(|g| groups.contains(&g) && mode & 0o020 != 0);
        if mode & 0o002 != 0 || by_group {
            continue;
        }
        if current.socket_mode_set {
            return Err(AdoptError::Usage(format!(
                "{}: socket_mode = \"{mode:04o}\" keeps uid {uid} out of the sockets of the servers adopted from their files; set socket_mode = \"{OPEN_SOCKET_MODE}\" (each server's allowed_uids still decides who is served) or a socket_group uid {uid} is in, then run adopt again",
                key("socket_mode")
            )));
        }
        out = Sockets::AddMode;
        mode = 0o666;
    }
    for &uid in &uids {
        let groups = groups_of(uid);
        for a in current.socket_dir.ancestors().skip(1) {
            let Ok(m) = std::fs::metadata(a) else {
                continue;
            };
            use std::os::unix::fs::MetadataExt;
            let bit = if m.uid() == uid {
                0o100
            } else if groups.contains(&m.gid()) {
                0o010
            } else {
                0o001
            };
            if m.mode() & bit == 0 {
                return Err(AdoptError::Usage(format!(
                    "{}: uid {uid} could not reach its sockets in {}: {} is mode {:04o}; use a socket_dir every adopted user can reach (the default /run/mcp-supervisor)",
                    key("socket_dir"),
                    current.socket_dir.display(),
                    a.display(),
                    m.mode() & 0o7777
                )));
            }
        }
    }
    Ok(out)
}

/// The `user = ` value for `uid`: its name when the password database has one, else the
/// number.
pub fn user_value(uid: u32) -> String {
    config::resolve_user(&uid.to_string())
        .ok()
        .and_then(|u| u.name)
        .unwrap_or_else(|| uid.to_string())
}

/// Appends `[endpoints.NAME]` for `f`, or extends the existing table's `servers` and
/// `allowed_uids` with what `f` adds. `first`: the table is the file's first.
fn endpoint_table(
    doc: &mut DocumentMut,
    path: &Path,
    f: &Fold,
    first: bool,
) -> Result<(), AdoptError> {
    let bad = |message: String| AdoptError::BadFile {
        path: path.to_path_buf(),
        line: None,
        message,
    };
    let endpoints = doc
        .entry("endpoints")
        .or_insert_with(|| {
            let mut t = Table::new();
            t.set_implicit(true);
            Item::Table(t)
        })
        .as_table_like_mut()
        .ok_or_else(|| bad("`endpoints` is not a table".to_string()))?;
    let Some(t) = endpoints.get_mut(&f.name).and_then(Item::as_table_like_mut) else {
        let mut t = Table::new();
        let mut servers = Array::new();
        for s in &f.added {
            servers.push(s.as_str());
        }
        t.insert("servers", toml_edit::value(servers));
        if !f.users.is_empty() {
            let mut allowed = Array::new();
            for u in &f.users {
                allowed.push(i64::from(*u));
            }
            t.insert("allowed_uids", toml_edit::value(allowed));
        }
        let lead = if first { "" } else { "\n" };
        t.decor_mut().set_prefix(format!(
            "{lead}# added by `adopt --endpoint {}`: every client reaches these servers through it\n",
            f.name
        ));
        endpoints.insert(&f.name, Item::Table(t));
        return Ok(());
    };
    let servers = t
        .get_mut("servers")
        .and_then(Item::as_array_mut)
        .ok_or_else(|| bad(format!("`endpoints.{}.servers` is not an array", f.name)))?;
    for s in &f.added {
        servers.push(s.as_str());
    }
    if !f.users.is_empty() {
        match t.get_mut("allowed_uids").and_then(Item::as_array_mut) {
            Some(a) => {
                for u in &f.users {
                    if !a.iter().any(|v| v.as_integer() == Some(i64::from(*u))) {
                        a.push(i64::from(*u));
                    }
                }
            }
            None => {
                let mut allowed = Array::new();
                for u in &f.users {
                    allowed.push(i64::from(*u));
                }
                t.insert("allowed_uids", toml_edit::value(allowed));
            }
        }
    }
    Ok(())
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
    let user = match t.get("user") {
        None => None,
        Some(u) => {
            let uid = config::resolve_user(&s(u)?).ok()?.uid;
            (uid != safe::me()).then_some(uid)
        }
    };
    Some(Spec {
        command,
        args,
        env,
        cwd,
        user,
    })
}

/// The config text with `new` appended: each a `[servers.NAME]` table preceded by a comment
/// naming the client entries it came from (`sources`, one line each), `socket_mode` added
/// to `[supervisor]` for [`Sockets::AddMode`], and for `adopt --endpoint` (`fold`) an
/// `[endpoints.NAME]` table appended or its `servers` (and `allowed_uids`) extended. Checked
/// with `config::parse`.
pub fn append(
    current: &Current,
    new: &[(&Server, Vec<String>)],
    sockets: Sockets,
    fold: Option<&Fold>,
) -> Result<String, AdoptError> {
    let path = &current.path;
    let created = current.text.is_none();
    let base = current.text.clone().unwrap_or_default();
    let mut doc: DocumentMut = base.parse().map_err(|e| bad_toml(path, &base, &e))?;
    if sockets == Sockets::AddMode {
        let sup = doc
            .entry("supervisor")
            .or_insert_with(|| {
                let mut t = Table::new();
                t.decor_mut().set_prefix(if created { "" } else { "\n" });
                Item::Table(t)
            })
            .as_table_like_mut()
            .ok_or_else(|| AdoptError::BadFile {
                path: path.clone(),
                line: None,
                message: "`supervisor` is not a table".to_string(),
            })?;
        sup.insert("socket_mode", toml_edit::value(OPEN_SOCKET_MODE));
        if let Some(mut k) = sup.key_mut("socket_mode") {
            k.leaf_decor_mut().set_prefix(
                "# added by adopt: the users whose servers it adopted connect to their sockets;\n# each server's allowed_uids decides who is served (SO_PEERCRED).\n",
            );
        }
    }
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
        if let Some(uid) = s.user {
            t.insert("user", toml_edit::value(user_value(uid)));
            let mut allowed = Array::new();
            allowed.push(i64::from(uid));
            t.insert("allowed_uids", toml_edit::value(allowed));
        }
        let lead = if created && i == 0 { "" } else { "\n" };
        let comment: String = sources
            .iter()
            .map(|s| format!("# adopted from {s}\n"))
            .collect();
        t.decor_mut().set_prefix(format!("{lead}{comment}"));
        servers.insert(&server.name, Item::Table(t));
    }
    if let Some(f) = fold.filter(|f| f.changes_config()) {
        endpoint_table(&mut doc, path, f, created && new.is_empty())?;
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
