"""The ``braid`` command line: ``braid node`` runs one region, ``braid up`` a local cluster."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys

from .config import Config
from .server import Server, run_server


def _event_loop_policy() -> None:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a pinned dependency
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def cmd_node(args: argparse.Namespace) -> int:
    cluster = None
    if args.config:
        from .cluster_config import load

        try:
            ccfg = load(args.config)
            me = ccfg.region(args.region or "")
        except (OSError, ValueError, KeyError) as e:
            print(f"braid node: {e}", file=sys.stderr)
            return 2
        cluster = (ccfg, me)
        args.port, args.bind = me.port, me.host
    os.makedirs(args.data_dir, exist_ok=True)
    cfg = Config(port=args.port, bind=args.bind, dir=os.path.abspath(args.data_dir))
    if args.requirepass:
        cfg.set("requirepass", args.requirepass)
    server = Server(cfg, cluster=cluster)
    _event_loop_policy()
    try:
        asyncio.run(run_server(server, args.bind, args.port))
    except OSError as e:
        print(f"braid: cannot listen on {args.bind}:{args.port}: {e.strerror}", file=sys.stderr)
        return 1
    return 0


def cmd_up(args: argparse.Namespace) -> int:
    from .cluster import up
    return up(args)


def cmd_down(args: argparse.Namespace) -> int:
    from .cluster import down
    return down(args)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="braid", description="Braid: an Active-Active stream database")
    parser.add_argument("--log-level", default="INFO")
    sub = parser.add_subparsers(dest="cmd", required=True)

    p = sub.add_parser("node", help="run one region")
    p.add_argument("--port", type=int, default=6380)
    p.add_argument("--bind", default="127.0.0.1")
    p.add_argument("--data-dir", default="./data")
    p.add_argument("--requirepass", default="")
    p.add_argument("--config", help="cluster file (see deploy/cluster.example.toml)")
    p.add_argument("--region", help="this region's name in the cluster file")
    p.set_defaults(fn=cmd_node)

    p = sub.add_parser("up", help="start a local cluster on loopback")
    p.add_argument("--regions", type=int, default=3)
    p.add_argument("--base-port", type=int, default=7001)
    p.add_argument("--data-dir", default="./data")
    p.add_argument("--detach", action="store_true", help="return once the regions serve")
    p.set_defaults(fn=cmd_up)

    p = sub.add_parser("down", help="stop a cluster started with `braid up --detach`")
    p.add_argument("--data-dir", default="./data")
    p.set_defaults(fn=cmd_down)

    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
