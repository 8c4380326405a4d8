"""``braid-admin backup``: a copy of every region's state that ``braid node`` starts from, taken
through the admin service (each region's snapshot and the log records after it), written to a
temporary folder and renamed into place once complete, with a manifest of what was taken.  A
sharded database's regions are copied shard by shard, each to ``<region>/shard-K/`` as a region's
data folder holds its shard K (node/activeactive/cluster_config.py's ``shard_dir``).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time

from rich.console import Console

from node.activeactive.cluster_config import ClusterConfig, RegionSpec
from node.persistence import aof, snapshot
from node.tools.admin_calls import AdminError, admin_client, counted, failure, region_named, shard_name, statuses
from node.tools.admin_shards import shard_views
from node.transport.admin import AdminCallError

BACKUP_MANIFEST = "backup.json"  # in each region's folder of a backup: what was taken, and when


def cmd_backup(args, cfg: ClusterConfig, path, console: Console) -> int:
    """A snapshot of every member (or of ``--region``), each written to ``DIR/<region>/`` in the
    layout of a region's data folder - on a sharded database, each shard of it to
    ``DIR/<region>/shard-K/``, as the region's data folder holds that shard's; every region (shard)
    that answers is backed up, and the exit status is 1 when any did not (named)."""
    if not args.timeout > 0:
        raise AdminError("--timeout must be a positive number of seconds")
    sharded = cfg.shards.sharded
    jobs = []  # (the shard's view, the region, its folder's parent, the folder's name, its status or the failure)
    for view in shard_views(args, cfg):
        found, failures = statuses(view, path)  # the newest member list, and who answers
        if args.region:
            r = region_named(view, args.region)
            if not r.live:
                raise AdminError(f"{r.name} (region {r.number}) was removed from the database: it has nothing to "
                                 "back up")
            targets = [r]
        else:
            targets = view.live_regions()
        for r in targets:
            parent, name = (os.path.join(args.dir, r.name), f"shard-{view.shard}") if sharded else (args.dir, r.name)
            answered = f"region {shard_name(view, r)} "  # asked just now: not asked twice
            why = None if r.name in found else next((f for f in failures if f.startswith(answered)),
                                                    f"region {shard_name(view, r)} did not answer")
            jobs.append((view, r, parent, name, why))
    for folder in [args.dir, *sorted({job[2] for job in jobs} - {args.dir})]:
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError as e:
            raise AdminError(f"cannot create {folder}: {e.strerror or e}") from None
    present = [os.path.relpath(os.path.join(parent, name), args.dir) for _, _, parent, name, _ in jobs
               if os.path.lexists(os.path.join(parent, name))]
    if present and not args.force:
        # one directory per backup run: a restore of every region takes its regions from one run
        raise AdminError(f"{args.dir} already holds a backup of {', '.join(present)}: give a new directory for "
                         "each backup (or --force to replace those)")
    run = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    failed = []
    for view, r, parent, name, why in jobs:
        what = shard_name(view, r)
        try:
            if why is not None:
                raise AdminError(why)
            info = _backup_region(view, r, parent, name, args.timeout, run)
        except AdminError as e:
            failed.append(what)
            print(f"braid-admin: backup of {what} failed: {e}", file=sys.stderr)
            continue
        vv = ",".join(f"{o}={n}" for o, n in sorted(info.vv.items())) or "-"
        console.print(f"{what} (region {r.number}): {info.size} bytes, record {info.record}, version vector "
                      f"{vv} -> {os.path.join(parent, name)}", highlight=False, soft_wrap=True)  # one line each
    done = len(jobs) - len(failed)
    unit = "shard" if sharded else "region"
    if failed:
        print(f"braid-admin: {done} of {counted(len(jobs), unit)} backed up in {args.dir}; failed: "
              f"{', '.join(failed)}", file=sys.stderr)
        return 1
    if not sharded:
        console.print(f"backup of {counted(done, 'region')} of database {cfg.database} (cluster {cfg.cluster_id}) in "
                      f"{args.dir}. To restore a region: stop it, replace the appendonlydir/ of its data directory "
                      "with the one in its folder here, start it (docs/deploy.md, \"Backups\")", highlight=False)
        return 0
    regions = len({r.number for _, r, _, _, _ in jobs})
    console.print(f"backup of {counted(done, 'shard')} of {counted(regions, 'region')} of database {cfg.database} "
                  f"(cluster {cfg.cluster_id}) in {args.dir}. To restore a shard: stop it, replace the appendonlydir/ "
                  "of its data directory (shard-K/ of its region's) with the one in <region>/shard-K/ here, start it "
                  "(docs/deploy.md, \"Backups\")", highlight=False)
    return 0


def _backup_region(cfg: ClusterConfig, r: RegionSpec, directory: str, name: str, timeout: float, run: str):
    """Take region ``r``'s snapshot (of ``cfg``'s shard) and put it at ``directory/name`` once
    complete and checked (a temporary folder beside it until then); returns its BackupInfo."""
    final = os.path.join(directory, name)
    tmp = tempfile.mkdtemp(prefix=f".{name}.partial-", dir=directory)
    try:
        info = _receive_backup(cfg, r, tmp, timeout)
        manifest = {"cluster_id": info.cluster_id, "database": info.database, "region": info.region,
                    "number": info.number, "record": info.record, "vv": {str(o): n for o, n in sorted(info.vv.items())},
                    "bytes": info.size, "epoch": info.epoch, "log_dir": info.log_dir, "run": run,
                    "taken": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        if cfg.shards.sharded:
            manifest["shard"] = cfg.shard
        _write_durably(os.path.join(tmp, BACKUP_MANIFEST), (json.dumps(manifest, indent=2) + "\n").encode())
        aof.fsync_directory(tmp)
        if os.path.lexists(final):  # --force: the older backup goes only once this one is complete
            old = tempfile.mkdtemp(prefix=f".{name}.replaced-", dir=directory)
            os.replace(final, os.path.join(old, name))
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, final)
        aof.fsync_directory(directory)
        return info
    except OSError as e:
        raise AdminError(f"cannot write the backup of {shard_name(cfg, r)} in {directory}: {e.strerror or e}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # a failure's partial folder (gone already on success)


def _receive_backup(cfg: ClusterConfig, r: RegionSpec, folder: str, timeout: float):
    """Stream region ``r``'s snapshot into ``folder`` in the layout of its data folder (no run
    mark: a region's every start takes back from its peers what its folder lacks); check it."""
    info, out, received = None, None, 0
    with admin_client(cfg, r) as c:
        try:
            for chunk in c.backup(timeout):
                if chunk.WhichOneof("part") == "info":
                    info = chunk.info
                    if info.number != r.number or info.cluster_id != cfg.cluster_id:
                        raise AdminError(f"the region at {r.host}:{r.repl_port} is region {info.number} of cluster "
                                         f"{info.cluster_id!r}, not {r.name} (region {r.number}) of "
                                         f"{cfg.cluster_id!r}")
                    log_dir = info.log_dir or "appendonlydir"
                    if os.path.basename(log_dir) != log_dir or log_dir in (".", ".."):
                        raise AdminError(f"region {r.name} names its log directory {log_dir!r}, not a folder name")
                    log_dir = os.path.join(folder, log_dir)
                    os.makedirs(log_dir)
                    out = open(os.path.join(log_dir, snapshot.file_name(info.record)), "wb")
                elif out is None:
                    raise AdminError(f"region {r.name} sent data before saying what it is")
                else:
                    out.write(chunk.data)
                    received += len(chunk.data)
            if out is None or info is None:  # (out is opened once info came)
                raise AdminError(f"region {r.name} ended the backup before sending anything")
            out.flush()
            os.fsync(out.fileno())
        except AdminCallError as e:
            raise failure(r, e, f"not complete within {timeout:g} s; --timeout gives it longer", cfg) from None
        finally:
            if out is not None:
                out.close()
    if received != info.size:
        raise AdminError(f"region {r.name} sent {received} bytes of a {info.size}-byte snapshot")
    try:
        header = snapshot.read_header(out.name)
    except snapshot.SnapshotError as e:
        raise AdminError(f"the snapshot of {r.name} is not valid once written ({out.name}): {e}") from None
    if header.record != info.record or header.region != info.number or not header.active_active:
        raise AdminError(f"the snapshot of {r.name} holds record {header.record} of region {header.region}, "
                         f"not record {info.record} of region {info.number}")
    # the log continues after the snapshot's record: an empty segment says where (a log without
    # any segment would start again at record 1, below the snapshot)
    _write_durably(os.path.join(log_dir, aof.segment_name(info.record + 1)), b"")
    return info


def _write_durably(path: str, data: bytes) -> None:
    with open(path, "xb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())

