use super::*;
use crate::LimitKill;

#[test]
fn exit_reasons() {
    let e = Exit {
        code: Some(1),
        signal: None,
        requested: false,
        limit: None,
    };
    assert_eq!(e.reason(), "exited(1)");
    let k = Exit {
        code: None,
        signal: Some(9),
        requested: false,
        limit: None,
    };
    assert_eq!(k.reason(), "signal(SIGKILL)");
    assert!(!k.clean());
    assert!(Exit {
        requested: true,
        ..k
    }
    .clean());
    // A limit's kill names the limit, and is a failure.
    let oom = Exit {
        limit: Some(LimitKill::MemoryLimit),
        ..k
    };
    assert_eq!(oom.reason(), "memory-limit");
    assert!(!oom.clean());
    let tasks = Exit {
        limit: Some(LimitKill::TasksLimit),
        ..k
    };
    assert_eq!(tasks.reason(), "tasks-limit");
    assert!(!Exit {
        requested: true,
        ..tasks
    }
    .clean());
}
