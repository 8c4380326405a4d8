"""On-disk persistence of a region: the operation log's file format (``aof.py``).

``lzf.py`` is compiled with mypyc like ``crdt`` (see its docs): with ``BRAID_PURE=1`` it is
imported from its source."""

from crdt import PURE, prefer_source

if PURE:
    prefer_source(__name__)
