"""The benchmark harness: ``python -m bench.run`` (see bench/README.md)."""

# First: which build of the compiled modules this process runs (BRAID_PURE=1; node/build.py)
import node.build  # noqa: F401
