//! The `mcp-supervisor` invocations the docs show, and their check against the real binary's
//! `--help`: the verb exists (`mcp-supervisor VERB --help` exits 0) and every flag used is one
//! its help, or the top-level help (`-h`, `-V`), lists. Values and positional arguments are not
//! checked: placeholders (`NAME`, `<PATH>`) stand where they are.
//!
//! What counts as an invocation: the program `mcp-supervisor` (or a path ending in
//! `/mcp-supervisor`) in command position of a shell command line: first in a pipeline
//! element, after `VAR=value` assignments and the wrappers `sudo [OPTIONS]`, `env`, `exec`,
//! `nohup`, `time`, `command`; or first after a `--` that hands a command to another program
//! (`claude mcp add cua -- mcp-supervisor attach cua`, `kubectl exec POD -- mcp-supervisor
//! status`). `cargo install --bin mcp-supervisor` and `journalctl -u mcp-supervisor` are not.

use crate::fences::{Block, Kind, Span};
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;

/// One `mcp-supervisor` invocation shown in the docs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    /// 1-based line of the file where its command line starts.
    pub line: usize,
    /// The words after the program (quotes removed; comments and redirections left out).
    pub args: Vec<String>,
}

/// The logical command lines of a shell or console block: `(line, text)` with continuation
/// lines (`\` at the end) joined to the first; in a `console` block only the lines after a
/// `$ ` prompt (the rest is output); here-document bodies (`<<EOF` ... `EOF`) left out. Any
/// other kind of block has none.
pub fn command_lines(block: &Block) -> Vec<(usize, String)> {
    let kind = block.kind();
    if kind != Kind::Shell && kind != Kind::Console {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut current: Option<(usize, String)> = None;
    let mut heredoc: Option<String> = None;
    for (i, raw) in block.lines.iter().enumerate() {
        let number = block.fence_line + 1 + i;
        if let Some(end) = &heredoc {
            if raw.trim() == end {
                heredoc = None;
            }
            continue;
        }
        let text = match current.take() {
            Some((start, mut acc)) => {
                acc.push(' ');
                acc.push_str(raw.trim());
                (start, acc)
            }
            None if kind == Kind::Console => match raw.trim_start().strip_prefix("$ ") {
                Some(command) => (number, command.to_string()),
                None => continue,
            },
            None => (number, raw.trim().to_string()),
        };
        match text.1.strip_suffix('\\') {
            Some(head) => current = Some((text.0, head.trim_end().to_string())),
            None => {
                heredoc = heredoc_end(&text.1);
                out.push(text);
            }
        }
    }
    out.extend(current);
    out
}

/// The delimiter of a here-document that `line` opens (`<<EOF`, `<<-'EOF'`, `<< "EOF"`).
fn heredoc_end(line: &str) -> Option<String> {
    let (_, after) = line.split_once("<<")?;
    let after = after.strip_prefix('-').unwrap_or(after).trim_start();
    // `<<<` is a here-string, not a document.
    if after.starts_with('<') {
        return None;
    }
    let word: String = after
        .chars()
        .take_while(|c| !c.is_whitespace() && *c != ';' && *c != '|' && *c != '&')
        .filter(|c| *c != '\'' && *c != '"')
        .collect();
    (!word.is_empty()).then_some(word)
}

/// A word of a command line, or an operator that separates commands.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Word {
    Text(String),
    Op,
}

/// The words of a shell command line: quotes removed, a `#` comment dropped, `|`, `||`, `&&`,
/// `;`, `&`, `(`, `)`, `$(` and backticks as operators, redirections (`>`, `2>&1`, `<`) left out.
fn words(line: &str) -> Vec<Word> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars().peekable();
    let flush = |word: &mut String, in_word: &mut bool, out: &mut Vec<Word>| {
        if *in_word {
            out.push(Word::Text(std::mem::take(word)));
            *in_word = false;
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '\'' | '"' => {
                in_word = true;
                for q in chars.by_ref() {
                    if q == c {
                        break;
                    }
                    word.push(q);
                }
            }
            '\\' => {
                in_word = true;
                word.extend(chars.next());
            }
            '#' if !in_word => break,
            '$' if chars.peek() == Some(&'(') => {
                chars.next();
                flush(&mut word, &mut in_word, &mut out);
                out.push(Word::Op);
            }
            '|' | '&' | ';' | '(' | ')' | '`' => {
                flush(&mut word, &mut in_word, &mut out);
                out.push(Word::Op);
            }
            '>' | '<' => {
                // A redirection: drop its file descriptor (`2>`) and its target word.
                if word.chars().all(|d| d.is_ascii_digit()) {
                    word.clear();
                    in_word = false;
                }
                flush(&mut word, &mut in_word, &mut out);
                while chars
                    .peek()
                    .is_some_and(|n| *n == '>' || *n == '<' || *n == '&')
                {
                    chars.next();
                }
                while chars.peek().is_some_and(|n| n.is_whitespace()) {
                    chars.next();
                }
                while chars
                    .peek()
                    .is_some_and(|n| !n.is_whitespace() && !"|;&()".contains(*n))
                {
                    chars.next();
                }
            }
            c if c.is_whitespace() => flush(&mut word, &mut in_word, &mut out),
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    flush(&mut word, &mut in_word, &mut out);
    out
}

/// Whether `word` names this program.
fn is_program(word: &str) -> bool {
    word == "mcp-supervisor" || word.ends_with("/mcp-supervisor")
}

/// Whether `word` is a `NAME=value` assignment.
fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        let mut c = name.chars();
        c.next()
            .is_some_and(|f| f.is_ascii_alphabetic() || f == '_')
            && c.all(|r| r.is_ascii_alphanumeric() || r == '_')
    })
}

/// sudo's options that take a value (`sudo -u mcp mcp-supervisor ...`).
const SUDO_WITH_VALUE: &[&str] = &["-u", "-g", "-C", "-D", "-p", "-r", "-t", "-U", "-T", "-R"];

/// Where the command of `words` starts: past assignments and wrappers.
fn command_start(words: &[&str]) -> usize {
    let mut i = 0;
    while let Some(w) = words.get(i) {
        i += 1;
        match *w {
            _ if is_assignment(w) => {}
            "sudo" | "env" => {
                while let Some(o) = words.get(i).filter(|o| o.starts_with('-')) {
                    i += 1;
                    if *o == "--" {
                        break;
                    }
                    if *w == "sudo" && SUDO_WITH_VALUE.contains(o) {
                        i += 1;
                    }
                }
            }
            "exec" | "nohup" | "time" | "command" => {}
            _ => return i - 1,
        }
    }
    i
}

/// The `mcp-supervisor` invocations of one command line (module documentation), all reported
/// at `line`.
pub fn invocations(line: usize, command: &str) -> Vec<Invocation> {
    let words = words(command);
    let mut out = Vec::new();
    for segment in words.split(|w| *w == Word::Op) {
        let segment: Vec<&str> = segment
            .iter()
            .filter_map(|w| match w {
                Word::Text(t) => Some(t.as_str()),
                Word::Op => None,
            })
            .collect();
        let mut starts = vec![command_start(&segment)];
        starts.extend(
            segment
                .iter()
                .enumerate()
                .filter(|(_, w)| **w == "--")
                .map(|(i, _)| i + 1 + command_start(&segment[i + 1..])),
        );
        for start in starts {
            if segment.get(start).is_some_and(|p| is_program(p)) {
                out.push(Invocation {
                    line,
                    args: segment[start + 1..].iter().map(|s| s.to_string()).collect(),
                });
            }
        }
    }
    out
}

/// The invocations of the fenced blocks and of the prose's code spans that begin with the
/// program and at least one more word (`` `mcp-supervisor attach NAME` ``; a bare
/// `` `target/release/mcp-supervisor` `` names a file, it runs nothing).
pub fn invocations_of(blocks: &[Block], spans: &[Span]) -> Vec<Invocation> {
    let mut out: Vec<Invocation> = blocks
        .iter()
        .flat_map(command_lines)
        .flat_map(|(line, text)| invocations(line, &text))
        .collect();
    for span in spans {
        let mut first = span.text.split_whitespace();
        if first.next().is_some_and(is_program) && first.next().is_some() {
            out.extend(invocations(span.line, &span.text).into_iter().take(1));
        }
    }
    out.sort_by_key(|i| i.line);
    out
}

/// Whether `word` stands for a value rather than being one: `<NAME>`, `[OPTIONS]`, `{a,b}`,
/// `NAME`, `...`.
fn is_placeholder(word: &str) -> bool {
    word.starts_with(['<', '[', '{'])
        || word.contains("...")
        || (word.chars().any(|c| c.is_ascii_uppercase())
            && word
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_' || c == '-'))
}

/// The flag a word uses, if it is one: `--config=PATH` → `--config`, `-cPATH` → `-c` (a
/// cluster of short flags is checked by its first), `[--json]` → `--json`. Not flags: `-`,
/// `--`, negative numbers.
fn flag_of(word: &str) -> Option<String> {
    let word = word.trim_start_matches('[').trim_end_matches(']');
    if let Some(long) = word.strip_prefix("--") {
        let name: String = long
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
            .collect();
        return (!name.is_empty() && long.starts_with(|c: char| c.is_ascii_alphabetic()))
            .then(|| format!("--{name}"));
    }
    let short = word.strip_prefix('-')?.chars().next()?;
    short.is_ascii_alphabetic().then(|| format!("-{short}"))
}

/// The verb and the flags of an invocation: the first word that is neither a flag nor after
/// `--` is the verb (`None`: only global flags, as in `mcp-supervisor --version`); the flags
/// before it are global, the flags after it the verb's; nothing after a `--` is a flag.
pub fn shape(inv: &Invocation) -> (Option<&str>, Vec<String>, Vec<String>) {
    let mut verb = None;
    let (mut global, mut own) = (Vec::new(), Vec::new());
    for word in &inv.args {
        if word == "--" {
            break;
        }
        match flag_of(word) {
            Some(f) if verb.is_none() => global.push(f),
            Some(f) => own.push(f),
            None if verb.is_none() && !word.starts_with('-') => verb = Some(word.as_str()),
            None => {}
        }
    }
    (verb, global, own)
}

/// The flags a `--help` text lists: the `-x` and `--long` words that begin its option lines
/// (`  -c, --config <CONFIG>  ...`, `      --portable  ...`).
pub fn help_flags(help: &str) -> BTreeSet<String> {
    help.lines()
        .map(str::trim_start)
        .filter(|l| l.starts_with('-'))
        .flat_map(|l| {
            let head = l.split("  ").next().unwrap_or(l);
            head.split([' ', ','])
                .filter(|w| w.starts_with('-'))
                .filter_map(|w| {
                    let flag: String = w.chars().take_while(|c| *c != '=' && *c != '<').collect();
                    (flag.len() > 1).then_some(flag)
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The `--help` of the real binary, asked once per verb.
pub struct Helps {
    program: PathBuf,
    /// `None`: the top level. `Err`: the verb's `--help` did not exit 0 (its status and output).
    cache: HashMap<Option<String>, Result<BTreeSet<String>, String>>,
}

impl Helps {
    /// Asks `program` (the `mcp-supervisor` binary) for help as needed.
    pub fn new(program: &Path) -> Helps {
        Helps {
            program: program.to_path_buf(),
            cache: HashMap::new(),
        }
    }

    /// The flags `program [VERB] --help` lists; `Err` with its exit status and output when it
    /// does not exit 0 (no such verb) or cannot be run.
    fn flags(&mut self, verb: Option<&str>) -> Result<BTreeSet<String>, String> {
        let key = verb.map(str::to_string);
        if let Some(known) = self.cache.get(&key) {
            return known.clone();
        }
        let mut command = Command::new(&self.program);
        command.args(verb).arg("--help");
        let answer = match command.output() {
            Err(e) => Err(format!("cannot run {}: {e}", self.program.display())),
            Ok(o) if o.status.success() => Ok(help_flags(&String::from_utf8_lossy(&o.stdout))),
            Ok(o) => Err(format!(
                "`mcp-supervisor {} --help` exits {}: {}",
                verb.unwrap_or_default(),
                o.status
                    .code()
                    .map_or("on a signal".into(), |c| c.to_string()),
                String::from_utf8_lossy(&o.stderr)
                    .lines()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or_default()
            )),
        };
        self.cache.insert(key, answer.clone());
        answer
    }

    /// What is wrong with `inv`: a verb that does not exist, or flags that neither the verb's
    /// `--help` nor the top-level `--help` lists; empty when nothing is. An invocation whose
    /// verb is a placeholder (`mcp-supervisor VERB`) is not checked.
    pub fn check(&mut self, inv: &Invocation) -> Vec<String> {
        let (verb, global, own) = shape(inv);
        if verb.is_some_and(is_placeholder) {
            return Vec::new();
        }
        let globals = match self.flags(None) {
            Ok(g) => g,
            Err(e) => return vec![e],
        };
        let verbs = match verb {
            None => BTreeSet::new(),
            Some(v) => match self.flags(Some(v)) {
                Ok(f) => f,
                Err(e) => return vec![format!("no verb `{v}`: {e}")],
            },
        };
        let mut problems = Vec::new();
        for flag in &global {
            if !globals.contains(flag) {
                problems.push(format!("`mcp-supervisor --help` does not list {flag}"));
            }
        }
        for flag in &own {
            if !verbs.contains(flag) && !globals.contains(flag) {
                problems.push(format!(
                    "`mcp-supervisor {} --help` does not list {flag}",
                    verb.unwrap_or_default()
                ));
            }
        }
        problems
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fences::parse;

    fn args(line: &str) -> Vec<Vec<String>> {
        invocations(1, line).into_iter().map(|i| i.args).collect()
    }

    #[test]
    fn the_program_counts_in_command_position_only() {
        assert_eq!(
            args("mcp-supervisor run -c x.toml"),
            [["run", "-c", "x.toml"]]
        );
        assert_eq!(
            args("sudo -u mcp RUST_LOG=debug ./target/release/mcp-supervisor status --json"),
            [["status", "--json"]]
        );
        assert_eq!(args("env A=1 B=2 mcp-supervisor reload"), [["reload"]]);
        assert_eq!(
            args("claude mcp add cua -- mcp-supervisor attach cua -c \"/etc/a b.toml\""),
            [["attach", "cua", "-c", "/etc/a b.toml"]]
        );
        assert_eq!(
            args(
                "cargo build && target/debug/mcp-supervisor run 2>&1 | tee log # mcp-supervisor x"
            ),
            [["run"]]
        );
        assert_eq!(
            args("T=$(mcp-supervisor url a --json | jq -r .token)"),
            [["url", "a", "--json"]]
        );
        assert!(args("cargo install --path . --bin mcp-supervisor").is_empty());
        assert!(args("journalctl -u mcp-supervisor SERVER=cua").is_empty());
        assert!(args("systemctl reload mcp-supervisor").is_empty());
    }

    #[test]
    fn continuations_prompts_and_heredocs() {
        let md = "```console\n$ mcp-supervisor status \\\n    --json\nNAME  STATE\nmcp-supervisor bogus\n```\n\n```sh\ncat >x <<'EOF'\nmcp-supervisor nothing\nEOF\nmcp-supervisor logs a\n```\n";
        let (blocks, spans) = parse(md);
        let found = invocations_of(&blocks, &spans);
        let got: Vec<(usize, Vec<String>)> = found.into_iter().map(|i| (i.line, i.args)).collect();
        assert_eq!(
            got,
            [
                (2, vec!["status".to_string(), "--json".to_string()]),
                (12, vec!["logs".to_string(), "a".to_string()])
            ]
        );
    }

    #[test]
    fn spans_with_arguments_are_invocations() {
        let md = "Use `mcp-supervisor attach NAME` or `mcp-supervisor`; see\n`target/release/mcp-supervisor` and `mcp-supervisor --version`.\n";
        let (blocks, spans) = parse(md);
        let got: Vec<(usize, Vec<String>)> = invocations_of(&blocks, &spans)
            .into_iter()
            .map(|i| (i.line, i.args))
            .collect();
        assert_eq!(
            got,
            [
                (1, vec!["attach".to_string(), "NAME".to_string()]),
                (2, vec!["--version".to_string()])
            ]
        );
    }

    #[test]
    fn shapes_flags_and_placeholders() {
        let inv = |s: &str| Invocation {
            line: 1,
            args: s.split(' ').map(str::to_string).collect(),
        };
        let i = inv("-V check-config --portable --config=a.toml -cX [--json] -1 - -- --not");
        let (verb, global, own) = shape(&i);
        assert_eq!(verb, Some("check-config"));
        assert_eq!(global, ["-V"]);
        assert_eq!(own, ["--portable", "--config", "-c", "--json"]);
        assert!(is_placeholder("NAME") && is_placeholder("<VERB>") && is_placeholder("[OPTIONS]"));
        assert!(!is_placeholder("status") && !is_placeholder("check-config"));
    }

    #[test]
    fn help_lists_its_option_lines() {
        let help = "Usage: x [OPTIONS]\n\nOptions:\n  -c, --config <CONFIG>  The file -x --nope\n      --portable         Check\n  -h, --help             Print help\n      --level=<N>\n";
        let got: Vec<String> = help_flags(help).into_iter().collect();
        assert_eq!(
            got,
            ["--config", "--help", "--level", "--portable", "-c", "-h"]
        );
    }
}
