"""Emulated InfiniBand: the wire format and the subnet manager."""
