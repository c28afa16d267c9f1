//! The simulation backend: a discrete-event engine in integer ns that drives the models in virtual time.
pub mod engine;
pub mod fabric;
pub mod host;
pub mod plans;
pub mod ranks;
pub mod summary;
pub mod switch;
pub mod wire;
