//! fabric-emu's compiled core: the wire formats, the per-frame models and the simulation engine.
//!
//! Layers, lowest first (the layer test in `tests/unit/test_layers.py` checks the `use crate::` paths):
//! `wire` (frame formats on bytes) < `model` (sans-I/O state machines: time comes in as integer ns, frames and
//! deadlines go out) < `agent` (the emulator's agents on real frames in real time, still without I/O: a driver
//! hands frames in and sends what they give back) < `sim` (the discrete-event engine that drives the models in
//! virtual time).
//! Nothing here does I/O or links pyo3, and the crate's manifest allows safe Rust only (its `[lints.rust]`).
//! Bytes from the wire are hostile: a malformed frame is an error value the caller counts, never a panic.
pub mod agent;
pub mod model;
pub mod sim;
pub mod wire;
