//! `emulator._core.rx_pipeline`: the slow receiver's NIC buffer.
//!
//! Frames are any Python objects, held and handed back. A pause change is True (XOFF), False (XON) or None (no
//! change).
use fabric_core::model::rx_pipeline as core;
use fabric_core::model::rx_pipeline::PauseChange;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

fn value_error(err: core::PipelineError) -> PyErr {
    PyValueError::new_err(err.to_string())
}

/// True for XOFF, False for XON.
fn asserted(change: Option<PauseChange>) -> Option<bool> {
    change.map(|change| change == PauseChange::Xoff)
}

/// The frames a slow NIC holds, when each is taken, and the pause it asks for.
#[pyclass(module = "emulator._core.rx_pipeline")]
pub struct RxPipeline {
    inner: core::RxPipeline<Py<PyAny>>,
}

#[pymethods]
impl RxPipeline {
    #[new]
    fn new(rate_bps: i64, buffer_bytes: i64, xoff_bytes: i64, xon_bytes: i64) -> PyResult<Self> {
        let settings = [rate_bps, buffer_bytes, xoff_bytes, xon_bytes].map(u64::try_from);
        let inner = match settings {
            [Ok(rate), Ok(buffer), Ok(xoff), Ok(xon)] => {
                core::RxPipeline::new(rate, buffer, xoff, xon)
            }
            // A negative setting: the same refusal, with the values as given.
            _ => {
                return Err(PyValueError::new_err(format!(
                "bad receive pipeline: rate {rate_bps}, buffer {buffer_bytes}, XOFF {xoff_bytes}, \
                     XON {xon_bytes} (need XON < XOFF <= buffer)"
            )))
            }
        };
        Ok(RxPipeline {
            inner: inner.map_err(value_error)?,
        })
    }

    /// A frame of `size` bytes came in; the pause to assert (True), release (False) or None for no change.
    fn arrive(&mut self, now: u64, frame: Py<PyAny>, size: u64) -> Option<bool> {
        asserted(self.inner.arrive(now, frame, size).unwrap_or(None))
    }

    /// Take frames at `rate_bps` from `now` on: the rest of the head frame and every frame behind it.
    fn set_rate(&mut self, now: u64, rate_bps: i64) -> PyResult<()> {
        let rate = u64::try_from(rate_bps).unwrap_or(0);
        if rate == 0 {
            return Err(PyValueError::new_err(format!(
                "bad receive pipeline rate {rate_bps}"
            )));
        }
        self.inner.set_rate(now, rate).map_err(value_error)
    }

    fn next_deadline(&self) -> Option<u64> {
        self.inner.next_deadline()
    }

    /// The frames the pipeline has finished by `now`, in order, and a pause change as `arrive`.
    fn take(&mut self, now: u64) -> (Vec<Py<PyAny>>, Option<bool>) {
        let mut done = Vec::new();
        let change = self.inner.take(now, &mut done);
        (done, asserted(change))
    }

    /// Every frame held (the fault ends: the pipeline catches up at once).
    fn drain(&mut self) -> Vec<Py<PyAny>> {
        self.inner.drain().collect()
    }

    #[getter]
    fn rate_bps(&self) -> u64 {
        self.inner.rate_bps()
    }
    #[getter]
    fn buffer_bytes(&self) -> u64 {
        self.inner.buffer_bytes()
    }
    #[getter]
    fn xoff_bytes(&self) -> u64 {
        self.inner.xoff_bytes()
    }
    #[getter]
    fn xon_bytes(&self) -> u64 {
        self.inner.xon_bytes()
    }
    /// The (frame, size) pairs held, oldest first (a copy).
    #[getter]
    fn frames(&self, py: Python<'_>) -> Vec<(Py<PyAny>, u64)> {
        self.inner
            .frames()
            .iter()
            .map(|(frame, size)| (frame.clone_ref(py), *size))
            .collect()
    }
    #[getter]
    fn bytes(&self) -> u64 {
        self.inner.bytes()
    }
    #[getter]
    fn head_done(&self) -> Option<u64> {
        self.inner.next_deadline()
    }
    #[getter]
    fn paused(&self) -> bool {
        self.inner.paused()
    }
    #[getter]
    fn dropped(&self) -> u64 {
        self.inner.dropped
    }
    #[getter]
    fn peak(&self) -> u64 {
        self.inner.peak
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<RxPipeline>()?;
    Ok(())
}
