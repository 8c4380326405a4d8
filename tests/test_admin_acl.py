"""braid-admin acl: users defined once, the same at every region of a real three-region cluster."""

from __future__ import annotations

import os

import pytest
import redis

from node.testing import LocalCluster

REGIONS = ("region-1", "region-2", "region-3")


@pytest.fixture(scope="module")
def cluster():
    c = LocalCluster(3, region_settings={name: {"aclfile": f"{name}.acl"} for name in REGIONS})
    for name in REGIONS:  # a region's ACL file must exist when it starts, as Redis's must
        open(os.path.join(c.dir, f"{name}.acl"), "w").close()
    c.start()
    try:
        yield c
    finally:
        c.stop()


def admin(cluster, *argv: str) -> tuple[int, str]:
    """braid-admin's exit status and output, its lines wrapped at the console's width joined again."""
    code, out = cluster.admin(*argv)
    return code, " ".join(out.split())


def acl_file(cluster, name: str) -> str:
    with open(os.path.join(cluster.dir, f"{name}.acl")) as f:
        return f.read()


def login(cluster, name: str, user: str, password: str) -> redis.Redis:
    c = cluster.proc(name).client(username=user, password=password)
    c.ping()  # the AUTH happens on the first command
    return c


def users(cluster, name: str) -> list[bytes]:
    with cluster.proc(name).client() as c:
        return c.execute_command("ACL", "USERS")


def test_a_user_set_once_logs_in_everywhere_with_its_permissions(cluster):
    code, out = admin(cluster, "acl", "setuser", "alice", "on", ">s3cret", "~app:*", "-@all", "+xadd", "+xrange",
                              "+ping")
    assert code == 0, out
    assert "user alice set at 3 regions" in out and "saved to each region's ACL file" in out
    for name in REGIONS:
        with login(cluster, name, "alice", "s3cret") as c:
            assert c.xadd("app:rides", {"f": "v"})
            assert c.xrange("app:rides")
            with pytest.raises(redis.exceptions.NoPermissionError, match="No permissions to access a key"):
                c.xadd("other:rides", {"f": "v"})
            with pytest.raises(redis.exceptions.NoPermissionError, match="'xlen' command"):
                c.xlen("app:rides")
        with pytest.raises(redis.exceptions.AuthenticationError):
            login(cluster, name, "alice", "wrong")
        assert "user alice on sanitize-payload #" in acl_file(cluster, name)  # a restart keeps it
    code, out = admin(cluster, "acl", "list")
    assert code == 0, out
    assert "users at every region:" in out and "user alice on" in out


def test_a_rule_one_region_refuses_changes_no_region(cluster):
    # carol exists at region-3 only, with a password: removing it (<only3) is a rule region-3
    # accepts and the others refuse (no such password), so nothing may change, region-3 included
    with cluster.proc("region-3").client() as c:
        c.execute_command("ACL", "SETUSER", "carol", ">only3")
        before = c.execute_command("ACL", "LIST")
    code, out = admin(cluster, "acl", "setuser", "carol", "on", "<only3", "+ping")
    assert code == 1
    assert "no region changed" in out and "region-1" in out and "region-2" in out
    with cluster.proc("region-3").client() as c:
        assert c.execute_command("ACL", "LIST") == before
    assert b"carol" not in users(cluster, "region-1") and b"carol" not in users(cluster, "region-2")
    code, out = admin(cluster, "acl", "setuser", "carol", "on", "+nosuchcommand")
    assert code == 1 and "Unknown command" in out
    assert "carol" not in acl_file(cluster, "region-3")
    with cluster.proc("region-3").client() as c:  # (this test's own user, gone again)
        c.execute_command("ACL", "DELUSER", "carol")


def test_a_region_down_is_named_and_acl_sync_gives_it_the_users(cluster):
    down = cluster.proc("region-3")
    down.stop_keeping_data()
    try:
        code, out = admin(cluster, "acl", "setuser", "dave", "on", ">d4ve", "+ping")
        assert code == 1
        assert "user dave set at 2 regions" in out
        assert "unreachable: region-3" in out and "braid-admin acl sync" in out
    finally:
        down.restart()
    assert b"dave" not in users(cluster, "region-3")
    code, out = admin(cluster, "acl", "list")
    assert code == 1 and "region-3 differs (lacks dave)" in out and "acl sync" in out
    code, out = admin(cluster, "acl", "sync")
    assert code == 0, out
    assert "at 1 region (region-3)" in out
    assert admin(cluster, "acl", "list")[0] == 0
    down.kill()  # what the sync made is on disk: a restart keeps it
    down.restart()
    with login(cluster, "region-3", "dave", "d4ve") as c:
        assert c.ping()


def test_deluser_removes_the_user_everywhere_and_closes_its_clients(cluster):
    assert admin(cluster, "acl", "setuser", "erin", "on", ">3rin", "+ping")[0] == 0
    erin = login(cluster, "region-1", "erin", "3rin")
    try:
        code, out = admin(cluster, "acl", "deluser", "erin")
        assert code == 0, out
        for name in REGIONS:
            assert b"erin" not in users(cluster, name)
            assert "erin" not in acl_file(cluster, name)
        with pytest.raises(redis.exceptions.ConnectionError):
            erin.execute_command("PING")  # (no retry: the server closed it)
    finally:
        erin.close()
    code, out = admin(cluster, "acl", "deluser", "default")
    assert code == 2 and "'default' user cannot be removed" in out
