//! Descriptor flags across `execve`: what an upgrade's hand-over keeps open for the next image
//! and what the next image closes again (issue 32 §1). A leaf: used by `handover`, `daemon`
//! and `child` alike.

use std::os::fd::{BorrowedFd, RawFd};

/// Clears `FD_CLOEXEC` on `fd` so it stays open across `execve`.
pub fn keep_across_exec(fd: RawFd) -> std::io::Result<()> {
    // SAFETY: only the descriptor flags change.
    let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
    rustix::io::fcntl_setfd(borrowed, rustix::io::FdFlags::empty()).map_err(Into::into)
}

/// Sets `FD_CLOEXEC` on `fd` again (the new image keeps what it adopted from its children).
pub fn close_on_exec(fd: RawFd) {
    // SAFETY: only the descriptor flags change.
    let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
    let _ = rustix::io::fcntl_setfd(borrowed, rustix::io::FdFlags::CLOEXEC);
}
