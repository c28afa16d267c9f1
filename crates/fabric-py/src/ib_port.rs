//! `emulator._core.ib_port`: bindings of fabric-core's ib_port (in progress).
use pyo3::prelude::*;

pub fn register(_m: &Bound<'_, PyModule>) -> PyResult<()> {
    Ok(())
}
