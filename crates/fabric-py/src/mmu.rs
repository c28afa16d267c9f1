//! `emulator._core.mmu`: bindings of fabric-core's mmu (in progress).
use pyo3::prelude::*;

pub fn register(_m: &Bound<'_, PyModule>) -> PyResult<()> {
    Ok(())
}
