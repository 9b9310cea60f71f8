//! Unit tests of adopt: entry classification, the byte-preserving edits of each format, the
//! supervisor config append, client paths, atomic writes and undo. Naming and merging are
//! tested in `plan.rs`.

use super::entry::{classify, Dialect, Spec, Verdict};
use super::safe::{self, Meta, Place, Trust};
use super::sources::{client_files, Client, Places, Scope};
use super::supervisor::Sockets;
use super::{backup, codex, jsonc, supervisor, AdoptError, Edit, Rewrite};
use serde_json::json;
use std::path::{Path, PathBuf};

const USER: Dialect<'static> = Dialect {
    interpolates: false,
    codex: false,
    project: None,
};

fn skipped(v: &Verdict, needle: &str) -> bool {
    matches!(v, Verdict::Skip(why) if why.contains(needle))
}

fn spec(v: Verdict) -> Spec {
    match v {
        Verdict::Adopt(s) => s,
        other => panic!("not adopted: {other:?}"),
    }
}

#[test]
fn stdio_entries_are_adopted_with_command_args_env() {
    let s = spec(classify(
        &json!({"type": "stdio", "command": "npx", "args": ["-y", "x"], "env": {"K": "v"}, "timeout": 5}),
        USER,
    ));
    assert_eq!(s.command, "npx");
    assert_eq!(s.args, ["-y", "x"]);
    assert_eq!(s.env.get("K").map(String::as_str), Some("v"));
    assert_eq!(s.cwd, None);
    // No args, null env: empty.
    let s = spec(classify(&json!({"command": "srv", "env": null}), USER));
    assert!(s.args.is_empty() && s.env.is_empty());
}

#[test]
fn what_is_not_understood_is_skipped_with_a_reason() {
    let cases = [
        (json!({"type": "http", "url": "https://x/mcp"}), "remote"),
        (json!({"url": "https://x/sse"}), "remote"),
        (json!({"serverUrl": "https://x"}), "remote"),
        (json!({"type": "sse", "command": "x"}), "not stdio"),
        (json!({"command": "x", "disabled": true}), "disabled"),
        (json!({"command": "x", "enabled": false}), "disabled"),
        (json!({"args": ["x"]}), "no `command`"),
        (json!({"command": ""}), "not a non-empty string"),
        (json!({"command": 3}), "not a non-empty string"),
        (json!({"command": "x", "args": "a b"}), "args"),
        (json!({"command": "x", "args": ["a", 1]}), "args"),
        (json!({"command": "x", "env": {"PORT": 8080}}), "env `PORT`"),
        (json!({"command": "x", "env": ["A=1"]}), "env"),
        (json!({"command": "x", "envFile": "/e"}), "envFile"),
        (json!({"command": "x", "cwd": 1}), "cwd"),
        (json!("npx x"), "not an object"),
    ];
    for (value, needle) in cases {
        let v = classify(&value, USER);
        assert!(skipped(&v, needle), "{value} -> {v:?}, wanted {needle:?}");
    }
}

#[test]
fn variables_are_skipped_only_where_the_client_expands_them() {
    let vscode = Dialect {
        interpolates: true,
        ..USER
    };
    let input = json!({"command": "npx", "env": {"KEY": "${input:key}"}});
    assert!(skipped(&classify(&input, vscode), "${input:"));
    let var = json!({"command": "npx", "args": ["${workspaceFolder}"]});
    assert!(skipped(&classify(&var, vscode), "variables"));
    let home = json!({"command": "${HOME}/bin/srv"});
    assert!(skipped(&classify(&home, vscode), "variables"));
    // Claude Desktop and Codex pass `${...}` through as text; so does the supervisor.
    assert_eq!(spec(classify(&var, USER)).args, ["${workspaceFolder}"]);
}

#[test]
fn codex_keys() {
    let codex = Dialect {
        codex: true,
        ..USER
    };
    let v = json!({"command": "x", "env_vars": ["TOKEN"]});
    assert!(skipped(&classify(&v, codex), "env_vars"));
    let v = json!({"command": "x", "env_vars": [], "startup_timeout_sec": 20, "enabled": true});
    assert_eq!(spec(classify(&v, codex)).command, "x");
    assert!(skipped(
        &classify(&json!({"command": "x", "enabled": false}), codex),
        "disabled"
    ));
}

#[test]
fn attach_entries_are_recognised_whatever_the_path() {
    let v = json!({"command": "/usr/local/bin/mcp-supervisor", "args": ["attach", "fs", "--config", "/c"]});
    assert_eq!(classify(&v, USER), Verdict::Attached(Some("fs".into())));
    let v = json!({"command": "mcp-supervisor", "args": ["attach"]});
    assert_eq!(classify(&v, USER), Verdict::Attached(None));
    // `run` is not `attach`.
    let v = json!({"command": "mcp-supervisor", "args": ["run"]});
    assert!(matches!(classify(&v, USER), Verdict::Adopt(_)));
}

#[test]
fn relative_paths_resolve_against_the_project_and_set_its_cwd() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    std::fs::create_dir(p.join("build")).unwrap();
    std::fs::write(p.join("build/index.js"), "").unwrap();
    let project = Dialect {
        project: Some(p),
        ..USER
    };
    let cwd = Some(p.to_string_lossy().into_owned());
    // A relative command: absolute, and the project as cwd.
    let s = spec(classify(&json!({"command": "./bin/srv"}), project));
    assert_eq!(
        s.command,
        p.join("bin/srv").to_string_lossy(),
        "no `./` left in it"
    );
    assert_eq!(s.cwd, cwd);
    // An argument naming a project file, `.`, or `./x`: cwd.
    for arg in ["build/index.js", ".", "./data", "../x"] {
        let s = spec(classify(
            &json!({"command": "node", "args": [arg]}),
            project,
        ));
        assert_eq!(s.cwd, cwd, "{arg}");
    }
    // Package names, flags and absolute paths do not tie a server to the project, so the
    // same server in a user file and a project file merges.
    let v = json!({"command": "npx", "args": ["-y", "@scope/pkg", "/abs", "--x=build/index.js"]});
    assert_eq!(spec(classify(&v, project)).cwd, None);
    // A relative cwd is joined.
    let s = spec(classify(&json!({"command": "srv", "cwd": "sub"}), project));
    assert_eq!(s.cwd, Some(p.join("sub").to_string_lossy().into_owned()));
    // In a user-wide file there is nothing to resolve against.
    assert!(skipped(
        &classify(&json!({"command": "./bin/srv"}), USER),
        "relative"
    ));
    assert!(skipped(
        &classify(&json!({"command": "srv", "cwd": "sub"}), USER),
        "relative"
    ));
}

fn rw(name: &str) -> Rewrite {
    Rewrite {
        command: "/opt/mcp-supervisor".into(),
        args: vec!["attach".into(), name.into()],
    }
}

fn ptr(keys: &[&str]) -> Vec<String> {
    keys.iter().map(|s| s.to_string()).collect()
}

#[test]
fn jsonc_rewrite_keeps_comments_commas_bom_and_crlf() {
    let text = "\u{feff}{\r\n  // top\r\n  \"x\": 1,\r\n  \"servers\": {\r\n    \"a\": { \"type\": \"stdio\", /* keep */ \"command\": \"npx\", \"env\": {\"K\": \"v\"}, },\r\n    \"b\": {\"url\": \"https://b\"},\r\n  },\r\n}\r\n";
    let path = Path::new("t.json");
    let out = jsonc::rewrite(
        path,
        text,
        &[(ptr(&["servers"]), "a".into(), Edit::Point(rw("a")))],
    )
    .unwrap();
    assert!(out.starts_with("\u{feff}{\r\n  // top\r\n  \"x\": 1,\r\n  \"servers\": {\r\n"));
    assert!(
        out.ends_with("    \"b\": {\"url\": \"https://b\"},\r\n  },\r\n}\r\n"),
        "{out:?}"
    );
    assert!(!out.contains("\"K\""), "env removed: {out:?}");
    assert!(out.contains("\"type\": \"stdio\""));
    assert!(out.contains("/* keep */"), "{out:?}");
    let a = &jsonc::parse(path, &out).unwrap();
    let jsonc::Entries::Found(e) = a.entries(&ptr(&["servers"])) else {
        panic!()
    };
    assert_eq!(
        e[0].1,
        json!({"type": "stdio", "command": "/opt/mcp-supervisor", "args": ["attach", "a"]})
    );
}

#[test]
fn jsonc_section_shapes() {
    let p = Path::new("t.json");
    let doc = jsonc::parse(p, r#"{"mcpServers": [], "a": {"b": 1}}"#).unwrap();
    assert!(matches!(
        doc.entries(&ptr(&["mcpServers"])),
        jsonc::Entries::Malformed(_)
    ));
    assert_eq!(doc.entries(&ptr(&["nope"])), jsonc::Entries::Missing);
    assert!(matches!(
        doc.entries(&ptr(&["a", "b", "c"])),
        jsonc::Entries::Malformed(_)
    ));
    let empty = jsonc::parse(p, "").unwrap();
    assert_eq!(
        empty.entries(&ptr(&["mcpServers"])),
        jsonc::Entries::Missing
    );
}

#[test]
fn bad_json_names_the_file_and_line() {
    let e = jsonc::parse(
        Path::new("/x/mcp.json"),
        "{\n  \"mcpServers\": {\n    \"a\": \n}\n",
    )
    .err()
    .unwrap();
    match &e {
        AdoptError::BadFile { path, line, .. } => {
            assert_eq!(path, Path::new("/x/mcp.json"));
            assert_eq!(*line, Some(4));
        }
        other => panic!("{other:?}"),
    }
    assert!(e.is_usage());
    assert!(
        e.to_string().starts_with("/x/mcp.json:4: not valid JSON"),
        "{e}"
    );
    // JSON5 that no client documents is refused; an array at the top is not a config.
    assert!(jsonc::parse(Path::new("a"), "{'a': 1}").is_err());
    assert!(jsonc::parse(Path::new("a"), "[1]").is_err());
}

#[test]
fn codex_rewrite_keeps_comments_and_other_tables() {
    let text = "# top\nmodel = \"o3\"\n\n[mcp_servers.fs]\n# about fs\ncommand = \"npx\" # why\nargs = [\"-y\", \"fs\"]\nstartup_timeout_sec = 20\n\n[mcp_servers.fs.env]\nTOKEN = \"s\"\n\n[mcp_servers.remote]\nurl = \"https://r\"\n\n[profiles.x]\nmodel = \"y\"\n";
    let path = Path::new("config.toml");
    let doc = codex::parse(path, text).unwrap();
    let jsonc::Entries::Found(e) = doc.entries(&ptr(&["mcp_servers"])) else {
        panic!()
    };
    assert_eq!(e.len(), 2);
    assert_eq!(e[0].1["env"]["TOKEN"], "s");
    let out = codex::rewrite(
        path,
        text,
        &[(ptr(&["mcp_servers"]), "fs".into(), Edit::Point(rw("fs")))],
    )
    .unwrap();
    assert_eq!(
        out,
        "# top\nmodel = \"o3\"\n\n[mcp_servers.fs]\n# about fs\ncommand = \"/opt/mcp-supervisor\" # why\nargs = [\"attach\", \"fs\"]\nstartup_timeout_sec = 20\n\n[mcp_servers.remote]\nurl = \"https://r\"\n\n[profiles.x]\nmodel = \"y\"\n"
    );
}

#[test]
fn codex_inline_and_dotted_entries() {
    let text =
        "mcp_servers.a.command = \"x\"\nmcp_servers.b = { command = \"y\", env = { K = \"v\" } }\n";
    let path = Path::new("config.toml");
    let edits = [
        (ptr(&["mcp_servers"]), "a".to_string(), Edit::Point(rw("a"))),
        (ptr(&["mcp_servers"]), "b".to_string(), Edit::Point(rw("b"))),
    ];
    let out = codex::rewrite(path, text, &edits).unwrap();
    let v: toml::Table = toml::from_str(&out).unwrap();
    assert_eq!(v["mcp_servers"]["a"]["args"][1].as_str(), Some("a"));
    assert_eq!(
        v["mcp_servers"]["b"]["command"].as_str(),
        Some("/opt/mcp-supervisor")
    );
    assert!(v["mcp_servers"]["b"].get("env").is_none());
}

#[test]
fn bad_toml_names_the_file_and_line() {
    let e = codex::parse(Path::new("c.toml"), "a = 1\n[mcp_servers.x\ncommand = 1\n")
        .err()
        .unwrap();
    assert!(e.to_string().starts_with("c.toml:2: not valid TOML"), "{e}");
}

fn server(name: &str, env: &[(&str, &str)], cwd: Option<&str>) -> super::plan::Server {
    super::plan::Server {
        name: name.into(),
        spec: Spec {
            command: "npx".into(),
            args: vec!["-y".into(), "x y".into()],
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            cwd: cwd.map(String::from),
            user: None,
        },
        existing: false,
        from: vec![],
    }
}

#[test]
fn supervisor_config_is_appended_to_and_validated() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("supervisor.toml");
    let old = "# mine\n[supervisor]\nsocket_dir = \"run\"\n\n[servers.clock]\ncommand = \"uvx\"\nargs = [\"mcp-server-time\"]\nenv = { TZ = \"UTC\" } # comment\n";
    std::fs::write(&path, old).unwrap();
    let current = supervisor::read(&path).unwrap();
    let clock = Spec {
        command: "uvx".into(),
        args: vec!["mcp-server-time".into()],
        env: [("TZ".to_string(), "UTC".to_string())].into(),
        cwd: None,
        user: None,
    };
    assert_eq!(current.servers, vec![("clock".to_string(), Some(clock))]);
    let gh = server("gh", &[("TOKEN", "secret \"quoted\"")], Some("/p"));
    let out = supervisor::append(
        &current,
        &[(&gh, vec!["Cursor (user) x \"gh\"".into()])],
        Sockets::Enough,
        None,
    )
    .unwrap();
    assert!(out.starts_with(old), "{out}");
    assert!(
        out.contains("\n# adopted from Cursor (user) x \"gh\"\n[servers.gh]\n"),
        "{out}"
    );
    let cfg = support::config::parse(&path, &out).unwrap();
    let s = &cfg.servers["gh"];
    assert_eq!(s.env["TOKEN"], "secret \"quoted\"");
    assert_eq!(s.args, ["-y", "x y"]);
    assert_eq!(s.cwd.as_deref(), Some(Path::new("/p")));
}

#[test]
fn a_new_supervisor_config_starts_with_a_header_and_validates() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("none.toml");
    let current = supervisor::read(&path).unwrap();
    assert!(current.text.is_none());
    let a = server("a", &[], None);
    let out =
        supervisor::append(&current, &[(&a, vec!["src".into()])], Sockets::Enough, None).unwrap();
    assert!(out.starts_with("# mcp-supervisor configuration"), "{out}");
    assert!(
        out.contains("\n\n# adopted from src\n[servers.a]\n"),
        "{out}"
    );
    support::config::parse(&path, &out).unwrap();
}

#[test]
fn an_invalid_supervisor_config_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.toml");
    std::fs::write(&path, "[servers.Bad]\ncommand = \"x\"\n").unwrap();
    let e = supervisor::read(&path).err().unwrap();
    assert!(
        e.is_usage() && e.to_string().contains("fix it first"),
        "{e}"
    );
}

#[test]
fn client_files_cover_linux_and_macos_and_both_scopes() {
    let places = Places {
        home: "/h".into(),
        project: "/p".into(),
        config_home: "/h/.config".into(),
        codex_home: "/h/.codex".into(),
        home_owner: 1000,
        project_owner: 1001,
    };
    let files = client_files(&places);
    let paths: Vec<&Path> = files.iter().map(|f| f.path.as_path()).collect();
    for want in [
        "/h/.config/Claude/claude_desktop_config.json",
        "/h/Library/Application Support/Claude/claude_desktop_config.json",
        "/h/.claude.json",
        "/p/.mcp.json",
        "/h/.cursor/mcp.json",
        "/p/.cursor/mcp.json",
        "/h/.config/Code/User/settings.json",
        "/h/.config/Code/User/mcp.json",
        "/h/Library/Application Support/Code/User/settings.json",
        "/p/.vscode/mcp.json",
        "/h/.codex/config.toml",
    ] {
        assert!(
            paths.contains(&Path::new(want)),
            "{want} missing from {paths:?}"
        );
    }
    let claude = files
        .iter()
        .find(|f| f.path == Path::new("/h/.claude.json"))
        .unwrap();
    let local = &claude.sections[1];
    assert_eq!(
        (local.client, &local.scope),
        (Client::ClaudeCode, &Scope::Local)
    );
    assert_eq!(local.pointer, ["projects", "/p", "mcpServers"]);
    assert_eq!(local.runs_in(claude), Some(Path::new("/p")));
    assert_eq!(claude.sections[0].runs_in(claude), None);
    // The project is the home directory: Cursor's file is read once, as the user's.
    let same = Places {
        project: "/h".into(),
        ..places
    };
    let files = client_files(&same);
    let cursor: Vec<_> = files
        .iter()
        .filter(|f| f.path == Path::new("/h/.cursor/mcp.json"))
        .collect();
    assert_eq!(cursor.len(), 1);
    assert_eq!(cursor[0].sections[0].scope, Scope::User);
}

fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

#[test]
fn atomic_writes_keep_the_mode_and_write_through_symlinks() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("real.json");
    std::fs::write(&real, "old").unwrap();
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o640)).unwrap();
    let link = dir.path().join("link.json");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    write_user_file(&link, b"new", safe::me()).unwrap();
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(std::fs::read(&real).unwrap(), b"new");
    assert_eq!(mode(&real), 0o640);
    let fresh = dir.path().join("sub/new.toml");
    write_user_file(&fresh, b"x", safe::me()).unwrap();
    assert_eq!(mode(&fresh), 0o600);
    let names: Vec<PathBuf> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(names.len(), 3, "no temporary file left: {names:?}");
}

#[test]
fn undo_restores_removes_and_refuses_changed_files() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let a = dir.path().join("a.json");
    let b = dir.path().join("b.toml");
    std::fs::write(&a, "before").unwrap();
    let changes = vec![
        change(&a, Some(b"before"), b"after"),
        change(&b, None, b"created"),
    ];
    backup::save(&state, &changes).unwrap();
    backup::apply(&changes).unwrap();
    std::fs::write(&a, "edited by the user").unwrap();
    match backup::undo(&state, false, false) {
        Err(AdoptError::Changed(files)) => assert_eq!(files, vec![a.clone()]),
        other => panic!("{other:?}"),
    }
    assert_eq!(std::fs::read(&b).unwrap(), b"created", "nothing restored");
    // A dry run with --force checks and changes nothing.
    backup::undo(&state, true, true).unwrap();
    assert!(b.exists());
    let (_, done) = backup::undo(&state, true, false).unwrap();
    assert_eq!(
        done,
        vec![
            backup::Undone::Restored(a.clone()),
            backup::Undone::Removed(b.clone())
        ]
    );
    assert_eq!(std::fs::read(&a).unwrap(), b"before");
    assert!(!b.exists());
    assert!(matches!(
        backup::undo(&state, false, false),
        Err(AdoptError::NothingToUndo(_))
    ));
}

#[test]
fn undo_of_an_interrupted_adoption_leaves_unwritten_files_alone() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let a = dir.path().join("a.json");
    std::fs::write(&a, "before").unwrap();
    let changes = vec![change(&a, Some(b"before"), b"after")];
    backup::save(&state, &changes).unwrap();
    // Never applied (as if adopt died after the manifest).
    let (_, done) = backup::undo(&state, false, false).unwrap();
    assert_eq!(done, vec![backup::Undone::Unchanged(a.clone())]);
    assert_eq!(std::fs::read(&a).unwrap(), b"before");
}

/// Finding 3 of issue 26: the directory of a client file is its owner's, who can swap the
/// temporary file adopt writes there for a link to a root-only file at any moment. Whatever
/// she swaps, and whenever, the root-only file keeps its content, mode and owner.
#[test]
fn a_temporary_file_swapped_for_a_link_never_redirects_the_write_mode_or_owner() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let secret_dir = dir.path().join("root-only");
    std::fs::create_dir(&secret_dir).unwrap();
    let secret = secret_dir.join("secret");
    std::fs::write(&secret, "root only").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let users = dir.path().join("user");
    std::fs::create_dir(&users).unwrap();
    let target = users.join("mcp.json");
    let root = nix::unistd::geteuid().is_root();
    // As root the directory and the file are another user's, as when root adopts her files.
    let owner = if root { 4242 } else { safe::me() };
    if root {
        std::os::unix::fs::lchown(&users, Some(owner), Some(owner)).unwrap();
    }
    let reset = || {
        let _ = std::fs::remove_file(&target);
        std::fs::write(&target, "old").unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o640)).unwrap();
        if root {
            std::os::unix::fs::lchown(&target, Some(owner), Some(owner)).unwrap();
        }
    };
    reset();
    // The attacker: every other file that appears in her directory becomes a link to the
    // secret, as fast as she can.
    let stop = Arc::new(AtomicBool::new(false));
    let attacker = {
        let (stop, users, secret) = (stop.clone(), users.clone(), secret.clone());
        std::thread::spawn(move || {
            let mut swapped = 0u32;
            while !stop.load(Ordering::Relaxed) {
                let Ok(entries) = std::fs::read_dir(&users) else {
                    continue;
                };
                for e in entries.flatten() {
                    let p = e.path();
                    let regular = std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_file());
                    if p.file_name() != Some("mcp.json".as_ref()) && regular {
                        let _ = std::fs::remove_file(&p);
                        if std::os::unix::fs::symlink(&secret, &p).is_ok() {
                            // Her link is hers.
                            let _ = std::os::unix::fs::lchown(&p, Some(owner), Some(owner));
                            swapped += 1;
                        }
                    }
                }
            }
            swapped
        })
    };
    for i in 0..300 {
        // An error (the swap was noticed) is fine; a changed secret is not.
        let _ = write_user_file(&target, format!("new {i}").as_bytes(), owner);
        let m = std::fs::metadata(&secret).unwrap();
        assert_eq!(std::fs::read(&secret).unwrap(), b"root only", "round {i}");
        assert_eq!(m.permissions().mode() & 0o7777, 0o600, "round {i}: mode");
        if root {
            assert_eq!((m.uid(), m.gid()), (0, 0), "round {i}: owner");
        }
        if std::fs::symlink_metadata(&target).is_ok_and(|m| !m.is_file()) {
            reset();
        }
    }
    stop.store(true, Ordering::Relaxed);
    let swapped = attacker.join().unwrap();
    assert!(
        swapped > 0,
        "the attacker never got a temporary file to swap"
    );
}

/// What is at `path` now, read as adopt reads the files of `owner`.
fn found(path: &Path, owner: u32) -> Option<safe::Contents> {
    let place = Place::find(path, Trust::Files { owner }, None).unwrap()?;
    place.read().unwrap()
}

/// Replaces the file `path` of `owner` as `adopt` does: keeping the mode and owner found.
fn write_user_file(path: &Path, bytes: &[u8], owner: u32) -> Result<(), AdoptError> {
    let trust = Trust::Files { owner };
    let meta: Option<Meta> = match Place::find(path, trust, None)? {
        Some(p) => p.read()?.map(|c| c.meta),
        None => None,
    };
    backup::write_atomic(path, bytes, trust, meta)
}

/// A change of the running user's file `path` as `adopt` plans it.
fn change(path: &Path, before: Option<&[u8]>, after: &[u8]) -> backup::Change {
    backup::Change {
        path: path.to_path_buf(),
        trust: Trust::Files { owner: safe::me() },
        before: before.map(<[u8]>::to_vec),
        meta: found(path, safe::me()).map(|c| c.meta),
        after: after.to_vec(),
    }
}

#[test]
fn walks_refuse_directories_others_can_write_and_state_others_can_change() {
    use std::os::unix::fs::PermissionsExt;
    let set = |p: &Path, mode: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap()
    };
    let dir = tempfile::tempdir().unwrap();
    let me = safe::me();
    // A client file in a directory everyone can write (not sticky): refused, named.
    let open = dir.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::write(open.join("mcp.json"), "{}").unwrap();
    set(&open, 0o777);
    let e = Place::find(&open.join("mcp.json"), Trust::Files { owner: me }, None).unwrap_err();
    assert!(
        matches!(&e, AdoptError::Untrusted { path, why } if path == &open && why.contains("writable by others")),
        "{e}"
    );
    assert!(e.is_usage(), "exit 2");
    // Sticky (as /tmp): fine.
    set(&open, 0o1777);
    assert!(found(&open.join("mcp.json"), me).is_some());
    // `..` is resolved on the descriptors, and checked like the rest.
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    assert!(found(&dir.path().join("sub/../open/mcp.json"), me).is_some());
    // The state: a directory or a file its group may write is not trusted.
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    std::fs::write(state.join("manifest.json"), "{}").unwrap();
    set(&state, 0o770);
    assert!(safe::Dir::open(&state, Trust::Private, None).is_err());
    set(&state, 0o700);
    let d = safe::Dir::open(&state, Trust::Private, None)
        .unwrap()
        .unwrap();
    set(&state.join("manifest.json"), 0o620);
    let e = d.entry("manifest.json").unwrap().read().unwrap_err();
    assert!(
        e.to_string().contains("writable by others (mode 0620)"),
        "{e}"
    );
    set(&state.join("manifest.json"), 0o600);
    assert!(d.entry("manifest.json").unwrap().read().unwrap().is_some());
    assert!(d.entry("../x").is_err(), "one plain name only");
    // A FIFO where a file is expected is refused, not waited on.
    let fifo = dir.path().join("fifo.json");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let p = Place::find(&fifo, Trust::Files { owner: me }, None)
        .unwrap()
        .unwrap();
    let e = p.read().unwrap_err();
    assert!(e.to_string().contains("not a regular file"), "{e}");
}

#[test]
fn codex_entries_fold_into_one_renamed_entry() {
    let text = "# top\nmodel = \"o3\"\n\n[mcp_servers.fs]\n# about fs\ncommand = \"npx\" # why\nargs = [\"-y\", \"fs\"]\n\n[mcp_servers.fs.env]\nTOKEN = \"s\"\n\n[mcp_servers.remote]\nurl = \"https://r\"\n\n[mcp_servers.ctx]\ncommand = \"npx\"\n\n[profiles.x]\nmodel = \"y\"\n";
    let path = Path::new("config.toml");
    let edits = [
        (
            ptr(&["mcp_servers"]),
            "fs".to_string(),
            Edit::PointAs("desk".into(), rw("desk")),
        ),
        (ptr(&["mcp_servers"]), "ctx".to_string(), Edit::Remove),
    ];
    let out = codex::rewrite(path, text, &edits).unwrap();
    let v: toml::Table = toml::from_str(&out).unwrap();
    let servers = v["mcp_servers"].as_table().unwrap();
    assert_eq!(
        servers.keys().collect::<Vec<_>>(),
        ["desk", "remote"],
        "{out}"
    );
    assert_eq!(servers["desk"]["args"][1].as_str(), Some("desk"), "{out}");
    assert!(servers["desk"].get("env").is_none(), "{out}");
    assert!(out.starts_with("# top\nmodel = \"o3\"\n"), "{out}");
    assert!(out.contains("[profiles.x]\nmodel = \"y\"\n"), "{out}");
}

#[test]
fn jsonc_entries_fold_into_one_renamed_entry_keeping_the_rest() {
    let text = "{\n  // top\n  \"servers\": {\n    \"a\": { \"type\": \"stdio\", \"command\": \"npx\", \"env\": {\"K\": \"v\"} },\n    \"b\": {\"url\": \"https://b\"}, // remote\n    \"c\": {\"command\": \"uvx\"},\n  },\n}\n";
    let path = Path::new("t.json");
    let edits = [
        (
            ptr(&["servers"]),
            "a".to_string(),
            Edit::PointAs("desk".into(), rw("desk")),
        ),
        (ptr(&["servers"]), "c".to_string(), Edit::Remove),
    ];
    let out = jsonc::rewrite(path, text, &edits).unwrap();
    assert_eq!(
        out,
        "{\n  // top\n  \"servers\": {\n    \"desk\": {\n      \"type\": \"stdio\",\n      \"command\": \"/opt/mcp-supervisor\",\n      \"args\": [\"attach\", \"desk\"]\n    },\n    \"b\": {\"url\": \"https://b\"}, // remote\n  },\n}\n"
    );
}
