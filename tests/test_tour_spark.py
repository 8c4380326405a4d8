"""The README's tour up to the Spark example, as a newcomer runs it.

A cluster started the way the README's quick start does (``braid up --detach`` in
a fresh directory, on free ports instead of 7001-7003), the quick start's
``redis-cli`` commands (read from the README, sent with redis-py: the same words
on the wire), then the Spark command of docs/pipeline.md, run in that directory as
written (only ``--rides`` is made smaller), and ``braid down``.  The quick start leaves
an entry without the example's fields in ``rides``: the example must skip it, count
every one of its rides, say so, clean up its checkpoint and print no ERROR line.
When the documented commands change, this test runs the new ones.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

import redis

from node.testing import free_port_base

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
PIPELINE = os.path.join(ROOT, "docs", "pipeline.md")  # the "Spark pipeline" page
RIDES = 600
# what Spark and py4j print to the console by default, between the example's lines: the stage progress bar,
# the warning of a host name that resolves to a loopback address, py4j's INFO of closing its connections
SPARK_NOISE = ("[Stage ", "resolves to a loopback address", "py4j.clientserver", " WARN ")


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def _readme() -> str:
    return _read(README)


def _sh_blocks(text: str) -> list[str]:
    return re.findall(r"```sh\n(.*?)```", text, re.S)


def readme_quick_start() -> list[list[str]]:
    """The quick start's redis-cli commands (the first sh block that writes into rides), as argv lists."""
    for block in _sh_blocks(_readme()):
        commands = [shlex.split(line, comments=True) for line in block.splitlines()]
        commands = [c for c in commands if c and c[0] == "redis-cli"]
        if any("XADD" in c and "rides" in c for c in commands):
            return commands
    raise AssertionError("the README has no quick start writing into rides with redis-cli")


def documented_spark_command() -> list[str]:
    """The command that runs the Spark example, in docs/pipeline.md (the "Spark pipeline" page)."""
    text = _read(PIPELINE)
    assert text.startswith("# Spark pipeline\n"), "docs/pipeline.md is no longer the Spark pipeline page"
    for block in _sh_blocks(text):
        for line in block.splitlines():
            argv = shlex.split(line, comments=True)
            if argv[:1] and argv[0].endswith("braid") and argv[1:3] == ["pipeline", "rides"]:
                return argv
    raise AssertionError("docs/pipeline.md has no `braid pipeline rides` command")


def _braid(*args: str, cwd: str, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "node", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def _redis_cli(argv: list[str], ports: dict[int, int]):
    """``redis-cli -p PORT CMD ARGS...`` sent with redis-py, the README's port mapped to this cluster's."""
    assert argv[1] == "-p", argv
    with redis.Redis(port=ports[int(argv[2])], socket_timeout=10) as conn:
        return conn.execute_command(*argv[3:])


def test_quick_start_then_the_spark_example(tmp_path):
    base = free_port_base(3)
    home = str(tmp_path)
    up = _braid("up", "--detach", "--base-port", str(base), cwd=home)
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        ports = {7001 + i: base + i for i in range(3)}
        replies = [_redis_cli(argv, ports) for argv in readme_quick_start()]
        assert replies and re.fullmatch(rb"\d+-\d+", replies[0]), replies  # the XADD's new ID

        spark = documented_spark_command()
        assert spark[0] in ("braid", ".venv/bin/braid"), spark
        temp = tmp_path / "tmp"  # where the example makes its checkpoint
        temp.mkdir()
        env = dict(os.environ, TMPDIR=str(temp),
                   PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
        run = _braid(*spark[1:], "--rides", str(RIDES), cwd=home, env=env, timeout=600)
        out = run.stdout + run.stderr
        assert run.returncode == 0, out
        assert "totals agree" in run.stdout, out
        # the overall row: the streamed and the reconciled count are this run's rides, the quick start's entry skipped
        overall = next(line.split() for line in run.stdout.splitlines() if line.startswith("all "))
        assert overall[2] == overall[4] == str(RIDES), out
        assert "skipped 1 entry of 'rides'" in run.stdout, out
        assert not [line for line in out.splitlines() if " ERROR " in line], out
        # the example's own lines read alone: no progress bars, start-up warnings or py4j chatter
        noise = [line for line in out.splitlines() if any(word in line for word in SPARK_NOISE)]
        assert not noise, out
        assert not [p.name for p in temp.iterdir() if p.name.startswith("braid-rides-")], out
    finally:
        down = _braid("down", cwd=home)
    assert down.returncode == 0, down.stdout + down.stderr
