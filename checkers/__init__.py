"""Invariant checkers over the model state and its observation log (spec/invariants.md)."""

from __future__ import annotations

from checkers.structural import (
    Violation,
    check_accounting,
    check_chains,
    check_no_zombie,
    check_prefix_closed,
)

__all__ = [
    "Violation",
    "check_accounting",
    "check_chains",
    "check_no_zombie",
    "check_prefix_closed",
]
