//! The ```` ```toml ```` blocks of a page, each a complete configuration file that must pass
//! `mcp-supervisor check-config --portable` (the mode that looks at nothing of this host:
//! users, groups and files the snippet names need not exist).

use crate::fences::{Block, Kind};
use std::path::Path;
use std::process::Command;

/// Checks every ```` ```toml ```` block of `blocks` (from page `file`) with `program
/// check-config --portable`, each written to its own file under `dir`. One message per block
/// it rejects, `FILE:LINE: ...` with the line of the fence, then the tool's error with the
/// snippet's own `PATH:N` turned into the page's `FILE:LINE`. A block whose info string starts
/// with `toml` but is neither `toml` nor `toml,fragment` is reported too (a typo would
/// otherwise take it out of the check).
pub fn check(file: &str, blocks: &[Block], program: &Path, dir: &Path) -> Vec<String> {
    let mut failures = Vec::new();
    for (n, block) in blocks.iter().enumerate() {
        match block.kind() {
            Kind::Toml => {}
            Kind::TomlUnknown => {
                failures.push(format!(
                    "{file}:{}: unknown marker ```{} (```toml is checked, ```toml,fragment is not)",
                    block.fence_line, block.info
                ));
                continue;
            }
            _ => continue,
        }
        let path = dir.join(format!("snippet-{n}.toml"));
        if let Err(e) = std::fs::write(&path, block.text()) {
            failures.push(format!(
                "{file}:{}: cannot write {}: {e}",
                block.fence_line,
                path.display()
            ));
            continue;
        }
        let output = Command::new(program)
            .arg("check-config")
            .arg("--portable")
            .arg(&path)
            .output();
        match output {
            Err(e) => failures.push(format!(
                "{file}:{}: cannot run {}: {e}",
                block.fence_line,
                program.display()
            )),
            Ok(o) if o.status.success() => {}
            Ok(o) => {
                let said = String::from_utf8_lossy(&o.stderr);
                let said = relocate(said.trim(), &path.display().to_string(), file, block);
                failures.push(format!(
                    "{file}:{}: ```toml block rejected by `check-config --portable` (exit {}): {said}",
                    block.fence_line,
                    o.status.code().map_or("on a signal".into(), |c| c.to_string()),
                ));
            }
        }
    }
    failures
}

/// `message` with every `PATH:N` (a line of the snippet file) as `FILE:LINE` of the page, and
/// any other mention of `PATH` as `FILE`.
fn relocate(message: &str, path: &str, file: &str, block: &Block) -> String {
    let mut out = String::new();
    let mut rest = message;
    while let Some(at) = rest.find(path) {
        out.push_str(&rest[..at]);
        rest = &rest[at + path.len()..];
        let digits: String = rest
            .strip_prefix(':')
            .unwrap_or_default()
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        match digits.parse::<usize>() {
            Ok(n) => {
                out.push_str(&format!("{file}:{}", block.fence_line + n));
                rest = &rest[1 + digits.len()..];
            }
            Err(_) => out.push_str(file),
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snippet_lines_become_page_lines() {
        let block = Block {
            info: "toml".into(),
            fence_line: 10,
            lines: vec![],
        };
        assert_eq!(
            relocate(
                "invalid configuration: /tmp/s.toml:2: key `x`; see /tmp/s.toml",
                "/tmp/s.toml",
                "a.md",
                &block
            ),
            "invalid configuration: a.md:12: key `x`; see a.md"
        );
    }
}
