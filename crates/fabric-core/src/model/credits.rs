//! Port of emulator/model/credits.py (in progress).
