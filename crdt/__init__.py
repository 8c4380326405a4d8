"""The pure core: streams, operations and their merge rules (no I/O, no clock).

The hot modules here are also compiled with mypyc from this same source (setup.py), and
Python imports a compiled module in preference to its ``.py`` file.  Which of the two a
process imports (``BRAID_PURE=1``: the source; a compiled module older than its source is
not used) is chosen outside this package, by ``node/build.py``, which the entry points
(``node``, ``chaos``, ``pipeline``, ``bench``, the tests' ``conftest.py``) import first.
"""
