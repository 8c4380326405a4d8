"""``braid-chaos``: the chaos suite's command line.

``braid-chaos run``  a live run against real region processes (local, or each in
                     its own network namespace behind an emulated WAN; or a cluster
                     file, or the Docker deployment); exit code 0 = pass.
``braid-chaos sim``  the deterministic simulation (see chaos/sim/).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile

from node.version import VERSION_TEXT

from .nemesis import KINDS


def _faults(text: str) -> list[str]:
    kinds = [k.strip() for k in text.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown fault kind(s) {', '.join(unknown)} (known: {', '.join(KINDS)})")
    return kinds


def _shard_count(text: str) -> int:
    from .shards import MAX_SHARDS

    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_SHARDS:
        raise argparse.ArgumentTypeError(f"{text!r} is not a shard count from 1 to {MAX_SHARDS}")
    return value


def _seconds(text: str) -> float:
    """``40ms``, ``0.04s`` or ``0.04`` (seconds)."""
    try:
        if text.endswith("ms"):
            value = float(text[:-2]) / 1000
        else:
            value = float(text[:-1] if text.endswith("s") else text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (say 40ms or 0.04s)") from None
    if not 0 <= value <= 10:
        raise argparse.ArgumentTypeError(f"{text!r} is not between 0 and 10 s")
    return value


def _probability(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a probability: {text!r}") from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not in [0, 1)")
    return value


def _backend(args):
    from . import backends

    if args.backend == "docker":
        from .docker_backend import DockerBackend

        return DockerBackend(args.compose_file, args.cluster), None
    if args.backend == "netns":
        from .netns_backend import NetnsBackend

        workdir = tempfile.mkdtemp(prefix="braid-chaos-")
        return NetnsBackend(args.regions, workdir, args.fsync, args.bug, args.seed,
                            args.wan_delay, args.wan_jitter, args.wan_loss), workdir
    if args.cluster:
        return backends.AttachBackend(args.cluster), None
    workdir = tempfile.mkdtemp(prefix="braid-chaos-")
    if args.shards > 1:
        from .shards import ShardedProcessBackend

        return ShardedProcessBackend(args.regions, workdir, args.shards, args.fsync, args.bug, args.seed,
                                     membership="membership" in args.faults), workdir
    return backends.ProcessBackend(args.regions, workdir, args.fsync, args.bug, args.seed,
                                   membership="membership" in args.faults), workdir


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def _shards_refused(args: argparse.Namespace) -> str | None:
    """Why ``--shards``/``shard-kill`` cannot be run as asked (None: they can)."""
    if args.cluster and args.shards < 2:
        from node.activeactive.cluster_config import load

        try:
            sharded = load(args.cluster).shards.sharded
        except (OSError, ValueError, KeyError):
            sharded = False  # (the backend says what is wrong with the file)
        if sharded:
            return (f"--cluster {args.cluster}: a sharded database; attaching to one is not supported yet (its "
                    "shards would need a client per shard): start sharded regions with --shards N instead")
    if args.shards > 1 and (args.cluster or args.backend != "process"):
        where = "an attached cluster (--cluster)" if args.cluster else f"the {args.backend} backend"
        return (f"--shards {args.shards}: {where} runs unsharded regions only; sharded regions run with the "
                "process backend (braid-chaos run --shards N without --backend or --cluster)")
    if args.faults is not None and "shard-kill" in args.faults and args.shards < 2:
        return "the shard-kill fault kills one shard process of a region: it needs --shards 2 or more"
    return None


def cmd_run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    from . import report
    from .run import RunConfig, run

    console = Console()
    refused = _shards_refused(args)
    if refused is not None:
        console.print(f"braid-chaos: {refused}", style="red")
        return 2
    explicit = args.faults is not None
    if args.faults is None:
        args.faults = list(KINDS)
    config = RunConfig(args.regions, args.duration, args.seed, args.faults, args.fsync, args.bug, args.out,
                       shards=args.shards)
    backend, workdir = _backend(args)
    if "membership" in args.faults and "membership" not in backend.faults:
        where = "an attached cluster" if args.cluster else f"the {args.backend} backend"
        if explicit:
            console.print(f"braid-chaos: the membership fault needs regions it can start during the run: "
                          f"{where} cannot add one (use the process backend)", style="red")
            if workdir is not None:
                shutil.rmtree(workdir, ignore_errors=True)
            return 2
        console.print(f"(no membership changes with {where}: only the process backend adds regions)")
    where = "attached" if args.cluster else args.backend
    if args.backend == "netns":
        where += f", {args.wan_delay * 1000:g} ms one way between regions"
    shards = f" of {args.shards} shards each" if args.shards > 1 else ""
    console.print(f"starting {args.regions} regions{shards} ({where}), "
                  f"seed {args.seed}" + (f", planted bug {args.bug}" if args.bug else ""))
    signal.signal(signal.SIGTERM, _interrupt)  # a terminated run still stops its regions and cleans up
    try:
        backend.start()
        with Progress(TextColumn("[bold]faults phase"), BarColumn(), TextColumn("{task.description}"),
                      TimeRemainingColumn(), console=console, transient=True) as bar:
            task = bar.add_task("", total=1.0)
            result = run(config, backend, lambda done, text: bar.update(task, completed=done, description=text))
        console.print("healed, converged and checked")
        paths = report.write_all(result, args.out, args.full_history)
    finally:
        backend.stop()
        if workdir is not None and not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    report.print_report(result, paths, console)
    if workdir is not None and args.keep:
        console.print(f"region data and logs kept in {workdir}")
    return 0 if result.ok else 1


def cmd_sim(args: list[str]) -> int:
    from .sim import cli_main

    return cli_main(args)


EXAMPLES = """examples:
  braid-chaos run --duration 30 --seed 7        a 30 s run, every fault kind, report in chaos-report/
  braid-chaos run --faults kill,pause --keep    only kills and pauses; keep the regions' data and logs
  braid-chaos run --cluster data/cluster.toml   break a cluster that is already running
  braid-chaos run --regions 2 --shards 2        sharded regions: single shards killed, and whole regions
  braid-chaos sim --time-box 60                 the deterministic simulation, many schedules for 60 s

braid-chaos run --help and braid-chaos sim --help list their options."""


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``braid-chaos`` and ``braid-chaos run`` (``sim`` parses its own: chaos/sim/cli.py)."""
    from .planted import BUGS

    parser = argparse.ArgumentParser(prog="braid-chaos", description="Braid's chaos suite: break a cluster on "
                                     "purpose and check it kept its promises.", epilog=EXAMPLES,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=VERSION_TEXT)
    sub = parser.add_subparsers(dest="command", required=True, metavar="{run,sim}")
    p = sub.add_parser("run", help="a live chaos run against real region processes; exit code 0: pass, 1: fail",
                       description="Start regions (or attach to a cluster), run workloads while faults are "
                                   "injected, heal, wait for convergence and check the history. Writes "
                                   "report.json and timeline.png to --out, and history.json.gz when the run "
                                   "failed or with --full-history.")
    p.add_argument("--regions", type=int, default=3, help="how many regions to start, at least 2 (default: 3)")
    p.add_argument("--shards", type=_shard_count, default=1, metavar="N",
                   help="shard processes per region, 1-5 (process backend): each region runs as its supervisor "
                        "and N shards, clients send each command to its key's shard, and the shard-kill fault "
                        "kills one shard process (default: 1, unsharded)")
    p.add_argument("--duration", type=float, default=60.0,
                   help="seconds of workload under faults, before the heal (default: 60)")
    p.add_argument("--seed", type=int, default=0,
                   help="makes the fault schedule and the workloads' choices reproducible (default: 0)")
    p.add_argument("--faults", type=_faults, default=None, metavar="KIND,...",
                   help=f"comma-separated fault kinds among {','.join(KINDS)} (default: all that the backend "
                        "can inject)")
    p.add_argument("--fsync", choices=["always", "everysec", "no"], default="everysec",
                   help="appendfsync policy of every region started (default: everysec)")
    p.add_argument("--bug", choices=sorted(BUGS), metavar="BUG",
                   help="plant a known bug in every region, to see a checker fail: "
                        + "; ".join(f"{name} (caught by {checker})" for name, (_, checker) in sorted(BUGS.items()))
                        + " (default: none)")
    p.add_argument("--cluster", metavar="FILE",
                   help="attach to the running cluster of this cluster file instead of starting regions "
                        "(default: start them)")
    p.add_argument("--backend", choices=["process", "netns", "docker"], default="process",
                   help="process: local processes, links through relays; netns: each region in its own network "
                        "namespace behind an emulated WAN (needs root); docker: the compose deployment "
                        "(default: process)")
    p.add_argument("--wan-delay", type=_seconds, default=0.04, metavar="DURATION",
                   help="netns: one-way delay of every link, e.g. 40ms or 0.04s (default: 40ms)")
    p.add_argument("--wan-jitter", type=_seconds, default=0.0, metavar="DURATION",
                   help="netns: extra random delay per packet, up to this (default: 0)")
    p.add_argument("--wan-loss", type=_probability, default=0.0, metavar="P",
                   help="netns: probability a packet is lost, in [0, 1) (default: 0)")
    p.add_argument("--compose-file", default=os.path.join("deploy", "compose.yaml"), metavar="FILE",
                   help="docker: the compose file of the deployment (default: deploy/compose.yaml)")
    p.add_argument("--out", default="chaos-report", metavar="DIR",
                   help="directory for report.json, timeline.png and history.json.gz (default: chaos-report)")
    p.add_argument("--full-history", action="store_true",
                   help="keep every operation, fault and sample in history.json.gz even when the run passes "
                        "(default: only when it fails)")
    p.add_argument("--keep", action="store_true",
                   help="keep the regions' data directories and logs (default: delete them)")
    sub.add_parser("sim", help="the deterministic simulation: many seeded schedules in one process "
                               "(braid-chaos sim --help)", add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "sim":  # the simulation parses its own options
        return cmd_sim(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.regions < 2:
        parser.error("--regions must be at least 2")
    return cmd_run(args)


if __name__ == "__main__":
    sys.exit(main())
