//! Extreme values for every key of the table (issue 26 §1): each value given to each key, in
//! each table it may be written in, is either refused with an error naming that key, or
//! yields a `Config` whose every duration can be added to `Instant::now()` with plain `+`, as
//! the actors do, and summed as the stop budgets do, without a panic. Parsing itself must
//! never panic either (a count multiplied or a size converted must not overflow).

use super::keys::{Key, Section, KEYS};
use super::{parse, Config};
use proptest::prelude::*;
use std::path::Path;
use std::time::{Duration, Instant};

/// Values that have broken parsers before, or could: huge, zero, negative, fractional,
/// overflowing, the wrong type.
const EXTREMES: &[&str] = &[
    "0",
    "-1",
    "1",
    "9223372036854775807",
    "-9223372036854775808",
    "18446744073709551615",
    "0.5",
    "-0.5",
    "1e308",
    "nan",
    "inf",
    "-inf",
    "true",
    "false",
    "\"\"",
    "\"0s\"",
    "\"0ms\"",
    "\"1ns\"",
    "\"0.5s\"",
    "\"-1s\"",
    "\"400000000000y\"",
    "\"584942417355y\"",
    "\"18446744073709551615s\"",
    "\"18446744073709551615ms\"",
    "\"99999999999999999999h\"",
    "\"213503982334601d\"",
    "\"max\"",
    "\"off\"",
    "\"infinity\"",
    "\"18446744073709551615\"",
    "\"9223372036854775807\"",
    "\"16EiB\"",
    "\"18446744073709551615B\"",
    "\"1.5\"",
    "\"0660\"",
    "\"0\"",
    "\"4294967296\"",
    "[]",
    "[-1]",
    "[4294967296]",
    "[\"x\"]",
    "{}",
    "{ A = \"x\" }",
    "\"x\"",
];

/// Where a row's key is written: the file text and the dotted key an error must name.
fn placements(key: &Key, value: &str) -> Vec<(String, String)> {
    let server = if super::keys::URL_ONLY.contains(&key.name) {
        "[servers.a]\nurl = \"https://example.com/mcp\"\n"
    } else {
        "[servers.a]\ncommand = \"x\"\n"
    };
    match key.section {
        Section::Supervisor => vec![(
            format!("[supervisor]\n{} = {value}\n{server}", key.name),
            key.path(Some("a")),
        )],
        Section::Server | Section::ServerOnly => {
            let own = if key.name == "command" || key.name == "url" {
                format!("[servers.a]\n{} = {value}\n", key.name)
            } else {
                format!("{server}{} = {value}\n", key.name)
            };
            vec![
                (own, key.path(Some("a"))),
                (
                    format!("[defaults]\n{} = {value}\n{server}", key.name),
                    key.path(None),
                ),
            ]
        }
        Section::Endpoint => vec![(
            if key.name == "servers" {
                format!("[servers.a]\ncommand = \"x\"\n[endpoints.e]\nservers = {value}\n")
            } else {
                format!(
                    "[servers.a]\ncommand = \"x\"\n[endpoints.e]\nservers = [\"a\"]\n{} = {value}\n",
                    key.name
                )
            },
            key.path(Some("e")),
        )],
        Section::MethodTimeout => vec![
            (
                format!("{server}[servers.a.method_timeouts]\n\"tools/call\" = {value}\n"),
                "servers.a.method_timeouts.tools/call".to_string(),
            ),
            (
                format!("[defaults.method_timeouts]\n\"tools/call\" = {value}\n{server}"),
                "defaults.method_timeouts.tools/call".to_string(),
            ),
        ],
    }
}

/// Every duration a `Config` holds.
fn durations(c: &Config) -> Vec<Duration> {
    let mut all = vec![c.supervisor.http.session_idle];
    for s in c.servers.values() {
        all.extend([
            s.start_timeout,
            s.request_timeout,
            s.probe_interval,
            s.probe_timeout,
            s.backoff_initial,
            s.backoff_max,
            s.backoff_reset_after,
            s.stop_grace,
            s.kill_timeout,
            s.queue_wait,
            s.client_stall_timeout,
            s.first_message_timeout,
            s.era_probe_timeout,
        ]);
        all.extend(s.method_timeouts.values());
        all.extend(s.client_idle_timeout);
        all.extend(s.idle_stop);
    }
    all
}

/// Parses `text` and checks the property for a value of `expected`; returns why it failed.
fn check(text: &str, expected: &str) -> Result<(), String> {
    let parsed = std::panic::catch_unwind(|| parse(Path::new("/etc/s.toml"), text))
        .map_err(|_| format!("parse panicked on:\n{text}"))?;
    match parsed {
        Err(e) => {
            let named = e.key == expected
                || e.key.starts_with(&format!("{expected}."))
                // The socket path is socket_dir and the server's name together.
                || (expected == "supervisor.socket_dir" && e.key == "servers.a");
            if named {
                Ok(())
            } else {
                Err(format!(
                    "the error names `{}`, not `{expected}`: {e}\n{text}",
                    e.key
                ))
            }
        }
        Ok(c) => {
            let added = std::panic::catch_unwind(|| {
                let now = Instant::now();
                let tokio_now = tokio::time::Instant::now();
                for d in durations(&c) {
                    let _ = now + d;
                    let _ = tokio_now + d;
                }
                for s in c.servers.values() {
                    // The stop and start budgets of the control verbs and the actor.
                    let _ = now + s.stop_grace + s.kill_timeout + Duration::from_secs(5);
                    let _ = now
                        + s.start_timeout
                        + s.stop_grace
                        + s.kill_timeout
                        + Duration::from_secs(2);
                    let mut b = base::backoff::Backoff::new(
                        s.backoff_initial,
                        s.backoff_max,
                        s.backoff_reset_after,
                    );
                    let mut rng = rand::rngs::mock::StepRng::new(0, 1 << 60);
                    for _ in 0..70 {
                        let _ = now + b.on_exit(now, now, None, &mut rng);
                    }
                    let _ = s.max_inflight * 3;
                }
            });
            added.map_err(|_| format!("a deadline of this config panics:\n{text}"))
        }
    }
}

#[test]
fn every_extreme_value_of_every_key_is_refused_by_name_or_is_safe() {
    let mut failures = Vec::new();
    for key in KEYS {
        for value in EXTREMES {
            for (text, expected) in placements(key, value) {
                if let Err(why) = check(&text, &expected) {
                    failures.push(why);
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures, the first ones:\n{}",
        failures.len(),
        failures
            .iter()
            .take(8)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n---\n")
    );
}

fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        any::<f64>().prop_map(|f| format!("{f:?}")),
        (
            any::<u64>(),
            prop::sample::select(&["ns", "us", "ms", "s", "m", "h", "d", "w", "y", ""][..])
        )
            .prop_map(|(n, unit)| format!("\"{n}{unit}\"")),
        (0u32..64, prop::sample::select(&["s", "ms", "h"][..]))
            .prop_map(|(p, unit)| format!("\"{}{unit}\"", 1u64 << p)),
        any::<u64>().prop_map(|n| format!("\"{n}B\"")),
        "[a-z0-9 ./:-]{0,300}".prop_map(|s| format!("\"{s}\"")),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn any_value_of_any_key_is_refused_by_name_or_is_safe(
        row in 0..KEYS.len(),
        value in value(),
    ) {
        let key = KEYS.get(row).copied().unwrap_or(KEYS[0]);
        for (text, expected) in placements(&key, &value) {
            if let Err(why) = check(&text, &expected) {
                prop_assert!(false, "{}", why);
            }
        }
    }
}
