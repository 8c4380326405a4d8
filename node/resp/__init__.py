"""The Redis protocol: request parsing and reply encoding.

``parser.py`` and ``entries.py`` are compiled with mypyc like ``crdt``: which build a process
imports is chosen by node/build.py."""
