"""``fabric-emu nccl``: the size sweep as an experiment, its nccl-tests table and JSON (the simulation backend: no
root; the emulated sweep is tests/integration/test_nccl_emulated.py)."""

from __future__ import annotations

import json
import statistics

import pytest

from emulator.cli import main
from emulator.study import nccl

ROW_FIELDS = 10  # size count type redop root time algbw busbw #wrong faithful


def table_rows(out: str) -> list[list[str]]:
    """The table's rows as nccl-tests parsers read them: every line not a comment, split on blanks."""
    return [line.split() for line in out.splitlines() if line and not line.startswith("#")]


def sweep(tmp_path, capsys, *args: str) -> tuple[int, str, str]:
    code = main(["nccl", "--backend", "sim", "--out", str(tmp_path / "results"), "-n", "2", "-w", "1", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_default_sweep_is_nccl_tests_8_b_to_64_mib_by_2():
    assert nccl.sizes("allreduce", 8, 8, 64 << 20, 2) == [8 << i for i in range(24)]


def test_sizes_are_whole_elements_once_each_as_nccl_tests_counts_them():
    assert nccl.sizes("allreduce", 8, 6, 50, 2) == [4, 12, 24, 48]  # whole float32s
    assert nccl.sizes("alltoall", 6, 8, 64, 2) == [6, 12, 30, 60]  # an equal share per peer
    assert nccl.sizes("alltoall", 3, 3, 5, 2) == [3]
    assert nccl.sizes("allgather", 8, 1, 13, 3) == [1, 3, 9]  # any bytes: uneven chunks
    for args, message in [(("allreduce", 8, 2, 8, 2), "needs at least a float32"),
                          (("alltoall", 8, 4, 64, 2), "a byte for each of its 8 ranks"),
                          (("allreduce", 8, 64, 8, 2), "invalid sizes for -b/--minbytes and -e/--maxbytes: 64 > 8"),
                          (("allgather", 8, 8, 4 << 30, 2), "at most 1 GiB"),
                          (("allgather", 8, 8, 64, 1), "a factor of at least 2")]:
        with pytest.raises(nccl.FabricError, match=message):
            nccl.sizes(*args)


def test_float_text_is_nccl_tests_get_float_str():
    assert [nccl.float_text(v, 7) for v in (0.0, 0.004, 188.2, 9349.8, 19112.34, 149392.1, 1234567.0, 98765432.0)] == [
        "   0.00", "   0.00", " 188.20", "9349.80", "19112.3", " 149392", "1234567", "9.9e+07"]
    assert [nccl.float_text(v, 6) for v in (0.07, 12.284, 123.4, 1234.5, 54321.0, 1234567.0)] == [
        "  0.07", " 12.28", "123.40", "1234.5", " 54321", " 1e+06"]


def test_a_simulated_sweep_prints_nccl_tests_table_and_json(tmp_path, capsys):
    """8 B to 4 KiB of all-reduce on star,8 (8 and 12 B too: ranks with empty chunks), simulated: the rows in
    nccl-tests' columns, algbw = size / time, busbw = algbw x 2(n-1)/n, the closing average; the JSON the same."""
    code, out, err = sweep(tmp_path, capsys, "--topo", "star,8", "-b", "8", "-e", "4K", "-J", str(tmp_path / "x.json"))
    assert code == 0, err
    rows = table_rows(out)
    assert [int(row[0]) for row in rows] == [8 << i for i in range(10)]
    assert all(len(row) == ROW_FIELDS for row in rows)
    for size, count, kind, redop, root, time, algbw, busbw, wrong, faithful in rows:
        assert (int(count), kind, redop, root, wrong, faithful) == (int(size) // 4, "float", "sum", "-1", "0", "yes")
        assert float(algbw) == pytest.approx(int(size) / float(time), abs=0.006)  # MB/s: bytes per us
        assert float(busbw) == pytest.approx(float(algbw) * 1.75, abs=0.02)
    assert "# Out of bounds values : 0 OK" in out
    assert "# fabric lossless, backend sim, links: bw 100mbit" in out and "(MB/s)" in out
    report = json.loads((tmp_path / "x.json").read_text())
    assert report["version"] == 2 and report["config"]["minimum_bytes"] == 8 and report["config"]["ranks"] == 8
    results = report["results"]
    assert [r["size"] for r in results] == [int(row[0]) for row in rows]
    for r, row in zip(results, rows):
        assert r["out_of_place"] is None and r["in_place"]["nwrong"] == 0 and r["faithful"] is True
        assert r["unfaithful"] == {}
        assert nccl.float_text(r["in_place"]["time"], 7).strip() == row[5]
        assert r["in_place"]["bus_bw"] == pytest.approx(r["in_place"]["alg_bw"] * 1.75)
    average = statistics.fmean(r["in_place"]["bus_bw"] for r in results)
    assert report["average_bus_bandwidth"] == {"bandwidth": pytest.approx(average), "okay": "unchecked"}
    assert f"# Avg bus bandwidth    : {average * 1e3:g} (MB/s)" in out
    assert "variant 1/10 nccl-size8" in err  # the runner's progress


def test_allgather_and_alltoall_sweeps_sizes_no_multiple_of_the_ranks(tmp_path, capsys):
    code, out, err = sweep(tmp_path, capsys, "allgather", "--topo", "star,6", "-b", "1", "-e", "100", "-f", "3")
    assert code == 0, err
    assert [(row[0], row[1], row[2], row[3], row[8]) for row in table_rows(out)] == [
        ("1", "1", "uint8", "none", "N/A"), ("3", "1", "uint8", "none", "N/A"), ("9", "2", "uint8", "none", "N/A"),
        ("27", "5", "uint8", "none", "N/A"), ("81", "14", "uint8", "none", "N/A")]
    assert "busbw = algbw x 0.833333" in out
    code, out, err = sweep(tmp_path, capsys, "alltoall", "--topo", "star,4", "-b", "6", "-e", "64")
    assert code == 0, err
    assert [(row[0], row[1]) for row in table_rows(out)] == [("4", "1"), ("12", "3"), ("24", "6"), ("48", "12")]
    assert "out-of-place" in out


def test_a_modelled_rate_prints_the_modelled_fabrics_times_in_gb_per_s(tmp_path, capsys):
    code, out, err = sweep(tmp_path, capsys, "--topo", "star,4", "-b", "1M", "-e", "1M", "--model", "400gbit")
    assert code == 0, err
    [row] = table_rows(out)
    time_us, busbw = float(row[5]), float(row[7])
    assert "(GB/s)" in out and "modelled at 400gbit (D = 4000)" in out
    assert 0.9 * 50 < busbw < 50  # 400 Gbit/s is 50 GB/s; the ring keeps most of it at 1 MiB
    assert time_us == pytest.approx((1 << 20) / 1e3 / float(row[6]), rel=0.01)  # GB/s: bytes per ns


@pytest.mark.parametrize("args, message", [
    (["--topo", "star,8", "-b", "2"], "-b/--minbytes 2: an allreduce needs at least a float32 (4 bytes)"),
    (["--topo", "star,8", "-b", "8x"], "-b/--minbytes: bad size '8x'"),
    (["--topo", "star,8", "-f", "1"], "-f/--stepfactor '1': must be 2 to 1024"),
    (["--topo", "star,8", "-n", "0"], "-n/--iters '0': must be 1 to 10000"),
    (["--topo", "star,8", "--bw", "fast"], "--bw: bad rate 'fast'"),
    (["--topo", "star,8", "--link", "delay=forever"], "--link delay: bad time"),
    (["--topo", "star,8", "--cc", "dcqcn,bogus=1"], "--cc: unknown dcqcn option 'bogus'"),
    (["--topo", "star,1"], "--topo: allreduce needs at least 2 hosts"),
    (["--topo", "star,8", "--json", "/nonexistent/dir/x.json"], "--json /nonexistent/dir/x.json: no such directory"),
])
def test_bad_input_is_one_line_and_nothing_runs(tmp_path, capsys, args, message):
    code, out, err = sweep(tmp_path, capsys, *args)
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "results").exists()


def variant(size: int, mean_us: float, verified: bool = True, faithful: bool = True) -> dict:
    """A results.json entry with what the table reads."""
    late = ["timed starts late by 420 us at p99, over 1 frame time (337 us)"]
    fidelity = {"faithful": faithful, "unfaithful": {} if faithful else {
        "h1": late, "h2": late, "s1": ["processing lag p99 1573 us"], "collective": ["mean CCT 3.00x ..."]}}
    return {"name": f"nccl-size{size}", "hosts": 4, "size": size, "cct_us": {"mean": mean_us}, "model": None,
            "verified": verified, "fidelity": fidelity, "iterations": 5}


def test_a_wrong_result_fails_the_size_and_an_unfaithful_one_says_why():
    rows = nccl.rows("allreduce", [variant(1024, 100.0), variant(4096, 200.0, verified=False, faithful=False)])
    assert [(r.algbw_gbs, r.busbw_gbs, r.wrong, r.faithful) for r in rows] == [
        (pytest.approx(1024 / 100e-6 / 1e9), pytest.approx(1.5 * 1024 / 100e-6 / 1e9), 0, True),
        (pytest.approx(4096 / 200e-6 / 1e9), pytest.approx(1.5 * 4096 / 200e-6 / 1e9), 1, False)]
    lines = nccl.table("allreduce", rows, nccl.bandwidth_unit(400 * 10**9))
    assert lines[-1] == "#" and "# Out of bounds values : 1 FAILED" in lines
    assert lines[-4:-1] == ["#   4096 B: h1, h2: timed starts late by 420 us at p99, over 1 frame time (337 us)",
                            "#   4096 B: s1: processing lag p99 1573 us", "#   4096 B: collective: mean CCT 3.00x ..."]
    assert lines[4].split()[-2:] == ["1", "NO"] and "(GB/s)" in lines[2]
