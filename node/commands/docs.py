"""What COMMAND DOCS and COMMAND INFO say about a command beyond its name and arity: derived.

Clients read this: ``redis-cli`` draws its argument hints from COMMAND DOCS' ``arguments``,
cluster-aware clients find keys from COMMAND INFO's key specifications, and tools show a
command's ``history`` to tell which options a server has.  Every part is written once, in
the command's description (node/commands/table/, with the shapes Redis replies with);
this module only gives it the shapes node/commands/server.py replies with:

- :data:`DOCS`: the history, tips and argument tree of every command that has any
  (commands without report only their summary, version, group and complexity);
- :func:`key_specs`: COMMAND INFO's key specifications, from the same key specs the ACL
  checks use.
"""

from __future__ import annotations

from dataclasses import dataclass

from node.commands.table import DESCRIPTIONS


@dataclass(frozen=True, slots=True)
class Doc:
    history: tuple[tuple[str, str], ...] = ()
    tips: tuple[str, ...] = ()
    arguments: tuple[dict, ...] = ()


DOCS: dict[str, Doc] = {  # full name ("xadd", "xgroup|create") -> its documentation
    name: Doc(d.history, d.tips, d.arguments)
    for name, d in DESCRIPTIONS.items() if d.history or d.tips or d.arguments
}


def key_specs(fullname: str) -> list[dict]:
    """COMMAND INFO's key specifications of a command.  Access flags (RW, RO, OW, RM) are
    upper case in Redis's reply, the others lower case."""
    d = DESCRIPTIONS.get(fullname)
    out = []
    for flags, begin, find in d.keys if d is not None else ():
        if begin[0] == "index":
            search = {"type": "index", "spec": {"index": begin[1]}}
        else:
            search = {"type": "keyword", "spec": {"keyword": begin[1], "startfrom": begin[2]}}
        if find[0] == "range":
            keys = {"type": "range", "spec": {"lastkey": find[1], "keystep": find[2], "limit": find[3]}}
        else:
            keys = {"type": "keynum", "spec": {"keynumidx": find[1], "firstkey": find[2], "keystep": find[3]}}
        out.append({"flags": [f if f in ("RW", "RO", "OW", "RM") else f.lower() for f in flags],
                    "begin_search": search, "find_keys": keys})
    return out
