"""The descriptions of the commands node/commands/debug.py handles (DEBUG).

One :func:`~node.commands.table.vocabulary.describe` call per command or subcommand; the
package's docstring (``node/commands/table/__init__.py``) says what each field means.
"""

from __future__ import annotations

from node.commands.table.vocabulary import describe

describe("debug", -2, "admin noscript loading stale protected", "debug", group="server", since="1.0.0",
         summary="A container for debugging commands (Braid: fault injection for chaos tests).")
describe("debug|clock-offset", 3, "admin noscript loading stale", "debug", since="0.1.0",
         summary="Moves this region's wall clock by a number of milliseconds (negative: back).",
         complexity="O(1)")
describe("debug|fsync-delay", 3, "admin noscript loading stale", "debug", since="0.1.0",
         summary="Makes every fsync of the append-only file wait this many milliseconds.",
         complexity="O(1)")
describe("debug|disk-full", 3, "admin noscript loading stale", "debug", since="0.1.0",
         summary="Makes writes to the append-only file fail as on a full disk (yes) or succeed again (no).",
         complexity="O(1)")
describe("debug|apply-fail", 3, "admin noscript loading stale", "debug", since="0.1.0",
         summary="Makes the next operations of other regions fail to apply (the region fail-stops).",
         complexity="O(1)")
describe("debug|cron-fail", -4, "admin noscript loading stale", "debug", since="0.1.0",
         summary="Makes the next runs of a cron step raise an I/O error (IO) or a bug (BUG).",
         complexity="O(1)")
describe("debug|raise-after", -3, "admin noscript loading stale", "debug", since="0.1.0",
         summary="Runs a command, then raises as a buggy handler would.",
         complexity="Depends on the command")
describe("debug|help", 2, "loading stale", "debug", since="0.1.0",
         summary="Shows helpful text about the different subcommands.",
         complexity="O(1)")
