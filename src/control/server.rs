//! The daemon's side of the control socket: one task per accepted connection reads request
//! lines and answers each from the server actors (`Command::Status`, `Start`, `Stop`,
//! `Restart`) or, for `reload`, from the daemon's main loop, which owns the set of servers.
//!
//! Owns: the answers, read from the [`Registry`]. Never changes the set of servers itself
//! and never blocks the main loop: the waits (a stop ladder, a start until ready) run here.

use super::{ErrorBody, ErrorKind, Op, ReloadReport, Request, Response, MAX_LINE, VERSION};
use actor::registry::{Entry, Registry};
use actor::server::{Command, ServerHandle, State, Status};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::config::ServerConfig;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

/// How long an actor may take to answer a status query before it is reported as unreachable.
const STATUS_TIMEOUT: Duration = Duration::from_secs(5);
/// How often a `start`/`restart` polls the actor while waiting for the outcome.
const POLL: Duration = Duration::from_millis(50);

/// The result of a reload as the main loop reports it.
pub type ReloadOutcome = Result<ReloadReport, ErrorBody>;

/// What a control connection needs from the daemon.
#[derive(Debug, Clone)]
pub struct Ctx {
    /// The servers.
    pub registry: Registry,
    /// Reload requests to the main loop (coalesced there with SIGHUP).
    pub reloads: mpsc::Sender<oneshot::Sender<ReloadOutcome>>,
    /// Upgrade requests to the main loop: answered only with why one was refused.
    pub upgrades: mpsc::Sender<oneshot::Sender<String>>,
    /// This process's upgrades so far and the last refusal.
    pub upgraded: crate::control::Upgraded,
}

/// Who is on the other end of a control connection (the accept loop decides, from
/// `SO_PEERCRED` and the lists in force).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Who {
    /// The supervisor's uid, root, `operator_uids`/`operator_gids`: every verb.
    Operator,
    /// `viewer_uids`/`viewer_gids` only (issue 33): `watch` and `status`, redacted
    /// ([`redact`]); every other verb is refused with `denied`.
    Viewer,
}

/// Who the peer of a control connection is *now*: asked before each request and at each pass
/// of a watch, so a reload that removes a peer from the lists, or makes an operator a viewer,
/// takes effect on its open connections (`None`: neither any more; the connection ends).
pub type Role = Arc<dyn Fn() -> Option<Who> + Send + Sync>;

/// The longest request line a viewer may send (its requests are a few dozen bytes; an
/// operator's may carry a pasted redirect URL, up to [`MAX_LINE`]).
pub const VIEWER_LINE: usize = 64 * 1024;

/// Status members a viewer sees (issue 33): an allow-list, so a member added later is hidden
/// from viewers until it is put here. Left out: `stderr_tail`, `last_actor_panic` (they can
/// quote a child's output, arguments or environment), and of `remote` everything but what
/// [`REMOTE_SHOWN`] names.
const SHOWN: [&str; 18] = [
    "name",
    "state",
    "pid",
    "restarts",
    "era",
    "clients",
    "uptime_s",
    "last_heard_s",
    "probes_sent",
    "probes_answered",
    "ping_served",
    "consecutive_failures",
    "retry_in_ms",
    "last_exit",
    "actor_restarts",
    "limits",
    "traffic",
    "remote",
];

/// The members of a url server's `remote` a viewer sees; its `url` is cut to the scheme and
/// host ([`origin`]): a provider may put a key in the path. No `last_error`, no `auth`.
const REMOTE_SHOWN: [&str; 5] = [
    "url",
    "session",
    "session_age_s",
    "protocol_version",
    "last_http_status",
];

/// `https://host:port` of a URL (no user info, path or query); the text as it is when it has
/// no `://`.
fn origin(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return String::new();
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = authority.rsplit('@').next().unwrap_or_default();
    format!("{scheme}://{host}")
}

/// One server's status (a JSON object) as a viewer sees it: only the [`SHOWN`] members.
pub fn redact(status: &mut serde_json::Value) {
    if let Some(o) = status.as_object_mut() {
        o.retain(|k, _| SHOWN.contains(&k.as_str()));
        if let Some(r) = o.get_mut("remote").and_then(|r| r.as_object_mut()) {
            r.retain(|k, _| REMOTE_SHOWN.contains(&k.as_str()));
            if let Some(u) = r.get_mut("url") {
                *u = origin(u.as_str().unwrap_or_default()).into();
            }
        }
    }
}

/// The refusal of a verb to a viewer.
fn viewers_may_not(op: &Op) -> Response {
    let verb = serde_json::to_value(op)
        .ok()
        .and_then(|v| v.get("verb").and_then(|v| v.as_str()).map(str::to_string))
        .unwrap_or_default();
    Response::error(
        ErrorKind::Denied,
        format!("`{verb}` is for operators; this user is a viewer (viewer_uids/viewer_gids), who may only watch (`watch`, `top`) and read `status`; operator_uids/operator_gids in [supervisor] make an operator"),
    )
}

/// The answer to a peer the lists no longer allow.
fn no_longer_allowed() -> Response {
    Response::error(
        ErrorKind::Denied,
        "this user is no longer an operator or a viewer of this supervisor (a reload changed operator_uids/viewer_uids)",
    )
}

/// Serves one connection of peer `uid` (`SO_PEERCRED`) until the peer closes it, `stop`
/// fires, or `role` says the peer is no longer allowed.
pub async fn serve(stream: UnixStream, ctx: Ctx, role: Role, uid: u32, stop: CancellationToken) {
    let (rd, mut wr) = stream.into_split();
    let mut rd = BufReader::new(rd);
    loop {
        let limit = match role() {
            Some(Who::Operator) => MAX_LINE,
            Some(Who::Viewer) => VIEWER_LINE,
            None => return,
        };
        let mut line = Vec::new();
        let mut limited = (&mut rd).take(limit as u64 + 1);
        let read = tokio::select! {
            r = limited.read_until(b'\n', &mut line) => r,
            _ = stop.cancelled() => return,
        };
        match read {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let too_long = line.len() > limit;
        // Asked again: the read may have waited across a reload.
        let Some(who) = role() else {
            let mut out = serde_json::to_vec(&no_longer_allowed()).unwrap_or_default();
            out.push(b'\n');
            let _ = wr.write_all(&out).await;
            return;
        };
        if !too_long && is_watch(&line) {
            // The connection is a watcher's from now on (issue 33).
            return crate::control::watch::serve(&mut wr, &ctx, &role, &stop).await;
        }
        let resp = if too_long {
            Response::error(ErrorKind::BadRequest, "request line too long")
        } else if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        } else {
            let mut r = tokio::select! {
                r = answer(&line, &ctx, who, uid) => r,
                _ = stop.cancelled() => Response::error(ErrorKind::ShuttingDown, "the supervisor is shutting down"),
            };
            if who == Who::Viewer {
                r.servers.iter_mut().flatten().for_each(redact);
                r.stderr_tail = None;
                r.metrics = None;
            }
            r
        };
        let mut out = serde_json::to_vec(&resp).unwrap_or_default();
        out.push(b'\n');
        if wr.write_all(&out).await.is_err() || too_long {
            return;
        }
    }
}

/// Whether `line` is a `watch` request this daemon speaks.
fn is_watch(line: &[u8]) -> bool {
    serde_json::from_slice::<Request>(line).is_ok_and(|r| r.op == Op::Watch && r.v <= VERSION)
}

/// Answers one request line of a peer who is `who`, uid `uid`: a viewer's request is refused
/// unless it is `status`, decided on the request as this function reads it (one parse, so no
/// line can read as `status` to the check and as another verb to the answer). A login belongs
/// to the uid that asked for it (issue 47 §2).
pub async fn answer(line: &[u8], ctx: &Ctx, who: Who, uid: u32) -> Response {
    let value: serde_json::Value = match serde_json::from_slice(line) {
        Ok(v) => v,
        Err(e) => return Response::error(ErrorKind::BadRequest, format!("not JSON: {e}")),
    };
    if let Some(v) = value.get("v").and_then(|v| v.as_u64()) {
        if v > VERSION as u64 {
            return Response::error(
                ErrorKind::Version,
                format!("protocol version {v} is not supported (this supervisor speaks {VERSION}); use a matching mcp-supervisor binary"),
            );
        }
    }
    let req: Request = match serde_json::from_value(value) {
        Ok(r) => r,
        Err(e) => return Response::error(ErrorKind::BadRequest, format!("bad request: {e}")),
    };
    match &req.op {
        // A pasted redirect carries its code and state: never logged.
        Op::LoginPaste { name, .. } => debug!(verb = "login-paste", name, "control request"),
        op => debug!(request = ?op, "control request"),
    }
    if who == Who::Viewer && !matches!(req.op, Op::Status { .. }) {
        return viewers_may_not(&req.op);
    }
    match req.op {
        Op::Status { name } => status(ctx, name.as_deref()).await,
        Op::Logs { name } => match lookup_server(ctx, &name) {
            Err(r) => *r,
            Ok(e) => match query(&e.handle).await {
                Some(s) => Response {
                    stderr_tail: Some(s.stderr_tail),
                    ..Response::ok()
                },
                None => unreachable_server(&name),
            },
        },
        Op::Metrics => Response {
            metrics: Some(support::observe::metrics().render()),
            ..Response::ok()
        },
        Op::Stop { name } => stop(ctx, &name).await,
        Op::Login {
            name,
            no_browser,
            sudo_uid,
        } => match lookup_server(ctx, &name) {
            Ok(e) => {
                let owners = super::login::owners(uid, sudo_uid);
                super::login::begin(&name, &e, &owners, no_browser).await
            }
            Err(r) => *r,
        },
        Op::LoginWait { name } => match lookup_server(ctx, &name) {
            Ok(e) => match super::login::wait(&name, &e, uid).await {
                Ok(()) => start(ctx, &name, false).await,
                Err(r) => *r,
            },
            Err(r) => *r,
        },
        Op::LoginPaste { name, url } => match lookup_server(ctx, &name) {
            Ok(e) => super::login::paste(&name, &e, &url, uid),
            Err(r) => *r,
        },
        Op::Logout { name } => match lookup_server(ctx, &name) {
            Ok(e) => super::login::logout(&name, &e).await,
            Err(r) => *r,
        },
        Op::Start { name } => start(ctx, &name, false).await,
        Op::Restart { name } => start(ctx, &name, true).await,
        // Served by `serve` (a stream); here only when it could not be (a version mismatch is
        // answered above).
        Op::Watch => Response::error(ErrorKind::BadRequest, "watch opens a stream of its own"),
        Op::Upgraded => Response {
            upgraded: Some(ctx.upgraded.clone()),
            ..Response::ok()
        },
        Op::Upgrade => {
            let (tx, rx) = oneshot::channel();
            if ctx.upgrades.send(tx).await.is_err() {
                return Response::error(ErrorKind::ShuttingDown, "the supervisor is shutting down");
            }
            match rx.await {
                Ok(why) => Response::error(ErrorKind::Failed, why),
                // The main loop keeps the request until the process is replaced.
                Err(_) => {
                    Response::error(ErrorKind::ShuttingDown, "the supervisor is shutting down")
                }
            }
        }
        Op::Reload => {
            let (tx, rx) = oneshot::channel();
            if ctx.reloads.send(tx).await.is_err() {
                return Response::error(ErrorKind::ShuttingDown, "the supervisor is shutting down");
            }
            match rx.await {
                Ok(Ok(report)) => Response {
                    reload: Some(report),
                    ..Response::ok()
                },
                Ok(Err(e)) => Response::error(e.kind, e.message),
                Err(_) => {
                    Response::error(ErrorKind::ShuttingDown, "the supervisor is shutting down")
                }
            }
        }
    }
}

/// [`lookup`] for a verb that acts on a child or a session: an endpoint has neither, and the
/// answer names its servers (issue 31, "verbs and status").
pub(super) fn lookup_server(ctx: &Ctx, name: &str) -> Result<Entry, Box<Response>> {
    let e = lookup(ctx, name)?;
    match &e.sources {
        None => Ok(e),
        Some(sources) => Err(Box::new(Response::error(
            ErrorKind::NotApplicable,
            format!(
                "`{name}` is an endpoint: it runs no child and has no session of its own; act on its servers by name: {}",
                sources.join(", ")
            ),
        ))),
    }
}

pub(super) fn lookup(ctx: &Ctx, name: &str) -> Result<Entry, Box<Response>> {
    ctx.registry.get(name).ok_or_else(|| {
        let known: Vec<String> = ctx.registry.all().into_iter().map(|(n, _)| n).collect();
        Box::new(Response::error(
            ErrorKind::UnknownServer,
            format!(
                "no server named `{name}` (configured: {})",
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            ),
        ))
    })
}

fn unreachable_server(name: &str) -> Response {
    Response::error(
        ErrorKind::Failed,
        format!("server `{name}` did not answer (it may be shutting down)"),
    )
}

/// Asks an actor for its status.
pub async fn query(handle: &ServerHandle) -> Option<Status> {
    let (tx, rx) = oneshot::channel();
    handle.commands.send(Command::Status(tx)).await.ok()?;
    tokio::time::timeout(STATUS_TIMEOUT, rx).await.ok()?.ok()
}

pub(super) fn to_values(statuses: &[Status]) -> Vec<serde_json::Value> {
    statuses
        .iter()
        .filter_map(|s| serde_json::to_value(s).ok())
        .collect()
}

/// Every server's status and every endpoint's line, as `status` shows them (`watch`).
pub(super) async fn status_all(ctx: &Ctx) -> (Vec<serde_json::Value>, Vec<serde_json::Value>) {
    let r = status(ctx, None).await;
    (
        r.servers.unwrap_or_default(),
        r.endpoints.unwrap_or_default(),
    )
}

async fn status(ctx: &Ctx, name: Option<&str>) -> Response {
    let entries = match name {
        Some(n) => match lookup(ctx, n) {
            Ok(e) => vec![(n.to_string(), e)],
            Err(r) => return *r,
        },
        None => ctx.registry.all(),
    };
    let mut out = Vec::new();
    let mut endpoints = Vec::new();
    for (n, e) in &entries {
        if let Some(sources) = &e.sources {
            endpoints.push(endpoint_status(ctx, n, sources).await);
            continue;
        }
        match query(&e.handle).await {
            Some(s) => out.push((s, e.seats.clone())),
            // Removed by a reload while we asked: not a server any more.
            None if name.is_none() => {}
            None => return unreachable_server(n),
        }
    }
    let servers = out
        .iter()
        .filter_map(|(s, seats)| {
            let mut v = serde_json::to_value(s).ok()?;
            if let (Some(seats), Some(o)) = (seats, v.as_object_mut()) {
                o.insert("seats".into(), seats_value(seats));
            }
            Some(v)
        })
        .collect();
    Response {
        servers: Some(servers),
        endpoints: (!endpoints.is_empty()).then_some(endpoints),
        ..Response::ok()
    }
}

/// A server's `seats` in `status` (issue 47 §4): `{"taken": N, "holders": [{"uid": U,
/// "taken": n} | {"address": A, "taken": n}, …]}`.
fn seats_value(seats: &actor::seats::Seats) -> serde_json::Value {
    use actor::seats::Holder;
    let holders: Vec<serde_json::Value> = seats
        .holders()
        .into_iter()
        .map(|(h, n)| match h {
            Holder::Uid(u) => serde_json::json!({"uid": u, "taken": n}),
            Holder::Addr(a) => serde_json::json!({"address": a.to_string(), "taken": n}),
        })
        .collect();
    serde_json::json!({"taken": seats.taken(), "holders": holders})
}

/// An endpoint's line in `status`: each source's state, from its actor now.
async fn endpoint_status(ctx: &Ctx, name: &str, sources: &[String]) -> serde_json::Value {
    let mut out = Vec::new();
    for s in sources {
        let state = match ctx.registry.get(s) {
            Some(e) => match query(&e.handle).await {
                Some(st) => state_name(st.state),
                None => "unknown".to_string(),
            },
            None => "removed".to_string(),
        };
        out.push(serde_json::json!({"name": s, "state": state}));
    }
    serde_json::json!({"name": name, "servers": out})
}

async fn stop(ctx: &Ctx, name: &str) -> Response {
    let e = match lookup_server(ctx, name) {
        Ok(e) => e,
        Err(r) => return *r,
    };
    info!(server = %name, "control: stop");
    let (tx, rx) = oneshot::channel();
    if e.handle.commands.send(Command::Stop(tx)).await.is_err() {
        return unreachable_server(name);
    }
    let _ = tokio::time::timeout(stop_budget(&e.cfg), rx).await;
    match query(&e.handle).await {
        Some(s) if s.state == State::Stopped => Response {
            servers: Some(to_values(&[s])),
            ..Response::ok()
        },
        Some(s) => Response {
            servers: Some(to_values(std::slice::from_ref(&s))),
            ..Response::error(
                ErrorKind::Failed,
                format!("server `{name}` is {} after stop", state_name(s.state)),
            )
        },
        None => unreachable_server(name),
    }
}

/// `start` (or `restart`): sends the command, then waits until the server is ready or gave
/// up (backoff, failed, stopped), within its start budget.
async fn start(ctx: &Ctx, name: &str, restart: bool) -> Response {
    let e = match lookup_server(ctx, name) {
        Ok(e) => e,
        Err(r) => return *r,
    };
    let Some(before) = query(&e.handle).await else {
        return unreachable_server(name);
    };
    info!(server = %name, "control: {}", if restart { "restart" } else { "start" });
    let (tx, rx) = oneshot::channel();
    let cmd = if restart {
        Command::Restart(tx)
    } else {
        Command::Start(tx)
    };
    if e.handle.commands.send(cmd).await.is_err() || rx.await.is_err() {
        return unreachable_server(name);
    }
    let end = start_deadline(Instant::now(), &e.cfg);
    let last = loop {
        let Some(s) = query(&e.handle).await else {
            return unreachable_server(name);
        };
        // A restart of an idle server is a start (nothing ran): no restart is counted.
        let restarted = !restart || s.restarts > before.restarts || before.state == State::Idle;
        let settled =
            !matches!(s.state, State::Starting | State::Stopping | State::Idle) && restarted;
        if settled || Instant::now() >= end {
            break s;
        }
        tokio::time::sleep(POLL).await;
    };
    if last.state == State::Ready {
        return Response {
            servers: Some(to_values(&[last])),
            ..Response::ok()
        };
    }
    let mut why = format!(
        "server `{name}` did not become ready: it is {}",
        state_name(last.state)
    );
    if let Some(x) = &last.last_exit {
        why.push_str(&format!(", last exit {}", x.reason));
    }
    if let Some(l) = last
        .stderr_tail
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
    {
        why.push_str(&format!(", stderr: {}", l.trim()));
    }
    Response {
        servers: Some(to_values(&[last])),
        ..Response::error(ErrorKind::Failed, why)
    }
}

/// How long `stop` waits for the child to exit: the whole stop ladder (`stop_grace`, then
/// `kill_timeout`) plus 5 s to reap and report.
fn stop_budget(cfg: &ServerConfig) -> Duration {
    base::deadline::sum(&[cfg.stop_grace, cfg.kill_timeout, Duration::from_secs(5)])
}

/// Until when `start` and `restart` wait for the server to settle, from `now`: the start
/// (`start_timeout`), a stop ladder before it (restart), the spawn floor (`backoff_initial`),
/// plus 2 s.
fn start_deadline(now: Instant, cfg: &ServerConfig) -> Instant {
    let budget = base::deadline::sum(&[
        cfg.start_timeout,
        cfg.stop_grace,
        cfg.kill_timeout,
        cfg.backoff_initial,
        Duration::from_secs(2),
    ]);
    base::deadline::after(now, budget)
}

/// `ready`, `backoff`, ...: the status vocabulary.
pub fn state_name(s: State) -> String {
    serde_json::to_value(s)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::{start_deadline, stop_budget};
    use std::time::{Duration, Instant};

    fn cfg() -> support::config::ServerConfig {
        support::config::parse(
            std::path::Path::new("s.toml"),
            "[servers.a]\ncommand = \"x\"\n",
        )
        .map(|c| c.servers["a"].clone())
        .unwrap()
    }

    #[test]
    fn budgets_are_the_ladder_and_the_start_and_never_overflow() {
        let mut c = cfg();
        assert_eq!(stop_budget(&c), Duration::from_secs(2 + 5 + 5));
        let now = Instant::now();
        assert_eq!(
            start_deadline(now, &c),
            now + Duration::from_secs(60 + 2 + 5 + 1 + 2)
        );
        // Values no file may hold (the bounds refuse them) still cannot panic the verbs.
        c.stop_grace = Duration::MAX;
        c.start_timeout = Duration::MAX;
        assert_eq!(stop_budget(&c), Duration::MAX);
        assert!(start_deadline(now, &c) > now + Duration::from_secs(3600));
    }
}
