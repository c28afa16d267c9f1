"""The simulation backend: the same sans-I/O models driven in simulated time (issue 15, in progress)."""
