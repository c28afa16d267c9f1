//! Port of emulator/wire/pfc.py (in progress).
