//! The leader of an instance, waited for: a child tokio spawned, or one this process inherited
//! from its previous image across an upgrade in place (issue 32 §1), waited for through a
//! pidfd. Either way it is our own child: `waitid` on it is ours to call, never `waitpid(-1)`.

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use tokio::io::unix::AsyncFd;

/// The process whose exit ends the instance.
#[derive(Debug)]
pub(super) enum Leader {
    /// Spawned by this image.
    Spawned(tokio::process::Child),
    /// Inherited across an upgrade: its pidfd, readable once it has exited.
    Adopted(AsyncFd<OwnedFd>),
}

impl Leader {
    /// A pidfd for our child `pid`. Errors: it is gone (`ESRCH`), or pidfds are not
    /// available (Linux before 5.3).
    pub(super) fn adopt(pid: u32) -> std::io::Result<Leader> {
        let pid = rustix::process::Pid::from_raw(pid as i32)
            .ok_or_else(|| std::io::Error::other("pid 0 is not a child"))?;
        let fd = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::NONBLOCK)?;
        // SAFETY: `fd` is an `OwnedFd` moved into the `AsyncFd`, so it stays open and the
        // same for the `AsyncFd`'s whole life.
        let registered =
            unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) };
        Ok(Leader::Adopted(
            registered.map_err(|e| std::io::Error::other(e.to_string()))?,
        ))
    }

    /// Waits for the leader's exit and reaps it.
    pub(super) async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        match self {
            Leader::Spawned(child) => child.wait().await,
            Leader::Adopted(fd) => loop {
                let mut ready = fd.readable().await?;
                let status = rustix::process::waitid(
                    rustix::process::WaitId::PidFd(fd.get_ref().as_fd()),
                    rustix::process::WaitIdOptions::EXITED | rustix::process::WaitIdOptions::NOHANG,
                )?;
                match status {
                    Some(s) => return Ok(raw_status(&s)),
                    None => ready.clear_ready(),
                }
            },
        }
    }
}

/// `waitid`'s answer as the `wait` status `ExitStatus` is made of.
fn raw_status(s: &rustix::process::WaitIdStatus) -> ExitStatus {
    if let Some(code) = s.exit_status() {
        ExitStatus::from_raw((code & 0xff) << 8)
    } else if let Some(sig) = s.terminating_signal() {
        ExitStatus::from_raw(sig & 0x7f)
    } else {
        ExitStatus::from_raw(0)
    }
}
