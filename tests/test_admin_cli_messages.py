"""What braid-admin says when it is given the wrong way in: a --token that is not the cluster's
(used, and refused by the regions, whatever the cluster file holds), and plain text to regions that
answer only over TLS (named as such, with the options that fix it)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from node.activeactive.cluster_config import load
from node.testing import LocalCluster


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(2, tls=True) as c:
        yield c


def admin(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "node.tools.admin_cli", *args], capture_output=True, text=True,
                          timeout=60)


def test_a_wrong_token_with_a_cluster_file_is_used_and_refused(cluster):
    res = admin("--cluster", cluster.file, "--token", "wrong", "status")
    assert res.returncode == 1, res.stdout
    for r in cluster.config.regions:
        assert f"region {r.name} at 127.0.0.1:{r.repl_port} refused the cluster token given" in res.stderr
    assert "not this cluster's" in res.stderr
    right = admin("--cluster", cluster.file, "--token", cluster.config.token, "status")
    assert right.returncode == 0, right.stderr


def test_plain_text_to_a_region_that_answers_only_over_tls_says_so(cluster):
    r = cluster.config.regions[0]
    res = admin("--host", "127.0.0.1", "--port", str(r.repl_port), "--token", cluster.config.token, "status")
    assert res.returncode == 1, res.stdout
    assert f"the region at 127.0.0.1:{r.repl_port} answers only over TLS" in res.stderr, res.stderr
    assert "--tls-ca, --tls-cert and --tls-key" in res.stderr and "unreachable" not in res.stderr

    plain = os.path.join(cluster.dir, "plain.toml")  # the cluster file, saying its links are plain text
    cfg = load(cluster.file)
    cfg.tls = None
    cfg.save(plain)
    res = admin("--cluster", plain, "status")
    assert res.returncode == 1, res.stdout
    assert f"region {r.name} at 127.0.0.1:{r.repl_port} answers only over TLS: give --tls-ca" in res.stderr

    certs = cluster.certs
    given = admin("--host", "127.0.0.1", "--port", str(r.repl_port), "--token", cluster.config.token,
                  "--tls-ca", certs.ca, "--tls-cert", certs.admin[0], "--tls-key", certs.admin[1], "status")
    assert given.returncode == 0, given.stderr
