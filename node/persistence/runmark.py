"""The run mark beside an operation log: how its last run ended, and whether a crash may have
lost the records it had written to the OS but not fsynced (node/persistence/oplog.py's
theory of operation tells what a start does with it).
"""

from __future__ import annotations

import os

# A file beside the log says how the last run ended: "clean" (closed, everything fsynced),
# the boot id of the machine it ran in (whatever the OS held when the process died is on
# disk as long as that machine did not go down), or "recover" (a start that may have lost
# records has not yet taken its operations back from its peers).  Whatever cuts records
# from a log - a start cutting a torn tail, `braid check-log --fix` salvaging damage -
# writes "recover" first (mark_for_recovery): what it cut may be operations that already
# left for other regions.  "clean" also means the log has no torn tail (aof.py).
RUN_MARK = "last-run"
_BOOT_ID = "/proc/sys/kernel/random/boot_id"


def boot_id() -> str:
    """This boot of the machine ("" where the OS does not say: every unclean end then counts
    as a crash of the machine)."""
    try:
        with open(_BOOT_ID) as f:
            return f.read().strip()
    except OSError:
        return ""


def read_run_mark(directory: str) -> str | None:
    try:
        with open(os.path.join(directory, RUN_MARK)) as f:
            return f.read().strip()
    except FileNotFoundError:
        return None


def write_run_mark(directory: str, mark: str) -> None:
    """Replace the mark, on disk before this returns (written aside, fsynced, renamed)."""
    path = os.path.join(directory, RUN_MARK)
    with open(path + ".tmp", "w") as f:
        f.write(mark + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)
    dfd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def mark_for_recovery(directory: str) -> None:
    """Before records are cut from the log in ``directory``: its next start (or this one, if
    it has not opened the log yet) treats it as possibly missing operations its peers hold
    (``OperationLog.may_have_lost``).  On disk before this returns, so a crash right after
    the cut still recovers."""
    write_run_mark(directory, "recover")


def unsynced_tail_may_be_lost(mark: str | None, boot: str) -> bool:
    """Could records written to the OS by the last run be missing from the file?  Not after a
    clean close, nor when the last run was in this boot of the machine (a killed process's
    writes survive in the OS), nor without a mark (a new log, or one written by a version
    that sent only fsynced operations); yes after another boot, or an unfinished recovery."""
    if mark is None or mark == "clean":
        return False
    return mark == "recover" or not boot or mark != boot
