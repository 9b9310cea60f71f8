//! Docs that cannot lie (issue 28 §3): every ```` ```toml ```` block of README.md, docs/*.md
//! and the book's pages (docs/book/src/**/*.md) passes `mcp-supervisor check-config
//! --portable`, and every `mcp-supervisor` invocation they show uses a verb and flags the real
//! binary's `--help` lists. Each test reports every failure at once, as `FILE:LINE: ...`.
//!
//! The drift tests at the end feed the same checks synthetic pages with a wrong key, flag and
//! verb and show each is reported with its line. The key, metric and command-line reference
//! tables are checked by unit tests next to the code that is their truth
//! (`config::tests`, `observe::tests`, `cli::tests`).

// A test, a fixture or a benchmark may unwrap, expect, panic and index: the workspace's panic
// lints (Cargo.toml [workspace.lints]) are for the daemon's code.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod cli;
mod fences;
mod snippets;

use std::path::{Path, PathBuf};

/// The binary the docs describe.
const PROGRAM: &str = env!("CARGO_BIN_EXE_mcp-supervisor");

/// The repository's root.
fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The pages checked, relative to the root and sorted: README.md, docs/*.md and every .md
/// under docs/book/src (the book's sources only: its build output goes elsewhere,
/// target/book; a book not written yet is no error).
fn pages() -> Vec<PathBuf> {
    let mut out = vec![PathBuf::from("README.md")];
    out.extend(markdown_in(Path::new("docs"), false));
    out.extend(markdown_in(Path::new("docs/book/src"), true));
    out.sort();
    out
}

/// The .md files in `dir` (relative to the root), and in its subdirectories with `deep`.
fn markdown_in(dir: &Path, deep: bool) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(root().join(dir)) else {
        return out;
    };
    for entry in entries.flatten() {
        let relative = dir.join(entry.file_name());
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() && deep {
            out.extend(markdown_in(&relative, true));
        } else if kind.is_file() && relative.extension().is_some_and(|e| e == "md") {
            out.push(relative);
        }
    }
    out
}

/// A page's name (as reported) and its text.
fn read(page: &Path) -> (String, String) {
    let text = std::fs::read_to_string(root().join(page))
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", page.display()));
    (page.display().to_string(), text)
}

/// The TOML-block failures of the page `file` with Markdown `text`.
fn toml_failures(file: &str, text: &str, dir: &Path) -> Vec<String> {
    let (blocks, _) = fences::parse(text);
    snippets::check(file, &blocks, Path::new(PROGRAM), dir)
}

/// The invocation failures of the page `file` with Markdown `text`, `FILE:LINE: ...`, and how
/// many invocations it has.
fn invocation_failures(file: &str, text: &str, helps: &mut cli::Helps) -> (Vec<String>, usize) {
    let (blocks, spans) = fences::parse(text);
    let found = cli::invocations_of(&blocks, &spans);
    let failures = found
        .iter()
        .flat_map(|inv| {
            helps.check(inv).into_iter().map(move |p| {
                format!(
                    "{file}:{}: `mcp-supervisor {}`: {p}",
                    inv.line,
                    inv.args.join(" ")
                )
            })
        })
        .collect();
    (failures, found.len())
}

/// Panics with every failure, one per line, if there are any.
fn assert_none(what: &str, failures: &[String]) {
    assert!(
        failures.is_empty(),
        "{} {what}:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn every_toml_block_passes_check_config_portable() {
    let dir = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let (file, text) = read(&page);
        let (blocks, _) = fences::parse(&text);
        checked += blocks
            .iter()
            .filter(|b| b.kind() == fences::Kind::Toml)
            .count();
        failures.extend(toml_failures(&file, &text, dir.path()));
    }
    assert_none(
        "```toml blocks fail (mark a fragment ```toml,fragment)",
        &failures,
    );
    // The walk found the docs: README.md alone shows a configuration.
    assert!(checked > 0, "no ```toml block found in {:?}", pages());
}

#[test]
fn every_invocation_uses_a_verb_and_flags_that_exist() {
    let mut helps = cli::Helps::new(Path::new(PROGRAM));
    let mut failures = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let (file, text) = read(&page);
        let (f, n) = invocation_failures(&file, &text, &mut helps);
        failures.extend(f);
        checked += n;
    }
    assert_none(
        "mcp-supervisor invocations use what --help does not list",
        &failures,
    );
    assert!(checked > 0, "no mcp-supervisor invocation found");
}

/// The configuration reference shows the error a bad file gets; this file, written as the
/// example says (line 7, `servers.cua.probe_timeout = 10`), must get exactly that line.
#[test]
fn the_configuration_pages_error_example_is_what_check_config_prints() {
    let (_, page) = read(Path::new("docs/book/src/reference/configuration.md"));
    let marker = "with a message naming the file, line and key:";
    let Some((_, after)) = page.split_once(marker) else {
        panic!("the configuration reference no longer says {marker:?}");
    };
    let shown = after
        .split_once("```text\n")
        .and_then(|(_, b)| b.split_once("\n```"))
        .map(|(b, _)| b.trim().to_string())
        .expect("a ```text block with the error follows");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("supervisor.toml"),
        "[supervisor]\nsocket_dir = \"run\"\n\n[servers.cua]\ncommand = \"cua-driver\"\n\
         args = [\"mcp\"]\nprobe_timeout = 10\n",
    )
    .unwrap();
    let out = std::process::Command::new(PROGRAM)
        .args(["check-config", "--portable", "supervisor.toml"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "a bad file exits 2");
    assert_eq!(String::from_utf8_lossy(&out.stderr).trim(), shown);
}

#[test]
fn the_walk_covers_the_readme_and_the_docs() {
    let pages = pages();
    assert!(pages.contains(&PathBuf::from("README.md")));
    assert!(pages.contains(&PathBuf::from("docs/ARCHITECTURE.md")));
    if root().join("docs/book/src").is_dir() {
        assert!(
            pages.contains(&PathBuf::from("docs/book/src/reference/cli.md")),
            "{pages:?}"
        );
    }
    assert!(pages
        .iter()
        .all(|p| p.extension().is_some_and(|e| e == "md")));
}

// ---------------------------------------------------------------------------------------------
// Drift: the same checks on synthetic pages.

/// A page with one good snippet and invocation, then a snippet (fence on line 8) with an
/// unknown key (line 11), an unknown flag (line 16), an unknown verb (line 17), an unknown flag
/// in prose (line 20), and a fence marker typo (line 22).
const DRIFTED: &str = "# Synthetic

```toml
[servers.a]
command = \"a\"
```

```toml
[servers.b]
command = \"b\"
colour = \"blue\"
```

```sh
mcp-supervisor status --json -c x.toml
sudo mcp-supervisor check-config --portible x.toml
RUST_LOG=debug ./target/release/mcp-supervisor restrat cua
```

Then `mcp-supervisor attach NAME --sokcet PATH`.

```TOML
this is not checked, and says so
```
";

#[test]
fn a_snippet_with_an_unknown_key_is_reported_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let failures = toml_failures("drift.md", DRIFTED, dir.path());
    assert_eq!(failures.len(), 2, "{failures:#?}");
    // The block's fence, and the key's own line through check-config's message.
    assert!(failures[0].starts_with("drift.md:8: "), "{failures:#?}");
    assert!(failures[0].contains("drift.md:11:"), "{failures:#?}");
    assert!(failures[0].contains("colour"), "{failures:#?}");
    assert!(failures[1].starts_with("drift.md:22: unknown marker ```TOML"));
}

#[test]
fn an_unknown_flag_or_verb_is_reported_with_its_line() {
    let mut helps = cli::Helps::new(Path::new(PROGRAM));
    let (failures, found) = invocation_failures("drift.md", DRIFTED, &mut helps);
    assert_eq!(found, 4, "{failures:#?}");
    assert_eq!(failures.len(), 3, "{failures:#?}");
    assert!(failures[0].starts_with("drift.md:16: "), "{failures:#?}");
    assert!(failures[0].contains("does not list --portible"));
    assert!(failures[1].starts_with("drift.md:17: "), "{failures:#?}");
    assert!(failures[1].contains("no verb `restrat`"));
    assert!(failures[2].starts_with("drift.md:20: "), "{failures:#?}");
    assert!(failures[2].contains("does not list --sokcet"));
}

#[test]
fn a_page_that_matches_the_binary_passes() {
    let page = "Check it with `mcp-supervisor check-config --portable FILE`:

```toml
[supervisor]
socket_dir = \"/run/mcp\"

[servers.cua]
command = \"/usr/bin/cua\"
args = [\"--stdio\"]
```

```toml,fragment
[servers.x]
not_a_key = true
```

```console
$ mcp-supervisor status cua --json \\
    -c /etc/mcp-supervisor/supervisor.toml
{\"servers\": []}
$ mcp-supervisor --version
mcp-supervisor 0.1.0
```

```sh
claude mcp add cua -- mcp-supervisor attach cua -c supervisor.toml
cargo install --path . --bin mcp-supervisor
mcp-supervisor adopt --dry-run --home /tmp/h 2>&1 | less
```
";
    let dir = tempfile::tempdir().unwrap();
    assert_none("failures", &toml_failures("good.md", page, dir.path()));
    let mut helps = cli::Helps::new(Path::new(PROGRAM));
    let (failures, found) = invocation_failures("good.md", page, &mut helps);
    assert_none("failures", &failures);
    assert_eq!(found, 5);
}
