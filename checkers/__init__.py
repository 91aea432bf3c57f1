"""The checkers, in layers; each imports only from the layers below it and from the model.

``checkers.invariants`` -- ground floor: the invariant registry, the state, eviction, placement
and log predicates, the contract model, the :class:`Monitor` and checked replay;
``checkers.search`` -- the stateful machine, the random walk, strategies, shrinking,
counterexample bundles, the mutant zoo and ``kvmodel check``'s report;
``checkers.symbolic`` -- Z3 rank proofs, bounded model checking and k-induction, the exhaustive
``--reach`` search, the symbolic-executable self-check;
``checkers.conformance`` -- the oracle for other implementations' logs, lockstep testing, the
adapter kit, vLLM's block pool, KV events, the pytest plugin;
``checkers.discover`` -- the roof: ``kvmodel discover`` (it reads all of them).

The names most used are here too.
"""

from __future__ import annotations

from checkers.invariants import (
    INVARIANTS,
    Monitor,
    Violation,
    check_accounting,
    check_chains,
    check_no_zombie,
    check_prefix_closed,
)

__all__ = [
    "INVARIANTS",
    "Monitor",
    "Violation",
    "check_accounting",
    "check_chains",
    "check_no_zombie",
    "check_prefix_closed",
]
