//! Clocks: the monotonic clock the loop and its timer run on, the real-time clock of the kernel's receive time
//! stamps, and the calling thread's CPU time, what a benchmark charges a loop with.
use std::io;

/// Nanoseconds the calling thread has run on a CPU (`CLOCK_THREAD_CPUTIME_ID`).
pub fn thread_cpu_ns() -> io::Result<u64> {
    read_clock(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// Now, in ns of `CLOCK_MONOTONIC`: Python's `time.monotonic_ns()`, and the timerfd's clock.
pub fn monotonic_ns() -> io::Result<u64> {
    read_clock(libc::CLOCK_MONOTONIC)
}

/// Now, in ns of `CLOCK_REALTIME`: the clock of the kernel's receive time stamps (Python's `time.time_ns()`).
pub fn realtime_ns() -> io::Result<u64> {
    read_clock(libc::CLOCK_REALTIME)
}

fn read_clock(clock: libc::clockid_t) -> io::Result<u64> {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid, writable timespec for the duration of the call.
    let rc = unsafe { libc::clock_gettime(clock, &mut now) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let seconds = u64::try_from(now.tv_sec).unwrap_or(0);
    let nanoseconds = u64::try_from(now.tv_nsec).unwrap_or(0);
    Ok(seconds
        .saturating_mul(1_000_000_000)
        .saturating_add(nanoseconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_thread_clock_moves_with_work() {
        let before = thread_cpu_ns().unwrap();
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        assert!(thread_cpu_ns().unwrap() > before);
    }
}
