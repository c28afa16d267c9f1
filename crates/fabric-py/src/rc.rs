//! `emulator._core.rc`: the RC transport of one QP.
//!
//! The QP reaches the caller's memory through the Python object it is given (a test's memory, the
//! simulator's `FlatMemory`; the emulator's RNIC is compiled whole, `emulator._core.dataplane.Nic`): its `local`/`remote` methods check keys and bounds and return a
//! memoryview, which the QP keeps as a buffer and reads and writes directly. A method that raises
//! `AccessError` refuses the access; any other exception it raises stops the QP's call and is raised to the
//! caller.
use fabric_core::model::rc as core;
use fabric_core::wire::transport::Packet as CorePacket;
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyList, PyTuple};

use crate::transport::Packet;

pyo3::create_exception!(
    emulator._core.rc,
    AccessError,
    PyException,
    "A key, bound or permission check of the QP's memory failed."
);

/// The IntEnum classes `WrOpcode`, `WcStatus` and `WcOpcode`, made once at import.
static WR_OPCODE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static WC_STATUS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static WC_OPCODE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// The member of value `value` of one of the enums above.
fn member<'py>(
    py: Python<'py>,
    class: &PyOnceLock<Py<PyAny>>,
    value: u8,
) -> PyResult<Bound<'py, PyAny>> {
    match class.get(py) {
        Some(class) => class.bind(py).call1((value,)),
        None => Ok(value.into_pyobject(py)?.into_any()),
    }
}

fn int_enum<'py>(
    m: &Bound<'py, PyModule>,
    name: &str,
    members: Vec<(&str, u8)>,
) -> PyResult<Bound<'py, PyAny>> {
    let class = m
        .py()
        .import("enum")?
        .getattr("IntEnum")?
        .call1((name, members))?;
    class.setattr("__module__", "emulator._core.rc")?;
    m.add(name, &class)?;
    Ok(class)
}

pub(crate) fn wr_opcode(value: u8) -> PyResult<core::WrOpcode> {
    core::WrOpcode::from_u8(value)
        .ok_or_else(|| PyValueError::new_err(format!("{value} is not a valid WrOpcode")))
}

fn wc_status(value: u8) -> PyResult<core::WcStatus> {
    core::WcStatus::from_u8(value)
        .ok_or_else(|| PyValueError::new_err(format!("{value} is not a valid WcStatus")))
}

fn wc_opcode(value: u8) -> PyResult<core::WcOpcode> {
    core::WcOpcode::from_u8(value)
        .ok_or_else(|| PyValueError::new_err(format!("{value} is not a valid WcOpcode")))
}

fn py_bool(value: bool) -> &'static str {
    if value {
        "True"
    } else {
        "False"
    }
}

// --- work requests and completions ---------------------------------------------------------------

/// A send work request (`ibv_send_wr` with one scatter/gather entry).
#[pyclass(module = "emulator._core.rc", name = "SendWR", eq, from_py_object)]
#[derive(Clone, PartialEq)]
pub struct SendWr {
    #[pyo3(get, set)]
    wr_id: u64,
    opcode: core::WrOpcode,
    #[pyo3(get, set)]
    addr: u64,
    #[pyo3(get, set)]
    length: u64,
    #[pyo3(get, set)]
    lkey: u32,
    #[pyo3(get, set)]
    remote_addr: u64,
    #[pyo3(get, set)]
    rkey: u32,
    #[pyo3(get, set)]
    imm: u32,
    #[pyo3(get, set)]
    signaled: bool,
}

#[pymethods]
impl SendWr {
    #[new]
    #[pyo3(signature = (wr_id, opcode, addr, length, lkey, remote_addr=0, rkey=0, imm=0, signaled=true))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        wr_id: u64,
        opcode: u8,
        addr: u64,
        length: u64,
        lkey: u32,
        remote_addr: u64,
        rkey: u32,
        imm: u32,
        signaled: bool,
    ) -> PyResult<Self> {
        Ok(SendWr {
            wr_id,
            opcode: wr_opcode(opcode)?,
            addr,
            length,
            lkey,
            remote_addr,
            rkey,
            imm,
            signaled,
        })
    }

    #[getter]
    fn opcode<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        member(py, &WR_OPCODE, self.opcode as u8)
    }

    #[setter]
    fn set_opcode(&mut self, opcode: u8) -> PyResult<()> {
        self.opcode = wr_opcode(opcode)?;
        Ok(())
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!(
            "SendWR(wr_id={}, opcode={}, addr={}, length={}, lkey={}, remote_addr={}, rkey={}, imm={}, \
             signaled={})",
            self.wr_id,
            self.opcode(py)?.repr()?,
            self.addr,
            self.length,
            self.lkey,
            self.remote_addr,
            self.rkey,
            self.imm,
            py_bool(self.signaled)
        ))
    }
}

impl SendWr {
    /// The work request of a compiled `SendWR` (a TypeError for anything else).
    fn of(wr: &Bound<'_, PyAny>) -> PyResult<core::SendWr> {
        Ok(wr.cast::<SendWr>()?.borrow().to_core())
    }

    fn to_core(&self) -> core::SendWr {
        core::SendWr {
            wr_id: self.wr_id,
            opcode: self.opcode,
            addr: self.addr,
            length: self.length,
            lkey: self.lkey,
            remote_addr: self.remote_addr,
            rkey: self.rkey,
            imm: self.imm,
            signaled: self.signaled,
        }
    }
}

/// A receive work request (`ibv_recv_wr` with one scatter/gather entry).
#[pyclass(module = "emulator._core.rc", name = "RecvWR", eq, from_py_object)]
#[derive(Clone, PartialEq)]
pub struct RecvWr {
    #[pyo3(get, set)]
    wr_id: u64,
    #[pyo3(get, set)]
    addr: u64,
    #[pyo3(get, set)]
    length: u64,
    #[pyo3(get, set)]
    lkey: u32,
}

impl RecvWr {
    /// The receive of a compiled `RecvWR` (a TypeError for anything else).
    fn of(wr: &Bound<'_, PyAny>) -> PyResult<core::RecvWr> {
        let wr = wr.cast::<RecvWr>()?.borrow();
        Ok(core::RecvWr {
            wr_id: wr.wr_id,
            addr: wr.addr,
            length: wr.length,
            lkey: wr.lkey,
        })
    }
}

#[pymethods]
impl RecvWr {
    #[new]
    fn new(wr_id: u64, addr: u64, length: u64, lkey: u32) -> Self {
        RecvWr {
            wr_id,
            addr,
            length,
            lkey,
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "RecvWR(wr_id={}, addr={}, length={}, lkey={})",
            self.wr_id, self.addr, self.length, self.lkey
        )
    }
}

/// One work completion; `timestamp` is the RNIC's to fill (CLOCK_MONOTONIC ns; the model leaves 0).
#[pyclass(module = "emulator._core.rc", name = "Completion", eq, from_py_object)]
#[derive(Clone, PartialEq)]
pub struct Completion {
    #[pyo3(get, set)]
    wr_id: u64,
    status: core::WcStatus,
    opcode: core::WcOpcode,
    #[pyo3(get, set)]
    qp_num: u32,
    #[pyo3(get, set)]
    byte_len: u64,
    #[pyo3(get, set)]
    imm: Option<u32>,
    #[pyo3(get, set)]
    timestamp: u64,
}

#[pymethods]
impl Completion {
    #[new]
    #[pyo3(signature = (wr_id, status, opcode, qp_num, byte_len=0, imm=None, timestamp=0))]
    fn new(
        wr_id: u64,
        status: u8,
        opcode: u8,
        qp_num: u32,
        byte_len: u64,
        imm: Option<u32>,
        timestamp: u64,
    ) -> PyResult<Self> {
        Ok(Completion {
            wr_id,
            status: wc_status(status)?,
            opcode: wc_opcode(opcode)?,
            qp_num,
            byte_len,
            imm,
            timestamp,
        })
    }

    #[getter]
    fn status<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        member(py, &WC_STATUS, self.status as u8)
    }

    #[setter]
    fn set_status(&mut self, status: u8) -> PyResult<()> {
        self.status = wc_status(status)?;
        Ok(())
    }

    #[getter]
    fn opcode<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        member(py, &WC_OPCODE, self.opcode as u8)
    }

    #[setter]
    fn set_opcode(&mut self, opcode: u8) -> PyResult<()> {
        self.opcode = wc_opcode(opcode)?;
        Ok(())
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let imm = self.imm.map_or("None".to_owned(), |imm| imm.to_string());
        Ok(format!(
            "Completion(wr_id={}, status={}, opcode={}, qp_num={}, byte_len={}, imm={imm}, timestamp={})",
            self.wr_id,
            self.status(py)?.repr()?,
            self.opcode(py)?.repr()?,
            self.qp_num,
            self.byte_len,
            self.timestamp
        ))
    }
}

impl From<core::Completion> for Completion {
    fn from(c: core::Completion) -> Self {
        Completion {
            wr_id: c.wr_id,
            status: c.status,
            opcode: c.opcode,
            qp_num: c.qp_num,
            byte_len: c.byte_len,
            imm: c.imm,
            timestamp: c.timestamp,
        }
    }
}

// --- configuration -----------------------------------------------------------------------------

/// The QP attributes of `ibv_modify_qp` that the transport uses (frozen, as the Python dataclass).
#[pyclass(
    module = "emulator._core.rc",
    name = "RcConfig",
    frozen,
    eq,
    from_py_object
)]
#[derive(Clone, PartialEq)]
pub struct RcConfig(pub(crate) core::RcConfig);

/// The names of [`RcConfig`]'s fields, in the dataclass's order.
const CONFIG_FIELDS: [&str; 11] = [
    "mtu",
    "timeout_ns",
    "retry_cnt",
    "rnr_retry",
    "rnr_timer_ns",
    "ack_every",
    "max_inflight",
    "max_rd_atomic",
    "max_msg",
    "reorder",
    "reorder_wait_ns",
];

impl RcConfig {
    /// The settings of a compiled `RcConfig` (a TypeError for anything else).
    fn of(config: &Bound<'_, PyAny>) -> PyResult<core::RcConfig> {
        Ok(config.cast::<RcConfig>()?.get().0)
    }

    /// Field `index` of [`CONFIG_FIELDS`].
    fn field(config: &core::RcConfig, index: usize) -> u64 {
        match index {
            0 => config.mtu.into(),
            1 => config.timeout_ns,
            2 => config.retry_cnt.into(),
            3 => config.rnr_retry.into(),
            4 => config.rnr_timer_ns,
            5 => config.ack_every.into(),
            6 => config.max_inflight.into(),
            7 => config.max_rd_atomic.into(),
            8 => config.max_msg,
            9 => config.reorder.into(),
            _ => config.reorder_wait_ns,
        }
    }
}

/// One field of `RcConfig`: its value on an instance, its default on the class (`RcConfig.max_inflight`
/// is 128, as a dataclass's class attribute is its default).
#[pyclass(module = "emulator._core.rc", frozen)]
struct ConfigField(usize);

#[pymethods]
impl ConfigField {
    fn __get__(
        &self,
        instance: Option<&Bound<'_, PyAny>>,
        _owner: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<u64> {
        match instance {
            None => Ok(RcConfig::field(&core::RcConfig::default(), self.0)),
            Some(config) => Ok(RcConfig::field(&config.cast::<RcConfig>()?.get().0, self.0)),
        }
    }
}

#[pymethods]
impl RcConfig {
    #[new]
    #[pyo3(signature = (mtu=1024, timeout_ns=4096 << 14, retry_cnt=7, rnr_retry=7, rnr_timer_ns=1_000_000,
                        ack_every=16, max_inflight=128, max_rd_atomic=16, max_msg=core::RcConfig::default().max_msg,
                        reorder=0, reorder_wait_ns=0))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        mtu: i64,
        timeout_ns: u64,
        retry_cnt: i64,
        rnr_retry: i64,
        rnr_timer_ns: u64,
        ack_every: i64,
        max_inflight: i64,
        max_rd_atomic: i64,
        max_msg: u64,
        reorder: i64,
        reorder_wait_ns: u64,
    ) -> PyResult<Self> {
        // Python integers of any size come in; one out of a field's range fails that field's check.
        let config = core::RcConfig {
            mtu: u32::try_from(mtu).unwrap_or(0),
            timeout_ns,
            retry_cnt: u8::try_from(retry_cnt).unwrap_or(u8::MAX),
            rnr_retry: u8::try_from(rnr_retry).unwrap_or(u8::MAX),
            rnr_timer_ns,
            ack_every: u32::try_from(ack_every).unwrap_or(0),
            max_inflight: u32::try_from(max_inflight).unwrap_or(0),
            max_rd_atomic: u32::try_from(max_rd_atomic).unwrap_or(0),
            max_msg,
            reorder: u32::try_from(reorder).unwrap_or(u32::MAX),
            reorder_wait_ns,
        }
        .validated()
        .map_err(|err| PyValueError::new_err(err.to_string()))?;
        Ok(RcConfig(config))
    }

    #[classattr]
    fn mtu() -> ConfigField {
        ConfigField(0)
    }
    #[classattr]
    fn timeout_ns() -> ConfigField {
        ConfigField(1)
    }
    #[classattr]
    fn retry_cnt() -> ConfigField {
        ConfigField(2)
    }
    #[classattr]
    fn rnr_retry() -> ConfigField {
        ConfigField(3)
    }
    #[classattr]
    fn rnr_timer_ns() -> ConfigField {
        ConfigField(4)
    }
    #[classattr]
    fn ack_every() -> ConfigField {
        ConfigField(5)
    }
    #[classattr]
    fn max_inflight() -> ConfigField {
        ConfigField(6)
    }
    #[classattr]
    fn max_rd_atomic() -> ConfigField {
        ConfigField(7)
    }
    #[classattr]
    fn max_msg() -> ConfigField {
        ConfigField(8)
    }
    #[classattr]
    fn reorder() -> ConfigField {
        ConfigField(9)
    }
    #[classattr]
    fn reorder_wait_ns() -> ConfigField {
        ConfigField(10)
    }

    fn __hash__(&self) -> u64 {
        // The fields folded (FNV-1a): equal configs hash alike, as a frozen dataclass's do.
        (0..CONFIG_FIELDS.len()).fold(0xcbf2_9ce4_8422_2325, |hash, index| {
            (hash ^ RcConfig::field(&self.0, index)).wrapping_mul(0x100_0000_01b3)
        })
    }

    fn __repr__(&self) -> String {
        let fields: Vec<String> = CONFIG_FIELDS
            .iter()
            .enumerate()
            .map(|(index, name)| format!("{name}={}", RcConfig::field(&self.0, index)))
            .collect();
        format!("RcConfig({})", fields.join(", "))
    }
}

// --- memory --------------------------------------------------------------------------------------

/// The QP's side of the caller's Python memory object (the model's `Memory` protocol), for one call.
///
/// The first exception other than `AccessError` is kept and raised once the model's call returns; the
/// model meanwhile sees the access refused or the bytes as zeros, and never panics.
struct PyMemory<'a, 'py> {
    object: &'a Bound<'py, PyAny>,
    failure: Option<PyErr>,
}

impl<'a, 'py> PyMemory<'a, 'py> {
    fn new(object: &'a Bound<'py, PyAny>) -> Self {
        PyMemory {
            object,
            failure: None,
        }
    }

    /// What the call raised, if anything: raised now.
    fn finish(self) -> PyResult<()> {
        self.failure.map_or(Ok(()), Err)
    }

    fn fail(&mut self, err: PyErr) {
        if self.failure.is_none() {
            self.failure = Some(err);
        }
    }

    /// `memory.<method>(key, addr, length, write=write)` as a buffer of exactly `length` bytes.
    fn check(
        &mut self,
        method: &str,
        key: u32,
        addr: u64,
        length: u64,
        write: bool,
    ) -> Result<PyBuffer<u8>, core::AccessError> {
        let py = self.object.py();
        let kwargs = PyDict::new(py);
        let result = kwargs
            .set_item("write", write)
            .and_then(|()| {
                self.object
                    .call_method(method, (key, addr, length), Some(&kwargs))
            })
            .and_then(|view| {
                let buffer = PyBuffer::<u8>::get(&view)?;
                if buffer.item_count() as u64 != length || !buffer.is_c_contiguous() {
                    return Err(PyValueError::new_err(format!(
                        "memory.{method} returned {} bytes for an access of {length}",
                        buffer.item_count()
                    )));
                }
                Ok(buffer)
            });
        result.map_err(|err| {
            if !err.is_instance_of::<AccessError>(py) {
                self.fail(err);
            }
            core::AccessError
        })
    }
}

impl core::Memory for PyMemory<'_, '_> {
    type Window = PyBuffer<u8>;

    fn local(
        &mut self,
        lkey: u32,
        addr: u64,
        length: u64,
        write: bool,
    ) -> Result<PyBuffer<u8>, core::AccessError> {
        self.check("local", lkey, addr, length, write)
    }

    fn remote(
        &mut self,
        rkey: u32,
        addr: u64,
        length: u64,
        write: bool,
    ) -> Result<PyBuffer<u8>, core::AccessError> {
        self.check("remote", rkey, addr, length, write)
    }

    fn read(&mut self, window: &PyBuffer<u8>, offset: u64, len: usize, out: &mut Vec<u8>) {
        let py = self.object.py();
        let range = usize::try_from(offset)
            .ok()
            .and_then(|start| Some(start..start.checked_add(len)?));
        let cells = window
            .as_slice(py)
            .and_then(|cells| cells.get(range.clone()?));
        match cells {
            Some(cells) => out.extend(cells.iter().map(|cell| cell.get())),
            None => {
                out.resize(out.len() + len, 0);
                self.fail(PyValueError::new_err("memory region no longer readable"));
            }
        }
    }

    fn write(&mut self, window: &PyBuffer<u8>, offset: u64, data: &[u8]) {
        let py = self.object.py();
        let range = usize::try_from(offset)
            .ok()
            .and_then(|start| Some(start..start.checked_add(data.len())?));
        let cells = window
            .as_mut_slice(py)
            .and_then(|cells| cells.get(range.clone()?));
        match cells {
            Some(cells) => cells
                .iter()
                .zip(data)
                .for_each(|(cell, &byte)| cell.set(byte)),
            None => self.fail(PyValueError::new_err("memory region not writable")),
        }
    }
}

// --- the queue pair ------------------------------------------------------------------------------

/// A work queue's depth (`len(qp.sq)`, `len(qp.rq)`), without copying its entries out.
#[pyclass(module = "emulator._core.rc", name = "_WorkQueue", frozen)]
struct WorkQueue(usize);

#[pymethods]
impl WorkQueue {
    fn __len__(&self) -> usize {
        self.0
    }
}

/// An ACK or NAK waiting in the responder's output (a snapshot).
#[pyclass(module = "emulator._core.rc", name = "_Reply", frozen)]
struct Reply {
    #[pyo3(get)]
    psn: u32,
    #[pyo3(get)]
    syndrome: u8,
    #[pyo3(get)]
    msn: u32,
}

/// READ responses the responder still owes (a snapshot).
#[pyclass(module = "emulator._core.rc", name = "_ReadJob", frozen)]
struct ReadJob {
    #[pyo3(get)]
    first_psn: u32,
    #[pyo3(get)]
    next_index: u64,
    #[pyo3(get)]
    npkts: u64,
}

/// Requester and responder of one RC queue pair.
#[pyclass(module = "emulator._core.rc", name = "RcQueuePair")]
pub struct RcQueuePair {
    qp: core::RcQueuePair<PyBuffer<u8>>,
    #[pyo3(get)]
    memory: Py<PyAny>,
    /// The config object given (a compiled `RcConfig`, or any object with its fields).
    #[pyo3(get)]
    config: Py<PyAny>,
    /// As given (the model keeps its 24 bits).
    #[pyo3(get)]
    initial_psn: i64,
}

/// Any integer as a 24-bit PSN, as `& PSN_MASK` takes it.
fn psn_of(value: i64) -> u32 {
    (value & i64::from(fabric_core::wire::transport::PSN_MASK)) as u32
}

/// The core packet of a compiled `Packet`, or of any object with a Python `Packet`'s attributes (the
/// Python wire decoders' packets, until they are compiled too).
fn core_packet(packet: &Bound<'_, PyAny>) -> PyResult<CorePacket> {
    if let Ok(compiled) = packet.cast::<Packet>() {
        return Ok(compiled.borrow().to_core());
    }
    let payload = packet.getattr("payload")?;
    let payload = match PyBuffer::<u8>::get(&payload) {
        Ok(buffer) => buffer.to_vec(packet.py())?,
        Err(_) => payload.extract()?,
    };
    Ok(CorePacket {
        opcode: packet.getattr("opcode")?.extract()?,
        dest_qp: packet.getattr("dest_qp")?.extract()?,
        psn: packet.getattr("psn")?.extract()?,
        ack_req: packet.getattr("ack_req")?.extract()?,
        solicited: packet.getattr("solicited")?.extract()?,
        pkey: packet.getattr("pkey")?.extract()?,
        va: packet.getattr("va")?.extract()?,
        rkey: packet.getattr("rkey")?.extract()?,
        dma_len: packet.getattr("dma_len")?.extract()?,
        imm: packet.getattr("imm")?.extract()?,
        syndrome: packet.getattr("syndrome")?.extract()?,
        msn: packet.getattr("msn")?.extract()?,
        payload,
        ecn_ce: packet.getattr("ecn_ce")?.extract()?,
    })
}

#[pymethods]
impl RcQueuePair {
    #[new]
    #[pyo3(signature = (qpn, memory, config=None, initial_psn=0))]
    fn new(
        py: Python<'_>,
        qpn: u32,
        memory: Py<PyAny>,
        config: Option<Bound<'_, PyAny>>,
        initial_psn: i64,
    ) -> PyResult<Self> {
        let config = match config {
            Some(config) => config,
            None => Bound::new(py, RcConfig(core::RcConfig::default()))?.into_any(),
        };
        let settings = RcConfig::of(&config)?;
        let qp = core::RcQueuePair::new(qpn, settings, psn_of(initial_psn));
        let config = config.unbind();
        Ok(RcQueuePair {
            qp,
            memory,
            config,
            initial_psn,
        })
    }

    #[getter]
    fn qpn(&self) -> u32 {
        self.qp.qpn()
    }
    #[getter]
    fn state(&self) -> &'static str {
        self.qp.state().name()
    }
    #[getter]
    fn remote_qpn(&self) -> u32 {
        self.qp.remote_qpn()
    }
    /// The counters by name (a new dict, in `COUNTERS`' order).
    #[getter]
    fn counters<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let counters = PyDict::new(py);
        let values = self.qp.counters().values();
        for (name, value) in core::RcCounters::NAMES.iter().zip(values) {
            counters.set_item(name, value)?;
        }
        Ok(counters)
    }
    #[getter]
    fn una(&self) -> u32 {
        self.qp.una()
    }
    #[getter]
    fn tx_psn(&self) -> u32 {
        self.qp.tx_psn()
    }
    #[getter]
    fn end_psn(&self) -> u32 {
        self.qp.end_psn()
    }
    #[getter]
    fn high_psn(&self) -> u32 {
        self.qp.high_psn()
    }
    #[getter]
    fn epsn(&self) -> u32 {
        self.qp.epsn()
    }
    #[getter]
    fn msn(&self) -> u32 {
        self.qp.msn()
    }
    #[getter]
    fn nak_sent(&self) -> bool {
        self.qp.nak_sent()
    }
    #[getter]
    fn rto_deadline(&self) -> Option<u64> {
        self.qp.rto_deadline()
    }
    #[getter]
    fn rnr_until(&self) -> Option<u64> {
        self.qp.rnr_until()
    }
    #[getter]
    fn retries_left(&self) -> u8 {
        self.qp.retries_left()
    }
    #[getter]
    fn rnr_left(&self) -> u8 {
        self.qp.rnr_left()
    }
    #[getter]
    fn sq(&self) -> WorkQueue {
        WorkQueue(self.qp.send_queue_len())
    }
    #[getter]
    fn rq(&self) -> WorkQueue {
        WorkQueue(self.qp.recv_queue_len())
    }
    /// The responder's output: `_Reply` and `_ReadJob` snapshots, in order.
    #[getter]
    fn out<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let entries = PyList::empty(py);
        for entry in self.qp.pending_responses() {
            match entry {
                core::PendingResponse::Reply { psn, syndrome, msn } => {
                    entries.append(Reply { psn, syndrome, msn })?
                }
                core::PendingResponse::Read {
                    first_psn,
                    next_index,
                    npkts,
                } => entries.append(ReadJob {
                    first_psn,
                    next_index,
                    npkts,
                })?,
            }
        }
        Ok(entries)
    }

    /// INIT -> RTR -> RTS: `remote_psn` is the peer's first send PSN.
    fn connect(&mut self, remote_qpn: u32, remote_psn: i64) -> PyResult<()> {
        self.qp
            .connect(remote_qpn, psn_of(remote_psn))
            .map_err(|err| PyValueError::new_err(err.to_string()))
    }

    /// Queues a send WR (a compiled `SendWR` or the Python model's); ValueError before `connect`.
    fn post_send(&mut self, py: Python<'_>, wr: &Bound<'_, PyAny>) -> PyResult<()> {
        let wr = SendWr::of(wr)?;
        let mut memory = PyMemory::new(self.memory.bind(py));
        let posted = self.qp.post_send(&mut memory, wr);
        memory.finish()?;
        posted.map_err(|err| PyValueError::new_err(err.to_string()))
    }

    /// Queues a receive (a compiled `RecvWR` or the Python model's).
    fn post_recv(&mut self, wr: &Bound<'_, PyAny>) -> PyResult<()> {
        self.qp.post_recv(RecvWr::of(wr)?);
        Ok(())
    }

    /// Up to `max_entries` completions (all if None), oldest first; a negative count leaves that many out,
    /// as a Python slice does.
    #[pyo3(signature = (max_entries=None))]
    fn poll_completions<'py>(
        &mut self,
        py: Python<'py>,
        max_entries: Option<i64>,
    ) -> PyResult<Bound<'py, PyList>> {
        let waiting = self.qp.completions_len();
        let count = match max_entries {
            None => waiting,
            Some(n) if n >= 0 => usize::try_from(n).unwrap_or(usize::MAX).min(waiting),
            Some(n) => {
                let dropped = usize::try_from(n.unsigned_abs()).unwrap_or(usize::MAX);
                waiting.saturating_sub(dropped)
            }
        };
        let taken = PyList::empty(py);
        for completion in self.qp.poll_completions(Some(count)) {
            taken.append(Completion::from(completion))?;
        }
        Ok(taken)
    }

    fn next_deadline(&self) -> Option<u64> {
        self.qp.next_deadline()
    }

    fn on_timer(&mut self, now: u64) {
        self.qp.on_timer(now);
    }

    /// Responses and ACKs first (they unblock the peer), then requests; `data` False: only an ACK or NAK.
    #[pyo3(signature = (now, data=true))]
    fn next_packet(&mut self, py: Python<'_>, now: u64, data: bool) -> PyResult<Option<Packet>> {
        let mut memory = PyMemory::new(self.memory.bind(py));
        let mut packet = CorePacket::default();
        let sent = self.qp.next_packet(now, data, &mut memory, &mut packet);
        memory.finish()?;
        Ok(sent.then(|| Packet::from_core(packet)))
    }

    /// Whether a READ response or a request is waiting to go (window and RNR permitting).
    fn has_data(&self) -> bool {
        self.qp.has_data()
    }

    /// One inbound packet for this QP: a request, a response or an ACK/NAK.
    fn receive(&mut self, py: Python<'_>, now: u64, packet: &Bound<'_, PyAny>) -> PyResult<()> {
        let packet = core_packet(packet)?;
        let mut memory = PyMemory::new(self.memory.bind(py));
        self.qp.receive(now, &packet, &mut memory);
        memory.finish()
    }

    fn __repr__(&self) -> String {
        format!(
            "RcQueuePair(qpn={}, state={}, remote_qpn={})",
            self.qp.qpn(),
            self.qp.state().name(),
            self.qp.remote_qpn()
        )
    }
}

/// The local ACK timeout a QP gets unless the application sets one (see the core's doc).
#[pyfunction]
#[pyo3(signature = (rate_bps, mtu, max_inflight=u64::from(core::RcConfig::default().max_inflight)))]
fn default_timeout_ns(rate_bps: i64, mtu: u64, max_inflight: u64) -> u64 {
    core::default_timeout_ns(u64::try_from(rate_bps).unwrap_or(0), mtu, max_inflight)
}

/// The RNR timer code of the shortest wait at or above `ns`.
#[pyfunction]
fn rnr_timer_code(ns: i64) -> u8 {
    core::rnr_timer_code(u64::try_from(ns).unwrap_or(0))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("AccessError", py.get_type::<AccessError>())?;
    let wr: Vec<(&str, u8)> = core::WrOpcode::ALL
        .iter()
        .map(|&(n, v)| (n, v as u8))
        .collect();
    let status: Vec<(&str, u8)> = core::WcStatus::ALL
        .iter()
        .map(|&(n, v)| (n, v as u8))
        .collect();
    let wc: Vec<(&str, u8)> = core::WcOpcode::ALL
        .iter()
        .map(|&(n, v)| (n, v as u8))
        .collect();
    let _ = WR_OPCODE.set(py, int_enum(m, "WrOpcode", wr)?.unbind());
    let _ = WC_STATUS.set(py, int_enum(m, "WcStatus", status)?.unbind());
    let _ = WC_OPCODE.set(py, int_enum(m, "WcOpcode", wc)?.unbind());
    m.add_class::<SendWr>()?;
    m.add_class::<RecvWr>()?;
    m.add_class::<Completion>()?;
    m.add_class::<RcConfig>()?;
    m.add_class::<RcQueuePair>()?;
    m.add("INFINITE_RNR_RETRY", core::INFINITE_RNR_RETRY)?;
    m.add("RNR_TIMER_NS", core::RNR_TIMER_NS.to_vec())?;
    m.add("COUNTERS", PyTuple::new(py, core::RcCounters::NAMES)?)?;
    m.add("MAX_REORDER", core::MAX_REORDER)?;
    m.add_function(wrap_pyfunction!(default_timeout_ns, m)?)?;
    m.add_function(wrap_pyfunction!(rnr_timer_code, m)?)?;
    Ok(())
}
