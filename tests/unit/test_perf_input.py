"""perf: bad input ends in one line before anything is set up."""

from __future__ import annotations

import pytest

from emulator.cli import main
from emulator.errors import FabricError
from emulator.apps.perf import PerfRequest, pattern


@pytest.mark.parametrize("request_,message", [
    (PerfRequest("write", 0, 1), "messages are 1 B to 1 GiB"),
    (PerfRequest("write", (1 << 30) + 1, 1), "messages are 1 B to 1 GiB"),
    (PerfRequest("read", 4096, 0), "at least one iteration"),
    (PerfRequest("send", 1 << 20, 2048), "the receiver keeps all of it"),
    (PerfRequest("atomic", 8, 1), "unknown perf test"),
])
def test_requests_outside_the_limits_are_refused(request_, message):
    with pytest.raises(FabricError, match=message):
        request_.check()


def test_the_pattern_is_reproducible_and_not_trivial():
    assert pattern(3, 4096) == pattern(3, 4096)
    assert pattern(3, 4096) != pattern(4, 4096)
    assert len(set(pattern(3, 4096))) > 200


def test_cli_rejects_a_bad_size_in_one_line(capsys):
    assert main(["perf", "write", "h2", "--size", "64XB"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("fabric-emu: bad size '64XB'") and "\n" not in err


def test_the_peer_may_follow_the_options(capsys):
    """`perf write --size 64XB h2`: h2 is still the peer (argparse alone would reject it)."""
    assert main(["perf", "write", "--size", "64XB", "h2"]) == 1
    assert "bad size '64XB'" in capsys.readouterr().err


def test_other_stray_arguments_are_still_refused(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["topos", "extra"])
    assert exit_.value.code == 2
    assert "unrecognized arguments: extra" in capsys.readouterr().err


@pytest.mark.parametrize("request_,message", [
    (PerfRequest("write", 4096, 10**6 + 1), "--iters 1000001: must be 1 to 1000000"),
    (PerfRequest("write", 4096, 10**400), "--iters 100000000000... (401 digits): must be 1 to 1000000"),
    (PerfRequest("write", 10**400, 1), "--size 100000000000... (401 digits): messages are 1 B to 1 GiB"),
    (PerfRequest("write", 4096, 1, seed=2**32), "--seed 4294967296: must be 0 to 4294967295"),
    (PerfRequest("write", 4096, 1, mtu=300), "--mtu 300: choose one of 256, 512, 1024, 2048, 4096"),
    (PerfRequest("send", 1 << 30, 10**6), "send: --size x --iters is 976.56 TiB; the receiver keeps all of it"),
], ids=["iters", "iters-huge", "size-huge", "seed", "mtu", "send-total"])
def test_a_request_is_checked_field_by_field(request_, message):
    """The server checks a client's request with the same check: every field in its range."""
    with pytest.raises(FabricError) as err:
        request_.check()
    assert str(err.value).startswith(message)
