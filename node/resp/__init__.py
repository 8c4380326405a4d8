"""The Redis protocol: request parsing and reply encoding (compiled like ``crdt``; see its docs)."""

from crdt import PURE, prefer_source

if PURE:
    prefer_source(__name__)
