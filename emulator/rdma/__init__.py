"""Emulated RDMA: RoCEv2 frames, the RC transport model, the RNIC and verbs."""
