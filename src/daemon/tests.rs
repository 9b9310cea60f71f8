use super::*;
use base::safepath::DirRefused;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};

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
fn socket_dir_writable_by_others_or_a_symlink_is_refused_with_exit_2() {
    // Issue 14 §1: world-writable (sticky or not), group-writable, or a symbolic link.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("run");
    std::fs::create_dir(&d).unwrap();
    for mode in [0o777, 0o1777, 0o770] {
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(mode)).unwrap();
        let e = prepare_socket_dir(&d, SocketPerms::default()).unwrap_err();
        assert!(e.downcast_ref::<DirRefused>().is_some(), "{mode:o}: {e:#}");
        assert!(e.to_string().contains("writable"), "{e:#}");
    }
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
    prepare_socket_dir(&d, SocketPerms::default()).unwrap();
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&d, &link).unwrap();
    let e = prepare_socket_dir(&link, SocketPerms::default()).unwrap_err();
    assert!(e.to_string().contains("symbolic link"), "{e:#}");
}

#[test]
fn a_socket_dir_under_a_parent_others_can_write_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let parent = dir.path().join("shared");
    std::fs::create_dir(&parent).unwrap();
    std::fs::set_permissions(&parent, std::fs::Permissions::from_mode(0o777)).unwrap();
    let e = prepare_socket_dir(&parent.join("run"), SocketPerms::default()).unwrap_err();
    assert!(e.to_string().contains("its parent"), "{e:#}");
}

/// Issue 26 §5: `state_dir` gets `socket_dir`'s checks (a user who owned it redirected a
/// write into a root-only file and forged the record clients were served).
#[test]
fn a_state_dir_that_is_a_link_writable_by_others_or_owned_by_another_user_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("state");
    prepare_state_dir(&d).unwrap();
    let mode = std::fs::metadata(&d).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o700, "created private");
    for mode in [0o777, 0o1777, 0o770, 0o702] {
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(mode)).unwrap();
        let e = prepare_state_dir(&d).unwrap_err();
        assert!(e.downcast_ref::<DirRefused>().is_some(), "{mode:o}: {e:#}");
        assert!(e.to_string().starts_with("state_dir "), "{e:#}");
    }
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&d, &link).unwrap();
    let e = prepare_state_dir(&link).unwrap_err();
    assert!(e.to_string().contains("symbolic link"), "{e:#}");
    if base::testing::needs_root("the other-owner case (chown)") {
        std::os::unix::fs::chown(&d, Some(4242), Some(4242)).unwrap();
        let e = prepare_state_dir(&d).unwrap_err();
        assert!(e.to_string().contains("owned by uid 4242"), "{e:#}");
    }
}

/// Issue 26 §5: a parent of `socket_dir` (or `state_dir`) that is a symbolic link owned by
/// another user is refused, whatever its target.
#[test]
fn a_parent_that_is_a_link_owned_by_another_user_is_refused() {
    if !base::testing::needs_root("a link owned by another user (lchown)") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("real");
    std::fs::create_dir(&real).unwrap();
    let link = dir.path().join("via");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    // Ours: accepted.
    prepare_socket_dir(&link.join("run"), SocketPerms::default()).unwrap();
    std::os::unix::fs::lchown(&link, Some(4242), Some(4242)).unwrap();
    for e in [
        prepare_socket_dir(&link.join("run2"), SocketPerms::default()).unwrap_err(),
        prepare_state_dir(&link.join("state")).unwrap_err(),
    ] {
        assert!(e.downcast_ref::<DirRefused>().is_some(), "{e:#}");
        assert!(
            e.to_string().contains("symbolic link owned by uid 4242"),
            "{e:#}"
        );
    }
}

#[test]
fn a_preexisting_0700_socket_dir_gets_the_search_bits_group_sockets_need() {
    // Issue 14 Why 5: what `RuntimeDirectoryMode=0700` creates made `socket_group` + 0660
    // fail silently; the directory we own is adjusted instead.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("run");
    std::fs::create_dir(&d).unwrap();
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
    let gid = nix::unistd::getegid().as_raw();
    let perms = SocketPerms {
        mode: 0o660,
        group: Some(gid),
    };
    prepare_socket_dir(&d, perms).unwrap();
    let mode = std::fs::metadata(&d).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o710);
}

#[tokio::test]
async fn sockets_are_bound_with_their_mode_and_nothing_is_left_behind() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.sock");
    let perms = SocketPerms {
        mode: 0o640,
        group: None,
    };
    let _l = bind_socket(&path, perms).unwrap();
    let meta = std::fs::symlink_metadata(&path).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o7777, 0o640);
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["a.sock"], "the private bind directory is removed");
}
