//! The text `adopt` prints: the plan, what was done and what comes next, what `--undo`
//! restored. Env values are never part of it (only their keys).

use super::backup::Undone;
use super::endpoint::Fold;
use super::entry::Verdict;
use super::plan::{command_line, Found, Plan, Server};
use super::sources::{show, ClientFile};
use super::supervisor::{self, Current, Sockets};
use std::fmt::Write;
use std::path::Path;

/// What the plan is made of.
pub struct View<'a> {
    /// Shown as `~`.
    pub home: &'a Path,
    /// Every client file looked for.
    pub files: &'a [ClientFile],
    /// Indexes into `files` of the files that exist, with their text.
    pub read: &'a [(usize, String)],
    /// Every entry of those files, classified.
    pub found: &'a [Found],
    /// Names and merging.
    pub plan: &'a Plan,
    /// The supervisor config as found.
    pub config: &'a Current,
    /// Where backups go.
    pub state: &'a Path,
    /// What `[supervisor]`'s socket settings need for the users servers run as.
    pub sockets: Sockets,
}

/// `user = "alice", allowed_uids = [1000]`: how a server adopted from another user's files
/// runs, as written into its table.
fn runs_as(uid: u32) -> String {
    format!(
        "user = {:?}, allowed_uids = [{uid}]",
        supervisor::user_value(uid)
    )
}

/// The warning when the secrets copied go into a config others can read (issue 26 §3).
fn readable_warning(v: &View<'_>) -> Option<String> {
    let secrets = v.plan.new_servers().any(|s| !s.spec.env.is_empty());
    let mode = v.config.meta.map(|m| m.mode)?;
    (secrets && mode & 0o044 != 0).then(|| {
        let cfg = show(&v.config.path, v.home);
        format!(
            "warning: {cfg} is mode {mode:04o}: others can read the secrets written into it (`chmod 600 {}`)",
            v.config.path.display()
        )
    })
}

/// `Cursor (project) ./.cursor/mcp.json "key"`: where an entry is.
fn origin(f: &Found, files: &[ClientFile], home: &Path) -> String {
    match files.get(f.file) {
        Some(file) => {
            let label = file
                .sections
                .get(f.section)
                .map(|s| s.label())
                .unwrap_or_default();
            if f.key.is_empty() {
                format!("{label} {}", show(&file.path, home))
            } else {
                format!("{label} {} {:?}", show(&file.path, home), f.key)
            }
        }
        None => format!("{:?}", f.key),
    }
}

/// One line per client entry a server comes from (also the comments above its table).
pub fn sources_of(
    server: &Server,
    files: &[ClientFile],
    found: &[Found],
    home: &Path,
) -> Vec<String> {
    server
        .from
        .iter()
        .filter_map(|&i| found.get(i))
        .map(|f| origin(f, files, home))
        .collect()
}

/// What `--endpoint` adds to the plan: the endpoint, its servers and the entries folded.
fn endpoint_part(v: &View<'_>, f: &Fold, out: &mut String) {
    let state = if !f.exists {
        "new".to_string()
    } else if f.added.is_empty() {
        "already configured, unchanged".to_string()
    } else {
        format!("already configured, {} servers added", f.added.len())
    };
    let _ = writeln!(out, "\nEndpoint {} [{state}]", f.name);
    let _ = writeln!(out, "  serves: {}", f.servers.join(", "));
    if !f.users.is_empty() {
        let list: Vec<String> = f.users.iter().map(|u| u.to_string()).collect();
        let _ = writeln!(out, "  allowed_uids: [{}]", list.join(", "));
    }
    let _ = writeln!(
        out,
        "  Each client's entries below become one entry {:?} running `mcp-supervisor attach {}`:",
        f.name, f.name
    );
    for e in f.folded.iter().filter_map(|&i| v.found.get(i)) {
        let _ = writeln!(out, "    {}", origin(e, v.files, v.home));
    }
}

/// The plan, as printed before anything is written; with `fold`, as `--endpoint` changes it.
pub fn plan(v: &View<'_>, fold: Option<&Fold>) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "Client config files read ({}):", v.read.len());
    if v.read.is_empty() {
        let _ = writeln!(out, "  (none found)");
    }
    for (i, _) in v.read {
        if let Some(f) = v.files.get(*i) {
            let n = v
                .found
                .iter()
                .filter(|e| e.file == *i && !e.key.is_empty())
                .count();
            let clients: Vec<String> = f.sections.iter().map(|s| s.label()).collect();
            let _ = writeln!(
                out,
                "  {}  {} ({n} {})",
                clients.join(", "),
                show(&f.path, v.home),
                if n == 1 { "entry" } else { "entries" }
            );
        }
    }
    let cfg = show(&v.config.path, v.home);
    let _ = writeln!(
        out,
        "\nSupervisor config: {cfg} ({})",
        match &v.config.text {
            Some(_) => format!("exists, {} servers", v.config.servers.len()),
            None => "will be created, mode 0600".to_string(),
        }
    );
    let _ = writeln!(out, "\nServers ({}):", v.plan.servers.len());
    if v.plan.servers.is_empty() {
        let _ = writeln!(out, "  (none)");
    }
    for s in &v.plan.servers {
        let status = if s.existing {
            "already configured, reused"
        } else {
            "new"
        };
        let _ = writeln!(out, "  {}  [{status}]  {}", s.name, command_line(&s.spec));
        if let Some(uid) = s.spec.user {
            let _ = writeln!(
                out,
                "      runs as: {} (uid {uid} owns the files it comes from)",
                runs_as(uid)
            );
        }
        if let Some(cwd) = &s.spec.cwd {
            let _ = writeln!(out, "      cwd: {cwd}");
        }
        if !s.spec.env.is_empty() {
            let keys: Vec<&str> = s.spec.env.keys().map(String::as_str).collect();
            let _ = writeln!(
                out,
                "      env: {} (values copied as they are)",
                keys.join(", ")
            );
        }
        for line in sources_of(s, v.files, v.found, v.home) {
            let _ = writeln!(out, "      <- {line}");
        }
    }
    let skipped: Vec<_> = v
        .found
        .iter()
        .filter_map(|f| match &f.verdict {
            Verdict::Skip(why) => Some((f, why)),
            _ => None,
        })
        .collect();
    if !skipped.is_empty() {
        let _ = writeln!(out, "\nLeft untouched ({}):", skipped.len());
        for (f, why) in skipped {
            let _ = writeln!(out, "  {}: {why}", origin(f, v.files, v.home));
        }
    }
    let attached: Vec<_> = v
        .found
        .iter()
        .filter_map(|f| match &f.verdict {
            Verdict::Attached(name) => Some((f, name)),
            _ => None,
        })
        .collect();
    if !attached.is_empty() {
        let _ = writeln!(out, "\nAlready attached ({}):", attached.len());
        for (f, name) in attached {
            let _ = writeln!(
                out,
                "  {} -> attach {}",
                origin(f, v.files, v.home),
                name.as_deref().unwrap_or("?")
            );
        }
    }
    let secrets: Vec<String> = v
        .plan
        .new_servers()
        .filter(|s| !s.spec.env.is_empty())
        .map(|s| {
            let keys: Vec<&str> = s.spec.env.keys().map(String::as_str).collect();
            format!("  {}: {}", s.name, keys.join(", "))
        })
        .collect();
    if !secrets.is_empty() {
        let _ = writeln!(
            out,
            "\nSecrets: env values (API keys, tokens) are copied as they are into {cfg}\n(values not shown; the client entries lose their env, and the backups keep it):"
        );
        for s in secrets {
            let _ = writeln!(out, "{s}");
        }
        if let Some(w) = readable_warning(v) {
            let _ = writeln!(out, "{w}");
        }
    }
    if let Some(f) = fold {
        endpoint_part(v, f, &mut out);
    }
    let touched = |fi: usize| match fold {
        Some(f) => f.folded.contains(&fi),
        None => v.plan.server_of(fi).is_some(),
    };
    let changed: Vec<String> = v
        .read
        .iter()
        .filter(|(i, _)| {
            v.found
                .iter()
                .enumerate()
                .any(|(fi, f)| f.file == *i && touched(fi))
        })
        .filter_map(|(i, _)| v.files.get(*i).map(|f| show(&f.path, v.home)))
        .collect();
    if !changed.is_empty() || !v.plan.servers.is_empty() {
        let _ = writeln!(
            out,
            "{}",
            match fold {
                None => "\nEach adopted entry becomes `mcp-supervisor attach NAME` (absolute path); its env, envFile\nand cwd move to the supervisor config, its other keys stay.",
                Some(_) => "\nThe first entry of each servers object is renamed and becomes `mcp-supervisor attach ENDPOINT`\n(absolute path), its other keys kept; the others are removed; env, envFile and cwd move to\nthe supervisor config.",
            }
        );
        let users = supervisor::users_of(v.plan);
        if !users.is_empty() {
            let list: Vec<String> = users.iter().map(|u| format!("uid {u}")).collect();
            let _ = writeln!(
                out,
                "Servers from another user's files ({}) run as that user, and only that user (and root)\nmay connect; their entries become `mcp-supervisor attach NAME --socket {}/NAME.sock`\n(that user cannot read this config).",
                list.join(", "),
                v.config.socket_dir.display()
            );
            if v.sockets == Sockets::AddMode {
                let _ = writeln!(
                    out,
                    "[supervisor] socket_mode = \"{}\" is added to {cfg}: they must be able to open the sockets;\neach server's allowed_uids still decides who is served (SO_PEERCRED).",
                    supervisor::OPEN_SOCKET_MODE
                );
            }
        }
        let _ = writeln!(
            out,
            "Files to change, backed up first under {}:",
            show(v.state, v.home)
        );
        for c in changed {
            let _ = writeln!(out, "  {c}");
        }
        if v.plan.new_servers().next().is_some()
            || v.sockets == Sockets::AddMode
            || fold.is_some_and(Fold::changes_config)
        {
            let _ = writeln!(out, "  {cfg}");
        }
    }
    out
}

/// After writing: the summary and the next steps.
pub fn done(
    v: &View<'_>,
    backup: &Path,
    config: &Path,
    config_flag: bool,
    fold: Option<&Fold>,
) -> String {
    let flag = if config_flag {
        format!(" --config {}", config.display())
    } else {
        String::new()
    };
    let new = v.plan.new_servers().count();
    let mut clients: Vec<&str> = Vec::new();
    let touched = |fi: usize| match fold {
        Some(f) => f.folded.contains(&fi),
        None => v.plan.server_of(fi).is_some(),
    };
    for (fi, f) in v.found.iter().enumerate() {
        if !touched(fi) {
            continue;
        }
        let client = v
            .files
            .get(f.file)
            .and_then(|file| file.sections.get(f.section))
            .map(|s| s.client.label());
        if let Some(c) = client {
            if !clients.contains(&c) {
                clients.push(c);
            }
        }
    }
    let mut warning = readable_warning(v)
        .map(|w| format!("{w}\n"))
        .unwrap_or_default();
    if let Some(f) = fold {
        warning = format!(
            "{warning}Every client now reaches {} through endpoint {} (`mcp-supervisor attach {}`).\n",
            f.servers.join(", "),
            f.name,
            f.name
        );
    }
    format!(
        "\nAdopted: {} client entries, {new} new servers in {}.\n{warning}Backups: {}\n\nNext:\n  1. Reload the supervisor if it runs (`mcp-supervisor reload{flag}`), else start it\n     (`mcp-supervisor run{flag}`, or its systemd unit).\n  2. Restart {} so they start `mcp-supervisor attach`.\n  To put every file back: `mcp-supervisor adopt --undo`.\n",
        (0..v.found.len()).filter(|i| touched(*i)).count(),
        show(config, v.home),
        show(backup, v.home),
        clients.join(", "),
    )
}

/// What `--undo` restored (or, with `--dry-run`, would restore).
pub fn undone(dir: &Path, done: &[Undone], home: &Path, dry_run: bool) -> String {
    let mut out = format!(
        "{} the adoption in {}:\n",
        if dry_run { "Would undo" } else { "Undid" },
        show(dir, home)
    );
    for r in done {
        let _ = match r {
            Undone::Restored(p) => writeln!(out, "  restored  {}", show(p, home)),
            Undone::Removed(p) => {
                writeln!(out, "  removed   {} (adopt had created it)", show(p, home))
            }
            Undone::Unchanged(p) => {
                writeln!(out, "  unchanged {} (already as before)", show(p, home))
            }
        };
    }
    if !dry_run {
        let _ = writeln!(
            out,
            "Reload or restart the supervisor and restart the clients to use the old entries."
        );
    }
    out
}
