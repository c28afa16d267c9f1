"""Frame formats: Ethernet MAC control and PFC, MAC addresses, RoCEv2, InfiniBand, scapy views.

Bytes in, fields out and back; no state, no I/O.  The lowest layer above errors and units.
"""
