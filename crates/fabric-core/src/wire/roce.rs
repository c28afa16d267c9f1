//! Port of emulator/wire/roce.py (in progress).
