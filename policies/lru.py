"""LRU: semantics-blind recency eviction, what LMCache does by default (spec/policies.md §lru).

Rank: least recently used first; among equally recent blocks the deeper (tail) block first, so a
chain is evicted from its end and no resident block loses its parent (a parent is used whenever
its child is, so it is never less recent).
"""

from __future__ import annotations

from typing import ClassVar

from kvmodel.policy import STRUCTURAL_CLAIMS, BasePolicy, RankTerm

__all__ = ["LRU"]


class LRU(BasePolicy):
    name: ClassVar[str] = "lru"
    rank: ClassVar[tuple[RankTerm, ...]] = (
        RankTerm("last_access"),
        RankTerm("depth", descending=True),
    )
    claims: ClassVar[frozenset[str]] = STRUCTURAL_CLAIMS | frozenset(
        {
            "prefix-closed-residency",
        }
    )
