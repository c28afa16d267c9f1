//! `emulator._core.credits`: bindings of fabric-core's credits (in progress).
use pyo3::prelude::*;

pub fn register(_m: &Bound<'_, PyModule>) -> PyResult<()> {
    Ok(())
}
