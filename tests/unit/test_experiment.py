"""Experiment files: the built-ins, defaults and layering, sweeps, and one
clear line for every mistake a user can make in a file."""

import dataclasses
import json
import os
import re
import subprocess
import textwrap
from datetime import datetime, timedelta, timezone

import pytest

import emulator
from emulator.study import experiment
from emulator.errors import FabricError
from emulator.study.experiment import (Fault, Variant, builtin_names, host_count, load_experiment, results_directory,
                                 run_config)

MINIMAL = """
name = "mini"
topo = "star,4"
collective = "incast"
size = "64KiB"

[[variants]]
name = "a"
"""


def load_text(tmp_path, text: str, filename: str = "exp.toml"):
    path = tmp_path / filename
    path.write_text(textwrap.dedent(text))
    return load_experiment(str(path))


def load_error(tmp_path, text: str) -> str:
    with pytest.raises(FabricError) as info:
        load_text(tmp_path, text)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("exp.toml: "), message
    return message


def by_name(exp) -> dict[str, Variant]:
    return {v.name: v for v in exp.variants}


# --- the built-ins ---------------------------------------------------------

def test_builtin_names():
    assert builtin_names() == ["dcqcn", "deadlock", "fidelity", "headline", "incast-scaling", "multi-job", "pause-storm", "scale", "smoke", "straggler", "training-step", "uet", "validate", "victim"]


def test_validate_runs_each_variant_on_both_backends():
    exp = load_experiment("validate")
    names = [v.name for v in exp.variants]
    assert len(names) == 42 and names[:2] == ["incast-lossless-backendemulator", "incast-lossless-backendsim"]
    for emulated, simulated in zip(exp.variants[::2], exp.variants[1::2]):
        assert (emulated.backend, simulated.backend) == ("emulator", "sim")
        assert dataclasses.replace(emulated, name="x", backend="sim", params={}) == \
            dataclasses.replace(simulated, name="x", params={})
    headline = {(v.fabric, v.collective, v.topo, v.size, v.link["bw"]) for v in load_experiment("headline").variants}
    assert headline <= {(v.fabric, v.collective, v.topo, v.size, v.link["bw"]) for v in exp.variants}
    storm = {(v.topo, v.size, v.faults, tuple(sorted(v.switch.items())), v.iterations)
             for v in load_experiment("pause-storm").variants}  # the NIC stall on both backends
    assert storm <= {(v.topo, v.size, v.faults, tuple(sorted(v.switch.items())), v.iterations) for v in exp.variants}


def test_headline():
    exp = load_experiment("headline")
    assert exp.name == "headline" and exp.source == "built-in:headline" and exp.description
    variants = by_name(exp)
    assert list(variants) == ["incast-lossless", "incast-lossy", "allreduce-lossless", "allreduce-lossy",
                             "incast-ib", "allreduce-ib"]
    for name, v in variants.items():
        collective, fabric = name.split("-")
        assert (v.collective, v.fabric, v.topo) == (collective, fabric, "star,8")
        assert v.size == (256 * 1024 if collective == "incast" else 1024 * 1024)
        assert (v.iterations, v.warmup, v.seed, v.params) == (14, 2, 1, {})
        assert v.link["bw"] == "50mbit" and (v.link["mtu"], v.mtu) == ("4200", 4096)
        assert v.switch == {"buffer": "1MiB", "headroom": "72KiB"}
        assert v.senders == (7 if collective == "incast" else None)


def test_straggler():
    exp = load_experiment("straggler")
    assert [v.name for v in exp.variants] == [
        "allreduce-loss0", "allreduce-loss3e-05", "allreduce-loss0.0001", "allreduce-loss0.0003",
        "allreduce-loss0.001"]
    assert [v.params for v in exp.variants] == [{"loss": 0}, {"loss": 3e-5}, {"loss": 1e-4}, {"loss": 3e-4},
                                                {"loss": 1e-3}]
    assert [float(v.link["loss"]) for v in exp.variants] == [0, 3e-5, 1e-4, 3e-4, 1e-3]
    for v in exp.variants:
        assert (v.fabric, v.collective, v.topo, v.size) == ("lossless", "allreduce", "star,8", 256 << 10)
        assert (v.iterations, v.warmup, v.link["bw"]) == (20, 1, "5mbit")


def test_incast_scaling():
    exp = load_experiment("incast-scaling")
    names = [f"incast-{fabric}-senders{n}" for fabric in ("lossless", "lossy") for n in (1, 2, 4, 7)]
    assert [v.name for v in exp.variants] == names
    assert [v.senders for v in exp.variants] == [1, 2, 4, 7] * 2
    assert [v.params for v in exp.variants] == [{"senders": n} for n in (1, 2, 4, 7)] * 2
    headline_switch = load_experiment("headline").variants[0].switch
    for v in exp.variants:
        assert (v.collective, v.size, v.iterations, v.warmup) == ("incast", 256 * 1024, 10, 1)
        assert v.switch == headline_switch


# --- defaults, layering, shorthands, sweeps ---------------------------------

def test_defaults_apply(tmp_path):
    [v] = load_text(tmp_path, MINIMAL).variants
    assert (v.fabric, v.iterations, v.warmup, v.seed, v.mtu, v.capture) == ("lossless", 10, 1, 1, 4096, False)
    assert v.senders == 3  # all hosts of star,4 but the receiver
    assert v.link == {"bw": "100mbit", "delay": "0us", "mtu": "4200", "loss": "0", "drop": ""}


@pytest.mark.parametrize("link_mtu, path_mtu", [(1500, 1024), (2111, 1024), (2112, 2048), (9000, 4096), (576, 512)])
def test_without_mtu_the_path_mtu_is_the_largest_the_links_carry(tmp_path, link_mtu, path_mtu):
    [v] = load_text(tmp_path, MINIMAL + f"link = {{ mtu = {link_mtu} }}\n").variants
    assert v.mtu == path_mtu
    assert (v.switch, v.params, v.size) == ({}, {}, 64 * 1024)


def test_file_source_and_description(tmp_path):
    exp = load_text(tmp_path, MINIMAL)
    assert exp.source == str(tmp_path / "exp.toml") and os.path.isabs(exp.source)
    assert (exp.name, exp.description) == ("mini", "")


def test_variant_overrides_top_level_and_tables_merge(tmp_path):
    exp = load_text(tmp_path, """
        name = "layers"
        topo = "star,4"
        collective = "incast"
        size = 1000
        link = { bw = "20mbit", delay = "1ms" }
        switch = { alpha = 2 }

        [[variants]]
        name = "plain"

        [[variants]]
        name = "tuned"
        size = "2KiB"
        fabric = "lossy"
        link = { delay = "5us", drop = [100, 250] }
        switch = { ecn = false }
        capture = true
        """)
    plain, tuned = exp.variants
    assert (plain.size, plain.link["delay"], plain.switch) == (1000, "1ms", {"alpha": "2"})
    assert (tuned.size, tuned.fabric, tuned.capture) == (2048, "lossy", True)
    assert tuned.link == {"bw": "20mbit", "delay": "5us", "mtu": "4200", "loss": "0", "drop": "100:250"}
    assert tuned.switch == {"alpha": "2", "ecn": "off"}


def test_shorthands_map_into_link_and_switch(tmp_path):
    [v] = load_text(tmp_path, MINIMAL + 'loss = 1e-3\nbw = "50mbit"\nbuffer = "1MiB"\nheadroom = "40KiB"\n').variants
    assert (v.link["loss"], v.link["bw"]) == ("0.001", "50mbit")
    assert v.switch == {"buffer": "1MiB", "headroom": "40KiB"}


def test_sweep_is_a_cartesian_product_in_file_order(tmp_path):
    exp = load_text(tmp_path, MINIMAL + """
        [sweep]
        bw = ["10mbit", "20mbit"]
        buffer = ["512KiB", "1MiB"]
        fabric = ["lossless", "lossy"]
        """)
    assert len(exp.variants) == 8
    first, last = exp.variants[0], exp.variants[-1]
    assert first.name == "a-bw10mbit-buffer512KiB-fabriclossless"
    assert first.params == {"bw": "10mbit", "buffer": "512KiB", "fabric": "lossless"}
    assert (first.link["bw"], first.switch["buffer"], first.fabric) == ("10mbit", "512KiB", "lossless")
    assert last.name == "a-bw20mbit-buffer1MiB-fabriclossy"
    assert (last.link["bw"], last.switch["buffer"], last.fabric) == ("20mbit", "1MiB", "lossy")


def test_sweep_names_stay_usable_as_directory_names(tmp_path):
    exp = load_text(tmp_path, MINIMAL + '[sweep]\ntopo = ["star,4", "leafspine,2,spines=1"]\n')
    assert [v.name for v in exp.variants] == ["a-topostar-4", "a-topoleafspine-2-spines-1"]
    assert [v.topo for v in exp.variants] == ["star,4", "leafspine,2,spines=1"]
    assert [v.senders for v in exp.variants] == [3, 3]  # per topology


def test_sweep_overrides_top_level(tmp_path):
    exp = load_text(tmp_path, MINIMAL + '[sweep]\nsize = [1024, "1MiB"]\n')
    assert [v.size for v in exp.variants] == [1024, 1 << 20]


def test_to_json_is_complete_and_serialisable():
    v = load_experiment("straggler").variants[2]
    data = v.to_json()
    assert set(data) == {f.name for f in dataclasses.fields(Variant)}
    assert json.loads(json.dumps(data)) == data
    assert data["params"] == {"loss": 1e-4} and data["senders"] is None


def test_host_count():
    assert host_count("star,8") == 8
    assert host_count("fattree,4") == 16
    with pytest.raises(FabricError):
        host_count("nosuch,1")


# --- mistakes: one line naming the file, the variant and the key ------------

def test_unknown_variant_key_message_in_full(tmp_path):
    message = load_error(tmp_path, MINIMAL + 'fabrc = "lossy"\n')
    assert message.startswith('exp.toml: variant "a": unknown key "fabrc" (known: name, fabric, collective,')


@pytest.mark.parametrize("extra, expected", [
    ('fabric = "lossey"', 'variant "a": key "fabric": \'lossey\' is not one of lossless, lossy'),
    ('collective = "broadcast"', 'variant "a": key "collective": \'broadcast\' is not one of incast'),
    ('size = "12 parsecs"', 'variant "a": key "size": bad size'),
    ('size = 0', 'variant "a": key "size": 0 B: messages are 1 B to'),
    ('size = 1.5', 'variant "a": key "size": bad size'),
    ('senders = 4', 'variant "a": key "senders": 4 senders and a receiver need 5 hosts, \'star,4\' has 4'),
    ('senders = 0', 'variant "a": key "senders" = 0: must be 1 to 2048'),
    ('topo = "nosuch,3"', 'variant "a": key "topo": unknown topology \'nosuch\''),
    ('topo = "star,x"', 'variant "a": key "topo": topology \'star,x\': n must be an integer'),
    ('topo = "star,1"', 'variant "a": key "topo": incast needs at least 2 hosts'),
    ('topo = 8', 'variant "a": key "topo": expected a spec such as "star,8"'),
    ('iterations = 0', 'variant "a": key "iterations" = 0: must be 1 to 10000'),
    ('warmup = -1', 'variant "a": key "warmup" = -1: must be 0 to 1000'),
    ('seed = "one"', 'variant "a": key "seed": expected a whole number'),
    ('mtu = 1000', 'variant "a": key "mtu": RDMA path MTU 1000: choose one of 256, 512, 1024, 2048, 4096'),
    ('mtu = 2048\nlink = { mtu = 1500 }',
     'variant "a": key "mtu": path MTU 2048 needs a link MTU of 2112, the links have 1500'),
    ('capture = "yes"', 'variant "a": key "capture": expected true or false'),
    ('link = { bww = "1gbit" }', 'variant "a": unknown key "link.bww" (known link options: bw, delay, mtu'),
    ('link = { bw = "fast" }', 'variant "a": key "link.bw": bad rate \'fast\''),
    ('link = "bw=1gbit"', 'variant "a": key "link": expected a table'),
    ('loss = 2', 'variant "a": key "loss": bad loss \'2\': a probability is 0 to 1'),
    ('link = { mtu = 100 }', 'variant "a": key "link.mtu": bad mtu 100'),
    ('link = { delay = {} }', 'variant "a": key "link.delay": expected text, a number or a list'),
    ('switch = { bufer = "1MiB" }', 'variant "a": unknown key "switch.bufer" (known switch options: buffer,'),
    ('buffer = "huge"', 'variant "a": key "buffer": bad size \'huge\''),
    ('switch = { pmax = 2 }', 'variant "a": key "switch.pmax": bad --switch pmax=\'2\': must be 0 to 1'),
    ('switch = { lossless = [3] }\nfabric = "lossy"', 'variant "a": key "switch": --switch lossless=... contradicts'),
    ('loss = 0.1\nlink = { loss = 0.2 }', 'variant "a": key "loss" is also set as link.loss; set it once'),
    ('deadlock = 5', 'variant "a": key "deadlock": expected a time such as "5s", got 5'),
    ('deadlock = "100ms"', 'variant "a": key "deadlock": 100 ms: choose 500 ms to'),
    ('deadlock = "soon"', 'variant "a": key "deadlock": bad time \'soon\''),
    ('faults = "h1"', 'variant "a": key "faults": expected a list of at most 16 tables'),
    ('faults = [5]', 'variant "a": key "faults": fault 1: expected a table, got 5'),
    ('faults = [{ at = "1s", host = "h1" }]', 'variant "a": key "faults": fault 1: missing key "fault"'),
    ('faults = [{ at = "1s", host = "h1", fault = "stall", when = 1 }]', 'fault 1: unknown key "when" (known: at'),
    ('faults = [{ at = "1s", host = "h1", fault = "reboot" }]', "fault 1: 'reboot' is not one of stall, slow, down"),
    ('faults = [{ at = "1s", host = "h9", fault = "stall" }]', "fault 1: 'h9' is no host of 'star,4'"),
    ('faults = [{ at = 1, host = "h1", fault = "stall" }]', 'fault 1: at: expected a time such as "1s", got 1'),
    ('faults = [{ at = "1s", host = "h1", fault = "stall", for = "0s" }]', 'fault 1: for 0 ns: choose 1 ns to'),
    ('faults = [{ at = "1h", host = "h1", fault = "stall" }]', "bad time '1h'"),
    ('faults = [{ at = "0s", host = "h1", fault = "slow" }]', "fault 1: slow needs a fraction of the link rate"),
    ('faults = [{ at = "0s", host = "h1", fault = "down" }]', 'fault 1: down needs key "link"'),
    ('faults = [{ at = "0s", link = "s1-h1", fault = "down" }]', 'fault 1: link \'s1-h1\': expected two linked switches'),
    ('faults = [{ at = "0s", link = "s1-s1", host = "h1", fault = "down" }]', 'fault 1: down takes "link", not "host"'),
    ('faults = [{ at = "0s", host = "h1", fault = "stall", fraction = 0.5 }]', "fault 1: only slow takes a fraction"),
    ('faults = [{ at = "0s", host = "h1", fault = "slow", fraction = 1 }]', "fault 1: fraction 1: above 0 and below 1"),
    ('faults = [{ at = "0s", host = ["h1"], fault = "stall" }]',
     'variant "a": key "faults": fault 1: host: expected one host\'s name such as "h1", got [\'h1\']'),
    ('switch = { fc_floor = "1ms" }', 'variant "a": key "switch": --switch fc_floor=... sets IB\'s link credits: '
                                     '--fabric lossless has none'),
    ('switch = { vl_buffer = "64KiB" }\nfabric = "lossy"',
     'variant "a": key "switch": --switch vl_buffer=... sets IB\'s link credits: --fabric lossy has none'),
    ('cc = "cubic"', 'variant "a": key "cc": unknown congestion control \'cubic\'; known: none, dcqcn'),
    ('cc = 1', 'variant "a": key "cc": bad congestion control 1'),
    ('cc = "dcqcn,g=0"', 'variant "a": key "cc": bad dcqcn g 0.0: expected 1e-06 to 1'),
    ('cc = "dcqcn"\nfabric = "ib"', 'variant "a": key "cc": dcqcn is RoCE\'s congestion control'),
    # in range as written, out of it once dilated: 60 s x D = 2000 (model / bw, or DCQCN's 40 Gbit/s reference / bw)
    ('cc = "dcqcn,cnp_interval=60s"\nlink = { bw = "20mbit" }\nmodel = "40gbit"',
     'variant "a": key "cc": dcqcn cnp_interval 60 s is 120000 s at time dilation D = 2000 (times x D), over the '
     '86400 s a DCQCN time may be: lower it, or D'),
    ('cc = "dcqcn,increase_period=86400s"\nlink = { bw = "20mbit" }\nbackend = "sim"',
     'variant "a": key "cc": dcqcn increase_period 86400 s is 172800000 s at time dilation D = 2000'),
    # timers shorter than a frame: 4,214 bytes at 100 Mbit/s are 337.12 us, 843 ns at DCQCN's 40 Gbit/s (D = 400)
    ('cc = "dcqcn,alpha_period=1ns"\nbackend = "sim"',
     'variant "a": key "cc": dcqcn alpha_period 1 ns is shorter than one 4214-byte frame at the link rate, 843 ns '
     '(D = 400: 337.12 us on the 100 Mbit/s link)'),
    ('cc = "dcqcn,increase_period=842ns"', 'variant "a": key "cc": dcqcn increase_period 842 ns is shorter than one'),
    # plans the hosts cannot make: refused before the run, not by its ranks once the fabric was up
    ('collective = "shift"\ntopo = "star,2"', 'variant "a": key "topo": shift needs at least 3 hosts (each writes to the '
                                             'one 2 further on), the topology has 2'),
    ('collective = "multijob"\ntopo = "star,2"', 'variant "a": key "topo": multijob needs at least 3 hosts'),
    # a rank's region over the RNIC's 1 GiB: the incast's receiver holds every sender's message
    ('size = "1GiB"', 'variant "a": key "size": incast gives rank 0 (h1) a data region of 3 GiB; the RNIC registers '
                      'at most 1 GiB a region: lower size or senders'),
    ('size = "1GiB"\nbackend = "sim"\nsenders = 2', 'variant "a": key "size": incast gives rank 0 (h1) a data region '
                                                    'of 2 GiB'),
    ('collective = "alltoall"\nsize = "1GiB"', 'variant "a": key "size": alltoall gives rank 0 (h1) a data region of '
                                              '2 GiB; the RNIC registers at most 1 GiB a region: lower size'),
    ('backend = "ns3"', 'variant "a": key "backend": \'ns3\' is not one of emulator, sim'),
    ('backend = "sim"\ncapture = true', 'variant "a": backend "sim" writes no captures; set capture = false'),
    ('backend = "sim"\nfaults = [{ at = "0s", host = "h1", fault = "slow", fraction = 0.5 }]',
     'variant "a": backend "sim" injects the stall and down faults, not \'slow\' (yet)'),
    ('spray = "oblivious"', 'variant "a": key "spray" chooses UET\'s entropy values: fabric \'lossless\' sends '
                            'each flow on one path (set fabric = "uet", or remove spray)'),
    ('routing = "adaptive"', 'variant "a": key "routing" chooses the IB subnet manager\'s routing: fabric '
                             '\'lossless\' routes by ECMP (set fabric = "ib", or remove routing)'),
    ('rccc = true', 'variant "a": key "rccc" turns on UET\'s receiver credits: fabric \'lossless\' has none '
                    '(set fabric = "uet", or remove rccc)'),
    ('fabric = "uet"\nbackend = "sim"\nrccc = "yes"', 'variant "a": key "rccc": expected true or false, got \'yes\''),
    ('cc = "nscc"', 'variant "a": key "cc": nscc is the uet fabric\'s congestion control: use fabric uet'),
    ('fabric = "uet"\nbackend = "sim"\ncc = "nscc,gamma=2"', 'variant "a": key "cc": nscc gamma \'2\': above 0 and at most 1'),
    ('fabric = "ib"\nrouting = "ecmp"', 'variant "a": key "routing": \'ecmp\' is not one of static, adaptive'),
    ('fabric = "uet"\nbackend = "sim"\nspray = "random"',
     'variant "a": key "spray": \'random\' is not one of reps, oblivious, flow'),
    ('fabric = "uet"\nbackend = "sim"\ncc = "dcqcn"',
     'variant "a": key "cc": congestion control \'dcqcn\': the uet fabric\'s RNICs run nscc[,target_delay=TIME,'
     'gamma=X], or none'),
])
def test_variant_mistakes(tmp_path, extra, expected):
    assert expected in load_error(tmp_path, MINIMAL + extra + "\n")


def test_the_backend_is_emulator_unless_a_file_or_the_command_line_says(tmp_path):
    text = MINIMAL + '[[variants]]\nname = "b"\nbackend = "sim"\n'
    variants = by_name(load_text(tmp_path, text))
    assert (variants["a"].backend, variants["b"].backend) == ("emulator", "sim")
    path = tmp_path / "exp.toml"
    forced = {v.name: v.backend for v in load_experiment(str(path), backend="sim").variants}
    assert forced == {"a": "sim", "b": "sim"}
    assert {v.backend for v in load_experiment(str(path), backend="emulator").variants} == {"emulator"}
    with pytest.raises(FabricError, match="^--backend 'gpu': choose emulator or sim$"):
        load_experiment(str(path), backend="gpu")


def test_a_backend_sweep_names_each_side(tmp_path):
    exp = load_text(tmp_path, MINIMAL + '[sweep]\nbackend = ["emulator", "sim"]\n')
    assert [(v.name, v.backend) for v in exp.variants] == [("a-backendemulator", "emulator"), ("a-backendsim", "sim")]
    # --backend takes the sweep away: every variant once, on the backend asked for
    assert [(v.name, v.backend) for v in load_experiment(str(tmp_path / "exp.toml"), "sim").variants] == [("a", "sim")]


SCALE = """
name = "scale"
topo = "fattree,24"
collective = "allreduce"
size = "1MiB"
backend = "sim"

[[variants]]
name = "a"
"""


def test_each_backend_has_its_own_caps(tmp_path):
    """fattree,24 (3,456 hosts, 720 switches) passes the simulation backend's checks and is over the emulator's
    node cap; fattree,32 passes neither (the simulation backend's route cap); each refusal one line naming it."""
    variant = load_text(tmp_path, SCALE).variants[0]
    assert (variant.topo, variant.backend, host_count(variant.topo)) == ("fattree,24", "sim", 3456)
    assert load_error(tmp_path, SCALE.replace('backend = "sim"', 'backend = "emulator"')) == (
        'exp.toml: variant "a": key "topo": topology \'fattree,24\': 4176 nodes (3456 hosts, 720 switches); '
        'at most 2048 on one machine (the emulator)')
    assert load_error(tmp_path, SCALE.replace("fattree,24", "fattree,32")) == (
        'exp.toml: variant "a": key "topo": topology \'fattree,32\': 1,280 switches x 8,192 hosts = 10,485,760 '
        'routes; the simulation backend plans and builds at most 8,000,000')


@pytest.mark.parametrize("backend, most", [("emulator", 2048), ("sim", 16384)])
def test_senders_are_bounded_by_the_backends_node_cap(tmp_path, backend, most):
    text = MINIMAL + f'backend = "{backend}"\n'
    assert load_error(tmp_path, text + f"senders = {most + 1}\n").endswith(
        f'variant "a": key "senders" = {most + 1}: must be 1 to {most}')
    assert load_error(tmp_path, text + f"senders = {most}\n").endswith(
        f'variant "a": key "senders": {most} senders and a receiver need {most + 1} hosts, \'star,4\' has 4 '
        f'(choose 1 to 3)')


@pytest.mark.parametrize("collective", ["allreduce", "allgather", "alltoall"])
def test_the_counted_needs_are_the_plans(collective):
    """The ring and all-to-all needs, counted without a plan, are what the plans give, refusals included."""
    from emulator.collectives.algorithms import plan

    for ranks in range(2, 13):
        for size in (1, ranks, 4 * ranks, 1000, 4099, 1 << 20):
            try:
                plans = plan(collective, ranks, size)
                expected = experiment.PlanNeeds(tuple((p.data_bytes, p.staging_bytes) for p in plans),
                                                sum(len(p.peers) for p in plans))
            except FabricError as err:
                expected = str(err)
            try:
                got = experiment.plan_needs(collective, ranks, size, None)
            except FabricError as err:
                got = str(err)
            assert got == expected, (ranks, size)


def test_faults_are_kept_in_order(tmp_path):
    text = MINIMAL + 'faults = [{ at = "100ms", host = "h4", fault = "stall", for = "1s" }, { at = "0s", host = "h1", fault = "stall" }]\n'
    variant = by_name(load_text(tmp_path, text))["a"]
    assert variant.faults == (Fault(100_000_000, "h4", "stall", 1_000_000_000), Fault(0, "h1", "stall", None))
    assert variant.to_json()["faults"][0] == {"at_ns": 100_000_000, "host": "h4", "kind": "stall",
                                              "duration_ns": 1_000_000_000, "fraction": None, "link": None}
    slow = by_name(load_text(tmp_path, MINIMAL + 'faults = [{ at = "0s", host = "h1", fault = "slow", fraction = 0.25 }]\n'))
    assert slow["a"].faults[0].request == "slow 0.25" and variant.faults[0].request == "stall"


def test_a_link_fault_names_two_linked_switches(tmp_path):
    text = MINIMAL.replace('"star,4"', '"leafspine,2,2"') + 'faults = [{ at = "1s", link = "s1-s3", fault = "down", for = "1s" }]\n'
    assert by_name(load_text(tmp_path, text))["a"].faults[0].link == ("s1", "s3")
    ib = text.replace('name = "a"', 'name = "a"\nfabric = "ib"')
    assert by_name(load_text(tmp_path, ib))["a"].faults[0].link == ("s1", "s3")
    two = ib.replace('fault = "down", for = "1s" }]', 'fault = "down", for = "1s" }, '
                                                        '{ at = "2s", link = "s2-s4", fault = "down" }]')
    message = load_error(tmp_path, two)
    assert "fault 2: the ib fabric takes one link down per variant" in message


def test_cc_is_kept_as_written_and_swept(tmp_path):
    exp = load_text(tmp_path, MINIMAL + '[sweep]\ncc = ["none", "dcqcn,rai=5mbit"]\n')
    assert [v.cc for v in exp.variants] == ["none", "dcqcn,rai=5mbit"]
    assert [v.name for v in exp.variants] == ["a-ccnone", "a-ccdcqcn-rai-5mbit"]
    assert by_name(load_text(tmp_path, MINIMAL))["a"].cc == "none"


def test_senders_only_for_incast(tmp_path):
    message = load_error(tmp_path, MINIMAL.replace('"incast"', '"allreduce"') + "senders = 2\n")
    assert 'variant "a": key "senders": only incast and victim have senders, this variant runs allreduce' in message


def test_victim_senders_leave_a_receiver_and_the_victims_idle_host(tmp_path):
    victim = MINIMAL.replace('"incast"', '"victim"')
    assert by_name(load_text(tmp_path, victim))["a"].senders == 2  # star,4: receiver, two senders, the idle host
    message = load_error(tmp_path, victim + "senders = 3\n")
    assert 'key "senders": 3 senders and two receivers need 5 hosts, \'star,4\' has 4 (choose 1 to 2)' in message


def test_switch_settings_are_checked_on_the_topology(tmp_path):
    """512 KiB cannot hold 8 ports x 64 KiB of lossless headroom plus reserves."""
    message = load_error(tmp_path, MINIMAL.replace("star,4", "star,8") + 'buffer = "512KiB"\nheadroom = "64KiB"\n')
    assert 'variant "a": key "switch": --switch buffer=524288 leaves no shared buffer' in message


def test_top_level_value_is_reported_for_the_variant_using_it(tmp_path):
    message = load_error(tmp_path, MINIMAL.replace('size = "64KiB"', 'size = "64 furlongs"'))
    assert 'exp.toml: variant "a": key "size": bad size' in message


def test_an_allreduce_size_must_be_whole_float32s_and_a_tiny_one_runs(tmp_path):
    message = load_error(tmp_path, MINIMAL.replace('"incast"', '"allreduce"').replace('"64KiB"', "10"))
    assert 'variant "a": key "size": allreduce of 10 bytes is not a whole number of float32s' in message
    variant = load_text(tmp_path, MINIMAL.replace('"incast"', '"allreduce"').replace('"64KiB"', "8")).variants[0]
    assert variant.size == 8  # 2 float32s on 4 ranks: two chunks empty (algorithms.ring_chunks)
    message = load_error(tmp_path, MINIMAL.replace('"incast"', '"alltoall"').replace('"64KiB"', "3"))
    assert 'variant "a": key "size": alltoall of 3 bytes over 4 ranks leaves no data per rank' in message


@pytest.mark.parametrize("text, expected", [
    (MINIMAL + 'color = "blue"\n', 'exp.toml: variant "a": unknown key "color"'),
    ('fabrc = "lossy"\n' + MINIMAL, 'exp.toml: unknown key "fabrc" (known: name, description, variants, sweep,'),
    (MINIMAL.replace('name = "mini"', 'name = "Mini Exp"'), 'exp.toml: key "name": expected lowercase letters'),
    (MINIMAL.replace('name = "mini"\n', ""), 'exp.toml: missing key "name"'),
    (MINIMAL.replace('name = "a"', 'name = "../a"'), 'exp.toml: variant 1: key "name": expected letters'),
    (MINIMAL.replace('name = "a"', 'fabric = "lossy"'), 'exp.toml: variant 1: missing key "name"'),
    (MINIMAL.replace('collective = "incast"\n', ""), 'exp.toml: variant "a": missing key "collective"'),
    (MINIMAL.split("[[variants]]")[0], "exp.toml: expected one or more [[variants]] tables"),
    ('description = 3\n' + MINIMAL, 'exp.toml: key "description": expected text'),
    (MINIMAL + '[[variants]]\nname = "a"\n', 'exp.toml: variant "a": name used twice'),
    (MINIMAL + '[sweep]\nloss = [1e-3, 0.001]\n', 'exp.toml: variant "a-loss0.001": name used twice'),
    (MINIMAL + '[sweep]\ndelay = ["1ms"]\n', 'exp.toml: sweep: unknown key "delay" (known: loss, bw, buffer,'),
    (MINIMAL + '[sweep]\nloss = 0.1\n', 'exp.toml: sweep: key "loss": expected a list of values'),
    (MINIMAL + '[sweep]\nloss = []\n', 'exp.toml: sweep: key "loss": expected a list of values'),
    (MINIMAL + '[sweep]\nloss = [2]\n', 'exp.toml: variant "a-loss2": key "loss": bad loss'),
    (MINIMAL + 'loss = 0.1\n[sweep]\nloss = [0]\n', 'exp.toml: variant "a": key "loss" is also swept'),
    (MINIMAL + 'link = { bw = "1gbit" }\n[sweep]\nbw = ["2gbit"]\n', 'variant "a": key "bw" is also swept'),
    (MINIMAL + '[sweep]\nsenders = [1, 4]\n', 'exp.toml: variant "a-senders4": key "senders": 4 senders'),
    (MINIMAL + "name = [\n", "exp.toml: bad TOML: "),
    ("sweep = 3\n" + MINIMAL, "exp.toml: sweep: expected a [sweep] table"),
])
def test_file_mistakes(tmp_path, text, expected):
    assert expected in load_error(tmp_path, text)


def test_not_utf8(tmp_path):
    path = tmp_path / "exp.toml"
    path.write_bytes(b'name = "\xff"\n')
    with pytest.raises(FabricError, match=r"^exp.toml: bad TOML: not UTF-8 text$"):
        load_experiment(str(path))


def test_missing_file_names_it_and_the_builtins(tmp_path):
    missing = str(tmp_path / "nope.toml")
    with pytest.raises(FabricError) as info:
        load_experiment(missing)
    message = str(info.value)
    assert message.startswith(f"{missing}: no such experiment file") and "\n" not in message
    assert "(built-in: dcqcn, deadlock, fidelity, headline, incast-scaling, multi-job, pause-storm, scale, smoke, straggler, training-step, uet, validate, victim)" in message


def test_a_directory_is_not_an_experiment(tmp_path):
    with pytest.raises(FabricError, match="no such experiment file"):
        load_experiment(str(tmp_path))


# --- results directory and config.json --------------------------------------

def test_results_directory():
    now = datetime(2026, 12, 3, 8, 30, 0, 123456, tzinfo=timezone.utc)
    assert results_directory("results", "headline", now) == os.path.join("results", "headline", "20261203T083000Z")


def test_results_directory_converts_to_utc_and_refuses_naive_times():
    paris = timezone(timedelta(hours=1))
    assert results_directory("r", "x", datetime(2026, 12, 3, 9, 30, tzinfo=paris)).endswith("20261203T083000Z")
    with pytest.raises(ValueError):
        results_directory("r", "x", datetime(2026, 12, 3, 8, 30))


def test_run_config():
    exp = load_experiment("headline")
    now = datetime(2026, 12, 3, 8, 30, tzinfo=timezone.utc)
    config = run_config(exp, {"htb": True, "tbf": True, "netem": False}, now=now)
    assert json.loads(json.dumps(config)) == config
    assert (config["experiment"], config["source"]) == ("headline", "built-in:headline")
    assert config["description"] == exp.description
    assert config["created_utc"] == "2026-12-03T08:30:00Z"
    assert re.fullmatch(r"[0-9a-f]{40}(-dirty)?|unknown", config["git_commit"])
    assert config["version"] == emulator.__version__ and re.fullmatch(r"\d+\.\d+\.\d+", config["version"])
    assert config["kernel"] == os.uname().release and isinstance(config["kernel"], str)
    assert re.fullmatch(r"3\.\d+\.\d+.*", config["python"])
    assert config["cpus"] == os.cpu_count()
    assert config["features"] == {"htb": True, "tbf": True, "netem": False}
    assert config["seeds"] == [1]
    assert config["variants"] == [v.to_json() for v in exp.variants]


def test_run_config_without_features_or_time():
    config = run_config(load_experiment("straggler"), None)
    assert config["features"] is None
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", config["created_utc"])


def test_git_commit_outside_a_checkout(tmp_path):
    assert experiment.git_commit(str(tmp_path)) == "unknown"
    assert experiment.git_commit(str(tmp_path / "missing")) == "unknown"


def test_git_commit_only_for_the_top_of_a_checkout(tmp_path):
    """An installed package in a venv inside some checkout is not that checkout's code."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "f").write_text("x")
    subprocess.run(["git", "-C", str(tmp_path), "add", "f"], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"],
                   check=True)
    assert re.fullmatch(r"[0-9a-f]{40}", experiment.git_commit(str(tmp_path)))
    site = tmp_path / "venv" / "lib" / "site-packages"
    site.mkdir(parents=True)
    assert experiment.git_commit(str(site)) == "unknown"


# --- the built-ins are package data; smoke is short ---------------------------------------------------

def test_builtins_are_files_of_the_package():
    files = sorted(entry.name for entry in experiment.BUILTIN.iterdir() if entry.is_file())
    assert files == [f"{name}.toml" for name in builtin_names()]
    # the workload files the built-ins replay, with the licence and notice of where they come from
    assert {entry.name for entry in experiment.BUILTIN_WORKLOADS.iterdir()} >= {"NOTICE", "LICENSE.aicb"}
    assert os.path.dirname(str(experiment.BUILTIN)) == os.path.dirname(experiment.__file__)


def test_builtin_descriptions_are_one_line_each():
    descriptions = experiment.builtin_descriptions()
    assert list(descriptions) == builtin_names()
    for name, text in descriptions.items():
        assert text == load_experiment(name).description
        assert 20 < len(text) <= 100 and len(text.splitlines()) == 1, name


def test_smoke_is_one_short_variant():
    [v] = load_experiment("smoke").variants
    assert (v.topo, v.fabric, v.collective, v.size, v.warmup + v.iterations) == ("star,3", "lossless", "incast",
                                                                                64 << 10, 4)


# --- bounds of a file: size, variants, names ------------------------------------------------------------

def test_a_file_over_one_mib_is_not_read(tmp_path):
    path = tmp_path / "exp.toml"
    path.write_text(MINIMAL + "#" * (1 << 20))
    with pytest.raises(FabricError, match=r"^exp.toml: larger than 1 MiB; not an experiment file$"):
        load_experiment(str(path))


def test_deeply_nested_arrays_are_one_line(tmp_path):
    assert load_error(tmp_path, "a = " + "[" * 5000 + "]" * 5000 + "\n") == (
        "exp.toml: bad TOML: arrays or tables nested too deeply")


def test_at_most_256_variants(tmp_path):
    message = load_error(tmp_path, MINIMAL + "[sweep]\nloss = [" + ", ".join(["0"] * 17) + "]\n"
                         "bw = [" + ", ".join(['"1gbit"'] * 16) + "]\n")
    assert message == "exp.toml: 272 variants (1 [[variants]] x the sweep's values); at most 256"


def test_names_at_most_100_characters(tmp_path):
    assert "at most 100" in load_error(tmp_path, MINIMAL.replace('name = "a"', f'name = "{"a" * 101}"'))
    message = load_error(tmp_path, MINIMAL.replace('name = "a"', f'name = "{"a" * 90}"')
                         + '[sweep]\ntopo = ["star,4,n=4"]\n')
    assert "with its sweep suffixes is longer than 100 characters" in message


def test_messages_stay_one_line_for_hostile_keys_and_names(tmp_path):
    assert load_error(tmp_path, '"a\\u2028b" = 1\n' + MINIMAL).startswith('exp.toml: unknown key "a\\u2028b"')
    assert 'got \'x\\ny\'' in load_error(tmp_path, MINIMAL.replace('name = "a"', 'name = "x\\ny"'))


# --- checks before anything runs: dilated DCQCN, regions, fast on large sweeps ---------------------------------

def test_dcqcn_timers_of_one_frame_time_are_accepted(tmp_path):
    """The floor is one link-MTU frame at the link rate, in the units written: 843 ns at 100 Mbit/s and D = 400."""
    [v] = load_text(tmp_path, MINIMAL + 'cc = "dcqcn,alpha_period=843ns,increase_period=843ns"\n').variants
    assert v.cc == "dcqcn,alpha_period=843ns,increase_period=843ns"


def test_a_calibrated_rate_is_not_swept(tmp_path):
    """The sweep's rates are what the calibration records after the run: "calibrated" there failed only then."""
    message = load_error(tmp_path, MINIMAL + '[sweep]\nbw = ["calibrated", "100mbit"]\n')
    assert message == ('exp.toml: sweep: key "bw": "calibrated" is no rate to sweep: a bw sweep measures the rates '
                       'the calibration records; set bw = "calibrated" outside [sweep]')


def test_a_sweep_makes_each_fabric_plan_and_collective_plan_once(tmp_path, monkeypatch):
    """Variants that share a topology share its plan and its connectivity search, whatever their link options,
    and those that share a collective plan share it: a 256-variant sweep on fattree,16 remade both for every
    variant (minutes of checks).  The checks compute no routes: whether every switch reaches every host is one
    search."""
    import emulator.fabric.plan

    experiment.topology.cache_clear()
    experiment._cabling.cache_clear()
    experiment.plan_needs.cache_clear()
    routes, searches, fabric_plans, plans = [], [], [], []
    real_routes, real_search, real_fabric_plans, real_plans = emulator.fabric.plan.routes_over, \
        experiment.check_connected, experiment.make_plan, experiment.rank_plans
    monkeypatch.setattr(emulator.fabric.plan, "routes_over", lambda graph: routes.append(1) or real_routes(graph))
    monkeypatch.setattr(experiment, "check_connected", lambda graph: searches.append(1) or real_search(graph))
    monkeypatch.setattr(experiment, "make_plan", lambda *args, **kwargs: fabric_plans.append(args)
                        or real_fabric_plans(*args, **kwargs))
    monkeypatch.setattr(experiment, "rank_plans", lambda *args: plans.append(args) or real_plans(*args))
    text = MINIMAL.replace("star,4", "leafspine,2,2") + '[sweep]\nbw = ["10mbit", "20mbit", "50mbit", "100mbit"]\n' \
                                                         'fabric = ["lossless", "lossy"]\nsize = ["64KiB", "1MiB"]\n'
    exp = load_text(tmp_path, text)
    assert len(exp.variants) == 16
    assert (len(routes), len(searches)) == (0, 1)
    assert len(fabric_plans) == 1  # without routes, for the topology
    assert {v.link["bw"] for v in exp.variants} == {"10mbit", "20mbit", "50mbit", "100mbit"}
    assert sorted(plans) == [("incast", 4, 64 << 10, 3), ("incast", 4, 1 << 20, 3)]


def test_slow_checks_say_how_far_they_got():
    times = iter([0.0, 1.0, 2.5, 3.0, 4.4, 4.6])
    lines: list[str] = []
    progress = experiment._Progress(5, lines.append, clock=lambda: next(times))
    for _ in range(5):
        progress.checked()
    assert lines == ["checking the experiment: 2/5 variants in 2 s", "checking the experiment: 5/5 variants in 5 s"]


def test_the_checks_read_each_link_as_the_fabric_plan_has_it(monkeypatch):
    """Links grouped by their own options (a custom topology may give some a rate or MTU of their own) take a
    variant's link options as make_plan gives them to each port."""
    from mininet.topo import Topo
    from emulator.fabric.plan import make_plan

    topo = Topo()
    s1, s2 = topo.addSwitch("s1"), topo.addSwitch("s2")
    topo.addLink(topo.addHost("h1"), s1)
    topo.addLink(topo.addHost("h2"), s1, bw="10mbit", mtu=1500)
    topo.addLink(topo.addHost("h3"), s2)
    topo.addLink(s1, s2, delay="5us")
    monkeypatch.setattr(experiment, "topology", lambda spec: topo)
    experiment._cabling.cache_clear()
    link = {"bw": "100mbit", "delay": "1us", "mtu": "4200", "loss": "0", "drop": ""}
    links = experiment._cabling("custom").links(link)
    experiment._cabling.cache_clear()
    plan = make_plan(topo, "x", link)
    assert links.hosts == {(h.ports[0].params.bw_bps, h.ports[0].params.mtu) for h in plan.hosts()} \
        == {(100_000_000, 4200), (10_000_000, 1500)}
    assert links.switches == {(max(p.params.bw_bps for p in s.ports), max(p.params.delay_ns for p in s.ports),
                               max(p.params.mtu for p in s.ports), len(s.ports)) for s in plan.switches()} \
        == {(100_000_000, 5000, 4200, 3), (100_000_000, 5000, 4200, 2)}
    assert links.mtu == min(port.params.mtu for port, _ in plan.links) == 1500


def test_link_loss_on_the_ib_fabric_is_refused_where_it_would_be_none(tmp_path):
    """The emulated IB switches bypass the loss model, the simulated ones lose frames on the hosts' links only:
    a loss there would silently be none (or half of it)."""
    path = tmp_path / "ibloss.toml"
    for backend, topo, message in (("emulator", "star,4", "the emulated ib fabric loses no frame"),
                                   ("sim", "leafspine", "the simulated ib fabric loses frames on the hosts' links only")):
        path.write_text(f'name = "x"\ntopo = "{topo}"\nbackend = "{backend}"\nfabric = "ib"\ncollective = "allreduce"\n'
                        'size = 4096\nlink = { loss = 0.001 }\n[[variants]]\nname = "v"\n')
        with pytest.raises(FabricError, match=message):
            load_experiment(str(path))
    path.write_text('name = "x"\ntopo = "star,4"\nbackend = "sim"\nfabric = "ib"\ncollective = "allreduce"\n'
                    'size = 4096\nlink = { loss = 0.001 }\n[[variants]]\nname = "v"\n')
    assert load_experiment(str(path)).variants[0].link["loss"] == "0.001"
