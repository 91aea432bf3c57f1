"""Invariant checkers, the stateful search and the mutant zoo (spec/invariants.md).

``checkers.invariants`` -- every invariant as a plain function, and the ``Monitor`` for a run;
``checkers.harness`` -- checked replay, delta-debugging shrinker, counterexample bundles;
``checkers.stateful`` -- the Hypothesis stateful machine and ``search``;
``checkers.strategies`` -- Hypothesis strategies for valid agent traces;
``checkers.mutants`` -- deliberately broken policies that must be caught;
``checkers.report`` -- ``kvmodel check``'s table and the expected verdicts;
``checkers.oracle`` -- another implementation's log judged against a rank policy (policy mode,
``--keep-going``, variants), with ``checkers.oracle_log`` (the log's side: reader, verdicts,
decisions, the puppet) and ``checkers.oracle_invariants`` (invariants-only mode);
``checkers.lockstep`` -- an implementation driven beside the reference, searched and shrunk;
``checkers.adapters`` -- the kit for putting a third-party prefix cache under lockstep.
"""

from __future__ import annotations

from checkers.invariants import INVARIANTS, Monitor
from checkers.structural import (
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
