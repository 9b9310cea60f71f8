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
        let out = Command::new(SUPERVISOR)
            .arg("adopt")
            .arg("--home")
            .arg(&self.home)
            .arg("--project")
            .arg(&self.project)
            .arg("--config")
            .arg(&self.config)
            .args(args)
            .env("HOME", &self.home)
            .stdin(Stdio::null())
            .output()
            .unwrap();
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

    /// Every file of the desktop (not the adopt state), with its bytes and mode.
    fn snapshot(&self) -> BTreeMap<PathBuf, (Vec<u8>, u32)> {
        fn walk(dir: &Path, skip: &Path, out: &mut BTreeMap<PathBuf, (Vec<u8>, u32)>) {
            for e in std::fs::read_dir(dir).unwrap() {
                let p = e.unwrap().path();
                if p == skip {
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
        walk(&self.root(), &self.home.join(".local"), &mut out);
        out
    }

    fn state(&self) -> PathBuf {
        self.home.join(".local/state/mcp-supervisor/adopt")
    }

    fn adoptions(&self) -> usize {
        std::fs::read_dir(self.state()).map_or(0, |d| d.count())
    }
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
    let check = Command::new(SUPERVISOR)
        .args(["check-config"])
        .arg(&desk.config)
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    let cfg: toml::Table = toml::from_str(&std::fs::read_to_string(&desk.config).unwrap()).unwrap();
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
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let mut sup = Supervisor::spawn_with(dir, config, &[]);
    let up = wait_until(Duration::from_secs(10), || {
        sup.socket("fake-server").exists()
    });
    if !up {
        sup.stop();
        panic!("no socket for fake-server; log:\n{}", sup.log());
    }
    // The client's command, exactly as the rewritten file says.
    let rewritten: Value =
        serde_json::from_str(&std::fs::read_to_string(&desktop).unwrap()).unwrap();
    let e = &rewritten["mcpServers"]["Fake Server"];
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
            "params": {"name": "env", "arguments": {"name": "ADOPT_MARK"}}}),
    ] {
        writeln!(stdin, "{m}").unwrap();
    }
    stdin.flush().unwrap();
    let init = response(&rx, 1);
    assert!(init["result"]["serverInfo"].is_object(), "{init}");
    let list = response(&rx, 2);
    let tools = list["result"]["tools"].as_array().unwrap();
    assert!(tools.iter().any(|t| t["name"] == "echo"), "{list}");
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
