//! `emulator._core.dcqcn`: DCQCN's constants, notification point and reaction point (fabric-core's
//! `model::dcqcn`) under the names and attributes the RNIC agent uses.
//!
//! `parse_cc`, `check_fabric`, `at_link` and `check_link` stay in Python (control plane: run once before a
//! fabric is built), with the settings themselves: `emulator.model.dcqcn.DcqcnParams`, the dataclass the
//! agents' configs carry, which a [`ReactionPoint`] reads field by field.
use fabric_core::model::dcqcn as core;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// The constants of `params`, an object with `DcqcnParams`' fields (the dataclass `parse_cc` returns and the
/// agents' configs carry), checked as the core's constructor checks them (a ValueError naming the field).
pub(crate) fn params_of(params: &Bound<'_, PyAny>) -> PyResult<core::DcqcnParams> {
    let int = |name: &str| -> PyResult<i128> { params.getattr(name)?.extract() };
    let fields = core::DcqcnFields {
        cnp_interval_ns: int("cnp_interval_ns")?,
        alpha_period_ns: int("alpha_period_ns")?,
        g: params.getattr("g")?.extract()?,
        increase_period_ns: int("increase_period_ns")?,
        byte_counter: int("byte_counter")?,
        fast_recovery: int("fast_recovery")?,
        rai_bps: int("rai_bps")?,
        rhai_bps: int("rhai_bps")?,
        min_rate_bps: int("min_rate_bps")?,
        reference_bps: int("reference_bps")?,
    };
    core::DcqcnParams::new(fields).map_err(|e| PyValueError::new_err(e.to_string()))
}

/// The receiving RNIC's side: whether a CE-marked packet of a QP earns its peer a CNP now.
#[pyclass(module = "emulator._core.dcqcn")]
pub struct NotificationPoint(core::NotificationPoint);

#[pymethods]
impl NotificationPoint {
    #[new]
    fn new(interval_ns: u64) -> Self {
        NotificationPoint(core::NotificationPoint::new(interval_ns))
    }

    #[getter]
    fn interval_ns(&self) -> u64 {
        self.0.interval_ns()
    }
    #[getter]
    fn ce_received(&self) -> u64 {
        self.0.ce_received()
    }
    #[getter]
    fn cnps(&self) -> u64 {
        self.0.cnps()
    }

    /// A CE-marked packet arrived for QP `qpn` at `now`: True if a CNP is to be sent for it.
    fn on_ce(&mut self, now: u64, qpn: u64) -> bool {
        self.0.on_ce(now, qpn)
    }

    fn forget(&mut self, qpn: u64) {
        self.0.forget(qpn)
    }
}

/// The sending RNIC's side for one QP: its current and target rate, alpha, and the pacing of its frames.
#[pyclass(module = "emulator._core.dcqcn")]
pub struct ReactionPoint {
    rp: core::ReactionPoint,
    /// The params object the caller gave, read back as `p`.
    params: Py<PyAny>,
}

#[pymethods]
impl ReactionPoint {
    #[new]
    fn new(params: &Bound<'_, PyAny>, line_rate_bps: u64) -> PyResult<Self> {
        Ok(ReactionPoint {
            rp: core::ReactionPoint::new(params_of(params)?, line_rate_bps),
            params: params.clone().unbind(),
        })
    }

    #[getter]
    fn p(&self, py: Python<'_>) -> Py<PyAny> {
        self.params.clone_ref(py)
    }
    #[getter]
    fn line_bps(&self) -> u64 {
        self.rp.line_bps()
    }
    #[getter]
    fn rate_bps(&self) -> u64 {
        self.rp.rate_bps()
    }
    #[getter]
    fn target_bps(&self) -> u64 {
        self.rp.target_bps()
    }
    #[getter]
    fn alpha(&self) -> f64 {
        self.rp.alpha()
    }
    #[getter]
    fn limited(&self) -> bool {
        self.rp.limited()
    }
    #[getter]
    fn timer_events(&self) -> u64 {
        self.rp.timer_events()
    }
    #[getter]
    fn byte_events(&self) -> u64 {
        self.rp.byte_events()
    }
    #[getter(_alpha_since)]
    fn alpha_since(&self) -> Option<u64> {
        self.rp.alpha_since()
    }
    #[getter]
    fn alpha_deadline(&self) -> Option<u64> {
        self.rp.alpha_deadline()
    }
    #[getter]
    fn increase_deadline(&self) -> Option<u64> {
        self.rp.increase_deadline()
    }
    #[getter]
    fn ready_at(&self) -> u64 {
        self.rp.ready_at()
    }

    /// cnps, decreases, increases, released (a fresh dict).
    #[getter]
    fn counters<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let c = self.rp.counters();
        let dict = PyDict::new(py);
        dict.set_item("cnps", c.cnps)?;
        dict.set_item("decreases", c.decreases)?;
        dict.set_item("increases", c.increases)?;
        dict.set_item("released", c.released)?;
        Ok(dict)
    }

    /// A CNP for this QP: cut the rate, raise alpha, start the increase stages over.
    fn on_cnp(&mut self, now: u64) {
        self.rp.on_cnp(now)
    }

    fn may_send(&self, now: u64) -> bool {
        self.rp.may_send(now)
    }

    /// A frame of `size` bytes of this QP left at `now`: the pacer and the byte counter move.
    fn on_sent(&mut self, now: u64, size: u64) {
        self.rp.on_sent(now, size)
    }

    fn next_deadline(&self) -> Option<u64> {
        self.rp.next_deadline()
    }

    /// Serve the alpha and rate-increase timers due by `now`, each period it missed too.
    fn on_timer(&mut self, now: u64) {
        self.rp.on_timer(now)
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<NotificationPoint>()?;
    m.add_class::<ReactionPoint>()?;
    m.add("MAX_PERIOD_NS", core::MAX_PERIOD_NS)?;
    m.add("MAX_RATE_BPS", core::MAX_RATE_BPS)?;
    Ok(())
}
