//! `emulator._core.dcqcn`: bindings of fabric-core's dcqcn (in progress).
use pyo3::prelude::*;

pub fn register(_m: &Bound<'_, PyModule>) -> PyResult<()> {
    Ok(())
}
