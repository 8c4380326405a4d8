"""Server settings: what CONFIG GET / CONFIG SET see, kept as a table.

Every setting Braid has is one row below (name, kind, default, bounds,
whether CONFIG SET may change it).  Values are stored as Python values and
rendered the way Redis renders them.  They are parsed as Redis parses them
(integers with ``string2ll``, memory values with ``memtoull``: :func:`parse_memory`),
then checked against the setting's bounds, so CONFIG SET accepts and refuses the
same values as Redis, with the same errors.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

from crdt.ids import U64, c_string, string2ll

_UNITS = {b"": 1, b"b": 1, b"k": 1000, b"kb": 1024, b"m": 1000**2, b"mb": 1024**2,
          b"g": 1000**3, b"gb": 1024**3}
_DIGITS = b"0123456789"


def parse_memory(v: bytes) -> int | None:
    """Redis's ``memtoull``: "4096", "4kb", "1gb" (the unit in any case), None if not one.

    Exactly as Redis reads it: the value is a C string (a NUL ends it); digits, then nothing
    or a unit; the digits as ``strtoull`` reads them (none is 0, so "" and "kb" are 0, and
    past 2**64-1 they are 2**64-1), times the unit in 64-bit unsigned arithmetic (it wraps).
    What is out of a setting's range is then refused by the range check."""
    s = c_string(v)
    if s[:1] == b"-":
        return None
    i = 0
    while i < len(s) and s[i] in _DIGITS:
        i += 1
    mul = _UNITS.get(s[i:].lower())
    if mul is None or i >= 128:
        return None
    return (min(int(s[:i] or b"0"), U64) * mul) & U64


def _strtoll_int(s: bytes) -> int | None:
    """``(int) strtoll(s, &end, 10)`` with ``*end == '\0'`` required: leading spaces and a
    sign allowed, saturated at the long long bounds, then cut to a 32-bit int as C does."""
    s = c_string(s)
    body = s.lstrip(b" \t\n\v\f\r")
    sign = -1 if body[:1] == b"-" else 1
    digits = body[1:] if body[:1] in (b"+", b"-") else body
    if not digits or any(c not in _DIGITS for c in digits):
        return None if digits or s else 0  # strtoll("") reads nothing and ends at the end
    v = max(min(sign * int(digits), (1 << 63) - 1), -(1 << 63))
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >= 1 << 31 else v


@dataclass(slots=True)
class Setting:
    name: str
    kind: str  # int | memory | bool | enum | string | obuf (client-output-buffer-limit)
    default: object
    lo: int = 0
    hi: int = (1 << 63) - 1
    mutable: bool = True
    choices: tuple[str, ...] = ()
    doc: str = ""  # what it does, for users: docs/settings.md is generated from it


# appendfsync: when the log reaches the disk (node/persistence/oplog.py)
FSYNC_POLICIES = ("always", "everysec", "no")
# Redis's maxmemory policies; Braid takes only noeviction (see the setting)
MAXMEMORY_POLICIES = ("volatile-lru", "volatile-lfu", "volatile-random", "volatile-ttl", "volatile-lrm",
                      "allkeys-lru", "allkeys-lfu", "allkeys-random", "allkeys-lrm", "noeviction")
NOEVICTION_ONLY = ("only noeviction is supported: every stream entry is kept (evicting a stream would "
                   "delete it in every region); a region over maxmemory refuses commands that add data")

SETTINGS: tuple[Setting, ...] = (
    Setting("port", "int", 6379, 0, 65535, mutable=False,
            doc=("The client (RESP) port; 0: no plain port (TLS only). Given with `--port` or by the region's entry in "
                 "the cluster file.")),
    Setting("bind", "string", "127.0.0.1", mutable=False,
            doc="The address the client, TLS and metrics ports listen on (`--bind`; in a cluster, the region's host)."),
    Setting("dir", "string", ".", mutable=False,
            doc="The region's data folder: the append-only directory and snapshots live in it (`--data-dir`)."),
    Setting("databases", "int", 1, 1, 1, mutable=False,
            doc="Always 1: a region has one database, as a Redis Cluster node (SELECT takes only 0)."),
    # the default user's password (node/security/acl.py)
    Setting("requirepass", "string", "",
            doc=("The default user's password (empty: none). Setting it changes the default user's password, as in "
                 "Redis.")),
    # users and permissions: the ACL file (ACL LOAD / SAVE), fixed at start as in Redis, and
    # how many entries ACL LOG keeps
    Setting("aclfile", "string", "", mutable=False,
            doc=("The ACL file users and permissions are loaded from at start and that ACL LOAD / ACL SAVE use (empty: "
                 "none). Users are per region; braid-admin acl keeps them the same everywhere.")),
    Setting("acllog-max-len", "int", 128, 0, (1 << 63) - 1,
            doc="How many entries ACL LOG keeps (refused commands and failed logins)."),
    Setting("maxclients", "int", 10000, 1, (1 << 32) - 1,
            doc="The most client connections at once; one more is refused with `ERR max number of clients reached`."),
    Setting("proto-max-bulk-len", "memory", 512 * 1024 * 1024, 1024 * 1024, (1 << 63) - 1,
            doc=("The largest bulk string (one argument) a client may send, hence the largest field or value of an "
                 "entry.")),
    Setting("client-query-buffer-limit", "memory", 1024 * 1024 * 1024, 1024 * 1024, (1 << 63) - 1,
            doc=("The most input one client may hold: the command being assembled plus the commands queued by MULTI; "
                 "past it the client is closed.")),
    # per client class: (hard, soft, soft seconds); Braid's clients are all "normal".  Redis
    # sets no limit for normal clients; Braid closes one whose unread replies pass 1 GB
    Setting("client-output-buffer-limit", "obuf",
            {"normal": (1024**3, 0, 0), "slave": (256 * 1024**2, 64 * 1024**2, 60),
             "pubsub": (32 * 1024**2, 8 * 1024**2, 60)},
            doc=("Redis's `class hard soft seconds` limits on a client's unread replies; Braid's clients are all "
                 "`normal`, closed past 1 GB by default (Redis sets no limit there).")),
    # the memory limit: past it, commands that add data (Redis's "denyoom" ones) are refused;
    # operations of other regions are always applied.  Only noeviction: evicting a stream would
    # delete it at every region (the other policies are named so that the error can say so)
    Setting("maxmemory", "memory", 0, 0, (1 << 64) - 1,
            doc=("The memory limit (0: none). Past it, commands that add data are refused with `OOM command not "
                 "allowed when used memory > 'maxmemory'.`; operations of other regions are always applied.")),
    Setting("maxmemory-policy", "enum", "noeviction", choices=MAXMEMORY_POLICIES,
            doc=("Only `noeviction` is accepted: evicting a stream would delete it in every region, so a region over "
                 "`maxmemory` refuses new data instead.")),
    Setting("stream-node-max-entries", "int", 100, 0, (1 << 63) - 1,
            doc=("The most entries in one node (block) of a stream; as Redis's, it decides what `MAXLEN ~` / `MINID ~` "
                 "trim.")),
    Setting("stream-node-max-bytes", "memory", 4096, 0, (1 << 63) - 1,
            doc=("The largest node (block) of a stream in bytes; as Redis's, it decides what `MAXLEN ~` / `MINID ~` "
                 "trim.")),
    Setting("stream-idmp-duration", "int", 100, 1, 86400,
            doc=("The IDMP duration (seconds an idempotent producer's iid is remembered) a new stream starts with "
                 "(XCFGSET changes one stream's).")),
    Setting("stream-idmp-maxsize", "int", 100, 1, 10000,
            doc=("The most iids remembered per idempotent producer that a new stream starts with (XCFGSET changes one "
                 "stream's).")),
    # DUMP's payload (node/commands/dump.py): the RDB version it writes - 15 is Redis 8.10's
    # (Braid's reported version), 14 Redis 8.8's, 13 Redis 8.6's, 11 Redis 7.2's, 10 Redis
    # 7.0's, 9 Redis 5.0's (a Redis refuses a newer one) - and, as Redis's own setting,
    # whether it LZF-compresses the listpacks
    Setting("dump-rdb-version", "int", 15, 9, 15,
            doc=("The RDB version of DUMP's payloads (and MIGRATE's, `braid export`'s default): 15 is Redis 8.10's; "
                 "set 11 for Redis 7.2, 10 for 7.0, 9 for 5.0 before moving streams to an older Redis.")),
    Setting("rdbcompression", "bool", True,
            doc="Whether DUMP LZF-compresses the payload's listpacks, as Redis's setting of that name."),
    # durability (node/persistence/): the operation log is the append-only file
    Setting("appendonly", "bool", True, mutable=False,
            doc=("Keep the operation log (the append-only file) and snapshots in `dir`; `no` keeps nothing on disk "
                 "(`--appendonly`).")),
    Setting("appendfsync", "enum", "everysec", choices=FSYNC_POLICIES,
            doc=("When the log reaches the disk: `always` (a reply waits for the fsync that covers it), `everysec` "
                 "(fsync once a second) or `no` (when the OS likes). A region always writes to the OS before it "
                 "replies.")),
    Setting("appenddirname", "string", "appendonlydir", mutable=False,
            doc="The folder of the append-only files and snapshots, inside `dir`."),
    Setting("aof-load-truncated", "bool", True,
            doc=("At start, cut a torn last record of the log (a crash in the middle of a write) and go on (`yes`), or "
                 "refuse to start (`no`).")),
    Setting("auto-aof-rewrite-percentage", "int", 100, 0, (1 << 31) - 1,
            doc=("Take a snapshot automatically when the log grew by this percentage since the last one (and is past "
                 "`auto-aof-rewrite-min-size`); 0: never for growth.")),
    Setting("auto-aof-rewrite-min-size", "memory", 64 * 1024 * 1024, 0, (1 << 63) - 1,
            doc="The log size below which growth alone takes no automatic snapshot."),
    # Braid's: snapshot before replaying the records since the last snapshot would take a
    # start longer than this (estimated, node/persistence/oplog.py's rewrite_due); 0: no bound
    Setting("auto-aof-rewrite-max-replay-ms", "int", 2000, 0, (1 << 31) - 1,
            doc=("Take a snapshot when replaying the records written since the last one would make a restart take "
                 "longer than this (estimated); 0: no such bound.")),
    # Braid's: a reply held because its command's record cannot be written (or, under
    # appendfsync always, fsynced) - a full disk - is answered MISCONF once writing has failed
    # for this long (checked once a second), instead of waiting for the disk: the client then
    # treats the write as of unknown outcome (node/persistence/oplog.py)
    Setting("aof-write-error-timeout-ms", "int", 2000, 0, (1 << 31) - 1,
            doc=("When the log cannot be written (a full disk), a write's reply waits this long for the disk, then is "
                 "answered `MISCONF` (its outcome is then unknown).")),
    # Active-Active: how much of the replication feed a region keeps for peers that are
    # away (operations every peer acknowledged are dropped at once); a peer that comes
    # back needing more gets a full resync
    Setting("crdt-repl-backlog-size", "memory", 64 * 1024 * 1024, 0, (1 << 63) - 1,
            doc=("How many bytes of operations a region keeps for peers that are away; a peer that comes back needing "
                 "more gets a full resync.")),
    Setting("crdt-repl-backlog-ttl", "int", 3600, 0, (1 << 31) - 1,
            doc=("How many seconds a region keeps operations for peers that are away (operations every peer "
                 "acknowledged are dropped at once).")),
    # Active-Active replication links (node/activeactive/hub.py): operation bytes per
    # frame (a larger operation travels in parts of this size); the largest gRPC message a
    # region sends or accepts; HTTP/2 keepalive pings, so a peer that went dark is noticed in
    # seconds; a link with unacknowledged operations and no progress for the stall timeout is
    # closed and dialed again (0: never); the largest full-resync image a region accepts
    Setting("crdt-repl-frame-bytes", "memory", 1024 * 1024, 64 * 1024, 256 * 1024 * 1024,
            doc="The most operation bytes in one replication frame; a larger operation travels in parts of this size."),
    Setting("crdt-repl-max-message", "memory", 8 * 1024 * 1024, 1024 * 1024, (1 << 31) - 1, mutable=False,
            doc=("The largest gRPC message a region sends or accepts on its replication links; give every region the "
                 "same.")),
    Setting("crdt-repl-keepalive-ms", "int", 5000, 10, (1 << 31) - 1, mutable=False,
            doc="How often a link sends HTTP/2 keepalive pings, so that a peer that went dark is noticed in seconds."),
    Setting("crdt-repl-keepalive-timeout-ms", "int", 5000, 10, (1 << 31) - 1, mutable=False,
            doc="How long a link waits for a keepalive ping's answer before it counts the peer as gone."),
    Setting("crdt-repl-stall-timeout-ms", "int", 30000, 0, (1 << 31) - 1,
            doc=("A link with unacknowledged operations and no progress for this long is closed and dialed again; 0: "
                 "never.")),
    Setting("crdt-repl-max-image-size", "memory", 8 * 1024**3, 1024 * 1024, (1 << 63) - 1,
            doc=("The largest full-resync image a region accepts from a peer; a larger one breaks the protocol and "
                 "cuts the link.")),
    # operations of other regions waiting for their dependencies: past either bound, the link
    # that brought them broke the protocol (an honest peer sends in causal order)
    Setting("crdt-repl-pending-max-ops", "int", 100000, 1, (1 << 31) - 1,
            doc=("The most operations of other regions waiting for their dependencies; past it the link that brought "
                 "them broke the protocol and is cut.")),
    Setting("crdt-repl-pending-max-bytes", "memory", 2 * 1024**3, 1024 * 1024, (1 << 63) - 1,
            doc=("The most bytes of operations of other regions waiting for their dependencies; past it the link that "
                 "brought them is cut.")),
    # pacing of the links (node/activeactive/hub.py): at most one batch per send interval
    # and one ack per ack interval toward each peer; a third region's operations are relayed
    # once the peer's acks of that region stood still for the relay delay (0: at once); in a
    # region of a cluster under appendfsync everysec, an fsync follows writes at most once per
    # fsync interval (what a crash of the machine may lose).  Loopback and LAN want them
    # small, a WAN may take larger ones.
    Setting("crdt-repl-send-interval-ms", "int", 5, 0, 60000,
            doc=("A link sends at most one batch of operations per this interval (the first at once); a WAN may take "
                 "larger values.")),
    Setting("crdt-repl-ack-interval-ms", "int", 10, 0, 60000,
            doc="A link sends at most one acknowledgement per this interval."),
    Setting("crdt-repl-relay-delay-ms", "int", 50, 0, 60000,
            doc=("A third region's operations are relayed to a peer once that peer's acknowledgements of the third "
                 "region stood still this long (0: at once).")),
    Setting("crdt-repl-fsync-interval-ms", "int", 10, 0, 60000,
            doc=("In a cluster under `appendfsync everysec`, an fsync follows writes at most once per this interval: "
                 "what a crash of the machine may lose.")),
    # before a peer's frame of operations, and after every N operations of a peer's batch, a
    # region offers its core to other runnable processes (sched_yield; 0: never), so that a large
    # batch does not hold a shared core for milliseconds while co-located processes - other
    # regions, clients - wait to run
    Setting("crdt-repl-apply-yield-ops", "int", 16, 0, 1 << 20,
            doc=("While applying a peer's batch, offer the core to other processes every this many operations (0: "
                 "never), so that regions and clients sharing cores are not held for milliseconds.")),
    # a starting region that has waited this many milliseconds for members that do not answer
    # takes writes alone, held here until every member answered (node/activeactive/lone_writes.py);
    # 0: it waits for them (or their removal) for ever
    Setting("crdt-lone-writes-after-ms", "int", 0, 0, (1 << 31) - 1,
            doc=("A starting region that waited this long for members that do not answer takes writes alone, held "
                 "until every member answered; 0: wait for them (or their removal) for ever.")),
    # TLS on the client port (node/security/tls.py), Redis's names, defaults and mutability:
    # tls-port 0 is off; CONFIG SET of any of them builds a new context for new connections
    Setting("tls-port", "int", 0, 0, 65535,
            doc="Serve clients with TLS on this port; 0: off."),
    Setting("tls-cert-file", "string", "",
            doc="The client port's TLS certificate (PEM); needed with `tls-port`."),
    Setting("tls-key-file", "string", "",
            doc="The private key of `tls-cert-file` (PEM)."),
    Setting("tls-key-file-pass", "string", "",
            doc="The passphrase of `tls-key-file` (empty: none)."),
    Setting("tls-ca-cert-file", "string", "",
            doc="The CA bundle client certificates are checked with."),
    Setting("tls-ca-cert-dir", "string", "",
            doc="A folder of CA certificates client certificates are checked with."),
    Setting("tls-auth-clients", "enum", "yes", choices=("no", "yes", "optional"),
            doc="`yes`: clients must present a certificate; `optional`: checked when given; `no`: not asked."),
    Setting("tls-protocols", "string", "",
            doc="The TLS versions allowed, such as `TLSv1.2 TLSv1.3` (empty: both)."),
    Setting("tls-ciphers", "string", "",
            doc="The TLSv1.2 cipher list, in OpenSSL's syntax (empty: OpenSSL's default)."),
    Setting("tls-ciphersuites", "string", "",
            doc="The TLSv1.3 cipher suites, in OpenSSL's syntax (empty: OpenSSL's default)."),
    Setting("tls-prefer-server-ciphers", "bool", False,
            doc="`yes`: the server's cipher order wins over the client's."),
    Setting("tls-session-caching", "bool", True,
            doc="`yes`: clients may resume TLS sessions."),
    Setting("tls-session-cache-size", "int", 20 * 1024, 0, (1 << 31) - 1,
            doc="How many TLS sessions are kept for resumption."),
    Setting("tls-session-cache-timeout", "int", 300, 0, (1 << 31) - 1,
            doc="How many seconds a cached TLS session stays valid."),
    # what stalled the region (node/region/slowlog.py, SLOWLOG and LATENCY), Redis's names, bounds and
    # defaults: commands running this many microseconds or more are logged (-1: none, 0: all),
    # the slow log keeps this many entries, and stalls of this many milliseconds or more are
    # latency samples (0: the latency monitor is off)
    Setting("slowlog-log-slower-than", "int", 10000, -1, (1 << 63) - 1,
            doc=("Commands running this many microseconds or more enter the slow log (SLOWLOG); -1: none, 0: every "
                 "command.")),
    Setting("slowlog-max-len", "int", 128, 0, (1 << 63) - 1,
            doc="How many entries the slow log keeps."),
    Setting("latency-monitor-threshold", "int", 0, 0, (1 << 63) - 1,
            doc=("Stalls of this many milliseconds or more are recorded as LATENCY samples; 0: the latency monitor is "
                 "off.")),
    # the Prometheus endpoint (node/runtime/metrics.py): GET /metrics on this port of `bind`; 0 is off
    Setting("metrics-port", "int", 0, 0, 65535, mutable=False,
            doc="Serve Prometheus metrics at `GET /metrics` on this port of `bind`; 0: off (`--metrics-port`)."),
    # DEBUG's fault injection (clock skew, slow fsync, a full disk) for the chaos suite
    Setting("enable-debug-command", "enum", "no", choices=("no", "yes", "local"), mutable=False,
            doc=("Allow DEBUG's fault injection (clock skew, slow fsync, a full disk), for chaos testing: `yes`, "
                 "`local` (loopback connections only) or `no` (`--enable-debug-command`).")),
)
BY_NAME = {s.name: s for s in SETTINGS}


class ConfigError(ValueError):
    pass


# client-output-buffer-limit: {client class: (hard limit, soft limit, soft seconds)}
ObufLimits = dict[str, tuple[int, int, int]]


class Config:
    """One region's settings (a shard owns its own copy: no globals)."""

    def __init__(self, **overrides: object) -> None:
        self.values: dict[str, object] = {s.name: s.default for s in SETTINGS}
        for k, v in overrides.items():
            self.set(k.replace("_", "-"), v)

    def __getitem__(self, name: str):
        return self.values[name]

    def render(self, name: str) -> bytes:
        s, v = BY_NAME[name], self.values[name]
        if s.kind == "bool":
            return b"yes" if v else b"no"
        if s.kind == "obuf":
            return " ".join(f"{c} {h} {so} {sec}" for c, (h, so, sec) in self._obuf(name).items()).encode()
        return str(v).encode()

    def _obuf(self, name: str) -> ObufLimits:
        """An ``obuf`` setting's value (:meth:`_parse_obuf` made it)."""
        v = self.values[name]
        assert isinstance(v, dict)
        return v

    def matching(self, pattern: bytes) -> list[str]:
        pat = pattern.decode("latin-1").lower()
        return [s.name for s in SETTINGS if fnmatch.fnmatchcase(s.name, pat)]

    def parse(self, name: str, raw: bytes, starting: bool = False) -> object:
        """A CONFIG SET value, checked as Redis checks it (``starting``: a value given at start,
        which may also set the settings CONFIG SET cannot change)."""
        s = BY_NAME.get(name)
        if s is None:
            raise ConfigError(f"Unknown option or number of arguments for CONFIG SET - '{name}'")
        if not s.mutable and not starting:
            raise ConfigError(f"CONFIG SET failed (possibly related to argument '{name}') - can't set immutable config")
        if s.kind in ("int", "memory"):
            v = parse_memory(raw) if s.kind == "memory" else string2ll(raw)
            if v is None:
                what = "must be a memory value" if s.kind == "memory" else "couldn't be parsed into an integer"
                raise ConfigError(f"CONFIG SET failed (possibly related to argument '{name}') - argument {what}")
            if not s.lo <= v <= s.hi:
                raise ConfigError(f"CONFIG SET failed (possibly related to argument '{name}') - "
                                  f"argument must be between {s.lo} and {s.hi} inclusive")
            return v
        if s.kind == "bool":
            low = raw.lower()
            if low not in (b"yes", b"no"):
                raise ConfigError(f"CONFIG SET failed (possibly related to argument '{name}') - "
                                  "argument must be 'yes' or 'no'")
            return low == b"yes"
        if s.kind == "obuf":
            return self._parse_obuf(name, raw)
        if s.kind == "enum":
            choice = raw.decode("latin-1").lower()
            if choice not in s.choices:
                raise ConfigError(f"CONFIG SET failed (possibly related to argument '{name}') - "
                                  f"argument(s) must be one of the following: {', '.join(s.choices)}")
            if name == "maxmemory-policy" and choice != "noeviction":
                raise ConfigError(f"CONFIG SET failed (possibly related to argument '{name}') - {NOEVICTION_ONLY}")
            return choice
        return raw.decode("utf-8", "surrogateescape")

    def _parse_obuf(self, name: str, raw: bytes) -> ObufLimits:
        """Redis's ``<class> <hard> <soft> <soft seconds>`` groups; classes not named keep theirs."""
        words = raw.split()
        failed = f"CONFIG SET failed (possibly related to argument '{name}') - "
        if not words or len(words) % 4:
            raise ConfigError(failed + "Wrong number of arguments in buffer limit configuration.")
        limits = dict(self._obuf(name))
        for i in range(0, len(words), 4):
            cls = words[i].decode("latin-1").lower()
            cls = "slave" if cls == "replica" else cls
            if cls not in limits:
                raise ConfigError(failed + "Invalid client class specified in buffer limit configuration.")
            hard, soft, secs = parse_memory(words[i + 1]), parse_memory(words[i + 2]), _strtoll_int(words[i + 3])
            if hard is None or soft is None or secs is None or secs < 0:
                raise ConfigError(failed + "Error in hard, soft or soft_seconds setting in buffer limit configuration.")
            limits[cls] = (hard, soft, secs)
        return limits

    def set(self, name: str, value: object) -> None:
        """Set a value already parsed (:meth:`parse` turns CONFIG SET's bytes into one).  A
        yes/no setting takes a bool, a number setting an int and a choice one of its choices:
        a ``"no"`` stored as it is would read as true where the server tests the setting."""
        s = BY_NAME.get(name)
        if s is not None:
            if s.kind == "bool" and type(value) is not bool:
                raise TypeError(f"setting {name} takes a bool, not {value!r}")
            if s.kind in ("int", "memory") and type(value) is not int:
                raise TypeError(f"setting {name} takes an int, not {value!r}")
            if s.kind == "enum" and value not in s.choices:
                raise TypeError(f"setting {name} takes one of {', '.join(s.choices)}, not {value!r}")
        self.values[name] = value
