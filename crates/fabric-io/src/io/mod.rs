//! The system calls themselves, and every `unsafe` block of the workspace: sockets, rings, epoll, timerfd,
//! clocks, namespaces. Each block says why it is sound (clippy's `undocumented_unsafe_blocks` is denied, and
//! `tests/unit/test_layers.py` allows the word nowhere else). What sits above (`forward`, `event_loop`) is
//! safe Rust on these wrappers.
pub mod clock;
pub mod mapped;
pub mod netlink;
pub mod netns;
pub mod packet;
pub mod poll;
pub mod ring;
