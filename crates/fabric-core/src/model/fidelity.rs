//! Port of emulator/model/fidelity.py (in progress).
