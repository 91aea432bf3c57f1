"""What a checker hooks into the engine to see the state at the moment of a decision, and the
engine's running totals (spec §metrics of replay): the two records the engine's helpers share
with whoever drives it."""

from __future__ import annotations

from typing import Any, Protocol

import attrs

from kvmodel.ids import BlockId, TierName
from kvmodel.policy import Placement
from kvmodel.view import NewBlock

__all__ = ["EngineProbe", "EngineStats"]


class EngineProbe(Protocol):
    """Hooks for checkers that must see the state at the moment of a decision (``engine`` is
    the :class:`~kvmodel.engine.Engine` deciding; typed loosely so that this module, below the
    engine, never names it).

    One more hook is optional (a probe without it is not told, so probes written before it
    still work): ``before_alloc(engine, block: NewBlock, placement: Placement)``, called when a
    new block's placement is decided, before a slot is sought for it in ``placement.tiers`` (a
    write that finds none is rejected, P7.7)."""

    def before_evict(self, engine: Any, victim: BlockId, tiers: tuple[TierName, ...]) -> None:
        """Called just before ``victim`` is evicted to make room in one of ``tiers``."""

    def after_place(
        self, engine: Any, block: NewBlock, placement: Placement, slot: BlockId
    ) -> None:
        """Called after a new block was placed (before it is recorded as resident)."""


@attrs.define
class EngineStats:
    """Running totals (spec §metrics of replay)."""

    infers: int = 0
    rejected: int = 0
    prompt_tokens: int = 0
    hit_tokens: int = 0
    miss_tokens: int = 0
    output_tokens: int = 0
    evictions: dict[str, int] = attrs.field(factory=dict)
    frees: dict[str, int] = attrs.field(factory=dict)
    dead_resident_max: int = 0
    zombie_block_seconds: float = 0.0
    t_first: float | None = None
    t_last: float | None = None
