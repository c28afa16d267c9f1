//! A host's memory in simulated time: one flat region at address 0, key 1, every access allowed, and the
//! payloads of the frames in flight, which stay in it.
//!
//! A frame in flight does not carry its payload: it holds a [`SharedPayload`], and the receiving host reads
//! the bytes from the sender's memory when the frame arrives. They are the bytes the RNIC read when it framed
//! the packet, whatever was written since: a page written over while a frame in flight shares it first hands
//! its old bytes to that frame (the page's share keeps them until the last frame holding it is gone), and so
//! does a memory dropped or replaced. So no frame holds 4 KB of its own. At the peak of a fattree,8 all-to-all
//! 20,000 frames are in the switches' buffers; each with its payload, that was 85 MB of heap first touched,
//! 30,000 page faults and a quarter of the run's time in the kernel (docs/performance.md).
use std::sync::{Arc, OnceLock};

use crate::model::rc::{AccessError, Memory};

/// The one memory key of a [`FlatMemory`].
pub const MEMORY_KEY: u32 = 1;

/// A checked range of a [`FlatMemory`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    start: usize,
    len: usize,
}

/// Bytes of a page of a [`FlatMemory`]: the kernel's, whose first touch is a page fault.
const PAGE: usize = 4096;

/// One region of memory at address 0, key 1, every access allowed.
///
/// A page never written reads as zeros without being touched. Reading it would cost a page fault (the kernel
/// maps its zero page), and an all-to-all reads its whole send region, which nobody wrote: 32,768 faults at
/// fattree,8, a tenth of the run. `written` has a bit per page that may hold a non-zero byte; the bytes
/// change only through the transport's `write` and [`FlatMemory::data_mut`], which set it.
///
/// `shares` has, per page, the share the frames in flight hold (`None` where none was made since the page was
/// last written over), and `shared` the pages whose share was made since the last [`FlatMemory::data_mut`]
/// (`listed` a bit per page on that list), the only ones it must look at: a ring all-reduce changes its memory
/// this way after every step, and would otherwise look at every page of it each time.
/// `last_read` is where the transport's last read lay, the payload of the packet it is making.
#[derive(Debug, Default)]
pub struct FlatMemory {
    data: Vec<u8>,
    written: Vec<u64>,
    shares: Vec<Option<PageShare>>,
    shared: Vec<usize>,
    listed: Vec<u64>,
    last_read: Option<(usize, usize)>,
}

/// What a page held when it was written over, or its memory dropped, while frames in flight shared it.
#[derive(Debug)]
enum Preserved {
    /// A page never written.
    Zeros,
    Bytes(Box<[u8]>),
}

/// A page as the frames in flight share it: empty while the page is unchanged, its old bytes once it is not.
/// `Arc` and not `Rc` because the fabric lives in a Python object that any thread may hold.
type PageShare = Arc<OnceLock<Preserved>>;

/// A frame's payload left in its sender's memory: `len` bytes at `start`, on one page or two (a payload is at
/// most 4 KB), each page's share held.
#[derive(Clone, Debug)]
pub struct SharedPayload {
    start: usize,
    len: u32,
    first: PageShare,
    second: Option<PageShare>,
}

impl SharedPayload {
    /// Its bytes.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether it has no bytes (a payload shared is never empty: [`FlatMemory::share`]).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl FlatMemory {
    /// `size` bytes of zeros.
    pub fn new(size: usize) -> FlatMemory {
        FlatMemory {
            data: vec![0; size],
            written: vec![0; size.div_ceil(PAGE).div_ceil(64)],
            shares: Vec::new(),
            shared: Vec::new(),
            listed: Vec::new(),
            last_read: None,
        }
    }

    /// The bytes.
    pub fn data(&self) -> &[u8] {
        &self.data
    }

    /// The bytes, to change: every page counts as written from now on, and the frames in flight keep what they
    /// share.
    pub fn data_mut(&mut self) -> &mut [u8] {
        for page in std::mem::take(&mut self.shared) {
            if let Some(word) = self.listed.get_mut(page / 64) {
                *word &= !(1 << (page % 64));
            }
            self.preserve(page..page + 1);
            // Held by no frame: let go, so that a later share of the page is made anew and listed.
            if let Some(slot) = self.shares.get_mut(page) {
                *slot = None;
            }
        }
        self.written.fill(u64::MAX);
        &mut self.data
    }

    /// Where the transport's last read lay (start, length), forgotten: the payload of the packet it just made.
    pub fn take_last_read(&mut self) -> Option<(usize, usize)> {
        self.last_read.take()
    }

    /// Shares the `len` bytes at `start` with a frame that carries them no further than the receiving host;
    /// `None` if there are none, or they lie outside the memory or on more than two pages.
    pub fn share(&mut self, start: usize, len: usize) -> Option<SharedPayload> {
        let end = start
            .checked_add(len)
            .filter(|&end| len > 0 && end <= self.data.len())?;
        let (first, last) = (start / PAGE, (end - 1) / PAGE);
        if last > first + 1 {
            return None;
        }
        if self.shares.len() <= last {
            self.shares.resize(last + 1, None);
            self.listed.resize((last + 1).div_ceil(64), 0);
        }
        let mut share = |page: usize| -> Option<PageShare> {
            let slot = self.shares.get_mut(page)?;
            if !page_bit(&self.listed, page) {
                *self.listed.get_mut(page / 64)? |= 1 << (page % 64);
                self.shared.push(page);
            }
            Some(Arc::clone(slot.get_or_insert_with(Arc::default)))
        };
        let first = share(first)?;
        let second = if last > start / PAGE {
            Some(share(last)?)
        } else {
            None
        };
        Some(SharedPayload {
            start,
            len: u32::try_from(len).ok()?,
            first,
            second,
        })
    }

    /// Appends `payload`'s bytes to `out`: what they were when it was shared. `payload` must come from this
    /// memory's [`FlatMemory::share`] (or that of a memory this one replaced: then every page was preserved).
    pub fn read_shared(&self, payload: &SharedPayload, out: &mut Vec<u8>) {
        let end = payload.start.saturating_add(payload.len());
        let mut at = payload.start;
        while at < end {
            let page_end = (at / PAGE + 1).saturating_mul(PAGE).min(end);
            let share = if at / PAGE == payload.start / PAGE {
                Some(&payload.first)
            } else {
                payload.second.as_ref()
            };
            let (from, to) = (at % PAGE, at % PAGE + (page_end - at));
            match share.and_then(|share| share.get()) {
                Some(Preserved::Bytes(bytes)) => match bytes.get(from..to) {
                    Some(bytes) => out.extend_from_slice(bytes),
                    None => out.resize(out.len() + (page_end - at), 0), // never: a whole page was kept
                },
                Some(Preserved::Zeros) => out.resize(out.len() + (page_end - at), 0),
                None => match self.data.get(at..page_end) {
                    Some(bytes) if self.is_written(at / PAGE) => out.extend_from_slice(bytes),
                    _ => out.resize(out.len() + (page_end - at), 0),
                },
            }
            at = page_end;
        }
    }

    /// Before `pages` change: each one frames in flight share gives them its present bytes, and a later share
    /// starts anew.
    fn preserve(&mut self, pages: std::ops::Range<usize>) {
        for page in pages {
            let Some(slot) = self.shares.get_mut(page) else {
                return;
            };
            // Held by the table alone: no frame reads it, nothing to keep.
            let Some(share) = slot.take_if(|share| Arc::strong_count(share) > 1) else {
                continue;
            };
            let written = page_bit(&self.written, page);
            let bytes = self
                .data
                .get(page * PAGE..((page + 1) * PAGE).min(self.data.len()));
            let preserved = match bytes {
                Some(bytes) if written => {
                    let mut page_bytes = bytes.to_vec();
                    page_bytes.resize(PAGE, 0);
                    Preserved::Bytes(page_bytes.into_boxed_slice())
                }
                _ => Preserved::Zeros,
            };
            let _ = share.set(preserved); // set once: the share left the table as it was set
        }
    }

    fn is_written(&self, page: usize) -> bool {
        page_bit(&self.written, page)
    }

    /// Marks the pages of `len` bytes from `start` written.
    fn mark(&mut self, start: usize, len: usize) {
        if len == 0 {
            return;
        }
        for page in start / PAGE..=(start + len - 1) / PAGE {
            if let Some(word) = self.written.get_mut(page / 64) {
                *word |= 1 << (page % 64);
            }
        }
    }

    fn window(&self, key: u32, addr: u64, length: u64) -> Result<Window, AccessError> {
        let start = usize::try_from(addr).map_err(|_| AccessError)?;
        let len = usize::try_from(length).map_err(|_| AccessError)?;
        match start.checked_add(len) {
            Some(end) if key == MEMORY_KEY && end <= self.data.len() => Ok(Window { start, len }),
            _ => Err(AccessError),
        }
    }
}

/// Page `page`'s bit in a bitmap of a word per 64 pages (false past its end).
fn page_bit(bits: &[u64], page: usize) -> bool {
    bits.get(page / 64)
        .is_some_and(|word| word & (1 << (page % 64)) != 0)
}

/// A memory dropped or replaced (a run's end, the next collective's layout) first gives the frames still in
/// flight what they share.
impl Drop for FlatMemory {
    fn drop(&mut self) {
        self.preserve(0..self.shares.len());
    }
}

impl Memory for FlatMemory {
    type Window = Window;

    fn local(
        &mut self,
        lkey: u32,
        addr: u64,
        length: u64,
        _write: bool,
    ) -> Result<Window, AccessError> {
        self.window(lkey, addr, length)
    }

    fn remote(
        &mut self,
        rkey: u32,
        addr: u64,
        length: u64,
        _write: bool,
    ) -> Result<Window, AccessError> {
        self.window(rkey, addr, length)
    }

    fn read(&mut self, window: &Window, offset: u64, len: usize, out: &mut Vec<u8>) {
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .saturating_add(window.start);
        let end = start.saturating_add(len);
        if end > self.data.len() {
            out.resize(out.len() + len, 0); // never: the window was checked
            return;
        }
        self.last_read = Some((start, len));
        let mut at = start;
        while at < end {
            let page_end = (at / PAGE + 1).saturating_mul(PAGE).min(end);
            match self.data.get(at..page_end) {
                Some(bytes) if self.is_written(at / PAGE) => out.extend_from_slice(bytes),
                _ => out.resize(out.len() + (page_end - at), 0),
            }
            at = page_end;
        }
    }

    fn write(&mut self, window: &Window, offset: u64, data: &[u8]) {
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .saturating_add(window.start);
        let Some(end) = start
            .checked_add(data.len())
            .filter(|&end| end <= self.data.len())
        else {
            return; // never: the window was checked
        };
        // Page by page: zeros written to a page never written leave it as it reads (zeros) and untouched, so
        // an all-to-all's receive regions, which get the zeros of send regions nobody wrote, cost no memory
        // (1 GiB at fattree,16) and no page faults.
        let mut at = start;
        while at < end {
            let page_end = (at / PAGE + 1).saturating_mul(PAGE).min(end);
            let chunk = data.get(at - start..page_end - start).unwrap_or_default();
            if self.is_written(at / PAGE) || !all_zero(chunk) {
                self.preserve(at / PAGE..at / PAGE + 1);
                if let Some(bytes) = self.data.get_mut(at..page_end) {
                    bytes.copy_from_slice(chunk);
                    self.mark(at, page_end - at);
                }
            }
            at = page_end;
        }
    }
}

/// Whether every byte of `bytes` is zero. A block of 64 at a time, each block's bytes OR-ed together without a
/// branch (the compiler makes that vector instructions); a byte-at-a-time `any` with its early exit cost 3
/// instructions a byte, 40% of a fattree,8 all-to-all's instructions (every data frame's 4 KB of zeros).
fn all_zero(bytes: &[u8]) -> bool {
    let blocks = bytes.chunks_exact(64);
    let rest = blocks.remainder();
    blocks
        .into_iter()
        .all(|block| block.iter().fold(0, |acc, &b| acc | b) == 0)
        && rest.iter().all(|&b| b == 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A write through the transport, or one through `data_mut`, of `bytes` at `at`.
    #[derive(Clone, Debug)]
    enum Write {
        Transport(usize, Vec<u8>),
        Direct(usize, Vec<u8>),
    }

    #[test]
    fn zeros_written_to_pages_never_written_touch_nothing() {
        let mut memory = FlatMemory::new(4 * PAGE);
        let all = memory.local(MEMORY_KEY, 0, 4 * PAGE as u64, true).unwrap();
        memory.write(&all, 100, &vec![0; 3 * PAGE]);
        assert!((0..4).all(|page| !memory.is_written(page)));
        memory.write(&all, PAGE as u64 + 5, &[0, 9, 0]);
        assert_eq!(
            (0..4)
                .map(|page| memory.is_written(page))
                .collect::<Vec<_>>(),
            [false, true, false, false]
        );
        memory.write(&all, PAGE as u64, &vec![0; PAGE]); // zeros over a written page are written
        assert!(memory.data().iter().all(|&b| b == 0));
    }

    /// A memory of `pages` pages, the transport's window over all of it.
    fn memory(pages: usize) -> (FlatMemory, Window) {
        let mut memory = FlatMemory::new(pages * PAGE);
        let all = memory
            .local(MEMORY_KEY, 0, (pages * PAGE) as u64, true)
            .unwrap();
        (memory, all)
    }

    #[test]
    fn a_payload_shared_reads_as_it_was_whatever_is_written_after() {
        let (mut memory, all) = memory(3);
        memory.write(&all, 0, &[1; 100]);
        let on_one = memory.share(10, 50).unwrap();
        let across = memory.share(PAGE - 10, 20).unwrap(); // a written page and one never written
        let untouched = memory.share(2 * PAGE, 8).unwrap();
        assert!(memory.share(0, 0).is_none() && memory.share(3 * PAGE - 1, 2).is_none());
        assert!(memory.share(PAGE - 1, PAGE + 2).is_none()); // three pages
        memory.write(&all, 0, &[2; 2 * PAGE]);
        memory.data_mut()[2 * PAGE] = 3;
        let read = |memory: &FlatMemory, payload: &SharedPayload| {
            let mut out = vec![9];
            memory.read_shared(payload, &mut out);
            out
        };
        assert_eq!(read(&memory, &on_one), [&[9][..], &[1; 50]].concat());
        assert_eq!(
            read(&memory, &across),
            [vec![9], vec![0; 10], vec![0; 10]].concat()
        );
        assert_eq!(read(&memory, &untouched), [9, 0, 0, 0, 0, 0, 0, 0, 0]);
        // A share made after the writes reads them; dropped, its page needs no copy at the next write.
        let now = memory.share(PAGE - 2, 4).unwrap();
        assert_eq!(read(&memory, &now), [9, 2, 2, 2, 2]);
        drop((on_one, now));
        memory.write(&all, 0, &[4; 8]);
        assert!(memory.shares[0].as_ref().is_some_and(|s| s.get().is_none()));
        // The memory replaced: what is still in flight keeps its bytes.
        let last = memory.share(0, 4).unwrap();
        drop(memory);
        assert_eq!(read(&FlatMemory::new(PAGE), &last), [9, 4, 4, 4, 4]);
        assert_eq!(
            read(&FlatMemory::new(PAGE), &across),
            [vec![9], vec![0; 20]].concat()
        );
    }

    proptest! {
        /// A payload shared reads, whenever it is read, the bytes it had when shared: what a plain vector given
        /// the same writes held then, through any writes after (by the transport or through `data_mut`).
        #[test]
        fn shared_payloads_read_the_bytes_of_the_moment_they_were_shared(
            steps in proptest::collection::vec(
                prop_oneof![
                    (0usize..3 * PAGE, proptest::collection::vec(any::<u8>(), 0..300)).prop_map(|(a, b)| (0u8, a, b)),
                    (0usize..3 * PAGE, proptest::collection::vec(1u8.., 0..30)).prop_map(|(a, b)| (1, a, b)),
                    (0usize..3 * PAGE, 1usize..PAGE).prop_map(|(a, n)| (2, a, vec![0; n])),
                ],
                1..30,
            ),
        ) {
            let (mut memory, all) = memory(3);
            let mut plain = vec![0u8; 3 * PAGE];
            let mut shared = Vec::new();
            for (kind, at, bytes) in steps {
                if kind == 2 {
                    let len = bytes.len();
                    if let Some(payload) = memory.share(at, len) {
                        shared.push((payload, plain[at..at + len].to_vec()));
                    }
                    continue;
                }
                let Some(target) = plain.get_mut(at..at + bytes.len()) else { continue };
                target.copy_from_slice(&bytes);
                if kind == 0 {
                    memory.write(&all, at as u64, &bytes);
                } else {
                    memory.data_mut()[at..at + bytes.len()].copy_from_slice(&bytes);
                }
                for (payload, expected) in &shared {
                    let mut out = Vec::new();
                    memory.read_shared(payload, &mut out);
                    prop_assert_eq!(&out, expected);
                }
            }
        }


        /// Pages never written read as zeros without being touched: every read gives the bytes a plain
        /// vector given the same writes holds.
        #[test]
        fn reads_give_what_was_written_and_zeros_elsewhere(
            size in 1usize..5 * PAGE,
            writes in proptest::collection::vec(
                prop_oneof![
                    (0usize..5 * PAGE, proptest::collection::vec(1u8.., 0..300)).prop_map(|(a, b)| Write::Transport(a, b)),
                    // zeros, over pages written or not (a page never written is left untouched)
                    (0usize..5 * PAGE, 0..2 * PAGE).prop_map(|(a, n)| Write::Transport(a, vec![0; n])),
                    (0usize..5 * PAGE, proptest::collection::vec(1u8.., 0..30)).prop_map(|(a, b)| Write::Direct(a, b)),
                ],
                0..6,
            ),
            reads in proptest::collection::vec((0usize..5 * PAGE, 0usize..2 * PAGE), 1..8),
        ) {
            let mut memory = FlatMemory::new(size);
            let mut plain = vec![0u8; size];
            let all = memory.local(MEMORY_KEY, 0, size as u64, true).unwrap();
            for write in writes {
                let (Write::Transport(at, bytes) | Write::Direct(at, bytes)) = &write;
                let Some(target) = plain.get_mut(*at..at + bytes.len()) else { continue };
                target.copy_from_slice(bytes);
                match write {
                    Write::Transport(at, bytes) => memory.write(&all, at as u64, &bytes),
                    Write::Direct(at, bytes) => memory.data_mut()[at..at + bytes.len()].copy_from_slice(&bytes),
                }
            }
            prop_assert_eq!(memory.data(), plain.as_slice());
            for (at, len) in reads {
                let Ok(window) = memory.local(MEMORY_KEY, at as u64, len as u64, false) else {
                    prop_assert!(at + len > size);
                    continue;
                };
                let mut out = vec![7];
                memory.read(&window, 0, len, &mut out);
                prop_assert_eq!(&out[1..], &plain[at..at + len]);
            }
        }
    }
}
