//! `emulator._core.fidelity`: bindings of fabric-core's fidelity (in progress).
use pyo3::prelude::*;

pub fn register(_m: &Bound<'_, PyModule>) -> PyResult<()> {
    Ok(())
}
