//! Port of emulator/model/rc.py (in progress).
