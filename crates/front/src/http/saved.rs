//! The record of the open handshake-era HTTP sessions, kept under `state_dir` so that the same
//! `Mcp-Session-Id` goes on working after the supervisor crashes or restarts (issue 32 §2).
//!
//! The file is `<state_dir>/http-sessions-<hash of socket_dir>.json` ([`file_name`]), written
//! and read through
//! [`base::statefile`] (mode 0600, atomic, ours only), JSON:
//!
//! ```json
//! {"version": 1, "sessions": [
//!   {"id": "<32 hex digits>", "server": "NAME",
//!    "owner": {"tcp": "<SHA-256 of the token, 64 hex digits>", "label": 42} | {"unix": 1000},
//!    "peer": {"uid": 1000, "gid": 1000},
//!    "initialize": {the client's initialize params}, "initialized": true}]}
//! ```
//!
//! Rules:
//! - a session is recorded once its `initialize` was sent to the server, with the caller that
//!   opened it, so a restored session answers only that caller (issue 26 §5); the token itself
//!   is never written, only its SHA-256;
//! - a file of another version, not JSON, over [`MAX_FILE`] bytes, with more than
//!   [`MAX_SESSIONS`] sessions, or with one malformed entry is ignored whole (logged by the
//!   caller): a session is restored only from a record this supervisor wrote;
//! - the `initialize` params are replayed to the server's actor as the session's own
//!   handshake (its answer is dropped: the client has it), then `notifications/initialized`
//!   when the client had sent it.

use super::access::Caller;
use serde_json::value::RawValue;
use serde_json::{json, Value};

/// The file's name under `state_dir` for the supervisor serving `socket_dir`:
/// `http-sessions-<12 hex digits of the SHA-256 of socket_dir's path>.json`, so supervisors
/// sharing a `state_dir` (each has its own, locked, `socket_dir`) never read or overwrite each
/// other's sessions.
pub fn file_name(socket_dir: &std::path::Path) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(socket_dir.as_os_str().as_encoded_bytes());
    format!(
        "http-sessions-{}.json",
        hex(digest.get(..6).unwrap_or_default())
    )
}

/// The format's version; a file of another version is ignored.
const VERSION: u64 = 1;

/// Most sessions a file may hold (every server's `http_max_sessions` is far below this in
/// practice).
pub const MAX_SESSIONS: usize = 4096;

/// Largest `initialize` params kept for one session, in bytes (a client's capabilities and
/// name; a larger handshake is not recorded and that session is not restored).
pub const MAX_PARAMS: usize = 8 << 10;

/// Largest file read back, in bytes: room for [`MAX_SESSIONS`] of the largest entries, so a
/// file this supervisor wrote is never refused for its size.
pub const MAX_FILE: u64 = (MAX_SESSIONS as u64) * (MAX_PARAMS as u64 + 1024);

/// One open session as recorded.
#[derive(Debug)]
pub struct Saved {
    /// Its `Mcp-Session-Id`.
    pub id: String,
    /// The server (or endpoint) it belongs to.
    pub server: String,
    /// Who opened it: the only caller it answers.
    pub owner: Caller,
    /// The peer's uid and gid, as the server's actor knew them.
    pub uid: u32,
    /// See `uid`.
    pub gid: u32,
    /// The client's `initialize` params.
    pub initialize: Box<RawValue>,
    /// Whether the client sent `notifications/initialized`.
    pub initialized: bool,
}

/// One entry as written (the params stay raw: never re-parsed).
#[derive(serde::Serialize)]
struct Entry<'a> {
    id: &'a str,
    server: &'a str,
    owner: Value,
    peer: Value,
    initialize: &'a RawValue,
    initialized: bool,
}

/// The file's text for `sessions`: at most [`MAX_SESSIONS`] of them (the first ones; a reader
/// refuses a longer list, so one caller opening sessions cannot make the record unusable).
pub fn encode(sessions: &[Saved]) -> Vec<u8> {
    let list: Vec<Entry<'_>> = sessions
        .iter()
        .filter(|s| s.initialize.get().len() <= MAX_PARAMS)
        .take(MAX_SESSIONS)
        .map(|s| Entry {
            id: &s.id,
            server: &s.server,
            owner: match s.owner {
                Caller::Tcp { token, label } => json!({"tcp": hex(&token), "label": label}),
                Caller::Unix { uid } => json!({"unix": uid}),
            },
            peer: json!({"uid": s.uid, "gid": s.gid}),
            initialize: &s.initialize,
            initialized: s.initialized,
        })
        .collect();
    serde_json::to_vec(&json!({"version": VERSION, "sessions": list})).unwrap_or_default()
}

/// The sessions in a file's text; `Err` says why the whole file is not used.
pub fn decode(text: &[u8]) -> Result<Vec<Saved>, String> {
    let v: Value = serde_json::from_slice(text).map_err(|e| format!("not JSON: {e}"))?;
    if v.get("version").and_then(Value::as_u64) != Some(VERSION) {
        return Err(format!("not a version {VERSION} record"));
    }
    let list = v
        .get("sessions")
        .and_then(Value::as_array)
        .ok_or("it has no sessions array")?;
    if list.len() > MAX_SESSIONS {
        return Err(format!(
            "it holds {} sessions, over {MAX_SESSIONS}",
            list.len()
        ));
    }
    list.iter()
        .enumerate()
        .map(|(i, s)| one(s).map_err(|why| format!("session {i}: {why}")))
        .collect()
}

/// One entry.
fn one(s: &Value) -> Result<Saved, String> {
    let id = s.get("id").and_then(Value::as_str).ok_or("no id")?;
    if id.len() != 32 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err("its id is not 32 hex digits".into());
    }
    let server = s.get("server").and_then(Value::as_str).ok_or("no server")?;
    if server.is_empty() || server.len() > 256 {
        return Err("its server name is empty or too long".into());
    }
    let owner = s.get("owner").ok_or("no owner")?;
    let owner = match (owner.get("tcp"), owner.get("unix")) {
        (Some(t), None) => {
            let token = t
                .as_str()
                .and_then(unhex)
                .ok_or("its token hash is not 64 hex digits")?;
            let label = match owner.get("label") {
                None | Some(Value::Null) => None,
                Some(l) => Some(l.as_u64().ok_or("its label is not a number")?),
            };
            Caller::Tcp { token, label }
        }
        (None, Some(u)) => Caller::Unix {
            uid: u32_of(Some(u)).ok_or("its uid is not a uid")?,
        },
        _ => return Err("its owner is neither tcp nor unix".into()),
    };
    let peer = s.get("peer").ok_or("no peer")?;
    let uid = u32_of(peer.get("uid")).ok_or("its peer uid is not a uid")?;
    let gid = u32_of(peer.get("gid")).ok_or("its peer gid is not a gid")?;
    let init = s
        .get("initialize")
        .filter(|p| p.is_object())
        .ok_or("its initialize params are not an object")?;
    let initialize = serde_json::value::to_raw_value(init).map_err(|e| e.to_string())?;
    if initialize.get().len() > MAX_PARAMS {
        return Err("its initialize params are too large".into());
    }
    let initialized = s
        .get("initialized")
        .and_then(Value::as_bool)
        .ok_or("initialized is not a boolean")?;
    Ok(Saved {
        id: id.to_string(),
        server: server.to_string(),
        owner,
        uid,
        gid,
        initialize,
        initialized,
    })
}

fn u32_of(v: Option<&Value>) -> Option<u32> {
    v?.as_u64().and_then(|n| u32::try_from(n).ok())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<[u8; 32]> {
    if s.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, slot) in out.iter_mut().enumerate() {
        let pair = s.get(2 * i..2 * i + 2)?;
        *slot = u8::from_str_radix(pair, 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn saved(owner: Caller) -> Saved {
        Saved {
            id: "0123456789abcdef0123456789abcdef".into(),
            server: "cua".into(),
            owner,
            uid: 1000,
            gid: 100,
            initialize: RawValue::from_string(
                r#"{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"c","version":"1"}}"#.into(),
            )
            .unwrap_or_else(|_| unreachable!()),
            initialized: true,
        }
    }

    #[test]
    fn a_record_reads_back_as_written() {
        let token = [7u8; 32];
        let list = vec![
            saved(Caller::Tcp {
                token,
                label: Some(9),
            }),
            saved(Caller::Unix { uid: 1000 }),
        ];
        let text = encode(&list);
        let back = decode(&text).unwrap_or_else(|e| unreachable!("{e}"));
        assert_eq!(back.len(), 2);
        assert_eq!(back[0].owner, list[0].owner);
        assert_eq!(back[1].owner, Caller::Unix { uid: 1000 });
        let params = |r: &RawValue| serde_json::from_str::<Value>(r.get()).unwrap_or_default();
        assert_eq!(params(&back[0].initialize), params(&list[0].initialize));
        assert!(back[0].initialized);
        assert_eq!((back[1].uid, back[1].gid), (1000, 100));
    }

    #[test]
    fn the_writer_keeps_within_what_the_reader_accepts() {
        let many: Vec<Saved> = (0..MAX_SESSIONS + 10)
            .map(|_| saved(Caller::Unix { uid: 1 }))
            .collect();
        let text = encode(&many);
        assert!(text.len() as u64 <= MAX_FILE);
        assert_eq!(
            decode(&text).map(|l| l.len()).unwrap_or_default(),
            MAX_SESSIONS
        );
        assert_ne!(
            file_name(std::path::Path::new("/run/a")),
            file_name(std::path::Path::new("/run/b"))
        );
    }

    #[test]
    fn a_malformed_record_is_refused_whole_with_the_reason() {
        let good = String::from_utf8(encode(&[saved(Caller::Unix { uid: 1 })])).unwrap_or_default();
        let cases = [
            ("not json", "not JSON"),
            (r#"{"version":2,"sessions":[]}"#, "version"),
            (r#"{"version":1}"#, "sessions"),
            (
                &good.replace("0123456789abcdef0123456789abcdef", "../../etc"),
                "id",
            ),
            (&good.replace(r#"{"unix":1}"#, r#"{"unix":-1}"#), "uid"),
            (&good.replace(r#"{"unix":1}"#, r#"{"tcp":"00"}"#), "token"),
            (
                &good.replace(r#""initialized":true"#, r#""initialized":"yes""#),
                "initialized",
            ),
        ];
        for (text, why) in cases {
            let e = decode(text.as_bytes()).map(|_| ()).unwrap_err();
            assert!(e.contains(why), "{text}: {e}");
        }
    }
}
