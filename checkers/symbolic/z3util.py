"""Z3 solvers with a deterministic budget.

A wall-clock timeout makes a rung depend on the machine's load: the same query can be
``bounded to depth 8`` on an idle machine and ``unknown at depth 7`` on a busy one. Every solver
the checkers build therefore carries a Z3 *resource limit* (``rlimit``: a count of the solver's
internal steps, relative to each ``check``), which gives the same answer for the same input
everywhere; the wall-clock timeout stays only as a safety net far above it. Measured on the
default fragment: a BMC or k-induction query takes 0.1-1.1 million units (0.02-0.1 s).
"""

from __future__ import annotations

from typing import TypeVar

import z3

from checkers.invariants import Logic
from kvmodel.lifecycle import BlockClass

__all__ = ["RLIMIT", "TIMEOUT_MS", "Z3_LOGIC", "limited", "rlimit_count", "unknown_reason"]

#: resource units per ``check`` (about 50x the largest query on the default fragment)
RLIMIT = 50_000_000
#: the wall-clock safety net, in milliseconds
TIMEOUT_MS = 600_000


S = TypeVar("S", z3.Solver, z3.Optimize)


def limited(solver: S, *, rlimit: int = RLIMIT, timeout_ms: int = TIMEOUT_MS) -> S:
    """``solver`` with the deterministic resource limit and the wall-clock safety net set."""
    solver.set("rlimit", rlimit)
    solver.set("timeout", timeout_ms)
    return solver


def rlimit_count() -> int:
    """Z3's resource units spent so far in this process (one counter for every solver): the
    difference around a computation is what it cost (what ``rlimit`` bounds). The same queries
    in a fresh process cost the same on any machine; repeated in one process they may cost a
    little less (Z3 keeps what it built)."""
    stats = z3.Solver().statistics()
    return int(stats.get_key_value("rlimit count")) if "rlimit count" in list(stats.keys()) else 0


def unknown_reason(solver: z3.Solver | z3.Optimize) -> str:
    """Why ``check`` said unknown: ``resource limit`` (deterministic), ``timeout`` (load
    dependent) or Z3's own words."""
    why = str(solver.reason_unknown())
    if "timeout" in why:
        return "timeout"
    if any(w in why for w in ("resource", "rlimit", "canceled")):  # Z3 says "canceled"
        return "resource limit"
    return why


def _z3_logic() -> Logic:
    classes = list(BlockClass)
    return Logic(
        lambda s, c: s == z3.IntVal(classes.index(c)),
        z3.Or,
        z3.And,
        lambda x, y: x > y,
        z3.Not,
    )


#: :class:`checkers.invariants.Logic` over Z3 terms (a class is its index in ``BlockClass``)
Z3_LOGIC = _z3_logic()
