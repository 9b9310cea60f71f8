//! Exposed names (issue 31 §2): a source's tool or prompt `NAME` is offered by an endpoint as
//! `SOURCE__NAME`, within the strictest common client rule for tool names,
//! `^[a-zA-Z0-9_-]{1,64}$` ([`crate::config::NAME_MAX`]).
//!
//! Owns: the one function from (source, name) to an exposed name. Routing never splits an
//! exposed name on the separator (server names contain `_` and `-`): it looks the name up in
//! the table built from the sources' lists (`catalog.rs`).

use crate::config::NAME_MAX;
use sha2::{Digest, Sha256};

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
pub fn hashed(base: &str, source: &str, name: &str) -> String {
    let mut h = Sha256::new();
    h.update(source.as_bytes());
    h.update([0u8]);
    h.update(name.as_bytes());
    let digest = h.finalize();
    let hex: String = digest
        .iter()
        .take(HASH_DIGITS / 2)
        .map(|b| format!("{b:02x}"))
        .collect();
    let keep = NAME_MAX - 1 - HASH_DIGITS;
    let cut = base.get(..keep.min(base.len())).unwrap_or(base);
    format!("{cut}-{hex}")
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
