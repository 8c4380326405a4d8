"""Redis's own stream test suites (Tcl) run against a Braid region.

Redis ships its tests with its source: ``tests/unit/type/stream.tcl`` and
``tests/unit/type/stream-cgroups.tcl`` exercise every stream command, and
``./runtest --host H --port P`` runs them against an external server. This module
fetches Redis 8.6.3's source from Debian's archive once (the tarball's SHA-256 is
pinned; the unpacked ``tests/`` directory is cached outside the repository), copies
the tests into a temporary directory, and runs each suite with ``tclsh`` (Debian's
``tcl``, installed by ``make deps``) against a fresh Braid region process, in
external mode, one test client.

What does not run, and why:

- tags: ``needs:debug`` (DEBUG RELOAD / LOADAOF round trips through Redis's own
  RDB and AOF; Braid's DEBUG injects faults), and what the harness itself leaves out
  against an external server (``external:skip``: replication, server restarts) or
  with a single database (``singledb:skip``: SWAPDB, MOVE, FLUSHALL of other
  databases) - Braid serves one database of streams.
- ``OTHER_TYPES``: tests that need another data type (SET, LPUSH, SADD, BLPOP) to
  produce WRONGTYPE or a key of another type; Braid stores streams only.
- ``NEEDS_COMMAND``: tests excluded while Braid lacks a command they use (``COMMAND
  INFO`` decides at run time, so they run as soon as the commands exist).
- ``KNOWN_DIFFERENCES``: real differences from Redis not fixed yet. They run and must
  fail (a strict expected failure): one that passes fails this test, to be taken
  off the list.
- ``HARNESS_PATCHES``: the external-server prelude empties Lua functions and scripts
  before each block; Braid has no scripting, so those two calls may fail.

Anything else that fails fails this test, with the failing tests' names and output.
``BRAID_REDIS_TESTS`` may name an unpacked Redis source tree to use instead of the
download (e.g. on a machine without network access).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import threading
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from node.testing import BraidProcess, wait_until

REDIS_VERSION = "8.6.3"
TARBALL = f"redis_{REDIS_VERSION}.orig.tar.gz"
TARBALL_SHA256 = "58d0d1eb49a1ea6c2179659707fec171b1e2e2b8d5157ed2ec59d1d66ad5a654"
# Debian's pool while the version is current, then snapshot.debian.org by the file's SHA-1
TARBALL_URLS = (
    f"https://deb.debian.org/debian/pool/main/r/redis/{TARBALL}",
    "https://snapshot.debian.org/file/6187b6b0e62284c4d8109cd133cd5b4c2082aeb0",
)

SUITES = ("unit/type/stream", "unit/type/stream-cgroups")

OTHER_TYPES = {
    "XIDMPRECORD parameter validation": "SET makes a string key for the WRONGTYPE case",
    "XREAD: XADD + DEL + LPUSH should not awake client": "LPUSH turns the key into a list inside MULTI",
    "XREADGROUP wrong key type": "SET makes a string key for the WRONGTYPE case",
    "Blocking XREADGROUP: key type changed with SET": "SET replaces the stream with a string",
    "Blocking XREADGROUP: key type changed with transaction": "SADD replaces the stream with a set",
    "Blocking XREAD: key type changed with SET": "SET replaces the stream with a string",
    "Blocking XREADGROUP for stream key that has clients blocked on list": "BLPOP blocks on the key as a list",
}

NEEDS_COMMAND = {
    "XADD IDMP tracking survives COPY": (("COPY",), "copies an IDMP stream"),
    "XADD IDMP tracking correct after COPY REPLACE overwrites IDMP stream": (("COPY",), "copies an IDMP stream"),
    "XADD IDMP tracking survives RESTORE":
        (("DUMP", "RESTORE", "PTTL"), "DUMP and RESTORE an IDMP stream, with the key's PTTL (keys never expire)"),
    "Consumer seen-time and active-time": (("DUMP", "RESTORE"), "DUMP and RESTORE keep the consumers' times"),
    "Loading from legacy (Redis <= v6.2.x, rdb_ver < 10) persistence":
        (("RESTORE",), "RESTORE of a stream serialized by Redis 6.2"),
    "Loading from legacy (Redis <= v7.0.x, rdb_ver < 11) persistence":
        (("RESTORE",), "RESTORE of a stream serialized by Redis 7.0"),
}

KNOWN_DIFFERENCES: dict[str, str] = {}  # none left

HARNESS_PATCHES = (
    # (file, text, replacement): Braid has no scripting, so FUNCTION / SCRIPT FLUSH are unknown commands
    ("tests/support/server.tcl", "    r function flush\n    r script flush\n",
     "    catch {r function flush}\n    catch {r script flush}\n"),
)

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "braid" / f"redis-{REDIS_VERSION}-tests"


def _download(dest: Path) -> None:
    errors = []
    for url in TARBALL_URLS:
        try:
            with urllib.request.urlopen(url, timeout=60) as resp:
                data = resp.read()
        except OSError as e:
            errors.append(f"{url}: {e}")
            continue
        digest = hashlib.sha256(data).hexdigest()
        if digest != TARBALL_SHA256:
            errors.append(f"{url}: SHA-256 {digest}, expected {TARBALL_SHA256}")
            continue
        dest.write_bytes(data)
        return
    pytest.fail(f"could not fetch Redis {REDIS_VERSION}'s source from Debian's archive:\n" + "\n".join(errors))


def redis_tests_tree() -> Path:
    """A directory holding Redis's ``tests/`` (the cache, filled on first use)."""
    given = os.environ.get("BRAID_REDIS_TESTS")
    if given:
        assert (Path(given) / "tests" / "test_helper.tcl").is_file(), f"no tests/test_helper.tcl in {given}"
        return Path(given)
    cache = _cache_dir()
    if (cache / "tests" / "test_helper.tcl").is_file():
        return cache
    cache.parent.mkdir(parents=True, exist_ok=True)
    with open(cache.parent / f".redis-{REDIS_VERSION}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one download, whoever comes first
        if (cache / "tests" / "test_helper.tcl").is_file():
            return cache
        with tempfile.TemporaryDirectory(dir=cache.parent) as tmp:
            tarball = Path(tmp) / TARBALL
            _download(tarball)
            prefix = f"redis-{REDIS_VERSION}/"
            with tarfile.open(tarball) as tar:
                members = [m for m in tar.getmembers() if m.name.startswith(prefix + "tests/")]
                for m in members:
                    m.name = m.name[len(prefix):]
                tar.extractall(Path(tmp) / "tree", members=members, filter="data")
            shutil.rmtree(cache, ignore_errors=True)
            os.rename(Path(tmp) / "tree", cache)
    return cache


def prepared_copy(source: Path, dest: Path) -> Path:
    """Redis's tests copied to ``dest`` with the harness patches applied (the cache stays pristine)."""
    shutil.copytree(source / "tests", dest / "tests", ignore=shutil.ignore_patterns("tmp"))
    (dest / "tests" / "tmp").mkdir()
    for rel, text, replacement in HARNESS_PATCHES:
        path = dest / rel
        content = path.read_text()
        assert content.count(text) == 1, f"{rel} of Redis {REDIS_VERSION} no longer has {text!r}: update the patch"
        path.write_text(content.replace(text, replacement))
    return dest


def parse_results(output: str) -> dict[str, dict[str, str]]:
    """The harness's report: ok / err / skip / ignore test names, err with their output."""
    results: dict[str, dict[str, str]] = {"ok": {}, "err": {}, "skip": {}, "ignore": {}, "exception": {}}
    current = None
    for line in ANSI.sub("", output).splitlines():
        m = re.match(r"\[(ok|err|skip|ignore|exception)\]: (.*)$", line)
        if m:
            kind, rest = m.groups()
            if kind == "ok":
                rest = re.sub(r" \(\d+ ms\)$", "", rest)
            elif kind == "err":
                rest = re.sub(r" in tests/unit/\S+\.tcl$", "", rest)
            results[kind][rest] = ""
            current = (kind, rest) if kind in ("err", "exception") else None
        elif line.startswith("[") or line.startswith("***") or not line.strip():
            current = None
        elif current is not None:
            results[current[0]][current[1]] += line + "\n"
    return results


@pytest.fixture(scope="module")
def tclsh():
    exe = shutil.which("tclsh")
    assert exe, "tclsh is not installed: `make deps` installs Debian's tcl"
    return exe


@pytest.fixture(scope="module")
def redis_tests():
    return redis_tests_tree()


def missing_commands(port: int) -> set[str]:
    names = sorted({cmd for cmds, _ in NEEDS_COMMAND.values() for cmd in cmds})
    with redis.Redis(port=port) as c:
        info = c.execute_command("COMMAND INFO", *names)  # one string: redis-py leaves the reply raw
    return {name for name, entry in zip(names, info, strict=True) if entry is None}


@dataclass
class SuiteRun:
    argv: list[str]
    tree: Path
    proc: subprocess.Popen
    output: Path


@pytest.fixture(scope="module")
def suite_runs(tclsh, redis_tests, tmp_path_factory):
    """Both suites started at once, each on its own region and copy of the tests: most of
    their time is the tests' own waits, so side by side they take the time of the longer."""
    with contextlib.ExitStack() as stack:
        runs = {}
        for n, suite in enumerate(SUITES):
            region = stack.enter_context(BraidProcess())
            tree = prepared_copy(redis_tests, tmp_path_factory.mktemp("redis-tests"))
            missing = missing_commands(region.port)
            skipped = set(OTHER_TYPES) | {name for name, (cmds, _) in NEEDS_COMMAND.items() if missing & set(cmds)}
            skipfile = tree / "braid-skip.txt"
            skipfile.write_text("".join(f"{name}\n" for name in sorted(skipped)))
            # --baseport: where each harness looks for a port of its own (it scans 32 below it)
            argv = [tclsh, "tests/test_helper.tcl", "--host", "127.0.0.1", "--port", str(region.port),
                    "--single", suite, "--clients", "1", "--singledb", "--tags", "-needs:debug",
                    "--skipfile", str(skipfile), "--durable", "--timeout", "300",
                    "--baseport", str(21111 + 100 * n)]
            output = tree / "output.txt"
            with open(output, "wb") as out:
                proc = subprocess.Popen(argv, cwd=tree, stdout=out, stderr=subprocess.STDOUT)
            stack.callback(_stop, proc)
            runs[suite] = SuiteRun(argv, tree, proc, output)
        yield runs


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("suite", SUITES)
def test_redis_stream_suite(suite, suite_runs):
    run = suite_runs[suite]
    code = run.proc.wait(timeout=900)
    output = run.output.read_text(errors="replace")
    results = parse_results(output)
    report = f"`{' '.join(run.argv)}` in {run.tree} (exit {code}):\n"

    assert f"]: {suite} (" in ANSI.sub("", output), report + "the suite did not finish:\n" + output[-6000:]
    assert not results["exception"], report + "\n".join(f"{k}\n{v}" for k, v in results["exception"].items())
    unexpected = {name: out for name, out in results["err"].items() if name not in KNOWN_DIFFERENCES}
    assert not unexpected, report + f"{len(unexpected)} tests failed:\n" + "\n".join(
        f"--- {name}\n{out}" for name, out in unexpected.items())
    fixed = [name for name in KNOWN_DIFFERENCES if name in results["ok"]]
    assert not fixed, f"now pass, take them off KNOWN_DIFFERENCES: {fixed}"
    assert len(results["ok"]) >= 50, report + f"only {len(results['ok'])} tests passed:\n" + output[-6000:]


def test_every_exclusion_names_a_test(redis_tests):
    """A renamed test would silently run again or stay excluded for nothing: names must exist."""
    sources = "".join((redis_tests / "tests" / f"{suite}.tcl").read_text() for suite in SUITES)
    for name in (*OTHER_TYPES, *NEEDS_COMMAND, *KNOWN_DIFFERENCES):
        assert name in sources, f"no test named {name!r} in Redis {REDIS_VERSION}'s stream suites"


# The differences the suites found, checked without them (no download, a second each).

def test_history_read_is_no_change(braid):
    """XREADGROUP of a consumer's history changes delivery counts only: Redis counts no change."""
    braid.xadd("x", {"data": "a"}, id="1-0")
    braid.xadd("x", {"data": "b"}, id="2-0")
    braid.xgroup_create("x", "g1", id="0")
    braid.xgroup_createconsumer("x", "g1", "Alice")

    def changes() -> int:
        return braid.info("persistence")["rdb_changes_since_last_save"]

    before = changes()
    assert braid.xreadgroup("g1", "Alice", {"x": ">"}, count=1) == [[b"x", [(b"1-0", {b"data": b"a"})]]]
    assert changes() == before + 1  # a new delivery is one change
    before = changes()
    assert braid.xreadgroup("g1", "Alice", {"x": "0"}) == [[b"x", [(b"1-0", {b"data": b"a"})]]]
    assert braid.xreadgroup("g1", "Alice", {"x": "9000"}) == [[b"x", []]]
    assert changes() == before


def test_blocked_command_answered_with_error_counts_as_failed(braid_proc, braid):
    """A blocked XREADGROUP its group's destruction answers with NOGROUP counts in failed_calls."""
    braid.xgroup_create("s", "g", id="$", mkstream=True)
    braid.config_resetstat()
    errors = []

    def reader():
        with braid_proc.client() as c:
            try:
                c.xreadgroup("g", "Alice", {"s": ">"}, block=0)
            except redis.ResponseError as e:
                errors.append(str(e))

    t = threading.Thread(target=reader)
    t.start()
    wait_until(lambda: braid.info("clients")["blocked_clients"] == 1, what="the reader to block")
    braid.xgroup_destroy("s", "g")
    t.join(10)
    assert errors and errors[0].startswith("NOGROUP")
    stats = braid.info("commandstats")["cmdstat_xreadgroup"]
    assert (stats["calls"], stats["failed_calls"], stats["rejected_calls"]) == (1, 1, 0)
    assert braid.info("errorstats")["errorstat_NOGROUP"]["count"] == 1
    assert braid.info("stats")["total_error_replies"] == 1
