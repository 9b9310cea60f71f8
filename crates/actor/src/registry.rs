//! The servers and endpoints currently configured, by name, and each one's actor: written by
//! the daemon's main loop (start-up, reload), read by control connections, the HTTP front and
//! the `STATUS=` task. Every change moves the change signal (`observe::changed`).

use crate::server::ServerHandle;
use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use support::config::ServerConfig;

/// A running server as the control socket sees it.
#[derive(Debug, Clone)]
pub struct Entry {
    /// The actor.
    pub handle: ServerHandle,
    /// Its current configuration (for the wait budgets). For an endpoint, what faces its
    /// clients (its `http`, token file and client limits).
    pub cfg: Arc<ServerConfig>,
    /// For an endpoint (issue 31): its sources, in order. `None` for a server.
    pub sources: Option<Vec<String>>,
    /// Its client seats (issue 47 §4), which `status` shows by holder.
    pub seats: Option<Arc<crate::seats::Seats>>,
}

/// The servers currently configured, by name. Written by the daemon's main loop (start-up,
/// reload), read by control connections and the `STATUS=` task.
#[derive(Debug, Clone, Default)]
pub struct Registry(Arc<RwLock<BTreeMap<String, Entry>>>);

impl Registry {
    /// Adds or replaces a server.
    pub fn insert(&self, name: &str, entry: Entry) {
        self.0
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_string(), entry);
        support::observe::changed();
    }

    /// Removes a server.
    pub fn remove(&self, name: &str) -> Option<Entry> {
        let gone = self
            .0
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(name);
        support::observe::changed();
        gone
    }

    /// One server.
    pub fn get(&self, name: &str) -> Option<Entry> {
        self.0
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
    }

    /// Every server and endpoint, in name order.
    pub fn all(&self) -> Vec<(String, Entry)> {
        self.0
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}
