//! What the measurements produce, and [`Live`]: which ways are still measured in a section.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::client::Way;
use crate::rig::{alive, log_tail};

/// One throughput measurement.
pub struct Throughput {
    pub clients: usize,
    pub way: Way,
    /// Median messages per second over the rounds.
    pub rate: f64,
    /// Error responses over all rounds (should be none).
    pub errors: u64,
    /// CPU time of the relay processes per message, in microseconds (none for direct).
    pub cpu_us: Option<f64>,
}

/// The idle footprint of one way.
pub struct Idle {
    pub servers: usize,
    pub clients: usize,
    pub way: Way,
    /// PSS of the relay processes (socat, supervisor, attach, rmcp-mux), MiB.
    pub relay_pss: Option<f64>,
    /// PSS of every process serving the clients (servers included), MiB.
    pub total_pss: f64,
    /// RSS of the daemon process (supervisor, rmcp-mux), MiB.
    pub daemon_rss: Option<f64>,
    /// The same with the servers ready and no client connected, MiB.
    pub daemon_rss_no_clients: Option<f64>,
    /// CPU time of the relay processes over one idle second, ms.
    pub cpu_ms_per_s: Option<f64>,
    pub processes: usize,
}

/// One large-result measurement.
pub struct Large {
    pub mib: usize,
    pub way: Way,
    /// Median MB/s.
    pub rate: f64,
    /// The relay's peak RSS in MiB (none for direct).
    pub peak: Option<f64>,
    /// The most the relay's RSS rose above what it was just before a result, in MiB: the
    /// result's own memory, without what the process held already (none for direct).
    pub grow: Option<f64>,
    /// The attach process's own peak RSS in MiB (attach only).
    pub attach_peak: Option<f64>,
    /// Mean CPU time of the relay processes per transfer, in ms (none for direct).
    pub cpu_ms: Option<f64>,
}

/// One scaling measurement: paced round trips of `clients` clients spread over `servers`.
pub struct Scale {
    pub servers: usize,
    pub clients: usize,
    pub way: Way,
    pub p50_us: f64,
    pub p99_us: f64,
    /// Relay CPU per answered call, µs.
    pub cpu_us: f64,
    /// Answers per second over the rounds (the load asks for `scaling::RATE`).
    pub rate: f64,
    pub errors: u64,
}

#[derive(Default)]
pub struct Results {
    /// The columns of the run: every way, rmcp-mux only when it was found and started.
    pub ways: Vec<Way>,
    /// Per way: p50, p99 in microseconds, samples.
    pub latency: Vec<(Way, f64, f64, usize)>,
    pub throughput: Vec<Throughput>,
    pub large: Vec<Large>,
    /// Per daemon: RSS (MiB) before the large results and 1 s after the last one.
    pub rss_around_large: Vec<(Way, f64, f64)>,
    pub idle: Vec<Idle>,
    /// (way, accepting ms, ready ms)
    pub startup: Vec<(Way, Option<f64>, f64)>,
    pub scale: Vec<Scale>,
    /// The remote row (a url server relaying to an HTTP upstream), when measured.
    pub remote: Option<crate::remote::RemoteResult>,
    /// The endpoint row (a call through an endpoint against the server's own socket).
    pub endpoint: Option<crate::endpoint::EndpointResult>,
    /// The live view's cost (issue 33), when measured.
    pub watch: Option<crate::watchers::WatchResult>,
    /// Why a cell is empty: key `section/way` (see [`key`]).
    pub why: BTreeMap<String, String>,
    pub notes: Vec<String>,
    /// Seconds of the whole run.
    pub wall: f64,
}

pub fn key(section: &str, way: Way) -> String {
    format!("{section}/{}", way.name())
}

impl Results {
    pub fn has(&self, way: Way) -> bool {
        self.ways.contains(&way)
    }

    pub fn say_why(&mut self, section: &str, way: Way, why: impl Into<String>) {
        self.why.entry(key(section, way)).or_insert(why.into());
    }
}

/// The ways measured in one section. A failure of rmcp-mux drops it from the section with its
/// reason; a failure of any other way panics (the benchmark itself is broken then).
pub struct Live {
    section: String,
    pub ways: Vec<Way>,
    failed: Vec<(Way, String)>,
    /// The rmcp-mux process of the section and its log, to say so when it died.
    watched: Option<(i32, PathBuf)>,
}

impl Live {
    pub fn new(section: &str, ways: &[Way]) -> Live {
        Live {
            section: section.to_string(),
            ways: ways.to_vec(),
            failed: Vec::new(),
            watched: None,
        }
    }

    /// Failures of rmcp-mux also say whether process `pid` (log `log`) had exited.
    pub fn watch(mut self, pid: Option<i32>, log: &Path) -> Live {
        self.watched = pid.map(|p| (p, log.to_path_buf()));
        self
    }

    pub fn has(&self, way: Way) -> bool {
        self.ways.contains(&way)
    }

    /// `Some(value)`, or `None` after recording why `way` is dropped from the section.
    pub fn check<T>(&mut self, way: Way, what: &str, r: Result<T, String>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(mut e) if way == Way::RmcpMux => {
                if let Some((pid, log)) = &self.watched {
                    if !alive(*pid) && !e.contains("process had exited") {
                        e = format!(
                            "{e}; the rmcp-mux process had exited, its log ends: {}",
                            log_tail(log)
                        );
                    }
                }
                let why = format!("rmcp-mux failed ({what}): {e}");
                eprintln!("relay bench: {}: {why}", self.section);
                self.ways.retain(|w| *w != way);
                self.failed.push((way, why));
                None
            }
            Err(e) => panic!("{} ({}): {what}: {e}", way.name(), self.section),
        }
    }

    /// Records the reasons of the dropped ways in `res`.
    pub fn finish(self, res: &mut Results) {
        for (way, why) in self.failed {
            res.say_why(&self.section, way, why);
        }
    }
}

pub fn percentile(sorted: &[std::time::Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let idx = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[idx].as_secs_f64() * 1e6
}

pub fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
