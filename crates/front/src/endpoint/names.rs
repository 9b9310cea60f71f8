//! Exposed names (issue 31 §2): a source's tool or prompt `NAME` is offered by an endpoint as
//! `SOURCE__NAME`, within the strictest common client rule for tool names,
//! `^[a-zA-Z0-9_-]{1,64}$` ([`support::config::NAME_MAX`]).
//!
//! Owns: the one function from (source, name) to an exposed name, and the rule that says
//! which source a spelling belongs to ([`owner`], issue 47 §3): the longest configured source
//! `S` such that it starts with `S__`. Server names never contain `__` (a configuration error
//! when the server is an endpoint's source), so the only other way two sources spell the same
//! prefix is a `_` next to the separator (`a` + `_b` and `a_` + `b` both give `a___b`): a name
//! whose plain form another source owns gets [`claimed`], which always decodes to its own
//! source. Routing never splits an exposed name on the separator: it looks the name up in the
//! table built from the sources' lists (`catalog.rs`); policy patterns bind to sources by the
//! same [`owner`] rule (`policy.rs`).

use sha2::{Digest, Sha256};
use support::config::NAME_MAX;

/// Between the source's name and the tool's.
pub const SEPARATOR: &str = "__";

/// Hex digits of the hash a shortened or rewritten name ends with.
const HASH_DIGITS: usize = 8;

/// The name `source`'s tool or prompt `name` is offered under: `source__name` when that is
/// at most [`NAME_MAX`] characters of `[a-zA-Z0-9_-]`. Otherwise every other character becomes
/// `_`, the result is cut to leave room, and `-` plus the first [`HASH_DIGITS`] hex digits of
/// SHA-256(`source` NUL `name`) are appended: deterministic, so the name is the same after a
/// restart of the source or of the supervisor, and different for different originals.
pub fn exposed(source: &str, name: &str) -> String {
    let mut out = String::with_capacity(source.len() + SEPARATOR.len() + name.len());
    out.push_str(source);
    out.push_str(SEPARATOR);
    let mut rewritten = false;
    for c in name.chars() {
        if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
            out.push(c);
        } else {
            out.push('_');
            rewritten = true;
        }
    }
    if !rewritten && out.len() <= NAME_MAX && !name.is_empty() {
        return out;
    }
    hashed(&out, source, name)
}

/// `base` (ASCII) cut to leave room for `-` and the hash of (`source`, `name`), then those.
fn hashed(base: &str, source: &str, name: &str) -> String {
    let mut h = Sha256::new();
    h.update(source.as_bytes());
    h.update([0u8]);
    h.update(name.as_bytes());
    let keep = NAME_MAX - 1 - HASH_DIGITS;
    let cut = base.get(..keep.min(base.len())).unwrap_or(base);
    format!("{cut}-{}", hex(&h.finalize()))
}

/// The source the spelling `text` (an exposed name, or a policy pattern) belongs to (issue 47
/// §3): the longest of `sources` such that `text` starts with `SOURCE__`, and the rest after
/// that separator; `None` when no source's prefix starts it.
pub fn owner<'a, 't, I>(sources: I, text: &'t str) -> Option<(&'a str, &'t str)>
where
    I: IntoIterator<Item = &'a String>,
{
    let mut best: Option<(&'a str, &'t str)> = None;
    for s in sources {
        let Some(rest) = text
            .strip_prefix(s.as_str())
            .and_then(|r| r.strip_prefix(SEPARATOR))
        else {
            continue;
        };
        if best.is_none_or(|(b, _)| s.len() > b.len()) {
            best = Some((s.as_str(), rest));
        }
    }
    best
}

/// The exposed name of `source`'s `name` when its plain form ([`exposed`]) belongs to another
/// source by [`owner`], is another item's, or is reserved (issue 47 §3). `attempt` (0, 1, …)
/// picks another hash when the previous attempt was taken too.
///
/// Shape: `SOURCE__REST-HHHHHHHH`, at most [`NAME_MAX`] characters, where REST is `name` with
/// every character outside `[a-zA-Z0-9_-]` made `_` and its leading `_` removed, cut to leave
/// room, and H the first [`HASH_DIGITS`] hex digits of SHA-256(`source` NUL `name`) (attempt
/// 0) or SHA-256(`source` NUL `name` NUL `attempt`). The character after `SOURCE__` is never
/// `_`, so no longer source can own it: a longer source `T` owning it would start with
/// `SOURCE` and make the text start with `T__`; `T` = `SOURCE_` needs that `_`, and any longer
/// `T` would hold `__` itself, which configuration refuses. A `source` too long to leave room
/// for `SOURCE__` and the hash (over [`NAME_MAX`] - 3 - [`HASH_DIGITS`] characters) gets its
/// own name cut, its trailing `_` removed, then `-HHHHHHHH`: a name without `__`, which no
/// source owns (its `_meta` still names the source).
pub fn claimed(source: &str, name: &str, attempt: u32) -> String {
    let room = NAME_MAX - 1 - HASH_DIGITS;
    let mut base = String::with_capacity(room);
    if source.len() + SEPARATOR.len() <= room {
        base.push_str(source);
        base.push_str(SEPARATOR);
        let rest = name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .skip_while(|c| *c == '_');
        for c in rest {
            if base.len() >= room {
                break;
            }
            base.push(c);
        }
    } else {
        base.extend(source.chars().take(room));
        while base.ends_with('_') {
            base.pop();
        }
    }
    let mut h = Sha256::new();
    h.update(source.as_bytes());
    h.update([0u8]);
    h.update(name.as_bytes());
    if attempt > 0 {
        h.update([0u8]);
        h.update(attempt.to_string().as_bytes());
    }
    format!("{base}-{}", hex(&h.finalize()))
}

fn hex(digest: &[u8]) -> String {
    digest
        .iter()
        .take(HASH_DIGITS / 2)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Whether `name` passes the strict client rule `^[a-zA-Z0-9_-]{1,64}$`.
pub fn is_portable(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= NAME_MAX
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_short_plain_name_gets_the_prefix_only() {
        assert_eq!(exposed("github", "search"), "github__search");
        assert_eq!(exposed("my-db_2", "run_query"), "my-db_2__run_query");
    }

    #[test]
    fn a_long_name_is_cut_with_a_stable_hash() {
        let long = "a".repeat(100);
        let e = exposed("src", &long);
        assert_eq!(e.len(), NAME_MAX);
        assert!(is_portable(&e));
        assert_eq!(e, exposed("src", &long), "deterministic");
        assert_ne!(e, exposed("src", &format!("{long}b")), "distinct");
    }

    #[test]
    fn other_characters_are_replaced_and_hashed_so_two_spellings_stay_apart() {
        let a = exposed("s", "files.read");
        let b = exposed("s", "files/read");
        assert!(is_portable(&a) && is_portable(&b));
        assert!(a.starts_with("s__files_read-"), "{a}");
        assert_ne!(a, b);
        assert_ne!(a, exposed("s", "files_read"));
    }

    proptest! {
        #[test]
        fn every_exposed_name_is_portable_and_deterministic(
            source in "[a-z0-9_-]{1,60}",
            name in "\\PC{0,80}",
        ) {
            let e = exposed(&source, &name);
            prop_assert!(is_portable(&e), "{e}");
            prop_assert_eq!(e.clone(), exposed(&source, &name));
        }
    }
}
