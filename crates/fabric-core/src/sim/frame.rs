//! A frame in simulated time: its bytes, or for an RDMA frame whose payload stays in its sender's memory
//! (`sim::memory`), the bytes around the payload and where the payload lies.
//!
//! A switch reads and changes only headers (addresses, TTL, ECN, priority: the first 38 bytes) and counts a
//! frame by its length on the wire, so it takes either kind alike. The receiving host puts the whole frame
//! together ([`SimFrame::whole`]) and decodes it as the emulator's RNIC decodes what a socket gave it, ICRC
//! checked.
use crate::model::forwarding;
use crate::model::mmu::MmuFrame;
use crate::sim::memory::{FlatMemory, SharedPayload};

/// A frame on a wire, in a queue or in a switch's buffer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SimFrame {
    /// The frame's bytes; with a `payload`, the bytes before it (the headers) followed by those after it (pad
    /// and ICRC).
    bytes: Vec<u8>,
    payload: Option<Payload>,
}

/// Where a frame's payload lies: in host `host`'s memory, to go at `at` in the frame's bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Payload {
    host: u32,
    at: u32,
    shared: SharedPayload,
}

/// A frame in the buffer it came in, whatever its length.
impl From<Vec<u8>> for SimFrame {
    fn from(bytes: Vec<u8>) -> SimFrame {
        SimFrame {
            bytes,
            payload: None,
        }
    }
}

impl SimFrame {
    /// A copy of `frame`, in a buffer of its own size.
    pub fn copied(frame: &[u8]) -> SimFrame {
        SimFrame::from(frame.to_vec())
    }

    /// `frame`, whose bytes from `at` are `shared`'s (shared from host `host`'s memory), without them: `None` if
    /// they do not fit in it.
    pub fn sharing(frame: &[u8], at: usize, host: u32, shared: SharedPayload) -> Option<SimFrame> {
        let end = at.checked_add(shared.len())?;
        let (before, after) = (frame.get(..at)?, frame.get(end..)?);
        let mut bytes = Vec::with_capacity(before.len() + after.len());
        bytes.extend_from_slice(before);
        bytes.extend_from_slice(after);
        Some(SimFrame {
            bytes,
            payload: Some(Payload {
                host,
                at: u32::try_from(at).ok()?,
                shared,
            }),
        })
    }

    /// Its length on the wire.
    pub fn len(&self) -> usize {
        self.bytes.len() + self.payload.as_ref().map_or(0, |p| p.shared.len())
    }

    /// Whether it has no bytes at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Its bytes, the payload left out if it stays in memory: the headers are there either way.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Its bytes to change in place (headers: a switch's routing and ECN marking).
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.bytes
    }

    /// The host whose memory holds its payload, if it is left there.
    pub fn payload_host(&self) -> Option<u32> {
        self.payload.as_ref().map(|p| p.host)
    }

    /// The whole frame: its bytes if it carries them all, else put together in `out` with the payload read from
    /// `memory` (the memory of [`SimFrame::payload_host`]; `None`, a host that is gone: zeros, which its ICRC
    /// refuses).
    pub fn whole<'a>(&'a self, memory: Option<&FlatMemory>, out: &'a mut Vec<u8>) -> &'a [u8] {
        let bytes = self.bytes.as_slice();
        let Some(payload) = &self.payload else {
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

    /// Its buffer, for a frame to send (with a payload left in memory, only the bytes around it).
    pub fn into_buffer(self) -> Vec<u8> {
        self.bytes
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
        let shared = memory.share(4000, 1000).unwrap();
        let sim = SimFrame::sharing(&frame, 58, 3, shared).unwrap();
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
        assert!(SimFrame::sharing(&frame[..60], 55, 0, shared).is_none()); // the payload past the frame's end
        let plain = SimFrame::from(frame.clone());
        assert_eq!(
            (plain.len(), plain.whole(None, &mut out)),
            (1062, &frame[..])
        );
        assert_eq!(SimFrame::copied(&frame), plain);
    }
}
