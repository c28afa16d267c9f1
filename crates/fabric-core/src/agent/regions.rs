//! Memory regions an RNIC serves its QPs from: the registered memory of each protection domain.
//!
//! An application registers a region (its memfd, mapped by the driver: the bytes `B`) and gets one key, used
//! as both lkey and rkey. A key is an index in its upper 24 bits and a random byte below, as mlx5 and rxe
//! make them, so a stale key from a freed region misses. A QP sees the regions of its own domain only
//! ([`DomainMemory`]), within their bounds and with the access they were registered for.
use std::collections::HashMap;

use crate::model::rc::{AccessError, Memory};
use crate::model::rdma_params::MAX_MR_BYTES;
use crate::model::rng::CpythonRandom;

/// libibverbs' `IBV_ACCESS_*` values.
pub const ACCESS_LOCAL_WRITE: u32 = 1;
pub const ACCESS_REMOTE_WRITE: u32 = 2;
pub const ACCESS_REMOTE_READ: u32 = 4;
pub const ACCESS_ALL: u32 = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ;

/// One registered region: where the application sees it, who owns it, what it allows, its bytes.
#[derive(Debug)]
struct Region<B> {
    addr: u64,
    length: u64,
    access: u32,
    owner: u32,
    bytes: B,
}

/// A checked range of one region: its key, and where the range starts in the region's bytes.
///
/// A QP keeps it while its work request lasts; if the region is deregistered meanwhile, what the QP reads
/// through it is zeros and what it writes is lost (a real RNIC would fault the QP; the application broke the
/// rules first).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    key: u32,
    start: usize,
    len: usize,
}

/// Every region the RNIC knows, by key.
#[derive(Debug)]
pub struct Regions<B> {
    regions: HashMap<u32, Region<B>>,
    next_index: u32,
    random: CpythonRandom,
}

impl<B: AsRef<[u8]> + AsMut<[u8]>> Regions<B> {
    /// No region; keys' random bytes drawn from `seed`.
    pub fn new(seed: u64) -> Self {
        Regions {
            regions: HashMap::new(),
            next_index: 1,
            random: CpythonRandom::from_u64(seed),
        }
    }

    /// Registers `bytes` as the region `[addr, addr + length)` of domain `owner` with `access`: its key, or why
    /// not (one line, the words Python's verbs server sends back).
    pub fn register(
        &mut self,
        owner: u32,
        addr: u64,
        length: u64,
        access: u32,
        bytes: B,
    ) -> Result<u32, String> {
        self.register_with(owner, addr, length, access, |_| Ok(bytes))
    }

    /// [`Self::register`] with the bytes made by `make` (given the length in bytes) once the length and the
    /// access are found good: the driver maps an application's memfd only then.
    pub fn register_with(
        &mut self,
        owner: u32,
        addr: u64,
        length: u64,
        access: u32,
        make: impl FnOnce(usize) -> Result<B, String>,
    ) -> Result<u32, String> {
        if length == 0 || length > MAX_MR_BYTES {
            return Err(format!(
                "memory region of {length} bytes: the RNIC takes 1 byte to {} MiB",
                MAX_MR_BYTES >> 20
            ));
        }
        if access & !ACCESS_ALL != 0 {
            return Err(format!("unknown access flags {access:#x}"));
        }
        if self.next_index > 0xFF_FFFF {
            return Err("this RNIC has handed out every memory key".into());
        }
        let bytes =
            make(usize::try_from(length).map_err(|_| "memory region too long".to_string())?)?;
        if (bytes.as_ref().len() as u64) < length {
            return Err(format!(
                "the region's memory holds {} bytes, not the {length} registered",
                bytes.as_ref().len()
            ));
        }
        let key = self.next_index << 8 | (self.random.next_u32() >> 24);
        self.next_index += 1;
        self.regions.insert(
            key,
            Region {
                addr,
                length,
                access,
                owner,
                bytes,
            },
        );
        Ok(key)
    }

    /// Drops region `key` of domain `owner`, or says there is none.
    pub fn deregister(&mut self, key: u32, owner: u32) -> Result<(), String> {
        match self.regions.get(&key) {
            Some(region) if region.owner == owner => {
                self.regions.remove(&key);
                Ok(())
            }
            _ => Err(format!("no memory region with key {key:#x}")),
        }
    }

    /// Drops every region of domain `owner` (its application left).
    pub fn release_owner(&mut self, owner: u32) {
        self.regions.retain(|_, region| region.owner != owner);
    }

    /// How many regions there are.
    pub fn len(&self) -> usize {
        self.regions.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.regions.is_empty()
    }

    /// How many regions domain `owner` has.
    pub fn count_of(&self, owner: u32) -> usize {
        self.regions.values().filter(|r| r.owner == owner).count()
    }

    /// Domain `owner`'s view, as its QPs see memory.
    pub fn domain(&mut self, owner: u32) -> DomainMemory<'_, B> {
        DomainMemory {
            regions: self,
            owner,
        }
    }

    fn window(
        &self,
        owner: u32,
        key: u32,
        addr: u64,
        length: u64,
        need: u32,
    ) -> Result<Window, AccessError> {
        let region = self
            .regions
            .get(&key)
            .filter(|r| r.owner == owner && r.access & need == need)
            .ok_or(AccessError)?;
        let offset = addr.checked_sub(region.addr).ok_or(AccessError)?;
        if offset
            .checked_add(length)
            .is_none_or(|end| end > region.length)
        {
            return Err(AccessError);
        }
        Ok(Window {
            key,
            start: usize::try_from(offset).map_err(|_| AccessError)?,
            len: usize::try_from(length).map_err(|_| AccessError)?,
        })
    }
}

/// The memory one protection domain's QPs see.
pub struct DomainMemory<'a, B> {
    regions: &'a mut Regions<B>,
    owner: u32,
}

/// `len` bytes of `window` from `offset`, clamped to it.
fn span(window: &Window, offset: u64, len: usize) -> std::ops::Range<usize> {
    let offset = usize::try_from(offset)
        .unwrap_or(usize::MAX)
        .min(window.len);
    let start = window.start.saturating_add(offset);
    start..start.saturating_add(len.min(window.len - offset))
}

impl<B: AsRef<[u8]> + AsMut<[u8]>> Memory for DomainMemory<'_, B> {
    type Window = Window;

    fn local(
        &mut self,
        lkey: u32,
        addr: u64,
        length: u64,
        write: bool,
    ) -> Result<Window, AccessError> {
        let need = if write { ACCESS_LOCAL_WRITE } else { 0 };
        self.regions.window(self.owner, lkey, addr, length, need)
    }

    fn remote(
        &mut self,
        rkey: u32,
        addr: u64,
        length: u64,
        write: bool,
    ) -> Result<Window, AccessError> {
        let need = if write {
            ACCESS_REMOTE_WRITE
        } else {
            ACCESS_REMOTE_READ
        };
        self.regions.window(self.owner, rkey, addr, length, need)
    }

    fn read(&mut self, window: &Window, offset: u64, len: usize, out: &mut Vec<u8>) {
        let range = span(window, offset, len);
        let wanted = range.len();
        match self
            .regions
            .regions
            .get(&window.key)
            .and_then(|r| r.bytes.as_ref().get(range))
        {
            Some(bytes) => out.extend_from_slice(bytes),
            None => out.resize(out.len() + wanted, 0), // deregistered meanwhile
        }
    }

    fn write(&mut self, window: &Window, offset: u64, data: &[u8]) {
        let range = span(window, offset, data.len());
        let n = range.len();
        if let Some(bytes) = self
            .regions
            .regions
            .get_mut(&window.key)
            .and_then(|r| r.bytes.as_mut().get_mut(range))
        {
            bytes.copy_from_slice(&data[..n]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_domain_sees_its_own_regions_within_bounds_and_access() {
        let mut regions = Regions::new(1);
        let key = regions
            .register(
                1,
                0x1000,
                64,
                ACCESS_LOCAL_WRITE | ACCESS_REMOTE_READ,
                vec![0u8; 64],
            )
            .unwrap();
        assert!(regions.domain(2).local(key, 0x1000, 8, false).is_err());
        assert!(regions.domain(1).local(key, 0x1000 + 60, 8, false).is_err());
        assert!(regions.domain(1).remote(key, 0x1000, 8, true).is_err());
        let mut memory = regions.domain(1);
        let window = memory.local(key, 0x1010, 8, true).unwrap();
        memory.write(&window, 2, &[7, 8]);
        let mut out = Vec::new();
        memory.read(&window, 0, 8, &mut out);
        assert_eq!(out, [0, 0, 7, 8, 0, 0, 0, 0]);
        regions.deregister(key, 1).unwrap();
        let mut out = Vec::new();
        regions.domain(1).read(&window, 0, 4, &mut out);
        assert_eq!(out, [0; 4], "a region gone reads as zeros");
        assert!(regions.deregister(key, 1).is_err());
    }

    /// The cases tests/unit/test_memory.py checked on the Python region table this replaced.
    #[test]
    fn bounds_domains_and_access_are_checked_as_the_python_table_did() {
        let mut regions = Regions::new(0);
        let both = ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ;
        let key = regions
            .register(1, 0x1000, 64, both, vec![0u8; 64])
            .unwrap();
        for (addr, length) in [(0x0fff, 1), (0x1000 + 60, 5), (0x1000, 65), (0x2000, 1)] {
            assert!(
                regions.domain(1).remote(key, addr, length, true).is_err(),
                "{addr:#x} +{length}"
            );
        }
        assert!(
            regions.domain(2).remote(key, 0x1000, 8, true).is_err(),
            "another domain"
        );
        let read_only = regions
            .register(1, 0x1000, 64, ACCESS_REMOTE_READ, vec![0u8; 64])
            .unwrap();
        let mut memory = regions.domain(1);
        assert!(memory.remote(read_only, 0x1000, 8, false).is_ok());
        assert!(memory.remote(read_only, 0x1000, 8, true).is_err());
        assert!(
            memory.local(read_only, 0x1000, 8, true).is_err(),
            "no local write either"
        );
        let other = regions
            .register(2, 0x1000, 64, ACCESS_REMOTE_WRITE, vec![0u8; 64])
            .unwrap();
        assert!(regions.deregister(other, 1).is_err(), "not the owner's");
        regions.release_owner(2);
        assert_eq!(regions.count_of(2), 0);
    }

    #[test]
    fn keys_are_never_given_twice_and_bad_registrations_are_refused() {
        let mut regions = Regions::new(9);
        let a = regions.register(1, 0, 8, ACCESS_ALL, vec![0u8; 8]).unwrap();
        regions.release_owner(1);
        let b = regions.register(1, 0, 8, ACCESS_ALL, vec![0u8; 8]).unwrap();
        assert_ne!(a >> 8, b >> 8);
        assert!(regions.register(1, 0, 0, ACCESS_ALL, vec![]).is_err());
        assert!(regions.register(1, 0, 8, 8, vec![0u8; 8]).is_err());
        assert!(regions
            .register(1, 0, 16, ACCESS_ALL, vec![0u8; 8])
            .is_err());
        assert_eq!(
            (regions.len(), regions.count_of(1), regions.count_of(2)),
            (1, 1, 0)
        );
    }
}
