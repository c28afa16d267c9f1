//! Port of emulator/model/link.py (in progress).
