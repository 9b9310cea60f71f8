//! Markdown, as far as the docs checks need it: the fenced code blocks (info string, line
//! numbers, content) and the inline code spans of the prose around them.
//!
//! CommonMark's rules, reduced: a fence is 3 or more backticks or tildes, indented by any
//! number of spaces (fences inside list items are indented); it is closed by a line of at least
//! as many of the same character with nothing after them; an unclosed fence runs to the end of
//! the file. A code span opens with a run of N backticks and closes with the next run of
//! exactly N, within one paragraph (a blank line ends it).

/// What a fenced block is to the checks, from its info string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// ```` ```toml ````: a complete configuration file, checked with `check-config --portable`.
    Toml,
    /// ```` ```toml,fragment ````: part of a file, or a deliberately invalid one; not checked.
    TomlFragment,
    /// Any other info string that starts with `toml` (`TOML`, `toml fragment`, ...): a typo
    /// that would take a snippet out of the check without anyone deciding so; reported.
    TomlUnknown,
    /// ```` ```sh ````, ```` ```bash ````, ```` ```shell ````: every line is a command.
    Shell,
    /// ```` ```console ````: the lines after a `$ ` prompt are commands, the rest is output.
    Console,
    /// Anything else (`json`, `text`, `yaml`, none): not checked.
    Other,
}

impl Kind {
    /// The kind of a block with info string `info` (already trimmed).
    pub fn of(info: &str) -> Kind {
        match info {
            "toml" => Kind::Toml,
            "toml,fragment" => Kind::TomlFragment,
            "sh" | "bash" | "shell" => Kind::Shell,
            "console" => Kind::Console,
            _ if info.to_ascii_lowercase().starts_with("toml") => Kind::TomlUnknown,
            _ => Kind::Other,
        }
    }
}

/// A fenced code block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    /// The info string after the opening fence, trimmed.
    pub info: String,
    /// 1-based line number of the opening fence.
    pub fence_line: usize,
    /// The content, the fence's indentation removed: `lines[i]` is line `fence_line + 1 + i`.
    pub lines: Vec<String>,
}

impl Block {
    /// What the checks make of it.
    pub fn kind(&self) -> Kind {
        Kind::of(&self.info)
    }

    /// The content as one text (each line ending in `\n`).
    pub fn text(&self) -> String {
        self.lines.iter().map(|l| format!("{l}\n")).collect()
    }
}

/// An inline code span of the prose (outside fenced blocks).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Span {
    /// 1-based line number where the span opens.
    pub line: usize,
    /// Its content, line breaks as spaces, one surrounding space stripped as CommonMark does.
    pub text: String,
}

/// The fenced blocks and the prose's inline code spans of the Markdown `text`, in order.
pub fn parse(text: &str) -> (Vec<Block>, Vec<Span>) {
    let mut blocks = Vec::new();
    let mut spans = Vec::new();
    let mut open: Option<(Fence, Block)> = None;
    let mut paragraph: Vec<(usize, &str)> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let number = i + 1;
        if let Some((fence, mut block)) = open.take() {
            if fence.closed_by(line) {
                blocks.push(block);
            } else {
                block
                    .lines
                    .push(strip_indent(line, fence.indent).to_string());
                open = Some((fence, block));
            }
            continue;
        }
        if let Some((fence, info)) = Fence::opened_by(line) {
            spans_of(&paragraph, &mut spans);
            paragraph.clear();
            let block = Block {
                info: info.to_string(),
                fence_line: number,
                lines: Vec::new(),
            };
            open = Some((fence, block));
        } else if line.trim().is_empty() {
            spans_of(&paragraph, &mut spans);
            paragraph.clear();
        } else {
            paragraph.push((number, line));
        }
    }
    if let Some((_, block)) = open {
        blocks.push(block);
    }
    spans_of(&paragraph, &mut spans);
    (blocks, spans)
}

/// An open fence: its character, its length and its indentation.
struct Fence {
    ch: u8,
    len: usize,
    indent: usize,
}

impl Fence {
    /// The fence `line` opens and its trimmed info string, if it opens one.
    fn opened_by(line: &str) -> Option<(Fence, &str)> {
        let rest = line.trim_start_matches(' ');
        let indent = line.len() - rest.len();
        let ch = *rest.as_bytes().first()?;
        if ch != b'`' && ch != b'~' {
            return None;
        }
        let len = rest.bytes().take_while(|c| *c == ch).count();
        let info = rest.get(len..)?.trim();
        // A backtick fence's info string cannot hold a backtick (it would be a code span).
        if len < 3 || (ch == b'`' && info.contains('`')) {
            return None;
        }
        Some((Fence { ch, len, indent }, info))
    }

    /// Whether `line` closes this fence.
    fn closed_by(&self, line: &str) -> bool {
        let rest = line.trim_start_matches(' ');
        let n = rest.bytes().take_while(|c| *c == self.ch).count();
        n >= self.len && rest.get(n..).is_some_and(|r| r.trim().is_empty())
    }
}

/// `line` without up to `indent` leading spaces.
fn strip_indent(line: &str, indent: usize) -> &str {
    let spaces = line.bytes().take(indent).take_while(|c| *c == b' ').count();
    line.get(spaces..).unwrap_or(line)
}

/// Appends the code spans of one paragraph (its lines with their numbers) to `out`.
fn spans_of(paragraph: &[(usize, &str)], out: &mut Vec<Span>) {
    let Some(&(first, _)) = paragraph.first() else {
        return;
    };
    let text = paragraph
        .iter()
        .map(|(_, l)| *l)
        .collect::<Vec<_>>()
        .join("\n");
    let bytes = text.as_bytes();
    let run = |at: usize| bytes[at..].iter().take_while(|c| **c == b'`').count();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            // A backslash-escaped backtick opens nothing.
            b'\\' => i += 2,
            b'`' => {
                let n = run(i);
                let mut j = i + n;
                let mut close = None;
                while j < bytes.len() {
                    if bytes[j] == b'`' {
                        let m = run(j);
                        if m == n {
                            close = Some(j);
                            break;
                        }
                        j += m;
                    } else {
                        j += 1;
                    }
                }
                match close {
                    Some(j) => {
                        let raw = text[i + n..j].replace('\n', " ");
                        let content = match raw.strip_prefix(' ').and_then(|r| r.strip_suffix(' '))
                        {
                            Some(inner) if !inner.trim().is_empty() => inner.to_string(),
                            _ => raw,
                        };
                        let line = first + text[..i].matches('\n').count();
                        out.push(Span {
                            line,
                            text: content,
                        });
                        i = j + n;
                    }
                    // No closing run: the backticks are literal.
                    None => i += n,
                }
            }
            _ => i += 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_keep_their_info_lines_and_content() {
        let md = "# T\n\n```toml\na = 1\n```\n\n- item\n\n  ~~~~sh\n  mcp-supervisor run\n  ```\n  ~~~~\n```\nunclosed\n";
        let (blocks, _) = parse(md);
        assert_eq!(blocks.len(), 3, "{blocks:?}");
        assert_eq!(blocks[0].info, "toml");
        assert_eq!(blocks[0].fence_line, 3);
        assert_eq!(blocks[0].lines, ["a = 1"]);
        assert_eq!(blocks[1].kind(), Kind::Shell);
        assert_eq!(blocks[1].fence_line, 9);
        // A shorter fence of the other character does not close it; the indentation goes.
        assert_eq!(blocks[1].lines, ["mcp-supervisor run", "```"]);
        assert_eq!(blocks[2].info, "");
        assert_eq!(blocks[2].lines, ["unclosed"]);
    }

    #[test]
    fn info_strings_decide_the_kind() {
        assert_eq!(Kind::of("toml"), Kind::Toml);
        assert_eq!(Kind::of("toml,fragment"), Kind::TomlFragment);
        assert_eq!(Kind::of("toml fragment"), Kind::TomlUnknown);
        assert_eq!(Kind::of("TOML"), Kind::TomlUnknown);
        assert_eq!(Kind::of("bash"), Kind::Shell);
        assert_eq!(Kind::of("console"), Kind::Console);
        assert_eq!(Kind::of("json"), Kind::Other);
        assert_eq!(Kind::of(""), Kind::Other);
    }

    #[test]
    fn spans_are_found_in_prose_only_with_their_lines() {
        let md = "Run `mcp-supervisor run` and\n``a ` b`` then `x\ny`.\n\n```sh\n`not a span`\n```\nA `dangling\n\nan escaped \\` is literal: `last`\n";
        let (_, spans) = parse(md);
        let got: Vec<(usize, &str)> = spans.iter().map(|s| (s.line, s.text.as_str())).collect();
        assert_eq!(
            got,
            [
                (1, "mcp-supervisor run"),
                (2, "a ` b"),
                (2, "x y"),
                (10, "last")
            ]
        );
    }
}
