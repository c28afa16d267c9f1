//! `emulator._core.forwarding`: bindings of fabric-core's forwarding (in progress).
use pyo3::prelude::*;

pub fn register(_m: &Bound<'_, PyModule>) -> PyResult<()> {
    Ok(())
}
