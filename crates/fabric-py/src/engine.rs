//! `emulator._core.engine`: bindings of fabric-core's engine (in progress).
use pyo3::prelude::*;

pub fn register(_m: &Bound<'_, PyModule>) -> PyResult<()> {
    Ok(())
}
