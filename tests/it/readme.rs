//! README's "Try it" outputs are what the commands print (issue 28 §3: an example output that
//! is shown is produced by a test). The commands and the expected output are read from
//! README.md itself, so an edit to either side that makes them disagree fails here.

use crate::harness::{wait_until, Client, Supervisor, FAKE, SUPERVISOR};
use serde_json::{json, Value};
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

const README: &str = include_str!("../../README.md");
const EXAMPLE: &str = include_str!("../../supervisor.toml.example");

/// The body of the first fenced block of language `lang` after `marker` in README.
fn block_after(marker: &str, lang: &str) -> String {
    let Some((_, after)) = README.split_once(marker) else {
        panic!("README no longer says {marker:?}");
    };
    let open = format!("```{lang}\n");
    let Some((_, body)) = after.split_once(&open) else {
        panic!("README has no ```{lang} block after {marker:?}");
    };
    let Some((body, _)) = body.split_once("\n```") else {
        panic!("README's ```{lang} block after {marker:?} is not closed");
    };
    body.to_string()
}

/// The example configuration as README runs it, with the fake server's path as built for
/// this test and a private socket directory (README's `target/debug/...` and `run` are
/// relative to a clone; the commands and the answers are the same).
fn example_supervisor() -> Supervisor {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("supervisor.toml");
    let text = EXAMPLE
        .replacen(
            "command = \"target/debug/mcp-fake-server\"",
            &format!("command = {FAKE:?}"),
            1,
        )
        .replacen(
            "socket_dir = \"run\"",
            &format!("socket_dir = {:?}", dir.path().join("run")),
            1,
        );
    assert!(
        text.contains(FAKE) && text.contains(&*dir.path().join("run").to_string_lossy()),
        "supervisor.toml.example no longer has the lines README's walk relies on"
    );
    std::fs::write(&config, text).unwrap();
    let sup = Supervisor::spawn_with(dir, config, &[]);
    assert!(
        wait_until(Duration::from_secs(10), || sup.socket("demo").exists()),
        "the demo socket appears"
    );
    sup
}

/// The JSON lines README's `printf` sends (its single-quoted arguments).
fn readme_input() -> Vec<String> {
    let block = block_after("talk to it as an MCP client would", "sh");
    let lines: Vec<String> = block
        .split('\'')
        .filter(|s| s.starts_with('{'))
        .map(str::to_string)
        .collect();
    assert_eq!(
        lines.len(),
        3,
        "README's printf sends three messages: {block}"
    );
    lines
}

#[test]
fn readme_try_it_prints_what_the_readme_shows() {
    let sup = example_supervisor();
    let mut attach = Command::new(SUPERVISOR)
        .args(["attach", "demo", "-c"])
        .arg(&sup.config)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = attach.stdin.take().unwrap();
    for line in readme_input() {
        writeln!(stdin, "{line}").unwrap();
    }
    drop(stdin);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(attach.wait_with_output());
    });
    let out = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("attach ends after its input ends and the answers are in")
        .unwrap();
    let got: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let shown: Vec<Value> = block_after("It prints the answer", "text")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(got, shown, "README shows what `attach` prints");
}

#[test]
fn readme_status_shows_one_child_and_the_connected_client() {
    let sup = example_supervisor();
    let mut held = Client::connect(&sup.socket("demo"));
    held.initialize("held", json!({}));
    let out = Command::new(SUPERVISOR)
        .args(["status", "-c"])
        .arg(&sup.config)
        .output()
        .unwrap();
    assert!(out.status.success(), "status exits 0");
    let got = String::from_utf8_lossy(&out.stdout).to_string();
    let shown = block_after("`status` shows one `PID`", "text");
    let (got_lines, shown_lines): (Vec<&str>, Vec<&str>) =
        (got.lines().collect(), shown.lines().collect());
    assert_eq!(got_lines.len(), 2, "a header and one row: {got}");
    // Columns are as wide as their widest cell (a pid may have 4 digits or 7): compare words.
    let words = |l: &str| l.split_whitespace().map(str::to_string).collect::<Vec<_>>();
    assert_eq!(words(got_lines[0]), words(shown_lines[0]), "the header");
    let (g, s) = (words(got_lines[1]), words(shown_lines[1]));
    assert_eq!(g.len(), s.len(), "columns: {got}");
    for (i, (g, s)) in g.iter().zip(&s).enumerate() {
        match i {
            // The pid and the uptime differ from run to run; their shape does not.
            3 => assert!(g.parse::<u32>().is_ok(), "a pid: {got}"),
            4 => assert!(
                g.ends_with('s') || g.ends_with('m') || g.ends_with('h'),
                "an uptime: {got}"
            ),
            _ => assert_eq!(g, s, "column {i} of {got}"),
        }
    }
}
