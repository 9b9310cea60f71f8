//! `[supervisor] log_format` (issue 17 §3). Errors name file, line and key.

use super::raw::RawSupervisor;
use super::{ConfigError, Validator};

/// Where and how the daemon's own log and the request log are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// The journal when stderr is the journal (`JOURNAL_STREAM`, R22); otherwise JSON lines
    /// when we are a container's PID 1 or run in a Kubernetes pod (`KUBERNETES_SERVICE_HOST`),
    /// whose log pipelines parse JSON; otherwise text.
    Auto,
    /// Human-readable text on stderr (ANSI colours only on a terminal).
    Text,
    /// One JSON object per line on stderr, with the fields the journal gets.
    Json,
    /// The journal, even when stderr is not connected to it (falls back to text when the
    /// journal socket is missing).
    Journal,
}

impl LogFormat {
    /// `auto`, `text`, `json`, `journal`.
    pub fn parse(s: &str) -> Option<LogFormat> {
        Some(match s {
            "auto" => LogFormat::Auto,
            "text" => LogFormat::Text,
            "json" => LogFormat::Json,
            "journal" => LogFormat::Journal,
            _ => return None,
        })
    }
}

impl Validator<'_> {
    pub(super) fn log_format(&self, raw: &RawSupervisor) -> Result<LogFormat, ConfigError> {
        match &raw.log_format {
            None => Ok(LogFormat::Auto),
            Some(v) => LogFormat::parse(v.get_ref()).ok_or_else(|| {
                self.err(
                    v.span(),
                    "supervisor.log_format",
                    &format!(
                        "`{}` is not a log format; write \"auto\", \"text\", \"json\" or \"journal\"",
                        v.get_ref()
                    ),
                )
            }),
        }
    }
}
