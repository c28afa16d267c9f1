//! Port of emulator/model/pfcwd.py (in progress).
