"""A region that runs out of memory fail-stops: it says so in its log, exits with
EXIT_FAIL_STOP (node/region/supervision.py), and loses no acknowledged write.

A real region (``braid node`` in a subprocess, ``--appendfsync always``: a reply leaves only
once its record is on disk) is capped with ``prlimit --as`` once it serves: its idle virtual
size (/proc/PID/status VmSize) plus :data:`HEADROOM`, so the cap follows the machine and the
build rather than a fixed number.  A client then fills it with large XADDs until the
region stops, keeping every ID it was answered; the region must exit with status 70 (not
be killed by a signal: msgspec's bytes encoders used to crash it with a segmentation fault
when an allocation failed, node/persistence/safe_encode.py), its log must say it ran out
of memory, and once restarted without the cap every acknowledged entry must be there with
its value.

Two places memory runs out: serving the writes themselves (automatic snapshots off: the
allocation that fails is one of a command, its log record or the log's buffer), and a
snapshot (BGSAVE of a state half the headroom: its encoding needs more than the rest).
After the first, the region is also started under a cap too low to load its log: it exits
with status 1 saying it ran out of memory while loading (not that the log is damaged).

In one process: a command, a cron step and a callback of the event loop that run out of
memory stop the region (even where another exception would not), and the log's encoders
raise MemoryError where msgspec's own crash.

``prlimit`` (util-linux) is required: the tests fail, never skip, without it.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import socket
import subprocess
import sys

import hiredis
import pytest

from node import commands as cmdtable
from node.region.config import Config
from node.region.supervision import EXIT_FAIL_STOP
from node.testing import BraidProcess, InProcessServer, wait_until

HEADROOM = 256 * 1024 * 1024  # address space the region may take beyond its idle size
VALUE_SIZE = 100_000          # bytes of each entry's value
PIPELINE = 20                 # XADDs sent before their replies are read


def vm_size(pid: int) -> int:
    """The virtual size of process ``pid`` in bytes (VmSize of /proc/PID/status)."""
    with open(f"/proc/{pid}/status") as f:
        match = re.search(r"^VmSize:\s+(\d+) kB$", f.read(), re.MULTILINE)
    assert match, f"no VmSize in /proc/{pid}/status"
    return int(match.group(1)) * 1024


def prlimit() -> str:
    path = shutil.which("prlimit")
    if path is None:
        pytest.fail("prlimit is missing: it is in util-linux (apt-get install util-linux)")
    return path


def cap_address_space(pid: int, limit: int) -> None:
    """``prlimit --as`` on the running process (soft and hard limit)."""
    subprocess.run([prlimit(), "--pid", str(pid), f"--as={limit}"], check=True)
    with open(f"/proc/{pid}/limits") as f:
        assert re.search(rf"^Max address space\s+{limit}\s+{limit}\s+bytes", f.read(), re.MULTILINE)


def value_of(n: int) -> bytes:
    """Entry ``n``'s value: its number repeated, so that a value read back names its entry."""
    return (b"%012d" % n) * (VALUE_SIZE // 12)


class Writer:
    """XADDs to ``s`` over a raw socket, in pipelines; ``acked`` maps each ID a reply gave to the
    entry's number.  Stops when the region closes the connection."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=60)  # a hung region fails the test
        self.reader = hiredis.Reader()
        self.acked: dict[bytes, int] = {}
        self.refused: list[tuple[int, str]] = []
        self.sent = 0
        self.closed = False

    def pipeline(self, count: int = PIPELINE) -> None:
        first = self.sent
        out = bytearray()
        for n in range(first, first + count):
            v = value_of(n)
            out += b"*7\r\n$4\r\nXADD\r\n$1\r\ns\r\n$1\r\n*\r\n$1\r\nn\r\n$%d\r\n%d\r\n$1\r\nv\r\n$%d\r\n%s\r\n" % (
                len(str(n)), n, len(v), v)
        self.sent += count
        try:
            self.sock.sendall(out)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the region stopped: read what it answered before
        for n in range(first, first + count):
            reply = self._reply()
            if reply is None:
                self.closed = True
                return
            if isinstance(reply, hiredis.ReplyError):
                self.refused.append((n, str(reply)))
            else:
                self.acked[reply] = n

    def _reply(self):
        while True:
            reply = self.reader.gets()
            if reply is not False:
                return reply
            try:
                data = self.sock.recv(65536)
            except ConnectionResetError:
                return None
            if not data:
                return None
            self.reader.feed(data)

    def fill(self, until_bytes: int | None = None) -> None:
        """Pipelines until the connection closes (or ``until_bytes`` of values were acknowledged)."""
        while not self.closed and (until_bytes is None or len(self.acked) * VALUE_SIZE < until_bytes):
            self.pipeline()

    def close(self) -> None:
        self.sock.close()


def command(port: int, *argv: bytes) -> object:
    """One command on a connection of its own; None if the connection closed without a reply."""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(b"*%d\r\n" % len(argv) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in argv))
        reader = hiredis.Reader()
        while (reply := reader.gets()) is False:
            try:
                data = sock.recv(65536)
            except ConnectionResetError:
                return None
            if not data:
                return None
            reader.feed(data)
        return reply


@pytest.mark.parametrize("where", ["writes", "snapshot"])
def test_a_region_out_of_memory_fail_stops_and_keeps_every_acknowledged_write(tmp_path, where):
    proc = BraidProcess(data_dir=str(tmp_path / "region"),
                        extra_args=["--appendonly", "yes", "--appendfsync", "always"])
    proc.start()
    writer = None
    try:
        assert command(proc.port, b"CONFIG", b"SET", b"auto-aof-rewrite-percentage", b"0") == b"OK"
        idle = vm_size(proc.pid)
        cap_address_space(proc.pid, idle + HEADROOM)
        writer = Writer(proc.port)
        if where == "writes":
            writer.fill()
        else:
            writer.fill(until_bytes=HEADROOM // 2)
            assert not writer.closed, "the region stopped before it held half its headroom"
            # encoding a state of half the headroom takes more than the other half
            assert command(proc.port, b"BGSAVE") is None, "BGSAVE was answered"
        writer.close()
        status = proc.proc.wait(timeout=60)
        with open(proc.log_path, errors="replace") as f:
            log = f.read()
        assert "Segmentation fault" not in log and "Fatal Python error" not in log, log[-3000:]
        assert status == EXIT_FAIL_STOP, f"exit status {status} (a negative one is a signal): {log[-3000:]}"
        stops = [line for line in log.splitlines() if "FAIL-STOP" in line]
        assert len(stops) == 1 and "out of memory while " in stops[0], log[-3000:]
        if where == "snapshot":
            assert "out of memory while running command bgsave" in stops[0], stops[0]
        assert writer.acked and not writer.refused, writer.refused[:3]

        if where == "writes":
            # started again under a cap below what its log holds: it cannot load it, and says so
            # (exit status 1: it never served); the log is left as it was
            capped = subprocess.run([prlimit(), f"--as={idle + HEADROOM // 2}", "--", *proc.argv()],
                                    cwd=proc.data_dir, capture_output=True, text=True, timeout=60)
            said = capped.stdout + capped.stderr
            assert capped.returncode == 1, f"exit status {capped.returncode}: {said[-3000:]}"
            assert "out of memory while loading the append-only file" in said, said[-3000:]
            assert "Segmentation fault" not in said and "cannot be replayed" not in said, said[-3000:]

        proc.restart()  # without the cap: it replays its log
        c = proc.client(socket_timeout=60)
        stored: dict[bytes, tuple[int, bytes]] = {}
        start = b"-"
        while batch := c.xrange("s", start, "+", count=200):
            for eid, fields in batch:
                stored[eid] = (int(fields[b"n"]), fields[b"v"])
            start = b"(" + batch[-1][0]
        lost = [eid for eid in writer.acked if eid not in stored]
        assert not lost, f"{len(lost)} of {len(writer.acked)} acknowledged XADDs lost, e.g. {lost[:3]}"
        wrong = [eid for eid, n in writer.acked.items() if stored[eid] != (n, value_of(n))]
        assert not wrong, f"{len(wrong)} acknowledged entries differ, e.g. {wrong[:3]}"
        assert c.xadd("s", {"after": "restart"})  # and it takes writes again
        c.close()
    finally:
        if writer is not None:
            writer.close()
        proc.stop()


# ---------------------------------------------------------------- in one process: where it is caught
def _fail_stops(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelname == "CRITICAL" and "FAIL-STOP" in r.getMessage()]


def test_a_command_out_of_memory_stops_the_region_even_having_changed_nothing(tmp_path, caplog, monkeypatch):
    """A handler that raises having changed nothing is answered ``ERR internal error`` and the
    region serves on (tests/test_fail_stop.py); out of memory it stops: an allocation can fail
    between two steps of a change that the dirty counter does not see."""
    def xlen(client, argv):
        raise MemoryError()

    monkeypatch.setattr(cmdtable.load_all()[b"xlen"], "handler", xlen)
    with InProcessServer(Config(dir=str(tmp_path))) as srv:
        c = srv.client()
        c.xadd("s", {"f": "v"})
        c.close()
        assert command(srv.port, b"XLEN", b"s") is None  # no reply: the connection closes
        assert srv.server.core.failed is not None \
            and srv.server.core.failed.startswith("out of memory while running command xlen")
        [message] = _fail_stops(caplog)
        assert "region 1 stops: out of memory while running command xlen: MemoryError in " in message


def test_memory_running_out_in_what_the_event_loop_runs_stops_the_region(tmp_path, caplog):
    """What escapes to the event loop's handler (a client's input, a reply, the end of a turn's
    log write) stops the region when it is a MemoryError; another exception is only counted."""
    with InProcessServer(Config(dir=str(tmp_path))) as srv:
        def end_of_turn():
            raise MemoryError()

        srv.call(lambda: asyncio.get_running_loop().call_soon(lambda: 1 / 0))
        srv.call(lambda: asyncio.get_running_loop().call_soon(end_of_turn))
        wait_until(lambda: srv.server.core.failed is not None, 10, what="the fail-stop")
        assert srv.server.core.failed.startswith("out of memory while running ")
        assert "end_of_turn" in srv.server.core.failed
        assert srv.server.core.supervisor.failures == 2  # the ZeroDivisionError was counted, and did not stop it
        wait_until(lambda: _fail_stops(caplog), 10, what="the fail-stop's log line")


def test_a_cron_step_out_of_memory_stops_the_region_even_one_that_changes_nothing(tmp_path, caplog):
    """A failing step that changes no state is retried with backoff; out of memory, it stops."""
    with InProcessServer(Config(dir=str(tmp_path))) as srv:
        def tick():
            raise MemoryError()

        srv.call(lambda: setattr(srv.server.core.oplog, "tick", tick))
        wait_until(lambda: srv.server.core.failed is not None, 10, what="the fail-stop")
        failed = srv.server.core.failed
        assert failed.startswith("out of memory while running the background step log-tick: MemoryError")


def test_the_log_encodes_with_an_encoder_that_raises_where_msgspec_crashes():
    """Under an address-space limit, the encoders of node/persistence/safe_encode.py raise
    MemoryError for an encoding that does not fit (msgspec's own ``Encoder.encode`` dies with
    SIGSEGV there: node/persistence/safe_encode.py)."""
    script = """if True:
        import re, resource
        import msgspec
        from node.persistence import safe_encode, stateformat
        size = int(re.search(r"VmSize:\\s+(\\d+)", open("/proc/self/status").read()).group(1)) * 1024
        resource.setrlimit(resource.RLIMIT_AS, (size + 200_000_000, resource.RLIM_INFINITY))
        big = [b"x" * 1_000_000] * 400  # 400 MB once encoded, from 1 MB
        for encode in (safe_encode.encoder(), lambda o: safe_encode.encode_buffer(stateformat._encoder, o)):
            try:
                encode(big)
            except MemoryError:
                print("MemoryError")
        print(len(safe_encode.encoder()([b"after", 1])))  # and it encodes again
    """
    done = subprocess.run([sys.executable, "-X", "faulthandler", "-c", script], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["MemoryError", "MemoryError", "9"], done.stdout
