"""Shared fixtures: a Braid region and Debian's redis-server, as real processes.

``redis_proc`` fails (never skips) when redis-server is missing: `make deps`
installs it, and `make test` runs `make deps` first.
"""

from __future__ import annotations

import os

import pytest

# First, before any test module imports crdt: which build of the compiled modules the tests
# run (BRAID_PURE=1, a stale build; node/build.py)
import node.build  # noqa: F401
from node.testing import BraidProcess, InProcessServer, RedisProcess


@pytest.fixture(scope="session")
def braid_proc():
    with BraidProcess() as p:
        yield p


@pytest.fixture(scope="session")
def redis_proc():
    with RedisProcess() as p:
        yield p


def _fresh_client(proc):
    """A redis-py client on an emptied server with default stream node sizes."""
    c = proc.client()
    c.flushall()
    c.config_set("stream-node-max-entries", 100)
    c.config_set("stream-node-max-bytes", 4096)
    return c


@pytest.fixture
def braid(braid_proc):
    c = _fresh_client(braid_proc)
    yield c
    c.close()


@pytest.fixture
def ref(redis_proc):
    c = _fresh_client(redis_proc)
    yield c
    c.close()


@pytest.fixture(scope="session")
def spark():
    """One local Spark session for every Spark test (make test installs Java and pyspark)."""
    from pipeline.session import braid_session

    # Python workers import this module's functions (UDFs pickled by reference): give them the repository
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    session = braid_session("braid-tests", "local[2,4]", {"spark.sql.shuffle.partitions": "2"})
    yield session
    session.stop()


@pytest.fixture(scope="module")
def inproc():
    with InProcessServer() as s:
        yield s


# Hypothesis profiles.  ``ci``: a fixed, reproducible set of examples (derandomized,
# no database) - the first pass of `make test`.  ``fresh``: new random examples
# from the seed given with --hypothesis-seed (the second pass of `make test` draws
# one and prints it; `make test` prints the command that replays it).  ``check``: as
# ``ci`` with fewer examples, for `make check` (the pure tests in under a minute; a test
# that sets its own max_examples keeps it).  ``deep`` explores many more.
# HYPOTHESIS_PROFILE names the profile; without it, ``ci`` when CI is set and
# Hypothesis's default (random, with a local database) otherwise.
from hypothesis import settings as _hyp_settings  # noqa: E402

_hyp_settings.register_profile("ci", derandomize=True, database=None)
_hyp_settings.register_profile("fresh", derandomize=False, database=None, print_blob=True)
_hyp_settings.register_profile("check", derandomize=True, database=None, max_examples=20)
_hyp_settings.register_profile("deep", max_examples=3000)
HYPOTHESIS_PROFILE = os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "default")
_hyp_settings.load_profile(HYPOTHESIS_PROFILE)


def pytest_report_header(config):
    seed = config.getoption("hypothesis_seed", None)
    line = f"hypothesis profile: {HYPOTHESIS_PROFILE}"
    if seed is not None:
        line += f", seed {seed} (replay: HYPOTHESIS_PROFILE={HYPOTHESIS_PROFILE} pytest --hypothesis-seed={seed} ...)"
    return line


# What each test needs (tests/kinds.py): exactly one of the markers pure / process / external,
# set here for every test before -m selects on them; a test module KINDS does not name fails the
# collection.  A test marked pure sets up and runs under a guard that fails it if it starts a
# process or opens a socket (tests/purity.py).
from tests import kinds as _kinds  # noqa: E402
from tests.purity import guarded as _guarded  # noqa: E402

_TESTS_DIR = os.path.dirname(os.path.abspath(__file__))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    problems = []
    files = sorted(f[:-3] for f in os.listdir(_TESTS_DIR) if f.startswith("test_") and f.endswith(".py"))
    for module in files:
        if module not in _kinds.KINDS:
            problems.append(f"tests/{module}.py is not classified: add it to KINDS in tests/kinds.py "
                            f"(pure, process or external: see there)")
    for module in sorted(set(_kinds.KINDS) - set(files)):
        problems.append(f"tests/kinds.py classifies {module}, which is no test module: take it out of KINDS")
    seen = {}
    for item in items:
        module = item.path.stem
        name = item.nodeid.split("::", 1)[1].split("[", 1)[0] if "::" in item.nodeid else item.name
        kind = _kinds.kind_of(module, name, frozenset(item.fixturenames))
        if kind is None:
            continue  # reported above
        item.add_marker(kind)
        seen.setdefault(module, getattr(item, "module", None))
    for module, mod in seen.items():
        for name in _kinds.listed_names(module):
            owner = mod
            for part in name.split("::"):
                owner = getattr(owner, part, None)
            if owner is None:
                problems.append(f"tests/kinds.py lists {name} under {module}, which defines no such test: "
                                f"take it out or rename it there too")
    if problems:
        raise pytest.UsageError("test classification (tests/kinds.py):\n  " + "\n  ".join(problems))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    if item.get_closest_marker("pure") is None:
        return (yield)
    with _guarded("setup"):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    if item.get_closest_marker("pure") is None:
        return (yield)
    with _guarded("the test"):
        return (yield)
