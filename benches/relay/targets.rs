//! The targets table of the report (issue 15): every ratio side by side, from one run.

use std::fmt::Write as _;

use crate::client::Way;
use crate::report::Row;
use crate::results::{key, Results};

struct Target {
    what: &'static str,
    /// The value, or why there is none.
    measured: Result<f64, String>,
    limit: f64,
    /// true: the measured value must be at most `limit`; false: at least.
    at_most: bool,
    unit: &'static str,
}

fn why(res: &Results, section: &str, way: Way) -> String {
    res.why
        .get(&key(section, way))
        .or_else(|| res.why.get(&key("run", way)))
        .cloned()
        .unwrap_or_else(|| format!("{} not measured in `{section}`", way.name()))
}

/// `a ÷ b`, or why either is missing.
fn ratio(
    res: &Results,
    section: &str,
    a: (Way, Option<f64>),
    b: (Way, Option<f64>),
) -> Result<f64, String> {
    match (a.1, b.1) {
        (Some(x), Some(y)) if y > 0.0 => Ok(x / y),
        (None, _) => Err(why(res, section, a.0)),
        _ => Err(why(res, section, b.0)),
    }
}

/// The name of a row without its "(lower is better)" tail.
fn short(name: &str) -> &str {
    name.split(" (").next().unwrap_or(name)
}

pub fn write(w: &mut String, res: &Results, main: &[Row], scale: &[Row]) {
    let tp = |c: usize, way: Way| {
        res.throughput
            .iter()
            .find(|t| t.clients == c && t.way == way)
    };
    let lat = |way: Way| res.latency.iter().find(|l| l.0 == way);
    let large = |mib: usize, way: Way| res.large.iter().find(|l| l.mib == mib && l.way == way);
    let (sup, socat, direct) = (Way::Supervisor, Way::Socat, Way::Direct);
    let peak = |mib: usize| match large(mib, sup).and_then(|l| l.peak) {
        Some(p) => Ok(p / mib as f64),
        None => Err(why(res, "large", sup)),
    };
    let grow = |mib: usize| match large(mib, sup).and_then(|l| l.grow) {
        Some(g) => Ok(g / mib as f64),
        None => Err(why(res, "large", sup)),
    };
    let around = res.rss_around_large.iter().find(|r| r.0 == sup);
    let many = res
        .idle
        .iter()
        .find(|i| i.way == sup && i.servers == 100 && i.clients == 1000)
        .and_then(|i| i.daemon_rss);
    let targets = [
        Target {
            what: "relay CPU per message, 10 pipelined clients: supervisor ÷ socat",
            measured: ratio(
                res,
                "throughput 10",
                (sup, tp(10, sup).and_then(|t| t.cpu_us)),
                (socat, tp(10, socat).and_then(|t| t.cpu_us)),
            ),
            limit: 1.5,
            at_most: true,
            unit: "×",
        },
        Target {
            what: "pipelined msg/s, 10 clients, one shared server: supervisor ÷ direct",
            measured: ratio(
                res,
                "throughput 10",
                (sup, tp(10, sup).map(|t| t.rate)),
                (direct, tp(10, direct).map(|t| t.rate)),
            ),
            limit: 0.8,
            at_most: false,
            unit: "×",
        },
        Target {
            what: "echo round trip p50: supervisor ÷ socat",
            measured: ratio(
                res,
                "latency",
                (sup, lat(sup).map(|l| l.1)),
                (socat, lat(socat).map(|l| l.1)),
            ),
            limit: 1.2,
            at_most: true,
            unit: "×",
        },
        Target {
            what: "echo round trip p99: supervisor ÷ socat",
            measured: ratio(
                res,
                "latency",
                (sup, lat(sup).map(|l| l.2)),
                (socat, lat(socat).map(|l| l.2)),
            ),
            limit: 1.5,
            at_most: true,
            unit: "×",
        },
        Target {
            what: "64 MiB result MB/s: supervisor ÷ socat",
            measured: ratio(
                res,
                "large",
                (sup, large(64, sup).map(|l| l.rate)),
                (socat, large(64, socat).map(|l| l.rate)),
            ),
            limit: 0.9,
            at_most: false,
            unit: "×",
        },
        Target {
            what: "16 MiB result: supervisor peak RSS ÷ payload",
            measured: peak(16),
            limit: 1.5,
            at_most: true,
            unit: "×",
        },
        Target {
            what: "64 MiB result: supervisor peak RSS ÷ payload",
            measured: peak(64),
            limit: 1.5,
            at_most: true,
            unit: "×",
        },
        Target {
            what: "16 MiB result: supervisor RSS growth (peak − RSS just before) ÷ payload",
            measured: grow(16),
            limit: 1.5,
            at_most: true,
            unit: "×",
        },
        Target {
            what: "64 MiB result: supervisor RSS growth (peak − RSS just before) ÷ payload",
            measured: grow(64),
            limit: 1.5,
            at_most: true,
            unit: "×",
        },
        Target {
            what: "supervisor RSS 1 s after a 64 MiB result minus RSS before the large results",
            measured: around
                .map(|(_, before, after)| after - before)
                .ok_or_else(|| why(res, "large", sup)),
            limit: 10.0,
            at_most: true,
            unit: " MiB",
        },
        Target {
            what: "idle, 100 servers + 1,000 clients: supervisor RSS",
            measured: many.ok_or_else(|| why(res, "idle-many", sup)),
            limit: 40.0,
            at_most: true,
            unit: " MiB",
        },
    ];
    let _ = writeln!(w, "\n### Targets\n");
    let _ = writeln!(w, "| target | required | measured | verdict |");
    let _ = writeln!(w, "|---|---:|---:|---|");
    for t in &targets {
        let rel = if t.at_most { "≤" } else { "≥" };
        let (measured, verdict) = match &t.measured {
            Err(e) => ("—".to_string(), format!("not measured: {e}")),
            Ok(m) => {
                let ok = if t.at_most {
                    *m <= t.limit
                } else {
                    *m >= t.limit
                };
                let verdict = if ok {
                    "met".to_string()
                } else {
                    let (by, off) = if t.at_most {
                        ((m / t.limit - 1.0) * 100.0, m - t.limit)
                    } else {
                        ((1.0 - m / t.limit) * 100.0, t.limit - m)
                    };
                    let dir = if t.at_most { "over" } else { "under" };
                    format!("**missed** by {by:.0}% ({off:.2}{} {dir})", t.unit)
                };
                (format!("{m:.2}{}", t.unit), verdict)
            }
        };
        let _ = writeln!(
            w,
            "| {} | {rel} {:.2}{} | {measured} | {verdict} |",
            t.what, t.limit, t.unit
        );
    }

    // Every row measured on both: is the supervisor better than rmcp-mux?
    let mut better = Vec::new();
    let mut worse = Vec::new();
    for r in main.iter().chain(scale) {
        let (Some(s), Some(m)) = (r.get(sup), r.get(Way::RmcpMux)) else {
            continue;
        };
        let item = format!("{} ({:.2}×)", short(&r.name), s / m);
        let wins = if r.higher_better { s > m } else { s < m };
        if wins {
            better.push(item);
        } else {
            worse.push(item);
        }
    }
    let total = better.len() + worse.len();
    let (measured, verdict) = if !res.has(Way::RmcpMux) {
        (
            "—".to_string(),
            format!("not measured: {}", why(res, "run", Way::RmcpMux)),
        )
    } else if total == 0 {
        (
            "—".to_string(),
            "not measured: no row has both columns".to_string(),
        )
    } else if worse.is_empty() {
        (
            format!("better in {total} of {total} rows"),
            "met".to_string(),
        )
    } else {
        (
            format!("better in {} of {total} rows", better.len()),
            format!("**missed**: worse in {}", worse.join("; ")),
        )
    };
    let _ = writeln!(
        w,
        "| every row measured on both: supervisor vs rmcp-mux (ratio supervisor ÷ rmcp-mux) | better in all | {measured} | {verdict} |"
    );
    if !better.is_empty() {
        let _ = writeln!(
            w,
            "\nRows where the supervisor is better than rmcp-mux: {}.",
            better.join("; ")
        );
    }
}
