"""Replication links over real gRPC on loopback (node/transport/replication.py).

Three hubs, each with its own causal log: operations issued at one region reach
the others exactly once; with the 1–3 link absent, 1 and 3 still converge
through 2 (relay); a peer with a wrong token or cluster id is refused and
nothing it sent is applied.
"""

from __future__ import annotations

import asyncio

import pytest

from crdt.causal import CausalLog
from node.transport.replication import ReplicationHub

TOKEN = "s3cret"


def make_hub(region: int, token: str = TOKEN, cluster: str = "c1") -> tuple[ReplicationHub, list]:
    applied: list = []
    hub = ReplicationHub(region, cluster, "db", token, CausalLog(region), lambda env: applied.append(env))
    return hub, applied


async def until(predicate, timeout: float = 15.0) -> None:
    """Poll with a deadline (no sleeping as synchronisation)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise TimeoutError("condition not reached")
        await asyncio.sleep(0.01)


def run(coro):
    return asyncio.run(coro)


def test_relay_heals_a_cut_link():
    async def scenario():
        hubs = {r: make_hub(r) for r in (1, 2, 3)}
        ports = {r: await h.serve() for r, (h, _) in hubs.items()}
        try:
            # links 1–2 and 2–3 only (the lower number dials); no 1–3 link
            hubs[1][0].dial(2, f"127.0.0.1:{ports[2]}")
            hubs[2][0].dial(3, f"127.0.0.1:{ports[3]}")
            for i in range(50):
                hubs[1][0].issue(b"from-1-%d" % i)
                hubs[3][0].issue(b"from-3-%d" % i)
            want = {(o, n) for o in (1, 3) for n in range(1, 51)}
            await until(lambda: all(h.causal.vv.get(1) == 50 and h.causal.vv.get(3) == 50
                                    for h, _ in hubs.values()))
            assert {e.dot for e in hubs[2][1]} == want
            assert {e.dot for e in hubs[1][1]} == {d for d in want if d[0] == 3}
            assert {e.dot for e in hubs[3][1]} == {d for d in want if d[0] == 1}
            for _h, applied in hubs.values():
                assert len(applied) == len({e.dot for e in applied})  # exactly once
        finally:
            for h, _ in hubs.values():
                await h.stop()

    run(scenario())


@pytest.mark.parametrize("token,cluster", [("wrong", "c1"), (TOKEN, "other-cluster")])
def test_mismatched_peer_is_refused(token, cluster):
    async def scenario():
        good, good_applied = make_hub(1)
        bad, bad_applied = make_hub(2, token=token, cluster=cluster)
        port = await good.serve()
        try:
            good.issue(b"secret-op")
            bad.issue(b"intruder-op")
            dialer = ReplicationHub(3, cluster, "db", token, bad.causal, lambda e: bad_applied.append(e))
            dialer.dial(1, f"127.0.0.1:{port}")
            await until(lambda: good.refused >= 1 and dialer.denied >= 1)
            assert good_applied == [] and good.causal.vv == {1: 1}
            assert bad_applied == [] and bad.causal.vv == {2: 1}
            await dialer.stop()
        finally:
            await good.stop()
            await bad.stop()

    run(scenario())


def test_link_comes_back_after_the_peer_restarts():
    async def scenario():
        one, applied_one = make_hub(1)
        two, applied_two = make_hub(2)
        port = await two.serve()
        await one.serve()
        one.dial(2, f"127.0.0.1:{port}")
        try:
            one.issue(b"before")
            await until(lambda: two.causal.vv.get(1) == 1)
            await two.stop()  # the peer goes away, keeping its state (its causal log)
            one.issue(b"while-down")
            revived = ReplicationHub(2, "c1", "db", TOKEN, two.causal, lambda e: applied_two.append(e))
            await revived.serve(port=port)
            revived.issue(b"after")
            await until(lambda: revived.causal.vv.get(1) == 2 and one.causal.vv.get(2) == 1)
            assert [e.op for e in applied_two] == [b"before", b"while-down"]
            assert [e.op for e in applied_one] == [b"after"]
            await revived.stop()
        finally:
            await one.stop()

    run(scenario())


def test_lag_counts_unacknowledged_operations_and_their_age():
    async def scenario():
        hub, _ = make_hub(1)
        for op in (b"a", b"b", b"c"):
            hub.issue(op)
        hub.arrivals[:] = [100.0, 101.0, 102.0]  # when each was issued (monotonic seconds)
        from node.transport.replication import Link

        link = Link(hub, 2, {})
        assert link.lag(103.0) == (3, 3000.0)
        link.acked = {1: 2}
        assert link.lag(103.0) == (1, 1000.0)
        link.acked = {1: 3}
        assert link.lag(103.0) == (0, 0.0)

    run(scenario())


def test_a_dialer_keeps_dialing_whatever_ended_its_link():
    """A link that fails for a reason of its own (not gRPC's) is dialed again."""
    async def scenario():
        one, got_one = make_hub(1)
        two, got_two = make_hub(2)
        port = await two.serve()
        failures = {"left": 1}
        real = one.deliver

        def flaky_deliver(env):
            if failures["left"]:
                failures["left"] -= 1
                raise ValueError("a bug while applying")  # ends the link at region 1
            real(env)

        one.deliver = flaky_deliver
        one.dial(2, f"127.0.0.1:{port}")
        two.issue(b"op-1")
        await until(lambda: len(got_one) == 1)  # after the failure, the link came back and delivered
        assert failures["left"] == 0
        await one.stop()
        await two.stop()

    run(scenario())
