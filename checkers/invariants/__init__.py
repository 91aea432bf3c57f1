"""The ground floor: what a correct run is (spec/invariants.md).

``registry`` -- every invariant's name in report order, the structural claims, the findings;
``structural`` -- the *state* invariants (accounting, chains, prefix closure, no zombie);
``predicates`` -- the *eviction*, *placement* and *log* invariants as plain functions;
``nversion`` -- the contract model: a second, independent computation the engine is held to;
``contract`` -- the engine run beside it and compared (``compare``, ``diverge``, the finding);
``monitor`` -- the :class:`Monitor` that applies them to one engine run;
``replay`` -- checked replay (``check_ops``) and the nondeterminism check.

Imports here point only at :mod:`kvmodel`; every checker above reads its invariants from here.
"""

from __future__ import annotations

from checkers.invariants.monitor import Monitor
from checkers.invariants.predicates import (
    BLOCK,
    CONCRETE,
    ORDER,
    BlockAt,
    BlockTerms,
    EvictionTerms,
    Logic,
    evict_live_before_dead,
    evict_mru,
    evict_priority,
    log_bypass,
    log_pinned,
    log_reclaim_dead,
    place_deterministic,
    reachable,
)
from checkers.invariants.registry import (
    FINDINGS,
    INVARIANTS,
    SITUATIONS,
    STRUCTURAL,
    invariant_names,
)
from checkers.invariants.structural import (
    Violation,
    check_accounting,
    check_chains,
    check_no_zombie,
    check_prefix_closed,
)

__all__ = [
    "BLOCK",
    "CONCRETE",
    "FINDINGS",
    "INVARIANTS",
    "ORDER",
    "SITUATIONS",
    "STRUCTURAL",
    "BlockAt",
    "BlockTerms",
    "EvictionTerms",
    "Logic",
    "Monitor",
    "Violation",
    "check_accounting",
    "check_chains",
    "check_no_zombie",
    "check_prefix_closed",
    "evict_live_before_dead",
    "evict_mru",
    "evict_priority",
    "invariant_names",
    "log_bypass",
    "log_pinned",
    "log_reclaim_dead",
    "place_deterministic",
    "reachable",
]
