"""Shared fixtures: a Braid region and Debian's redis-server, as real processes.

``redis_proc`` fails (never skips) when redis-server is missing: `make deps`
installs it, and `make test` runs `make deps` first.
"""

from __future__ import annotations

import os

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


# Hypothesis: CI runs a fixed, reproducible set of examples; a developer's run
# explores new ones (HYPOTHESIS_PROFILE=deep explores many more).
from hypothesis import settings as _hyp_settings  # noqa: E402

_hyp_settings.register_profile("ci", derandomize=True, database=None)
_hyp_settings.register_profile("deep", max_examples=3000)
_hyp_settings.load_profile("ci" if os.environ.get("CI") else os.environ.get("HYPOTHESIS_PROFILE", "default"))
