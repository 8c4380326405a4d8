"""On-disk persistence of a region: the operation log's file format (``aof.py``)."""
