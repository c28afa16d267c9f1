//! Port of emulator/model/dcqcn.py (in progress).
