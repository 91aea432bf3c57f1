"""The search's scope settings that the command line reads without importing Hypothesis
(spec/invariants.md, Counterexamples: what a verdict of *holds* covers)."""

from __future__ import annotations

import attrs

from kvmodel.errors import ConfigError

__all__ = [
    "CROWD",
    "CROWD_EVERY",
    "DEFAULT_SCOPE",
    "MAX_CROWD",
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
#: one random walk in CROWD_EVERY draws a crowd of background agents opened before its first
#: op and suspended to the end (``RandomParams.crowd``), by default CROWD of them (``kvmodel
#: check --crowd``): a walk's own contexts number at most 6, where a serving engine holds
#: hundreds of sequences, so only a crowd puts a per-agent table of a few dozen slots to the
#: test, and only a larger one a table of hundreds (spec/invariants.md, swarm testing)
CROWD_EVERY = 8
CROWD = 40
#: the largest crowd a scope may ask for: every op of a crowded walk reads every open agent
#: (a crowd of 256 costs ~1 ms an op under the Monitor, 10 times a walk's own)
MAX_CROWD = 1024


@attrs.frozen
class WalkScope:
    """What each random walk may reach: at most ``ops`` ops (its length is drawn from
    [20, ``ops``]), on an engine whose tiers hold 2-16 blocks each (:data:`TIER_BLOCKS`), or
    2-``tier_blocks`` in one walk in :data:`WIDE_EVERY` (unless the search fixes one engine);
    one walk in :data:`CROWD_EVERY` with ``crowd`` background agents in flight beside its own
    contexts (0: none). Every other draw of a walk is made as it is whatever the scope: a
    narrow walk is the same walk in every scope of its length, ``tier_blocks=16`` makes every
    walk narrow, and a walk that draws a crowd differs between crowd sizes by its crowd
    alone."""

    ops: int = WALK_OPS
    tier_blocks: int = WIDE_TIER_BLOCKS
    crowd: int = CROWD

    def __attrs_post_init__(self) -> None:
        if self.ops < 1:
            raise ConfigError(f"a walk's op cap must be >= 1 (got {self.ops})")
        if self.tier_blocks < MIN_TIER_BLOCKS:
            raise ConfigError(
                f"a walk's largest tier must hold >= {MIN_TIER_BLOCKS} blocks "
                f"(got {self.tier_blocks})"
            )
        if not 0 <= self.crowd <= MAX_CROWD:
            raise ConfigError(
                f"a walk's crowd must be 0-{MAX_CROWD} background agents (got {self.crowd})"
            )

    def tier_cap(self, index: int) -> int:
        """The largest tier walk ``index`` draws: the scope's in a wide walk, else at most
        :data:`TIER_BLOCKS`."""
        if index % WIDE_EVERY == WIDE_EVERY - 1:
            return self.tier_blocks
        return min(self.tier_blocks, TIER_BLOCKS)

    def crowd_of(self, drawn: bool) -> int:
        """The crowd of a walk that drew one (``drawn``) or not."""
        return self.crowd if drawn else 0

    def describe(self, *, tiers: bool = True) -> str:
        """As the report says it: ``up to 120 ops, tiers of up to 16 blocks, up to 128 in one
        walk in 4, a crowd of 40 agents in one walk in 8``; without the tiers when the search
        fixes one engine (``tiers=False``)."""
        if not tiers:
            sizes = ""
        elif self.tier_blocks <= TIER_BLOCKS:
            sizes = f", tiers of up to {self.tier_blocks} blocks"
        else:
            sizes = (
                f", tiers of up to {TIER_BLOCKS} blocks, "
                f"up to {self.tier_blocks} in one walk in {WIDE_EVERY}"
            )
        crowd = (
            f"a crowd of {self.crowd} agents in one walk in {CROWD_EVERY}"
            if self.crowd
            else "no crowds"
        )
        return f"up to {self.ops} ops{sizes}, {crowd}"


#: the scope every walk has unless a search widens it
DEFAULT_SCOPE = WalkScope()
