"""Collective operations on the emulated RNICs: plans, rank processes, the coordinator."""
