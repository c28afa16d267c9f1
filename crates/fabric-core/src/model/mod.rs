//! The per-frame models: sans-I/O state machines driven by the emulator's agents and by the simulation engine.
pub mod credits;
pub mod dcqcn;
pub mod fidelity;
pub mod forwarding;
pub mod ib_plane;
pub mod ib_port;
pub mod link;
pub mod mmu;
pub mod pause;
pub mod pfcwd;
pub mod rc;
pub mod rdma_params;
pub mod rng;
pub mod routes;
pub mod rx_pipeline;
