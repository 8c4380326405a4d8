"""Where a command's keys are when its key specifications cannot say: MIGRATE's.

Read by MIGRATE itself (node/commands/migrate.py), COMMAND GETKEYS (node/commands/server.py)
and the ACL key check (node/security/acl.py); kept below all three so the ACL need not import
a command family.
"""

from __future__ import annotations


def migrate_key_positions(argv: list[bytes]) -> list[int]:
    """Where MIGRATE's keys are (Redis's ``migrateGetKeys``: its key specifications are
    incomplete, so COMMAND GETKEYS and the ACL key check read them this way)."""
    first, num = 3, 1
    i = 6
    skip = {b"copy": 0, b"replace": 0, b"auth": 1, b"auth2": 2}
    while i < len(argv):
        word = argv[i].lower()
        if word == b"keys":
            if argv[3]:
                num = 0  # a syntax error MIGRATE itself reports
            else:
                first, num = i + 1, len(argv) - i - 1
            break
        i += skip.get(word, 0) + 1
    return list(range(first, first + num))
