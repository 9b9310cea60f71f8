//! A functional check of the two daemons, reported next to the figures: how many
//! `initialize`s reach the server, and whether one client's progress notifications reach
//! another client.

use std::time::Duration;

use crate::client::{Conn, Reply, Way};
use crate::procs::phase;
use crate::results::Results;
use crate::rig::{wait_accepting, Rig};

pub fn check_behaviour(rig: &Rig, res: &mut Results) {
    phase(
        "behaviour: initialize and notifications through the daemons",
        Duration::from_secs(60),
    );
    for way in [Way::Supervisor, Way::RmcpMux] {
        if !res.has(way) {
            continue;
        }
        let note = match behaviour(rig, way) {
            Ok(text) => text,
            Err(e) => format!("{}: the behaviour check failed: {e}", way.name()),
        };
        res.notes.push(note);
    }
}

fn behaviour(rig: &Rig, way: Way) -> Result<String, String> {
    let input = rig.dir.join(format!("behaviour-{}.in", way.name()));
    let extra = vec!["--log".to_string(), input.display().to_string()];
    let tag = format!("behaviour-{}", way.name());
    let (daemon, socks) = match way {
        Way::RmcpMux => rig.rmcp_mux_with(&tag, 1, &extra)?,
        _ => {
            let (config, socks) = rig.config_with(&tag, 1, false, &extra);
            (rig.supervisor(&config, &tag), socks)
        }
    };
    wait_accepting(&socks[0], Duration::from_secs(10), daemon.pid())?;
    let mut conns = (0..3)
        .map(|_| {
            let mut c = Conn::socket(&socks[0])?;
            c.handshake()?;
            Ok(c)
        })
        .collect::<Result<Vec<Conn>, String>>()?;
    let mut buf = Vec::new();
    // Client A: a call that sends two progress notifications for A's token, then answers.
    let a = &mut conns[0];
    let before = a.skipped;
    a.send(b"{\"jsonrpc\":\"2.0\",\"id\":900,\"method\":\"tools/call\",\"params\":{\"name\":\"progress\",\"arguments\":{\"count\":2},\"_meta\":{\"progressToken\":\"token-a\"}}}\n")?;
    if a.response(&mut buf)? != Reply::Result {
        return Err(format!("progress failed: {}", crate::client::head(&buf)));
    }
    let a_got = a.skipped - before;
    // Client B, after A's answer: an echo; lines before its answer are notifications.
    let b = &mut conns[1];
    let before = b.skipped;
    b.echo(&mut buf)?;
    let b_got = b.skipped - before;
    let text = std::fs::read_to_string(&input).unwrap_or_default();
    let count = |m: &str| {
        text.lines()
            .filter(|l| l.contains(&format!("\"method\":\"{m}\"")))
            .count()
    };
    Ok(format!(
        "Behaviour, {}: with 3 clients connected, {} `initialize` and {} `notifications/initialized` reached the server (its input); client A's `progress` call (2 `notifications/progress` for A's token): A got {a_got} lines besides its answer, client B got {b_got} before the answer to its own next call{}.",
        way.name(),
        count("initialize"),
        count("notifications/initialized"),
        if b_got > 0 {
            " (another client's progress notifications)"
        } else {
            ""
        }
    ))
}
