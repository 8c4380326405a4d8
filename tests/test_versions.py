"""What a release says about itself: each program's ``--version``, the one version source
(node/version.py) that the package's metadata, the CHANGELOG and INFO agree with, and the
license the package declares.  The mixed-version tests are tests/test_mixed_versions.py."""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Callable

import pytest

from chaos import cli as chaos_cli
from node.tools import admin_cli, cli
from node.version import BRAID_VERSION, REDIS_COMPAT_VERSION

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PROGRAMS: dict[str, Callable[[list[str]], int]] = {
    "braid": cli.main,
    "braid-admin": admin_cli.main,
    "braid-chaos": chaos_cli.main,
}


@pytest.mark.parametrize("prog", sorted(PROGRAMS))
def test_each_program_prints_its_version_and_exits_0(prog: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        PROGRAMS[prog](["--version"])
    assert exited.value.code == 0
    out, err = capsys.readouterr()
    assert out == f"{prog} {BRAID_VERSION} (Redis {REDIS_COMPAT_VERSION} streams)\n"
    assert err == ""


def test_the_version_is_a_release_number_the_changelog_describes() -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+", BRAID_VERSION)
    with open(os.path.join(ROOT, "CHANGELOG.md")) as f:
        headings = re.findall(r"^## \[([^\]]+)\]", f.read(), re.MULTILINE)
    assert BRAID_VERSION in headings, f"CHANGELOG.md has no '## [{BRAID_VERSION}]' section: {headings}"
    assert headings[0] in ("Unreleased", BRAID_VERSION), "the newest section comes first"


def test_the_package_reads_its_version_from_node_version_and_declares_its_license() -> None:
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)
    assert "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "node.version.BRAID_VERSION"}
    assert project["project"]["license"] == "Apache-2.0"
    assert project["project"]["license-files"] == ["LICENSE"]
    with open(os.path.join(ROOT, "LICENSE")) as f:
        text = f.read()
    assert text.lstrip().startswith("Apache License\n")
    assert "Version 2.0, January 2004" in text and "END OF TERMS AND CONDITIONS" in text

