//! The leader of an instance, waited for: a child tokio spawned, one this process inherited
//! from its previous image across an upgrade in place (issue 32 §1), waited for through a
//! pidfd, or one a crashed run left running and this run re-adopted from systemd's file
//! descriptor store (issue 32 §2): no longer our child (it was reparented), so its pidfd says
//! when it exits but not how. `waitid` is only ever called on our own child, never
//! `waitpid(-1)`.

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
    /// Re-adopted after a crash, another process's child: its pidfd.
    Foreign(AsyncFd<OwnedFd>),
}

impl Leader {
    /// A pidfd for `pid`: [`Leader::Adopted`] when it is our child, else [`Leader::Foreign`].
    /// Errors: it is gone (`ESRCH`), or pidfds are not available (Linux before 5.3).
    pub(super) fn adopt(pid: u32) -> std::io::Result<Leader> {
        let me = std::process::id() as i32;
        let ours = base::reaper::stat(pid as i32).is_some_and(|p| p.ppid == me);
        let pid = rustix::process::Pid::from_raw(pid as i32)
            .ok_or_else(|| std::io::Error::other("pid 0 is not a child"))?;
        let fd = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::NONBLOCK)?;
        // SAFETY: `fd` is an `OwnedFd` moved into the `AsyncFd`, so it stays open and the
        // same for the `AsyncFd`'s whole life.
        let registered =
            unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) };
        let registered = registered.map_err(|e| std::io::Error::other(e.to_string()))?;
        Ok(if ours {
            Leader::Adopted(registered)
        } else {
            Leader::Foreign(registered)
        })
    }

    /// Waits for the leader's exit and reaps it (our own child). `None`: it exited, and how
    /// is unknown (not our child: its parent reaps it).
    pub(super) async fn wait(&mut self) -> std::io::Result<Option<ExitStatus>> {
        match self {
            Leader::Spawned(child) => child.wait().await.map(Some),
            Leader::Foreign(fd) => {
                let _ready = fd.readable().await?;
                Ok(None)
            }
            Leader::Adopted(fd) => loop {
                let mut ready = fd.readable().await?;
                let status = rustix::process::waitid(
                    rustix::process::WaitId::PidFd(fd.get_ref().as_fd()),
                    rustix::process::WaitIdOptions::EXITED | rustix::process::WaitIdOptions::NOHANG,
                )?;
                match status {
                    Some(s) => return Ok(Some(raw_status(&s))),
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
