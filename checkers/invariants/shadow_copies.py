"""The contract model's own account of copies in lower tiers (spec/movement.md MV1-MV6).

Independent of :mod:`kvmodel.copies`: each tier's copies are a dict from key to the stamp of its
last use (a counter, not an ordered dict); liveness is recomputed from the contract model's
contexts (each open context's packed keys, re-packed) when a record needs it, not kept by
reference counts; the first copy to leave for room is found by a scan. What the engine's copy
store decides that the contract does not fix -- the order among Dead copies -- is admitted
whichever it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from collections.abc import Set as AbstractSet

from kvmodel.ids import BlockKey

__all__ = ["ShadowCopies"]


class ShadowCopies:
    """Per tier, key -> the stamp of the copy's last use (written, renewed or read)."""

    def __init__(self, tiers: Sequence[str], exclusive: frozenset[str]) -> None:
        self.tiers = tuple(tiers)
        self.exclusive = exclusive
        self.held: dict[str, dict[BlockKey, int]] = {t: {} for t in tiers}
        self._stamp = 0

    def count(self, tier: str) -> int:
        return len(self.held.get(tier, {}))

    def has(self, key: BlockKey, tier: str) -> bool:
        return key in self.held.get(tier, {})

    def source(self, key: BlockKey) -> str | None:
        """The first tier in configuration order with a copy of ``key`` (MV4)."""
        return next((t for t in self.tiers if key in self.held[t]), None)

    def use(self, key: BlockKey, tier: str) -> None:
        self._stamp += 1
        self.held[tier][key] = self._stamp

    def drop(self, key: BlockKey, tier: str) -> None:
        del self.held[tier][key]

    def first_out(self, tier: str, live: AbstractSet[BlockKey]) -> set[BlockKey]:
        """The copies of ``tier`` admissible as the next to leave for room (MV5): every Dead one
        if there is one (the contract does not order them), else the least recently used."""
        held = self.held[tier]
        dead = {k for k in held if k not in live}
        if dead:
            return dead
        return {min(held, key=held.__getitem__)} if held else set()

    def keys(self) -> list[tuple[BlockKey, str]]:
        return [(k, t) for t in self.tiers for k in self.held[t]]
