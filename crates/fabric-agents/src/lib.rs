//! The emulator's agents as the data-plane loop serves them: each an agent model of `fabric-core`
//! (sans-I/O: frames and the time in, frames and a deadline out) driven through `fabric-io`'s sockets and
//! event loop. Safe code on both: the models know no socket, the I/O crate knows no model, and this crate
//! joins them.
pub mod nic;
pub mod switch;

use std::sync::{Mutex, MutexGuard, PoisonError};

/// The value behind `mutex`, whatever a panic elsewhere left (none is expected: no crate here panics).
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
