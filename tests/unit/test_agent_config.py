"""The builder -> agent contract (emulator.agents.config): what the builder writes is what an agent reads,
and a config file that is not what the builder writes is one line naming the field."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from emulator.agents.config import ConfigError, HostConfig, SwitchConfig, dump, load, read
from emulator.fabric.agent_config import agent_configs, switch_mmu
from emulator.fabric.ib_subnet import assign as assign_subnet
from emulator.fabric.plan import make_plan
from emulator.fabric.topospec import build_topo

ROOT = Path(__file__).resolve().parents[2]


def configs(spec: str, fabric: str, link: dict | None = None, switch: dict | None = None) -> dict:
    """Every agent's config of a fabric, as the builder makes them."""
    plan = make_plan(build_topo(spec), "tcfg", link or {})
    mmu = {node.name: switch_mmu(node, fabric, switch or {}) for node in plan.switches()}
    return agent_configs(plan, 3, mmu, assign_subnet(plan) if fabric == "ib" else None)


@pytest.mark.parametrize("spec, fabric, link, switch", [
    ("star,3", "lossless", None, None),
    ("leafspine,2,2,2", "lossy", {"delay": "20us", "loss": 0.001, "drop": "3:7"}, {"strict": "7", "ecn": "off"}),
    ("fattree,4", "ib", {"mtu": 4096}, None),
])
def test_what_the_builder_writes_an_agent_reads_back_unchanged(spec, fabric, link, switch):
    made = configs(spec, fabric, link, switch)
    assert {type(c) for c in made.values()} == {HostConfig, SwitchConfig}
    for config in made.values():
        assert load(type(config), dump(config)) == config


def test_the_file_holds_plain_json_with_sets_sorted_and_integer_keys_as_text():
    config = configs("star,2", "ib")["s1"]
    data = json.loads(dump(config))
    assert data["mmu"]["lossless"] == [] and data["mmu"]["strict"] == sorted(config.mmu.strict)
    assert all(isinstance(dlid, str) for dlid in data["ib"]["lft"])
    assert data["ports"][0]["drop"] == []


def _switch_json() -> dict:
    return json.loads(dump(configs("star,2", "ib", {"loss": 0.5})["s1"]))


def _host_json() -> dict:
    return json.loads(dump(configs("star,2", "ib")["h1"]))


def _set(data: dict, path: tuple, value: object) -> dict:
    """``data`` with the item at ``path`` set to ``value`` (or removed, for ``...``)."""
    *parents, last = path
    target = data
    for key in parents:
        target = target[key]
    if value is ...:
        del target[last]
    else:
        target[last] = value
    return data


@pytest.mark.parametrize("kind, path, value, message", [
    (SwitchConfig, ("ports", 1, "rate_bps"), "fast", "ports[1].rate_bps: expected a whole number, got 'fast'"),
    (SwitchConfig, ("ports", 0, "rate_bps"), 0, "ports[0].rate_bps: 0 is out of range (at least 1)"),
    (SwitchConfig, ("ports", 0, "loss"), 1.5, "ports[0].loss: 1.5 is out of range (0.0 to 1.0)"),
    (SwitchConfig, ("ports", 0, "host_facing"), 1, "ports[0].host_facing: expected true or false, got 1"),
    (SwitchConfig, ("ports", 0, "drop"), [1, "2"], "ports[0].drop[1]: expected a whole number, got '2'"),
    (SwitchConfig, ("ports", 0, "peer_mac"), "02:00", "ports[0].peer_mac: '02:00' is not a MAC address"),
    (SwitchConfig, ("ports",), {}, "ports: expected a list, got {}"),
    (SwitchConfig, ("seed",), True, "seed: expected a whole number, got True"),
    (SwitchConfig, ("seed",), -1, "seed: -1 is out of range (at least 0)"),
    (SwitchConfig, ("mmu",), ..., "mmu: missing"),
    (SwitchConfig, ("colour",), "red", "the config: unknown field 'colour'"),
    (SwitchConfig, ("mmu", "alpha"), float("nan"), "mmu.alpha: expected a finite number, got nan"),
    (SwitchConfig, ("mmu", "weights"), [1] * 7, "mmu.weights: [1, 1, 1, ...] is not one weight per priority"),
    (SwitchConfig, ("mmu", "strict"), [6, 8], "mmu.strict: [6, 8] holds a priority outside 0 to 7"),
    (SwitchConfig, ("routes", "10.0.0.1"), ["s1-eth9"], "routes['10.0.0.1']: ['s1-eth9'] names no port"),
    (SwitchConfig, ("ib", "lft", "x"), 0, "ib.lft: key 'x' is not a whole number"),
    (SwitchConfig, ("ib", "lft", "1"), 7, "ib.lft: {1: 7, 2: 1} sends to a port this switch lacks"),
    (SwitchConfig, ("ib", "ar"), {"1": [0, 9]}, "ib.ar: {1: [0, 9]} sends to a port this switch lacks"),
    (SwitchConfig, ("ib", "ar"), {"49152": [0]}, "ib.ar: {49152: [0]} is no group of ports for a unicast DLID"),
    (SwitchConfig, ("ib", "ar"), {"1": []}, "ib.ar: {1: []} is no group of ports for a unicast DLID"),
    (HostConfig, ("ib", "reorder"), 5000, "ib.reorder: 5000 is out of range (0 to 4096)"),
    (SwitchConfig, ("ib", "sl2vl"), [0] * 15, "ib.sl2vl: [0, 0, 0, ...] is no map of 16 SLs onto VLs 0 to"),
    (SwitchConfig, ("ib", "peer_capacity"), [4096], "ib.peer_capacity: 1 sizes for 2 ports"),
    (SwitchConfig, ("ib", "vls"), 16, "ib.vls: 16 is out of range (1 to 15)"),
    (HostConfig, ("ib", "sl"), 16, "ib.sl: 16 is out of range (0 to 15)"),
    (HostConfig, ("ib", "lids", "10.0.0.2"), None, "ib.lids['10.0.0.2']: expected a whole number, got None"),
    (HostConfig, ("mtu",), 10**4000, "mtu: 100000000000... (4001 digits) is out of range (1 to 65535)"),
    (HostConfig, ("ip",), ..., "ip: missing"),
    (HostConfig, ("mac",), "zz:00:00:00:00:00", "mac: 'zz:00:00:00:00:00' is not a MAC address"),
])
def test_a_bad_field_is_one_line_that_names_it(kind, path, value, message):
    data = _set(_switch_json() if kind is SwitchConfig else _host_json(), path, value)
    with pytest.raises(ConfigError) as caught:
        load(kind, json.dumps(data))
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value) and len(str(caught.value)) < 300


@pytest.mark.parametrize("text, message", [
    ("", "not JSON: "),
    ("[" * 100_000, "not JSON: "),
    ("[]", "the config: expected an object, got []"),
    ('{"name": "s1"', "not JSON: "),
    ('{"seed": ' + "9" * 5000 + "}", "not JSON: "),  # Python reads integers of up to 4300 digits
])
def test_a_file_that_is_no_config_object_is_one_line(text, message):
    with pytest.raises(ConfigError, match="^" + message.replace("[", r"\[")):
        load(SwitchConfig, text)


def test_the_builder_cannot_make_a_config_that_breaks_its_own_invariants():
    config = configs("star,2", "lossless")["s1"]
    with pytest.raises(ConfigError, match=r"^routes\['10.0.0.1'\]"):
        dataclasses.replace(config, routes={"10.0.0.1": ("nosuch",)})


def test_read_names_a_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="^cannot read .*nosuch.json: No such file"):
        read(str(tmp_path / "nosuch.json"), HostConfig)


def _worker(tmp_path, *specs: str, cpu: str = "any") -> tuple[subprocess.CompletedProcess, bytes]:
    """Run a data-plane process on ``specs``; its exit and what it wrote to its ready pipe."""
    read_fd, write_fd = os.pipe()
    try:
        done = subprocess.run([sys.executable, "-m", "emulator.agents.worker", str(write_fd), cpu, *specs],
                              pass_fds=(write_fd,), cwd=ROOT, capture_output=True, text=True, timeout=30)
    finally:
        os.close(write_fd)
    with os.fdopen(read_fd, "rb") as ready_pipe:
        return done, ready_pipe.read()


@pytest.mark.parametrize("module", ["switch", "host"])
def test_an_agent_given_a_bad_config_exits_with_one_line_before_it_is_ready(tmp_path, module):
    data = _switch_json() if module == "switch" else _host_json()
    data["ifname" if module == "host" else "ports"] = 5
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    done, ready = _worker(tmp_path, f"{module}:{path}")
    field = "ifname: expected text" if module == "host" else "ports: expected a list"
    assert done.returncode != 0 and ready == b""
    assert done.stderr == f"bad agent config {path}: {field}, got 5\n"


@pytest.mark.parametrize("spec", ["router:/tmp/x.json", "switch:", "nocolon"])
def test_a_worker_given_a_bad_argument_exits_with_one_line_before_it_is_ready(tmp_path, spec):
    done, ready = _worker(tmp_path, spec)
    assert done.returncode != 0 and ready == b""
    assert done.stderr == f"bad agent argument {spec!r}: expected switch:CONFIG or host:CONFIG\n"


@pytest.mark.parametrize("cpu", ["-1", "first", ""])
def test_a_worker_given_no_cpu_exits_with_its_usage_before_it_is_ready(tmp_path, cpu):
    path = tmp_path / "host.json"
    path.write_text(json.dumps(_host_json()))
    done, ready = _worker(tmp_path, f"host:{path}", cpu=cpu)
    assert done.returncode != 0 and ready == b""
    assert done.stderr == "usage: python -m emulator.agents.worker READY_FD CPU|any KIND:CONFIG...\n"


@pytest.mark.parametrize("cpu", [-1, 8192, True])
def test_a_receive_cpu_outside_the_kernels_range_is_one_line(cpu):
    data = _host_json()
    data["rx_cpu"] = cpu
    with pytest.raises(ConfigError) as err:
        load(HostConfig, json.dumps(data))
    assert str(err.value) == ("rx_cpu: expected a whole number, got True" if cpu is True
                              else f"rx_cpu: {cpu} is no CPU number (0 to 8191)")
