"""test_pfc.py's PauseState tests again, on emulator._core.pause (deleted with emulator/model/pause.py)."""

from compiled_rerun import rerun, selected_tests, twin_module
from emulator._core import pause

globals().update(selected_tests(rerun("test_pfc", {"emulator.model.pause": twin_module("emulator.model.pause", PauseState=pause.PauseState)},
                                uses={"PauseState"})))
