//! `watch` (issue 33 §2, §3): the control socket's stream of what `status` shows, for
//! `mcp-supervisor watch --json` and, later, `top`.
//!
//! Wire: after `{"v":1,"verb":"watch"}` the connection carries only answer lines, each
//! `{"v":1,"ok":true,"watch":{"format":1,"kind":"snapshot"|"change","seq":N,
//! "servers":[…],"endpoints":[…],"removed":["NAME",…]}}`. The first (`snapshot`, `seq` 1) is
//! sent at once and holds every server and endpoint as `status --json` shows them; each
//! later one (`change`) holds only the servers and endpoints whose status changed (uptime
//! and the time since the last message aside) and the names that are gone. A daemon with
//! [`MAX_WATCHERS`] watchers already answers one error line (`busy`) and closes.
//!
//! The snapshot also says `"role"`: `"operator"`, or `"viewer"` for `viewer_uids`/`viewer_gids`,
//! whose lines never hold stderr tails, command lines or panic messages
//! ([`super::server::redact`]).
//!
//! Each status holds `traffic` (requests/s, error rate, p50/p99, availability, burn rates, the
//! per-minute counts), which moves with time: a watcher also looks every [`REFRESH`] while it
//! watches, and sends what moved.
//!
//! Cost: nothing while nobody watches but [`changed`] (an actor calls it when its state, pid,
//! restarts, clients or instance change; the registry when a reload adds or removes one):
//! one counter bump in a `tokio::sync::watch`, which wakes the watchers. A watcher then asks
//! every actor for its status and sends what differs, at most once per [`COALESCE`]: a slow
//! viewer is never queued a backlog, it gets the newer state when it reads again.

use super::server::{redact, status_all, Ctx, Role, Who};
use super::{ErrorKind, Response};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio_util::sync::CancellationToken;

/// Watchers served at once; one more is refused with `busy`.
pub const MAX_WATCHERS: usize = 32;
/// Of those, the most viewers may hold: the rest stay free for operators.
pub const MAX_VIEWER_WATCHERS: usize = 16;
/// How long one line may take to be written: a watcher that reads nothing for this long is
/// dropped (its seat is given back), so it never holds a task, a seat or a shutdown.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Least time between two lines to one watcher: changes within it go out as one line.
pub const COALESCE: Duration = Duration::from_millis(100);
/// How often a watcher looks again with nothing changed, for the traffic, which moves with
/// time (only while someone watches).
pub const REFRESH: Duration = Duration::from_secs(2);
/// The stream's format (each line's `format`); a change that drops or renames a member bumps
/// it.
pub const FORMAT: u32 = 1;
/// Status members that change on their own (with time): not a change by themselves.
const VOLATILE: [&str; 2] = ["uptime_s", "last_heard_s"];

/// Watchers now.
static WATCHING: AtomicUsize = AtomicUsize::new(0);
/// Viewers among them.
static VIEWING: AtomicUsize = AtomicUsize::new(0);

/// A watcher's place among the [`MAX_WATCHERS`] (a viewer's also among the
/// [`MAX_VIEWER_WATCHERS`]), given back when dropped.
struct Seat {
    viewer: bool,
}

/// Takes one of `cap` places counted by `n`.
fn take_one(n: &AtomicUsize, cap: usize) -> bool {
    n.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
        (n < cap).then_some(n + 1)
    })
    .is_ok()
}

impl Seat {
    #[cfg(test)]
    fn take(who: Who) -> Option<Seat> {
        Seat::take_or_why(who).ok()
    }

    /// A seat, or why there is none, as the refused watcher is told (issue 47 §8: the count
    /// named is the one that is full).
    fn take_or_why(who: Who) -> Result<Seat, String> {
        let viewer = who == Who::Viewer;
        if viewer && !take_one(&VIEWING, MAX_VIEWER_WATCHERS) {
            return Err(format!(
                "{MAX_VIEWER_WATCHERS} viewers are watching already (viewers hold at most {MAX_VIEWER_WATCHERS} of the {MAX_WATCHERS} watchers); try again when one has left"
            ));
        }
        if !take_one(&WATCHING, MAX_WATCHERS) {
            if viewer {
                VIEWING.fetch_sub(1, Ordering::AcqRel);
            }
            return Err(format!(
                "{MAX_WATCHERS} watchers already; try again when one has left"
            ));
        }
        Ok(Seat { viewer })
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        WATCHING.fetch_sub(1, Ordering::AcqRel);
        if self.viewer {
            VIEWING.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// What is compared between two lines: a status without its [`VOLATILE`] members.
fn steady(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(o) = v.as_object_mut() {
        for k in VOLATILE {
            o.remove(k);
        }
    }
    v
}

/// Servers and endpoints by `server:NAME` / `endpoint:NAME`.
type Shown = BTreeMap<String, (Value, Value)>;

/// Every server's and endpoint's status now, keyed, with its steady part.
async fn shown(ctx: &Ctx, who: Who) -> Shown {
    let (mut servers, endpoints) = status_all(ctx).await;
    if who == Who::Viewer {
        servers.iter_mut().for_each(redact);
    }
    let name = |v: &Value| v["name"].as_str().unwrap_or_default().to_string();
    servers
        .into_iter()
        .map(|v| (format!("server:{}", name(&v)), v))
        .chain(
            endpoints
                .into_iter()
                .map(|v| (format!("endpoint:{}", name(&v)), v)),
        )
        .map(|(k, v)| (k, (steady(&v), v)))
        .collect()
}

/// The line for `now` after `before` (`None`: the first, a snapshot); `None` when nothing
/// changed.
fn line(seq: u64, before: Option<&Shown>, now: &Shown, who: Who) -> Option<Value> {
    let changed =
        |k: &String, s: &Value| before.is_none_or(|b| b.get(k).is_none_or(|(p, _)| p != s));
    let pick = |prefix: &str| -> Vec<Value> {
        now.iter()
            .filter(|(k, (s, _))| k.starts_with(prefix) && changed(k, s))
            .map(|(_, (_, v))| v.clone())
            .collect()
    };
    let servers = pick("server:");
    let endpoints = pick("endpoint:");
    let removed: Vec<String> = before
        .map(|b| {
            b.keys()
                .filter(|k| !now.contains_key(*k))
                .filter_map(|k| k.split_once(':').map(|(_, n)| n.to_string()))
                .collect()
        })
        .unwrap_or_default();
    if before.is_some() && servers.is_empty() && endpoints.is_empty() && removed.is_empty() {
        return None;
    }
    let mut out = serde_json::json!({
        "format": FORMAT,
        "kind": if before.is_none() { "snapshot" } else { "change" },
        "seq": seq,
        "servers": servers,
        "endpoints": endpoints,
        "removed": removed,
    });
    if let Some(o) = out.as_object_mut().filter(|_| before.is_none()) {
        let role = match who {
            Who::Operator => "operator",
            Who::Viewer => "viewer",
        };
        o.insert("role".into(), role.into());
    }
    Some(out)
}

/// Writes one answer line; false when the watcher is gone, has read nothing for
/// [`WRITE_TIMEOUT`], or `stop` fired.
async fn send<W: AsyncWriteExt + Unpin>(
    wr: &mut W,
    resp: &Response,
    stop: &CancellationToken,
) -> bool {
    let mut out = serde_json::to_vec(resp).unwrap_or_default();
    out.push(b'\n');
    tokio::select! {
        r = tokio::time::timeout(WRITE_TIMEOUT, wr.write_all(&out)) => matches!(r, Ok(Ok(()))),
        _ = stop.cancelled() => false,
    }
}

/// Serves one watcher on `wr` until it goes, `stop` fires, the daemon ends, or `role` says
/// the peer is no longer allowed (a viewer's lines are redacted, as `role` says at each pass).
pub async fn serve<W: AsyncWriteExt + Unpin>(
    wr: &mut W,
    ctx: &Ctx,
    role: &Role,
    stop: &CancellationToken,
) {
    let Some(first) = role() else { return };
    let _seat = match Seat::take_or_why(first) {
        Ok(seat) => seat,
        Err(why) => {
            send(wr, &Response::error(ErrorKind::Busy, why), stop).await;
            return;
        }
    };
    let mut rx = support::observe::changes().subscribe();
    let mut before: Option<Shown> = None;
    let mut seq = 0u64;
    loop {
        rx.borrow_and_update();
        let Some(who) = role() else {
            let gone = Response::error(
                ErrorKind::Denied,
                "this user is no longer an operator or a viewer of this supervisor",
            );
            send(wr, &gone, stop).await;
            return;
        };
        let now = shown(ctx, who).await;
        if let Some(watch) = line(seq.saturating_add(1), before.as_ref(), &now, who) {
            seq = seq.saturating_add(1);
            let resp = Response {
                watch: Some(watch),
                ..Response::ok()
            };
            if !send(wr, &resp, stop).await {
                return;
            }
        }
        before = Some(now);
        tokio::select! {
            _ = tokio::time::sleep(COALESCE) => {}
            _ = stop.cancelled() => return,
        }
        tokio::select! {
            r = rx.changed() => if r.is_err() { return },
            _ = tokio::time::sleep(REFRESH.saturating_sub(COALESCE)) => {}
            _ = stop.cancelled() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{line, steady, Seat, Shown, Who, MAX_VIEWER_WATCHERS, MAX_WATCHERS};
    use serde_json::json;

    fn shown(entries: &[(&str, serde_json::Value)]) -> Shown {
        entries
            .iter()
            .map(|(k, v)| (k.to_string(), (steady(v), v.clone())))
            .collect()
    }

    #[test]
    fn a_snapshot_first_then_only_what_changed_and_what_left() {
        let a = json!({"name": "a", "state": "ready", "uptime_s": 1.0});
        let b = json!({"name": "b", "state": "ready", "uptime_s": 1.0});
        let first = shown(&[("server:a", a.clone()), ("server:b", b.clone())]);
        let l = line(1, None, &first, Who::Operator).unwrap();
        assert_eq!(l["kind"], "snapshot");
        assert_eq!(l["role"], "operator");
        assert_eq!(l["servers"].as_array().unwrap().len(), 2);
        // Only time passed: nothing to say.
        let later = shown(&[
            (
                "server:a",
                json!({"name": "a", "state": "ready", "uptime_s": 9.0}),
            ),
            (
                "server:b",
                json!({"name": "b", "state": "ready", "uptime_s": 9.0}),
            ),
        ]);
        assert!(line(2, Some(&first), &later, Who::Operator).is_none());
        // b restarts, a is removed, an endpoint appears.
        let next = shown(&[
            (
                "server:b",
                json!({"name": "b", "state": "backoff", "uptime_s": 0.0}),
            ),
            ("endpoint:e", json!({"name": "e", "servers": []})),
        ]);
        let l = line(2, Some(&later), &next, Who::Operator).unwrap();
        assert_eq!(l["kind"], "change");
        assert_eq!(l["seq"], 2);
        assert_eq!(
            l["servers"],
            json!([{"name": "b", "state": "backoff", "uptime_s": 0.0}])
        );
        assert_eq!(l["endpoints"][0]["name"], "e");
        assert_eq!(l["removed"], json!(["a"]));
    }

    #[test]
    fn watchers_are_capped_and_viewers_leave_seats_for_operators() {
        let viewers: Vec<Seat> = (0..MAX_WATCHERS)
            .map_while(|_| Seat::take(Who::Viewer))
            .collect();
        assert_eq!(viewers.len(), MAX_VIEWER_WATCHERS);
        // Issue 47 §8: the refusal names the count that is full.
        let why = Seat::take_or_why(Who::Viewer).err().unwrap_or_default();
        assert!(
            why.starts_with(&format!(
                "{MAX_VIEWER_WATCHERS} viewers are watching already"
            )),
            "{why}"
        );
        let operators: Vec<Seat> = (0..MAX_WATCHERS)
            .map_while(|_| Seat::take(Who::Operator))
            .collect();
        assert_eq!(operators.len(), MAX_WATCHERS - MAX_VIEWER_WATCHERS);
        assert!(Seat::take(Who::Operator).is_none());
        let why = Seat::take_or_why(Who::Operator).err().unwrap_or_default();
        assert!(
            why.starts_with(&format!("{MAX_WATCHERS} watchers already")),
            "{why}"
        );
        drop(viewers);
        drop(operators);
        assert!(Seat::take(Who::Viewer).is_some());
    }
}
