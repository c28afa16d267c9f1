"""fabric-emu: a packet-level emulator of lossless AI/HPC fabrics."""

__version__ = "0.1.0"
