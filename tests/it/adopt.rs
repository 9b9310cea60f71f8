//! `mcp-supervisor adopt` (issue 18 §4) on fixture configs of the five clients
//! (`tests/fixtures/adopt/`, in the formats the clients document), copied into a temporary
//! home and project: the plan, the rewrite, the supervisor config, `--undo` byte for byte,
//! refusals, and an adopted entry serving MCP through `attach`.

use crate::harness::*;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/adopt");
/// Env values of the fixtures: never printed.
const SECRETS: &[&str] = &[
    "ghp_fixtureSecretDesktop0001",
    "ghp_fixtureSecretCursor0002",
    "sk-fixtureSecretVscode0003",
    "ctx7_fixtureSecretCodex0004",
];

/// The adopted entries of each fixture file: (file, servers object, key, server name).
const ADOPTED: &[(&str, &[&str], &str, &str)] = &[
    (
        "home/.config/Claude/claude_desktop_config.json",
        &["mcpServers"],
        "filesystem",
        "filesystem",
    ),
    (
        "home/.config/Claude/claude_desktop_config.json",
        &["mcpServers"],
        "github",
        "github",
    ),
    (
        "home/.config/Claude/claude_desktop_config.json",
        &["mcpServers"],
        "Sequential Thinking",
        "sequential-thinking",
    ),
    ("home/.claude.json", &["mcpServers"], "github", "github"),
    (
        "home/.claude.json",
        &["projects", "@PROJECT@", "mcpServers"],
        "local-db",
        "local-db",
    ),
    (
        "project/.mcp.json",
        &["mcpServers"],
        "project-tools",
        "project-tools",
    ),
    (
        "project/.mcp.json",
        &["mcpServers"],
        "filesystem",
        "filesystem",
    ),
    ("home/.cursor/mcp.json", &["mcpServers"], "fs", "filesystem"),
    (
        "home/.cursor/mcp.json",
        &["mcpServers"],
        "github",
        "github-2",
    ),
    (
        "project/.cursor/mcp.json",
        &["mcpServers"],
        "Project Tools",
        "project-tools",
    ),
    (
        "home/.config/Code/User/settings.json",
        &["mcp", "servers"],
        "filesystem",
        "filesystem",
    ),
    (
        "home/.config/Code/User/mcp.json",
        &["servers"],
        "time",
        "time",
    ),
    (
        "project/.vscode/mcp.json",
        &["servers"],
        "projectTools",
        "project-tools",
    ),
    (
        "project/.vscode/mcp.json",
        &["servers"],
        "playwright",
        "playwright",
    ),
    (
        "home/.codex/config.toml",
        &["mcp_servers"],
        "filesystem",
        "filesystem",
    ),
    (
        "home/.codex/config.toml",
        &["mcp_servers"],
        "context7",
        "context7",
    ),
];

/// The entries left untouched, with a word of the reason the plan gives.
const SKIPPED: &[(&str, &str)] = &[
    ("\"sentry\"", "remote"),
    ("\"memory\"", "${...}"),
    ("\"api-server\"", "remote"),
    ("\"linear\"", "remote"),
    ("\"with-env-file\"", "envFile"),
    ("\"workspace-scanner\"", "${...}"),
    ("\"Perplexity\"", "${input:...}"),
    ("\"github-remote\"", "remote"),
    ("\"figma\"", "remote"),
    ("\"old\"", "disabled"),
];

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

/// A desktop: the fixtures copied into a temporary home and project.
struct Desk {
    /// Removed with the desk.
    _dir: tempfile::TempDir,
    home: PathBuf,
    project: PathBuf,
    config: PathBuf,
    /// `$XDG_STATE_HOME` of the user running `adopt` (its backups), outside the home read.
    state_home: PathBuf,
}

fn copy_tree(from: &Path, to: &Path, project: &str) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &dest, project);
        } else {
            let text = std::fs::read_to_string(e.path()).unwrap();
            std::fs::write(&dest, text.replace("@PROJECT@", project)).unwrap();
        }
    }
}

impl Desk {
    fn new() -> Desk {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let (home, project) = (root.join("home"), root.join("project"));
        std::fs::create_dir_all(&project).unwrap();
        let p = project.to_string_lossy().into_owned();
        copy_tree(&Path::new(FIXTURES).join("home"), &home, &p);
        copy_tree(&Path::new(FIXTURES).join("project"), &project, &p);
        Desk {
            config: root.join("etc/supervisor.toml"),
            state_home: root.join("state"),
            _dir: dir,
            home,
            project,
        }
    }

    fn root(&self) -> PathBuf {
        self.home.parent().unwrap().to_path_buf()
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.root().join(rel)
    }

    fn text(&self, rel: &str) -> String {
        std::fs::read_to_string(self.path(rel)).unwrap()
    }

    /// `mcp-supervisor adopt --home H --project P --config C ARGS`, stdin not a terminal.
    fn adopt(&self, args: &[&str]) -> Out {
        let mut cmd = Command::new(SUPERVISOR);
        cmd.arg("adopt")
            .arg("--home")
            .arg(&self.home)
            .arg("--project")
            .arg(&self.project)
            .arg("--config")
            .arg(&self.config)
            .args(args)
            .env("HOME", &self.home)
            .env("XDG_STATE_HOME", &self.state_home);
        run(cmd)
    }

    /// Every file of the desktop (not the adopt state), with its bytes and mode.
    fn snapshot(&self) -> BTreeMap<PathBuf, (Vec<u8>, u32)> {
        fn walk(dir: &Path, skip: &[PathBuf], out: &mut BTreeMap<PathBuf, (Vec<u8>, u32)>) {
            for e in std::fs::read_dir(dir).unwrap() {
                let p = e.unwrap().path();
                if skip.contains(&p) {
                    continue;
                }
                if p.is_dir() {
                    walk(&p, skip, out);
                } else {
                    let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o7777;
                    out.insert(p.clone(), (std::fs::read(&p).unwrap(), mode));
                }
            }
        }
        let mut out = BTreeMap::new();
        let skip = [self.home.join(".local"), self.state_home.clone()];
        walk(&self.root(), &skip, &mut out);
        out
    }

    fn state(&self) -> PathBuf {
        self.state_home.join("mcp-supervisor/adopt")
    }

    /// The supervisor config adopt wrote, after `check-config` passed on it.
    fn checked_config(&self) -> toml::Table {
        let check = Command::new(SUPERVISOR)
            .args(["check-config"])
            .arg(&self.config)
            .output()
            .unwrap();
        assert!(
            check.status.success(),
            "{}",
            String::from_utf8_lossy(&check.stderr)
        );
        toml::from_str(&std::fs::read_to_string(&self.config).unwrap()).unwrap()
    }

    fn adoptions(&self) -> usize {
        std::fs::read_dir(self.state()).map_or(0, |d| d.count())
    }
}

/// Runs `cmd` with stdin not a terminal; fails the test if an env value of the fixtures was
/// printed.
fn run(mut cmd: Command) -> Out {
    let out = cmd.stdin(Stdio::null()).output().unwrap();
    let out = Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    for s in SECRETS {
        assert!(
            !out.stdout.contains(s) && !out.stderr.contains(s),
            "an env value was printed:\n{}{}",
            out.stdout,
            out.stderr
        );
    }
    out
}

/// A JSON or JSONC text as a value.
fn jsonc(text: &str) -> Value {
    let root = jsonc_parser::cst::CstRootNode::parse(text, &jsonc_parser::ParseOptions::default())
        .unwrap();
    root.value().and_then(|v| v.to_serde_value()).unwrap()
}

fn value_of(rel: &str, text: &str) -> Value {
    if rel.ends_with(".toml") {
        serde_json::to_value(toml::from_str::<toml::Table>(text).unwrap()).unwrap()
    } else {
        jsonc(text)
    }
}

fn entry<'a>(doc: &'a Value, pointer: &[&str], key: &str, project: &str) -> &'a Value {
    let mut v = doc;
    for k in pointer {
        v = &v[k.replace("@PROJECT@", project)];
    }
    &v[key]
}

/// `text` with the block of each entry replaced by a placeholder: for JSON the object after
/// `"key":` (braces counted outside strings), for TOML the `[mcp_servers.key]` table and its
/// subtables. What remains must not change when adopt rewrites those entries.
fn mask(rel: &str, text: &str, keys: &[&str]) -> String {
    let mut t = text.to_string();
    for key in keys {
        if rel.ends_with(".toml") {
            let head = format!("[mcp_servers.{key}]");
            let start = t.find(&head).unwrap_or_else(|| panic!("{head} in {rel}"));
            let sub = format!("[mcp_servers.{key}.");
            let mut end = t.len();
            let mut pos = start + head.len();
            while let Some(nl) = t[pos..].find("\n[") {
                let at = pos + nl + 1;
                if !t[at..].starts_with(&sub) {
                    end = at;
                    break;
                }
                pos = at;
            }
            t.replace_range(start..end, &format!("<{key}>\n"));
        } else {
            let name = format!("\"{key}\":");
            let start = t.find(&name).unwrap_or_else(|| panic!("{name} in {rel}"));
            let open = start + t[start..].find('{').unwrap();
            let (mut depth, mut in_str, mut esc, mut end) = (0, false, false, open);
            for (i, c) in t[open..].char_indices() {
                match (in_str, esc, c) {
                    (true, true, _) => esc = false,
                    (true, false, '\\') => esc = true,
                    (true, false, '"') => in_str = false,
                    (false, _, '"') => in_str = true,
                    (false, _, '{') => depth += 1,
                    (false, _, '}') => {
                        depth -= 1;
                        if depth == 0 {
                            end = open + i + 1;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            t.replace_range(start..end, &format!("<{key}>"));
        }
    }
    t
}

fn canonical_supervisor() -> String {
    std::fs::canonicalize(SUPERVISOR)
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

#[test]
fn adopt_plan_lists_found_merged_and_skipped_entries_and_dry_run_writes_nothing() {
    let desk = Desk::new();
    let before = desk.snapshot();
    let out = desk.adopt(&["--dry-run"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let plan = &out.stdout;
    // Nine files of the five clients read.
    assert!(plan.contains("Client config files read (9)"), "{plan}");
    // The shared filesystem server: one server, five clients.
    let fs_block = plan
        .split("\n  filesystem  [new]")
        .nth(1)
        .unwrap_or_else(|| panic!("{plan}"));
    let fs_block = fs_block.split("\n  github").next().unwrap();
    for from in [
        "Claude Desktop ~/.config/Claude/claude_desktop_config.json \"filesystem\"",
        "Claude Code (project)",
        "Cursor (user) ~/.cursor/mcp.json \"fs\"",
        "VS Code (user) ~/.config/Code/User/settings.json \"filesystem\"",
        "Codex ~/.codex/config.toml \"filesystem\"",
    ] {
        assert!(fs_block.contains(from), "{from} not in\n{fs_block}");
    }
    assert!(plan.contains("Servers (9):"), "{plan}");
    for name in [
        "github  [new]",
        "sequential-thinking  [new]",
        "local-db  [new]",
        "project-tools  [new]",
        "github-2  [new]",
        "time  [new]",
        "playwright  [new]",
        "context7  [new]",
    ] {
        assert!(
            plan.contains(&format!("\n  {name}")),
            "{name} not in\n{plan}"
        );
    }
    assert!(plan.contains("Left untouched (10):"), "{plan}");
    for (key, why) in SKIPPED {
        let line = plan
            .lines()
            .find(|l| l.contains(key) && l.contains(": "))
            .unwrap_or_else(|| panic!("{key} not listed in\n{plan}"));
        assert!(line.contains(why), "{line}: wanted {why}");
    }
    // Secrets: the keys are named, the values never shown (checked by `adopt`).
    assert!(plan.contains("copied as they are"), "{plan}");
    assert!(
        plan.contains("  github-2: GITHUB_PERSONAL_ACCESS_TOKEN"),
        "{plan}"
    );
    assert!(plan.contains("  context7: CONTEXT7_API_KEY"), "{plan}");
    assert!(plan.contains("Dry run: nothing was written."), "{plan}");
    assert_eq!(desk.snapshot(), before);
    assert!(!desk.config.exists());
    assert_eq!(desk.adoptions(), 0);
}

#[test]
fn adopt_without_yes_on_a_pipe_exits_1_and_writes_nothing() {
    let desk = Desk::new();
    let before = desk.snapshot();
    let out = desk.adopt(&[]);
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    assert!(out.stderr.contains("pass --yes to apply"), "{}", out.stderr);
    assert!(out.stdout.contains("Servers (9):"), "the plan is shown");
    assert_eq!(desk.snapshot(), before);
    assert!(!desk.config.exists());
    assert_eq!(desk.adoptions(), 0);
}

#[test]
fn adopt_yes_rewrites_every_client_and_undo_restores_every_file_byte_for_byte() {
    let desk = Desk::new();
    // Modes are kept, whatever they are.
    let cursor = desk.path("home/.cursor/mcp.json");
    std::fs::set_permissions(&cursor, std::fs::Permissions::from_mode(0o640)).unwrap();
    let before = desk.snapshot();
    let project = desk.project.to_string_lossy().into_owned();
    let config = desk.config.to_string_lossy().into_owned();

    let out = desk.adopt(&["--yes"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout
            .contains("Adopted: 16 client entries, 9 new servers"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("mcp-supervisor reload --config"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("adopt --undo"), "{}", out.stdout);
    assert_eq!(desk.adoptions(), 1);

    // Each adopted entry: command and args replaced, env/envFile/cwd gone, other keys kept.
    let exe = canonical_supervisor();
    let mut files: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (rel, pointer, key, name) in ADOPTED {
        files.entry(rel).or_default().push(key);
        let (old, new) = (
            value_of(
                rel,
                &String::from_utf8(before[&desk.path(rel)].0.clone()).unwrap(),
            ),
            value_of(rel, &desk.text(rel)),
        );
        let mut want = entry(&old, pointer, key, &project).clone();
        let o = want.as_object_mut().unwrap();
        o.insert("command".into(), json!(exe));
        o.insert("args".into(), json!(["attach", name, "--config", config]));
        for gone in ["env", "envFile", "cwd"] {
            o.remove(gone);
        }
        assert_eq!(entry(&new, pointer, key, &project), &want, "{rel} {key}");
    }
    // Every byte outside the adopted entries is as it was: comments, trailing commas,
    // unrelated keys (editor.fontSize, Claude Code's projects), skipped entries.
    for (rel, keys) in &files {
        let old = String::from_utf8(before[&desk.path(rel)].0.clone()).unwrap();
        assert_eq!(
            mask(rel, &desk.text(rel), keys),
            mask(rel, &old, keys),
            "{rel}"
        );
    }
    assert!(desk
        .text("home/.config/Code/User/settings.json")
        .contains("  // Editor\n  \"editor.fontSize\": 14,\n"));
    assert!(desk
        .text("home/.claude.json")
        .contains("\"/home/me/other-project\": {"));
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode(&cursor), 0o640);

    // The supervisor config: created 0600, valid, one table per server, env copied as is.
    assert_eq!(mode(&desk.config), 0o600);
    let cfg = desk.checked_config();
    let servers = cfg["servers"].as_table().unwrap();
    let names: Vec<&str> = servers.keys().map(String::as_str).collect();
    let mut want = vec![
        "context7",
        "filesystem",
        "github",
        "github-2",
        "local-db",
        "playwright",
        "project-tools",
        "sequential-thinking",
        "time",
    ];
    want.sort();
    assert_eq!(names, want);
    let gh = |n: &str| {
        servers[n]["env"]["GITHUB_PERSONAL_ACCESS_TOKEN"]
            .as_str()
            .unwrap()
    };
    assert_eq!(gh("github"), "ghp_fixtureSecretDesktop0001");
    assert_eq!(gh("github-2"), "ghp_fixtureSecretCursor0002");
    assert_eq!(
        servers["project-tools"]["cwd"].as_str(),
        Some(project.as_str())
    );
    assert_eq!(
        servers["project-tools"]["args"][0].as_str(),
        Some("build/index.js")
    );
    assert_eq!(servers["local-db"]["cwd"].as_str(), Some(project.as_str()));
    assert!(servers["filesystem"].get("cwd").is_none());
    assert_eq!(
        servers["context7"]["env"]["CONTEXT7_API_KEY"].as_str(),
        Some("ctx7_fixtureSecretCodex0004")
    );

    // Undo: every file back byte for byte (and mode), the created config removed.
    let out = desk.adopt(&["--undo"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains("restored  ~/.claude.json"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("removed   "), "{}", out.stdout);
    assert_eq!(desk.snapshot(), before);
    assert!(!desk.config.exists());
    // Nothing left to undo.
    let out = desk.adopt(&["--undo"]);
    assert_eq!(out.code, 1);
    assert!(out.stderr.contains("nothing to undo"), "{}", out.stderr);
}

#[test]
fn adopt_undo_refuses_a_file_changed_after_adopt_unless_forced() {
    let desk = Desk::new();
    let before = desk.snapshot();
    assert_eq!(desk.adopt(&["--yes"]).code, 0);
    let changed = desk.path("project/.vscode/mcp.json");
    let mut text = std::fs::read_to_string(&changed).unwrap();
    text.push_str("// edited in VS Code\n");
    std::fs::write(&changed, &text).unwrap();
    let adopted = desk.snapshot();

    let out = desk.adopt(&["--undo"]);
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stderr.contains(&changed.to_string_lossy().into_owned()),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("--force"), "{}", out.stderr);
    assert_eq!(desk.snapshot(), adopted, "nothing restored");

    let out = desk.adopt(&["--undo", "--force"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert_eq!(desk.snapshot(), before);
}

#[test]
fn adopt_twice_adds_nothing_and_reuses_a_server_already_configured() {
    let desk = Desk::new();
    std::fs::create_dir_all(desk.config.parent().unwrap()).unwrap();
    let mine = format!(
        "# my supervisor\n[supervisor]\nsocket_dir = {:?}\n\n[servers.clock]\ncommand = \"uvx\"\nargs = [\"mcp-server-time\", \"--local-timezone=Europe/Paris\"]\n",
        desk.root().join("run")
    );
    std::fs::write(&desk.config, &mine).unwrap();
    std::fs::set_permissions(&desk.config, std::fs::Permissions::from_mode(0o644)).unwrap();
    let before = desk.snapshot();

    let out = desk.adopt(&["--yes"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout
            .contains("clock  [already configured, reused]  uvx mcp-server-time"),
        "{}",
        out.stdout
    );
    let vscode = jsonc(&desk.text("home/.config/Code/User/mcp.json"));
    assert_eq!(vscode["servers"]["time"]["args"][1], "clock");
    let after = std::fs::read_to_string(&desk.config).unwrap();
    assert!(after.starts_with(&mine), "existing content kept:\n{after}");
    assert_eq!(after.matches("[servers.").count(), 9, "{after}");
    assert!(!after.contains("[servers.time]"), "{after}");

    // Again: every entry already attaches; nothing is written, no second adoption.
    let snapshot = desk.snapshot();
    let out = desk.adopt(&["--yes"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("Nothing to adopt"), "{}", out.stdout);
    assert!(
        out.stdout.contains("Already attached (16)"),
        "{}",
        out.stdout
    );
    assert_eq!(desk.snapshot(), snapshot);
    assert_eq!(desk.adoptions(), 1);

    // Undo puts the existing config back as it was (content and mode).
    assert_eq!(desk.adopt(&["--undo"]).code, 0);
    assert_eq!(desk.snapshot(), before);
}

#[test]
fn adopt_invalid_client_file_exits_2_names_it_and_writes_nothing() {
    for (rel, broken, line) in [
        (
            "project/.vscode/mcp.json",
            "{\n  // comment\n  \"servers\": {\n    \"a\": ,\n  }\n}\n",
            ":4:",
        ),
        (
            "home/.codex/config.toml",
            "model = \"x\"\n[mcp_servers.a\n",
            ":2:",
        ),
    ] {
        let desk = Desk::new();
        std::fs::write(desk.path(rel), broken).unwrap();
        let before = desk.snapshot();
        let out = desk.adopt(&["--yes"]);
        assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
        let named = format!("{}{line}", desk.path(rel).display());
        assert!(out.stderr.contains(&named), "{named} not in {}", out.stderr);
        assert_eq!(desk.snapshot(), before);
        assert!(!desk.config.exists());
        assert_eq!(desk.adoptions(), 0);
    }
}

/// Reads lines of a child's stdout on a thread, so each can be awaited with a deadline.
fn lines(stdout: std::process::ChildStdout) -> std::sync::mpsc::Receiver<Value> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Ok(v) = serde_json::from_str(&line) {
                if tx.send(v).is_err() {
                    break;
                }
            }
        }
    });
    rx
}

fn response(rx: &std::sync::mpsc::Receiver<Value>, id: i64) -> Value {
    let end = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let left = end.saturating_duration_since(std::time::Instant::now());
        let v = rx
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("no response {id} within 20 s"));
        if v["id"] == json!(id) {
            return v;
        }
    }
}

#[test]
fn adopt_entry_serves_mcp_through_attach_as_the_client_would_start_it() {
    adopt_and_serve(None);
}

#[test]
fn adopt_endpoint_entry_serves_the_servers_tools_through_attach_of_the_endpoint() {
    adopt_and_serve(Some("desk"));
}

/// Adopts one Claude Desktop entry running the fake server (with `--endpoint`, into that
/// endpoint), starts the supervisor, and runs the client's entry as the client would: its
/// tools are listed and called, with the env that moved into the supervisor config.
fn adopt_and_serve(endpoint: Option<&str>) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let (home, project) = (root.join("home"), root.join("project"));
    std::fs::create_dir_all(home.join(".config/Claude")).unwrap();
    std::fs::create_dir_all(&project).unwrap();
    let desktop = home.join(".config/Claude/claude_desktop_config.json");
    let entry = json!({"mcpServers": {"Fake Server": {
        "command": FAKE, "args": [], "env": {"ADOPT_MARK": "moved-with-the-server"}}}});
    std::fs::write(&desktop, serde_json::to_string_pretty(&entry).unwrap()).unwrap();
    let config = root.join("supervisor.toml");
    std::fs::write(
        &config,
        format!("[supervisor]\nsocket_dir = {:?}\n", root.join("run")),
    )
    .unwrap();
    let out = Command::new(SUPERVISOR)
        .arg("adopt")
        .arg("--home")
        .arg(&home)
        .arg("--project")
        .arg(&project)
        .arg("--config")
        .arg(&config)
        .arg("--yes")
        .args(endpoint.map(|e| vec!["--endpoint", e]).unwrap_or_default())
        .env("XDG_STATE_HOME", root.join("state"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let mut sup = Supervisor::spawn_with(dir, config, &[]);
    let socket = endpoint.unwrap_or("fake-server");
    let up = wait_until(Duration::from_secs(10), || sup.socket(socket).exists());
    if !up {
        sup.stop();
        panic!("no socket for {socket}; log:\n{}", sup.log());
    }
    // The client's command, exactly as the rewritten file says.
    let rewritten: Value =
        serde_json::from_str(&std::fs::read_to_string(&desktop).unwrap()).unwrap();
    let e = &rewritten["mcpServers"][endpoint.unwrap_or("Fake Server")];
    let tool = |t: &str| match endpoint {
        Some(_) => format!("fake-server__{t}"),
        None => t.to_string(),
    };
    assert!(e.get("env").is_none(), "{e}");
    let args: Vec<String> = e["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    let mut client = Command::new(e["command"].as_str().unwrap())
        .args(&args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let rx = lines(client.stdout.take().unwrap());
    let mut stdin = client.stdin.take().unwrap();
    for m in [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "claude-desktop-stand-in", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}),
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
            "params": {"name": tool("env"), "arguments": {"name": "ADOPT_MARK"}}}),
    ] {
        writeln!(stdin, "{m}").unwrap();
    }
    stdin.flush().unwrap();
    let init = response(&rx, 1);
    assert!(init["result"]["serverInfo"].is_object(), "{init}");
    let list = response(&rx, 2);
    let tools = list["result"]["tools"].as_array().unwrap();
    assert!(tools.iter().any(|t| t["name"] == tool("echo")), "{list}");
    // The env moved from the client entry to the supervisor config and reaches the server.
    let call = response(&rx, 3);
    assert_eq!(Client::text(&call), "moved-with-the-server", "{call}");
    drop(stdin);
    let exited = wait_until(Duration::from_secs(10), || {
        client.try_wait().unwrap().is_some()
    });
    if !exited {
        let _ = client.kill();
    }
    assert!(exited, "attach did not exit after its stdin closed");
    sup.stop();
}

// --- Root adopting another user's files (issue 26 §3) -------------------------------------
//
// The attacker is the user whose home and project root adopts: uid ALICE owns them and plants
// what she likes there (links, foreign files, a forged manifest). These tests need root to
// give files to another uid; elsewhere they say why they are skipped. CI runs as root.

/// The user whose files root adopts.
const ALICE: u32 = 4242;
/// Another unprivileged user.
const MALLORY: u32 = 4343;

/// Whether this test can run: it needs root to give files to other uids.
fn as_root(test: &str) -> bool {
    crate::harness::needs_root(test, &[])
}

/// `chown -hR uid:uid path` (links themselves, not their targets).
fn chown_tree(path: &Path, uid: u32) {
    std::os::unix::fs::lchown(path, Some(uid), Some(uid)).unwrap();
    let meta = std::fs::symlink_metadata(path).unwrap();
    if meta.is_dir() {
        for e in std::fs::read_dir(path).unwrap() {
            chown_tree(&e.unwrap().path(), uid);
        }
    }
}

fn owner(p: &Path) -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(p).unwrap().uid()
}

/// Owner of every file and directory under `dir`.
fn owners(dir: &Path) -> BTreeMap<PathBuf, u32> {
    let mut out = BTreeMap::new();
    out.insert(dir.to_path_buf(), owner(dir));
    if std::fs::symlink_metadata(dir).unwrap().is_dir() {
        for e in std::fs::read_dir(dir).unwrap() {
            out.extend(owners(&e.unwrap().path()));
        }
    }
    out
}

/// A root-only file (0600, root's) that holds servers and a secret of root's: what the user
/// points her links at.
struct Victim {
    path: PathBuf,
    bytes: Vec<u8>,
}

const VICTIM: &str = "{\n  \"mcpServers\": {\n    \"root-tool\": {\"command\": \"/usr/sbin/root-tool\", \"env\": {\"ROOT_TOKEN\": \"root-only-value\"}}\n  }\n}\n";

impl Victim {
    fn new(dir: &Path, name: &str) -> Victim {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, VICTIM).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        Victim {
            path,
            bytes: VICTIM.as_bytes().to_vec(),
        }
    }

    /// Its content, mode and owner are what root left.
    fn assert_untouched(&self, what: &str) {
        let meta = std::fs::symlink_metadata(&self.path).unwrap();
        assert!(meta.is_file(), "{what}: {} replaced", self.path.display());
        assert_eq!(
            std::fs::read(&self.path).unwrap(),
            self.bytes,
            "{what}: the root-only file was rewritten"
        );
        assert_eq!(
            meta.permissions().mode() & 0o7777,
            0o600,
            "{what}: its mode"
        );
        assert_eq!(owner(&self.path), 0, "{what}: its owner");
    }
}

impl Desk {
    /// The home and the project given to `uid`, as that user's own files.
    fn give_to(&self, uid: u32) {
        chown_tree(&self.home, uid);
        chown_tree(&self.project, uid);
    }

    fn config_value(&self) -> toml::Table {
        toml::from_str(&std::fs::read_to_string(&self.config).unwrap()).unwrap()
    }
}

/// The block of each server in a printed plan: its line and the indented lines under it.
fn plan_blocks(plan: &str) -> BTreeMap<String, String> {
    let servers = plan
        .split("\nServers (")
        .nth(1)
        .unwrap_or_else(|| panic!("no servers in\n{plan}"));
    let servers = servers.split("\n\n").next().unwrap();
    let mut out: BTreeMap<String, String> = BTreeMap::new();
    let mut current = None;
    for line in servers.lines().skip(1) {
        if let Some(rest) = line.strip_prefix("  ").filter(|r| !r.starts_with(' ')) {
            let name = rest.split("  ").next().unwrap().to_string();
            out.insert(name.clone(), format!("{line}\n"));
            current = Some(name);
        } else if let Some(name) = &current {
            out.get_mut(name).unwrap().push_str(&format!("{line}\n"));
        }
    }
    out
}

#[test]
fn adopt_as_root_of_another_users_home_and_project_runs_their_servers_as_that_user() {
    if !as_root("adopt_as_root_of_another_users_home_and_project") {
        return;
    }
    let desk = Desk::new();
    desk.give_to(ALICE);
    let cursor = desk.path("home/.cursor/mcp.json");
    std::fs::set_permissions(&cursor, std::fs::Permissions::from_mode(0o640)).unwrap();
    let before = desk.snapshot();
    let owned_before = owners(&desk.root());

    // The plan says whom each server runs as, before anything is written.
    let out = desk.adopt(&["--dry-run"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let blocks = plan_blocks(&out.stdout);
    assert_eq!(blocks.len(), 9, "{}", out.stdout);
    for (name, block) in &blocks {
        assert!(
            block.contains(&format!("user = \"{ALICE}\", allowed_uids = [{ALICE}]")),
            "{name} does not say it runs as uid {ALICE}:\n{block}"
        );
    }
    assert!(
        out.stdout.contains("socket_mode = \"0666\""),
        "the plan names the socket mode that lets the user in:\n{}",
        out.stdout
    );
    assert_eq!(desk.snapshot(), before);

    let out = desk.adopt(&["--yes"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    // The supervisor config: every adopted server runs as the owner, who alone may connect.
    let cfg = desk.config_value();
    let servers = cfg["servers"].as_table().unwrap();
    assert_eq!(servers.len(), 9);
    for (name, s) in servers {
        assert_eq!(s["user"].as_str(), Some("4242"), "{name}");
        assert_eq!(
            s["allowed_uids"].as_array().unwrap(),
            &vec![toml::Value::Integer(ALICE.into())],
            "{name}"
        );
    }
    assert_eq!(cfg["supervisor"]["socket_mode"].as_str(), Some("0666"));
    let check = Command::new(SUPERVISOR)
        .arg("check-config")
        .arg(&desk.config)
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    // The client entries name the socket: the user cannot read root's config.
    let project = desk.project.to_string_lossy().into_owned();
    for (rel, pointer, key, name) in ADOPTED {
        let doc = value_of(rel, &desk.text(rel));
        let e = entry(&doc, pointer, key, &project);
        assert_eq!(
            e["args"],
            json!([
                "attach",
                name,
                "--socket",
                format!("/run/mcp-supervisor/{name}.sock")
            ]),
            "{rel} {key}"
        );
    }
    // The user's files stay hers, with their modes; root's backups stay root's, outside her home.
    assert_eq!(owner(&cursor), ALICE);
    let owned_after = owners(&desk.home);
    for (p, uid) in &owned_after {
        assert_eq!(*uid, ALICE, "{} changed owner", p.display());
    }
    assert!(
        !desk.home.join(".local").exists(),
        "nothing in the user's home"
    );
    assert_eq!(desk.adoptions(), 1);
    for (p, uid) in owners(&desk.state()) {
        assert_eq!(uid, 0, "{} is not root's", p.display());
    }

    // Undo: every file back byte for byte, with its mode and its owner.
    let out = desk.adopt(&["--undo"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert_eq!(desk.snapshot(), before);
    let owned_now = owners(&desk.root());
    for (p, uid) in &owned_before {
        assert_eq!(owned_now.get(p), Some(uid), "{}", p.display());
    }
}

#[test]
fn adopt_as_root_of_another_users_project_only_runs_the_project_servers_as_that_user() {
    if !as_root("adopt_as_root_of_another_users_project_only") {
        return;
    }
    let desk = Desk::new();
    chown_tree(&desk.project, MALLORY);
    let out = desk.adopt(&["--dry-run"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let blocks = plan_blocks(&out.stdout);
    let runs_as = |name: &str| {
        let b = blocks
            .get(name)
            .unwrap_or_else(|| panic!("no {name} in\n{}", out.stdout));
        b.contains(&format!("user = \"{MALLORY}\""))
    };
    // The project's servers run as its owner; the home's (root's) as before. The same command
    // in both is two servers: they do not run as the same user.
    assert!(runs_as("project-tools"));
    assert!(runs_as("playwright"));
    assert!(runs_as("filesystem-2"));
    assert!(!runs_as("filesystem"));
    assert!(!runs_as("github"));
    assert!(
        !runs_as("local-db"),
        "Claude Code's local scope is in the home file"
    );

    // A project inside the user's home (whatever owns the project directory itself): hers.
    let home = desk.root().join("alice");
    let nested = home.join("src/proj");
    std::fs::create_dir_all(&nested).unwrap();
    std::fs::write(
        nested.join(".mcp.json"),
        r#"{"mcpServers": {"tool": {"command": "/usr/bin/tool"}}}"#,
    )
    .unwrap();
    chown_tree(&home, ALICE);
    std::os::unix::fs::lchown(&nested, Some(0), Some(0)).unwrap();
    std::os::unix::fs::lchown(nested.join(".mcp.json"), Some(0), Some(0)).unwrap();
    let adopt_project = |project: &Path| {
        let mut cmd = Command::new(SUPERVISOR);
        cmd.arg("adopt")
            .arg("--home")
            .arg(desk.root().join("no-home"))
            .arg("--project")
            .arg(project)
            .arg("--config")
            .arg(&desk.config)
            .arg("--dry-run")
            .env("XDG_STATE_HOME", &desk.state_home);
        run(cmd)
    };
    let out = adopt_project(&nested);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let blocks = plan_blocks(&out.stdout);
    assert!(
        blocks["tool"].contains(&format!("user = \"{ALICE}\"")),
        "{}",
        out.stdout
    );
    // A third user's directory inside hers: refused.
    let third = home.join("src/mallory");
    std::fs::create_dir_all(&third).unwrap();
    chown_tree(&third, MALLORY);
    let out = adopt_project(&third);
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    assert!(out.stderr.contains("owned by uid 4343"), "{}", out.stderr);
}

/// Each way the user redirects root's reads and writes into a root-only file, or hands root a
/// file of a third user, is refused: exit 2, the file and the reason named, nothing written.
#[test]
fn adopt_as_root_refuses_links_the_user_planted_and_files_of_a_third_user() {
    if !as_root("adopt_as_root_refuses_links_the_user_planted") {
        return;
    }
    type Plant = fn(&Desk, &Victim) -> PathBuf;
    let cases: &[(&str, Plant, &str)] = &[
        (
            "a link as a client file",
            |d, v| {
                let p = d.home.join(".claude.json");
                std::fs::remove_file(&p).unwrap();
                std::os::unix::fs::symlink(&v.path, &p).unwrap();
                p
            },
            "symbolic link",
        ),
        (
            "a link as a directory of a client file",
            |d, v| {
                let p = d.home.join(".cursor");
                std::fs::remove_dir_all(&p).unwrap();
                std::os::unix::fs::symlink(v.path.parent().unwrap(), &p).unwrap();
                std::fs::rename(&v.path, v.path.with_file_name("mcp.json")).unwrap();
                p
            },
            "symbolic link",
        ),
        (
            "a link as a project file",
            |d, v| {
                let p = d.project.join(".mcp.json");
                std::fs::remove_file(&p).unwrap();
                std::os::unix::fs::symlink(&v.path, &p).unwrap();
                p
            },
            "symbolic link",
        ),
        (
            "a third user's file in the home",
            |d, _| {
                let p = d.home.join(".codex/config.toml");
                std::os::unix::fs::lchown(&p, Some(MALLORY), Some(MALLORY)).unwrap();
                p
            },
            "owned by uid 4343",
        ),
    ];
    for (what, plant, why) in cases {
        let desk = Desk::new();
        let mut victim = Victim::new(&desk.root().join("root-only"), "secret.json");
        let planted = plant(&desk, &victim);
        if !victim.path.exists() {
            victim.path = victim.path.with_file_name("mcp.json");
        }
        desk.give_to(ALICE);
        if why.contains("4343") {
            std::os::unix::fs::lchown(&planted, Some(MALLORY), Some(MALLORY)).unwrap();
        }
        let before = desk.snapshot();
        let out = desk.adopt(&["--yes"]);
        assert_eq!(out.code, 2, "{what}: {}{}", out.stdout, out.stderr);
        assert!(
            out.stderr.contains(&planted.to_string_lossy().into_owned())
                && out.stderr.contains(why),
            "{what}: the refusal names {} and says {why:?}: {}",
            planted.display(),
            out.stderr
        );
        assert!(
            !out.stdout.contains("root-tool") && !out.stderr.contains("root-only-value"),
            "{what}: nothing of the root file is shown:\n{}",
            out.stdout
        );
        victim.assert_untouched(what);
        assert_eq!(desk.snapshot(), before, "{what}");
        assert!(!desk.config.exists(), "{what}");
        assert_eq!(desk.adoptions(), 0, "{what}");
    }
}

/// An adoption the user forged: its manifest names a root-only file and its "backup" holds her
/// text. `--undo` restores only adoptions in the running user's own state directory, whose
/// directories, manifest and backups are that user's and writable by nobody else.
#[test]
fn adopt_undo_refuses_a_manifest_or_backup_it_did_not_write() {
    use sha2::{Digest, Sha256};
    if !as_root("adopt_undo_refuses_a_manifest_or_backup_it_did_not_write") {
        return;
    }
    let hex = |b: &[u8]| -> String {
        Sha256::digest(b)
            .iter()
            .map(|x| format!("{x:02x}"))
            .collect()
    };
    /// Writes a forged adoption under `state` (the `.../mcp-supervisor/adopt` directory).
    fn forge(state: &Path, victim: &Victim, sha: &dyn Fn(&[u8]) -> String) -> PathBuf {
        let dir = state.join("29990101T000000Z");
        std::fs::create_dir_all(&dir).unwrap();
        let forged = b"written by the user\n";
        std::fs::write(dir.join("0-secret.json"), forged).unwrap();
        let manifest = json!({
            "version": 1,
            "created": "2999-01-01T00:00:00Z",
            "undone": null,
            "files": [{
                "path": victim.path,
                "existed": true,
                "backup": "0-secret.json",
                "mode": 0o666,
                "sha256": sha(&victim.bytes),
                "before_sha256": sha(forged),
            }]
        });
        std::fs::write(dir.join("manifest.json"), manifest.to_string()).unwrap();
        for p in [&dir, &dir.join("0-secret.json"), &dir.join("manifest.json")] {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o700)).unwrap();
        }
        std::fs::set_permissions(
            dir.join("manifest.json"),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();
        dir
    }

    // 1. Where adopt used to keep them with --home: in the user's home. Root's undo does not
    //    look there.
    let desk = Desk::new();
    let victim = Victim::new(&desk.root().join("root-only"), "secret.json");
    let in_home = desk.home.join(".local/state/mcp-supervisor/adopt");
    forge(&in_home, &victim, &hex);
    desk.give_to(ALICE);
    let out = desk.adopt(&["--undo"]);
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    assert!(out.stderr.contains("nothing to undo"), "{}", out.stderr);
    victim.assert_untouched("a manifest in the user's home");

    // 2.-4. In root's state directory, but not root's own, or writable by others.
    type Spoil = fn(&Path);
    let cases: &[(&str, Spoil, &str)] = &[
        (
            "the adoption directory and its manifest are the user's",
            |dir| chown_tree(dir, ALICE),
            "owned by uid 4242",
        ),
        (
            "the manifest is writable by others",
            |dir| {
                std::fs::set_permissions(
                    dir.join("manifest.json"),
                    std::fs::Permissions::from_mode(0o666),
                )
                .unwrap()
            },
            "writable by others",
        ),
        (
            "the backup is the user's",
            |dir| chown_tree(&dir.join("0-secret.json"), ALICE),
            "owned by uid 4242",
        ),
        (
            "the state directory is writable by others",
            |dir| {
                std::fs::set_permissions(
                    dir.parent().unwrap(),
                    std::fs::Permissions::from_mode(0o777),
                )
                .unwrap()
            },
            "writable by others",
        ),
    ];
    for (what, spoil, why) in cases {
        let desk = Desk::new();
        let victim = Victim::new(&desk.root().join("root-only"), "secret.json");
        let state = desk.state();
        std::fs::create_dir_all(&state).unwrap();
        for d in [
            &desk.state_home,
            &state.parent().unwrap().to_path_buf(),
            &state,
        ] {
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700)).unwrap();
        }
        let dir = forge(&state, &victim, &hex);
        spoil(&dir);
        // Without --home, as root would run it on its own desktop.
        let mut cmd = Command::new(SUPERVISOR);
        cmd.args(["adopt", "--undo"])
            .env("HOME", desk.root())
            .env("XDG_STATE_HOME", &desk.state_home);
        let out = run(cmd);
        assert_eq!(out.code, 2, "{what}: {}{}", out.stdout, out.stderr);
        assert!(
            out.stderr.contains(why) && out.stderr.contains("refusing"),
            "{what}: wanted {why:?}: {}",
            out.stderr
        );
        victim.assert_untouched(what);
    }
}

#[test]
fn adopt_warns_when_the_secrets_go_into_a_config_others_can_read() {
    let desk = Desk::new();
    std::fs::create_dir_all(desk.config.parent().unwrap()).unwrap();
    let mine = format!("[supervisor]\nsocket_dir = {:?}\n", desk.root().join("run"));
    std::fs::write(&desk.config, &mine).unwrap();
    std::fs::set_permissions(&desk.config, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = desk.adopt(&["--dry-run"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let warning = "is mode 0644: others can read the secrets";
    assert!(out.stdout.contains(warning), "{}", out.stdout);
    let out = desk.adopt(&["--yes"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let outcome = out.stdout.split("\nAdopted:").nth(1).unwrap();
    assert!(
        outcome.contains(warning),
        "the outcome repeats it:\n{outcome}"
    );
    assert_eq!(desk.adopt(&["--undo"]).code, 0);

    // A config only its owner reads gets no warning.
    std::fs::set_permissions(&desk.config, std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = desk.adopt(&["--dry-run"]);
    assert!(!out.stdout.contains("others can read"), "{}", out.stdout);
}

/// The end of the story: root's supervisor runs the server adopted from the user's files as
/// that user, the user's client connects through the rewritten entry, and a third user who
/// can now open the socket file is still refused by `allowed_uids`.
#[test]
fn adopt_as_root_the_owner_connects_through_the_rewritten_entry_and_no_one_else() {
    use std::os::unix::process::CommandExt;
    if !as_root("adopt_as_root_the_owner_connects") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    // The user must be able to reach the socket directory.
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (home, project) = (root.join("home"), root.join("project"));
    std::fs::create_dir_all(home.join(".config/Claude")).unwrap();
    std::fs::create_dir_all(&project).unwrap();
    let desktop = home.join(".config/Claude/claude_desktop_config.json");
    let entry = json!({"mcpServers": {"Fake Server": {
        "command": FAKE, "args": [], "env": {"ADOPT_MARK": "alice-secret"}}}});
    std::fs::write(&desktop, serde_json::to_string_pretty(&entry).unwrap()).unwrap();
    chown_tree(&home, ALICE);
    chown_tree(&project, ALICE);
    let config = root.join("supervisor.toml");
    std::fs::write(
        &config,
        format!("[supervisor]\nsocket_dir = {:?}\n", root.join("run")),
    )
    .unwrap();
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o600)).unwrap();
    let mut cmd = Command::new(SUPERVISOR);
    cmd.arg("adopt")
        .arg("--home")
        .arg(&home)
        .arg("--project")
        .arg(&project)
        .arg("--config")
        .arg(&config)
        .arg("--yes")
        .env("XDG_STATE_HOME", root.join("state"));
    let out = run(cmd);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);

    let mut sup = Supervisor::spawn_with(dir, config, &[]);
    let up = wait_until(Duration::from_secs(10), || {
        sup.socket("fake-server").exists()
    });
    if !up {
        sup.stop();
        panic!("no socket for fake-server; log:\n{}", sup.log());
    }
    let rewritten: Value =
        serde_json::from_str(&std::fs::read_to_string(&desktop).unwrap()).unwrap();
    let e = &rewritten["mcpServers"]["Fake Server"];
    let args: Vec<String> = e["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    let client_as = |uid: u32| {
        Command::new(e["command"].as_str().unwrap())
            .args(&args)
            .uid(uid)
            .gid(uid)
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let talk = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "alice-desktop", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "env", "arguments": {"name": "ADOPT_MARK"}}}),
    ];

    // The owner: served, by a child running as her.
    let mut client = client_as(ALICE);
    let rx = lines(client.stdout.take().unwrap());
    let mut stdin = client.stdin.take().unwrap();
    for m in &talk {
        writeln!(stdin, "{m}").unwrap();
    }
    stdin.flush().unwrap();
    let init = response(&rx, 1);
    assert!(init["result"]["serverInfo"].is_object(), "{init}");
    assert_eq!(Client::text(&response(&rx, 2)), "alice-secret");
    let pid = sup.server_status("fake-server")["pid"].as_u64().unwrap();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let uid_line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    assert_eq!(
        uid_line.split_whitespace().nth(1),
        Some("4242"),
        "the child runs as the owner of the files: {uid_line}"
    );
    drop(stdin);
    let exited = wait_until(Duration::from_secs(10), || {
        client.try_wait().unwrap().is_some()
    });
    if !exited {
        let _ = client.kill();
    }
    assert!(exited, "attach did not exit after its stdin closed");

    // Another user: the socket file opens (mode 0666), the supervisor closes the connection.
    let mut other = client_as(MALLORY);
    let rx = lines(other.stdout.take().unwrap());
    let mut stdin = other.stdin.take().unwrap();
    let _ = writeln!(stdin, "{}", talk[0]);
    let _ = stdin.flush();
    let ended = wait_until(Duration::from_secs(10), || {
        other.try_wait().unwrap().is_some()
    });
    if !ended {
        let _ = other.kill();
    }
    assert!(ended, "the refused client's attach did not end");
    // Only the refusal, which tells attach not to reconnect (issue 32 §2).
    let got: Vec<Value> = rx.try_iter().collect();
    assert!(
        got.iter()
            .all(|v| v["error"]["data"]["mcp-supervisor/hangup"] == "denied"),
        "uid {MALLORY} got an answer: {got:?}"
    );
    assert!(
        wait_until(Duration::from_secs(10), || sup
            .log()
            .contains("refused a connection from uid 4343")),
        "{}",
        sup.log()
    );
    sup.stop();
}

/// `adopt` run as a user (not root): another user's home is refused, since their servers
/// would run as her; her own files, through her own dotfile links, round-trip as ever.
#[test]
fn adopt_as_a_user_refuses_another_users_home_and_follows_her_own_links() {
    use std::os::unix::process::CommandExt;
    if !as_root("adopt_as_a_user_refuses_another_users_home") {
        return;
    }
    let desk = Desk::new();
    std::fs::set_permissions(desk.root(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let as_alice = |args: &[&str]| {
        let mut cmd = Command::new(SUPERVISOR);
        cmd.arg("adopt")
            .arg("--home")
            .arg(&desk.home)
            .arg("--project")
            .arg(&desk.project)
            .arg("--config")
            .arg(&desk.config)
            .args(args)
            .env_clear()
            .env("HOME", &desk.home)
            .env("XDG_STATE_HOME", &desk.state_home)
            .uid(ALICE)
            .gid(ALICE);
        run(cmd)
    };

    // Mallory's home: refused, nothing read into a plan.
    desk.give_to(MALLORY);
    let out = as_alice(&["--dry-run"]);
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stderr
            .contains("owned by uid 4343, not by you (uid 4242)")
            && out.stderr.contains("only root"),
        "{}",
        out.stderr
    );
    assert!(out.stdout.is_empty(), "{}", out.stdout);

    // Her own desk, her Cursor file a link into her dotfiles: written through, undone.
    let dotfiles = desk.home.join("dotfiles");
    std::fs::create_dir(&dotfiles).unwrap();
    std::fs::rename(
        desk.home.join(".cursor/mcp.json"),
        dotfiles.join("cursor.json"),
    )
    .unwrap();
    std::os::unix::fs::symlink(
        "../dotfiles/cursor.json",
        desk.home.join(".cursor/mcp.json"),
    )
    .unwrap();
    for d in [desk.root().join("etc"), desk.state_home.clone()] {
        std::fs::create_dir_all(&d).unwrap();
        chown_tree(&d, ALICE);
    }
    desk.give_to(ALICE);
    let before = desk.snapshot();
    let out = as_alice(&["--yes"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(!out.stdout.contains("runs as:"), "{}", out.stdout);
    let cursor = jsonc(&std::fs::read_to_string(dotfiles.join("cursor.json")).unwrap());
    assert_eq!(cursor["mcpServers"]["fs"]["args"][1], "filesystem");
    assert!(
        std::fs::symlink_metadata(desk.home.join(".cursor/mcp.json"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    let cfg = desk.config_value();
    assert!(cfg["servers"]["github"].get("user").is_none());
    assert!(
        cfg.get("supervisor").is_none(),
        "no socket_mode for her own servers"
    );
    assert_eq!(owner(&desk.config), ALICE);
    let out = as_alice(&["--undo"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert_eq!(desk.snapshot(), before);
}

/// The servers object at `pointer` of `rel` in the desk now.
fn servers_object(desk: &Desk, rel: &str, pointer: &[&str]) -> Value {
    let project = desk.project.to_string_lossy().into_owned();
    let doc = value_of(rel, &desk.text(rel));
    let mut v = &doc;
    for k in pointer {
        v = &v[k.replace("@PROJECT@", &project)];
    }
    v.clone()
}

#[test]
fn adopt_endpoint_points_every_client_at_one_entry_and_undo_restores_every_file_byte_for_byte() {
    let desk = Desk::new();
    let before = desk.snapshot();
    let config = desk.config.to_string_lossy().into_owned();
    let out = desk.adopt(&["--yes", "--endpoint", "desk"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("Endpoint desk [new]"), "{}", out.stdout);
    assert!(
        out.stdout
            .contains("Adopted: 16 client entries, 9 new servers"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("through endpoint desk"),
        "{}",
        out.stdout
    );
    // Each servers object that had adopted entries: none of them left, one `desk` entry
    // attaching to the endpoint, the entries left untouched still there.
    let exe = canonical_supervisor();
    let mut objects: BTreeMap<(&str, Vec<&str>), Vec<&str>> = BTreeMap::new();
    for (rel, pointer, key, _) in ADOPTED {
        objects
            .entry((rel, pointer.to_vec()))
            .or_default()
            .push(key);
    }
    for ((rel, pointer), keys) in &objects {
        let obj = servers_object(&desk, rel, pointer);
        for key in keys {
            assert!(obj.get(key).is_none(), "{rel} {key} still there: {obj}");
        }
        assert_eq!(obj["desk"]["command"], json!(exe), "{rel}: {obj}");
        assert_eq!(
            obj["desk"]["args"],
            json!(["attach", "desk", "--config", config]),
            "{rel}: {obj}"
        );
        for gone in ["env", "envFile", "cwd"] {
            assert!(obj["desk"].get(gone).is_none(), "{rel}: {obj}");
        }
    }
    // VS Code's `"type": "stdio"` (an other key of the entry renamed) is kept.
    let vscode = servers_object(&desk, "project/.vscode/mcp.json", &["servers"]);
    assert_eq!(vscode["desk"]["type"], "stdio", "{vscode}");
    for (key, _) in SKIPPED {
        let key = key.trim_matches('"');
        let anywhere = objects
            .keys()
            .any(|(rel, pointer)| servers_object(&desk, rel, pointer).get(key).is_some())
            || desk.text("home/.codex/config.toml").contains(key);
        assert!(anywhere, "the untouched entry {key} was lost");
    }
    // The config: valid, the nine servers and one endpoint serving each of them.
    let cfg = desk.checked_config();
    let mut served: Vec<&str> = cfg["endpoints"]["desk"]["servers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    served.sort_unstable();
    let mut servers: Vec<&str> = cfg["servers"]
        .as_table()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    servers.sort_unstable();
    assert_eq!(served, servers);
    assert_eq!(servers.len(), 9);

    // Again: every client already reaches the endpoint; nothing to do.
    let snapshot = desk.snapshot();
    let out = desk.adopt(&["--yes", "--endpoint", "desk"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("Nothing to adopt"), "{}", out.stdout);
    assert_eq!(desk.snapshot(), snapshot);

    let out = desk.adopt(&["--undo"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert_eq!(desk.snapshot(), before);
}

#[test]
fn adopt_endpoint_after_adopt_folds_the_attached_entries_and_undo_goes_back_one_step() {
    let desk = Desk::new();
    assert_eq!(desk.adopt(&["--yes"]).code, 0);
    let per_server = desk.snapshot();
    // A name that is a server's is refused, and nothing is written.
    let out = desk.adopt(&["--yes", "--endpoint", "github"]);
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    assert!(out.stderr.contains("server's name"), "{}", out.stderr);
    let out = desk.adopt(&["--yes", "--endpoint", "Bad Name"]);
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    assert_eq!(desk.snapshot(), per_server);

    let out = desk.adopt(&["--yes", "--endpoint", "all"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("Endpoint all [new]"), "{}", out.stdout);
    let cursor = servers_object(&desk, "home/.cursor/mcp.json", &["mcpServers"]);
    assert_eq!(cursor["all"]["args"][1], "all", "{cursor}");
    assert!(
        cursor.get("fs").is_none() && cursor.get("github").is_none(),
        "{cursor}"
    );
    let codex = desk.text("home/.codex/config.toml");
    let codex: toml::Table = toml::from_str(&codex).unwrap();
    let codex = codex["mcp_servers"].as_table().unwrap();
    assert_eq!(codex["all"]["args"][1].as_str(), Some("all"));
    assert!(!codex.contains_key("filesystem") && !codex.contains_key("context7"));
    let cfg = std::fs::read_to_string(&desk.config).unwrap();
    assert!(cfg.contains("[endpoints.all]"), "{cfg}");

    // Undo goes back to the entry per server, byte for byte.
    assert_eq!(desk.adopt(&["--undo"]).code, 0);
    assert_eq!(desk.snapshot(), per_server);
}

/// Issue 47 §3: a client entry keyed with `__` (the separator of an endpoint's exposed names)
/// becomes a server whose name has none, so `adopt --endpoint` writes a configuration that
/// serves it, and no `[servers.NAME]` it writes holds `__`.
#[test]
fn adopt_never_writes_a_server_name_holding_the_separator() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let (home, project) = (root.join("home"), root.join("project"));
    std::fs::create_dir_all(home.join(".config/Claude")).unwrap();
    std::fs::create_dir_all(&project).unwrap();
    let desktop = home.join(".config/Claude/claude_desktop_config.json");
    let entry = json!({"mcpServers": {
        "My__Tools": {"command": FAKE, "args": []},
        "x___y__": {"command": FAKE, "args": ["--name", "other"]}}});
    std::fs::write(&desktop, serde_json::to_string_pretty(&entry).unwrap()).unwrap();
    let config = root.join("supervisor.toml");
    std::fs::write(
        &config,
        format!("[supervisor]\nsocket_dir = {:?}\n", root.join("run")),
    )
    .unwrap();
    let out = run({
        let mut c = Command::new(SUPERVISOR);
        c.arg("adopt")
            .arg("--home")
            .arg(&home)
            .arg("--project")
            .arg(&project)
            .arg("--config")
            .arg(&config)
            .args(["--yes", "--endpoint", "desk"])
            .env("XDG_STATE_HOME", root.join("state"));
        c
    });
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let text = std::fs::read_to_string(&config).unwrap();
    let doc: toml::Table = toml::from_str(&text).unwrap();
    let servers: Vec<&String> = doc["servers"].as_table().unwrap().keys().collect();
    assert_eq!(servers, ["my_tools", "x_y_"], "{text}");
    let check = Command::new(SUPERVISOR)
        .arg("check-config")
        .arg(&config)
        .output()
        .unwrap();
    assert!(check.status.success(), "{check:?}");
    assert!(check.stderr.is_empty(), "no warning: {check:?}");
}
