//! epoll and timerfd: what one data-plane loop waits on, every agent's sockets and one timer for all their
//! deadlines (`emulator/agents/loop.py` does the same in Python).
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// An epoll instance.
pub struct Epoll {
    fd: OwnedFd,
    events: Vec<libc::epoll_event>,
}

/// Interest in reading (`EPOLLIN`), as [`Epoll::add`] takes it and [`Ready::events`] gives it.
pub const READABLE: u32 = libc::EPOLLIN as u32;
/// Interest in writing (`EPOLLOUT`).
pub const WRITABLE: u32 = libc::EPOLLOUT as u32;

/// A descriptor that became ready: its token, and whether it can be read and written (or hung up / failed,
/// which reads as readable: the read then says what happened).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ready {
    pub token: u64,
    pub readable: bool,
    pub writable: bool,
    /// The kernel's event mask as it came (`EPOLLIN`, `EPOLLOUT`, `EPOLLERR`, `EPOLLHUP`): what a Python
    /// handler is given.
    pub events: u32,
}

impl Epoll {
    /// An epoll instance that reports up to `batch` ready descriptors a wait.
    pub fn new(batch: usize) -> io::Result<Epoll> {
        // SAFETY: epoll_create1 takes a flag only; its result is checked before use.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Epoll {
            // SAFETY: `fd` was just returned by epoll_create1 and nothing else owns it.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            events: vec![libc::epoll_event { events: 0, u64: 0 }; batch.max(1)],
        })
    }

    /// Watches `fd` for `events` ([`READABLE`], [`WRITABLE`] or both), reported with `token`.
    pub fn add(&self, fd: RawFd, token: u64, events: u32) -> io::Result<()> {
        self.control(libc::EPOLL_CTL_ADD, fd, token, events)
    }

    /// Watches `fd`, already watched, for `events` instead, reported with `token`.
    pub fn modify(&self, fd: RawFd, token: u64, events: u32) -> io::Result<()> {
        self.control(libc::EPOLL_CTL_MOD, fd, token, events)
    }

    /// Stops watching `fd`.
    pub fn remove(&self, fd: RawFd) -> io::Result<()> {
        self.control(libc::EPOLL_CTL_DEL, fd, 0, 0)
    }

    fn control(&self, op: libc::c_int, fd: RawFd, token: u64, events: u32) -> io::Result<()> {
        let mut event = libc::epoll_event { events, u64: token };
        // SAFETY: `event` is a live epoll_event for the call (the kernel copies it; EPOLL_CTL_DEL ignores it).
        let rc = unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), op, fd, &mut event) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Waits up to `timeout_ms` (-1: without end) for ready descriptors and puts them in `ready` (cleared
    /// first). A signal ends the wait early with none.
    pub fn wait(&mut self, ready: &mut Vec<Ready>, timeout_ms: i32) -> io::Result<()> {
        ready.clear();
        let room = libc::c_int::try_from(self.events.len()).unwrap_or(libc::c_int::MAX);
        // SAFETY: `events` is a live, writable array of `room` epoll_events; the kernel writes at most `room`.
        let rc = unsafe {
            libc::epoll_wait(
                self.fd.as_raw_fd(),
                self.events.as_mut_ptr(),
                room,
                timeout_ms,
            )
        };
        if rc < 0 {
            let error = io::Error::last_os_error();
            return match error.kind() {
                io::ErrorKind::Interrupted => Ok(()),
                _ => Err(error),
            };
        }
        let hung = (libc::EPOLLHUP | libc::EPOLLERR) as u32;
        for event in self.events.iter().take(usize::try_from(rc).unwrap_or(0)) {
            let mask = event.events;
            ready.push(Ready {
                token: event.u64,
                readable: mask & (libc::EPOLLIN as u32 | hung) != 0,
                writable: mask & libc::EPOLLOUT as u32 != 0,
                events: mask,
            });
        }
        Ok(())
    }
}

/// A monotonic timerfd armed at absolute deadlines (ns of `CLOCK_MONOTONIC`, Python's `time.monotonic_ns`).
pub struct TimerFd {
    fd: OwnedFd,
}

impl AsRawFd for TimerFd {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl TimerFd {
    pub fn new() -> io::Result<TimerFd> {
        let flags = libc::TFD_NONBLOCK | libc::TFD_CLOEXEC;
        // SAFETY: timerfd_create takes a clock id and flags; its result is checked before use.
        let fd = unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, flags) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(TimerFd {
            // SAFETY: `fd` was just returned by timerfd_create and nothing else owns it.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// Fires once at `deadline` (a time already past fires at once), or never with `None`.
    pub fn arm(&self, deadline: Option<u64>) -> io::Result<()> {
        // 0 disarms; a deadline of 0 (long past) is moved to 1 ns, which fires at once.
        let at = deadline.map_or(0, |deadline| deadline.max(1));
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: libc::time_t::try_from(at / 1_000_000_000).unwrap_or(libc::time_t::MAX),
                tv_nsec: (at % 1_000_000_000) as libc::c_long,
            },
        };
        // SAFETY: `spec` is a live itimerspec; no old value is asked for (null).
        let rc = unsafe {
            libc::timerfd_settime(
                self.fd.as_raw_fd(),
                libc::TFD_TIMER_ABSTIME,
                &spec,
                std::ptr::null_mut(),
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Reads the expiry count so that the timer stops reporting ready; 0 if it had not fired.
    pub fn consume(&self) -> io::Result<u64> {
        let mut count = [0u8; 8];
        // SAFETY: `count` is 8 writable bytes and 8 is the length passed.
        let rc = unsafe { libc::read(self.fd.as_raw_fd(), count.as_mut_ptr().cast(), 8) };
        if rc < 0 {
            let error = io::Error::last_os_error();
            return match error.kind() {
                io::ErrorKind::WouldBlock => Ok(0),
                _ => Err(error),
            };
        }
        Ok(u64::from_ne_bytes(count))
    }
}
