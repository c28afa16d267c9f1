//! `emulator._core.dataplane`: the loop of a data-plane process, compiled, and the compiled switch.
//!
//! `Loop` is the loop `emulator/agents/worker.py` serves its agents with: one epoll and one timerfd for
//! every agent of the process (crates/fabric-io's event loop, with its rules), run with the GIL released.
//! Compiled agents (`Switch`) are served there without Python. Agents written in Python (the hosts, and
//! every agent's control socket) keep the interface of the Python loop this replaced: `watch(fd, mask,
//! handler, owner)`, `modify`, `unwatch`, `timer(owner).set(deadline)`, `add(agent)`, `stopping`. Their calls
//! take the GIL for the call; what they change in the epoll is applied when their call returns.
use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use fabric_agents::lock;
use fabric_agents::nic::{NicDriver, NicPlane};
use fabric_agents::switch::{SwitchDriver, SwitchPlane};
use fabric_core::agent::switch::{PortSetup, Sent, Switch as CoreSwitch, Wires};
use fabric_core::model::fidelity as fidelity_core;
use fabric_core::model::ib_plane::{IbDrop, IB_DROPS};
use fabric_core::model::rng::CpythonRandom;
use fabric_core::wire::mac::ETH_LEN;
use fabric_core::wire::pfc::PRIORITIES;
use fabric_io::event_loop::{Agent, EventLoop, Registry};
use fabric_io::io::poll::Ready;
use pyo3::exceptions::{PyOSError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

use crate::fidelity::{durations_summary, wire_summary, Durations, EgressWire};
use crate::link::small_seed_words;
use crate::nic::{Nic, UnwiredNic};
use crate::roce::parse_mac;

/// An agent timer's value when it is not armed.
const NO_DEADLINE: u64 = u64::MAX;
/// The errors of epoll_ctl on a descriptor closed meanwhile, and on one still watched (the same numbers on every
/// Linux architecture; the bindings do not link libc).
const ENOENT: i32 = 2;
const EBADF: i32 = 9;
const EEXIST: i32 = 17;
/// Control clients too slow to finish are dropped by their agent's `expire_control`, looked at this often.
const CONTROL_EXPIRY_NS: u64 = 500_000_000;

/// One Python agent's deadline (`time.monotonic_ns()`), or None.
#[pyclass(module = "emulator._core.dataplane", frozen)]
pub struct AgentTimer {
    deadline: Arc<AtomicU64>,
}

#[pymethods]
impl AgentTimer {
    /// Fire at `deadline` (absolute), or never with None.
    #[pyo3(signature = (deadline))]
    fn set(&self, deadline: Option<u64>) {
        self.deadline
            .store(deadline.unwrap_or(NO_DEADLINE), Ordering::Relaxed);
    }

    #[getter]
    fn deadline(&self) -> Option<u64> {
        let deadline = self.deadline.load(Ordering::Relaxed);
        (deadline != NO_DEADLINE).then_some(deadline)
    }
}

/// A change a Python agent asked of the epoll, applied when its call returns.
enum Op {
    Watch {
        owner: Py<PyAny>,
        fd: RawFd,
        events: u32,
        handler: Py<PyAny>,
    },
    Modify {
        fd: RawFd,
        events: u32,
    },
    Unwatch {
        fd: RawFd,
    },
}

/// What the loop and its Python agents share: the changes asked, and the first error a Python call raised
/// (it ends the loop, and `run` raises it, as the Python loop let it through).
#[derive(Default)]
struct Shared {
    ops: Vec<Op>,
    error: Option<PyErr>,
    /// The Python agents the loop finished (their objects' addresses).
    ended: Vec<usize>,
}

/// A Python agent (`emulator.agents.base.AgentBase`) in the compiled loop.
struct PyAgent {
    owner: Py<PyAny>,
    timer: Arc<AtomicU64>,
    /// Handlers by token; a token is reused once its descriptor is unwatched.
    handlers: Vec<Option<(RawFd, Py<PyAny>)>>,
    tokens: HashMap<RawFd, u32>,
    /// When its control clients are next looked at (while it has any).
    expire_at: Option<u64>,
    running: bool,
    shared: Arc<Mutex<Shared>>,
    stop: Arc<AtomicBool>,
}

impl PyAgent {
    /// Keeps the first error and ends the loop.
    fn record(&self, error: PyErr) {
        let mut shared = lock(&self.shared);
        if shared.error.is_none() {
            shared.error = Some(error);
        }
        self.stop.store(true, Ordering::Relaxed);
    }

    /// After a Python call: its error kept, the epoll changes it asked applied, whether the agent goes on.
    fn settle(&mut self, py: Python<'_>, result: PyResult<()>, registry: &Registry<'_>) {
        if let Err(error) = result {
            self.record(error);
        }
        self.apply(registry);
        self.running = self
            .owner
            .bind(py)
            .getattr("running")
            .and_then(|running| running.is_truthy())
            .unwrap_or(false);
    }

    /// Applies the queued epoll changes that are this agent's (its own watches, and its descriptors').
    fn apply(&mut self, registry: &Registry<'_>) {
        let ops = std::mem::take(&mut lock(&self.shared).ops);
        if ops.is_empty() {
            return;
        }
        let mut others = Vec::new();
        for op in ops {
            let result = match op {
                Op::Watch {
                    owner,
                    fd,
                    events,
                    handler,
                } if owner.as_ptr() == self.owner.as_ptr() => {
                    self.watch(fd, events, handler, registry)
                }
                Op::Modify { fd, events } if self.tokens.contains_key(&fd) => {
                    let token = self.tokens.get(&fd).copied().unwrap_or_default();
                    registry.modify(fd, token, events)
                }
                Op::Unwatch { fd } if self.tokens.contains_key(&fd) => {
                    if let Some(token) = self.tokens.remove(&fd) {
                        if let Some(slot) = self.handlers.get_mut(token as usize) {
                            *slot = None;
                        }
                    }
                    let _ = registry.unwatch(fd); // already closed: the epoll forgot it itself
                    Ok(())
                }
                other => {
                    others.push(other);
                    Ok(())
                }
            };
            match result {
                // The descriptor was closed after the call asked (a control client answered and closed at
                // once): the epoll forgot it with its last reference.
                Err(error) if matches!(error.raw_os_error(), Some(EBADF | ENOENT)) => {}
                Err(error) => self.record(PyOSError::new_err(error.to_string())),
                Ok(()) => {}
            }
        }
        if !others.is_empty() {
            let mut shared = lock(&self.shared);
            others.append(&mut shared.ops);
            shared.ops = others;
        }
    }

    fn watch(
        &mut self,
        fd: RawFd,
        events: u32,
        handler: Py<PyAny>,
        registry: &Registry<'_>,
    ) -> std::io::Result<()> {
        if let Some(old) = self.tokens.remove(&fd) {
            // A descriptor closed without an unwatch, its number given again: the new one replaces it.
            if let Some(slot) = self.handlers.get_mut(old as usize) {
                *slot = None;
            }
        }
        let token = match self.handlers.iter().position(Option::is_none) {
            Some(free) => free,
            None => {
                self.handlers.push(None);
                self.handlers.len() - 1
            }
        };
        let token32 = u32::try_from(token).unwrap_or(u32::MAX);
        if let Some(slot) = self.handlers.get_mut(token) {
            *slot = Some((fd, handler));
        }
        self.tokens.insert(fd, token32);
        match registry.watch(fd, token32, events) {
            Err(error) if error.raw_os_error() == Some(EEXIST) => {
                registry.modify(fd, token32, events)
            }
            other => other,
        }
    }
}

impl Agent for PyAgent {
    fn ready(&mut self, token: u32, ready: Ready, now: u64, registry: &Registry<'_>) {
        Python::attach(|py| {
            let Some(Some((fd, handler))) = self
                .handlers
                .get(token as usize)
                .map(|slot| slot.as_ref().map(|(fd, h)| (*fd, h.clone_ref(py))))
            else {
                return; // unwatched by an earlier handler of this batch
            };
            let result = handler.bind(py).call1((fd, ready.events, now)).map(drop);
            self.settle(py, result, registry);
        });
    }

    fn deadline(&mut self, _deadline: u64, now: u64, registry: &Registry<'_>) {
        Python::attach(|py| {
            if self.expire_at.is_some_and(|at| at <= now) {
                self.expire_at = None;
                let result = self
                    .owner
                    .bind(py)
                    .call_method1("expire_control", (now,))
                    .map(drop);
                self.settle(py, result, registry);
            }
            let due = self.timer.load(Ordering::Relaxed);
            if due != NO_DEADLINE && due <= now {
                self.timer.store(NO_DEADLINE, Ordering::Relaxed);
                let result = self
                    .owner
                    .bind(py)
                    .call_method1("on_deadline", (due, now))
                    .map(drop);
                self.settle(py, result, registry);
            }
        });
    }

    fn after_events(&mut self, now: u64, registry: &Registry<'_>) -> Option<u64> {
        Python::attach(|py| {
            let owner = self.owner.bind(py).clone();
            let result = owner.call_method1("after_events", (now,)).map(drop);
            self.settle(py, result, registry);
            let clients = owner
                .getattr("control_clients")
                .and_then(|clients| clients.is_truthy())
                .unwrap_or(false);
            if clients {
                self.expire_at
                    .get_or_insert(now.saturating_add(CONTROL_EXPIRY_NS));
            } else {
                self.expire_at = None;
            }
        });
        let timer = self.timer.load(Ordering::Relaxed);
        [(timer != NO_DEADLINE).then_some(timer), self.expire_at]
            .into_iter()
            .flatten()
            .min()
    }

    fn running(&self) -> bool {
        self.running
    }

    fn finish(&mut self, registry: &Registry<'_>) {
        for fd in self.tokens.keys() {
            let _ = registry.unwatch(*fd);
        }
        self.tokens.clear();
        self.handlers.clear();
        self.timer.store(NO_DEADLINE, Ordering::Relaxed);
        lock(&self.shared).ended.push(self.owner.as_ptr() as usize);
        Python::attach(|py| {
            if let Err(error) = self.owner.bind(py).call_method0("finish") {
                self.record(error);
            }
        });
    }
}

/// The token bit of a host's RNIC socket (its Python agent's tokens are small indices).
const NIC_TOKEN: u32 = 1 << 31;

/// A host: its Python agent (verbs server, PFC reaction, control socket) and its compiled RNIC, one agent of
/// the loop. The RNIC's frames never wake Python: the Python agent is called for its own descriptors and
/// deadline, and after a batch in which the RNIC has completions or pause changes for it. What Python posts
/// is sent at once, in the same `after_events`.
struct HostPair {
    python: PyAgent,
    nic: NicDriver,
    python_due: Option<u64>,
    nic_due: Option<u64>,
    /// The Python agent ran a handler or its deadline in this batch: its `after_events` is owed.
    python_called: bool,
}

impl Agent for HostPair {
    fn ready(&mut self, token: u32, ready: Ready, now: u64, registry: &Registry<'_>) {
        if token & NIC_TOKEN != 0 {
            self.nic.ready(token, ready, now, registry);
        } else {
            self.python.ready(token, ready, now, registry);
            self.python_called = true;
        }
    }

    fn deadline(&mut self, _deadline: u64, now: u64, registry: &Registry<'_>) {
        if let Some(due) = self.nic_due.filter(|&due| due <= now) {
            self.nic_due = None;
            self.nic.deadline(due, now, registry);
        }
        if let Some(due) = self.python_due.filter(|&due| due <= now) {
            self.python_due = None;
            self.python.deadline(due, now, registry);
            self.python_called = true;
        }
    }

    fn after_events(&mut self, now: u64, registry: &Registry<'_>) -> Option<u64> {
        if std::mem::take(&mut self.python_called) || self.nic.has_news() {
            self.python_due = self.python.after_events(now, registry);
        }
        self.nic_due = self.nic.after_events(now, registry);
        if self.nic.has_news() {
            // a completion of the sends just made (a local error): delivered now, not at the next frame
            self.python_due = self.python.after_events(now, registry);
            self.nic_due = self.nic.after_events(now, registry);
        }
        [self.python_due, self.nic_due].into_iter().flatten().min()
    }

    fn running(&self) -> bool {
        self.python.running()
    }

    fn finish(&mut self, registry: &Registry<'_>) {
        self.nic.finish(registry);
        self.python.finish(registry);
    }

    fn spin_ns(&self) -> u64 {
        match (self.nic_due, self.python_due) {
            (Some(nic), python) if python.is_none_or(|python| nic <= python) => self.nic.spin_ns(),
            _ => 0,
        }
    }
}

/// Every kind of agent a data-plane process serves.
enum WorkerAgent {
    Python(PyAgent),
    Switch(SwitchDriver),
    Host(Box<HostPair>),
}

impl Agent for WorkerAgent {
    fn ready(&mut self, token: u32, ready: Ready, now: u64, registry: &Registry<'_>) {
        match self {
            WorkerAgent::Python(agent) => agent.ready(token, ready, now, registry),
            WorkerAgent::Switch(agent) => agent.ready(token, ready, now, registry),
            WorkerAgent::Host(agent) => agent.ready(token, ready, now, registry),
        }
    }

    fn deadline(&mut self, deadline: u64, now: u64, registry: &Registry<'_>) {
        match self {
            WorkerAgent::Python(agent) => agent.deadline(deadline, now, registry),
            WorkerAgent::Switch(agent) => agent.deadline(deadline, now, registry),
            WorkerAgent::Host(agent) => agent.deadline(deadline, now, registry),
        }
    }

    fn after_events(&mut self, now: u64, registry: &Registry<'_>) -> Option<u64> {
        match self {
            WorkerAgent::Python(agent) => agent.after_events(now, registry),
            WorkerAgent::Switch(agent) => agent.after_events(now, registry),
            WorkerAgent::Host(agent) => agent.after_events(now, registry),
        }
    }

    fn running(&self) -> bool {
        match self {
            WorkerAgent::Python(agent) => agent.running(),
            WorkerAgent::Switch(agent) => agent.running(),
            WorkerAgent::Host(agent) => agent.running(),
        }
    }

    fn finish(&mut self, registry: &Registry<'_>) {
        match self {
            WorkerAgent::Python(agent) => agent.finish(registry),
            WorkerAgent::Switch(agent) => agent.finish(registry),
            WorkerAgent::Host(agent) => agent.finish(registry),
        }
    }
    fn spin_ns(&self) -> u64 {
        match self {
            WorkerAgent::Host(agent) => agent.spin_ns(),
            WorkerAgent::Switch(agent) => agent.spin_ns(),
            WorkerAgent::Python(_) => 0,
        }
    }
}

fn running_error() -> PyErr {
    PyRuntimeError::new_err("the loop is running or closed")
}

/// The loop of one data-plane process.
#[pyclass(module = "emulator._core.dataplane", frozen)]
pub struct Loop {
    /// Taken out while it runs (the GIL released), put back after.
    event_loop: Mutex<Option<EventLoop<WorkerAgent>>>,
    shared: Arc<Mutex<Shared>>,
    stop: Arc<AtomicBool>,
    /// The Python agents added, with their index in the loop.
    owners: Mutex<Vec<Py<PyAny>>>,
}

impl Loop {
    /// Adds the Python agent `agent`, paired with the RNIC on `plane` if any.
    fn add_python(
        &self,
        agent: &Bound<'_, PyAny>,
        plane: Option<Arc<Mutex<NicPlane>>>,
    ) -> PyResult<()> {
        let timer = agent.getattr("timer")?.cast_into::<AgentTimer>()?;
        let running = agent.getattr("running")?.is_truthy()?;
        let mut guard = lock(&self.event_loop);
        let event_loop = guard.as_mut().ok_or_else(running_error)?;
        let owner = agent.clone().unbind();
        event_loop.add_with(|registry| {
            let mut python = PyAgent {
                owner: owner.clone_ref(agent.py()),
                timer: timer.get().deadline.clone(),
                handlers: Vec::new(),
                tokens: HashMap::new(),
                expire_at: None,
                running,
                shared: self.shared.clone(),
                stop: self.stop.clone(),
            };
            python.apply(registry);
            Ok::<_, PyErr>(match plane {
                None => WorkerAgent::Python(python),
                Some(plane) => WorkerAgent::Host(Box::new(HostPair {
                    python,
                    nic: NicDriver::watched(plane, NIC_TOKEN, registry)?,
                    python_due: None,
                    nic_due: None,
                    python_called: true, // its first after_events applies what it watched after `add`
                })),
            })
        })?;
        lock(&self.owners).push(owner);
        match lock(&self.shared).error.take() {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }
}

#[pymethods]
impl Loop {
    #[new]
    fn new() -> PyResult<Self> {
        let event_loop = EventLoop::new()?;
        let stop = event_loop.stop.clone();
        Ok(Loop {
            event_loop: Mutex::new(Some(event_loop)),
            shared: Arc::new(Mutex::new(Shared::default())),
            stop,
            owners: Mutex::new(Vec::new()),
        })
    }

    /// A timer for `owner`'s deadline (the loop reads it after each of the agent's calls).
    fn timer(&self, _owner: &Bound<'_, PyAny>) -> AgentTimer {
        AgentTimer {
            deadline: Arc::new(AtomicU64::new(NO_DEADLINE)),
        }
    }

    /// Serve `agent` (its `timer` made by this loop); the descriptors it watched so far are watched now.
    fn add(&self, agent: &Bound<'_, PyAny>) -> PyResult<()> {
        self.add_python(agent, None)
    }

    /// Serve the host agent `agent` with its compiled RNIC `nic` (an unwired RNIC: the agent alone).
    fn add_host(&self, agent: &Bound<'_, PyAny>, nic: &Bound<'_, Nic>) -> PyResult<()> {
        self.add_python(agent, nic.get().plane())
    }

    /// Serve the compiled switch `switch`.
    fn add_switch(&self, switch: &Bound<'_, Switch>) -> PyResult<()> {
        let plane = switch.get().plane.clone();
        let mut guard = lock(&self.event_loop);
        let event_loop = guard.as_mut().ok_or_else(running_error)?;
        event_loop
            .add_with(|registry| SwitchDriver::watched(plane, registry).map(WorkerAgent::Switch))?;
        Ok(())
    }

    /// Watch `fd` for `mask` (select.EPOLLIN, EPOLLOUT), calling `handler(fd, mask, now)` for `owner`.
    fn watch(&self, fd: RawFd, mask: u32, handler: Py<PyAny>, owner: Py<PyAny>) {
        lock(&self.shared).ops.push(Op::Watch {
            owner,
            fd,
            events: mask,
            handler,
        });
    }

    fn modify(&self, fd: RawFd, mask: u32) {
        lock(&self.shared).ops.push(Op::Modify { fd, events: mask });
    }

    fn unwatch(&self, fd: RawFd) {
        lock(&self.shared).ops.push(Op::Unwatch { fd });
    }

    /// Every agent ends once `fd` turns readable (the signals' wake-up descriptor).
    fn stop_on(&self, fd: RawFd) -> PyResult<()> {
        let guard = lock(&self.event_loop);
        guard.as_ref().ok_or_else(running_error)?.stop_on(fd)?;
        Ok(())
    }

    /// Set (from a handler, another thread, or before running): every agent ends at the next look.
    #[getter]
    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    #[setter]
    fn set_stopping(&self, value: bool) {
        self.stop.store(value, Ordering::Relaxed);
    }

    /// The Python agents still served.
    #[getter]
    fn agents(&self, py: Python<'_>) -> Vec<Py<PyAny>> {
        let shared = lock(&self.shared);
        lock(&self.owners)
            .iter()
            .filter(|owner| !shared.ended.contains(&(owner.as_ptr() as usize)))
            .map(|owner| owner.clone_ref(py))
            .collect()
    }

    /// Serve every agent until all have stopped, the GIL released; a Python agent's error ends it and is raised.
    fn run(&self, py: Python<'_>) -> PyResult<()> {
        let mut event_loop = lock(&self.event_loop).take().ok_or_else(running_error)?;
        let result = py.detach(|| event_loop.run());
        *lock(&self.event_loop) = Some(event_loop);
        if let Some(error) = lock(&self.shared).error.take() {
            return Err(error);
        }
        Ok(result?)
    }

    /// Close the epoll and the timerfd.
    fn close(&self) {
        lock(&self.event_loop).take();
    }
}

/// One switch of the emulator, compiled: its sockets opened in the caller's network namespace.
#[pyclass(module = "emulator._core.dataplane", frozen)]
pub struct Switch {
    plane: Arc<Mutex<SwitchPlane>>,
    ifnames: Vec<String>,
}

/// `routes` (host IPv4 address -> ifnames of its equal-cost ports) as the switch takes them.
fn routes_of(routes: &Bound<'_, PyAny>, ifnames: &[String]) -> PyResult<Vec<([u8; 4], Vec<u32>)>> {
    let mut table = Vec::new();
    for item in routes.call_method0("items")?.try_iter()? {
        let (ip, names): (String, Vec<String>) = item?.extract()?;
        let address: Ipv4Addr = ip
            .parse()
            .map_err(|_| PyValueError::new_err(format!("route to {ip:?}: not an IPv4 address")))?;
        let ports = names
            .iter()
            .map(|name| {
                ifnames
                    .iter()
                    .position(|ifname| ifname == name)
                    .map(|at| at as u32)
                    .ok_or_else(|| {
                        PyValueError::new_err(format!("route to {ip}: no port {name:?}"))
                    })
            })
            .collect::<PyResult<Vec<u32>>>()?;
        table.push((address.octets(), ports));
    }
    Ok(table)
}

/// The compiled switch of `config` (the agents' `SwitchConfig`), and each port's longest frame.
fn switch_of(config: &Bound<'_, PyAny>) -> PyResult<(CoreSwitch, Vec<usize>)> {
    let seed: i128 = config.getattr("seed")?.extract()?;
    let mut ports = Vec::new();
    let mut macs = Vec::new();
    let mut max_frames = Vec::new();
    let mut rates = Vec::new();
    for (index, port) in config.getattr("ports")?.try_iter()?.enumerate() {
        let port = port?;
        let ifname: String = port.getattr("ifname")?.extract()?;
        let mac: String = port.getattr("mac")?.extract()?;
        let peer_mac: String = port.getattr("peer_mac")?.extract()?;
        let mtu: usize = port.getattr("mtu")?.extract()?;
        let rate_bps: u64 = port.getattr("rate_bps")?.extract()?;
        let link_seed = seed.saturating_mul(1000).saturating_add(index as i128);
        ports.push((
            ifname,
            PortSetup {
                mac: parse_mac(&mac)?,
                peer_mac: parse_mac(&peer_mac)?,
                rate_bps,
                mtu,
                delay_ns: port.getattr("delay_ns")?.extract()?,
                host_facing: port.getattr("host_facing")?.is_truthy()?,
                loss: port.getattr("loss")?.extract()?,
                drop: port.getattr("drop")?.extract()?,
                seed: small_seed_words(link_seed).to_vec(),
            },
        ));
        macs.push((mac, peer_mac));
        max_frames.push(ETH_LEN + mtu);
        rates.push(rate_bps);
    }
    let ifnames: Vec<String> = ports.iter().map(|(name, _)| name.clone()).collect();
    let routes = routes_of(&config.getattr("routes")?, &ifnames)?;
    let ib_config = config.getattr("ib")?;
    let ib = if ib_config.is_none() {
        None
    } else {
        let frames = max_frames.iter().map(|&f| f as u64).collect();
        Some(crate::ib_plane::plane_of(macs, &ib_config, frames, rates)?)
    };
    let switch = CoreSwitch::new(
        config.getattr("name")?.extract()?,
        ports,
        routes,
        crate::mmu::config_of(&config.getattr("mmu")?)?,
        CpythonRandom::from_int_seed(&small_seed_words(seed)),
        ib,
        (seed & 0xFFFF_FFFF) as u32, // zlib.crc32 takes its seed modulo 2**32
        config.getattr("monitor")?.is_truthy()?,
    )
    .map_err(|error| PyValueError::new_err(error.to_string()))?;
    Ok((switch, max_frames))
}

#[pymethods]
impl Switch {
    /// The switch of `config` (the agents' `SwitchConfig`), its PFC frames and ARP replies sent in tc class
    /// `control_priority`.
    #[new]
    fn new(config: &Bound<'_, PyAny>, control_priority: u32) -> PyResult<Self> {
        let (switch, max_frames) = switch_of(config)?;
        let ifnames = switch.ifnames().to_vec();
        let occupancy: String = config.getattr("occupancy_file")?.extract()?;
        let plane = SwitchPlane::open(switch, &max_frames, control_priority, &occupancy)
            .map_err(|error| PyOSError::new_err(format!("{occupancy}: {error}")))?;
        Ok(Switch {
            plane: Arc::new(Mutex::new(plane)),
            ifnames,
        })
    }

    /// Forward by `routes` (host IPv4 address -> ifnames) from now on.
    fn set_routes(&self, routes: &Bound<'_, PyAny>) -> PyResult<()> {
        let table = routes_of(routes, &self.ifnames)?;
        lock(&self.plane).switch_mut().set_routes(table);
        Ok(())
    }

    /// The IB plane forwards by `lft` (DLID -> port index) and `ar` (DLID -> port indices) from now on, and
    /// loses what it queued for the ports `down` (ifnames): the packets lost.
    fn set_ib_tables(
        &self,
        lft: Vec<(u16, usize)>,
        ar: Vec<(u16, Vec<usize>)>,
        down: Vec<String>,
    ) -> PyResult<u64> {
        let ports = down
            .iter()
            .map(|name| {
                self.ifnames
                    .iter()
                    .position(|own| own == name)
                    .ok_or_else(|| PyValueError::new_err(format!("no port {name:?}")))
            })
            .collect::<PyResult<Vec<_>>>()?;
        lock(&self.plane)
            .switch_mut()
            .set_ib_tables(&lft, &ar, &ports)
            .map_err(PyValueError::new_err)
    }

    /// Sends one PFC frame of `quanta` for `priority` out of port `ifname`: the frame.
    fn send_pfc<'py>(
        &self,
        py: Python<'py>,
        ifname: &str,
        priority: usize,
        quanta: u16,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let port = self
            .ifnames
            .iter()
            .position(|name| name == ifname)
            .ok_or_else(|| PyValueError::new_err(format!("no port {ifname:?}")))?;
        let frame = lock(&self.plane)
            .send_pfc(port, priority, quanta)
            .map_err(PyOSError::new_err)?;
        Ok(PyBytes::new(py, &frame))
    }

    /// The fidelity monitor's figures afresh.
    fn reset_fidelity(&self) {
        lock(&self.plane).switch_mut().reset_fidelity();
    }

    /// The switch stops (the loop drops it at the end of its batch).
    fn stop(&self) {
        lock(&self.plane).stop();
    }

    /// A last occupancy sample at `now`, and the occupancy file written out.
    fn close(&self, now: u64) -> PyResult<()> {
        Ok(lock(&self.plane).close(now)?)
    }

    /// The monitor's figures: every port's wire merged, their processing lags merged, the link timers'
    /// lateness, and the fastest port's frame time (the bar).
    fn fidelity_figures(&self) -> (EgressWire, Durations, Durations, u64) {
        figures(lock(&self.plane).switch())
    }

    /// The counters at `now`: `{"ports": {ifname: ...}, "totals": {...}, "lossless": [...]}`, as the Python
    /// switch agent gave them.
    fn stats<'py>(&self, py: Python<'py>, now: u64) -> PyResult<Bound<'py, PyDict>> {
        let mut plane = lock(&self.plane);
        let kernel: Vec<u64> = (0..self.ifnames.len())
            .map(|port| plane.kernel_drops(port))
            .collect();
        stats(py, plane.switch(), &kernel, now)
    }
}

/// The fidelity monitor's figures of `switch` (see `Switch.fidelity_figures`).
fn figures(switch: &CoreSwitch) -> (EgressWire, Durations, Durations, u64) {
    let mut wire = fidelity_core::EgressWire::new();
    let mut lag = fidelity_core::Durations::new();
    let mut frame_ns = u64::MAX;
    for port in 0..switch.ifnames().len() {
        if let Some(w) = switch.wire(port) {
            wire.merge(&w);
        }
        if let Some(l) = switch.lag(port) {
            lag.merge(l);
        }
        frame_ns = frame_ns.min(switch.frame_ns(port).unwrap_or(u64::MAX));
    }
    (
        EgressWire::of(wire),
        Durations::of(lag),
        Durations::of(switch.timer_lateness().clone()),
        frame_ns,
    )
}

/// The counters of `switch` at `now` (`kernel`: each port's socket drops), as `Switch.stats` gives them.
fn stats<'py>(
    py: Python<'py>,
    switch: &CoreSwitch,
    kernel: &[u64],
    now: u64,
) -> PyResult<Bound<'py, PyDict>> {
    let mmu = switch.mmu();
    let ports = PyDict::new(py);
    let mut totals = Totals::default();
    for (index, ifname) in switch.ifnames().iter().enumerate() {
        let (Some(counters), Some(injected), Some(queues), Some(pause)) = (
            switch.counters(index),
            switch.injected_drops(index),
            mmu.counters().get(index),
            mmu.pause().get(index),
        ) else {
            continue;
        };
        let priorities = PyList::empty(py);
        let mut dropped = 0u64;
        for prio in 0..PRIORITIES {
            let c = &queues[prio];
            let entry = PyDict::new(py);
            entry.set_item("rx_frames", counters.rx_frames[prio])?;
            entry.set_item("rx_bytes", counters.rx_bytes[prio])?;
            entry.set_item("tx_frames", c.tx_frames)?;
            entry.set_item("tx_bytes", c.tx_bytes)?;
            let drops = PyDict::new(py);
            drops.set_item("threshold", c.drops_threshold)?;
            drops.set_item("headroom", c.drops_headroom)?;
            drops.set_item("injected", injected[prio])?;
            drops.set_item("pfcwd", c.pfcwd_drops)?;
            entry.set_item("drops", drops)?;
            entry.set_item("pfcwd_storms", c.pfcwd_storms)?;
            entry.set_item("trimmed", c.trimmed)?;
            let pfc_sent = PyDict::new(py);
            pfc_sent.set_item("xoff", c.pfc_xoff_sent)?;
            pfc_sent.set_item("xon", c.pfc_xon_sent)?;
            entry.set_item("pfc_sent", pfc_sent)?;
            entry.set_item("pfc_received", counters.pfc_received[prio])?;
            entry.set_item("paused_ns", pause.paused_time(prio, now))?;
            entry.set_item("ecn_marked", c.ecn_marked)?;
            entry.set_item("ingress_bytes", mmu.ingress_bytes(index, prio))?;
            entry.set_item("ingress_peak", c.ingress_peak)?;
            entry.set_item("egress_bytes", mmu.egress_bytes(index, prio))?;
            entry.set_item("egress_peak", c.egress_peak)?;
            priorities.append(entry)?;
            dropped += c.drops_threshold + c.drops_headroom + injected[prio] + c.pfcwd_drops;
            totals.pfc_sent += c.pfc_xoff_sent + c.pfc_xon_sent;
            totals.pfc_received += counters.pfc_received[prio];
            totals.ecn_marked += c.ecn_marked;
            totals.rx_frames += counters.rx_frames[prio];
            totals.tx_frames += c.tx_frames;
            totals.pfcwd_drops += c.pfcwd_drops;
            totals.pfcwd_storms += c.pfcwd_storms;
            totals.trimmed += c.trimmed;
        }
        let kernel_drops = kernel.get(index).copied().unwrap_or(0);
        dropped += kernel_drops + counters.tx_errors + counters.drops.lost();
        let mut malformed = counters.drops.malformed;
        let port = PyDict::new(py);
        port.set_item("priorities", priorities)?;
        port.set_item("rx_kernel_drops", kernel_drops)?;
        let rx_drops = PyDict::new(py);
        for (name, count) in counters.drops.named() {
            rx_drops.set_item(name, count)?;
        }
        port.set_item("rx_drops", rx_drops)?;
        port.set_item("tx_errors", counters.tx_errors)?;
        port.set_item("link_errors", counters.link_errors)?;
        port.set_item("rx_control_frames", counters.control_frames)?;
        port.set_item("arp_replies", counters.arp_replies)?;
        let wire = switch.wire(index).unwrap_or_default();
        port.set_item("wire", wire_summary(py, &wire)?)?;
        let lag = switch.lag(index).cloned().unwrap_or_default();
        port.set_item("lag", durations_summary(py, &lag)?)?;
        if let Some(ib) = switch.ib() {
            port.set_item("ib", crate::ib_plane::port_stats(py, ib, index)?)?;
            let drops = ib.drops(index).unwrap_or_default();
            dropped += drops.iter().sum::<u64>() + ib.tx_errors(index).unwrap_or(0);
            malformed += drops[IbDrop::Malformed as usize];
            totals.tx_frames += ib.forwarded(index).unwrap_or(0); // the MMU carries none on ib
            totals.ib_credit_stalls += ib.link(index).map_or(0, |link| {
                (0..link.vl_count())
                    .filter_map(|vl| link.counters(vl))
                    .map(|c| c.stalls)
                    .sum::<u64>()
            });
        }
        port.set_item("dropped", dropped)?;
        totals.drops += dropped;
        totals.malformed += malformed;
        ports.set_item(ifname, port)?;
    }
    let out = PyDict::new(py);
    let sums = PyDict::new(py);
    for (name, value) in [
        ("drops", totals.drops),
        ("pfc_sent", totals.pfc_sent),
        ("pfc_received", totals.pfc_received),
        ("ecn_marked", totals.ecn_marked),
        ("rx_frames", totals.rx_frames),
        ("tx_frames", totals.tx_frames),
        ("malformed", totals.malformed),
        ("pfcwd_drops", totals.pfcwd_drops),
        ("pfcwd_storms", totals.pfcwd_storms),
        ("trimmed", totals.trimmed),
        (
            "pfcwd_restorations",
            mmu.watchdog().map_or(0, |wd| wd.restorations),
        ),
    ] {
        sums.set_item(name, value)?;
    }
    if let Some(ib) = switch.ib() {
        let causes = [
            IbDrop::Malformed,
            IbDrop::CreditViolation,
            IbDrop::NoRoute,
            IbDrop::TooLong,
        ];
        for (name, cause) in IB_DROPS.iter().zip(causes) {
            sums.set_item(format!("ib_{name}"), ib.total(cause))?;
        }
        sums.set_item("ib_credit_stalls", totals.ib_credit_stalls)?;
    }
    out.set_item("ports", ports)?;
    out.set_item("totals", sums)?;
    let lossless: Vec<usize> = mmu.config().lossless.iter().collect();
    out.set_item("lossless", lossless)?;
    Ok(out)
}

/// Wires in memory: what each port's data socket took, and what it is told to do instead of taking a frame.
/// Control sockets (PFC frames, ARP replies) take everything: the switch's counters say what went.
#[derive(Default)]
struct MemoryWires {
    sent: Vec<Vec<Vec<u8>>>,
    refuse: Vec<Option<Sent>>,
    refusals: Vec<u64>,
    writable: Vec<bool>,
}

impl Wires for MemoryWires {
    fn send(&mut self, port: usize, frame: &[u8]) -> Sent {
        if let Some(Some(refusal)) = self.refuse.get(port) {
            if let Some(count) = self.refusals.get_mut(port) {
                *count += 1;
            }
            return *refusal;
        }
        match self.sent.get_mut(port) {
            Some(log) => {
                log.push(frame.to_vec());
                Sent::Taken
            }
            None => Sent::Refused,
        }
    }

    fn send_control(&mut self, port: usize, _frame: &[u8]) -> Sent {
        if port < self.sent.len() {
            Sent::Taken
        } else {
            Sent::Refused
        }
    }
    fn want_writable(&mut self, port: usize, on: bool) {
        if let Some(slot) = self.writable.get_mut(port) {
            *slot = on;
        }
    }
}

/// The compiled switch on wires in memory, for tests without root: frames handed in, frames sent kept, a
/// port's socket told to refuse. The same switch `Switch` runs on sockets.
#[pyclass(module = "emulator._core.dataplane")]
pub struct UnwiredSwitch {
    switch: CoreSwitch,
    wires: MemoryWires,
}

fn port_of<T>(list: &[T], port: usize) -> PyResult<usize> {
    (port < list.len())
        .then_some(port)
        .ok_or_else(|| PyValueError::new_err(format!("no port {port}")))
}

#[pymethods]
impl UnwiredSwitch {
    #[new]
    fn new(config: &Bound<'_, PyAny>) -> PyResult<Self> {
        let (switch, _) = switch_of(config)?;
        let ports = switch.ifnames().len();
        Ok(UnwiredSwitch {
            switch,
            wires: MemoryWires {
                sent: vec![Vec::new(); ports],
                refuse: vec![None; ports],
                refusals: vec![0; ports],
                writable: vec![false; ports],
            },
        })
    }

    /// A frame arrives on `port` at `now` (processed at its last bit's time: `deadline`, or `settle`).
    fn receive(&mut self, now: u64, port: usize, frame: &[u8]) -> PyResult<()> {
        let port = port_of(&self.wires.sent, port)?;
        self.switch.receive(now, port, frame);
        Ok(())
    }

    /// Every frame received so far processed at its last bit's time, as the loop's deadlines would.
    fn settle(&mut self) {
        while let Some(due) = self.switch.next_arrival() {
            self.switch.deadline(due, due, &mut self.wires);
        }
    }

    /// Port `port`'s socket turned writable.
    fn writable(&mut self, now: u64, port: usize) -> PyResult<()> {
        let port = port_of(&self.wires.sent, port)?;
        self.switch.writable(now, port, &mut self.wires);
        Ok(())
    }

    /// The switch's deadline came.
    fn deadline(&mut self, deadline: u64, now: u64) {
        self.switch.deadline(deadline, now, &mut self.wires);
    }

    /// After a batch: the next deadline.
    fn after_events(&mut self, now: u64) -> Option<u64> {
        self.switch.after_events(now, &mut self.wires)
    }

    /// The frames port `port`'s data socket took, in order.
    fn sent<'py>(&self, py: Python<'py>, port: usize) -> PyResult<Vec<Bound<'py, PyBytes>>> {
        let port = port_of(&self.wires.sent, port)?;
        Ok(self.wires.sent[port]
            .iter()
            .map(|f| PyBytes::new(py, f))
            .collect())
    }

    /// From now on port `port`'s data socket answers every frame with `what`: "full" (the kernel queue is
    /// full), "refused" (for good), or None (it takes it).
    #[pyo3(signature = (port, what))]
    fn refuse(&mut self, port: usize, what: Option<&str>) -> PyResult<()> {
        let port = port_of(&self.wires.refuse, port)?;
        self.wires.refuse[port] = match what {
            None => None,
            Some("full") => Some(Sent::Full),
            Some("refused") => Some(Sent::Refused),
            Some(other) => return Err(PyValueError::new_err(format!("refuse with {other:?}"))),
        };
        Ok(())
    }

    /// How many frames port `port`'s data socket refused.
    fn refusals(&self, port: usize) -> PyResult<u64> {
        Ok(self.wires.refusals[port_of(&self.wires.refusals, port)?])
    }

    /// Whether port `port` asked to hear when its socket turns writable.
    fn wants_writable(&self, port: usize) -> PyResult<bool> {
        Ok(self.wires.writable[port_of(&self.wires.writable, port)?])
    }

    /// Frames port `port` sent since the start (the MMU's and the IB plane's).
    fn frames_sent(&self, port: usize) -> u64 {
        self.switch.frames_sent(port)
    }

    /// Drops the frames kept so far (a long benchmark keeps none).
    fn forget_sent(&mut self) {
        self.wires.sent.iter_mut().for_each(Vec::clear);
    }

    /// Frames queued in the MMU for egress port `port`.
    fn backlog(&self, port: usize) -> usize {
        self.switch.mmu().backlog().get(port).copied().unwrap_or(0)
    }

    /// Bytes the IB plane holds in VL `vl`'s receive buffer of port `port` (0 without an IB plane).
    fn ib_occupancy(&self, port: usize, vl: usize) -> u64 {
        self.switch
            .ib()
            .and_then(|ib| ib.link(port))
            .map_or(0, |link| link.occupancy(vl).unwrap_or(0))
    }

    fn reset_fidelity(&mut self) {
        self.switch.reset_fidelity();
    }

    fn fidelity_figures(&self) -> (EgressWire, Durations, Durations, u64) {
        figures(&self.switch)
    }

    /// The counters at `now`, as `Switch.stats` gives them (no socket: no kernel drops).
    fn stats<'py>(&self, py: Python<'py>, now: u64) -> PyResult<Bound<'py, PyDict>> {
        stats(py, &self.switch, &[], now)
    }
}

/// The switch's totals, added over its ports.
#[derive(Default)]
struct Totals {
    drops: u64,
    pfc_sent: u64,
    pfc_received: u64,
    ecn_marked: u64,
    rx_frames: u64,
    tx_frames: u64,
    malformed: u64,
    pfcwd_drops: u64,
    pfcwd_storms: u64,
    trimmed: u64,
    ib_credit_stalls: u64,
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Loop>()?;
    m.add_class::<AgentTimer>()?;
    m.add_class::<Switch>()?;
    m.add_class::<UnwiredSwitch>()?;
    m.add_class::<Nic>()?;
    m.add_class::<UnwiredNic>()?;
    Ok(())
}
