//! The system calls themselves, and every `unsafe` block of the workspace: sockets, rings, epoll, timerfd,
//! clocks, namespaces. Each block says why it is sound (clippy's `undocumented_unsafe_blocks` is denied, and
//! `tests/unit/test_layers.py` allows the word nowhere else). What sits above (`forward`, `event_loop`) is
//! safe Rust on these wrappers.
pub mod clock;
pub mod mapped;
pub mod netlink;
pub mod netns;
pub mod packet;
pub mod poll;
pub mod ring;

use std::io;
use std::os::fd::RawFd;

/// `setsockopt(fd, level, name, value)`: the option's value is `value`'s bytes (a C int or struct).
fn set_option<T>(fd: RawFd, level: libc::c_int, name: libc::c_int, value: &T) -> io::Result<()> {
    let size = libc::socklen_t::try_from(size_of::<T>())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: the option's value points to `value`, live and unmoved for the call, and its size is `T`'s; the
    // kernel reads it and keeps no pointer to it.
    let rc = unsafe { libc::setsockopt(fd, level, name, (value as *const T).cast(), size) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}
