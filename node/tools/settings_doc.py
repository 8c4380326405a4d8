"""docs/settings.md, written from the settings themselves: every server setting (the table of
node/region/config.py, with each row's ``doc``) and every database setting (``DB_SETTINGS`` of
node/activeactive/cluster_config.py, with ``DB_SETTING_DOCS``)::

    python -m node.tools.settings_doc            # writes docs/settings.md
    python -m node.tools.settings_doc --check    # exit 1 when docs/settings.md differs

A setting without its text stops the generator (:class:`UndocumentedSetting`), so a new setting
cannot reach the reference without saying what it does; tests/test_settings_doc.py checks that
the file is what :func:`render` makes and that it lists exactly what ``CONFIG GET *`` answers.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

from node.activeactive.cluster_config import DB_SETTING_DOCS, DB_SETTINGS, FILE_SETTINGS, PORT_SETTINGS, ClusterConfig
from node.region.config import SETTINGS, Config, ConfigError, Setting

REFERENCE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                         "docs", "settings.md")
REGENERATE = "python -m node.tools.settings_doc"
SERVER_HEADING = "## Server settings"
# bounds at or past this read "or more" (Redis's 32- and 64-bit maxima say nothing to a user)
UNBOUNDED = (1 << 31) - 1
_UNITS = (("gb", 1024**3), ("mb", 1024**2), ("kb", 1024))

INTRODUCTION = """\
# Settings

Every setting a region has, and the settings of an Active-Active database. Server settings
that Redis also has keep Redis's names, defaults and bounds (`CONFIG GET` / `CONFIG SET`
parse them as Redis does, with Redis's errors). Memory amounts are bytes or Redis's units
(`4096`, `64kb`, `512mb`, `1gb`, in any case); yes/no settings take `yes` or `no`.

## How a setting gets its value

1. **The default** below.
2. **The cluster file**, for a region of an Active-Active database: its top-level
   database settings (`id_mode`, `appendfsync`, `maxmemory`) apply to every region, and a
   region's `[regions.config]` table sets any server setting for that region by its name
   (`crdt-lone-writes-after-ms = 30000`). There, file names are relative to the cluster
   file, and on a sharded database a port setting takes one port per shard (`tls-port =
   [7201, 7202]`) or the first one (shard K on it + K).
3. **`braid node`'s options** (`braid node --help`), after the cluster file: `--port`,
   `--bind`, `--data-dir` (`dir`), `--requirepass`, `--aclfile`, `--appendonly`,
   `--appendfsync`, `--metrics-port`, `--enable-debug-command` and the `--tls-*` options
   ([running.md](running.md), [security.md](security.md#tls-for-clients)).
4. **At run time**: `CONFIG SET name value …` changes the settings marked *yes* below at one
   region (several at once are set together or not at all) until it restarts - to keep a
   value, write it in the region's `[regions.config]`. `braid-admin tune db DB SETTING VALUE`
   changes a database setting at every region (every shard of a sharded database) and in every
   region's cluster file, so that it survives restarts; `BRAID.CONFIG SET` does the same at the
   one region it is sent to.

Scope: *region* settings may differ from region to region (give every region the same
replication limits: an operation larger than a peer accepts stops that link); *database*
settings are meant to be the same at every region.

"""


class UndocumentedSetting(ValueError):
    """A setting whose row has no text saying what it does."""


def _memory(n: int) -> str:
    """``n`` bytes as Redis's units when it is a whole number of them (1gb, 64kb), else bytes."""
    for unit, size in _UNITS:
        if n and n % size == 0:
            return f"{n // size}{unit}"
    return str(n)


def _range(lo: int, hi: int, show) -> str:
    if hi >= UNBOUNDED:
        return f"{show(lo)} or more"
    return show(lo) if lo == hi else f"{show(lo)}-{show(hi)}"


def accepted_choices(s: Setting) -> list[str]:
    """The choices of an enum setting that CONFIG SET takes (maxmemory-policy names Redis's
    others only to refuse them)."""
    config, taken = Config(), []
    for choice in s.choices:
        try:
            config.parse(s.name, choice.encode(), starting=True)
        except ConfigError:
            continue
        taken.append(choice)
    return taken


def type_text(s: Setting) -> str:
    if s.kind == "int":
        return f"integer, {_range(s.lo, s.hi, str)}"
    if s.kind == "memory":
        return f"memory, {_range(s.lo, s.hi, _memory)}"
    if s.kind == "bool":
        return "yes / no"
    if s.kind == "enum":
        return " / ".join(f"`{c}`" for c in accepted_choices(s))
    if s.kind == "obuf":
        return "`class hard soft seconds` …"
    if s.name in FILE_SETTINGS:
        return "file name"
    return "string"


def default_text(s: Setting) -> str:
    shown = Config().render(s.name).decode()
    if shown == "":
        return "(empty)"
    if s.kind == "memory" and int(shown) and _memory(int(shown)) != shown:
        return f"`{shown}` ({_memory(int(shown))})"
    return f"`{shown}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _doc(name: str, text: str) -> str:
    if not text.strip():
        raise UndocumentedSetting(f"setting {name} says nothing about what it does: give it a doc text "
                                  f"(node/region/config.py's Setting(..., doc=...) or DB_SETTING_DOCS), then run "
                                  f"{REGENERATE}")
    return text


def _db_default(attr: str) -> str:
    fields = {f.name: f for f in dataclasses.fields(ClusterConfig)}
    value = fields[attr].default
    if attr == "maxmemory":
        return f"`{value}` (no limit)"
    return f"`{value}`"


def database_rows() -> list[str]:
    by_name = {s.name: s for s in SETTINGS}
    rows = ["| setting | cluster file key | type | default | `CONFIG SET` | what it does |",
            "| --- | --- | --- | --- | --- | --- |"]
    for name, (attr, _check) in DB_SETTINGS.items():
        text = _doc(name, DB_SETTING_DOCS.get(name, ""))
        server = by_name.get(name)
        if server is None:
            kind = "`strict` / `semi-strict` / `liberal`" if name == "crdt_xadd_id_uniqueness_mode" else "string"
            config_set = "no: `braid-admin tune` (or `BRAID.CONFIG SET` at one region)"
        else:
            kind = type_text(server)
            text = f"{_doc(name, server.doc)} {text}"
            config_set = "yes, at one region (see below)" if server.mutable else "no"
        rows.append(f"| `{name}` | `{attr}` | {kind} | {_db_default(attr)} | {config_set} | {_cell(text)} |")
    return rows


def server_rows() -> list[str]:
    rows = ["| setting | type | default | scope | `CONFIG SET` | `braid-admin tune` | what it does |",
            "| --- | --- | --- | --- | --- | --- | --- |"]
    for s in SETTINGS:
        text = _doc(s.name, s.doc)
        scope = "database" if s.name in DB_SETTINGS else "region"
        if s.name in PORT_SETTINGS:
            scope += " (one port per shard)"
        tune = "yes, every region" if s.name in DB_SETTINGS else "no"
        config_set = "yes" if s.mutable else "no (at start)"
        rows.append(f"| `{s.name}` | {type_text(s)} | {default_text(s)} | {scope} | {config_set} | {tune} | "
                    f"{_cell(text)} |")
    return rows


def render() -> str:
    """docs/settings.md's text (UndocumentedSetting when a setting has no text)."""
    parts = [
        f"<!-- generated by `{REGENERATE}` from the settings' definitions: edit those, not this file -->\n\n",
        INTRODUCTION,
        "## Database settings\n\n",
        "Set with `braid-admin tune` at every region, and in the cluster file.\n\n",
        "\n".join(database_rows()), "\n\n",
        f"{SERVER_HEADING}\n\n",
        "What `CONFIG GET *` lists at every region, in that order.\n\n",
        "\n".join(server_rows()), "\n",
    ]
    return "".join(parts)


def server_settings_listed(text: str) -> list[str]:
    """The names the server settings' table of a settings reference lists, in its order."""
    names, inside = [], False
    for line in text.splitlines():
        if line.startswith("## "):
            inside = line == SERVER_HEADING
        elif inside and line.startswith("| `"):
            names.append(line.split("`")[1])
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m node.tools.settings_doc",
                                     description="Write the settings reference (docs/settings.md) from the settings.")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when the file differs")
    parser.add_argument("--output", default=REFERENCE, help="where to write it (default: docs/settings.md)")
    args = parser.parse_args(argv)
    try:
        text = render()
    except UndocumentedSetting as e:
        print(f"settings_doc: {e}", file=sys.stderr)
        return 2
    if args.check:
        try:
            with open(args.output, encoding="utf-8") as f:
                same = f.read() == text
        except FileNotFoundError:
            same = False
        if not same:
            print(f"{args.output} is not what the settings say: run {REGENERATE}", file=sys.stderr)
        return 0 if same else 1
    with open(args.output, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
