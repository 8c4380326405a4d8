"""``braid check-log`` and ``braid convert-snapshot``: examining a region's log directory (its run
mark, segments and snapshots), salvaging what ``--fix`` may cut, and converting snapshots of an
older format.  The files' formats and the rules of a salvage are node/persistence/'s
(aof.py, oplog.py, snapshot.py); this module only reports and asks them.
"""

from __future__ import annotations

import argparse
import os
import sys

from node.persistence import snapshot
from node.persistence.aof import examine, fsync_directory, plan_salvage, salvage
from node.persistence.legacy import convert
from node.persistence.oplog import mark_for_recovery, read_run_mark
from node.persistence.snapshot import SnapshotError, list_snapshots


def cmd_check_log(args: argparse.Namespace) -> int:
    """Check a log directory: its run mark, its segments and its snapshots; ``--fix`` salvages.

    Exit 0: clean, or fixed; 1: a torn tail left (without --fix); 2: damage left (without
    --fix), damage --fix must not cut, or a folder no region can start from even so."""
    directory = args.dir
    if not os.path.isdir(directory):
        print(f"braid check-log: {directory}: no such directory", file=sys.stderr)
        return 2
    mark = read_run_mark(directory)
    print(f"run mark: {_run_mark_meaning(mark)}")
    result = examine(directory, collect=False, closed_cleanly=mark == "clean")
    plan = plan_salvage(result)
    for seg in result.segments:
        last = seg.first_record + seg.records - 1
        span = f"records {seg.first_record}..{last}" if seg.records else "no records"
        damaged = f", then damage at offset {plan.offset}" if plan is not None and plan.path == seg.path else ""
        print(f"{os.path.basename(seg.path)}: {span} ({seg.records} records, {seg.size} bytes{damaged})")
    before = "" if plan is None else " before the damage"
    print(f"{len(result.segments)} segments{before}, last record {result.last_record}")
    status = 0
    if plan is None:
        print("log: clean")
    else:
        where = f"{plan.path} at offset {plan.offset} (record {plan.record})"
        if result.corrupt is None:
            print(f"torn tail: {plan.path} at offset {plan.offset}: {plan.reason} (record {plan.record})")
        else:
            print(f"braid check-log: damage: {where}: {plan.reason}", file=sys.stderr)
        if plan.refused is not None:
            print(f"braid check-log: {plan.refused}; nothing was cut", file=sys.stderr)
            status = 2
        else:
            _say_salvage(plan, done=args.fix)
            if args.fix:
                mark_for_recovery(directory)  # before the cut: a crash part-way still recovers
                salvage(plan)
                print(f"the log now ends at record {plan.record - 1}; run mark set to recover: the region's next "
                      "start treats its log as possibly missing operations its peers hold (a region of a cluster "
                      "takes them back before it takes writes; a standalone region has no peers: what was cut "
                      "is lost)")
            elif result.corrupt is None:
                print("run again with --fix to cut it (a start cuts it too, with aof-load-truncated yes)")
                status = 1
            else:
                print("nothing was changed; run again with --fix to salvage the log")
                status = 2
    bad = []
    for record, path in snapshot.list_snapshots(directory):
        name = os.path.basename(path)
        with open(path, "rb") as f:
            legacy = f.read(len(snapshot.LEGACY_MAGIC)) == snapshot.LEGACY_MAGIC
        if legacy:
            print(f"{name}: the old pickle format (format version 1), which a region does not load; "
                  f"`braid convert-snapshot {path}` converts it")
            continue
        try:
            header = snapshot.read_header(path)
            if header.record != record:
                raise snapshot.SnapshotError(f"the header says the state after record {header.record}, "
                                             f"the name record {record}")
        except (OSError, snapshot.SnapshotError) as e:
            print(f"braid check-log: damaged snapshot {name}: {e}", file=sys.stderr)
            bad.append(path)
            continue
        print(f"{name}: the state after record {record} ({os.path.getsize(path)} bytes): valid")
    for path in bad:
        if args.fix:
            aside = _aside_name(path + ".damaged")
            os.replace(path, aside)
            fsync_directory(directory)
            print(f"moved {os.path.basename(path)} aside to {os.path.basename(aside)}: a start no longer uses it")
        else:
            status = 2
    if bad and not args.fix:
        print(f"{len(bad)} damaged snapshot(s) left in place; --fix moves them aside")
    removed = {p for p, _ in plan.removed} if plan is not None and plan.refused is None else set()
    kept = [seg for seg in result.segments if seg.path not in removed]
    last = plan.record - 1 if plan is not None and plan.refused is None else result.last_record
    snapshots = [(record, path) for record, path in snapshot.list_snapshots(directory) if path not in bad]
    how, unusable = _start_from(snapshots, kept[0].first_record if kept else last + 1, last, bool(bad) and args.fix)
    if unusable is not None:
        print(f"braid check-log: {unusable}", file=sys.stderr)
        return 2
    if plan is not None and plan.refused is None and not args.fix:
        how = f"{'after --fix' if result.corrupt is not None else 'once the torn tail is cut'}, {how}"
    print(how)
    if status == 0:
        print("fixed" if args.fix and (bad or plan is not None) else "clean")
    return status


def _run_mark_meaning(mark: str | None) -> str:
    if mark is None:
        return "none (a new log, or one an older version wrote)"
    if mark == "clean":
        return ("clean (the last run closed cleanly and fsynced everything: a bad last record is damage, "
                "not a torn append)")
    if mark == "recover":
        return ("recover (the next start treats the log as possibly missing operations its peers hold, and a "
                "region of a cluster takes its own back from them before it takes writes)")
    return f"boot {mark} (the last run did not close cleanly; a torn last record is a crash during an append)"


def _say_salvage(plan, done: bool) -> None:
    """What a salvage drops: the bad record's segment from its offset, the files after it."""
    print(f"salvaged: kept every record before record {plan.record}, dropped {plan.dropped_bytes} bytes:" if done
          else f"--fix would keep every record before record {plan.record} and drop {plan.dropped_bytes} bytes:")
    if plan.cut is not None:
        path, offset, size = plan.cut
        print(f"  cut {size} bytes from {path} at offset {offset} "
              "(the first bad record and everything after it in that segment)")
    for path, size in plan.removed:
        print(f"  {'removed' if done else 'remove'} {path} ({size} bytes: the whole file; it follows the damage)")
    least = "" if plan.identified_all else "at least "
    print(f"  {least}{plan.identified} valid record(s) after the bad one could still be identified in what "
          f"{'was' if done else 'would be'} dropped")


def _aside_name(path: str) -> str:
    candidate, n = path, 1
    while os.path.exists(candidate):
        candidate, n = f"{path}.{n}", n + 1
    return candidate


def _start_from(snapshots: list[tuple[int, str]], first: int, last: int, moved: bool) -> tuple[str, str | None]:
    """How a start would load the folder - the log as kept (records ``first..last``), the valid
    ``snapshots`` (newest first) - as node/persistence/replay.py does: ``(how, None)``, or
    ``("", why it cannot)``.  ``moved``: damaged snapshots were moved aside."""
    for record, path in snapshots:
        if record + 1 < first:
            break  # the log no longer holds what follows this one, nor older ones
        name = os.path.basename(path)
        if record > last:
            return "", (f"{name} holds the state after record {record}, past the log's last record {last}: the "
                        "records between are missing, and a region cannot start from this folder; restore it from "
                        "its peers (a full resync) or from a backup")
        return (f"a start loads {name} and replays records {record + 1}..{last}" if last > record
                else f"a start loads {name} (no record after it)"), None
    if first > 1:
        lost = "with the damaged snapshot(s) moved aside no snapshot" if moved else "no valid snapshot"
        return "", (f"the log starts at record {first}: the records before it were compacted into a snapshot and "
                    f"{lost} holds them: the state before record {first} cannot be recovered from this folder; "
                    "restore the region from its peers (a full resync) or from a backup")
    return (f"a start replays the log, records 1..{last}" if last else "a start finds an empty log"), None


def cmd_convert_snapshot(args: argparse.Namespace) -> int:
    """Exit 0: every file converted (or already current); 1: at least one could not be."""
    paths = []
    for path in args.paths:  # a directory: every snapshot in it
        paths += [p for _r, p in reversed(list_snapshots(path))] if os.path.isdir(path) else [path]
    failed = 0
    for path in paths:
        try:
            done = convert(path)
        except (OSError, SnapshotError) as e:
            print(f"braid convert-snapshot: {path}: {getattr(e, 'strerror', None) or e}", file=sys.stderr)
            failed += 1
            continue
        if done is None:
            print(f"{path}: already in the current format")
        else:
            print(f"{path}: converted (the old file is kept as {done[1]})")
    return 1 if failed else 0

