//! The emulator's agents on real frames in real time, without I/O: a driver (crates/fabric-agents) receives
//! frames and hands them in with the time, the agent sends through the driver's sockets and says when it next
//! has something to do. The same models the simulation drives in virtual time (`sim`), here against a kernel
//! that paces the wire.
pub mod nic;
pub mod regions;
pub mod switch;

/// The frame time of `size` bytes at `rate_bps`: how long a kernel's shaped queue takes to send them.
pub(crate) fn frame_ns(size: usize, rate_bps: u64) -> u64 {
    let ns = (size as u128) * 8_000_000_000 / u128::from(rate_bps.max(1));
    u64::try_from(ns).unwrap_or(u64::MAX)
}
