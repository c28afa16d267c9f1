"""Re-run a test module's functions with other names in their globals.

Port by proof (issue 24): the existing tests of a Python model run against its compiled twin with their
assertions untouched.  :func:`rebound` clones every function the module defines (tests and their helpers)
into one namespace where the given names replace the module's own, so ``wire.decode`` in a test, or
``Packet`` in a helper it calls, is the compiled one.  The clones keep their pytest marks.
"""

from __future__ import annotations

import types


def rebound(module: types.ModuleType, names: dict[str, object]) -> dict[str, object]:
    """``module``'s names with ``names`` in place, its own functions cloned to see them."""
    namespace = dict(vars(module))
    namespace.update(names)
    for key, value in list(namespace.items()):
        if isinstance(value, types.FunctionType) and value.__module__ == module.__name__:
            clone = types.FunctionType(value.__code__, namespace, value.__name__, value.__defaults__,
                                       value.__closure__)
            clone.__kwdefaults__ = value.__kwdefaults__
            clone.__dict__.update(value.__dict__)  # pytest's marks (parametrize, ...) live here
            namespace[key] = clone
    return {key: value for key, value in namespace.items() if not key.startswith("__")}
