"""Users the same at every region: the changes braid-admin's ``acl`` commands make at one region.

Theory of operation
-------------------
braid-admin (node/tools/admin_acl.py) defines a user once for the whole database: it sends the
same change to every region (every shard of each, on a sharded database) through the admin
service (node/transport/admin.py), which hands it to :func:`stage` and :func:`commit` here.

A change is one of three: a user's whole rule set (what one ``ACL SETUSER`` with all the rules
does), users to delete (``ACL DELUSER``), or a region's whole user list replaced by another
(``ACL LOAD`` of lines in the ACL file's format: braid-admin acl sync).  Each is made in two
steps so that a user is never half defined:

- :func:`stage` builds the user table the change leads to, beside the one in use, with the
  parser ``ACL SETUSER`` and the ACL file use: a rule it refuses raises :class:`AclChangeError`
  and nothing changes.  braid-admin stages the change at every region (``check_only``) before
  any region commits it, so a rule one region refuses changes none.
- :func:`commit` saves the staged table to the region's ``aclfile`` when it has one (as ACL
  SAVE writes it: a new file renamed over the old), then installs it in memory, in one turn of
  the region's event loop: no command runs between two rules of a change.  A file that cannot
  be written raises :class:`AclChangeError` and the users in use stay.  Without an ``aclfile``
  the change lives in memory only, as a user set with ACL SETUSER does: a restart starts from
  the region's settings again, and ``braid-admin acl sync`` brings the users back.

Clients of a user follow its new rules at once (the user is updated in place); clients of a
user deleted or left out of a replacement are closed, as ACL DELUSER and ACL LOAD do.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from node.security.acl import AccessControl
from node.security.acl_file import parse_acl_file, render_acl_file, save_acl_file
from node.security.acl_users import User, _has_spaces, default_user, set_user_rules

SETUSER, DELUSER, REPLACE = "setuser", "deluser", "replace"


class AclChangeError(ValueError):
    """A change this region refuses (a rule, a name) or cannot keep (its ACL file): nothing changed."""


@dataclass
class AclChange:
    """One change of a region's users: ``kind`` SETUSER (``name``, ``rules``), DELUSER (``names``)
    or REPLACE (``lines``, the ACL file's ``user NAME RULES...`` lines of the whole user list)."""

    kind: str
    name: str = ""
    rules: list[bytes] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    lines: list[bytes] = field(default_factory=list)


@dataclass
class StagedUsers:
    """The user table a change leads to, not yet in use; ``removed``: users it deletes that exist."""

    change: AclChange
    users: dict[str, User]
    removed: int = 0


def user_lines(users: dict[str, User]) -> list[bytes]:
    """The users as ACL LIST shows them (and the ACL file holds them), sorted by name."""
    return [line for line in render_acl_file(users).split(b"\n") if line]


def _check_name(name: str) -> None:
    if not name or _has_spaces(name.encode("utf-8", "surrogateescape")):
        raise AclChangeError(f"user name {name!r}: a name cannot be empty nor contain spaces or null characters")


def stage(ac: AccessControl, change: AclChange) -> StagedUsers:
    """The users of ``ac`` after ``change``, built aside (``ac`` is not touched);
    AclChangeError with the reason (Redis's words for a rule) when the region refuses it."""
    if change.kind == SETUSER:
        _check_name(change.name)
        try:
            user = set_user_rules(ac.users.get(change.name), change.name, change.rules)
        except ValueError as e:
            raise AclChangeError(str(e)) from None
        return StagedUsers(change, {**ac.users, change.name: user})
    if change.kind == DELUSER:
        for name in change.names:
            _check_name(name)
        if "default" in change.names:
            raise AclChangeError("the 'default' user cannot be removed")
        users = dict(ac.users)
        removed = sum(users.pop(name, None) is not None for name in set(change.names))
        return StagedUsers(change, users, removed)
    if change.kind == REPLACE:
        users, error = parse_acl_file(b"\n".join(change.lines), "the user list sent")
        if error is not None:
            raise AclChangeError(error)
        users.setdefault("default", default_user())  # what ACL LOAD of a file without one installs
        return StagedUsers(change, users)
    raise AclChangeError(f"unknown change of users {change.kind!r}")


def commit(ac: AccessControl, staged: StagedUsers, clients: Iterable) -> str:
    """Put ``staged`` in use at this region: first in its ACL file if it has one (returned: the
    file's path, "" without one), then in memory.  ``clients``: the region's client sessions.
    AclChangeError when the file cannot be written (nothing changed)."""
    path = str(ac.config["aclfile"] or "")
    if path:
        try:
            save_acl_file(path, staged.users)
        except OSError as e:
            raise AclChangeError(f"cannot save the users to the ACL file {path}: {e.strerror or e}") from None
    change = staged.change
    if change.kind == SETUSER:
        existing = ac.users.get(change.name)
        if existing is None:
            ac.users[change.name] = staged.users[change.name]
        else:
            existing.copy_from(staged.users[change.name])  # in place: its clients follow the new rules
    elif change.kind == DELUSER:
        for name in change.names:
            ac.delete(name, clients)
    else:
        ac.install(staged.users, clients)
    return path
