"""msgpack encoding that raises MemoryError when memory runs out, instead of crashing.

Why not ``msgspec.msgpack.Encoder().encode``
-------------------------------------------
msgspec's encoders that return ``bytes`` (``Encoder.encode``, ``msgspec.msgpack.encode``,
and their JSON counterparts; msgspec 0.22.0, and its main branch as of this writing) write
into a bytes object that starts at 32 bytes (``ENC_INIT_BUFSIZE``) and grows it with
CPython's ``_PyBytes_Resize``.  When that allocation fails, ``_PyBytes_Resize`` frees the
object and sets the pointer to NULL, as documented; msgspec's error path
(``encoder_encode_common``) then runs ``Py_DECREF(state.output_buffer)`` on that NULL: a
segmentation fault in ``Encoder_encode`` instead of a MemoryError.  Nearly every encoding
grows its buffer, so any of them can crash a process that runs out of memory (a region
under ``ulimit -v``/``prlimit --as`` died that way while writing a snapshot, with nothing
in its log).

``Encoder.encode_into`` writes into a ``bytearray`` and grows it with
``PyByteArray_Resize``, which leaves the bytearray as it was when the allocation fails:
the encoder raises MemoryError, which the region turns into a fail-stop that says it ran
out of memory (node/region/supervision.py).  :func:`encoder` gives an ``encode`` function built on
it; :func:`encode_buffer` hands back the bytearray itself, for a large encoding (a snapshot)
that need not be copied into ``bytes``.

The cost: a bytearray and one copy of the output per call (about 0.1 µs for a log record
of one XADD).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec


def encoder(enc: msgspec.msgpack.Encoder | None = None) -> Callable[[Any], bytes]:
    """``enc.encode`` (a default ``msgspec.msgpack.Encoder`` if None), raising MemoryError
    where msgspec's own would crash the process."""
    encode_into = (enc if enc is not None else msgspec.msgpack.Encoder()).encode_into

    def encode(obj: Any) -> bytes:
        buf = bytearray()
        encode_into(obj, buf)
        return bytes(buf)

    return encode


def encode_buffer(enc: msgspec.msgpack.Encoder, obj: Any) -> bytearray:
    """``obj`` encoded by ``enc`` into a new bytearray (MemoryError if memory runs out)."""
    buf = bytearray()
    enc.encode_into(obj, buf)
    return buf
