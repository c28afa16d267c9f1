//! `emulator._core.pfcwd`: the PFC watchdog.
//!
//! Messages show refused values as the Python module does, through `emulator.errors.shown`, and times through
//! `emulator.units` (`parse_time`, `format_time`): the command line's units are the Python control plane's.
use fabric_core::model::pfcwd as core;
use fabric_core::model::pfcwd::{Action, PfcwdSpec, QueueKey};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

/// Detection and restoration time (ns) and the action on a storm; frozen, compared and hashed by value.
#[pyclass(module = "emulator._core.pfcwd", frozen, eq, hash, from_py_object)]
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct WatchdogConfig {
    pub inner: core::WatchdogConfig,
}

#[pymethods]
impl WatchdogConfig {
    #[new]
    #[pyo3(signature = (detection_ns, restoration_ns, action = None))]
    fn new(
        detection_ns: &Bound<'_, PyAny>,
        restoration_ns: &Bound<'_, PyAny>,
        action: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        Ok(WatchdogConfig {
            inner: checked_config(detection_ns, restoration_ns, action)?,
        })
    }

    #[getter]
    fn detection_ns(&self) -> u64 {
        self.inner.detection_ns()
    }

    #[getter]
    fn restoration_ns(&self) -> u64 {
        self.inner.restoration_ns()
    }

    #[getter]
    fn action(&self) -> &'static str {
        self.inner.action().name()
    }

    fn describe(&self, py: Python<'_>) -> PyResult<String> {
        let format_time = py.import("emulator.units")?.getattr("format_time")?;
        let detection: String = format_time.call1((self.inner.detection_ns(),))?.extract()?;
        let restoration: String = format_time
            .call1((self.inner.restoration_ns(),))?
            .extract()?;
        Ok(format!(
            "detection {detection}, restoration {restoration}, action {}",
            self.inner.action().name()
        ))
    }

    fn __repr__(&self) -> String {
        format!(
            "WatchdogConfig(detection_ns={}, restoration_ns={}, action='{}')",
            self.inner.detection_ns(),
            self.inner.restoration_ns(),
            self.inner.action().name()
        )
    }
}

/// `emulator.errors.shown(value)`: a refused value as the Python modules' messages show it.
fn shown(value: &Bound<'_, PyAny>) -> PyResult<String> {
    value
        .py()
        .import("emulator.errors")?
        .getattr("shown")?
        .call1((value,))?
        .extract()
}

/// A config from Python values, checked in the dataclass's order: detection, restoration, action.
fn checked_config(
    detection_ns: &Bound<'_, PyAny>,
    restoration_ns: &Bound<'_, PyAny>,
    action: Option<&Bound<'_, PyAny>>,
) -> PyResult<core::WatchdogConfig> {
    let detection = time_field("detection_ns", detection_ns)?;
    let restoration = time_field("restoration_ns", restoration_ns)?;
    let action = match action {
        None => Action::Drop,
        Some(action) => action_of(action)?,
    };
    core::WatchdogConfig::new(detection, restoration, action)
        .map_err(|err| PyValueError::new_err(err.to_string()))
}

/// A detection or restoration time in range; ValueError naming the field and showing the value otherwise.
fn time_field(field: &'static str, value: &Bound<'_, PyAny>) -> PyResult<u64> {
    let checked = value
        .extract::<u64>()
        .ok()
        .filter(|_| !value.is_instance_of::<pyo3::types::PyBool>())
        .and_then(|ns| core::check_time(field, ns).ok());
    checked.ok_or_else(|| match shown(value) {
        Ok(text) => PyValueError::new_err(format!(
            "{field} {text}: {}",
            core::TimeOutOfRange::EXPECTED
        )),
        Err(err) => err,
    })
}

/// An action by its name; ValueError naming the value otherwise.
fn action_of(value: &Bound<'_, PyAny>) -> PyResult<Action> {
    let named = value.extract::<&str>().ok().and_then(Action::from_name);
    named.ok_or_else(|| {
        let names: Vec<&str> = Action::ALL.iter().map(|a| a.name()).collect();
        match shown(value) {
            Ok(text) => PyValueError::new_err(format!(
                "action {text}: expected one of {}",
                names.join(", ")
            )),
            Err(err) => err,
        }
    })
}

/// The core config of a `WatchdogConfig`, this module's or the Python dataclass (read by its attributes).
pub fn watchdog_config_of(config: &Bound<'_, PyAny>) -> PyResult<core::WatchdogConfig> {
    if let Ok(ours) = config.cast::<WatchdogConfig>() {
        return Ok(ours.get().inner);
    }
    checked_config(
        &config.getattr("detection_ns")?,
        &config.getattr("restoration_ns")?,
        Some(&config.getattr("action")?),
    )
}

/// `off`, `on` (SONiC's defaults: 200 ms, restoration twice that, drop) or
/// `DETECTION[:RESTORATION[:ACTION]]` (restoration twice detection, action drop unless given);
/// FabricError in one line otherwise.
#[pyfunction]
fn parse_pfcwd(py: Python<'_>, text: &Bound<'_, PyAny>) -> PyResult<Option<WatchdogConfig>> {
    let fabric_error = py.import("emulator.errors")?.getattr("FabricError")?;
    let parse_time = py.import("emulator.units")?.getattr("parse_time")?;
    let text = &text.call_method0("strip")?;
    let raw: String = text.extract()?;
    let bad = |detail: String| -> PyResult<PyErr> {
        Ok(PyErr::from_value(fabric_error.call1((format!(
            "bad pfcwd {}: {detail}",
            shown(text)?
        ),))?))
    };
    let (detection, restoration, action) = match core::split_pfcwd(&raw) {
        None => return Err(bad(core::PFCWD_SYNTAX.to_string())?),
        Some(PfcwdSpec::Off) => return Ok(None),
        Some(PfcwdSpec::On) => {
            return Ok(Some(WatchdogConfig {
                inner: core::WatchdogConfig::sonic_default(),
            }))
        }
        Some(PfcwdSpec::Times {
            detection,
            restoration,
            action,
        }) => (detection, restoration, action),
    };
    let detection = parse_time.call1((detection,))?;
    let restoration = match restoration {
        Some(text) => parse_time.call1((text,))?,
        None => detection.mul(2)?,
    };
    let action = action.unwrap_or("drop");
    let action = action.into_pyobject(py)?.into_any();
    let config = checked_config(&detection, &restoration, Some(&action));
    match config {
        Ok(inner) => Ok(Some(WatchdogConfig { inner })),
        Err(err) if err.is_instance_of::<PyValueError>(py) => {
            Err(bad(err.value(py).str()?.extract()?)?)
        }
        Err(err) => Err(err),
    }
}

/// The storms of one switch's lossless egress queues; queues are (egress port, priority) tuples.
#[pyclass(module = "emulator._core.pfcwd")]
pub struct Watchdog {
    pub inner: core::Watchdog,
}

#[pymethods]
impl Watchdog {
    #[new]
    fn new(config: &Bound<'_, PyAny>) -> PyResult<Self> {
        Ok(Watchdog {
            inner: core::Watchdog::new(watchdog_config_of(config)?),
        })
    }

    #[getter]
    fn config(&self) -> WatchdogConfig {
        WatchdogConfig {
            inner: *self.inner.config(),
        }
    }

    #[getter]
    fn storms(&self) -> u64 {
        self.inner.storms
    }

    #[getter]
    fn restorations(&self) -> u64 {
        self.inner.restorations
    }

    fn stormed(&self, key: (usize, usize)) -> bool {
        self.inner.stormed(queue_key(key))
    }

    fn dropping(&self, key: (usize, usize)) -> bool {
        self.inner.dropping(queue_key(key))
    }

    fn stalled(&mut self, now: u64, key: (usize, usize)) -> bool {
        self.inner.stalled(now, queue_key(key))
    }

    fn progressed(&mut self, key: (usize, usize)) -> bool {
        self.inner.progressed(queue_key(key))
    }

    fn pause_received(&mut self, now: u64, key: (usize, usize)) {
        self.inner.pause_received(now, queue_key(key))
    }

    fn next_deadline(&self) -> Option<u64> {
        self.inner.next_deadline()
    }

    /// The queues whose storm was detected by `now`, and those restored.
    fn on_timer<'py>(&mut self, py: Python<'py>, now: u64) -> PyResult<Bound<'py, PyTuple>> {
        let (detected, restored) = self.inner.on_timer(now);
        (key_tuples(&detected), key_tuples(&restored)).into_pyobject(py)
    }
}

fn queue_key((port, priority): (usize, usize)) -> QueueKey {
    QueueKey { port, priority }
}

/// Queues as (port, priority) tuples.
pub fn key_tuples(keys: &[QueueKey]) -> Vec<(usize, usize)> {
    keys.iter().map(|key| (key.port, key.priority)).collect()
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let names = Action::ALL.iter().map(|a| a.name());
    m.add("ACTIONS", PyTuple::new(m.py(), names)?)?;
    m.add("MAX_TIME_NS", core::MAX_TIME_NS)?;
    m.add("SONIC_DETECTION_NS", core::SONIC_DETECTION_NS)?;
    m.add_class::<WatchdogConfig>()?;
    m.add_class::<Watchdog>()?;
    m.add_function(wrap_pyfunction!(parse_pfcwd, m)?)?;
    Ok(())
}
