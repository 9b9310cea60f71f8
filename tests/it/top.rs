//! Issue 33 §1: `mcp-supervisor top` as a person uses it: driven in tmux (send-keys,
//! capture-pane) against a running daemon with a crashing server, a healthy one and an
//! endpoint; an operator restarts a server with a key, a viewer sees the redacted view without
//! verbs, and the terminal is given back on quit. Every wait is on what the screen shows, with
//! a deadline.

use crate::harness::*;
use serde_json::json;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::Duration;

/// A tmux server of its own (`-L`), with one 80x24 pane running a plain shell; killed on drop.
struct Tmux {
    server: String,
}

impl Tmux {
    fn start(id: &str) -> Option<Tmux> {
        let server = format!("mcpsup-top-{id}");
        let ok = Command::new("tmux")
            .args(["-L", &server, "-f", "/dev/null", "new-session", "-d"])
            .args(["-x", "80", "-y", "24", "-s", "top"])
            .args(["env", "PS1=$ ", "bash", "--norc", "--noprofile"])
            .status()
            .ok()?
            .success();
        ok.then_some(Tmux { server })
    }

    fn tmux(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .args(["-L", &self.server])
            .args(args)
            .output()
            .expect("tmux runs");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Types `text` and Enter in the pane.
    fn line(&self, text: &str) {
        self.tmux(&["send-keys", "-t", "top", "-l", text]);
        self.tmux(&["send-keys", "-t", "top", "Enter"]);
    }

    /// Presses one key (tmux key name: `j`, `r`, `q`, `Down`).
    fn key(&self, key: &str) {
        self.tmux(&["send-keys", "-t", "top", key]);
    }

    /// What the pane shows now.
    fn screen(&self) -> String {
        self.tmux(&["capture-pane", "-p", "-t", "top"])
    }

    /// The screen once `pred` holds of it, within `within`; panics with the last screen if not.
    fn wait(&self, what: &str, within: Duration, pred: impl Fn(&str) -> bool) -> String {
        let mut last = String::new();
        if wait_until(within, || {
            last = self.screen();
            pred(&last)
        }) {
            return last;
        }
        panic!("the screen never showed {what}:\n{last}");
    }

    /// Whether the pane is in the alternate screen, and whether its cursor shows.
    fn modes(&self) -> String {
        self.tmux(&[
            "display-message",
            "-p",
            "-t",
            "top",
            "#{alternate_on} #{cursor_flag}",
        ])
        .trim()
        .to_string()
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.server, "kill-server"])
            .status();
    }
}

const WAIT: Duration = Duration::from_secs(30);

/// Runs `program ARGS` as uid 65534 (`setpriv`) with `input` on its stdin; its output.
fn as_nobody(program: &str, args: &[&str], input: &str) -> std::process::Output {
    use std::process::Stdio;
    let mut child = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", program])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("setpriv {program}: {e}"));
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), input.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

/// The servers and endpoint of the test: `crashy` exits at once saying why on stderr,
/// `steady` is healthy, the endpoint `all` fronts `steady`.
fn servers() -> String {
    fake_server("steady", &[], "")
        + "[servers.crashy]\ncommand = \"/bin/sh\"\nargs = [\"-c\", \"echo boom >&2; exit 1\"]\n"
        + "backoff_initial = \"200ms\"\nbackoff_max = \"400ms\"\n\n"
        + "[endpoints.all]\nservers = [\"steady\"]\n"
}

#[test]
fn top_in_tmux_shows_the_crash_restarts_for_an_operator_is_read_only_for_a_viewer_and_gives_the_terminal_back(
) {
    let viewer = needs_root("the viewer part (another uid)", &["setpriv"]);
    let dir = tempfile::tempdir().unwrap();
    // uid 65534 (the viewer) must reach the socket and read the configuration.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let config = dir.path().join("supervisor.toml");
    std::fs::write(
        &config,
        format!(
            "[supervisor]\nsocket_dir = {:?}\nsocket_mode = \"0666\"\nviewer_uids = [65534]\n\n{}",
            dir.path().join("run"),
            servers()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut sup = Supervisor::spawn_with(dir, config.clone(), &[]);
    assert!(
        wait_until(WAIT, || sup.socket("control").exists()
            && sup.server_status("steady")["state"] == "ready"),
        "{}",
        sup.log()
    );
    // Some traffic for the healthy server.
    let mut c = sup.client("steady");
    for i in 0..5 {
        let r = c.call(json!(i), "echo", json!({"text": "hi"}));
        assert!(r.get("result").is_some(), "{r}");
    }
    let Some(tmux) = Tmux::start(&sup.id) else {
        sup.stop();
        panic!("tmux does not run here (.ci/install-deps installs it)");
    };
    let config = config.to_str().unwrap().to_string();
    // After `top`, in the same command line: whether it left the line discipline cooked.
    let cooked = "stty -a | grep -q -- ' icanon' && echo COOKED";
    tmux.line(&format!(
        "{SUPERVISOR} top -c {config}; echo TOP-EXIT=$?; {cooked}"
    ));
    // The crash appears: crashy's row and, selected first, its last exit with its stderr line.
    let s = tmux.wait("the crash", WAIT, |s| {
        s.contains("mcp-supervisor top") && s.contains("exited(1): boom")
    });
    for want in [
        "NAME",
        "STATE",
        "RESTARTS",
        "REQ/S",
        "ERR",
        "P99",
        "crashy",
        "steady",
        "▸ all",
        "└ steady",
        "operator",
        "r restart",
        "stderr │ boom",
    ] {
        assert!(s.contains(want), "{want} missing:\n{s}");
    }
    // The healthy one: its traffic counted against the objective.
    tmux.key("j");
    tmux.wait("steady's detail", WAIT, |s| {
        s.contains("steady · ready") && s.contains("availability 100.0% (objective 99.9%)")
    });
    // The restart key works for an operator: the server restarts and the screen says so.
    tmux.key("r");
    tmux.wait("the restart done", WAIT, |s| {
        s.contains("restart steady: done") && s.contains("restarts 1")
    });
    assert_eq!(sup.server_status("steady")["restarts"], 1);
    // Quit: the terminal is given back (main screen, cursor shown, the shell goes on).
    tmux.key("q");
    tmux.wait("the shell again", WAIT, |s| {
        s.contains("TOP-EXIT=0") && s.contains("COOKED")
    });
    assert_eq!(tmux.modes(), "0 1", "the terminal was not restored");
    assert!(!tmux.screen().contains("RESTARTS"), "{}", tmux.screen());
    // A panic gives the terminal back too (the test hook panics after the first frame).
    tmux.line("clear");
    tmux.line(&format!(
        "MCP_SUPERVISOR_TEST_TOP_PANIC=1 {SUPERVISOR} top -c {config} 2>/dev/null; echo PANIC-EXIT=$?; {cooked}"
    ));
    tmux.wait("the shell after a panic", WAIT, |s| {
        s.contains("PANIC-EXIT=101") && s.contains("COOKED")
    });
    assert_eq!(
        tmux.modes(),
        "0 1",
        "a panic left the terminal raw or hidden"
    );

    if viewer {
        tmux.line("clear");
        tmux.line(&format!(
            "setpriv --reuid=65534 --regid=65534 --clear-groups {SUPERVISOR} top -c {config}; echo VIEWER-EXIT=$?; {cooked}"
        ));
        let s = tmux.wait("the viewer's view", WAIT, |s| {
            s.contains("viewer (read-only)") && s.contains("crashy")
        });
        // Redacted: no stderr, no verbs among the keys.
        assert!(!s.contains("boom"), "a viewer saw stderr:\n{s}");
        assert!(!s.contains("r restart"), "a viewer was offered verbs:\n{s}");
        tmux.key("r");
        tmux.wait("the refusal", WAIT, |s| {
            s.contains("viewers cannot restart")
        });
        // Ctrl-C leaves too, and gives the terminal back.
        tmux.key("C-c");
        tmux.wait("the shell again", WAIT, |s| {
            s.contains("VIEWER-EXIT=0") && s.contains("COOKED")
        });
        assert_eq!(tmux.modes(), "0 1", "the terminal was not restored");
        // The daemon refuses a viewer's verb itself, whatever the client.
        let out = as_nobody(SUPERVISOR, &["restart", "steady", "-c", &config], "");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains("for operators"), "{err}");
        assert_eq!(sup.server_status("steady")["restarts"], 1);
        // `upgrade` too, said as plainly (issue 47 §8: it read "does not know `upgrade`").
        let out = as_nobody(SUPERVISOR, &["upgrade", "-c", &config], "");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains("for operators"), "{err}");
        // ...even a line a lenient reader takes for another verb than a strict one does
        // (duplicate keys: the last wins in one, the other refuses the line).
        let control = sup.socket("control");
        let sneaky = r#"{"v":1,"verb":"status","verb":"restart","name":"steady"}"#;
        let connect = format!("UNIX-CONNECT:{}", control.display());
        let out = as_nobody("socat", &["-t", "5", "-", &connect], &format!("{sneaky}\n"));
        let answer = String::from_utf8_lossy(&out.stdout);
        assert!(
            answer.contains("\"denied\""),
            "{answer} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(sup.server_status("steady")["restarts"], 1);
        // A viewer's status has no stderr tail.
        let out = as_nobody(SUPERVISOR, &["status", "--json", "-c", &config], "");
        let status = String::from_utf8_lossy(&out.stdout);
        assert!(
            status.contains("crashy")
                && !status.contains("boom")
                && !status.contains("stderr_tail"),
            "{status}"
        );
    }
    // The terminal goes away under a running top (a closed SSH session, a killed terminal):
    // top ends too, rather than spin on its closed input.
    tmux.line(&format!("{SUPERVISOR} top -c {config}"));
    tmux.wait("top again", WAIT, |s| s.contains("mcp-supervisor top ·"));
    assert!(!tops_of(&config).is_empty(), "top is not running");
    drop(tmux);
    assert!(
        wait_until(WAIT, || tops_of(&config).is_empty()),
        "top outlived its terminal: {:?}",
        tops_of(&config)
    );
    sup.stop();
}

/// The pids of `mcp-supervisor top -c CONFIG` processes.
fn tops_of(config: &str) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let args: Vec<&[u8]> = cmd.split(|b| *b == 0).collect();
            args.contains(&&b"top"[..]) && args.contains(&config.as_bytes()) && !is_zombie(*pid)
        })
        .collect()
}

#[test]
fn top_without_a_supervisor_exits_3() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("supervisor.toml");
    std::fs::write(
        &config,
        format!(
            "[supervisor]\nsocket_dir = {:?}\n\n{}",
            dir.path().join("run"),
            fake_server("x", &[], "")
        ),
    )
    .unwrap();
    let out = Command::new(SUPERVISOR)
        .args(["top", "-c"])
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("running"));
}
