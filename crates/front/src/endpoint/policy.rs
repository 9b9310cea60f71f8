//! Who sees and may call what through an endpoint (issue 31 §5): the endpoint's `hide`
//! patterns for everyone, and the rules of each client identity the peer is.
//!
//! Owns: pattern matching and the per-client [`View`]. `*` matches any run of characters, `?`
//! one; deny wins over allow. A decision is taken on the routed pair (source, the source's own
//! name), never on a string another source can also spell (issue 47 §3, N19): a pattern that
//! starts with `SOURCE__` for a configured source of the endpoint (the longest such, as
//! [`super::names::owner`] decides for exposed names) binds to that source, and its rest
//! matches that source's names only; any other pattern matches `SOURCE__NAME` of the routed
//! pair or its exposed name.

use super::names::{owner, SEPARATOR};
use actor::session::Peer;
use support::config::{HiddenCalls, Policy};

/// One policy pattern, compiled against the endpoint's sources when the view is built.
#[derive(Debug, Clone, PartialEq)]
enum Pattern {
    /// `SOURCE__REST` for configured source `source`: matches a routed pair of that source
    /// whose own name, or whose exposed name after `SOURCE__`, matches `rest`.
    Bound { source: String, rest: String },
    /// Binds to no source: matches `SOURCE__NAME` built from the routed pair, or its exposed
    /// name.
    Unbound(String),
}

impl Pattern {
    fn compile(pattern: &str, sources: &[String]) -> Pattern {
        match owner(sources, pattern) {
            Some((source, rest)) => Pattern::Bound {
                source: source.to_string(),
                rest: rest.to_string(),
            },
            None => Pattern::Unbound(pattern.to_string()),
        }
    }

    fn matches(&self, pair: &Named<'_>) -> bool {
        match self {
            Pattern::Bound { source, rest } => {
                source == pair.source
                    && (glob(rest, pair.name)
                        || pair
                            .exposed
                            .strip_prefix(source.as_str())
                            .and_then(|r| r.strip_prefix(SEPARATOR))
                            .is_some_and(|r| glob(rest, r)))
            }
            Pattern::Unbound(p) => glob(p, &pair.full) || glob(p, pair.exposed),
        }
    }
}

/// A routed tool or prompt as the policy sees it.
struct Named<'a> {
    source: &'a str,
    name: &'a str,
    exposed: &'a str,
    /// `SOURCE__NAME`.
    full: String,
}

/// What one client may see and call.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct View {
    hide: Vec<Pattern>,
    /// `None`: everything not hidden; else only what one of these matches.
    allow: Option<Vec<Pattern>>,
    /// How a hidden tool's call is answered.
    pub hidden_calls: HiddenCalls,
    /// The client identities the peer matched, for the log.
    pub labels: Vec<String>,
}

impl View {
    /// The view of `peer` under `policy`. A client identity's `uids`/`gids` match Unix peers
    /// only (a socket, `attach`, `NAME.http.sock`: a peer with a pid from `SO_PEERCRED`); an
    /// HTTP client over TCP is the supervisor's own uid and matches no identity by uid, only by
    /// the named token it bears (a client with `token = true`). Every
    /// identity the peer matches applies: all their `hide`s, and the union of their `allow`s
    /// when any sets one. `sources` are the endpoint's configured sources, which patterns
    /// bind to (compiled here, once).
    pub fn of(policy: &Policy, sources: &[String], peer: &Peer) -> View {
        let compile = |ps: &[String]| -> Vec<Pattern> {
            ps.iter().map(|p| Pattern::compile(p, sources)).collect()
        };
        let mut hide = compile(&policy.hide);
        let mut allow: Option<Vec<Pattern>> = None;
        let mut labels = Vec::new();
        let unix = peer.pid.is_some();
        for (label, rule) in &policy.clients {
            let by_token = rule.token && peer.label == Some(support::config::label_id(label));
            let me = by_token
                || (unix && (rule.uids.contains(&peer.uid) || rule.gids.contains(&peer.gid)));
            if !me {
                continue;
            }
            labels.push(label.clone());
            hide.extend(compile(&rule.hide));
            if let Some(a) = &rule.allow {
                allow.get_or_insert_with(Vec::new).extend(compile(a));
            }
        }
        View {
            hide,
            allow,
            hidden_calls: policy.hidden_calls,
            labels,
        }
    }

    /// Whether the tool or prompt routed to `source`'s own `name`, offered as `exposed`, is
    /// visible (and callable) (issue 47 §3: decided on the routed pair).
    pub fn visible(&self, source: &str, name: &str, exposed: &str) -> bool {
        let pair = Named {
            source,
            name,
            exposed,
            full: format!("{source}{SEPARATOR}{name}"),
        };
        if self.hide.iter().any(|p| p.matches(&pair)) {
            return false;
        }
        match &self.allow {
            None => true,
            Some(a) => a.iter().any(|p| p.matches(&pair)),
        }
    }
}

/// Whether `text` matches `pattern` (`*` any run, `?` one character). Linear in
/// `pattern.len() * text.len()` at worst, never exponential.
pub fn glob(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        match p.get(pi) {
            Some('*') => {
                star = Some((pi, ti));
                pi += 1;
            }
            Some(c) if *c == '?' || Some(c) == t.get(ti) => {
                pi += 1;
                ti += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    pi = sp + 1;
                    ti = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    p.get(pi..)
        .is_some_and(|rest| rest.iter().all(|c| *c == '*'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use support::config::ClientRule;

    #[test]
    fn globs() {
        assert!(glob("github__*", "github__search"));
        assert!(!glob("github__*", "gitlab__search"));
        assert!(glob("*__delete_?", "files__delete_x"));
        assert!(!glob("*__delete_?", "files__delete_xy"));
        assert!(glob("*", ""));
        assert!(glob("a*b*c", "aXXbYYc"));
        assert!(!glob("a*b*c", "aXXbYY"));
    }

    fn peer(uid: u32, unix: bool) -> Peer {
        Peer {
            uid,
            gid: 100,
            pid: unix.then_some(1),
            label: None,
            endpoint: None,
            transport: Default::default(),
        }
    }

    #[test]
    fn deny_wins_and_each_identity_sees_its_own() {
        let mut policy = Policy {
            hide: vec!["*__drop_*".into()],
            ..Policy::default()
        };
        policy.clients.insert(
            "alice".into(),
            ClientRule {
                uids: vec![1001],
                allow: Some(vec!["files__*".into(), "db__*".into()]),
                hide: vec!["db__write".into()],
                ..ClientRule::default()
            },
        );
        let sources: Vec<String> = ["files", "db", "github", "x"].map(String::from).to_vec();
        let alice = View::of(&policy, &sources, &peer(1001, true));
        assert_eq!(alice.labels, ["alice"]);
        assert!(alice.visible("files", "read", "files__read"));
        assert!(!alice.visible("db", "write", "db__write"));
        assert!(!alice.visible("files", "drop_all", "files__drop_all"));
        assert!(!alice.visible("github", "search", "github__search"));
        let bob = View::of(&policy, &sources, &peer(1002, true));
        assert!(bob.visible("github", "search", "github__search"));
        assert!(!bob.visible("x", "drop_y", "x__drop_y"));
        // Over TCP the peer is the supervisor's own uid: no identity by uid.
        let tcp = View::of(&policy, &sources, &peer(1001, false));
        assert!(tcp.labels.is_empty());
    }

    fn rule(allow: Option<&[&str]>, hide: &[&str]) -> Policy {
        let mut policy = Policy::default();
        policy.clients.insert(
            "me".into(),
            ClientRule {
                uids: vec![1001],
                allow: allow.map(|a| a.iter().map(|p| p.to_string()).collect()),
                hide: hide.iter().map(|p| p.to_string()).collect(),
                ..ClientRule::default()
            },
        );
        policy
    }

    #[test]
    fn a_pattern_binds_to_the_longest_source_it_names_and_judges_the_routed_pair() {
        // Issue 47 N19's kind: `a` offers `_b` and `b__echo`, `a_` offers `b`; `a___b` is
        // spelled by both pairs.
        let sources: Vec<String> = ["a", "a_"].map(String::from).to_vec();
        let me = peer(1001, true);
        let hid = View::of(&rule(None, &["a__*"]), &sources, &me);
        assert!(!hid.visible("a", "_b", "a__b-0f0f0f0f"));
        assert!(!hid.visible("a", "_b", "a___b"), "any spelling of a's tool");
        assert!(!hid.visible("a", "b__echo", "a__b__echo"));
        assert!(hid.visible("a_", "b", "a___b"));
        let only = View::of(&rule(Some(&["a___*"]), &[]), &sources, &me);
        assert!(only.visible("a_", "b", "a___b"));
        assert!(
            !only.visible("a", "_b", "a___b"),
            "a's pair, whatever its spelling"
        );
        assert!(!only.visible("a", "_b", "a__b-0f0f0f0f"));
        assert!(!only.visible("a", "b__echo", "a__b__echo"));
        // A bound pattern's rest also matches the exposed name after the prefix (a rewritten
        // or hashed name, as the client sees it), for that source only.
        let sources: Vec<String> = ["s", "t"].map(String::from).to_vec();
        let v = View::of(&rule(None, &["s__files_read-*"]), &sources, &me);
        assert!(!v.visible("s", "files.read", "s__files_read-1234abcd"));
        assert!(v.visible("t", "files.read", "s__files_read-1234abcd"));
        // Unbound: `SOURCE__NAME` of the pair, or the exposed name.
        let v = View::of(&rule(None, &["*__delete_*"]), &sources, &me);
        assert!(!v.visible("s", "delete_x", "s__delete_x"));
        assert!(!v.visible("t", "delete.x", "t__delete_x-1234abcd"));
        assert!(v.visible("t", "deleted", "t__deleted"));
        let v = View::of(&rule(Some(&["*"]), &[]), &sources, &me);
        assert!(v.visible("t", "x", "t__x"));
    }

    proptest! {
        /// Issue 47 §3: `S__*` hides exactly source S's pairs, whatever the names are.
        #[test]
        fn a_sources_prefix_star_hides_its_pairs_and_no_other_sources(
            sources in proptest::collection::vec("[a_]{1,4}", 1..5),
            pairs in proptest::collection::vec((0usize..5, "[ab_]{0,5}"), 0..12),
            which in 0usize..5,
        ) {
            let mut ss: Vec<String> = Vec::new();
            for s in sources {
                if !s.contains("__") && !ss.contains(&s) {
                    ss.push(s);
                }
            }
            prop_assume!(!ss.is_empty());
            let target = ss[which % ss.len()].clone();
            let pattern = format!("{target}__*");
            let v = View::of(&rule(None, &[&pattern]), &ss, &peer(1001, true));
            for (i, name) in pairs {
                let source = &ss[i % ss.len()];
                let plain = format!("{source}__{name}");
                prop_assert_eq!(v.visible(source, &name, &plain), *source != target, "{} {}", source, name);
            }
        }

        #[test]
        fn glob_never_panics_and_star_matches_everything(p in "[a-z*?_]{0,20}", t in "\\PC{0,40}") {
            let _ = glob(&p, &t);
            prop_assert!(glob("*", &t));
            prop_assert!(glob(&t.replace(['*', '?'], "_"), &t.replace(['*', '?'], "_")));
        }
    }
}
