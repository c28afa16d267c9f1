//! `emulator._core.pfc`: 802.1Qbb frames.
use fabric_core::wire::pfc;
use pyo3::exceptions::{PyValueError, PyZeroDivisionError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use std::collections::BTreeMap;

/// A PFC frame from `src_mac` enabling each priority in `quanta` ({priority: quanta}).
#[pyfunction]
fn encode_pfc<'py>(
    py: Python<'py>,
    src_mac: &[u8],
    quanta: BTreeMap<i64, i64>,
) -> PyResult<Bound<'py, PyBytes>> {
    let src: [u8; 6] = src_mac.try_into().map_err(|_| {
        PyValueError::new_err(format!("a MAC address is 6 bytes, not {}", src_mac.len()))
    })?;
    let mut fields = [None; pfc::PRIORITIES];
    for (&priority, &value) in &quanta {
        let slot = usize::try_from(priority)
            .ok()
            .and_then(|p| fields.get_mut(p));
        match (slot, u16::try_from(value)) {
            (Some(slot), Ok(value)) => *slot = Some(value),
            _ => {
                return Err(PyValueError::new_err(format!(
                    "bad PFC entry: priority {priority}, quanta {value}"
                )))
            }
        }
    }
    Ok(PyBytes::new(py, &pfc::encode_pfc(&src, &fields)))
}

/// {priority: quanta} of the enabled classes of a PFC frame, else None.
#[pyfunction]
fn decode_pfc<'py>(py: Python<'py>, frame: &[u8]) -> PyResult<Option<Bound<'py, PyDict>>> {
    let Some(quanta) = pfc::decode_pfc(frame) else {
        return Ok(None);
    };
    let out = PyDict::new(py);
    for (priority, value) in quanta.iter().enumerate() {
        if let Some(value) = value {
            out.set_item(priority, value)?;
        }
    }
    Ok(Some(out))
}

/// How long `quanta` pause a port of `rate_bps`: quanta x 512 bit times.
#[pyfunction]
fn pause_ns(quanta: u64, rate_bps: u64) -> PyResult<u64> {
    if rate_bps == 0 {
        return Err(PyZeroDivisionError::new_err("a port's rate is 0 bit/s"));
    }
    Ok(pfc::pause_ns(quanta, rate_bps))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("PFC_DST", PyBytes::new(py, &pfc::PFC_DST))?;
    m.add("ETHERTYPE_MAC_CONTROL", pfc::ETHERTYPE_MAC_CONTROL)?;
    m.add(
        "ETH_MAC_CONTROL",
        PyBytes::new(py, &pfc::ETHERTYPE_MAC_CONTROL.to_be_bytes()),
    )?;
    m.add(
        "OPCODE_PFC",
        PyBytes::new(py, &pfc::OPCODE_PFC.to_be_bytes()),
    )?;
    m.add("PRIORITIES", pfc::PRIORITIES)?;
    m.add("MAX_QUANTA", pfc::MAX_QUANTA)?;
    m.add("MIN_FRAME", pfc::MIN_FRAME)?;
    m.add_function(wrap_pyfunction!(encode_pfc, m)?)?;
    m.add_function(wrap_pyfunction!(decode_pfc, m)?)?;
    m.add_function(wrap_pyfunction!(pause_ns, m)?)?;
    Ok(())
}
