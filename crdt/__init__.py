"""The pure core: streams, operations and their merge rules (no I/O, no clock).

The hot modules here are also compiled with mypyc from this same source (setup.py), and
Python imports a compiled module in preference to its ``.py`` file.  Which of the two a
process imports (``BRAID_PURE=1``: the source; a compiled module older than its source is
not used) is chosen outside this package, by ``node/build.py``, which the entry points
(``node``, ``chaos``, ``pipeline``, ``bench``, the tests' ``conftest.py``) import first.
"""

# Inert, for node/resp/__init__.py only, which still runs ``if PURE: prefer_source(__name__)``
# (node/resp/ was left out of the change that moved the choice; delete both with those lines).  node/build.py has made the
# choice for node.resp before that package is imported, so nothing needs doing there.
PURE = False


def prefer_source(package: str) -> None:
    """Nothing: node/build.py chooses the build (see the module's docstring)."""
