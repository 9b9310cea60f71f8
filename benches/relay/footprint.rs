//! Idle footprint (10 servers + 100 clients; 100 servers + 1,000 clients) and start time.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::client::{rotation, Conn, Reply, Way, INITIALIZE};
use crate::procs::{
    contains, cpu_of, descendants, kib_to_mib, phase, pss_kib, status_kib, sum_kib, Proc,
};
use crate::results::{median, Idle, Live, Results};
use crate::rig::{wait_accepting, Rig};

/// A rest before idle readings, so connection set-up work is over (not a synchronization).
fn settle() {
    std::thread::sleep(Duration::from_millis(500));
}

const IDLE_SERVERS: usize = 10;
const IDLE_CLIENTS: usize = 100;

pub fn measure_idle(rig: &Rig, res: &mut Results) {
    phase(
        "idle footprint: 10 servers, 100 clients",
        Duration::from_secs(120),
    );
    let mut live = Live::new("idle", &res.ways);
    for way in live.ways.clone() {
        let idle = match way {
            Way::Direct => Ok(idle_direct(rig)),
            Way::Socat => Ok(idle_socat(rig)),
            _ => idle_daemon(rig, way, IDLE_SERVERS, IDLE_CLIENTS, false),
        };
        if let Some(i) = live.check(way, "idle footprint", idle) {
            res.idle.push(i);
        }
    }
    live.finish(res);
}

/// The idle footprint of 100 servers and 1,000 clients (10 per server), supervisor and
/// rmcp-mux only (see the report for why not the others).
pub fn measure_idle_many(rig: &Rig, clients: usize, res: &mut Results) {
    phase(
        "idle footprint: 100 servers, 1,000 clients",
        Duration::from_secs(120),
    );
    let ways: Vec<Way> = [Way::Supervisor, Way::RmcpMux]
        .into_iter()
        .filter(|w| res.has(*w))
        .collect();
    let mut live = Live::new("idle-many", &ways);
    for way in ways {
        let idle = idle_daemon(rig, way, 100, clients, true);
        if let Some(i) = live.check(way, "idle footprint", idle) {
            res.idle.push(i);
        }
    }
    live.finish(res);
}

/// direct: every client runs its own server.
fn idle_direct(rig: &Rig) -> Idle {
    let conns: Vec<Conn> = (0..IDLE_CLIENTS)
        .map(|_| {
            let mut c = rig.direct();
            c.handshake().expect("direct handshake");
            c
        })
        .collect();
    settle();
    let pids: Vec<i32> = conns
        .iter()
        .filter_map(|c| c.proc.as_ref())
        .map(Proc::pid)
        .collect();
    Idle {
        servers: IDLE_SERVERS,
        clients: IDLE_CLIENTS,
        way: Way::Direct,
        relay_pss: None,
        total_pss: kib_to_mib(sum_kib(&pids, pss_kib)),
        daemon_rss: None,
        daemon_rss_no_clients: None,
        cpu_ms_per_s: None,
        processes: pids.len(),
    }
}

/// socat: 10 listeners, 10 clients each (a socat process and a server per client).
fn idle_socat(rig: &Rig) -> Idle {
    let socks: Vec<PathBuf> = (0..IDLE_SERVERS)
        .map(|i| rig.dir.join(format!("idle-socat-{i}.sock")))
        .collect();
    let listeners: Vec<Proc> = socks.iter().map(|s| rig.socat(s)).collect();
    for (s, l) in socks.iter().zip(&listeners) {
        wait_accepting(s, Duration::from_secs(10), l.pid()).expect("socat listens");
    }
    let _conns: Vec<Conn> = (0..IDLE_CLIENTS)
        .map(|i| {
            let mut c = Conn::socket(&socks[i % IDLE_SERVERS]).expect("connect to socat");
            c.handshake().expect("socat handshake");
            c
        })
        .collect();
    settle();
    let mut relay = Vec::new();
    let mut all = Vec::new();
    for l in &listeners {
        relay.push(l.pid());
        all.push(l.pid());
        for d in descendants(l.pid()) {
            let cmd = std::fs::read(format!("/proc/{d}/cmdline")).unwrap_or_default();
            if !contains(&cmd, b"mcp-fake-server") {
                relay.push(d);
            }
            all.push(d);
        }
    }
    Idle {
        servers: IDLE_SERVERS,
        clients: IDLE_CLIENTS,
        way: Way::Socat,
        relay_pss: Some(kib_to_mib(sum_kib(&relay, pss_kib))),
        total_pss: kib_to_mib(sum_kib(&all, pss_kib)),
        daemon_rss: None,
        daemon_rss_no_clients: None,
        cpu_ms_per_s: None,
        processes: all.len(),
    }
}

/// A fresh supervisor (clients on its sockets, or through attach processes) or rmcp-mux with
/// `servers` servers, every server ready, then `clients` clients spread evenly.
fn idle_daemon(
    rig: &Rig,
    way: Way,
    servers: usize,
    clients: usize,
    many: bool,
) -> Result<Idle, String> {
    let tag = format!("idle{servers}-{}", way.name());
    let (daemon, socks, config) = match way {
        Way::RmcpMux => {
            let (p, s) = rig.rmcp_mux(&tag, servers)?;
            (p, s, None)
        }
        _ => {
            let (config, socks) = rig.config(&tag, servers, many);
            (rig.supervisor(&config, &tag), socks, Some(config))
        }
    };
    let pid = daemon.pid();
    rig.await_ready(&tag, pid, &socks)?;
    let fail = rig.failure(&tag, pid);
    settle();
    let no_clients = kib_to_mib(status_kib(pid, "VmRSS"));
    let mut conns = Vec::with_capacity(clients);
    for i in 0..clients {
        let mut c = match (way, &config) {
            (Way::Attach, Some(config)) => rig.attach(config, &format!("s{}", i % servers)),
            _ => Conn::socket(&socks[i % servers]).map_err(&fail)?,
        };
        c.handshake().map_err(&fail)?;
        conns.push(c);
    }
    settle();
    let mut relay = vec![pid];
    relay.extend(conns.iter().filter_map(|c| c.proc.as_ref()).map(Proc::pid));
    let cpu_ms_per_s = many.then(|| {
        let before = cpu_of(&relay);
        std::thread::sleep(Duration::from_secs(1)); // the measurement window
        (cpu_of(&relay) - before) * 1e3
    });
    let mut all = relay.clone();
    all.extend(descendants(pid));
    Ok(Idle {
        servers,
        clients,
        way,
        relay_pss: Some(kib_to_mib(sum_kib(&relay, pss_kib))),
        total_pss: kib_to_mib(sum_kib(&all, pss_kib)),
        daemon_rss: Some(kib_to_mib(status_kib(pid, "VmRSS"))),
        daemon_rss_no_clients: Some(no_clients),
        cpu_ms_per_s,
        processes: all.len(),
    })
}

const STARTUP_REPS: usize = 5;

/// Connects to every socket and waits until each has answered its `initialize`.
fn sockets_initialized(socks: &[PathBuf]) -> Result<(), String> {
    let mut conns = socks
        .iter()
        .map(|s| Conn::socket(s))
        .collect::<Result<Vec<_>, _>>()?;
    all_initialized(&mut conns)
}

/// Sends `initialize` on every connection, then waits for every answer.
fn all_initialized(conns: &mut [Conn]) -> Result<(), String> {
    for c in conns.iter_mut() {
        c.send(INITIALIZE)?;
    }
    let mut buf = Vec::new();
    for c in conns.iter_mut() {
        if c.response(&mut buf)? != Reply::Result {
            return Err(format!("initialize failed: {}", crate::client::head(&buf)));
        }
    }
    Ok(())
}

/// One start of `way` with 10 servers: (ms to every socket accepting, ms to every server
/// having answered `initialize`).
fn start_once(rig: &Rig, way: Way, r: usize) -> Result<(Option<f64>, f64), String> {
    let ms = |t: Instant| t.elapsed().as_secs_f64() * 1e3;
    let wait = |socks: &[PathBuf], owner: &dyn Fn(usize) -> i32| {
        socks
            .iter()
            .enumerate()
            .try_for_each(|(k, s)| wait_accepting(s, Duration::from_secs(10), owner(k)))
    };
    match way {
        Way::Direct => {
            let t = Instant::now();
            let mut conns: Vec<Conn> = (0..IDLE_SERVERS).map(|_| rig.direct()).collect();
            all_initialized(&mut conns)?;
            Ok((None, ms(t)))
        }
        Way::Socat => {
            let socks: Vec<PathBuf> = (0..IDLE_SERVERS)
                .map(|k| rig.dir.join(format!("start-{r}-{k}.sock")))
                .collect();
            let t = Instant::now();
            let listeners: Vec<Proc> = socks.iter().map(|s| rig.socat(s)).collect();
            wait(&socks, &|k| listeners[k].pid())?;
            let acc = ms(t);
            sockets_initialized(&socks)?;
            Ok((Some(acc), ms(t)))
        }
        Way::Supervisor | Way::Attach => {
            let tag = format!("start-{r}-{}", way.name());
            let (config, socks) = rig.config(&tag, IDLE_SERVERS, false);
            let t = Instant::now();
            let sup = rig.supervisor(&config, &tag);
            wait(&socks, &|_| sup.pid())?;
            let acc = ms(t);
            let mut conns = (0..IDLE_SERVERS)
                .map(|k| match way {
                    Way::Attach => Ok(rig.attach(&config, &format!("s{k}"))),
                    _ => Conn::socket(&socks[k]),
                })
                .collect::<Result<Vec<_>, _>>()?;
            all_initialized(&mut conns)?;
            Ok(((way == Way::Supervisor).then_some(acc), ms(t)))
        }
        Way::RmcpMux => {
            let tag = format!("start-{r}-rmcp");
            let t = Instant::now();
            let (mux, socks) = rig.rmcp_mux(&tag, IDLE_SERVERS)?;
            wait(&socks, &|_| mux.pid())
                .map_err(|e| format!("{e}; its log ends: {}", rig.log_tail(&tag)))?;
            let acc = ms(t);
            sockets_initialized(&socks)?;
            Ok((Some(acc), ms(t)))
        }
    }
}

pub fn measure_startup(rig: &Rig, res: &mut Results) {
    phase("startup: 10 servers", Duration::from_secs(100));
    let mut live = Live::new("startup", &res.ways);
    let mut acc: Vec<Vec<f64>> = vec![Vec::new(); 5];
    let mut ready: Vec<Vec<f64>> = vec![Vec::new(); 5];
    for r in 0..STARTUP_REPS {
        for way in rotation(&live.ways, r) {
            let i = way.idx();
            if let Some((a, t)) = live.check(way, "start", start_once(rig, way, r)) {
                acc[i].extend(a);
                ready[i].push(t);
            }
        }
    }
    for way in live.ways.clone() {
        let i = way.idx();
        let a = (!acc[i].is_empty()).then(|| median(&mut acc[i]));
        res.startup.push((way, a, median(&mut ready[i])));
    }
    live.finish(res);
}
