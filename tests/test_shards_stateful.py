"""A Hypothesis state machine over a sharded database: slot routing, step by step.

Theory of operation
-------------------
A database of two or three regions, each split over two shards by hash slot
(docs/sharding.md): every (region, shard) is a real region core on its shard view
(``ClusterConfig.shard_view``), never started - commands through the real dispatch
(``RegionCore.call``: routing, MULTI queueing, the handlers), operations through the
real codec and causal log, as in tests/test_convergence_stateful.py.  Shard K of every
region forms one replication group: the machine delivers operations only among the
cores of one group, with test_convergence's ``deliver`` / ``sync`` (envelopes handed to
the receiver's replication hub), never across groups.

Keys come from a small pool of plain and hash-tagged keys (``a``, ``{a}x``, ``{a}y``
share a slot, ``x`` has another slot of the same shard; ``b``, ``{b}x``, ``{b}y`` and
``c`` likewise on the other shard), so multi-key commands are sometimes of one slot and
sometimes of several, within one shard or across both.  Every rule sends a real
command to a region and a shard picked independently of its keys: sometimes the owner,
sometimes the other shard.

The model predicts each reply from the slot map alone, before anything else:

- keys of more than one slot: ``CROSSSLOT Keys in request don't hash to the same slot``;
- one slot that another shard owns: ``MOVED <slot> <host>:<port>``, the owner's client
  port in this region (every region has its own host and ports here, so a MOVED naming
  another region's or another shard's endpoint is caught);
- either way nothing changes at the shard: its keyspace (entries per origin log,
  groups with their cursors, consumers and PELs), its causal log (end, version vector,
  pending operations) and its dirty counter are what they were;
- else the command runs, and its reply is checked against a model of the region's keys
  (each key's entry IDs and group names): XADD, XDEL, XTRIM MAXLEN, DEL, EXISTS, XREAD,
  COPY, RENAME, XGROUP CREATE, XREADGROUP, XACK (groups and consumers may be named
  ``streams``, XREADGROUP's keyword), CLUSTER KEYSLOT / COUNTKEYSINSLOT / GETKEYSINSLOT
  (none of another shard's slots), and the keyless DBSIZE, KEYS and FLUSHALL, which a
  shard runs for its own keys only - with the Active-Active rules
  (docs/active-active.md): a key with no entries and no groups does not exist (XDEL or
  XTRIM of its last entry removes it), RENAME carries the entries but not the groups,
  COPY carries both, entries sharing an ID collapse into one on COPY and RENAME;
- routing comes before every other refusal: a shard over its maxmemory answers MOVED
  for a write of another shard's key (in MULTI too) and OOM for its own;
- in MULTI, each command is checked as it is queued (a key of another shard: MOVED, a
  command of two slots: CROSSSLOT, and the transaction is flagged; WATCH, which runs at
  once inside MULTI, too - of this shard's keys it is refused and flags nothing); EXEC
  checks the keys of every queued command: two slots answer CROSSSLOT and nothing runs
  (also when a command was refused while queued, as Redis Cluster checks the slots
  first), else a flagged transaction answers EXECABORT and nothing runs, else every
  command runs and each reply is checked against the model.

Invariants, after every step:

- every key a shard holds is of a slot that shard owns;
- every operation in a shard's causal log (applied or waiting for its dependencies) is
  decoded: its key is of a slot that shard owns (so no operation ever crossed groups);
- the model is each shard's keyspace: per region, the keys of the model are the union
  of its shards' keys, each in its owner, with the same entry IDs and groups.

The model's keyspace of a region follows the commands that ran there exactly; what
another region's operations change is not modelled (tests/test_convergence_stateful.py
is the machine of those rules): after a delivery the model takes the receiving shard's
keys as they are.  A sync (full delivery within one group) is checked instead: shard K
of every region converges (no operation waiting, one version vector and history, the
same entries, groups and key existence), a key that only one region touched since the
group's previous sync ends everywhere as it was at that region, and any other key ends
with no entry, group or existence that no region held before the sync.

No faults: no crash, no lost or cut link (the simulation's sharded runs have those,
chaos/sim/shards.py).  Hypothesis's statistics (``--hypothesis-show-statistics``) list
how often each command ran or was refused with MOVED or CROSSSLOT.

Building the machine found three routing divergences from Redis Cluster, now regression
tests at the end of this file: XREADGROUP with a group or consumer named ``streams`` was
routed by the wrong keys, a command queued for another shard answered OOM (or a
membership refusal) rather than MOVED, and a WATCH inside MULTI refused with MOVED left
the transaction to run.
"""

from __future__ import annotations

import dataclasses
import sys

import pytest
from hypothesis import Phase, event, settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    multiple,
    rule,
    run_state_machine_as_test,
)

from crdt import ops
from crdt.ids import MAX_ID, MIN_ID
from node.activeactive import opcodec
from node.activeactive.cluster_config import ClusterConfig, RegionSpec
from node.region.config import Config
from node.region.core import RegionCore, Session
from node.region.routing import CROSSSLOT, ShardRouting
from node.region.slots import SlotMap, key_slot
from node.resp.encoder import NULL_ARRAY, ReplyError
from tests.test_convergence import STRIDE, Region, deliver, sync

SHARDS = (0, 1)
SLOT_MAP = SlotMap.even(len(SHARDS))
OWNER = SLOT_MAP.owners()
# shard 1 (slots 8192-16383): a, {a}x, {a}y in slot 15495, x in 16287;
# shard 0 (slots 0-8191): b, {b}x, {b}y in slot 3300, c in 7365
KEYS = [b"a", b"{a}x", b"{a}y", b"x", b"b", b"{b}x", b"{b}y", b"c"]
SLOTS_USED = sorted({key_slot(k) for k in KEYS})
# a group or consumer may be named like XREADGROUP's STREAMS keyword: its keys are still the
# ones after the keyword itself (Redis's key spec searches for STREAMS from the fourth argument)
GROUPS = [b"g1", b"streams"]
CONSUMERS = [b"c1", b"STREAMS"]
START_MS = 1_000
EXECABORT = "EXECABORT Transaction discarded because of previous errors."
WATCH_IN_MULTI = "ERR WATCH inside MULTI is not allowed"
OOM_ERROR = "OOM command not allowed when used memory > 'maxmemory'."
NO_KEY_FOR_XGROUP = "ERR The XGROUP subcommand requires the key to exist"


def host(n: int) -> str:
    return f"10.0.0.{n}"


def client_port(n: int, shard: int) -> int:
    return 7000 + 100 * n + shard


def cluster(regions: int) -> ClusterConfig:
    """The cluster file of a database of ``regions`` regions of two shards each; every
    region has its own host, every shard its own ports."""
    specs = [RegionSpec(f"region-{n}", n, host(n), client_port(n, 0), 8000 + 100 * n,
                        ports=[client_port(n, k) for k in SHARDS], repl_ports=[8000 + 100 * n + k for k in SHARDS])
             for n in range(1, regions + 1)]
    cfg = ClusterConfig("shards", "db", "token", STRIDE, specs, shards=SLOT_MAP)
    cfg.validate()
    return cfg


def owner(key: bytes) -> int:
    return OWNER[key_slot(key)]


# the pool mixes what the rules need: both shards, two slots in each, hash tags sharing a slot
assert {owner(k) for k in KEYS} == set(SHARDS)
assert all(len({key_slot(k) for k in KEYS if owner(k) == s}) == 2 for s in SHARDS)
assert key_slot(b"{a}x") == key_slot(b"a") and key_slot(b"{b}y") == key_slot(b"b")


class ShardCore(Region):
    """Shard ``shard`` of a region: a region core on the cluster file's shard view, with a
    client session; the clock is its region's (the shards of a region share a machine)."""

    def __init__(self, cfg: ClusterConfig, number: int, shard: int, clocks: dict[int, int]) -> None:
        view = cfg.shard_view(shard)
        self.number, self.shard = number, shard
        self.server = RegionCore(Config(), cluster=(view, view.by_number(number)), clock=lambda: clocks[number])
        self.aa = self.server.aa
        self.client = Session(self.server)
        self.client.authenticated = True
        self.checked = 0  # envelopes of the causal log whose keys were checked


@dataclasses.dataclass
class Key:
    """What the model knows of a key at one region: its entry IDs in order (an ID two
    origin logs hold twice) and its groups.  It exists while it has either."""

    entries: list[tuple[int, int]]
    groups: set[bytes]


def parse_id(raw: bytes) -> tuple[int, int]:
    ms, seq = raw.split(b"-")
    return int(ms), int(seq)


def fmt_id(id_: tuple[int, int]) -> bytes:
    return b"%d-%d" % id_


def shard_state(core: ShardCore) -> tuple:
    """Everything a refused command must leave as it was: the keyspace (entries per origin
    log, groups with their cursors, consumers and PELs), the causal log and the dirty counter."""
    keys = {}
    for key, s in sorted(core.keys.items()):
        logs = {o: list(log.range(MIN_ID, MAX_ID)) for o, log in sorted(s.logs.items())}
        groups = {name: (g.created_dot, g.last_id, sorted(g.pel), sorted(g.consumers))
                  for name, g in sorted(s.groups.items())}
        keys[key] = (logs, groups, s.last_id)
    causal = core.causal
    return keys, causal.end, dict(causal.vv), sorted(causal.pending), core.server.db.dirty


def keys_of(core: ShardCore) -> dict[bytes, Key]:
    """A shard's keyspace as the model writes it."""
    return {key: Key([eid for eid, _ in s.range(MIN_ID, MAX_ID)], set(s.groups)) for key, s in core.keys.items()}


def note(what: str) -> None:
    """Which reply class a command got (--hypothesis-show-statistics lists them)."""
    if currently_in_test_context():
        event(what)


def show(reply) -> str:
    return f"-{reply.message}" if isinstance(reply, ReplyError) else repr(reply)


regions_st = Bundle("regions")
shards_st = st.sampled_from(SHARDS)
groups_st = st.sampled_from(GROUPS)
# where a command's keys come from: the whole pool, one shard's keys, or one slot's (a
# one-key slot gives a command naming one key twice)
POOLS = [KEYS, *([k for k in KEYS if owner(k) == s] for s in SHARDS),
         *([k for k in KEYS if key_slot(k) == slot] for slot in SLOTS_USED)]
keys_st = st.sampled_from(KEYS)
pair_st = st.sampled_from(POOLS).flatmap(lambda pool: st.tuples(st.sampled_from(pool), st.sampled_from(pool)))


def queued_st(pool: list[bytes]):
    """A command MULTI queues, of keys of ``pool``: (argv, the keys routing reads)."""
    one = st.sampled_from(pool)
    return st.one_of(
        st.builds(lambda k: ([b"XADD", k, b"*", b"f", b"v"], [k]), one),
        st.builds(lambda k1, k2: ([b"DEL", k1, k2], [k1, k2]), one, one),
        st.builds(lambda k1, k2: ([b"EXISTS", k1, k2], [k1, k2]), one, one),
        st.builds(lambda k, g: ([b"XGROUP", b"CREATE", k, g, b"0", b"MKSTREAM"], [k]), one, groups_st),
        st.builds(lambda k, n: ([b"XTRIM", k, b"MAXLEN", b"%d" % n], [k]), one, st.integers(0, 2)),
        st.builds(lambda k1, k2: ([b"COPY", k1, k2], [k1, k2]), one, one),
        st.builds(lambda k1, k2: ([b"RENAME", k1, k2], [k1, k2]), one, one),
        st.builds(lambda k: ([b"CLUSTER", b"KEYSLOT", k], []), one),
        st.builds(lambda k: ([b"WATCH", k], [k]), one),  # not queued: refused inside MULTI
    )


transaction_st = st.sampled_from(POOLS).flatmap(lambda pool: st.lists(queued_st(pool), min_size=1, max_size=3))


class ShardsMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.cores: dict[tuple[int, int], ShardCore] = {}
        self.clocks: dict[int, int] = {}
        self.model: dict[int, dict[bytes, Key]] = {}
        # per shard group: key -> the regions where a command ran on it since the group's last sync
        self.touched: dict[int, dict[bytes, set[int]]] = {s: {} for s in SHARDS}

    @initialize(target=regions_st, count=st.sampled_from([2, 3]))
    def world(self, count):
        cfg = cluster(count)
        self.clocks = {n: START_MS for n in range(1, count + 1)}
        self.cores = {(n, s): ShardCore(cfg, n, s, self.clocks) for n in self.clocks for s in SHARDS}
        self.model = {n: {} for n in self.clocks}
        return multiple(*self.clocks)

    # ------------------------------------------------------------ routing and the model
    @staticmethod
    def refusal(n: int, shard: int, keys: list[bytes]) -> str | None:
        """What routing answers, from the slot map alone (None: the command runs)."""
        slots = {key_slot(k) for k in keys}
        if len(slots) > 1:
            return CROSSSLOT
        if slots:
            slot = slots.pop()
            if OWNER[slot] != shard:
                return f"MOVED {slot} {host(n)}:{client_port(n, OWNER[slot])}"
        return None

    def send(self, n: int, shard: int, argv: list[bytes], keys: list[bytes]):
        """Send ``argv`` to shard ``shard`` of region ``n``: a refusal is checked (and that
        nothing changed), a command that ran is checked against the model and changes it."""
        core = self.cores[n, shard]
        before = shard_state(core)
        reply = core.call(*argv, check=False)
        refused = self.refusal(n, shard, keys)
        note(f"{argv[0].decode()}: {refused.split()[0] if refused else 'ran'}")
        if refused is not None:
            assert isinstance(reply, ReplyError) and reply.message == refused, \
                f"{argv} at region {n} shard {shard}: {show(reply)}, expected -{refused}"
            assert shard_state(core) == before, f"{argv} was refused at region {n} shard {shard} but changed it"
            return
        assert not (isinstance(reply, ReplyError) and reply.message.startswith(("MOVED", "CROSSSLOT"))), \
            f"{argv} at region {n} shard {shard}: {show(reply)}, expected it to run"
        self.apply(n, shard, argv, keys, reply)

    def apply(self, n: int, shard: int, argv: list[bytes], keys: list[bytes], reply) -> None:
        """The model's effect of ``argv`` (of ``keys``) that ran at region ``n`` (shard
        ``shard``), and the check of its reply."""
        ks = self.model[n]
        name = argv[0].upper()
        where = f"{argv} at region {n} shard {shard}: {show(reply)}"
        for key in keys:
            self.touched[owner(key)].setdefault(key, set()).add(n)
        if name == b"XADD":
            key = argv[1]
            assert isinstance(reply, bytes), where
            new = parse_id(reply)
            k = ks.setdefault(key, Key([], set()))
            assert new[1] % STRIDE == n, f"{where}: not a strict ID of region {n}"
            assert not k.entries or new > k.entries[-1], f"{where}: not above the key's top {k.entries[-1]}"
            k.entries.append(new)
        elif name == b"XDEL":
            key, id_ = argv[1], parse_id(argv[2])
            k = ks.get(key)
            held = k is not None and id_ in k.entries
            assert reply == int(held), f"{where}, expected {int(held)}"
            if held:
                k.entries = [e for e in k.entries if e != id_]
                self.forget_if_empty(ks, key)
        elif name == b"XTRIM":
            key, maxlen = argv[1], int(argv[3])
            k = ks.get(key)
            drop = max(0, len(k.entries) - maxlen) if k is not None else 0
            assert reply == drop, f"{where}, expected {drop}"
            if drop:
                k.entries = k.entries[drop:]
                self.forget_if_empty(ks, key)
        elif name == b"DEL":
            expected = sum(1 for key in argv[1:] if ks.pop(key, None) is not None)
            assert reply == expected, f"{where}, expected {expected}"
        elif name == b"EXISTS":
            expected = sum(key in ks for key in argv[1:])
            assert reply == expected, f"{where}, expected {expected}"
        elif name == b"XREAD":
            streams = argv[argv.index(b"STREAMS") + 1:]
            names = streams[:len(streams) // 2]
            expected = [(key, ks[key].entries) for key in names if key in ks and ks[key].entries]
            got = None if reply is NULL_ARRAY else [(key, [parse_id(row[0]) for row in rows]) for key, rows in reply]
            assert got == (expected or None), f"{where}, expected {expected}"
        elif name == b"COPY":
            src, dst = argv[1], argv[2]
            replace = b"REPLACE" in argv[3:]
            if src == dst:
                assert isinstance(reply, ReplyError) and "same" in reply.message, where
                return
            copied = src in ks and (dst not in ks or replace)
            assert reply == int(copied), f"{where}, expected {int(copied)}"
            if copied:
                ks[dst] = Key(sorted(set(ks[src].entries)), set(ks[src].groups))
        elif name == b"RENAME":
            src, dst = argv[1], argv[2]
            if src not in ks:
                assert isinstance(reply, ReplyError) and reply.message == "ERR no such key", where
                return
            assert reply == "OK", where
            if src != dst:  # the entries move (an ID held twice once), the groups do not
                entries = sorted(set(ks.pop(src).entries))
                ks.pop(dst, None)
                if entries:
                    ks[dst] = Key(entries, set())
        elif name == b"XGROUP":  # CREATE key group 0 [MKSTREAM]
            key, group = argv[2], argv[3]
            if key not in ks and b"MKSTREAM" not in argv:
                assert isinstance(reply, ReplyError) and reply.message.startswith(NO_KEY_FOR_XGROUP), where
            elif key in ks and group in ks[key].groups:
                assert isinstance(reply, ReplyError) and reply.message.startswith("BUSYGROUP"), where
            else:
                assert reply == "OK", where
                ks.setdefault(key, Key([], set())).groups.add(group)
        elif name == b"XREADGROUP":  # GROUP group consumer STREAMS key >
            group, key = argv[2], argv[5]
            if key not in ks or group not in ks[key].groups:
                assert isinstance(reply, ReplyError) and reply.message.startswith("NOGROUP"), where
            else:
                assert not isinstance(reply, ReplyError), where
                got = [parse_id(row[0]) for _key, rows in ([] if reply is NULL_ARRAY else reply)
                       for row in rows]
                assert set(got) <= set(ks[key].entries), f"{where}: an entry the key does not hold"
        elif name == b"XACK":
            assert type(reply) is int and 0 <= reply <= len(argv) - 3, where
            if argv[1] not in ks:
                assert reply == 0, where
        elif name == b"FLUSHALL":  # this shard's keys only
            assert reply == "OK", where
            for key in [k for k in ks if owner(k) == shard]:
                del ks[key]
                self.touched[shard].setdefault(key, set()).add(n)
        elif name == b"DBSIZE":
            expected = sum(1 for k in ks if owner(k) == shard)
            assert reply == expected, f"{where}, expected {expected}"
        elif name == b"KEYS":
            expected = sorted(k for k in ks if owner(k) == shard)
            assert sorted(reply) == expected, f"{where}, expected {expected}"
        elif name == b"CLUSTER":
            sub = argv[1].upper()
            if sub == b"KEYSLOT":
                assert reply == key_slot(argv[2]), f"{where}, expected {key_slot(argv[2])}"
            else:
                slot = int(argv[2])
                held = sorted(k for k in ks if key_slot(k) == slot) if OWNER[slot] == shard else []
                if sub == b"COUNTKEYSINSLOT":
                    assert reply == len(held), f"{where}, expected {len(held)}"
                else:  # GETKEYSINSLOT slot 10: more than any slot of the pool holds
                    assert sorted(reply) == held, f"{where}, expected {held}"
        else:
            raise AssertionError(f"the model does not know {argv}")

    @staticmethod
    def forget_if_empty(ks: dict[bytes, Key], key: bytes) -> None:
        if not ks[key].entries and not ks[key].groups:
            del ks[key]  # no entries and no groups: the key does not exist (Active-Active)

    def rebase(self, n: int, shard: int) -> None:
        """The model takes shard ``shard`` of region ``n`` as it is (after another region's
        operations reached it)."""
        ks = self.model[n]
        for key in [k for k in ks if owner(k) == shard]:
            del ks[key]
        ks.update(keys_of(self.cores[n, shard]))

    # ------------------------------------------------------------ commands
    @rule(n=regions_st, shard=shards_st, key=keys_st, count=st.integers(1, 3))
    def xadd(self, n, shard, key, count):
        for _ in range(count):
            self.send(n, shard, [b"XADD", key, b"*", b"f", b"v"], [key])

    @rule(n=regions_st, shard=shards_st, key=keys_st, pick=st.none() | st.integers(0, 100))
    def xdel(self, n, shard, key, pick):
        """An ID the region holds under the key (at any shard: the model's), or one it does not."""
        k = self.model[n].get(key)
        id_ = k.entries[pick % len(k.entries)] if k is not None and k.entries and pick is not None else (1, 1)
        self.send(n, shard, [b"XDEL", key, fmt_id(id_)], [key])

    @rule(n=regions_st, shard=shards_st, key=keys_st, maxlen=st.integers(0, 2))
    def xtrim(self, n, shard, key, maxlen):
        self.send(n, shard, [b"XTRIM", key, b"MAXLEN", b"%d" % maxlen], [key])

    @rule(n=regions_st, shard=shards_st, keys=pair_st, both=st.booleans())
    def delete(self, n, shard, keys, both):
        keys = list(keys if both else keys[:1])
        self.send(n, shard, [b"DEL", *keys], keys)

    @rule(n=regions_st, shard=shards_st, keys=pair_st)
    def exists(self, n, shard, keys):
        self.send(n, shard, [b"EXISTS", *keys], list(keys))

    @rule(n=regions_st, shard=shards_st, keys=pair_st, both=st.booleans())
    def xread(self, n, shard, keys, both):
        keys = list(keys if both and keys[0] != keys[1] else keys[:1])
        self.send(n, shard, [b"XREAD", b"STREAMS", *keys, *[b"0"] * len(keys)], keys)

    @rule(n=regions_st, shard=shards_st, keys=pair_st, replace=st.booleans())
    def copy(self, n, shard, keys, replace):
        self.send(n, shard, [b"COPY", *keys, *([b"REPLACE"] if replace else [])], list(keys))

    @rule(n=regions_st, shard=shards_st, keys=pair_st)
    def rename(self, n, shard, keys):
        self.send(n, shard, [b"RENAME", *keys], list(keys))

    @rule(n=regions_st, shard=shards_st, key=keys_st, group=groups_st, mkstream=st.booleans())
    def xgroup_create(self, n, shard, key, group, mkstream):
        self.send(n, shard, [b"XGROUP", b"CREATE", key, group, b"0", *([b"MKSTREAM"] if mkstream else [])], [key])

    @rule(n=regions_st, shard=shards_st, key=keys_st, group=groups_st, consumer=st.sampled_from(CONSUMERS))
    def xreadgroup(self, n, shard, key, group, consumer):
        self.send(n, shard, [b"XREADGROUP", b"GROUP", group, consumer, b"STREAMS", key, b">"], [key])

    @rule(n=regions_st, shard=shards_st, key=keys_st, group=groups_st, pick=st.integers(0, 100))
    def xack(self, n, shard, key, group, pick):
        """An ID the key holds (pending or not), or one it does not."""
        k = self.model[n].get(key)
        id_ = k.entries[pick % len(k.entries)] if k is not None and k.entries and pick % 4 else (1, 1)
        self.send(n, shard, [b"XACK", key, group, fmt_id(id_)], [key])

    @rule(n=regions_st, shard=shards_st, key=keys_st)
    def cluster_keyslot(self, n, shard, key):
        self.send(n, shard, [b"CLUSTER", b"KEYSLOT", key], [])

    @rule(n=regions_st, shard=shards_st, slot=st.sampled_from(SLOTS_USED + [0, 8191, 8192, 16383]),
          getkeys=st.booleans())
    def cluster_keys_in_slot(self, n, shard, slot, getkeys):
        """How many keys (or which) of a slot this shard holds: none for another shard's slot."""
        argv = [b"CLUSTER", b"GETKEYSINSLOT", b"%d" % slot, b"10"] if getkeys else \
            [b"CLUSTER", b"COUNTKEYSINSLOT", b"%d" % slot]
        self.send(n, shard, argv, [])

    @rule(n=regions_st, shard=shards_st, argv=st.sampled_from([[b"DBSIZE"], [b"KEYS", b"*"], [b"FLUSHALL"]]))
    def keyless(self, n, shard, argv):
        """Keyless commands run at any shard, for its own keys only."""
        self.send(n, shard, argv, [])

    @rule(n=regions_st, shard=shards_st, queued=transaction_st)
    def transaction(self, n, shard, queued):
        """MULTI, one to three commands, EXEC: each checked when queued, then all of them at EXEC."""
        self.run_transaction(n, shard, queued)

    @rule(n=regions_st, shard=shards_st, keys=st.tuples(*(st.sampled_from([k for k in KEYS if key_slot(k) == slot])
                                                         for slot in SLOTS_USED)),
          first=st.sampled_from(SHARDS), more=st.booleans())
    def transaction_over_two_slots(self, n, shard, keys, first, more):
        """A transaction of two slots of one shard (each command of one slot, queued): at that
        shard EXEC answers CROSSSLOT and nothing runs."""
        k1, k2 = (k for k in keys if owner(k) == first)
        queued = [([b"XADD", k1, b"*", b"f", b"v"], [k1]), ([b"XADD", k2, b"*", b"f", b"v"], [k2])]
        if more:
            queued.insert(1, ([b"CLUSTER", b"KEYSLOT", k2], []))
        self.run_transaction(n, shard, queued)

    def run_transaction(self, n: int, shard: int, queued: list[tuple[list[bytes], list[bytes]]]) -> None:
        core = self.cores[n, shard]
        before = shard_state(core)
        assert core.call(b"MULTI", check=False) == "OK"
        accepted, flagged = [], False
        for argv, keys in queued:
            reply = core.call(*argv, check=False)
            refused = self.refusal(n, shard, keys)
            if refused is not None:  # WATCH too: a routing refusal flags the transaction, as in Redis Cluster
                assert isinstance(reply, ReplyError) and reply.message == refused, \
                    f"queueing {argv} at region {n} shard {shard}: {show(reply)}, expected -{refused}"
                flagged = True
            elif argv[0] == b"WATCH":  # runs at once, and refuses (the transaction goes on)
                assert isinstance(reply, ReplyError) and reply.message == WATCH_IN_MULTI, \
                    f"{argv} inside MULTI at region {n} shard {shard}: {show(reply)}"
            else:
                assert reply == "QUEUED", f"queueing {argv} at region {n} shard {shard}: {show(reply)}"
                accepted.append((argv, keys))
        assert shard_state(core) == before, "queueing changed the shard"
        reply = core.call(b"EXEC", check=False)
        assert core.client.multi is None, "EXEC left the transaction open"
        slots = {key_slot(k) for _argv, keys in accepted for k in keys}
        expected = CROSSSLOT if len(slots) > 1 else EXECABORT if flagged else None
        note(f"EXEC: {expected.split()[0] if expected else 'ran'}")
        if expected is not None:
            assert isinstance(reply, ReplyError) and reply.message == expected, \
                f"EXEC of {[argv for argv, _keys in accepted]} at region {n} shard {shard} (flagged: {flagged}): " \
                f"{show(reply)}, expected -{expected}"
            assert shard_state(core) == before, f"EXEC answered -{expected} but changed the shard"
            return
        assert isinstance(reply, list) and len(reply) == len(accepted), \
            f"EXEC of {[argv for argv, _keys in accepted]} at region {n} shard {shard}: {show(reply)}"
        for (argv, keys), one in zip(accepted, reply, strict=True):
            self.apply(n, shard, argv, keys, one)

    @rule(n=regions_st, shard=shards_st, key=keys_st, in_multi=st.booleans())
    def out_of_memory(self, n, shard, key, in_multi):
        """The shard is over its maxmemory: an XADD of a key of another shard still answers
        MOVED (routing comes first, in MULTI too, as Redis Cluster redirects before it checks
        memory), one of its own keys OOM; either way nothing changes."""
        core = self.cores[n, shard]
        if core.server.memory.used() <= 1:
            return  # an empty shard holds nothing: never over any limit
        assert core.call(b"CONFIG", b"SET", b"maxmemory", b"1", check=False) == "OK"
        try:
            before = shard_state(core)
            expected = self.refusal(n, shard, [key]) or OOM_ERROR
            if in_multi:
                assert core.call(b"MULTI", check=False) == "OK"
            reply = core.call(b"XADD", key, b"*", b"f", b"v", check=False)
            assert isinstance(reply, ReplyError) and reply.message == expected, \
                f"XADD {key!r} at region {n} shard {shard} out of memory{' in MULTI' if in_multi else ''}: " \
                f"{show(reply)}, expected -{expected}"
            if in_multi:
                reply = core.call(b"EXEC", check=False)
                assert isinstance(reply, ReplyError) and reply.message == EXECABORT, show(reply)
            assert shard_state(core) == before, "a refused XADD changed the shard"
            note(f"out of memory: {expected.split()[0]}")
        finally:
            if core.client.multi is not None:
                core.call(b"DISCARD", check=False)
            assert core.call(b"CONFIG", b"SET", b"maxmemory", b"0", check=False) == "OK"

    # ------------------------------------------------------------ time and the network
    @rule(n=regions_st, delta=st.sampled_from([1, 5]))
    def tick(self, n, delta):
        self.clocks[n] += delta

    @rule(shard=shards_st, src=regions_st, dst=regions_st, pick=st.integers(0, 1000))
    def deliver_one(self, shard, src, dst, pick):
        """One envelope shard ``shard`` of ``src`` holds reaches the same shard of ``dst``
        (any of those it lacks: out of order, it may wait there for its dependencies)."""
        if src == dst:
            return
        deliver(self.cores[src, shard], self.cores[dst, shard], pick)
        self.rebase(dst, shard)

    @rule(shards=st.sampled_from([(0,), (1,), SHARDS]))
    def sync_groups(self, shards):
        for shard in shards:
            self.sync_group(shard)

    def sync_group(self, shard: int) -> None:
        """Full delivery within shard ``shard``'s group, then convergence and what each key became."""
        group = [self.cores[n, shard] for n in sorted(self.clocks)]
        before = {c.number: keys_of(c) for c in group}
        sync(*group)
        for c in group:
            assert not c.causal.pending, f"region {c.number} shard {shard} still waits for {sorted(c.causal.pending)}"
        assert all(c.causal.vv == group[0].causal.vv for c in group), [c.causal.vv for c in group]
        heads = [c.causal.held_heads() for c in group]
        assert all(h == heads[0] for h in heads), f"shard {shard}: histories differ under one version vector"
        snaps = [c.snapshot() for c in group]
        assert all(s == snaps[0] for s in snaps), f"shard {shard} diverged: {snaps}"
        after = keys_of(group[0])
        assert all(keys_of(c) == after for c in group), f"shard {shard} diverged"
        for key in (k for k in KEYS if owner(k) == shard):
            by = self.touched[shard].get(key, set())
            if len(by) <= 1:  # one writer (or none): its state is everyone's
                r = next(iter(by)) if by else group[0].number
                assert after.get(key) == before[r].get(key), \
                    f"{key!r}, touched at region {sorted(by)} only: {before[r].get(key)} became {after.get(key)}"
            elif key in after:
                held = [b[key] for b in before.values() if key in b]
                assert held, f"{key!r} exists after the sync, and at no region before"
                assert set(after[key].entries) <= {e for k in held for e in k.entries}, f"{key!r}: entries from nowhere"
                assert after[key].groups <= {g for k in held for g in k.groups}, f"{key!r}: groups from nowhere"
        self.touched[shard] = {}
        for n in self.clocks:
            self.rebase(n, shard)

    # ------------------------------------------------------------ invariants
    @invariant()
    def keys_live_in_their_shard(self):
        for (n, shard), core in self.cores.items():
            foreign = sorted(k for k in core.keys if OWNER[key_slot(k)] != shard)
            assert not foreign, f"region {n} shard {shard} holds keys of another shard's slots: {foreign}"

    @invariant()
    def causal_logs_carry_only_their_slots(self):
        """Every operation a shard applied or holds pending names keys of its own slots: none
        crossed from another group (the delivery is group-local) nor was issued for one."""
        for (n, shard), core in self.cores.items():
            log = core.causal.log
            fresh, core.checked = log[core.checked:], len(log)
            for env in [*fresh, *core.causal.pending.values()]:
                op = opcodec.decode(env.op)
                named = [op.key] + ([op.new_key] if isinstance(op, ops.RenameKey) else [])
                if isinstance(op, ops.FlushKeys):
                    named = list(op.observed or ())
                foreign = [k for k in named if OWNER[key_slot(k)] != shard]
                assert not foreign, f"region {n} shard {shard}: operation {env.dot} {type(op).__name__} on {foreign}"

    @invariant()
    def model_is_the_shards_keyspace(self):
        """Per region, the model's keys are the union of its shards' keys, each at its owner,
        with the model's entries and groups."""
        for n, ks in self.model.items():
            held: dict[bytes, Key] = {}
            for shard in SHARDS:
                held.update(keys_of(self.cores[n, shard]))
            assert sorted(held) == sorted(ks), \
                f"region {n}: the shards hold {sorted(held)}, the commands that ran leave {sorted(ks)}"
            for key, k in ks.items():
                assert held[key] == k, f"region {n} key {key!r}: the shard holds {held[key]}, the model {k}"

    def teardown(self):
        if sys.exc_info()[1] is not None or not self.cores:
            return  # a step failed: let its error through, unmasked
        for shard in SHARDS:
            self.sync_group(shard)


ShardsMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=60, deadline=None)
TestShardsMachine = ShardsMachine.TestCase


# ---------------------------------------------------------------- the machine can fail
def test_a_shard_taking_a_key_of_another_is_caught(monkeypatch):
    """With routing off, an XADD sent to the wrong shard runs there: the reply is not MOVED,
    and every invariant sees the key (in the keyspace, in the causal log, in the region's
    keys that the model does not have)."""
    monkeypatch.setattr(ShardRouting, "check", lambda self, keys, client: None)
    m = ShardsMachine()
    m.world(count=2)
    m.xadd(1, 0, b"b", 1)  # at its owner: runs
    with pytest.raises(AssertionError, match=r"expected -MOVED 15495 10\.0\.0\.2:7201"):
        m.xadd(2, 0, b"a", 1)  # a key of shard 1 at shard 0
    for check in (m.keys_live_in_their_shard, m.causal_logs_carry_only_their_slots, m.model_is_the_shards_keyspace):
        with pytest.raises(AssertionError):
            check()
    with pytest.raises(AssertionError, match="expected -CROSSSLOT"):  # EXEC of two slots ran
        m.transaction_over_two_slots(1, 1, (b"b", b"c", b"a", b"x"), 1, False)


def test_the_machine_fails_without_routing(monkeypatch):
    """The machine itself, on a few generated examples, finds a shard without routing."""
    monkeypatch.setattr(ShardRouting, "check", lambda self, keys, client: None)
    with pytest.raises(AssertionError):
        run_state_machine_as_test(ShardsMachine, settings=settings(
            max_examples=20, stateful_step_count=10, deadline=None, derandomize=True, database=None,
            phases=[Phase.generate], report_multiple_bugs=False))


# ---------------------------------------------------------------- found while building this machine
def shard_core(shard: int) -> ShardCore:
    """Shard ``shard`` of region 1 of a database of two regions."""
    return ShardCore(cluster(2), 1, shard, {1: START_MS})


def test_a_group_or_consumer_named_streams_does_not_change_where_xreadgroup_goes():
    """XREADGROUP's keys follow the STREAMS keyword searched from its fourth argument (Redis's
    key spec), so a group or consumer named "streams" is not the keyword.  Routing and COMMAND
    GETKEYS searched from the start: at the owner of ``a`` the read of group ``streams``
    answered CROSSSLOT (its "keys" were ``c1`` and ``STREAMS``), elsewhere a MOVED to the slot
    of ``STREAMS``."""
    home, other = shard_core(owner(b"a")), shard_core(1 - owner(b"a"))
    assert home.call(b"XGROUP", b"CREATE", b"a", b"streams", b"0", b"MKSTREAM") == "OK"
    added = home.call(b"XADD", b"a", b"*", b"f", b"v")
    for group, consumer in ((b"streams", b"c1"), (b"streams", b"STREAMS")):
        argv = [b"XREADGROUP", b"GROUP", group, consumer, b"STREAMS", b"a", b">"]
        assert home.call(b"COMMAND", b"GETKEYS", *argv) == [b"a"]
        moved = other.call(*argv, check=False)
        assert isinstance(moved, ReplyError) and moved.message == f"MOVED {key_slot(b'a')} 10.0.0.1:7101"
    reply = home.call(b"XREADGROUP", b"GROUP", b"streams", b"c1", b"STREAMS", b"a", b">")
    assert [row[0] for _key, rows in reply for row in rows] == [added]
    nogroup = home.call(b"XREADGROUP", b"GROUP", b"g1", b"streams", b"STREAMS", b"a", b">", check=False)
    assert nogroup.message.startswith("NOGROUP No such key 'a' or consumer group 'g1'")  # it ran


def test_a_command_queued_for_another_shard_is_moved_before_out_of_memory():
    """Queueing a command of another shard's key answers MOVED whatever else would refuse it,
    as outside MULTI and as at a Redis Cluster node (which redirects before it checks memory):
    a shard over its maxmemory answered OOM, and a cluster client had no redirection to follow."""
    core = shard_core(owner(b"b"))
    core.call(b"XADD", b"b", b"*", b"f", b"v")
    assert core.call(b"CONFIG", b"SET", b"maxmemory", b"1") == "OK"
    moved = f"MOVED {key_slot(b'a')} 10.0.0.1:7101"
    assert core.call(b"XADD", b"a", b"*", b"f", b"v", check=False).message == moved
    assert core.call(b"MULTI") == "OK"
    assert core.call(b"XADD", b"a", b"*", b"f", b"v", check=False).message == moved  # was OOM
    assert core.call(b"XADD", b"b", b"*", b"f", b"v", check=False).message == OOM_ERROR
    assert core.call(b"EXEC", check=False).message == EXECABORT


def test_watch_of_another_shards_key_inside_multi_fails_the_transaction():
    """Inside MULTI, WATCH runs at once (it is refused there); of another shard's key it is
    refused with MOVED, and that fails the transaction as every routing refusal in MULTI does
    at a Redis Cluster node (its ``flagTransaction``): EXEC answers EXECABORT.  The shard ran
    the transaction."""
    core = shard_core(owner(b"b"))
    assert core.call(b"MULTI") == "OK"
    assert core.call(b"WATCH", b"a", check=False).message == f"MOVED {key_slot(b'a')} 10.0.0.1:7101"
    assert core.call(b"XADD", b"b", b"*", b"f", b"v") == "QUEUED"
    assert core.call(b"EXEC", check=False).message == EXECABORT  # was the XADD's ID
    assert core.call(b"EXISTS", b"b") == 0
    assert core.call(b"MULTI") == "OK"  # of its own key: refused, and the transaction goes on
    assert core.call(b"WATCH", b"b", check=False).message == WATCH_IN_MULTI
    assert core.call(b"XADD", b"b", b"*", b"f", b"v") == "QUEUED"
    assert isinstance(core.call(b"EXEC")[0], bytes)
