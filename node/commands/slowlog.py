"""SLOWLOG and LATENCY: what stalled this region (Redis's slow log and latency monitor).

The recorders are node/region/slowlog.py's, one of each per region core; the core fills them
(``RegionCore.note_slow`` for commands, ``RegionCore.latency_sample`` for the other
stalls) and these handlers only read and reset them.  Replies, errors and help texts
are Redis's; ``SLOWLOG GET``'s entries carry Redis 8.10's seventh field (the command's
argument count before trimming).

The latency events a region records (``latency-monitor-threshold`` milliseconds or more;
0, the default, records nothing):

- ``command`` / ``fast-command``: a command (one flagged ``fast``) that ran that long;
- ``cron-<step>``: a step of the once-a-second cron (``idmp-expiry``, ``log-tick``,
  ``auto-snapshot``, ``backlog-trim``, ``gc``, ``lone-writes``);
- ``aof-write``: handing a turn's records of the append-only file to the OS;
- ``crdt-apply``: applying a run of other regions' operations;
- ``crdt-image-install`` / ``crdt-state-join``: taking a peer's full-resync image, or
  joining its state with this region's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from node.commands import subcommand
from node.commands.util import LONG_MAX, parse_range_long
from node.resp.encoder import ReplyError, Verbatim

if TYPE_CHECKING:
    from node.commands.context import Region
    from node.region.session import Session


# ---------------------------------------------------------------- SLOWLOG
def _syntax(argv: list[bytes]) -> ReplyError:
    """Redis's addReplySubcommandSyntaxError (the subcommand as it was sent)."""
    sub, name = argv[1][:128].decode("utf-8", "replace"), argv[0].decode("utf-8", "replace").upper()
    return ReplyError(f"ERR unknown subcommand or wrong number of arguments for '{sub}'. Try {name} HELP.")


@subcommand("slowlog", "get")
def slowlog_get(client: Session, argv: list[bytes]):
    if len(argv) > 3:
        raise _syntax(argv)
    count = 10
    if len(argv) == 3:
        count = parse_range_long(argv[2], -1, LONG_MAX, "ERR count should be greater than or equal to -1")
    return [[e.id, e.time, e.duration, e.argv, e.addr, e.name, e.argc]
            for e in client.region.slowlog.latest(count)]


@subcommand("slowlog", "len")
def slowlog_len(client: Session, argv: list[bytes]):
    return len(client.region.slowlog.entries)


@subcommand("slowlog", "reset")
def slowlog_reset(client: Session, argv: list[bytes]):
    client.region.slowlog.reset()
    return "OK"


@subcommand("slowlog", "help")
def slowlog_help(client: Session, argv: list[bytes]):
    return [
        b"SLOWLOG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        b"GET [<count>]",
        b"    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
        b"    Entries are made of:",
        b"    id, timestamp, time in microseconds, arguments array, client IP and port,",
        b"    client name",
        b"LEN",
        b"    Return the length of the slowlog.",
        b"RESET",
        b"    Reset the slowlog.",
        b"HELP",
        b"    Prints this help.",
    ]


# ---------------------------------------------------------------- LATENCY
@subcommand("latency", "latest")
def latency_latest(client: Session, argv: list[bytes]):
    return client.region.latency_events.latest()


@subcommand("latency", "history")
def latency_history(client: Session, argv: list[bytes]):
    return client.region.latency_events.history(argv[2].decode("utf-8", "surrogateescape"))


@subcommand("latency", "reset")
def latency_reset(client: Session, argv: list[bytes]):
    monitor = client.region.latency_events
    if len(argv) == 2:
        return monitor.reset()
    return monitor.reset([a.decode("utf-8", "surrogateescape") for a in argv[2:]])


@subcommand("latency", "graph")
def latency_graph(client: Session, argv: list[bytes]):
    srv = client.region
    event = argv[2].decode("utf-8", "surrogateescape")
    if event not in srv.latency_events.events:
        raise ReplyError(f"ERR No samples available for event '{event}'")
    return Verbatim(srv.latency_events.graph(event, srv.system_ms() // 1000).encode("utf-8", "surrogateescape"))


@subcommand("latency", "doctor")
def latency_doctor(client: Session, argv: list[bytes]):
    return Verbatim(doctor_report(client.region).encode("utf-8", "surrogateescape"))


@subcommand("latency", "help")
def latency_help(client: Session, argv: list[bytes]):
    return [
        b"LATENCY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        b"DOCTOR",
        b"    Return a human readable latency analysis report.",
        b"GRAPH <event>",
        b"    Return an ASCII latency graph for the <event> class.",
        b"HISTORY <event>",
        b"    Return time-latency samples for the <event> class.",
        b"LATEST",
        b"    Return the latest latency samples for all events.",
        b"RESET [<event> ...]",
        b"    Reset latency data of one or more <event> classes.",
        b"    (default: reset all data for all event classes)",
        b"HELP",
        b"    Prints this help.",
    ]


# What each event suggests looking at (LATENCY DOCTOR), by event name or "cron-" step.
ADVICE = {
    "command": "Check the slow log (SLOWLOG GET) for the commands that ran this long: a range or a "
               "read of many entries, a DEL, RENAME or FLUSHALL of large streams, a large MIGRATE or "
               "RESTORE, or XTRIM of many blocks.",
    "fast-command": "Commands that should take microseconds took this long: the host did not give the "
                    "region CPU time (other processes on its cores, a throttled container or VM).",
    "aof-write": "Writing the append-only file to the OS stalled the region: another process writing "
                 "to the same disk, or a remote or slow disk. Use a local disk for the region's data.",
    "crdt-apply": "Applying other regions' operations took this long: large entries, or a peer sending "
                  "a large backlog after a pause or a partition (crdt-repl-frame-bytes bounds a frame).",
    "crdt-image-install": "A full resync replaced this region's state with a peer's image: a peer was "
                          "away longer than the replication backlog covers (crdt-repl-backlog-size, "
                          "crdt-repl-backlog-ttl).",
    "crdt-state-join": "This region joined a peer's state with its own after both dropped operations the "
                       "other lacked (a long partition): the replication backlog did not cover it "
                       "(crdt-repl-backlog-size, crdt-repl-backlog-ttl).",
    "cron-idmp-expiry": "Expiring IDMP entries walked many producers: lower stream-idmp-duration or "
                        "stream-idmp-maxsize, or use fewer producer ids.",
    "cron-auto-snapshot": "An automatic snapshot serialised the whole keyspace in the event loop: "
                          "auto-aof-rewrite-percentage and auto-aof-rewrite-min-size decide how often.",
    "cron-log-tick": "The append-only file's once-a-second work (fsync bookkeeping, retrying a failed "
                     "write) stalled: check the disk.",
    "cron-backlog-trim": "Trimming the replication backlog dropped many operations at once.",
    "cron-gc": "Collecting the contexts of deletes every region has seen walked many keys.",
    "cron-lone-writes": "Confirming or withdrawing writes taken alone (crdt-lone-writes-after-ms) "
                        "replayed many operations.",
}


def doctor_report(srv: Region) -> str:
    """LATENCY DOCTOR: each event's samples summarised as Redis does (spikes, average, mean
    deviation, period, worst), then what to look at for each."""
    monitor = srv.latency_events
    threshold = int(srv.config["latency-monitor-threshold"])
    if not monitor.events and threshold == 0:
        return ("Latency monitoring is disabled in this region. Use \"CONFIG SET latency-monitor-threshold "
                "<milliseconds>\" to record the stalls that take at least that long.\n")
    if not monitor.events:
        return (f"No latency spike of {threshold} ms or more was observed in this region since the "
                "monitor was enabled or last reset.\n")
    now = srv.system_ms() // 1000
    lines = ["Latency spikes were observed in this region:", ""]
    advice: list[str] = []
    for n, (event, ts) in enumerate(monitor.events.items(), 1):
        samples, avg, mad, _lo, _hi, period = monitor.stats(event, now)
        lines.append(f"{n}. {event}: {samples} latency spikes (average {avg}ms, mean deviation {mad}ms, "
                     f"period {period / max(samples, 1):.2f} sec). Worst all time event {ts.max}ms.")
        text = ADVICE.get(event)
        if text is not None and text not in advice:
            advice.append(text)
        if event == "command":
            slower = int(srv.config["slowlog-log-slower-than"])
            if slower < 0:
                advice.append(f"The slow log is disabled: enable it with 'CONFIG SET slowlog-log-slower-than "
                              f"{threshold * 1000}' to see which commands these were.")
            elif slower // 1000 > threshold:
                advice.append(f"The slow log only logs commands slower than the latency threshold: "
                              f"'CONFIG SET slowlog-log-slower-than {threshold * 1000}' logs them all.")
    if advice:
        lines += ["", "What to look at:", ""] + [f"- {a}" for a in advice]
    return "\n".join(lines) + "\n"
