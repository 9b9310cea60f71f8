use super::*;

#[test]
fn exit_reasons() {
    let e = Exit {
        code: Some(1),
        signal: None,
        requested: false,
    };
    assert_eq!(e.reason(), "exited(1)");
    let k = Exit {
        code: None,
        signal: Some(9),
        requested: false,
    };
    assert_eq!(k.reason(), "signal(SIGKILL)");
    assert!(!k.clean());
    assert!(Exit {
        requested: true,
        ..k
    }
    .clean());
}
