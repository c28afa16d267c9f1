//! `emulator._core.pfcwd`: bindings of fabric-core's pfcwd (in progress).
use pyo3::prelude::*;

pub fn register(_m: &Bound<'_, PyModule>) -> PyResult<()> {
    Ok(())
}
