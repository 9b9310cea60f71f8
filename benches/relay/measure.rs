//! The single-server measurements: sequential round trips, pipelined throughput, large
//! results. Every way is measured in the same rounds, in a rotating order.

use std::time::{Duration, Instant};

use crate::client::{pipelined, rotation, window, Conn, Way};
use crate::procs::{cpu_of, kib_to_mib, phase, reset_peak, status_kib, Proc};
use crate::results::{median, percentile, Large, Live, Results, Throughput};
use crate::rig::{One, MIB};

pub const LAT_ROUNDS: usize = 5;
pub const LAT_PER_ROUND: usize = 1000;

fn slots<T>() -> Vec<Option<T>> {
    (0..5).map(|_| None).collect()
}

pub fn measure_latency(one: &One, res: &mut Results) {
    phase(
        "latency: sequential echo round trips",
        Duration::from_secs(75),
    );
    let mut live = Live::new("latency", &res.ways).watch(one.rmcp_pid(), &one.rig.log("one-rmcp"));
    let mut conns: Vec<Option<Conn>> = slots();
    for way in live.ways.clone() {
        conns[way.idx()] = live.check(way, "connect", one.connect(way));
    }
    let mut buf = Vec::new();
    for way in live.ways.clone() {
        let Some(c) = conns[way.idx()].as_mut() else {
            continue;
        };
        let warm = (0..200).try_for_each(|_| c.echo(&mut buf).map(|_| ()));
        live.check(way, "warm-up echo", warm);
    }
    let mut samples: Vec<Vec<Duration>> = vec![Vec::new(); 5];
    for r in 0..LAT_ROUNDS {
        for way in rotation(&live.ways, r) {
            let i = way.idx();
            let Some(c) = conns[i].as_mut() else { continue };
            let until = Instant::now() + Duration::from_secs(2);
            for _ in 0..LAT_PER_ROUND {
                if Instant::now() > until {
                    break;
                }
                match live.check(way, "echo", c.echo(&mut buf)) {
                    Some(d) => samples[i].push(d),
                    None => break,
                }
            }
        }
    }
    for way in live.ways.clone() {
        let s = &mut samples[way.idx()];
        s.sort();
        res.latency
            .push((way, percentile(s, 0.50), percentile(s, 0.99), s.len()));
    }
    live.finish(res);
}

const TP_ROUNDS: usize = 5;
const TP_ROUND: Duration = Duration::from_millis(600);

/// The processes whose CPU time is charged to `way` while `conns` are its clients.
fn relay_pids(one: &One, way: Way, conns: &[Conn]) -> Vec<i32> {
    match way {
        Way::Direct => vec![],
        Way::Socat => one.socat_forks(),
        Way::Supervisor => vec![one.sup.pid()],
        Way::Attach => {
            let mut v = vec![one.sup.pid()];
            v.extend(conns.iter().filter_map(|c| c.proc.as_ref().map(Proc::pid)));
            v
        }
        Way::RmcpMux => one.rmcp_pid().into_iter().collect(),
    }
}

pub fn measure_throughput(one: &One, res: &mut Results) {
    for clients in [1usize, 10, 100] {
        let section = format!("throughput {clients}");
        phase(
            &format!("throughput: {clients} pipelined client(s)"),
            Duration::from_secs(100),
        );
        one.socat_idle();
        let mut live =
            Live::new(&section, &res.ways).watch(one.rmcp_pid(), &one.rig.log("one-rmcp"));
        let w = window(clients);
        // direct: one pipe pair carrying the same total window (there is one child to share).
        let mut sets: Vec<Option<(Vec<Conn>, usize)>> = slots();
        for way in live.ways.clone() {
            let set = match way {
                Way::Direct => one.connect(way).map(|c| (vec![c], w * clients)),
                _ => (0..clients)
                    .map(|_| one.connect(way))
                    .collect::<Result<Vec<_>, _>>()
                    .map(|v| (v, w)),
            };
            sets[way.idx()] = live.check(way, "connect", set);
        }
        for way in live.ways.clone() {
            if let Some((conns, win)) = sets[way.idx()].as_mut() {
                let warm = pipelined(conns, *win, Duration::from_millis(200));
                live.check(way, "warm-up", warm);
            }
        }
        let relays: Vec<Vec<i32>> = (0..5)
            .map(|i| match sets[i].as_ref() {
                Some((conns, _)) => relay_pids(one, crate::client::ALL_WAYS[i], conns),
                None => vec![],
            })
            .collect();
        let mut rates: Vec<Vec<f64>> = vec![Vec::new(); 5];
        let mut errors = [0u64; 5];
        let mut msgs = [0u64; 5];
        let mut cpu = [0f64; 5];
        for r in 0..TP_ROUNDS {
            for way in rotation(&live.ways, r) {
                let i = way.idx();
                let Some((conns, win)) = sets[i].as_mut() else {
                    continue;
                };
                let before = cpu_of(&relays[i]);
                let out = pipelined(conns, *win, TP_ROUND);
                let Some((rate, ok, err)) = live.check(way, "pipelined round", out) else {
                    continue;
                };
                cpu[i] += cpu_of(&relays[i]) - before;
                rates[i].push(rate);
                msgs[i] += ok;
                errors[i] += err;
            }
        }
        for way in live.ways.clone() {
            let i = way.idx();
            res.throughput.push(Throughput {
                clients,
                way,
                rate: median(&mut rates[i]),
                errors: errors[i],
                cpu_us: (way != Way::Direct).then(|| cpu[i] / msgs[i].max(1) as f64 * 1e6),
            });
        }
        live.finish(res);
    }
}

/// One `big` call; for the daemons, then the RSS one second later (after a 64 MiB result,
/// the "RSS after" of the report).
fn rss_after_big(conn: &mut Conn, pid: i32, buf: &mut Vec<u8>) -> Result<f64, String> {
    conn.big(64 * MIB, buf)?;
    // The definition of the measurement ("1 s after"), not a wait for an event.
    std::thread::sleep(Duration::from_secs(1));
    Ok(kib_to_mib(status_kib(pid, "VmRSS")))
}

pub fn measure_large(one: &One, res: &mut Results) {
    phase("large results: 1, 16, 64 MiB", Duration::from_secs(150));
    one.socat_idle();
    let mut live = Live::new("large", &res.ways).watch(one.rmcp_pid(), &one.rig.log("one-rmcp"));
    let mut conns: Vec<Option<Conn>> = slots();
    for way in live.ways.clone() {
        conns[way.idx()] = live.check(way, "connect", one.connect(way));
    }
    // Whose memory counts as the relay: nothing for direct, the socat process forked for this
    // connection, the supervisor (and for attach, also the attach process, reported apart),
    // rmcp-mux.
    let forks = one.socat_forks();
    assert_eq!(forks.len(), 1, "expected one socat fork, found {forks:?}");
    let attach_pid = conns[Way::Attach.idx()]
        .as_ref()
        .and_then(|c| c.proc.as_ref())
        .map_or(0, Proc::pid);
    let relays: [Vec<i32>; 5] = [
        vec![],
        forks,
        vec![one.sup.pid()],
        vec![one.sup.pid(), attach_pid],
        one.rmcp_pid().into_iter().collect(),
    ];
    let daemons: Vec<(Way, i32)> = [Way::Supervisor, Way::RmcpMux]
        .into_iter()
        .filter(|w| live.has(*w))
        .map(|w| (w, relays[w.idx()][0]))
        .collect();
    let rss_before: Vec<f64> = daemons
        .iter()
        .map(|(_, p)| kib_to_mib(status_kib(*p, "VmRSS")))
        .collect();
    let mut buf = Vec::with_capacity(65 * MIB);
    for mib in [1usize, 16, 64] {
        let reps = if mib == 64 { 4 } else { 6 };
        let mut cpu = [0f64; 5];
        let mut rates: Vec<Vec<f64>> = vec![Vec::new(); 5];
        let mut peaks = [0u64; 5];
        let mut grows = [0u64; 5];
        let mut attach_peak = 0u64;
        for r in 0..reps {
            for way in rotation(&live.ways, r) {
                let i = way.idx();
                let Some(c) = conns[i].as_mut() else { continue };
                let relay = &relays[i];
                relay.iter().for_each(|p| reset_peak(*p));
                let rss_before = relay.first().map_or(0, |p| status_kib(*p, "VmRSS"));
                let before = cpu_of(relay);
                let what = format!("{mib} MiB result");
                let Some(secs) = live.check(way, &what, c.big(mib * MIB, &mut buf)) else {
                    continue;
                };
                cpu[i] += cpu_of(relay) - before;
                rates[i].push((mib * MIB) as f64 / secs / 1e6);
                if let Some(p) = relay.first() {
                    let peak = status_kib(*p, "VmHWM");
                    peaks[i] = peaks[i].max(peak);
                    grows[i] = grows[i].max(peak.saturating_sub(rss_before));
                }
                if way == Way::Attach {
                    attach_peak = attach_peak.max(status_kib(relay[1], "VmHWM"));
                }
            }
        }
        for way in live.ways.clone() {
            let i = way.idx();
            let relayed = way != Way::Direct;
            res.large.push(Large {
                mib,
                way,
                rate: median(&mut rates[i]),
                peak: relayed.then(|| kib_to_mib(peaks[i])),
                grow: relayed.then(|| kib_to_mib(grows[i])),
                attach_peak: (way == Way::Attach).then(|| kib_to_mib(attach_peak)),
                cpu_ms: relayed.then(|| cpu[i] / rates[i].len().max(1) as f64 * 1e3),
            });
        }
    }
    for ((way, pid), before) in daemons.into_iter().zip(rss_before) {
        if !live.has(way) {
            continue;
        }
        let Some(c) = conns[way.idx()].as_mut() else {
            continue;
        };
        let after = rss_after_big(c, pid, &mut buf);
        if let Some(after) = live.check(way, "64 MiB result before the RSS check", after) {
            res.rss_around_large.push((way, before, after));
        }
    }
    live.finish(res);
}
