"""test_rx_pipeline.py's tests again, on emulator._core.rx_pipeline (deleted with emulator/model/rx_pipeline.py)."""

from compiled_rerun import rerun, selected_tests
from emulator._core import rx_pipeline

globals().update(selected_tests(rerun("test_rx_pipeline", {"emulator.model.rx_pipeline": rx_pipeline})))
