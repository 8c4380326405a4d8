"""Benchmark: parsing client requests, the Python parser against the hiredis one.

``python -m bench.parse [--reads N] [--rounds R]``

Feeds ``XADD bench:s * f1 abcdefghijkl f2 abcdefghijkl`` (the request of
``bench.run``'s XADD scenarios) to ``node.resp.parser.RequestParser`` and to
``HiredisRequestParser``, one request per read (redis-benchmark ``-P 1``) and 16 per
read (``-P 16``), taking every command after each read as the server does, and
prints the CPU time per request (``time.process_time``, so that other work on the
machine moves the numbers less), the median of R rounds run alternately.  A
measurement: nothing passes or fails.
"""

from __future__ import annotations

import argparse
import statistics
import time

from node.resp.parser import HiredisRequestParser, RequestParser

REQUEST = (b"*7\r\n$4\r\nxadd\r\n$7\r\nbench:s\r\n$1\r\n*\r\n$2\r\nf1\r\n$12\r\nabcdefghijkl\r\n"
           b"$2\r\nf2\r\n$12\r\nabcdefghijkl\r\n")


def per_request_us(cls: type[RequestParser], per_read: int, reads: int) -> float:
    parser = cls(auth_required=lambda: False)
    data = REQUEST * per_read
    start = time.process_time()
    for _ in range(reads):
        parser.feed(data)
        while parser.next_command() is not None:
            pass
    return (time.process_time() - start) / (reads * per_read) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reads", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    print("| read | Python (µs/request) | hiredis (µs/request) | hiredis / Python |")
    print("| --- | ---: | ---: | ---: |")
    for per_read in (1, 16):
        times: dict[type[RequestParser], list[float]] = {RequestParser: [], HiredisRequestParser: []}
        for _ in range(args.rounds):
            for cls, results in times.items():
                results.append(per_request_us(cls, per_read, args.reads))
        python = statistics.median(times[RequestParser])
        native = statistics.median(times[HiredisRequestParser])
        print(f"| {per_read} request{'s' if per_read > 1 else ''} | {python:.2f} | {native:.2f} "
              f"| {native / python:.2f} |")


if __name__ == "__main__":
    main()
