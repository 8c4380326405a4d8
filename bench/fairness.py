"""Fairness: how long one client waits while another abuses the server, Braid beside Redis.

``python -m bench.fairness [--redis-server PATH] [--only CASE[,CASE]] [--cores S,L] [--out PATH]``

For each abuse case, against a fresh Braid region and then a fresh redis-server (bench/run.py's
``BraidServer`` / ``RedisServer``, one at a time, each on the server core), a *victim* process
sends ``PING`` and a small ``XADD victim * f abcdefghijkl`` alternately, one at a time, waiting
for each reply, from before the abuse starts until it has ended, and records every round trip
(``time.perf_counter_ns``, CLOCK_MONOTONIC, one clock for every process of the machine).  The
abuse runs in another process (both on the load core).  Per case and server: the victim's
p50 / p99 / max round trip (PING and XADD apart, and both together), the abuse's own duration,
the server's peak RSS during the case, and the Braid/Redis ratios.  Cases:

- ``pipeline-no-read``: 200,000 ``XRANGE p - +`` (``p``: 10 small entries) written in one go by a
  client that never reads a reply; it waits 3 s, then closes.  Whether the server closed it first
  is recorded (the socket's TCP state, and ``INFO stats`` ``client_output_buffer_limit_disconnections``).
- ``slow-reader``: 10 pipelined ``XRANGE big - +`` (``big``: 50,000 entries of one 1 KB value),
  the replies read 64 KB per 10 ms tick until the last byte.
- ``huge-xadd``: one ``XADD huge * f0 v f1 v …`` of 1,000,000 field-value pairs, sent raw.
- ``huge-xrange``: one ``XRANGE big - +`` (~53 MB) read at full speed.
- ``dump-restore``: ``DUMP big``, then ``RESTORE big2 0 <payload>``; each phase also has a row.
- ``many-clients``: ``redis-benchmark -c 50 -P 100 -n 500000`` of ``XADD mc * f1 … f2 …``.

Each case has a deadline (``--deadline``, 120 s by default): an abuse still running then is
killed, and a victim request still unanswered is recorded as such (its wait so far, marked ``≥``).
The victim's window is every round trip that overlaps the abuse or the 0.5 s after it (a server
that frees a large buffer once the abuser has gone makes the victim wait then).  This is a
measurement, not a test: nothing passes or fails on a number.
"""

from __future__ import annotations

import argparse
import array
import contextlib
import json
import os
import random
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from . import run as benchrun
from .run import BraidServer, RedisServer, _child_setup, _die_with_parent, loadavg, machine, rss_bytes

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
DEFAULT_OUT = os.path.join(HERE, "RESULTS-fairness.md")
PARTIAL_OUT = os.path.join(HERE, "out", "RESULTS-fairness-partial.md")

DEADLINE = 120.0          # seconds an abuse may run
LEAD = 0.5                # the victim runs alone this long before the abuse starts
TAIL = 0.5                # ... and this long after it ended (counted in its window)
RSS_EVERY = 0.05          # seconds between RSS samples of the server
BIG_ENTRIES = 50_000      # entries of the big stream
BIG_VALUE = 1024          # bytes of each one's value (hex characters: never "+PONG\r\n")
SMALL_ENTRIES = 10        # entries of the stream pipeline-no-read reads
NO_READ_COMMANDS = 200_000
NO_READ_WAIT = 3.0
SLOW_READ_CHUNK = 64 * 1024
SLOW_READ_TICK = 0.010
SLOW_READ_COMMANDS = 10
HUGE_PAIRS = 1_000_000
MANY_CLIENTS, MANY_PIPELINE, MANY_REQUESTS = 50, 100, 500_000
LOAD_BATCH = 1000

CASES = {
    "pipeline-no-read": f"{NO_READ_COMMANDS:,} pipelined `XRANGE p - +` ({SMALL_ENTRIES} small entries), no "
                        f"reply read; {NO_READ_WAIT:.0f} s wait, then close",
    "slow-reader": f"{SLOW_READ_COMMANDS} pipelined `XRANGE big - +` ({BIG_ENTRIES:,} × {BIG_VALUE} B), read "
                   f"{SLOW_READ_CHUNK // 1024} KB per {SLOW_READ_TICK * 1000:.0f} ms",
    "huge-xadd": f"one `XADD huge * …` of {HUGE_PAIRS:,} field-value pairs, sent raw",
    "huge-xrange": f"one `XRANGE big - +` ({BIG_ENTRIES:,} × {BIG_VALUE} B) read at full speed",
    "dump-restore": "`DUMP big`, then `RESTORE big2 0 <payload>`",
    "many-clients": f"`redis-benchmark -c {MANY_CLIENTS} -P {MANY_PIPELINE} -n {MANY_REQUESTS:,}` "
                    "of `XADD mc * f1 abcdefghijkl f2 abcdefghijkl`",
}
BIG_CASES = {"slow-reader", "huge-xrange", "dump-restore"}
TARGET_P99_MS, TARGET_MAX_MS = 50.0, 250.0

PING = b"*1\r\n$4\r\nPING\r\n"
PONG = b"+PONG\r\n"
KINDS = ("PING", "XADD")


def resp(*args: bytes | str | int) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def now_ns() -> int:
    return time.perf_counter_ns()


def connect(port: int, timeout: float | None = None) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def reply_end(buf: bytes | bytearray, at: int = 0) -> int:
    """The end of the one simple reply (``+ - :`` or a bulk string) starting at ``at``; -1: incomplete."""
    line = buf.find(b"\r\n", at)
    if line < 0:
        return -1
    if buf[at:at + 1] == b"$":
        n = int(buf[at + 1:line])
        end = line + 2 + (n + 2 if n >= 0 else 0)
        return end if len(buf) >= end else -1
    return line + 2


# --------------------------------------------------------------------------- the victim (own process)

def victim_main(port: int, deadline_ns: int, out_path: str) -> int:
    """PING and XADD alternately, one at a time, until SIGUSR1 (then the request under way is
    finished) or the deadline; writes (sent_ns, received_ns, kind) triples to ``out_path``
    (kind 0 PING, 1 XADD, +2: still unanswered at the deadline)."""
    stop = {"at": None}
    signal.signal(signal.SIGUSR1, lambda *_: stop.update(at=stop["at"] or now_ns()))
    requests = (PING, resp("XADD", "victim", "*", "f", "abcdefghijkl"))
    samples = array.array("q")
    errors: dict[str, int] = {}
    sock: socket.socket | None = None
    kind = 0
    ready = False
    while stop["at"] is None and now_ns() < deadline_ns:
        t0 = now_ns()
        try:
            if sock is None:   # (a reconnection's time is part of this round trip)
                sock = connect(port, timeout=max(0.001, (deadline_ns - now_ns()) / 1e9))
            sock.sendall(requests[kind])
            buf = b""
            while True:
                left = (deadline_ns - now_ns()) / 1e9
                if left <= 0:
                    raise TimeoutError
                sock.settimeout(left)
                chunk = sock.recv(65536)
                if not chunk:
                    raise ConnectionError("the server closed the connection")
                buf += chunk
                if reply_end(buf) > 0:
                    break
            t1 = now_ns()
            samples.extend((t0, t1, kind))
            if buf[:1] == b"-":
                msg = buf[1:buf.find(b"\r\n")].decode(errors="replace")[:80]
                errors[msg] = errors.get(msg, 0) + 1
            if not ready:
                print("ready", flush=True)
                ready = True
            kind ^= 1
        except TimeoutError:
            samples.extend((t0, now_ns(), kind + 2))   # unanswered at the deadline: a lower bound
            break
        except OSError as exc:
            errors[f"{type(exc).__name__}: {exc}"[:80]] = errors.get(f"{type(exc).__name__}: {exc}"[:80], 0) + 1
            with contextlib.suppress(OSError):
                if sock is not None:
                    sock.close()
            sock = None
            time.sleep(0.01)   # a closed connection: again, a little later
    with open(out_path, "wb") as f:
        samples.tofile(f)
    print(json.dumps({"errors": errors}), flush=True)
    return 0


# --------------------------------------------------------------------------- the abuses (own process)

def tcp_state(sock: socket.socket) -> int:
    """The socket's TCP state (``tcp_info.tcpi_state``: 1 established, 7 closed, 8 close-wait)."""
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)[0]


def read_until_pong(sock: socket.socket, chunk: int = 1 << 20, tick: float = 0.0) -> int:
    """Read (and drop) everything up to the PING's reply sent after the abuse's commands; the
    bytes read.  ``tick``: read at most ``chunk`` bytes per tick (a slow reader)."""
    total, tail = 0, b""
    view = memoryview(bytearray(chunk))
    next_tick = time.monotonic()
    while True:
        want = chunk
        while want:
            n = sock.recv_into(view[:want])
            if not n:
                raise ConnectionError(f"the server closed the connection after {total:,} bytes")
            total += n
            want -= n
            tail = (tail + bytes(view[max(0, n - 16):n]))[-16:]
            if tail.endswith(PONG):
                return total
        if tick:
            next_tick += tick
            pause = next_tick - time.monotonic()
            if pause > 0:
                time.sleep(pause)  # the slow reader's pace


def read_reply(sock: socket.socket) -> bytes:
    """One simple or bulk reply, whole."""
    buf = bytearray()
    while True:
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        buf += chunk
        end = reply_end(buf)
        if end > 0:
            return bytes(buf[:end])


def said(reply: bytes) -> str:
    """A reply as a note: a bulk string's or a status's text, an error's message."""
    line = reply.split(b"\r\n", 2)
    text = line[1] if reply[:1] == b"$" and len(line) > 1 else line[0][1:]
    return ("error " if reply[:1] == b"-" else "") + text.decode(errors="replace")[:60]


def abuse_main(case: str, port: int, deadline_ns: int) -> int:
    rec: dict = {"phases": {}, "notes": []}
    timeout = max(1.0, (deadline_ns - now_ns()) / 1e9)
    try:
        if case == "pipeline-no-read":
            payload = resp("XRANGE", "p", "-", "+") * NO_READ_COMMANDS
            sock = connect(port, timeout)
            rec["start_ns"] = now_ns()
            try:
                sock.sendall(payload)
                rec["notes"].append(f"wrote {len(payload) / 1e6:.1f} MB")
            except TimeoutError:
                rec["notes"].append("the server stopped reading before the last command")
            except OSError as exc:
                rec["notes"].append(f"writing: {type(exc).__name__}")
            rec["phases"]["write"] = [rec["start_ns"], now_ns()]
            closed_at = None
            until = time.monotonic() + NO_READ_WAIT
            while time.monotonic() < until:
                if tcp_state(sock) != 1:
                    closed_at = closed_at or now_ns()
                time.sleep(0.05)  # watching the connection's state while not reading
            if tcp_state(sock) != 1:
                closed_at = closed_at or now_ns()
            rec["closed_by_server"] = closed_at is not None
            if closed_at is not None:
                rec["notes"].append(f"closed by the server {(closed_at - rec['start_ns']) / 1e9:.2f} s in")
            sock.close()
            rec["end_ns"] = now_ns()
        elif case in ("slow-reader", "huge-xrange"):
            n = SLOW_READ_COMMANDS if case == "slow-reader" else 1
            sock = connect(port, timeout)
            rec["start_ns"] = now_ns()
            sock.sendall(resp("XRANGE", "big", "-", "+") * n + PING)
            if case == "slow-reader":
                got = read_until_pong(sock, SLOW_READ_CHUNK, SLOW_READ_TICK)
            else:
                got = read_until_pong(sock)
            rec["end_ns"] = now_ns()
            rec["notes"].append(f"read {got / 1e6:.1f} MB")
            sock.close()
        elif case == "huge-xadd":
            parts = [b"*%d\r\n" % (3 + 2 * HUGE_PAIRS), b"$4\r\nXADD\r\n$4\r\nhuge\r\n$1\r\n*\r\n"]
            for i in range(HUGE_PAIRS):
                f = b"f%d" % i
                parts.append(b"$%d\r\n%s\r\n$1\r\nv\r\n" % (len(f), f))
            payload = b"".join(parts)
            sock = connect(port, timeout)
            rec["start_ns"] = now_ns()
            sock.sendall(payload)
            rec["phases"]["write"] = [rec["start_ns"], now_ns()]
            reply = read_reply(sock)
            rec["end_ns"] = now_ns()
            rec["notes"].append(f"sent {len(payload) / 1e6:.1f} MB; reply {said(reply)}")
            sock.close()
        elif case == "dump-restore":
            sock = connect(port, timeout)
            rec["start_ns"] = t0 = now_ns()
            sock.sendall(resp("DUMP", "big"))
            reply = read_reply(sock)
            t1 = now_ns()
            if not reply.startswith(b"$"):
                raise RuntimeError(f"DUMP answered {reply[:80]!r}")
            payload = reply[reply.index(b"\r\n") + 2:-2]
            command = resp("RESTORE", "big2", 0, payload)
            t2 = now_ns()
            sock.sendall(command)
            reply = read_reply(sock)
            t3 = now_ns()
            rec["end_ns"] = t3
            rec["phases"] = {"DUMP": [t0, t1], "RESTORE": [t2, t3]}
            rec["notes"].append(f"payload {len(payload) / 1e6:.1f} MB; RESTORE: {said(reply)}")
            sock.close()
        elif case == "many-clients":
            argv = ["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-c", str(MANY_CLIENTS),
                    "-P", str(MANY_PIPELINE), "-n", str(MANY_REQUESTS), "-q",
                    "xadd", "mc", "*", "f1", "abcdefghijkl", "f2", "abcdefghijkl"]
            rec["start_ns"] = now_ns()
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                                  preexec_fn=_die_with_parent)
            rec["end_ns"] = now_ns()
            if proc.returncode != 0:
                raise RuntimeError(f"redis-benchmark exited {proc.returncode}: {proc.stderr.strip()[-200:]}")
            rps = benchrun.parse_benchmark(proc.stdout).get("rps")
            if rps:
                rec["notes"].append(f"{rps:,.0f} XADD/s")
        else:
            raise ValueError(f"unknown case {case!r}")
    except Exception as exc:
        rec.setdefault("start_ns", now_ns())
        rec["end_ns"] = now_ns()
        rec["error"] = f"{type(exc).__name__}: {exc}"[:300]
    print(json.dumps(rec), flush=True)
    return 0


# --------------------------------------------------------------------------- the harness

def load(client, case: str) -> None:
    """What the case reads, loaded before it starts (redis-py pipelines; not counted)."""
    client.flushall()
    if case == "pipeline-no-read":
        for _ in range(SMALL_ENTRIES):
            client.xadd("p", {"f1": "abcdefghijkl", "f2": "abcdefghijkl"})
    if case in BIG_CASES:
        rng = random.Random(7)
        done = 0
        while done < BIG_ENTRIES:
            n = min(LOAD_BATCH, BIG_ENTRIES - done)
            with client.pipeline(transaction=False) as p:
                for _ in range(n):
                    p.execute_command("XADD", "big", "*", "v", rng.randbytes(BIG_VALUE // 2).hex())
                p.execute()
            done += n
        assert client.xlen("big") == BIG_ENTRIES


def check(client, case: str) -> str:
    """What the abuse left, checked afterwards ('' when as expected)."""
    if case == "huge-xadd":
        n = client.xlen("huge")
        return "" if n == 1 else f"XLEN huge = {n}"
    if case == "dump-restore":
        n = client.xlen("big2")
        return "" if n == BIG_ENTRIES else f"XLEN big2 = {n}"
    if case == "many-clients":
        n = client.xlen("mc")
        return "" if n >= MANY_REQUESTS else f"XLEN mc = {n} < {MANY_REQUESTS}"
    return ""


def outbuf_disconnections(client) -> int | None:
    with contextlib.suppress(Exception):
        v = client.info("stats").get("client_output_buffer_limit_disconnections")
        return None if v is None else int(v)
    return None


class PeakRss:
    """The server's largest RSS (bench/run.py's ``rss_bytes``), sampled every RSS_EVERY s."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak, self._stop = pid, rss_bytes(pid), threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(RSS_EVERY):
            self.peak = max(self.peak, rss_bytes(self.pid))

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_bytes(self.pid))
        return self.peak


def _spawn_role(argv: list[str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "bench.fairness", *argv], cwd=REPO, stdout=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True, preexec_fn=_child_setup("load"))


def _readline(proc: subprocess.Popen, seconds: float) -> str:
    ready, _, _ = select.select([proc.stdout], [], [], seconds)
    return proc.stdout.readline().strip() if ready else ""


def _stop_proc(proc: subprocess.Popen | None) -> None:
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait()


def run_case(case: str, label: str, deadline: float, say) -> dict:
    """One case against one fresh server: the raw record (samples, abuse, RSS, notes)."""
    srv = BraidServer("braid") if label == "braid" else RedisServer("redis")
    rec: dict = {"case": case, "server": label, "notes": []}
    victim = abuser = None
    samples_path = os.path.join(tempfile.mkdtemp(prefix="bench-fairness-"), "victim.bin")
    try:
        srv.spawn()
        srv.wait_ready()
        client = srv.client()
        t = time.monotonic()
        load(client, case)
        rec["load_seconds"] = time.monotonic() - t
        disc_before = outbuf_disconnections(client)
        rec["rss_before"] = rss_bytes(srv.pid)
        rss = PeakRss(srv.pid)
        try:
            deadline_ns = now_ns() + int((deadline + 2 * LEAD + 30) * 1e9)
            victim = _spawn_role(["_victim", str(srv.port), str(deadline_ns), samples_path])
            if _readline(victim, 30) != "ready":
                raise RuntimeError("the victim got no first reply within 30 s")
            time.sleep(LEAD)   # the victim alone first
            abuse_deadline_ns = now_ns() + int(deadline * 1e9)
            abuser = _spawn_role(["_abuse", case, str(srv.port), str(abuse_deadline_ns)])
            try:
                out, _ = abuser.communicate(timeout=deadline + 10)
                rec["abuse"] = json.loads(out.strip().splitlines()[-1])
            except subprocess.TimeoutExpired:
                _stop_proc(abuser)
                rec["abuse"] = {"error": f"did not finish within {deadline:.0f} s (killed)",
                                "start_ns": abuse_deadline_ns - int(deadline * 1e9), "end_ns": now_ns()}
            time.sleep(TAIL)
            victim.send_signal(signal.SIGUSR1)
            try:
                out, _ = victim.communicate(timeout=max(1.0, (deadline_ns - now_ns()) / 1e9 + 5))
                rec["victim"] = json.loads(out.strip().splitlines()[-1])
            except subprocess.TimeoutExpired:
                _stop_proc(victim)
                rec["victim"] = {"errors": {"the victim did not stop": 1}}
        finally:
            rec["rss_peak"] = rss.stop()
        with open(samples_path, "rb") as f:
            raw = array.array("q")
            raw.frombytes(f.read())
        rec["samples"] = [tuple(raw[i:i + 3]) for i in range(0, len(raw), 3)]
        if srv.proc.poll() is not None:
            rec["notes"].append(f"the server exited ({srv.proc.returncode})")
        else:
            try:
                client.ping()
                problem = check(client, case)
                if problem:
                    rec["notes"].append(problem)
                disc_after = outbuf_disconnections(client)
                if disc_before is not None and disc_after is not None and disc_after > disc_before:
                    rec["notes"].append(f"output-buffer-limit disconnections: {disc_after - disc_before}")
            except Exception as exc:
                rec["notes"].append(f"after the case: {type(exc).__name__}: {exc}"[:200])
            finally:
                client.close()
    except Exception as exc:
        rec["error"] = f"{type(exc).__name__}: {exc}"[:300]
    finally:
        _stop_proc(abuser)
        _stop_proc(victim)
        srv.stop()
        shutil.rmtree(os.path.dirname(samples_path), ignore_errors=True)
    summarise(rec)
    say(line_of(rec))
    return rec


def pct(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def window_stats(samples: list[tuple], start_ns: int, end_ns: int) -> dict:
    """p50 / p99 / max (ms) of the round trips that overlap [start, end], per kind and all."""
    out: dict = {}
    inside = [s for s in samples if s[0] <= end_ns and s[1] >= start_ns]
    for name, kinds in (("PING", (0, 2)), ("XADD", (1, 3)), ("all", (0, 1, 2, 3))):
        chosen = [s for s in inside if s[2] in kinds]
        if not chosen:
            out[name] = None
            continue
        ms = sorted((s[1] - s[0]) / 1e6 for s in chosen)
        out[name] = {"n": len(ms), "p50": pct(ms, 0.50), "p99": pct(ms, 0.99), "max": ms[-1],
                     "unanswered": sum(1 for s in chosen if s[2] >= 2)}
    return out


def summarise(rec: dict) -> None:
    """Rows for the report: the whole case, and each named phase of dump-restore."""
    rec["rows"] = []
    ab = rec.get("abuse") or {}
    if ab.get("error"):
        rec["notes"].append(f"abuse: {ab['error']}")
    v_err = (rec.get("victim") or {}).get("errors") or {}
    for msg, n in v_err.items():
        rec["notes"].append(f"victim: {n} × {msg}")
    rec["notes"] = list(ab.get("notes", [])) + rec["notes"]
    if "closed_by_server" in ab:
        rec["closed_by_server"] = ab["closed_by_server"]
    samples = rec.pop("samples", [])
    if not samples or "start_ns" not in ab:
        return
    start, end = ab["start_ns"], ab["end_ns"]
    rec["rows"].append({"name": rec["case"], "seconds": (end - start) / 1e9,
                        "stats": window_stats(samples, start, end + int(TAIL * 1e9))})
    if rec["case"] == "dump-restore":
        for phase, (s, e) in ab.get("phases", {}).items():
            rec["rows"].append({"name": f"{rec['case']}: {phase}", "seconds": (e - s) / 1e9,
                                "stats": window_stats(samples, s, e)})


def _ms(st: dict | None, key: str) -> str:
    if not st:
        return "n/a"
    v = st[key]
    text = f"{v:.2f}" if v < 100 else f"{v:,.0f}"
    return ("≥ " + text) if key == "max" and st["unanswered"] else text


def _trio(st: dict | None) -> str:
    return " / ".join(_ms(st, k) for k in ("p50", "p99", "max"))


def line_of(rec: dict) -> str:
    if rec.get("error"):
        return f"  {rec['case']} {rec['server']}: failed: {rec['error']}"
    parts = []
    for row in rec["rows"]:
        parts.append(f"{row['name']} {row['seconds']:.2f} s, victim p50/p99/max {_trio(row['stats']['all'])} ms "
                     f"({row['stats']['all']['n'] if row['stats']['all'] else 0} round trips)")
    notes = "; ".join(rec["notes"])
    return (f"  {rec['case']} {rec['server']}: " + " | ".join(parts)
            + f"; peak RSS {rec['rss_peak'] / 1e6:,.0f} MB" + (f"; {notes}" if notes else ""))


def _ratio(b, r, spec=".2f") -> str:
    return format(b / r, spec) if b is not None and r else "n/a"


def verdict(b: dict | None, r: dict | None) -> str:
    """The target: p99 ≤ 50 ms and max ≤ 250 ms, or no worse than Redis where Redis is slower."""
    if not b:
        return "n/a"
    ok_p99 = b["p99"] <= TARGET_P99_MS or (r is not None and b["p99"] <= r["p99"])
    ok_max = (not b["unanswered"] and b["max"] <= TARGET_MAX_MS) or (
        r is not None and not b["unanswered"] and b["max"] <= r["max"])
    return "met" if ok_p99 and ok_max else "missed (" + ", ".join(
        x for x, ok in (("p99", ok_p99), ("max", ok_max)) if not ok) + ")"


def tables(records: list[dict]) -> list[str]:
    lines = ["| case | server | abuse (s) | victim round trips | victim PING p50 / p99 / max (ms) "
             "| victim XADD p50 / p99 / max (ms) | both: p50 / p99 / max (ms) | peak RSS (MB) | notes |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    by: dict[tuple[str, str], dict] = {}
    names: list[str] = []
    for rec in records:
        if rec.get("error") or not rec["rows"]:
            lines.append(f"| {rec['case']} | {rec['server']} | | | | | | "
                         f"{rec.get('rss_peak', 0) / 1e6:,.0f} | failed: "
                         f"{(rec.get('error') or '; '.join(rec['notes'])).replace('|', '/')[:300]} |")
            continue
        for i, row in enumerate(rec["rows"]):
            st = row["stats"]
            by[(row["name"], rec["server"])] = {"row": row, "rss": rec["rss_peak"] if i == 0 else None}
            if row["name"] not in names:
                names.append(row["name"])
            notes = "; ".join(rec["notes"]).replace("|", "/") if i == 0 else ""
            if i == 0 and rec.get("closed_by_server") is not None:
                notes = ("closed by the server" if rec["closed_by_server"] else "not closed by the server") + (
                    "; " + notes if notes else "")
            lines.append(f"| {row['name']} | {rec['server']} | {row['seconds']:.2f} "
                         f"| {st['all']['n'] if st['all'] else 0:,} | {_trio(st['PING'])} | {_trio(st['XADD'])} "
                         f"| {_trio(st['all'])} | {rec['rss_peak'] / 1e6:,.0f} | {notes} |"
                         if i == 0 else
                         f"| {row['name']} | {rec['server']} | {row['seconds']:.2f} "
                         f"| {st['all']['n'] if st['all'] else 0:,} | {_trio(st['PING'])} | {_trio(st['XADD'])} "
                         f"| {_trio(st['all'])} | | (this phase's round trips) |")
    lines += ["", "Braid / Redis (above 1: Braid slower or larger); the victim's PING and XADD together:", "",
              "| case | p50 | p99 | max | abuse duration | peak RSS | Braid p99 / max (ms) "
              f"| target: p99 ≤ {TARGET_P99_MS:.0f} ms, max ≤ {TARGET_MAX_MS:.0f} ms, or no worse than Redis |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for name in names:
        b, r = by.get((name, "braid")), by.get((name, "redis"))
        bs = b["row"]["stats"]["all"] if b else None
        rs = r["row"]["stats"]["all"] if r else None
        lines.append(f"| {name} | {_ratio(bs and bs['p50'], rs and rs['p50'])} "
                     f"| {_ratio(bs and bs['p99'], rs and rs['p99'])} | {_ratio(bs and bs['max'], rs and rs['max'])} "
                     f"| {_ratio(b and b['row']['seconds'], r and r['row']['seconds'])} "
                     f"| {_ratio(b and b['rss'], r and r['rss']) if b and b['rss'] else ''} "
                     f"| {_ms(bs, 'p99')} / {_ms(bs, 'max')} | {verdict(bs, rs)} |")
    return lines


def redis_name(version: str) -> str:
    """Which Redis ran: Debian's on PATH, or the build given with --redis-server (one built from
    Debian's source package, as bench/README.md describes), by its version."""
    ver = version.split("v=", 1)[1].split()[0] if "v=" in version else "?"
    if os.environ.get("BRAID_BENCH_REDIS_SERVER"):
        return f"Redis {ver} (built from Debian's source package; `$REDIS_SERVER`, given with --redis-server)"
    return f"Debian's redis-server {ver} (on PATH)"


def write_results(path: str, m: dict, records: list[dict], invocation: str, load_avg: tuple[str, str],
                  cmds: dict, cores_used: str, seconds: float) -> None:
    lines = [
        "# Fairness: one client's abuse, another's wait",
        "",
        f"Recorded {m['date']} with `{invocation}` at commit {m['commit']} ({seconds:.0f} s in all). "
        "Each case runs against a fresh Braid region, then a fresh redis-server (one at a time, in memory "
        f"only); cores: {cores_used} (the victim and the abuse both on the load core). "
        f"Load average {load_avg[0]} at the start, {load_avg[1]} at the end.",
        "",
        "## Machine",
        "",
        f"- CPU: {m['cpu']}, {m['cores']} cores; memory {m['memory'] or 'n/a'}; {m['kernel']}",
        f"- Python: {m['python']} (runs Braid, the victim and the abuses)",
        f"- Redis: {redis_name(m['redis'])}: `{m['redis']}`",
        f"- {m['benchmark']} (many-clients)",
        "",
        "## Servers",
        "",
        f"- Braid: `{cmds['braid']}`",
        f"- Redis: `{cmds['redis']}`",
        "",
        "## Cases",
        "",
    ]
    lines += [f"- `{name}`: {text}" for name, text in CASES.items() if any(r["case"] == name for r in records)]
    lines += [
        "",
        "The victim (its own process) sends `PING` and `XADD victim * f abcdefghijkl` alternately, one at a "
        f"time, from {LEAD} s before the abuse until {TAIL} s after it; a case's row counts every round trip "
        "that overlaps that window (`dump-restore`'s phase rows: those that overlap the phase). "
        f"A `≥` max: a request still unanswered at the case's deadline. Peak RSS: `VmRSS` of the server "
        f"(and any children), sampled every {RSS_EVERY * 1000:.0f} ms during the case.",
        "",
        "## Results",
        "",
    ] + tables(records) + [""]
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write("\n".join(lines))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.fairness", description=__doc__.splitlines()[0])
    ap.add_argument("--only", metavar="CASE[,CASE]", help=f"run only these: {', '.join(CASES)}")
    ap.add_argument("--redis-server", metavar="PATH",
                    help="the redis-server to compare with (default $BRAID_BENCH_REDIS_SERVER, else the one on PATH)")
    ap.add_argument("--cores", metavar="SERVER,LOAD",
                    help="the server on CPU SERVER, the victim and the abuse on CPU LOAD "
                         "(default 0,1 with two cores or more; 'none' pins nothing)")
    ap.add_argument("--deadline", type=float, default=DEADLINE, metavar="S",
                    help=f"seconds an abuse may run before it is killed (default {DEADLINE:.0f})")
    ap.add_argument("--out", metavar="PATH",
                    help=f"results file (default {os.path.relpath(DEFAULT_OUT, REPO)} for a full run, "
                         f"{os.path.relpath(PARTIAL_OUT, REPO)} with --only)")
    args = ap.parse_args(argv)
    wanted = [c.strip() for c in (args.only or "").split(",") if c.strip()]
    for c in wanted:
        if c not in CASES:
            ap.error(f"unknown case {c!r}; choose from {', '.join(CASES)}")
    args.cases = [c for c in CASES if c in wanted] if wanted else list(CASES)
    if args.cores not in (None, "none") and not (len(args.cores.split(",")) == 2
                                                 and all(x.isdigit() for x in args.cores.split(","))):
        ap.error("--cores takes SERVER,LOAD (two CPU numbers, e.g. 0,1) or none")
    args.out = args.out or (PARTIAL_OUT if wanted else DEFAULT_OUT)
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_victim"]:
        return victim_main(int(argv[1]), int(argv[2]), argv[3])
    if argv[:1] == ["_abuse"]:
        return abuse_main(argv[1], int(argv[2]), int(argv[3]))
    args = parse_args(argv)
    if args.redis_server:
        if not os.access(args.redis_server, os.X_OK):
            print(f"--redis-server {args.redis_server}: not an executable file", file=sys.stderr)
            return 2
        os.environ["BRAID_BENCH_REDIS_SERVER"] = os.path.abspath(args.redis_server)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, benchrun._on_signal)
    if benchrun.redis_server_exe() is None or shutil.which("redis-benchmark") is None:
        print("redis-server and redis-benchmark are needed: `make deps` installs Debian's", file=sys.stderr)
        return 2
    cores_used = benchrun.set_cores(args.cores)
    if benchrun.PIN["load"]:
        os.sched_setaffinity(0, benchrun.PIN["load"])   # the harness's own sampling stays off the server's core
    invocation = "python -m bench.fairness" + ("" if not argv else " " + " ".join(argv))
    if args.redis_server:
        invocation = invocation.replace(args.redis_server, "$REDIS_SERVER")
    load_start = loadavg()
    started = time.monotonic()
    records = []
    for case in args.cases:
        print(f"{case}: {CASES[case]}", flush=True)
        for label in ("braid", "redis"):
            records.append(run_case(case, label, args.deadline, lambda s: print(s, flush=True)))
    probe = {"braid": BraidServer("braid"), "redis": RedisServer("redis")}
    try:
        cmds = {k: s.display_argv() for k, s in probe.items()}
    finally:
        for s in probe.values():
            s.stop()
    seconds = time.monotonic() - started
    write_results(args.out, machine(), records, invocation, (load_start, loadavg()), cmds, cores_used, seconds)
    print()
    print("\n".join(tables(records)))
    print(f"\nwritten {args.out} in {seconds:.0f} s")
    return 1 if any(r.get("error") for r in records) else 0


if __name__ == "__main__":
    sys.exit(main())
