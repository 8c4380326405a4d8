"""ACL against a real redis-server (Debian's 7.0): generated users x stream commands.

A seeded generator makes users from Redis's rule grammar (passwords, key patterns with
read/write permissions, categories, commands, subcommands, selectors, rules that must be
refused); each is set on Braid and on Redis, then compared: the ACL SETUSER reply, ACL
GETUSER and ACL LIST, the allow/deny decision of ACL DRYRUN for every command, and the
replies an authenticated connection of that user gets (NOPERM or not, and its text).

Braid answers as Redis 8.6.  Redis 7.0 differs in a few documented places, and only
those are normalised (``_to_70``):

- ACL GETUSER / ACL LIST command rules: 7.0 rebuilds them from the command bitmap and its
  own command table; since 7.2 Redis keeps the rules as given (``command_rules``).  The
  text is not compared; what the rules allow is, command by command (ACL DRYRUN).
- The ``sanitize-payload`` flag: shown for every user since 7.2, not by 7.0.
- NOPERM texts: 7.0 says ``this user has no permissions to run the 'x' command`` and
  ``this user has no permissions to access one of the keys used as arguments``; 8.x names
  the user (``User alice has no permissions to run the 'x' command``) and says ``No
  permissions to access a key``.  ACL DRYRUN: 7.0 ``This user has no permissions ...``,
  8.x ``User alice has no permissions ...``.
"""

from __future__ import annotations

import os
import random
import re

import pytest

from tests.differential import Err, RawClient

SEED = int(os.environ.get("BRAID_ACL_SEED", "20261123"))  # another seed: other users
USERS = 60

KEYS = ["app:1", "ro:1", "wo:1", "rw:1", "s1", "other"]
PATTERNS = ["~app:*", "%R~ro:*", "%W~wo:*", "%RW~rw:*", "~s?", "%R~app:*", "%W~s*", "allkeys", "resetkeys"]
CATEGORIES = ["+@stream", "-@stream", "+@read", "-@read", "+@write", "-@write", "+@fast", "-@slow",
              "+@keyspace", "-@keyspace", "-@dangerous", "+@blocking", "-@blocking", "+@all", "-@all",
              "allcommands", "nocommands", "+@admin", "+@connection", "+@transaction"]
COMMANDS = ["xadd", "xrange", "xrevrange", "xlen", "xdel", "xtrim", "xsetid", "xread", "xreadgroup",
            "xgroup", "xgroup|create", "xgroup|destroy", "xgroup|setid", "xack", "xpending", "xclaim",
            "xautoclaim", "xinfo", "xinfo|stream", "xinfo|groups", "del", "exists", "type", "rename",
            "ping", "multi", "exec"]
REFUSED = ["+nosuch", "bogus", "#abc", "<notthere", "+@nosuch", "+xgroup|create|x", "%Z~x"]


def _command_lines(k: str, other: str) -> list[list[str]]:
    return [
        ["xadd", k, "1-1", "f", "v"], ["xrange", k, "-", "+"], ["xrevrange", k, "+", "-"], ["xlen", k],
        ["xdel", k, "1-1"], ["xtrim", k, "MAXLEN", "10"], ["xsetid", k, "5-5"],
        ["xread", "STREAMS", k, other, "0", "0"], ["xreadgroup", "GROUP", "g", "c", "STREAMS", k, ">"],
        ["xgroup", "create", k, "g", "$", "MKSTREAM"], ["xgroup", "destroy", k, "g"],
        ["xgroup", "setid", k, "g", "0"], ["xack", k, "g", "1-1"], ["xpending", k, "g"],
        ["xclaim", k, "g", "c", "0", "1-1"], ["xautoclaim", k, "g", "c", "0", "0"],
        ["xinfo", "stream", k], ["xinfo", "groups", k], ["del", k, other], ["exists", k], ["type", k],
        ["rename", k, other], ["ping"],
    ]


def _rules(rng: random.Random) -> list[str]:
    rules = [rng.choice(["on", "off", "on"]), rng.choice([">pw", "nopass", ">pw", "resetpass"])]
    rules += rng.choice([["+@all"], ["+@stream"], ["+@read", "+@write"], []])  # a base to narrow
    rules += rng.choice([["~*"], ["%R~*"], []])
    parts = rng.sample(PATTERNS, rng.randint(0, 3)) + rng.sample(CATEGORIES, rng.randint(0, 3))
    parts += [rng.choice("+-") + c for c in rng.sample(COMMANDS, rng.randint(0, 4))]
    rng.shuffle(parts)
    rules += parts
    if rng.random() < 0.25:  # a selector, as one argument or spread over several
        inner = rng.sample(PATTERNS[:-2], 1) + ["+" + rng.choice(COMMANDS)]
        rules += [f"({' '.join(inner)})"] if rng.random() < 0.5 else [f"({inner[0]}", f"{inner[1]})"]
    if rng.random() < 0.1:
        rules.insert(rng.randint(0, len(rules)), rng.choice(REFUSED))
    return rules


# ---------------------------------------------------------------- the documented 7.0 / 8.x differences
_RULE = re.compile(r"^[+-]")


def _strip_command_rules(text: bytes) -> bytes:
    """An ACL LIST line without its command rules (7.0 rebuilds them from its bitmap)."""
    out = []
    for token in text.split(b" "):
        bare = token.lstrip(b"(").rstrip(b")")
        if _RULE.match(bare.decode("utf-8", "replace")) and not bare.startswith((b"~", b"%", b"&")):
            if token.endswith(b")"):
                out.append(b")")
            continue
        out.append(token)
    return b" ".join(out).replace(b" )", b")")


def _to_70(reply: object, user: str) -> object:
    """Braid's 8.6 reply in 7.0's words, for the differences listed in the module docstring."""
    if isinstance(reply, Err):
        text = str(reply)
        text = text.replace(f"NOPERM User {user} has no permissions to run",
                            "NOPERM this user has no permissions to run")
        text = text.replace("NOPERM No permissions to access a key",
                            "NOPERM this user has no permissions to access one of the keys used as arguments")
        return Err(text)
    if isinstance(reply, bytes):
        return reply.replace(f"User {user} has no permissions".encode(), b"This user has no permissions")
    return reply


def _getuser(reply: object, drop_sanitize: bool) -> object:
    if not isinstance(reply, list):
        return reply
    fields = dict(zip(reply[::2], reply[1::2], strict=True))
    fields.pop(b"commands", None)
    if drop_sanitize:
        fields[b"flags"] = [f for f in fields[b"flags"] if f != b"sanitize-payload"]
    fields[b"selectors"] = [{k: v for k, v in zip(s[::2], s[1::2], strict=True) if k != b"commands"}
                            for s in fields[b"selectors"]]
    return fields


def _list(lines: list, drop_sanitize: bool) -> list:
    out = []
    for line in lines:
        if drop_sanitize:
            line = line.replace(b" sanitize-payload", b"")
        out.append(_strip_command_rules(line))
    return out


# ---------------------------------------------------------------- the test
@pytest.fixture
def servers(braid_proc, redis_proc):
    clients = RawClient(braid_proc.port), RawClient(redis_proc.port)
    yield clients
    for c in clients:
        for name in c.call("ACL", "USERS"):
            if name != b"default":
                c.call("ACL", "DELUSER", name)
        c.call("ACL", "LOG", "RESET")
        c.close()


def test_generated_users_decide_and_report_as_redis(servers, braid_proc, redis_proc):
    braid, redis = servers
    rng = random.Random(SEED)
    compared = denied = refused = 0
    for n in range(USERS):
        name = f"u{n}"
        rules = _rules(rng)
        where = f"user {name} {' '.join(rules)}"
        got, want = braid.call("ACL", "SETUSER", name, *rules), redis.call("ACL", "SETUSER", name, *rules)
        assert got == want, where
        refused += isinstance(want, Err)
        got = _getuser(braid.call("ACL", "GETUSER", name), True)
        assert got == _getuser(redis.call("ACL", "GETUSER", name), False), where
        if got is None:
            continue
        k, other = rng.choice(KEYS), rng.choice(KEYS)
        for line in _command_lines(k, other):
            got = _to_70(braid.call("ACL", "DRYRUN", name, *line), name)
            assert got == redis.call("ACL", "DRYRUN", name, *line), f"{where}: ACL DRYRUN {' '.join(line)}"
            compared += 1
            denied += got != b"OK"
        if b"on" in braid.call("ACL", "GETUSER", name)[1]:  # run them as the user: NOPERM or not
            conns = RawClient(braid_proc.port), RawClient(redis_proc.port)
            try:
                for c in conns:
                    c.call("AUTH", name, "pw")
                for line in _command_lines(k, other):
                    got, want = (c.call(*line) for c in conns)
                    got = _to_70(got, name)
                    if "NOPERM" in str(got) or "NOPERM" in str(want):
                        assert got == want, f"{where}: {' '.join(line)}"
            finally:
                for c in conns:
                    c.close()
    assert _list(braid.call("ACL", "LIST"), True) == _list(redis.call("ACL", "LIST"), False)
    assert braid.call("ACL", "USERS") == redis.call("ACL", "USERS")
    # the generator reaches both answers often enough to mean something
    assert refused > 0 and compared > 500 and 0.1 * compared < denied < 0.9 * compared


# Categories Redis 7.2 on gives (WAIT is flagged blocking, not noscript, since 7.2), as Redis
# 8.6's COMMAND INFO lists them
NEWER_THAN_70 = {"wait": [b"@slow", b"@blocking", b"@connection"]}


def test_command_categories_match_redis(servers):
    """COMMAND INFO's ACL categories (what +@category and ACL CAT use) for every command and
    subcommand Braid shares with Redis."""
    braid, redis = servers
    from node.commands import load_all

    compared = 0
    for cmd in load_all().values():  # every family, whichever this process imported so far
        want = redis.call("COMMAND", "INFO", cmd.name)[0]
        if want is None:
            continue  # Braid's own, or newer than 7.0
        got = braid.call("COMMAND", "INFO", cmd.name)[0]
        if cmd.name in NEWER_THAN_70:
            assert got[6] == NEWER_THAN_70[cmd.name], cmd.name
            continue
        assert got[6] == want[6], cmd.name
        subs = {s[0]: s[6] for s in want[9]}
        for s in got[9]:
            if s[0] in subs:
                assert s[6] == subs[s[0]], s[0]
                compared += 1
        compared += 1
    assert compared > 60
