"""MAC addresses between their text form (plans, configs) and wire bytes, and the Ethernet header's size."""

ETH_LEN = 14  # destination and source MAC, EtherType: every frame here starts with these (no VLAN tag)


def mac_bytes(text: str) -> bytes:
    """``02:00:00:00:01:00`` -> 6 bytes."""
    raw = bytes.fromhex(text.replace(":", ""))
    if len(raw) != 6:
        raise ValueError(f"not a MAC address: {text!r}")
    return raw


def mac_text(raw: bytes | bytearray | memoryview) -> str:
    """6 bytes -> ``02:00:00:00:01:00``."""
    return raw.hex(":")
