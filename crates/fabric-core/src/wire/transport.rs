//! Port of emulator/wire/transport.py (in progress).
