//! A NIC receive pipeline slower than its link, with PFC on its buffer, sans-I/O.
//!
//! The slow-receiver fault (Guo et al., SIGCOMM 2016: a NIC whose receive path falls behind, e.g. on cache
//! misses, pauses its switch port): frames enter a buffer of `buffer_bytes` and leave it at `rate_bps` (a
//! fraction of the link's), one after the other. When the buffer holds `xoff_bytes` the NIC asks its switch
//! to pause (XOFF); once it has drained to `xon_bytes` it lets it go (XON); a frame that does not fit is
//! dropped and counted (the switch ignored the pause, or the headroom was too small). The caller reads no
//! clock into it: `now` comes in, frames come out. Frames are the caller's handles `F`, stored and handed
//! back.
use std::collections::VecDeque;
use std::fmt;

/// Settings no pipeline can have: a rate of 0, or not XON < XOFF <= buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PipelineError {
    /// The thresholds (or the rate) of a new pipeline.
    Settings {
        rate_bps: u64,
        buffer_bytes: u64,
        xoff_bytes: u64,
        xon_bytes: u64,
    },
    /// A new rate of 0.
    Rate(u64),
}

impl fmt::Display for PipelineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            PipelineError::Settings {
                rate_bps,
                buffer_bytes,
                xoff_bytes,
                xon_bytes,
            } => write!(
                f,
                "bad receive pipeline: rate {rate_bps}, buffer {buffer_bytes}, XOFF {xoff_bytes}, \
                 XON {xon_bytes} (need XON < XOFF <= buffer)"
            ),
            PipelineError::Rate(rate) => write!(f, "bad receive pipeline rate {rate}"),
        }
    }
}

impl std::error::Error for PipelineError {}

/// A pause change the pipeline asks of its switch port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PauseChange {
    /// Assert XOFF: the buffer reached `xoff_bytes`.
    Xoff,
    /// Release it (XON): the buffer drained to `xon_bytes`.
    Xon,
}

/// The frames a slow NIC holds, when each is taken, and the pause it asks for.
#[derive(Clone, Debug)]
pub struct RxPipeline<F> {
    rate_bps: u64,
    buffer_bytes: u64,
    xoff_bytes: u64,
    xon_bytes: u64,
    /// Frames held, oldest first, with their sizes.
    frames: VecDeque<(F, u64)>,
    /// Bytes held.
    bytes: u64,
    /// When the head frame has been taken.
    head_done: Option<u64>,
    /// XOFF asserted towards the switch.
    paused: bool,
    /// Frames that did not fit.
    pub dropped: u64,
    /// The most bytes held at once.
    pub peak: u64,
}

/// How long `size` bytes take at `rate_bps` (rate above 0), in whole ns, saturating.
fn take_ns(size: u64, rate_bps: u64) -> u64 {
    u64::try_from(u128::from(size) * 8_000_000_000 / u128::from(rate_bps)).unwrap_or(u64::MAX)
}

impl<F> RxPipeline<F> {
    /// An empty pipeline; its settings must have a rate above 0 and XON < XOFF <= buffer.
    pub fn new(
        rate_bps: u64,
        buffer_bytes: u64,
        xoff_bytes: u64,
        xon_bytes: u64,
    ) -> Result<Self, PipelineError> {
        if rate_bps == 0 || !(xon_bytes < xoff_bytes && xoff_bytes <= buffer_bytes) {
            return Err(PipelineError::Settings {
                rate_bps,
                buffer_bytes,
                xoff_bytes,
                xon_bytes,
            });
        }
        Ok(RxPipeline {
            rate_bps,
            buffer_bytes,
            xoff_bytes,
            xon_bytes,
            frames: VecDeque::new(),
            bytes: 0,
            head_done: None,
            paused: false,
            dropped: 0,
            peak: 0,
        })
    }

    pub fn rate_bps(&self) -> u64 {
        self.rate_bps
    }

    pub fn buffer_bytes(&self) -> u64 {
        self.buffer_bytes
    }

    pub fn xoff_bytes(&self) -> u64 {
        self.xoff_bytes
    }

    pub fn xon_bytes(&self) -> u64 {
        self.xon_bytes
    }

    /// The frames held, oldest first, with their sizes.
    pub fn frames(&self) -> &VecDeque<(F, u64)> {
        &self.frames
    }

    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Whether XOFF is asserted towards the switch.
    pub fn paused(&self) -> bool {
        self.paused
    }

    /// A frame of `size` bytes came in; the pause change it causes, if any. A frame that does not fit is
    /// dropped (counted) and handed back.
    pub fn arrive(&mut self, now: u64, frame: F, size: u64) -> Result<Option<PauseChange>, F> {
        if self.bytes.saturating_add(size) > self.buffer_bytes {
            self.dropped += 1;
            return Err(frame);
        }
        self.frames.push_back((frame, size));
        self.bytes += size;
        self.peak = self.peak.max(self.bytes);
        if self.head_done.is_none() {
            self.head_done = Some(now.saturating_add(take_ns(size, self.rate_bps)));
        }
        if !self.paused && self.bytes >= self.xoff_bytes {
            self.paused = true;
            return Ok(Some(PauseChange::Xoff));
        }
        Ok(None)
    }

    /// Take frames at `rate_bps` from `now` on: the rest of the head frame and every frame behind it.
    pub fn set_rate(&mut self, now: u64, rate_bps: u64) -> Result<(), PipelineError> {
        if rate_bps == 0 {
            return Err(PipelineError::Rate(rate_bps));
        }
        if let Some(done) = self.head_done.filter(|&done| done > now) {
            let rest = u128::from(done - now) * u128::from(self.rate_bps) / u128::from(rate_bps);
            self.head_done = Some(now.saturating_add(u64::try_from(rest).unwrap_or(u64::MAX)));
        }
        self.rate_bps = rate_bps;
        Ok(())
    }

    /// When the head frame is taken, if any is held.
    pub fn next_deadline(&self) -> Option<u64> {
        self.head_done
    }

    /// The frames the pipeline has finished by `now`, in order, into `done`; and the pause change (XON) if the
    /// buffer drained to `xon_bytes`.
    pub fn take(&mut self, now: u64, done: &mut Vec<F>) -> Option<PauseChange> {
        while let Some(finished) = self.head_done.filter(|&at| at <= now) {
            let Some((frame, size)) = self.frames.pop_front() else {
                self.head_done = None;
                break;
            };
            self.bytes -= size;
            done.push(frame);
            self.head_done = self
                .frames
                .front()
                .map(|&(_, next)| finished.saturating_add(take_ns(next, self.rate_bps)));
        }
        if self.paused && self.bytes <= self.xon_bytes {
            self.paused = false;
            return Some(PauseChange::Xon);
        }
        None
    }

    /// Every frame held (the fault ends: the pipeline catches up at once).
    pub fn drain(&mut self) -> impl Iterator<Item = F> + '_ {
        self.bytes = 0;
        self.head_done = None;
        self.frames.drain(..).map(|(frame, _)| frame)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const US: u64 = 1000;

    #[test]
    fn frames_leave_one_after_the_other_at_the_pipeline_rate() {
        let mut p = RxPipeline::new(8_000_000, 10_000, 5000, 1000).unwrap();
        assert_eq!(p.arrive(0, 'a', 1000), Ok(None));
        assert_eq!(p.arrive(10, 'b', 500), Ok(None));
        assert_eq!(p.next_deadline(), Some(1000 * US));
        let mut done = Vec::new();
        assert_eq!(p.take(999 * US, &mut done), None);
        assert!(done.is_empty());
        p.take(1000 * US, &mut done);
        assert_eq!(
            (done.as_slice(), p.next_deadline()),
            (&['a'][..], Some(1500 * US))
        );
    }

    #[test]
    fn xoff_at_its_threshold_xon_once_drained_and_drops_past_the_buffer() {
        let mut p = RxPipeline::new(8_000_000, 4000, 3000, 1000).unwrap();
        assert_eq!(p.arrive(0, 0, 1000), Ok(None));
        assert_eq!(p.arrive(0, 1, 1000), Ok(None));
        assert_eq!(p.arrive(0, 2, 1000), Ok(Some(PauseChange::Xoff)));
        assert_eq!(p.arrive(0, 3, 1000), Ok(None));
        assert_eq!(p.arrive(0, 4, 1000), Err(4));
        assert_eq!((p.dropped, p.peak, p.paused()), (1, 4000, true));
        let mut done = Vec::new();
        assert_eq!(p.take(3000 * US, &mut done), Some(PauseChange::Xon));
        assert_eq!(p.drain().collect::<Vec<_>>(), [3]);
        assert_eq!((p.bytes(), p.next_deadline()), (0, None));
    }

    #[test]
    fn bad_settings_are_refused() {
        let err = RxPipeline::<()>::new(1000, 1000, 2000, 100).unwrap_err();
        assert!(err.to_string().ends_with("(need XON < XOFF <= buffer)"));
        let mut p = RxPipeline::<()>::new(1, 2, 2, 1).unwrap();
        assert_eq!(
            p.set_rate(0, 0).unwrap_err().to_string(),
            "bad receive pipeline rate 0"
        );
    }

    proptest! {
        /// Any sizes, rates and times: no panic, the bytes held are the sum of the frames held and within the
        /// buffer, and a deadline exists exactly while frames are held.
        #[test]
        fn accounting_holds(steps in proptest::collection::vec((0u8..3, any::<u64>(), 1u64..u64::MAX, any::<u32>()), 0..100)) {
            let mut p = RxPipeline::new(1_000_000, 100_000, 50_000, 10_000).unwrap();
            let mut now = 0u64;
            let mut done = Vec::new();
            for (op, size, rate, dt) in steps {
                now = now.saturating_add(u64::from(dt));
                match op {
                    0 => { let _ = p.arrive(now, (), size % 200_000); }
                    1 => p.set_rate(now, rate).unwrap(),
                    _ => { p.take(now, &mut done); }
                }
                prop_assert_eq!(p.bytes(), p.frames().iter().map(|&(_, s)| s).sum::<u64>());
                prop_assert!(p.bytes() <= p.buffer_bytes());
                prop_assert_eq!(p.next_deadline().is_some(), !p.frames().is_empty());
            }
        }
    }
}
