"""The search's scope settings that the command line reads without importing Hypothesis
(spec/invariants.md, Counterexamples: what a verdict of *holds* covers)."""

from __future__ import annotations

import attrs

from kvmodel.errors import ConfigError

__all__ = [
    "DEFAULT_SCOPE",
    "MIN_TIER_BLOCKS",
    "TIER_BLOCKS",
    "WALK_OPS",
    "WIDE_EVERY",
    "WIDE_TIER_BLOCKS",
    "WalkScope",
]

#: a random walk's default length cap: its length is drawn from [20, cap]; longer walks reach
#: later clocks and fill larger engines (``kvmodel check --walk-ops``)
WALK_OPS = 120
#: the smallest tier a swarm engine draws, and the largest of a *narrow* one: each tier of the
#: stateful machine's drawn engines, and of three random walks in four, holds 2-16 blocks
MIN_TIER_BLOCKS = 2
TIER_BLOCKS = 16
#: one random walk in WIDE_EVERY is *wide*: its engine's tiers hold up to the scope's
#: ``tier_blocks``, by default WIDE_TIER_BLOCKS (``kvmodel check --tier-blocks``). Small tiers
#: make pressure common; only large ones put an eviction to a choice among more blocks than a
#: bounded scan looks at (spec/invariants.md, the search's scope)
WIDE_EVERY = 4
WIDE_TIER_BLOCKS = 128


@attrs.frozen
class WalkScope:
    """What each random walk may reach: at most ``ops`` ops (its length is drawn from
    [20, ``ops``]), on an engine whose tiers hold 2-16 blocks each (:data:`TIER_BLOCKS`), or
    2-``tier_blocks`` in one walk in :data:`WIDE_EVERY` (unless the search fixes one engine).
    Every other draw of a walk is made as it is whatever the scope: a narrow walk is the same
    walk in every scope of its length, and ``tier_blocks=16`` makes every walk narrow."""

    ops: int = WALK_OPS
    tier_blocks: int = WIDE_TIER_BLOCKS

    def __attrs_post_init__(self) -> None:
        if self.ops < 1:
            raise ConfigError(f"a walk's op cap must be >= 1 (got {self.ops})")
        if self.tier_blocks < MIN_TIER_BLOCKS:
            raise ConfigError(
                f"a walk's largest tier must hold >= {MIN_TIER_BLOCKS} blocks "
                f"(got {self.tier_blocks})"
            )

    def tier_cap(self, index: int) -> int:
        """The largest tier walk ``index`` draws: the scope's in a wide walk, else at most
        :data:`TIER_BLOCKS`."""
        if index % WIDE_EVERY == WIDE_EVERY - 1:
            return self.tier_blocks
        return min(self.tier_blocks, TIER_BLOCKS)

    def describe(self) -> str:
        """As the report says it: ``up to 120 ops, tiers of up to 16 blocks, up to 128 in one
        walk in 4``."""
        if self.tier_blocks <= TIER_BLOCKS:
            return f"up to {self.ops} ops, tiers of up to {self.tier_blocks} blocks"
        return (
            f"up to {self.ops} ops, tiers of up to {TIER_BLOCKS} blocks, "
            f"up to {self.tier_blocks} in one walk in {WIDE_EVERY}"
        )


#: the scope every walk has unless a search widens it
DEFAULT_SCOPE = WalkScope()
