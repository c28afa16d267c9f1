"""Sans-I/O models: PFC pause state, the switch MMU and its parameters, forwarding, RC transport, IB credits.

Each is driven by (input, now) and returns what to do; none reads a clock or touches a socket,
so the emulator's agents and a simulator can drive the same code.
"""
