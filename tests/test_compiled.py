"""The compiled build and the pure build import what they say, and agree.

setup.py compiles the modules it lists with mypyc; ``make test`` runs the suite on that build
(``BRAID_EXPECT_COMPILED=1``: every listed module must come from its extension) and a part of
it again with ``BRAID_PURE=1`` (every module from its ``.py`` file).  Run by hand, without
either variable, the modules must at least all come from the same build.

The choice is made by node/build.py, which every entry point imports before any compiled
module (``crdt`` itself does no I/O and reads no environment): the subprocesses here import
one of them first, as a real process does.
"""

from __future__ import annotations

import ast
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def compiled_modules() -> list[str]:
    """The module names setup.py compiles."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "COMPILED" for t in node.targets):
            return [p.removesuffix(".py").replace("/", ".") for p in ast.literal_eval(node.value)]
    raise AssertionError("setup.py lists no COMPILED modules")


# The packages a process starts from, each of which has node/build.py choose the build first
ENTRY_POINTS = ("node", "chaos", "pipeline", "bench", "tests.conftest")


def _origins(env: dict[str, str], entry: str = "node") -> dict[str, str]:
    """Where each compiled module is imported from, in a fresh process with ``env`` that
    imports ``entry`` first."""
    code = (f"import importlib, json, sys, {entry}\n"
            "print(json.dumps({m: importlib.import_module(m).__file__ for m in sys.argv[1:]}))")
    env = {**os.environ, **env, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run([sys.executable, "-c", code, *compiled_modules()], capture_output=True, text=True,
                         env=env, timeout=60, check=True)
    return json.loads(res.stdout)


def test_setup_lists_modules_that_exist():
    modules = compiled_modules()
    assert "crdt.blocks" in modules
    for m in modules:
        assert (ROOT / (m.replace(".", "/") + ".py")).is_file(), m


def test_this_process_runs_the_build_it_says():
    files = {m: importlib.import_module(m).__file__ for m in compiled_modules()}
    compiled = {m for m, f in files.items() if f.endswith(".so")}
    if os.environ.get("BRAID_PURE") == "1":
        assert not compiled, files
    elif os.environ.get("BRAID_EXPECT_COMPILED") == "1":
        assert compiled == set(files), f"not compiled (make venv builds them): {sorted(set(files) - compiled)}"
    else:
        assert compiled in (set(), set(files)), f"a mix of compiled and source modules: {files}"


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_braid_pure_imports_every_module_from_its_source(entry):
    origins = _origins({"BRAID_PURE": "1"}, entry)
    assert all(f.endswith(".py") for f in origins.values()), origins
    assert set(origins) == set(compiled_modules())


def test_crdt_chooses_nothing():
    """The pure core does no I/O and reads no environment: the choice of build is not its own."""
    import crdt

    source = Path(crdt.__file__).with_suffix(".py").read_text()
    assert "environ" not in source and "import os" not in source and "meta_path" not in source


# One workload through the hot paths; the two builds must give the same bytes.
_WORKLOAD = r"""
import hashlib
import node  # first: node/build.py chooses the build
from crdt.blocks import EntryLog, TrimSpec
from crdt.stream import Stream
from node.interop import lzf
from node.resp.parser import RequestParser

log = EntryLog()
for i in range(1, 3000):
    fields = [b"f", b"%d" % i] if i % 7 else [b"g%d" % i, b"-%d" % (i * 1000003), b"x", b"y" * (i % 300)]
    log.append((i // 3, i % 3), fields, 100, 4096)
for i in range(5, 3000, 11):
    log.delete((i // 3, i % 3))
out = repr(list(log.range((0, 0), (2**64 - 1, 2**64 - 1)))).encode()
out += repr([log.length, log.node_count, log.memory_bytes()]).encode()
log.trim(TrimSpec(maxlen=1000, approx=True), None, True)
out += repr(list(log.revrange((0, 0), (2**64 - 1, 2**64 - 1)))[:50]).encode()
s = Stream()
for i in range(1, 500):
    s.add(i % 3, (i, 0), [b"k", b"v%d" % i], 100, 4096)
out += repr(s.range((0, 0), (2**64 - 1, 2**64 - 1), 0)).encode()
p = RequestParser()
p.feed(b"*3\r\n$4\r\nXADD\r\n$1\r\ns\r\n$1\r\n*\r\nPING a b\r\n*1\r\n$4\r\nPING\r\n")
while (argv := p.next_command()) is not None:
    out += repr(argv).encode()
raw = b"".join(b"%d:%s;" % (i, b"ab"[i % 2:] * (i % 70)) for i in range(3000))
packed = lzf.lzf_compress(raw)
out += packed + lzf.lzf_decompress(packed, len(raw))
print(hashlib.sha256(out).hexdigest())
"""


def _run_workload(env: dict[str, str]) -> str:
    env = {**os.environ, **env, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run([sys.executable, "-c", _WORKLOAD], capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


def test_the_pure_and_the_installed_build_give_the_same_results():
    assert _run_workload({"BRAID_PURE": "1"}) == _run_workload({"BRAID_PURE": "0"})
