"""Which build of the compiled modules a process imports: mypyc's extensions or the ``.py`` source.

setup.py compiles the hot modules of ``crdt/``, ``node/resp/`` and ``node/interop/`` with
mypyc, from the same source, into extensions beside their ``.py`` files, and Python imports an
extension in preference to its source.  This module makes the choice, once per process, when
it is imported:

- ``BRAID_PURE=1`` in the environment: every module of those three packages is imported from
  its ``.py`` file (a finder put first on ``sys.meta_path``).  The simulation's planted bugs
  need it (they replace functions that compiled callers would call directly), and a suspected
  difference between the two builds can be ruled in or out.
- A compiled module older than its source (edited since the build): the source too, all of
  it, with a warning on stderr; the compiled modules call each other directly, so they are
  used all together or not at all.

Design
------
``crdt`` is the pure core: it does no I/O and does not read the environment, so the choice
is not made there.  It has to be made before the first module of those packages is imported,
so every entry point imports this module first, through its package's ``__init__``:

- ``node/__init__.py``: the region (``braid``, ``python -m node``), ``braid-admin``,
  ``node.testing``; ``node.resp`` and ``node.interop`` are subpackages of ``node``, so
  they never load before it;
- ``chaos/__init__.py``: ``braid-chaos`` (``braid-chaos sim`` runs the simulation), and
  ``python -m chaos.planted``, which calls :func:`use_source` itself;
- ``pipeline/__init__.py``: the Spark connector, on the driver and in Spark's Python workers;
- ``bench/__init__.py``: ``python -m bench....``;
- ``tests/conftest.py``: pytest loads it before any test module.

A process whose first import is a ``crdt`` module (``python -c 'import crdt.blocks'``) gets
what Python finds, the extension when one is built, stale or not, whatever ``BRAID_PURE``
says: import ``node`` (or any package above) first.  ``tests/test_compiled.py`` checks each
entry point.  Not a ``.pth`` file or ``sitecustomize``: Python runs those only from a
site-packages directory, so they would miss a checkout run with ``PYTHONPATH`` (as the tests'
subprocesses and the worktrees are), need a reinstall to change, and a ``sitecustomize``
would shadow the distribution's own.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from importlib.abc import MetaPathFinder
from importlib.machinery import EXTENSION_SUFFIXES, ModuleSpec, SourceFileLoader

# The packages setup.py compiles modules of (its COMPILED list)
PACKAGES = ("crdt", "node.resp", "node.interop")

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # where crdt/ and node/ are


def _compiled_is_stale() -> bool:
    """Was a compiled module's source edited since the build?  Their code is in mypyc's
    shared library at the top of the tree (``<hash>__mypyc...so``); the ``.so`` beside each
    source is a small shim, which a rebuild leaves untouched when nothing in it changed."""
    built = [os.path.getmtime(os.path.join(_ROOT, n)) for n in os.listdir(_ROOT) if "__mypyc." in n]
    for package in PACKAGES:
        directory = os.path.join(_ROOT, *package.split("."))
        for name in os.listdir(directory):
            if name.endswith(".so"):
                source = os.path.join(directory, name.split(".", 1)[0] + ".py")
                shim = os.path.getmtime(os.path.join(directory, name))
                if os.path.exists(source) and os.path.getmtime(source) > max(built, default=shim):
                    return True
    return False


class _SourceFirst(MetaPathFinder):
    """Finds the modules of :data:`PACKAGES` as ``.py`` source even where an extension module
    sits beside it."""

    prefixes = tuple(p + "." for p in PACKAGES)

    def find_spec(self, fullname: str, path=None, target=None) -> ModuleSpec | None:
        if not fullname.startswith(self.prefixes) or path is None:
            return None
        leaf = fullname.rpartition(".")[2]
        for directory in path:
            source = os.path.join(directory, leaf + ".py")
            if os.path.isfile(source):
                return importlib.util.spec_from_file_location(fullname, source,
                                                              loader=SourceFileLoader(fullname, source))
        return None


def compiled_imported() -> list[str]:
    """The modules of :data:`PACKAGES` this process has already imported from an extension."""
    return sorted(name for name, m in list(sys.modules.items())
                  if name.startswith(_SourceFirst.prefixes) and (getattr(m, "__file__", None) or "").endswith(
                      tuple(EXTENSION_SUFFIXES)))


def use_source() -> list[str]:
    """Import the modules of :data:`PACKAGES` from source from now on (what ``BRAID_PURE=1``
    does at start-up).  Returns :func:`compiled_imported`: the modules already imported from
    their extension, which stay so (empty: the process runs the source only)."""
    global PURE
    if not any(isinstance(f, _SourceFirst) for f in sys.meta_path):
        sys.meta_path.insert(0, _SourceFirst())
    PURE = True
    return compiled_imported()


PURE = os.environ.get("BRAID_PURE") == "1"
if not PURE and _compiled_is_stale():
    print("braid: the compiled modules are older than their source, which is used instead "
          "(rebuild them: make venv, or pip install --no-build-isolation -e .)", file=sys.stderr)
    PURE = True
if PURE and (_early := use_source()):
    print(f"braid: {', '.join(_early)} imported from the compiled build before node.build chose the source "
          "(import node, chaos, pipeline or bench before crdt)", file=sys.stderr)
