//! `emulator._core.roce`: RoCEv2 frames.
//!
//! Frames come in as bytes (borrowed), bytearray or memoryview (copied once); frames go out as bytes. Packets
//! go in and come out as the compiled `Packet` (read in place going in); a decoded packet's payload is a copy
//! of the frame's (the compiled `Packet` holds its payload as bytes).
use std::net::Ipv4Addr;

use fabric_core::wire::mac::{mac_bytes, mac_text, Mac};
use fabric_core::wire::roce as core;
use fabric_core::wire::transport::Packet as CorePacket;
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyType};

use crate::transport::Packet;

/// Calls `f` on the bytes of `obj`: a bytes object borrowed in place, any other buffer (bytearray,
/// memoryview) copied once.
pub(crate) fn with_bytes<R>(obj: &Bound<'_, PyAny>, f: impl FnOnce(&[u8]) -> R) -> PyResult<R> {
    if let Ok(bytes) = obj.cast::<PyBytes>() {
        return Ok(f(bytes.as_bytes()));
    }
    let copy = PyBuffer::<u8>::get(obj)?.to_vec(obj.py())?;
    Ok(f(&copy))
}

/// Calls `f` on the headers of `obj`, a compiled `Packet` (a TypeError for anything else), with its `payload`
/// empty, and on its payload, without copying it.
pub(crate) fn with_packet<R>(
    obj: &Bound<'_, PyAny>,
    f: impl FnOnce(&CorePacket, &[u8]) -> R,
) -> PyResult<R> {
    let packet = obj.cast::<Packet>()?.borrow();
    let headers = CorePacket {
        opcode: packet.opcode,
        dest_qp: packet.dest_qp,
        psn: packet.psn,
        ack_req: packet.ack_req,
        solicited: packet.solicited,
        pkey: packet.pkey,
        va: packet.va,
        rkey: packet.rkey,
        dma_len: packet.dma_len,
        imm: packet.imm,
        syndrome: packet.syndrome,
        msn: packet.msn,
        payload: Vec::new(),
        ecn_ce: packet.ecn_ce,
    };
    Ok(f(&headers, &packet.payload))
}

/// A compiled `Packet` from decoded headers and the payload's bytes.
pub(crate) fn packet_with_payload(
    py: Python<'_>,
    mut headers: CorePacket,
    payload: &[u8],
) -> PyResult<Py<Packet>> {
    headers.payload = payload.to_vec();
    Py::new(py, Packet::from_core(headers))
}

/// A MAC's 6 bytes from its text, or a ValueError.
pub(crate) fn parse_mac(text: &str) -> PyResult<Mac> {
    mac_bytes(text).ok_or_else(|| PyValueError::new_err(format!("not a MAC address: {text:?}")))
}

/// An IPv4 address from its dotted text, with the exception type of Python's `ipaddress`.
fn parse_ipv4(py: Python<'_>, text: &str) -> PyResult<[u8; 4]> {
    match text.parse::<Ipv4Addr>() {
        Ok(address) => Ok(address.octets()),
        Err(_) => {
            let error = py.import("ipaddress")?.getattr("AddressValueError")?;
            Err(PyErr::from_value(error.call1((format!(
                "{text:?} does not appear to be an IPv4 address"
            ),))?))
        }
    }
}

/// Encodes packets of one flow (one source to one destination) as frames; see the core's `Framer`.
#[pyclass(module = "emulator._core.roce")]
pub struct Framer {
    framer: core::Framer,
    /// The frame being built, reused from one encode to the next.
    scratch: Vec<u8>,
}

#[pymethods]
impl Framer {
    #[new]
    #[pyo3(signature = (src_mac, dst_mac, src_ip, dst_ip, src_port, dscp=core::DATA_DSCP.into(), ttl=64))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        src_mac: &str,
        dst_mac: &str,
        src_ip: &str,
        dst_ip: &str,
        src_port: i64,
        dscp: i64,
        ttl: i64,
    ) -> PyResult<Self> {
        let refused = || {
            PyValueError::new_err(
                core::FramerError {
                    dscp,
                    ttl,
                    port: src_port,
                }
                .to_string(),
            )
        };
        let (Ok(port), Ok(dscp_), Ok(ttl_)) = (
            u16::try_from(src_port),
            u8::try_from(dscp),
            u8::try_from(ttl),
        ) else {
            return Err(refused());
        };
        if dscp_ >= 64 || ttl_ == 0 {
            return Err(refused());
        }
        let (src, dst) = (parse_ipv4(py, src_ip)?, parse_ipv4(py, dst_ip)?);
        let (dst_mac, src_mac) = (parse_mac(dst_mac)?, parse_mac(src_mac)?);
        let framer = core::Framer::new(src_mac, dst_mac, src, dst, port, dscp_, ttl_)
            .map_err(|error| PyValueError::new_err(error.to_string()))?;
        Ok(Framer {
            framer,
            scratch: Vec::new(),
        })
    }

    /// The Ethernet frame of `packet`, with its IP checksum and ICRC (UDP checksum zero).
    fn encode<'py>(
        &mut self,
        py: Python<'py>,
        packet: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        self.scratch.clear();
        let (framer, scratch) = (&mut self.framer, &mut self.scratch);
        with_packet(packet, |headers, payload| {
            framer.encode_with_payload(headers, payload, scratch)
        })?
        .map_err(encode_error(py))?;
        Ok(PyBytes::new(py, &self.scratch))
    }
}

/// The exception for a packet that cannot be framed: ValueError, or struct.error for a datagram too
/// long for the IPv4 total length (struct.pack's refusal there).
pub(crate) fn encode_error(py: Python<'_>) -> impl Fn(core::EncodeError) -> PyErr + '_ {
    move |error| match error {
        core::EncodeError::TooLong { .. } => struct_error(py, error.to_string()),
        _ => PyValueError::new_err(error.to_string()),
    }
}

/// Python's `struct.error` with `message`.
fn struct_error(py: Python<'_>, message: String) -> PyErr {
    let error_type = py
        .import("struct")
        .and_then(|module| module.getattr("error"))
        .and_then(|error| error.cast_into::<PyType>().map_err(PyErr::from));
    match error_type {
        Ok(error_type) => PyErr::from_type(error_type, message),
        Err(err) => err,
    }
}

/// BTH and extension headers of `packet`, BTH byte 4 all ones as the ICRC sees it.
#[pyfunction]
fn pack_transport<'py>(
    py: Python<'py>,
    packet: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyByteArray>> {
    let headers = with_packet(packet, |headers, payload| {
        core::pack_transport(headers, payload.len())
    })?
    .map_err(encode_error(py))?;
    Ok(PyByteArray::new(py, headers.as_bytes()))
}

/// The packet whose BTH starts at `bth_at` and whose payload and pad end at `end`, else None.
#[pyfunction]
fn unpack_transport(
    py: Python<'_>,
    frame: &Bound<'_, PyAny>,
    bth_at: usize,
    end: usize,
) -> PyResult<Option<Py<Packet>>> {
    with_bytes(frame, |frame| {
        match core::unpack_transport(frame, bth_at, end) {
            Some((headers, payload)) => {
                packet_with_payload(py, headers, frame.get(payload).unwrap_or_default()).map(Some)
            }
            None => Ok(None),
        }
    })?
}

/// A received `Packet` and the addressing the RNIC needs to answer it.
#[pyclass(module = "emulator._core.roce")]
pub struct Decoded {
    #[pyo3(get, set)]
    packet: Py<Packet>,
    #[pyo3(get, set)]
    src_mac: String,
    #[pyo3(get, set)]
    src_ip: String,
    #[pyo3(get, set)]
    dst_ip: String,
    #[pyo3(get, set)]
    src_port: u16,
    #[pyo3(get, set)]
    icrc_ok: bool,
}

#[pymethods]
impl Decoded {
    #[new]
    fn new(
        packet: Py<Packet>,
        src_mac: String,
        src_ip: String,
        dst_ip: String,
        src_port: u16,
        icrc_ok: bool,
    ) -> Self {
        Decoded {
            packet,
            src_mac,
            src_ip,
            dst_ip,
            src_port,
            icrc_ok,
        }
    }

    fn __eq__(&self, py: Python<'_>, other: PyRef<'_, Self>) -> PyResult<bool> {
        Ok((
            &self.src_mac,
            &self.src_ip,
            &self.dst_ip,
            self.src_port,
            self.icrc_ok,
        ) == (
            &other.src_mac,
            &other.src_ip,
            &other.dst_ip,
            other.src_port,
            other.icrc_ok,
        ) && self.packet.bind(py).eq(other.packet.bind(py))?)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!(
            "Decoded(packet={}, src_mac='{}', src_ip='{}', dst_ip='{}', src_port={}, icrc_ok={})",
            self.packet.bind(py).repr()?,
            self.src_mac,
            self.src_ip,
            self.dst_ip,
            self.src_port,
            if self.icrc_ok { "True" } else { "False" }
        ))
    }
}

/// The ICRC a RoCEv2/IPv4 Ethernet frame should carry (as an integer); ValueError for anything else.
#[pyfunction]
fn icrc(frame: &Bound<'_, PyAny>) -> PyResult<u32> {
    with_bytes(frame, core::icrc)?.ok_or_else(|| PyValueError::new_err("not a RoCEv2/IPv4 frame"))
}

/// The packet in a RoCEv2/IPv4 frame, or None if it is not one we speak; never raises on garbage.
#[pyfunction]
fn decode(py: Python<'_>, frame: &Bound<'_, PyAny>) -> PyResult<Option<Decoded>> {
    with_bytes(frame, |frame| {
        let Some(decoded) = core::decode(frame) else {
            return Ok(None);
        };
        let payload = frame.get(decoded.payload).unwrap_or_default();
        Ok(Some(Decoded {
            packet: packet_with_payload(py, decoded.packet, payload)?,
            src_mac: mac_text(&decoded.src_mac),
            src_ip: Ipv4Addr::from(decoded.src_ip).to_string(),
            dst_ip: Ipv4Addr::from(decoded.dst_ip).to_string(),
            src_port: decoded.src_port,
            icrc_ok: decoded.icrc_ok,
        }))
    })?
}

/// Fills `emulator._core.roce` with the Python module's public names.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("ROCE_PORT", core::ROCE_PORT)?;
    m.add("DATA_DSCP", core::DATA_DSCP)?;
    m.add("CNP_DSCP", core::CNP_DSCP)?;
    m.add("ETH_IPV4", PyBytes::new(py, &core::ETH_IPV4))?;
    m.add("IPPROTO_UDP", core::IPPROTO_UDP)?;
    m.add("ECT0", core::ECT0)?;
    m.add("ECN_CE", core::ECN_CE)?;
    m.add("IP_DF", core::IP_DF)?;
    m.add("BECN", core::BECN)?;
    m.add("CNP_BODY_LEN", core::CNP_BODY_LEN)?;
    m.add("IP_LEN", core::IP_LEN)?;
    m.add("UDP_LEN", core::UDP_LEN)?;
    m.add("BTH_LEN", core::BTH_LEN)?;
    m.add("ICRC_LEN", core::ICRC_LEN)?;
    m.add("IP_AT", core::IP_AT)?;
    m.add("MIN_FRAME", core::MIN_FRAME)?;
    m.add_class::<Framer>()?;
    m.add_class::<Decoded>()?;
    m.add_function(wrap_pyfunction!(pack_transport, m)?)?;
    m.add_function(wrap_pyfunction!(unpack_transport, m)?)?;
    m.add_function(wrap_pyfunction!(icrc, m)?)?;
    m.add_function(wrap_pyfunction!(decode, m)?)?;
    Ok(())
}
