"""Connection commands: PING, ECHO, ..."""

from __future__ import annotations

from ..resp.encoder import ReplyError
from . import command


@command("ping", -1, "fast", group="connection", summary="Returns the server's liveliness response.")
def ping(client, argv: list[bytes]):
    if len(argv) > 2:
        raise ReplyError("ERR wrong number of arguments for 'ping' command")
    return argv[1] if len(argv) == 2 else "PONG"


@command("echo", 2, "fast", group="connection", summary="Returns the given string.")
def echo(client, argv: list[bytes]):
    return argv[1]
