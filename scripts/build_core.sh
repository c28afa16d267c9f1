#!/usr/bin/env bash
# Rebuild the compiled core in place after a change under crates/: cargo builds the bindings crate (release) and
# the library is put where `pip install -e .` put it, emulator/_core<suffix>, replaced whole.  bootstrap.sh runs
# it; by hand: `scripts/build_core.sh` (PYTHON=... for another interpreter than .venv's).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/rust-env.sh
source scripts/rust-env.sh
rust_ok || { echo "build_core: error: no rustc >= $RUST_MIN with cargo on PATH (scripts/bootstrap.sh installs one)" >&2; exit 1; }
python="$(realpath "${PYTHON:-.venv/bin/python}")"
suffix="$("$python" -c 'import importlib.machinery as m; print(m.EXTENSION_SUFFIXES[0])')"
PYO3_PYTHON="$python" cargo build --release --quiet -p fabric-py
target="${CARGO_TARGET_DIR:-target}"
install -m 0755 "$target/release/lib_core.so" "emulator/.fabric-emu-core.tmp"
mv -f "emulator/.fabric-emu-core.tmp" "emulator/_core$suffix"
