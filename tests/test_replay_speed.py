"""A start's replay: the bulk path for this region's own operations, and the snapshot that bounds it.

- Replaying a file through the bulk path for ``o`` records (node/persistence/replay.py's
  ``_OwnReplay``) gives the state and causal log the general path gives, operation for
  operation: every envelope's dot, dependencies and bytes.
- ``auto-aof-rewrite-max-replay-ms``: a region snapshots once replaying what it wrote since
  its last snapshot would take a start longer than the bound (estimated per record), and a
  restart then loads the snapshot and replays only what follows; 0 turns the bound off, and
  ``auto-aof-rewrite-percentage 0`` turns every automatic snapshot off, as in Redis.
"""

from __future__ import annotations

import os

import pytest
import redis

from node.persistence import oplog, replay, snapshot
from node.region.config import Config
from node.testing import InProcessServer, wait_until
from tests.test_replay_ops import Region, _write_history


@pytest.mark.parametrize("number", [None, 1])
def test_the_bulk_path_rebuilds_what_the_general_path_rebuilds(tmp_path, monkeypatch, number):
    if number:
        r1, r2 = Region(str(tmp_path / "r1"), 1), Region(str(tmp_path / "r2"), 2)
        _write_history(r1, r2)
    else:
        r1 = Region(str(tmp_path / "r1"), None)
        for i in range(20):
            r1("XADD", "s", "MAXLEN", 15, "*", "n", i)
        r1("XADD", "s", "IDMP", "p", "i", "*", "f", "v")
        r1("XDEL", "s", r1("XRANGE", "s", "-", "+")[0][0])
        r1("XGROUP", "CREATE", "s", "g", "0")
        r1("XREADGROUP", "GROUP", "g", "c", "COUNT", 2, "STREAMS", "s", ">")
    state = r1.state()
    envelopes = r1.envelopes() if number else None
    r1.close()
    bulk = Region(r1.directory, number)
    assert bulk.state() == state
    assert bulk.server.core.loading_report[0].own > 0
    if number:
        assert bulk.envelopes() == envelopes
    # every record the general way
    monkeypatch.setattr(replay._OwnReplay, "replay_run", lambda self, records, start, end: start)
    general = Region(r1.directory, number)
    assert general.state() == bulk.state()
    if number:
        assert general.envelopes() == bulk.envelopes()


def test_the_replay_bound_decides_from_the_records_since_the_last_snapshot():
    config = Config()
    config.set("auto-aof-rewrite-max-replay-ms", 1000)
    per_second = 1_000_000 // oplog.REPLAY_US_PER_RECORD  # records replayed in about a second
    assert oplog.rewrite_due(config, 1000, 0, per_second - 10) is None
    reason = oplog.rewrite_due(config, 1000, 0, per_second + 10)
    assert reason is not None and "auto-aof-rewrite-max-replay-ms 1000" in reason
    # held back while a snapshot for the bound ran recently (the size rule still applies, below)
    assert oplog.rewrite_due(config, 1000, 0, per_second + 10, replay_bound_ready=False) is None
    config.set("auto-aof-rewrite-max-replay-ms", 0)  # no bound: only the size rule
    assert oplog.rewrite_due(config, 1000, 0, 100 * per_second) is None
    assert "grew to" in oplog.rewrite_due(config, 64 * 1024 * 1024, 0, 0)
    assert "grew to" in oplog.rewrite_due(config, 64 * 1024 * 1024, 0, 0, replay_bound_ready=False)
    config.set("auto-aof-rewrite-max-replay-ms", 1)
    config.set("auto-aof-rewrite-percentage", 0)  # Redis's switch for every automatic rewrite
    assert oplog.rewrite_due(config, 64 * 1024 * 1024, 0, 100 * per_second) is None


def test_config_get_and_set_of_the_replay_bound():
    with InProcessServer() as srv:
        c = srv.client()
        assert c.config_get("auto-aof-rewrite-max-replay-ms") == {"auto-aof-rewrite-max-replay-ms": "2000"}
        assert c.config_set("auto-aof-rewrite-max-replay-ms", "250")
        assert c.config_get("auto-aof-rewrite-max-*") == {"auto-aof-rewrite-max-replay-ms": "250"}
        with pytest.raises(redis.ResponseError, match="couldn't be parsed into an integer"):
            c.config_set("auto-aof-rewrite-max-replay-ms", "soon")
        with pytest.raises(redis.ResponseError, match="must be between 0 and 2147483647"):
            c.config_set("auto-aof-rewrite-max-replay-ms", "-1")
        c.close()


def test_a_region_snapshots_before_its_log_would_take_too_long_to_replay(tmp_path):
    directory = str(tmp_path)
    log_dir = os.path.join(directory, "appendonlydir")
    with InProcessServer(Config(dir=directory)) as srv:
        c = srv.client()
        pipe = c.pipeline(transaction=False)
        for i in range(50):  # about 1.75 ms of replay: under the default bound, above 1 ms
            pipe.xadd("s", {"n": i})
        pipe.execute()
        assert snapshot.list_snapshots(log_dir) == []
        c.config_set("auto-aof-rewrite-max-replay-ms", "1")
        wait_until(lambda: snapshot.list_snapshots(log_dir), 20, what="an automatic snapshot")  # the cron's check
        wait_until(lambda: not c.info("persistence")["aof_rewrite_in_progress"], 20, what="the snapshot written")
        taken = snapshot.list_snapshots(log_dir)[0][0]
        assert taken >= 50
        c.config_set("auto-aof-rewrite-max-replay-ms", "0")  # no more snapshots: the tail stays in the log
        c.xadd("s", {"n": "after"})
        entries = c.xrange("s")
        c.close()
    with InProcessServer(Config(dir=directory)) as srv:
        report = srv.server.core.loading_report[0]
        assert report.snapshot_record == taken
        assert report.records == srv.server.core.oplog.last_record - taken >= 1  # only what follows the snapshot
        c = srv.client()
        assert c.xrange("s") == entries
        c.close()
