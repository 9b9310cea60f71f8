use super::*;
use std::os::fd::IntoRawFd;
use std::os::unix::fs::PermissionsExt;

/// A record naming real descriptors of the right kinds (leaked for the test's life).
fn record() -> Record {
    let image = std::fs::File::open("/proc/self/exe").unwrap().into_raw_fd();
    let lock = tempfile::tempfile().unwrap().into_raw_fd();
    let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
    let (r, w) = nix::unistd::pipe().unwrap();
    let (er, _ew) = nix::unistd::pipe().unwrap();
    std::mem::forget(_ew);
    Record {
        version: VERSION,
        upgrades: 1,
        binary: "/usr/bin/mcp-supervisor".into(),
        argv: vec!["mcp-supervisor".into(), "run".into()],
        config: ConfigText {
            path: "/etc/mcp/supervisor.toml".into(),
            text: "[servers.a]\ncommand = \"x\"\n".into(),
        },
        old_image: image,
        lock,
        notify_socket: None,
        watchdog_usec: None,
        fd_store: None,
        refused: None,
        run_token: "0123456789abcdef".into(),
        instances: 9,
        listeners: vec![Listener {
            name: "control".into(),
            fd: a.into_raw_fd(),
            activated: false,
        }],
        servers: vec![ServerRecord {
            name: "a".into(),
            generation: 3,
            next_id: 42,
            handshake: None,
            log_level: Some(2),
            child: Some(ChildRecord {
                pid: 4242,
                stdin: w.into_raw_fd(),
                stdout: r.into_raw_fd(),
                stderr: er.into_raw_fd(),
                marker: "m".into(),
                since: 7,
                pending: b64(b"{\"jsonrpc\":"),
                tail: "boot\n".into(),
            }),
            remote: None,
            restarts: 5,
            rest: None,
            last_exit: Some(actor::server::LastExit {
                code: None,
                signal: Some(9),
                reason: "restart-requested signal(SIGKILL)".parse().unwrap(),
                at: "2026-12-04T21:00:00.000Z".into(),
            }),
            clients: vec![ClientRecord {
                fd: b.into_raw_fd(),
                uid: 1000,
                gid: 1000,
                pid: None,
                pending: b64(b""),
                replay: vec![],
                listens: vec![],
            }],
        }],
        http: vec![],
        endpoints: vec![],
    }
}

#[test]
fn a_record_survives_its_encoding_and_validates() {
    let r = record();
    let back = Record::decode(&r.encode()).unwrap();
    assert_eq!(back.servers[0].next_id, 42);
    assert_eq!(
        unb64(&back.servers[0].child.as_ref().unwrap().pending, "x").unwrap(),
        b"{\"jsonrpc\":"
    );
    assert_eq!(back.raw_fds().len(), 7);
    assert_eq!(back.servers[0].restarts, 5);
    let last = back.servers[0].last_exit.as_ref().unwrap();
    assert_eq!(last.reason.to_string(), "restart-requested signal(SIGKILL)");
    assert_eq!(last.signal, Some(9));
}

#[test]
fn a_remote_session_travels_in_the_record_and_never_shows_its_id() {
    let mut r = record();
    let state = upstream::remote::SessionState {
        session_id: Some("5ecret-session".into()),
        protocol_version: Some("2025-11-25".into()),
        initialize: serde_json::value::RawValue::from_string(
            r#"{"jsonrpc":"2.0","id":0,"method":"initialize"}"#.into(),
        )
        .ok(),
        last_event_id: Some("5ecret-session-7".into()),
        listening: true,
        age_s: 12,
    };
    r.servers[0].child = None;
    r.servers[0].remote = Some(state.clone());
    let back = Record::decode(&r.encode()).unwrap();
    assert_eq!(back.servers[0].remote.as_ref(), Some(&state));
    assert!(!format!("{back:?}").contains("5ecret-session\""));
    assert!(!format!("{state:?}").contains("5ecret-session\""));
    // A record written before the field (an older image) has none, and still reads.
    let mut v: serde_json::Value = serde_json::from_slice(&r.encode()).unwrap();
    let s = v["servers"][0].as_object_mut().unwrap();
    s.remove("remote");
    s.remove("restarts");
    let back = Record::decode(&serde_json::to_vec(&v).unwrap()).unwrap();
    assert!(back.servers[0].remote.is_none());
    assert_eq!(back.servers[0].restarts, 0);
    // A newer image's fields this build cannot read are dropped, not a refusal.
    let mut v: serde_json::Value = serde_json::from_slice(&r.encode()).unwrap();
    v["servers"][0]["last_exit"]["reason"] = "exploded(7)".into();
    v["servers"][0]["remote"]["age_s"] = "a while".into();
    let back = Record::decode(&serde_json::to_vec(&v).unwrap()).unwrap();
    assert!(back.servers[0].last_exit.is_none());
    assert!(back.servers[0].remote.is_none());
}

#[test]
fn another_version_is_refused() {
    let mut r = record();
    r.version = VERSION + 1;
    let e = Record::decode(&r.encode()).unwrap_err();
    assert!(e.contains("version"), "{e}");
}

#[test]
fn a_descriptor_of_the_wrong_kind_or_named_twice_or_closed_is_refused() {
    let mut r = record();
    // A pipe where a socket must be.
    let stdin = r.servers[0].child.as_ref().unwrap().stdin;
    r.listeners[0].fd = stdin;
    let e = Record::decode(&r.encode()).unwrap_err();
    assert!(
        e.contains("named twice") || e.contains("not a Socket"),
        "{e}"
    );

    let mut r = record();
    let pipe = r.servers[0].child.as_ref().unwrap().stdout;
    r.servers[0].clients[0].fd = pipe + 1000;
    let e = Record::decode(&r.encode()).unwrap_err();
    assert!(e.contains("a client of `a`"), "{e}");

    let mut r = record();
    r.lock = 1;
    assert!(Record::decode(&r.encode())
        .unwrap_err()
        .contains("the lock"));

    let mut r = record();
    r.servers[0].child.as_mut().unwrap().pending = "!!".into();
    assert!(Record::decode(&r.encode()).unwrap_err().contains("base64"));
}

#[test]
fn garbage_is_not_a_record() {
    assert!(Record::decode(b"{").is_err());
    assert!(Record::decode(b"[]").is_err());
    assert!(Record::decode(&[0xff; 64]).is_err());
}

#[test]
fn the_binary_must_be_ours_and_written_by_nobody_else() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = dir.path().join("mcp-supervisor");
    std::fs::write(&bin, b"#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let b = resolve_binary(&bin).unwrap();
    assert_eq!(b.path(), bin.canonicalize().unwrap());
    assert!(b.script(), "a #! file is a script");
    // What is open is what was checked: (device, inode) of the descriptor.
    {
        use std::os::unix::fs::MetadataExt;
        let on_disk = std::fs::metadata(&bin).unwrap();
        let st = rustix::fs::fstat(b.fd()).unwrap();
        assert_eq!((st.st_dev, st.st_ino), (on_disk.dev(), on_disk.ino()));
    }
    // Through a link: the link's target.
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&bin, &link).unwrap();
    assert_eq!(
        resolve_binary(&link).unwrap().path(),
        bin.canonicalize().unwrap()
    );
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o775)).unwrap();
    assert!(resolve_binary(&bin)
        .unwrap_err()
        .contains("written by others"));
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert!(resolve_binary(&bin)
        .unwrap_err()
        .contains("not an executable"));
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    assert!(resolve_binary(&bin)
        .unwrap_err()
        .contains("can be changed by another user"));
    assert!(resolve_binary(&dir.path().join("gone")).is_err());
}
