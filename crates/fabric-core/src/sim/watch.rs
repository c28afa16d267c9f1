//! The goodput watch in simulated time (`run_sim_variant`'s `_watch_goodput`): every interval, the RDMA frames
//! the hosts received so far go to a sampler, which says whether the fabric is stuck; a stuck fabric stops the
//! engine.
//!
//! The sampler is the caller's (the bindings hand it Python's `StallTracker`), so the verdict is the one the
//! emulator's watch gives. Each sample is an engine event scheduled where the Python watch schedules its own
//! (the first at once, when the watch is set; each next one from the last), so a watched run is the Python
//! backend's event for event, and it stops at the same instant.
use std::fmt;

/// Takes a sample (simulated ns, frames received so far) and says whether the fabric is stuck (true: stop); an
/// `Err` ends the run with that message. `Send + Sync` because the fabric lives in a Python object that any
/// thread may hold.
pub type Sampler = Box<dyn FnMut(u64, u64) -> Result<bool, String> + Send + Sync>;

/// A watch on the fabric's goodput.
pub struct Watch {
    /// Simulated ns between two samples.
    pub interval_ns: u64,
    sampler: Sampler,
    /// Whether the sampler said stuck (the run was stopped).
    pub stuck: bool,
}

impl fmt::Debug for Watch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Watch")
            .field("interval_ns", &self.interval_ns)
            .field("stuck", &self.stuck)
            .finish_non_exhaustive()
    }
}

impl Watch {
    /// A watch sampling every `interval_ns` (at least 1) through `sampler`.
    pub fn new(interval_ns: u64, sampler: Sampler) -> Watch {
        Watch {
            interval_ns: interval_ns.max(1),
            sampler,
            stuck: false,
        }
    }

    /// A sample of `frames` received by `now`: whether the watch goes on (schedule the next one).
    pub fn sample(&mut self, now: u64, frames: u64) -> Result<bool, String> {
        self.stuck = (self.sampler)(now, frames)?;
        Ok(!self.stuck)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sampler_decides_and_its_error_passes_through() {
        let mut watch = Watch::new(
            0,
            Box::new(|now, frames| match frames {
                0 => Ok(now >= 300),
                _ => Err(format!("bad sample at {now}")),
            }),
        );
        assert_eq!(watch.interval_ns, 1);
        assert_eq!(watch.sample(100, 0), Ok(true));
        assert!(!watch.stuck);
        assert_eq!(watch.sample(300, 0), Ok(false));
        assert!(watch.stuck);
        assert_eq!(watch.sample(400, 2), Err("bad sample at 400".to_string()));
    }
}
