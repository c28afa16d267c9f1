"""test_pfcwd.py's tests again, on emulator._core.pfcwd and emulator._core.mmu (deleted with
emulator/model/pfcwd.py)."""

from compiled_rerun import rerun, selected_tests
from emulator._core import pfcwd
from test_mmu_compiled import TEST_MMU

globals().update(selected_tests(rerun(
    "test_pfcwd", {"emulator.model.pfcwd": pfcwd, "test_mmu": TEST_MMU},
    leave_out={"test_switch_option_only_on_the_lossless_fabric":
               "tests switch_params.derive_config, which builds the Python WatchdogConfig"})))
