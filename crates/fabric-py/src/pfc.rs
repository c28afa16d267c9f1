//! `emulator._core.pfc`: bindings of fabric-core's pfc (in progress).
use pyo3::prelude::*;

pub fn register(_m: &Bound<'_, PyModule>) -> PyResult<()> {
    Ok(())
}
