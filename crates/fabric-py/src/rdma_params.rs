//! `emulator._core.rdma_params`: bindings of fabric-core's rdma_params (in progress).
use pyo3::prelude::*;

pub fn register(_m: &Bound<'_, PyModule>) -> PyResult<()> {
    Ok(())
}
