//! The floor of a compiled data plane: a loop that only takes frames off one socket and puts them on another,
//! a batch per system call, through the qdisc. What no switch written on these sockets can beat on this
//! machine (`bench/bench_python_floor.py` measures it beside the same loop in Python).
use std::io;
use std::time::Instant;

use crate::clock::thread_cpu_ns;
use crate::packet::{Batch, PacketSocket};
use crate::ring::RxRing;

/// What a run of [`send_copies`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sent {
    pub frames: u64,
    /// Frames the socket refused (counted, not retried).
    pub refused: u64,
    pub cpu_ns: u64,
    pub wall_ns: u64,
}

/// Sends `count` copies of `frame` on `tx`, `batch` a call, waiting for room when the send buffer is full:
/// the generator that offers a forwarding loop more than it can take.
pub fn send_copies(
    tx: &mut PacketSocket,
    frame: &[u8],
    count: u64,
    batch: usize,
) -> io::Result<Sent> {
    let copies = vec![frame; batch.max(1)];
    let mut done = Sent::default();
    let cpu_before = thread_cpu_ns()?;
    let started = Instant::now();
    while done.frames + done.refused < count {
        let left = usize::try_from(count - done.frames - done.refused).unwrap_or(usize::MAX);
        match tx.send(&copies[..left.min(copies.len())]) {
            Ok(0) => {
                tx.wait(false, 1000)?;
            }
            Ok(sent) => done.frames += sent as u64,
            Err(_) => done.refused += 1,
        }
    }
    done.cpu_ns = thread_cpu_ns()?.saturating_sub(cpu_before);
    done.wall_ns = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
    Ok(done)
}

/// What a run of [`forward`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Forwarded {
    /// Frames received and sent on.
    pub frames: u64,
    /// Frames the sending socket refused (counted, not retried).
    pub refused: u64,
    /// Frames longer than a batch slot, dropped.
    pub truncated: u64,
    /// CPU time of the loop's thread.
    pub cpu_ns: u64,
    /// Wall time from the first frame to the last one sent.
    pub busy_ns: u64,
}

/// Forwards every frame `rx` receives to `tx` until none has come for `idle_ms`, `batch` frames a call at
/// most. A full send buffer is waited for (the qdisc drains it at the link's rate), never dropped.
pub fn forward(
    rx: &mut PacketSocket,
    tx: &mut PacketSocket,
    batch: &mut Batch,
    idle_ms: i32,
) -> io::Result<Forwarded> {
    let mut done = Forwarded::default();
    let cpu_before = thread_cpu_ns()?;
    let mut first: Option<Instant> = None;
    let mut last = Instant::now();
    loop {
        let received = rx.receive(batch)?;
        if received == 0 {
            if rx.wait(true, idle_ms)? {
                continue;
            }
            break;
        }
        first.get_or_insert_with(Instant::now);
        let mut at = 0;
        while at < received {
            match tx.send_from(batch, at) {
                Ok(0) => {
                    tx.wait(false, idle_ms)?;
                }
                Ok(sent) => {
                    at += sent;
                    done.frames += sent as u64;
                }
                Err(_) => {
                    done.refused += 1;
                    at += 1;
                }
            }
        }
        last = Instant::now();
    }
    done.truncated = batch.truncated;
    done.cpu_ns = thread_cpu_ns()?.saturating_sub(cpu_before);
    done.busy_ns = first.map_or(0, |first| {
        u64::try_from(last.duration_since(first).as_nanos()).unwrap_or(u64::MAX)
    });
    Ok(done)
}

/// As [`forward`], reading the frames where the kernel put them in `ring` (`rx` is the ring's socket, waited
/// on when the ring runs dry), up to `batch` frames a send.
pub fn forward_ring(
    rx: &PacketSocket,
    ring: &mut RxRing,
    tx: &mut PacketSocket,
    batch: usize,
    idle_ms: i32,
) -> io::Result<Forwarded> {
    let mut done = Forwarded::default();
    let cpu_before = thread_cpu_ns()?;
    let mut first: Option<Instant> = None;
    let mut last = Instant::now();
    loop {
        let ready = ring.ready(batch.max(1));
        if ready == 0 {
            if rx.wait(true, idle_ms)? {
                continue;
            }
            break;
        }
        first.get_or_insert_with(Instant::now);
        let mut at = 0;
        while at < ready {
            if ring.frame(at).is_none() {
                at += 1; // cut to its slot: counted by release
                continue;
            }
            match tx.send_ring(ring, at, ready) {
                Ok(0) => {
                    tx.wait(false, idle_ms)?;
                }
                Ok(sent) => {
                    at += sent;
                    done.frames += sent as u64;
                }
                Err(_) => {
                    done.refused += 1;
                    at += 1;
                }
            }
        }
        ring.release(ready);
        last = Instant::now();
    }
    done.truncated = ring.truncated;
    done.cpu_ns = thread_cpu_ns()?.saturating_sub(cpu_before);
    done.busy_ns = first.map_or(0, |first| {
        u64::try_from(last.duration_since(first).as_nanos()).unwrap_or(u64::MAX)
    });
    Ok(done)
}
