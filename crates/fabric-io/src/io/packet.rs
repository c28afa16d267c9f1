//! Raw AF_PACKET sockets, a batch of frames per system call.
//!
//! The same socket the Python agents open (`emulator/kernel/packet_socket.py`): bound to one interface,
//! non-blocking, its own sends not looped back to it (`PACKET_IGNORE_OUTGOING`), send and receive buffers as
//! asked. Frames come in with `recvmmsg` and go out with `sendmmsg`, up to a batch per call: a system call costs
//! about 0.3 us here (docs/performance.md), once a batch instead of once a frame.
use std::ffi::CString;
use std::io;
use std::mem::size_of;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use crate::io::ring::RxRing;
use crate::io::set_option;

/// Every EtherType (`ETH_P_ALL`).
pub const ETH_P_ALL: u16 = 0x0003;
/// `linux/if_packet.h`: the socket does not receive the frames it sends.
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
/// `linux/if_packet.h`: the socket's receive statistics (`struct tpacket_stats`), reset by each read.
const PACKET_STATISTICS: libc::c_int = 6;
/// Control-message room per frame: one `SCM_TIMESTAMPNS` (a 16-byte header and a timespec), with slack.
const CONTROL_SPACE: usize = 64;
/// `cmsghdr`'s length field, level and type, before its data (8-byte aligned on Linux's 64-bit ABI).
const CMSG_HEADER: usize = size_of::<usize>() + 2 * size_of::<libc::c_int>();

/// Frames received by one call: `count` frames, each in a slot of `slot` bytes of `data`.
pub struct Batch {
    data: Vec<u8>,
    slot: usize,
    lens: Vec<usize>,
    count: usize,
    /// Each frame's kernel receive time (ns of `CLOCK_REALTIME`), on a socket that stamps them.
    stamps: Vec<Option<u64>>,
    /// Frames longer than a slot, cut by the kernel and left out of the batch.
    pub truncated: u64,
    iovecs: Vec<libc::iovec>,
    headers: Vec<libc::mmsghdr>,
    control: Vec<u8>,
}

// SAFETY: the raw pointers in `iovecs` and `headers` point into the batch's own `data` and vectors only during
// a receive, which rebuilds them first; nothing reads them after, so moving the batch to another thread moves
// plain memory.
unsafe impl Send for Batch {}

impl Batch {
    /// Room for `frames` frames of up to `slot` bytes each (at least one of one byte).
    pub fn new(frames: usize, slot: usize) -> Batch {
        let (frames, slot) = (frames.max(1), slot.max(1));
        Batch {
            data: vec![0; frames.saturating_mul(slot)],
            slot,
            lens: vec![0; frames],
            count: 0,
            stamps: vec![None; frames],
            truncated: 0,
            iovecs: Vec::with_capacity(frames),
            headers: Vec::with_capacity(frames),
            control: vec![0; frames.saturating_mul(CONTROL_SPACE)],
        }
    }

    /// When the kernel received frame `index` (ns of `CLOCK_REALTIME`), on a socket that stamps each frame
    /// ([`PacketSocket::stamp_frames`]).
    pub fn stamp(&self, index: usize) -> Option<u64> {
        if index >= self.count {
            return None;
        }
        self.stamps.get(index).copied().flatten()
    }

    /// Frame `index` of the batch, if there is one.
    pub fn frame(&self, index: usize) -> Option<&[u8]> {
        if index >= self.count {
            return None;
        }
        let start = index.checked_mul(self.slot)?;
        self.data
            .get(start..start.checked_add(*self.lens.get(index)?)?)
    }
}

/// One raw socket on one interface.
pub struct PacketSocket {
    fd: OwnedFd,
    iovecs: Vec<libc::iovec>,
    headers: Vec<libc::mmsghdr>,
}

// SAFETY: a socket descriptor may be used from any thread; the raw pointers in `iovecs` and `headers` point
// to the caller's frames only during a send, which rebuilds them first, and nothing reads them after.
unsafe impl Send for PacketSocket {}

impl AsRawFd for PacketSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// `headers` made anew: one message per iovec of `iovecs`, each pointing to it (valid while neither moves).
fn headers_over(iovecs: &mut [libc::iovec], headers: &mut Vec<libc::mmsghdr>) {
    headers.clear();
    for iovec in iovecs.iter_mut() {
        let mut header = empty_header();
        header.msg_hdr.msg_iov = iovec;
        header.msg_hdr.msg_iovlen = 1;
        headers.push(header);
    }
}

/// An all-zero `mmsghdr`: no name, no control data, no vector yet.
fn empty_header() -> libc::mmsghdr {
    // SAFETY: mmsghdr is plain C data (integers and pointers); all zeros is a valid value of it (null pointers,
    // zero lengths), which the kernel reads as "no name, no control data".
    unsafe { std::mem::zeroed() }
}

impl PacketSocket {
    /// A non-blocking raw socket on `ifname` that receives frames of EtherType `protocol` ([`ETH_P_ALL`]: every
    /// one; 0: none, a socket only sent on), with the kernel's send and receive buffers of the given sizes (it
    /// doubles them).
    ///
    /// Opened for no EtherType and then bound, as the Python agents do: opened for its EtherType, a socket
    /// hears every interface of the namespace until the bind, and the bind waits for an RCU grace period.
    pub fn open(
        ifname: &str,
        protocol: u16,
        send_buffer: usize,
        recv_buffer: usize,
    ) -> io::Result<PacketSocket> {
        let index = interface_index(ifname)?;
        let socket = PacketSocket::unbound(send_buffer, recv_buffer)?;
        socket.bind(index, protocol)?;
        Ok(socket)
    }

    /// As [`PacketSocket::open`], with the classic BPF `program` attached before the bind: no frame it refuses
    /// is ever queued (a host's RoCE socket takes IPv4/UDP to port 4791 only).
    pub fn open_filtered(
        ifname: &str,
        protocol: u16,
        send_buffer: usize,
        recv_buffer: usize,
        program: &[Insn],
    ) -> io::Result<PacketSocket> {
        let index = interface_index(ifname)?;
        let socket = PacketSocket::unbound(send_buffer, recv_buffer)?;
        attach_filter(socket.fd.as_fd(), program)?;
        socket.bind(index, protocol)?;
        Ok(socket)
    }

    /// As [`PacketSocket::open`], receiving into a ring of `slots` slots of `slot` bytes ([`RxRing`]), made
    /// before the bind so that no frame waits outside it.
    pub fn open_with_ring(
        ifname: &str,
        protocol: u16,
        send_buffer: usize,
        slot: usize,
        slots: usize,
    ) -> io::Result<(PacketSocket, RxRing)> {
        let index = interface_index(ifname)?;
        let socket = PacketSocket::unbound(send_buffer, 0)?;
        let ring = RxRing::attach(&socket, slot, slots)?;
        socket.bind(index, protocol)?;
        Ok((socket, ring))
    }

    /// The socket, its options set, bound to nothing yet.
    fn unbound(send_buffer: usize, recv_buffer: usize) -> io::Result<PacketSocket> {
        // 0: the kernel's default buffer (a sender's).
        let flags = libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC;
        // SAFETY: socket() takes no pointer; its result is checked before it is used as a descriptor.
        let fd = unsafe { libc::socket(libc::AF_PACKET, flags, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by socket() and nothing else owns it; OwnedFd closes it once.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let socket = PacketSocket {
            fd,
            iovecs: Vec::new(),
            headers: Vec::new(),
        };
        socket.set_int(libc::SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)?;
        if send_buffer > 0 {
            socket.set_int(libc::SOL_SOCKET, libc::SO_SNDBUF, clamp_int(send_buffer))?;
        }
        if recv_buffer > 0 {
            socket.set_int(libc::SOL_SOCKET, libc::SO_RCVBUF, clamp_int(recv_buffer))?;
        }
        Ok(socket)
    }

    fn set_int(&self, level: libc::c_int, name: libc::c_int, value: libc::c_int) -> io::Result<()> {
        set_option(self.fd.as_raw_fd(), level, name, &value)
    }

    fn bind(&self, index: libc::c_int, protocol: u16) -> io::Result<()> {
        // SAFETY: sockaddr_ll is plain C data; all zeros is a valid value, filled in below.
        let mut address: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        address.sll_family = libc::AF_PACKET as libc::c_ushort;
        address.sll_protocol = protocol.to_be();
        address.sll_ifindex = index;
        // SAFETY: the address points to a live sockaddr_ll, and its size is the one passed.
        let rc = unsafe {
            libc::bind(
                self.fd.as_raw_fd(),
                (&address as *const libc::sockaddr_ll).cast(),
                size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        check(rc)
    }

    /// A socket on `ifname` that is only sent on, in tc class `priority` (`SO_PRIORITY`): a switch port's
    /// PFC frames and ARP replies, which overtake the data backlog in the highest class.
    pub fn open_sender(ifname: &str, priority: u32) -> io::Result<PacketSocket> {
        let index = interface_index(ifname)?;
        let socket = PacketSocket::unbound(0, 0)?;
        socket.set_int(
            libc::SOL_SOCKET,
            libc::SO_PRIORITY,
            libc::c_int::try_from(priority).unwrap_or(libc::c_int::MAX),
        )?;
        socket.bind(index, 0)?;
        Ok(socket)
    }

    /// Frames the kernel dropped since the last call because the receive buffer was full (reading the
    /// statistics resets them, so callers add the results up).
    pub fn kernel_drops(&self) -> io::Result<u64> {
        let mut stats = [0u32; 2]; // tp_packets, tp_drops
        let mut len = size_of::<[u32; 2]>() as libc::socklen_t;
        // SAFETY: getsockopt writes at most `len` bytes into `stats`, which has that many, and updates `len`.
        let rc = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                PACKET_STATISTICS,
                stats.as_mut_ptr().cast(),
                &mut len,
            )
        };
        check(rc)?;
        Ok(u64::from(stats[1]))
    }

    /// From now on every frame received comes with the kernel's receive time stamp ([`Batch::stamp`]).
    pub fn stamp_frames(&self) -> io::Result<()> {
        self.set_int(libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1)
    }

    /// Receives the frames waiting, up to the batch's room, without waiting for more: how many (0: none).
    pub fn receive(&mut self, batch: &mut Batch) -> io::Result<usize> {
        batch.count = 0;
        batch.iovecs.clear();
        let slot = batch.slot;
        for chunk in batch.data.chunks_exact_mut(slot) {
            batch.iovecs.push(libc::iovec {
                iov_base: chunk.as_mut_ptr().cast(),
                iov_len: slot,
            });
        }
        headers_over(&mut batch.iovecs, &mut batch.headers);
        for (header, control) in batch
            .headers
            .iter_mut()
            .zip(batch.control.chunks_exact_mut(CONTROL_SPACE))
        {
            header.msg_hdr.msg_control = control.as_mut_ptr().cast();
            header.msg_hdr.msg_controllen = CONTROL_SPACE;
        }
        let room = u32::try_from(batch.headers.len()).unwrap_or(u32::MAX);
        // SAFETY: every header points to one iovec of `batch.iovecs`, each to its own slot of `batch.data`, of
        // the length given, and to its own `CONTROL_SPACE` bytes of `batch.control`; all of them live, unmoved
        // and otherwise unborrowed until the call returns. The kernel writes at most `room` headers, each
        // slot's bytes and each control area's; no time-out pointer.
        let rc = unsafe {
            libc::recvmmsg(
                self.fd.as_raw_fd(),
                batch.headers.as_mut_ptr(),
                room,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        let received = taken(rc)?;
        let mut kept = 0;
        for (at, header) in batch.headers.iter().take(received).enumerate() {
            let len = header.msg_len as usize;
            if header.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 || len > slot {
                batch.truncated += 1;
                continue;
            }
            if kept != at {
                // In range: `at` is below the batch's room and `len` at most a slot.
                batch
                    .data
                    .copy_within(at * slot..at * slot + len, kept * slot);
            }
            if let Some(kept_len) = batch.lens.get_mut(kept) {
                *kept_len = len;
            }
            let control = batch
                .control
                .get(at * CONTROL_SPACE..)
                .and_then(|area| area.get(..header.msg_hdr.msg_controllen.min(CONTROL_SPACE)));
            if let Some(stamp) = batch.stamps.get_mut(kept) {
                *stamp = control.and_then(receive_stamp);
            }
            kept += 1;
        }
        batch.count = kept;
        Ok(kept)
    }

    /// Sends the frames of `batch` from `from` on, in order, in one call: how many the socket took (0: its send
    /// buffer is full, [`PacketSocket::wait`] for room). An error is the first frame's (a link down, a frame
    /// too long for the interface): the caller counts it and goes on with the next.
    pub fn send_from(&mut self, batch: &Batch, from: usize) -> io::Result<usize> {
        self.iovecs.clear();
        for frame in (from..batch.count).filter_map(|index| batch.frame(index)) {
            self.iovecs.push(read_only(frame));
        }
        self.send_iovecs()
    }

    /// Sends the frames of `ring` from `from` slots ahead to `to`, in order, in one call, stopping before a slot
    /// without a whole frame (the caller skips it): how many the socket took, as [`PacketSocket::send_from`].
    pub fn send_ring(&mut self, ring: &RxRing, from: usize, to: usize) -> io::Result<usize> {
        self.iovecs.clear();
        for ahead in from..to {
            match ring.frame(ahead) {
                Some(frame) => self.iovecs.push(read_only(frame)),
                None => break,
            }
        }
        self.send_iovecs()
    }

    /// Sends `frames` in order in one call, as [`PacketSocket::send_from`] does.
    pub fn send(&mut self, frames: &[&[u8]]) -> io::Result<usize> {
        self.iovecs.clear();
        for frame in frames {
            self.iovecs.push(read_only(frame));
        }
        self.send_iovecs()
    }

    /// `sendmmsg` over the frames `self.iovecs` points to, each borrowed by the caller for the call.
    fn send_iovecs(&mut self) -> io::Result<usize> {
        headers_over(&mut self.iovecs, &mut self.headers);
        if self.headers.is_empty() {
            return Ok(0);
        }
        let count = u32::try_from(self.headers.len()).unwrap_or(u32::MAX);
        // SAFETY: every header points to one iovec of `self.iovecs`, each to a frame the caller borrows for this
        // call (so it lives and does not move); sendmmsg only reads the frames (the *mut is the C type's) and
        // writes the headers' msg_len fields.
        let rc = unsafe {
            libc::sendmmsg(
                self.fd.as_raw_fd(),
                self.headers.as_mut_ptr(),
                count,
                libc::MSG_DONTWAIT,
            )
        };
        taken(rc)
    }

    /// Waits until the socket can be read (`readable`) or written, or `timeout_ms` passes: whether it can.
    pub fn wait(&self, readable: bool, timeout_ms: i32) -> io::Result<bool> {
        let mut poll = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: if readable {
                libc::POLLIN
            } else {
                libc::POLLOUT
            },
            revents: 0,
        };
        // SAFETY: one live, writable pollfd, and the count of 1 that says so.
        let rc = unsafe { libc::poll(&mut poll, 1, timeout_ms) };
        if rc < 0 {
            let error = io::Error::last_os_error();
            return match error.kind() {
                io::ErrorKind::Interrupted => Ok(false),
                _ => Err(error),
            };
        }
        Ok(rc > 0)
    }
}

/// An iovec over `frame` for sending: the kernel only reads it.
fn read_only(frame: &[u8]) -> libc::iovec {
    libc::iovec {
        iov_base: frame.as_ptr() as *mut libc::c_void,
        iov_len: frame.len(),
    }
}

/// The index of interface `ifname` in the calling thread's namespace.
pub fn interface_index(ifname: &str) -> io::Result<libc::c_int> {
    let name = CString::new(ifname)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "interface name with a NUL"))?;
    // SAFETY: `name` is a live NUL-terminated string for the duration of the call.
    let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if index == 0 {
        return Err(io::Error::last_os_error());
    }
    libc::c_int::try_from(index).map_err(|_| io::Error::other("interface index out of range"))
}

/// What a batched call's result says: how many frames it took, none if the socket would have blocked, or the
/// error.
/// One classic BPF instruction (`struct sock_filter`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Insn {
    pub code: u16,
    pub jt: u8,
    pub jf: u8,
    pub k: u32,
}

/// Attaches the classic BPF `program` to the socket `fd` (`SO_ATTACH_FILTER`; the kernel copies it).
pub fn attach_filter(fd: BorrowedFd<'_>, program: &[Insn]) -> io::Result<()> {
    let mut code: Vec<libc::sock_filter> = program
        .iter()
        .map(|insn| libc::sock_filter {
            code: insn.code,
            jt: insn.jt,
            jf: insn.jf,
            k: insn.k,
        })
        .collect();
    let fprog = libc::sock_fprog {
        len: u16::try_from(code.len()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?,
        filter: code.as_mut_ptr(),
    };
    // `fprog` points to `code`, live for the call, of the length it says; the kernel copies the program.
    set_option(
        fd.as_raw_fd(),
        libc::SOL_SOCKET,
        libc::SO_ATTACH_FILTER,
        &fprog,
    )
}

/// Whether a send's `error` is ENOBUFS: the device queue refused the frame for now, as a full socket buffer
/// does (the caller may keep the frame and wait for room).
pub fn no_buffer(error: &io::Error) -> bool {
    error.raw_os_error() == Some(libc::ENOBUFS)
}

/// The `SCM_TIMESTAMPNS` among one frame's control messages, in ns.
fn receive_stamp(control: &[u8]) -> Option<u64> {
    let mut at = 0;
    while let Some(header) = control.get(at..at + CMSG_HEADER) {
        let (len, rest) = header.split_at(size_of::<usize>());
        let len = usize::from_ne_bytes(len.try_into().ok()?);
        let level = libc::c_int::from_ne_bytes(rest.get(..4)?.try_into().ok()?);
        let kind = libc::c_int::from_ne_bytes(rest.get(4..8)?.try_into().ok()?);
        if level == libc::SOL_SOCKET && kind == libc::SCM_TIMESTAMPNS {
            let data = control.get(at + CMSG_HEADER..at + CMSG_HEADER + 16)?;
            let seconds =
                u64::try_from(i64::from_ne_bytes(data.get(..8)?.try_into().ok()?)).ok()?;
            let nanoseconds =
                u64::try_from(i64::from_ne_bytes(data.get(8..)?.try_into().ok()?)).ok()?;
            return Some(
                seconds
                    .saturating_mul(1_000_000_000)
                    .saturating_add(nanoseconds),
            );
        }
        if len < CMSG_HEADER {
            return None;
        }
        at = at.checked_add(len.checked_next_multiple_of(8)?)?;
    }
    None
}

fn taken(rc: libc::c_int) -> io::Result<usize> {
    if rc >= 0 {
        return Ok(usize::try_from(rc).unwrap_or(0));
    }
    let error = io::Error::last_os_error();
    match error.kind() {
        io::ErrorKind::WouldBlock => Ok(0),
        _ => Err(error),
    }
}

fn clamp_int(value: usize) -> libc::c_int {
    libc::c_int::try_from(value).unwrap_or(libc::c_int::MAX)
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_gives_only_its_received_frames() {
        let mut batch = Batch::new(4, 16);
        assert!(batch.frame(0).is_none());
        batch.lens[0] = 3;
        batch.lens[1] = 16;
        batch.data[16..32].fill(7);
        batch.count = 2;
        assert_eq!(batch.frame(0), Some(&[0u8, 0, 0][..]));
        assert_eq!(batch.frame(1), Some(&[7u8; 16][..]));
        assert_eq!(batch.frame(2), None);
    }

    fn cmsg(level: libc::c_int, kind: libc::c_int, data: &[u8]) -> Vec<u8> {
        let mut message = (CMSG_HEADER + data.len()).to_ne_bytes().to_vec();
        message.extend_from_slice(&level.to_ne_bytes());
        message.extend_from_slice(&kind.to_ne_bytes());
        message.extend_from_slice(data);
        message.resize(message.len().div_ceil(8) * 8, 0);
        message
    }

    #[test]
    fn the_receive_stamp_is_found_among_control_messages() {
        let stamp = [3i64.to_ne_bytes(), 250i64.to_ne_bytes()].concat();
        let other = cmsg(libc::SOL_PACKET, 8, &[1, 2, 3, 4, 5]); // PACKET_AUXDATA-like, padded
        let ours = cmsg(libc::SOL_SOCKET, libc::SCM_TIMESTAMPNS, &stamp);
        assert_eq!(
            receive_stamp(&[other.clone(), ours.clone()].concat()),
            Some(3_000_000_250)
        );
        assert_eq!(receive_stamp(&other), None);
        assert_eq!(receive_stamp(&ours[..ours.len() - 1]), None, "cut short");
        assert_eq!(receive_stamp(&[0; 40]), None, "a zero length ends the walk");
        let mut huge = cmsg(libc::SOL_PACKET, 8, &[0; 8]);
        huge[..size_of::<usize>()].copy_from_slice(&usize::MAX.to_ne_bytes());
        assert_eq!(
            receive_stamp(&huge),
            None,
            "a length past the end of memory ends it too"
        );
        let negative = [(-1i64).to_ne_bytes(), 0i64.to_ne_bytes()].concat();
        assert_eq!(
            receive_stamp(&cmsg(libc::SOL_SOCKET, libc::SCM_TIMESTAMPNS, &negative)),
            None
        );
    }

    #[test]
    fn an_unknown_interface_is_an_error_not_a_panic() {
        assert!(interface_index("no-such-if-0").is_err());
        assert!(interface_index("bad\0name").is_err());
        assert!(PacketSocket::open("no-such-if-0", ETH_P_ALL, 4096, 4096).is_err());
    }
}
