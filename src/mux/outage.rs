//! The outage vocabulary (issue 27 §7): what a client's outage record (README "Errors") says
//! in its `status` field, as a type. Later upstreams (remote servers, endpoints) add variants
//! here; the wire strings of today's variants never change.

use serde::Serialize;

/// The `status` of an outage record: the state the source was in when the request could not
/// be served, or what ended it. Serialized as its lowercase name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OutageStatus {
    /// The child exited while the request was in flight (or its input had closed).
    Exited,
    /// A deadline passed: the request's own, or the start or probe timeout the supervisor
    /// is stopping the child for.
    Timeout,
    /// The child is being spawned or has not answered its handshake yet.
    Starting,
    /// Waiting to spawn again after an exit.
    Backoff,
    /// Given up (permanent error, too many failed starts, a panicking actor).
    Failed,
    /// Stopped by the operator or the daemon (or being stopped).
    Stopped,
    /// Not running, by design (on demand, after an idle stop).
    Idle,
}

impl OutageStatus {
    /// The wire string (`status` in records, the log and tool-result text).
    pub fn as_str(self) -> &'static str {
        match self {
            OutageStatus::Exited => "exited",
            OutageStatus::Timeout => "timeout",
            OutageStatus::Starting => "starting",
            OutageStatus::Backoff => "backoff",
            OutageStatus::Failed => "failed",
            OutageStatus::Stopped => "stopped",
            OutageStatus::Idle => "idle",
        }
    }
}

impl std::fmt::Display for OutageStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::OutageStatus;

    #[test]
    fn the_wire_names_are_the_documented_ones() {
        use OutageStatus::*;
        for s in [Exited, Timeout, Starting, Backoff, Failed, Stopped, Idle] {
            assert_eq!(
                serde_json::to_value(s).ok(),
                Some(serde_json::Value::String(s.as_str().into()))
            );
        }
    }
}
