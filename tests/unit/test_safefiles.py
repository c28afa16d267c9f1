"""Reading and writing in directories someone else wrote: no link followed, bounded reads, all-or-none outputs."""

import os

import pytest

from emulator.errors import FabricError
from emulator.safefiles import Outputs, list_inside, open_inside, read_inside


@pytest.fixture
def sandbox(tmp_path):
    """DIR (tmp_path/d) beside a file and a directory outside it that links may point to."""
    (tmp_path / "d").mkdir()
    (tmp_path / "outside.txt").write_text("the user's own file")
    (tmp_path / "elsewhere").mkdir()
    return tmp_path


def one_line(err, *fragments):
    text = str(err.value)
    assert "\n" not in text
    for fragment in fragments:
        assert fragment in text, text


# --- reading ---------------------------------------------------------------------------------------


def test_read_a_file_and_a_missing_one(sandbox):
    (sandbox / "d" / "sub").mkdir()
    (sandbox / "d" / "sub" / "f").write_bytes(b"abc")
    assert read_inside(str(sandbox / "d"), "sub/f", 3) == b"abc"
    assert read_inside(str(sandbox / "d"), "sub/nope", 3) is None
    assert read_inside(str(sandbox / "d"), "nosub/f", 3) is None


def test_read_over_the_limit(sandbox):
    (sandbox / "d" / "f").write_bytes(b"abcd")
    with pytest.raises(FabricError) as err:
        read_inside(str(sandbox / "d"), "f", 3)
    one_line(err, "d/f is larger than 3 B, the limit for this file")


def test_read_refuses_a_link_to_a_file(sandbox):
    os.symlink(sandbox / "outside.txt", sandbox / "d" / "f")
    with pytest.raises(FabricError) as err:
        read_inside(str(sandbox / "d"), "f", 100)
    one_line(err, "d/f is a symbolic link: not followed")


def test_read_refuses_a_link_to_a_directory_on_the_way(sandbox):
    (sandbox / "elsewhere" / "f").write_text("x")
    os.symlink(sandbox / "elsewhere", sandbox / "d" / "sub")
    with pytest.raises(FabricError) as err:
        read_inside(str(sandbox / "d"), "sub/f", 100)
    one_line(err, "d/sub is a symbolic link: not followed")


def test_read_refuses_a_fifo_without_opening_it(sandbox):
    os.mkfifo(sandbox / "d" / "f")  # opening it for reading would block until a writer came
    with pytest.raises(FabricError) as err:
        read_inside(str(sandbox / "d"), "f", 100)
    one_line(err, "d/f is not a regular file")


def test_read_refuses_a_directory_and_a_dangling_link(sandbox):
    (sandbox / "d" / "f").mkdir()
    os.symlink(sandbox / "nowhere", sandbox / "d" / "g")
    with pytest.raises(FabricError) as err:
        read_inside(str(sandbox / "d"), "f", 100)
    one_line(err, "d/f is not a regular file")
    with pytest.raises(FabricError) as err:
        read_inside(str(sandbox / "d"), "g", 100)
    one_line(err, "d/g is a symbolic link")


def test_dot_dot_is_not_a_name_to_read(sandbox):
    with pytest.raises(ValueError):
        open_inside(str(sandbox / "d"), "../outside.txt")


def test_missing_directory(sandbox):
    with pytest.raises(FabricError) as err:
        list_inside(str(sandbox / "nope"))
    one_line(err, "no such directory", "nope")


def test_a_name_with_a_newline_stays_on_one_line(sandbox):
    os.symlink(sandbox / "outside.txt", sandbox / "d" / "a\nb")
    with pytest.raises(FabricError) as err:
        read_inside(str(sandbox / "d"), "a\nb", 100)
    one_line(err, "a\\nb is a symbolic link")


# --- writing ---------------------------------------------------------------------------------------


def test_outputs_appear_together_at_the_end(sandbox):
    d = sandbox / "d"
    with Outputs(str(d), "plots") as outputs:
        assert outputs.write("a.png", lambda f: f.write(b"A")) == str(d / "plots" / "a.png")
        outputs.write("b.png", lambda f: f.write(b"B"))
        assert not (d / "plots" / "a.png").exists()  # still a temporary file
    assert sorted(os.listdir(d / "plots")) == ["a.png", "b.png"]
    assert (d / "plots" / "b.png").read_bytes() == b"B"


def test_a_failure_leaves_nothing_behind(sandbox):
    d = sandbox / "d"
    with pytest.raises(FabricError):
        with Outputs(str(d), "plots") as outputs:
            outputs.write("a.png", lambda f: f.write(b"A"))
            raise FabricError("the next input was malformed")
    assert os.listdir(d) == []  # the plots directory it created is gone too


def test_a_failure_keeps_earlier_outputs(sandbox):
    plots = sandbox / "d" / "plots"
    plots.mkdir()
    (plots / "a.png").write_bytes(b"old")
    with pytest.raises(KeyboardInterrupt):
        with Outputs(str(sandbox / "d"), "plots") as outputs:
            outputs.write("a.png", lambda f: f.write(b"new"))
            raise KeyboardInterrupt
    assert os.listdir(plots) == ["a.png"] and (plots / "a.png").read_bytes() == b"old"


def test_no_output_no_directory(sandbox):
    with Outputs(str(sandbox / "d"), "plots"):
        pass
    assert os.listdir(sandbox / "d") == []


def test_temporary_files_of_a_killed_command_go_when_no_other_writes_there(sandbox):
    d = sandbox / "d"
    (d / ".fabric-emu-0123456789abcdef.tmp").write_bytes(b"half an output")  # left by a SIGKILL
    os.symlink(sandbox / "outside.txt", d / ".fabric-emu-aaaaaaaaaaaaaaaa.tmp")  # our name, not our kind: stays
    with Outputs(str(d)) as outputs:
        outputs.write("a.pcap", lambda f: f.write(b"A"))
    assert sorted(os.listdir(d)) == [".fabric-emu-aaaaaaaaaaaaaaaa.tmp", "a.pcap"]
    assert (sandbox / "outside.txt").read_text() == "the user's own file"


def test_temporary_files_of_a_command_still_writing_stay(sandbox):
    """Its shared lock on the directory says it is alive: another command's outputs there take nothing of it."""
    d = sandbox / "d"
    with Outputs(str(d)) as first:
        first.write("a.pcap", lambda f: f.write(b"A"))
        [temporary] = os.listdir(d)
        with Outputs(str(d)) as second:
            second.write("b.pcap", lambda f: f.write(b"B"))
        assert temporary in os.listdir(d)
    assert sorted(os.listdir(d)) == ["a.pcap", "b.pcap"]


def test_a_link_at_an_output_name_is_replaced_not_followed(sandbox):
    plots = sandbox / "d" / "plots"
    plots.mkdir()
    os.symlink(sandbox / "outside.txt", plots / "a.png")
    with Outputs(str(sandbox / "d"), "plots") as outputs:
        outputs.write("a.png", lambda f: f.write(b"A"))
    assert (sandbox / "outside.txt").read_text() == "the user's own file"
    assert not os.path.islink(plots / "a.png") and (plots / "a.png").read_bytes() == b"A"


def test_a_linked_output_directory_is_refused(sandbox):
    os.symlink(sandbox / "elsewhere", sandbox / "d" / "plots")
    with pytest.raises(FabricError) as err:
        Outputs(str(sandbox / "d"), "plots")
    one_line(err, "d/plots is a symbolic link: not followed")
    assert os.listdir(sandbox / "elsewhere") == []


def test_a_directory_at_an_output_name_stops_all_renames(sandbox):
    d = sandbox / "d"
    (d / "b.pcap").mkdir()
    with pytest.raises(FabricError) as err:
        with Outputs(str(d)) as outputs:
            outputs.write("a.pcap", lambda f: f.write(b"A"))
            outputs.write("b.pcap", lambda f: f.write(b"B"))
    one_line(err, "cannot write", "b.pcap: a directory has that name")
    assert os.listdir(d) == ["b.pcap"]


def test_output_names_are_single_file_names(sandbox):
    with Outputs(str(sandbox / "d")) as outputs:
        for name in ("../x", "a/b", "..", ".", "", "a\0b"):
            with pytest.raises(ValueError):
                outputs.write(name, lambda f: None)
        with pytest.raises(FabricError) as err:
            outputs.write("x" * 256, lambda f: None)
        one_line(err, "longer than 255 bytes")
    assert os.listdir(sandbox / "d") == [] and os.listdir(sandbox / "elsewhere") == []
