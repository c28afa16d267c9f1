//! `emulator._core.ib`: native IB packets in the 0x88B6 encapsulation.
//!
//! Frames and packets cross as in `emulator._core.roce` (whose helpers these use): bytes borrowed, other
//! buffers copied once, frames out as bytes, packets out as the compiled `Packet` with a copy of the payload.
use fabric_core::wire::ib as core;
use fabric_core::wire::mac::mac_text;
use pyo3::exceptions::{PyIndexError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::roce::{packet_with_payload, parse_mac, with_bytes, with_packet};
use crate::transport::Packet;

/// LRH fields from Python integers: a ValueError (with the values given) for any that does not fit.
fn lrh(dlid: i64, slid: i64, sl: i64, vl: i64) -> PyResult<core::Lrh> {
    let fields = (
        u16::try_from(dlid),
        u16::try_from(slid),
        u8::try_from(sl),
        u8::try_from(vl),
    );
    match fields {
        (Ok(dlid), Ok(slid), Ok(sl), Ok(vl)) if sl < 16 && vl < 16 => {
            Ok(core::Lrh { dlid, slid, sl, vl })
        }
        _ => Err(PyValueError::new_err(
            core::LrhError { dlid, slid, sl, vl }.to_string(),
        )),
    }
}

/// The Ethernet frame of `packet` from LID `slid` to `dlid` on `vl`, with ICRC and VCRC.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn encode_data<'py>(
    py: Python<'py>,
    src_mac: &str,
    dst_mac: &str,
    dlid: i64,
    slid: i64,
    sl: i64,
    vl: i64,
    packet: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyBytes>> {
    let lrh = lrh(dlid, slid, sl, vl)?;
    let (src, dst) = (parse_mac(src_mac)?, parse_mac(dst_mac)?);
    let mut frame = Vec::new();
    with_packet(packet, |headers, payload| {
        core::encode_data_with_payload(&src, &dst, &lrh, headers, payload, &mut frame)
    })?
    .map_err(|error| PyValueError::new_err(error.to_string()))?;
    Ok(PyBytes::new(py, &frame))
}

/// A received `Packet`, its LRH fields and whether its CRCs held.
#[pyclass(module = "emulator._core.ib")]
pub struct IbDecoded {
    #[pyo3(get, set)]
    packet: Py<Packet>,
    #[pyo3(get, set)]
    dlid: u16,
    #[pyo3(get, set)]
    slid: u16,
    #[pyo3(get, set)]
    sl: u8,
    #[pyo3(get, set)]
    vl: u8,
    #[pyo3(get, set)]
    src_mac: String,
    #[pyo3(get, set)]
    icrc_ok: bool,
    #[pyo3(get, set)]
    vcrc_ok: bool,
}

#[pymethods]
impl IbDecoded {
    #[new]
    #[allow(clippy::too_many_arguments)]
    fn new(
        packet: Py<Packet>,
        dlid: u16,
        slid: u16,
        sl: u8,
        vl: u8,
        src_mac: String,
        icrc_ok: bool,
        vcrc_ok: bool,
    ) -> Self {
        IbDecoded {
            packet,
            dlid,
            slid,
            sl,
            vl,
            src_mac,
            icrc_ok,
            vcrc_ok,
        }
    }

    fn __eq__(&self, py: Python<'_>, other: PyRef<'_, Self>) -> PyResult<bool> {
        let fields = |d: &IbDecoded| {
            (
                d.dlid,
                d.slid,
                d.sl,
                d.vl,
                d.src_mac.clone(),
                d.icrc_ok,
                d.vcrc_ok,
            )
        };
        Ok(fields(self) == fields(&other) && self.packet.bind(py).eq(other.packet.bind(py))?)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!(
            "IbDecoded(packet={}, dlid={}, slid={}, sl={}, vl={}, src_mac='{}', icrc_ok={}, vcrc_ok={})",
            self.packet.bind(py).repr()?,
            self.dlid,
            self.slid,
            self.sl,
            self.vl,
            self.src_mac,
            py_bool(self.icrc_ok),
            py_bool(self.vcrc_ok)
        ))
    }
}

fn py_bool(value: bool) -> &'static str {
    if value {
        "True"
    } else {
        "False"
    }
}

/// Where the VCRC of a local-routed SDP frame ends (from LRH.PktLen), or None if it is not one.
#[pyfunction]
fn data_end(frame: &Bound<'_, PyAny>) -> PyResult<Option<usize>> {
    with_bytes(frame, core::data_end)
}

/// Bytes of the IB packet in an SDP frame (LRH.PktLen words and the VCRC); IndexError if the frame is too short
/// to hold PktLen (the error an index past the end raises in Python).
#[pyfunction]
fn packet_size(frame: &Bound<'_, PyAny>) -> PyResult<usize> {
    with_bytes(frame, core::packet_size)?.ok_or_else(|| PyIndexError::new_err("index out of range"))
}

/// The ICRC an SDP frame's packet should carry; ValueError for anything that is not a local-routed IB data frame.
#[pyfunction]
fn icrc_native(frame: &Bound<'_, PyAny>) -> PyResult<u32> {
    with_bytes(frame, core::icrc_native)?.ok_or_else(not_ib_data)
}

/// The VCRC an SDP frame's packet should carry; ValueError for anything that is not a local-routed IB data frame.
#[pyfunction]
fn vcrc(frame: &Bound<'_, PyAny>) -> PyResult<u16> {
    with_bytes(frame, core::vcrc)?.ok_or_else(not_ib_data)
}

fn not_ib_data() -> PyErr {
    PyValueError::new_err("not a native IB data frame")
}

/// The packet of an SDP frame, or None if it is not one we speak; never raises on garbage.
#[pyfunction]
fn decode_data(py: Python<'_>, frame: &Bound<'_, PyAny>) -> PyResult<Option<IbDecoded>> {
    with_bytes(frame, |frame| {
        let Some(decoded) = core::decode_data(frame) else {
            return Ok(None);
        };
        let payload = frame.get(decoded.payload).unwrap_or_default();
        Ok(Some(IbDecoded {
            packet: packet_with_payload(py, decoded.packet, payload)?,
            dlid: decoded.lrh.dlid,
            slid: decoded.lrh.slid,
            sl: decoded.lrh.sl,
            vl: decoded.lrh.vl,
            src_mac: mac_text(&decoded.src_mac),
            icrc_ok: decoded.icrc_ok,
            vcrc_ok: decoded.vcrc_ok,
        }))
    })?
}

/// A switch's egress rewrite: the frame's packet moved to `vl`, its VCRC recomputed; ValueError for a bad VL or
/// anything that is not a local-routed IB data frame.
#[pyfunction]
fn set_vl<'py>(
    py: Python<'py>,
    frame: &Bound<'py, PyAny>,
    vl: i64,
) -> PyResult<Bound<'py, PyBytes>> {
    let refused = || PyValueError::new_err(core::SetVlError { vl }.to_string());
    let vl = u8::try_from(vl).map_err(|_| refused())?;
    with_bytes(frame, |frame| {
        PyBytes::new_with(py, frame.len(), |out| {
            out.copy_from_slice(frame);
            core::set_vl(out, vl).map_err(|_| refused())
        })
    })?
}

/// One flow-control packet for one VL, its fields as on the wire; ValueError for a field that does not fit.
#[pyclass(module = "emulator._core.ib", frozen, eq, hash, from_py_object)]
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct FcPacket(pub core::FcPacket);

#[pymethods]
impl FcPacket {
    #[new]
    fn new(op: i64, fctbs: i64, vl: i64, fccl: i64) -> PyResult<Self> {
        core::FcPacket::new(op, fctbs, vl, fccl)
            .map(FcPacket)
            .map_err(|error| PyValueError::new_err(error.to_string()))
    }

    #[getter]
    fn op(&self) -> u8 {
        self.0.op()
    }

    #[getter]
    fn fctbs(&self) -> u16 {
        self.0.fctbs()
    }

    #[getter]
    fn vl(&self) -> u8 {
        self.0.vl()
    }

    #[getter]
    fn fccl(&self) -> u16 {
        self.0.fccl()
    }

    fn __repr__(&self) -> String {
        let fc = &self.0;
        format!(
            "FcPacket(op={}, fctbs={}, vl={}, fccl={})",
            fc.op(),
            fc.fctbs(),
            fc.vl(),
            fc.fccl()
        )
    }
}

/// A received `FcPacket`, whether its LPCRC held and who sent it.
#[pyclass(module = "emulator._core.ib", frozen, eq, hash, skip_from_py_object)]
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct FcDecoded {
    #[pyo3(get)]
    packet: FcPacket,
    #[pyo3(get)]
    lpcrc_ok: bool,
    #[pyo3(get)]
    src_mac: String,
}

#[pymethods]
impl FcDecoded {
    #[new]
    fn new(packet: FcPacket, lpcrc_ok: bool, src_mac: String) -> Self {
        FcDecoded {
            packet,
            lpcrc_ok,
            src_mac,
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "FcDecoded(packet={}, lpcrc_ok={}, src_mac='{}')",
            self.packet.__repr__(),
            py_bool(self.lpcrc_ok),
            self.src_mac
        )
    }
}

/// The Ethernet frame of a flow-control packet: Op, FCTBS, VL, FCCL, LPCRC.
#[pyfunction]
fn encode_fc<'py>(
    py: Python<'py>,
    src_mac: &str,
    dst_mac: &str,
    fc: PyRef<'py, FcPacket>,
) -> PyResult<Bound<'py, PyBytes>> {
    let (src, dst) = (parse_mac(src_mac)?, parse_mac(dst_mac)?);
    Ok(PyBytes::new(py, &core::encode_fc(&src, &dst, &fc.0)))
}

/// The link packet of an SLP frame, or None (also for a reserved Op); never raises on garbage.
#[pyfunction]
fn decode_fc(frame: &Bound<'_, PyAny>) -> PyResult<Option<FcDecoded>> {
    Ok(
        with_bytes(frame, core::decode_fc)?.map(|decoded| FcDecoded {
            packet: FcPacket(decoded.packet),
            lpcrc_ok: decoded.lpcrc_ok,
            src_mac: mac_text(&decoded.src_mac),
        }),
    )
}

/// Whether an Ethernet frame carries our IB encapsulation (EtherType 0x88B6 and a delimiter).
#[pyfunction]
fn is_ib(frame: &Bound<'_, PyAny>) -> PyResult<bool> {
    with_bytes(frame, core::is_ib)
}

/// IB's VCRC and LPCRC: CRC-16 0x100B reflected, init and final xor 0xFFFF; `crc` continues an earlier one.
#[pyfunction]
#[pyo3(signature = (data, crc=0))]
fn crc16(data: &Bound<'_, PyAny>, crc: u16) -> PyResult<u16> {
    with_bytes(data, |data| core::crc16(crc, data))
}

/// Fills `emulator._core.ib` with the Python module's public names.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("ETHERTYPE_IB", core::ETHERTYPE_IB)?;
    m.add("ETH_IB", PyBytes::new(py, &core::ETH_IB))?;
    m.add("SDP", core::SDP)?;
    m.add("SLP", core::SLP)?;
    m.add("LNH_LOCAL", core::LNH_LOCAL)?;
    m.add("FECN", core::FECN)?;
    m.add("OP_NORMAL", core::OP_NORMAL)?;
    m.add("OP_INIT", core::OP_INIT)?;
    m.add("SLS", core::SLS)?;
    m.add("MANAGEMENT_VL", core::MANAGEMENT_VL)?;
    m.add("MAX_UNICAST_LID", core::MAX_UNICAST_LID)?;
    m.add("LRH_AT", core::LRH_AT)?;
    m.add("LRH_LEN", core::LRH_LEN)?;
    m.add("BTH_LEN", core::BTH_LEN)?;
    m.add("ICRC_LEN", core::ICRC_LEN)?;
    m.add("VCRC_LEN", core::VCRC_LEN)?;
    m.add("FC_LEN", core::FC_LEN)?;
    m.add("BTH_AT", core::BTH_AT)?;
    m.add("MIN_FRAME", core::MIN_FRAME)?;
    m.add("MIN_WORDS", core::MIN_WORDS)?;
    m.add("MAX_WORDS", core::MAX_WORDS)?;
    m.add_class::<IbDecoded>()?;
    m.add_class::<FcPacket>()?;
    m.add_class::<FcDecoded>()?;
    m.add_function(wrap_pyfunction!(crc16, m)?)?;
    m.add_function(wrap_pyfunction!(encode_data, m)?)?;
    m.add_function(wrap_pyfunction!(data_end, m)?)?;
    m.add_function(wrap_pyfunction!(packet_size, m)?)?;
    m.add_function(wrap_pyfunction!(icrc_native, m)?)?;
    m.add_function(wrap_pyfunction!(vcrc, m)?)?;
    m.add_function(wrap_pyfunction!(decode_data, m)?)?;
    m.add_function(wrap_pyfunction!(set_vl, m)?)?;
    m.add_function(wrap_pyfunction!(encode_fc, m)?)?;
    m.add_function(wrap_pyfunction!(decode_fc, m)?)?;
    m.add_function(wrap_pyfunction!(is_ib, m)?)?;
    Ok(())
}
