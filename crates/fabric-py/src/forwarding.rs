//! `emulator._core.forwarding`: the switch's per-frame decisions on bytes.
//!
//! A frame too short for the bytes a function reads raises IndexError, as the Python module's indexing does
//! (its callers check `ipv4_ok` first); the frames out are written straight into new `bytes`.
use fabric_core::model::forwarding as core;
use fabric_core::model::forwarding::RouteError;
use fabric_core::wire::mac::{Mac, ETH_LEN};
use pyo3::exceptions::{PyIndexError, PyValueError, PyZeroDivisionError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

fn too_short() -> PyErr {
    PyIndexError::new_err("index out of range: the frame is too short")
}

/// A MAC address given as bytes; ValueError unless it is 6 of them.
pub fn mac_of(raw: &[u8]) -> PyResult<Mac> {
    raw.try_into()
        .map_err(|_| PyValueError::new_err(format!("a MAC address is 6 bytes, not {}", raw.len())))
}

/// Whether an IPv4 frame has a header the functions below may index.
#[pyfunction]
fn ipv4_ok(frame: &[u8]) -> bool {
    core::ipv4_ok(frame)
}

/// Which of `choices` equal-cost ports this IPv4 frame's flow takes (zlib's CRC-32 seeded with `seed`).
#[pyfunction]
fn ecmp_index(frame: &[u8], seed: &Bound<'_, PyAny>, choices: i64) -> PyResult<usize> {
    // zlib.crc32 takes its starting value modulo 2**32, negative seeds included.
    let seed: u32 = seed.bitand(0xFFFF_FFFFu32)?.extract()?;
    if choices == 0 {
        return Err(PyZeroDivisionError::new_err("integer modulo by zero"));
    }
    let choices = usize::try_from(choices)
        .map_err(|_| PyValueError::new_err(format!("choices {choices}: expected at least 1")))?;
    core::ecmp_index(frame, seed, choices).ok_or_else(too_short)
}

/// `frame` as it leaves a router: new MACs, TTL - 1, checksum fixed; None if the TTL has run out.
#[pyfunction]
fn routed<'py>(
    py: Python<'py>,
    frame: &[u8],
    src_mac: &[u8],
    dst_mac: &[u8],
) -> PyResult<Option<Bound<'py, PyBytes>>> {
    let (src, dst) = (mac_of(src_mac)?, mac_of(dst_mac)?);
    match frame.get(22) {
        None => return Err(too_short()),
        Some(&ttl) if ttl <= 1 => return Ok(None),
        Some(_) => {}
    }
    let mut failure = None;
    let out = PyBytes::new_with(py, frame.len(), |out| {
        out.copy_from_slice(frame);
        failure = core::route_in_place(out, &src, &dst).err();
        Ok(())
    })?;
    match failure {
        None => Ok(Some(out)),
        Some(RouteError::TtlExpired) => Ok(None),
        Some(RouteError::TooShort) => Err(too_short()),
    }
}

/// The traffic class of an IPv4 frame: DSCP >> 3.
#[pyfunction]
fn priority(frame: &[u8]) -> PyResult<usize> {
    core::priority(frame).ok_or_else(too_short)
}

/// A proxy-ARP reply to a request for a fabric address, else None.
#[pyfunction]
fn arp_reply<'py>(
    py: Python<'py>,
    frame: &[u8],
    port_mac: &[u8],
) -> PyResult<Option<Bound<'py, PyBytes>>> {
    let mac = mac_of(port_mac)?;
    Ok(core::arp_reply(frame, &mac).map(|reply| PyBytes::new(py, &reply)))
}

/// Whether an IPv4 frame is ECN-capable (ECT(0) or ECT(1)).
#[pyfunction]
fn is_ect(frame: &[u8]) -> PyResult<bool> {
    core::is_ect(frame).ok_or_else(too_short)
}

/// An ECT IPv4 frame with its ECN bits set to CE and the checksum fixed.
#[pyfunction]
fn mark_ce<'py>(py: Python<'py>, frame: &[u8]) -> PyResult<Bound<'py, PyBytes>> {
    let mut marked = true;
    let out = PyBytes::new_with(py, frame.len(), |out| {
        out.copy_from_slice(frame);
        marked = core::mark_ce_in_place(out);
        Ok(())
    })?;
    if marked {
        Ok(out)
    } else {
        Err(too_short())
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("ETH_IPV4", PyBytes::new(py, &core::ETH_IPV4))?;
    m.add("ETH_ARP", PyBytes::new(py, &core::ETH_ARP))?;
    m.add("ETH_CONTROL", PyBytes::new(py, &core::ETH_CONTROL))?;
    m.add("IPPROTO_TCP", core::IPPROTO_TCP)?;
    m.add("IPPROTO_UDP", core::IPPROTO_UDP)?;
    m.add("IPV4_MIN", core::IPV4_MIN)?;
    m.add("ETH_LEN", ETH_LEN)?;
    m.add_function(wrap_pyfunction!(ipv4_ok, m)?)?;
    m.add_function(wrap_pyfunction!(ecmp_index, m)?)?;
    m.add_function(wrap_pyfunction!(routed, m)?)?;
    m.add_function(wrap_pyfunction!(priority, m)?)?;
    m.add_function(wrap_pyfunction!(arp_reply, m)?)?;
    m.add_function(wrap_pyfunction!(is_ect, m)?)?;
    m.add_function(wrap_pyfunction!(mark_ce, m)?)?;
    Ok(())
}
