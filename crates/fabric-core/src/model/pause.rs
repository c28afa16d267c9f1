//! Port of emulator/model/pause.py (in progress).
