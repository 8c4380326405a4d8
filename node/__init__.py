"""Braid's region: the server, its commands, persistence, replication and tools."""

# First, before any compiled module (crdt, node.resp, node.persistence) is imported: which
# build of them this process runs (BRAID_PURE=1, a stale build; see node/build.py)
from node import build  # noqa: F401
