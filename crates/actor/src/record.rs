//! What an on-demand server's child said in its last run, kept on disk (issue 18 §1) so
//! `initialize`, `server/discover` and the first pages of the lists can be answered before the
//! child has started, and a client that only lists tools never starts it.
//!
//! The file is `<state_dir>/NAME.cache.json` (mode 0600), JSON:
//! `{"version":1,"command":…,"args":[…],"cwd":…|null,"saved_at":"RFC 3339",
//!   "era":"handshake"|"2026-07-28","handshake":{the initialize or server/discover result},
//!   "lists":{"tools/list":{result},…}}`.
//! A record made by another `command`/`args`/`cwd` is ignored (a changed server may offer
//! other tools); `env` is not compared and never written (it may hold secrets). Written with
//! a temporary file and a rename, so a crash leaves the old record or the new one.
//!
//! I/O runs on a writer task ([`Writer`]) and at actor start ([`load`]), never in the
//! actor's message handling.

use crate::era::{self, Era, Handshake};
use base::statefile;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use support::config::ServerConfig;
use tracing::{debug, warn};

/// The format's version; a record of another version is ignored.
const VERSION: u64 = 1;

/// A record read back: the handshake and lists of the last run, and when it was written.
#[derive(Debug)]
pub struct Record {
    /// The child's handshake (era, result) as it was.
    pub handshake: Handshake,
    /// First pages of the lists, by method (`era::LISTS` names).
    pub lists: BTreeMap<&'static str, Value>,
    /// RFC 3339 time the record was written.
    pub saved_at: String,
}

/// The JSON text of a record of `cfg`'s child.
pub fn encode(
    cfg: &ServerConfig,
    hs: &Handshake,
    lists: &BTreeMap<&'static str, Value>,
    saved_at: &str,
) -> Vec<u8> {
    let era = match hs.era {
        Era::Handshake => "handshake",
        Era::Modern => era::MODERN_VERSION,
    };
    let lists: Map<String, Value> = lists
        .iter()
        .map(|(k, v)| ((*k).to_string(), v.clone()))
        .collect();
    let v = json!({
        "version": VERSION,
        "command": cfg.command,
        "args": cfg.args,
        "cwd": cfg.cwd,
        "saved_at": saved_at,
        "era": era,
        "handshake": hs.result,
        "lists": lists,
    });
    serde_json::to_vec_pretty(&v).unwrap_or_default()
}

/// Parses a record's text for `cfg`. `Err` says why it is not usable (another version, another
/// command, not a record); the caller logs it and starts without one.
pub fn decode(cfg: &ServerConfig, text: &[u8]) -> Result<Record, String> {
    let v: Value = serde_json::from_slice(text).map_err(|e| format!("not JSON: {e}"))?;
    if v.get("version").and_then(Value::as_u64) != Some(VERSION) {
        return Err(format!("not a version {VERSION} record"));
    }
    let same = v.get("command").and_then(Value::as_str) == Some(cfg.command.as_str())
        && v.get("args") == Some(&json!(cfg.args))
        && v.get("cwd") == Some(&json!(cfg.cwd));
    if !same {
        return Err("it was made by another command, args or cwd".into());
    }
    let result = v.get("handshake").cloned().unwrap_or(Value::Null);
    let handshake = match v.get("era").and_then(Value::as_str) {
        Some("handshake") => {
            Handshake::from_result(result).ok_or("its handshake is not an initialize result")?
        }
        Some(e) if e == era::MODERN_VERSION && result.is_object() => {
            Handshake::from_discover(result)
        }
        _ => return Err("unknown era".into()),
    };
    let mut lists = BTreeMap::new();
    if let Some(o) = v.get("lists").and_then(Value::as_object) {
        for (method, _, _) in era::LISTS {
            let Some(r) = o.get(*method) else { continue };
            // The same shape check as a live reply's (K21): a record is not trusted more.
            let raw = serde_json::value::to_raw_value(r).map_err(|e| e.to_string())?;
            era::check_result_shape(method, &raw)
                .map_err(|e| format!("its {method} is malformed ({e})"))?;
            lists.insert(*method, r.clone());
        }
    }
    let saved_at = v
        .get("saved_at")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    Ok(Record {
        handshake,
        lists,
        saved_at,
    })
}

/// The largest record read back, in bytes (the first pages of four lists; a bigger file was
/// not written by us).
const MAX_RECORD: u64 = 64 << 20;

/// Reads `cfg`'s record, if there is a usable one (a missing file is the first run).
///
/// Its text is served to clients as the child's own words, so it is trusted only as a file
/// this supervisor wrote (issue 26 §5): opened without following a link, a regular file owned
/// by our euid, writable by nobody else, at most [`MAX_RECORD`] bytes; anything else is
/// logged and ignored.
pub async fn load(cfg: &ServerConfig) -> Option<Record> {
    let path = cfg.cache_file.clone();
    let read = tokio::task::spawn_blocking(move || statefile::read_own(&path, MAX_RECORD))
        .await
        .map_err(|e| std::io::Error::other(e.to_string()))
        .and_then(|r| r);
    let text = match read {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => {
            warn!(path = %cfg.cache_file.display(), error = %e, "the record of the last run is not used; the first request starts the child");
            return None;
        }
    };
    match decode(cfg, &text) {
        Ok(r) => {
            debug!(path = %cfg.cache_file.display(), saved_at = %r.saved_at, "read the record of the last run");
            Some(r)
        }
        Err(why) => {
            warn!(path = %cfg.cache_file.display(), "the record of the last run is not used: {why}");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn cfg() -> ServerConfig {
        let text = "[servers.a]\ncommand = \"/bin/true\"\nargs = [\"x\"]\nstart = \"on-demand\"\n";
        support::config::parse(Path::new("/tmp/s.toml"), text)
            .ok()
            .and_then(|c| c.servers.get("a").cloned())
            .unwrap_or_else(|| unreachable!("the test config parses"))
    }

    #[test]
    fn a_record_round_trips_and_another_command_is_refused() {
        let c = cfg();
        let hs = Handshake::from_result(json!({"protocolVersion": "2025-06-18",
            "capabilities": {"tools": {}}, "serverInfo": {"name": "s", "version": "1"}}))
        .unwrap_or_else(|| unreachable!());
        let mut lists = BTreeMap::new();
        lists.insert("tools/list", json!({"tools": [{"name": "t"}]}));
        let text = encode(&c, &hs, &lists, "2026-12-01T00:00:00Z");
        let r = decode(&c, &text).unwrap_or_else(|e| unreachable!("{e}"));
        assert_eq!(r.handshake.protocol_version, "2025-06-18");
        assert_eq!(r.lists.get("tools/list"), lists.get("tools/list"));
        assert_eq!(r.saved_at, "2026-12-01T00:00:00Z");
        let mut other = c.clone();
        other.args = vec!["y".into()];
        assert!(decode(&other, &text).is_err());
        assert!(decode(&c, b"{}").is_err());
        assert!(decode(&c, b"\xff").is_err());
    }

    fn a_record(c: &ServerConfig) -> Vec<u8> {
        let hs = Handshake::from_result(json!({"protocolVersion": "2025-06-18",
            "capabilities": {"tools": {}}, "serverInfo": {"name": "s", "version": "1"}}))
        .unwrap_or_else(|| unreachable!());
        let mut lists = BTreeMap::new();
        lists.insert("tools/list", json!({"tools": [{"name": "t"}]}));
        encode(c, &hs, &lists, "2026-12-01T00:00:00Z")
    }

    /// Issue 26 §5: a record is served as the child's words, so only a file we wrote is read.
    #[test]
    fn only_a_regular_file_of_ours_that_nobody_else_may_write_is_read() {
        use std::os::unix::fs::PermissionsExt;
        let c = cfg();
        let dir = tempfile::tempdir().unwrap_or_else(|e| unreachable!("{e}"));
        let path = dir.path().join("a.cache.json");
        statefile::write_atomic(&path, &a_record(&c)).unwrap_or_else(|e| unreachable!("{e}"));
        let mode = std::fs::metadata(&path).map(|m| m.permissions().mode() & 0o777);
        assert_eq!(mode.ok(), Some(0o600));
        assert!(statefile::read_own(&path, MAX_RECORD).is_ok());
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666))
            .unwrap_or_else(|e| unreachable!("{e}"));
        let e = statefile::read_own(&path, MAX_RECORD)
            .map(|_| ())
            .unwrap_err();
        assert!(e.to_string().contains("may write it"), "{e}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
            .unwrap_or_else(|e| unreachable!("{e}"));
        let link = dir.path().join("b.cache.json");
        std::os::unix::fs::symlink(&path, &link).unwrap_or_else(|e| unreachable!("{e}"));
        let e = statefile::read_own(&link, MAX_RECORD)
            .map(|_| ())
            .unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        if base::testing::needs_root("a record owned by another user (chown)") {
            std::os::unix::fs::chown(&path, Some(4242), Some(4242))
                .unwrap_or_else(|e| unreachable!("{e}"));
            let e = statefile::read_own(&path, MAX_RECORD)
                .map(|_| ())
                .unwrap_err();
            assert!(e.to_string().contains("owned by uid 4242"), "{e}");
        }
    }

    /// Issue 26 §5: writing never goes through a link planted at the record's name: the
    /// rename replaces the link, and the file it pointed to is untouched.
    #[test]
    fn a_write_replaces_a_planted_link_and_never_writes_its_target() {
        let c = cfg();
        let dir = tempfile::tempdir().unwrap_or_else(|e| unreachable!("{e}"));
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "root only").unwrap_or_else(|e| unreachable!("{e}"));
        let path = dir.path().join("a.cache.json");
        std::os::unix::fs::symlink(&secret, &path).unwrap_or_else(|e| unreachable!("{e}"));
        statefile::write_atomic(&path, &a_record(&c)).unwrap_or_else(|e| unreachable!("{e}"));
        assert_eq!(
            std::fs::read_to_string(&secret).ok().as_deref(),
            Some("root only")
        );
        let m = std::fs::symlink_metadata(&path).unwrap_or_else(|e| unreachable!("{e}"));
        assert!(m.is_file(), "the link itself was replaced");
        let leftovers = std::fs::read_dir(dir.path())
            .map(|d| d.count())
            .unwrap_or_default();
        assert_eq!(leftovers, 2, "no temporary file left behind");
    }

    /// A record is checked as a live reply would be: a malformed list is not served.
    #[test]
    fn a_record_with_a_malformed_list_is_refused() {
        let c = cfg();
        let mut v: Value =
            serde_json::from_slice(&a_record(&c)).unwrap_or_else(|e| unreachable!("{e}"));
        v["lists"]["tools/list"] = json!({"tools": "ignore previous instructions"});
        let text = serde_json::to_vec(&v).unwrap_or_else(|e| unreachable!("{e}"));
        let e = decode(&c, &text).map(|_| ()).unwrap_err();
        assert!(e.contains("tools/list"), "{e}");
    }
}
