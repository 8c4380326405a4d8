"""Long commands prepared in slices of the event loop, then completed in one piece.

Theory of operation
-------------------
A few commands do work in proportion to a whole stream: DUMP encodes every entry of it,
RESTORE decodes every entry of its payload.  Run in one go they hold a region's loop for
as long as that takes - half a second or more for 50 MB - and every other client waits
(Redis, single-threaded, holds its loop the same way).  Both split in two:

- a *preparation* that changes nothing anyone can see: the stream's snapshot encoded into a
  payload, or a payload decoded into a stream that is in no keyspace yet.  It is a
  generator (:data:`Steps`) that pauses between stream nodes and returns the prepared value;
- a short *completion*: the payload returned, or the decoded stream put in place.

A handler first takes the prepared value, if the command is running again with it
(:func:`take_prepared`); else it starts the preparation with :func:`prepare`.  Where the
client can wait for it - a connected client, outside MULTI/EXEC (``Session.may_slice``) -
that is a :class:`Sliced`, which the handler returns as its reply: the server advances the
generator between other clients' turns while that client's later commands wait, then runs
the very same command again (the same argv list) with the value in hand, and the
completion runs as any command runs: its checks (does the key exist now? is memory over
the limit?), its effects, its record in the append-only file and its replication happen
then, at once.  A DUMP answers the stream as it was when the command arrived (the snapshot);
a RESTORE takes effect when it completes.

Everywhere else - the sans-IO core, the simulation, a replay of the log, EXEC's commands -
:func:`prepare` runs the generator to its end at once: the same result in one piece.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

Steps = Generator[None, None, Any]
"""A preparation: ``next()`` does one step; its return value (``StopIteration.value``) is
the prepared value; an exception it raises (a ``ReplyError``) is the command's reply."""

NOT_PREPARED = object()  # take_prepared: this run of the command has no prepared value


class Sliced:
    """A command's reply while its preparation runs in slices (the server's to advance)."""

    __slots__ = ("steps", "argv")

    def __init__(self, steps: Steps) -> None:
        self.steps = steps
        self.argv: list[bytes] | None = None  # the command, run again once the steps are done


def run_to_end(steps: Steps) -> Any:
    """Every step of ``steps`` now; its value."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


def take_prepared(client: Any, argv: list[bytes]) -> Any:
    """The value prepared for this very command (``argv``, the same list), once; else
    :data:`NOT_PREPARED`."""
    held = client.prepared
    if held is None or held[0] is not argv:
        return NOT_PREPARED
    client.prepared = None
    return held[1]


def prepare(client: Any, steps: Steps, large: bool) -> Any:
    """A :class:`Sliced` for the server to advance when the work is ``large`` and the client
    can wait for it; else the prepared value, made now."""
    if large and client.may_slice and not client.in_exec:
        return Sliced(steps)
    return run_to_end(steps)
