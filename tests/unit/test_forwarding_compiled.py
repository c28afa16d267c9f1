"""test_forwarding.py's tests and test_wire.py's on routed and mark_ce, again on emulator._core.forwarding
(deleted with emulator/model/forwarding.py)."""

from compiled_rerun import rerun, selected_tests
from emulator._core import forwarding

_twin = {"emulator.model.forwarding": forwarding}
globals().update(selected_tests(rerun("test_forwarding", _twin)))
globals().update(selected_tests(rerun("test_wire", _twin, uses={"routed", "mark_ce"})))
