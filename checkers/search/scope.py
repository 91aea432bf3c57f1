"""The search's scope settings that the command line reads without importing Hypothesis
(spec/invariants.md, Counterexamples: what a verdict of *holds* covers)."""

from __future__ import annotations

__all__ = ["WALK_OPS"]

#: a random walk's default length cap: its length is drawn from [20, cap]; longer walks reach
#: later clocks and fill larger engines (``kvmodel check --walk-ops``)
WALK_OPS = 120
