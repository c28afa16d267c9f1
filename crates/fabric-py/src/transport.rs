//! `emulator._core.transport`: a transport packet without addressing.
use fabric_core::wire::transport as core;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyFrozenSet};

/// The transport headers (BTH and extensions) and payload of one packet, with the Python dataclass's fields,
/// defaults and equality; `to_core`/`from_core` cross to the core's `Packet` (the models' type).
#[pyclass(module = "emulator._core.transport", eq, from_py_object)]
#[derive(Clone, PartialEq)]
pub struct Packet {
    #[pyo3(get, set)]
    pub opcode: u8,
    #[pyo3(get, set)]
    pub dest_qp: u32,
    #[pyo3(get, set)]
    pub psn: u32,
    #[pyo3(get, set)]
    pub ack_req: bool,
    #[pyo3(get, set)]
    pub solicited: bool,
    #[pyo3(get, set)]
    pub pkey: u16,
    #[pyo3(get, set)]
    pub va: u64,
    #[pyo3(get, set)]
    pub rkey: u32,
    #[pyo3(get, set)]
    pub dma_len: u32,
    #[pyo3(get, set)]
    pub imm: u32,
    #[pyo3(get, set)]
    pub syndrome: u8,
    #[pyo3(get, set)]
    pub msn: u32,
    pub payload: Vec<u8>,
    #[pyo3(get, set)]
    pub ecn_ce: bool,
}

impl Packet {
    /// The core's packet (the payload copied).
    pub fn to_core(&self) -> core::Packet {
        core::Packet {
            opcode: self.opcode,
            dest_qp: self.dest_qp,
            psn: self.psn,
            ack_req: self.ack_req,
            solicited: self.solicited,
            pkey: self.pkey,
            va: self.va,
            rkey: self.rkey,
            dma_len: self.dma_len,
            imm: self.imm,
            syndrome: self.syndrome,
            msn: self.msn,
            payload: self.payload.clone(),
            ecn_ce: self.ecn_ce,
        }
    }

    /// A Python packet from the core's (the payload moved).
    pub fn from_core(p: core::Packet) -> Self {
        Packet {
            opcode: p.opcode,
            dest_qp: p.dest_qp,
            psn: p.psn,
            ack_req: p.ack_req,
            solicited: p.solicited,
            pkey: p.pkey,
            va: p.va,
            rkey: p.rkey,
            dma_len: p.dma_len,
            imm: p.imm,
            syndrome: p.syndrome,
            msn: p.msn,
            payload: p.payload,
            ecn_ce: p.ecn_ce,
        }
    }
}

#[pymethods]
impl Packet {
    #[new]
    #[pyo3(signature = (opcode, dest_qp, psn, ack_req=false, solicited=false, pkey=core::DEFAULT_PKEY, va=0,
                        rkey=0, dma_len=0, imm=0, syndrome=0, msn=0, payload=Vec::new(), ecn_ce=false))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        opcode: u8,
        dest_qp: u32,
        psn: u32,
        ack_req: bool,
        solicited: bool,
        pkey: u16,
        va: u64,
        rkey: u32,
        dma_len: u32,
        imm: u32,
        syndrome: u8,
        msn: u32,
        payload: Vec<u8>,
        ecn_ce: bool,
    ) -> Self {
        Packet {
            opcode,
            dest_qp,
            psn,
            ack_req,
            solicited,
            pkey,
            va,
            rkey,
            dma_len,
            imm,
            syndrome,
            msn,
            payload,
            ecn_ce,
        }
    }

    #[getter]
    fn payload<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.payload)
    }

    #[setter]
    fn set_payload(&mut self, payload: Vec<u8>) {
        self.payload = payload;
    }

    fn __repr__(&self) -> String {
        format!(
            "Packet(opcode={}, dest_qp={}, psn={}, ack_req={}, solicited={}, pkey={}, va={}, rkey={}, dma_len={}, \
             imm={}, syndrome={}, msn={}, payload=<{} bytes>, ecn_ce={})",
            self.opcode,
            self.dest_qp,
            self.psn,
            py_bool(self.ack_req),
            py_bool(self.solicited),
            self.pkey,
            self.va,
            self.rkey,
            self.dma_len,
            self.imm,
            self.syndrome,
            self.msn,
            self.payload.len(),
            py_bool(self.ecn_ce)
        )
    }
}

fn py_bool(value: bool) -> &'static str {
    if value {
        "True"
    } else {
        "False"
    }
}

/// `psn + n` in the 24-bit PSN space.
#[pyfunction]
fn psn_add(psn: u32, n: i64) -> u32 {
    core::psn_add(psn, n)
}

/// Signed distance `a - b` in the 24-bit PSN space (window of 2**23).
#[pyfunction]
fn psn_diff(a: u32, b: u32) -> i32 {
    core::psn_diff(a, b)
}

fn opcodes<'py>(py: Python<'py>, keep: fn(u8) -> bool) -> PyResult<Bound<'py, PyFrozenSet>> {
    let chosen: Vec<u8> = core::opcode::ALL
        .iter()
        .map(|&(_, op)| op)
        .filter(|&op| keep(op))
        .collect();
    PyFrozenSet::new(py, &chosen)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<Packet>()?;
    // Opcode: an IntEnum built from the core's table, so `Opcode.ACK == 0x11` and `Opcode(0x11)` work.
    let members: Vec<(&str, u8)> = core::opcode::ALL.to_vec();
    let opcode = py
        .import("enum")?
        .getattr("IntEnum")?
        .call1(("Opcode", members))?;
    opcode.setattr("__module__", "emulator._core.transport")?;
    m.add("Opcode", opcode)?;
    m.add("HAS_RETH", opcodes(py, core::opcode::has_reth)?)?;
    m.add("HAS_IMM", opcodes(py, core::opcode::has_imm)?)?;
    m.add("HAS_AETH", opcodes(py, core::opcode::has_aeth)?)?;
    m.add("HAS_PAYLOAD", opcodes(py, core::opcode::has_payload)?)?;
    m.add("PSN_MASK", core::PSN_MASK)?;
    m.add("DEFAULT_PKEY", core::DEFAULT_PKEY)?;
    m.add("SYNDROME_ACK", core::SYNDROME_ACK)?;
    m.add("SYNDROME_RNR_NAK", core::SYNDROME_RNR_NAK)?;
    m.add("NAK_PSN_SEQUENCE_ERROR", core::NAK_PSN_SEQUENCE_ERROR)?;
    m.add("NAK_INVALID_REQUEST", core::NAK_INVALID_REQUEST)?;
    m.add("NAK_REMOTE_ACCESS_ERROR", core::NAK_REMOTE_ACCESS_ERROR)?;
    m.add(
        "NAK_REMOTE_OPERATIONAL_ERROR",
        core::NAK_REMOTE_OPERATIONAL_ERROR,
    )?;
    m.add_function(wrap_pyfunction!(psn_add, m)?)?;
    m.add_function(wrap_pyfunction!(psn_diff, m)?)?;
    Ok(())
}
