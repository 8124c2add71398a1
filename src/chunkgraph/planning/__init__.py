"""Planning: passes over a Graph that decide where, when and in which order tasks run.

plan(graph, contexts)   fuse -> problem -> strategy (heft | peft | merge | auto) -> Plan
Plan                    per task its context, slot, expected start/finish, subgraph;
                        simulate(), gantt(path), summary()
Context, Link           where tasks run and what moving data between contexts costs
local_contexts()        this machine: one context per NUMA node, one per GPU
order(graph)            the priority order of a one-context run
"""

from chunkgraph.planning._contexts import Context, Link, local_contexts
from chunkgraph.planning._order import order
from chunkgraph.planning._plan import STRATEGIES, Plan, Subgraph, plan
from chunkgraph.planning._rank import bottom_level, path_length, top_level

__all__ = [
    "STRATEGIES",
    "Context",
    "Link",
    "Plan",
    "Subgraph",
    "bottom_level",
    "local_contexts",
    "order",
    "path_length",
    "plan",
    "top_level",
]
