//! Port of emulator/sim/engine.py (in progress).
