"""redis-cli (Debian's redis-tools) against a Braid region process."""

from __future__ import annotations

import shutil
import subprocess

import pytest


@pytest.fixture(scope="module")
def cli():
    exe = shutil.which("redis-cli")
    assert exe, "redis-cli is not installed: `make deps` installs redis-tools"
    return exe


def run(cli, port, *args, stdin=None) -> str:
    res = subprocess.run([cli, "-p", str(port), *args], input=stdin, capture_output=True,
                         text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    return res.stdout


def test_cli_commands(cli, braid_proc, braid):
    port = braid_proc.port
    assert run(cli, port, "PING").strip() == "PONG"
    assert run(cli, port, "XADD", "cli", "1-1", "f", "v").strip() == "1-1"
    assert run(cli, port, "XRANGE", "cli", "-", "+").split() == ["1-1", "f", "v"]
    assert "redis_version:8.10.2" in run(cli, port, "INFO", "server")
    assert run(cli, port, "XADD", "cli", "1-1", "f", "v").startswith(
        "ERR The ID specified in XADD is equal or smaller")


def test_cli_piped_commands(cli, braid_proc, braid):
    out = run(cli, braid_proc.port, stdin="XADD piped 5-0 a b\nXLEN piped\nXRANGE piped - +\n")
    assert out.split() == ["5-0", "1", "5-0", "a", "b"]


def test_cli_interactive_help_tables(cli, braid_proc):
    """redis-cli reads COMMAND DOCS at start-up for its hints; it must parse ours."""
    res = subprocess.run([cli, "-p", str(braid_proc.port)], input="COMMAND COUNT\n",
                         capture_output=True, text=True, timeout=30)
    assert res.returncode == 0 and int(res.stdout.split()[-1]) > 40
