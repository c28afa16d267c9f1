"""test_mmu.py's tests again, on emulator._core.mmu's Mmu (deleted with emulator/model/mmu.py).

The configs are the Python dataclass MmuConfig, as switch_params.py and agents/config.py build them (and as the
tests' own helper does, with ``dataclasses`` features the compiled MmuConfig lacks); test_twin_mmu.py checks the
compiled MmuConfig against it."""

from compiled_rerun import rerun, selected_tests, twin_module
from emulator._core import mmu
from emulator.model.mmu import MmuConfig

TWIN = twin_module("emulator.model.mmu", Mmu=mmu.Mmu, MmuConfig=MmuConfig)
TEST_MMU = rerun("test_mmu", {"emulator.model.mmu": TWIN})
globals().update(selected_tests(TEST_MMU))
globals().update(selected_tests(rerun("test_switch_params", {"emulator.model.mmu": TWIN}, uses={"Mmu"})))
