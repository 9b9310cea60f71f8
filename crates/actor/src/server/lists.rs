//! The list cache: the last result of each list method (`tools/list`, `prompts/list`,
//! `resources/list`, `resources/templates/list`) without a cursor, kept across restarts and
//! outages (issue 5 §3-4), and the later pages clients read with a cursor (issue 31: while a
//! server is down, discovery pages the same). The outage answers and the restart comparison
//! read it; an on-demand server's record saves the first pages.
//!
//! Owns the cache alone; never forwards and never answers a client itself.

use serde_json::Value;
use std::collections::BTreeMap;

/// Later pages kept per list method; beyond, the oldest is forgotten.
pub(super) const MAX_PAGES: usize = 64;

/// Cursors longer than this (bytes) are not kept.
pub(super) const MAX_CURSOR: usize = 4096;

/// The last list results, by method.
#[derive(Debug, Default)]
pub(super) struct ListCache {
    lists: BTreeMap<&'static str, Value>,
    /// Later pages by method: (cursor, result), oldest first.
    pages: BTreeMap<&'static str, Vec<(Box<str>, Value)>>,
}

impl ListCache {
    /// The last result of `method`.
    pub(super) fn get(&self, method: &str) -> Option<&Value> {
        self.lists.get(method)
    }

    /// Stores `value` as the result of `method`; returns whether it differs from the last.
    /// When it does, the later pages read before are forgotten (their cursors were the old
    /// list's).
    pub(super) fn store(&mut self, method: &'static str, value: Value) -> bool {
        if self.lists.get(method) == Some(&value) {
            return false;
        }
        self.lists.insert(method, value);
        self.pages.remove(method);
        true
    }

    /// The page of `method` read with `cursor`.
    pub(super) fn page(&self, method: &str, cursor: &str) -> Option<&Value> {
        self.pages
            .get(method)?
            .iter()
            .find(|(c, _)| &**c == cursor)
            .map(|(_, v)| v)
    }

    /// Stores `value` as the page of `method` read with `cursor`, when that cursor is one the
    /// child gave (the `nextCursor` of the cached first page or of a cached page): a client's
    /// made-up cursors are never kept. At most [`MAX_PAGES`] per method: the oldest goes.
    pub(super) fn store_page(&mut self, method: &'static str, cursor: Box<str>, value: Value) {
        let next = |v: &Value| v.get("nextCursor").and_then(Value::as_str) == Some(&*cursor);
        let given = self.lists.get(method).is_some_and(next)
            || self
                .pages
                .get(method)
                .is_some_and(|p| p.iter().any(|(_, v)| next(v)));
        if !given {
            return;
        }
        let pages = self.pages.entry(method).or_default();
        pages.retain(|(c, _)| *c != cursor);
        if pages.len() >= MAX_PAGES {
            pages.remove(0);
        }
        pages.push((cursor, value));
    }

    /// The methods with a result.
    pub(super) fn methods(&self) -> Vec<&'static str> {
        self.lists.keys().copied().collect()
    }

    /// Every result (the record saves them).
    pub(super) fn all(&self) -> &BTreeMap<&'static str, Value> {
        &self.lists
    }

    /// Replaces the cache with a saved record's lists.
    pub(super) fn restore(&mut self, lists: BTreeMap<&'static str, Value>) {
        self.lists = lists;
        self.pages.clear();
    }

    /// Forgets every result (a new command).
    pub(super) fn clear(&mut self) {
        self.lists.clear();
        self.pages.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn later_pages_are_kept_bounded_and_forgotten_when_the_first_changes() {
        let mut c = ListCache::default();
        c.store("tools/list", json!({"tools": [1], "nextCursor": "a"}));
        c.store_page(
            "tools/list",
            "a".into(),
            json!({"tools": [2], "nextCursor": "b"}),
        );
        c.store_page("tools/list", "b".into(), json!({"tools": [3]}));
        assert_eq!(c.page("tools/list", "b"), Some(&json!({"tools": [3]})));
        // A cursor the child never gave is not kept.
        c.store_page("tools/list", "made-up".into(), json!({"tools": [4]}));
        assert_eq!(c.page("tools/list", "made-up"), None);
        // The same first page: kept.
        assert!(!c.store("tools/list", json!({"tools": [1], "nextCursor": "a"})));
        assert!(c.page("tools/list", "a").is_some());
        // A new first page: the old cursors' pages go.
        assert!(c.store("tools/list", json!({"tools": [9], "nextCursor": "0"})));
        assert_eq!(c.page("tools/list", "a"), None);
        for i in 0..MAX_PAGES + 5 {
            c.store_page(
                "tools/list",
                i.to_string().into(),
                json!({"n": i, "nextCursor": (i + 1).to_string()}),
            );
        }
        assert_eq!(c.page("tools/list", "0"), None);
        let last = MAX_PAGES + 4;
        assert_eq!(
            c.page("tools/list", &last.to_string())
                .map(|v| v["n"].clone()),
            Some(json!(last))
        );
    }
}
