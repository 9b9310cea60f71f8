//! Children kept in systemd's file descriptor store (issue 32 §2): when the supervisor's main
//! process crashes under systemd, its children go on running (the unit's `KillMode=process`)
//! and the next run re-adopts them from the store instead of starting them again.
//!
//! Owns: the store's entries of each running stdio instance and their names,
//! `child.NAME.I.stdin`, `child.NAME.I.stdout`, `child.NAME.I.stderr` (dups of our ends of
//! its pipes) and `child.NAME.I.record` (a memfd holding the instance's [`Stored`] record as
//! JSON, rewritten in place when the session's handshake or lists change; systemd holds the
//! same open file, so the next run reads the last version). `I` is `N-TOKEN` from the
//! instance's marker (`reaper::marker`, `TOKEN:N:NAME`), unique across runs, so an old
//! instance still stopping never removes a newer one's entries. `FDNAME` may not hold `:`, the separator of
//! `LISTEN_FDNAMES`; server names are `[a-z0-9_-]+`, so the dots are unambiguous.
//!
//! The store is used only when systemd says it has one (`FDSTORE=N`, systemd 254 and later,
//! from `FileDescriptorStoreMax=N`) and `NOTIFY_SOCKET` is set ([`enable`]). Entries are sent
//! with `FDSTORE=1` and `FDNAME=`, removed with `FDSTOREREMOVE=1` (systemd 236) before the
//! instance's stdin is closed (else the store's copy keeps the pipe open and the child never
//! sees end of input), when it ends, and when it is handed over to the next image across an
//! upgrade in place (the next image publishes the instances it adopts again; one left out of
//! the record sees end of input at the exec). A run that finds entries it does not re-adopt
//! removes them ([`forget`]).
//!
//! The record's shape (version 1): `{"version":1,"server":NAME,"generation":N,"pid":N,
//! "marker":"TOKEN:N:NAME","since":TICKS,"session":null|{"handshake":{mux::record shape},
//! "log_level":N|null}}`. At start, [`collect`] takes every `child.` entry from what systemd
//! passed and [`Stored::check`] proves the pid is still that instance (running, same start
//! time, its environment carries the marker); whatever fails is closed with a log line and
//! its process is ended as any leftover of a crashed run (`reaper::end_previous_run`).

use base::systemd::Notifier;
use serde_json::{json, Value};
use std::io::{Seek, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::OnceLock;
use tracing::warn;

/// The first part of every name this module stores.
pub const PREFIX: &str = "child.";
/// The record's format version.
const VERSION: u64 = 1;
/// Longest record read back (a handshake with its lists' first pages).
const RECORD_MAX: u64 = 16 * 1024 * 1024;
/// The parts of one instance's entry, in the order they are sent.
const PARTS: [&str; 4] = ["stdin", "stdout", "stderr", "record"];

static STORE: OnceLock<Notifier> = OnceLock::new();

/// Turns the store on for this process: `notifier` reaches systemd and systemd said it keeps
/// descriptors (`FDSTORE` above 0). Call once, before any child starts.
pub fn enable(notifier: Notifier) {
    if notifier.enabled() {
        let _ = STORE.set(notifier);
    }
}

/// Whether running instances are kept in the store.
pub fn enabled() -> bool {
    STORE.get().is_some()
}

fn name(key: &str, part: &str) -> String {
    format!("{PREFIX}{key}.{part}")
}

/// Removes every entry of instance `key` (`NAME.N-TOKEN`) from the store (harmless when there is
/// none). A full manager queue (`EAGAIN`: the socket never blocks) is retried for up to
/// 10 ms, then logged: the store's copy of stdin then delays the child's end of input until
/// its stop ladder's SIGTERM.
fn remove_all(store: &Notifier, key: &str) {
    for part in PARTS {
        let n = name(key, part);
        let line = format!("FDNAME={n}");
        let mut tries = 0;
        loop {
            match store.send_with_fds(&["FDSTOREREMOVE=1", &line], &[]) {
                Ok(()) => break,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && tries < 10 => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                Err(e) => {
                    warn!(entry = %n, error = %e, "cannot take a child's entry out of systemd's file descriptor store");
                    break;
                }
            }
        }
    }
}

/// Takes the entries of a stored instance this run does not re-adopt out of the store.
pub fn forget(s: &Stored) {
    if let Some(store) = STORE.get() {
        remove_all(store, &s.key);
    }
}

/// One running instance's entries in the store. Dropping it removes them, unless
/// [`Kept::keep`] was called (a hand-over to the next image).
#[derive(Debug)]
pub struct Kept {
    server: String,
    /// `NAME.N-TOKEN`: what its names are made of.
    key: String,
    record: std::fs::File,
    head: Value,
    session: Value,
    /// Removed already.
    done: bool,
}

impl Kept {
    /// Stores instance `generation` of `server` (pid, marker, start time in clock ticks, our
    /// ends of its stdin, stdout and stderr), replacing the entries of the same instance if
    /// there are any (an upgrade's previous image left them).
    /// `None` when the store is off, or when systemd could not be sent the descriptors
    /// (logged; the instance runs on, and a crash of the supervisor then ends it).
    pub fn publish(
        server: &str,
        generation: u64,
        pid: u32,
        marker: &str,
        since: u64,
        pipes: [BorrowedFd<'_>; 3],
    ) -> Option<Kept> {
        let store = STORE.get()?;
        let made = rustix::fs::memfd_create(
            "mcp-supervisor-child",
            rustix::fs::MemfdFlags::CLOEXEC | rustix::fs::MemfdFlags::ALLOW_SEALING,
        );
        let record = match made {
            Ok(fd) => std::fs::File::from(fd),
            Err(e) => {
                warn!(server, error = %e, "cannot make the record for systemd's file descriptor store; this child will not outlive a crash of the supervisor");
                return None;
            }
        };
        let mut parts = marker.splitn(3, ':');
        let (token, n) = (parts.next().unwrap_or("0"), parts.next().unwrap_or("0"));
        let mut kept = Kept {
            server: server.to_string(),
            key: format!("{server}.{n}-{token}"),
            record,
            head: json!({"version": VERSION, "server": server, "generation": generation,
                "pid": pid, "marker": marker, "since": since}),
            session: Value::Null,
            done: false,
        };
        kept.write();
        remove_all(store, &kept.key);
        let [stdin, stdout, stderr] = pipes;
        let fds = [stdin, stdout, stderr, kept.record.as_fd()];
        let key = &kept.key;
        let sent = PARTS.iter().zip(fds).try_for_each(|(part, fd)| {
            let n = name(key, part);
            store.send_with_fds(&["FDSTORE=1", &format!("FDNAME={n}")], &[fd])
        });
        match sent {
            Ok(()) => Some(kept),
            Err(e) => {
                warn!(server, error = %e, "cannot keep the child's pipes in systemd's file descriptor store; it will not outlive a crash of the supervisor");
                kept.remove();
                None
            }
        }
    }

    /// Records the session's handshake and lists (`actor::record`'s shape) and the child's log
    /// level, so a next run answers clients from them without a second `initialize`.
    pub fn session(&mut self, handshake: Value, log_level: Option<usize>) {
        self.session = json!({"handshake": handshake, "log_level": log_level});
        self.write();
    }

    /// Rewrites the memfd: the whole text at offset 0, then the length. A crash between the
    /// two leaves a text with trailing bytes, which does not parse: never half trusted.
    fn write(&mut self) {
        let mut v = self.head.clone();
        if let Some(o) = v.as_object_mut() {
            o.insert("session".into(), self.session.clone());
        }
        let text = v.to_string();
        let written = self
            .record
            .rewind()
            .and_then(|()| self.record.write_all(text.as_bytes()))
            .and_then(|()| self.record.set_len(text.len() as u64));
        if let Err(e) = written {
            warn!(server = %self.server, error = %e, "cannot update the child's record in systemd's file descriptor store");
        }
    }

    /// Takes the entries out of the store (idempotent). Called before the instance's stdin is
    /// closed.
    pub fn remove(&mut self) {
        if self.done {
            return;
        }
        self.done = true;
        if let Some(store) = STORE.get() {
            remove_all(store, &self.key);
        }
    }
}

impl Drop for Kept {
    fn drop(&mut self) {
        self.remove();
    }
}

/// An instance a crashed run left in the store, read back at start.
#[derive(Debug)]
pub struct Stored {
    /// Its server.
    pub server: String,
    /// `NAME.N-TOKEN`, what its entries' names are made of.
    pub key: String,
    /// Its generation.
    pub generation: u64,
    /// Pid (= process group).
    pub pid: u32,
    /// Its [`base::reaper::MARKER_VAR`] value.
    pub marker: String,
    /// Its start time (clock ticks since boot).
    pub since: u64,
    /// The session's handshake and lists, when it was open.
    pub handshake: Option<Value>,
    /// The child's log level.
    pub log_level: Option<usize>,
    /// Our ends of its stdin, stdout and stderr.
    pub pipes: [OwnedFd; 3],
}

impl Stored {
    /// Whether pid is still this instance: running (not a zombie), started at `since`, its
    /// environment carrying the marker. Errors say which check failed. (Whether its session
    /// can be taken over is the caller's question.)
    pub fn check(&self) -> Result<(), String> {
        let pid = i32::try_from(self.pid).map_err(|_| "its pid is out of range".to_string())?;
        let Some(p) = base::reaper::stat(pid) else {
            return Err(format!("pid {pid} is gone"));
        };
        if p.state == b'Z' {
            return Err(format!("pid {pid} has exited"));
        }
        if p.start != self.since {
            return Err(format!(
                "pid {pid} is another process now (its start time differs)"
            ));
        }
        let entry = format!("{}={}", base::reaper::MARKER_VAR, self.marker);
        if !base::reaper::environ_has(pid, entry.as_bytes(), false) {
            return Err(format!("pid {pid} does not carry the instance's marker"));
        }
        Ok(())
    }
}

/// Takes every [`PREFIX`] entry out of `passed` (what systemd passed at start, by name) and
/// reads each instance from them (a server may have two: one stopping and its successor).
/// Entries that are incomplete or whose record does not parse are closed; each is named in
/// the returned notes (for the log).
pub fn collect(passed: &mut Vec<(String, OwnedFd)>) -> (Vec<Stored>, Vec<String>) {
    use std::collections::BTreeMap;
    let mut by_key: BTreeMap<String, BTreeMap<String, OwnedFd>> = BTreeMap::new();
    let mut rest = Vec::new();
    for (n, fd) in passed.drain(..) {
        let Some(tail) = n.strip_prefix(PREFIX) else {
            rest.push((n, fd));
            continue;
        };
        match tail.rsplit_once('.') {
            Some((key, part)) if PARTS.contains(&part) => {
                by_key
                    .entry(key.to_string())
                    .or_default()
                    .insert(part.to_string(), fd);
            }
            _ => {}
        }
    }
    *passed = rest;
    let mut found = Vec::new();
    let mut notes = Vec::new();
    for (key, mut parts) in by_key {
        let server = key
            .rsplit_once('.')
            .map_or(key.as_str(), |(s, _)| s)
            .to_string();
        let got = (
            parts.remove("stdin"),
            parts.remove("stdout"),
            parts.remove("stderr"),
            parts.remove("record"),
        );
        let (Some(stdin), Some(stdout), Some(stderr), Some(record)) = got else {
            notes.push(format!(
                "server {server}: its entry {key} in the file descriptor store is incomplete; not re-adopted"
            ));
            if let Some(store) = STORE.get() {
                remove_all(store, &key);
            }
            continue;
        };
        match read_record(&server, record) {
            Ok(r) => found.push(Stored {
                server: server.clone(),
                key: key.clone(),
                generation: r.generation,
                pid: r.pid,
                marker: r.marker,
                since: r.since,
                handshake: r.handshake,
                log_level: r.log_level,
                pipes: [stdin, stdout, stderr],
            }),
            Err(why) => {
                notes.push(format!(
                    "server {server}: its record {key} in the file descriptor store is not usable ({why}); not re-adopted"
                ));
                if let Some(store) = STORE.get() {
                    remove_all(store, &key);
                }
            }
        }
    }
    (found, notes)
}

/// What a record says of its instance.
struct Record {
    generation: u64,
    pid: u32,
    marker: String,
    since: u64,
    handshake: Option<Value>,
    log_level: Option<usize>,
}

/// Reads and validates one record of `server`.
fn read_record(server: &str, fd: OwnedFd) -> Result<Record, String> {
    use std::io::Read;
    let st = rustix::fs::fstat(&fd).map_err(|e| e.to_string())?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        return Err("it is not a memfd".into());
    }
    let mut file = std::fs::File::from(fd);
    let mut text = Vec::new();
    file.rewind().map_err(|e| e.to_string())?;
    Read::by_ref(&mut file)
        .take(RECORD_MAX + 1)
        .read_to_end(&mut text)
        .map_err(|e| e.to_string())?;
    if text.len() as u64 > RECORD_MAX {
        return Err("it is too large".into());
    }
    let v: Value = serde_json::from_slice(&text).map_err(|e| format!("not JSON: {e}"))?;
    if v.get("version").and_then(Value::as_u64) != Some(VERSION) {
        return Err("another version".into());
    }
    if v.get("server").and_then(Value::as_str) != Some(server) {
        return Err("it names another server".into());
    }
    let num = |k: &str| v.get(k).and_then(Value::as_u64).ok_or(format!("no `{k}`"));
    let marker = v
        .get("marker")
        .and_then(Value::as_str)
        .filter(|m| {
            let mut parts = m.splitn(3, ':');
            let (token, n, name) = (parts.next(), parts.next(), parts.next());
            token.is_some_and(|t| t.len() == 16 && t.bytes().all(|b| b.is_ascii_hexdigit()))
                && n.is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
                && name == Some(server)
        })
        .ok_or("no marker of this server")?
        .to_string();
    let session = v.get("session").filter(|s| !s.is_null());
    Ok(Record {
        generation: num("generation")?,
        pid: u32::try_from(num("pid")?).map_err(|_| "its pid is out of range")?,
        marker,
        since: num("since")?,
        handshake: session
            .and_then(|s| s.get("handshake"))
            .filter(|h| h.is_object())
            .cloned(),
        log_level: session
            .and_then(|s| s.get("log_level"))
            .and_then(Value::as_u64)
            .and_then(|l| usize::try_from(l).ok()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memfd(text: &str) -> OwnedFd {
        let fd = rustix::fs::memfd_create("t", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
        let mut f = std::fs::File::from(fd);
        f.write_all(text.as_bytes()).unwrap();
        OwnedFd::from(f)
    }

    fn pipe_ends() -> [OwnedFd; 3] {
        let (a, b) = nix::unistd::pipe().unwrap();
        let (c, _d) = nix::unistd::pipe().unwrap();
        [a, b, c]
    }

    #[test]
    fn collect_reads_complete_entries_and_leaves_other_names() {
        let [i, o, e] = pipe_ends();
        let rec = json!({"version": 1, "server": "fs", "generation": 3, "pid": 4242,
            "marker": "0123456789abcdef:7:fs", "since": 99,
            "session": {"handshake": {"era": "handshake"}, "log_level": 2}});
        let mut passed = vec![
            ("control".to_string(), memfd("")),
            ("child.fs.7.stdin".to_string(), i),
            ("child.fs.7.stdout".to_string(), o),
            ("child.fs.7.stderr".to_string(), e),
            ("child.fs.7.record".to_string(), memfd(&rec.to_string())),
            ("child.half.3.stdin".to_string(), memfd("")),
        ];
        let (found, notes) = collect(&mut passed);
        assert_eq!(passed.len(), 1);
        assert_eq!(passed[0].0, "control");
        assert_eq!(found.len(), 1, "{notes:?}");
        let s = &found[0];
        assert_eq!(
            (s.server.as_str(), s.generation, s.pid, s.since),
            ("fs", 3, 4242, 99)
        );
        assert_eq!(s.log_level, Some(2));
        assert!(s.handshake.is_some());
        assert_eq!(notes.len(), 1);
        assert!(notes[0].contains("half"), "{notes:?}");
        // pid 4242 is not this instance: refused.
        assert!(s.check().is_err());
    }

    #[test]
    fn a_torn_or_foreign_record_is_not_trusted() {
        let good = json!({"version": 1, "server": "fs", "generation": 1, "pid": 1,
            "marker": "0123456789abcdef:1:fs", "since": 1, "session": null})
        .to_string();
        for bad in [
            format!("{good}garbage"),
            good.replace("\"version\":1", "\"version\":2"),
            good.replace("1:fs", "1:other"),
            "[]".to_string(),
            String::new(),
        ] {
            let [i, o, e] = pipe_ends();
            let mut passed = vec![
                ("child.fs.1.stdin".to_string(), i),
                ("child.fs.1.stdout".to_string(), o),
                ("child.fs.1.stderr".to_string(), e),
                ("child.fs.1.record".to_string(), memfd(&bad)),
            ];
            let (found, notes) = collect(&mut passed);
            assert!(found.is_empty(), "{bad}");
            assert_eq!(notes.len(), 1, "{bad}");
        }
    }

    #[test]
    fn a_record_without_a_session_is_read_but_not_adoptable() {
        let [i, o, e] = pipe_ends();
        let me = std::process::id();
        let since = base::reaper::stat(me as i32).unwrap().start;
        let rec = json!({"version": 1, "server": "fs", "generation": 1, "pid": me,
            "marker": "0123456789abcdef:1:fs", "since": since, "session": null});
        let mut passed = vec![
            ("child.fs.1.stdin".to_string(), i),
            ("child.fs.1.stdout".to_string(), o),
            ("child.fs.1.stderr".to_string(), e),
            ("child.fs.1.record".to_string(), memfd(&rec.to_string())),
        ];
        let (found, _) = collect(&mut passed);
        // This process is running and started then, but carries no such marker.
        let why = found[0].check().unwrap_err();
        assert!(why.contains("marker"), "{why}");
    }
}
