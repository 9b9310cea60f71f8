//! A stable-Rust fuzz loop for the line framing and the JSON-RPC parsers (no nightly, so no
//! cargo-fuzz): seeded random and mutated inputs, checked against the same properties as the
//! unit property tests, until the time budget ends.
//!
//! ```sh
//! cargo run --release --example fuzz -- [framing|parse|ids|all] [--seconds N] [--seed S] [--cases N]
//! ```
//!
//! - `framing`: any split of the input gives the frames of a whole-input model (CRLF, BOM,
//!   blank and oversized lines included), with bounded buffering;
//! - `parse`: `parse_line` never panics, and what it accepts re-encodes to one parseable line;
//! - `ids`: the top-level id of a generated object (nested `id`s everywhere, any member order,
//!   any split) is found exactly; on mutated input the scanner agrees with serde_json
//!   whenever serde_json accepts the line.
//!
//! Case `k` of a run uses seed `S + k`; a failure prints its case seed, and
//! `--seed <that> --cases 1` replays it. Exit status 1 on the first failure.

// A test, a fixture or a benchmark may unwrap, expect, panic and index: the workspace's panic
// lints (Cargo.toml [workspace.lints]) are for the daemon's code.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use bytes::Bytes;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde_json::value::RawValue;
use std::time::{Duration, Instant};
use vocab::jsonrpc::framing::{Frame, LineDecoder};
use vocab::jsonrpc::message::{self, Out};
use vocab::jsonrpc::toplevel::{TopLevel, TopLevelId, ID_MAX};

type Check = fn(&mut SmallRng) -> Result<(), String>;

fn main() {
    let mut target = "all".to_string();
    let mut seconds = 10u64;
    let mut seed: Option<u64> = None;
    let mut cases = u64::MAX;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut num = |name: &str| -> u64 {
            args.next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| usage(&format!("{name} needs a number")))
        };
        match a.as_str() {
            "--seconds" => seconds = num("--seconds"),
            "--seed" => seed = Some(num("--seed")),
            "--cases" => cases = num("--cases"),
            "framing" | "parse" | "ids" | "all" => target = a,
            other => usage(&format!("unknown argument {other:?}")),
        }
    }
    let seed = seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
    });
    let checks: Vec<(&str, Check)> = [
        ("framing", framing as Check),
        ("parse", parse as Check),
        ("ids", ids as Check),
    ]
    .into_iter()
    .filter(|(n, _)| target == "all" || target == *n)
    .collect();
    println!("fuzz {target}: seed {seed}, {seconds} s");
    // Panics are caught per case and reported with the case seed instead.
    std::panic::set_hook(Box::new(|_| {}));
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut k = 0u64;
    while k < cases && Instant::now() < deadline {
        let case_seed = seed.wrapping_add(k);
        for (name, check) in &checks {
            let mut rng = SmallRng::seed_from_u64(case_seed);
            let outcome = std::panic::catch_unwind(move || check(&mut rng));
            let failure = match outcome {
                Ok(Ok(())) => continue,
                Ok(Err(why)) => why,
                Err(p) => format!(
                    "panicked: {}",
                    p.downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| p.downcast_ref::<String>().cloned())
                        .unwrap_or_default()
                ),
            };
            println!("FAILED {name} at case seed {case_seed}: {failure}");
            println!(
                "replay: cargo run --release --example fuzz -- {name} --seed {case_seed} --cases 1"
            );
            std::process::exit(1);
        }
        k += 1;
    }
    println!("ok: {k} cases");
}

fn usage(why: &str) -> ! {
    eprintln!("{why}\nusage: fuzz [framing|parse|ids|all] [--seconds N] [--seed S] [--cases N]");
    std::process::exit(2)
}

// ----- generators ---------------------------------------------------------------------------

/// A random JSON value with `id` and `method` keys at every depth and tricky strings.
fn value(rng: &mut SmallRng, depth: u32) -> String {
    let pick = if depth >= 4 {
        rng.gen_range(0..5)
    } else {
        rng.gen_range(0..8)
    };
    match pick {
        0 => "null".into(),
        1 => ["true", "false"][rng.gen_range(0..2)].into(),
        2 => number(rng),
        3 | 4 => string(rng),
        5 | 6 => {
            let n = rng.gen_range(0..5);
            let members: Vec<String> = (0..n)
                .map(|_| format!("{}{}:{}", ws(rng), key(rng), value(rng, depth + 1)))
                .collect();
            format!("{{{}}}", members.join(","))
        }
        _ => {
            let n = rng.gen_range(0..5);
            let items: Vec<String> = (0..n).map(|_| value(rng, depth + 1)).collect();
            format!("[{}]", items.join(&format!(",{}", ws(rng))))
        }
    }
}

fn number(rng: &mut SmallRng) -> String {
    match rng.gen_range(0..4) {
        0 => rng.gen::<u64>().to_string(),
        1 => rng.gen::<i32>().to_string(),
        2 => format!("{}", rng.gen::<f64>() * 1e6),
        _ => format!(
            "-{}.{}e{}",
            rng.gen_range(0..10),
            rng.gen_range(0..100),
            rng.gen_range(-5..5)
        ),
    }
}

fn string(rng: &mut SmallRng) -> String {
    const PARTS: &[&str] = &[
        "a",
        "id",
        "\\\"",
        "\\\\",
        "\\u0064",
        "\\n",
        r#"\":1,\"id\":2"#,
        "{",
        "}",
        "[",
        "é",
        "\u{2028}",
        "😀",
        " ",
    ];
    let n = rng.gen_range(0..6);
    let body: String = (0..n)
        .map(|_| PARTS[rng.gen_range(0..PARTS.len())])
        .collect();
    format!("\"{body}\"")
}

fn key(rng: &mut SmallRng) -> String {
    const KEYS: &[&str] = &[
        "\"id\"",
        "\"method\"",
        "\"i\\u0064\"",
        "\"x\"",
        "\"content\"",
        "\"Id\"",
    ];
    if rng.gen_bool(0.7) {
        KEYS[rng.gen_range(0..KEYS.len())].into()
    } else {
        string(rng)
    }
}

fn ws(rng: &mut SmallRng) -> &'static str {
    [" ", "", "", "\t", "\r", ""][rng.gen_range(0..6)]
}

/// A top-level object: (its text, the raw text of its top-level id, whether it has `method`).
fn message_object(rng: &mut SmallRng) -> (String, Option<String>, bool) {
    let id = match rng.gen_range(0..5) {
        0 => None,
        1 => Some("null".to_string()),
        2 | 3 => Some(number(rng)),
        _ => Some(string(rng)),
    };
    let has_method = rng.gen_bool(0.4);
    let mut members = vec![
        format!("\"jsonrpc\":\"2.0\""),
        format!("\"result\":{}", value(rng, 1)),
        format!("\"content\":{}", value(rng, 1)),
    ];
    if has_method {
        members.push("\"method\":\"tools/call\"".into());
    }
    if let Some(id) = &id {
        let k = if rng.gen_bool(0.2) {
            "\"i\\u0064\""
        } else {
            "\"id\""
        };
        members.push(format!("{k}{}:{}{id}", ws(rng), ws(rng)));
    }
    // Any member order.
    for i in (1..members.len()).rev() {
        members.swap(i, rng.gen_range(0..=i));
    }
    (format!("{{{}}}", members.join(",")), id, has_method)
}

fn mutate(rng: &mut SmallRng, mut b: Vec<u8>) -> Vec<u8> {
    const BYTES: &[u8] = b"{}[]\":,\\ \n\r0-e";
    for _ in 0..rng.gen_range(1..4) {
        let at = rng.gen_range(0..=b.len());
        match rng.gen_range(0..5) {
            0 if at < b.len() => b[at] = rng.gen(),
            1 if at < b.len() => b[at] = BYTES[rng.gen_range(0..BYTES.len())],
            2 if at < b.len() => {
                b.remove(at);
            }
            3 => b.truncate(at),
            _ => b.insert(at, BYTES[rng.gen_range(0..BYTES.len())]),
        }
    }
    b
}

fn splits(rng: &mut SmallRng, len: usize) -> Vec<usize> {
    let mut at: Vec<usize> = (0..rng.gen_range(0..12))
        .map(|_| rng.gen_range(0..=len))
        .collect();
    if rng.gen_bool(0.1) {
        at = (0..=len).collect();
    }
    at.sort_unstable();
    at.push(len);
    at
}

fn scan_split(input: &[u8], cuts: &[usize]) -> Option<TopLevel> {
    let mut s = TopLevelId::new();
    let mut from = 0;
    for &to in cuts {
        s.feed(&input[from..to]);
        from = to;
    }
    s.finish()
}

// ----- checks -------------------------------------------------------------------------------

fn framing(rng: &mut SmallRng) -> Result<(), String> {
    let max = rng.gen_range(0..200);
    let mut input = Vec::new();
    for _ in 0..rng.gen_range(0..10) {
        match rng.gen_range(0..8) {
            0 => input.extend_from_slice(b"\n"),
            1 => input.extend_from_slice(b"\r\n"),
            2 => input.extend_from_slice(b"\xEF\xBB\xBF"),
            3 => input.extend(std::iter::repeat_n(b' ', rng.gen_range(0..400))),
            4 => input.extend((0..rng.gen_range(0..30)).map(|_| rng.gen::<u8>())),
            _ => input.extend_from_slice(message_object(rng).0.as_bytes()),
        }
    }
    let want = model(max, &input);
    let mut d = LineDecoder::new(max);
    let mut got = Vec::new();
    let mut from = 0;
    for to in splits(rng, input.len()) {
        d.extend(&input[from..to]);
        while let Some(f) = d.next_frame() {
            got.push(f);
        }
        if d.buffer_mut().len() > max + 4 + (to - from) {
            return Err(format!(
                "buffer holds {} bytes (max {max})",
                d.buffer_mut().len()
            ));
        }
        from = to;
    }
    got.extend(d.finish());
    if got != want {
        return Err(format!(
            "max {max}, input {:?}\n got {got:?}\nwant {want:?}",
            Bytes::from(input)
        ));
    }
    Ok(())
}

/// The framing rules applied to the whole input at once.
fn model(max: usize, input: &[u8]) -> Vec<Frame> {
    let mut out = Vec::new();
    for mut l in input.split(|b| *b == b'\n') {
        l = l.strip_suffix(b"\r").unwrap_or(l);
        l = l.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(l);
        if l.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        if l.len() > max {
            let top = scan_split(l, &[l.len()]);
            out.push(Frame::Oversized {
                len: l.len(),
                id: top.as_ref().and_then(|t| t.id.clone()),
                has_method: top.is_some_and(|t| t.has_method),
            });
        } else {
            out.push(Frame::Line(Bytes::copy_from_slice(l)));
        }
    }
    out
}

fn parse(rng: &mut SmallRng) -> Result<(), String> {
    let line = match rng.gen_range(0..3) {
        0 => (0..rng.gen_range(0..64)).map(|_| rng.gen::<u8>()).collect(),
        1 => {
            let m = message_object(rng).0.into_bytes();
            mutate(rng, m)
        }
        _ => {
            let a = message_object(rng).0;
            let batch = format!("[{a},{}]", message_object(rng).0).into_bytes();
            mutate(rng, batch)
        }
    };
    let Ok(msgs) = message::parse_line(&bytes::Bytes::from(line.clone())) else {
        return Ok(());
    };
    for m in msgs.into_iter().flatten() {
        let _ = (m.error_code(), m.params_object());
        if let Some(p) = &m.params {
            let _ = message::swap_progress_token(p, || message::raw_u64(1));
        }
        let id = m.id.as_deref().filter(|i| i.get() != "null");
        let out = Out::request(id, m.method(), m.params.as_deref()).encode();
        let body = out.strip_suffix(b"\n").unwrap_or(&out);
        if body.contains(&b'\n') || message::parse_one(body).is_err() {
            return Err(format!("re-encoded {:?} from {:?}", out, Bytes::from(line)));
        }
    }
    Ok(())
}

fn ids(rng: &mut SmallRng) -> Result<(), String> {
    let (text, id, has_method) = message_object(rng);
    let input = text.as_bytes();
    let got = scan_split(input, &splits(rng, input.len()));
    let want_id = id.filter(|i| i.len() <= ID_MAX).map(Bytes::from);
    let want = Some(TopLevel {
        id: want_id,
        has_method,
    });
    if got != want {
        return Err(format!("{text}\n got {got:?}\nwant {want:?}"));
    }
    let bad = mutate(rng, text.into_bytes());
    let got = scan_split(&bad, &splits(rng, bad.len()));
    if let Some(want) = serde_probe(&bad) {
        if got != Some(want.clone()) {
            return Err(format!(
                "{:?}\n got {got:?}\nserde {want:?}",
                Bytes::from(bad)
            ));
        }
    }
    Ok(())
}

/// What serde_json finds in a line it accepts as an object (`None` when it rejects it).
fn serde_probe(line: &[u8]) -> Option<TopLevel> {
    #[derive(serde::Deserialize)]
    struct Probe {
        #[serde(default, deserialize_with = "present")]
        id: Option<Box<RawValue>>,
        method: Option<serde::de::IgnoredAny>,
    }
    fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Box<RawValue>>, D::Error> {
        serde::Deserialize::deserialize(d).map(Some)
    }
    let p: Probe = serde_json::from_slice(line).ok()?;
    let id = p.id.filter(|r| {
        r.get().len() <= ID_MAX
            && matches!(
                r.get().as_bytes().first(),
                Some(b'"' | b'-' | b'0'..=b'9' | b'n')
            )
    });
    Some(TopLevel {
        id: id.map(|r| Bytes::copy_from_slice(r.get().as_bytes())),
        has_method: p.method.is_some(),
    })
}
