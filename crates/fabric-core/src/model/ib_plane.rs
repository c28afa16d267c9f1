//! Port of emulator/model/ib_plane.py (in progress).
