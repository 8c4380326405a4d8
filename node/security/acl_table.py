"""The command table as ACL sees it, derived from the commands' descriptions.

Every command's flags, explicit ACL categories and key specs are written once, in
node/commands/table.py (Redis's own for the commands Braid shares with Redis, so that
``+@read``, ``%R~`` and the rest decide exactly as Redis does).  This module gives them to
node/security/acl.py as ``full name -> (flags, explicit categories, key specs)``, where a
key spec is ``(flags, begin_search, find_keys)`` with ``begin_search`` either
``("index", pos)`` or ``("keyword", word, startfrom)`` and ``find_keys`` either
``("range", lastkey, step, limit)`` or ``("keynum", keynumidx, firstkey, step)``, read as
Redis's ``getKeysUsingKeySpecs`` reads them.  The implicit categories (@write, @read,
@admin, @fast or @slow...) follow from the flags (``acl.py``'s ``_categories``).
"""

from ..commands.table import DESCRIPTIONS

# Named after Redis's command table, whose shape it has; it holds every command Braid has.
REDIS_COMMANDS: dict[str, tuple] = {name: (d.flags, d.acl, d.keys) for name, d in DESCRIPTIONS.items()}
