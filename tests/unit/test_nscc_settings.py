"""``cc`` on the uet fabric: NSCC's settings as the command line and experiment files write them."""

from __future__ import annotations

import pytest

from emulator.errors import FabricError
from emulator.model.dcqcn import parse_cc
from emulator.model.nscc import NsccSettings, parse_nscc


def test_nscc_with_its_defaults_its_settings_or_none():
    assert parse_nscc("nscc") == NsccSettings()
    assert parse_nscc(" nscc , target_delay=10us , gamma=0.5 ") == NsccSettings(target_delay_ns=10_000, gamma=0.5)
    assert parse_nscc("nscc,gamma=1") == NsccSettings(gamma=1.0)
    assert parse_nscc("none") is None


@pytest.mark.parametrize("text, message", [
    ("dcqcn", "congestion control 'dcqcn': the uet fabric's RNICs run nscc[,target_delay=TIME,gamma=X], or none"),
    ("none,gamma=1", "congestion control 'none': the uet fabric's RNICs run nscc"),
    ("nscc,gamma", "bad nscc option 'gamma': expected key=value, e.g. target_delay=10us"),
    ("nscc,gamma=0", "nscc gamma '0': above 0 and at most 1"),
    ("nscc,gamma=nan", "nscc gamma 'nan': above 0 and at most 1"),
    ("nscc,gamma=fast", "bad nscc gamma 'fast': a number above 0 and at most 1"),
    ("nscc,target_delay=100000s", "nscc target_delay '100000s': choose 1 ns to a day"),
    ("nscc,target_delay=2d", "nscc target_delay: bad time '2d'"),
    ("nscc,window=4", "unknown nscc option 'window'; known: target_delay, gamma"),
    (7, "bad congestion control 7: the uet fabric takes nscc[,key=value...] or none"),
])
def test_bad_nscc_settings_are_one_line(text, message):
    with pytest.raises(FabricError) as caught:
        parse_nscc(text)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_nscc_is_refused_on_the_roce_fabrics():
    with pytest.raises(FabricError, match="nscc is the uet fabric's congestion control: use fabric uet"):
        parse_cc("nscc")
