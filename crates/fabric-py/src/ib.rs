//! `emulator._core.ib`: bindings of fabric-core's ib (in progress).
use pyo3::prelude::*;

pub fn register(_m: &Bound<'_, PyModule>) -> PyResult<()> {
    Ok(())
}
