"""The descriptions of the commands node/commands/connection.py handles (PING, ECHO, AUTH, HELLO,
SELECT, QUIT, RESET, CLIENT).

One :func:`~node.commands.table.vocabulary.describe` call per command or subcommand; the
package's docstring (``node/commands/table/__init__.py``) says what each field means.
"""

from __future__ import annotations

from node.commands.table.vocabulary import describe

describe("ping", -1, "fast sentinel", "connection", group="connection", since="1.0.0",
         summary="Returns the server's liveliness response.",
         complexity="O(1)",
         acl="connection")
describe("echo", 2, "loading stale fast", "connection", group="connection", since="1.0.0",
         summary="Returns the given string.",
         complexity="O(1)",
         acl="connection")
describe("auth", -2, "noscript loading stale fast no_auth sentinel allow_busy", "connection",
         group="connection", since="1.0.0",
         summary="Authenticates the connection.",
         complexity="O(N) where N is the number of passwords defined for the user",
         acl="connection")
describe("hello", -1, "noscript loading stale fast no_auth sentinel allow_busy", "connection",
         group="connection", since="6.0.0",
         summary="Handshakes with the Redis server.",
         complexity="O(1)",
         acl="connection")
describe("select", 2, "loading stale fast", "connection", group="connection", since="1.0.0",
         summary="Changes the selected database.",
         complexity="O(1)",
         acl="connection")
describe("quit", -1, "allow_busy noscript loading stale fast no_auth", "connection", group="connection", since="1.0.0",
         summary="Closes the connection.",
         complexity="O(1)",
         acl="connection")
describe("reset", 1, "noscript loading stale fast no_auth allow_busy", "connection", group="connection", since="6.2.0",
         summary="Resets the connection.",
         complexity="O(1)",
         acl="connection")
describe("client", -2, "sentinel", "connection", group="connection", since="2.4.0",
         summary="A container for client connection commands.")
describe("client|setname", 3, "noscript loading stale sentinel", "connection", since="2.6.9",
         summary="Sets the connection name.",
         complexity="O(1)",
         acl="connection")
describe("client|getname", 2, "noscript loading stale sentinel", "connection", since="2.6.9",
         summary="Returns the name of the connection.",
         complexity="O(1)",
         acl="connection")
describe("client|id", 2, "noscript loading stale sentinel", "connection", since="5.0.0",
         summary="Returns the unique client ID of the connection.",
         complexity="O(1)",
         acl="connection")
describe("client|info", 2, "noscript loading stale sentinel", "connection", since="6.2.0",
         summary="Returns information about the connection.",
         complexity="O(1)",
         acl="connection")
describe("client|list", -2, "admin noscript loading stale sentinel", "connection", since="2.4.0",
         summary="Lists open connections.",
         complexity="O(N) where N is the number of client connections",
         acl="connection")
describe("client|setinfo", 4, "noscript loading stale sentinel", "connection", since="7.2.0",
         summary="Sets information specific to the client or connection.",
         complexity="O(1)",
         acl="connection")
describe("client|kill", -3, "admin noscript loading stale sentinel", "connection", since="2.4.0",
         summary="Terminates open connections.",
         complexity="O(N) where N is the number of client connections",
         acl="connection")
describe("client|no-evict", 3, "admin noscript loading stale sentinel", "connection", since="7.0.0",
         summary="Sets the client eviction mode of the connection.",
         complexity="O(1)",
         acl="connection")
describe("client|no-touch", 3, "noscript loading stale", "connection", since="7.2.0",
         summary="Controls whether commands sent by the client affect the LRU/LFU of accessed keys.",
         complexity="O(1)",
         acl="connection")
describe("client|help", 2, "loading stale sentinel", "connection", since="5.0.0",
         summary="Returns helpful text about the different subcommands.",
         complexity="O(1)",
         acl="connection")
