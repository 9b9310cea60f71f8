//! `mcp-supervisor adopt` (issue 18 §4): moves the stdio MCP servers of a desktop's clients
//! (Claude Desktop, Claude Code, Cursor, VS Code, Codex) into the supervisor config and points
//! each client entry at `mcp-supervisor attach NAME`; `adopt --undo` puts every file back.
//!
//! # Theory of operation
//!
//! 1. **Find** (`sources.rs`): the files of every client, user and project scope, on Linux and
//!    macOS paths. Missing files are fine; a file that does not parse is an error naming it
//!    (and the line), and nothing is written.
//! 2. **Classify** (`entry.rs`): each entry is a stdio server `adopt` understands (a
//!    `Spec`), one that already attaches, or one left untouched with a reason (remote
//!    HTTP/SSE, `${...}` variables the client expands, `envFile`, disabled, malformed...).
//! 3. **Plan** (`plan.rs`): entries with the same command, args, env and cwd become one server
//!    (also one already in the supervisor config); names come from the client keys. The plan is
//!    printed: servers, where each comes from, what is left alone, the env keys copied (never
//!    their values), the files to change.
//! 4. **Edit in memory** (`jsonc.rs`, `codex.rs`, `supervisor.rs`): each client file with its
//!    adopted entries rewritten, every other byte kept; the supervisor config with the new
//!    `[servers.NAME]` tables appended. Each result is read back and checked. With
//!    `--endpoint NAME` (`endpoint.rs`, issue 31 §6) each servers object's adopted and
//!    already-attached entries fold into one entry `NAME` running `attach NAME`, and the
//!    config gets (or extends) `[endpoints.NAME]`.
//! 5. **Confirm** (`--yes`, or `y` on a terminal; never waits on a pipe), then **back up and
//!    write** (`backup.rs`): copies and a manifest first, then atomic writes.
//!
//! Every file is read and replaced through `safe.rs` (issue 26 §3): walked from `/` without
//! following a link someone else planted, each directory and file owner-checked, changes made
//! on descriptors. Run by root on another user's home or project, the servers found there run
//! as that user (`user`, `allowed_uids`), their client entries name the socket, and the
//! backups stay in root's own state directory.
//!
//! Never: prints an env value; touches a file it did not plan to change; writes anything when a
//! check fails; gives a server more privilege than the client that ran it had.

mod backup;
mod codex;
mod endpoint;
mod entry;
mod jsonc;
mod plan;
mod render;
mod safe;
mod sources;
mod supervisor;
#[cfg(test)]
mod tests;

use entry::{classify, Dialect, Verdict};

use safe::{Place, Trust};
use sources::{ClientFile, Format, Places};
use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};

/// What the `adopt` verb was asked to do: its flags, parsed by clap
/// (docs/book/src/guides/share-servers.md, "Moving a desktop onto the supervisor"); the doc
/// comments below are the `--help` text.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct Options {
    /// Supervisor config to add the servers to (same default as `run`; created if missing).
    #[arg(short, long)]
    pub config: Option<PathBuf>,
    /// Project whose `.mcp.json`, `.cursor/mcp.json` and `.vscode/mcp.json` are read
    /// [default: the current directory].
    #[arg(long)]
    pub project: Option<PathBuf>,
    /// Home directory of the user files [default: $HOME]; with it every default path is
    /// under it ($XDG_CONFIG_HOME, $CODEX_HOME and $MCP_SUPERVISOR_CONFIG are ignored). As
    /// root, another user's home: their servers then run as them.
    #[arg(long)]
    pub home: Option<PathBuf>,
    /// Apply without asking (needed when stdin is not a terminal).
    #[arg(long, short = 'y', conflicts_with = "dry_run")]
    pub yes: bool,
    /// Print the plan (or what --undo would restore) and write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Restore every file of the latest adoption byte for byte.
    #[arg(long)]
    pub undo: bool,
    /// With --undo: also restore files changed since the adoption.
    #[arg(long, requires = "undo")]
    pub force: bool,
    /// Point every client at endpoint NAME instead: each client's adopted entries (and those
    /// already attached to a server) become one entry `NAME` running `attach NAME`, and the
    /// config gets `[endpoints.NAME]` serving those servers (or its list extended).
    #[arg(long, value_name = "NAME", conflicts_with = "undo")]
    pub endpoint: Option<String>,
}

/// How an adopted client entry is rewritten: `command` and `args` replace the entry's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rewrite {
    /// The absolute path of `mcp-supervisor`.
    pub command: String,
    /// `["attach", NAME]`, plus `["--config", PATH]` off the default location, or
    /// `["--socket", PATH]` for a server adopted from another user's files.
    pub args: Vec<String>,
}

/// What becomes of one client entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Edit {
    /// Rewritten to run the [`Rewrite`], under its key (`adopt`).
    Point(Rewrite),
    /// Rewritten to run the [`Rewrite`], under the key `.0` (`adopt --endpoint`: the
    /// endpoint's one entry).
    PointAs(String, Rewrite),
    /// Removed (`adopt --endpoint`: folded into the endpoint's entry).
    Remove,
}

/// Why `adopt` stopped. [`AdoptError::is_usage`] tells bad input (exit 2) from failure (1).
#[derive(Debug, thiserror::Error)]
pub enum AdoptError {
    /// A file that does not parse, or not in the shape its client documents.
    #[error("{}{}: {message}", path.display(), line.map(|l| format!(":{l}")).unwrap_or_default())]
    BadFile {
        /// The file.
        path: PathBuf,
        /// The 1-based line, when the parser gives it.
        line: Option<usize>,
        /// What is wrong.
        message: String,
    },
    /// Bad flags or directories.
    #[error("{0}")]
    Usage(String),
    /// Reading or writing a file failed.
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// `read`, `write`, `create`, `remove`.
        action: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// The plan was not applied (no `--yes` without a terminal, or not confirmed).
    #[error("{0}")]
    NotConfirmed(String),
    /// `--undo` found files changed since the adoption (and no `--force`).
    #[error("not undone: changed since adopt wrote them (`--undo --force` overwrites them):{}", list(.0))]
    Changed(Vec<PathBuf>),
    /// `--undo` with no adoption left to undo.
    #[error("nothing to undo: no adoption in {} that is not undone already", .0.display())]
    NothingToUndo(PathBuf),
    /// A file changed on disk between reading and writing.
    #[error("{} changed while adopt ran; nothing was written, run it again", .0.display())]
    Raced(PathBuf),
    /// The temporary file of a replacement was swapped before it was renamed into place (by
    /// whoever can write that directory); the files written before it stay written.
    #[error("{} was swapped while adopt wrote it; `mcp-supervisor adopt --undo` puts back what was written", .0.display())]
    Swapped(PathBuf),
    /// A link, an owner or a mode `adopt` does not trust (issue 26 §3), e.g. a symbolic link
    /// another user planted, a file of a third user, a manifest adopt did not write.
    #[error("refusing {}: it {why}; nothing was changed", path.display())]
    Untrusted {
        /// The path refused.
        path: PathBuf,
        /// Why, starting with a verb: "is a symbolic link owned by uid 1000...".
        why: String,
    },
    /// An edit did not read back as intended (a bug); nothing was written.
    #[error("internal error editing {}: {message}; nothing was written", path.display())]
    Internal {
        /// The file.
        path: PathBuf,
        /// What differed.
        message: String,
    },
}

fn list(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| format!("\n  {}", p.display()))
        .collect()
}

impl AdoptError {
    /// Bad input (a file, a flag): exit 2; anything else exits 1.
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            AdoptError::BadFile { .. } | AdoptError::Usage(_) | AdoptError::Untrusted { .. }
        )
    }
}

/// Everything `adopt` works with, resolved from the options and the environment.
struct Setup {
    places: Places,
    config: PathBuf,
    /// Whether `attach` needs `--config PATH` (the config is off the plain default).
    config_flag: bool,
    /// The running user's own `<state>/mcp-supervisor/adopt` (never under `--home`).
    state: PathBuf,
    exe: PathBuf,
}

/// The owner whose files a directory (`flag`: `--home`, `--project`) holds: its uid, checked
/// against who runs `adopt`. Root may adopt anyone's files (their servers then run as them);
/// anyone else only their own, or root's (which run as them, as their client ran them).
fn owner_of(flag: &str, dir: &Path, uid: u32) -> Result<u32, AdoptError> {
    let me = safe::me();
    if uid == me || uid == 0 || me == 0 {
        return Ok(uid);
    }
    Err(AdoptError::Usage(format!(
        "{flag} {} is owned by uid {uid}, not by you (uid {me}): only root adopts another user's servers (they then run as that user)",
        dir.display()
    )))
}

/// The running user's state directory: `$XDG_STATE_HOME` (when absolute), else
/// `<home>/.local/state` with the home from the password database (root's own, whatever `$HOME`
/// a `sudo` kept), else `$HOME`.
fn state_home() -> Result<PathBuf, AdoptError> {
    if let Some(x) = std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
    {
        return Ok(x);
    }
    let own = nix::unistd::User::from_uid(nix::unistd::geteuid())
        .ok()
        .flatten()
        .map(|u| u.dir)
        .or_else(|| std::env::var_os("HOME").map(PathBuf::from))
        .filter(|h| h.is_absolute())
        .ok_or_else(|| {
            AdoptError::Usage(
                "no state directory for the backups: set XDG_STATE_HOME to an absolute path".into(),
            )
        })?;
    Ok(own.join(".local/state"))
}

fn setup(o: &Options) -> Result<Setup, AdoptError> {
    let var = |k: &str| {
        if o.home.is_some() {
            None
        } else {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        }
    };
    let home = match o
        .home
        .clone()
        .or_else(|| std::env::var_os("HOME").map(PathBuf::from))
    {
        Some(h) => absolute(&h)?,
        None => {
            return Err(AdoptError::Usage(
                "no home directory: set HOME or pass --home".into(),
            ))
        }
    };
    let project = match &o.project {
        Some(p) => p.clone(),
        None => std::env::current_dir().map_err(|e| AdoptError::Io {
            path: PathBuf::from("."),
            action: "read",
            source: e,
        })?,
    };
    // Claude Code keys its local scope by the real path of the project (found without
    // following a link someone else planted).
    let project = absolute(&project)?;
    // `--undo` reads neither: its files and their owners come from its manifest.
    let (project, project_owner, home_owner) = if o.undo {
        (project, safe::me(), safe::me())
    } else {
        let (project, uid) = safe::directory_owner(&project)?.ok_or_else(|| {
            AdoptError::Usage(format!("--project {}: not a directory", project.display()))
        })?;
        let project_owner = owner_of("--project", &project, uid)?;
        let home_owner = match safe::directory_owner(&home)? {
            Some((_, uid)) => owner_of("--home", &home, uid)?,
            None => safe::me(),
        };
        (project, project_owner, home_owner)
    };
    let config_home = var("XDG_CONFIG_HOME").unwrap_or_else(|| home.join(".config"));
    let codex_home = var("CODEX_HOME").unwrap_or_else(|| home.join(".codex"));
    let state = state_home()?.join("mcp-supervisor/adopt");
    let root = nix::unistd::geteuid().is_root();
    // What `attach` finds with no `--config` in a client started from the desktop (no
    // MCP_SUPERVISOR_CONFIG, no XDG_CONFIG_HOME there, as a rule).
    let plain = if root {
        PathBuf::from("/etc/mcp-supervisor/supervisor.toml")
    } else {
        home.join(".config/mcp-supervisor/supervisor.toml")
    };
    let config = match &o.config {
        Some(c) => absolute(c)?,
        None if o.home.is_some() => plain.clone(),
        None => absolute(&support::config::default_path())?,
    };
    let exe = std::env::current_exe().map_err(|e| AdoptError::Io {
        path: PathBuf::from("/proc/self/exe"),
        action: "read",
        source: e,
    })?;
    Ok(Setup {
        places: Places {
            home,
            project,
            config_home,
            codex_home,
            home_owner,
            project_owner,
        },
        config_flag: config != plain,
        config,
        state,
        exe,
    })
}

fn absolute(p: &Path) -> Result<PathBuf, AdoptError> {
    std::path::absolute(p).map_err(|e| AdoptError::Usage(format!("{}: {e}", p.display())))
}

/// Runs `adopt` (or `adopt --undo`) with `o`, printing the plan and the outcome on stdout.
pub fn run(o: &Options) -> Result<(), AdoptError> {
    let s = setup(o)?;
    if o.undo {
        return undo(&s, o);
    }
    let files = sources::client_files(&s.places);
    let mut read: Vec<(usize, String)> = Vec::new();
    let mut found: Vec<plan::Found> = Vec::new();
    for (i, f) in files.iter().enumerate() {
        let Some(r) = read_file(&f.path, f.trust())? else {
            continue;
        };
        let text = text_of(&f.path, r.bytes)?;
        found.extend(gather(i, f, &text)?);
        read.push((i, text));
    }
    let current = supervisor::read(&s.config)?;
    let plan = plan::make(&current.servers, &found);
    let sockets = supervisor::sockets_for(&current, &plan)?;
    let view = render::View {
        home: &s.places.home,
        files: &files,
        read: &read,
        found: &found,
        plan: &plan,
        config: &current,
        state: &s.state,
        sockets,
    };
    let fold = match &o.endpoint {
        Some(name) => Some(endpoint::fold(name, &plan, &found, &current)?),
        None => None,
    };
    print!("{}", render::plan(&view, fold.as_ref()));
    if plan.servers.is_empty() && fold.as_ref().is_none_or(|f| f.folded.is_empty()) {
        println!("\nNothing to adopt: no client file has a stdio server left to move.");
        return Ok(());
    }
    let mut changes = edit(
        &s,
        &files,
        &read,
        &found,
        &plan,
        &current,
        sockets,
        fold.as_ref(),
    )?;
    if o.dry_run {
        println!("\nDry run: nothing was written.");
        return Ok(());
    }
    confirm(o.yes)?;
    // A client may have saved its file while the plan was shown; the mode and owner kept are
    // the ones found now.
    for c in &mut changes {
        let now = read_file(&c.path, c.trust)?;
        if now.as_ref().map(|r| &r.bytes) != c.before.as_ref() {
            return Err(AdoptError::Raced(c.path.clone()));
        }
        c.meta = now.map(|r| r.meta);
    }
    let dir = backup::save(&s.state, &changes)?;
    backup::apply(&changes)?;
    print!(
        "{}",
        render::done(&view, &dir, &s.config, s.config_flag, fold.as_ref())
    );
    Ok(())
}

/// Reads `path` under `trust` (see `safe.rs`); `None` when it or a directory on the way is
/// missing.
fn read_file(path: &Path, trust: Trust) -> Result<Option<safe::Contents>, AdoptError> {
    match Place::find(path, trust, None)? {
        Some(p) => p.read(),
        None => Ok(None),
    }
}

fn text_of(path: &Path, bytes: Vec<u8>) -> Result<String, AdoptError> {
    String::from_utf8(bytes).map_err(|_| AdoptError::BadFile {
        path: path.to_path_buf(),
        line: None,
        message: "not UTF-8 text".to_string(),
    })
}

/// The entries of one client file, classified.
fn gather(index: usize, f: &ClientFile, text: &str) -> Result<Vec<plan::Found>, AdoptError> {
    let mut out = Vec::new();
    let (json, toml) = match f.format {
        Format::Json => (Some(jsonc::parse(&f.path, text)?), None),
        Format::Toml => (None, Some(codex::parse(&f.path, text)?)),
    };
    for (si, section) in f.sections.iter().enumerate() {
        let entries = match (&json, &toml) {
            (Some(d), _) => d.entries(&section.pointer),
            (_, Some(d)) => d.entries(&section.pointer),
            _ => jsonc::Entries::Missing,
        };
        let found = |key: String, verdict| plan::Found {
            file: index,
            section: si,
            key,
            verdict,
        };
        let entries = match entries {
            jsonc::Entries::Missing => continue,
            jsonc::Entries::Malformed(why) => {
                out.push(found(
                    String::new(),
                    Verdict::Skip(format!("malformed: {why}")),
                ));
                continue;
            }
            jsonc::Entries::Found(e) => e,
        };
        let dialect = Dialect {
            interpolates: section.client.interpolates(),
            codex: f.format == Format::Toml,
            project: section.runs_in(f),
        };
        for (key, value) in &entries {
            let twice = entries.iter().filter(|(k, _)| k == key).count() > 1;
            let verdict = if twice {
                Verdict::Skip("the key appears more than once in this object".into())
            } else {
                match classify(value, dialect) {
                    // Its client ran it as the owner of the file: so does the supervisor.
                    Verdict::Adopt(spec) => Verdict::Adopt(entry::Spec {
                        user: f.run_as(),
                        ..spec
                    }),
                    other => other,
                }
            };
            out.push(found(key.clone(), verdict));
        }
    }
    Ok(out)
}

/// The [`Rewrite`] of an entry that attaches to `name` (a server or an endpoint); `by_socket`
/// when a user who cannot read the config runs it.
fn attach(s: &Setup, current: &supervisor::Current, name: &str, by_socket: bool) -> Rewrite {
    let mut args = vec!["attach".to_string(), name.to_string()];
    if by_socket {
        // That user cannot read this config (it is root's): the socket itself.
        args.push("--socket".to_string());
        args.push(current.socket_of(name).to_string_lossy().into_owned());
    } else if s.config_flag {
        args.push("--config".to_string());
        args.push(s.config.to_string_lossy().into_owned());
    }
    Rewrite {
        command: s.exe.to_string_lossy().into_owned(),
        args,
    }
}

/// The edits of client file `i`: each adopted entry pointed at its server, or with `fold`
/// every folded entry of a servers object replaced by the endpoint's one entry.
fn edits_of(
    s: &Setup,
    i: usize,
    file: &ClientFile,
    found: &[plan::Found],
    plan: &plan::Plan,
    current: &supervisor::Current,
    fold: Option<&endpoint::Fold>,
) -> Vec<(Vec<String>, String, Edit)> {
    let mut edits = Vec::new();
    let Some(fold) = fold else {
        for (fi, f) in found.iter().enumerate().filter(|(_, f)| f.file == i) {
            let (Some(server), Some(section)) = (plan.server_of(fi), file.sections.get(f.section))
            else {
                continue;
            };
            let rw = attach(s, current, &server.name, server.spec.user.is_some());
            edits.push((section.pointer.clone(), f.key.clone(), Edit::Point(rw)));
        }
        return edits;
    };
    for (si, section) in file.sections.iter().enumerate() {
        let here = |f: &&plan::Found| f.file == i && f.section == si;
        let keys: Vec<String> = fold
            .folded
            .iter()
            .filter_map(|&fi| found.get(fi))
            .filter(here)
            .map(|f| f.key.clone())
            .collect();
        if keys.is_empty() {
            continue;
        }
        // Under any key, as `endpoint::fold` sees it.
        let has_endpoint = found
            .iter()
            .filter(here)
            .any(|f| matches!(&f.verdict, Verdict::Attached(Some(n)) if *n == fold.name));
        for (key, keep) in endpoint::in_object(&keys, &fold.name, has_endpoint) {
            let edit = if keep {
                let rw = attach(s, current, &fold.name, !fold.users.is_empty());
                if key == fold.name {
                    Edit::Point(rw)
                } else {
                    Edit::PointAs(fold.name.clone(), rw)
                }
            } else {
                Edit::Remove
            };
            edits.push((section.pointer.clone(), key, edit));
        }
    }
    edits
}

/// Every file's new content, computed and checked before anything is written.
#[allow(clippy::too_many_arguments)]
fn edit(
    s: &Setup,
    files: &[ClientFile],
    read: &[(usize, String)],
    found: &[plan::Found],
    plan: &plan::Plan,
    current: &supervisor::Current,
    sockets: supervisor::Sockets,
    fold: Option<&endpoint::Fold>,
) -> Result<Vec<backup::Change>, AdoptError> {
    let mut changes = Vec::new();
    for (i, text) in read {
        let Some(file) = files.get(*i) else {
            continue;
        };
        let edits = edits_of(s, *i, file, found, plan, current, fold);
        if edits.is_empty() {
            continue;
        }
        let after = match file.format {
            Format::Json => jsonc::rewrite(&file.path, text, &edits)?,
            Format::Toml => codex::rewrite(&file.path, text, &edits)?,
        };
        changes.push(backup::Change {
            path: file.path.clone(),
            trust: file.trust(),
            before: Some(text.clone().into_bytes()),
            meta: None,
            after: after.into_bytes(),
        });
    }
    let new: Vec<_> = plan
        .new_servers()
        .map(|server| {
            (
                server,
                render::sources_of(server, files, found, &s.places.home),
            )
        })
        .collect();
    if !new.is_empty()
        || sockets == supervisor::Sockets::AddMode
        || fold.is_some_and(endpoint::Fold::changes_config)
    {
        let after = supervisor::append(current, &new, sockets, fold)?;
        changes.push(backup::Change {
            path: current.path.clone(),
            trust: supervisor::trust(),
            before: current.text.clone().map(String::into_bytes),
            meta: None,
            after: after.into_bytes(),
        });
    }
    Ok(changes)
}

/// `--yes`, or a `y` typed on a terminal; never waits on a pipe.
fn confirm(yes: bool) -> Result<(), AdoptError> {
    if yes {
        return Ok(());
    }
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return Err(AdoptError::NotConfirmed(
            "not applied: stdin is not a terminal; pass --yes to apply".into(),
        ));
    }
    print!("\nApply this plan? [y/N] ");
    let _ = std::io::stdout().flush();
    let mut line = String::new();
    let _ = stdin.lock().read_line(&mut line);
    match line.trim() {
        "y" | "Y" | "yes" => Ok(()),
        _ => Err(AdoptError::NotConfirmed("not applied".into())),
    }
}

fn undo(s: &Setup, o: &Options) -> Result<(), AdoptError> {
    let (dir, done) = backup::undo(&s.state, o.force, o.dry_run)?;
    print!("{}", render::undone(&dir, &done, &s.places.home, o.dry_run));
    Ok(())
}
