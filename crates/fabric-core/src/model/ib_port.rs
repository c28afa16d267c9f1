//! Port of emulator/model/ib_port.py (in progress).
