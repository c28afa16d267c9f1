//! `emulator._core.mac`: MAC text and bytes.
use fabric_core::wire::mac;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// `02:00:00:00:01:00` -> 6 bytes; ValueError for anything else.
#[pyfunction]
fn mac_bytes<'py>(py: Python<'py>, text: &str) -> PyResult<Bound<'py, PyBytes>> {
    match mac::mac_bytes(text) {
        Some(raw) => Ok(PyBytes::new(py, &raw)),
        None => Err(PyValueError::new_err(format!(
            "not a MAC address: {text:?}"
        ))),
    }
}

/// 6 bytes -> `02:00:00:00:01:00`.
#[pyfunction]
fn mac_text(raw: &[u8]) -> PyResult<String> {
    let raw: mac::Mac = raw.try_into().map_err(|_| {
        PyValueError::new_err(format!("a MAC address is 6 bytes, not {}", raw.len()))
    })?;
    Ok(mac::mac_text(&raw))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("ETH_LEN", mac::ETH_LEN)?;
    m.add_function(wrap_pyfunction!(mac_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(mac_text, m)?)?;
    Ok(())
}
