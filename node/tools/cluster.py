"""``braid up`` / ``braid down`` / ``braid restart``: run local regions as child processes.

Each region is a real ``braid node`` process with its own port and data
directory under ``--data-dir``.  ``braid up`` checks every port it needs before
starting anything, waits until every region answers PING, prints how to connect,
and then either stays in the foreground or, with ``--detach``, returns.  Either
way ``<data-dir>/cluster.pids`` records the regions' process ids (and, in the
foreground, the ``braid up`` process's own).

In the foreground ``braid up`` supervises: a region that dies is reported (its
name, port, how it ended - the signal or exit code - and the end of its log) while
the others keep serving, and it is started again at once; one that keeps dying
within ``QUICK_CRASH_S`` of its start is retried after 1 s, then 2 s, and given up
after ``MAX_QUICK_CRASHES`` such deaths in a row, with the command that restarts it.  A region
``braid restart`` stopped (it leaves a mark naming the process first: cluster_files.ask_restart)
is no death: it is started again at once, in one line, and counts toward nothing.
Ctrl-C (or SIGTERM, which ``braid down`` sends) stops every region: SIGTERM to
all, then one shared deadline for all of them, SIGKILL past it; no traceback,
also during start-up.

Which processes are this cluster's: never the record's word, always the processes' own command
lines (node/tools/cluster_processes.py says how); nothing else is ever signalled.

``--regions N`` (default 3) writes ``<data-dir>/cluster.toml`` (a fresh cluster
id and token, RESP on ``--base-port``.., gRPC replication 100 ports above, each
region's ``data_dir`` and ``tls = false``: plain-text links, on loopback only) and
starts each region with ``braid node --config cluster.toml --region NAME``;
``--regions 1`` starts a standalone region (Redis's own ID rules).  The file is written only
once every port is known free: a start that found one taken leaves nothing behind, so the
other ``--base-port`` it suggests works in the same data directory.  A data
directory holds one cluster: ``braid up`` over a running one says so (and how
to reach and stop it) and exits 0; over the data of another shape it refuses.

``--shards N`` (1 to 5; default 1, one process per region) writes the cluster file's
``[shards]`` table and each region's ports per shard, shard K 20·K ports above shard 0
(clients, replication and TLS alike).  Each region is then started as before - one
``braid node`` - and that process is the supervisor of the region's shards
(node/tools/shards.py): it restarts a shard that dies, and its shards die with it.  So the
launcher still sees one process per region: ``braid down`` stops it, ``braid restart --region``
restarts every shard, the foreground watch restarts a supervisor that dies; only the checks
look at every shard: all their ports before the start, a region is up once every shard
answers PING (and takes writes), and the table lists every shard's port.  A data directory
holding a cluster of another shard count is refused.

``--tls`` makes the cluster CA and the certificates under ``<data-dir>/tls/``
(``node.security.certs``), writes the links' ``[tls]`` table and, per region, TLS on
a client port 200 above the plain one (which stays on), and prints the
``redis-cli --tls`` line for each region.  A cluster keeps the TLS it was made with; ``--tls``
over one made without it is refused, never started in plain text.

``--metrics`` writes each member's ``metrics-port`` (its client port + 300, each shard's above
its own) into the cluster file, so its later starts keep it, checks those ports too and prints
each region's Prometheus URL.

Growing and shrinking a detached cluster.  ``braid up --add-region [NAME]`` adds a
region to the cluster running detached in ``--data-dir``: it picks the next free
ports after the existing regions (RESP one above the highest, gRPC 100 above that; on a
sharded cluster shard K's 20·K above those, as ``--shards`` lays them out) and, unless NAME
is given, the next name ``region-N``; runs ``braid-admin region add`` against the cluster
file (every member must be reachable, else nothing changes); with TLS, signs the new
region's certificate with the cluster's CA; writes the new region's metrics ports (when the
others have theirs) and a sharded region's TLS ports into the cluster file; then starts the
region detached (its data and ``node.log`` under ``<data-dir>/NAME/``), records its
pid beside the others and prints how to connect.  The region joins: it takes its
data from its peers and accepts writes once it has caught up (``braid-admin status``
shows it).  Shrinking is ``braid-admin region remove NAME`` (graceful: it stops taking
writes and hands over everything), then ``braid down --region NAME``, which stops that
region only.  After ``braid down``, ``braid up`` restarts the cluster with its members
of the moment (the cluster file's epoch says they changed), whatever ``--regions`` says.

The launcher's parts: node/tools/cluster_processes.py finds, starts, waits for and stops the region
processes; node/tools/cluster_files.py reads and writes the cluster's files (the process record,
the cluster file, its TLS settings).  This module holds the commands and the foreground
supervisor.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil
import signal
import sys
import time

from rich.console import Console
from rich.table import Table

from node.activeactive.cluster_config import load
from node.security.certs import create_cluster_certs
from node.tools import admin_cli
from node.tools.cluster_files import (
    CLUSTER_FILE,
    METRICS_PORT_OFFSET,
    PIDFILE,
    TLS_DIR,
    TLS_PORT_OFFSET,
    added_region_settings,
    ask_restart,
    drop_from_record,
    drop_restart_mark,
    forget_supervisor_record,
    load_pids,
    metrics_ports,
    next_region_name,
    next_region_ports,
    record_pid,
    recorded_pid,
    restart_asked,
    reuse_cluster,
    save_pids,
    tls_connect_line,
    unsupervise,
    with_metrics,
)
from node.tools.cluster_processes import (
    READY_TIMEOUT_S,
    STOP_GRACE_S,
    RegionProcess,
    StartError,
    exit_how,
    log_tail,
    ping,
    port_free,
    process_info,
    region_command,
    region_processes,
    stop_children,
    stop_regions,
    supervisor_pid,
    unrecorded_children,
    wait_gone,
    wait_ready,
    wait_writable,
)

QUICK_CRASH_S = 10.0      # a region dying sooner after its start crashed "at once"
MAX_QUICK_CRASHES = 3     # in a row: the foreground braid up stops restarting it
POLL_S = 0.2              # the foreground supervisor's look at its regions


def _console() -> Console:
    """Rich's console; to a pipe or file, wide enough that no command or path is folded."""
    return Console() if sys.stdout.isatty() else Console(width=max(shutil.get_terminal_size().columns, 200))


def _redis_py_line(port: int, sharded: bool = False) -> str:
    python = sys.executable
    if python.startswith(os.getcwd() + os.sep):
        python = os.path.relpath(python)
    client = f"redis.RedisCluster(host='127.0.0.1', port={port})" if sharded else f"redis.Redis(port={port})"
    return (f"{python} -c \"import redis; r = {client}; "
            f"print(r.xadd('rides', {{'id': 123}}), r.xrange('rides'))\"")


def _print_connect(console: Console, title: str, rows: list[tuple[str, list[int], int, str]]) -> None:
    """The table of regions: name, port(s), pid, how to connect, log; redis-py's line when redis-cli is
    missing.  A sharded region lists every shard's port (shard 0's first); a cluster client follows
    MOVED from any of them."""
    have_cli = shutil.which("redis-cli") is not None
    sharded = any(len(ports) > 1 for _, ports, _, _ in rows)
    table = Table(title=title)
    for col in ("region", "ports (shard 0, 1, ...)" if sharded else "port", "pid", "connect with", "log"):
        table.add_column(col, overflow="fold")
    for name, ports, pid, log in rows:
        cli = f"redis-cli {'-c ' if sharded else ''}-p {ports[0]}"
        table.add_row(name, ", ".join(map(str, ports)), str(pid), cli if have_cli else "redis-py (below)", log)
    console.print(table)
    if sharded:  # printed whole, never wrapped
        print(f"each region splits its keys over {len(rows[0][1])} shards by hash slot, as a Redis Cluster: "
              "connect with redis-cli -c or a cluster client (redis-py's redis.RedisCluster), which follow MOVED "
              "to the shard of each key; a plain client gets MOVED for a key of another shard")
    if not have_cli:  # printed whole, never wrapped: each line is a command to copy
        print("redis-cli is not installed (Debian: sudo apt-get install redis-tools); from Python, with "
              f"redis-py (installed with Braid):\n  {_redis_py_line(rows[0][1][0], sharded)}")


def _already_up(args: argparse.Namespace, data_dir: str, running: dict[int, str], supervisor: int | None) -> int:
    """``braid up`` over a cluster that runs: say so, how to reach it and how to stop it."""
    ports: dict[str, list[int]] = {}
    try:
        ports = {r.name: r.shard_ports() for r in load(os.path.join(data_dir, CLUSTER_FILE)).live_regions()}
    except (OSError, ValueError, KeyError):
        info = load_pids(data_dir) or {"names": [], "ports": []}
        ports = {n: [p] for n, p in zip(info["names"], info["ports"], strict=False)}  # (a file: as it reads)
    by_name = {name: pid for pid, name in running.items()}
    how = f" (in the foreground: braid up, pid {supervisor})" if supervisor else ""
    print(f"the cluster in {args.data_dir} is already up{how}:")
    for name, shards in ports.items() or [(n, [0]) for n in by_name]:
        where = f"ports {', '.join(map(str, shards))} (one per shard)" if len(shards) > 1 else f"port {shards[0]}"
        if name in by_name:
            print(f"  {name}: {where}, pid {by_name[name]}: redis-cli {'-c ' if len(shards) > 1 else ''}"
                  f"-p {shards[0]}")
        else:
            print(f"  {name}: {where}, not running: braid restart --region {name} --data-dir {args.data_dir}")
    print(f"stop it with: braid down --data-dir {args.data_dir}")
    return 0


def _plan(args: argparse.Namespace, data_dir: str):
    """The regions to start: (names, client ports, replication ports, metrics ports - one list per
    region, a port per shard -, cluster file, tls, regions whose TLS goes on the command line, the
    cluster configuration to write once the ports are known free - None: the file stays as it is),
    or an exit status after printing why not."""
    names = [f"region-{i}" for i in range(1, args.regions + 1)]
    tls = getattr(args, "tls", False)
    cluster_file = os.path.join(data_dir, CLUSTER_FILE)
    if args.regions == 1:
        if getattr(args, "shards", 1) > 1:
            print("braid up: a standalone region (--regions 1) has no shards: shards split the keys of the regions "
                  "of a cluster (--regions 2 or more)", file=sys.stderr)
            return 2
        if os.path.exists(cluster_file):
            try:
                held = f"a cluster of {len(load(cluster_file).live_regions())} regions"
            except (OSError, ValueError, KeyError):
                held = "a cluster"
            print(f"braid up: {args.data_dir} holds {held} ({cluster_file}), and --regions 1 starts a standalone "
                  "region: run braid up without --regions 1 to start that cluster, or give another --data-dir",
                  file=sys.stderr)
            return 1
        metrics = [[args.base_port + METRICS_PORT_OFFSET]] if getattr(args, "metrics", False) else [[]]
        return names, [[args.base_port]], [[]], metrics, None, tls, set(names) if tls else set(), None
    standalone = os.path.join(data_dir, "region-1", "appendonlydir")
    if not os.path.exists(cluster_file) and os.path.isdir(standalone):
        print(f"braid up: {args.data_dir} holds a standalone region ({os.path.dirname(standalone)}, started with "
              "--regions 1) and no cluster file: start it with --regions 1, or give another --data-dir",
              file=sys.stderr)
        return 1
    fresh = not os.path.exists(cluster_file)
    cfg = reuse_cluster(cluster_file, args)
    if cfg is None:
        return 1
    changed = with_metrics(cfg) if getattr(args, "metrics", False) else False
    live = cfg.live_regions()
    tls = cfg.tls is not None
    return ([r.name for r in live], [r.shard_ports() for r in live], [r.repl_ports or [r.repl_port] for r in live],
            [metrics_ports(cfg, r.name) for r in live], cluster_file, tls,
            {r.name for r in live if tls and "tls-port" not in r.config},  # added by --add-region
            cfg if fresh or changed else None)


def _ports_taken(names: list[str], ports: list[list[int]], repl_ports: list[list[int]], tls: bool,
                 metrics: list[list[int]] | None = None) -> list[str]:
    """What stands in the way of each port the regions need (all of them, every shard's, before anything
    starts); ``ports``, ``repl_ports`` and ``metrics``: per region, one per shard (none: [])."""
    problems = []
    for name, shard_ports, shard_repl, shard_metrics in zip(names, ports, repl_ports, metrics or [[]] * len(names),
                                                             strict=True):
        for k, port in enumerate(shard_ports):
            whose = f"{name} shard {k}'s" if len(shard_ports) > 1 else f"{name}'s"
            wanted = [(port, "client port")] + ([(shard_repl[k], "replication port")] if shard_repl else [])
            if tls:
                wanted.append((port + TLS_PORT_OFFSET, "TLS client port"))
            if shard_metrics:
                wanted.append((shard_metrics[k], "metrics port"))
            for p, what in wanted:
                if ping(p):
                    problems.append(f"port {p} ({whose} {what}) is already serving: another Braid or Redis server "
                                    "(is a cluster running? try `braid down`)")
                elif not port_free(p):
                    problems.append(f"port {p} ({whose} {what}) is in use by another program")
    return problems


def _ignore_stop_signals() -> None:
    """While stopping the regions: a second Ctrl-C or SIGTERM does not cut the clean-up short."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)


class _Terminated(BaseException):
    """SIGTERM (or SIGHUP) to braid up: stop as Ctrl-C does."""


def _on_terminate(signum, frame):
    raise _Terminated


def up(args: argparse.Namespace) -> int:
    if getattr(args, "add_region", None) is not None:
        return add_region(args)
    if not 1 <= args.regions <= 15:
        print("braid up: --regions must be between 1 and 15", file=sys.stderr)
        return 2
    data_dir = os.path.abspath(args.data_dir)
    regions: list[RegionProcess] = []
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    signal.signal(signal.SIGINT, signal.default_int_handler)  # also when started with SIGINT ignored (`&`)
    signal.signal(signal.SIGTERM, _on_terminate)
    signal.signal(signal.SIGHUP, _on_terminate)
    try:
        return _up(args, data_dir, regions)
    except (KeyboardInterrupt, _Terminated):
        _ignore_stop_signals()
        started = [r.proc for r in regions if r.proc is not None]
        stop_children(started)
        orphans = unrecorded_children(data_dir)
        stop_regions(orphans, data_dir)
        stopped = len(started) + len(orphans)
        if not args.detach:
            forget_supervisor_record(data_dir)
        print("braid up: interrupted during start-up"
              + (f"; stopped the {stopped} region(s) it had started" if stopped else ""), file=sys.stderr)
        return 130
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _up(args: argparse.Namespace, data_dir: str, regions: list[RegionProcess]) -> int:
    info = load_pids(data_dir)
    running, supervisor = region_processes(data_dir), supervisor_pid(data_dir, info)
    if running or supervisor:
        return _already_up(args, data_dir, running, supervisor)
    plan = _plan(args, data_dir)
    if isinstance(plan, int):
        return plan
    names, shard_ports, repl_ports, metrics, cluster_file, tls, cmdline_tls, to_write = plan
    ports = [p[0] for p in shard_ports]  # (a sharded region's supervisor: shard 0's)
    problems = _ports_taken(names, shard_ports, repl_ports, tls, metrics)
    if problems:  # nothing written either: the command it suggests starts afresh
        print("braid up: nothing started:\n  " + "\n  ".join(problems) + "\npick other ports with --base-port "
              "(RESP on BASE.., replication on BASE+100.., TLS on BASE+200.., metrics on BASE+300..) or stop what "
              "holds them", file=sys.stderr)
        return 1
    os.makedirs(data_dir, exist_ok=True)
    if to_write is not None and cluster_file is not None:
        to_write.save(cluster_file)
    if tls:
        try:  # an existing CA and certificates are kept (a restart, or new regions of the same CA)
            create_cluster_certs(os.path.join(data_dir, TLS_DIR), names)
        except (OSError, ValueError) as e:
            print(f"braid up: cannot make the certificates under {os.path.join(data_dir, TLS_DIR)}: {e}",
                  file=sys.stderr)
            return 1
    print(f"starting {', '.join(names)} (logs: {os.path.join(args.data_dir, 'NAME', 'node.log')})", flush=True)
    sharded = len(shard_ports[0]) > 1
    for name, port, every in zip(names, ports, shard_ports, strict=True):
        os.makedirs(os.path.join(data_dir, name), exist_ok=True)
        cmd = region_command(data_dir, cluster_file, name, port, name in cmdline_tls,
                             metrics[0][0] if cluster_file is None and metrics[0] else 0)  # (standalone: given)
        r = RegionProcess(name, port, cmd, os.path.join(data_dir, name, "node.log"), ports=every if sharded else [])
        regions.append(r)
        r.start(args.detach)
    try:
        wait_ready(regions)
    except StartError as e:
        stop_children([r.process for r in regions])
        print(f"braid up: {e}\nthe other regions are stopped", file=sys.stderr)
        return 1
    wait_writable(regions)
    console = _console()
    title = (f"Braid local cluster: {len(names)} region{'s' if len(names) > 1 else ''}"
             + (f", {len(shard_ports[0])} shards each" if sharded else ""))
    _print_connect(console, title, [(r.name, r.all_ports, r.process.pid, r.log) for r in regions])
    if tls:  # printed whole, never wrapped: each line is a command to copy
        print("TLS client ports (a client certificate is optional: `redis-cli --tls --cacert "
              f"{os.path.join(args.data_dir, TLS_DIR)}/ca.crt -p PORT` connects too"
              + (f"; shard K's TLS port is {TLS_PORT_OFFSET} above its plain one" if sharded else "") + "):")
        for name, port in zip(names, ports, strict=True):
            print(f"  {name}: {tls_connect_line(args.data_dir, port, sharded)}")
    if any(metrics):
        print("Prometheus metrics" + (" (one endpoint per shard)" if sharded else "") + ":")
        for name, every in zip(names, metrics, strict=True):
            print(f"  {name}: " + ", ".join(f"http://127.0.0.1:{p}/metrics" for p in every))
    record = {"pids": [r.process.pid for r in regions], "ports": ports, "names": names}
    if cluster_file is None and metrics[0]:  # a standalone region's: braid restart gives it again
        record["metrics_ports"] = metrics[0]
    if args.detach:
        save_pids(data_dir, record)
        print(f"detached; restart one region with: braid restart --region NAME --data-dir {args.data_dir}\n"
              f"stop with: braid down --data-dir {args.data_dir}")
        return 0
    save_pids(data_dir, {**record, "supervisor": os.getpid(), "supervised": names})
    print("press Ctrl-C to stop (or run braid down); a region that dies is reported and started again", flush=True)
    try:
        _supervise(args, data_dir, regions)
    except (KeyboardInterrupt, _Terminated):
        pass
    finally:
        _ignore_stop_signals()
        stop_children([r.proc for r in regions if r.proc is not None])
        stop_regions(unrecorded_children(data_dir), data_dir)
        forget_supervisor_record(data_dir)
    print("stopped", flush=True)
    return 0


def _supervise(args: argparse.Namespace, data_dir: str, regions: list[RegionProcess]) -> None:
    """Watch the regions until Ctrl-C / SIGTERM: report a death, start the region again, say when it is back."""
    def say(text: str) -> None:
        print(f"braid up: {text}", flush=True)

    while True:
        now = time.monotonic()
        for r in regions:
            if r.done:
                continue
            if r.proc is not None:
                code = r.proc.poll()
                if code is None:
                    if not r.ready and r.silent() is None:
                        r.ready = True
                        record_pid(data_dir, r.name, r.port, r.proc.pid)
                        say(f"{r.name} restarted (asked by braid restart): on {r.where} (pid {r.proc.pid})"
                            if r.restart_asked else
                            f"{r.name} is back on {r.where} (pid {r.proc.pid}): it replayed its log and "
                            "catches up from its peers")
                        r.restart_asked = False
                    continue
                if restart_asked(data_dir, r.name, r.proc.pid):  # stopped to be restarted: no death, no crash
                    r.restart_asked, r.proc, r.restart_at = True, None, now
                    continue
                r.restart_asked = False
                quick = not r.ready or now - r.started < QUICK_CRASH_S
                r.quick_crashes = r.quick_crashes + 1 if quick else 0
                others = [o.name for o in regions if o is not r and o.proc is not None and o.proc.poll() is None]
                say(f"{r.name} ({r.where}, pid {r.proc.pid}) {exit_how(code)}"
                    + (f"; {', '.join(others)} keep serving" if others else "")
                    + f". Its log, {r.log}, ends with:\n{log_tail(r.log)}")
                r.proc = None
                if r.quick_crashes >= MAX_QUICK_CRASHES:
                    r.done = True
                    unsupervise(data_dir, r.name)
                    say(f"{r.name} died {r.quick_crashes} times in a row within {QUICK_CRASH_S:.0f} s of its start: "
                        f"not starting it again. Once its log ({r.log}) says why and it is fixed: "
                        f"braid restart --region {r.name} --data-dir {args.data_dir}")
                    continue
                delay = 0 if r.quick_crashes == 0 else 2 ** (r.quick_crashes - 1)
                r.restart_at = now + delay
                say(f"starting {r.name} again" + (f" in {delay} s" if delay else ""))
            elif r.restart_at is not None and now >= r.restart_at:
                r.restart_at = None
                elsewhere = [pid for pid, name in region_processes(data_dir).items() if name == r.name]
                if elsewhere:
                    r.done = True
                    unsupervise(data_dir, r.name)
                    say(f"{r.name} runs again as pid {elsewhere[0]}, started by another command: braid up leaves "
                        "it be (braid down stops it)")
                    continue
                problems = _ports_taken([r.name], [r.all_ports], [[]], False)
                if problems:
                    r.done = True
                    unsupervise(data_dir, r.name)
                    say(f"not starting {r.name} again: {problems[0]}")
                    continue
                r.start(args.detach)
        if all(r.done for r in regions):
            say("no region left to watch")
            return
        time.sleep(POLL_S)  # the supervisor's look at its regions, not synchronisation


def add_region(args: argparse.Namespace) -> int:
    """``braid up --add-region [NAME]``: grow the detached cluster in ``--data-dir`` by one region."""
    data_dir = os.path.abspath(args.data_dir)
    cluster_file = os.path.join(data_dir, "cluster.toml")
    info = load_pids(data_dir)
    if info is None or not os.path.exists(cluster_file):
        print(f"braid up: no detached cluster in {args.data_dir} to add a region to (start one with "
              f"`braid up --detach --data-dir {args.data_dir}`)", file=sys.stderr)
        return 1
    try:
        cfg = load(cluster_file)
    except (OSError, ValueError, KeyError) as e:
        print(f"braid up: {cluster_file}: {e}", file=sys.stderr)
        return 1
    name = args.add_region or next_region_name(cfg)
    if any(r.name == name and r.live for r in cfg.regions):
        print(f"braid up: {name} is already a member of this cluster", file=sys.stderr)
        return 1
    try:
        ports, repl_ports = next_region_ports(cfg)
    except ValueError as e:
        print(f"braid up: {e}", file=sys.stderr)
        return 1
    for p in [*ports, *repl_ports, *([p + TLS_PORT_OFFSET for p in ports] if cfg.tls else []),
              *([p + METRICS_PORT_OFFSET for p in ports] if _metrics_on(cfg) else [])]:
        if ping(p) or not port_free(p):
            print(f"braid up: port {p} is in use: the new region needs it", file=sys.stderr)
            return 1
    port = ports[0]
    if cfg.tls is not None:
        try:  # signed by the CA the cluster already trusts (it is kept)
            create_cluster_certs(os.path.join(data_dir, TLS_DIR), [name])
        except (OSError, ValueError) as e:
            print(f"braid up: cannot make the certificate of {name}: {e}", file=sys.stderr)
            return 1
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = admin_cli.main(["--cluster", cluster_file, "region", "add", name, "--host", "127.0.0.1",
                               "--port", ",".join(map(str, ports)), "--repl-port", ",".join(map(str, repl_ports))])
    if code != 0:
        print(f"braid up: adding {name} failed: {err.getvalue().strip() or out.getvalue().strip()}", file=sys.stderr)
        return 1
    grown = load(cluster_file)
    number = grown.region(name).number
    # its settings of this machine, in the file (so its later starts keep them): metrics when the
    # others serve them; a sharded region's TLS too (each shard's TLS port above its own; a region
    # of one process gets TLS on its command line, as braid up gives it after a restart)
    if added_region_settings(grown, name, metrics=_metrics_on(cfg)):
        grown.save(cluster_file)
    rdir = os.path.join(data_dir, name)
    if os.path.isdir(rdir):  # a region of that name was here before (removed, then purged): start afresh
        shutil.rmtree(rdir)
    os.makedirs(rdir)
    region = RegionProcess(name, port, region_command(data_dir, cluster_file, name, port,
                                                      cfg.tls is not None and not cfg.shards.sharded),
                           os.path.join(rdir, "node.log"), ports=ports if cfg.shards.sharded else [])
    region.start(detach=True)
    record_pid(data_dir, name, port, region.process.pid)
    try:
        wait_ready([region], what="its start")
    except StartError as e:
        print(f"braid up: {e}\n({name} stays a member: braid-admin --cluster {cluster_file} "
              f"region remove {name} --force)", file=sys.stderr)
        return 1
    _print_connect(_console(), f"{name} joined the cluster as region {number}",
                   [(name, region.all_ports, region.process.pid, region.log)])
    if cfg.tls is not None:
        print(f"  TLS: {tls_connect_line(args.data_dir, port, cfg.shards.sharded)}"
              + (f" (shard K's TLS port is {TLS_PORT_OFFSET} above its plain one)" if cfg.shards.sharded else ""))
    if _metrics_on(cfg):
        print("  Prometheus metrics: " + ", ".join(f"http://127.0.0.1:{p}/metrics"
                                                   for p in metrics_ports(grown, name)))
    # printed whole, never wrapped: each line holds a command to copy
    print("It serves reads now and takes writes once it has caught up with its peers (until then writes "
          f"answer LOADING). Progress:\n  braid-admin --cluster {cluster_file} status\nTo remove it:\n"
          f"  braid-admin --cluster {cluster_file} region remove {name}\n"
          f"  braid down --region {name} --data-dir {args.data_dir}")
    return 0


def _metrics_on(cfg) -> bool:
    """Do the cluster's members serve Prometheus metrics (braid up --metrics wrote their ports)?"""
    return any(r.config.get("metrics-port") for r in cfg.live_regions())


def _named(pids: dict[int, str]) -> str:
    return ", ".join(f"{name} (pid {pid})" for pid, name in sorted(pids.items(), key=lambda kv: kv[1]))


def down(args: argparse.Namespace) -> int:
    data_dir = os.path.abspath(args.data_dir)
    info = load_pids(data_dir)
    supervisor = supervisor_pid(data_dir, info)
    running = region_processes(data_dir)
    name = getattr(args, "region", None)
    if name is not None:
        return _down_region(args, data_dir, name, info, running, supervisor)
    if info is None and not running and supervisor is None:
        print(f"braid down: no detached cluster recorded in {args.data_dir} and no region of it running",
              file=sys.stderr)
        return 1
    initial = dict(running)
    if supervisor is not None:  # the foreground braid up stops its regions itself (and would restart them)
        os.kill(supervisor, signal.SIGTERM)
        wait_gone(supervisor, STOP_GRACE_S + 5)
        running = region_processes(data_dir)
    left = stop_regions(running, data_dir)
    stopped = ([f"braid up (pid {supervisor})"] if supervisor is not None and process_info(supervisor) is None else [])
    stopped += [f"{n} (pid {pid})" for pid, n in sorted(initial.items() | running.items(), key=lambda kv: kv[1])
                if pid not in left]
    ignored = sorted(set((info or {}).get("pids", [])) - set(initial) - set(running))
    if left or (supervisor is not None and process_info(supervisor) is not None):
        still = {pid: running[pid] for pid in left}
        print(f"braid down: could not stop {_named(still) or f'braid up (pid {supervisor})'}; "
              f"{PIDFILE} is kept", file=sys.stderr)
        return 1
    if os.path.exists(os.path.join(data_dir, PIDFILE)):
        os.remove(os.path.join(data_dir, PIDFILE))
    print(f"stopped {', '.join(stopped)}" if stopped else "nothing was running (the record is removed)")
    if ignored:  # gone, or reused by another program: never signalled
        print(f"(recorded pid(s) {', '.join(map(str, ignored))} are no longer regions of this cluster: left alone)")
    return 0


def _down_region(args, data_dir: str, name: str, info: dict | None, running: dict[int, str],
                 supervisor: int | None) -> int:
    """``braid down --region NAME``: stop that region only."""
    mine = {pid: n for pid, n in running.items() if n == name}
    if not mine and info is not None and name in info["names"]:  # recorded, but gone: only the record is left
        drop_from_record(data_dir, info, name)
        print(f"{name} was not running (its pid is no longer a region of this cluster): removed from {PIDFILE}")
        return 0
    if not mine:
        names = sorted(set(running.values()))
        print(f"braid down: no region named {name!r} runs in {args.data_dir} "
              f"(running: {', '.join(names) or 'none'})", file=sys.stderr)
        return 1
    if supervisor is not None and name in (info or {}).get("supervised", []):
        print(f"braid down: {name} runs under the foreground braid up (pid {supervisor}), which starts it again: "
              "stop the whole cluster (Ctrl-C there, or braid down)", file=sys.stderr)
        return 1
    left = stop_regions(mine, data_dir)
    if left:
        print(f"braid down: could not stop {_named({pid: name for pid in left})}", file=sys.stderr)
        return 1
    if info is not None and name in info["names"]:
        drop_from_record(data_dir, info, name)
    print(f"stopped {name} (pid {', '.join(map(str, mine))})")
    _warn_if_member(data_dir, name)
    return 0


def restart(args: argparse.Namespace) -> int:
    """``braid restart --region NAME``: stop the region if it runs (only a process that really is that
    region of this cluster), start it detached with its log, wait until it answers."""
    data_dir = os.path.abspath(args.data_dir)
    name = args.region
    cluster_file = os.path.join(data_dir, CLUSTER_FILE)
    info = load_pids(data_dir)
    repl_ports: list[int] = []
    shard_ports: list[int] = []  # a sharded region's client ports (its supervisor runs them)
    if os.path.exists(cluster_file):
        try:
            cfg = load(cluster_file)
            spec = cfg.region(name)
        except (OSError, ValueError, KeyError) as e:
            print(f"braid restart: {cluster_file}: {e}", file=sys.stderr)
            return 1
        if not spec.live:
            print(f"braid restart: {name} was removed from the database ({cluster_file})", file=sys.stderr)
            return 1
        port, repl_ports = spec.port, spec.repl_ports or [spec.repl_port]
        shard_ports = spec.ports
        cmd = region_command(data_dir, cluster_file, name, port, cfg.tls is not None and "tls-port" not in spec.config)
    elif info is not None and name in info["names"]:  # a standalone region (braid up --regions 1)
        port = info["ports"][info["names"].index(name)]
        metrics_port = (info.get("metrics_ports") or [0])[0]  # (a standalone region: the only one)
        cmd = region_command(data_dir, None, name, port, os.path.isdir(os.path.join(data_dir, TLS_DIR)), metrics_port)
    else:
        print(f"braid restart: no cluster in {args.data_dir} (no {CLUSTER_FILE}, and no region {name!r} recorded)",
              file=sys.stderr)
        return 1
    running = {pid: n for pid, n in region_processes(data_dir).items() if n == name}
    supervisor = supervisor_pid(data_dir, info)
    region = RegionProcess(name, port, cmd, os.path.join(data_dir, name, "node.log"), ports=shard_ports)
    if supervisor is not None and running and name in (info or {}).get("supervised", []):
        print(f"{name} runs under the foreground braid up (pid {supervisor}): stopping it, braid up starts it again",
              flush=True)
        ask_restart(data_dir, name, list(running))  # braid up's word that this stop is asked for
        if stop_regions(running, data_dir):
            drop_restart_mark(data_dir, name)
            print(f"braid restart: could not stop {_named(running)}", file=sys.stderr)
            return 1
        deadline = time.monotonic() + READY_TIMEOUT_S + 5
        while time.monotonic() < deadline:
            back = [pid for pid, n in region_processes(data_dir).items() if n == name and pid not in running]
            if back and region.silent() is None and recorded_pid(data_dir, name) == back[0]:  # braid up knows it too
                print(f"{name} is back on {region.where} (pid {back[0]})")
                return 0
            time.sleep(0.1)  # polling the foreground braid up's restart under a deadline
        print(f"braid restart: {name} did not come back within {READY_TIMEOUT_S + 5:.0f} s: see braid up's output "
              f"and {os.path.join(data_dir, name, 'node.log')}", file=sys.stderr)
        return 1
    if running:
        left = stop_regions(running, data_dir)
        if left:
            print(f"braid restart: could not stop {_named(running)}", file=sys.stderr)
            return 1
        print(f"stopped {_named(running)}", flush=True)
    problems = _ports_taken([name], [region.all_ports], [repl_ports], False)
    if problems:
        print(f"braid restart: not starting {name}: {problems[0]} (not by {name} of this cluster)", file=sys.stderr)
        return 1
    os.makedirs(os.path.join(data_dir, name), exist_ok=True)
    region.start(detach=True)
    try:
        wait_ready([region], what="its start")
    except StartError as e:
        print(f"braid restart: {e}", file=sys.stderr)
        return 1
    record_pid(data_dir, name, port, region.process.pid)
    print(f"{name} runs again on {region.where} (pid {region.process.pid}, detached; log: {region.log}): it replayed "
          f"its log and catches up from its peers")
    return 0


def _warn_if_member(data_dir: str, name: str) -> None:
    """Stopping a region that is still a member only takes it down: the others wait for it."""
    try:
        cfg = load(os.path.join(data_dir, CLUSTER_FILE))
    except (OSError, ValueError, KeyError):
        return
    if any(r.name == name and r.live for r in cfg.regions):
        print(f"braid down: {name} is still a member of the database (down, not removed): the others keep its "
              f"place; to shrink the cluster run braid-admin --cluster {os.path.join(data_dir, CLUSTER_FILE)} "
              f"region remove {name} [--force]", file=sys.stderr)

