"""What stalled a region: the slow log (SLOWLOG) and the latency monitor (LATENCY), kept as Redis keeps them.

Two pure recorders, one of each per region core (no process-wide state): they do no I/O
and read no clock - the time of an entry or a sample comes in as an argument, so the
deterministic simulation and the tests drive them like the server does.  The core
(node/region/core.py) decides *whether* to record: it already times every command
(``RegionCore.execute``) and compares the time with one precomputed bound, so a command
below every threshold costs one comparison and allocates nothing.

:class:`SlowLog` is Redis's ``slowlog.c``: the newest entry first, at most
``slowlog-max-len`` of them, ids that only grow (RESET keeps the counter), each entry's
arguments trimmed to 32 and each argument to 128 bytes, sensitive arguments redacted
(:func:`redacted`).  :class:`LatencyMonitor` is ``latency.c``: per event a ring of 160
samples, one per second (a second sample in the same second keeps the larger), and the
all-time maximum; DOCTOR's report and GRAPH's sparkline are rendered from them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from node.region.config import Config

SLOWLOG_ENTRY_MAX_ARGC = 32     # arguments kept per entry (the last one then says how many more)
SLOWLOG_ENTRY_MAX_STRING = 128  # bytes kept per argument
LATENCY_TS_LEN = 160            # samples kept per latency event
REDACTED = b"(redacted)"


class SlowEntry(NamedTuple):
    """One SLOWLOG GET entry, in its reply order."""

    id: int
    time: int          # unix time in seconds when it was logged
    duration: int      # microseconds
    argv: list[bytes]  # trimmed and redacted
    addr: bytes        # the client's "ip:port"
    name: bytes        # the client's name (CLIENT SETNAME), b"" without one
    argc: int          # the command's argument count before trimming (Redis 8.10's seventh field)


def trimmed(argv: list[bytes]) -> list[bytes]:
    """Redis's ``slowlogCreateEntry``: at most 32 arguments (the 32nd replaced by
    ``... (N more arguments)``), each cut to 128 bytes with ``... (N more bytes)``."""
    argc = len(argv)
    kept = min(argc, SLOWLOG_ENTRY_MAX_ARGC)
    out = []
    for j in range(kept):
        if kept != argc and j == kept - 1:
            out.append(b"... (%d more arguments)" % (argc - kept + 1))
            break
        a = argv[j]
        if len(a) > SLOWLOG_ENTRY_MAX_STRING:
            a = a[:SLOWLOG_ENTRY_MAX_STRING] + b"... (%d more bytes)" % (len(a) - SLOWLOG_ENTRY_MAX_STRING)
        out.append(a)
    return out


# ---------------------------------------------------------------- redaction
# Settings CONFIG SET redacts the value of (Redis's SENSITIVE_CONFIG among Braid's settings).
SENSITIVE_SETTINGS = frozenset({b"requirepass", b"masterauth", b"masteruser", b"tls-key-file-pass",
                                b"tls-client-key-file-pass"})


def _auth(argv: list[bytes]) -> list[int]:
    return list(range(1, len(argv)))  # AUTH [user] password


def _hello(argv: list[bytes]) -> list[int]:
    out, j = [], 2
    while j < len(argv):  # HELLO protover [AUTH user pass] [SETNAME name]
        more, opt = len(argv) - j - 1, argv[j].lower()
        if opt == b"auth" and more >= 2:
            out += [j + 1, j + 2]
            j += 3
        elif opt == b"setname" and more >= 1:
            j += 2
        else:
            break
    return out


def _config_set(argv: list[bytes]) -> list[int]:
    return [i + 1 for i in range(2, len(argv) - 1, 2) if argv[i].lower() in SENSITIVE_SETTINGS]


def _acl_setuser(argv: list[bytes]) -> list[int]:
    return list(range(2, len(argv)))  # the user's name and every rule


def _migrate(argv: list[bytes]) -> list[int]:
    out, j = [], 6
    while j < len(argv):  # the options after host port key db timeout, as migrateCommand reads them
        opt, more = argv[j].lower(), len(argv) - j - 1
        if opt in (b"copy", b"replace"):
            j += 1
        elif opt == b"auth" and more >= 1:
            out.append(j + 1)
            j += 2
        elif opt == b"auth2" and more >= 2:
            out += [j + 1, j + 2]
            j += 3
        else:
            break  # KEYS (keys follow) or an error
    return out


# full command name -> the positions of the arguments Redis redacts (redactClientCommandArgument)
REDACTIONS: dict[str, Callable[[list[bytes]], list[int]]] = {
    "auth": _auth, "hello": _hello, "config|set": _config_set, "acl|setuser": _acl_setuser, "migrate": _migrate,
}


def redacted(fullname: str, argv: list[bytes]) -> list[bytes]:
    """``argv`` with what Redis hides from the slow log replaced by ``(redacted)``: AUTH's
    credentials, HELLO's AUTH pair, the values of sensitive settings in CONFIG SET, ACL
    SETUSER's user and rules, MIGRATE's AUTH / AUTH2 credentials."""
    positions = REDACTIONS.get(fullname)
    if positions is None:
        return argv
    out = list(argv)
    for i in positions(argv):
        out[i] = REDACTED
    return out


# ---------------------------------------------------------------- the slow log
def slow_bounds(config: Config, slowlog: SlowLog, never_ns: int) -> tuple[int | None, int, int]:
    """The settings of SLOWLOG and LATENCY, read once per change: ``slowlog_us`` (None: the
    slow log is off - ``slowlog-log-slower-than`` -1 or ``slowlog-max-len`` 0, as Redis 8),
    ``latency_ms`` (0: off) and ``slow_ns``, the least time of a command either records
    (``never_ns``: neither does).  A shorter ``slowlog-max-len`` trims the log at once (Redis
    trims it when the CONFIG SET that shortened it is itself logged)."""
    slower, max_len = int(config["slowlog-log-slower-than"]), int(config["slowlog-max-len"])
    slowlog.max_len = max_len
    slowlog_us = slower if slower >= 0 and max_len > 0 else None
    if slowlog_us is not None:
        slowlog.trim()
    latency_ms = int(config["latency-monitor-threshold"])
    bounds = [b for b in (None if slowlog_us is None else slowlog_us * 1000,
                          latency_ms * 1_000_000 if latency_ms else None) if b is not None]
    return slowlog_us, latency_ms, min(bounds, default=never_ns)


class SlowLog:
    """The newest entries first, at most ``max_len`` (``slowlog-max-len``)."""

    __slots__ = ("entries", "next_id", "max_len")

    def __init__(self, max_len: int = 128) -> None:
        self.entries: deque[SlowEntry] = deque()
        self.next_id = 0  # never reset but by a restart, as in Redis
        self.max_len = max_len

    def push(self, argv: list[bytes], duration_us: int, now_s: int, addr: bytes, name: bytes) -> SlowEntry:
        """Log a command (already redacted); the oldest entries beyond ``max_len`` go."""
        entry = SlowEntry(self.next_id, now_s, duration_us, trimmed(argv), addr, name, len(argv))
        self.next_id += 1
        self.entries.appendleft(entry)
        self.trim()
        return entry

    def trim(self) -> None:
        entries = self.entries
        while len(entries) > self.max_len:
            entries.pop()

    def latest(self, count: int) -> list[SlowEntry]:
        """The ``count`` newest entries, newest first (-1: all)."""
        entries = self.entries
        if count < 0 or count >= len(entries):
            return list(entries)
        return [entries[i] for i in range(count)]

    def reset(self) -> None:
        self.entries.clear()


# ---------------------------------------------------------------- the latency monitor
class _Series:
    """One event's samples: a ring of LATENCY_TS_LEN (time, ms), time 0 for an empty slot."""

    __slots__ = ("idx", "max", "times", "values")

    def __init__(self) -> None:
        self.idx = 0   # the slot the next sample goes to
        self.max = 0   # the largest latency ever recorded (until a RESET)
        self.times = [0] * LATENCY_TS_LEN
        self.values = [0] * LATENCY_TS_LEN

    def samples(self) -> list[tuple[int, int]]:
        """(time, ms) oldest first."""
        out = []
        for j in range(LATENCY_TS_LEN):
            i = (self.idx + j) % LATENCY_TS_LEN
            if self.times[i]:
                out.append((self.times[i], self.values[i]))
        return out


class LatencyMonitor:
    """Latency samples per event (Redis's ``latencyAddSample`` and the LATENCY replies)."""

    __slots__ = ("events",)

    def __init__(self) -> None:
        self.events: dict[str, _Series] = {}  # in the order events first happened

    def add(self, event: str, ms: int, now_s: int) -> None:
        """Record ``ms`` for ``event`` at ``now_s``: one sample per second, the largest of that
        second; the 161st second overwrites the oldest."""
        ts = self.events.get(event)
        if ts is None:
            ts = self.events[event] = _Series()
        if ms > ts.max:
            ts.max = ms
        prev = (ts.idx + LATENCY_TS_LEN - 1) % LATENCY_TS_LEN
        if ts.times[prev] == now_s:
            if ms > ts.values[prev]:
                ts.values[prev] = ms
            return
        ts.times[ts.idx] = now_s
        ts.values[ts.idx] = ms
        ts.idx = (ts.idx + 1) % LATENCY_TS_LEN

    def latest(self) -> list[list]:
        """LATENCY LATEST: [event, time of the latest sample, its ms, the all-time max ms] per event."""
        out = []
        for event, ts in self.events.items():
            last = (ts.idx + LATENCY_TS_LEN - 1) % LATENCY_TS_LEN
            out.append([event.encode(), ts.times[last], ts.values[last], ts.max])
        return out

    def history(self, event: str) -> list[list[int]]:
        """LATENCY HISTORY: [time, ms] oldest first; [] for an event never seen (its name as recorded)."""
        ts = self.events.get(event)
        return [] if ts is None else [[t, v] for t, v in ts.samples()]

    def reset(self, events: list[str] | None = None) -> int:
        """LATENCY RESET: forget the events named (case-insensitive), or all; how many went."""
        if events is None:
            n = len(self.events)
            self.events.clear()
            return n
        n = 0
        for wanted in events:
            for name in [e for e in self.events if e.lower() == wanted.lower()]:
                del self.events[name]
                n += 1
        return n

    # ------------------------------------------------------------ reports
    def stats(self, event: str, now_s: int) -> tuple[int, int, int, int, int, int]:
        """Redis's ``analyzeLatencyForEvent``: (samples, average ms, mean absolute deviation ms,
        min ms, max ms, seconds from the oldest sample to now - at least 1)."""
        samples = self.events[event].samples()
        if not samples:
            return 0, 0, 0, 0, 0, 0
        values = [v for _, v in samples]
        avg = sum(values) // len(values)
        mad = sum(abs(avg - v) for v in values) // len(values)
        period = max(now_s - min(t for t, _ in samples), 1)
        return len(values), avg, mad, min(values), max(values), period

    def graph(self, event: str, now_s: int) -> str:
        """LATENCY GRAPH: Redis's header line and 4-row sparkline of the event's samples,
        each labelled with how long ago it was (``12s``, ``3m``, ``2h``, ``1d``)."""
        ts = self.events[event]
        samples = ts.samples()
        values = [v for _, v in samples]
        labels = [_ago(now_s - t) for t, _ in samples]
        head = (f"{event} - high {max(values, default=0)} ms, low {min(values, default=0)} ms "
                f"(all time high {ts.max} ms)\n" + "-" * 80 + "\n")
        return head + sparkline(values, labels, columns=80, rows=4)


def _ago(elapsed: int) -> str:
    if elapsed < 60:
        return f"{elapsed}s"
    if elapsed < 3600:
        return f"{elapsed // 60}m"
    if elapsed < 86400:
        return f"{elapsed // 3600}h"
    return f"{elapsed // 86400}d"


def sparkline(values: list[int], labels: list[str], columns: int = 80, rows: int = 4) -> str:
    """Redis's ``sparklineRender`` with SPARKLINE_FILL: ``rows`` rows of ``_o#|`` per chunk of
    ``columns`` samples, then the labels written downwards under their sample."""
    out: list[str] = []
    for start in range(0, len(values), columns):
        if start:
            out.append("\n")
        out.append(_render_range(values, labels, rows, start, min(columns, len(values) - start)))
    return "".join(out)


def _render_range(values: list[int], labels: list[str], rows: int, offset: int, length: int) -> str:
    charset = "_o#"
    lo, hi = min(values), max(values)
    relmax = (hi - lo) or 1
    steps = len(charset) * rows
    has_labels = any(labels)
    lines = []
    row = 0
    while True:
        chars = [" "] * length
        more = False
        for j in range(length):
            step = int(int((values[offset + j] - lo) * steps) / relmax)
            step = min(max(step, 0), steps - 1)
            if row < rows:
                more = True
                charidx = step - (rows - row - 1) * len(charset)
                if 0 <= charidx < len(charset):
                    chars[j] = charset[charidx]
                elif charidx >= len(charset):
                    chars[j] = "|"
            else:
                if has_labels and row - rows < 1:  # one blank row between the line and the labels
                    more = True
                    break
                label = labels[offset + j]
                at = row - rows - 1
                if len(label) > at:
                    more = True
                    chars[j] = label[at]
        if not more:
            break
        row += 1
        lines.append("".join(chars) + "\n")
    return "".join(lines)
