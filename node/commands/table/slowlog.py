"""The descriptions of the commands node/commands/slowlog.py handles (SLOWLOG, LATENCY).

One :func:`~node.commands.table.vocabulary.describe` call per command or subcommand; the
package's docstring (``node/commands/table/__init__.py``) says what each field means.
"""

from __future__ import annotations

from node.commands.table.vocabulary import describe, integer, string

describe("slowlog", -2, "", "slowlog", group="server", since="2.2.12",
         summary="A container for slow log commands.")
describe("slowlog|get", -2, "admin loading stale", "slowlog", since="2.2.12",
         summary="Returns the slow log's entries.",
         complexity="O(N) where N is the number of entries returned",
         history=[("4.0.0", "Added client IP address, port and name to the reply."),
                  ("8.10.0", "Added original command argument count to the reply.")],
         tips=["request_policy:all_nodes", "nondeterministic_output"],
         arguments=[integer("count", optional=True)])
describe("slowlog|len", 2, "admin loading stale", "slowlog", since="2.2.12",
         summary="Returns the number of entries in the slow log.",
         complexity="O(1)",
         tips=["request_policy:all_nodes", "response_policy:agg_sum", "nondeterministic_output"])
describe("slowlog|reset", 2, "admin loading stale", "slowlog", since="2.2.12",
         summary="Clears all entries from the slow log.",
         complexity="O(N) where N is the number of entries in the slowlog",
         tips=["request_policy:all_nodes", "response_policy:all_succeeded"])
describe("slowlog|help", 2, "loading stale", "slowlog", since="6.2.0",
         summary="Show helpful text about the different subcommands",
         complexity="O(1)")
_LATENCY_TIPS = ["nondeterministic_output", "request_policy:all_nodes", "response_policy:special"]
describe("latency", -2, "", "slowlog", group="server", since="2.8.13",
         summary="A container for latency diagnostics commands.")
describe("latency|latest", 2, "admin noscript loading stale", "slowlog", since="2.8.13",
         summary="Returns the latest latency samples for all events.",
         complexity="O(1)",
         tips=_LATENCY_TIPS)
describe("latency|history", 3, "admin noscript loading stale", "slowlog", since="2.8.13",
         summary="Returns timestamp-latency samples for an event.",
         complexity="O(1)",
         tips=_LATENCY_TIPS,
         arguments=[string("event")])
describe("latency|reset", -2, "admin noscript loading stale", "slowlog", since="2.8.13",
         summary="Resets the latency data for one or more events.",
         complexity="O(1)",
         tips=["request_policy:all_nodes", "response_policy:agg_sum"],
         arguments=[string("event", optional=True, multiple=True)])
describe("latency|graph", 3, "admin noscript loading stale", "slowlog", since="2.8.13",
         summary="Returns a latency graph for an event.",
         complexity="O(1)",
         tips=_LATENCY_TIPS,
         arguments=[string("event")])
describe("latency|doctor", 2, "admin noscript loading stale", "slowlog", since="2.8.13",
         summary="Returns a human-readable latency analysis report.",
         complexity="O(1)",
         tips=_LATENCY_TIPS)
describe("latency|help", 2, "loading stale", "slowlog", since="2.8.13",
         summary="Returns helpful text about the different subcommands.",
         complexity="O(1)")
