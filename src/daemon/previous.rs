//! What the last run on this `socket_dir` left when it died without stopping its children
//! (issue 32 §2, §3): the instances it kept in systemd's file descriptor store that are still
//! running are re-adopted; every other process of that run is ended before this run spawns
//! anything, so a child never runs twice at once.
//!
//! The last run's token is in `<socket_dir>/supervisor.run.json` (`reaper::RUN_FILE`,
//! `{"token":"16 hex","pid":N}`), read only if it is ours (`statefile::read_own`). A stored
//! instance is re-adopted when its marker carries that token, its server is still configured
//! with the same command, arguments and working directory (`actor::record::decode`), it had an
//! open session, and its pid is still that instance (`fdstore::Stored::check`); one per
//! server, the newest. This run then goes on with that token (`reaper::resume`), so a later
//! crash's cleanup still finds them. Every other stored instance that is still running is
//! ended by its exact marker (even when the token is unknown: the record came from this
//! unit's own store) and its entries are taken out of the store.
//!
//! [`cleanup`] is the same ending, done when the unit stops (`mcp-supervisor cleanup`, the
//! `ExecStopPost` of `keep-children.conf`): after a stop, whatever of the run is still alive
//! ends; after a crash (systemd's `$SERVICE_RESULT`), nothing does, so the restarted
//! supervisor re-adopts the children.

use actor::server::Adoption;
use std::collections::HashMap;
use std::path::Path;
use support::config::Config;
use tracing::{info, warn};
use upstream::child::fdstore::Stored;
use upstream::child::process::Inherited;
use upstream::Carried;

/// What [`cleanup`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Cleanup {
    /// `$SERVICE_RESULT` names a crash of the main process: nothing ended (the children are
    /// left for the restarted supervisor to re-adopt). Holds the result.
    Crashed(String),
    /// No run recorded on this `socket_dir` (or its record is not ours): nothing to end.
    NoRun,
    /// The processes ended (`pid(comm)`), none when the run left nothing.
    Ended(Vec<String>),
}

/// The `$SERVICE_RESULT` values systemd gives `ExecStopPost` when the main process died by
/// itself (systemd.exec(5), "Environment variables in spawned processes"): after one of
/// these `Restart=on-failure` starts the supervisor again.
const CRASHES: [&str; 5] = ["exit-code", "signal", "core-dump", "oom-kill", "watchdog"];

/// `mcp-supervisor cleanup` (issue 32, decisions: "cleanup on stop"): ends every process the
/// last run on `socket_dir` left (its marker token from the run record, owner-checked, and
/// their descendants: SIGTERM, then SIGKILL), unless `service_result` names a crash.
/// Errors: another supervisor holds `socket_dir` (its children are its own), or the
/// directory cannot be locked.
pub fn cleanup(socket_dir: &Path, service_result: Option<&str>) -> Result<Cleanup, String> {
    if let Some(r) = service_result.filter(|r| CRASHES.contains(r)) {
        return Ok(Cleanup::Crashed(r.to_string()));
    }
    if !socket_dir.is_dir() {
        return Ok(Cleanup::NoRun);
    }
    // Held while ending: no supervisor starts (and spawns) on this directory meanwhile.
    let _lock = super::lock_socket_dir(socket_dir).map_err(|e| format!("{e:#}"))?;
    let token = base::statefile::read_own(&socket_dir.join(base::reaper::RUN_FILE), 4096)
        .ok()
        .and_then(|text| serde_json::from_slice::<serde_json::Value>(&text).ok())
        .and_then(|v| v.get("token")?.as_str().map(str::to_string))
        .filter(|t| t.len() == 16 && t.bytes().all(|b| b.is_ascii_hexdigit()));
    let Some(token) = token else {
        return Ok(Cleanup::NoRun);
    };
    Ok(Cleanup::Ended(base::reaper::end_previous_run(
        Some(&token),
        &[],
        &[],
    )))
}

/// Ends what the last run left (sparing the instances re-adopted from `stored`), records this
/// run's token, and returns the re-adopted instances by server. An unreadable record of the
/// last run is logged and skipped: nothing is signalled or adopted on the word of a file that
/// is not ours.
pub(super) async fn end_previous_run(
    socket_dir: &Path,
    stored: Vec<Stored>,
    config: &Config,
) -> HashMap<String, Adoption> {
    let path = socket_dir.join(base::reaper::RUN_FILE);
    let read_path = path.clone();
    let read = tokio::task::spawn_blocking(move || base::statefile::read_own(&read_path, 4096))
        .await
        .map_err(|e| std::io::Error::other(e.to_string()))
        .and_then(|r| r);
    let previous = match read {
        Ok(text) => serde_json::from_slice::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| v.get("token")?.as_str().map(str::to_string))
            .filter(|t| t.len() == 16 && t.bytes().all(|b| b.is_ascii_hexdigit())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            warn!(path = %path.display(), error = %e, "the record of the last run is not used; processes it may have left are not looked for");
            None
        }
    };
    let mut candidates = Vec::new();
    let mut refused = Vec::new();
    for s in stored {
        match adoptable(&s, previous.as_deref(), config) {
            Ok(()) => candidates.push(s),
            Err(why) => {
                warn!(server = %s.server, pid = s.pid, reason = %why, "not re-adopting the instance a crashed run left in the file descriptor store; it is ended with the rest of that run");
                refused.push(s);
            }
        }
    }
    let previous_token = previous.clone();
    let (revived, found) = tokio::task::spawn_blocking(move || {
        // The checks read `/proc`: off the runtime's threads.
        let mut newest: HashMap<String, Stored> = HashMap::new();
        for s in candidates {
            if let Err(why) = s.check() {
                warn!(server = %s.server, pid = s.pid, reason = %why, "not re-adopting the instance a crashed run left in the file descriptor store");
                refused.push(s);
                continue;
            }
            // One instance per server: the newest (an older one was stopping at the crash).
            let older = match newest.get(&s.server) {
                Some(other) if instance(other) > instance(&s) => Some(s),
                _ => newest.insert(s.server.clone(), s),
            };
            refused.extend(older);
        }
        let revived: Vec<Stored> = newest.into_values().collect();
        // Instance numbers go on past every stored one (re-adopted or not: a refused one's
        // cgroup may outlive it), with room for spawns whose entries never reached the store.
        if let Some(token) = &previous_token {
            if !revived.is_empty() {
                let n = revived.iter().chain(&refused).map(instance).max().unwrap_or(0);
                base::reaper::resume(token, n.saturating_add(RESUME_MARGIN));
            }
        }
        // What was not re-adopted and is still that instance ends, even when the last run's
        // token is unknown: the record came from this unit's own store.
        let extra: Vec<String> = refused
            .iter()
            .filter(|s| s.check().is_ok())
            .map(|s| s.marker.clone())
            .collect();
        for s in &refused {
            upstream::child::fdstore::forget(s);
        }
        let keep: Vec<String> = revived.iter().map(|s| s.marker.clone()).collect();
        let found = if previous_token.is_some() || !extra.is_empty() {
            base::reaper::end_previous_run(previous_token.as_deref(), &extra, &keep)
        } else {
            Vec::new()
        };
        (revived, found)
    })
    .await
    .unwrap_or_default();
    if !found.is_empty() {
        warn!(processes = %found.join(" "), "ended the processes a previous run left (it died without stopping its children)");
    }
    let text =
        serde_json::json!({"token": base::reaper::token(), "pid": std::process::id()}).to_string();
    let written =
        tokio::task::spawn_blocking(move || base::statefile::write_atomic(&path, text.as_bytes()))
            .await
            .map_err(|e| std::io::Error::other(e.to_string()))
            .and_then(|r| r);
    if let Err(e) = written {
        warn!(error = %e, "cannot record this run's token in socket_dir: after a crash, children it leaves will not be ended by the next run");
    }
    let next_id = fresh_ids();
    revived
        .into_iter()
        .map(|s| {
            info!(server = %s.server, pid = s.pid, generation = s.generation,
                "re-adopting the child a crashed run left running (from systemd's file descriptor store); its exit status will be unknown");
            let [stdin, stdout, stderr] = s.pipes;
            let adoption = Adoption {
                carried: Some(Carried::new(Inherited {
                    pid: s.pid,
                    stdin,
                    stdout,
                    stderr,
                    marker: s.marker,
                    since: s.since,
                    pending: Vec::new(),
                    tail: String::new(),
                })),
                restarts: 0,
                last_exit: None,
                rest: None,
                running: true,
                generation: s.generation,
                next_id,
                handshake: s.handshake,
                log_level: s.log_level,
            };
            (s.server, adoption)
        })
        .collect()
}

/// Instance numbers skipped past the highest stored one when this run goes on with the
/// crashed run's token: an instance spawned whose entries never reached the store (a full
/// store, a crash between the spawn and the send) must not have its marker or cgroup name
/// repeated.
const RESUME_MARGIN: u64 = 1024;

/// The instance number in `s`'s marker (`TOKEN:N:NAME`), 0 when unreadable.
fn instance(s: &Stored) -> u64 {
    s.marker
        .split(':')
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Why `s` cannot be re-adopted under `config`, if it cannot (the checks that need no
/// `/proc`).
fn adoptable(s: &Stored, previous: Option<&str>, config: &Config) -> Result<(), String> {
    let Some(token) = previous else {
        return Err("the last run's token is unknown".into());
    };
    if !s.marker.starts_with(&format!("{token}:")) {
        return Err("its marker names another run than the last one".into());
    }
    let Some(cfg) = config.servers.get(&s.server) else {
        return Err("its server is no longer configured".into());
    };
    let Some(hs) = &s.handshake else {
        return Err("its session was not open (no handshake recorded)".into());
    };
    let text = serde_json::to_vec(hs).map_err(|e| e.to_string())?;
    actor::record::decode(cfg, &text)
        .map(|_| ())
        .map_err(|why| format!("its server's configuration changed ({why})"))
}

/// The first child-side request id of a re-adopted session: the child may still answer
/// requests of the crashed run, whose ids counted up from 1 or from an earlier base like
/// this one, so the new ids start at the wall clock in milliseconds times 1,000 (above any id
/// a run could have reached, unless it sent a thousand requests per millisecond since it
/// began), which stays below 2^53 (ids must survive a JavaScript server's number parsing)
/// until the year 2255.
fn fresh_ids() -> u64 {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    ms.saturating_mul(1000).min((1u64 << 53) - (1u64 << 40))
}

#[cfg(test)]
mod tests {
    #[test]
    fn fresh_ids_are_above_any_counter_and_exact_in_a_double() {
        let n = super::fresh_ids();
        assert!(n > 1_700_000_000_000_000, "{n}");
        assert!(n < 1u64 << 53);
        assert_eq!((n as f64) as u64, n);
    }
}
