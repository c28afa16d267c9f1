//! Port of emulator/wire/mac.py (in progress).
