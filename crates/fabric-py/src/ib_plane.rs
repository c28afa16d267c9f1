//! `emulator._core.ib_plane`: bindings of fabric-core's ib_plane (in progress).
use pyo3::prelude::*;

pub fn register(_m: &Bound<'_, PyModule>) -> PyResult<()> {
    Ok(())
}
