//! `emulator._core.pause`: the receiver's PFC pause state.
use fabric_core::model::pause as core;
use fabric_core::wire::pfc::{PfcQuanta, PRIORITIES};
use pyo3::exceptions::{PyIndexError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// Which priorities a received PFC holds on one port, and until when (the Python dataclass's attributes as
/// read-only copies).
#[pyclass(module = "emulator._core.pause", skip_from_py_object)]
#[derive(Clone)]
pub struct PauseState {
    pub inner: core::PauseState,
}

#[pymethods]
impl PauseState {
    #[new]
    fn new(rate_bps: u64) -> Self {
        PauseState {
            inner: core::PauseState::new(rate_bps),
        }
    }

    #[getter]
    fn rate_bps(&self) -> u64 {
        self.inner.rate_bps
    }

    #[getter]
    fn until(&self) -> Vec<Option<u64>> {
        self.inner.until.to_vec()
    }

    #[getter]
    fn since(&self) -> Vec<u64> {
        self.inner.since.to_vec()
    }

    #[getter]
    fn paused_ns(&self) -> Vec<u64> {
        self.inner.paused_ns.to_vec()
    }

    #[getter]
    fn frames(&self) -> u64 {
        self.inner.frames
    }

    /// Apply a received frame ({priority: quanta}); returns (newly paused, resumed) priorities.
    fn on_pfc(
        &mut self,
        now: u64,
        quanta: &Bound<'_, PyDict>,
    ) -> PyResult<(Vec<usize>, Vec<usize>)> {
        let (paused, resumed) = self.inner.on_pfc(now, &quanta_of(quanta)?);
        Ok((paused.iter().collect(), resumed.iter().collect()))
    }

    fn is_paused(&self, priority: i64) -> PyResult<bool> {
        Ok(self.inner.is_paused(priority_index(priority)?))
    }

    fn next_expiry(&self) -> Option<u64> {
        self.inner.next_expiry()
    }

    /// Resume every priority whose pause has run out by `now`.
    fn expire(&mut self, now: u64) -> Vec<usize> {
        self.inner.expire(now).iter().collect()
    }

    /// End `priority`'s pause at `now` without a frame (a PFC watchdog takes PFC away from it).
    fn release(&mut self, now: u64, priority: i64) -> PyResult<()> {
        self.inner.release(now, priority_index(priority)?);
        Ok(())
    }

    fn paused_time(&self, priority: i64, now: u64) -> PyResult<u64> {
        Ok(self.inner.paused_time(priority_index(priority)?, now))
    }

    fn __repr__(&self) -> String {
        let s = &self.inner;
        let until: Vec<String> = s
            .until
            .iter()
            .map(|t| t.map_or("None".to_string(), |t| t.to_string()))
            .collect();
        format!(
            "PauseState(rate_bps={}, until=[{}], since={:?}, paused_ns={:?}, frames={})",
            s.rate_bps,
            until.join(", "),
            s.since,
            s.paused_ns,
            s.frames
        )
    }
}

/// A priority as an index of the eight, IndexError (as a Python list's) otherwise.
pub fn priority_index(priority: i64) -> PyResult<usize> {
    usize::try_from(priority)
        .ok()
        .filter(|&p| p < PRIORITIES)
        .ok_or_else(|| PyIndexError::new_err("list index out of range"))
}

/// `{priority: quanta}` as the core's quanta per priority: IndexError for a priority outside 0 to 7,
/// ValueError for quanta outside 0 to 65535 (no PFC frame carries such).
pub fn quanta_of(quanta: &Bound<'_, PyDict>) -> PyResult<PfcQuanta> {
    let mut out: PfcQuanta = [None; PRIORITIES];
    for (priority, value) in quanta.iter() {
        let priority = priority_index(priority.extract()?)?;
        let value: i64 = value.extract()?;
        out[priority] = Some(u16::try_from(value).map_err(|_| {
            PyValueError::new_err(format!("bad PFC quanta {value}: expected 0 to 65535"))
        })?);
    }
    Ok(out)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PauseState>()?;
    Ok(())
}
