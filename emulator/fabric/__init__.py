"""Building a fabric: topology specs, the pure plan, run state, the builder, captures, the IB subnet manager."""
