//! A frame in simulated time: its bytes, or for an RDMA frame whose payload stays in its sender's memory
//! (`sim::memory`), the bytes around the payload and where the payload lies.
//!
//! A switch reads and changes only headers (addresses, TTL, ECN, priority: the first 38 bytes) and counts a
//! frame by its length on the wire, so it takes either kind alike. The receiving host puts the whole frame
//! together ([`SimFrame::whole`]) and decodes it as the emulator's RNIC decodes what a socket gave it, ICRC
//! checked.
//!
//! A frame stays where it was made while it crosses the fabric: queues and wires move a 32-byte handle (its
//! length, and its buffer or a box), and only a switch's receive and the receiving host read what it points
//! to. A frame of up to [`INLINE`] bytes, or whose payload stays in memory, is held in place in a box (with its
//! payload's place); any other frame is its own buffer. At the peak of a fattree,8 all-to-all 20,000 frames are
//! in buffers: moved whole at each hop (64 bytes), or read for their length as the MMU dequeued them, each was
//! a cache miss more per hop (docs/performance.md).
use crate::model::forwarding;
use crate::model::mmu::MmuFrame;
use crate::sim::memory::{FlatMemory, SharedPayload};
use crate::wire::mac::ETH_LEN;
use crate::wire::roce::{ICRC_LEN, IP_LEN, MAX_TRANSPORT_LEN, UDP_LEN};
use crate::wire::uet;

/// A frame on a wire, in a queue or in a switch's buffer. Its length on the wire is kept here, so that queues
/// and the MMU read it without touching the frame.
#[derive(Clone, Debug)]
pub struct SimFrame {
    len: u32,
    repr: Repr,
}

/// A frame short enough to be held in place, or whose payload stays in memory: in a box; any other frame
/// (an IB packet, a RoCE frame of half a buffer or less with its payload, a hostile one) in its buffer, one
/// indirection and not two.
#[derive(Clone, Debug)]
enum Repr {
    Boxed(Box<Inner>),
    Buffer(Vec<u8>),
}

#[derive(Clone, Debug, Default)]
struct Inner {
    /// The frame's bytes; with a `payload`, the bytes before it (the headers) followed by those after it (pad
    /// and ICRC).
    bytes: Inline,
    payload: Option<Payload>,
}

/// Bytes a frame holds in place: the headers and trailer of any RoCE frame whose payload stays in memory (81
/// bytes at most), an ACK, a CNP, a PFC frame. 86 makes a box of 128 bytes with the payload's place.
const INLINE: usize = 86;
const _: () = assert!(ETH_LEN + IP_LEN + UDP_LEN + MAX_TRANSPORT_LEN + 3 + ICRC_LEN <= INLINE);

/// Up to [`INLINE`] bytes held in place.
#[derive(Clone, Copy, Debug)]
struct Inline {
    len: u8,
    bytes: [u8; INLINE],
}

impl Default for Inline {
    fn default() -> Inline {
        Inline {
            len: 0,
            bytes: [0; INLINE],
        }
    }
}

impl Inline {
    /// `before` then `after`; `None` if they do not fit.
    fn joined(before: &[u8], after: &[u8]) -> Option<Inline> {
        let len = before.len() + after.len();
        let mut bytes = [0; INLINE];
        let (to_before, to_after) = bytes.get_mut(..len)?.split_at_mut(before.len());
        to_before.copy_from_slice(before);
        to_after.copy_from_slice(after);
        Some(Inline {
            len: u8::try_from(len).ok()?,
            bytes,
        })
    }

    fn as_slice(&self) -> &[u8] {
        self.bytes.get(..usize::from(self.len)).unwrap_or_default()
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        self.bytes
            .get_mut(..usize::from(self.len))
            .unwrap_or_default()
    }
}

/// Where a frame's payload lies: in host `host`'s memory, to go at `at` in the frame's bytes.
#[derive(Clone, Debug)]
struct Payload {
    host: u32,
    at: u32,
    shared: SharedPayload,
}

impl Inner {
    fn len(&self) -> usize {
        self.bytes.as_slice().len() + self.payload.as_ref().map_or(0, |p| p.shared.len())
    }
}

/// A frame in the buffer it came in, whatever its length.
impl From<Vec<u8>> for SimFrame {
    fn from(bytes: Vec<u8>) -> SimFrame {
        SimFrame {
            len: u32::try_from(bytes.len()).unwrap_or(u32::MAX),
            repr: Repr::Buffer(bytes),
        }
    }
}

impl SimFrame {
    fn boxed(inner: Box<Inner>) -> SimFrame {
        SimFrame {
            len: u32::try_from(inner.len()).unwrap_or(u32::MAX),
            repr: Repr::Boxed(inner),
        }
    }

    /// A copy of `frame` (see [`FramePool::copied`] to make many).
    pub fn copied(frame: &[u8]) -> SimFrame {
        FramePool::default().copied(frame)
    }

    /// Its length on the wire.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether it has no bytes at all.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Its bytes, the payload left out if it stays in memory: the headers are there either way.
    pub fn bytes(&self) -> &[u8] {
        match &self.repr {
            Repr::Boxed(inner) => inner.bytes.as_slice(),
            Repr::Buffer(bytes) => bytes,
        }
    }

    /// Its bytes to change in place (headers: a switch's routing and ECN marking, which keep the length).
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        match &mut self.repr {
            Repr::Boxed(inner) => inner.bytes.as_mut_slice(),
            Repr::Buffer(bytes) => bytes,
        }
    }

    fn payload(&self) -> Option<&Payload> {
        match &self.repr {
            Repr::Boxed(inner) => inner.payload.as_ref(),
            Repr::Buffer(_) => None,
        }
    }

    /// The host whose memory holds its payload, if it is left there.
    pub fn payload_host(&self) -> Option<u32> {
        self.payload().map(|p| p.host)
    }

    /// The whole frame: its bytes if it carries them all, else put together in `out` with the payload read from
    /// `memory` (the memory of [`SimFrame::payload_host`]; `None`, a host that is gone: zeros, which its ICRC
    /// refuses).
    pub fn whole<'a>(&'a self, memory: Option<&FlatMemory>, out: &'a mut Vec<u8>) -> &'a [u8] {
        let bytes = self.bytes();
        let Some(payload) = self.payload() else {
            return bytes;
        };
        let at = (payload.at as usize).min(bytes.len());
        let (before, after) = bytes.split_at(at);
        out.clear();
        out.extend_from_slice(before);
        match memory {
            Some(memory) => memory.read_shared(&payload.shared, out),
            None => out.resize(out.len() + payload.shared.len(), 0),
        }
        out.extend_from_slice(after);
        out
    }
}

impl MmuFrame for SimFrame {
    fn size(&self) -> usize {
        self.len()
    }

    fn is_ect(&self) -> bool {
        forwarding::is_ect(self.bytes()).unwrap_or(false)
    }

    fn mark_ce(&mut self) {
        forwarding::mark_ce_in_place(self.bytes_mut());
    }

    /// A trimmed frame is a copy of its headers: a payload left in memory is let go.
    fn trim(&mut self) -> bool {
        match uet::trimmed_copy(self.bytes(), self.len()) {
            Some(trimmed) => {
                *self = SimFrame::from(trimmed);
                true
            }
            None => false,
        }
    }
}

/// The frames a host is done with, their boxes kept to make the frames it sends: a frame then costs no
/// allocation, and its box is one recently touched.
#[derive(Debug, Default)]
pub struct FramePool {
    #[allow(
        clippy::vec_box,
        reason = "the boxes are what is kept: each becomes a frame's without an allocation"
    )]
    spare: Vec<Box<Inner>>,
}

/// Boxes a pool keeps at most (3 KB when full; a host receives about as many frames as it sends).
const POOL_FRAMES: usize = 24;

impl FramePool {
    fn frame(&mut self, bytes: Inline, payload: Option<Payload>) -> SimFrame {
        let inner = match self.spare.pop() {
            Some(mut spare) => {
                *spare = Inner { bytes, payload };
                spare
            }
            None => Box::new(Inner { bytes, payload }),
        };
        SimFrame::boxed(inner)
    }

    /// A copy of `frame`: in place if it is short enough, else in a buffer of its own size.
    pub fn copied(&mut self, frame: &[u8]) -> SimFrame {
        match Inline::joined(frame, &[]) {
            Some(bytes) => self.frame(bytes, None),
            None => SimFrame::from(frame.to_vec()),
        }
    }

    /// `frame`, whose bytes from `at` are `shared`'s (shared from host `host`'s memory), without them: `None` if
    /// they do not fit in it, or what is left does not fit in place.
    pub fn sharing(
        &mut self,
        frame: &[u8],
        at: usize,
        host: u32,
        shared: SharedPayload,
    ) -> Option<SimFrame> {
        let end = at.checked_add(shared.len())?;
        let bytes = Inline::joined(frame.get(..at)?, frame.get(end..)?)?;
        let at = u32::try_from(at).ok()?;
        Some(self.frame(bytes, Some(Payload { host, at, shared })))
    }

    /// Takes a frame back (its share of a payload let go): its box kept, or its buffer returned.
    pub fn recycle(&mut self, frame: SimFrame) -> Option<Vec<u8>> {
        let mut inner = match frame.repr {
            Repr::Boxed(inner) => inner,
            Repr::Buffer(buffer) => return Some(buffer),
        };
        inner.payload = None;
        if self.spare.len() < POOL_FRAMES {
            self.spare.push(inner);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::rc::Memory;
    use crate::sim::memory::MEMORY_KEY;

    #[test]
    fn a_frame_sharing_its_payload_is_put_back_together_byte_for_byte() {
        let mut memory = FlatMemory::new(8192);
        let all = memory.local(MEMORY_KEY, 0, 8192, true).unwrap();
        let payload: Vec<u8> = (0..1000u32).map(|i| (i % 251) as u8).collect();
        memory.write(&all, 4000, &payload);
        let frame = [vec![0xAA; 58], payload.clone(), vec![0xBB; 4]].concat();
        let mut pool = FramePool::default();
        let shared = memory.share(4000, 1000).unwrap();
        let sim = pool.sharing(&frame, 58, 3, shared).unwrap();
        assert_eq!(
            (sim.len(), sim.bytes().len(), sim.payload_host()),
            (1062, 62, Some(3))
        );
        memory.write(&all, 4000, &[7; 1000]); // written over while in flight
        let mut out = Vec::new();
        assert_eq!(sim.whole(Some(&memory), &mut out), &frame[..]);
        let mut out = Vec::new();
        assert_eq!(sim.whole(None, &mut out).len(), frame.len());
        let shared = memory.share(0, 10).unwrap();
        assert!(pool.sharing(&frame[..60], 55, 0, shared.clone()).is_none()); // the payload past the frame's end
        let long_head = [vec![0xAA; 90], vec![0; 10], vec![0xBB; 4]].concat();
        assert!(pool.sharing(&long_head, 90, 0, shared).is_none()); // headers too long to hold in place
        let plain = SimFrame::from(frame.clone());
        assert_eq!(
            (plain.len(), plain.whole(None, &mut out)),
            (1062, &frame[..])
        );
        // Too long to hold in place: a buffer of its own.
        let copied = SimFrame::copied(&frame);
        assert!(matches!(&copied.repr, Repr::Buffer(bytes) if bytes == &frame));
        // Taken back: a buffer returned, a box kept and reused for the next frame, in place.
        assert_eq!(pool.recycle(plain).as_deref(), Some(&frame[..]));
        assert_eq!(pool.recycle(sim), None);
        assert_eq!(pool.spare.len(), 1);
        let short = pool.copied(&frame[..60]);
        assert_eq!(
            (short.len(), short.bytes(), pool.spare.len()),
            (60, &frame[..60], 0)
        );
        assert!(
            matches!(&short.repr, Repr::Boxed(inner) if inner.bytes.len == 60 && inner.payload.is_none())
        );
    }
}
