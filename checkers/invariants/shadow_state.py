"""What the contract model (:class:`checkers.invariants.nversion.Shadow`) holds between ops --
its contexts and its resident blocks, with when each was written and last used, and in which
tier and slot -- and what an observer reads of it: each block's class, holders, suspension and
recency (spec L5.2, PP3), the Dead blocks, and the terms an eviction is judged on. How ops change
it is :mod:`checkers.invariants.nversion`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from checkers.invariants.shadow_terms import (
    BlockFigures,
    EvictionTerms,
    Packer,
    ShadowContext,
    highest,
)
from kvmodel.ids import BlockId, BlockKey, ContextId
from kvmodel.lifecycle import BlockClass

if TYPE_CHECKING:
    from checkers.invariants.shadow_candidates import Pool

__all__ = ["ShadowState"]


class ShadowState:
    """The contract model's contexts and resident blocks, and their figures."""

    def __init__(self, block_size: int, tiers: Sequence[str] = ()) -> None:
        self.bs = block_size
        #: the configured tier order (a block's ``tier_index``, spec PP3)
        self.tier_index = {t: i for i, t in enumerate(tiers)}
        self.ctxs: dict[ContextId, ShadowContext] = {}
        #: B2-B3, the model's own packing; its ``key_depth`` is every key's depth
        self.packer = Packer(block_size)
        self.resident: set[BlockKey] = set()  # indexed full blocks (partial/bypassed ones leave)
        self.touch: dict[BlockKey, float] = {}
        self.touch_op: dict[BlockKey, int] = {}
        self.born: dict[BlockKey, float] = {}
        #: following the engine's log: each written block's tier and slot, as its record says
        self.tier: dict[BlockKey, str] = {}
        self.slot: dict[BlockKey, BlockId] = {}
        #: the evictable blocks kept from one evicting inference to the next (None: none yet)
        self.pool: Pool | None = None

    def held(self) -> set[BlockKey]:
        return {k for c in self.ctxs.values() if c.open for k, _ in c.chain}

    def dead(self) -> set[BlockKey]:
        return self.resident - self.held()

    def figures(
        self,
        key: BlockKey,
        holders: dict[BlockKey, list[ShadowContext]] | None = None,
        pins: dict[ContextId, int] | None = None,
    ) -> BlockFigures:
        """A resident block's figures (L5.2, PP3) now. ``holders`` and ``pins`` (from
        :meth:`_holders`) save recomputing them for every block."""
        d = self.packer.key_depth[key]
        if holders is None or pins is None:
            holders, pins = self._holders()
        hs = holders.get(key, ())
        if len(hs) == 1:  # (most blocks: the general case below, without its sorts)
            (h,) = hs
            state = h.block_class(d, self.bs, pins[h.id])
            ids: tuple[str, ...] = (h.id,)
            wait = h.suspended_at if state is BlockClass.SUSPENDED else None
        else:
            classes = [h.block_class(d, self.bs, pins[h.id]) for h in hs]
            state = highest(classes)
            ids = tuple(sorted(h.id for h in hs))
            waits = [
                h.suspended_at
                for h, cls in zip(hs, classes, strict=True)
                if cls is BlockClass.SUSPENDED and h.suspended_at is not None
            ]
            wait = min(waits) if waits else None
        return BlockFigures(
            d,
            state,
            ids,
            wait,
            self.touch[key],
            self.touch_op[key],
            self.born[key],
        )

    def _holders(
        self, pins: dict[ContextId, int] | None = None
    ) -> tuple[dict[BlockKey, list[ShadowContext]], dict[ContextId, int]]:
        """Every resident block's holders, and every open context's
        :meth:`~ShadowContext.pin_depth` (``pins`` when the caller has them)."""
        holders: dict[BlockKey, list[ShadowContext]] = {}
        if pins is None:
            pins = {c.id: c.pin_depth(self.bs) for c in self.ctxs.values() if c.open}
        for c in self.ctxs.values():
            if c.open:
                for k, _ in c.chain:
                    holders.setdefault(k, []).append(c)
        return holders, pins

    def blocks(self) -> dict[BlockKey, BlockFigures]:
        """Every resident block's figures."""
        holders, pins = self._holders()
        return {k: self.figures(k, holders, pins) for k in self.resident}

    def evictable(
        self,
        key: BlockKey,
        holders: dict[BlockKey, list[ShadowContext]] | None = None,
        pins: dict[ContextId, int] | None = None,
    ) -> EvictionTerms:
        f = self.figures(key, holders, pins)
        return EvictionTerms(
            self.slot[key],
            f.state,
            f.suspend_time,
            f.depth,
            self.tier_index.get(self.tier[key], 0),
            f.last_access,
            f.last_op,
            f.alloc_time,
            tuple(ContextId(h) for h in f.holders),
            key,
        )
