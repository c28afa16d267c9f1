"""Run an experiment file through the command line, as a user would, and read its results back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any


def run_experiment(tmp_path: Path, name: str, text: str) -> tuple[Path, dict[str, dict[str, Any]], str]:
    """Write ``text`` as ``<name>.toml``, run it with ``fabric-emu run``; its results directory, its variants by
    name, and what it printed on stderr (it must exit 0)."""
    (tmp_path / f"{name}.toml").write_text(text)
    done = subprocess.run([sys.executable, "-m", "emulator", "run", str(tmp_path / f"{name}.toml"), "--out",
                           str(tmp_path / "results")], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    [stamp] = os.listdir(tmp_path / "results" / name)
    directory = tmp_path / "results" / name / stamp
    results = json.load(open(directory / "results.json"))
    return directory, {v["name"]: v for v in results["variants"]}, done.stderr
