"""Deep copies of the core's state objects (COPY duplicates a stream, crdt/resolve.py).

``copy.deepcopy`` rebuilds an object by calling its class without arguments and filling in
its slots; a class compiled with mypyc (setup.py) runs ``__init__`` on creation and has no
slots to fill, so each state class defines ``__deepcopy__``: it makes the object with its
constructor, records it in ``memo`` (a Nack is shared by its group's and its consumer's
PEL: one copy serves both) and copies each attribute with :func:`copy_attributes`.
"""

from __future__ import annotations

from copy import deepcopy
from typing import Any, TypeVar

T = TypeVar("T")


def copy_attributes(source: Any, twin: T, names: tuple[str, ...], memo: dict) -> T:
    """Fill ``twin`` with deep copies of ``source``'s attributes ``names``; returns ``twin``."""
    memo[id(source)] = twin
    for name in names:
        setattr(twin, name, deepcopy(getattr(source, name), memo))
    return twin
