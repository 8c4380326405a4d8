"""The committed gRPC stubs are what the .proto files generate (python -m proto.build)."""

from __future__ import annotations

from pathlib import Path

from proto import build


def test_stubs_are_fresh(tmp_path):
    build.build(str(tmp_path))
    for name in ("replication_pb2.py", "replication_pb2_grpc.py", "admin_pb2.py", "admin_pb2_grpc.py"):
        fresh = (tmp_path / "proto" / name).read_text()
        committed = (Path(build.ROOT) / "proto" / name).read_text()
        assert fresh == committed, f"proto/{name} is stale: run `python -m proto.build`"
