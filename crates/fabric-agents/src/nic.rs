//! A host's RNIC in the data-plane loop: `fabric_core::agent::nic::Nic` on the host's raw socket, with the
//! memory regions its applications share mapped from their memfds.
//!
//! Beside it, the NIC's PFC: the MAC control frames the switch sends are read from their own socket with the
//! kernel's time stamps, and what they pause is held in the host's kernel by its pause gates (one TBF per
//! priority below the tc tree's leaves, `emulator/kernel/tc.py`), changed from here with pre-encoded netlink
//! requests. Every application's traffic on the host is held that way, the RNIC's own included.
//!
//! The RNIC and its socket are shared, behind a mutex, between the loop's agent ([`NicDriver`]) and the
//! host's Python verbs server (registrations, connections, posts, completions). Both run on the loop's
//! thread, one at a time, so the lock is never waited for.
use std::io;
use std::net::UdpSocket;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::{Arc, Mutex};

use fabric_core::agent::nic::{Nic, Wire};
use fabric_core::agent::switch::Sent;
use fabric_core::wire::ib::ETHERTYPE_IB;
use fabric_core::wire::mac::ETH_LEN;
use fabric_core::wire::pfc::{ETHERTYPE_MAC_CONTROL, PRIORITIES};
use fabric_core::wire::roce::ROCE_PORT;
use fabric_core::wire::uet::UET_PORT;
use fabric_io::event_loop::{Agent, Registry};
use fabric_io::io::clock::StampClock;
use fabric_io::io::mapped::MappedFile;
use fabric_io::io::netlink::RouteSocket;
use fabric_io::io::packet::{attach_filter, no_buffer, Batch, Insn, PacketSocket};
use fabric_io::io::poll::{Ready, READABLE, WRITABLE};

use crate::lock;

/// What the kernel may hold of the RNIC's sends, in time at the link rate: enough to keep the wire busy
/// through a late wake-up (the hosts' timers are rarely 0.3 ms late), and no more. A frame in the kernel is
/// gone for the RNIC: after a NAK it still goes out, stale, ahead of the retransmission (a real RNIC's
/// transmit pipeline holds a frame or two). With a dozen 4 KiB frames at 20 Mbit/s (20 ms of them) a lossy
/// multi-job fabric dropped 2.7 times the simulated frames.
const SEND_QUEUE_NS: u64 = 1_000_000;
/// At least two frames (one on the wire, one behind it), and at most a dozen, so that the RNIC is woken for
/// room once every few frames at fast rates.
const SEND_FRAMES: (usize, usize) = (2, 12);

/// SO_SNDBUF in link-MTU frames of `frame` bytes at `rate_bps`: [`SEND_QUEUE_NS`] of them. The kernel doubles
/// it and charges a frame its whole allocation (about twice a 4 KiB frame), so about that many are queued.
fn send_frames(rate_bps: u64, frame: usize) -> usize {
    let bits = u128::from(rate_bps) * u128::from(SEND_QUEUE_NS) / 1_000_000_000;
    let frame_bits = (frame.max(1) as u128) * 8;
    let frames = usize::try_from(bits.div_ceil(frame_bits)).unwrap_or(usize::MAX);
    frames.clamp(SEND_FRAMES.0, SEND_FRAMES.1)
}

/// A NIC's receive ring: the loop may be scheduled out for a few ms.
const RECV_BUFFER: usize = 4 << 20;
/// Frames read per wake-up (the loop comes back while more wait).
const BATCH: usize = 64;
const ETH_P_IP: u16 = 0x0800;

/// The PFC socket's buffer: MAC control frames are 64 bytes and come a few at a time.
const PFC_BUFFER: usize = 64 << 10;
/// MAC control frames read per call (the loop comes back while more wait).
const PFC_BATCH: usize = 16;
/// How long before a PFC pause's expiry the loop stops sleeping: a sleeping loop wakes 30 to 80 us after its
/// timer here, which on a 2 ms pause is 2 to 4% more hold than the switch asked.
const PAUSE_SPIN_NS: u64 = 150_000;
/// The gate and kick frames' skb priority: band 0 of the gate's queue (TC_PRIO_CONTROL).
const TC_PRIO_CONTROL: u32 = 7;

/// A host's pause gates: per priority the netlink requests that close and open its TBF, the frame that
/// spends its bucket once closed, and the kick that makes the kernel run the qdisc once opened.
struct Gates {
    route: RouteSocket,
    sender: PacketSocket,
    close: Vec<Vec<u8>>,
    open: Vec<Vec<u8>>,
    gate_frames: Vec<Vec<u8>>,
    kick: Vec<u8>,
}

impl Gates {
    fn open(
        ifname: &str,
        close: Vec<Vec<u8>>,
        open: Vec<Vec<u8>>,
        gate_frames: Vec<Vec<u8>>,
        kick: Vec<u8>,
    ) -> io::Result<Gates> {
        if [close.len(), open.len(), gate_frames.len()] != [PRIORITIES; 3] {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a pause gate needs one request and frame per priority",
            ));
        }
        Ok(Gates {
            route: RouteSocket::open()?,
            sender: PacketSocket::open_sender(ifname, TC_PRIO_CONTROL)?,
            close,
            open,
            gate_frames,
            kick,
        })
    }

    /// Closes (`closed`) or opens the gate of `priority`.
    fn change(&mut self, priority: usize, closed: bool) -> io::Result<()> {
        let (requests, frame) = if closed {
            (&self.close, self.gate_frames.get(priority))
        } else {
            (&self.open, Some(&self.kick))
        };
        let (Some(request), Some(frame)) = (requests.get(priority), frame) else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "no such priority",
            ));
        };
        self.route.request(request)?;
        match self.sender.send(&[frame])? {
            0 => Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                "the gate's frame found the send queue full",
            )),
            _ => Ok(()),
        }
    }
}

/// Gate changes that failed, and the first one's reason: PFC the host did not obey, which its stats say.
#[derive(Default, Clone)]
pub struct GateFailures {
    pub count: u64,
    pub first: Option<String>,
}

/// Classic BPF: accept IPv4 (no options) / UDP / destination port `port`, drop the rest.
const fn udp_filter(port: u16) -> [Insn; 10] {
    [
        insn(0x28, 0, 0, 12), // ldh [12]
        insn(0x15, 0, 7, ETH_P_IP as u32),
        insn(0x30, 0, 0, 14), // ldb [14]: version 4, IHL 5
        insn(0x15, 0, 5, 0x45),
        insn(0x30, 0, 0, 23), // ldb [23]: UDP
        insn(0x15, 0, 3, 17),
        insn(0x28, 0, 0, 36), // ldh [36]: destination port
        insn(0x15, 0, 1, port as u32),
        insn(0x06, 0, 0, 0xFFFF), // accept
        insn(0x06, 0, 0, 0),      // drop
    ]
}
/// RoCEv2's frames and UET's.
const ROCE_FILTER: [Insn; 10] = udp_filter(ROCE_PORT);
const UET_FILTER: [Insn; 10] = udp_filter(UET_PORT);

/// What an RNIC's socket carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkKind {
    Roce,
    Ib,
    Uet,
}
/// Classic BPF that drops everything.
const DROP_ALL: [Insn; 1] = [insn(0x06, 0, 0, 0)];

const fn insn(code: u16, jt: u8, jf: u8, k: u32) -> Insn {
    Insn { code, jt, jf, k }
}

/// An RNIC with its socket.
pub struct NicPlane {
    nic: Nic<MappedFile>,
    socket: PacketSocket,
    /// RoCE and UET: a UDP socket bound to the transport's port that takes nothing, so that the host's kernel
    /// does not answer every frame with an ICMP port unreachable.
    _sink: Option<UdpSocket>,
    batch: Batch,
    kernel_drops: u64,
    stopped: bool,
    /// A stall asked from the verbs side, applied at the loop's next turn (it changes what the loop watches).
    stall: Option<bool>,
    /// The switch's PFC frames, and the host's pause gates (wired by the host's agent after the RNIC).
    pfc: PacketSocket,
    pfc_batch: Batch,
    ifname: String,
    gates: Option<Gates>,
    gate_failures: GateFailures,
}

/// The socket as the RNIC sends on it; `registry` changes what the loop watches it for (absent outside the
/// loop's calls: the verbs side never sends).
struct SocketWire<'a, 'r> {
    socket: &'a mut PacketSocket,
    registry: Option<&'a Registry<'r>>,
    token: u32,
}

impl Wire for SocketWire<'_, '_> {
    fn send(&mut self, frame: &[u8]) -> Sent {
        match self.socket.send(&[frame]) {
            Ok(0) => Sent::Full,
            Ok(_) => Sent::Taken,
            Err(error) if no_buffer(&error) => Sent::Full,
            Err(_) => Sent::Refused,
        }
    }

    fn interest(&mut self, readable: bool, writable: bool) {
        if let Some(registry) = self.registry {
            let events = if readable { READABLE } else { 0 } | if writable { WRITABLE } else { 0 };
            // A failure leaves the interest as it was; the next change asks again.
            let _ = registry.modify(self.socket.as_raw_fd(), self.token, events);
        }
    }
}

impl NicPlane {
    /// `nic` on a socket on `ifname` (opened in the calling thread's network namespace), whose link carries
    /// frames of `mtu` bytes after the Ethernet header at `rate_bps`, of `kind`.
    pub fn open(
        nic: Nic<MappedFile>,
        ifname: &str,
        mtu: usize,
        rate_bps: u64,
        kind: LinkKind,
    ) -> io::Result<NicPlane> {
        let frame = ETH_LEN.saturating_add(mtu);
        let send = send_frames(rate_bps, frame).saturating_mul(frame);
        let udp = |filter: &[Insn], port: u16| -> io::Result<(PacketSocket, Option<UdpSocket>)> {
            let socket = PacketSocket::open_filtered(ifname, ETH_P_IP, send, RECV_BUFFER, filter)?;
            let sink = UdpSocket::bind(("0.0.0.0", port))?;
            attach_filter(sink.as_fd(), &DROP_ALL)?;
            Ok((socket, Some(sink)))
        };
        let (socket, sink) = match kind {
            LinkKind::Ib => (
                PacketSocket::open(ifname, ETHERTYPE_IB, send, RECV_BUFFER)?,
                None,
            ),
            LinkKind::Roce => udp(&ROCE_FILTER, ROCE_PORT)?,
            LinkKind::Uet => udp(&UET_FILTER, UET_PORT)?,
        };
        let pfc = PacketSocket::open(ifname, ETHERTYPE_MAC_CONTROL, 0, PFC_BUFFER)?;
        pfc.stamp_frames()?;
        Ok(NicPlane {
            nic,
            socket,
            _sink: sink,
            batch: Batch::new(BATCH, frame.saturating_add(64)),
            kernel_drops: 0,
            stopped: false,
            stall: None,
            pfc,
            pfc_batch: Batch::new(PFC_BATCH, 128),
            ifname: ifname.to_string(),
            gates: None,
            gate_failures: GateFailures::default(),
        })
    }

    /// The host's pause gates from now on, opened in the calling thread's namespace from their requests and
    /// frames (one of each per priority; see [`Gates`]).
    pub fn wire_gates(
        &mut self,
        close: Vec<Vec<u8>>,
        open: Vec<Vec<u8>>,
        gate_frames: Vec<Vec<u8>>,
        kick: Vec<u8>,
    ) -> io::Result<()> {
        self.gates = Some(Gates::open(&self.ifname, close, open, gate_frames, kick)?);
        Ok(())
    }

    /// Gate changes that failed so far.
    pub fn gate_failures(&self) -> &GateFailures {
        &self.gate_failures
    }

    /// The RNIC, to read.
    pub fn nic(&self) -> &Nic<MappedFile> {
        &self.nic
    }

    /// The RNIC, to change from the verbs side (it sends nothing there: the loop's next turn does).
    pub fn nic_mut(&mut self) -> &mut Nic<MappedFile> {
        &mut self.nic
    }

    /// Frames the kernel dropped at the socket because its buffer was full, since the start.
    pub fn kernel_drops(&mut self) -> u64 {
        self.kernel_drops += self.socket.kernel_drops().unwrap_or(0);
        self.kernel_drops
    }

    /// The receive pipeline hangs (`stalled`) or works again, from the loop's next turn.
    pub fn stall_later(&mut self, stalled: bool) {
        self.stall = Some(stalled);
    }

    /// The RNIC stops: the loop drops it at the end of its batch.
    pub fn stop(&mut self) {
        self.stopped = true;
    }

    /// `f` on the RNIC and its socket as it sends on it, epoll changes through `registry` for `token`.
    fn with_wire<R>(
        &mut self,
        registry: &Registry<'_>,
        token: u32,
        f: impl FnOnce(&mut Nic<MappedFile>, &mut SocketWire<'_, '_>) -> R,
    ) -> R {
        let mut wire = SocketWire {
            socket: &mut self.socket,
            registry: Some(registry),
            token,
        };
        f(&mut self.nic, &mut wire)
    }

    /// Reads the frames waiting (up to a batch) and hands them to the RNIC.
    fn receive(&mut self, now: u64) {
        if !self.nic.receiving() {
            return; // stalled: the frames stay in the kernel
        }
        let NicPlane {
            nic, socket, batch, ..
        } = self;
        if let Ok(count) = socket.receive(batch) {
            for index in 0..count {
                if let Some(frame) = batch.frame(index) {
                    nic.receive(now, frame);
                }
            }
        } // an error (ENETDOWN: the link was taken down) leaves nothing to read
    }

    /// Reads the MAC control frames waiting (up to a batch), each at its arrival: the kernel's time stamp on
    /// the loop's clock, at most `now`.
    fn receive_pfc(&mut self, now: u64) {
        // none, or ENETDOWN (the link was taken down): nothing to read
        let count = self.pfc.receive(&mut self.pfc_batch).unwrap_or(0);
        let clock = StampClock::read().ok();
        for index in 0..count {
            let arrival =
                clock.map_or(now, |clock| clock.arrival(self.pfc_batch.stamp(index), now));
            if let Some(frame) = self.pfc_batch.frame(index) {
                self.nic.receive_pfc(arrival, frame);
            }
        }
        self.change_gates();
    }

    /// Applies the RNIC's gate changes to the host's pause gates.
    fn change_gates(&mut self) {
        let NicPlane {
            nic,
            gates,
            gate_failures,
            ..
        } = self;
        for (priority, closed) in nic.take_gate_changes() {
            let result = match gates {
                Some(gates) => gates.change(priority, closed),
                None => Err(io::Error::other("the host's pause gates are not wired")),
            };
            if let Err(error) = result {
                gate_failures.count += 1;
                gate_failures
                    .first
                    .get_or_insert_with(|| format!("priority {priority}: {error}"));
            }
        }
    }
}

/// The loop's side of one RNIC: its socket watched with `token`, its PFC socket with `token + 1`.
pub struct NicDriver {
    plane: Arc<Mutex<NicPlane>>,
    token: u32,
    /// The deadline its last `after_events` gave.
    due: Option<u64>,
}

impl NicDriver {
    /// The agent of `plane`, its socket watched through `registry` with `token`.
    pub fn watched(
        plane: Arc<Mutex<NicPlane>>,
        token: u32,
        registry: &Registry<'_>,
    ) -> io::Result<NicDriver> {
        let pfc_token = token.checked_add(1).ok_or(io::ErrorKind::InvalidInput)?;
        {
            let plane = lock(&plane);
            registry.watch(plane.socket.as_raw_fd(), token, READABLE)?;
            registry.watch(plane.pfc.as_raw_fd(), pfc_token, READABLE)?;
        }
        Ok(NicDriver {
            plane,
            token,
            due: None,
        })
    }

    /// Whether the host's side has completions or pause changes to take.
    pub fn has_news(&self) -> bool {
        lock(&self.plane).nic.has_news()
    }
}

impl Agent for NicDriver {
    fn ready(&mut self, token: u32, ready: Ready, now: u64, registry: &Registry<'_>) {
        let mut plane = lock(&self.plane);
        if token != self.token {
            plane.receive_pfc(now);
            return;
        }
        if ready.readable {
            plane.receive(now);
        }
        if ready.writable {
            plane.with_wire(registry, self.token, |nic, wire| nic.writable(now, wire));
        }
    }

    fn deadline(&mut self, deadline: u64, now: u64, _registry: &Registry<'_>) {
        let mut plane = lock(&self.plane);
        plane.nic.deadline(deadline, now);
        plane.change_gates(); // a pause that ran out: its gate opens before anything else runs
    }

    fn after_events(&mut self, now: u64, registry: &Registry<'_>) -> Option<u64> {
        let mut plane = lock(&self.plane);
        if let Some(stalled) = plane.stall.take() {
            // Stalled, the socket is no longer watched for reading and frames wait in the kernel; resumed,
            // it is watched again and what waited is read at the next wake-up, all at once.
            plane.with_wire(registry, self.token, |nic, wire| nic.stall(stalled, wire));
        }
        self.due = plane.with_wire(registry, self.token, |nic, wire| {
            nic.after_events(now, wire)
        });
        self.due
    }

    /// A PFC pause's expiry is spun for: the gate opens at the expiry, not a wake-up after it.
    fn spin_ns(&self) -> u64 {
        let expiry = lock(&self.plane).nic.pause_state().next_expiry();
        match (expiry, self.due) {
            (Some(expiry), Some(due)) if expiry <= due => PAUSE_SPIN_NS,
            _ => 0,
        }
    }

    fn running(&self) -> bool {
        !lock(&self.plane).stopped
    }

    fn finish(&mut self, registry: &Registry<'_>) {
        let plane = lock(&self.plane);
        let _ = registry.unwatch(plane.socket.as_raw_fd());
        let _ = registry.unwatch(plane.pfc.as_raw_fd());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_send_queue_holds_a_millisecond_of_frames_within_two_and_a_dozen() {
        let frame = 4096 + 14;
        assert_eq!(send_frames(20_000_000, frame), 2); // a frame takes 1.6 ms
        assert_eq!(send_frames(200_000_000, frame), 7); // 164 us each: 6.1 in a millisecond
        assert_eq!(send_frames(10_000_000_000, frame), 12);
        assert_eq!(send_frames(0, frame), 2);
        assert_eq!(send_frames(u64::MAX, 0), 12);
    }
}
