"""Sans-I/O models: PFC pause state, the switch MMU and its parameters, forwarding, links, RC transport, IB credits
and a switch's IB plane.

Each is driven by (input, now) and returns what to do; none reads a clock or touches a socket,
so the emulator's agents and a simulator can drive the same code.
"""
