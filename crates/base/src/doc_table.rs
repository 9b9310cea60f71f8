//! Test support: the rows of a reference table in a docs page, and what differs between them
//! and the names the code has (issue 28: a name without a row, or a row without a name, fails
//! the build). Used by the tests that keep docs/book/src/reference/ true (`observe::tests`,
//! `cli::tests`).

use std::collections::{BTreeMap, BTreeSet};

/// A row of a Markdown table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// 1-based line of the page.
    pub line: usize,
    /// The cells, trimmed (a `|` inside a code span or escaped as `\|` does not split).
    pub cells: Vec<String>,
}

/// The body rows of the one table of `page` whose header cells are exactly `header`; `Err`
/// when the page has no such table, or more than one.
pub fn rows(page: &str, header: &[&str]) -> Result<Vec<Row>, String> {
    let lines: Vec<&str> = page.lines().collect();
    let starts: Vec<usize> = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| cells(l) == header)
        .map(|(i, _)| i)
        .collect();
    let shown = || format!("| {} |", header.join(" | "));
    match starts[..] {
        [] => Err(format!("no table {}", shown())),
        [start] => Ok(lines
            .iter()
            .enumerate()
            // The header, then its delimiter row.
            .skip(start + 2)
            .take_while(|(_, l)| l.trim_start().starts_with('|'))
            .map(|(i, l)| Row {
                line: i + 1,
                cells: cells(l),
            })
            .collect()),
        _ => Err(format!("{} tables {}", starts.len(), shown())),
    }
}

/// The cells of a table line (empty for a line that is no table row).
fn cells(line: &str) -> Vec<String> {
    let line = line.trim();
    let Some(inner) = line.strip_prefix('|') else {
        return Vec::new();
    };
    let inner = inner.strip_suffix('|').unwrap_or(inner);
    let mut out = Vec::new();
    let mut cell = String::new();
    let mut in_code = false;
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                cell.push(c);
                cell.extend(chars.next());
            }
            '`' => {
                in_code = !in_code;
                cell.push(c);
            }
            '|' if !in_code => out.push(std::mem::take(&mut cell).trim().to_string()),
            c => cell.push(c),
        }
    }
    out.push(cell.trim().to_string());
    out
}

/// The name a cell holds in backticks (`` `mcp_supervisor_clients` `` → `mcp_supervisor_clients`),
/// if it holds exactly one code span and nothing else.
pub fn code(cell: &str) -> Option<&str> {
    let inner = cell.strip_prefix('`')?.strip_suffix('`')?;
    (!inner.is_empty() && !inner.contains('`')).then_some(inner)
}

/// What differs between the names the code has (`truth`) and the rows' names (`(line,
/// name)`), one message each: `{page}: no row for {what} `NAME``, `{page}:LINE: row `NAME` is
/// no {what} of the code`, `{page}:LINE: a second row for `NAME``. Empty when they agree.
pub fn drift(
    page: &str,
    what: &str,
    truth: &BTreeSet<String>,
    rows: &[(usize, String)],
) -> Vec<String> {
    let mut out = Vec::new();
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for (line, name) in rows {
        if seen.insert(name, *line).is_some() {
            out.push(format!("{page}:{line}: a second row for `{name}`"));
        } else if !truth.contains(name) {
            out.push(format!(
                "{page}:{line}: row `{name}` is no {what} of the code"
            ));
        }
    }
    for name in truth {
        if !seen.contains_key(name.as_str()) {
            out.push(format!("{page}: no row for {what} `{name}`"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: &str = "# P\n\n| a | b |\n|---|---|\n| `x` | one \\| two |\n| `y|z` | `q` |\n\nafter\n\n| c | d |\n|---|---|\n";

    #[test]
    fn rows_of_the_table_with_that_header() {
        let rows = rows(PAGE, &["a", "b"]).unwrap();
        assert_eq!(
            rows,
            [
                Row {
                    line: 5,
                    cells: vec!["`x`".into(), "one \\| two".into()]
                },
                Row {
                    line: 6,
                    cells: vec!["`y|z`".into(), "`q`".into()]
                }
            ]
        );
        assert_eq!(super::rows(PAGE, &["c", "d"]).unwrap(), []);
        assert!(super::rows(PAGE, &["a"]).is_err());
        let twice = format!("{PAGE}\n| a | b |\n|---|---|\n");
        assert!(super::rows(&twice, &["a", "b"]).is_err());
        assert_eq!(code("`x`"), Some("x"));
        assert_eq!(code("`x` and `y`"), None);
        assert_eq!(code("x"), None);
    }

    #[test]
    fn drift_names_each_side() {
        let truth: BTreeSet<String> = ["a", "b"].iter().map(|s| s.to_string()).collect();
        let rows = [
            (3, "a".to_string()),
            (4, "c".to_string()),
            (5, "a".to_string()),
        ];
        assert_eq!(
            drift("p.md", "verb", &truth, &rows),
            [
                "p.md:4: row `c` is no verb of the code",
                "p.md:5: a second row for `a`",
                "p.md: no row for verb `b`",
            ]
        );
    }
}
