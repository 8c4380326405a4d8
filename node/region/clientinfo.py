"""How a client connection is described in one line: CLIENT LIST / CLIENT INFO's line, which
the ACL LOG also records (its ``client-info`` field).

Below both node/commands/connection.py and node/security/acl.py, which each describe a
client; ``c`` is a client connection (node/runtime/server.py's ``ClientConnection``) or anything with
its attributes.
"""

from __future__ import annotations


def client_info_line(c, now: float) -> bytes:
    flags = ("x" if c.multi is not None else "") + ("b" if c.blocked is not None else "") or "N"
    cmd = c.last_command.decode("utf-8", "replace").lower()
    return (
        f"id={c.id} addr={c.addr} laddr={c.laddr} fd=-1 name={c.name.decode('utf-8', 'replace')} "
        f"age={int(now - c.created)} idle={int(now - c.last_interaction)} flags={flags} db=0 "
        f"sub=0 psub=0 ssub=0 multi={len(c.multi) if c.multi is not None else -1} "
        f"watch={len(c.watched)} qbuf={c.parser.buffered} qbuf-free=0 argv-mem=0 multi-mem=0 "
        f"rbs=0 rbp=0 obl=0 oll=0 omem=0 tot-mem=0 events=r cmd={cmd} "
        f"user={c.user.name if c.user is not None else '(superuser)'} redir=-1 "
        f"resp={3 if c.resp3 else 2} lib-name={c.lib_name.decode('utf-8', 'replace')} "
        f"lib-ver={c.lib_ver.decode('utf-8', 'replace')}\n"
    ).encode()
