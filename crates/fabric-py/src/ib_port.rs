//! `emulator._core.ib_port`: a host's IB port (fabric-core's `model::ib_port`) under the names
//! the RNIC agent uses: `IbPort` and the `IbFramer` of each QP.
//!
//! `port.credits` is a view of the port's own credit state: a compiled `CreditLink`
//! reading and driving it.
use fabric_core::model::credits::CreditError;
use fabric_core::model::ib_port as core;
use fabric_core::wire::ib::{encode_data_with_payload, Lrh};
use fabric_core::wire::mac::mac_text;
use pyo3::exceptions::{PyIndexError, PyRuntimeError, PyValueError, PyZeroDivisionError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};

use crate::credits::{CreditLink, Home};
use crate::roce::{packet_with_payload, parse_mac, with_bytes, with_packet};

/// The Python exception of a refused port, framer or admission: its type and words.
fn error(err: core::IbPortError) -> PyErr {
    match err {
        core::IbPortError::Credits(err) => crate::credits::error(err),
        core::IbPortError::ZeroRate => PyZeroDivisionError::new_err(err.to_string()),
        core::IbPortError::Short => PyIndexError::new_err(err.to_string()),
        _ => PyValueError::new_err(err.to_string()),
    }
}

/// A byte count as the credits take it, or their refusal of a packet of no bytes.
fn buffer(nbytes: i64) -> PyResult<u64> {
    u64::try_from(nbytes)
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| crate::credits::error(CreditError::EmptyPacket { nbytes }))
}

/// `f` on the credits of a compiled port (for its `credits` view).
pub fn with_link<R>(
    port: &Bound<'_, IbPort>,
    f: impl FnOnce(&mut fabric_core::model::credits::CreditLink) -> R,
) -> PyResult<R> {
    Ok(f(port.try_borrow_mut()?.get_mut()?.credits_mut()))
}

/// LRH-addressed packets, sent only against the switch's credits.
///
/// Built in `__init__`, not `__new__`, so that a Python subclass with its own constructor arguments (the RNIC
/// agent's `IbLink(config, ib)`) can call `super().__init__(...)` as with any Python base class.
#[pyclass(module = "emulator._core.ib_port", subclass)]
pub struct IbPort {
    port: Option<core::IbPort>,
}

impl IbPort {
    fn get(&self) -> PyResult<&core::IbPort> {
        self.port.as_ref().ok_or_else(uninitialized)
    }

    fn get_mut(&mut self) -> PyResult<&mut core::IbPort> {
        self.port.as_mut().ok_or_else(uninitialized)
    }
}

/// A subclass that never called `IbPort.__init__`.
fn uninitialized() -> PyErr {
    PyRuntimeError::new_err("IbPort.__init__ was not called")
}

#[pymethods]
impl IbPort {
    #[new]
    #[pyo3(signature = (*_args, **_kwargs))]
    fn new(_args: &Bound<'_, PyTuple>, _kwargs: Option<&Bound<'_, PyDict>>) -> Self {
        IbPort { port: None }
    }

    #[allow(clippy::too_many_arguments)]
    fn __init__(
        &mut self,
        mac: &str,
        gateway_mac: &str,
        lid: u16,
        lids: &Bound<'_, PyDict>,
        sl: u8,
        vl: u8,
        vls: usize,
        capacity: i64,
        peer_capacity: i64,
        rate_bps: u64,
        frame_bytes: u64,
        fc_floor_ns: u64,
    ) -> PyResult<()> {
        let lids = lids
            .iter()
            .map(|(ip, lid)| Ok((ip.extract::<String>()?, lid.extract::<u16>()?)))
            .collect::<PyResult<Vec<_>>>()?;
        let config = core::IbPortConfig {
            mac: parse_mac(mac)?,
            gateway_mac: parse_mac(gateway_mac)?,
            lid,
            lids,
            sl,
            vl,
            vls,
            capacity: buffer(capacity)?,
            peer_capacity: buffer(peer_capacity)?,
            rate_bps,
            frame_bytes,
            fc_floor_ns,
        };
        self.port = Some(core::IbPort::new(config).map_err(error)?);
        Ok(())
    }

    #[getter]
    fn mac(&self) -> PyResult<String> {
        Ok(mac_text(self.get()?.mac()))
    }
    #[getter]
    fn gateway_mac(&self) -> PyResult<String> {
        Ok(mac_text(self.get()?.gateway_mac()))
    }
    #[getter]
    fn lid(&self) -> PyResult<u16> {
        Ok(self.get()?.lid())
    }
    #[getter]
    fn sl(&self) -> PyResult<u8> {
        Ok(self.get()?.sl())
    }
    #[getter]
    fn vl(&self) -> PyResult<u8> {
        Ok(self.get()?.vl())
    }
    #[getter]
    fn waiting(&self) -> PyResult<bool> {
        Ok(self.get()?.waiting())
    }
    #[getter]
    fn malformed(&self) -> PyResult<u64> {
        Ok(self.get()?.malformed())
    }
    #[getter]
    fn credit_violations(&self) -> PyResult<u64> {
        Ok(self.get()?.credit_violations())
    }

    /// GID to LID (a fresh dict).
    #[getter]
    fn lids<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let dict = PyDict::new(py);
        for (ip, lid) in self.get()?.lids() {
            dict.set_item(ip, lid)?;
        }
        Ok(dict)
    }

    /// LID to GID (a fresh dict).
    #[getter]
    fn ips<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let dict = PyDict::new(py);
        for (lid, ip) in self.get()?.ips() {
            dict.set_item(lid, ip)?;
        }
        Ok(dict)
    }

    /// The port's credits, a view that reads and drives them.
    #[getter]
    fn credits(slf: &Bound<'_, Self>) -> CreditLink {
        CreditLink::view(Home::Port(slf.clone().unbind()))
    }

    /// The framer of a QP to `remote_ip`, checked to fit: the GID is known and a packet of `mtu` can get credit.
    fn framer(
        slf: &Bound<'_, Self>,
        qpn: u32,
        remote_qpn: u32,
        remote_ip: &str,
        mtu: u64,
    ) -> PyResult<IbFramer> {
        let _ = (qpn, remote_qpn); // the framer's signature: LIDs, not QPNs, address an IB packet
        let dlid = slf.borrow().get()?.framer(remote_ip, mtu).map_err(error)?;
        Ok(IbFramer {
            port: slf.clone().unbind(),
            dlid,
        })
    }

    /// (packet, source GID, CRCs good) of a data packet; None for a link packet (consumed) or garbage (counted).
    fn accept<'py>(
        &mut self,
        py: Python<'py>,
        now: u64,
        frame: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let port = self.get_mut()?;
        with_bytes(frame, |bytes| match port.accept(now, bytes) {
            None => Ok(None),
            Some(accepted) => {
                let payload = bytes
                    .get(accepted.decoded.payload.clone())
                    .unwrap_or_default();
                let packet = packet_with_payload(py, accepted.decoded.packet, payload)?;
                Ok(Some(
                    (packet, accepted.source, accepted.crc_ok).into_pyobject(py)?,
                ))
            }
        })?
    }

    /// Whether the switch has credit for this packet; counts it as sent if so.
    fn admit(&mut self, frame: &Bound<'_, PyAny>) -> PyResult<bool> {
        let port = self.get_mut()?;
        with_bytes(frame, |bytes| port.admit(bytes))?.map_err(error)
    }

    /// The flow-control frames due now.
    fn control_frames<'py>(&mut self, py: Python<'py>, now: u64) -> PyResult<Bound<'py, PyList>> {
        let mut frames = Vec::new();
        self.get_mut()?.control_frames(now, &mut frames);
        PyList::new(py, frames.iter().map(|frame| PyBytes::new(py, frame)))
    }

    fn next_deadline(&mut self) -> PyResult<u64> {
        Ok(self.get_mut()?.next_deadline())
    }

    /// lid, malformed, credit_violations and each VL's credit counters.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        port_stats(py, self.get()?)
    }
}

/// `{"lid", "malformed", "credit_violations", "credits": [per VL]}` of `port` (an RNIC's link stats).
pub(crate) fn port_stats<'py>(
    py: Python<'py>,
    port: &core::IbPort,
) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    dict.set_item("lid", port.lid())?;
    dict.set_item("malformed", port.malformed())?;
    dict.set_item("credit_violations", port.credit_violations())?;
    let credits = port.credits();
    let per_vl = PyList::empty(py);
    for vl in 0..credits.vl_count() {
        if let Some(c) = credits.counters(vl) {
            per_vl.append(crate::credits::counters_dict(py, c)?)?;
        }
    }
    dict.set_item("credits", per_vl)?;
    Ok(dict)
}

/// Native IB framing of one QP: LIDs and SL fixed at connect.
#[pyclass(module = "emulator._core.ib_port")]
pub struct IbFramer {
    #[pyo3(get)]
    port: Py<IbPort>,
    #[pyo3(get)]
    dlid: u16,
}

#[pymethods]
impl IbFramer {
    #[new]
    fn new(port: Py<IbPort>, dlid: u16) -> Self {
        IbFramer { port, dlid }
    }

    /// The frame of `packet` from this port to the QP's peer.
    fn encode<'py>(
        &self,
        py: Python<'py>,
        packet: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let port = self.port.bind(py).borrow();
        let p = port.get()?;
        let lrh = Lrh {
            dlid: self.dlid,
            slid: p.lid(),
            sl: p.sl(),
            vl: p.vl(),
        };
        let mut frame = Vec::new();
        with_packet(packet, |headers, payload| {
            encode_data_with_payload(p.mac(), p.gateway_mac(), &lrh, headers, payload, &mut frame)
        })?
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
        Ok(PyBytes::new(py, &frame))
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<IbPort>()?;
    m.add_class::<IbFramer>()?;
    Ok(())
}
