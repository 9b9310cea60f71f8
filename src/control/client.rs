//! The CLI's side of the control socket: connect, send one request, print the answer, turn it
//! into an exit code (the codes are in `cli.rs` and docs/book/src/reference/cli.md).
//!
//! Synchronous on purpose: one request, one answer, no runtime needed.

use super::{ErrorKind, Op, Request, Response, MAX_LINE};
use base::exit::{EXIT_CONFIG, EXIT_FAILED, EXIT_NOT_RUNNING, EXIT_UNKNOWN_SERVER};
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, SystemTime};

/// How long the CLI waits for an answer. `start`/`restart` wait for the server inside the
/// daemon (up to its start budget), so this is generous.
pub const TIMEOUT: Duration = Duration::from_secs(600);

/// Why a request got no answer.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Nothing accepts connections on the control socket.
    #[error("the supervisor is not running (cannot connect to {path}: {source})")]
    NotRunning {
        /// The control socket.
        path: String,
        /// Why connecting failed.
        source: std::io::Error,
    },
    /// The connection broke or timed out, or the answer was not a response.
    #[error("{0}")]
    Broken(String),
}

/// Sends `req` to the daemon listening on `socket` and returns its answer.
pub fn request(socket: &Path, req: &Request) -> Result<Response, ClientError> {
    request_within(socket, req, TIMEOUT)
}

/// [`request`], waiting up to `timeout` for the answer.
pub fn request_within(
    socket: &Path,
    req: &Request,
    timeout: Duration,
) -> Result<Response, ClientError> {
    let mut stream = UnixStream::connect(socket).map_err(|source| ClientError::NotRunning {
        path: socket.display().to_string(),
        source,
    })?;
    stream
        .set_read_timeout(Some(timeout))
        .and_then(|_| stream.set_write_timeout(Some(TIMEOUT)))
        .map_err(|e| ClientError::Broken(e.to_string()))?;
    let refused = || {
        ClientError::Broken(format!(
            "the supervisor closed the connection without answering (is this user an operator of {}? see `operator_uids`/`operator_gids` in [supervisor] of the configuration)",
            socket.display()
        ))
    };
    let mut line = serde_json::to_vec(req)
        .map_err(|e| ClientError::Broken(format!("cannot encode the request: {e}")))?;
    line.push(b'\n');
    if let Err(e) = stream.write_all(&line) {
        if matches!(
            e.kind(),
            std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
        ) {
            return Err(refused());
        }
        return Err(ClientError::Broken(format!(
            "cannot send the request to {}: {e}",
            socket.display()
        )));
    }
    let mut reader = BufReader::new(stream.take(MAX_LINE as u64 + 1));
    let mut answer = Vec::new();
    match reader.read_until(b'\n', &mut answer) {
        Ok(0) => Err(refused()),
        // A peer refused by SO_PEERCRED is closed with our request unread: a reset.
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => Err(refused()),
        Ok(_) => serde_json::from_slice(&answer).map_err(|e| {
            ClientError::Broken(format!("unreadable answer from the supervisor: {e}"))
        }),
        Err(e) => Err(ClientError::Broken(format!(
            "no answer from the supervisor: {e}"
        ))),
    }
}

/// Runs one CLI verb against the daemon whose control socket is `socket`: prints the result on
/// stdout (errors on stderr) and returns the exit code.
pub fn run(socket: &Path, op: Op, json: bool) -> i32 {
    let resp = match request(socket, &Request::new(op.clone())) {
        Ok(r) => r,
        Err(e @ ClientError::NotRunning { .. }) => {
            eprintln!("mcp-supervisor: {e}");
            return EXIT_NOT_RUNNING;
        }
        Err(e) => {
            eprintln!("mcp-supervisor: {e}");
            return EXIT_FAILED;
        }
    };
    if !resp.ok {
        return refused(&resp);
    }
    let servers = resp.servers.clone().unwrap_or_default();
    match op {
        Op::Status { .. } if json => {
            let mut out = serde_json::Map::new();
            out.insert("servers".into(), serde_json::json!(servers));
            if let Some(e) = &resp.endpoints {
                out.insert("endpoints".into(), serde_json::json!(e));
            }
            println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
        }
        Op::Status { .. } => {
            print!("{}", table(&servers, SystemTime::now()));
            if let Some(e) = &resp.endpoints {
                print!("{}", endpoint_lines(e));
            }
        }
        Op::Metrics => print!("{}", resp.metrics.unwrap_or_default()),
        Op::Logs { .. } => {
            let tail = resp.stderr_tail.unwrap_or_default();
            print!("{tail}");
            if !tail.is_empty() && !tail.ends_with('\n') {
                println!();
            }
        }
        Op::Reload => print_reload(&resp.reload.unwrap_or_default(), json),
        Op::Upgrade | Op::Upgraded | Op::Watch => {}
        Op::Login { .. } | Op::LoginPaste { .. } => {}
        Op::Start { .. }
        | Op::Stop { .. }
        | Op::Restart { .. }
        | Op::LoginWait { .. }
        | Op::Logout { .. } => {
            for s in &servers {
                if json {
                    println!("{}", serde_json::to_string_pretty(s).unwrap_or_default());
                } else {
                    let pid = s["pid"]
                        .as_u64()
                        .map(|p| format!(" (pid {p})"))
                        .unwrap_or_default();
                    println!(
                        "{}: {}{pid}",
                        s["name"].as_str().unwrap_or("?"),
                        s["state"].as_str().unwrap_or("?")
                    );
                }
            }
        }
    }
    0
}

/// `mcp-supervisor upgrade` (issue 32 §1): asks the daemon to execute its binary again in
/// place, then waits (up to `wait`) for the daemon to answer again with one more upgrade
/// counted. Exit codes: 0 upgraded (same pid), 1 refused (the old daemon serves on; why is
/// printed), 3 no daemon.
pub fn upgrade(socket: &Path, wait: Duration) -> i32 {
    let upgraded = |timeout| -> Result<crate::control::Upgraded, ClientError> {
        let r = request_within(socket, &Request::new(Op::Upgraded), timeout)?;
        r.upgraded
            .ok_or_else(|| ClientError::Broken("the supervisor does not know `upgrade`".into()))
    };
    // A refusal (a viewer asking, issue 47 §8) is said as the daemon says it, like any verb's.
    match request_within(socket, &Request::new(Op::Upgraded), TIMEOUT) {
        Ok(r) if !r.ok => return refused(&r),
        _ => {}
    }
    let before = match upgraded(TIMEOUT) {
        Ok(u) => u,
        Err(e @ ClientError::NotRunning { .. }) => {
            eprintln!("mcp-supervisor: {e}");
            return EXIT_NOT_RUNNING;
        }
        Err(e) => {
            eprintln!("mcp-supervisor upgrade: {e}");
            return EXIT_FAILED;
        }
    };
    // Answered only when refused before the hand-over (the connection ends at the hand-over).
    match request_within(socket, &Request::new(Op::Upgrade), wait) {
        Ok(r) if !r.ok => {
            let why = r.error.map(|e| e.message).unwrap_or_default();
            eprintln!("mcp-supervisor upgrade: refused: {why}");
            return EXIT_FAILED;
        }
        _ => {}
    }
    let deadline = std::time::Instant::now() + wait;
    while std::time::Instant::now() < deadline {
        if let Ok(after) = upgraded(Duration::from_secs(2)) {
            if after.upgrades > before.upgrades {
                if let Some(why) = after.refused {
                    eprintln!("mcp-supervisor upgrade: the new binary refused the hand-over; the old one serves again: {why}");
                    return EXIT_FAILED;
                }
                println!(
                    "upgraded in place (pid {}, upgrade {})",
                    after.pid, after.upgrades
                );
                return 0;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!("mcp-supervisor upgrade: no answer from the upgraded supervisor within {wait:?}");
    EXIT_FAILED
}

/// An open `watch` stream (issue 33): what `watch --json` prints and `top` draws.
pub struct WatchStream {
    reader: BufReader<UnixStream>,
}

/// How the next line of a [`WatchStream`] came.
pub enum Next {
    /// One line's `watch` object.
    Line(Value),
    /// The daemon ended the stream (it stopped, or closed it without a word).
    Ended,
    /// The daemon refused or broke the stream: why, for a person.
    Failed(String),
}

/// Whether `e` means the other end closed the connection (a refused peer's request is left
/// unread, so the daemon's close resets it).
fn closed(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
    )
}

/// What to say when the daemon closed a watch without answering its request.
fn refused_hint(socket: &Path) -> String {
    format!("the supervisor closed the connection without answering (is this user an operator or a viewer of {}? see `operator_uids` and `viewer_uids` in [supervisor] of the configuration)", socket.display())
}

impl WatchStream {
    /// Asks the daemon at `socket` for its stream and reads the first line (the snapshot),
    /// waiting at most `first_within` for it. `Err` is the exit code, said on stderr as
    /// `mcp-supervisor VERB: …`: 3 no daemon, 1 refused or broken.
    pub fn open(
        socket: &Path,
        verb: &str,
        first_within: Duration,
    ) -> Result<(WatchStream, Value), i32> {
        let mut stream = UnixStream::connect(socket).map_err(|source| {
            let e = ClientError::NotRunning {
                path: socket.display().to_string(),
                source,
            };
            eprintln!("mcp-supervisor: {e}");
            EXIT_NOT_RUNNING
        })?;
        let mut line = serde_json::to_vec(&Request::new(Op::Watch)).unwrap_or_default();
        line.push(b'\n');
        if let Err(e) = stream.write_all(&line) {
            let why = if closed(&e) {
                refused_hint(socket)
            } else {
                e.to_string()
            };
            eprintln!("mcp-supervisor {verb}: {why}");
            return Err(EXIT_FAILED);
        }
        let _ = stream.set_read_timeout(Some(first_within));
        let mut s = WatchStream {
            reader: BufReader::new(stream),
        };
        let first = match s.next_line() {
            Next::Line(v) => v,
            Next::Ended => {
                eprintln!("mcp-supervisor {verb}: {}", refused_hint(socket));
                return Err(EXIT_FAILED);
            }
            Next::Failed(why) => {
                eprintln!("mcp-supervisor {verb}: {why}");
                return Err(EXIT_FAILED);
            }
        };
        let _ = s.reader.get_ref().set_read_timeout(None);
        Ok((s, first))
    }

    /// The next line.
    pub fn next_line(&mut self) -> Next {
        let mut buf = Vec::new();
        match (&mut self.reader)
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut buf)
        {
            Ok(0) => return Next::Ended,
            Ok(_) => {}
            Err(e) if closed(&e) => return Next::Ended,
            Err(e) => return Next::Failed(e.to_string()),
        }
        let resp: Response = match serde_json::from_slice(&buf) {
            Ok(r) => r,
            Err(e) => return Next::Failed(format!("not an answer: {e}")),
        };
        match resp.watch.filter(|_| resp.ok) {
            Some(w) => Next::Line(w),
            None => Next::Failed(format!(
                "refused: {}",
                resp.error
                    .map(|e| e.message)
                    .unwrap_or_else(|| "this supervisor does not stream (upgrade it)".into())
            )),
        }
    }
}

/// `mcp-supervisor watch --json` (issue 33 §2): asks the daemon for its stream and prints each
/// line's `watch` object as one JSON line, flushed, until the daemon ends it. Exit codes: 0
/// the daemon ended the stream (it stopped) or stdout closed, 1 refused (too many watchers, an
/// older daemon, neither an operator nor a viewer), 3 no daemon.
pub fn watch(socket: &Path) -> i32 {
    let (mut stream, first) = match WatchStream::open(socket, "watch", TIMEOUT) {
        Ok(s) => s,
        Err(code) => return code,
    };
    let stdout = std::io::stdout();
    let mut line = first;
    loop {
        let mut out = stdout.lock();
        if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
            return 0;
        }
        drop(out);
        line = match stream.next_line() {
            Next::Line(v) => v,
            Next::Ended => return 0,
            Next::Failed(why) => {
                eprintln!("mcp-supervisor watch: {why}");
                return EXIT_FAILED;
            }
        };
    }
}

/// `mcp-supervisor login NAME` (issue 30): asks the daemon for the URL to open and opens a
/// browser on it: the start page on the daemon's loopback listener, which sends this user's
/// browser on to the authorization URL, so that URL (its `state`, its PKCE challenge) is on
/// no command line (issue 47 §2). With `no_browser` it prints the authorization URL itself,
/// on its own stdout, and reads the redirect URL pasted back. Then it waits for the daemon to
/// finish the sign-in and start the server. Run as root through `sudo`, it passes `SUDO_UID`
/// so that user's browser may complete the login. Exit codes: 0 signed in, 1 denied or timed
/// out, 2 not a url server that signs in, 3 no daemon, 4 no such server.
pub fn login(socket: &Path, name: &str, no_browser: bool) -> i32 {
    let fail = |e: ClientError| match e {
        e @ ClientError::NotRunning { .. } => {
            eprintln!("mcp-supervisor: {e}");
            EXIT_NOT_RUNNING
        }
        e => {
            eprintln!("mcp-supervisor: {e}");
            EXIT_FAILED
        }
    };
    // Only root's word about `SUDO_UID` counts (the daemon takes it only from a root peer).
    let sudo_uid = nix::unistd::geteuid()
        .is_root()
        .then(|| std::env::var("SUDO_UID").ok()?.trim().parse().ok())
        .flatten();
    let begun = match request(
        socket,
        &Request::new(Op::Login {
            name: name.to_string(),
            no_browser,
            sudo_uid,
        }),
    ) {
        Ok(r) if r.ok => r,
        Ok(r) => return refused(&r),
        Err(e) => return fail(e),
    };
    let info = begun.login.unwrap_or_default();
    if let Some(url) = &info.url {
        if no_browser {
            eprintln!(
                "To sign in to `{name}`, open this URL in a browser (waiting up to {}s):\n",
                info.timeout_s
            );
        } else {
            eprintln!(
                "To sign in to `{name}`, open this URL in a browser on this machine, as this user (waiting up to {}s):\n",
                info.timeout_s
            );
        }
        // Not `println!`: a closed stdout (a script that read the URL and went) is no panic.
        let _ = writeln!(std::io::stdout(), "{url}");
        let _ = std::io::stdout().flush();
        eprintln!();
        let opened = no_browser || webbrowser::open(url).is_ok();
        if !opened {
            eprintln!("No browser could be opened. Open the address above in a browser on this machine (or through an ssh -L tunnel of your own user); from another machine, press Ctrl-C and run `mcp-supervisor login --no-browser {name}` instead.");
        }
        if no_browser || !opened {
            eprintln!("After you approve, the browser is sent to http://127.0.0.1:…/callback. If that page does not load (over SSH it lands on your own machine), copy its whole address from the address bar, paste it here and press Enter.");
            let socket = socket.to_path_buf();
            let name = name.to_string();
            std::thread::spawn(move || paste_loop(&socket, &name));
        }
    }
    let wait = Duration::from_secs(info.timeout_s.saturating_add(120));
    match request_within(
        socket,
        &Request::new(Op::LoginWait {
            name: name.to_string(),
        }),
        wait,
    ) {
        Ok(r) if r.ok => {
            for s in r.servers.unwrap_or_default() {
                let _ = writeln!(
                    std::io::stdout(),
                    "{}: signed in; {}",
                    s.get("name").and_then(Value::as_str).unwrap_or(name),
                    s.get("state").and_then(Value::as_str).unwrap_or("?")
                );
            }
            0
        }
        Ok(r) => refused(&r),
        Err(e) => fail(e),
    }
}

/// Reads pasted redirect URLs from stdin and hands each to the daemon until one is taken.
fn paste_loop(socket: &Path, name: &str) {
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { return };
        if line.trim().is_empty() {
            continue;
        }
        let req = Request::new(Op::LoginPaste {
            name: name.to_string(),
            url: line.trim().to_string(),
        });
        match request(socket, &req) {
            Ok(r) if r.ok => return,
            Ok(r) => {
                let m = r.error.map(|e| e.message).unwrap_or_default();
                eprintln!("mcp-supervisor: {m}; paste the whole address again");
            }
            Err(e) => {
                eprintln!("mcp-supervisor: {e}");
                return;
            }
        }
    }
}

/// Prints why the daemon refused a request and returns the exit code for it.
fn refused(resp: &Response) -> i32 {
    let (kind, message) = match &resp.error {
        Some(e) => (Some(e.kind), e.message.clone()),
        None => (None, "the supervisor refused the request".to_string()),
    };
    match kind {
        Some(ErrorKind::InvalidConfig) => {
            eprintln!("mcp-supervisor: reload failed, the old configuration keeps running: invalid configuration: {message}");
            EXIT_CONFIG
        }
        Some(ErrorKind::UnknownServer) => {
            eprintln!("mcp-supervisor: {message}");
            EXIT_UNKNOWN_SERVER
        }
        Some(ErrorKind::NotApplicable) => {
            eprintln!("mcp-supervisor: {message}");
            EXIT_CONFIG
        }
        _ => {
            eprintln!("mcp-supervisor: {message}");
            EXIT_FAILED
        }
    }
}

/// Prints a reload's report: JSON, or one line naming what was added, removed and changed.
fn print_reload(r: &super::ReloadReport, json: bool) {
    if json {
        println!("{}", serde_json::to_string_pretty(r).unwrap_or_default());
        return;
    }
    let list = |v: &[String]| {
        if v.is_empty() {
            "-".to_string()
        } else {
            v.join(", ")
        }
    };
    println!(
        "reloaded: added {}; removed {}; changed {}; unchanged {}",
        list(&r.added),
        list(&r.removed),
        list(&r.changed),
        list(&r.unchanged)
    );
}

/// The endpoints under the `status` table: one line each, its sources with their states
/// (`desk -> alpha ready, beta backoff`).
pub fn endpoint_lines(endpoints: &[Value]) -> String {
    let mut out = String::new();
    if !endpoints.is_empty() {
        out.push_str("\nENDPOINT  SOURCES\n");
    }
    for e in endpoints {
        let sources: Vec<String> = e["servers"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|s| {
                        format!(
                            "{} {}",
                            s["name"].as_str().unwrap_or("?"),
                            s["state"].as_str().unwrap_or("?")
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        out.push_str(&format!(
            "{}  {}\n",
            e["name"].as_str().unwrap_or("?"),
            sources.join(", ")
        ));
    }
    out
}

/// The `status` table: name, era, state, pid, uptime, restarts, clients, last exit.
pub fn table(servers: &[Value], now: SystemTime) -> String {
    let header = [
        "NAME",
        "ERA",
        "STATE",
        "PID",
        "UPTIME",
        "RESTARTS",
        "CLIENTS",
        "LAST EXIT",
    ];
    let dash = || "-".to_string();
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|s| s.to_string()).collect()];
    for s in servers {
        let last_exit = match s.get("last_exit") {
            Some(e) if e.is_object() => {
                let reason = e["reason"].as_str().unwrap_or("?").to_string();
                let ago = e["at"]
                    .as_str()
                    .and_then(|t| humantime::parse_rfc3339(t).ok())
                    .and_then(|t| now.duration_since(t).ok())
                    .map(|d| format!(", {} ago", compact(d.as_secs_f64())))
                    .unwrap_or_default();
                format!("{reason}{ago}")
            }
            _ => dash(),
        };
        rows.push(vec![
            s["name"].as_str().unwrap_or("?").to_string(),
            s["era"].as_str().map(str::to_string).unwrap_or_else(dash),
            s["state"].as_str().unwrap_or("?").to_string(),
            s["pid"]
                .as_u64()
                .map(|p| p.to_string())
                .unwrap_or_else(dash),
            s["uptime_s"].as_f64().map(compact).unwrap_or_else(dash),
            s["restarts"].as_u64().unwrap_or(0).to_string(),
            s["clients"].as_u64().unwrap_or(0).to_string(),
            last_exit,
        ]);
    }
    let mut widths = vec![0; header.len()];
    for r in &rows {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for r in &rows {
        let mut line = String::new();
        for (i, (cell, w)) in r.iter().zip(&widths).enumerate() {
            if i + 1 == r.len() {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<w$}  ", w = *w));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// `45s`, `5m11s`, `2h03m`, `3d04h`.
pub fn compact(secs: f64) -> String {
    let s = secs.max(0.0) as u64;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        3600..=86399 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86400, s % 86400 / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn compact_durations() {
        assert_eq!(compact(0.4), "0s");
        assert_eq!(compact(59.9), "59s");
        assert_eq!(compact(311.5), "5m11s");
        assert_eq!(compact(7380.0), "2h03m");
        assert_eq!(compact(3.0 * 86400.0 + 4.0 * 3600.0), "3d04h");
    }

    #[test]
    fn table_has_every_column() {
        let now = humantime::parse_rfc3339("2025-11-29T10:05:00Z").unwrap();
        let t = table(
            &[
                json!({"name": "cua", "state": "ready", "pid": 4242, "restarts": 1, "era": "2025-11-25",
                       "clients": 2, "uptime_s": 311.5,
                       "last_exit": {"code": 1, "signal": null, "reason": "exited(1)", "at": "2025-11-29T10:00:00Z"}}),
                json!({"name": "web", "state": "stopped", "pid": null, "restarts": 0, "era": null,
                       "clients": 0, "uptime_s": null, "last_exit": null}),
            ],
            now,
        );
        let lines: Vec<&str> = t.lines().collect();
        assert!(
            lines[0].starts_with(
                "NAME  ERA         STATE    PID   UPTIME  RESTARTS  CLIENTS  LAST EXIT"
            ),
            "{t}"
        );
        assert!(
            lines[1].contains(
                "cua   2025-11-25  ready    4242  5m11s   1         2        exited(1), 5m00s ago"
            ),
            "{t}"
        );
        assert!(
            lines[2].starts_with("web   -           stopped  -     -       0         0        -"),
            "{t}"
        );
    }
}
