"""The pure core: streams, operations and their merge rules (no I/O, no clock).

The hot modules here are also compiled with mypyc from this same source (setup.py), and
Python imports a compiled module in preference to its ``.py`` file.  With ``BRAID_PURE=1``
in the environment every module of this package (and of ``node.resp`` and ``node.persistence``)
is imported from its source instead: the simulation and property tests can run on the code
as written, and a suspected difference between the two builds can be ruled in or out.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec, SourceFileLoader



def _compiled_is_stale() -> bool:
    """Was a compiled module's source edited since the build?  Then no compiled module is
    used: they call each other directly, so they go all together.  Their code is in mypyc's
    shared library at the top of the tree (``<hash>__mypyc...so``); the ``.so`` beside each
    source is a small shim, which a rebuild leaves untouched when nothing in it changed."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    built = [os.path.getmtime(os.path.join(root, n)) for n in os.listdir(root) if "__mypyc." in n]
    for package in ("crdt", os.path.join("node", "resp"), os.path.join("node", "persistence")):
        directory = os.path.join(root, package)
        for name in os.listdir(directory):
            if name.endswith(".so"):
                source = os.path.join(directory, name.split(".", 1)[0] + ".py")
                shim = os.path.getmtime(os.path.join(directory, name))
                if os.path.exists(source) and os.path.getmtime(source) > max(built, default=shim):
                    return True
    return False


PURE = os.environ.get("BRAID_PURE") == "1"
if not PURE and _compiled_is_stale():
    print("braid: the compiled modules are older than their source, which is used instead "
          "(rebuild them: make venv, or pip install --no-build-isolation -e .)", file=sys.stderr)
    PURE = True


class _SourceFirst(MetaPathFinder):
    """Finds a package's modules as ``.py`` source even where an extension module sits beside it."""

    def __init__(self, package: str) -> None:
        self.prefix = package + "."

    def find_spec(self, fullname: str, path=None, target=None) -> ModuleSpec | None:
        if not fullname.startswith(self.prefix) or path is None:
            return None
        leaf = fullname.rpartition(".")[2]
        for directory in path:
            source = os.path.join(directory, leaf + ".py")
            if os.path.isfile(source):
                return importlib.util.spec_from_file_location(fullname, source,
                                                              loader=SourceFileLoader(fullname, source))
        return None


def prefer_source(package: str) -> None:
    """Import ``package``'s modules from source from now on (``BRAID_PURE=1``)."""
    if not any(isinstance(f, _SourceFirst) and f.prefix == package + "." for f in sys.meta_path):
        sys.meta_path.insert(0, _SourceFirst(package))


if PURE:
    prefer_source(__name__)
