//! `emulator._core.dataplane.Nic`: a host's RNIC, compiled (crates/fabric-core's `agent::nic`).
//!
//! The host agent's Python verbs server holds one: it registers regions (their memfds checked first by
//! `emulator.agents.memory.check_memfd`), connects QPs, posts work requests and takes completions through it.
//! The loop serves the frames (`Loop.add_host`). `UnwiredNic(config)` is the same RNIC on a wire in memory, for
//! unit tests: frames handed in with `receive`, frames sent kept, the kernel queue's room set by the test.
use std::net::Ipv4Addr;
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex};

use fabric_agents::lock;
use fabric_agents::nic::{LinkKind, NicPlane};
use fabric_core::agent::nic::{Nic as CoreNic, NicConfig, TimerKind, Wire};
use fabric_core::agent::switch::Sent;
use fabric_core::model::ib_port::IbPortConfig;
use fabric_core::model::rc::{RcCounters, RecvWr, SendWr};
use fabric_core::model::rx_pipeline::RxPipeline;
use fabric_core::model::spray::SprayPolicy;
use fabric_core::model::uet::UetSpec;
use fabric_core::wire::mac::ETH_LEN;
use fabric_io::io::mapped::MappedFile;
use pyo3::exceptions::{PyOSError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::fidelity::{Durations, EgressWire};
use crate::roce::parse_mac;

/// A send work request's columns: wr_id, opcode, addr, length, lkey, remote_addr, rkey, imm, signaled.
type SendRow = (u64, u8, u64, u64, u32, u64, u32, u32, bool);
/// A receive work request's columns: wr_id, addr, length, lkey.
type RecvRow = (u64, u64, u64, u32);

/// The wire of an unwired RNIC: what it sent, and how many frames the "kernel queue" takes (None: any).
#[derive(Default)]
struct MemoryWire {
    sent: Vec<Vec<u8>>,
    room: Option<usize>,
    refuse: bool,
    readable: bool,
    writable: bool,
}

impl Wire for MemoryWire {
    fn send(&mut self, frame: &[u8]) -> Sent {
        if self.refuse {
            return Sent::Refused;
        }
        match &mut self.room {
            Some(0) => return Sent::Full,
            Some(room) => *room -= 1,
            None => {}
        }
        self.sent.push(frame.to_vec());
        Sent::Taken
    }

    fn interest(&mut self, readable: bool, writable: bool) {
        self.readable = readable;
        self.writable = writable;
    }
}

struct Unwired {
    nic: CoreNic<MappedFile>,
    wire: MemoryWire,
}

enum Handle {
    Wired(Arc<Mutex<NicPlane>>),
    Unwired(Box<Mutex<Unwired>>),
}

/// One host's RNIC.
#[pyclass(module = "emulator._core.dataplane", frozen, subclass)]
pub struct Nic {
    handle: Handle,
}

impl Nic {
    /// `f` on the RNIC.
    fn with<R>(&self, f: impl FnOnce(&mut CoreNic<MappedFile>) -> R) -> R {
        match &self.handle {
            Handle::Wired(plane) => f(lock(plane).nic_mut()),
            Handle::Unwired(unwired) => f(&mut lock(unwired).nic),
        }
    }

    /// `f` on an unwired RNIC and its wire (`UnwiredNic`'s; a RuntimeError on a wired one: its wire is the loop's).
    fn on_memory<R>(
        &self,
        f: impl FnOnce(&mut CoreNic<MappedFile>, &mut MemoryWire) -> R,
    ) -> PyResult<R> {
        match &self.handle {
            Handle::Unwired(unwired) => {
                let mut unwired = lock(unwired);
                let Unwired { nic, wire } = &mut *unwired;
                Ok(f(nic, wire))
            }
            Handle::Wired(_) => Err(PyRuntimeError::new_err(
                "a wired RNIC's wire is the loop's (this is for UnwiredNic)",
            )),
        }
    }

    /// The plane the loop serves, if wired.
    pub(crate) fn plane(&self) -> Option<Arc<Mutex<NicPlane>>> {
        match &self.handle {
            Handle::Wired(plane) => Some(plane.clone()),
            Handle::Unwired(_) => None,
        }
    }
}

/// The RNIC of `config` (the agents' `HostConfig`) and its link's MTU.
fn nic_of(config: &Bound<'_, PyAny>) -> PyResult<(CoreNic<MappedFile>, usize)> {
    let mac: String = config.getattr("mac")?.extract()?;
    let peer_mac: String = config.getattr("peer_mac")?.extract()?;
    let ip: Ipv4Addr = config
        .getattr("ip")?
        .extract::<String>()?
        .parse()
        .map_err(|_| PyValueError::new_err("the host's ip is no IPv4 address"))?;
    let rate_bps: u64 = config.getattr("rate_bps")?.extract()?;
    let mtu: usize = config.getattr("mtu")?.extract()?;
    let seed: i128 = config.getattr("seed")?.extract()?;
    let cc = config.getattr("cc")?;
    let ib = config.getattr("ib")?;
    let ib = if ib.is_none() {
        None
    } else {
        let sl: u8 = ib.getattr("sl")?.extract()?;
        let sl2vl: Vec<u8> = ib.getattr("sl2vl")?.extract()?;
        let lids = ib
            .getattr("lids")?
            .cast_into::<PyDict>()?
            .iter()
            .map(|(ip, lid)| Ok((ip.extract::<String>()?, lid.extract::<u16>()?)))
            .collect::<PyResult<Vec<_>>>()?;
        Some(IbPortConfig {
            mac: parse_mac(&mac)?,
            gateway_mac: parse_mac(&peer_mac)?,
            lid: ib.getattr("lid")?.extract()?,
            lids,
            sl,
            vl: *sl2vl
                .get(usize::from(sl))
                .ok_or_else(|| PyValueError::new_err("sl2vl has no entry for the host's SL"))?,
            vls: ib.getattr("vls")?.extract()?,
            capacity: ib.getattr("capacity")?.extract()?,
            peer_capacity: ib.getattr("peer_capacity")?.extract()?,
            rate_bps,
            frame_bytes: (ETH_LEN + mtu) as u64,
            fc_floor_ns: ib.getattr("fc_floor")?.extract()?,
        })
    };
    let nic = CoreNic::new(NicConfig {
        name: config.getattr("name")?.extract()?,
        mac: parse_mac(&mac)?,
        gateway_mac: parse_mac(&peer_mac)?,
        ip: ip.octets(),
        rate_bps,
        cc: if cc.is_none() {
            None
        } else {
            Some(crate::dcqcn::params_of(&cc)?)
        },
        ib,
        uet: uet_of(&config.getattr("uet")?)?,
        monitor: config.getattr("monitor")?.is_truthy()?,
        seed: (seed & 0xFFFF_FFFF_FFFF_FFFF) as u64,
    })
    .map_err(PyValueError::new_err)?;
    Ok((nic, mtu))
}

/// The uet fabric's transport of a `HostConfig` (its `UetTransport`, or None: RC).
fn uet_of(uet: &Bound<'_, PyAny>) -> PyResult<Option<UetSpec>> {
    if uet.is_none() {
        return Ok(None);
    }
    let spray: String = uet.getattr("spray")?.extract()?;
    Ok(Some(UetSpec {
        spray: SprayPolicy::parse(&spray)
            .ok_or_else(|| PyValueError::new_err(format!("no spray policy {spray:?}")))?,
        evs: uet.getattr("evs")?.extract()?,
        nscc: uet.getattr("nscc")?.is_truthy()?,
        network_rtt_ns: uet.getattr("network_rtt_ns")?.extract()?,
        timeout_ns: uet.getattr("timeout_ns")?.extract()?,
        rccc: uet.getattr("rccc")?.is_truthy()?,
        nscc_target_ns: uet.getattr("target_delay_ns")?.extract()?,
        nscc_gamma: uet.getattr("gamma")?.extract()?,
    }))
}

fn kind_name(kind: TimerKind) -> &'static str {
    match kind {
        TimerKind::Link => "link",
        TimerKind::Timeout => "timeout",
        TimerKind::Start => "start",
    }
}

fn counters_dict<'py>(
    py: Python<'py>,
    values: &[u64; RcCounters::COUNT],
) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    for (name, value) in RcCounters::NAMES.iter().zip(values) {
        dict.set_item(name, value)?;
    }
    Ok(dict)
}

#[pymethods]
impl Nic {
    /// The RNIC of `config` (the agents' `HostConfig`) on its interface, opened in the caller's namespace.
    #[new]
    fn new(config: &Bound<'_, PyAny>) -> PyResult<Self> {
        let (nic, mtu) = nic_of(config)?;
        let ifname: String = config.getattr("ifname")?.extract()?;
        let rate_bps: u64 = config.getattr("rate_bps")?.extract()?;
        let kind = if !config.getattr("ib")?.is_none() {
            LinkKind::Ib
        } else if !config.getattr("uet")?.is_none() {
            LinkKind::Uet
        } else {
            LinkKind::Roce
        };
        let plane = NicPlane::open(nic, &ifname, mtu, rate_bps, kind)
            .map_err(|error| PyOSError::new_err(format!("{ifname}: {error}")))?;
        Ok(Nic {
            handle: Handle::Wired(Arc::new(Mutex::new(plane))),
        })
    }

    // --- the verbs side ---

    /// Maps `length` bytes of the memfd `fd` (checked by the caller) as a region of domain `owner` at the
    /// application's address `addr` with `access`: its key (a ValueError says why not).
    fn register(
        &self,
        owner: u32,
        addr: u64,
        length: u64,
        access: u32,
        fd: RawFd,
    ) -> PyResult<u32> {
        self.with(|nic| {
            nic.regions_mut()
                .register_with(owner, addr, length, access, |len| {
                    MappedFile::map(fd, len)
                        .map_err(|error| format!("cannot map the region's memfd: {error}"))
                })
        })
        .map_err(PyValueError::new_err)
    }

    fn deregister(&self, key: u32, owner: u32) -> PyResult<()> {
        self.with(|nic| nic.regions_mut().deregister(key, owner))
            .map_err(PyValueError::new_err)
    }

    /// Drops every region of domain `owner`.
    fn release_owner(&self, owner: u32) {
        self.with(|nic| nic.regions_mut().release_owner(owner));
    }

    /// Regions of domain `owner`, or of every domain with None.
    #[pyo3(signature = (owner=None))]
    fn regions(&self, owner: Option<u32>) -> usize {
        self.with(|nic| match owner {
            Some(owner) => nic.regions().count_of(owner),
            None => nic.regions().len(),
        })
    }

    /// Connects QP `qpn` of domain `owner` (its first PSN `initial_psn`, its attributes `config`, an
    /// `RcConfig`) to `remote_qpn` at `remote_ip` starting at `remote_psn`, with the receives posted before.
    #[allow(clippy::too_many_arguments)]
    fn connect(
        &self,
        qpn: u32,
        owner: u32,
        initial_psn: u32,
        config: crate::rc::RcConfig,
        remote_qpn: u32,
        remote_psn: u32,
        remote_ip: &str,
        early_recvs: Vec<RecvRow>,
    ) -> PyResult<()> {
        let ip: Ipv4Addr = remote_ip
            .parse()
            .map_err(|_| PyValueError::new_err(format!("{remote_ip:?} is no IPv4 address")))?;
        let recvs: Vec<RecvWr> = early_recvs.into_iter().map(recv_wr).collect();
        self.with(|nic| {
            nic.connect(
                qpn,
                owner,
                initial_psn,
                config.0,
                remote_qpn,
                remote_psn,
                ip.octets(),
                &recvs,
            )
        })
        .map_err(PyValueError::new_err)
    }

    /// Queues send work requests (rows of SEND_WR_COLUMNS) on QP `qpn`.
    fn post_send(&self, qpn: u32, rows: Vec<SendRow>) -> PyResult<()> {
        let wrs = rows
            .into_iter()
            .map(send_wr)
            .collect::<PyResult<Vec<SendWr>>>()?;
        self.with(|nic| nic.post_send(qpn, &wrs))
            .map_err(PyValueError::new_err)
    }

    /// Holds send work requests for QP `qpn` until `at` (CLOCK_MONOTONIC ns), when the RNIC's own deadline
    /// posts them (`Nic::post_send_at`).
    fn post_send_at(&self, qpn: u32, rows: Vec<SendRow>, at: u64) -> PyResult<()> {
        let wrs = rows
            .into_iter()
            .map(send_wr)
            .collect::<PyResult<Vec<SendWr>>>()?;
        self.with(|nic| nic.post_send_at(qpn, wrs, at))
            .map_err(PyValueError::new_err)
    }

    /// When QP `qpn`'s last timed post was released, or None.
    fn released_ns(&self, qpn: u32) -> Option<u64> {
        self.with(|nic| nic.released_ns(qpn))
    }

    /// Queues receive work requests (rows of RECV_WR_COLUMNS) on QP `qpn`.
    fn post_recv(&self, qpn: u32, rows: Vec<RecvRow>) -> PyResult<()> {
        let wrs: Vec<RecvWr> = rows.into_iter().map(recv_wr).collect();
        self.with(|nic| nic.post_recv(qpn, &wrs))
            .map_err(PyValueError::new_err)
    }

    /// (send queue, receive queue) lengths of QP `qpn`, or None if it is not connected.
    fn queue_lengths(&self, qpn: u32) -> Option<(usize, usize)> {
        self.with(|nic| nic.queue_lengths(qpn))
    }

    /// (state, counters) of QP `qpn`, or None if it is not connected.
    fn qp_status<'py>(
        &self,
        py: Python<'py>,
        qpn: u32,
    ) -> PyResult<Option<(&'static str, Bound<'py, PyDict>)>> {
        match self.with(|nic| nic.qp_status(qpn)) {
            None => Ok(None),
            Some((state, counters)) => {
                Ok(Some((state.name(), counters_dict(py, &counters.values())?)))
            }
        }
    }

    fn destroy_qp(&self, qpn: u32) {
        self.with(|nic| nic.destroy_qp(qpn));
    }

    /// Every QP's new completions: (qp_num, wr_id, status, opcode, byte_len, imm or None), oldest first.
    #[allow(clippy::type_complexity)]
    fn completions(&self) -> Vec<(u32, u64, u8, u8, u64, Option<u32>)> {
        let mut out = Vec::new();
        self.with(|nic| nic.completions(&mut out));
        out.into_iter()
            .map(|c| {
                (
                    c.qp_num,
                    c.wr_id,
                    c.status as u8,
                    c.opcode as u8,
                    c.byte_len,
                    c.imm,
                )
            })
            .collect()
    }

    /// The pause changes the slow receiver asked for since the last call (True: XOFF).
    fn pause_changes(&self) -> Vec<bool> {
        self.with(|nic| nic.take_pause_changes().collect())
    }

    // --- faults and the monitor ---

    /// The receive pipeline hangs (True) or works again.
    fn stall(&self, stalled: bool) -> PyResult<()> {
        match &self.handle {
            Handle::Wired(plane) => {
                // The loop's next turn applies the interest: the socket stays watched meanwhile, and the
                // plane reads nothing while stalled.
                lock(plane).stall_later(stalled);
                Ok(())
            }
            Handle::Unwired(_) => self.on_memory(|nic, wire| nic.stall(stalled, wire)),
        }
    }

    /// The slow receiver: frames taken at `rate_bps` through a buffer of `buffer` bytes that pauses the port
    /// at `xoff` bytes and lets it go at `xon`. A NIC already slow keeps its pipeline.
    fn start_slow(&self, rate_bps: u64, buffer: u64, xoff: u64, xon: u64) -> PyResult<()> {
        let pipeline = RxPipeline::new(rate_bps.max(1), buffer, xoff, xon)
            .map_err(|error| PyValueError::new_err(error.to_string()))?;
        self.with(|nic| nic.start_slow(pipeline));
        Ok(())
    }

    /// The slow receiver's new rate from `now`; False when it is not slow.
    fn set_slow_rate(&self, now: u64, rate_bps: u64) -> bool {
        self.with(|nic| nic.set_slow_rate(now, rate_bps))
    }

    /// Ends the slow receiver: every held frame taken at once.
    fn end_slow(&self, now: u64) {
        self.with(|nic| nic.end_slow(now));
    }

    /// `{"rate_bps", "held_bytes", "peak_bytes", "dropped", "pausing"}` while slow, else None.
    fn slow_figures<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let Some(slow) = self.with(|nic| nic.slow_figures()) else {
            return Ok(None);
        };
        let dict = PyDict::new(py);
        dict.set_item("rate_bps", slow.rate_bps)?;
        dict.set_item("held_bytes", slow.held_bytes)?;
        dict.set_item("peak_bytes", slow.peak_bytes)?;
        dict.set_item("dropped", slow.dropped)?;
        dict.set_item("pausing", slow.pausing)?;
        Ok(Some(dict))
    }

    /// The host's pause gates (a wired RNIC's; opened in the calling thread's namespace): per priority the
    /// netlink request that closes its TBF, the one that opens it and the gate frame, and the kick frame.
    fn wire_gates(
        &self,
        close: Vec<Vec<u8>>,
        open: Vec<Vec<u8>>,
        gate_frames: Vec<Vec<u8>>,
        kick: Vec<u8>,
    ) -> PyResult<()> {
        let Handle::Wired(plane) = &self.handle else {
            return Err(PyRuntimeError::new_err(
                "an unwired RNIC has no pause gates (UnwiredNic.gate_changes lists what they would do)",
            ));
        };
        lock(plane)
            .wire_gates(close, open, gate_frames, kick)
            .map_err(|e| PyOSError::new_err(format!("pause gates: {e}")))
    }

    /// What PFC did to the host by `now`: `pfc_received` (frames per priority enabled), `malformed` (MAC
    /// control frames that were no PFC enabling a class), `paused_ns` and `paused_now` per priority, and
    /// `gate_failures` with the first one's reason `gate_error` (a wired RNIC's gates).
    fn pfc_figures<'py>(&self, py: Python<'py>, now: u64) -> PyResult<Bound<'py, PyDict>> {
        let dict = PyDict::new(py);
        self.with(|nic| {
            let (received, malformed) = nic.pfc_figures();
            let state = nic.pause_state();
            dict.set_item("pfc_received", received.to_vec())?;
            dict.set_item("malformed", malformed)?;
            let priorities = 0..received.len();
            dict.set_item(
                "paused_ns",
                priorities
                    .clone()
                    .map(|p| state.paused_time(p, now))
                    .collect::<Vec<_>>(),
            )?;
            dict.set_item(
                "paused_now",
                priorities.map(|p| state.is_paused(p)).collect::<Vec<_>>(),
            )
        })?;
        let failures = self
            .plane()
            .map(|plane| lock(&plane).gate_failures().clone())
            .unwrap_or_default();
        dict.set_item("gate_failures", failures.count)?;
        dict.set_item("gate_error", failures.first)?;
        Ok(dict)
    }

    /// (the monitor's wire, link timers' lateness, timeout timers' lateness, the shortest QP timeout).
    fn fidelity_figures(&self) -> (EgressWire, Durations, Durations, u64, Durations) {
        self.with(|nic| {
            let (wire, link, timeout, shortest) = nic.fidelity();
            (
                EgressWire::of(*wire),
                Durations::of(link.clone()),
                Durations::of(timeout.clone()),
                shortest,
                Durations::of(nic.starts().clone()),
            )
        })
    }

    fn reset_fidelity(&self) {
        self.with(|nic| nic.reset_fidelity());
    }

    /// The DCQCN rate trace's rows (CSV without its header).
    fn rate_rows(&self) -> String {
        self.with(|nic| nic.rate_rows().to_owned())
    }

    /// Frames that were no packet this RNIC's link speaks.
    fn malformed(&self) -> u64 {
        self.with(|nic| nic.malformed())
    }

    /// The counters: the RNIC's own, QPs, regions, transport totals, the link's and DCQCN's.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let kernel = match &self.handle {
            Handle::Wired(plane) => lock(plane).kernel_drops(),
            Handle::Unwired(_) => 0,
        };
        let dict = PyDict::new(py);
        self.with(|nic| -> PyResult<()> {
            for (name, value) in nic.counters().items() {
                dict.set_item(name, value)?;
            }
            dict.set_item("rx_kernel_drops", kernel)?;
            dict.set_item("qps", nic.qp_count())?;
            dict.set_item("regions", nic.regions().len())?;
            dict.set_item("transport", counters_dict(py, &nic.transport_totals())?)?;
            let link = match nic.ib_port() {
                Some(port) => crate::ib_port::port_stats(py, port)?,
                None => {
                    let link = PyDict::new(py);
                    link.set_item("malformed", nic.malformed())?;
                    link
                }
            };
            dict.set_item("link", link)?;
            let cc = PyDict::new(py);
            match nic.cc_figures() {
                None => cc.set_item("name", "none")?,
                Some((ce, rows, dropped, limited)) => {
                    cc.set_item("name", "dcqcn")?;
                    cc.set_item("ce_received", ce)?;
                    cc.set_item("rate_trace_rows", rows)?;
                    cc.set_item("rate_trace_dropped", dropped)?;
                    cc.set_item("limited_qps", limited)?;
                }
            }
            dict.set_item("cc", cc)?;
            Ok(())
        })?;
        Ok(dict)
    }

    /// The RNIC stops (the loop drops it at the end of its batch).
    fn stop(&self) {
        if let Handle::Wired(plane) = &self.handle {
            lock(plane).stop();
        }
    }
}

/// An RNIC on a wire in memory, for unit tests: frames handed in with `receive`, frames sent kept (`take_sent`),
/// the kernel queue's room set by the test (`room`), the loop's calls made by the test.
#[pyclass(module = "emulator._core.dataplane", frozen, extends = Nic)]
pub struct UnwiredNic;

#[pymethods]
impl UnwiredNic {
    /// The RNIC of `config` (the agents' `HostConfig`) on a wire in memory.
    #[new]
    fn new(config: &Bound<'_, PyAny>) -> PyResult<PyClassInitializer<Self>> {
        let (nic, _) = nic_of(config)?;
        let base = Nic {
            handle: Handle::Unwired(Box::new(Mutex::new(Unwired {
                nic,
                wire: MemoryWire {
                    readable: true,
                    ..MemoryWire::default()
                },
            }))),
        };
        Ok(PyClassInitializer::from(base).add_subclass(UnwiredNic))
    }

    /// A MAC control frame from the switch that arrived at `arrival`.
    fn receive_pfc(slf: &Bound<'_, Self>, arrival: u64, frame: &[u8]) -> PyResult<()> {
        slf.as_super()
            .get()
            .on_memory(|nic, _| nic.receive_pfc(arrival, frame))
    }

    /// The pause gates' changes since the last call, oldest first: (priority, closed).
    fn gate_changes(slf: &Bound<'_, Self>) -> PyResult<Vec<(usize, bool)>> {
        slf.as_super()
            .get()
            .on_memory(|nic, _| nic.take_gate_changes().collect())
    }

    /// A frame from the wire at `now`.
    fn receive(slf: &Bound<'_, Self>, now: u64, frame: &[u8]) -> PyResult<()> {
        slf.as_super().get().on_memory(|nic, wire| {
            if wire.readable {
                nic.receive(now, frame);
            }
        })
    }

    /// After a batch of events: what can go is sent. The next deadline.
    fn after_events(slf: &Bound<'_, Self>, now: u64) -> PyResult<Option<u64>> {
        slf.as_super()
            .get()
            .on_memory(|nic, wire| nic.after_events(now, wire))
    }

    /// The socket has room again at `now`.
    fn writable(slf: &Bound<'_, Self>, now: u64) -> PyResult<()> {
        slf.as_super()
            .get()
            .on_memory(|nic, wire| nic.writable(now, wire))
    }

    /// The deadline `deadline` came at `now`.
    fn deadline(slf: &Bound<'_, Self>, deadline: u64, now: u64) -> PyResult<()> {
        slf.as_super()
            .get()
            .on_memory(|nic, _| nic.deadline(deadline, now))
    }

    /// (the earliest deadline, its kind: "link" or "timeout"), or None.
    fn next_deadline(slf: &Bound<'_, Self>) -> Option<(u64, &'static str)> {
        slf.as_super()
            .get()
            .with(|nic| nic.next_deadline())
            .map(|(at, kind)| (at, kind_name(kind)))
    }

    /// The frames sent since the last call, oldest first.
    fn take_sent<'py>(
        slf: &Bound<'py, Self>,
        py: Python<'py>,
    ) -> PyResult<Vec<Bound<'py, PyBytes>>> {
        slf.as_super()
            .get()
            .on_memory(|_, wire| wire.sent.drain(..).map(|f| PyBytes::new(py, &f)).collect())
    }

    /// The kernel queue takes `room` more frames, or any number with None.
    fn room(slf: &Bound<'_, Self>, room: Option<usize>) -> PyResult<()> {
        slf.as_super().get().on_memory(|_, wire| wire.room = room)
    }

    /// The kernel refuses every frame for good (True: a link down) or takes them again.
    fn refuse(slf: &Bound<'_, Self>, refuse: bool) -> PyResult<()> {
        slf.as_super()
            .get()
            .on_memory(|_, wire| wire.refuse = refuse)
    }

    /// Whether the RNIC waits for room in the kernel queue.
    #[getter]
    fn wants_writable(slf: &Bound<'_, Self>) -> PyResult<bool> {
        slf.as_super().get().on_memory(|_, wire| wire.writable)
    }

    /// When the monitor's virtual wire is next free.
    #[getter]
    fn wire_end(slf: &Bound<'_, Self>) -> u64 {
        slf.as_super().get().with(|nic| nic.wire_end())
    }
}

fn send_wr(row: SendRow) -> PyResult<SendWr> {
    let (wr_id, opcode, addr, length, lkey, remote_addr, rkey, imm, signaled) = row;
    Ok(SendWr {
        wr_id,
        opcode: crate::rc::wr_opcode(opcode)?,
        addr,
        length,
        lkey,
        remote_addr,
        rkey,
        imm,
        signaled,
    })
}

fn recv_wr(row: RecvRow) -> RecvWr {
    let (wr_id, addr, length, lkey) = row;
    RecvWr {
        wr_id,
        addr,
        length,
        lkey,
    }
}
