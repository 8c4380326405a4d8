"""Argument types shared by the ``braid`` subcommands (argparse ``type=`` callables)."""

from __future__ import annotations

import argparse

from node.activeactive.cluster_config import LOCAL_SHARD_PORT_STEP

MAX_LOCAL_SHARDS = 100 // LOCAL_SHARD_PORT_STEP  # braid up --shards


def port_number(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (0 to 65535)")
    return port


def host_port(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT")
    return host.strip("[]"), port_number(port)


def shard_number(text: str) -> int:
    try:
        k = int(text)
    except ValueError:
        k = -1
    if k < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a shard number (0, 1, ...)")
    return k


def local_shards(text: str) -> int:
    """``braid up --shards``: shard K of a local region listens LOCAL_SHARD_PORT_STEP·K ports above
    shard 0, below the replication ports 100 above: room for MAX_LOCAL_SHARDS."""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if not 1 <= n <= MAX_LOCAL_SHARDS:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a shard count from 1 to {MAX_LOCAL_SHARDS}: a local cluster puts shard K of a region "
            f"{LOCAL_SHARD_PORT_STEP}·K ports above shard 0, below the replication ports at BASE+100, which leaves "
            f"room for {MAX_LOCAL_SHARDS} (more shards: write the cluster file's ports yourself)")
    return n
