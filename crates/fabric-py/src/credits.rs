//! `emulator._core.credits`: IB link-level credit flow control (fabric-core's `model::credits`) under the names
//! the agents and tests use.
//!
//! Python integers come in of any sign; a negative VL or size is refused in words of its own (the core
//! takes `usize`/`u64`). Credit violations raise this module's `CreditViolation`, bad arguments `ValueError`.
//! A [`CreditLink`] is either a link of its own or a view of one inside a compiled IB plane or port (their
//! `links[i]` and `credits`), so callers read a plane's links as a link's own.
use fabric_core::model::credits as core;
use fabric_core::wire::ib::{self as wire, OP_INIT, OP_NORMAL};
use pyo3::exceptions::{PyException, PyValueError, PyZeroDivisionError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::ib::FcPacket;

pyo3::create_exception!(
    credits,
    CreditViolation,
    PyException,
    "A packet beyond the credit limit: sent without credit, or received beyond what this end granted."
);

/// The names of a VL's counters, in the order reports list them.
const COUNTER_NAMES: [&str; 6] = [
    "packets_sent",
    "blocks_sent",
    "stalls",
    "fc_sent",
    "fc_received",
    "max_occupancy_blocks",
];

/// The Python exception of a core error: `CreditViolation` for a violation, `ValueError` for anything else.
pub fn error(err: core::CreditError) -> PyErr {
    if err.is_violation() {
        CreditViolation::new_err(err.to_string())
    } else {
        PyValueError::new_err(err.to_string())
    }
}

/// A size as the core takes it, or a refusal of a packet of no bytes.
fn size(nbytes: i64) -> Result<u64, core::CreditError> {
    u64::try_from(nbytes)
        .ok()
        .filter(|&n| n > 0)
        .ok_or(core::CreditError::EmptyPacket { nbytes })
}

/// A VL as the core takes it, or a refusal of a negative one.
fn vl_index(vl: i64, vls: usize) -> Result<usize, core::CreditError> {
    usize::try_from(vl).map_err(|_| core::CreditError::NoSuchVl { vl, vls })
}

/// A VL and a size, checked in this order: the size (`blocks`) first, then the VL.
fn vl_and_size(vl: i64, nbytes: i64, vls: usize) -> Result<(usize, u64), core::CreditError> {
    let n = size(nbytes)?;
    Ok((vl_index(vl, vls)?, n))
}

/// One block count for every VL, or a list of one per VL; a `ValueError` otherwise.
fn per_vl(value: &Bound<'_, PyAny>, vls: usize, name: &'static str) -> PyResult<Vec<u64>> {
    let values: Vec<i128> = match value.extract::<i128>() {
        Ok(one) => vec![one; vls],
        Err(_) => value
            .try_iter()?
            .map(|item| item?.extract::<i128>())
            .collect::<PyResult<_>>()?,
    };
    if values.len() != vls || values.iter().any(|&v| v < 0) {
        let message = core::CreditError::PerVl { name, vls }.to_string();
        return Err(PyValueError::new_err(format!(
            "{message}: {}",
            value.repr()?
        )));
    }
    Ok(values
        .into_iter()
        .map(|v| u64::try_from(v).unwrap_or(u64::MAX))
        .collect())
}

/// The core packet of a flow-control packet: a compiled `FcPacket` (a TypeError for anything else).
pub fn fc_packet(fc: &Bound<'_, PyAny>) -> PyResult<wire::FcPacket> {
    Ok(fc.cast::<FcPacket>()?.get().0)
}

/// A VL's counters as a dict.
pub fn counters_dict<'py>(py: Python<'py>, c: &core::VlCounters) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    let values = [
        c.packets_sent,
        c.blocks_sent,
        c.stalls,
        c.fc_sent,
        c.fc_received,
        c.max_occupancy_blocks,
    ];
    for (name, value) in COUNTER_NAMES.iter().zip(values) {
        dict.set_item(name, value)?;
    }
    Ok(dict)
}

/// Where a [`CreditLink`]'s state lives: the object's own, or a link of a compiled plane or port.
pub enum Home {
    Own(core::CreditLink),
    Port(Py<crate::ib_port::IbPort>),
    Plane(Py<crate::ib_plane::IbPlane>, usize),
}

/// One end of one link: its transmitter and receiver credit state on every data VL.
#[pyclass(module = "emulator._core.credits")]
pub struct CreditLink {
    home: Home,
    /// `fc_due`'s packets, reused from call to call.
    due: Vec<wire::FcPacket>,
}

impl CreditLink {
    /// A view of a link held by a plane or a port.
    pub fn view(home: Home) -> Self {
        CreditLink {
            home,
            due: Vec::new(),
        }
    }

    /// `f` on the link, wherever it lives (a plane or port already borrowed elsewhere is a Python error).
    fn with<R>(&mut self, f: impl FnOnce(&mut core::CreditLink) -> R) -> PyResult<R> {
        match &mut self.home {
            Home::Own(link) => Ok(f(link)),
            Home::Port(port) => Python::attach(|py| crate::ib_port::with_link(port.bind(py), f)),
            Home::Plane(plane, index) => {
                Python::attach(|py| crate::ib_plane::with_link(plane.bind(py), *index, f))
            }
        }
    }

    /// `f` with the link's VL count, for the VL checks made before the core's.
    fn checked<R>(
        &mut self,
        f: impl FnOnce(&mut core::CreditLink) -> Result<R, core::CreditError>,
    ) -> PyResult<R> {
        self.with(f)?.map_err(error)
    }
}

#[pymethods]
impl CreditLink {
    #[new]
    #[pyo3(signature = (vls, capacity_blocks, peer_capacity_blocks=None, refresh_ns=1_000_000, min_interval_ns=20_000))]
    fn new(
        vls: i64,
        capacity_blocks: &Bound<'_, PyAny>,
        peer_capacity_blocks: Option<&Bound<'_, PyAny>>,
        refresh_ns: i64,
        min_interval_ns: i64,
    ) -> PyResult<Self> {
        core::CreditLink::check_shape(vls, refresh_ns, min_interval_ns).map_err(error)?;
        let count = usize::try_from(vls).unwrap_or(0); // checked: 1 to 16
        let capacity = per_vl(capacity_blocks, count, "capacity_blocks")?;
        let peer = peer_capacity_blocks
            .map(|p| per_vl(p, count, "peer_capacity_blocks"))
            .transpose()?;
        let timers = (
            u64::try_from(refresh_ns).unwrap_or(0),
            u64::try_from(min_interval_ns).unwrap_or(0),
        );
        let link =
            core::CreditLink::new(&capacity, peer.as_deref(), timers.0, timers.1).map_err(error)?;
        Ok(CreditLink {
            home: Home::Own(link),
            due: Vec::new(),
        })
    }

    #[getter]
    fn vls(&mut self) -> PyResult<usize> {
        self.with(|l| l.vl_count())
    }

    /// Our receive buffer per VL, in blocks (a fresh list).
    #[getter]
    fn capacity(&mut self) -> PyResult<Vec<u64>> {
        self.with(|l| (0..l.vl_count()).filter_map(|vl| l.capacity(vl)).collect())
    }

    #[getter]
    fn refresh_ns(&mut self) -> PyResult<u64> {
        self.with(|l| l.refresh_ns())
    }

    #[getter]
    fn min_interval_ns(&mut self) -> PyResult<u64> {
        self.with(|l| l.min_interval_ns())
    }

    /// `{vl: {counter: value}}`, a fresh copy.
    #[getter]
    fn counters<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let all: Vec<core::VlCounters> = self.with(|l| {
            (0..l.vl_count())
                .filter_map(|vl| l.counters(vl).copied())
                .collect()
        })?;
        let dict = PyDict::new(py);
        for (vl, c) in all.iter().enumerate() {
            dict.set_item(vl, counters_dict(py, c)?)?;
        }
        Ok(dict)
    }

    /// Whether a packet of `nbytes` on `vl` could ever be sent; never raises (for checking input).
    fn sendable(&mut self, vl: i64, nbytes: i64) -> PyResult<bool> {
        match (usize::try_from(vl), u64::try_from(nbytes)) {
            (Ok(vl), Ok(nbytes)) => self.with(|l| l.sendable(vl, nbytes)),
            _ => Ok(false),
        }
    }

    /// Whether a packet of `nbytes` may go out on `vl` now.
    fn can_send(&mut self, vl: i64, nbytes: i64) -> PyResult<bool> {
        self.checked(|l| {
            let (vl, n) = vl_and_size(vl, nbytes, l.vl_count())?;
            l.can_send(vl, n)
        })
    }

    /// A packet went onto the wire; call it in wire order, as it leaves.
    fn sent(&mut self, vl: i64, nbytes: i64) -> PyResult<()> {
        self.checked(|l| {
            let (vl, n) = vl_and_size(vl, nbytes, l.vl_count())?;
            l.sent(vl, n)
        })
    }

    /// Blocks we may still send on `vl` under the peer's last grant.
    fn credits(&mut self, vl: i64) -> PyResult<u16> {
        self.checked(|l| l.credits(vl_index(vl, l.vl_count())?))
    }

    /// A data packet arrived on `vl` and now occupies our buffer.
    fn received(&mut self, vl: i64, nbytes: i64) -> PyResult<()> {
        self.checked(|l| {
            let (vl, n) = vl_and_size(vl, nbytes, l.vl_count())?;
            l.received(vl, n)
        })
    }

    /// A packet of `nbytes` we received on `vl` left our buffer (forwarded or consumed).
    fn freed(&mut self, vl: i64, nbytes: i64) -> PyResult<()> {
        self.checked(|l| {
            let (vl, n) = vl_and_size(vl, nbytes, l.vl_count())?;
            l.freed(vl, n)
        })
    }

    /// Blocks of our buffer on `vl` in use.
    fn occupancy(&mut self, vl: i64) -> PyResult<u64> {
        self.checked(|l| l.occupancy(vl_index(vl, l.vl_count())?))
    }

    /// The peer's flow-control packet arrived.
    fn on_fc(&mut self, now: u64, fc: &Bound<'_, PyAny>) -> PyResult<()> {
        let fc = fc_packet(fc)?;
        self.checked(|l| l.on_fc(now, &fc))
    }

    /// When the next flow-control packet on `vl` is due (read by the tests).
    fn _due_at(&mut self, vl: i64) -> PyResult<u64> {
        self.checked(|l| l.due_at(vl_index(vl, l.vl_count())?))
    }

    /// The flow-control packets to send now (init at start, grown grants, refreshes).
    fn fc_due<'py>(&mut self, py: Python<'py>, now: u64) -> PyResult<Bound<'py, PyList>> {
        let mut due = std::mem::take(&mut self.due);
        due.clear();
        self.with(|l| l.fc_due(now, &mut due))?;
        let list = PyList::new(py, due.iter().map(|&fc| FcPacket(fc)))?;
        self.due = due;
        Ok(list)
    }

    /// When `fc_due` next has something; a time already past means now.
    fn next_deadline(&mut self) -> PyResult<u64> {
        self.with(|l| l.next_deadline())
    }
}

/// The credits a packet of `nbytes` costs: whole 64-byte blocks, rounded up.
#[pyfunction]
fn blocks(nbytes: i64) -> PyResult<u64> {
    size(nbytes).and_then(core::blocks).map_err(error)
}

/// How long the emulated fabric lets a grown grant wait for more.
#[pyfunction]
#[pyo3(signature = (rate_bps, frame_bytes, floor_ns=core::FABRIC_MIN_INTERVAL_NS))]
fn fabric_min_interval_ns(rate_bps: u64, frame_bytes: u64, floor_ns: u64) -> PyResult<u64> {
    core::fabric_min_interval_ns(rate_bps, frame_bytes, floor_ns)
        .ok_or_else(|| PyZeroDivisionError::new_err("integer division or modulo by zero"))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("BLOCK", core::BLOCK)?;
    m.add("MODULUS", core::MODULUS)?;
    m.add("WINDOW", core::WINDOW)?;
    m.add("MAX_PACKET_BLOCKS", core::MAX_PACKET_BLOCKS)?;
    m.add("COUNTER_NAMES", COUNTER_NAMES)?;
    m.add("FABRIC_REFRESH_NS", core::FABRIC_REFRESH_NS)?;
    m.add("FABRIC_MIN_INTERVAL_NS", core::FABRIC_MIN_INTERVAL_NS)?;
    m.add("FC_COALESCE_FRAMES", core::FC_COALESCE_FRAMES)?;
    m.add("OP_NORMAL", OP_NORMAL)?;
    m.add("OP_INIT", OP_INIT)?;
    m.add("FcPacket", py.get_type::<FcPacket>())?;
    m.add("CreditViolation", py.get_type::<CreditViolation>())?;
    m.add_class::<CreditLink>()?;
    m.add_function(wrap_pyfunction!(blocks, m)?)?;
    m.add_function(wrap_pyfunction!(fabric_min_interval_ns, m)?)?;
    Ok(())
}
