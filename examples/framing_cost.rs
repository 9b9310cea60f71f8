//! What the line decoder costs per kind of line, with and without the depth bound (issue 47
//! §7: the nesting is measured in the walk that finds each `\n`). Run it under an instruction
//! counter, once per setting, and compare:
//!
//! ```sh
//! cargo build --release --example framing_cost
//! for d in none off 127 parse; do
//!   valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null \
//!     target/release/examples/framing_cost CORPUS $d 2>&1 | grep 'I *refs'
//! done
//! ```
//!
//! (`none` builds the corpus and decodes nothing: subtract it from the others; `parse` frames
//! without a bound and parses every envelope, as the relay does, for scale.)
//! `CORPUS` is one of `echo` (a `tools/call` request and its answer, 20,000 of each), `list`
//! (a 60-tool `tools/list` answer, 200 times), `json-text` (a 256 KiB JSON text in a string,
//! escaped, 20 times), `base64` (a 4 MiB base64 text result, 4 times). The lines are fed in
//! 64 KiB reads, as the sockets and the child's stdout read them; the program prints the
//! frames it counted (so nothing is optimized away).

// A test, a fixture or a benchmark may unwrap, expect, panic and index: the workspace's panic
// lints (Cargo.toml [workspace.lints]) are for the daemon's code.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use vocab::jsonrpc::framing::{Frame, LineDecoder};

fn corpus(name: &str) -> Vec<u8> {
    let mut out = Vec::new();
    match name {
        "echo" => {
            for i in 0..20_000 {
                out.extend_from_slice(
                    format!(
                        "{{\"jsonrpc\":\"2.0\",\"id\":{i},\"method\":\"tools/call\",\"params\":{{\"name\":\"echo\",\"arguments\":{{\"text\":\"hello\"}}}}}}\n\
                         {{\"jsonrpc\":\"2.0\",\"id\":{i},\"result\":{{\"content\":[{{\"type\":\"text\",\"text\":\"hello\"}}]}}}}\n"
                    )
                    .as_bytes(),
                );
            }
        }
        "list" => {
            let tools: Vec<String> = (0..60)
                .map(|t| {
                    format!(
                        "{{\"name\":\"tool_{t}\",\"description\":\"Does thing number {t} with the given options\",\"inputSchema\":{{\"type\":\"object\",\"properties\":{{\"path\":{{\"type\":\"string\",\"description\":\"where\"}},\"depth\":{{\"type\":\"integer\"}},\"tags\":{{\"type\":\"array\",\"items\":{{\"type\":\"string\"}}}}}},\"required\":[\"path\"]}}}}"
                    )
                })
                .collect();
            let line = format!(
                "{{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{{\"tools\":[{}]}}}}\n",
                tools.join(",")
            );
            for _ in 0..200 {
                out.extend_from_slice(line.as_bytes());
            }
        }
        "json-text" => {
            let mut text = String::from("[");
            while text.len() < 256 * 1024 {
                text.push_str("{\\\"id\\\":12345,\\\"name\\\":\\\"a row\\\",\\\"tags\\\":[\\\"x\\\",\\\"y\\\"]},");
            }
            text.push_str("{}]");
            let line = format!(
                "{{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{{\"content\":[{{\"type\":\"text\",\"text\":\"{text}\"}}]}}}}\n"
            );
            for _ in 0..20 {
                out.extend_from_slice(line.as_bytes());
            }
        }
        "base64" => {
            let text: String = (0..4 * 1024 * 1024)
                .map(|i| {
                    char::from(
                        b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"[i % 64],
                    )
                })
                .collect();
            let line = format!(
                "{{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{{\"content\":[{{\"type\":\"image\",\"mimeType\":\"image/png\",\"data\":\"{text}\"}}]}}}}\n"
            );
            for _ in 0..4 {
                out.extend_from_slice(line.as_bytes());
            }
        }
        other => {
            eprintln!("unknown corpus {other:?}: echo, list, json-text or base64");
            std::process::exit(2);
        }
    }
    out
}

fn main() {
    let mut args = std::env::args().skip(1);
    let name = args.next().unwrap_or_else(|| "echo".into());
    let depth = args.next().unwrap_or_else(|| "127".into());
    let input = corpus(&name);
    if depth == "none" {
        // The corpus alone: what to subtract from the other two.
        println!("{name}: {} bytes, not decoded", input.len());
        return;
    }
    // `parse`: framing without a bound, then every line's envelope parsed, as the relay does:
    // what the framing's share is compared with.
    let parse = depth == "parse";
    let mut dec = match depth.as_str() {
        "off" | "parse" => LineDecoder::new(64 << 20),
        d => LineDecoder::with_depth(64 << 20, d.parse().unwrap_or(127)),
    };
    let (mut lines, mut deep) = (0usize, 0usize);
    for chunk in input.chunks(64 * 1024) {
        dec.extend(chunk);
        while let Some(f) = dec.next_frame() {
            match f {
                Frame::Line(l) => {
                    lines += 1;
                    if parse {
                        deep += usize::from(vocab::jsonrpc::message::parse_line(&l).is_err());
                    }
                }
                Frame::TooDeep(_) => deep += 1,
                Frame::Oversized { .. } => {}
            }
        }
    }
    println!(
        "{name} depth={depth}: {lines} lines, {deep} too deep, {} bytes",
        input.len()
    );
}
