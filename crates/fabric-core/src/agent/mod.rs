//! The emulator's agents on real frames in real time, without I/O: a driver (crates/fabric-agents) receives
//! frames and hands them in with the time, the agent sends through the driver's sockets and says when it next
//! has something to do. The same models the simulation drives in virtual time (`sim`), here against a kernel
//! that paces the wire.
pub mod nic;
pub mod regions;
pub mod switch;
