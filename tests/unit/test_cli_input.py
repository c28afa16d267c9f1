"""What the command line does with bad input, and without root.

None of these tests may build anything, even when pytest runs as root:
the input errors come before the root check, the root check is made to
fail by patching geteuid, and as a backstop Fabric.start and pyroute2's
namespace calls are replaced by traps that fail the test.
"""

import os
import signal

import pytest

import emulator.fabric
from emulator import cli, runstate
from emulator.errors import FabricError
from emulator.plan import DEFAULT_LINK


class Trap(BaseException):
    """Not an Exception: main() must not be able to swallow it."""


@pytest.fixture(autouse=True)
def no_side_effects(monkeypatch, tmp_path):
    def trap(*args, **kwargs):
        raise Trap("a CLI input test reached code that builds or removes namespaces")

    monkeypatch.setattr(emulator.fabric.Fabric, "start", trap)
    monkeypatch.setattr(emulator.fabric, "create_namespace", trap)
    monkeypatch.setattr(runstate, "destroy", trap)
    monkeypatch.setattr(runstate, "clean_all", trap)
    monkeypatch.setattr(runstate, "RUN_ROOT", str(tmp_path / "fabric-emu"))
    # main() installs a SIGTERM handler; give pytest its own back
    saved = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, saved)


@pytest.fixture
def non_root(monkeypatch):
    monkeypatch.setattr(emulator.fabric.os, "geteuid", lambda: 1000)


@pytest.fixture
def as_root(monkeypatch):
    monkeypatch.setattr(emulator.fabric.os, "geteuid", lambda: 0)


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
])
@pytest.mark.parametrize("root", [False, True], ids=["nonroot", "root"])
def test_bad_input_is_one_line_before_any_root_check(capsys, monkeypatch, argv, fragments, root):
    monkeypatch.setattr(emulator.fabric.os, "geteuid", lambda: 0 if root else 1000)
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
    # the fixtures above rely on this: emulator.fabric looks geteuid up at call time
    assert os.geteuid() == 1000
    with pytest.raises(FabricError):
        emulator.fabric.require_root()
