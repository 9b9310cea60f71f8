use super::cgroup::{self, Detection, InstanceCgroup};
use super::*;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, Stdio};
use support::config::ServerConfig;

/// A fake cgroupfs under `root`: our cgroup at `path` (below `/sys/fs/cgroup`) with
/// `controllers` listed, the other control files empty.
fn fake_cgroup(root: &Path, path: &str, controllers: &str) -> PathBuf {
    let dir = root
        .join("sys/fs/cgroup")
        .join(path.trim_start_matches('/'));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("cgroup.controllers"), controllers).unwrap();
    std::fs::write(dir.join("cgroup.procs"), "").unwrap();
    std::fs::write(dir.join("cgroup.subtree_control"), "").unwrap();
    dir
}

const MOUNTINFO: &str = "31 23 0:28 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n";
const HYBRID: &str = "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n\
    35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n\
    41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";

#[test]
fn proc_files_parse() {
    assert_eq!(
        cgroup::unified_path("4:memory:/x\n0::/system.slice/mcp.service\n"),
        Some("/system.slice/mcp.service")
    );
    assert_eq!(cgroup::unified_path("4:memory:/x\n1:cpu:/\n"), None);
    assert_eq!(
        cgroup::cgroup2_mount(HYBRID),
        Some(("/".into(), "/sys/fs/cgroup/unified".into()))
    );
    assert_eq!(
        cgroup::cgroup2_mount("1 2 0:3 /a\\040b /mnt/c\\040g rw shared:1 - cgroup2 none rw\n"),
        Some(("/a b".into(), "/mnt/c g".into()))
    );
    assert_eq!(
        cgroup::cgroup2_mount("1 2 0:3 / /proc rw - proc proc rw\n"),
        None
    );
    let events = "low 0\nhigh 0\nmax 17\noom 2\noom_kill 1\noom_group_kill 1\n";
    assert_eq!(cgroup::keyed(events, "oom_kill"), Some(1));
    assert_eq!(cgroup::keyed(events, "max"), Some(17));
    assert_eq!(cgroup::keyed(events, "oom_group"), None);
    assert_eq!(cgroup::keyed("max 3\n", "max"), Some(3));
    assert_eq!(
        cgroup::instance_name("00ff:12:my-server"),
        "server-my-server-12-00ff"
    );
}

#[test]
fn detection_against_fake_cgroup_trees() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    // cgroup v1 only.
    let d = cgroup::detect_in(root, "4:memory:/x\n", MOUNTINFO);
    assert!(
        matches!(&d, Detection::Unavailable(w) if w.contains("0::")),
        "{d:?}"
    );
    // No cgroup2 mount.
    let d = cgroup::detect_in(root, "0::/\n", "1 2 0:3 / /proc rw - proc proc rw\n");
    assert!(
        matches!(&d, Detection::Unavailable(w) if w.contains("not mounted")),
        "{d:?}"
    );
    // A hybrid host like this one: the unified hierarchy has no memory or pids controller.
    fake_cgroup(root, "/unified", "hugetlb\n");
    let d = cgroup::detect_in(root, "4:memory:/p\n0::/\n", HYBRID);
    assert!(
        matches!(&d, Detection::Unavailable(w) if w.contains("memory and pids") && w.contains("hugetlb")),
        "{d:?}"
    );
    assert!(!d.delegated());
    // A service's cgroup with the controllers, writable, but nothing says it was delegated.
    std::fs::create_dir_all(root.join("run/systemd/system")).unwrap();
    let svc = fake_cgroup(root, "/system.slice/mcp.service", "cpu memory pids\n");
    let d = cgroup::detect_in(root, "0::/system.slice/mcp.service\n", MOUNTINFO);
    assert_eq!(d, Detection::Usable { dir: svc.clone() });
    // Only pids: not usable, and the message names what is missing.
    std::fs::write(svc.join("cgroup.controllers"), "pids\n").unwrap();
    let d = cgroup::detect_in(root, "0::/system.slice/mcp.service\n", MOUNTINFO);
    assert!(
        matches!(&d, Detection::Unavailable(w) if w.contains("the memory controller")),
        "{d:?}"
    );
    std::fs::write(svc.join("cgroup.controllers"), "memory pids\n").unwrap();
    // Started inside our leaf (DelegateSubgroup=supervisor, or a restart): the parent is ours.
    fake_cgroup(
        root,
        "/system.slice/mcp.service/supervisor",
        "memory pids\n",
    );
    let d = cgroup::detect_in(root, "0::/system.slice/mcp.service/supervisor\n", MOUNTINFO);
    assert_eq!(d, Detection::Usable { dir: svc.clone() });
    // systemd's mark of Delegate=yes, where this filesystem keeps user xattrs.
    if set_xattr(&svc, "user.delegate", "1") {
        let d = cgroup::detect_in(root, "0::/system.slice/mcp.service\n", MOUNTINFO);
        assert!(d.delegated(), "{d:?}");
    } else {
        eprintln!("this filesystem keeps no user xattrs: the user.delegate case is not checked");
    }
    // The root of a cgroup namespace (a container) with no systemd running: ours.
    std::fs::remove_dir_all(root.join("run")).unwrap();
    fake_cgroup(root, "/", "memory pids\n");
    let d = cgroup::detect_in(root, "0::/\n", MOUNTINFO);
    assert!(d.delegated(), "{d:?}");
    fake_cgroup(root, "/supervisor", "memory pids\n");
    let d = cgroup::detect_in(root, "0::/supervisor\n", MOUNTINFO);
    assert!(
        matches!(&d, Detection::Delegated { dir, .. } if dir == &root.join("sys/fs/cgroup")),
        "{d:?}"
    );
    // Outside the mount's root: not ours to find.
    let d = cgroup::detect_in(
        root,
        "0::/other\n",
        "31 23 0:28 /mine /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
    );
    assert!(matches!(d, Detection::Unavailable(_)), "{d:?}");
}

fn set_xattr(path: &Path, name: &str, value: &str) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let p = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    let n = std::ffi::CString::new(name).unwrap();
    // SAFETY: NUL-terminated strings and the value's own length.
    unsafe {
        libc::setxattr(
            p.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        ) == 0
    }
}

#[test]
fn enable_moves_processes_to_the_leaf_enables_controllers_and_sweeps_empty_stale_cgroups() {
    let t = tempfile::tempdir().unwrap();
    let dir = fake_cgroup(t.path(), "/svc", "memory pids\n");
    std::fs::write(dir.join("cgroup.procs"), "4242\n").unwrap();
    // The kernel makes a new cgroup's control files; the fake has them already (and so the
    // leaf exists, as after a restart).
    std::fs::create_dir(dir.join("supervisor")).unwrap();
    std::fs::write(dir.join("supervisor/cgroup.procs"), "").unwrap();
    std::fs::create_dir(dir.join("server-old-1-ab")).unwrap();
    let busy = dir.join("server-busy-2-ab");
    std::fs::create_dir(&busy).unwrap();
    std::fs::write(busy.join("cgroup.procs"), "99\n").unwrap();
    cgroup::enable(&dir).unwrap();
    let read = |p: PathBuf| std::fs::read_to_string(p).unwrap();
    assert_eq!(read(dir.join("supervisor/cgroup.procs")), "4242");
    assert_eq!(read(dir.join("cgroup.subtree_control")), "+memory +pids");
    assert!(!dir.join("server-old-1-ab").exists());
    assert!(
        busy.exists(),
        "a populated cgroup of a previous run is left alone"
    );
    // A cgroup we cannot enter is an error that names it.
    let e = cgroup::enable(&t.path().join("nowhere")).unwrap_err();
    assert!(e.contains("nowhere"), "{e}");
}

#[test]
fn instance_cgroup_gets_its_limits_and_reports_events() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("server-a-1-ff");
    std::fs::create_dir(&dir).unwrap();
    for f in ["memory.max", "memory.oom.group", "pids.max", "cgroup.procs"] {
        std::fs::write(dir.join(f), "").unwrap();
    }
    let cg = InstanceCgroup { dir: dir.clone() };
    let limits = Limits {
        memory_max: Some(64 << 20),
        tasks_max: Some(8),
        open_files_max: None,
    };
    // memory.swap.max is absent (no swap accounting): not an error.
    cg.configure(&limits).unwrap();
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap();
    assert_eq!(read("memory.max"), (64u64 << 20).to_string());
    assert_eq!(read("memory.oom.group"), "1");
    assert_eq!(read("pids.max"), "8");
    std::fs::remove_file(dir.join("pids.max")).unwrap();
    let e = cg.configure(&limits).unwrap_err();
    assert!(e.to_string().contains("pids.max"), "{e}");
    std::fs::write(dir.join("memory.events"), "max 3\noom 1\noom_kill 1\n").unwrap();
    std::fs::write(dir.join("pids.events"), "max 0\n").unwrap();
    std::fs::write(dir.join("memory.current"), "1234\n").unwrap();
    std::fs::write(dir.join("pids.current"), "5\n").unwrap();
    assert_eq!(
        cg.events(),
        cgroup::Events {
            oom_kill: 1,
            pids_max: 0
        }
    );
    assert_eq!(
        cg.usage(),
        Usage {
            memory_bytes: 1234,
            tasks: 5
        }
    );
    // Creating it under a parent that is not a cgroup directory fails and leaves nothing.
    let e = InstanceCgroup::create(t.path(), "server-b-2-ff", &limits).unwrap_err();
    assert!(e.to_string().contains("memory.max"), "{e}");
    assert!(!t.path().join("server-b-2-ff").exists());
}

/// `sleep 30` in a process group of its own, with the instance marker `marker`.
fn sleeper(marker: &str) -> std::process::Child {
    Command::new("sleep")
        .arg("30")
        .env(base::reaper::MARKER_VAR, marker)
        .process_group(0)
        .stdin(Stdio::null())
        .spawn()
        .unwrap()
}

#[test]
fn kill_without_cgroup_kill_signals_every_listed_process() {
    let t = tempfile::tempdir().unwrap();
    let mut child = sleeper("t:0:kill");
    std::fs::write(t.path().join("cgroup.procs"), format!("{}\n", child.id())).unwrap();
    let cg = InstanceCgroup {
        dir: t.path().to_path_buf(),
    };
    assert_eq!(cg.pids(), vec![child.id() as i32]);
    cg.kill();
    let status = child.wait().unwrap();
    assert_eq!(status.signal(), Some(libc::SIGKILL));
}

#[test]
fn exec_sets_the_open_files_limit_and_writes_the_cgroup_entry() {
    let t = tempfile::tempdir().unwrap();
    let procs = t.path().join("cgroup.procs");
    std::fs::write(&procs, "").unwrap();
    let fd = OwnedFd::from(
        std::fs::OpenOptions::new()
            .write(true)
            .open(&procs)
            .unwrap(),
    );
    let exec = Exec {
        procs: Some(fd),
        nofile: Some(77),
    };
    let mut cmd = Command::new("sh");
    cmd.args(["-c", "ulimit -n; ulimit -Hn"]);
    // SAFETY: Exec::apply is async-signal-safe.
    unsafe {
        cmd.pre_exec(move || exec.apply());
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "77\n77\n");
    assert_eq!(std::fs::read_to_string(&procs).unwrap(), "0");
}

#[test]
fn open_files_max_over_the_kernel_maximum_fails_the_spawn_with_a_message() {
    let nr_open: u64 = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let e = check_nofile(nr_open + 1).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied);
    assert!(e.to_string().contains("open_files_max"), "{e}");
    check_nofile(64).unwrap();
}

#[test]
fn stat_usage_parses_threads_and_rss() {
    let line = "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 7 0 987654 123456789 2500 18446744073709551615";
    assert_eq!(procfs::parse_stat_usage(line), Some((2500, 7)));
    assert_eq!(procfs::parse_stat_usage("12 (x) S 1 2"), None);
    let me = std::fs::read_to_string("/proc/self/stat").unwrap();
    let (rss, threads) = procfs::parse_stat_usage(&me).unwrap();
    assert!(rss > 0 && threads >= 1);
}

#[test]
fn status_shows_limits_only_when_set() {
    assert!(status(&Limits::default(), None).is_none());
    let s = status(
        &Limits {
            open_files_max: Some(100),
            ..Limits::default()
        },
        None,
    )
    .unwrap();
    assert_eq!(s.mechanism, "rlimit");
    assert_eq!(s.open_files_max, Some(100));
    assert_eq!(s.memory_bytes, None);
}

fn config(limits: &str) -> ServerConfig {
    let text = format!("[servers.t]\ncommand = \"sleep\"\n{limits}\n");
    let c = support::config::parse(Path::new("s.toml"), &text).unwrap();
    c.servers["t"].clone()
}

/// The watchdog without a cgroup: a process group of three (`sh` and two `sleep`s) over
/// `tasks_max = 2` is sampled, killed, and the exit's verdict is `tasks-limit`.
#[tokio::test]
async fn the_watchdog_kills_a_tree_over_tasks_max() {
    let marker = base::reaper::marker("t");
    let mut child = Command::new("sh")
        .args(["-c", "sleep 30 & sleep 30 & wait"])
        .env(base::reaper::MARKER_VAR, &marker)
        .process_group(0)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let pgid = child.id() as i32;
    let cfg = config("tasks_max = 2");
    let prepared = Prepared::new(cfg.limits, &marker).unwrap();
    let tail = StderrTail::default();
    let guard = prepared.start("t", pgid, &marker, 0, tail.clone());
    let kill = tokio::time::timeout(LIMIT_SAMPLE * 10, guard.enforce())
        .await
        .expect("the watchdog acts within ten samples");
    assert_eq!(kill, LimitKill::TasksLimit);
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    assert!(
        guard.usage().is_some_and(|u| u.tasks >= 3),
        "{:?}",
        guard.usage()
    );
    assert!(tail.text().contains("tasks-limit"), "{}", tail.text());
    let exit = Exit {
        code: None,
        signal: Some(libc::SIGKILL),
        requested: false,
        limit: None,
    };
    assert_eq!(guard.verdict(&exit).await, Some(LimitKill::TasksLimit));
    // Nothing of the group is left (the sleeps were killed with it).
    let gone = (0..500).any(|_| {
        std::thread::sleep(Duration::from_millis(10));
        procfs::tree(pgid, &marker, 0).is_empty()
    });
    assert!(gone, "{:?}", procfs::tree(pgid, &marker, 0));
}

/// Under the limits, one process of a tree that stays small is sampled and left alone.
#[tokio::test]
async fn the_watchdog_samples_and_leaves_a_tree_under_its_limits() {
    let marker = base::reaper::marker("u");
    let mut child = sleeper(&marker);
    let pgid = child.id() as i32;
    let cfg = config("tasks_max = 10\nmemory_max = \"1G\"");
    let guard = Prepared::new(cfg.limits, &marker).unwrap().start(
        "u",
        pgid,
        &marker,
        0,
        StderrTail::default(),
    );
    let waited = tokio::time::timeout(LIMIT_SAMPLE * 3, guard.enforce()).await;
    assert!(waited.is_err(), "killed under its limits");
    let usage = guard.usage().expect("sampled");
    assert_eq!(usage.tasks, 1);
    assert!(usage.memory_bytes > 0 && usage.memory_bytes < 1 << 30);
    child.kill().unwrap();
    child.wait().unwrap();
}
