"""The PFC watchdog (emulator._core.pfcwd), alone and inside the MMU, on a fake clock; its settings as the
agents' config carries them (emulator.model.pfcwd)."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from emulator.agents.config import ConfigError, dump, load
from emulator.errors import FabricError
from emulator._core.pfcwd import Watchdog
from emulator.model.pfcwd import WatchdogConfig, parse_pfcwd
from emulator.model.switch_params import derive_config
from fake_agents import switch_config
from test_mmu import FRAME, LOSSLESS, fill, mmu

MS = 1_000_000
KEY = (1, LOSSLESS)  # egress port 1, the lossless priority


def test_a_queue_paused_with_frames_for_the_detection_time_is_stormed_then_restored():
    wd = Watchdog(WatchdogConfig(100 * MS, 300 * MS))
    assert wd.stalled(10 * MS, KEY) and not wd.stalled(20 * MS, KEY)  # the first stall starts the clock
    assert wd.next_deadline() == 110 * MS
    assert wd.on_timer(109 * MS) == ([], [])
    assert wd.on_timer(110 * MS) == ([KEY], [])
    assert wd.stormed(KEY) and wd.dropping(KEY) and wd.storms == 1
    assert not wd.stalled(120 * MS, KEY)  # in a storm, no new detection
    wd.pause_received(200 * MS, KEY)  # the storm goes on: restoration starts over
    assert wd.next_deadline() == 500 * MS
    assert wd.on_timer(499 * MS) == ([], [])
    assert wd.on_timer(500 * MS) == ([], [KEY])
    assert not wd.stormed(KEY) and wd.restorations == 1 and wd.next_deadline() is None


def test_progress_ends_the_detection():
    wd = Watchdog(WatchdogConfig(100 * MS, 200 * MS))
    wd.stalled(0, KEY)
    assert wd.progressed(KEY) and not wd.progressed(KEY)
    assert wd.next_deadline() is None and wd.on_timer(10**12) == ([], [])


@pytest.mark.parametrize("action, stormed, dropping", [("drop", True, True), ("forward", True, False),
                                                       ("alert", False, False)])
def test_actions(action, stormed, dropping):
    wd = Watchdog(WatchdogConfig(1, 1, action))
    wd.stalled(0, KEY)
    wd.on_timer(1)
    assert (wd.stormed(KEY), wd.dropping(KEY), wd.storms) == (stormed, dropping, 1)


def test_parse_pfcwd():
    assert parse_pfcwd("off") is None
    assert parse_pfcwd("on") == WatchdogConfig(200 * MS, 400 * MS, "drop")
    assert parse_pfcwd("50ms") == WatchdogConfig(50 * MS, 100 * MS, "drop")
    assert parse_pfcwd("50ms:1s:forward") == WatchdogConfig(50 * MS, 1000 * MS, "forward")


@pytest.mark.parametrize("text, fragment", [
    ("50ms:1s:reboot", "action 'reboot': expected one of drop, forward, alert"),
    ("50ms::drop", "expected off, on or DETECTION[:RESTORATION[:ACTION]]"),
    ("0ms", "detection_ns 0: expected 1 ns to"),
    ("soon", "bad time 'soon'"),
    ("1:2:3:4", "expected off, on"),
])
def test_parse_pfcwd_refuses_in_one_line(text, fragment):
    with pytest.raises(FabricError, match=re.escape(fragment)) as err:
        parse_pfcwd(text)
    assert "\n" not in str(err.value)


def test_switch_option_only_on_the_lossless_fabric():
    assert derive_config("lossless", 10**8, 0, 1500, 2, {"pfcwd": "on"}).pfcwd == WatchdogConfig(200 * MS, 400 * MS)
    assert derive_config("lossless", 10**8, 0, 1500, 2).pfcwd is None
    with pytest.raises(FabricError, match="--fabric lossy has none"):
        derive_config("lossy", 10**8, 0, 1500, 2, {"pfcwd": "on"})


def test_the_settings_go_through_an_agents_config_file_and_are_checked_there(tmp_path):
    """WatchdogConfig is the dataclass the agents' JSON config carries: written and read back the same, and a
    bad value in the file refused naming the field."""
    config = dataclasses.replace(switch_config(str(tmp_path)), mmu=derive_config("lossless", 10**8, 0, 1500, 3,
                                                                               {"pfcwd": "50ms:1s:forward"}))
    assert load(type(config), dump(config)).mmu.pfcwd == WatchdogConfig(50 * MS, 1000 * MS, "forward")
    for field, value, message in [("detection_ns", 0, "mmu.pfcwd.detection_ns 0: expected 1 ns to"),
                                  ("action", "reboot", "mmu.pfcwd.action 'reboot': expected one of drop, forward")]:
        data = json.loads(dump(config))
        data["mmu"]["pfcwd"][field] = value
        with pytest.raises(ConfigError, match=f"^{re.escape(message)}"):
            load(type(config), json.dumps(data))


# --- inside the MMU --------------------------------------------------------------------------------------


def stormed_mmu(action: str):
    """An MMU whose egress port 1 is paused on the lossless priority with three frames queued, since t = 0."""
    m = mmu(rates=[10**7] * 4, pfcwd=WatchdogConfig(100 * MS, 300 * MS, action))  # a pause of 65535 quanta: 3.4 s
    m.pfc_received(0, 1, {LOSSLESS: 65535})
    assert fill(m, 0, 1, LOSSLESS, 3) == [True] * 3
    assert m.head(1) is None and m.next_deadline() == 100 * MS  # the detection deadline (before the pause expiry)
    return m


def test_mmu_drop_flushes_the_stormed_queue_drops_arrivals_and_ignores_its_pfc():
    m = stormed_mmu("drop")
    assert m.on_timer(100 * MS) == [1]
    assert m.egress_bytes(1, LOSSLESS) == 0 and m.ingress_bytes(0, LOSSLESS) == 0  # the buffer is given back
    counters = m.counters[1][LOSSLESS]
    assert (counters.pfcwd_storms, counters.pfcwd_drops, counters.tx_frames) == (1, 3, 0)
    assert fill(m, 0, 1, LOSSLESS, 2, now=101 * MS) == [False, False]
    assert counters.pfcwd_drops == 5
    assert m.pfc_received(150 * MS, 1, {LOSSLESS: 65535}) == [] and not m.pause[1].is_paused(LOSSLESS)
    assert fill(m, 0, 1, 0, 1, now=151 * MS) == [True]  # a lossy priority is not watched
    # Restoration: 300 ms after the last pause frame (150 ms) the queue takes frames and obeys PFC again.
    m.on_timer(449 * MS)
    assert fill(m, 0, 1, LOSSLESS, 1, now=449 * MS) == [False]
    m.on_timer(450 * MS)
    assert m.watchdog.restorations == 1
    assert fill(m, 0, 1, LOSSLESS, 1, now=451 * MS) == [True]
    m.pfc_received(452 * MS, 1, {LOSSLESS: 65535})
    assert m.pause[1].is_paused(LOSSLESS)


def test_mmu_forward_lets_the_stormed_queue_send():
    m = stormed_mmu("forward")
    assert m.on_timer(100 * MS) == [1]
    assert not m.pause[1].is_paused(LOSSLESS)
    sent = 0
    while (head := m.head(1)) is not None:
        m.pop(1, head[0])
        sent += 1
    assert sent == 3 and m.counters[1][LOSSLESS].pfcwd_drops == 0


def test_mmu_alert_only_counts():
    m = stormed_mmu("alert")
    m.on_timer(100 * MS)
    assert m.counters[1][LOSSLESS].pfcwd_storms == 1 and m.pause[1].is_paused(LOSSLESS)
    assert m.egress_bytes(1, LOSSLESS) == 3 * FRAME


def test_mmu_a_queue_that_sends_or_resumes_is_no_storm():
    m = stormed_mmu("drop")
    m.pfc_received(50 * MS, 1, {LOSSLESS: 0})  # XON before the detection time
    m.pop(1, m.head(1)[0])
    m.pfc_received(60 * MS, 1, {LOSSLESS: 65535})  # paused again with frames: a new detection from 60 ms
    assert m.on_timer(100 * MS) == [] and m.counters[1][LOSSLESS].pfcwd_storms == 0
    assert m.next_deadline() == 160 * MS
