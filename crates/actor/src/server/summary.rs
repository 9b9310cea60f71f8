//! The one-line `STATUS=` summary systemd shows for the daemon (R1), drawn from every
//! server's [`Status`].

use super::{State, Status};

/// The one-line `STATUS=` summary (R1): `"3 servers: 2 ready; fs backoff (exited(1))"`.
pub fn summary(statuses: &[Status]) -> String {
    let ready = statuses.iter().filter(|s| s.state == State::Ready).count();
    let mut out = format!(
        "{} server{}: {ready} ready",
        statuses.len(),
        if statuses.len() == 1 { "" } else { "s" }
    );
    let others: Vec<String> = statuses
        .iter()
        .filter(|s| s.state != State::Ready)
        .map(|s| {
            let state = serde_json::to_value(s.state)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default();
            match (&s.last_exit, s.state) {
                (
                    Some(e),
                    State::Backoff | State::Failed | State::AuthRequired | State::Starting,
                ) => {
                    format!("{} {state} ({})", s.name, e.reason)
                }
                _ => format!("{} {state}", s.name),
            }
        })
        .collect();
    if !others.is_empty() {
        out.push_str("; ");
        out.push_str(&others.join(", "));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outage::ExitReason;
    use crate::server::LastExit;
    use upstream::Exit;

    /// A status whose last exit, if any, was exit code `code`.
    fn st(name: &str, state: State, code: Option<i32>) -> Status {
        Status {
            name: name.into(),
            state,
            pid: None,
            restarts: 0,
            era: None,
            clients: 0,
            uptime_s: None,
            last_heard_s: None,
            probes_sent: 0,
            probes_answered: 0,
            ping_served: true,
            consecutive_failures: 0,
            retry_in_ms: None,
            last_exit: code.map(|c| LastExit {
                code: Some(c),
                signal: None,
                reason: ExitReason::Exit(Exit {
                    code: Some(c),
                    signal: None,
                    requested: false,
                    limit: None,
                }),
                at: String::new(),
            }),
            stderr_tail: String::new(),
            actor_restarts: 0,
            last_actor_panic: None,
            limits: None,
            remote: None,
            traffic: Default::default(),
        }
    }

    #[test]
    fn summary_names_what_is_not_ready() {
        assert_eq!(summary(&[st("a", State::Ready, None)]), "1 server: 1 ready");
        assert_eq!(
            summary(&[
                st("a", State::Ready, None),
                st("fs", State::Backoff, Some(1)),
                st("web", State::Failed, Some(127)),
                st("x", State::Stopped, Some(0)),
            ]),
            "4 servers: 1 ready; fs backoff (exited(1)), web failed (exited(127)), x stopped"
        );
    }
}
