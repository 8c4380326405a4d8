"""The settings reference (docs/settings.md) is generated from the settings themselves
(node/tools/settings_doc.py): it is what the generator writes now, it lists exactly the
settings a running region answers to ``CONFIG GET *``, and a setting without its text cannot
be written into it."""

from __future__ import annotations

import dataclasses

import pytest

from node.activeactive.cluster_config import DB_SETTING_DOCS, DB_SETTINGS
from node.region import config
from node.tools import settings_doc


def _reference() -> str:
    with open(settings_doc.REFERENCE, encoding="utf-8") as f:
        return f.read()


def test_the_reference_is_what_the_generator_writes():
    assert _reference() == settings_doc.render(), (
        f"docs/settings.md is not what the settings say: run `{settings_doc.REGENERATE}` and commit the file")


def test_every_setting_says_what_it_does():
    assert [s.name for s in config.SETTINGS if not s.doc.strip()] == []
    assert sorted(DB_SETTING_DOCS) == sorted(DB_SETTINGS)


def test_a_setting_without_its_text_stops_the_generator(monkeypatch):
    undocumented = config.Setting("crdt-made-up-setting", "int", 1)
    monkeypatch.setattr(settings_doc, "SETTINGS", (*config.SETTINGS, undocumented))
    with pytest.raises(settings_doc.UndocumentedSetting, match="crdt-made-up-setting"):
        settings_doc.render()
    silent = dataclasses.replace(config.SETTINGS[0], doc="  ")
    monkeypatch.setattr(settings_doc, "SETTINGS", (silent, *config.SETTINGS[1:]))
    with pytest.raises(settings_doc.UndocumentedSetting, match=silent.name):
        settings_doc.render()


def test_a_database_setting_without_its_text_stops_the_generator(monkeypatch):
    monkeypatch.setattr(settings_doc, "DB_SETTING_DOCS", {k: v for k, v in DB_SETTING_DOCS.items()
                                                          if k != "crdt_xadd_id_uniqueness_mode"})
    with pytest.raises(settings_doc.UndocumentedSetting, match="crdt_xadd_id_uniqueness_mode"):
        settings_doc.render()


def test_the_check_option_tells_a_stale_file_and_how_to_regenerate(tmp_path, capsys):
    stale = tmp_path / "settings.md"
    stale.write_text(settings_doc.render().replace("`maxclients`", "`max-clients`"))
    assert settings_doc.main(["--check", "--output", str(stale)]) == 1
    assert settings_doc.REGENERATE in capsys.readouterr().err
    assert settings_doc.main(["--output", str(stale)]) == 0
    assert settings_doc.main(["--check", "--output", str(stale)]) == 0


def test_the_reference_lists_exactly_what_a_region_answers_to_config_get(inproc):
    answered = inproc.client(decode_responses=True).config_get("*")
    listed = settings_doc.server_settings_listed(_reference())
    assert sorted(listed) == sorted(answered), (
        f"CONFIG GET * and docs/settings.md differ: run `{settings_doc.REGENERATE}` "
        f"(only answered: {sorted(set(answered) - set(listed))}, only listed: {sorted(set(listed) - set(answered))})")
    assert len(listed) == len(set(listed))
