"""The search's scope settings that the command line reads without importing Hypothesis
(spec/invariants.md, Counterexamples: what a verdict of *holds* covers)."""

from __future__ import annotations

import attrs

from kvmodel.errors import ConfigError

__all__ = ["DEFAULT_SCOPE", "MIN_TIER_BLOCKS", "TIER_BLOCKS", "WALK_OPS", "WalkScope"]

#: a random walk's default length cap: its length is drawn from [20, cap]; longer walks reach
#: later clocks and fill larger engines (``kvmodel check --walk-ops``)
WALK_OPS = 120
#: the smallest tier a swarm engine draws, and the default largest (``kvmodel check
#: --tier-blocks``): each tier of a drawn engine holds 2-16 blocks
MIN_TIER_BLOCKS = 2
TIER_BLOCKS = 16


@attrs.frozen
class WalkScope:
    """What each random walk may reach: at most ``ops`` ops (its length is drawn from
    [20, ``ops``]), on an engine whose tiers hold 2-``tier_blocks`` blocks each (unless the
    search fixes one engine). Every other draw of a walk is made as it is whatever the scope,
    so the default scope gives the walks it always gave."""

    ops: int = WALK_OPS
    tier_blocks: int = TIER_BLOCKS

    def __attrs_post_init__(self) -> None:
        if self.ops < 1:
            raise ConfigError(f"a walk's op cap must be >= 1 (got {self.ops})")
        if self.tier_blocks < MIN_TIER_BLOCKS:
            raise ConfigError(
                f"a walk's largest tier must hold >= {MIN_TIER_BLOCKS} blocks "
                f"(got {self.tier_blocks})"
            )

    def describe(self) -> str:
        """As the report says it: ``up to 120 ops, tiers of up to 16 blocks``."""
        return f"up to {self.ops} ops, tiers of up to {self.tier_blocks} blocks"


#: the scope every walk has unless a search widens it
DEFAULT_SCOPE = WalkScope()
