//! Port of emulator/model/rx_pipeline.py (in progress).
