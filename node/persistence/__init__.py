"""On-disk persistence of a region: the operation log's file format (``aof.py``).

``lzf.py`` and ``listpack.py`` are compiled with mypyc like ``crdt``: with ``BRAID_PURE=1`` it is imported from its
source (node/build.py)."""
