//! A TPACKET_V2 receive ring: the kernel writes each frame into a slot of a mapping it shares with the loop,
//! which reads the frame in place. No copy out, and no system call while frames wait: one `poll` when the ring
//! runs dry, where `recvmmsg` costs a call per batch and copies every frame.
//!
//! V2, not V3: V3 hands frames over a block at a time and holds a block until it fills or a timer retires it
//! (a millisecond at best), which would delay a PFC frame; V2 hands each frame over as it lands.
use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{fence, Ordering};

use crate::io::packet::PacketSocket;
use crate::io::set_option;

/// `linux/if_packet.h`.
const PACKET_RX_RING: libc::c_int = 5;
const PACKET_VERSION: libc::c_int = 10;
const TPACKET_V2: libc::c_int = 1;
const TP_STATUS_KERNEL: u32 = 0;
const TP_STATUS_USER: u32 = 1;
/// Bytes of a ring block: a multiple of the page size and of every slot size allowed.
const BLOCK: usize = 1 << 16;

/// `struct tpacket_req`.
#[repr(C)]
struct TpacketReq {
    block_size: libc::c_uint,
    block_nr: libc::c_uint,
    frame_size: libc::c_uint,
    frame_nr: libc::c_uint,
}

/// `struct tpacket2_hdr`: the start of every slot.
#[repr(C)]
#[allow(
    dead_code,
    reason = "the kernel's layout: every field is there, not all are read"
)]
struct Tpacket2Hdr {
    status: u32,
    len: u32,
    snaplen: u32,
    mac: u16,
    net: u16,
    sec: u32,
    nsec: u32,
    vlan_tci: u16,
    vlan_tpid: u16,
    padding: [u8; 4],
}

/// A receive ring mapped from a socket, with the slot the loop reads next.
pub struct RxRing {
    map: *mut u8,
    map_len: usize,
    slot: usize,
    slots: usize,
    next: usize,
    /// Frames longer than a slot: cut by the kernel, left out.
    pub truncated: u64,
}

// SAFETY: the mapping belongs to this ring alone (no other copy of the pointer exists) and stays valid until
// Drop unmaps it, whichever thread holds the ring; the kernel's side is synchronized through the slots' status
// words with fences, not through the thread.
unsafe impl Send for RxRing {}

impl RxRing {
    /// A ring of `slots` slots of `slot` bytes (a power of two from 2048 to 65536; the frame and about 80 bytes
    /// of header) on `socket`, which must not be bound yet: a frame that arrived before the ring would be in the
    /// socket's queue, which the ring does not read.
    pub fn attach(socket: &PacketSocket, slot: usize, slots: usize) -> io::Result<RxRing> {
        if !slot.is_power_of_two() || !(2048..=BLOCK).contains(&slot) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "ring slot must be a power of two from 2048 to 65536",
            ));
        }
        let per_block = BLOCK / slot;
        let blocks = slots.div_ceil(per_block).max(1);
        let slots = blocks * per_block;
        let fd = socket.as_raw_fd();
        set_option(fd, libc::SOL_PACKET, PACKET_VERSION, &TPACKET_V2)?;
        let request = TpacketReq {
            block_size: BLOCK as libc::c_uint,
            block_nr: libc::c_uint::try_from(blocks).unwrap_or(libc::c_uint::MAX),
            frame_size: slot as libc::c_uint,
            frame_nr: libc::c_uint::try_from(slots).unwrap_or(libc::c_uint::MAX),
        };
        set_option(fd, libc::SOL_PACKET, PACKET_RX_RING, &request)?;
        let map_len = blocks * BLOCK;
        // SAFETY: a new shared mapping of the ring the kernel just made for `fd`, of its size; no address is
        // imposed, so nothing of ours is overwritten. The result is checked against MAP_FAILED.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(RxRing {
            map: map.cast(),
            map_len,
            slot,
            slots,
            next: 0,
            truncated: 0,
        })
    }

    /// The header of the slot `ahead` slots after the next one.
    fn header(&self, ahead: usize) -> *mut Tpacket2Hdr {
        let index = (self.next + ahead) % self.slots;
        // SAFETY: `index * slot` is below `map_len` (index < slots, slots * slot == map_len), so the pointer stays
        // inside the mapping; slots are 16-byte aligned (slot sizes are powers of two of at least 2048).
        unsafe { self.map.add(index * self.slot).cast() }
    }

    /// How many slots from the next one on the kernel has filled, up to `most`.
    pub fn ready(&self, most: usize) -> usize {
        let mut count = 0;
        while count < most.min(self.slots) {
            // SAFETY: the header is inside the mapping (`header`); the status word is shared with the kernel,
            // hence a volatile read.
            let status = unsafe { std::ptr::read_volatile(&(*self.header(count)).status) };
            if status & TP_STATUS_USER == 0 {
                break;
            }
            count += 1;
        }
        // The frames' bytes were written before their status: read them only after it.
        fence(Ordering::Acquire);
        count
    }

    /// The frame in the slot `ahead` slots after the next one, which [`RxRing::ready`] counted; `None` for a
    /// frame cut to the slot (counted by [`RxRing::release`]) or a header that does not fit its slot.
    pub fn frame(&self, ahead: usize) -> Option<&[u8]> {
        let header = self.header(ahead);
        // SAFETY: the slot is the user's (ready said so, and only release gives it back), so the kernel does not
        // write the header while it is read.
        let (mac, snaplen, len) = unsafe {
            (
                usize::from((*header).mac),
                (*header).snaplen as usize,
                (*header).len as usize,
            )
        };
        if snaplen < len || mac.checked_add(snaplen)? > self.slot {
            return None;
        }
        // SAFETY: `mac + snaplen` is within the slot (checked), the slot within the mapping, and the bytes are
        // the user's until `release`, which takes `&mut self` and so ends this borrow first.
        Some(unsafe { std::slice::from_raw_parts(header.cast::<u8>().add(mac), snaplen) })
    }

    /// Gives the next `count` slots back to the kernel.
    pub fn release(&mut self, count: usize) {
        for ahead in 0..count.min(self.slots) {
            if self.frame(ahead).is_none() {
                self.truncated += 1;
            }
        }
        // Every read of those frames comes before the kernel may write them again.
        fence(Ordering::Release);
        for ahead in 0..count.min(self.slots) {
            // SAFETY: the header is inside the mapping (`header`); a volatile write of the shared status word.
            unsafe {
                std::ptr::write_volatile(&mut (*self.header(ahead)).status, TP_STATUS_KERNEL)
            };
        }
        self.next = (self.next + count.min(self.slots)) % self.slots;
    }
}

impl Drop for RxRing {
    fn drop(&mut self) {
        // SAFETY: `map` and `map_len` are the mapping `attach` made, unmapped once, here; no slice of it outlives
        // the ring (frames borrow the ring).
        unsafe {
            libc::munmap(self.map.cast(), self.map_len);
        }
    }
}
