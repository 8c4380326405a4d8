"""What a user reads from braid-admin: ``status`` at 80 columns against a real three-region
cluster (nothing compared is cut, a paused link shows how far behind its peer is, "1 key"),
``sync wait`` failing while a member is down, and a help line for every option and
subcommand of ``braid``, ``braid-admin`` and ``braid-chaos``."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import pytest

from node.testing import LocalCluster, flushed_clients, replication_status, version_vector, wait_until

WIDTH = 80
ENV = {**os.environ, "COLUMNS": str(WIDTH)}  # as a narrow terminal; a pipe gets 80 columns too


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(3) as c:
        yield c


def admin(cluster, *args) -> subprocess.CompletedProcess:
    # stdout is a pipe: the width comes from COLUMNS, as a terminal's would
    return subprocess.run([sys.executable, "-m", "node.tools.admin_cli", "--cluster", cluster.file, *args],
                          capture_output=True, text=True, timeout=60, env=ENV)


def rows(text: str) -> list[list[str]]:
    """The body rows of every table in ``text``, as lists of stripped cells."""
    return [[cell.strip() for cell in line.strip("│").split("│")] for line in text.splitlines()
            if line.startswith("│")]


def status(cluster) -> str:
    res = admin(cluster, "status")
    assert all(len(line) <= WIDTH for line in res.stdout.splitlines()), res.stdout
    assert "…" not in res.stdout, res.stdout  # wrapped, never cut
    return res


def test_one_key_is_singular(cluster):
    with flushed_clients(cluster) as (r1, *_):
        r1.xadd("only", {"f": "v"})
        cluster.sync_wait()
        res = status(cluster)
        assert res.returncode == 0, res.stderr
        counts = {row[0]: row[5] for row in rows(res.stdout) if len(row) == 6 and row[1].isdigit()}
        assert counts == {"region-1": "1 key", "region-2": "1 key", "region-3": "1 key"}, res.stdout
        info = admin(cluster, "info", "db", "db")
        assert info.stdout.count(": 1 key,") == 3, info.stdout


def test_a_paused_link_shows_the_operations_waiting(cluster):
    with flushed_clients(cluster) as (r1, r2, r3):
        def acknowledged() -> bool:  # region-2 has acknowledged all region-1 holds
            return "lag_ops=0," in replication_status(r1)["crdt_peer_2"]

        wait_until(acknowledged, what="region-2 acknowledging region-1's operations")
        res = admin(cluster, "replication", "pause", "--region", "region-1", "--peer", "region-2")
        assert res.returncode == 0, res.stderr
        for i in range(7):
            r1.xadd("waiting", {"i": i})
        links = {(row[0], row[1]): row[2:] for row in rows(status(cluster).stdout) if len(row) == 6
                 and row[1].startswith("region-")}
        state, behind, oldest_ms, _unstable = links[("region-1", "region-2")]
        assert state == "paused" and behind == "7" and int(oldest_ms) >= 0, links
        assert admin(cluster, "replication", "resume", "--region", "region-1").returncode == 0
        res = admin(cluster, "sync", "wait", "--timeout", "20")
        assert res.returncode == 0 and "in sync: all 3 members" in res.stdout, res.stdout + res.stderr


def test_a_killed_region_at_80_columns_and_sync_wait(cluster):
    """Last in this module: it leaves region-3 down."""
    clients = cluster.clients()
    try:
        for n, c in zip((1234, 1111, 1010), clients, strict=True):  # three origins, four-digit counts
            pipe = c.pipeline(transaction=False)
            for i in range(n):
                pipe.xadd(f"wide-{n}", {"i": i})
            pipe.execute()
        cluster.sync_wait(60)
        cluster.proc("region-3").kill()
        clients[0].xadd("after", {"f": "v"})
        r1, r2 = clients[:2]
        wait_until(lambda: replication_status(r1)["crdt_vv"] == replication_status(r2)["crdt_vv"],
                   what="region-2 holding region-1's last write")
        res = status(cluster)
        assert res.returncode == 1 and "region region-3" in res.stderr and "unreachable" in res.stderr
        table = rows(res.stdout)
        assert ["region-3", "3", "active"] == next(r for r in table if r[0] == "region-3")[:3]
        assert any(r[0] == "region-3" and "unreachable" in r for r in table), res.stdout
        header = next(line for line in res.stdout.splitlines() if line.startswith("┃") and "pending" in line)
        origins = [cell.strip() for cell in header.strip("┃").split("┃")][1:-1]
        assert origins == ["1", "2", "3"], header
        for name, c in (("region-1", r1), ("region-2", r2)):
            vv = version_vector(replication_status(c))
            want = [name, *(str(vv[int(o)]) for o in origins), "0"]
            assert want in table, (want, res.stdout)  # the whole vector, each count whole
        assert ["region-3", "unreachable", "", "", ""] in table, res.stdout

        res = admin(cluster, "sync", "wait", "--timeout", "1")
        assert res.returncode == 1 and "in sync" not in res.stdout, res.stdout
        assert "unreachable: region-3" in res.stderr, res.stderr
        res = admin(cluster, "sync", "wait", "--all", "--timeout", "1")
        assert res.returncode == 1 and "unreachable: region-3" in res.stderr, res.stderr
        res = admin(cluster, "sync", "wait", "--reachable", "--timeout", "20")
        assert res.returncode == 0, res.stderr
        assert "2 reachable members" in res.stdout and "region-3" in res.stdout, res.stdout
    finally:
        for c in clients:
            c.close()


# ------------------------------------------------------------------ help texts
class _Built(Exception):
    def __init__(self, parser: argparse.ArgumentParser) -> None:
        self.parser = parser


def _parser_of(main) -> argparse.ArgumentParser:
    """The parser ``main`` builds, taken at its parse_args (the programs build it inside main)."""
    def built(self, *args, **kw):
        raise _Built(self)

    parse_args = argparse.ArgumentParser.parse_args
    argparse.ArgumentParser.parse_args = built
    try:
        main([])
    except _Built as e:
        return e.parser
    finally:
        argparse.ArgumentParser.parse_args = parse_args
    raise AssertionError(f"{main.__module__}.main parsed no arguments")


def _braid():
    from node.tools.cli import main

    return _parser_of(main)


def _braid_admin():
    from node.tools.admin_cli import build_parser

    return build_parser()


def _braid_chaos():
    from chaos.cli import main

    return _parser_of(main)


def _braid_chaos_sim():
    from chaos.sim.cli import parser

    return parser()


PROGRAMS = {"braid": _braid, "braid-admin": _braid_admin, "braid-chaos": _braid_chaos,
            "braid-chaos sim": _braid_chaos_sim}


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return {name: sub for action in parser._actions if isinstance(action, argparse._SubParsersAction)
            for name, sub in action.choices.items()}


def _without_help(parser: argparse.ArgumentParser, path: str, recurse: bool = True) -> list[str]:
    """Every option, argument and subcommand of ``parser`` (and, with ``recurse``, its subcommands')
    without a help line, or whose help does not give the default it has."""
    missing = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
            continue  # -h, and what is hidden on purpose
        if isinstance(action, argparse._SubParsersAction):
            helped = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                if not helped.get(name):
                    missing.append(f"{path} {name}")
                if recurse:
                    missing += _without_help(sub, f"{path} {name}")
            continue
        label = f"{path} {'/'.join(action.option_strings) or action.dest}"
        if not action.help:
            missing.append(label)
        elif (action.option_strings and action.default not in (None, False, True) and action.nargs != 0
              and "default" not in action.help):
            missing.append(f"{label} (its default, {action.default!r}, is not said)")
    return missing


def _cases() -> list[tuple[str, str | None]]:
    """(program, subcommand): one case per subcommand, so that a failure names whose text is missing;
    (program, None) checks the program's own options and its subcommands' help lines."""
    cases = []
    for program, build in PROGRAMS.items():
        cases.append((program, None))
        cases += [(program, name) for name in _subcommands(build())]
    return cases


@pytest.mark.parametrize("program,subcommand", _cases(), ids=lambda x: x or "options")
def test_every_option_and_subcommand_has_help(program, subcommand):
    parser = PROGRAMS[program]()
    if subcommand is None:
        missing = _without_help(parser, program, recurse=False)
    else:
        missing = _without_help(_subcommands(parser)[subcommand], f"{program} {subcommand}")
    assert not missing, "without help text (or without its default):\n" + "\n".join(missing)


def test_vectors_wider_than_the_console_print_as_pairs():
    """Twelve origins of seven-digit counts do not fit 80 columns as a matrix: each vector is one
    cell of origin=count pairs, wrapped between pairs, every count whole."""
    import io
    from types import SimpleNamespace

    from rich.console import Console

    from node.activeactive.cluster_config import RegionSpec, local_cluster
    from node.tools.admin_cli import _vectors

    cfg = local_cluster(12, 0)
    cfg.regions = [RegionSpec(f"region-{n}", n, "127.0.0.1", 7000 + n, 7100 + n) for n in range(1, 13)]
    vv = {n: 1_000_000 + n for n in range(1, 13)}
    found = {r.name: SimpleNamespace(vv=vv, pending=0) for r in cfg.regions[:-1]}
    console = Console(width=WIDTH, file=io.StringIO())
    heading, table = _vectors(cfg, found, console)
    console.print(table)
    out = console.file.getvalue()
    assert "number=operations applied" in heading and all(len(line) <= WIDTH for line in out.splitlines()), out
    words = out.replace("│", " ").split()
    assert all(f"{o}={n}" in words for o, n in vv.items()) and "…" not in out, out
    assert words.count("1=1000001") == 11 and "unreachable" in words, out
