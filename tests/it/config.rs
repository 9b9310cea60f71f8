//! The configuration against the real binary (issue 26 §1 and §8): every key of the table at
//! its upper bound runs a daemon that serves a request, one past it `check-config` exits 2
//! naming file, line and key.

use crate::harness::*;
use serde_json::json;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::config::keys::{self, Bound, Key, Section, KEYS};

/// Runs the binary with `args` (killed after 10 s): exit code and stdout + stderr.
fn cli(args: &[&str]) -> (Option<i32>, String) {
    let mut child = Command::new(SUPERVISOR)
        .args(args)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let t_out = std::thread::spawn(move || {
        let mut v = String::new();
        let _ = out.read_to_string(&mut v);
        v
    });
    let t_err = std::thread::spawn(move || {
        let mut v = String::new();
        let _ = err.read_to_string(&mut v);
        v
    });
    let end = Instant::now() + Duration::from_secs(10);
    let code = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st.code();
        }
        if Instant::now() > end {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    (
        code,
        format!("{}{}", t_out.join().unwrap(), t_err.join().unwrap()),
    )
}

/// The TOML value at a row's upper bound, and one past it.
fn at_and_past(k: &Key) -> Option<(String, String)> {
    match k.bound {
        Bound::None => None,
        Bound::Duration { max, .. } => Some((
            format!("\"{}\"", keys::show_duration(max)),
            format!("\"{}ns\"", max.as_nanos() + 1),
        )),
        Bound::Number { max, .. } => Some((max.to_string(), (max + 1).to_string())),
    }
}

/// The most `open_files_max` this process may give a child: the bound when it may raise its
/// hard limit (CAP_SYS_RESOURCE, up to `fs.nr_open`), else its own hard limit (a container's
/// root often lacks the capability).
fn open_files_at_most() -> u64 {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit(2) into an initialised struct.
    let hard = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) } == 0 {
        rl.rlim_max
    } else {
        0
    };
    let nr_open = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|t| t.trim().parse::<u64>().ok())
        .unwrap_or(u64::MAX);
    const CAP_SYS_RESOURCE: u32 = 24;
    let may_raise = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .is_some_and(|caps| caps & (1 << CAP_SYS_RESOURCE) != 0);
    let Bound::Number { max, .. } = keys::OPEN_FILES_MAX.bound else {
        unreachable!()
    };
    if may_raise {
        max.min(nr_open)
    } else {
        max.min(hard)
    }
}

/// Every bounded key at its bound at once, in a daemon started eagerly and in one started on
/// demand (where the first call starts the child: the lazy start's deadlines at their bounds
/// too): each serves a call. One daemon per mode rather than per key keeps the run short; the
/// in-process property test (`config/props.rs`) takes each key alone.
#[test]
fn every_key_at_its_upper_bound_runs_a_daemon_that_serves_a_request() {
    let mut supervisor = String::new();
    let mut server = String::new();
    let mut methods = String::new();
    // A url server's own keys go to a url server beside it (its remote is never reached
    // here: the remote tests serve calls through them; this checks the daemon runs).
    let mut far = String::new();
    for k in KEYS {
        let Some((at, _)) = at_and_past(k) else {
            continue;
        };
        let at = if k.name == "open_files_max" {
            open_files_at_most().to_string()
        } else {
            at
        };
        match k.section {
            Section::Supervisor => supervisor.push_str(&format!("{} = {at}\n", k.name)),
            Section::MethodTimeout => methods.push_str(&format!("\"tools/call\" = {at}")),
            _ if support::config::keys::URL_ONLY.contains(&k.name) => {
                far.push_str(&format!("{} = {at}\n", k.name))
            }
            Section::Server | Section::ServerOnly => {
                server.push_str(&format!("{} = {at}\n", k.name))
            }
            // Endpoint keys have no bounds.
            Section::Endpoint => {}
        }
    }
    for start in ["eager", "on-demand"] {
        // HTTP on too, so its bounded keys apply to a live endpoint (any free port).
        let text = format!(
            "{supervisor}http_listen = \"127.0.0.1:0\"\n\n{}",
            fake_server(
                "fake",
                &[],
                &format!(
                    "{server}http = true\nstart = \"{start}\"\nmethod_timeouts = {{ {methods} }}\n"
                )
            )
        ) + &format!("\n[servers.far]\nurl = \"http://127.0.0.1:9/mcp\"\n{far}");
        let sup = Supervisor::start(&text);
        let mut c = sup.client("fake");
        let r = c.call(json!(1), "echo", json!({"text": "at the bounds"}));
        assert_eq!(
            Client::text(&r),
            "at the bounds",
            "{start}: {r}\nconfig:\n{text}\nlog:\n{}",
            sup.log()
        );
        let status = sup.server_status("fake");
        assert_eq!(status["state"], "ready", "{start}: {status}");
    }
}

#[test]
fn every_key_one_past_its_upper_bound_fails_check_config_naming_file_line_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let mut checked = 0;
    for k in KEYS {
        let Some((_, past)) = at_and_past(k) else {
            continue;
        };
        let (text, line, key) = match k.section {
            Section::Supervisor => (
                format!(
                    "[supervisor]\n{} = {past}\n\n[servers.a]\ncommand = \"x\"\n",
                    k.name
                ),
                2,
                k.path(None),
            ),
            Section::MethodTimeout => (
                format!("[servers.a]\ncommand = \"x\"\nmethod_timeouts = {{ \"tools/call\" = {past} }}\n"),
                3,
                "servers.a.method_timeouts.tools/call".to_string(),
            ),
            Section::Server | Section::ServerOnly => (
                format!("[servers.a]\ncommand = \"x\"\n{} = {past}\n", k.name),
                3,
                k.path(Some("a")),
            ),
            Section::Endpoint => continue,
        };
        let path = dir.path().join(format!("{}.toml", k.name));
        std::fs::write(&path, &text).unwrap();
        let p = path.to_str().unwrap();
        let (code, out) = cli(&["check-config", p]);
        assert_eq!(code, Some(2), "{}: {out}", k.name);
        let want = format!("{p}:{line}: key `{key}`");
        assert!(out.contains(&want), "{}: wanted {want:?} in {out}", k.name);
        assert!(out.contains("the most it may be"), "{}: {out}", k.name);
        checked += 1;
    }
    assert!(checked >= 30, "only {checked} bounded keys");
    // `run` refuses the same file before anything starts.
    let p = dir.path().join("start_timeout.toml");
    let (code, out) = cli(&["run", "-c", p.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("servers.a.start_timeout"), "{out}");
    assert!(Path::new(&p).exists());
}

#[test]
fn an_error_in_defaults_is_named_as_the_defaults_key_at_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.toml");
    std::fs::write(
        &path,
        "[supervisor]\n\n[defaults]\nrequest_timeout = \"soon\"\n\n[servers.a]\ncommand = \"x\"\n",
    )
    .unwrap();
    let p = path.to_str().unwrap();
    let (code, out) = cli(&["check-config", p]);
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains(&format!("{p}:4: key `defaults.request_timeout`")),
        "{out}"
    );
    assert!(!out.contains("servers.a"), "{out}");
}

#[test]
fn a_missing_http_token_file_fails_check_config_and_run_naming_file_line_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.toml");
    let token = dir.path().join("token");
    std::fs::write(
        &path,
        format!(
            "[supervisor]\nsocket_dir = {:?}\n\n[servers.a]\ncommand = {FAKE:?}\nhttp = true\nhttp_token_file = {token:?}\n",
            dir.path().join("run")
        ),
    )
    .unwrap();
    let p = path.to_str().unwrap();
    for args in [vec!["check-config", p], vec!["run", "-c", p]] {
        let (code, out) = cli(&args);
        assert_eq!(code, Some(2), "{args:?}: {out}");
        assert!(
            out.contains(&format!("{p}:7: key `servers.a.http_token_file`")),
            "{args:?}: {out}"
        );
        assert!(out.contains("does not exist"), "{args:?}: {out}");
    }
    // Once the operator wrote it, the file passes.
    std::fs::write(&token, "0123456789abcdef0123456789abcdef\n").unwrap();
    let (code, out) = cli(&["check-config", p]);
    assert_eq!(code, Some(0), "{out}");
}

#[test]
fn check_config_portable_checks_values_but_not_this_hosts_users_groups_and_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.toml");
    let p = path.to_str().unwrap();
    let elsewhere = "[supervisor]\nsocket_group = \"no-such-group-xyz\"\n\n[servers.a]\ncommand = \"npx\"\nuser = \"no-such-user-xyz\"\nhttp = true\nhttp_token_file = \"/var/run/secrets/nowhere/token\"\n";
    std::fs::write(&path, elsewhere).unwrap();
    let (code, out) = cli(&["check-config", p]);
    assert_eq!(code, Some(2), "{out}");
    let (code, out) = cli(&["check-config", "--portable", p]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("portable"), "{out}");
    // Every value is still checked.
    std::fs::write(&path, format!("{elsewhere}start_timeout = \"2h\"\n")).unwrap();
    let (code, out) = cli(&["check-config", "--portable", "-c", p]);
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains(&format!("{p}:9: key `servers.a.start_timeout`")),
        "{out}"
    );
    let (_, help) = cli(&["check-config", "--help"]);
    assert!(help.contains("--portable"), "{help}");
}

#[test]
fn a_remote_metrics_listen_is_refused_without_metrics_allow_remote_and_served_with_it() {
    let port = std::net::TcpListener::bind("0.0.0.0:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.toml");
    let p = path.to_str().unwrap();
    let text = format!("[supervisor]\nmetrics_listen = \"0.0.0.0:{port}\"\n");
    std::fs::write(&path, &text).unwrap();
    for args in [vec!["check-config", p], vec!["run", "-c", p]] {
        let (code, out) = cli(&args);
        assert_eq!(code, Some(2), "{args:?}: {out}");
        assert!(
            out.contains(&format!("{p}:2: key `supervisor.metrics_listen`")),
            "{args:?}: {out}"
        );
        assert!(out.contains("metrics_allow_remote = true"), "{out}");
    }
    // Said out loud, it is served (asked here on loopback, which 0.0.0.0 covers).
    let sup = Supervisor::spawn_config(
        &format!("metrics_listen = \"0.0.0.0:{port}\"\nmetrics_allow_remote = true"),
        &fake_server("fake", &[], ""),
        &[],
    );
    let mut last = (None, String::new());
    let ok = wait_until(Duration::from_secs(10), || {
        last = cli(&["probe", "-c", sup.config.to_str().unwrap()]);
        last.0 == Some(0)
    });
    assert!(ok, "probe: {last:?}\nlog:\n{}", sup.log());
}

#[test]
fn a_config_with_secrets_that_others_can_read_is_warned_about_by_check_config_and_run() {
    use std::os::unix::fs::PermissionsExt;
    let servers = fake_server("fake", &[], "env = { API_KEY = \"sk-live-do-not-log\" }");
    let mut sup = Supervisor::start(&servers);
    std::fs::set_permissions(&sup.config, std::fs::Permissions::from_mode(0o644)).unwrap();
    let p = sup.config.to_str().unwrap().to_string();
    let (code, out) = cli(&["check-config", &p]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("warning"), "{out}");
    assert!(
        out.contains(&format!("{p} is mode 0644, readable by group and others")),
        "{out}"
    );
    assert!(out.contains("servers.fake.env"), "{out}");
    assert!(
        !out.contains("sk-live") && !out.contains("API_KEY"),
        "{out}"
    );
    // The daemon says it too, at the next reload.
    let (code, out) = cli(&["reload", "-c", &p]);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        sup.wait_log("readable by group and others", Duration::from_secs(10)),
        "{}",
        sup.log()
    );
    assert!(!sup.log().contains("sk-live"), "{}", sup.log());
    sup.stop();
    // Readable by its owner only: no warning.
    std::fs::set_permissions(&sup.config, std::fs::Permissions::from_mode(0o600)).unwrap();
    let (code, out) = cli(&["check-config", &p]);
    assert_eq!(code, Some(0), "{out}");
    assert!(!out.contains("warning"), "{out}");
    // `run` warns at start (a copy readable by its group; same socket_dir, now free).
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("s.toml");
    std::fs::copy(&sup.config, &config).unwrap();
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o640)).unwrap();
    let again = Supervisor::spawn_with(dir, config, &[]);
    assert!(
        again.wait_log("readable by its group", Duration::from_secs(10)),
        "{}",
        again.log()
    );
}

/// Issue 47 §5 (row N14): a secret file another user owns or may write is refused, exit 2
/// naming the key, by `check-config` and `run`: an `http_token_file` of uid 65534 (who would
/// choose the server's TCP token), a header read from a file others may write, and a
/// sign-in's `client_secret_file` of uid 65534. One of ours that others may read is a warning
/// naming its key. An upgrade's preflight names a token file that became another user's
/// since the daemon started, and the daemon serves on.
#[test]
fn secret_files_another_user_owns_or_may_write_are_refused_naming_the_key() {
    use std::os::unix::fs::PermissionsExt;
    if !needs_root(
        "secret_files_another_user_owns_or_may_write_are_refused_naming_the_key",
        &[],
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let secret = |name: &str, mode: u32, owner: Option<u32>| {
        let p = dir.path().join(name);
        std::fs::write(&p, "0123456789abcdef0123456789abcdef\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        if let Some(uid) = owner {
            std::os::unix::fs::chown(&p, Some(uid), Some(uid)).unwrap();
        }
        p
    };
    let theirs = secret("theirs.token", 0o644, Some(65534));
    let writable = secret("writable.header", 0o666, None);
    let their_secret = secret("client.secret", 0o600, Some(65534));
    let readable = secret("readable.token", 0o640, None);
    let run = dir.path().join("run");
    let cases = [
        (
            format!("[servers.a]\ncommand = {FAKE:?}\nhttp = true\nhttp_token_file = {theirs:?}\n"),
            "servers.a.http_token_file",
            "owned by uid 65534",
        ),
        (
            format!("[servers.r]\nurl = \"http://127.0.0.1:9/mcp\"\nheaders = {{ Authorization = {{ file = {writable:?}, prefix = \"Bearer \" }} }}\n"),
            "servers.r.headers.Authorization",
            "may be written by its group or others",
        ),
        (
            format!("[servers.o]\nurl = \"http://127.0.0.1:9/mcp\"\n[servers.o.oauth]\nclient_id = \"x\"\nclient_secret_file = {their_secret:?}\n"),
            "servers.o.oauth.client_secret_file",
            "owned by uid 65534",
        ),
    ];
    for (n, (table, key, why)) in cases.iter().enumerate() {
        let path = dir.path().join(format!("s{n}.toml"));
        std::fs::write(
            &path,
            format!("[supervisor]\nsocket_dir = {run:?}\n\n{table}"),
        )
        .unwrap();
        let p = path.to_str().unwrap();
        for args in [vec!["check-config", p], vec!["run", "-c", p]] {
            let (code, out) = cli(&args);
            assert_eq!(code, Some(2), "{args:?}: {out}");
            assert!(out.contains(&format!("key `{key}`")), "{args:?}: {out}");
            assert!(out.contains(why), "{args:?}: {out}");
        }
    }
    // Ours, but others may read it: accepted with a warning naming the key.
    let path = dir.path().join("ok.toml");
    std::fs::write(
        &path,
        format!("[supervisor]\nsocket_dir = {run:?}\n\n[servers.a]\ncommand = {FAKE:?}\nhttp = true\nhttp_token_file = {readable:?}\n"),
    )
    .unwrap();
    let (code, out) = cli(&["check-config", path.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("servers.a.http_token_file") && out.contains("may be read"),
        "{out}"
    );

    // An upgrade's preflight refuses a token file that became another user's.
    std::fs::set_permissions(&readable, std::fs::Permissions::from_mode(0o600)).unwrap();
    let mut sup = Supervisor::spawn_config(
        "",
        &format!("[servers.a]\ncommand = {FAKE:?}\nhttp = true\nhttp_token_file = {readable:?}\n"),
        &[],
    );
    assert!(
        wait_until(Duration::from_secs(10), || sup.socket("a").exists()),
        "{}",
        sup.log()
    );
    std::os::unix::fs::chown(&readable, Some(65534), Some(65534)).unwrap();
    let (code, said) = crate::upgrade::upgrade(&sup);
    assert_eq!(code, Some(1), "{said}");
    assert!(
        said.contains("servers.a.http_token_file") && said.contains("owned by uid 65534"),
        "{said}"
    );
    let mut c = sup.client("a");
    let r = c.call(json!(1), "echo", json!({"text": "served on"}));
    assert_eq!(Client::text(&r), "served on");
    sup.stop();
}
