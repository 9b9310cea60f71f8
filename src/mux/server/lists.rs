//! The list cache: the last result of each list method (`tools/list`, `prompts/list`,
//! `resources/list`, `resources/templates/list`) without a cursor, kept across restarts and
//! outages (issue 5 §3-4). The outage answers and the restart comparison read it; an
//! on-demand server's record saves it.
//!
//! Owns the cache alone; never forwards and never answers a client itself.

use serde_json::Value;
use std::collections::BTreeMap;

/// The last list results, by method.
#[derive(Debug, Default)]
pub(super) struct ListCache {
    lists: BTreeMap<&'static str, Value>,
}

impl ListCache {
    /// The last result of `method`.
    pub(super) fn get(&self, method: &str) -> Option<&Value> {
        self.lists.get(method)
    }

    /// Whether `method` has a result.
    pub(super) fn has(&self, method: &str) -> bool {
        self.lists.contains_key(method)
    }

    /// Stores `value` as the result of `method`; returns whether it differs from the last.
    pub(super) fn store(&mut self, method: &'static str, value: Value) -> bool {
        if self.lists.get(method) == Some(&value) {
            return false;
        }
        self.lists.insert(method, value);
        true
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
    }

    /// Forgets every result (a new command).
    pub(super) fn clear(&mut self) {
        self.lists.clear();
    }
}
