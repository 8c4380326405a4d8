"""Shared fixtures: a Braid region and Debian's redis-server, as real processes.

``redis_proc`` fails (never skips) when redis-server is missing: `make deps`
installs it, and `make test` runs `make deps` first.
"""

from __future__ import annotations

import os

# First, before any test module imports crdt: which build of the compiled modules the tests
# run (BRAID_PURE=1, a stale build; node/build.py)
import node.build  # noqa: F401
import pytest

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


@pytest.fixture(scope="module")
def inproc():
    with InProcessServer() as s:
        yield s


# Hypothesis profiles.  ``ci``: a fixed, reproducible set of examples (derandomized,
# no database) - the first pass of `make test`.  ``fresh``: new random examples
# from the seed given with --hypothesis-seed (the second pass of `make test` draws
# one and prints it; `make test` prints the command that replays it).  ``deep``
# explores many more.  HYPOTHESIS_PROFILE names the profile; without it, ``ci``
# when CI is set and Hypothesis's default (random, with a local database) otherwise.
from hypothesis import settings as _hyp_settings  # noqa: E402

_hyp_settings.register_profile("ci", derandomize=True, database=None)
_hyp_settings.register_profile("fresh", derandomize=False, database=None, print_blob=True)
_hyp_settings.register_profile("deep", max_examples=3000)
HYPOTHESIS_PROFILE = os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "default")
_hyp_settings.load_profile(HYPOTHESIS_PROFILE)


def pytest_report_header(config):
    seed = config.getoption("hypothesis_seed", None)
    line = f"hypothesis profile: {HYPOTHESIS_PROFILE}"
    if seed is not None:
        line += f", seed {seed} (replay: HYPOTHESIS_PROFILE={HYPOTHESIS_PROFILE} pytest --hypothesis-seed={seed} ...)"
    return line
