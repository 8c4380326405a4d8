"""What clients do during a chaos run: workers in threads, each recording into the history.

Every worker owns one key (or a role on a shared key) so that each checker can
tell exactly which operations may have touched what it checks:

====================  ===========================================================
key                   written by, and what is checked there
====================  ===========================================================
``chaos:log``         producers: XADD of unique payloads, never deleted.  Waiters do
                      the same, each XADD followed by ``WAIT numregions timeout``
                      on the same connection (the WAIT op records its answer and
                      the writes it covers).  Consumers of group ``g`` read it
                      with XREADGROUP ``>`` and XACK, and crash now and then
                      (their entries are claimed later).  Checked: no
                      acknowledged entry lost, IDs unique, ``>`` never skipped
                      one; a WAIT-confirmed one survives the forced removal of
                      its region.  The reader's XADDs too, each read at another
                      region once ``BRAID.WAITFOR`` said it was applied there.
``chaos:idmp``        IDMP producers: XADD IDMP with retries of the same iid, after a
                      timeout or an error, to *another* region.  Checked: every
                      acknowledged iid is there exactly once.
``chaos:churn``       the churner: XADD, XDEL, XTRIM MAXLEN/MINID and DEL, all
                      concurrent.  Checked: an entry is gone only if a removal could
                      have observed it; a DEL removes what its own region had.
``chaos:trimmed``     the trimmer: the same without DEL, so that a deletion a region
                      failed to apply is never hidden by a later DEL of everything
                      (convergence checks it).
``chaos:groups``      the group churner: XGROUP CREATE/DESTROY and DEL.  Checked:
                      delete-wins - a group is alive only if a create outlived every
                      removal that observed it.
``chaos:spread:N``    sharded runs only: a producer per shard that none of the keys
                      above falls in (so every shard takes writes), as ``chaos:log``.
(all regions)         the mode flipper: the ID mode strict <-> semi-strict, at
                      every region (every shard of it: as ``braid-admin tune`` does).
====================  ===========================================================

Shards (``braid-chaos run --shards N``): every command goes to the shard of its
region that owns its key's slot (``node.region.slots``, the slot map of the
cluster file), as a cluster client sends it, and each operation records that
shard in its arguments (``shard``).  A key lives in one shard, so the history of
a key is the history of the commands sent to that shard; a reply ``MOVED`` or
``CROSSSLOT`` would mean the routing is wrong, and the checkers count them.

WAIT answers how many other regions hold every write its connection made before
it (node/commands/waits.py).  A waiter writes at a random active region, so that
whichever region a forced removal takes had WAIT-confirmed writes; the connection
is the one of its writes (a broken connection is replaced, and a WAIT on the new
one would cover nothing), and the WAIT op's ``covers`` lists the payloads of that
connection's acknowledged XADDs that no earlier WAIT confirmed (answered 1 or
more).  ``WAIT_TIMEOUT_MS`` stays below the client's socket timeout, so a WAIT
that reaches its timeout is answered, not cut off.

The reader checks that a client can read its own writes at another region: after its
XADD at one region it takes the connection's ``BRAID.TOKEN``, sends ``BRAID.WAITFOR
token timeout`` to another active region and, once that answered 1, reads the entry
there by its ID on the same connection (the ``read-own`` op: ``found`` or ``missing``).

Clients never retry by themselves (redis-py's retries are switched off): a
retry would be a second operation the history does not know about.

Workers follow the membership (:class:`Members`): they write only to the
active members of the moment, and a region that joins (once active) or leaves
(from its removal on) is picked up or dropped at the next operation.  A
``LOADING`` (joining, not caught up) or ``READONLY`` (leaving or removed) reply is
recorded like any error reply: a refused operation, which did not happen.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from node.region.slots import key_slot

from .history import FAIL, INFO, OK, History

LOG, IDMP, CHURN, TRIMMED, GROUPS = "chaos:log", "chaos:idmp", "chaos:churn", "chaos:trimmed", "chaos:groups"
KEYS = (LOG, IDMP, CHURN, TRIMMED, GROUPS)
SPREAD = "chaos:spread:"  # sharded runs: keys of producers that give every shard writes
GROUP = "g"
WAIT_TIMEOUT_MS = 500  # a waiter's WAIT timeout: below connect()'s 2 s socket timeout
READ_OWN_TIMEOUT_MS = 500  # the reader's BRAID.WAITFOR timeout: the same bound
MODES = ("strict", "semi-strict")


def connect(address: tuple[str, int], timeout: float = 2.0) -> redis.Redis:
    host, port = address
    return redis.Redis(host=host, port=port, socket_timeout=timeout, socket_connect_timeout=timeout,
                       retry=Retry(NoBackoff(), 0), protocol=2)


def _text(v) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


class Members:
    """The regions clients may use, as the membership changes during a run (thread-safe).

    ``addresses``: every member whose process runs (region number -> RESP address);
    ``writable``: those that take writes (active).  Both are replaced, never mutated,
    so a reader's snapshot stays consistent.

    Sharded regions: ``shards`` gives every region's address per shard (``addresses``
    are shard 0's) and ``owners`` the slot map (per slot, its shard: ``SlotMap.owners``);
    a command goes to :meth:`address` of its key."""

    def __init__(self, addresses: dict[int, tuple[str, int]], writable=None,
                 shards: dict[int, list[tuple[str, int]]] | None = None, owners: bytes | None = None) -> None:
        self.addresses = dict(addresses)
        self.writable = frozenset(addresses if writable is None else writable)
        self.shards = {r: list(a) for r, a in shards.items()} if shards else None
        self.owners = owners
        self._lock = threading.Lock()

    @property
    def shard_count(self) -> int:
        return len(next(iter(self.shards.values()))) if self.shards else 1

    def shard_of(self, key: str) -> int:
        """The shard that owns ``key`` (0 in an unsharded database)."""
        return self.owners[key_slot(key.encode())] if self.owners is not None and key else 0

    def at(self, region: int, shard: int) -> tuple[str, int]:
        return self.shards[region][shard] if self.shards else self.addresses[region]

    def region_addresses(self, region: int) -> list[tuple[str, int]]:
        return list(self.shards[region]) if self.shards else [self.addresses[region]]

    def groups(self, regions=None) -> list[dict[int, tuple[str, int]]]:
        """Per shard, every region's address of it (of ``regions``, default the members): the
        replication groups, each of which must converge on its own."""
        regions = sorted(self.addresses if regions is None else regions)
        return [{r: self.at(r, k) for r in regions} for k in range(self.shard_count)]

    def frozen(self) -> Members:
        """The members of now, fixed (for the phases after the faults)."""
        return Members(self.addresses, self.writable, self.shards, self.owners)

    def set(self, region: int, address: tuple[str, int] | None, writable: bool,
            shards: list[tuple[str, int]] | None = None) -> None:
        """Region ``region`` now runs at ``address`` (None: no longer a member; ``shards``: a sharded
        region's address of each shard, shard 0's first) and takes writes or not."""
        with self._lock:
            addresses = dict(self.addresses)
            if address is None:
                addresses.pop(region, None)
            else:
                addresses[region] = address
            if self.shards is not None and shards is not None:
                self.shards = {**self.shards, region: list(shards)}
            self.addresses = addresses
            w = set(self.writable) - {region}
            if writable and address is not None:
                w.add(region)
            self.writable = frozenset(w)

    def write_targets(self) -> list[int]:
        addresses, writable = self.addresses, self.writable
        return sorted(r for r in addresses if r in writable) or sorted(addresses)


class Worker(threading.Thread):
    """One client process: picks operations from its own seeded generator."""

    pause_s = 0.005  # between operations, so that a run is mostly about concurrency, not a flood

    def __init__(self, name: str, seed: int, history: History, addresses: dict[int, tuple[str, int]] | Members,
                 stop: threading.Event) -> None:
        super().__init__(name=name, daemon=True)
        self.rng = random.Random(f"{seed}:{name}")
        self.history = history
        self.members = addresses if isinstance(addresses, Members) else Members(addresses)
        self.stop_event = stop
        self._clients: dict[tuple[int, int], redis.Redis] = {}  # (region, shard) -> its connection
        self.error: BaseException | None = None

    @property
    def addresses(self) -> dict[int, tuple[str, int]]:
        return self.members.addresses

    @property
    def regions(self) -> list[int]:
        """Where this worker may write now: the active members."""
        return self.members.write_targets()

    def client(self, region: int, shard: int = 0) -> redis.Redis:
        c = self._clients.get((region, shard))
        if c is None:
            c = self._clients[(region, shard)] = connect(self.members.at(region, shard))
        return c

    def call(self, f: str, region: int, key: str, command: Callable[[redis.Redis], object],
             at_shard: int | None = None, **args):
        """Run one operation against one region - at the shard owning ``key``, or ``at_shard`` for a
        keyless one - and record its outcome; returns (outcome, value).  A region that is no member
        any more is not asked (nothing is recorded)."""
        shard = self.members.shard_of(key) if at_shard is None else at_shard
        if region not in self.addresses:
            for k in [k for k in self._clients if k[0] == region]:
                self._clients.pop(k).close()
            return FAIL, "not a member"
        if self.members.shards:
            args["shard"] = shard
        op = self.history.invoke(self.name, f, region, key, **args)
        try:
            value = command(self.client(region, shard))
        except redis.ResponseError as e:
            if str(e).startswith("MISCONF"):
                # a write held while the disk failed, answered once aof-write-error-timeout-ms
                # passed, was applied and may yet be logged: its outcome is unknown, as a timeout's
                # (one refused at once is not; the same text cannot tell them apart)
                self.history.complete(op, INFO, str(e))
                return INFO, None
            self.history.complete(op, FAIL, str(e))
            return FAIL, str(e)
        except (redis.ConnectionError, redis.TimeoutError, OSError) as e:
            broken = self._clients.pop((region, shard), None)  # a broken connection is not reused
            if broken is not None:
                broken.close()  # nor left open: a run with many timeouts would exhaust file descriptors
            self.history.complete(op, INFO, type(e).__name__)
            return INFO, None
        if isinstance(value, bytes):
            value = _text(value)  # replies such as b"OK" are recorded as text (the JSON report)
        self.history.complete(op, OK, value)
        return OK, value

    def xadd_on_connection(self, region: int, payload: str) -> tuple[str, object, redis.Redis | None]:
        """XADD ``payload`` to chaos:log at ``region``: (outcome, the ID, the connection it went on -
        what a WAIT or BRAID.TOKEN after it must use; None if none was made)."""
        used: list[redis.Redis] = []

        def xadd(c: redis.Redis) -> str:
            used.append(c)
            return _text(c.execute_command("XADD", LOG, "*", "v", payload))

        outcome, value = self.call("xadd", region, LOG, xadd, payload=payload)
        return outcome, value, used[0] if used else None

    def run(self) -> None:
        try:
            while not self.stop_event.is_set():
                self.step()
                self.stop_event.wait(self.pause_s)
        except BaseException as e:  # a worker bug must fail the run, not vanish in a thread
            self.error = e
        finally:
            for c in self._clients.values():
                c.close()

    def step(self) -> None:
        raise NotImplementedError


class Producer(Worker):
    """XADD unique payloads to chaos:log (or ``key``) at a home region (another one after an error)."""

    def __init__(self, *a, home: int, key: str = LOG, **kw) -> None:
        super().__init__(*a, **kw)
        self.home, self.count, self.key = home, 0, key

    def step(self) -> None:
        self.count += 1
        payload, key = f"{self.name}-{self.count}", self.key
        if self.home not in self.regions:  # it left the database, or stopped taking writes
            self.home = self.rng.choice(self.regions)
        outcome, value = self.call("xadd", self.home, key,
                                   lambda c: _text(c.execute_command("XADD", key, "*", "v", payload)), payload=payload)
        if outcome != OK:
            self.home = self.rng.choice([r for r in self.regions if r != self.home] or self.regions)


class Waiter(Worker):
    """XADD unique payloads to chaos:log at a random active region, each followed on the same
    connection by ``WAIT wanted WAIT_TIMEOUT_MS``, recorded as a ``wait`` op: its value is the
    count answered, its ``covers`` the payloads it vouches for (module doc)."""

    def __init__(self, *a, wanted: int, **kw) -> None:
        super().__init__(*a, **kw)
        self.wanted, self.count = wanted, 0
        # (region, shard) -> (the connection, payloads it wrote that no WAIT confirmed yet)
        self.unconfirmed: dict[tuple[int, int], tuple[redis.Redis, list[str]]] = {}

    def step(self) -> None:
        self.count += 1
        payload, region = f"{self.name}-{self.count}", self.rng.choice(self.regions)
        outcome, _, connection = self.xadd_on_connection(region, payload)
        if outcome != OK:
            return
        where = (region, self.members.shard_of(LOG))
        mine = self.unconfirmed.get(where)
        if mine is None or mine[0] is not connection:  # a new connection: the old one's writes are not its
            mine = self.unconfirmed[where] = (connection, [])
        mine[1].append(payload)
        # the call reuses the connection of the XADD: only an error replaces it, and then nothing is recorded
        # here but an unknown WAIT
        outcome, held = self.call("wait", region, LOG, lambda c: c.execute_command(
            "WAIT", self.wanted, WAIT_TIMEOUT_MS), wanted=self.wanted, timeout_ms=WAIT_TIMEOUT_MS,
            covers=list(mine[1]))
        if outcome == OK and int(held) >= 1:
            mine[1].clear()


class Reader(Worker):
    """Read your writes at another region: XADD a unique payload to chaos:log at a random active
    region, take that connection's ``BRAID.TOKEN``, send ``BRAID.WAITFOR token`` to another active
    region, and once it answered 1 read the entry there by its ID (``XRANGE``), recorded as a
    ``read-own`` op: ``found``, or ``missing`` (module doc)."""

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.count = 0

    def step(self) -> None:
        self.count += 1
        payload, home = f"{self.name}-{self.count}", self.rng.choice(self.regions)
        outcome, entry_id, connection = self.xadd_on_connection(home, payload)
        others = [r for r in self.regions if r != home]
        if outcome != OK or not others:
            return
        # on the connection of the XADD (an error would have replaced it: then no token is asked)
        outcome, token = self.call("token", home, LOG, lambda c: _text(c.execute_command("BRAID.TOKEN"))
                                   if c is connection else "another connection")
        if outcome != OK or token == "another connection":
            return
        there = self.rng.choice(others)
        outcome, applied = self.call("waitfor", there, LOG, lambda c: c.execute_command(
            "BRAID.WAITFOR", token, READ_OWN_TIMEOUT_MS), token=token, origin=home, timeout_ms=READ_OWN_TIMEOUT_MS)
        if outcome != OK or int(applied) != 1:
            return
        self.call("read-own", there, LOG, lambda c: "found" if c.execute_command("XRANGE", LOG, entry_id, entry_id)
                  else "missing", id=entry_id, payload=payload, origin=home, token=token)


class IdmpProducer(Worker):
    """XADD IDMP to chaos:idmp; a failed or unknown attempt is retried with the same iid elsewhere."""

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.count = 0

    def step(self) -> None:
        self.count += 1
        iid = f"{self.name}-{self.count}"
        region = self.rng.choice(self.regions)
        for attempt in range(len(self.regions)):
            outcome, _ = self.call("xadd-idmp", region, IDMP, lambda c: _text(c.execute_command(
                "XADD", IDMP, "IDMP", self.name, iid, "*", "iid", iid)), iid=iid, attempt=attempt)
            if outcome == OK or self.stop_event.is_set():
                return
            region = self.rng.choice([r for r in self.regions if r != region] or self.regions)


class Consumer(Worker):
    """A consumer of group g on chaos:log at a home region; it crashes now and then.

    A crash abandons the batch it read (never acknowledged) and comes back under a
    new consumer name; abandoned entries are claimed with XAUTOCLAIM."""

    crash_p = 0.05

    def __init__(self, *a, home: int, **kw) -> None:
        super().__init__(*a, **kw)
        self.home, self.generation = home, 0

    @property
    def consumer(self) -> str:
        return f"{self.name}.{self.generation}"

    def step(self) -> None:
        if self.home not in self.regions:
            self.home = self.rng.choice(self.regions)
        if self.rng.random() < 0.2:
            outcome, ids = self.call("claim", self.home, LOG, lambda c: claim_ids(c, self.consumer, 2000)[1],
                                     consumer=self.consumer)
        else:
            outcome, ids = self.call("read", self.home, LOG, lambda c: read_ids(c, self.consumer, 20),
                                     consumer=self.consumer)
        if outcome != OK:
            if outcome == INFO:
                self.home = self.rng.choice(self.regions)
            return
        if ids and self.rng.random() < self.crash_p:
            self.generation += 1  # crashed: this batch stays pending under the old name
            return
        if ids:
            self.call("ack", self.home, LOG, lambda c: c.execute_command("XACK", LOG, GROUP, *ids), ids=ids)


def read_ids(c: redis.Redis, consumer: str, count: int) -> list[str]:
    reply = c.execute_command("XREADGROUP", "GROUP", GROUP, consumer, "COUNT", count, "STREAMS", LOG, ">")
    return [_text(eid) for _key, entries in (reply or []) for eid, _fields in entries]


def claim_ids(c: redis.Redis, consumer: str, min_idle_ms: int, count: int = 50,
              start: str = "0-0") -> tuple[str, list[str]]:
    """XAUTOCLAIM: (the cursor to continue from, the IDs claimed)."""
    reply = c.execute_command("XAUTOCLAIM", LOG, GROUP, consumer, min_idle_ms, start, "COUNT", count)
    return _text(reply[0]), [_text(eid) for eid, _fields in reply[1]]


class Churner(Worker):
    """XADD, XDEL, XTRIM and (if ``dels``) DEL on one key, at random regions."""

    def __init__(self, *a, key: str, dels: bool, **kw) -> None:
        super().__init__(*a, **kw)
        self.key, self.dels = key, dels
        self.count, self.added = 0, []

    def step(self) -> None:
        key, region, roll = self.key, self.rng.choice(self.regions), self.rng.random()
        if roll < 0.80:
            self.count += 1
            payload = f"{self.name}-{self.count}"
            outcome, eid = self.call("xadd", region, key, lambda c: _text(c.execute_command(
                "XADD", key, "*", "v", payload)), payload=payload)
            if outcome == OK:
                self.added.append(eid)
        elif roll < 0.90 and self.added:
            eid = self.rng.choice(self.added[-20:])  # recent: older ones are mostly trimmed or deleted
            self.call("xdel", region, key, lambda c: c.execute_command("XDEL", key, eid), id=eid)
        elif roll < 0.97 or not self.dels:
            if self.rng.random() < 0.5:
                n = self.rng.randint(5, 40)
                self.call("xtrim", region, key, lambda c: c.execute_command("XTRIM", key, "MAXLEN", n), maxlen=n)
            elif self.added:
                cutoff = self.rng.choice(self.added[-40:])
                self.call("xtrim", region, key, lambda c: c.execute_command("XTRIM", key, "MINID", cutoff),
                          minid=cutoff)
        else:
            self.call("del", region, key, lambda c: c.execute_command("DEL", key))


class GroupChurner(Worker):
    """XGROUP CREATE / DESTROY and DEL on chaos:groups, at random regions."""

    names = ("a", "b", "c")

    def step(self) -> None:
        region, roll, group = self.rng.choice(self.regions), self.rng.random(), self.rng.choice(self.names)
        if roll < 0.5:
            self.call("xgroup-create", region, GROUPS, lambda c: c.execute_command(
                "XGROUP", "CREATE", GROUPS, group, "$", "MKSTREAM"), group=group)
        elif roll < 0.85:
            self.call("xgroup-destroy", region, GROUPS, lambda c: c.execute_command(
                "XGROUP", "DESTROY", GROUPS, group), group=group)
        else:
            self.call("del", region, GROUPS, lambda c: c.execute_command("DEL", GROUPS))


class ModeFlipper(Worker):
    """Switch the ID mode between strict and semi-strict at every region (as braid-admin tune does)."""

    pause_s = 2.0

    def step(self) -> None:
        mode = self.rng.choice(MODES)
        for region in sorted(self.addresses):
            for shard in range(self.members.shard_count):
                self.call("mode", region, "", lambda c: c.execute_command(
                    "BRAID.CONFIG", "SET", "crdt_xadd_id_uniqueness_mode", mode), at_shard=shard, mode=mode)


def spread_keys(members: Members) -> list[str]:
    """Sharded: a key of its own for each shard that none of the workload's keys falls in."""
    if not members.shards:
        return []
    taken = {members.shard_of(k) for k in KEYS}
    out = []
    for shard in range(members.shard_count):
        if shard not in taken:
            out.append(next(k for k in (f"{SPREAD}{i}" for i in range(100_000)) if members.shard_of(k) == shard))
    return out


def start_workers(seed: int, history: History, addresses: dict[int, tuple[str, int]] | Members,
                  stop: threading.Event, producers: int = 2, consumers: int = 2,
                  waits: tuple[int, ...] = (1, 2)) -> list[Worker]:
    """The workload's workers, started.  ``waits``: one waiter per entry, asking WAIT for that many
    regions (at most the other regions there are)."""
    members = addresses if isinstance(addresses, Members) else Members(addresses)
    regions, addresses = members.write_targets(), members
    common = dict(seed=seed, history=history, addresses=addresses, stop=stop)
    workers: list[Worker] = []
    for i in range(producers):
        workers.append(Producer(f"producer-{i}", home=regions[i % len(regions)], **common))
    for i, wanted in enumerate(waits):
        wanted = max(1, min(wanted, len(members.addresses) - 1))
        workers.append(Waiter(f"waiter-{i}", wanted=wanted, **common))
    for i in range(consumers):
        workers.append(Consumer(f"consumer-{i}", home=regions[(i + 1) % len(regions)], **common))
    if len(members.addresses) > 1:  # (another region to read at)
        workers.append(Reader("reader", **common))
    workers += [IdmpProducer("idmp-0", **common), IdmpProducer("idmp-1", **common),
                Churner("churner", key=CHURN, dels=True, **common),
                Churner("trimmer", key=TRIMMED, dels=False, **common),
                GroupChurner("groups", **common), ModeFlipper("modes", **common)]
    for i, key in enumerate(spread_keys(members)):
        workers.append(Producer(f"spreader-{i}", home=regions[i % len(regions)], key=key, **common))
    for w in workers:
        w.start()
    return workers
