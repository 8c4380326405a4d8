"""The single command table (node/commands/table/) and what is derived from it.

- every registered handler has exactly one description, and every description (but a
  container's) a handler; the decorators refuse a name without a description;
- the derived tables (COMMAND INFO's flags and key range, ACL categories and key specs,
  dispatch's flags, the name sets) equal the golden values in command_table_golden.json,
  computed once from the code before the single table (commit 2373c04, where the same
  facts were kept in four places) with COMMAND INFO's flags corrected where they were wrong
  against Redis: Redis's spelling (``no_auth``, not ``no-auth``) and order, ``sentinel``
  hidden, ECHO's and COMMAND's ``loading stale`` and DEBUG's ``admin noscript loading
  stale`` shown, XREAD's and XREADGROUP's ``movablekeys`` shown;
- COMMAND INFO's name, arity, flags and key range equal Redis 7.0's for every command both
  have (the flags order and the derivations from key specs are Redis's).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from node.commands import (
    COMMANDS,
    CONTAINERS,
    LOGGED_IF_CHANGED,
    READS_ENTRIES,
    RESOLVED,
    command,
    load_all,
    subcommand,
)
from node.commands.docs import key_specs
from node.commands.table import DESCRIPTIONS
from node.security.acl import CATEGORIES, command_table
from tests.differential import RawClient

load_all()

GOLDEN = json.loads((Path(__file__).parent / "command_table_golden.json").read_text())


def _every():
    for cmd in COMMANDS.values():
        yield cmd
        yield from cmd.subcommands.values()


def test_every_handler_has_one_description_and_every_description_a_handler():
    registered = [c.fullname for c in _every()]
    assert len(registered) == len(set(registered))
    assert sorted(registered) == sorted(DESCRIPTIONS)
    for c in _every():
        assert c.desc is DESCRIPTIONS[c.fullname]
        assert c.handler is not None or c.fullname in CONTAINERS, c.fullname
        if c.handler is not None:
            assert c.handler.__module__ == f"node.commands.{c.desc.family}", c.fullname
    assert CONTAINERS == {c.fullname for c in COMMANDS.values() if c.subcommands}


def test_a_handler_without_a_description_fails():
    def handler(client, argv):
        return "OK"

    handler.__module__ = "node.commands.streams"
    with pytest.raises(LookupError, match="does not describe"):
        command("xnosuch")(handler)
    with pytest.raises(LookupError, match="does not describe"):
        subcommand("xgroup", "nosuch")(handler)
    with pytest.raises(LookupError, match="handled in node.commands.groups, not node.commands.streams"):
        subcommand("xgroup", "create")(handler)  # described as groups.py's
    with pytest.raises(LookupError, match="two handlers"):
        command("xadd")(handler)


def test_descriptions_use_known_categories_and_subcommands_their_containers_group():
    for d in DESCRIPTIONS.values():
        assert set(d.acl) <= set(CATEGORIES), d.name
        if d.container:
            assert d.group == DESCRIPTIONS[d.container].group, d.name


def test_derived_tables_equal_the_golden_values():
    acl = command_table()
    # (commands added since are left to the other tests; their order, COMMAND's and COMMAND
    # LIST's, is kept)
    assert [c.fullname for c in _every() if c.fullname in GOLDEN] == list(GOLDEN)
    for c in _every():
        if c.fullname not in GOLDEN:
            continue
        m = acl.by_name[c.fullname]
        got = {
            "arity": c.arity,
            "info_flags": list(c.info_flags),
            "legacy_range": [c.first_key, c.last_key, c.step],
            "categories": sorted(m.categories),
            "key_specs": json.loads(json.dumps(m.key_specs)),
            "no_auth": m.no_auth,
            "group": c.group,
            "write": c.is_write, "denyoom": c.denyoom, "fast": "fast" in c.flags,
            "skip_slowlog": "skip_slowlog" in c.flags,
            "resolved": c.resolved, "logged_if_changed": c.logged_if_changed,
            "reads_entries": c.reads_entries, "always_logged": c.always_logged,
        }
        assert got == GOLDEN[c.fullname], c.fullname
    assert RESOLVED & GOLDEN.keys() == {n for n, g in GOLDEN.items() if g["resolved"]}
    assert LOGGED_IF_CHANGED & GOLDEN.keys() == {n for n, g in GOLDEN.items() if g["logged_if_changed"]}
    assert READS_ENTRIES & GOLDEN.keys() == {n for n, g in GOLDEN.items() if g["reads_entries"]}


def test_command_info_shows_the_key_specs_acl_checks():
    acl = command_table()
    for c in _every():
        shown = []
        for spec in key_specs(c.fullname):
            bs, fk = spec["begin_search"], spec["find_keys"]
            shown.append((tuple(bs["spec"].values()), tuple(fk["spec"].values())))
        checked = [(b[1:], f[1:]) for _bits, b, f in acl.by_name[c.fullname].key_specs]
        assert shown == checked, c.fullname


# Where Braid answers as Redis 8 and not as the reference Redis 7.0.
DIFFERS_FROM_70 = {"command|getkeys",  # arity -3 since Redis 7.2 (-4 in 7.0)
                   "cluster|slots", "cluster|shards",  # flagged loading since Redis 7.2
                   "wait"}  # flagged blocking, no longer noscript, since Redis 7.2


def test_command_info_flags_and_key_range_as_redis(braid_proc, redis_proc):
    braid, redis = RawClient(braid_proc.port), RawClient(redis_proc.port)
    compared = 0
    try:
        for c in _every():
            theirs = redis.call("COMMAND", "INFO", c.fullname)[0]
            if theirs is None or c.fullname in DIFFERS_FROM_70:
                continue  # Braid's own, or newer than 7.0
            ours = braid.call("COMMAND", "INFO", c.fullname)[0]
            if c.fullname == "debug":  # a container in Braid, one command in Redis: no arity to compare
                ours, theirs = ours[2:6], theirs[2:6]
            assert ours[:6] == theirs[:6], c.fullname
            compared += 1
    finally:
        braid.close()
        redis.close()
    assert compared > 100
