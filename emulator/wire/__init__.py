"""Scapy views of the frame formats, for tests and capture analysis.

The frame formats themselves (Ethernet MAC control and PFC, MAC addresses, RoCEv2, InfiniBand) are compiled:
``emulator._core.pfc``, ``.mac``, ``.roce``, ``.transport`` and ``.ib`` (crates/fabric-core/src/wire).  What stays
here is :mod:`emulator.wire.scapy_layers`, the IB extension headers scapy lacks, so a capture dissects completely.
"""
