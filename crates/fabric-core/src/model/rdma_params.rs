//! Port of emulator/model/rdma_params.py (in progress).
