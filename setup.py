"""Build configuration: the hot modules compiled with mypyc, from the same Python source.

``pip install --no-build-isolation -e .`` with mypy installed (what ``make up`` and ``make test``
run) compiles the modules in
``COMPILED`` to C extensions placed beside their ``.py`` files; Python then imports the
extension (``crdt/blocks.cpython-311-x86_64-linux-gnu.so``) in preference to the source.
The source stays the reference: ``BRAID_PURE=1`` in the environment makes a running
process import the ``.py`` files instead (``node/build.py``), and a build without a C
compiler or Python's headers installs the pure build, saying so (``make deps`` installs
both on Debian).  ``BRAID_PURE=1`` at build time also skips compiling.

Which modules are listed is measured (bench/README.md, "Compiled build"): each one listed
made the replay, the parser or XADD faster, or at least not slower; ``node/interop/lzf.py``
made DUMP and RESTORE of a large stream 15-30 times faster (``python -m bench.dump_restore``).
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig

from setuptools import setup

# Compiled together (one shared library for the group, so calls between them are native).
COMPILED = [
    "crdt/ids.py",
    "crdt/blocks.py",
    "crdt/blockformat.py",
    "crdt/causal.py",
    "crdt/idgen.py",
    "crdt/idmp.py",
    "crdt/groups.py",
    "crdt/pel.py",
    "crdt/stream.py",
    "crdt/sync.py",
    "node/resp/parser.py",
    "node/resp/entries.py",
    "node/interop/lzf.py",
    "node/interop/listpack.py",
]


def _why_not_compiled() -> str | None:
    """Why this build cannot compile the modules (None: it can)."""
    if os.environ.get("BRAID_PURE") == "1":
        return "BRAID_PURE=1 is set"
    if sys.implementation.name != "cpython":
        return f"mypyc needs CPython, not {sys.implementation.name}"
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(cc) is None:
        return f"no C compiler ({cc!r} is not installed; on Debian: apt-get install gcc, or `make deps`)"
    include = sysconfig.get_paths()["include"]
    if not os.path.exists(os.path.join(include, "Python.h")):
        return (f"Python's C headers are missing ({include}/Python.h; on Debian: "
                f"apt-get install python3-dev, or `make deps`)")
    return None


def _ext_modules() -> list:
    reason = _why_not_compiled()
    if reason is None:
        try:
            from mypyc.build import mypycify
        except ImportError:
            reason = "mypyc is not installed (pip install mypy==2.4.1, then pip install --no-build-isolation -e .)"
    if reason is not None:
        print(f"braid: installing the pure-Python build: {reason}", file=sys.stderr)
        return []
    return mypycify(COMPILED, opt_level="3", multi_file=False)


setup(ext_modules=_ext_modules())
