//! A switch in the data-plane loop: `fabric_core::agent::switch::Switch` on one raw socket per port for
//! data and one for PFC frames and ARP replies (the highest tc class, so they overtake the data backlog).
//!
//! The switch and its sockets are shared, behind a mutex, between the loop's agent ([`SwitchDriver`]) and
//! whoever answers its control requests (the Python shell that serves the control socket reads the counters
//! through it). Both run on the loop's thread, one at a time, so the lock is never waited for.
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex};

use fabric_core::agent::switch::{Sent, Switch, Wires, OCCUPANCY_HEADER};
use fabric_io::event_loop::{Agent, Registry};
use fabric_io::io::clock::StampClock;
use fabric_io::io::packet::{Batch, PacketSocket, ETH_P_ALL};
use fabric_io::io::poll::{Ready, READABLE, WRITABLE};

use crate::lock;

/// SO_SNDBUF in link-MTU frames (the kernel doubles it): about two frames queued in the kernel, so that the
/// backlog stays in the MMU.
const SEND_FRAMES: usize = 2;
/// SO_RCVBUF: rides out the loop being scheduled out for a while at the link rates the emulator runs.
const RECV_BUFFER: usize = 4 << 20;
/// Frames read from one port per wake-up (the loop comes back while more wait).
const BATCH: usize = 64;
/// The longest frame a receive slot holds: an IPv4 packet's 64 KiB and its Ethernet header.
const MAX_SLOT: usize = 65_535 + 14;
/// Occupancy rows kept before they are written out.
const OCCUPANCY_FLUSH: usize = 64 << 10;
/// How long before the last bit of a frame that sends an XOFF the loop stops sleeping: a sleeping loop wakes
/// 30 to 80 us after its timer here, and PFC generation is to take 20 us at the median.
const XOFF_SPIN_NS: u64 = 100_000;

/// One port's sockets: data, and control frames in the highest tc class.
struct PortSockets {
    data: PacketSocket,
    control: PacketSocket,
}

/// A switch with its sockets and files.
pub struct SwitchPlane {
    switch: Switch,
    sockets: Vec<PortSockets>,
    batch: Batch,
    occupancy: File,
    kernel_drops: Vec<u64>,
    stopped: bool,
}

/// The sockets as the switch sends on them; `registry` arms a port's writable event (absent outside the loop's
/// calls: a control request's PFC frame never waits).
struct PortWires<'a, 'r> {
    sockets: &'a mut [PortSockets],
    registry: Option<&'a Registry<'r>>,
}

/// What a send's result means to the switch.
fn sent(result: io::Result<usize>) -> Sent {
    match result {
        Ok(0) => Sent::Full,
        Ok(_) => Sent::Taken,
        Err(_) => Sent::Refused,
    }
}

impl Wires for PortWires<'_, '_> {
    fn send(&mut self, port: usize, frame: &[u8]) -> Sent {
        self.sockets
            .get_mut(port)
            .map_or(Sent::Refused, |s| sent(s.data.send(&[frame])))
    }

    fn send_control(&mut self, port: usize, frame: &[u8]) -> Sent {
        self.sockets
            .get_mut(port)
            .map_or(Sent::Refused, |s| sent(s.control.send(&[frame])))
    }

    fn want_writable(&mut self, port: usize, on: bool) {
        if let (Some(registry), Some(sockets)) = (self.registry, self.sockets.get(port)) {
            let events = if on { READABLE | WRITABLE } else { READABLE };
            // A failure leaves the port as it was; the next drain asks again.
            let _ = registry.modify(sockets.data.as_raw_fd(), port as u32, events);
        }
    }
}

impl SwitchPlane {
    /// `switch` on sockets opened in the calling thread's network namespace: its interfaces `ifnames`, each
    /// with its longest frame `max_frames`; control frames in tc class `control_priority`; occupancy rows to
    /// the file at `occupancy` (created, with its header).
    pub fn open(
        switch: Switch,
        max_frames: &[usize],
        control_priority: u32,
        occupancy: &str,
    ) -> io::Result<SwitchPlane> {
        let mut sockets = Vec::with_capacity(max_frames.len());
        for (ifname, &max_frame) in switch.ifnames().iter().zip(max_frames) {
            let data = PacketSocket::open(
                ifname,
                ETH_P_ALL,
                SEND_FRAMES.saturating_mul(max_frame),
                RECV_BUFFER,
            )?;
            data.stamp_frames()?;
            let control = PacketSocket::open_sender(ifname, control_priority)?;
            sockets.push(PortSockets { data, control });
        }
        // A frame longer than any link of the switch carries is cut and counted, never forwarded; no link
        // carries more than an IPv4 packet's 64 KiB.
        let slot = max_frames
            .iter()
            .copied()
            .max()
            .unwrap_or(1514)
            .min(MAX_SLOT);
        let mut file = File::create(occupancy)?;
        file.write_all(OCCUPANCY_HEADER.as_bytes())?;
        Ok(SwitchPlane {
            kernel_drops: vec![0; sockets.len()],
            sockets,
            switch,
            batch: Batch::new(BATCH, slot),
            occupancy: file,
            stopped: false,
        })
    }

    /// The switch, to read.
    pub fn switch(&self) -> &Switch {
        &self.switch
    }

    /// The switch, to change (its routes, its fidelity figures).
    pub fn switch_mut(&mut self) -> &mut Switch {
        &mut self.switch
    }

    /// Frames the kernel dropped at `port`'s socket because its buffer was full, since the start.
    pub fn kernel_drops(&mut self, port: usize) -> u64 {
        let (Some(sockets), Some(total)) =
            (self.sockets.get(port), self.kernel_drops.get_mut(port))
        else {
            return 0;
        };
        *total += sockets.data.kernel_drops().unwrap_or(0);
        *total
    }

    /// Sends one PFC frame of `quanta` for `priority` out of `port` (a control request): the frame, or why not.
    pub fn send_pfc(
        &mut self,
        port: usize,
        priority: usize,
        quanta: u16,
    ) -> Result<Vec<u8>, String> {
        let mut wires = PortWires {
            sockets: &mut self.sockets,
            registry: None,
        };
        match self.switch.send_pfc(port, priority, quanta, &mut wires) {
            None => Err(format!("no port {port} or priority {priority}")),
            Some(Ok(frame)) => Ok(frame.to_vec()),
            Some(Err(Sent::Full)) => Err("the port's control queue is full".into()),
            Some(Err(_)) => Err("the kernel refused the frame (is the link down?)".into()),
        }
    }

    /// The switch stops: the loop drops it at the end of its batch.
    pub fn stop(&mut self) {
        self.stopped = true;
    }

    /// A last occupancy sample at `now`, and every row written out.
    pub fn close(&mut self, now: u64) -> io::Result<()> {
        self.switch.final_sample(now);
        self.write_occupancy()?;
        self.occupancy.flush()
    }

    fn write_occupancy(&mut self) -> io::Result<()> {
        let rows = self.switch.take_occupancy();
        self.occupancy.write_all(rows.as_bytes())
    }

    /// `f` on the switch and its sockets as it sends on them, epoll changes through `registry`.
    fn with_wires<R>(
        &mut self,
        registry: &Registry<'_>,
        f: impl FnOnce(&mut Switch, &mut PortWires<'_, '_>) -> R,
    ) -> R {
        let mut wires = PortWires {
            sockets: &mut self.sockets,
            registry: Some(registry),
        };
        f(&mut self.switch, &mut wires)
    }

    /// Reads the frames waiting on `port` (up to a batch) and hands them to the switch, each with its kernel
    /// receive time (the switch processes it at its last bit's time: a deadline).
    fn receive(&mut self, port: usize, now: u64) {
        let SwitchPlane {
            switch,
            sockets,
            batch,
            ..
        } = self;
        let Some(socket) = sockets.get_mut(port) else {
            return;
        };
        let cut = batch.truncated;
        match socket.data.receive(batch) {
            Err(_) => switch.link_error(port), // ENETDOWN: the link was taken down; nothing to read
            Ok(count) => {
                let clock = StampClock::read().ok();
                // The processing lag: the kernel's receive time of a batch's first frame (it waited longest) to
                // now.
                if let (Some(clock), Some(stamp)) = (clock, batch.stamp(0)) {
                    if switch.lag_due(port, now) {
                        switch.add_lag(port, clock.age(stamp));
                    }
                }
                for index in 0..count {
                    let arrival = clock.map_or(now, |clock| clock.arrival(batch.stamp(index), now));
                    if let Some(frame) = batch.frame(index) {
                        switch.receive(arrival, port, frame);
                    }
                }
            }
        }
        let now_cut = batch.truncated;
        if now_cut > cut {
            switch.too_long(port, now_cut - cut);
        }
    }
}

/// The loop's agent of one switch.
pub struct SwitchDriver {
    plane: Arc<Mutex<SwitchPlane>>,
    /// The deadline its last `after_events` gave.
    due: Option<u64>,
}

impl SwitchDriver {
    /// The agent of `plane`, and its first descriptors watched through `registry`.
    pub fn watched(
        plane: Arc<Mutex<SwitchPlane>>,
        registry: &Registry<'_>,
    ) -> io::Result<SwitchDriver> {
        {
            let plane = lock(&plane);
            for (port, sockets) in plane.sockets.iter().enumerate() {
                registry.watch(sockets.data.as_raw_fd(), port as u32, READABLE)?;
            }
        }
        Ok(SwitchDriver { plane, due: None })
    }
}

impl Agent for SwitchDriver {
    fn ready(&mut self, token: u32, ready: Ready, now: u64, registry: &Registry<'_>) {
        let mut plane = lock(&self.plane);
        let port = token as usize;
        if ready.readable {
            plane.receive(port, now); // an error too: the receive reads and counts it
        }
        if ready.writable {
            plane.with_wires(registry, |switch, wires| switch.writable(now, port, wires));
        }
    }

    fn deadline(&mut self, deadline: u64, now: u64, registry: &Registry<'_>) {
        let mut plane = lock(&self.plane);
        plane.with_wires(registry, |switch, wires| {
            switch.deadline(deadline, now, wires)
        });
    }

    fn after_events(&mut self, now: u64, registry: &Registry<'_>) -> Option<u64> {
        let mut plane = lock(&self.plane);
        let deadline = plane.with_wires(registry, |switch, wires| switch.after_events(now, wires));
        if plane.switch.occupancy_len() > OCCUPANCY_FLUSH {
            let _ = plane.write_occupancy(); // a full disk loses rows, not frames
        }
        self.due = deadline;
        deadline
    }

    /// A frame's last bit that sends an XOFF is spun for.
    fn spin_ns(&self) -> u64 {
        let plane = lock(&self.plane);
        match (plane.switch.pausing_arrival(), self.due) {
            (Some(arrival), Some(due)) if arrival <= due => XOFF_SPIN_NS,
            _ => 0,
        }
    }

    fn running(&self) -> bool {
        !lock(&self.plane).stopped
    }

    fn finish(&mut self, registry: &Registry<'_>) {
        let plane = lock(&self.plane);
        for sockets in &plane.sockets {
            let _ = registry.unwatch(sockets.data.as_raw_fd());
        }
    }
}
