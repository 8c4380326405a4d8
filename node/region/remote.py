"""Other regions' operations applied by the region core, a run at a time.

Theory of operation
-------------------
The causal log hands the core runs of envelopes ready in order (``RegionCore.apply_remote_run``);
:func:`apply_run` applies each - nearly always an XADD without IDMP, appended without building
the operation - then writes them to the operation log as one record, tells the Active-Active
part they may be relayed once logged, and serves the readers blocked on their keys (once per
link batch).  Whatever fails - decoding or applying one, logging them, serving the readers -
stops the region (fail-stop): skipping an operation would leave this region diverged.
``ApplyFailed.applied`` says how many of the run count as applied (those logged before the
failure).

Every ``crdt-repl-apply-yield-ops`` operations the region offers its core to other runnable
processes (``offer_cpu``), never while replaying the log at start.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from crdt.causal import Envelope
from node.activeactive import opcodec
from node.region.supervision import ApplyFailed, InjectedFault

if TYPE_CHECKING:
    from node.region.core import RegionCore


def apply_run(core: RegionCore, run: list[Envelope]) -> None:
    """Apply and log ``run`` (see the module's docstring); ``ApplyFailed.applied`` says how many
    of it count as applied when something fails."""
    db, decode_plain_add = core.db, opcodec.decode_plain_add
    aa = core.member()
    applied = counted = at = 0
    offer_cpu = core.offer_cpu
    every = core.apply_yield_ops if offer_cpu is not None and not core.replaying else 0
    failure: Exception | None = None
    try:
        for env in run:
            if every and applied and applied % every == 0 and offer_cpu is not None:
                offer_cpu()
            if core.apply_faults:  # DEBUG APPLY-FAIL
                core.apply_faults -= 1
                raise InjectedFault("DEBUG APPLY-FAIL")
            try:  # nearly always an XADD without IDMP: appended without building the operation
                add = decode_plain_add(env.op)
            except msgspec.ValidationError:
                db.apply_remote(opcodec.decode(env.op))
            else:
                db.append_remote(add[1], add[2], add[3], add[4])
            applied += 1
    except Exception as e:
        failure, at = e, applied
    try:
        if applied and core.oplog is not None and not core.replaying:
            core.oplog.log_remote_run(run[:applied])
            aa.logged(core.oplog.last_record, aa.causal.end + applied)  # relayed only once logged here
            core.records_appended()
        counted = applied
        if failure is None and not aa.hub.in_batch:  # a link's batch wakes the readers once, at its end
            core.keys_ready()  # a reader served raising here must not leave them applied but uncounted
    except Exception as e:
        if failure is None:
            failure, at = e, min(counted, len(run) - 1)
    if failure is not None:
        env = run[at]
        reason = (f"cannot apply operation {env.origin}.{env.n} of region {env.origin}: "
                  f"{type(failure).__name__}: {failure}")
        if not core.replaying:  # a replay reports it as a record it cannot load
            core.fail_stop(reason, failure)
        raise ApplyFailed(reason, counted) from failure
