"""A benchmark's record of when each operation passed each stage of the replication path
(``python -m bench.replication --stages``): off unless ``BRAID_REPL_TRACE`` is set."""

from __future__ import annotations

import os
import time


class StageTrace:
    """When each operation passed each stage of the replication path, for ``bench.replication
    --stages`` (off unless the environment variable ``BRAID_REPL_TRACE`` names a file prefix: the
    region then writes ``PREFIX.N``, N its number, when it stops).  A row is
    ``stage peer origin n monotonic_ns``: ``issued`` (the operation was applied here and
    joined the causal log), ``logged`` (its log record reached the OS: it may leave), ``batch``
    (put in a frame toward ``peer``), ``received`` (a frame from ``peer`` held it), ``applied``.
    CLOCK_MONOTONIC is one clock for every process of a machine, so rows of regions on one
    machine compare."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.rows: list[tuple[str, int, int, int, int]] = []

    def mark(self, stage: str, peer: int, origin: int, n: int) -> None:
        self.rows.append((stage, peer, origin, n, time.monotonic_ns()))

    def save(self) -> None:
        with open(self.path, "w") as f:
            f.writelines(f"{s} {p} {o} {n} {t}\n" for s, p, o, n, t in self.rows)
        self.rows.clear()


def stage_trace(region: int) -> StageTrace | None:
    prefix = os.environ.get("BRAID_REPL_TRACE")
    return StageTrace(f"{prefix}.{region}") if prefix else None
