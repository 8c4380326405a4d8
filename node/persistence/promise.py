"""A region's membership promise, kept on disk (node/activeactive/region.py, crdt/membership.py).

A voter that promised a change and then restarted must still hold that promise - above
all a forced removal's hold on the removed region's operations: forgetting it, the
region could take operations past the frozen point the others agreed on.  So the
promise (and the hold) is written, atomically and fsynced, before the promise is
answered, and read back at start.  ``membership-promise.json`` in the data directory::

    {"epoch": 4, "promised": {"epoch": 5, "kind": "force-remove", "number": 3, ...},
     "answered": 120, "reported": false, "holding": {"3": 120},
     "lapsed": [{"proposal": {...}, "answered": 118, "reported": true}], "refusing": [[0, 77]]}

``epoch`` is the region's membership epoch when it was written: a region that starts
at a newer epoch (it learned the outcome meanwhile) drops what is stored.  The rest is
what settling a promise its coordinator left needs (crdt/membership.py): what the
promise answered, whether a settling voter was told it is held, promises that lapsed,
and proposals the region refuses for good.  A file without them (written before they
were kept) reads as none.
"""

from __future__ import annotations

import json
import os

from crdt.membership import Change, Proposal

FILE = "membership-promise.json"


class PromiseFileError(ValueError):
    """The promise file cannot be read: the region does not start (it names the file)."""


def proposal_to_dict(p: Proposal) -> dict:
    c = p.change
    return {"epoch": p.epoch, "kind": c.kind, "number": c.number, "name": c.name, "endpoint": list(c.endpoint),
            "ballot": list(p.ballot)}


def proposal_from_dict(d: dict) -> Proposal:
    ballot = d["ballot"]  # [coordinator's number, its counter], as proposal_to_dict writes it
    change = Change(str(d["kind"]), int(d["number"]), str(d.get("name", "")), endpoint_from_json(d.get("endpoint", ())))
    return Proposal(int(d["epoch"]), change, (int(ballot[0]), int(ballot[1])))


def endpoint_from_json(endpoint: list) -> tuple:
    """A join's endpoint as JSON keeps it: (host, port, repl_port), and on a sharded database
    every shard's ports, two more lists - tuples again, so that the proposal read back equals
    the one promised."""
    return tuple(tuple(x) if isinstance(x, list) else x for x in endpoint)


class FilePromiseStore:
    """The promise in ``<directory>/membership-promise.json``."""

    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, FILE)

    def save(self, state: dict | None) -> None:
        if state is None:
            try:
                os.remove(self.path)
            except FileNotFoundError:
                pass
            return
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        tmp = f"{self.path}.tmp"
        with open(tmp, "w") as f:
            json.dump(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def load(self) -> dict | None:
        """The stored state; PromiseFileError when the file cannot be one."""
        try:
            with open(self.path) as f:
                state = json.load(f)
            if state is not None:
                int(state["epoch"])
                if state.get("promised"):
                    proposal_from_dict(state["promised"])
                {int(o): int(n) for o, n in state.get("holding", {}).items()}
                int(state.get("answered", 0))
                for lapsed in state.get("lapsed", ()):
                    proposal_from_dict(lapsed["proposal"])
                    int(lapsed["answered"])
                {(int(b[0]), int(b[1])) for b in state.get("refusing", ())}
            return state
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise PromiseFileError(f"{self.path} is not a membership promise ({type(e).__name__}: {e}); "
                                   "it is written only while a membership change is under way: if none is, "
                                   "delete it") from None
