//! `emulator._core.uet`: UET frames (PDS and SES over UDP/IPv4) for tests, captures and analysis.
use fabric_core::wire::uet::{self, PdsKind, UetFramer, UetPacket};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

const KINDS: [(&str, PdsKind); 4] = [
    ("request", PdsKind::Request),
    ("ack", PdsKind::Ack),
    ("nack", PdsKind::Nack),
    ("credit", PdsKind::Credit),
];

fn address<const N: usize>(what: &str, bytes: &[u8]) -> PyResult<[u8; N]> {
    bytes
        .try_into()
        .map_err(|_| PyValueError::new_err(format!("{what} is {N} bytes, not {}", bytes.len())))
}

/// The packet a dict describes: `kind` ("request", "ack", "nack", "credit") and any of the fields `decode`
/// gives.
fn packet_of(fields: &Bound<'_, PyDict>) -> PyResult<UetPacket> {
    let mut packet = UetPacket::default();
    for (key, value) in fields.iter() {
        let key: String = key.extract()?;
        match key.as_str() {
            "kind" => {
                let name: String = value.extract()?;
                packet.kind = KINDS
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|&(_, k)| k)
                    .ok_or_else(|| PyValueError::new_err(format!("no UET packet kind {name:?}")))?;
            }
            "spdcid" => packet.spdcid = value.extract()?,
            "dpdcid" => packet.dpdcid = value.extract()?,
            "psn" => packet.psn = value.extract()?,
            "ack_request" => packet.ack_request = value.extract()?,
            "retransmit" => packet.retransmit = value.extract()?,
            "cack_psn" => packet.cack_psn = value.extract()?,
            "sack_base" => packet.sack_base = value.extract()?,
            "sack_bitmap" => packet.sack_bitmap = value.extract()?,
            "ecn_echo" => packet.ecn_echo = value.extract()?,
            "out_of_order" => packet.out_of_order = value.extract()?,
            "nack_code" => packet.nack_code = value.extract()?,
            "message_id" => packet.message_id = value.extract()?,
            "eom" => packet.eom = value.extract()?,
            "remote_addr" => packet.remote_addr = value.extract()?,
            "rkey" => packet.rkey = value.extract()?,
            "offset" => packet.offset = value.extract()?,
            "length" => packet.length = value.extract()?,
            "imm" => packet.imm = value.extract()?,
            "send" => packet.send = value.extract()?,
            "ev" => packet.ev = value.extract()?,
            "credit_target" => packet.credit_target = value.extract()?,
            "credit" => packet.credit = value.extract()?,
            // what decode reports of a frame and encode does not choose
            "som" | "ecn_ce" | "trimmed" => {}
            _ => {
                return Err(PyValueError::new_err(format!(
                    "no UET packet field {key:?}"
                )))
            }
        }
    }
    Ok(packet)
}

/// The frame of a packet (a dict of its fields) with `payload`, from `src_mac`/`src_ip` to `dst_mac`/`dst_ip`.
#[pyfunction]
fn encode<'py>(
    py: Python<'py>,
    src_mac: &[u8],
    dst_mac: &[u8],
    src_ip: &[u8],
    dst_ip: &[u8],
    fields: &Bound<'py, PyDict>,
    payload: &[u8],
) -> PyResult<Bound<'py, PyBytes>> {
    let packet = packet_of(fields)?;
    let mut framer = UetFramer::new(
        address("a MAC address", src_mac)?,
        address("a MAC address", dst_mac)?,
        address("an IPv4 address", src_ip)?,
        address("an IPv4 address", dst_ip)?,
    );
    let mut out = Vec::new();
    framer
        .encode(&packet, payload, &mut out)
        .map_err(|error| PyValueError::new_err(error.to_string()))?;
    Ok(PyBytes::new(py, &out))
}

/// A UET frame's fields (`payload` the payload's bytes, `checksum_ok` the UDP checksum's verdict), else None.
#[pyfunction]
fn decode<'py>(py: Python<'py>, frame: &[u8]) -> PyResult<Option<Bound<'py, PyDict>>> {
    let Some(decoded) = uet::decode(frame) else {
        return Ok(None);
    };
    let p = &decoded.packet;
    let out = PyDict::new(py);
    let kind = KINDS
        .iter()
        .find(|(_, k)| *k == p.kind)
        .map_or("request", |(n, _)| n);
    out.set_item("kind", kind)?;
    out.set_item("spdcid", p.spdcid)?;
    out.set_item("dpdcid", p.dpdcid)?;
    out.set_item("psn", p.psn)?;
    out.set_item("ack_request", p.ack_request)?;
    out.set_item("retransmit", p.retransmit)?;
    out.set_item("cack_psn", p.cack_psn)?;
    out.set_item("sack_base", p.sack_base)?;
    out.set_item("sack_bitmap", p.sack_bitmap)?;
    out.set_item("ecn_echo", p.ecn_echo)?;
    out.set_item("out_of_order", p.out_of_order)?;
    out.set_item("nack_code", p.nack_code)?;
    out.set_item("message_id", p.message_id)?;
    out.set_item("som", p.som)?;
    out.set_item("eom", p.eom)?;
    out.set_item("remote_addr", p.remote_addr)?;
    out.set_item("rkey", p.rkey)?;
    out.set_item("offset", p.offset)?;
    out.set_item("length", p.length)?;
    out.set_item("imm", p.imm)?;
    out.set_item("send", p.send)?;
    out.set_item("ev", p.ev)?;
    out.set_item("credit_target", p.credit_target)?;
    out.set_item("credit", p.credit)?;
    out.set_item("ecn_ce", p.ecn_ce)?;
    out.set_item("trimmed", p.trimmed)?;
    out.set_item(
        "payload",
        PyBytes::new(py, frame.get(decoded.payload).unwrap_or(&[])),
    )?;
    out.set_item("checksum_ok", decoded.checksum_ok)?;
    Ok(Some(out))
}

/// `frame` trimmed as a switch out of room trims it, or None if it is not a trimmable UET request.
#[pyfunction]
fn trim<'py>(py: Python<'py>, frame: &[u8]) -> Option<Bound<'py, PyBytes>> {
    let mut out = frame.to_vec();
    uet::trim_in_place(&mut out).then(|| PyBytes::new(py, &out))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("UET_PORT", uet::UET_PORT)?;
    m.add("EV_PORT_BASE", uet::EV_PORT_BASE)?;
    m.add("DATA_DSCP", uet::DATA_DSCP)?;
    m.add("CONTROL_DSCP", uet::CONTROL_DSCP)?;
    m.add("TRIMMED_DSCP", uet::TRIMMED_DSCP)?;
    m.add("REQUEST_HEADERS", uet::REQUEST_HEADERS)?;
    m.add("CC_REQUEST_HEADERS", uet::CC_REQUEST_HEADERS)?;
    m.add(
        "ACK_FRAME",
        uet::REQUEST_HEADERS - uet::PDS_REQUEST_LEN - uet::SES_LEN + uet::ACK_LEN,
    )?;
    m.add("NACK_TRIMMED", uet::nack::TRIMMED)?;
    m.add_function(wrap_pyfunction!(encode, m)?)?;
    m.add_function(wrap_pyfunction!(decode, m)?)?;
    m.add_function(wrap_pyfunction!(trim, m)?)?;
    Ok(())
}
