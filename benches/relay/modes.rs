//! The two other modes: the smoke test (`cargo test --benches`) and `--profile`.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::client::{pipelined, window, Conn, Way, ALL_WAYS};
use crate::procs::{phase, sh, Proc};
use crate::rig::{One, Rig, MIB};

/// `cargo test --benches`: every path answers an echo and a 1 MiB result, and the remote row's
/// two paths (a url server to an HTTP upstream, and that upstream directly) a few echoes;
/// nothing is written. rmcp-mux is included when it is installed (and must then work), skipped
/// with a note if not.
pub fn smoke(rig: &Rig) {
    phase(
        "smoke test (cargo bench runs the benchmark)",
        Duration::from_secs(60),
    );
    let one = One::start(rig);
    let mut buf = Vec::new();
    for way in ALL_WAYS {
        if way == Way::RmcpMux {
            if let Err(e) = &rig.rmcp.found {
                eprintln!("relay bench: skipping rmcp-mux in the smoke test: {e}");
                continue;
            }
        }
        let mut c = one
            .connect(way)
            .unwrap_or_else(|e| panic!("{}: {e}", way.name()));
        c.echo(&mut buf)
            .unwrap_or_else(|e| panic!("{}: {e}", way.name()));
        c.big(MIB, &mut buf)
            .unwrap_or_else(|e| panic!("{}: {e}", way.name()));
    }
    drop(one);
    crate::remote::smoke(rig);
    crate::endpoint::smoke(rig);
    crate::watchers::smoke(rig);
    eprintln!("relay bench: every path works; run `cargo bench --bench relay` for the benchmark");
}

pub fn profile(rig: &Rig) {
    phase("profile: checking perf", Duration::from_secs(30));
    let ok = Command::new("perf")
        .args(["stat", "-e", "cpu-clock", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "`perf stat -e cpu-clock true` failed: install perf (linux-perf) or use valgrind --tool=callgrind by hand"
    );
    let out = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/relay-profile");
    std::fs::create_dir_all(&out).expect("profile dir");
    let one = One::start(rig);
    let connect = |way: Way| one.connect(way).expect("connect");
    // `perf record` attached to `pid` while `work` runs; then the top of the report.
    let record = |name: &str, pid: i32, work: &mut dyn FnMut()| {
        let data = out.join(format!("{name}.data"));
        let mut c = Command::new("perf");
        c.args(["record", "-e", "cpu-clock", "-F", "1999"])
            .args(["--call-graph", "dwarf,16384", "-o"])
            .arg(&data)
            .arg("-p")
            .arg(pid.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut perf = Proc::spawn(&mut c, Some(Signal::SIGINT));
        perf.grace = Duration::from_secs(60);
        // perf announces nothing when it has attached: give it a moment.
        std::thread::sleep(Duration::from_millis(500));
        work();
        drop(perf);
        let input = data.to_str().unwrap_or_default();
        let report = |extra: &[&str]| {
            let mut a = vec!["report", "-i", input, "--stdio", "-g", "none"];
            a.extend_from_slice(extra);
            sh("perf", &a)
                .lines()
                .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
                .map(|l| l.trim_end().trim_end_matches(['-', ' ']).to_string())
                .collect::<Vec<_>>()
        };
        let flat = report(&[
            "--no-children",
            "--sort",
            "dso,symbol",
            "--percent-limit",
            "1",
        ]);
        let ours: Vec<String> = report(&["--children", "--sort", "symbol", "--percent-limit", "1"])
            .into_iter()
            .filter(|l| l.contains("mcp_supervisor"))
            .take(25)
            .collect();
        println!(
            "## {name} ({})\n\nself time:\n{}\n\ninclusive, project frames:\n{}\n",
            data.display(),
            flat.iter().take(25).cloned().collect::<Vec<_>>().join("\n"),
            ours.join("\n")
        );
    };
    let sup = one.sup.pid();

    phase(
        "profile: supervisor, 10 clients pipelined",
        Duration::from_secs(150),
    );
    let mut conns: Vec<Conn> = (0..10).map(|_| connect(Way::Supervisor)).collect();
    record("supervisor-small-pipelined", sup, &mut || {
        pipelined(&mut conns, window(10), Duration::from_secs(4)).expect("pipelined");
    });
    drop(conns);

    phase(
        "profile: supervisor, sequential echo",
        Duration::from_secs(150),
    );
    let mut c = connect(Way::Supervisor);
    let mut buf = Vec::with_capacity(65 * MIB);
    record("supervisor-small-sequential", sup, &mut || {
        let until = Instant::now() + Duration::from_secs(4);
        while Instant::now() < until {
            c.echo(&mut buf).expect("echo");
        }
    });

    phase(
        "profile: supervisor, 64 MiB results",
        Duration::from_secs(150),
    );
    record("supervisor-big-64mib", sup, &mut || {
        for _ in 0..5 {
            c.big(64 * MIB, &mut buf).expect("big");
        }
    });
    drop(c);

    phase(
        "profile: attach, 1 client pipelined",
        Duration::from_secs(150),
    );
    let mut a = vec![connect(Way::Attach)];
    let attach = a[0].proc.as_ref().map_or(0, Proc::pid);
    record("attach-small-pipelined", attach, &mut || {
        pipelined(&mut a, window(1), Duration::from_secs(4)).expect("pipelined");
    });

    phase("profile: attach, 64 MiB results", Duration::from_secs(150));
    record("attach-big-64mib", attach, &mut || {
        for _ in 0..3 {
            a[0].big(64 * MIB, &mut buf).expect("big");
        }
    });
}
