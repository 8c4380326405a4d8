"""Server commands: INFO, CONFIG, COMMAND, DBSIZE, FLUSHDB, FLUSHALL, TIME, LASTSAVE."""

from __future__ import annotations

import os
import platform
import resource
import struct
import sys
import time
from typing import TYPE_CHECKING

from node.commands import CLOSE_WITHOUT_REPLY, COMMANDS, command, subcommand
from node.commands.docs import DOCS, key_specs
from node.commands.keypositions import migrate_key_positions
from node.commands.keys import delete_key
from node.commands.util import ERR_SYNTAX
from node.region.config import BY_NAME, ConfigError
from node.resp.encoder import ReplyError, Verbatim
from node.security.acl import CATEGORIES, command_table
from node.security.tls import TLS_SETTINGS, TlsConfigError
from node.version import BRAID_VERSION, REDIS_COMPAT_VERSION

if TYPE_CHECKING:
    from node.commands.context import Region
    from node.region.session import Session

# ---------------------------------------------------------------- INFO


def rss_bytes() -> int:
    """The process's resident memory (what the OS holds for it), read from /proc."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _section_server(srv: Region) -> list[str]:
    uptime = int(time.time() - srv.start_time)
    u = platform.uname()
    return [
        f"redis_version:{REDIS_COMPAT_VERSION}",
        f"braid_version:{BRAID_VERSION}",
        "redis_git_sha1:00000000",
        "redis_git_dirty:0",
        f"redis_mode:{'standalone' if srv.routing is None else 'cluster'}",
        f"os:{u.system} {u.release} {u.machine}",
        f"arch_bits:{struct.calcsize('P') * 8}",
        "multiplexing_api:asyncio",
        f"python_version:{platform.python_version()}",
        f"process_id:{os.getpid()}",
        f"run_id:{srv.run_id}",
        f"tcp_port:{srv.port}",
        f"server_time_usec:{int(time.time() * 1_000_000)}",
        f"uptime_in_seconds:{uptime}",
        f"uptime_in_days:{uptime // 86400}",
        "hz:10",
        "configured_hz:10",
        f"executable:{sys.executable}",
        "config_file:",
        f"braid_region:{srv.region}",
    ]


def _section_clients(srv: Region) -> list[str]:
    clients = srv.clients.values()
    blocking = srv.blocking
    return [
        f"connected_clients:{len(srv.clients)}",
        "cluster_connections:0",
        f"maxclients:{srv.config['maxclients']}",
        # what clients hold now (Redis reports the peak of the last few seconds)
        f"client_recent_max_input_buffer:{max((c.input_buffered() for c in clients), default=0)}",
        f"client_recent_max_output_buffer:{max((c.output_buffered() for c in clients), default=0)}",
        f"blocked_clients:{blocking.count}",
        "tracking_clients:0",
        "pubsub_clients:0",
        f"watching_clients:{sum(1 for c in clients if c.watched)}",
        f"clients_in_timeout_table:{blocking.with_timeout}",
        f"total_watched_keys:{sum(len(c.watched) for c in clients)}",
        f"total_blocking_keys:{len(blocking.by_key)}",
        # keys an XREADGROUP waits on: deleting one wakes it (with NOGROUP)
        f"total_blocking_keys_on_nokey:{len(blocking.on_nokey)}",
    ]


def _section_memory(srv: Region) -> list[str]:
    # used_memory is what maxmemory limits: the process as it began, the keyspace, the
    # replication backlog and the clients' buffers, each counted as it changes (node/region/core.py)
    srv.memory.count_clients()
    used = srv.memory.used()
    data = srv.db.memory()
    aa = srv.aa
    backlog = aa.backlog_memory() if aa is not None else 0
    overhead = used - data
    peak = srv.memory.peak
    rss = rss_bytes()
    limit = srv.memory.limit
    return [
        f"used_memory:{used}",
        f"used_memory_human:{_human(used)}",
        f"used_memory_rss:{rss}",
        f"used_memory_rss_human:{_human(rss)}",
        f"used_memory_peak:{peak}",
        f"used_memory_peak_human:{_human(peak)}",
        f"used_memory_peak_perc:{100 * used / peak if peak else 100:.2f}%",
        f"used_memory_overhead:{overhead}",
        f"used_memory_startup:{srv.memory.startup}",
        f"used_memory_dataset:{data}",
        f"used_memory_dataset_perc:{100 * data / (used - srv.memory.startup) if used > srv.memory.startup else 0:.2f}%",
        f"maxmemory:{limit}",
        f"maxmemory_human:{_human(limit)}",
        f"maxmemory_policy:{srv.config['maxmemory-policy']}",
        f"mem_fragmentation_ratio:{rss / used if used else 0:.2f}",
        "mem_not_counted_for_evict:0",
        f"mem_replication_backlog:{backlog}",
        f"mem_clients_normal:{srv.memory.clients}",
        "mem_allocator:pymalloc",
        # 1 while used_memory is past maxmemory: commands that add data are refused; operations
        # of other regions are applied all the same (they may take it further past)
        f"braid_over_maxmemory:{int(bool(limit) and srv.memory.out_of_memory())}",
    ]


def _section_persistence(srv: Region) -> list[str]:
    oplog = srv.oplog
    lines = [
        "loading:0",
        "async_loading:0",
        f"rdb_changes_since_last_save:{srv.db.dirty - srv.dirty_at_save}",
        f"rdb_bgsave_in_progress:{int(srv.saving)}",
        f"rdb_last_save_time:{srv.last_save}",
        f"rdb_last_bgsave_status:{'ok' if srv.last_bgsave_ok else 'err'}",
        f"aof_enabled:{int(oplog is not None)}",
        f"aof_rewrite_in_progress:{int(srv.saving)}",
        "aof_rewrite_scheduled:0",
        f"aof_last_write_status:{'ok' if oplog is None or oplog.error is None else 'err'}",
    ]
    if oplog is not None:
        lines += [
            f"aof_current_size:{oplog.size}",
            f"aof_fsync_policy:{oplog.policy}",
            f"aof_pending_fsync:{int(oplog.synced < oplog.last_record)}",
            f"aof_fsyncs:{oplog.fsyncs}",
            f"aof_last_fsync_time:{oplog.last_fsync_ms // 1000}",
            f"aof_records:{oplog.last_record}",
            f"aof_base_size:{srv.log_base_size}",
        ]
        if oplog.error is not None:
            lines.append(f"aof_last_write_error:{oplog.error}")
    if srv.loading_report is not None:
        report, seconds = srv.loading_report
        lines += [f"aof_loaded_snapshot_record:{report.snapshot_record}",
                  f"aof_loaded_records:{report.records}", f"aof_load_truncated_bytes:{report.truncated_bytes}",
                  f"aof_load_time_ms:{seconds * 1000:.0f}"]
    return lines


def _section_stats(srv: Region) -> list[str]:
    st = srv.stats
    return [
        f"total_connections_received:{st.total_connections_received}",
        f"total_commands_processed:{st.total_commands_processed}",
        f"total_net_input_bytes:{st.net_input_bytes}",
        f"total_net_output_bytes:{st.net_output_bytes}",
        f"rejected_connections:{st.rejected_connections}",
        f"client_query_buffer_limit_disconnections:{st.client_qbuf_limit_disconnections}",
        f"client_output_buffer_limit_disconnections:{st.client_outbuf_limit_disconnections}",
        "expired_keys:0",
        "evicted_keys:0",
        "keyspace_hits:0",
        "keyspace_misses:0",
        "pubsub_channels:0",
        f"total_error_replies:{st.total_error_replies}",
        f"unexpected_error_replies:{st.unexpected_error_replies}",
        f"command_internal_errors:{st.command_internal_errors}",
        *srv.acl.info_lines(),
        *srv.supervisor.info_stats(),
        *(srv.tls.info_stats() if srv.tls is not None else ()),
    ]


def _section_replication(srv: Region) -> list[str]:
    return ["role:master", "connected_slaves:0", "master_repl_offset:0"]


def _section_cpu(srv: Region) -> list[str]:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return [f"used_cpu_sys:{ru.ru_stime:.6f}", f"used_cpu_user:{ru.ru_utime:.6f}"]


def _section_commandstats(srv: Region) -> list[str]:
    out = []
    for name, (calls, usec, rejected, failed) in sorted(srv.stats.command_calls.items()):
        if not (calls or rejected or failed):
            continue  # e.g. a command still blocked: it counts when it ends, as in Redis
        per = usec / calls if calls else 0.0
        out.append(f"cmdstat_{name}:calls={calls},usec={usec},usec_per_call={per:.2f},"
                   f"rejected_calls={rejected},failed_calls={failed}")
    return out


def _section_errorstats(srv: Region) -> list[str]:
    return [f"errorstat_{code}:count={n}" for code, n in sorted(srv.stats.error_codes.items())]


def _section_taskstats(srv: Region) -> list[str]:
    return srv.supervisor.info_taskstats()


def _section_cluster(srv: Region) -> list[str]:
    # a shard of a sharded database is a node of a Redis Cluster (node/commands/cluster.py)
    return [f"cluster_enabled:{int(srv.routing is not None)}"]


def _section_crdt(srv: Region) -> list[str]:
    aa = srv.aa
    return aa.info_lines() if aa is not None else ["crdt_enabled:0"]


def _section_keyspace(srv: Region) -> list[str]:
    n = len(srv.db.keys)
    return [f"db0:keys={n},expires=0,avg_ttl=0,subexpiry=0"] if n else []


SECTIONS = {
    "server": _section_server, "clients": _section_clients, "memory": _section_memory,
    "persistence": _section_persistence, "stats": _section_stats,
    "replication": _section_replication, "cpu": _section_cpu,
    "commandstats": _section_commandstats, "errorstats": _section_errorstats, "taskstats": _section_taskstats,
    "cluster": _section_cluster, "keyspace": _section_keyspace, "crdt": _section_crdt,
}
DEFAULT_SECTIONS = ("server", "clients", "memory", "persistence", "stats", "replication",
                    "cpu", "errorstats", "cluster", "keyspace")
EXTRA_SECTIONS: dict = {}  # later subsystems (e.g. "crdt") register their sections here


def _human(n: float) -> str:
    for unit in ("B", "K", "M", "G"):
        if n < 1024 or unit == "G":
            return f"{n:.2f}{unit}" if unit != "B" else f"{n}B"
        n /= 1024
    return str(n)


def info_text(srv: Region, wanted: list[str]) -> bytes:
    sections = {**SECTIONS, **EXTRA_SECTIONS}
    if not wanted or "default" in wanted:
        names = list(DEFAULT_SECTIONS) + [w for w in wanted if w in sections and w not in DEFAULT_SECTIONS]
    elif "all" in wanted or "everything" in wanted:
        names = list(sections)
    else:
        names = [w for w in dict.fromkeys(wanted) if w in sections]
    parts = []
    for name in names:
        lines = sections[name](srv)
        title = name.capitalize() if name != "cpu" else "CPU"
        parts.append(f"# {title}\r\n" + "".join(line + "\r\n" for line in lines))
    return "\r\n".join(parts).encode()


@command("info")
def info(client: Session, argv: list[bytes]):
    wanted = [a.decode("utf-8", "replace").lower() for a in argv[1:]]
    return Verbatim(info_text(client.region, wanted))


# ---------------------------------------------------------------- CONFIG
@subcommand("config", "get")
def config_get(client: Session, argv: list[bytes]):
    cfg = client.region.config
    names: list[str] = []
    for pat in argv[2:]:
        for n in cfg.matching(pat):
            if n not in names:
                names.append(n)
    return {n.encode(): cfg.render(n) for n in names}


@subcommand("config", "set")
def config_set(client: Session, argv: list[bytes]):
    if len(argv) % 2:
        raise ReplyError("ERR wrong number of arguments for 'config|set' command")
    cfg = client.region.config
    staged: dict[str, object] = {}
    for i in range(2, len(argv), 2):
        name = argv[i].decode("utf-8", "replace").lower()
        if name in staged:
            raise ReplyError(f"ERR CONFIG SET failed (possibly related to argument '{name}') - duplicate parameter")
        try:
            staged[name] = cfg.parse(name, argv[i + 1])
        except ConfigError as e:
            raise ReplyError(f"ERR {e}") from None
    try:  # a TLS setting: the new context is built (its files checked) before anything changes
        tls = client.region.tls  # None: a region core without a client port (a replay, the simulation)
        tls_change = tls.prepare(staged) if tls is not None else None
    except TlsConfigError as e:
        name = e.setting or next(n for n in staged if n in TLS_SETTINGS)
        raise ReplyError(f"ERR CONFIG SET failed (possibly related to argument '{name}') - {e.reply}") from None
    for name, value in staged.items():
        cfg.set(name, value)
    if "requirepass" in staged:  # the default user's password, as Redis's ACLUpdateDefaultUserPassword
        password = staged["requirepass"]
        assert isinstance(password, str)  # (a string setting)
        client.region.acl.set_default_password(password)
    if tls is not None and tls_change is not None:
        tls.commit(tls_change)
    client.region.config_changed()
    if LAYOUT_SETTINGS.intersection(staged):
        client.region.log_settings(argv)
    return "OK"


# Settings that decide how streams are laid out (blocks, IDMP maps), so what
# MAXLEN ~ trims: the operation log records changes to them, so that a replay
# lays streams out as they were (and puts the settings back afterwards).
LAYOUT_SETTINGS = frozenset({"stream-node-max-entries", "stream-node-max-bytes",
                             "stream-idmp-duration", "stream-idmp-maxsize"})


@subcommand("config", "resetstat")
def config_resetstat(client: Session, argv: list[bytes]):
    client.region.stats.reset()
    client.region.acl.reset_stats()
    return "OK"


@subcommand("config", "help")
def config_help(client: Session, argv: list[bytes]):
    return [
        b"CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        b"GET <pattern>", b"    Return parameters matching the glob-like <pattern> and their values.",
        b"SET <directive> <value>", b"    Set the configuration <directive> to <value>.",
        b"RESETSTAT", b"    Reset statistics reported by the INFO command.",
        b"HELP", b"    Print this help.",
    ]


# ---------------------------------------------------------------- COMMAND
def acl_categories(fullname: str) -> list[str]:
    """The ACL categories the permission check uses (node/security/acl.py), in Redis's order,
    as simple strings like Redis's addReplyCommandCategories."""
    cats = command_table().by_name[fullname].categories
    return ["@" + c for c in CATEGORIES if c in cats]


def _documented(value, status: bool = False):
    """A value of node/commands/docs.py in Redis's reply types: names and texts as bulk
    strings, flags as simple strings (Redis's addReplyStatus), numbers as integers."""
    if isinstance(value, dict):
        return {k.encode(): _documented(v, k == "flags") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_documented(v, status) for v in value]
    if isinstance(value, str):
        return value if status else value.encode()
    return value


def _command_info(cmd) -> list:
    doc = DOCS.get(cmd.fullname)
    return [
        cmd.fullname.encode(), cmd.arity, [f.encode() for f in cmd.info_flags],
        cmd.first_key, cmd.last_key, cmd.step,
        acl_categories(cmd.fullname),
        _documented(doc.tips) if doc else [],
        _documented(key_specs(cmd.fullname)),
        [_command_info(s) for s in cmd.subcommands.values()],
    ]


def _command_docs(cmd) -> dict:
    doc: dict = {
        b"summary": cmd.summary.encode(),
        b"since": cmd.since.encode(),
        b"group": cmd.group.encode(),
    }
    if cmd.complexity:
        doc[b"complexity"] = cmd.complexity.encode()
    documented = DOCS.get(cmd.fullname)
    if documented is not None and documented.history:
        doc[b"history"] = _documented(documented.history)
    if documented is not None and documented.arguments:
        doc[b"arguments"] = _documented(documented.arguments)
    if cmd.subcommands:
        doc[b"subcommands"] = {s.fullname.encode(): _command_docs(s) for s in cmd.subcommands.values()}
    return doc


def _find(name: bytes):
    parent, _, sub = name.lower().partition(b"|")
    cmd = COMMANDS.get(parent)
    if cmd is not None and sub:
        cmd = cmd.subcommands.get(sub)
    return cmd


@command("command")
def command_(client: Session, argv: list[bytes]):
    return [_command_info(c) for c in COMMANDS.values() if c.handler is not None or c.subcommands]


@subcommand("command", "count")
def command_count(client: Session, argv: list[bytes]):
    return len(COMMANDS)


@subcommand("command", "list")
def command_list(client: Session, argv: list[bytes]):
    return [c.name.encode() for c in COMMANDS.values()]


@subcommand("command", "info")
def command_info(client: Session, argv: list[bytes]):
    if len(argv) == 2:
        return command_(client, argv)
    out = []
    for name in argv[2:]:
        cmd = _find(name)
        out.append(_command_info(cmd) if cmd is not None else None)
    return out


@subcommand("command", "docs")
def command_docs(client: Session, argv: list[bytes]):
    cmds = COMMANDS.values() if len(argv) == 2 else [c for c in map(_find, argv[2:]) if c is not None]
    return {c.fullname.encode(): _command_docs(c) for c in cmds}


def command_keys(cmd, argv: list[bytes]) -> list[bytes]:
    """Key positions of a command line, from the table (XREAD* keys follow STREAMS).  As
    their key specs say, STREAMS is searched from the first argument of XREAD and the fourth of
    XREADGROUP: a group or consumer named "streams" is not the keyword."""
    if cmd.name in ("xread", "xreadgroup"):
        for i in range(4 if cmd.name == "xreadgroup" else 1, len(argv)):
            a = argv[i]
            if len(a) == 7 and a.lower() == b"streams":  # (the length first: most arguments are not)
                rest = argv[i + 1:]
                return rest[: len(rest) // 2]
        return []
    if cmd.name == "migrate":  # incomplete key specs: Redis's migrateGetKeys
        return [argv[i] for i in migrate_key_positions(argv)]
    if cmd.first_key <= 0:
        return []
    last = cmd.last_key if cmd.last_key >= 0 else len(argv) + cmd.last_key
    return argv[cmd.first_key:last + 1:cmd.step or 1]


def routed_keys(queued: list[list[bytes]] | None, cmd, argv: list[bytes]) -> list[bytes]:
    """The keys a command's shard is chosen by (node/region/routing.py): EXEC's are those of
    every command ``queued`` in its transaction."""
    if cmd.name != "exec":
        return command_keys(cmd, argv)
    keys = []
    for line in queued or ():
        c = COMMANDS[line[0].lower()]  # (queued: a known command of the right arity)
        if c.subcommands and len(line) >= 2:
            c = c.subcommands.get(line[1].lower(), c)
        keys += command_keys(c, line)
    return keys


@subcommand("command", "getkeys")
def command_getkeys(client: Session, argv: list[bytes]):
    rest = argv[2:]
    cmd = COMMANDS.get(rest[0].lower())
    if cmd is not None and cmd.subcommands and len(rest) > 1:
        cmd = cmd.subcommands.get(rest[1].lower(), cmd)
    if cmd is None:
        raise ReplyError("ERR Invalid command specified")
    if not cmd.check_arity(len(rest)):
        raise ReplyError("ERR Invalid number of arguments specified for command")
    keys = command_keys(cmd, rest)
    if not keys:
        raise ReplyError("ERR The command has no key arguments")
    return keys


@subcommand("command", "help")
def command_help(client: Session, argv: list[bytes]):
    return [
        b"COMMAND <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        b"(no subcommand)", b"    Return details about all commands.",
        b"COUNT", b"    Return the total number of commands in this server.",
        b"LIST", b"    Return a list of all commands in this server.",
        b"INFO [<command-name> ...]", b"    Return details about multiple commands.",
        b"DOCS [<command-name> ...]", b"    Return documentation details about multiple commands.",
        b"GETKEYS <full-command>", b"    Return the keys from a full command.",
        b"HELP", b"    Print this help.",
    ]


# ---------------------------------------------------------------- keyspace-wide
@command("dbsize")
def dbsize(client: Session, argv: list[bytes]):
    return len(client.region.db.keys)


def _flush(client: Session, argv: list[bytes]):
    if len(argv) > 2 or (len(argv) == 2 and argv[1].lower() not in (b"async", b"sync")):
        raise ReplyError(ERR_SYNTAX)
    db = client.region.db
    if not db.keys:
        return "OK"
    if client.region.replaying and db.logged_ops is None:
        # a command record of format 1 (node/persistence/oplog.py): the version that wrote it
        # deleted key by key, one operation - and one dot, which peers hold - per key
        for key in list(db.keys):
            delete_key(db, key)
        return "OK"
    # one operation (crdt/ops.py FlushKeys): one record, one envelope, applied at once everywhere
    db.apply(db.resolver.flush(db.keys))
    return "OK"


@command("flushdb")
def flushdb(client: Session, argv: list[bytes]):
    return _flush(client, argv)


@command("flushall")
def flushall(client: Session, argv: list[bytes]):
    return _flush(client, argv)


@command("time")
def time_(client: Session, argv: list[bytes]):
    now = time.time_ns() // 1000
    return [b"%d" % (now // 1_000_000), b"%d" % (now % 1_000_000)]


@command("save")
def save(client: Session, argv: list[bytes]):
    client.region.save()
    return "OK"


@command("bgsave")
def bgsave(client: Session, argv: list[bytes]):
    if len(argv) > 2 or (len(argv) == 2 and argv[1].lower() != b"schedule"):
        raise ReplyError(ERR_SYNTAX)
    srv = client.region
    if srv.saving and len(argv) == 2:
        return "Background saving scheduled"  # the running one covers it: it is a point after this call
    srv.bgsave()
    return "Background saving started"


@command("bgrewriteaof")
def bgrewriteaof(client: Session, argv: list[bytes]):
    srv = client.region
    if srv.saving:
        raise ReplyError("ERR Background append only file rewriting already in progress")
    srv.bgsave()  # a snapshot is the rewritten base; the log after it is the tail
    return "Background append only file rewriting started"


@command("shutdown")
def shutdown(client: Session, argv: list[bytes]):
    opts = {a.lower() for a in argv[1:]}
    if not opts <= {b"nosave", b"save", b"now", b"force", b"abort"} or {b"nosave", b"save"} <= opts:
        raise ReplyError(ERR_SYNTAX)
    if b"abort" in opts:
        if len(opts) > 1:
            raise ReplyError(ERR_SYNTAX)
        raise ReplyError("ERR No shutdown in progress.")
    srv = client.region
    if b"save" in opts:
        try:
            srv.save(force=True)
        except ReplyError:
            if b"force" not in opts:
                raise ReplyError("ERR Errors trying to SHUTDOWN. Check logs.") from None
    srv.shutdown()  # the append-only file is fsynced on the way out, whatever the policy
    return CLOSE_WITHOUT_REPLY


@command("lastsave")
def lastsave(client: Session, argv: list[bytes]):
    return client.region.last_save


assert "stream-node-max-entries" in BY_NAME
