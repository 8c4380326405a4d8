"""The README's tour of a local cluster, run as written.

The commands are the README's own: the ``sh`` blocks of the tour's sections, in order, so this
test changes when the README does.  They run in a fresh temporary directory with ports of their
own; what is changed, and only that: ports 7001.. (and 7101.., 7201..) become a free range (the
same offsets, ``braid up --base-port``), ``make up`` runs what it runs, ``braid up`` (in the
foreground, as ``make up`` does; ``make test`` is the suite itself and is left out),
``.venv/bin/braid`` is this interpreter's ``-m node``, and ``<pid of region-2>`` is the pid
``braid up``'s table shows.  Where the README says to wait (a region killed is back before
reading from it) the test waits for ``braid up`` to say so, and a read is repeated until it
holds every entry the tour wrote (replication is asynchronous).
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

from node.testing import free_port_base, wait_until
from node.tools.cluster_processes import region_processes

README = Path(__file__).resolve().parent.parent / "README.md"
TOUR = ("## Two commands", "### A first cross-region read", "### Kill a region and watch it catch up",
        "### Restarting and stopping regions")


def tour_commands(text: str) -> list[str]:
    """The commands of the tour's ``sh`` blocks, in order, without their comments."""
    lines = text.splitlines()
    commands = []
    for heading in TOUR:
        assert heading in lines, f"the README has no section {heading!r}"
        start = lines.index(heading) + 1
        end = next((i for i in range(start, len(lines)) if lines[i].startswith(("## ", "### "))), len(lines))
        for block in re.findall(r"```sh\n(.*?)```", "\n".join(lines[start:end]), re.S):
            for line in block.splitlines():
                command = re.sub(r"\s+#.*$", "", line).strip()
                if command:
                    commands.append(command)
    return commands


def _ports(command: str, base: int) -> str:
    """7001.. -> base.., 7101.. -> base+100.., 7201.. -> base+200.. (braid up's layout)."""
    return re.sub(r"\b7([012])(0[1-9]|10)\b", lambda m: str(base + 100 * int(m[1]) + int(m[2]) - 1), command)


def test_readme_tour(tmp_path):
    commands = tour_commands(README.read_text())
    for expected in ("make up", "redis-cli", "kill -9", "braid restart --region", "braid down"):
        assert any(expected in c for c in commands), f"the tour no longer has {expected!r}: update this test"
    base = free_port_base(3, offsets=(0, 100))
    python = [sys.executable, "-m", "node"]
    out_path = tmp_path / "braid-up.out"
    up = None
    ids: list[str] = []  # every entry ID the tour's XADDs returned
    killed: list[str] = []  # regions killed and not yet seen back

    def output() -> str:
        return out_path.read_text(errors="replace")

    def wait_for(text: str, timeout: float = 60) -> None:
        def seen():
            assert up.poll() is None, f"braid up exited ({up.returncode}):\n{output()}"
            return text in output()
        wait_until(seen, timeout, interval=0.05, what=f"braid up to say {text!r}")

    def shell(command: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", "-c", command], cwd=tmp_path, capture_output=True, text=True, timeout=90)

    try:
        for command in commands:
            command = _ports(command, base).replace(".venv/bin/braid ", f"{sys.executable} -m node ")
            if command.startswith("make test"):
                continue
            if command == "make up":  # `make up` runs `braid up` in the foreground
                with open(out_path, "wb") as out:
                    up = subprocess.Popen([*python, "up", "--base-port", str(base)], cwd=tmp_path, stdout=out,
                                          stderr=subprocess.STDOUT)
                wait_for("press Ctrl-C")
                continue
            assert up is not None, f"{command!r} comes before make up"
            victim = re.search(r"<pid of (region-\d+)>", command)
            if victim:
                name = victim[1]
                row = re.search(rf"{name}\s*│\s*(\d+)\s*│\s*(\d+)\s*│", output())
                assert row, f"braid up's table shows no pid for {name}:\n{output()}"
                command = command.replace(victim[0], row[2])
                killed.append(name)
            port = re.search(r"redis-cli -p (\d+)", command)
            for name in list(killed):  # the README reads a killed region once braid up says it is back
                if port and int(port[1]) == base + int(name.split("-")[1]) - 1:
                    wait_for(f"{name} is back")
                    killed.remove(name)
            res = shell(command)
            assert res.returncode == 0, f"{command!r}: {res.stderr}"
            if victim:
                wait_for(f"{victim[1]} (port {base + int(victim[1].split('-')[1]) - 1}, pid {row[2]}) "
                         "was killed by SIGKILL")
            elif " XADD " in command:
                ids.append(res.stdout.strip())
            elif " XRANGE " in command and not all(i in res.stdout for i in ids):
                # read again until it holds every entry written so far
                wait_until(lambda command=command: all(i in shell(command).stdout for i in ids), 30,
                           what=f"{command!r} to show {ids}")
            elif "braid restart" in command:
                assert "is back" in res.stdout or "runs again" in res.stdout, res.stdout
            elif "braid down" in command:
                assert "stopped" in res.stdout, res.stdout
                assert up.wait(timeout=30) == 0  # the foreground braid up was stopped with its regions
                assert "Traceback" not in output()
        assert len(ids) >= 2 and up.poll() == 0, "the tour ends with braid down"
        assert region_processes(str(tmp_path / "data")) == {}
    finally:
        if up is not None and up.poll() is None:
            up.send_signal(signal.SIGINT)
            try:
                up.wait(timeout=30)
            except subprocess.TimeoutExpired:
                up.kill()
                up.wait()
        subprocess.run([*python, "down", "--data-dir", str(tmp_path / "data")], capture_output=True, timeout=60)
