"""KVTether's lifecycle eviction with Lachesis's placement: what neither paper has
(spec/policies.md §tether-lachesis).

Placement: Temporary blocks bypass the reuse store (KVTether); everything else is placed by
Lachesis's deterministic segment classes (short-lived HBM-first, long-lived HBF-first). Reclaim:
every dead block after every op. Eviction: KVTether's rank (dead, expired, temporary, then
Suspended by MRU, then Active by LRU).
"""

from __future__ import annotations

from typing import ClassVar

from kvmodel.lifecycle import BlockClass
from kvmodel.policy import Placement, RankTerm
from kvmodel.view import ModelView, NewBlock
from policies.kvtether import KVTether
from policies.lachesis import LachesisDet

__all__ = ["TetherLachesis"]


class TetherLachesis(LachesisDet):
    name: ClassVar[str] = "tether-lachesis"
    rank: ClassVar[tuple[RankTerm, ...]] = KVTether.rank
    claims: ClassVar[frozenset[str]] = KVTether.claims | {"deterministic-placement"}

    #: place reads the block's segment class and lifecycle class only
    compares_times_only: ClassVar[bool] = True
    bypasses: ClassVar[frozenset[BlockClass] | None] = KVTether.bypasses

    def place(self, view: ModelView, block: NewBlock) -> Placement:
        pl = super().place(view, block)
        return Placement(pl.tiers, bypass=block.state is BlockClass.TEMPORARY)
