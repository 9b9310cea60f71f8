//! Who sees and may call what through an endpoint (issue 31 §5): the endpoint's `hide`
//! patterns for everyone, and the rules of each client identity the peer is.
//!
//! Owns: pattern matching and the per-client [`View`]. Patterns match the exposed name
//! (`SOURCE__NAME`); `*` matches any run of characters, `?` one; deny wins over allow.

use crate::config::{HiddenCalls, Policy};
use crate::mux::session::Peer;

/// What one client may see and call.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct View {
    hide: Vec<String>,
    /// `None`: everything not hidden; else only what one of these matches.
    allow: Option<Vec<String>>,
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
    /// when any sets one.
    pub fn of(policy: &Policy, peer: &Peer) -> View {
        let mut hide = policy.hide.clone();
        let mut allow: Option<Vec<String>> = None;
        let mut labels = Vec::new();
        let unix = peer.pid.is_some();
        for (label, rule) in &policy.clients {
            let by_token = rule.token && peer.label == Some(label_id(label));
            let me = by_token
                || (unix && (rule.uids.contains(&peer.uid) || rule.gids.contains(&peer.gid)));
            if !me {
                continue;
            }
            labels.push(label.clone());
            hide.extend(rule.hide.iter().cloned());
            if let Some(a) = &rule.allow {
                allow.get_or_insert_with(Vec::new).extend(a.iter().cloned());
            }
        }
        View {
            hide,
            allow,
            hidden_calls: policy.hidden_calls,
            labels,
        }
    }

    /// Whether exposed name `name` is visible (and callable).
    pub fn visible(&self, name: &str) -> bool {
        if self.hide.iter().any(|p| glob(p, name)) {
            return false;
        }
        match &self.allow {
            None => true,
            Some(a) => a.iter().any(|p| glob(p, name)),
        }
    }
}

/// The id a named token's label travels under in a [`Peer`]: the first 8 bytes of its
/// SHA-256 (a `Peer` stays `Copy`; labels are the operator's, so no collision is sought).
pub fn label_id(label: &str) -> u64 {
    use sha2::{Digest, Sha256};
    let d = Sha256::digest(label.as_bytes());
    let mut b = [0u8; 8];
    for (o, i) in b.iter_mut().zip(d.iter()) {
        *o = *i;
    }
    u64::from_be_bytes(b)
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
    use crate::config::ClientRule;
    use proptest::prelude::*;

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
        let alice = View::of(&policy, &peer(1001, true));
        assert_eq!(alice.labels, ["alice"]);
        assert!(alice.visible("files__read"));
        assert!(!alice.visible("db__write"));
        assert!(!alice.visible("files__drop_all"));
        assert!(!alice.visible("github__search"));
        let bob = View::of(&policy, &peer(1002, true));
        assert!(bob.visible("github__search"));
        assert!(!bob.visible("x__drop_y"));
        // Over TCP the peer is the supervisor's own uid: no identity by uid.
        let tcp = View::of(&policy, &peer(1001, false));
        assert!(tcp.labels.is_empty());
    }

    proptest! {
        #[test]
        fn glob_never_panics_and_star_matches_everything(p in "[a-z*?_]{0,20}", t in "\\PC{0,40}") {
            let _ = glob(&p, &t);
            prop_assert!(glob("*", &t));
            prop_assert!(glob(&t.replace(['*', '?'], "_"), &t.replace(['*', '?'], "_")));
        }
    }
}
