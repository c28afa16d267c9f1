"""What the command line does with bad input, and without root.

None of these tests may build anything, even when pytest runs as root:
the input errors come before the root check, the root check is made to
fail by patching geteuid, and as a backstop Fabric.start and pyroute2's
namespace calls are replaced by traps that fail the test.
"""

import os
import signal
import socket
import subprocess
import sys
import threading

import pytest

import emulator.fabric.builder
import emulator.fabric.capacity
import emulator.fabric.privileges
from emulator import cli
from emulator.fabric import runstate
from emulator.errors import FabricError
from emulator.fabric.plan import DEFAULT_LINK


class Trap(BaseException):
    """Not an Exception: main() must not be able to swallow it."""


@pytest.fixture(autouse=True)
def no_side_effects(monkeypatch, tmp_path):
    def trap(*args, **kwargs):
        raise Trap("a CLI input test reached code that builds or removes namespaces")

    monkeypatch.setattr(emulator.fabric.builder.Fabric, "start", trap)
    monkeypatch.setattr(emulator.fabric.builder, "create_namespace", trap)
    monkeypatch.setattr(runstate, "destroy", trap)
    monkeypatch.setattr(runstate, "clean", trap)
    monkeypatch.setattr(runstate, "RUN_ROOT", str(tmp_path / "fabric-emu"))
    # main() installs a SIGTERM handler; give pytest its own back
    saved = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, saved)


@pytest.fixture
def non_root(monkeypatch):
    monkeypatch.setattr(emulator.fabric.privileges.os, "geteuid", lambda: 1000)


@pytest.fixture
def as_root(monkeypatch):
    monkeypatch.setattr(emulator.fabric.privileges.os, "geteuid", lambda: 0)


def run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code, out, err, *fragments):
    assert code != 0
    assert out == ""
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("fabric-emu: ")
    assert err.endswith("\n")
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@pytest.mark.parametrize("argv, fragments", [
    (["pingall", "--topo", "fattree,3"], ["fattree,3", "k must be even"]),
    (["pingall", "--topo", "nosuch"], ["unknown topology 'nosuch'", "fattree"]),
    (["pingall", "--topo", "star", "--link", "bw=fast"], ["bad rate 'fast'"]),
    (["pingall", "--topo", "star", "--link", "colour=red"], ["unknown --link option 'colour'", "bw, delay, drop, loss, mtu"]),
    (["pingall", "--topo", "star", "--link", "loss=2"], ["bad loss '2'", "0 to 1"]),
    (["pingall", "--topo", "star", "--link", "drop=x"], ["bad drop 'x'"]),
    (["pingall", "--topo", "star", "--switch", "colour=red"], ["unknown --switch option 'colour'"]),
    (["pingall", "--topo", "star", "--switch", "alpha=x"], ["bad --switch alpha='x'"]),
    (["pingall", "--topo", "star", "--switch", "lossless=9"], ["priorities are 0 to 7"]),
    (["pingall", "--topo", "star", "--switch", "buffer=fast"], ["fast"]),
    (["pingall", "--topo", "star", "--link", "bw"], ["bad --link option 'bw'", "key=value"]),
    (["pingall", "--topo", "star", "--link", "mtu=100"], ["bad mtu 100"]),
    (["pingall", "--topo", "star", "--link", "delay=-5us"], ["-5us"]),
    (["pingall", "--topo", "star", "--custom", "/nonexistent.py"], ["/nonexistent.py", "not found"]),
    (["pingall", "--topo", "star,0"], ["n must be at least 1"]),
    (["pingall", "--topo", ""], ["empty topology spec"]),
    (["up", "--topo", "ring,2"], ["n must be at least 3"]),
    (["up", "--topo", "leafspine,2,colour=3"], ["unknown keyword 'colour'"]),
    (["up", "--topo", "star", "--cc", "cubic"], ["unknown congestion control 'cubic'", "none, dcqcn"]),
    (["up", "--topo", "star", "--cc", "dcqcn,rai=fast"], ["dcqcn rai: bad rate 'fast'"]),
    (["up", "--topo", "star", "--cc", "dcqcn", "--fabric", "ib"], ["dcqcn is RoCE's congestion control"]),
    # within range as written, out of it once dilated (D = 2000), and timers shorter than a frame of the link
    (["up", "--topo", "star", "--cc", "dcqcn,cnp_interval=60s", "--model", "40gbit", "--link", "bw=20mbit"],
     ["dcqcn cnp_interval 60 s is 120000 s at time dilation D = 2000 (times x D), over the 86400 s"]),
    (["up", "--topo", "star", "--cc", "dcqcn,increase_period=86400s", "--link", "bw=20mbit"],
     ["dcqcn increase_period 86400 s is 172800000 s at time dilation D = 2000"]),
    (["up", "--topo", "star", "--cc", "dcqcn,alpha_period=1ns"],
     ["dcqcn alpha_period 1 ns is shorter than one 1514-byte frame at the link rate, 303 ns"]),
    (["up", "--topo", "star", "--switch", "fc_floor=1ms"], ["--switch fc_floor=... sets IB's link credits: --fabric lossless has none"]),
    (["pingall", "--topo", "star", "--fabric", "lossy", "--switch", "vl_buffer=64KiB"],
     ["--switch vl_buffer=... sets IB's link credits: --fabric lossy has none"]),
    (["up", "--topo", "star", "--spray", "oblivious"],
     ["--spray chooses UET's entropy values: --fabric lossless sends each flow on one path"]),
    (["up", "--topo", "star", "--fabric", "uet", "--cc", "dcqcn"],
     ["congestion control 'dcqcn': the uet fabric's RNICs run nscc[,target_delay=TIME,gamma=X], or none"]),
    (["up", "--topo", "star", "--cc", "nscc"], ["nscc is the uet fabric's congestion control: use fabric uet"]),
    (["up", "--topo", "star", "--fabric", "uet", "--cc", "nscc,gamma=3"], ["nscc gamma '3': above 0 and at most 1"]),
    (["up", "--topo", "star", "--fabric", "ib", "--rccc"],
     ["--rccc turns on UET's receiver credits: --fabric ib has none"]),
    (["up", "--topo", "star", "--fabric", "uet", "--routing", "adaptive"],
     ["--routing chooses the IB subnet manager's routing: --fabric uet routes by ECMP"]),
    (["up", "--topo", "star", "--fabric", "ib", "--link", "loss=0.01"],
     ["the emulated ib fabric loses no frame to injected loss yet", "remove loss and drop from --link"]),
])
@pytest.mark.parametrize("root", [False, True], ids=["nonroot", "root"])
def test_bad_input_is_one_line_before_any_root_check(capsys, monkeypatch, argv, fragments, root):
    monkeypatch.setattr(emulator.fabric.privileges.os, "geteuid", lambda: 0 if root else 1000)
    code, out, err = run(capsys, *argv)
    assert_one_line_error(code, out, err, *fragments)
    assert code == 1   # an input error, not the missing-root error (2)


def test_bad_custom_file_is_one_line(capsys, tmp_path):
    custom = tmp_path / "broken.py"
    custom.write_text("topos = {'x': lambda: 1 / 0}\nraise RuntimeError('oops\\nsecond line')\n")
    code, out, err = run(capsys, "pingall", "--topo", "x", "--custom", str(custom))
    assert_one_line_error(code, out, err, "RuntimeError", "oops second line")


def test_bad_run_name_as_root(capsys, as_root):
    code, out, err = run(capsys, "up", "--topo", "star", "--name", "Bad-Name")
    assert_one_line_error(code, out, err, "bad run name 'Bad-Name'")
    assert code == 1


def test_bad_run_name_without_root_reports_root_first(capsys, non_root):
    code, out, err = run(capsys, "up", "--topo", "star", "--name", "Bad-Name")
    assert_one_line_error(code, out, err, "root")
    assert code == 2


@pytest.mark.parametrize("argv", [
    ["up", "--topo", "star,2"],
    ["pingall", "--topo", "star,2"],
    ["clean"],
    ["down"],
    ["down", "--run", "demo1"],
    ["exec", "h1", "--", "true"],
    ["stats"],
])
def test_commands_that_need_root(capsys, non_root, argv):
    code, out, err = run(capsys, *argv)
    assert_one_line_error(code, out, err)
    assert code == 2
    assert "sudo" in err and "root" in err


def test_list_needs_no_root(capsys, non_root):
    assert run(capsys, "list") == (0, "no fabric is up\n", "")
    code, out, err = run(capsys, "list", "--json")
    assert (code, out.strip(), err) == (0, "[]", "")


def test_list_shows_a_saved_run(capsys, non_root):
    runstate.RunState(run="demo1", owner_pid=0, created=1.0, topo="star,2", namespaces=["demo1-h1"],
                      nodes={"h1": {"kind": "host", "netns": "demo1-h1", "ip": "10.0.0.1"},
                             "h2": {"kind": "host", "netns": "demo1-h2", "ip": "10.0.0.2"},
                             "s1": {"kind": "switch", "netns": "demo1-s1", "ip": None}},
                      detached=True).save()
    code, out, err = run(capsys, "list")
    assert code == 0 and err == ""
    header, row = out.splitlines()
    assert header.split() == ["RUN", "TOPOLOGY", "HOSTS", "SWITCHES", "STATUS"]
    assert row.split()[:4] == ["demo1", "star,2", "2", "1"]
    assert "up (0/0 agents running)" in row


def test_topos_lists_the_five_builtins(capsys):
    code, out, err = run(capsys, "topos")
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert [line.split("(")[0] for line in lines] == ["dumbbell", "fattree", "leafspine", "ring", "star"]
    assert lines[0].startswith("dumbbell(n=2): Two switches joined by one bottleneck link.")
    assert lines[1].startswith("fattree(k=4): The k-ary fat tree")
    assert lines[2].startswith("leafspine(leaves=2, spines=2, hosts=2): Two-tier Clos")
    assert lines[3].startswith("ring(n=4, hosts=1): Switches")
    assert lines[4].startswith("star(n=4): One switch")


def test_dissector_prints_the_installed_lua_script(capsys):
    code, out, err = run(capsys, "dissector")
    assert code == 0 and err == ""
    path = out.strip()
    assert path.endswith("uet.lua") and "register" in open(path).read()


def test_unknown_command_is_argparse_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["frobnicate"])
    assert exc.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


# --- parse_options --------------------------------------------------------------------------


def test_parse_options_empty():
    assert cli.parse_options(None, DEFAULT_LINK, "--link") == {}
    assert cli.parse_options("", DEFAULT_LINK, "--link") == {}


def test_parse_options_values():
    assert cli.parse_options("bw=50mbit,delay=5us", DEFAULT_LINK, "--link") == {"bw": "50mbit", "delay": "5us"}
    assert cli.parse_options(" bw = 1gbit , mtu=9000", DEFAULT_LINK, "--link") == {"bw": "1gbit", "mtu": "9000"}
    assert cli.parse_options("bw=1gbit,bw=2gbit", DEFAULT_LINK, "--link") == {"bw": "2gbit"}
    # only the first '=' separates
    assert cli.parse_options("x=a=b", {"x": None}, "--thing") == {"x": "a=b"}


@pytest.mark.parametrize("text, message", [
    ("bw", "bad --link option 'bw': expected key=value, e.g. bw=50mbit"),
    ("bw=", "bad --link option 'bw=': expected key=value"),
    ("bw=  ", "bad --link option 'bw=  '"),
    ("bw=1gbit,", "bad --link option ''"),
    (",bw=1gbit", "bad --link option ''"),
    ("colour=red", "unknown --link option 'colour'; known: bw, delay, drop, loss, mtu"),
    ("BW=1gbit", "unknown --link option 'BW'"),
    ("=5", "unknown --link option ''"),
])
def test_parse_options_errors(text, message):
    with pytest.raises(FabricError) as exc:
        cli.parse_options(text, DEFAULT_LINK, "--link")
    assert str(exc.value).startswith(message)
    assert "\n" not in str(exc.value)


def test_parse_options_names_the_option_group():
    with pytest.raises(FabricError, match="unknown --switch option 'q'; known: buffer, ecn"):
        cli.parse_options("q=1", {"ecn": 1, "buffer": 2}, "--switch")


def test_geteuid_patch_reaches_require_root(non_root):
    # the fixtures above rely on this: emulator.fabric.privileges looks geteuid up at call time
    assert os.geteuid() == 1000
    with pytest.raises(FabricError):
        emulator.fabric.privileges.require_root()


# --- numbers out of range, and the tracebacks, as one line --------------------------------------

NINES_400, NINES_5000 = "9" * 400, "9" * 5000


WIDEST = "at most 16384 on any backend (the emulator runs 2048)"


@pytest.mark.parametrize("argv, fragments", [
    (["perf", "write", "h2", "--iters", NINES_400], ["--iters '99999", "(400 characters): must be 1 to 1000000"]),
    (["perf", "write", "h2", "--iters", NINES_5000], ["(5000 characters): must be 1 to 1000000"]),
    (["perf", "write", "h2", "--iters", "0"], ["--iters '0': must be 1 to 1000000"]),
    (["perf", "write", "h2", "--port", "65536"], ["--port '65536': must be 1 to 65535"]),
    (["perf", "write", "h2", "--seed", "-1"], ["--seed '-1': must be 0 to 4294967295"]),
    (["perf", "write", "h2", "--mtu", NINES_400], ["--mtu '9999", "must be 256 to 4096"]),
    (["perf", "write", "h2", "--size", NINES_400], ["bad size '9999", "longer than 64 characters"]),
    (["perf", "write", "h2", "--size", "8EB"], ["bad size '8EB'"]),
    (["up", "--topo", "star", "--seed", NINES_5000], ["--seed '9999", "must be 0 to 4294967295"]),
    (["pingall", "--topo", "star", "--seed", "4294967296"], ["--seed '4294967296': must be 0 to 4294967295"]),
    (["pingall", "--topo", "star", "--timeout", "nan"], ["--timeout 'nan': must be 0.1 to 60"]),
    (["pingall", "--topo", "star", "--timeout", "1e400"], ["--timeout '1e400': must be 0.1 to 60"]),
    (["demo", "--seconds", "0"], ["--seconds '0': must be 1 to 3600"]),
    (["demo", "--bw", "900gbit"], ["bad bw '900gbit': a link runs at 1 kbit/s to 800 Gbit/s"]),
    (["pingall", "--topo", "star", "--link", "bw=1bit"], ["bad bw '1bit': a link runs at 1 kbit/s to 800 Gbit/s"]),
    (["pingall", "--topo", "star", "--link", "delay=2s"], ["bad delay '2s': at most 1 s"]),
    (["pingall", "--topo", "star", "--link", f"drop={NINES_5000}"], ["bad drop", "must be 1 to 1000000000000"]),
    (["pingall", "--topo", "star", "--link", f"loss={NINES_400}"], ["bad loss", "a probability is 0 to 1"]),
    (["pingall", "--topo", "star", "--switch", "buffer=2GiB"], ["bad --switch buffer='2GiB': at most 1 GiB"]),
    (["pingall", "--topo", "star", "--switch", "quanta=1.5"], ["--switch quanta = '1.5': expected a whole number"]),
    (["pingall", "--topo", "star", "--switch", f"lossless={NINES_5000}"], ["expected priorities 0-7"]),
    (["pingall", "--topo", "star,100000"], ["'star,100000': 100001 nodes", WIDEST]),
    (["up", "--topo", "fattree,k=40"], ["'fattree,k=40': 18000 nodes (16000 hosts, 2000 switches)", WIDEST]),
    (["up", "--topo", "fattree,24"], ["topology 'fattree,24': 4176 nodes (3456 hosts, 720 switches); at most 2048 "
                                      "on one machine (the emulator)"]),
    (["pingall", "--topo", "fattree,20"], ["'fattree,20': 2500 nodes", "at most 2048 on one machine (the emulator)"]),
    (["demo", "--topo", "fattree,20"], ["'fattree,20': 2500 nodes", "at most 2048 on one machine (the emulator)"]),
    (["ibroute", "--topo", "star,100000"], [WIDEST]),
    (["ibroute", "--topo", "fattree,32"], ["topology 'fattree,32': 1,280 switches x 8,192 hosts = 10,485,760 routes; "
                                           "the simulation backend plans and builds at most 8,000,000"]),
    (["ibroute", "--topo", f"ring,{NINES_5000}"], ["ring,9999", "(5005 characters): longer than 200 characters"]),
    (["ibroute", "--topo", f"ring,{NINES_400[:150]}"], ["nodes", WIDEST]),
])
def test_numbers_out_of_range_are_one_line(capsys, non_root, argv, fragments):
    code, out, err = run(capsys, *argv)
    assert_one_line_error(code, out, err, *fragments)
    assert code == 1   # an input error, found before any root check


def test_a_value_of_double_dash_is_one_line_not_an_empty_list(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["up", "--topo", "star", "--seed=--"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err == "fabric-emu: argument --seed: expected one argument (see fabric-emu --help)\n"


def test_argparse_errors_are_one_line(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["perf", "write", "h2", "--mtu", "300"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err == ("fabric-emu: argument --mtu: invalid choice: 300 (choose from 256, 512, "
                                       "1024, 2048, 4096) (see fabric-emu perf --help)\n")


def test_ranges_take_their_bounds(capsys):
    args = cli._parse(["perf", "write", "h2", "--iters", "1000000", "--port", "1", "--seed", "4294967295"])
    assert (args.iters, args.port, args.seed) == (1_000_000, 1, 2**32 - 1)
    assert cli._parse(["pingall", "--topo", "star", "--timeout", "0.1"]).timeout == 0.1


EXPERIMENT = """
name = "mine"
topo = "star,3"
collective = "incast"
size = "64KiB"
{extra}

[[variants]]
name = "a"
"""


@pytest.mark.parametrize("extra, fragments", [
    (f'size = "{NINES_400}"', ['variant "a": key "size": bad size \'9999', "longer than 64 characters"]),
    (f"size = {NINES_400}", ['key "size": bad size 999999999999... (400 digits): too large']),
    (f"seed = {NINES_5000}", ["mine.toml: bad TOML: Exceeds the limit (4300 digits) for integer string conversion"]),
    (f"seed = {NINES_400}", ['key "seed" = 999999999999... (400 digits): must be 0 to 4294967295']),
    ("iterations = 100000", ['key "iterations" = 100000: must be 1 to 10000']),
    (f"link = {{ mtu = {NINES_400} }}", ['key "link.mtu": number 999999999999... (400 digits) is too large']),
    (f"[sweep]\nsize = [{NINES_400}]", ['mine.toml: sweep: key "size": number 999999999999... (400 digits)']),
    (f"mtu = {NINES_400}", ['key "mtu": RDMA path MTU 999999999999... (400 digits): choose one of']),
])
def test_run_with_huge_numbers_in_the_file_is_one_line(capsys, non_root, tmp_path, extra, fragments):
    path = tmp_path / "mine.toml"
    text = EXPERIMENT.format(extra=extra)
    if extra.startswith("size"):
        text = text.replace('size = "64KiB"\n', "")
    path.write_text(text)
    code, out, err = run(capsys, "run", str(path))
    assert_one_line_error(code, out, err, "mine.toml: ", *fragments)
    assert code == 1


def test_run_list_prints_every_builtin_with_its_description(capsys, non_root):
    code, out, err = run(capsys, "run", "--list")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert [line.split()[0] for line in lines] == ["dcqcn", "deadlock", "fidelity", "headline", "incast-scaling", "multi-job", "pause-storm", "scale", "smoke", "straggler", "training-step", "uet", "validate", "victim"]
    assert lines[3] == ("headline        Incast and ring all-reduce on star,8: lossless and lossy Ethernet, "
                        "and InfiniBand-like credits.")
    assert all(len(line.split(None, 1)[1]) > 20 for line in lines)


def test_run_on_the_simulation_backend_needs_no_root(capsys, non_root, tmp_path):
    code, out, err = run(capsys, "run", "smoke", "--backend", "sim", "--out", str(tmp_path))
    assert code == 0, err
    assert "incast-lossless" in out and "simulated" in err and "must run as root" not in err
    [directory] = (tmp_path / "smoke").iterdir()
    assert '"backend": "sim"' in (directory / "results.json").read_text()


def test_run_on_the_emulator_needs_root(capsys, non_root, tmp_path):
    code, out, err = run(capsys, "run", "smoke", "--backend", "emulator", "--out", str(tmp_path))
    assert_one_line_error(code, out, err, "root")
    assert not (tmp_path / "smoke").exists()


def test_run_without_an_experiment_is_one_line(capsys, non_root):
    code, out, err = run(capsys, "run")
    assert_one_line_error(code, out, err, "run needs an experiment", "run --list")


@pytest.fixture
def root_granted(monkeypatch):
    """The command's root check passes; the traps of no_side_effects still stop any build."""
    monkeypatch.setattr(cli, "require_root", lambda: None)


def test_run_out_on_an_existing_file_is_one_line(capsys, root_granted, tmp_path):
    existing = tmp_path / "results"
    existing.write_text("not a directory")
    code, out, err = run(capsys, "run", "smoke", "--out", str(existing))
    assert_one_line_error(code, out, err, f"--out {str(existing)!r}: cannot create", "Not a directory")
    assert existing.read_text() == "not a directory"


def test_run_out_on_an_unwritable_path_is_one_line(capsys, root_granted):
    """/proc takes no directories, not even from root."""
    code, out, err = run(capsys, "run", "smoke", "--out", "/proc/fabric-emu-results")
    assert_one_line_error(code, out, err, "--out '/proc/fabric-emu-results': cannot create")
    assert not os.path.exists("/proc/fabric-emu-results")


def test_run_refuses_a_variant_the_machine_cannot_hold(capsys, root_granted, tmp_path, monkeypatch):
    import emulator.bounds

    monkeypatch.setattr(emulator.fabric.capacity, "meminfo_bytes", lambda field, path="/proc/meminfo": 512 << 20)
    path = tmp_path / "mine.toml"
    path.write_text(EXPERIMENT.format(extra="").replace("star,3", "fattree,8"))
    code, out, err = run(capsys, "run", str(path), "--out", str(tmp_path / "out"))
    assert_one_line_error(code, out, err, "variant a (fattree,8) needs about 656 MiB of memory (256 MiB, 208 nodes x 1 MiB",
                          "this machine has 512 MiB available")
    assert not (tmp_path / "out").exists()


def test_a_custom_topology_whose_build_raises_is_one_line_naming_the_file(capsys, non_root, tmp_path):
    custom = tmp_path / "mytopo.py"
    custom.write_text("from mininet.topo import Topo\n"
                      "class Broken(Topo):\n"
                      "    def build(self):\n"
                      "        raise RuntimeError('the cabling plan is lost\\nsecond line')\n"
                      "topos = {'broken': Broken}\n")
    for command in (["pingall"], ["up"], ["ibroute"]):
        code, out, err = run(capsys, *command, "--topo", "broken", "--custom", str(custom))
        assert_one_line_error(code, out, err, f"custom topology file {str(custom)!r}: topology 'broken' failed: "
                              "RuntimeError: the cabling plan is lost second line")


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_stats_with_a_dead_agent_names_it_in_one_line(capsys, root_granted, tmp_path):
    state = runstate.RunState(run="dead1", owner_pid=0, created=1.0, topo="star,1", namespaces=[],
                              nodes={"s1": {"kind": "switch", "netns": "dead1-s1", "ip": None},
                                     "h1": {"kind": "host", "netns": "dead1-h1", "ip": "10.0.0.1"}},
                              agents={"s1": os.getpid(), "h1": _dead_pid()}, detached=True)
    state.save()
    # s1 answers as a live agent would; h1's agent is dead and its socket gone.
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(os.path.join(state.directory, "s1.sock"))
    server.listen(1)

    def answer() -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(100)
            conn.sendall(b'{"totals": {}}')

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    try:
        code, out, err = run(capsys, "stats")
    finally:
        thread.join(timeout=5)
        server.close()
    assert_one_line_error(code, out, err, f"host h1's agent (pid {state.agents['h1']}) does not answer",
                          "and is gone", "h1.log", "fabric-emu down --run dead1")


# --- stop signals: quiet, and the first one's cleanup is not interrupted ----------------------------------------

def _python(code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30, env=env)


def test_sigterm_while_the_interpreter_exits_is_quiet():
    """The perf client's 'Exception ignored in atexit callback ... SystemExit: 143': a SIGTERM that
    arrives after the command returned, here from an atexit callback, must end it with 143 and nothing
    on stderr, its output delivered."""
    done = _python("import atexit, os, signal, sys, time\n"
                   "from emulator import cli\n"
                   "atexit.register(lambda: (os.kill(os.getpid(), signal.SIGTERM), time.sleep(5)))\n"
                   "sys.exit(cli.main(['topos']))\n")
    assert (done.returncode, done.stderr) == (143, "")
    assert done.stdout.startswith("dumbbell(n=2): ")


def test_a_second_sigterm_does_not_interrupt_the_cleanup():
    done = _python("import os, signal, sys, time\n"
                   "from emulator import cli\n"
                   "def command(args):\n"
                   "    try:\n"
                   "        os.kill(os.getpid(), signal.SIGTERM)\n"
                   "        time.sleep(5)\n"
                   "    finally:\n"
                   "        os.kill(os.getpid(), signal.SIGTERM)\n"
                   "        time.sleep(0.2)\n"
                   "        print('cleaned up', flush=True)\n"
                   "cli.cmd_topos = command\n"
                   "sys.exit(cli.main(['topos']))\n")
    assert (done.returncode, done.stdout, done.stderr) == (143, "cleaned up\n", "")


@pytest.mark.parametrize("link, model, fragment", [
    ("bw=20mbit", "10mbit", "modelled rate 10 Mbit/s is below the emulated link rate 20 Mbit/s"),
    ("bw=20mbit", "fast", "bad rate 'fast'"),
    ("bw=20mbit,delay=100us", "400gbit", "the link delay '100us' of the modelled fabric is 2 s at D = 20000"),
])
def test_up_with_a_bad_model_is_one_line_before_root(capsys, non_root, link, model, fragment):
    code, out, err = run(capsys, "up", "--topo", "star,2", "--link", link, "--model", model)
    assert_one_line_error(code, out, err, fragment)


def test_up_with_a_model_says_d_and_the_delay_it_waits(capsys, non_root):
    code, out, err = run(capsys, "up", "--topo", "star,2", "--link", "bw=20mbit,delay=1us", "--model", "400gbit")
    lines = err.splitlines()
    assert lines[0] == ("fabric-emu: modelled at 400gbit: D = 20000; link delay 1us (modelled) is waited 20000000ns "
                        "here; measured times divided by D are the modelled fabric's")
    assert code != 0 and "root" in lines[-1]  # then it asks for root, as every up does
