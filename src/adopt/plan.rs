//! The plan: which supervisor server each adopted client entry becomes (names, merging,
//! reuse of servers already configured), and its text as shown before anything is written.
//!
//! Owns: naming and merging. Pure: no I/O.

use super::entry::{Spec, Verdict};
use std::collections::BTreeMap;

/// Longest name `adopt` chooses (a socket path must fit in 108 bytes).
const MAX_NAME: usize = 48;

/// One entry found in a client file.
#[derive(Debug, Clone)]
pub struct Found {
    /// Index of its file in the list of client files.
    pub file: usize,
    /// Index of its servers object in that file's sections.
    pub section: usize,
    /// Its key in the servers object, as written.
    pub key: String,
    /// What happens to it.
    pub verdict: Verdict,
}

/// A `[servers.NAME]` of the supervisor config after adoption.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    /// The name (`[a-z0-9_-]+`).
    pub name: String,
    /// What it runs.
    pub spec: Spec,
    /// Already in the supervisor config (reused, not written again).
    pub existing: bool,
    /// Indexes into the found entries that become `attach NAME`.
    pub from: Vec<usize>,
}

/// Names and merging for a list of found entries.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// Servers that adopted entries map to, existing ones first, then new ones in the order
    /// their first entry was found. Existing servers no entry maps to are left out.
    pub servers: Vec<Server>,
}

impl Plan {
    /// The server an entry maps to.
    pub fn server_of(&self, found: usize) -> Option<&Server> {
        self.servers.iter().find(|s| s.from.contains(&found))
    }

    /// The servers `adopt` adds to the supervisor config.
    pub fn new_servers(&self) -> impl Iterator<Item = &Server> {
        self.servers.iter().filter(|s| !s.existing)
    }
}

/// A client key as a server name: lowercased, every run of characters outside `[a-z0-9_-]`
/// turned into one `-`, every run of `_` into one `_` (a name never holds `__`, the separator
/// of an endpoint's exposed names: issue 47 §3), trimmed of `-`, at most 48 bytes; `server` if
/// nothing is left.
pub fn sanitize(key: &str) -> String {
    let mut out = String::new();
    for c in key.chars().flat_map(char::to_lowercase) {
        if c == '_' && out.ends_with('_') {
            continue;
        }
        if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-' {
            out.push(c);
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    let mut name: String = out.trim_matches('-').chars().take(MAX_NAME).collect();
    while name.ends_with('-') {
        name.pop();
    }
    if name.is_empty() {
        "server".to_string()
    } else {
        name
    }
}

/// Chooses a server for every adopted entry of `found`. `existing` are the supervisor
/// config's servers (`None`: a table `adopt` could not read as a spec; its name stays taken).
///
/// Rules: an entry whose spec equals a server's (existing or chosen earlier) maps to it; else
/// it gets its sanitized key, or the first free `KEY-2`, `KEY-3`... (`control` is reserved).
pub fn make(existing: &[(String, Option<Spec>)], found: &[Found]) -> Plan {
    let mut servers: Vec<Server> = Vec::new();
    let mut taken: Vec<String> = vec!["control".to_string()];
    let mut by_spec: BTreeMap<Spec, usize> = BTreeMap::new();
    let mut reusable: BTreeMap<Spec, String> = BTreeMap::new();
    for (name, spec) in existing {
        taken.push(name.clone());
        if let Some(spec) = spec {
            reusable.entry(spec.clone()).or_insert_with(|| name.clone());
        }
    }
    for (i, f) in found.iter().enumerate() {
        let Verdict::Adopt(spec) = &f.verdict else {
            continue;
        };
        if let Some(&s) = by_spec.get(spec) {
            if let Some(server) = servers.get_mut(s) {
                server.from.push(i);
            }
            continue;
        }
        let (name, existing) = match reusable.get(spec) {
            Some(name) => (name.clone(), true),
            None => {
                let base = sanitize(&f.key);
                let mut name = base.clone();
                let mut n = 2;
                while taken.contains(&name) {
                    name = format!("{base}-{n}");
                    n += 1;
                }
                taken.push(name.clone());
                (name, false)
            }
        };
        by_spec.insert(spec.clone(), servers.len());
        servers.push(Server {
            name,
            spec: spec.clone(),
            existing,
            from: vec![i],
        });
    }
    // Existing servers first, so the plan reads "reused" before "new".
    servers.sort_by_key(|s| !s.existing);
    Plan { servers }
}

/// A command line as a shell would need it, for display only.
pub fn command_line(spec: &Spec) -> String {
    std::iter::once(&spec.command)
        .chain(spec.args.iter())
        .map(|a| quote(a))
        .collect::<Vec<_>>()
        .join(" ")
}

fn quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:@%+,".contains(c));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(command: &str, args: &[&str], env: &[(&str, &str)]) -> Spec {
        Spec {
            command: command.to_string(),
            args: args.iter().map(|s| s.to_string()).collect(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            cwd: None,
            user: None,
        }
    }

    fn found(key: &str, s: Spec) -> Found {
        Found {
            file: 0,
            section: 0,
            key: key.to_string(),
            verdict: Verdict::Adopt(s),
        }
    }

    #[test]
    fn sanitize_lowercases_and_replaces_runs() {
        assert_eq!(sanitize("GitHub"), "github");
        assert_eq!(sanitize("My Server.v2"), "my-server-v2");
        assert_eq!(sanitize("@scope/pkg"), "scope-pkg");
        assert_eq!(sanitize("a__b--c"), "a_b--c");
        assert_eq!(sanitize("x___y.__z__"), "x_y-_z_");
        assert_eq!(sanitize("--x--"), "x");
        assert_eq!(sanitize("été"), "t");
        assert_eq!(sanitize("日本"), "server");
        assert_eq!(sanitize(""), "server");
        let long = sanitize(&"ab-".repeat(40));
        assert!(long.len() <= MAX_NAME && !long.ends_with('-'), "{long}");
    }

    proptest::proptest! {
        #[test]
        fn adopt_never_chooses_a_name_holding_the_separator(key in "\\PC{0,80}") {
            let name = sanitize(&key);
            proptest::prop_assert!(!name.contains("__"), "{name}");
            proptest::prop_assert!(!name.is_empty() && name.len() <= MAX_NAME, "{name}");
        }
    }

    #[test]
    fn same_spec_across_clients_is_one_server() {
        let fs = spec("npx", &["-y", "fs"], &[]);
        let plan = make(
            &[],
            &[
                found("filesystem", fs.clone()),
                found("fs", fs.clone()),
                found("Filesystem", fs),
            ],
        );
        assert_eq!(plan.servers.len(), 1);
        assert_eq!(plan.servers[0].name, "filesystem");
        assert_eq!(plan.servers[0].from, vec![0, 1, 2]);
    }

    #[test]
    fn env_or_args_difference_makes_another_server_with_a_suffix() {
        let a = spec("npx", &["-y", "gh"], &[("TOKEN", "a")]);
        let b = spec("npx", &["-y", "gh"], &[("TOKEN", "b")]);
        let c = spec("npx", &["-y", "gh", "--ro"], &[("TOKEN", "a")]);
        let plan = make(
            &[],
            &[found("github", a), found("GitHub", b), found("github", c)],
        );
        let names: Vec<_> = plan.servers.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["github", "github-2", "github-3"]);
    }

    #[test]
    fn cwd_difference_is_another_server() {
        let a = spec("node", &["index.js"], &[]);
        let mut b = a.clone();
        b.cwd = Some("/p".into());
        let plan = make(&[], &[found("n", a), found("n", b)]);
        assert_eq!(plan.servers.len(), 2);
    }

    #[test]
    fn existing_server_with_the_same_spec_is_reused_and_its_name_is_never_taken() {
        let t = spec("uvx", &["mcp-server-time"], &[]);
        let other = spec("other", &[], &[]);
        let existing = vec![
            ("clock".to_string(), Some(t.clone())),
            ("time".to_string(), Some(other)),
            ("weird".to_string(), None),
        ];
        let plan = make(
            &existing,
            &[
                found("time", t),
                found("time", spec("uvx", &["x"], &[])),
                found("weird", spec("w", &[], &[])),
            ],
        );
        let got: Vec<_> = plan
            .servers
            .iter()
            .map(|s| (s.name.as_str(), s.existing))
            .collect();
        assert_eq!(
            got,
            [("clock", true), ("time-2", false), ("weird-2", false)]
        );
        assert_eq!(plan.server_of(0).map(|s| s.name.as_str()), Some("clock"));
    }

    #[test]
    fn control_is_reserved() {
        let plan = make(&[], &[found("Control", spec("c", &[], &[]))]);
        assert_eq!(plan.servers[0].name, "control-2");
    }

    #[test]
    fn skipped_and_attached_entries_get_no_server() {
        let mut f = found("a", spec("a", &[], &[]));
        f.verdict = Verdict::Skip("remote".into());
        let mut g = found("b", spec("b", &[], &[]));
        g.verdict = Verdict::Attached(Some("b".into()));
        let plan = make(&[], &[f, g]);
        assert!(plan.servers.is_empty());
    }

    #[test]
    fn command_line_quotes_what_a_shell_would_split() {
        let s = spec("npx", &["-y", "a b", "it's", ""], &[]);
        assert_eq!(command_line(&s), r"npx -y 'a b' 'it'\''s' ''");
    }
}
