"""The descriptions of the commands node/commands/transactions.py handles (MULTI, DISCARD, EXEC, WATCH, UNWATCH).

One :func:`~node.commands.table.vocabulary.describe` call per command or subcommand; the
package's docstring (``node/commands/table/__init__.py``) says what each field means.
"""

from __future__ import annotations

from node.commands.table.vocabulary import describe, index, ks, range_

describe("multi", 1, "noscript loading stale fast allow_busy", "transactions", group="transactions", since="1.2.0",
         summary="Starts a transaction.",
         complexity="O(1)",
         acl="transaction")
describe("discard", 1, "noscript loading stale fast allow_busy", "transactions", group="transactions", since="2.0.0",
         summary="Discards a transaction.",
         complexity="O(N), when N is the number of queued commands",
         acl="transaction")
describe("exec", 1, "noscript loading stale skip_slowlog", "transactions", group="transactions", since="1.2.0",
         summary="Executes all commands in a transaction.",
         complexity="Depends on commands in the transaction",
         acl="transaction")
describe("watch", -2, "noscript loading stale fast allow_busy", "transactions", group="transactions", since="2.2.0",
         summary="Monitors changes to keys to determine the execution of a transaction.",
         complexity="O(1) for every key.",
         acl="transaction", keys=[ks("RO", index(1), range_(-1, 1, 0))])
describe("unwatch", 1, "noscript loading stale fast allow_busy", "transactions", group="transactions", since="2.2.0",
         summary="Forgets about watched keys of a transaction.",
         complexity="O(1)",
         acl="transaction")
