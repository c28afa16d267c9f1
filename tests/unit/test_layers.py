"""The package's layers: a module imports only from its own layer or a lower one, and no import cycles.

docs/architecture.md draws the layers; this test reads every module's imports with ast (function-level
and TYPE_CHECKING imports included: a layer that needs a name from above at any time is crossed) and
fails on an upward import, a cycle between modules, a package it does not know, or I/O in the models.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "emulator"

# Lowest first.  Top-level modules are named alone; packages by their folder.
LAYERS: list[set[str]] = [
    {"errors", "units", "bounds", "flags", "safefiles"},
    {"_core"},  # the compiled core (crates/): wire, models and simulation engine, below their Python users
    {"wire"},
    {"model", "workload"},
    {"kernel"},
    {"agents"},
    {"fabric", "topologies"},
    {"apps"},
    {"collectives"},
    {"study"},
    {"cli", "__main__", "__init__"},
]
LAYER = {name: index for index, names in enumerate(LAYERS) for name in names}

# What a model may not touch: it gets time as ``now`` and hands frames back to its caller.
IO_MODULES = {"socket", "select", "selectors", "time", "os", "subprocess", "threading", "signal", "fcntl",
              "mmap", "pyroute2"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    found = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    found.update({_module_name(p): p for p in (ROOT / "topologies").rglob("*.py")})
    return found


MODULES = _modules()
# The extension module built from crates/fabric-py: imported like a module, checked like one, parsed by no one.
COMPILED = {"emulator._core"}


def _imports(name: str, path: Path) -> set[str]:
    """Project modules ``name`` imports (``from pkg import module`` resolved to the module)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names
                         if f"{node.module}.{alias.name}" in MODULES)
    # A package's __init__ holds only its docstring: ``from emulator import bounds`` imports bounds.
    return {m for m in found
            if m in COMPILED or (m in MODULES and m != name and MODULES[m].name != "__init__.py")}


def _external(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


def layer_of(module: str) -> int:
    parts = module.split(".")
    key = parts[0] if parts[0] == "topologies" else (parts[1] if len(parts) > 1 else "__init__")
    if key not in LAYER:
        raise AssertionError(f"{module}: in no layer; add its package to LAYERS and to docs/architecture.md")
    return LAYER[key]


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def test_every_module_is_in_a_layer():
    for name in MODULES:
        layer_of(name)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_upward_import(name):
    upward = sorted(m for m in GRAPH[name] if layer_of(m) > layer_of(name))
    assert not upward, f"{name} (layer {layer_of(name)}) imports from above: {upward}"


def test_no_import_cycle():
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(name: str) -> None:
        state[name] = 1
        path.append(name)
        for dep in sorted(GRAPH[name]):
            if state.get(dep) == 1:
                raise AssertionError("import cycle: " + " -> ".join(path[path.index(dep):] + [dep]))
            if dep not in state:
                visit(dep)
        path.pop()
        state[name] = 2

    for name in sorted(GRAPH):
        if name not in state:
            visit(name)


@pytest.mark.parametrize("name", sorted(m for m in MODULES
                                        if m.startswith(("emulator.model", "emulator.wire"))))
def test_models_and_frame_formats_do_no_io(name):
    """Models and frame formats get time as ``now`` and hand frames back: no clock, no socket, no process (the
    simulation engine is the compiled core's, checked by the Rust layer test below)."""
    touched = sorted(_external(MODULES[name]) & IO_MODULES)
    assert not touched, f"{name} imports {touched}: models get time as `now` and return frames to send"


def test_the_checker_sees_a_violation():
    """The walk itself: a model importing the builder would be caught."""
    fake = {"emulator.fabric.builder"}
    assert [m for m in fake if layer_of(m) > layer_of("emulator.model.mmu")] == ["emulator.fabric.builder"]
    assert layer_of("emulator.errors") < layer_of("emulator._core") < layer_of("emulator.wire.scapy_layers") < layer_of("emulator.model.mmu")


# The Rust workspace's layers: the core crate's modules, lowest first, by the `crate::` paths they use.
CORE = ROOT / "crates" / "fabric-core"
RUST_LAYERS = ["wire", "model", "agent", "sim"]
# What the core may not touch: the models get time as `now` and hand frames back; I/O is the agents' and, from
# the next crate on, the I/O crate's.
RUST_IO = re.compile(r"\bstd::(fs|net|io|time|thread|process|os|env)\b|\b(libc|nix|socket2|mio|pyo3)::")


def _rust_files() -> list[Path]:
    return sorted((CORE / "src").rglob("*.rs"))


def test_the_core_crate_has_no_pyo3_and_no_unsafe():
    """The core builds and tests without Python (`cargo test -p fabric-core`); only the bindings crate links
    pyo3, and the core's manifest forbids unsafe code (the I/O layer alone may use it)."""
    manifest = (CORE / "Cargo.toml").read_text()
    assert "pyo3" not in manifest
    assert re.search(r'\[lints\.rust\]\s*\nunsafe_code = "forbid"', manifest)
    assert not [p for p in _rust_files() if "unsafe" in p.read_text()], "the word unsafe in the core's sources"
    assert "fabric-core" in (ROOT / "crates" / "fabric-py" / "Cargo.toml").read_text()


IO_LAYER = ROOT / "crates" / "fabric-io" / "src" / "io"


def test_unsafe_code_lives_in_the_io_layer_alone_each_block_documented():
    """The system calls are in one module, `crates/fabric-io/src/io/`: no other Rust file of the workspace
    (the core forbids unsafe code above, the bindings, the I/O crate's loops) has the word `unsafe`, and each
    unsafe block or impl there has its SAFETY comment (clippy denies one without, -D warnings). Neither the
    core nor the I/O crate depends on the other: models do no I/O, the I/O moves frames and knows no model;
    fabric-agents joins them in safe code."""
    sources = sorted((ROOT / "crates").rglob("*.rs"))
    outside = [p for p in sources if IO_LAYER not in p.parents and re.search(r"\bunsafe\b", p.read_text())]
    assert not outside, f"unsafe outside {IO_LAYER.relative_to(ROOT)}: {[str(p.relative_to(ROOT)) for p in outside]}"
    io_manifest = (ROOT / "crates" / "fabric-io" / "Cargo.toml").read_text()
    assert re.search(r'^undocumented_unsafe_blocks = "deny"$', io_manifest, re.MULTILINE)
    assert "fabric-core" not in io_manifest and "fabric-io" not in (CORE / "Cargo.toml").read_text()
    # The crate that joins them (the agents in the loop) is safe code on both.
    agents_manifest = (ROOT / "crates" / "fabric-agents" / "Cargo.toml").read_text()
    assert re.search(r'\[lints\.rust\]\s*\nunsafe_code = "forbid"', agents_manifest)
    layer = sorted(IO_LAYER.rglob("*.rs"))
    assert layer
    for path in layer:
        lines = path.read_text().splitlines()
        for at, line in enumerate(lines):
            if re.search(r"\bunsafe\s*(\{|impl\b)", line):
                before = "\n".join(lines[max(0, at - 6):at])
                assert "SAFETY:" in before, f"{path.relative_to(ROOT)}:{at + 1}: unsafe block without SAFETY"


@pytest.mark.parametrize("crate", ["fabric-core", "fabric-io", "fabric-agents", "fabric-py"])
def test_no_crate_may_unwrap_expect_or_panic(crate):
    """No panic crosses into Python: clippy (-D warnings in the test script) refuses unwrap, expect, panic and
    unreachable in the models and the bindings; tests may use them (clippy.toml)."""
    manifest = (ROOT / "crates" / crate / "Cargo.toml").read_text()
    lints = manifest.split("[lints.clippy]", 1)[-1] if "[lints.clippy]" in manifest else ""
    for lint in ("unwrap_used", "expect_used", "panic", "unreachable"):
        assert re.search(rf'^{lint} = "deny"$', lints, re.MULTILINE), f"{crate}: {lint} not denied"


@pytest.mark.parametrize("path", _rust_files(), ids=lambda p: str(p.relative_to(CORE / "src")))
def test_rust_no_upward_use_and_no_io(path):
    rel = path.relative_to(CORE / "src").parts
    text = path.read_text()
    if len(rel) > 1:
        own = RUST_LAYERS.index(rel[0])
        used = set(re.findall(r"\bcrate::(\w+)", text)) | set(re.findall(r"\bsuper::super::(\w+)", text))
        upward = sorted(m for m in used if m in RUST_LAYERS and RUST_LAYERS.index(m) > own)
        assert not upward, f"{path.relative_to(ROOT)} (layer {rel[0]}) uses from above: {upward}"
    io = sorted({m.group(0) for m in RUST_IO.finditer(text)})
    assert not io, f"{path.relative_to(ROOT)} does I/O or binds Python: {io}"


def test_the_rust_checker_sees_a_violation():
    assert re.findall(r"\bcrate::(\w+)", "use crate::sim::engine::Engine;") == ["sim"]
    assert RUST_IO.search("use std::time::Instant;") and RUST_IO.search("let f = std::fs::read(p);")
    assert not RUST_IO.search("use std::collections::BinaryHeap;")
