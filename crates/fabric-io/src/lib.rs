//! The data plane's system calls, and the only crate with `unsafe` code: raw AF_PACKET sockets with batched
//! receive and send (`recvmmsg`, `sendmmsg`, or a TPACKET_V2 receive ring read in place), waiting on a socket (`poll`), the thread's CPU clock, and
//! opening sockets inside a network namespace (`setns` on a thread of its own).
//!
//! The models (`fabric-core`) do no I/O; this crate moves frames and nothing else. Sends go through the
//! interface's qdisc (no `PACKET_QDISC_BYPASS`, no AF_XDP): the emulator's links are shaped by tc, and a
//! bypass would silently unshape them. Every `unsafe` block says why it is sound.
pub mod clock;
pub mod forward;
pub mod netns;
pub mod packet;
pub mod ring;
