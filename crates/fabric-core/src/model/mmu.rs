//! Port of emulator/model/mmu.py (in progress).
