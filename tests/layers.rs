//! The house in layers (issue 48 §1): every top-level module of `src/` (and, once they exist,
//! of each crate under `crates/`) imports only its own layer and the layers below it, and no
//! modules import each other around a cycle. The map is the table of `docs/ARCHITECTURE.md`
//! "Layers", so the document and the code cannot drift apart.
//!
//! An import is any `crate::NAME` path (also inside `crate::{…}` groups) outside comments,
//! string literals, `#[cfg(test)]` items and test-only modules (a fake may reach anywhere).
//! `main.rs` and `src/bin/` sit above every layer and are not read.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One import: `from` (a top-level module) names `to` at `file:line`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Import {
    from: String,
    to: String,
    file: String,
    line: usize,
}

/// The layer map: module → (layer index, layer name), read from the `| layer | modules |`
/// table under "## Layers" of `doc`.
fn layer_map(doc: &str) -> BTreeMap<String, (usize, String)> {
    let section = doc
        .split("\n## ")
        .find(|s| s.starts_with("Layers"))
        .expect("docs/ARCHITECTURE.md has no \"## Layers\" section");
    let mut map = BTreeMap::new();
    for row in section.lines().filter(|l| l.starts_with("| ")) {
        let cells: Vec<&str> = row.trim_matches('|').split('|').map(str::trim).collect();
        let [layer, modules] = cells[..] else {
            continue;
        };
        let Some((n, name)) = layer.split_once(' ') else {
            continue;
        };
        let Ok(n) = n.parse::<usize>() else {
            continue;
        };
        for m in modules.split(',').map(str::trim).filter(|m| !m.is_empty()) {
            let before = map.insert(m.to_string(), (n, name.to_string()));
            assert!(before.is_none(), "{m} is in two layers of the map");
        }
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

/// The top-level modules `code` names through `crate::`, with the line of each.
fn crate_paths(code: &str) -> Vec<(String, usize)> {
    let b = code.as_bytes();
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(p) = code[from..].find("crate::") {
        let at = from + p;
        from = at + "crate::".len();
        if at > 0 && (is_ident(b[at - 1]) || b[at - 1] == b':' || b[at - 1] == b'$') {
            continue;
        }
        let line = code[..at].matches('\n').count() + 1;
        let rest = &code[from..];
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
                        let line = line + group[..k].matches('\n').count();
                        found.push((name, line));
                    }
                    _ => {}
                }
            }
        } else {
            let name: String = rest
                .chars()
                .take_while(|&c| c.is_ascii_alphanumeric() || c == '_')
                .collect();
            if !name.is_empty() {
                found.push((name, line));
            }
        }
    }
    found
}

/// Every import between top-level modules of the source tree at `src` (a `src/` directory).
fn imports(src: &Path) -> Vec<Import> {
    let mut files = Vec::new();
    walk(src, &mut files);
    files.sort();
    // Files of test-only modules, found from their `#[cfg(test)] mod NAME;`.
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
        read.insert(f.clone(), code);
    }
    let mut out = Vec::new();
    for (f, code) in &read {
        if test_only.iter().any(|t| f.starts_with(t)) {
            continue;
        }
        let rel = f.strip_prefix(src).unwrap_or(f);
        let first = rel
            .components()
            .next()
            .and_then(|c| c.as_os_str().to_str())
            .unwrap_or("")
            .trim_end_matches(".rs")
            .to_string();
        if first == "main" || first == "bin" || first == "lib" {
            continue;
        }
        for (to, line) in crate_paths(code) {
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

/// What is wrong with `imports` under `map`: modules the map lacks, upward imports, and
/// cycles, one line each.
fn violations(imports: &[Import], map: &BTreeMap<String, (usize, String)>) -> Vec<String> {
    let mut out = Vec::new();
    let mut graph: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for i in imports {
        let (Some(from), Some(to)) = (map.get(&i.from), map.get(&i.to)) else {
            if !map.contains_key(&i.from) {
                out.push(format!(
                    "module `{}` ({}) is in no layer of docs/ARCHITECTURE.md",
                    i.from, i.file
                ));
            }
            continue;
        };
        if to.0 > from.0 {
            out.push(format!(
                "{}:{}: `{}` (layer {} {}) imports `{}` (layer {} {}), a layer above it",
                i.file, i.line, i.from, from.0, from.1, i.to, to.0, to.1
            ));
        }
        graph.entry(&i.from).or_default().insert(&i.to);
    }
    // A cycle: a path back to where it started (depth-first, each module once).
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
                    let line = format!("import cycle: {}", cycle.join(" -> "));
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
    out.sort();
    out.dedup();
    out
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn every_import_points_down_the_layers_of_architecture_md_and_none_closes_a_cycle() {
    let doc = std::fs::read_to_string(root().join("docs/ARCHITECTURE.md")).unwrap();
    let map = layer_map(&doc);
    let mut trees = vec![root().join("src")];
    if let Ok(crates) = std::fs::read_dir(root().join("crates")) {
        trees.extend(crates.flatten().map(|c| c.path().join("src")));
    }
    let mut all = Vec::new();
    for t in &trees {
        all.extend(imports(t));
    }
    assert!(
        all.len() > 100,
        "read only {} imports: is src/ there?",
        all.len()
    );
    // Every top-level module is on the map (a new one must be given its layer).
    let mut missing = Vec::new();
    for e in std::fs::read_dir(root().join("src")).unwrap().flatten() {
        let name = e
            .file_name()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_string();
        if !["main", "lib", "bin"].contains(&name.as_str()) && !map.contains_key(&name) {
            missing.push(name);
        }
    }
    assert!(
        missing.is_empty(),
        "modules in no layer of docs/ARCHITECTURE.md \"Layers\": {missing:?}"
    );
    let v = violations(&all, &map);
    assert!(v.is_empty(), "the layers are broken:\n{}", v.join("\n"));
}

/// The check itself: an upward import and a cycle planted in a small tree are reported with
/// their file and line, and what only a test or a comment names is not.
#[test]
fn a_planted_upward_import_and_a_cycle_are_reported_with_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("low")).unwrap();
    let write = |p: &str, s: &str| std::fs::write(src.join(p), s).unwrap();
    write("lib.rs", "pub mod low;\npub mod high;\npub mod side;\n");
    write(
        "low/mod.rs",
        "//! Mentions crate::high in a comment only.\n\
         mod helper;\n#[cfg(test)]\nmod fakes;\n\
         pub fn f() -> &'static str { \"crate::high in a string\" }\n\
         #[cfg(test)]\nmod tests {\n    use crate::high::X;\n}\n",
    );
    write(
        "low/helper.rs",
        "pub fn g() {}\n\nuse crate::{side, high::Y};\n",
    );
    write("low/fakes.rs", "use crate::high::Z;\n");
    write(
        "high.rs",
        "use crate::low::f;\npub struct X;\npub struct Y;\npub struct Z;\n",
    );
    write("side.rs", "use crate::high::X;\n");
    let map: BTreeMap<String, (usize, String)> = [("low", 0), ("side", 0), ("high", 1)]
        .into_iter()
        .map(|(m, n)| (m.to_string(), (n, format!("l{n}"))))
        .collect();
    let found = imports(&src);
    let v = violations(&found, &map);
    assert!(
        v.iter()
            .any(|l| l.starts_with("low/helper.rs:3: `low` (layer 0 l0) imports `high`")),
        "{v:#?}"
    );
    assert!(
        v.iter()
            .any(|l| l.starts_with("side.rs:1: `side` (layer 0 l0) imports `high`")),
        "{v:#?}"
    );
    assert!(
        v.iter()
            .any(|l| l.starts_with("import cycle:") && l.contains("high") && l.contains("low")),
        "{v:#?}"
    );
    // Comments, strings, #[cfg(test)] items and test-only modules are not imports.
    assert!(
        !found
            .iter()
            .any(|i| i.file.starts_with("low/mod.rs") || i.file.contains("fakes")),
        "{found:#?}"
    );
    // The real map, with the upward import taken out, is clean.
    std::fs::write(
        src.join("low/helper.rs"),
        "pub fn g() {}\n\nuse crate::side;\n",
    )
    .unwrap();
    std::fs::write(src.join("side.rs"), "pub fn s() {}\n").unwrap();
    assert_eq!(violations(&imports(&src), &map), Vec::<String>::new());
}
