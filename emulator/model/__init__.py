"""The models' Python side: settings and the options that make them.

The per-frame models (forwarding, the switch MMU with its PFC watchdog, pause state, links, the slow
receiver's buffer, the fidelity bookkeeping, DCQCN's notification and reaction points) are compiled:
:mod:`emulator._core`, which the agents and ``--backend sim`` run.  What stays here is configuration: the
settings the agents' JSON config carries as dataclasses (``MmuConfig``, ``WatchdogConfig``,
``DcqcnParams``), the ``--switch`` and ``--cc`` options that derive them, and time dilation.
"""
