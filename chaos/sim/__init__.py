"""The deterministic simulation: every region in one process, one seed per schedule.

``run_sim(SimConfig(seed=...))`` runs one schedule and returns its :class:`Outcome`
(verdicts and trace); ``cli_main(argv)`` is ``braid-chaos sim``.  See
chaos/README.md ("braid-chaos sim") and the theory of operation of each module:
world.py (a schedule; its network and links in links.py, its faults in faults.py, its
clock and event queue in scheduler.py), region.py (a real server on a
simulated disk), disk.py, workload.py, waits.py (clients in WAIT), checks.py, bugs.py, cli.py.
"""

from __future__ import annotations

from .run import Outcome, run_sim
from .world import FAULTS, POLICIES, SimConfig


def cli_main(argv: list[str] | None = None) -> int:
    """``braid-chaos sim ...``; returns the exit status (0: every schedule passed)."""
    from .cli import main

    return main(argv)


__all__ = ["FAULTS", "POLICIES", "Outcome", "SimConfig", "cli_main", "run_sim"]
