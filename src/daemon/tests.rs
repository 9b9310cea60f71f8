use super::*;

#[test]
fn reload_gate_allows_three_per_ten_seconds() {
    let mut g = ReloadGate::default();
    let t0 = Instant::now();
    for i in 0..3 {
        let t = t0 + Duration::from_millis(i * 10);
        assert_eq!(g.next_allowed(t), t);
        g.record(t);
    }
    let t = t0 + Duration::from_millis(50);
    assert_eq!(g.next_allowed(t), t0 + RELOAD_WINDOW);
    g.record(t0 + RELOAD_WINDOW);
    assert_eq!(
        g.next_allowed(t0 + RELOAD_WINDOW),
        t0 + Duration::from_millis(10) + RELOAD_WINDOW
    );
}

#[test]
fn access_allows_us_root_and_the_lists() {
    let a = Access {
        me: 1000,
        uids: vec![1001],
        gids: vec![50],
    };
    assert!(a.permits(1000, 1000));
    assert!(a.permits(0, 0));
    assert!(a.permits(1001, 1001));
    assert!(a.permits(1002, 50));
    assert!(!a.permits(1002, 1002));
}

#[test]
fn lock_is_exclusive() {
    let dir = tempfile::tempdir().unwrap();
    let held = lock_socket_dir(dir.path()).unwrap();
    let again = lock_socket_dir(dir.path()).unwrap_err();
    assert!(
        again.downcast_ref::<AlreadyRunning>().is_some(),
        "{again:#}"
    );
    drop(held);
    lock_socket_dir(dir.path()).unwrap();
}

#[test]
fn world_writable_socket_dir_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("run");
    std::fs::create_dir(&d).unwrap();
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
    assert!(prepare_socket_dir(&d, SocketPerms::default()).is_err());
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o1777)).unwrap();
    prepare_socket_dir(&d, SocketPerms::default()).unwrap();
}
