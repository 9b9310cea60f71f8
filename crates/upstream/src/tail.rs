//! The stderr tail: the last bytes an instance wrote about itself (a child's stderr, a remote
//! session's notes), shared with status and outage records.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// Bytes of stderr kept as the "stderr tail" (issue 2 §3).
pub const STDERR_TAIL: usize = 64 * 1024;

/// The last [`STDERR_TAIL`] bytes a child wrote to stderr, shared with status and errors.
#[derive(Debug, Default, Clone)]
pub struct StderrTail(Arc<Mutex<VecDeque<u8>>>);

impl StderrTail {
    /// Adds what the instance wrote (the oldest bytes beyond [`STDERR_TAIL`] go).
    pub fn push(&self, bytes: &[u8]) {
        let mut t = self.0.lock().unwrap_or_else(|p| p.into_inner());
        t.extend(bytes);
        let excess = t.len().saturating_sub(STDERR_TAIL);
        t.drain(..excess);
    }

    /// Adds a line of the supervisor's own (a spawn error, which has no stderr).
    pub fn note(&self, line: &str) {
        self.push(format!("{line}\n").as_bytes());
    }

    /// The tail as text (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        let t = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let (a, b) = t.as_slices();
        let mut v = Vec::with_capacity(t.len());
        v.extend_from_slice(a);
        v.extend_from_slice(b);
        String::from_utf8_lossy(&v).into_owned()
    }

    /// The last `n` non-empty lines, joined by `\n`.
    pub fn last_lines(&self, n: usize) -> String {
        let text = self.text();
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        let from = lines.len().saturating_sub(n);
        lines.get(from..).unwrap_or_default().join("\n")
    }

    /// Forgets everything (a new instance starts with a fresh tail).
    pub fn clear(&self) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }
}
