//! The data plane's I/O: raw AF_PACKET sockets with batched receive and send (`recvmmsg`, `sendmmsg`, or a
//! TPACKET_V2 receive ring read in place), epoll and a timerfd, the clocks, opening sockets inside a network
//! namespace (`setns` on a thread of its own), and the event loop that serves many agents on them.
//!
//! The models (`fabric-core`) do no I/O; this crate moves frames and waits, and knows no model. Sends go
//! through the interface's qdisc (no `PACKET_QDISC_BYPASS`, no AF_XDP): the emulator's links are shaped by
//! tc, and a bypass would silently unshape them. The system calls are confined to [`io`]; `forward` and
//! `event_loop` are safe code on its wrappers.
pub mod event_loop;
pub mod forward;
pub mod io;
