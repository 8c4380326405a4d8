"""The recorded history of a chaos run: what clients did, what faults happened, what was sampled.

Every client operation is one :class:`Op`: who ran it, against which region,
when it was invoked (``t0``) and when its outcome came back (``t1``), in
seconds since the run started, and the outcome:

* ``ok``: the region acknowledged it (``value`` holds the reply that matters,
  e.g. the ID an XADD returned);
* ``fail``: the region refused it (an error reply), so it did not happen;
* ``info``: unknown - a timeout or a broken connection, so it may or may not
  have happened (Jepsen's "indeterminate").

A ``wait`` op is a waiter's ``WAIT``: ``value`` is the count it answered, ``args`` hold
the count it asked for (``wanted``), its timeout and the payloads of the writes it
``covers`` (chaos/workloads.py).

Checkers read only this and the final state of every region, so a run can be
checked again later from its JSON report.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any

OK, FAIL, INFO = "ok", "fail", "info"


@dataclass(slots=True)
class Op:
    process: str          # the worker that ran it
    f: str                # xadd, xadd-idmp, del, xtrim, xdel, xgroup-create, xgroup-destroy, read, ack, mode, wait
    region: int
    key: str
    t0: float
    t1: float = 0.0
    outcome: str = INFO
    value: Any = None     # ok: the reply that matters; fail/info: the error text
    args: dict = field(default_factory=dict)


@dataclass(slots=True)
class Fault:
    kind: str             # kill, shard-kill, pause, partition, one-way, bridge, long-partition, link-faults, ...
    targets: list
    t0: float
    t1: float | None = None  # healed at (None: until the end of the faults phase)
    detail: str = ""
    info: dict = field(default_factory=dict)  # what a fault measured (a shard kill: its restart, its siblings)


@dataclass(slots=True)
class Sample:
    t: float
    region: int
    reachable: bool
    vv: dict[int, int]
    shard: int | None = None  # a sharded run's sample of one shard (None: the region's, its shards summed)


class History:
    """Append-only and thread-safe: workers, the nemesis and the sampler all record here."""

    def __init__(self) -> None:
        self.start = time.monotonic()
        self.ops: list[Op] = []
        self.faults: list[Fault] = []
        self.samples: list[Sample] = []
        self.marks: dict[str, float] = {}  # phase changes: healed, converged, ...
        self.forced: dict[int, int] = {}   # region removed by force -> its frozen point (the last op kept)
        # a sharded run: region removed by force -> the frozen point of each shard group (shard 0's is forced's)
        self.forced_shards: dict[int, list[int]] = {}
        # a sharded run: each shard's own sample (the checkers judge a forced removal shard by shard)
        self.shard_samples: list[Sample] = []
        self._lock = threading.Lock()

    def now(self) -> float:
        return time.monotonic() - self.start

    def invoke(self, process: str, f: str, region: int, key: str, **args) -> Op:
        return Op(process, f, region, key, self.now(), args=args)

    def complete(self, op: Op, outcome: str, value: Any = None) -> Op:
        op.t1, op.outcome, op.value = self.now(), outcome, value
        with self._lock:
            self.ops.append(op)
        return op

    def fault(self, kind: str, targets: list, detail: str = "") -> Fault:
        fault = Fault(kind, list(targets), self.now(), detail=detail)
        with self._lock:
            self.faults.append(fault)
        return fault

    def healed(self, fault: Fault) -> None:
        fault.t1 = self.now()

    def sample(self, region: int, reachable: bool, vv: dict[int, int], shard: int | None = None) -> None:
        with self._lock:
            (self.samples if shard is None else self.shard_samples).append(
                Sample(self.now(), region, reachable, dict(vv), shard))

    def mark(self, name: str) -> None:
        self.marks[name] = self.now()

    def select(self, *fs: str, key: str | None = None, outcome: str | None = None) -> list[Op]:
        return [op for op in self.ops if (not fs or op.f in fs) and (key is None or op.key == key)
                and (outcome is None or op.outcome == outcome)]

    def to_json(self) -> dict:
        with self._lock:
            return {"ops": [asdict(o) for o in self.ops], "faults": [asdict(f) for f in self.faults],
                    "samples": [asdict(s) for s in self.samples], "marks": dict(self.marks),
                    "forced": {str(r): n for r, n in self.forced.items()},
                    "forced_shards": {str(r): n for r, n in self.forced_shards.items()},
                    "shard_samples": [asdict(s) for s in self.shard_samples]}

    @classmethod
    def from_json(cls, data: dict) -> History:
        h = cls()
        h.ops = [Op(**o) for o in data["ops"]]
        h.faults = [Fault(**f) for f in data["faults"]]
        def samples(key: str) -> list[Sample]:
            return [Sample(s["t"], s["region"], s["reachable"], {int(k): v for k, v in s["vv"].items()},
                           s.get("shard")) for s in data.get(key, [])]

        h.samples, h.shard_samples = samples("samples"), samples("shard_samples")
        h.marks = dict(data["marks"])
        h.forced = {int(r): n for r, n in data.get("forced", {}).items()}
        h.forced_shards = {int(r): list(n) for r, n in data.get("forced_shards", {}).items()}
        return h
