//! `emulator._core.io`: the compiled data plane's socket I/O (crates/fabric-io), as far as it goes: the floor
//! loop that only moves frames from one interface to another, and a generator to feed it, for
//! `bench/bench_python_floor.py`.
use std::path::Path;

use fabric_io::forward::{forward, forward_ring, send_copies, Forwarded};
use fabric_io::io::netns::within;
use fabric_io::io::packet::{Batch, PacketSocket};
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// Receive buffer of the forwarding loop's socket: rides out a scheduling delay at a few Gbit/s.
const RECV_BUFFER: usize = 8 << 20;
/// Send buffer: a batch of full frames in the kernel.
const SEND_BUFFER: usize = 1 << 20;
/// A receive ring's size, whatever its slots': as much as the socket buffer holds otherwise.
const RING_BYTES: usize = RECV_BUFFER;

/// What `open` opens, inside the network namespace at `netns` when given (a thread of its own enters it),
/// else in the caller's.
fn opened<T: Send>(
    netns: Option<&str>,
    open: impl FnOnce() -> std::io::Result<T> + Send,
) -> std::io::Result<T> {
    match netns {
        Some(path) => within(Path::new(path), open),
        None => open(),
    }
}

/// Forwards every frame of EtherType `protocol` that arrives on `rx` to `tx` until none has come for
/// `idle_s` seconds, up to `batch` frames of up to `slot` bytes per system call, the GIL released; inside
/// the network namespace at `netns` (a path) when given, else in the caller's. With `ring`, frames are read
/// in place from a TPACKET_V2 ring instead of `recvmmsg`. Returns a dict: frames, refused, truncated,
/// cpu_ns (the loop's thread), busy_ns (first frame to last).
#[pyfunction]
#[pyo3(signature = (rx, tx, protocol, idle_s = 1.0, batch = 64, slot = 2048, netns = None, ring = false))]
#[allow(clippy::too_many_arguments)] // a Python signature with defaults
fn forward_frames<'py>(
    py: Python<'py>,
    rx: &str,
    tx: &str,
    protocol: u16,
    idle_s: f64,
    batch: usize,
    slot: usize,
    netns: Option<&str>,
    ring: bool,
) -> PyResult<Bound<'py, PyDict>> {
    if !(0.001..=60.0).contains(&idle_s) {
        return Err(PyValueError::new_err("idle_s must be 0.001 to 60"));
    }
    if !(1..=1024).contains(&batch) || !(64..=65536).contains(&slot) {
        return Err(PyValueError::new_err(
            "batch must be 1 to 1024 and slot 64 to 65536",
        ));
    }
    let idle_ms = (idle_s * 1000.0).round() as i32;
    let failed =
        |error: std::io::Error| PyOSError::new_err(format!("cannot open {rx} and {tx}: {error}"));
    let done: std::io::Result<Forwarded> = if ring {
        let ring_slot = slot.next_power_of_two().max(2048);
        let (rx_socket, mut rx_ring, mut tx_socket) = opened(netns, || {
            let (socket, ring) = PacketSocket::open_with_ring(
                rx,
                protocol,
                SEND_BUFFER,
                ring_slot,
                RING_BYTES / ring_slot,
            )?;
            Ok((
                socket,
                ring,
                PacketSocket::open(tx, 0, SEND_BUFFER, RECV_BUFFER)?,
            ))
        })
        .map_err(failed)?;
        py.detach(move || forward_ring(&rx_socket, &mut rx_ring, &mut tx_socket, batch, idle_ms))
    } else {
        let (mut rx_socket, mut tx_socket) = opened(netns, || {
            Ok((
                PacketSocket::open(rx, protocol, SEND_BUFFER, RECV_BUFFER)?,
                PacketSocket::open(tx, 0, SEND_BUFFER, RECV_BUFFER)?,
            ))
        })
        .map_err(failed)?;
        let mut frames = Batch::new(batch, slot);
        py.detach(|| forward(&mut rx_socket, &mut tx_socket, &mut frames, idle_ms))
    };
    let done =
        done.map_err(|error| PyOSError::new_err(format!("forwarding {rx} to {tx}: {error}")))?;
    let out = PyDict::new(py);
    out.set_item("frames", done.frames)?;
    out.set_item("refused", done.refused)?;
    out.set_item("truncated", done.truncated)?;
    out.set_item("cpu_ns", done.cpu_ns)?;
    out.set_item("busy_ns", done.busy_ns)?;
    Ok(out)
}

/// Sends `count` copies of `frame` on interface `tx`, `batch` per system call, through its qdisc, the GIL
/// released; inside the network namespace at `netns` when given. Returns a dict: frames, refused, cpu_ns,
/// wall_ns.
#[pyfunction]
#[pyo3(signature = (tx, frame, count, batch = 64, netns = None))]
fn send_frames<'py>(
    py: Python<'py>,
    tx: &str,
    frame: &[u8],
    count: u64,
    batch: usize,
    netns: Option<&str>,
) -> PyResult<Bound<'py, PyDict>> {
    if !(1..=1024).contains(&batch) || frame.is_empty() {
        return Err(PyValueError::new_err(
            "batch must be 1 to 1024 and the frame not empty",
        ));
    }
    let mut socket = opened(netns, || {
        PacketSocket::open(tx, 0, SEND_BUFFER, RECV_BUFFER)
    })
    .map_err(|error| PyOSError::new_err(format!("cannot open {tx}: {error}")))?;
    let done = py
        .detach(|| send_copies(&mut socket, frame, count, batch))
        .map_err(|error| PyOSError::new_err(format!("sending on {tx}: {error}")))?;
    let out = PyDict::new(py);
    out.set_item("frames", done.frames)?;
    out.set_item("refused", done.refused)?;
    out.set_item("cpu_ns", done.cpu_ns)?;
    out.set_item("wall_ns", done.wall_ns)?;
    Ok(out)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(forward_frames, m)?)?;
    m.add_function(wrap_pyfunction!(send_frames, m)?)?;
    Ok(())
}
