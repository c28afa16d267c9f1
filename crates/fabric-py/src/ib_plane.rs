//! `emulator._core.ib_plane`: a switch's IB plane (fabric-core's `model::ib_plane`) under the names
//! the switch agent uses.
//!
//! `head(port)` gives the same bytes object until the frame is sent or refused (the agent and the tests rely on
//! `ib.head(p) is head`): the plane numbers its frames and the binding keeps each port's last head. `links[i]`
//! are views of the plane's own credit state; `queues`, `control` and `drops` are fresh copies.
use fabric_core::model::credits::CreditError;
use fabric_core::model::ib_plane as core;
use fabric_core::wire::mac::mac_text;
use pyo3::exceptions::{PyIndexError, PyKeyError, PyValueError, PyZeroDivisionError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

use crate::credits::{CreditLink, Home};
use crate::roce::{parse_mac, with_bytes};

/// The Python exception of a refused plane or operation: its type and words.
fn error(err: core::IbPlaneError) -> PyErr {
    match err {
        core::IbPlaneError::Credits(err) => crate::credits::error(err),
        core::IbPlaneError::ZeroRate { .. } => PyZeroDivisionError::new_err(err.to_string()),
        core::IbPlaneError::NothingToSend { .. } => PyIndexError::new_err(err.to_string()),
        core::IbPlaneError::NoSuchPort { .. } => PyValueError::new_err(err.to_string()),
    }
}

/// A byte count as the credits take it, or their refusal of a buffer of no bytes.
fn buffer(nbytes: i64) -> PyResult<u64> {
    u64::try_from(nbytes)
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| crate::credits::error(CreditError::EmptyPacket { nbytes }))
}

fn no_port(port: usize) -> PyErr {
    PyIndexError::new_err(format!("port {port} is not one of the switch's"))
}

/// `f` on the credits of one port of a compiled plane (for its `links[i]` views).
pub fn with_link<R>(
    plane: &Bound<'_, IbPlane>,
    port: usize,
    f: impl FnOnce(&mut fabric_core::model::credits::CreditLink) -> R,
) -> PyResult<R> {
    let mut plane = plane.try_borrow_mut()?;
    plane
        .plane
        .link_mut(port)
        .map(f)
        .ok_or_else(|| no_port(port))
}

/// The IB plane of a switch whose ports have `macs` (ours, the peer's), longest frames and rates, configured by
/// `config` (the agents' `SwitchIbConfig`).
pub(crate) fn plane_of(
    macs: Vec<(String, String)>,
    config: &Bound<'_, PyAny>,
    max_frames: Vec<u64>,
    rates_bps: Vec<u64>,
) -> PyResult<core::IbPlane> {
    let pairs = macs
        .iter()
        .map(|(ours, peers)| Ok((parse_mac(ours)?, parse_mac(peers)?)))
        .collect::<PyResult<Vec<_>>>()?;
    let lft = config
        .getattr("lft")?
        .call_method0("items")?
        .try_iter()?
        .map(|item| item?.extract::<(u16, usize)>())
        .collect::<PyResult<Vec<_>>>()?;
    let vl_buffer = buffer(config.getattr("vl_buffer")?.extract()?)?;
    let peer_capacity: Vec<i64> = config.getattr("peer_capacity")?.extract()?;
    let mut ports = Vec::with_capacity(pairs.len());
    for (index, (mac, peer_mac)) in pairs.into_iter().enumerate() {
        let at = |list: &[u64]| {
            list.get(index)
                .copied()
                .ok_or_else(|| PyIndexError::new_err("list index out of range"))
        };
        let peer = peer_capacity
            .get(index)
            .copied()
            .ok_or_else(|| PyIndexError::new_err("list index out of range"))?;
        ports.push(core::PortSetup {
            mac,
            peer_mac,
            max_frame: at(&max_frames)?,
            rate_bps: at(&rates_bps)?,
            peer_capacity: buffer(peer)?,
        });
    }
    let setup = core::IbPlaneConfig {
        lft,
        sl2vl: config.getattr("sl2vl")?.extract()?,
        vls: config.getattr("vls")?.extract()?,
        vl_buffer,
        fc_floor: config.getattr("fc_floor")?.extract()?,
        ar: config
            .getattr("ar")?
            .call_method0("items")?
            .try_iter()?
            .map(|item| item?.extract::<(u16, Vec<usize>)>())
            .collect::<PyResult<Vec<_>>>()?,
    };
    core::IbPlane::new(ports, setup).map_err(error)
}

/// Credit state and VL queues of every port of one switch.
#[pyclass(module = "emulator._core.ib_plane")]
pub struct IbPlane {
    plane: core::IbPlane,
    /// Each port's last head and its bytes object, given again while it stays the head.
    heads: Vec<Option<(u64, Py<PyBytes>)>>,
}

impl IbPlane {
    fn per_port<T>(&self, f: impl Fn(usize) -> Option<T>) -> Vec<T> {
        (0..self.plane.port_count()).filter_map(f).collect()
    }

    fn check(&self, port: usize) -> PyResult<usize> {
        (port < self.plane.port_count())
            .then_some(port)
            .ok_or_else(|| no_port(port))
    }
}

#[pymethods]
impl IbPlane {
    #[new]
    fn new(
        macs: Vec<(String, String)>,
        config: &Bound<'_, PyAny>,
        max_frames: Vec<u64>,
        rates_bps: Vec<u64>,
    ) -> PyResult<Self> {
        let plane = plane_of(macs, config, max_frames, rates_bps)?;
        let heads = (0..plane.port_count()).map(|_| None).collect();
        Ok(IbPlane { plane, heads })
    }

    #[getter]
    fn vls(&self) -> usize {
        self.plane.vls()
    }

    /// Per port: (our MAC, the peer's MAC), as text.
    #[getter]
    fn macs(&self) -> Vec<(String, String)> {
        self.per_port(|p| self.plane.macs(p).map(|(a, b)| (mac_text(a), mac_text(b))))
    }

    #[getter]
    fn max_frames(&self) -> Vec<u64> {
        self.per_port(|p| self.plane.max_frame(p))
    }

    #[getter]
    fn forwarded(&self) -> Vec<u64> {
        self.per_port(|p| self.plane.forwarded(p))
    }

    #[getter]
    fn tx_errors(&self) -> Vec<u64> {
        self.per_port(|p| self.plane.tx_errors(p))
    }

    #[getter]
    fn next_vl(&self) -> Vec<usize> {
        self.per_port(|p| self.plane.next_vl(p))
    }

    /// Per ingress port: drops by cause (fresh dicts).
    #[getter]
    fn drops<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        (0..self.plane.port_count())
            .map(|port| drops_dict(py, self.plane.drops(port).unwrap_or_default()))
            .collect()
    }

    /// Per port, per VL: the queued (frame, ingress port, ingress VL, IB bytes), a fresh copy.
    #[getter]
    fn queues<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let ports = PyList::empty(py);
        for port in 0..self.plane.port_count() {
            let vls = PyList::empty(py);
            for vl in 0..self.plane.vls() {
                let items = self.plane.queue(port, vl).into_iter().flatten();
                vls.append(PyList::new(
                    py,
                    items.map(|q| (PyBytes::new(py, &q.frame), q.ingress, q.vl_in, q.size)),
                )?)?;
            }
            ports.append(vls)?;
        }
        Ok(ports)
    }

    /// Per port: the flow-control frames waiting, a fresh copy.
    #[getter]
    fn control<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let ports = PyList::empty(py);
        for port in 0..self.plane.port_count() {
            let frames = self.plane.control(port).into_iter().flatten();
            ports.append(PyList::new(py, frames.map(|c| PyBytes::new(py, &c.frame)))?)?;
        }
        Ok(ports)
    }

    /// Per port: its link's credits, views that read and drive the plane's own.
    #[getter]
    fn links(slf: &Bound<'_, Self>) -> Vec<CreditLink> {
        let ports = slf.borrow().plane.port_count();
        (0..ports)
            .map(|port| CreditLink::view(Home::Plane(slf.clone().unbind(), port)))
            .collect()
    }

    /// An IB frame arrived on `port`; returns the ports that may now send.
    fn receive(&mut self, now: u64, port: usize, frame: &Bound<'_, PyAny>) -> PyResult<Vec<usize>> {
        let port = self.check(port)?;
        with_bytes(frame, |bytes| {
            self.plane.receive(now, port, bytes).into_iter().collect()
        })
    }

    /// The frame `port` sends next, or None: flow-control packets first, then data as credits allow.
    fn head<'py>(&mut self, py: Python<'py>, port: usize) -> PyResult<Option<Py<PyBytes>>> {
        let port = self.check(port)?;
        let Some((id, frame)) = self.plane.head(port) else {
            return Ok(None);
        };
        let cached = self.heads.get_mut(port).ok_or_else(|| no_port(port))?;
        if let Some((cached_id, bytes)) = cached {
            if *cached_id == id {
                return Ok(Some(bytes.clone_ref(py)));
            }
        }
        let bytes = PyBytes::new(py, frame).unbind();
        *cached = Some((id, bytes.clone_ref(py)));
        Ok(Some(bytes))
    }

    /// The kernel took the frame `head` gave for `port`.
    fn sent(&mut self, port: usize) -> PyResult<()> {
        let port = self.check(port)?;
        self.plane.sent(port).map_err(error)
    }

    /// The kernel refused the frame `head` gave for `port` for good (e.g. ENOBUFS): it is lost.
    fn refused(&mut self, port: usize) -> PyResult<()> {
        let port = self.check(port)?;
        self.plane.refused(port).map_err(error)
    }

    /// Queue the flow-control packets now due; the ports that have some to send.
    fn take_fc(&mut self, now: u64) -> Vec<usize> {
        let mut ports = Vec::new();
        self.plane.take_fc(now, &mut ports);
        ports
    }

    fn next_deadline(&mut self) -> Option<u64> {
        self.plane.next_deadline()
    }

    /// forwarded, queued per VL, drops, tx_errors and each VL's credit counters of one port.
    fn stats<'py>(&self, py: Python<'py>, port: usize) -> PyResult<Bound<'py, PyDict>> {
        port_stats(py, &self.plane, self.check(port)?)
    }

    /// Drops of one cause (an IB_DROPS name) over every port.
    fn total(&self, cause: &str) -> PyResult<u64> {
        let causes = [
            core::IbDrop::Malformed,
            core::IbDrop::CreditViolation,
            core::IbDrop::NoRoute,
            core::IbDrop::TooLong,
        ];
        core::IB_DROPS
            .iter()
            .zip(causes)
            .find(|(name, _)| **name == cause)
            .map(|(_, drop)| self.plane.total(drop))
            .ok_or_else(|| PyKeyError::new_err(cause.to_owned()))
    }
}

/// A port's drops as a dict, by cause name.
/// One port's IB counters: frames forwarded, queued per VL, drops by cause, send errors, credits per VL.
pub(crate) fn port_stats<'py>(
    py: Python<'py>,
    plane: &core::IbPlane,
    port: usize,
) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    dict.set_item("forwarded", plane.forwarded(port))?;
    dict.set_item("forwarded_bytes", plane.forwarded_bytes(port))?;
    let queued: Vec<usize> = (0..plane.vls())
        .map(|vl| plane.queue(port, vl).map_or(0, |q| q.len()))
        .collect();
    dict.set_item("queued", queued)?;
    dict.set_item(
        "drops",
        drops_dict(py, plane.drops(port).unwrap_or_default())?,
    )?;
    dict.set_item("tx_errors", plane.tx_errors(port))?;
    let credits = PyList::empty(py);
    if let Some(link) = plane.link(port) {
        for vl in 0..link.vl_count() {
            if let Some(c) = link.counters(vl) {
                credits.append(crate::credits::counters_dict(py, c)?)?;
            }
        }
    }
    dict.set_item("credits", credits)?;
    Ok(dict)
}

fn drops_dict(py: Python<'_>, drops: [u64; 4]) -> PyResult<Bound<'_, PyDict>> {
    let dict = PyDict::new(py);
    for (name, count) in core::IB_DROPS.iter().zip(drops) {
        dict.set_item(name, count)?;
    }
    Ok(dict)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("IB_DROPS", core::IB_DROPS)?;
    m.add_class::<IbPlane>()?;
    Ok(())
}
