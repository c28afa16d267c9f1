//! The simulation backend: a discrete-event engine in integer ns that drives the models in virtual time.
pub mod congestion;
pub mod engine;
pub mod fabric;
pub mod faults;
pub mod frame;
pub mod host;
pub mod ib;
pub mod memory;
pub mod plans;
pub mod program;
pub mod ranks;
pub mod summary;
pub mod switch;
pub mod watch;
pub mod wire;
