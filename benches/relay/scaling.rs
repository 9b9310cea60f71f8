//! Scaling rows: paced round trips at one fixed total load spread over 1 to 1,000 clients,
//! on one server and on 100 servers of one daemon.

use std::path::PathBuf;
use std::time::Duration;

use crate::client::{paced, rotation, Conn, Paced, Way};
use crate::procs::{children, cpu_of, phase, Proc};
use crate::results::{percentile, Live, Results, Scale};
use crate::rig::{socat_idle, wait_accepting, Rig};

/// Total calls per second asked of every path, whatever the number of clients.
pub const RATE: f64 = 2000.0;
pub const ROUNDS: usize = 3;
pub const ROUND: Duration = Duration::from_millis(700);
/// (servers, clients)
pub const CASES: [(usize, usize); 6] = [
    (1, 1),
    (1, 10),
    (1, 100),
    (1, 1000),
    (100, 100),
    (100, 1000),
];

pub fn section(servers: usize, clients: usize) -> String {
    format!("scale {servers}x{clients}")
}

/// Why socat has no cell in a scaling row, if it has none.
pub fn socat_absent(servers: usize, clients: usize, res: &Results) -> Option<String> {
    if clients >= 1000 {
        // Scaled from the socat idle row (100 clients), when it was measured.
        let scaled = res
            .idle
            .iter()
            .find(|i| i.way == Way::Socat)
            .map(|i| {
                format!(
                    " (ten times the idle row's: about {} processes, {:.0} MiB of PSS)",
                    i.processes * 10,
                    i.total_pss * 10.0
                )
            })
            .unwrap_or_default();
        Some(format!("socat, 1,000 clients: not run. socat cannot share a server, so 1,000 clients are 1,000 socat processes and 1,000 servers{scaled}, started on connect, on a 2-core machine shared with other work: the rows would measure process start-up and scheduling of 2,000 processes rather than a relay, and add most of a minute to the run; the 1-100 client rows show the trend"))
    } else if servers > 1 {
        Some("socat, 100 servers: socat always runs one server per client, so this row would repeat the one-server row with the same number of clients".into())
    } else {
        None
    }
}

/// A daemon with 100 servers for the scaling rows (the one-server rows use `s0`).
struct Daemon {
    proc: Proc,
    socks: Vec<PathBuf>,
}

fn start_daemon(rig: &Rig, way: Way) -> Result<Daemon, String> {
    let tag = format!("scale-{}", way.name());
    let (proc, socks) = match way {
        Way::RmcpMux => rig.rmcp_mux(&tag, 100)?,
        _ => {
            let (config, socks) = rig.config(&tag, 100, true);
            (rig.supervisor(&config, &tag), socks)
        }
    };
    rig.await_ready(&tag, proc.pid(), &socks)?;
    Ok(Daemon { proc, socks })
}

fn connect_all(socks: &[PathBuf], servers: usize, clients: usize) -> Result<Vec<Conn>, String> {
    (0..clients)
        .map(|i| {
            let mut c = Conn::socket(&socks[i % servers])?;
            c.handshake()?;
            Ok(c)
        })
        .collect()
}

/// Runs every case; `nofile` is the soft RLIMIT_NOFILE in force (each connection takes two
/// descriptors here, one in the daemon).
pub fn measure_scaling(rig: &Rig, nofile: u64, res: &mut Results) {
    phase(
        "scaling: starting daemons with 100 servers",
        Duration::from_secs(60),
    );
    let ways: Vec<Way> = [Way::Socat, Way::Supervisor, Way::RmcpMux]
        .into_iter()
        .filter(|w| res.has(*w))
        .collect();
    let mut live_start = Live::new("scale", &ways);
    let mut daemons: Vec<Option<Daemon>> = (0..5).map(|_| None).collect();
    for way in [Way::Supervisor, Way::RmcpMux] {
        if live_start.has(way) {
            daemons[way.idx()] =
                live_start.check(way, "start with 100 servers", start_daemon(rig, way));
        }
    }
    let socat_sock = rig.dir.join("scale-socat.sock");
    let socat = rig.socat(&socat_sock);
    wait_accepting(&socat_sock, Duration::from_secs(10), socat.pid()).expect("socat listens");
    let started = live_start.ways.clone();
    live_start.finish(res);

    for (servers, clients) in CASES {
        let sec = section(servers, clients);
        phase(
            &format!("scaling: {clients} client(s) on {servers} server(s), paced"),
            Duration::from_secs(120),
        );
        let mut case_ways: Vec<Way> = Vec::new();
        for &way in &started {
            if way == Way::Socat {
                if let Some(why) = socat_absent(servers, clients, res) {
                    res.say_why(&sec, way, why);
                    continue;
                }
            }
            case_ways.push(way);
        }
        let need = (clients * 2 * case_ways.len() + 256) as u64;
        if need > nofile {
            for &way in &case_ways {
                res.say_why(
                    &sec,
                    way,
                    format!("not run: RLIMIT_NOFILE is {nofile} after raising the soft limit to the hard one; this case needs about {need}"),
                );
            }
            continue;
        }
        let rmcp_pid = daemons[Way::RmcpMux.idx()].as_ref().map(|d| d.proc.pid());
        let mut live = Live::new(&sec, &case_ways).watch(rmcp_pid, &rig.log("scale-rmcp-mux"));
        let mut sets: Vec<Option<Vec<Conn>>> = (0..5).map(|_| None).collect();
        for way in live.ways.clone() {
            let conns = match way {
                Way::Socat => connect_all(std::slice::from_ref(&socat_sock), 1, clients),
                _ => match &daemons[way.idx()] {
                    Some(d) => connect_all(&d.socks, servers, clients),
                    None => continue,
                },
            };
            sets[way.idx()] = live.check(way, &format!("connect {clients} clients"), conns);
        }
        for way in live.ways.clone() {
            if let Some(conns) = sets[way.idx()].as_mut() {
                let warm = paced(conns, RATE, Duration::from_millis(200));
                live.check(way, "warm-up", warm);
            }
        }
        let relays: Vec<Vec<i32>> = (0..5)
            .map(|i| match crate::client::ALL_WAYS[i] {
                Way::Socat => children(socat.pid()),
                _ => daemons[i]
                    .as_ref()
                    .map(|d| vec![d.proc.pid()])
                    .unwrap_or_default(),
            })
            .collect();
        let mut total: Vec<Paced> = (0..5).map(|_| Paced::default()).collect();
        let mut cpu = [0f64; 5];
        let mut secs = [0f64; 5];
        for r in 0..ROUNDS {
            for way in rotation(&live.ways, r) {
                let i = way.idx();
                let Some(conns) = sets[i].as_mut() else {
                    continue;
                };
                let before = cpu_of(&relays[i]);
                let Some(p) = live.check(way, "paced round", paced(conns, RATE, ROUND)) else {
                    continue;
                };
                cpu[i] += cpu_of(&relays[i]) - before;
                secs[i] += ROUND.as_secs_f64();
                total[i].lat.extend(p.lat);
                total[i].ok += p.ok;
                total[i].err += p.err;
            }
        }
        for way in live.ways.clone() {
            let i = way.idx();
            let t = &mut total[i];
            t.lat.sort();
            res.scale.push(Scale {
                servers,
                clients,
                way,
                p50_us: percentile(&t.lat, 0.5),
                p99_us: percentile(&t.lat, 0.99),
                cpu_us: cpu[i] / t.ok.max(1) as f64 * 1e6,
                rate: t.ok as f64 / secs[i].max(1e-9),
                errors: t.err,
            });
        }
        live.finish(res);
        drop(sets);
        socat_idle(&socat);
    }
}
