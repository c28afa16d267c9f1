//! Port of emulator/wire/ib.py (in progress).
