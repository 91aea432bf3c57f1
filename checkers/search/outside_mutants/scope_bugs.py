"""Outside mutants whose bug lies past a threshold: a clock, a window, a width the default
search may not reach (the package docstring says what scope each needs)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import ClassVar

from kvmodel.ids import BlockId
from kvmodel.view import BlockInfo, ModelView
from policies.kvtether import KVTether
from policies.lru import LRU

__all__ = [
    "ByteDepthLRU",
    "HourClockLRU",
    "WindowedLRU",
    "WindowedTether",
]


class HourClockLRU(LRU):
    """LRU as code that orders by recency in whole seconds modulo an hour first (a 12-bit field
    of packed block metadata): a block used just after the hour turns looks older than one
    used just before it. It was outside the default search's scope while walk clocks ran for
    minutes; walks drawn at a clock scale find it (spec/invariants.md, swarm testing)."""

    name: ClassVar[str] = "mutant-hour-clock-lru"

    def eviction_order(self, view: ModelView, candidates: Sequence[BlockInfo]) -> Iterable[BlockId]:
        def key(b: BlockInfo) -> tuple[int, float, int, int]:
            return (int(b.last_access) % 3600, b.last_access, -b.depth, int(b.id))

        return [b.id for b in sorted(candidates, key=key)]


class WindowedLRU(LRU):
    """LRU as code that bounds its eviction scan: it sorts the first :attr:`WINDOW` candidates
    by recency (deeper first at a tie) and puts the rest after them as given. Up to 64
    evictable blocks it is LRU; beyond, a block in the window goes before its own child outside
    it. Narrow walks, whose engines hold at most 48 blocks, pass it; the default search's wide
    walks (tiers of up to 128 blocks) find it."""

    name: ClassVar[str] = "mutant-windowed-lru"
    WINDOW: ClassVar[int] = 64

    def eviction_order(self, view: ModelView, candidates: Sequence[BlockInfo]) -> Iterable[BlockId]:
        def key(b: BlockInfo) -> tuple[float, int, int]:
            return (b.last_access, -b.depth, int(b.id))

        head = sorted(candidates[: self.WINDOW], key=key)
        return [b.id for b in head] + [b.id for b in candidates[self.WINDOW :]]


class WindowedTether(KVTether):
    """KVTether as code with a bounded eviction scan: its order over the first :attr:`WINDOW`
    candidates, then the rest as given. Beyond 32 evictable blocks a live block in the window
    goes before a dead one outside it. Narrow walks pass it, though their engines hold up to 48
    blocks (none of their evictions chooses among more than 32); the default search's wide
    walks find it."""

    name: ClassVar[str] = "mutant-windowed-tether"
    WINDOW: ClassVar[int] = 32

    def eviction_order(self, view: ModelView, candidates: Sequence[BlockInfo]) -> Iterable[BlockId]:
        head = list(super().eviction_order(view, candidates[: self.WINDOW]))
        return head + [b.id for b in candidates[self.WINDOW :]]


class ByteDepthLRU(LRU):
    """LRU as code that keeps a block's depth in an 8-bit field of packed block metadata, for
    its deeper-first tie-break: among blocks last used together, depth 256 looks shallower
    than depth 255, and a parent goes before its child. Outside the default search's scope: no
    default walk's context reaches 256 blocks; walks on tiers of up to 512 blocks find it
    (:data:`SCOPE_NEEDED`)."""

    name: ClassVar[str] = "mutant-byte-depth-lru"

    def eviction_order(self, view: ModelView, candidates: Sequence[BlockInfo]) -> Iterable[BlockId]:
        def key(b: BlockInfo) -> tuple[float, int, int]:
            return (b.last_access, -(b.depth % 256), int(b.id))

        return [b.id for b in sorted(candidates, key=key)]
