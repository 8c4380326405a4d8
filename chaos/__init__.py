"""Braid's chaos testing: ``braid-chaos run`` against real regions, ``braid-chaos sim`` (see README.md)."""

# First: which build of the compiled modules this process runs (node/build.py)
import node.build  # noqa: F401
