//! `emulator._core.link`: bindings of fabric-core's link (in progress).
use pyo3::prelude::*;

pub fn register(_m: &Bound<'_, PyModule>) -> PyResult<()> {
    Ok(())
}
