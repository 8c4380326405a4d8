"""Braid's previous release, built from the commit its git tag names into a virtual environment of its own, for
the mixed-version tests (tests/test_mixed_versions.py).

:func:`build_release` takes the release commit's tree (``git archive``, never the working tree), makes a
virtual environment with this interpreter's Python and ``pip install``s the tree into it with
its pinned dependencies from the package index.  The install is the pure-Python build
(``BRAID_PURE=1`` at build time: setup.py compiles nothing), which runs the same code as the
compiled one and needs no compiler or mypy.  The environment is kept under
``.cache/releases/<the release's commit>`` of this checkout (``BRAID_RELEASE_CACHE`` names another
folder), so only the first run builds it; one is usable once its ``built`` file is written
(last), and a file lock keeps two test processes from building the same one at once.

Anything that goes wrong raises :class:`ReleaseBuildError` with what the failing step said: the
tests fail, never skip, when the previous release cannot be built.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass

from node.testing import interpreter_env

# The release before the one this tree becomes, by tag and by the commit the tag names: moved on
# when a release is cut (CONTRIBUTING.md).  The commit is what is built: it is in main's history,
# so a clone that carries no tags (a branch pushed on its own, `git clone --no-tags`) builds it
# too; the tag, where present, must name the same commit.
PREVIOUS_RELEASE = "v0.1.0"
PREVIOUS_RELEASE_COMMIT = "81d615dfbf7f5d79a8f3d158db119b70b4901b9f"

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD_TIMEOUT_S = 1200  # a cold build downloads every dependency


class ReleaseBuildError(RuntimeError):
    """The previous release could not be built (the step and its output say why)."""


@dataclass(frozen=True)
class Release:
    tag: str
    commit: str
    version: str  # its node/version.py's BRAID_VERSION
    python: str   # the interpreter of its virtual environment: `python -m node` runs that release


def release_cache() -> str:
    return os.environ.get("BRAID_RELEASE_CACHE") or os.path.join(ROOT, ".cache", "releases")


def foreign_env(python: str) -> dict[str, str]:
    """The environment for another release's interpreter (node/testing.py's interpreter_env)."""
    return interpreter_env(python) or dict(os.environ)


def _run(step: str, argv: list[str], cwd: str | None = None, env: dict[str, str] | None = None) -> str:
    try:
        done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ReleaseBuildError(f"{step}: {e}") from None
    if done.returncode != 0:
        raise ReleaseBuildError(f"{step} failed ({' '.join(argv)}, exit status {done.returncode}):\n"
                                f"{(done.stdout + done.stderr)[-4000:]}")
    return done.stdout


@contextlib.contextmanager
def _locked(path: str) -> Iterator[None]:
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _installed_version(python: str, cwd: str) -> str:
    return _run("reading the installed release's version",
                [python, "-c", "import node.version as v; print(v.BRAID_VERSION)"],
                cwd=cwd, env=foreign_env(python)).strip()


def _release_commit(tag: str, commit: str) -> str:
    """``commit``, once this clone is known to hold it and ``tag`` (where this clone has it) names it."""
    try:
        tagged = _run(f"finding the tag {tag}", ["git", "-C", ROOT, "rev-parse", "--verify", "--quiet",
                                                 f"refs/tags/{tag}^{{commit}}"]).strip()
    except ReleaseBuildError:
        tagged = None  # a clone without tags: the commit alone says what to build
    if tagged is not None and tagged != commit:
        raise ReleaseBuildError(f"the tag {tag} names {tagged}, but tests/previous_release.py says {commit}: "
                                "one of them is wrong")
    shallow = _run("asking whether this clone is shallow",
                   ["git", "-C", ROOT, "rev-parse", "--is-shallow-repository"]).strip() == "true"
    return _run(f"finding {tag}'s commit {commit} in this clone"
                + (" (a shallow clone: git fetch --unshallow)" if shallow else ""),
                ["git", "-C", ROOT, "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}"]).strip()


def build_release(tag: str = PREVIOUS_RELEASE, commit: str = PREVIOUS_RELEASE_COMMIT) -> Release:
    """The release tagged ``tag`` (at ``commit``) in its virtual environment: built now, or the cached one."""
    commit = _release_commit(tag, commit)
    home = os.path.join(release_cache(), commit)
    venv, source, marker = os.path.join(home, "venv"), os.path.join(home, "src"), os.path.join(home, "built")
    python = os.path.join(venv, "bin", "python")
    os.makedirs(release_cache(), exist_ok=True)
    with _locked(f"{home}.lock"):
        if not os.path.exists(marker):
            shutil.rmtree(home, ignore_errors=True)  # a build that did not finish
            os.makedirs(home)
            archive = os.path.join(home, "src.tar")
            _run(f"git archive of {tag}", ["git", "-C", ROOT, "archive", "--format=tar", f"--output={archive}", commit])
            with tarfile.open(archive) as tar:
                tar.extractall(source, filter="data")
            os.remove(archive)
            _run("making the virtual environment", [sys.executable, "-m", "venv", venv])
            _run(f"pip install of {tag} and its dependencies",
                 [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", source],
                 cwd=home, env={**foreign_env(python), "BRAID_PURE": "1"})
            shutil.rmtree(source)  # installed: the environment holds a copy
            version = _installed_version(python, home)
            with open(marker, "w") as f:
                f.write(f"{tag} {commit} {version}\n")
    return Release(tag, commit, _installed_version(python, home), python)
