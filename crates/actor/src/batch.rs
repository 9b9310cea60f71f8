//! JSON-RPC batches from a client, answered as one array (JSON-RPC 2.0 §6; issue 13 Why 4).
//!
//! The handshake revisions 2024-11-05 and 2025-03-26 allow a client to send an array of
//! requests and notifications on one line; the answer is one array holding a response for
//! every request (and an error for every invalid member), in any order, and nothing when the
//! batch held only notifications. The members go to the actor one by one as always; this
//! table, shared by a connection's reader (which opens a group per batch line) and its writer
//! (which offers it every outgoing line), holds the group's responses until the last one is
//! in, then hands back the array. Sans-IO: no clock, no sockets.
//!
//! A member that will never be answered must not hold the others forever: a client's
//! `notifications/cancelled` for a member (MCP: a cancelled request gets no response) takes it
//! out of its group.

use crate::ids::id_key;
use bytes::{BufMut, Bytes, BytesMut};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use vocab::jsonrpc::framing::Line;
use vocab::jsonrpc::message;

/// One batch line waiting for its responses.
#[derive(Debug, Default)]
struct Group {
    /// Request id keys (canonical text, [`id_key`]) not answered yet, with multiplicity (a
    /// duplicate id in one batch is answered twice: once with the K23 refusal).
    waiting: HashMap<String, usize>,
    /// Responses collected, without their newline.
    parts: Vec<Bytes>,
    /// Bytes of `parts` that were counted in the client's queue when delivered.
    counted: usize,
}

/// What the writer does with an outgoing line.
#[derive(Debug, PartialEq, Eq)]
pub enum Offer {
    /// Not a batch member's response: write it as it is.
    Pass(Line),
    /// Held for its batch.
    Held,
    /// The batch is complete: write this array line; `counted` bytes of the client's queue
    /// accounting are released with it.
    Complete {
        /// The whole answer, `[r1,r2,..]\n`.
        line: Line,
        /// Queue bytes the held responses were counted as.
        counted: usize,
    },
}

/// The open batch groups of one connection.
#[derive(Debug, Default)]
pub struct Batches {
    groups: Vec<Group>,
}

impl Batches {
    /// Whether no batch is waiting (the writer's fast path: no line is parsed then).
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// Opens a group for a batch line with requests `ids` (raw id texts) and the error lines
    /// `rejected` for its invalid members (not counted in the queue). Returns the array line
    /// at once when there is no request to wait for but there are errors; `None` otherwise
    /// (nothing to write now).
    pub fn open(&mut self, ids: &[String], rejected: Vec<Bytes>) -> Option<Bytes> {
        let mut g = Group::default();
        for id in ids {
            *g.waiting.entry(id.clone()).or_default() += 1;
        }
        g.parts = rejected.into_iter().map(trim_newline).collect();
        if g.waiting.is_empty() {
            return (!g.parts.is_empty()).then(|| array(&g.parts));
        }
        self.groups.push(g);
        None
    }

    /// A client cancelled request `id` (raw text): its group stops waiting for it. Returns a
    /// completed array line, if that was the last one awaited.
    pub fn cancelled(&mut self, id: &str) -> Option<(Bytes, usize)> {
        let i = self
            .groups
            .iter()
            .position(|g| g.waiting.contains_key(id))?;
        let g = self.groups.get_mut(i)?;
        take_one(&mut g.waiting, id);
        self.complete(i)
    }

    /// Offers an outgoing line (one JSON-RPC message and its newline).
    pub fn offer(&mut self, line: Line) -> Offer {
        if self.groups.is_empty() {
            return Offer::Pass(line);
        }
        // While a batch is open, lines are looked at whole (a copy only for a spliced line).
        let line = line.to_bytes();
        let key = match message::parse_shared(&line) {
            Ok(m) if m.method.is_none() => m.id.as_deref().map(id_key),
            _ => None,
        };
        let Some(key) = key else {
            return Offer::Pass(line.into());
        };
        let Some(i) = self
            .groups
            .iter()
            .position(|g| g.waiting.contains_key(&key))
        else {
            return Offer::Pass(line.into());
        };
        let Some(g) = self.groups.get_mut(i) else {
            return Offer::Pass(line.into());
        };
        take_one(&mut g.waiting, &key);
        g.counted += line.len();
        g.parts.push(trim_newline(line));
        match self.complete(i) {
            Some((line, counted)) => Offer::Complete {
                line: line.into(),
                counted,
            },
            None => Offer::Held,
        }
    }

    /// Removes group `i` when it waits for nothing more; its array and counted bytes.
    fn complete(&mut self, i: usize) -> Option<(Bytes, usize)> {
        if !self.groups.get(i)?.waiting.is_empty() {
            return None;
        }
        let g = self.groups.remove(i);
        if g.parts.is_empty() {
            return None;
        }
        Some((array(&g.parts), g.counted))
    }
}

/// [`Batches`] shared by a connection's reader and writer. The writer's common case (no batch
/// open) costs one atomic load per line and takes no lock.
#[derive(Debug, Default)]
pub struct SharedBatches {
    /// Whether any group is open; written under the lock, read without it. The reader sets it
    /// before it hands a batch's members to the actor, so the writer sees it before any of
    /// their responses (the actor's channels order the two).
    any: AtomicBool,
    inner: Mutex<Batches>,
}

impl SharedBatches {
    fn lock(&self) -> MutexGuard<'_, Batches> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// [`Batches::open`].
    pub fn open(&self, ids: &[String], rejected: Vec<Bytes>) -> Option<Bytes> {
        let mut b = self.lock();
        let now = b.open(ids, rejected);
        self.any.store(!b.is_empty(), Ordering::Release);
        now
    }

    /// [`Batches::cancelled`].
    pub fn cancelled(&self, id: &str) -> Option<(Bytes, usize)> {
        if !self.any.load(Ordering::Acquire) {
            return None;
        }
        let mut b = self.lock();
        let done = b.cancelled(id);
        self.any.store(!b.is_empty(), Ordering::Release);
        done
    }

    /// [`Batches::offer`], without a lock while no batch is open.
    pub fn offer(&self, line: Line) -> Offer {
        if !self.any.load(Ordering::Acquire) {
            return Offer::Pass(line);
        }
        let mut b = self.lock();
        let offer = b.offer(line);
        self.any.store(!b.is_empty(), Ordering::Release);
        offer
    }
}

fn take_one(waiting: &mut HashMap<String, usize>, key: &str) {
    if let Some(n) = waiting.get_mut(key) {
        *n -= 1;
        if *n == 0 {
            waiting.remove(key);
        }
    }
}

fn trim_newline(line: Bytes) -> Bytes {
    let end = line.len() - usize::from(line.ends_with(b"\n"));
    line.slice(..end)
}

/// `[a,b,..]\n`.
fn array(parts: &[Bytes]) -> Bytes {
    let len = parts.iter().map(Bytes::len).sum::<usize>() + parts.len() + 2;
    let mut out = BytesMut::with_capacity(len);
    out.put_u8(b'[');
    for (i, p) in parts.iter().enumerate() {
        if i > 0 {
            out.put_u8(b',');
        }
        out.put_slice(p);
    }
    out.put_slice(b"]\n");
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(s: &str) -> Line {
        Bytes::from(format!("{s}\n")).into()
    }

    #[test]
    fn responses_are_held_until_the_last_then_written_as_one_array() {
        let mut b = Batches::default();
        assert_eq!(b.open(&["1".into(), "\"a\"".into()], Vec::new()), None);
        let other = line(r#"{"jsonrpc":"2.0","id":9,"result":{}}"#);
        assert_eq!(b.offer(other.clone()), Offer::Pass(other));
        let note = line(r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{}}"#);
        assert_eq!(b.offer(note.clone()), Offer::Pass(note));
        let r1 = line(r#"{"jsonrpc":"2.0","id":"a","result":{}}"#);
        assert_eq!(b.offer(r1.clone()), Offer::Held);
        let r2 = line(r#"{"jsonrpc":"2.0","id":1,"error":{"code":-1,"message":"x"}}"#);
        let len = r1.len() + r2.len();
        let Offer::Complete { line: out, counted } = b.offer(r2) else {
            panic!("not complete");
        };
        let out = out.to_bytes();
        assert_eq!(counted, len);
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v.as_array().map(Vec::len), Some(2));
        assert!(out.ends_with(b"]\n") && !out[..out.len() - 1].contains(&b'\n'));
        assert!(b.is_empty());
    }

    #[test]
    fn invalid_members_are_in_the_array_and_a_batch_of_errors_is_answered_at_once() {
        let mut b = Batches::default();
        let err = line(r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"x"}}"#);
        let err = err.to_bytes();
        let out = b.open(&[], vec![err.clone()]).unwrap();
        assert_eq!(out, array(&[trim_newline(err)]));
        assert_eq!(b.open(&[], Vec::new()), None, "notifications only: nothing");
    }

    #[test]
    fn a_cancelled_member_does_not_hold_the_others() {
        let mut b = Batches::default();
        b.open(&["1".into(), "2".into()], Vec::new());
        assert_eq!(
            b.offer(line(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#)),
            Offer::Held
        );
        let (out, _) = b.cancelled("2").unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v[0]["id"], 1);
        assert!(b.is_empty());
    }

    #[test]
    fn the_shared_table_passes_lines_while_no_batch_is_open() {
        let b = SharedBatches::default();
        let r = line(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#);
        assert_eq!(b.offer(r.clone()), Offer::Pass(r.clone()));
        b.open(&["1".into()], Vec::new());
        assert!(matches!(b.offer(r.clone()), Offer::Complete { .. }));
        assert_eq!(
            b.offer(r.clone()),
            Offer::Pass(r),
            "closed again once complete"
        );
    }

    #[test]
    fn duplicate_ids_in_one_batch_wait_for_both_answers() {
        let mut b = Batches::default();
        b.open(&["7".into(), "7".into()], Vec::new());
        let r = line(r#"{"jsonrpc":"2.0","id":7,"result":{}}"#);
        assert_eq!(b.offer(r.clone()), Offer::Held);
        assert!(matches!(b.offer(r), Offer::Complete { .. }));
    }
}
