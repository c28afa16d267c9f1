"""The tests that pin a Python model's behaviour, run again on its compiled twin (issue 24, "port by proof").

A test module's source is executed a second time as a new module, with the compiled twins standing in for the
Python models while it imports them; its test functions are then collected from the file that asked, with
their assertions unchanged.  Deleted with the Python models (their tests then import the compiled ones).
"""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any


def twin_module(name: str, **names: Any) -> types.ModuleType:
    """A stand-in for the module ``name`` that holds ``names``."""
    module = types.ModuleType(f"{name} (compiled)")
    module.__dict__.update(names)
    return module


def rerun(test_module: str, substitutes: dict[str, types.ModuleType], uses: set[str] | None = None,
          leave_out: dict[str, str] | None = None) -> types.ModuleType:
    """tests/unit/``test_module``.py executed again with ``substitutes`` in place of the modules they name.

    Its tests are the module's ``test_*`` functions; with ``uses``, only those whose code names one of them
    (the file tests other things too); ``leave_out`` names tests that do not test the model, each with why.
    The caller takes :func:`selected_tests` the result into its own globals.
    """
    path = Path(__file__).with_name(f"{test_module}.py")
    module = types.ModuleType(f"{test_module}_compiled")
    module.__file__ = str(path)
    saved = {name: sys.modules.get(name) for name in substitutes}
    sys.modules.update(substitutes)
    try:
        exec(compile(path.read_text(), str(path), "exec"), module.__dict__)  # noqa: S102 - our own test file
    finally:
        for name, old in saved.items():
            if old is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = old
    module.__dict__["_selected"] = {
        name: value for name, value in module.__dict__.items()
        if name.startswith("test_") and callable(value) and name not in (leave_out or {})
        and (uses is None or uses & set(_code(value).co_names))
    }
    return module


def _code(test: Any) -> types.CodeType:
    """The code of a test function, under hypothesis's ``@given`` if it has one."""
    inner = getattr(getattr(test, "hypothesis", None), "inner_test", test)
    return inner.__code__


def selected_tests(module: types.ModuleType) -> dict[str, Any]:
    """The selected test functions of a :func:`rerun` module, to put in a test file's globals."""
    return dict(module.__dict__["_selected"])
