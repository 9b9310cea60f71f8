//! The endpoint row (issue 31): the round trip of a tool call through an endpoint against the
//! same call on the server's own socket, in one daemon.
//!
//! One `mcp-supervisor run` with the fake server `bench` and `[endpoints.desk] servers =
//! ["bench"]`. *own socket*: sequential `echo` calls on `bench.sock`; *endpoint*: the same
//! calls as `bench__echo` on `desk.sock`. The child and the daemon are the same for both, so
//! the difference is the endpoint's hop: its client task, the name lookup, the id it mints
//! and the line it rewrites, and one more queue into the server's actor.

use std::time::{Duration, Instant};

use crate::client::Conn;
use crate::measure::{LAT_PER_ROUND, LAT_ROUNDS};
use crate::procs::{cpu_of, phase, Proc};
use crate::results::{percentile, Results};
use crate::rig::{Rig, FAKE};

/// What the endpoint row measured.
pub struct EndpointResult {
    /// p50, p99 (µs) and samples on the server's own socket.
    pub own: (f64, f64, usize),
    /// The same through the endpoint.
    pub endpoint: (f64, f64, usize),
    /// The daemon's CPU per call, own socket and endpoint, µs.
    pub cpu_us: (f64, f64),
}

/// The daemon and one handshaken client each way.
fn open(rig: &Rig) -> (Proc, Conn, Conn) {
    let dir = rig.dir.join("endpoint-sock");
    let config = rig.dir.join("endpoint.toml");
    let text = format!(
        "[supervisor]\nsocket_dir = \"{}\"\n\n[servers.bench]\ncommand = \"{FAKE}\"\nargs = [\"--pidfile\", \"{}\"]\n\n[endpoints.desk]\nservers = [\"bench\"]\n",
        dir.display(),
        rig.pidfile().display()
    );
    std::fs::write(&config, text).unwrap_or_else(|e| panic!("endpoint: write the config: {e}"));
    let sup = rig.supervisor(&config, "endpoint");
    let socks = [dir.join("bench.sock"), dir.join("desk.sock")];
    rig.await_ready("endpoint", sup.pid(), &socks)
        .unwrap_or_else(|e| panic!("endpoint: {e}"));
    let fail = rig.failure("endpoint", sup.pid());
    let mut own = Conn::socket(&socks[0]).unwrap_or_else(|e| panic!("{}", fail(e)));
    own.handshake().unwrap_or_else(|e| panic!("{}", fail(e)));
    let mut ep = Conn::socket(&socks[1]).unwrap_or_else(|e| panic!("{}", fail(e)));
    ep.handshake().unwrap_or_else(|e| panic!("{}", fail(e)));
    ep.prefix = "bench__";
    (sup, own, ep)
}

/// `cargo test --benches`: a few calls each way.
pub fn smoke(rig: &Rig) {
    let (_sup, mut own, mut ep) = open(rig);
    let mut buf = Vec::new();
    for _ in 0..3 {
        own.echo(&mut buf)
            .unwrap_or_else(|e| panic!("endpoint own socket: {e}"));
        ep.echo(&mut buf)
            .unwrap_or_else(|e| panic!("endpoint: {e}"));
    }
}

/// Sequential `echo` round trips on the server's socket and through the endpoint, in
/// alternating rounds (the order swaps every round), with the daemon's CPU time around each.
pub fn measure_endpoint(rig: &Rig, res: &mut Results) {
    phase(
        "endpoint: round trips through an endpoint and on the server's own socket",
        Duration::from_secs(60),
    );
    let (sup, mut own, mut ep) = open(rig);
    let mut buf = Vec::new();
    for _ in 0..200 {
        own.echo(&mut buf)
            .unwrap_or_else(|e| panic!("endpoint own (warm-up): {e}"));
        ep.echo(&mut buf)
            .unwrap_or_else(|e| panic!("endpoint (warm-up): {e}"));
    }
    let pids = [sup.pid()];
    let mut samples: [Vec<Duration>; 2] = [Vec::new(), Vec::new()];
    let mut cpu = [0f64; 2];
    for r in 0..LAT_ROUNDS {
        for which in [r % 2, 1 - r % 2] {
            let until = Instant::now() + Duration::from_secs(2);
            let c0 = cpu_of(&pids);
            for _ in 0..LAT_PER_ROUND {
                if Instant::now() > until {
                    break;
                }
                let conn = if which == 0 { &mut own } else { &mut ep };
                samples[which].push(
                    conn.echo(&mut buf)
                        .unwrap_or_else(|e| panic!("endpoint: {e}")),
                );
            }
            cpu[which] += cpu_of(&pids) - c0;
        }
    }
    let per = |c: f64, n: usize| c / n.max(1) as f64 * 1e6;
    let stats = |s: &mut Vec<Duration>| {
        s.sort();
        (percentile(s, 0.50), percentile(s, 0.99), s.len())
    };
    let (n0, n1) = (samples[0].len(), samples[1].len());
    res.endpoint = Some(EndpointResult {
        own: stats(&mut samples[0]),
        endpoint: stats(&mut samples[1]),
        cpu_us: (per(cpu[0], n0), per(cpu[1], n1)),
    });
}
