//! The floor of a compiled data plane: a loop that only takes frames off one socket and puts them on another,
//! a batch per system call, through the qdisc. What no switch written on these sockets can beat on this
//! machine (`bench/bench_python_floor.py` measures it beside the same loop in Python).
use std::io;
use std::time::Instant;

use crate::io::clock::thread_cpu_ns;
use crate::io::packet::{Batch, PacketSocket};
use crate::io::ring::RxRing;

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

/// The clock of a forwarding run: the thread's CPU time, and when the first and last batches went.
struct Run {
    cpu_before: u64,
    first: Option<Instant>,
    last: Instant,
}

impl Run {
    fn start() -> io::Result<Run> {
        Ok(Run {
            cpu_before: thread_cpu_ns()?,
            first: None,
            last: Instant::now(),
        })
    }

    fn batch_came(&mut self) {
        self.first.get_or_insert_with(Instant::now);
    }

    fn batch_went(&mut self) {
        self.last = Instant::now();
    }

    fn finish(self, mut done: Forwarded) -> io::Result<Forwarded> {
        done.cpu_ns = thread_cpu_ns()?.saturating_sub(self.cpu_before);
        done.busy_ns = self.first.map_or(0, |first| {
            u64::try_from(self.last.duration_since(first).as_nanos()).unwrap_or(u64::MAX)
        });
        Ok(done)
    }
}

/// Sends the frames `0..count` of a batch or ring through `send(tx, at)` (how many it took from `at` on),
/// waiting for room when it took none and counting a frame refused, passing over those `hollow` says hold
/// no frame.
fn send_all(
    tx: &mut PacketSocket,
    count: usize,
    idle_ms: i32,
    done: &mut Forwarded,
    hollow: impl Fn(usize) -> bool,
    mut send: impl FnMut(&mut PacketSocket, usize) -> io::Result<usize>,
) -> io::Result<()> {
    let mut at = 0;
    while at < count {
        if hollow(at) {
            at += 1;
            continue;
        }
        match send(tx, at) {
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
    Ok(())
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
    let mut run = Run::start()?;
    loop {
        let received = rx.receive(batch)?;
        if received == 0 {
            if rx.wait(true, idle_ms)? {
                continue;
            }
            break;
        }
        run.batch_came();
        send_all(
            tx,
            received,
            idle_ms,
            &mut done,
            |_| false,
            |tx, at| tx.send_from(batch, at),
        )?;
        run.batch_went();
    }
    done.truncated = batch.truncated;
    run.finish(done)
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
    let mut run = Run::start()?;
    loop {
        let ready = ring.ready(batch.max(1));
        if ready == 0 {
            if rx.wait(true, idle_ms)? {
                continue;
            }
            break;
        }
        run.batch_came();
        let slots = &*ring;
        // A slot whose frame was cut to its size is passed over (release counts it).
        send_all(
            tx,
            ready,
            idle_ms,
            &mut done,
            |at| slots.frame(at).is_none(),
            |tx, at| tx.send_ring(slots, at, ready),
        )?;
        ring.release(ready);
        run.batch_went();
    }
    done.truncated = ring.truncated;
    run.finish(done)
}
