//! `emulator._core.rx_pipeline`: bindings of fabric-core's rx_pipeline (in progress).
use pyo3::prelude::*;

pub fn register(_m: &Bound<'_, PyModule>) -> PyResult<()> {
    Ok(())
}
