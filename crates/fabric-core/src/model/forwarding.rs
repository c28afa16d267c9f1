//! Port of emulator/model/forwarding.py (in progress).
