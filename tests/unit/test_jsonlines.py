"""The out-of-band channels (perf over TCP, the collective ranks) against a hostile peer."""

from __future__ import annotations

import socket

import pytest
from hypothesis import given
from hypothesis import strategies as st

from emulator.apps import jsonlines
from emulator.errors import FabricError
from emulator.apps.jsonlines import JsonLines


def exchange(data: bytes, fields: dict[str, type] | None = None) -> dict:
    """What our end makes of ``data`` sent by the peer, which then hangs up."""
    ours, theirs = socket.socketpair()
    ours.settimeout(5)
    with theirs:
        theirs.sendall(data)
    channel = JsonLines(ours, "h2 (10.0.0.2)")
    try:
        return channel.receive("its QP", fields)
    finally:
        channel.close()


@pytest.mark.parametrize("data, message", [
    (b"", "closed the connection while we waited for its QP"),
    (b"{not json\n", "not JSON"),
    (b"[1, 2]\n", "no JSON object"),
    (b'{"error": "no\\nsuch\\tthing"}\n', "h2 (10.0.0.2): no such thing"),
    (b'{"qpn": 1.5}\n', "without a valid 'qpn' (int)"),
    (b'{"qpn": true}\n', "without a valid 'qpn' (int)"),
    (b'{"qpn": 17}\n', "without a valid 'gid' (str)"),
    (b"[" * 100_000 + b"\n", "not JSON"),
])
def test_what_a_peer_sends_wrong_ends_in_one_line_naming_it(data, message):
    with pytest.raises(FabricError) as caught:
        exchange(data, {"qpn": int, "gid": str})
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_an_overlong_line_is_refused_without_reading_it_all(monkeypatch):
    monkeypatch.setattr(jsonlines, "LINE_MAX", 1000)
    with pytest.raises(FabricError, match="over 1000 bytes"):
        exchange(b'{"pad": "' + b"x" * 5000 + b'"}\n')


def test_a_good_message_passes():
    assert exchange(b'{"qpn": 17, "gid": "10.0.0.2", "extra": [1]}\n', {"qpn": int, "gid": str})["qpn"] == 17


@given(data=st.binary(max_size=400))
def test_fuzz_jsonlines_receive(data):
    try:
        message = exchange(data, {"qpn": int})
    except FabricError as err:
        assert "\n" not in str(err)
    else:
        assert isinstance(message, dict) and type(message["qpn"]) is int


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize("hello, message", [
    (b'{"op": "tcp", "size": "1MiB", "iters": 1}\n', "without a valid 'size' (int)"),
    (b'{"op": "tcp", "size": 1024, "iters": 1, "seed": 1e400}\n', "without a valid 'seed' (int)"),
    (b'{"op": "tcp", "size": 1024, "iters": 10000000000, "seed": 1}\n', "iters"),
    (b"\xff" * 100 + b"\n", "not JSON"),
])
def test_a_perf_server_refuses_a_hostile_client_in_one_line(hello, message):
    """The perf server listens on the fabric: anyone in a host may connect and send anything."""
    import threading

    from emulator.apps import perf

    port = free_port()
    outcome: list[BaseException | dict] = []

    def server() -> None:
        try:
            outcome.append(perf.serve("tcp", port=port))
        except FabricError as err:
            outcome.append(err)

    thread = threading.Thread(target=server)
    thread.start()
    for _ in range(100):  # until the server listens
        try:
            client = socket.create_connection(("127.0.0.1", port), timeout=5)
            break
        except ConnectionRefusedError:
            threading.Event().wait(0.05)
    with client:
        client.sendall(hello)
        thread.join(10)
    assert isinstance(outcome[0], FabricError) and message in str(outcome[0]) and "\n" not in str(outcome[0])
