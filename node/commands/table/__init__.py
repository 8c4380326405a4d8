"""Braid's commands, each described once: the one source of command metadata.

Theory of operation
-------------------
Redis keeps one description per command (``src/commands/*.json``) and generates the rest
of its command table from it.  Braid does the same with one Python module per command
family rather than a file per command as Redis has, because Braid's 140-odd entries are
short, read best side by side (a container's subcommands, a family's commands), and
Python's helpers write an argument tree in a third of the JSON.  The module of this
package is named after the module of node/commands/ whose handlers run its commands
(``table/streams.py`` describes what ``node/commands/streams.py`` handles: XADD's
description is in ``table/streams.py``, XGROUP's in ``table/groups.py``), and
``table/vocabulary.py`` holds the words and helpers they are written with,
:class:`Description` and :data:`DESCRIPTIONS`.  A command (or a subcommand, named
``container|sub``) is one :func:`describe` call, in the module of the family that
handles it, and carries everything anyone asks about it:

- what dispatch checks: ``arity`` (positive: exactly that many arguments with the name;
  negative: at least), and the ``flags``, spelled as in Redis's JSON files
  (``write``, ``readonly``, ``denyoom``, ``fast``, ``no_auth``, ``skip_slowlog``...);
- what ACL decides with: the ``acl`` categories Redis names explicitly (``stream``,
  ``keyspace``, ``dangerous``...; the implicit ones - @write, @read, @admin, @fast or
  @slow, @blocking - follow from the flags) and the key specs (``keys``: where the search
  for keys begins, ``index(i)`` or ``keyword(word, startfrom)``, how keys are found from
  there, ``range_(lastkey, step, limit)`` or ``keynum(...)``, and what is done to them,
  ``RO``/``RW``/``OW``/``RM`` with ``ACCESS``/``UPDATE``/``INSERT``/``DELETE``), copied
  from Redis for the commands Braid shares with it, written the same way for Braid's own
  (XORIGINS...);
- what COMMAND DOCS shows: ``summary``, ``since``, ``group`` (top-level commands only: a
  subcommand is in its container's group), ``complexity``, ``history``, ``tips`` and the
  ``arguments`` tree (written with :func:`key`, :func:`string`, :func:`integer`,
  :func:`token`, :func:`oneof`, :func:`block`... in COMMAND DOCS' shapes);
- Braid's own facts, the ``braid`` words: ``resolved`` (the operation log records the
  operations the command applied and not the command: a replay never resolves it again),
  ``logged_if_changed`` (a write the log records only when it changed state) and
  ``reads_entries`` (it may fill a stream's caches of decoded blocks, so its keys' memory
  is counted again as a write's is);
- ``family``: the module of node/commands/ whose handler runs it.

Everything else is derived, never written again:

- node/commands/__init__.py builds the dispatch table (``COMMANDS``) from these
  descriptions as the handlers register (``@command("xadd")``: a name and nothing else),
  with the legacy first/last/step key positions and the ``movablekeys`` flag computed from
  the key specs as Redis's ``populateCommandLegacyRangeSpec`` computes them, COMMAND INFO's
  flags (Redis's order, without the ones Redis hides), and the name sets (``RESOLVED``,
  ``LOGGED_IF_CHANGED``, ``READS_ENTRIES``) from the ``braid`` words;
- node/security/acl_table.py gives ACL each command's flags, categories and key specs
  (node/security/acl.py adds the implicit categories);
- node/commands/docs.py gives COMMAND INFO its key specs and COMMAND DOCS its history,
  tips and argument trees.

Drift cannot set in: a handler registered under a name without a description fails at
import, and ``load_all`` fails when a description has no handler (a container - a command
some ``name|sub`` names - needs none).  tests/test_command_table.py pins the derived
tables.

To add a command: describe it in its family's module here (from Redis's JSON file when
Redis has it; a new family gets a module, imported below and in ``FAMILIES``), then
decorate its handler with ``@command(name)`` or ``@subcommand(container, name)`` in the
family's module.

This package imports nothing from Braid: it is data, below every other layer.
"""

from __future__ import annotations

# Each family module adds its commands to DESCRIPTIONS as it is imported; this order is the
# order DESCRIPTIONS lists them in (as when they were one file).  Whichever module of
# node/commands/ imports this package first, every command is described once it has.
from node.commands.table import (  # noqa: F401
               acl,
               braid,  # noqa: F401
               cluster,
               connection,
               debug,
               dump,
               groups,
               keys,
               migrate,
               origins,
               server,
               slowlog,
               streams,
               transactions,
               waits,
               xinfo,
               xread,
)
from node.commands.table.vocabulary import DESCRIPTIONS, Description  # noqa: F401
