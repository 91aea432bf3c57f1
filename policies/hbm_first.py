"""HBM-first: Lachesis's baseline (spec/policies.md §hbm-first).

Place in the first tier (HBM) while it has a free block, else the next (HBF); no lifecycle
knowledge; blocks leave only under memory pressure, least recently used first within the first
tier that has an evictable block.
"""

from __future__ import annotations

from typing import ClassVar

from kvmodel.policy import STRUCTURAL_CLAIMS, BasePolicy, RankTerm

__all__ = ["HBMFirst", "HBMFirstStatic"]


class HBMFirst(BasePolicy):
    name: ClassVar[str] = "hbm-first"
    rank: ClassVar[tuple[RankTerm, ...]] = (
        RankTerm("tier"),
        RankTerm("last_access"),
        RankTerm("depth", descending=True),
    )
    claims: ClassVar[frozenset[str]] = STRUCTURAL_CLAIMS


class HBMFirstStatic(HBMFirst):
    """HBM-first whose HBM does not turn over (the Lachesis paper's reading, spec/policies.md
    §hbm-first): under pressure it evicts from the last tier first, so a block written to HBM
    stays there until HBF has nothing evictable."""

    name: ClassVar[str] = "hbm-first-static"
    rank: ClassVar[tuple[RankTerm, ...]] = (
        RankTerm("tier", descending=True),
        RankTerm("last_access"),
        RankTerm("depth", descending=True),
    )
