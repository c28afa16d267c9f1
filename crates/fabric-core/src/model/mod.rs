//! The per-frame models: sans-I/O state machines driven by the emulator's agents and by the simulation engine.
