"""``braid import`` and ``braid export``: the streams of a Redis RDB file RESTOREd into a server,
and a server's streams DUMPed into an RDB file that redis-server loads (the file format is
node/interop/rdbfile.py's).  :class:`RdbImport` also serves ``braid node --import``.

A server in cluster mode (a sharded Braid region, or a Redis Cluster) is reached with a
cluster client: each RESTORE and DUMP goes to the node of its key's slot, and the export's
SCAN visits every node, so one ``--into`` / ``--from`` address stands for the whole region.
``braid node --import`` of a sharded region runs in each shard, which restores the keys of
its own slots and names the rest as the other shards'.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable

from node.interop import rdb
from node.interop.rdbfile import (
    MAX_RDB_VERSION,
    REDIS_RDB_VERSIONS,
    STREAM_TYPES,
    RdbFileError,
    RdbFileReader,
    RdbFileWriter,
    RdbKey,
    restore_payload,
    split_dump_payload,
    stream_type_for,
)
from node.tools.cli_args import host_port

REPORT_NAMES = 5  # how many key names a report line shows


def client_for(args: argparse.Namespace, where: tuple[str, int], follow_cluster: bool = True):
    """A redis-py client of the server at ``where``, as redis-cli's options say; one of a Redis
    Cluster (a sharded Braid region, or Redis's own) when the server has cluster mode on and
    ``follow_cluster``: each key's command goes to the node of its slot, SCAN goes to every node."""
    import redis  # redis-py: only the client subcommands need it, not `braid node`'s start-up
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    password = args.password if args.password is not None else os.environ.get("REDISCLI_AUTH")
    # no retries: a RESTORE sent again after a lost reply would be reported as a key already there
    kw = dict(host=where[0], port=where[1], username=args.user, password=password, protocol=2,
              socket_timeout=args.timeout, socket_connect_timeout=args.timeout, retry=Retry(NoBackoff(), 0))
    if args.tls:
        kw.update(ssl=True, ssl_ca_certs=args.cacert, ssl_certfile=args.cert, ssl_keyfile=args.key)
        if args.insecure:
            kw.update(ssl_cert_reqs="none", ssl_check_hostname=False)
    client = redis.Redis(**kw)
    client.ping()  # a wrong address, password or certificate: one clear error before any work
    if not follow_cluster or str(client.info("cluster").get("cluster_enabled", 0)) != "1":
        return client
    client.close()
    cluster = redis.RedisCluster(**kw)
    cluster.ping(target_nodes=redis.RedisCluster.PRIMARIES)  # every node the one asked names
    return cluster


def server_version(client) -> str:
    """The ``redis_version`` the server (a cluster's node asked first) reports."""
    if hasattr(client, "get_default_node"):  # a cluster's client: INFO would ask every node
        return str(client.info("server", target_nodes=client.get_default_node()).get("redis_version", ""))
    return str(client.info("server").get("redis_version", ""))


def _names(keys: list[bytes]) -> str:
    shown = ", ".join(k.decode("utf-8", "backslashreplace") for k in keys[:REPORT_NAMES])
    return shown + (", ..." if len(keys) > REPORT_NAMES else "")


def _client_options(p: argparse.ArgumentParser, role: str) -> None:
    g = p.add_argument_group(f"connecting to the {role} (as redis-cli)")
    g.add_argument("--user", help="the ACL user to authenticate as (default: the default user)")
    g.add_argument("--password", help="the user's password (default: $REDISCLI_AUTH, else none)")
    g.add_argument("--tls", action="store_true", help="connect with TLS (the server's tls-port)")
    g.add_argument("--cacert", metavar="FILE", help="CA bundle to check the server's certificate with "
                                                    "(default: the system's)")
    g.add_argument("--cert", metavar="FILE", help="client certificate to present (tls-auth-clients yes)")
    g.add_argument("--key", metavar="FILE", help="the client certificate's private key")
    g.add_argument("--insecure", action="store_true", help="with --tls: do not check the server's certificate")
    g.add_argument("--timeout", type=float, default=30.0, metavar="SECONDS",
                   help="connect and reply timeout (default 30)")


class RdbImport:
    """One import: the file's keys sorted into the streams to RESTORE and what is only reported."""

    def __init__(self, path: str, db: int, replace: bool, mine: Callable[[bytes], bool] | None = None) -> None:
        """``mine``: which keys this import restores (a shard's: those of its slots), None: all."""
        self.path, self.replace = path, replace
        self.reader = RdbFileReader.open(path)
        self.records = list(self.reader.keys())  # the whole file first: a corrupt one sends nothing
        now_ms = int(time.time() * 1000)
        self.skipped: dict[str, list[bytes]] = {}
        self.other_db: dict[int, list[bytes]] = {}
        self.expired: list[bytes] = []
        self.had_ttl: list[bytes] = []
        self.to_send: list[RdbKey] = []
        self.imported: list[bytes] = []
        self.existed: list[bytes] = []
        self.failed: list[tuple[bytes, str]] = []  # (key, the server's error)
        self.elsewhere: list[bytes] = []  # streams of keys that are not ``mine``
        self.restored_upto = 0  # to_send[:restored_upto] were sent and answered
        for r in self.records:
            if r.rdb_type not in STREAM_TYPES:
                what = f"module value ({r.module_name})" if r.module_name else r.type_name
                self.skipped.setdefault(what, []).append(r.key)
            elif r.db != db:
                self.other_db.setdefault(r.db, []).append(r.key)
            elif mine is not None and not mine(r.key):
                self.elsewhere.append(r.key)
            elif r.expire_ms is not None and r.expire_ms <= now_ms:
                self.expired.append(r.key)
            else:
                if r.expire_ms is not None:
                    self.had_ttl.append(r.key)
                self.to_send.append(r)

    def restore(self, client) -> None:
        """RESTORE every stream, a hundred a round trip (a connection error propagates).  Called
        again after an error, it goes on from the first batch whose replies it did not take."""
        extra = ("REPLACE",) if self.replace else ()
        for start in range(self.restored_upto, len(self.to_send), 100):
            batch = self.to_send[start:start + 100]
            pipe = client.pipeline(transaction=False)
            for r in batch:
                pipe.execute_command("RESTORE", r.key, 0, restore_payload(r.rdb_type, r.value, self.reader.version),
                                     *extra)
            for r, reply in zip(batch, pipe.execute(raise_on_error=False), strict=True):
                if not isinstance(reply, Exception):
                    self.imported.append(r.key)
                elif str(reply).startswith("Target key name already exists") or "BUSYKEY" in str(reply):
                    self.existed.append(r.key)
                else:
                    self.failed.append((r.key, str(reply)))
            self.restored_upto = start + len(batch)

    def header(self) -> str:
        made_by = self.reader.aux.get(b"redis-ver", b"").decode("utf-8", "replace")
        return (f"{self.path}: RDB version {self.reader.version}" + (f", written by Redis {made_by}" if made_by else "")
                + f", {len(self.records)} keys")

    def report(self, where: str) -> list[str]:
        lines = [f"imported {len(self.imported)} streams into {where}"]
        if self.elsewhere:
            lines.append(f"streams of the other shards' slots, imported by those shards: {len(self.elsewhere)}: "
                         f"{_names(self.elsewhere)}")
        if self.existed:
            lines.append(f"already there, not replaced (--replace replaces them): {len(self.existed)}: "
                         f"{_names(self.existed)}")
        if self.had_ttl:
            lines.append(f"had a TTL, imported without it (Braid's keys do not expire): {len(self.had_ttl)}: "
                         f"{_names(self.had_ttl)}")
        if self.expired:
            lines.append(f"expired when the file was written or since, not imported: {len(self.expired)}: "
                         f"{_names(self.expired)}")
        for db, keys in sorted(self.other_db.items()):
            lines.append(f"streams in database {db}, not imported (--db {db} imports them): {len(keys)}: "
                         f"{_names(keys)}")
        for what, keys in sorted(self.skipped.items()):
            lines.append(f"skipped, not streams: {what}: {len(keys)}: {_names(keys)}")
        if self.reader.functions:
            lines.append(f"skipped: {self.reader.functions} function libraries")
        if self.reader.module_aux:
            lines.append(f"skipped: module data of {', '.join(sorted(set(self.reader.module_aux)))}")
        return lines

    def refusals(self) -> list[str]:
        lines = [f"refused: {key.decode('utf-8', 'backslashreplace')}: {reason}"
                 for key, reason in self.failed[:REPORT_NAMES]]
        return lines + ([f"the server refused {len(self.failed)} streams"] if self.failed else [])


def cmd_import(args: argparse.Namespace) -> int:
    """Exit 0: every stream of the database was restored (or reported as already there, expired...);
    1: the server could not be reached or refused a stream; 2: the file is unreadable or not a valid RDB."""
    import redis  # redis-py: only the client subcommands need it, not `braid node`'s start-up

    try:
        job = RdbImport(args.file, args.db, args.replace)
    except OSError as e:
        print(f"braid import: {args.file}: {e.strerror or e}", file=sys.stderr)
        return 2
    except RdbFileError as e:
        print(f"braid import: {args.file}: not a valid RDB file: {e} (nothing was imported)", file=sys.stderr)
        return 2
    print(job.header())
    where = f"{args.into[0]}:{args.into[1]}"
    try:
        client = client_for(args, args.into)
    except redis.RedisError as e:
        print(f"braid import: {where}: {e}", file=sys.stderr)
        return 1
    try:
        job.restore(client)
    except redis.RedisError as e:
        print(f"braid import: {where}: {e} (after {len(job.imported)} streams)", file=sys.stderr)
        return 1
    finally:
        client.close()
    print("\n".join(job.report(where)))
    for line in job.refusals():
        print(f"braid import: {line}", file=sys.stderr)
    return 1 if job.failed else 0


def cmd_export(args: argparse.Namespace) -> int:
    """Exit 0: the file is written; 1: the server could not be reached or a stream could not be
    written in the asked version; 2: the file could not be written."""
    import redis  # redis-py: only the client subcommands need it, not `braid node`'s start-up

    version = args.rdb_version if args.rdb_version is not None else REDIS_RDB_VERSIONS.get(args.for_redis)
    if version is not None:
        try:
            stream_type_for(version)
            if version > MAX_RDB_VERSION:
                raise ValueError(f"RDB version {version} is newer than this build writes ({MAX_RDB_VERSION})")
        except ValueError as e:
            print(f"braid export: {e}", file=sys.stderr)
            return 2
    where = f"{args.source[0]}:{args.source[1]}"
    try:
        client = client_for(args, args.source)
    except redis.RedisError as e:
        print(f"braid export: {where}: {e}", file=sys.stderr)
        return 1
    try:
        return _export(args, client, version, where)
    finally:
        client.close()


def _export(args: argparse.Namespace, client, version: int | None, where: str) -> int:
    import redis  # redis-py: only the client subcommands need it, not `braid node`'s start-up

    try:
        names = sorted(set(client.scan_iter(count=1000, _type="stream")))  # SCAN may return a key twice
        made_by = server_version(client)
    except redis.RedisError as e:
        print(f"braid export: {where}: {e}", file=sys.stderr)
        return 1
    directory = os.path.dirname(os.path.abspath(args.file))
    tmp = os.path.join(directory, f".{os.path.basename(args.file)}.tmp-{os.getpid()}")
    written = vanished = 0
    try:
        with open(tmp, "wb") as out:
            writer = None
            for name, payload in _dumps(client, names):
                if payload is None:  # deleted since the SCAN
                    vanished += 1
                    continue
                try:
                    rdb_type, value, dump_version = split_dump_payload(payload)
                    if rdb_type not in STREAM_TYPES:
                        raise ValueError(f"DUMP answered a value of RDB type {rdb_type}, not a stream")
                except ValueError as e:
                    raise _ExportError(f"{name.decode('utf-8', 'backslashreplace')}: {e}") from None
                if writer is None:  # the first DUMP's version, unless one was asked for
                    writer = _export_writer(out, version or dump_version, made_by, len(names))
                if rdb_type > stream_type_for(writer.version):
                    value = _reencode(name, rdb_type, value, stream_type_for(writer.version))
                    rdb_type = stream_type_for(writer.version)
                writer.key(name, rdb_type, value)
                written += 1
            if writer is None:
                writer = _export_writer(out, version or MAX_RDB_VERSION, made_by, 0)
            writer.end()
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, args.file)
    except (redis.RedisError, _ExportError) as e:
        _remove(tmp)
        print(f"braid export: {where}: {e} (nothing was written to {args.file})", file=sys.stderr)
        return 1
    except OSError as e:
        _remove(tmp)
        print(f"braid export: {args.file}: {e.strerror or e}", file=sys.stderr)
        return 2
    print(f"exported {written} streams from {where} to {args.file} (RDB version {writer.version})")
    if vanished:
        print(f"{vanished} streams were deleted during the export")
    return 0


class _ExportError(Exception):
    pass


def _dumps(client, names: list[bytes]):
    """(name, DUMP payload or None) for each name, a hundred DUMPs a round trip."""
    for start in range(0, len(names), 100):
        batch = names[start:start + 100]
        pipe = client.pipeline(transaction=False)
        for name in batch:
            pipe.dump(name)
        yield from zip(batch, pipe.execute(), strict=True)


def _export_writer(out, version: int, made_by: str, keys: int):
    writer = RdbFileWriter(out, version)
    writer.begin({"redis-ver": made_by or "0.0.0", "redis-bits": 64, "ctime": int(time.time()), "used-mem": 0,
                  "aof-base": 0})
    writer.select_db(0, keys)
    return writer


def _reencode(name: bytes, rdb_type: int, value: bytes, target: int) -> bytes:
    """A stream value in an older encoding (what an older Redis loads), through Braid's stream codec."""
    try:
        stream = rdb.read_stream_value(rdb.Reader(value), rdb_type)
        return rdb.write_stream_value(stream, target)
    except ValueError as e:
        raise _ExportError(f"{name.decode('utf-8', 'backslashreplace')}: cannot re-encode it: {e}") from None


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


# braid export --for-redis: the releases rdbfile.REDIS_RDB_VERSIONS maps to an RDB version (spelled out here so
# that the command line does not load the RDB codec)
FOR_REDIS = ("5.0", "6.0", "6.2", "7.0", "7.2", "7.4", "8.0", "8.2", "8.4", "8.6", "8.8", "8.10")


def add_rdb_commands(sub) -> None:
    """Register `braid import` and `braid export` on ``sub`` (an argparse subparsers object)."""
    p = sub.add_parser("import", help="load the streams of a Redis RDB file into a server (RESTORE)",
                       description="Read a Redis RDB file (written by Redis 5 to 8.10) and RESTORE each of its streams "
                                   "into the server at --into, as DUMP/RESTORE would carry them (entries, consumer "
                                   "groups, pending entries, consumers, idempotent-producer state, NACKed entries). "
                                   "Keys of other types, streams of other databases and expired streams are skipped "
                                   "and reported. In an Active-Active database each RESTORE replicates to every "
                                   "region.",
                       epilog="exit status: 0 when every stream was imported or reported (already there, expired, "
                              "another database); 1 when the server could not be reached or refused a stream; 2 when "
                              "the file cannot be read or is not a valid RDB file (the offset and the reason are "
                              "printed; nothing is imported)")
    p.add_argument("file", metavar="FILE.rdb", help="the RDB file (e.g. a Redis's dump.rdb after SAVE)")
    p.add_argument("--into", type=host_port, required=True, metavar="HOST:PORT",
                   help="the server to restore the streams into (a Braid region's client port)")
    p.add_argument("--replace", action="store_true",
                   help="replace streams that already exist (RESTORE ... REPLACE); without it they are kept and "
                        "reported")
    p.add_argument("--db", type=int, default=0, metavar="N",
                   help="import the streams of database N of the file (default 0)")
    _client_options(p, "server at --into")
    p.set_defaults(fn=cmd_import)

    p = sub.add_parser("export", help="write the streams of a server to an RDB file that redis-server loads",
                       description="SCAN the streams of the server at --from, DUMP each and write them as database "
                                   "0 of an RDB file. The file is written beside FILE and renamed over it when "
                                   "complete. Each stream is as of its own DUMP: streams written during the export "
                                   "may or may not be in the file.",
                       epilog="exit status: 0 when the file is written; 1 when the server could not be reached or a "
                              "stream could not be written in the asked RDB version; 2 when the file cannot be "
                              "written")
    p.add_argument("file", metavar="FILE.rdb", help="the RDB file to write (replaced when complete)")
    p.add_argument("--from", dest="source", type=host_port, required=True, metavar="HOST:PORT",
                   help="the server whose streams to export (a Braid region's client port)")
    versions = p.add_mutually_exclusive_group()
    versions.add_argument("--rdb-version", type=int, metavar="N",
                         help="the file's RDB version, 9 to 15 (default: the version of the server's DUMP payloads); "
                              "streams are re-encoded in the newest encoding that version carries")
    versions.add_argument("--for-redis", choices=FOR_REDIS, metavar="VERSION",
                         help=f"write the RDB version this Redis release loads ({', '.join(FOR_REDIS)}; "
                              f"7.0: version 10, 8.6: 13, 8.8: 14, 8.10: 15)")
    _client_options(p, "server at --from")
    p.set_defaults(fn=cmd_export)

