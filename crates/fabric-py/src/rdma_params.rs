//! `emulator._core.rdma_params`: path MTUs, per-packet overheads, the largest region.
use fabric_core::model::rdma_params as core;
use pyo3::exceptions::PyZeroDivisionError;
use pyo3::prelude::*;

/// Bytes one RDMA WRITE of `length` puts on a link: path-MTU packets, each with its headers.
#[pyfunction]
fn message_wire_bytes(length: u64, mtu: u64, native_ib: bool) -> PyResult<u64> {
    if mtu == 0 {
        return Err(PyZeroDivisionError::new_err(
            "a path MTU is more than 0 bytes",
        ));
    }
    Ok(core::message_wire_bytes(length, mtu, native_ib))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add(
        "PATHS_MTU",
        pyo3::types::PyTuple::new(m.py(), core::PATHS_MTU)?,
    )?;
    m.add("MAX_MR_BYTES", core::MAX_MR_BYTES)?;
    m.add("RETH_LEN", core::RETH_LEN)?;
    m.add("IMMDT_LEN", core::IMMDT_LEN)?;
    m.add("ROCE_OVERHEAD", core::ROCE_OVERHEAD)?;
    m.add("IB_OVERHEAD", core::IB_OVERHEAD)?;
    m.add_function(wrap_pyfunction!(message_wire_bytes, m)?)?;
    Ok(())
}
