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

/// A receive time stamp more than this before the time it is read at is taken as read then: the real-time
/// clock was stepped meanwhile.
const STAMP_WINDOW_NS: u64 = 1_000_000_000;

/// Both clocks read together, to put the kernel's receive time stamps (real time) on the loop's clock.
#[derive(Clone, Copy)]
pub struct StampClock {
    monotonic: u64,
    real: u64,
}

impl StampClock {
    /// The two clocks now.
    pub fn read() -> io::Result<StampClock> {
        Ok(StampClock {
            monotonic: monotonic_ns()?,
            real: realtime_ns()?,
        })
    }

    /// When a frame stamped `stamp` (real time; `None`: not stamped) arrived, on the monotonic clock, for a
    /// reader at `now`: never after `now`, nor more than [`STAMP_WINDOW_NS`] before it.
    pub fn arrival(&self, stamp: Option<u64>, now: u64) -> u64 {
        let Some(stamp) = stamp else {
            return now;
        };
        let at = self
            .monotonic
            .saturating_sub(self.real.saturating_sub(stamp));
        at.clamp(now.saturating_sub(STAMP_WINDOW_NS), now)
    }

    /// How long before these readings a frame stamped `stamp` arrived.
    pub fn age(&self, stamp: u64) -> u64 {
        self.real.saturating_sub(stamp)
    }
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
    fn a_stamp_is_put_on_the_monotonic_clock_within_its_window() {
        let clock = StampClock {
            monotonic: 5_000_000_000,
            real: 9_000_000_000,
        };
        assert_eq!(
            clock.arrival(Some(8_999_000_000), 5_000_000_000),
            4_999_000_000
        );
        assert_eq!(
            clock.arrival(Some(8_999_000_000), 4_998_000_000),
            4_998_000_000,
            "never after now"
        );
        assert_eq!(
            clock.arrival(Some(1), 5_000_000_000),
            4_000_000_000,
            "a stepped clock: the window"
        );
        assert_eq!(clock.arrival(None, 77), 77);
        assert_eq!(clock.age(8_999_999_000), 1_000);
    }

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
