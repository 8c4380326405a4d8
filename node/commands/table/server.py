"""The descriptions of the commands node/commands/server.py handles (INFO, CONFIG, COMMAND, DBSIZE,
FLUSHDB, FLUSHALL, TIME, SAVE, BGSAVE, BGREWRITEAOF, SHUTDOWN, LASTSAVE).

One :func:`~node.commands.table.vocabulary.describe` call per command or subcommand; the
package's docstring (``node/commands/table/__init__.py``) says what each field means.
"""

from __future__ import annotations

from node.commands.table.vocabulary import describe

describe("info", -1, "loading stale sentinel", "server", group="server", since="1.0.0",
         summary="Returns information and statistics about the server.",
         complexity="O(1)",
         acl="dangerous")
describe("config", -2, "", "server", group="server", since="2.0.0",
         summary="A container for server configuration commands.")
describe("config|get", -3, "admin noscript loading stale", "server", since="2.0.0",
         summary="Returns the effective values of configuration parameters.",
         complexity="O(N) when N is the number of configuration parameters provided")
describe("config|set", -4, "admin noscript loading stale", "server", since="2.0.0",
         summary="Sets configuration parameters in-flight.",
         complexity="O(N) when N is the number of configuration parameters provided")
describe("config|resetstat", 2, "admin noscript loading stale", "server", since="2.0.0",
         summary="Resets the server's statistics.",
         complexity="O(1)")
describe("config|help", 2, "loading stale", "server", since="5.0.0",
         summary="Returns helpful text about the different subcommands.",
         complexity="O(1)")
describe("command", -1, "loading stale sentinel", "server", group="server", since="2.8.13",
         summary="Returns detailed information about all commands.",
         complexity="O(N) where N is the total number of Redis commands",
         acl="connection")
describe("command|count", 2, "loading stale sentinel", "server", since="2.8.13",
         summary="Returns a count of commands.",
         complexity="O(1)",
         acl="connection")
describe("command|list", -2, "loading stale sentinel", "server", since="7.0.0",
         summary="Returns a list of command names.",
         complexity="O(N) where N is the total number of Redis commands",
         acl="connection")
describe("command|info", -2, "loading stale sentinel", "server", since="2.8.13",
         summary="Returns information about one, multiple or all commands.",
         complexity="O(N) where N is the number of commands to look up",
         acl="connection")
describe("command|docs", -2, "loading stale sentinel", "server", since="7.0.0",
         summary="Returns documentary information about one, multiple or all commands.",
         complexity="O(N) where N is the number of commands to look up",
         acl="connection")
describe("command|getkeys", -3, "loading stale sentinel", "server", since="2.8.13",
         summary="Extracts the key names from an arbitrary command.",
         complexity="O(N) where N is the number of arguments to the command",
         acl="connection")
describe("command|help", 2, "loading stale sentinel", "server", since="5.0.0",
         summary="Returns helpful text about the different subcommands.",
         complexity="O(1)",
         acl="connection")
describe("dbsize", 1, "readonly fast", "server", group="server", since="1.0.0",
         summary="Returns the number of keys in the database.",
         complexity="O(1)",
         acl="keyspace")
describe("flushdb", -1, "write", "server", group="server", since="1.0.0",
         summary="Removes all keys from the current database.",
         complexity="O(N) where N is the number of keys in the selected database",
         acl="keyspace dangerous", braid="resolved")
describe("flushall", -1, "write", "server", group="server", since="1.0.0",
         summary="Removes all keys from all databases.",
         complexity="O(N) where N is the total number of keys in all databases",
         acl="keyspace dangerous", braid="resolved")
describe("time", 1, "loading stale fast", "server", group="server", since="2.6.0",
         summary="Returns the server time.",
         complexity="O(1)")
describe("save", 1, "no_async_loading admin noscript no_multi", "server", group="server", since="1.0.0",
         summary="Synchronously saves the database(s) to disk.",
         complexity="O(N) where N is the total number of keys in all databases")
describe("bgsave", -1, "no_async_loading admin noscript", "server", group="server", since="1.0.0",
         summary="Asynchronously saves the database(s) to disk.",
         complexity="O(1)")
describe("bgrewriteaof", 1, "no_async_loading admin noscript", "server", group="server", since="1.0.0",
         summary="Asynchronously rewrites the append-only file to disk.",
         complexity="O(1)")
describe("shutdown", -1, "admin noscript loading stale no_multi sentinel allow_busy", "server",
         group="server", since="1.0.0",
         summary="Synchronously saves the database(s) to disk and shuts down the Redis server.",
         complexity="O(N) when saving, where N is the total number of keys in all databases when saving data, "
                    "otherwise O(1)")
describe("lastsave", 1, "loading stale fast", "server", group="server", since="1.0.0",
         summary="Returns the Unix timestamp of the last successful save to disk.",
         complexity="O(1)",
         acl="admin dangerous")
