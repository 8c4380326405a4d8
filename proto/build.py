"""Regenerate the Python stubs from the .proto files: ``python -m proto.build``.

The stubs are committed; tests/test_proto_stubs.py fails when they are stale.
"""

from __future__ import annotations

import os
import sys

from grpc_tools import protoc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROTOS = ["proto/replication.proto", "proto/admin.proto"]


def build(out_dir: str = ROOT) -> None:
    for proto in PROTOS:
        args = ["protoc", f"-I{ROOT}", f"--python_out={out_dir}", f"--grpc_python_out={out_dir}",
                os.path.join(ROOT, proto)]
        if protoc.main(args) != 0:
            raise SystemExit(f"protoc failed for {proto}")


if __name__ == "__main__":
    build(sys.argv[1] if len(sys.argv) > 1 else ROOT)
