//! The house in layers (issue 48 §1): the crate graph is the layer map of
//! `docs/ARCHITECTURE.md` "Layers", and inside each crate no top-level modules import each
//! other around a cycle. The compiler already refuses an import of a crate that is not a
//! dependency; this test makes sure every dependency points down the map (so the document and
//! `Cargo.toml` cannot drift apart), that every module is on the map, and that no cycle forms
//! inside a crate (the seam at the root of `upstream` included: it may not name what stands
//! behind it).
//!
//! An import inside a crate is a `crate::NAME` or `super::…::NAME` path that reaches another
//! top-level module (also inside `{…}` groups), outside comments, string literals,
//! `#[cfg(test)]` items and test-only modules (a fake may reach anywhere). A `crate::NAME`
//! whose NAME is no module is an import of the crate root (`lib`). `main.rs` and `src/bin/`
//! sit above every layer and are not read.
//!
//! Inside the actor (issue 48 §3), the decision files listed in ARCHITECTURE's "Contexts"
//! table take their narrow context, never the whole server: none names `Server` outside
//! tests, each defines the context the table names, and each field of it is in the table.

// A test may unwrap, expect, panic and index: the workspace's panic lints (Cargo.toml
// [workspace.lints]) are for the daemon's code.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One import: `from` (a top-level module of a crate) names `to` at `file:line`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Import {
    from: String,
    to: String,
    file: String,
    line: usize,
}

/// One crate of the map: its directory (relative to the workspace root; `.` for the root
/// package), its layer's index and name, and its top-level modules (the crate root, `lib`, is
/// implied).
#[derive(Debug, Clone)]
struct Crate {
    dir: String,
    layer: usize,
    name: String,
    modules: BTreeSet<String>,
}

/// The layer map, read from the `| layer | crate | modules |` table under "## Layers" of
/// `doc`, in the table's order.
fn layer_map(doc: &str) -> Vec<Crate> {
    let section = doc
        .split("\n## ")
        .find(|s| s.starts_with("Layers"))
        .expect("docs/ARCHITECTURE.md has no \"## Layers\" section");
    let mut map: Vec<Crate> = Vec::new();
    for row in section.lines().filter(|l| l.starts_with("| ")) {
        let cells: Vec<&str> = row.trim_matches('|').split('|').map(str::trim).collect();
        let [layer, dir, modules] = cells[..] else {
            continue;
        };
        let Some((n, name)) = layer.split_once(' ') else {
            continue;
        };
        let Ok(n) = n.parse::<usize>() else {
            continue;
        };
        let modules: BTreeSet<String> = modules
            .split(',')
            .map(|m| m.trim().trim_matches('`').to_string())
            .filter(|m| !m.is_empty())
            .collect();
        let dir = dir.trim_matches('`').trim_end_matches('/').to_string();
        assert!(
            !map.iter().any(|c| c.dir == dir),
            "{dir} is in two rows of the map"
        );
        map.push(Crate {
            dir,
            layer: n,
            name: name.to_string(),
            modules,
        });
    }
    assert!(
        !map.is_empty(),
        "the \"Layers\" table of ARCHITECTURE.md is empty"
    );
    map
}

/// `text` with comments, string and character literals blanked out (newlines kept, so line
/// numbers stay right).
fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    let keep_lines = |out: &mut Vec<u8>, s: &[u8]| {
        out.extend(s.iter().map(|&c| if c == b'\n' { b'\n' } else { b' ' }));
    };
    while i < b.len() {
        let rest = &b[i..];
        let end = if rest.starts_with(b"//") {
            rest.iter().position(|&c| c == b'\n').unwrap_or(rest.len())
        } else if rest.starts_with(b"/*") {
            let mut depth = 0usize;
            let mut j = 0;
            while j < rest.len() {
                if rest[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if rest[j..].starts_with(b"*/") {
                    depth = depth.saturating_sub(1);
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            j
        } else if rest.starts_with(b"r\"") || rest.starts_with(b"r#") || rest.starts_with(b"br") {
            let start = if rest[0] == b'b' { 2 } else { 1 };
            let hashes = rest[start..].iter().take_while(|&&c| c == b'#').count();
            if rest.get(start + hashes) != Some(&b'"') || (i > 0 && is_ident(b[i - 1])) {
                1
            } else {
                let close: Vec<u8> = std::iter::once(b'"')
                    .chain(std::iter::repeat_n(b'#', hashes))
                    .collect();
                let body = start + hashes + 1;
                rest[body..]
                    .windows(close.len())
                    .position(|w| w == close.as_slice())
                    .map_or(rest.len(), |p| body + p + close.len())
            }
        } else if rest[0] == b'"' {
            let mut j = 1;
            while j < rest.len() && rest[j] != b'"' {
                j += if rest[j] == b'\\' { 2 } else { 1 };
            }
            (j + 1).min(rest.len())
        } else if rest[0] == b'\'' {
            // A character literal ('x', '\n', '\u{..}') or a lifetime ('a): only the former.
            if rest.get(1) == Some(&b'\\') {
                rest[2..]
                    .iter()
                    .position(|&c| c == b'\'')
                    .map_or(1, |p| p + 3)
            } else if rest.get(2) == Some(&b'\'') {
                3
            } else {
                let ch = std::str::from_utf8(&rest[1..rest.len().min(5)])
                    .ok()
                    .or_else(|| std::str::from_utf8(&rest[1..rest.len().min(4)]).ok())
                    .and_then(|s| s.chars().next());
                match ch {
                    Some(c) if rest.get(1 + c.len_utf8()) == Some(&b'\'') => 2 + c.len_utf8(),
                    _ => 1,
                }
            }
        } else {
            out.push(rest[0]);
            i += 1;
            continue;
        };
        let end = end.max(1);
        if end == 1 && (rest[0] == b'r' || rest[0] == b'b' || rest[0] == b'\'') {
            out.push(rest[0]);
        } else {
            keep_lines(&mut out, &rest[..end]);
        }
        i += end;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// `code` (already [`code_only`]) with every `#[cfg(test)]` item blanked out; also the names
/// of the modules declared test-only by `#[cfg(test)] mod NAME;`.
fn without_tests(code: &str) -> (String, Vec<String>) {
    const MARK: &str = "#[cfg(test)]";
    // `#[cfg(any(test, feature = "testing"))]` (its string already blanked) is test-only too.
    let mut code = code.to_string();
    while let Some(p) = code.find("#[cfg(any(test, feature = ") {
        let end = code[p..].find("))]").map_or(code.len(), |e| p + e + 3);
        code.replace_range(p..end, MARK);
    }
    let code = code.as_str();
    let b = code.as_bytes();
    let mut out = b.to_vec();
    let mut test_mods = Vec::new();
    let mut from = 0;
    while let Some(p) = code[from..].find(MARK) {
        let start = from + p;
        let mut j = start + MARK.len();
        // Further attributes, then the item up to its `;` or its balanced `{…}`.
        loop {
            while j < b.len() && b[j].is_ascii_whitespace() {
                j += 1;
            }
            if b[j..].starts_with(b"#[") {
                let mut depth = 0usize;
                while j < b.len() {
                    match b[j] {
                        b'[' => depth += 1,
                        b']' => {
                            depth -= 1;
                            if depth == 0 {
                                j += 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                    j += 1;
                }
            } else {
                break;
            }
        }
        let item = j;
        let mut depth = 0usize;
        while j < b.len() {
            match b[j] {
                b';' if depth == 0 => {
                    j += 1;
                    break;
                }
                b'{' => depth += 1,
                // The end of the enclosing block: the item was a field or an arm.
                b'}' if depth == 0 => break,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        j += 1;
                        break;
                    }
                }
                _ => {}
            }
            j += 1;
        }
        let text = code[item..j].trim();
        if let Some(name) = text
            .strip_prefix("pub(crate) mod ")
            .or_else(|| text.strip_prefix("pub mod "))
            .or_else(|| text.strip_prefix("mod "))
            .and_then(|r| r.strip_suffix(';'))
        {
            test_mods.push(name.trim().to_string());
        }
        for c in &mut out[start..j] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
        from = j;
    }
    (String::from_utf8_lossy(&out).into_owned(), test_mods)
}

/// The top-level modules `code` (a file whose module path is `at`, e.g. `["server", "core"]`
/// for `server/core.rs`, `[]` for `lib.rs`) reaches through `crate::` or `super::` paths, with
/// the line of each; a name that is not in `modules` is the crate root, `lib`.
fn crate_paths(code: &str, at: &[String], modules: &BTreeSet<String>) -> Vec<(String, usize)> {
    let b = code.as_bytes();
    let mut found = Vec::new();
    let top = |name: &str| {
        if modules.contains(name) {
            name.to_string()
        } else {
            "lib".to_string()
        }
    };
    let mut from = 0;
    while from < code.len() {
        let rest = &code[from..];
        let (p, len) = match (rest.find("crate::"), rest.find("super::")) {
            (Some(c), Some(s)) if s < c => (s, 0),
            (Some(c), _) => (c, "crate::".len()),
            (None, Some(s)) => (s, 0),
            (None, None) => break,
        };
        let at_start = from + p;
        if at_start > 0
            && (is_ident(b[at_start - 1]) || b[at_start - 1] == b':' || b[at_start - 1] == b'$')
        {
            from = at_start + 1;
            continue;
        }
        let line = code[..at_start].matches('\n').count() + 1;
        let mut after = at_start + len;
        // `super::super::…`: how far up from this file's module.
        let mut ups = 0;
        if len == 0 {
            while code[after..].starts_with("super::") {
                ups += 1;
                after += "super::".len();
            }
        }
        from = after.max(at_start + 1);
        if ups > 0 && ups < at.len() {
            // Still inside this file's own top-level module.
            continue;
        }
        let rest = &code[after..];
        if let Some(group) = rest.strip_prefix('{') {
            // `crate::{a::b, c, d::{e, f}}`: the first segment of each top-level entry.
            let mut depth = 0usize;
            let mut entry_start = true;
            for (k, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => entry_start = true,
                    c if entry_start && (c.is_ascii_alphabetic() || c == '_') => {
                        entry_start = false;
                        let name: String = group[k..]
                            .chars()
                            .take_while(|&c| c.is_ascii_alphanumeric() || c == '_')
                            .collect();
                        if name != "self" {
                            let line = line + group[..k].matches('\n').count();
                            found.push((top(&name), line));
                        }
                    }
                    _ => {}
                }
            }
        } else {
            let name: String = rest
                .chars()
                .take_while(|&c| c.is_ascii_alphanumeric() || c == '_')
                .collect();
            if !name.is_empty() && name != "self" {
                found.push((top(&name), line));
            }
        }
    }
    found
}

/// The code of every file of the crate whose sources are at `src` that is not test-only, with
/// comments, strings and `#[cfg(test)]` items blanked out ([`code_only`], [`without_tests`]).
fn code_files(src: &Path) -> BTreeMap<PathBuf, String> {
    let mut files = Vec::new();
    walk(src, &mut files);
    files.sort();
    // Files of test-only modules, found from their `#[cfg(test)] mod NAME;` (or the
    // `#[path = "FILE"]` such a declaration carries).
    let mut test_only: BTreeSet<PathBuf> = BTreeSet::new();
    let mut read = BTreeMap::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap_or_default();
        let (code, test_mods) = without_tests(&code_only(&text));
        let dir = match f.file_stem().and_then(|s| s.to_str()) {
            Some("mod" | "lib" | "main") => f.parent().map(Path::to_path_buf),
            Some(stem) => f.parent().map(|p| p.join(stem)),
            None => None,
        };
        if let Some(dir) = dir {
            for m in test_mods {
                test_only.insert(dir.join(format!("{m}.rs")));
                test_only.insert(dir.join(&m));
            }
        }
        for (k, _) in text.match_indices("#[cfg(test)]") {
            let after = text[k + "#[cfg(test)]".len()..].trim_start();
            if let Some(path) = after.strip_prefix("#[path = \"") {
                if let (Some(end), Some(parent)) = (path.find('"'), f.parent()) {
                    test_only.insert(parent.join(&path[..end]));
                }
            }
        }
        read.insert(f.clone(), code);
    }
    read.retain(|f, _| !test_only.iter().any(|t| f.starts_with(t)));
    read
}

/// Every import between top-level modules of the crate whose sources are at `src` and whose
/// top-level modules are `modules`.
fn imports(src: &Path, modules: &BTreeSet<String>) -> Vec<Import> {
    let read = code_files(src);
    let mut out = Vec::new();
    for (f, code) in &read {
        let rel = f.strip_prefix(src).unwrap_or(f);
        // The file's module path: `a/b.rs` and `a/b/mod.rs` are `[a, b]`, `lib.rs` is `[]`.
        let mut at: Vec<String> = rel
            .components()
            .filter_map(|c| c.as_os_str().to_str())
            .map(|c| c.trim_end_matches(".rs").to_string())
            .collect();
        if at.last().is_some_and(|l| l == "mod" || l == "lib") {
            at.pop();
        }
        let first = at.first().cloned().unwrap_or_else(|| "lib".to_string());
        if first == "main" || first == "bin" {
            continue;
        }
        for (to, line) in crate_paths(code, &at, modules) {
            if to != first {
                out.push(Import {
                    from: first.clone(),
                    to,
                    file: rel.display().to_string(),
                    line,
                });
            }
        }
    }
    out
}

fn walk(dir: &Path, files: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            walk(&p, files);
        } else if p.extension().is_some_and(|x| x == "rs") {
            files.push(p);
        }
    }
}

/// The workspace crates `dir`'s `Cargo.toml` depends on (its `[dependencies]`, not its
/// dev-dependencies: a test may reach anywhere), as directories, given `paths`: the
/// workspace's dependency name → directory.
fn depends_on(root: &Path, dir: &str, paths: &BTreeMap<String, String>) -> Vec<String> {
    let manifest = root.join(dir).join("Cargo.toml");
    let text = std::fs::read_to_string(&manifest)
        .unwrap_or_else(|e| panic!("{}: {e}", manifest.display()));
    let doc: toml::Table = text
        .parse()
        .unwrap_or_else(|e| panic!("{}: {e}", manifest.display()));
    let deps = doc.get("dependencies").and_then(|d| d.as_table());
    deps.into_iter()
        .flat_map(|d| d.keys())
        .filter_map(|k| paths.get(k).cloned())
        .collect()
}

/// The workspace's dependency name → crate directory, from `[workspace.dependencies]` of the
/// root `Cargo.toml` (entries with a `path`).
fn workspace_paths(root: &Path) -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let doc: toml::Table = text.parse().unwrap();
    let deps = doc
        .get("workspace")
        .and_then(|w| w.get("dependencies"))
        .and_then(|d| d.as_table())
        .cloned()
        .unwrap_or_default();
    deps.iter()
        .filter_map(|(k, v)| {
            let path = v.get("path")?.as_str()?;
            Some((k.clone(), path.trim_end_matches('/').to_string()))
        })
        .collect()
}

/// What is wrong with the workspace at `root` under `map`: crates whose dependencies do not
/// point down the map, modules the map lacks or lists in vain, and cycles inside a crate, one
/// line each.
fn violations(root: &Path, map: &[Crate]) -> Vec<String> {
    let mut out = Vec::new();
    let paths = workspace_paths(root);
    // Every crate of the workspace is on the map.
    for dir in paths.values() {
        if !map.iter().any(|c| &c.dir == dir) {
            out.push(format!(
                "crate {dir} is in no layer of docs/ARCHITECTURE.md"
            ));
        }
    }
    for c in map {
        for dep in depends_on(root, &c.dir, &paths) {
            match map.iter().find(|d| d.dir == dep) {
                None => out.push(format!(
                    "{}/Cargo.toml: depends on {dep}, which is in no layer",
                    c.dir
                )),
                Some(d) if d.layer >= c.layer => out.push(format!(
                    "{}/Cargo.toml: `{}` (layer {} {}) depends on {} (layer {} {}), not a layer below it",
                    c.dir, c.dir, c.layer, c.name, d.dir, d.layer, d.name
                )),
                Some(_) => {}
            }
        }
        let src = root.join(&c.dir).join("src");
        // Every top-level module is on the map, and the map lists no module that is not there.
        // A module is a top-level name with a file that is not test-only (a module declared
        // `#[cfg(test)]` or only for the `testing` feature, a `#[path]`-named simulation, is
        // no module of the map).
        let present: BTreeSet<String> = code_files(&src)
            .keys()
            .filter_map(|f| {
                let first = f.strip_prefix(&src).ok()?.components().next()?;
                let name = first.as_os_str().to_str()?.trim_end_matches(".rs");
                (!["main", "lib", "bin"].contains(&name)).then(|| name.to_string())
            })
            .collect();
        let found = imports(&src, &c.modules);
        for m in present.difference(&c.modules) {
            out.push(format!(
                "{}/src: module `{m}` is in no layer of docs/ARCHITECTURE.md",
                c.dir
            ));
        }
        for m in c.modules.difference(&present) {
            out.push(format!(
                "docs/ARCHITECTURE.md lists `{m}` in {}, which has no such module",
                c.dir
            ));
        }
        out.extend(cycles(&found, &c.dir));
    }
    out.sort();
    out.dedup();
    out
}

/// The import cycles among the top-level modules of one crate (`dir`): a path back to where it
/// started (depth-first, each module once).
fn cycles(imports: &[Import], dir: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut graph: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for i in imports {
        graph.entry(&i.from).or_default().insert(&i.to);
    }
    let mut done: BTreeSet<&str> = BTreeSet::new();
    for &start in graph.keys() {
        let mut path = vec![start];
        let mut stack = vec![graph[start].iter().copied().collect::<Vec<_>>()];
        while let Some(next) = stack.last_mut() {
            match next.pop() {
                None => {
                    stack.pop();
                    if let Some(m) = path.pop() {
                        done.insert(m);
                    }
                }
                Some(m) if path.contains(&m) => {
                    let from = path.iter().position(|&p| p == m).unwrap_or(0);
                    let cycle: Vec<&str> = path[from..].iter().copied().chain([m]).collect();
                    // Where: the file and line of each step.
                    let steps: Vec<String> = cycle
                        .windows(2)
                        .filter_map(|w| {
                            imports
                                .iter()
                                .find(|i| i.from == w[0] && i.to == w[1])
                                .map(|i| format!("{}:{}", i.file, i.line))
                        })
                        .collect();
                    let line = format!(
                        "import cycle in {dir}: {} ({})",
                        cycle.join(" -> "),
                        steps.join(", ")
                    );
                    if !out.contains(&line) {
                        out.push(line);
                    }
                }
                Some(m) if done.contains(m) => {}
                Some(m) => {
                    path.push(m);
                    stack.push(
                        graph
                            .get(m)
                            .map(|s| s.iter().copied().collect())
                            .unwrap_or_default(),
                    );
                }
            }
        }
    }
    out
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn every_crate_depends_only_on_layers_below_it_and_no_crate_has_an_import_cycle() {
    let doc = std::fs::read_to_string(root().join("docs/ARCHITECTURE.md")).unwrap();
    let map = layer_map(&doc);
    let total: usize = map
        .iter()
        .map(|c| imports(&root().join(&c.dir).join("src"), &c.modules).len())
        .sum();
    assert!(
        total > 100,
        "read only {total} imports: are the sources there?"
    );
    let v = violations(&root(), &map);
    assert!(v.is_empty(), "the layers are broken:\n{}", v.join("\n"));
}

/// The seam (the root of `crates/upstream` and the parts it re-exports) names nothing that
/// stands behind it: no process, remote session, sign-in or starter (issue 48 §2).
#[test]
fn the_upstream_seam_names_no_implementation() {
    let doc = std::fs::read_to_string(root().join("docs/ARCHITECTURE.md")).unwrap();
    let map = layer_map(&doc);
    let upstream = map
        .iter()
        .find(|c| c.dir == "crates/upstream")
        .expect("crates/upstream is on the map");
    let seam = ["lib", "exit", "facts", "outbound", "tail"];
    let behind = ["auth", "child", "remote", "starter"];
    let found = imports(&root().join("crates/upstream/src"), &upstream.modules);
    let wrong: Vec<String> = found
        .iter()
        .filter(|i| seam.contains(&i.from.as_str()) && behind.contains(&i.to.as_str()))
        .map(|i| format!("{}:{}: the seam names `{}`", i.file, i.line, i.to))
        .collect();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // Above the seam, outside tests, only the real starter is named: never a process, a
    // remote session or a sign-in (their status, budget and hand-over go through the seam).
    let mut named = Vec::new();
    let behind: BTreeSet<String> = ["auth", "child", "remote"].map(String::from).into();
    for dir in ["crates/actor/src", "crates/front/src"] {
        for (f, code) in code_files(&root().join(dir)) {
            // `upstream::…` read as `crate::…` is (also inside `{…}` groups): the crate's own
            // paths are set aside first; line numbers stay (no newline changes).
            let code = code
                .replace("crate::", "crate__")
                .replace("super::", "super__")
                .replace("upstream::", "crate::");
            for (to, line) in crate_paths(&code, &[], &behind) {
                if behind.contains(&to) {
                    named.push(format!("{}:{line}: names upstream::{to}", f.display()));
                }
            }
        }
    }
    assert!(named.is_empty(), "{}", named.join("\n"));
}

/// The check itself: in a small planted workspace, a dependency on a higher layer and a cycle
/// (through `crate::` and through `super::`) are reported with their file and line, and what
/// only a test or a comment names is not.
#[test]
fn a_planted_upward_dependency_and_a_cycle_are_reported_with_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let write = |p: &str, s: &str| {
        let p = ws.join(p);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, s).unwrap();
    };
    write(
        "Cargo.toml",
        "[workspace.dependencies]\nlow = { path = \"crates/low\" }\nhigh = { path = \"crates/high\" }\n",
    );
    write(
        "crates/low/Cargo.toml",
        "[dependencies]\nhigh.workspace = true\n[dev-dependencies]\nhigh.workspace = true\n",
    );
    write(
        "crates/high/Cargo.toml",
        "[dependencies]\nlow.workspace = true\n",
    );
    write("crates/high/src/lib.rs", "pub mod only;\n");
    write("crates/high/src/only.rs", "pub fn f() {}\n");
    write(
        "crates/low/src/lib.rs",
        "pub mod a;\npub mod b;\npub mod side;\n",
    );
    write(
        "crates/low/src/a/mod.rs",
        "//! Mentions crate::b in a comment only.\n\
         mod helper;\n#[cfg(test)]\nmod fakes;\n\
         pub fn f() -> &'static str { \"crate::b in a string\" }\n\
         #[cfg(test)]\nmod tests {\n    use crate::b::X;\n}\n",
    );
    write(
        "crates/low/src/a/helper.rs",
        "pub fn g() {}\n\nuse super::super::{side, b::Y};\n",
    );
    write("crates/low/src/a/fakes.rs", "use crate::b::Z;\n");
    write(
        "crates/low/src/b.rs",
        "use crate::a::f;\npub struct X;\npub struct Y;\npub struct Z;\n",
    );
    write("crates/low/src/side.rs", "use super::b::X;\n");
    let crate_of = |dir: &str, layer: usize, modules: &[&str]| Crate {
        dir: dir.to_string(),
        layer,
        name: format!("l{layer}"),
        modules: modules.iter().map(|m| m.to_string()).collect(),
    };
    let map = vec![
        crate_of("crates/low", 0, &["a", "b", "side"]),
        crate_of("crates/high", 1, &["only"]),
    ];
    let v = violations(ws, &map);
    assert!(
        v.iter().any(|l| l.starts_with(
            "crates/low/Cargo.toml: `crates/low` (layer 0 l0) depends on crates/high (layer 1 l1)"
        )),
        "{v:#?}"
    );
    assert!(
        v.iter()
            .any(|l| l.starts_with("import cycle in crates/low:")
                && l.contains("a/helper.rs:3")
                && l.contains("b.rs:1")),
        "{v:#?}"
    );
    assert_eq!(v.len(), 2, "{v:#?}");
    // Comments, strings, #[cfg(test)] items and test-only modules are not imports.
    let found = imports(&ws.join("crates/low/src"), &map[0].modules);
    assert!(
        !found
            .iter()
            .any(|i| i.file.starts_with("a/mod.rs") || i.file.contains("fakes")),
        "{found:#?}"
    );
    // A module not on the map is reported.
    write("crates/high/src/extra.rs", "pub fn e() {}\n");
    assert!(violations(ws, &map)
        .iter()
        .any(|l| l.contains("module `extra` is in no layer")));
    std::fs::remove_file(ws.join("crates/high/src/extra.rs")).unwrap();
    // With the upward dependency and the cycle taken out, it is clean.
    write("crates/low/Cargo.toml", "[dependencies]\n");
    write(
        "crates/low/src/a/helper.rs",
        "pub fn g() {}\n\nuse crate::side;\n",
    );
    write("crates/low/src/side.rs", "pub fn s() {}\n");
    assert_eq!(violations(ws, &map), Vec::<String>::new());
}

/// The rows of the "Contexts" table of `doc`: the context type, its file (under
/// `crates/actor/src/server/`) and the text of its fields cell.
fn context_rows(doc: &str) -> Vec<(String, String, String)> {
    let start = doc
        .find("**Contexts**")
        .expect("ARCHITECTURE.md has a \"Contexts\" table");
    let mut rows = Vec::new();
    for line in doc[start..].lines().skip(1) {
        let line = line.trim();
        if line.is_empty() && !rows.is_empty() {
            break;
        }
        if !line.starts_with("| `") {
            continue;
        }
        let cells: Vec<&str> = line.trim_matches('|').split(" | ").collect();
        let ticked: Vec<&str> = cells[0].split('`').skip(1).step_by(2).collect();
        let (Some(name), Some(file)) = (ticked.first(), ticked.get(1)) else {
            panic!("a Contexts row without `Type` (`file.rs`): {line}");
        };
        rows.push((name.to_string(), file.to_string(), cells[1].to_string()));
    }
    assert!(
        !rows.is_empty(),
        "the Contexts table of ARCHITECTURE.md is empty"
    );
    rows
}

/// What is wrong with the decision files named in the contexts table of `doc`, whose sources
/// `source` gives by file name: a file that names `Server` outside tests (a decision that
/// takes the whole server), a context type it does not define, a field of it the table does
/// not list (by its name or its type's name).
fn context_violations(doc: &str, source: &dyn Fn(&str) -> Option<String>) -> Vec<String> {
    let mut wrong = Vec::new();
    for (name, file, fields) in context_rows(doc) {
        let Some(text) = source(&file) else {
            wrong.push(format!("{file}: listed in the Contexts table, not found"));
            continue;
        };
        let (code, _) = without_tests(&code_only(&text));
        for (n, line) in code.lines().enumerate() {
            let b = line.as_bytes();
            let mut from = 0;
            while let Some(p) = line[from..].find("Server") {
                let at = from + p;
                let end = at + "Server".len();
                let alone =
                    (at == 0 || !is_ident(b[at - 1])) && b.get(end).is_none_or(|c| !is_ident(*c));
                if alone {
                    wrong.push(format!(
                        "{file}:{}: names `Server`: a decision here takes the whole server",
                        n + 1
                    ));
                }
                from = end;
            }
        }
        let Some(at) = [format!("struct {name}<"), format!("struct {name} {{")]
            .iter()
            .find_map(|d| code.find(d.as_str()))
        else {
            wrong.push(format!("{file}: does not define the context `{name}`"));
            continue;
        };
        let open = at + code[at..].find('{').unwrap_or(0);
        let close = open + code[open..].find("\n}").unwrap_or(code.len() - open);
        for field in code[open + 1..close].split(',') {
            let Some((fname, ty)) = field.split_once(':') else {
                continue;
            };
            let fname = fname.trim().trim_start_matches("pub(super)").trim();
            let base = ty
                .split(|c: char| !is_ident(c as u8) || !c.is_ascii())
                .rfind(|w| !w.is_empty() && *w != "a" && *w != "mut")
                .unwrap_or("");
            if fname.is_empty() {
                continue;
            }
            if !fields.contains(fname) && !fields.contains(base) {
                wrong.push(format!(
                    "{file}: the field `{fname}: {}` of `{name}` is not in its Contexts row",
                    ty.trim()
                ));
            }
        }
    }
    wrong
}

/// The actor's decision files (issue 48 §3) take their narrow context, never the whole server.
#[test]
fn the_actors_decision_files_take_their_context_never_the_whole_server() {
    let doc = std::fs::read_to_string(root().join("docs/ARCHITECTURE.md")).unwrap();
    let dir = root().join("crates/actor/src/server");
    let rows = context_rows(&doc);
    assert!(rows.len() >= 7, "{rows:?}");
    let v = context_violations(&doc, &|f| std::fs::read_to_string(dir.join(f)).ok());
    assert!(v.is_empty(), "{}", v.join("\n"));
}

/// The check itself: a planted decision file that takes the whole server, one whose context
/// has a field the table does not list, and one missing its context are each reported; a
/// `Server` in a comment, a string or a test is not.
#[test]
fn a_planted_decision_that_takes_the_whole_server_is_reported() {
    let doc = "**Contexts** (planted)\n\n| context (file) | fields |\n|---|---|\n\
        | `Good` (`good.rs`) | `&mut Routing`, `Stamp`, `limit` |\n\
        | `Wide` (`wide.rs`) | `&mut Routing` |\n\
        | `Gone` (`gone.rs`) | nothing |\n\n";
    let good = "//! Not the Server.\npub(super) struct Good<'a> {\n    routing: &'a mut Routing,\n    at: Stamp<'a>,\n    limit: usize,\n}\nfn f() { let _ = \"Server\"; }\n#[cfg(test)]\nmod tests { use super::super::Server; }\n";
    let wide = "pub(super) struct Wide<'a> {\n    routing: &'a mut Routing,\n    opener: &'a mut Opener,\n}\npub(super) fn decide(s: &mut super::Server) {}\n";
    let gone = "pub(super) fn nothing() {}\n";
    let files: BTreeMap<&str, &str> =
        [("good.rs", good), ("wide.rs", wide), ("gone.rs", gone)].into();
    let v = context_violations(doc, &|f| files.get(f).map(|s| s.to_string()));
    assert_eq!(
        v,
        [
            "wide.rs:5: names `Server`: a decision here takes the whole server",
            "wide.rs: the field `opener: &'a mut Opener` of `Wide` is not in its Contexts row",
            "gone.rs: does not define the context `Gone`",
        ],
        "{v:#?}"
    );
}
