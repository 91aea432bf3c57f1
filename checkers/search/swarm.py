"""Swarm configurations (Groce et al., ISSTA 2012): every example draws its own engine.

A fixed configuration reaches a fixed slice of the state space: with 4 + 8 blocks of 4 tokens a
search never sees a third tier, a one-block HBM, a worn-out flash tier or a 1-token block. Here
each example (a stateful-machine run, a random walk, a lockstep trace) draws

* a block size (1, 2, 4 or 8 tokens),
* one to three tiers of 2-16 blocks each (2-128 in one random walk in four, a wide walk:
  :class:`checkers.search.scope.WalkScope`): the first is HBM (no wear), the others flash with a
  P/E budget drawn down to a handful of cycles, so that ``endurance-budget`` can be put to the
  test, and a write amplification,
* for the raw-op generator, an op-weight vector in which some ops are switched off (the
  stateful machine gets this from Hypothesis, which already disables rules per example).

The space is written once, in :func:`swarm_config` over an abstract ``pick(lo, hi)``;
:func:`swarm_configs` samples it with Hypothesis (so it shrinks towards the smallest engine) and
:func:`draw_config` with a seeded ``numpy.random.Generator``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
from hypothesis import strategies as st

from checkers.search.scope import MIN_TIER_BLOCKS, TIER_BLOCKS
from kvmodel.config import EngineConfig
from kvmodel.ids import TierName
from kvmodel.memory import TierConfig
from kvmodel.workloads.random_ops import OP_WEIGHTS

__all__ = [
    "BLOCK_SIZES",
    "PE_CYCLES",
    "TIER_NAMES",
    "check_config",
    "draw_config",
    "draw_weights",
    "swarm_config",
    "swarm_configs",
]

#: token counts per block; the first is what a shrunk counterexample tends to
BLOCK_SIZES = (4, 2, 1, 8)
TIER_NAMES = (TierName("hbm"), TierName("hbf"), TierName("ssd"))
#: P/E budgets of the flash tiers: ample (the default's), modest, and worn within a short run
PE_CYCLES = (100_000, 1_000, 3)
WRITE_AMPLIFICATION = (1.02, 1.0, 2.5)

#: ``pick(lo, hi)`` returns an int in [lo, hi]; the space below is written once over it
Pick = Callable[[int, int], int]


def swarm_config(pick: Pick, tier_blocks: int = TIER_BLOCKS) -> EngineConfig:
    """One engine configuration from the swarm space, each choice made by ``pick``; each tier
    holds 2-``tier_blocks`` blocks (a wider cap changes no choice but the sizes)."""
    block_size = BLOCK_SIZES[pick(0, len(BLOCK_SIZES) - 1)]
    n_tiers = pick(1, len(TIER_NAMES))
    tiers = []
    for i in range(n_tiers):
        blocks = pick(MIN_TIER_BLOCKS, tier_blocks)
        if i == 0:
            tiers.append(TierConfig(TIER_NAMES[0], blocks, bytes_per_block=1024))
        else:
            tiers.append(
                TierConfig(
                    TIER_NAMES[i],
                    blocks,
                    bytes_per_block=1024,
                    pe_cycles=PE_CYCLES[pick(0, len(PE_CYCLES) - 1)],
                    write_amplification=WRITE_AMPLIFICATION[pick(0, len(WRITE_AMPLIFICATION) - 1)],
                )
            )
    return EngineConfig(block_size, tuple(tiers))


def check_config(hbm: int = 4, hbf: int = 8) -> EngineConfig:
    """The fixed engine of a non-swarm search: 4 HBM + 8 HBF blocks of 4 tokens (small, so that
    pressure is common)."""
    return EngineConfig(
        4,
        (
            TierConfig(TIER_NAMES[0], hbm, bytes_per_block=1024),
            TierConfig(
                TIER_NAMES[1],
                hbf,
                bytes_per_block=1024,
                pe_cycles=PE_CYCLES[0],
                write_amplification=WRITE_AMPLIFICATION[0],
            ),
        ),
    )


@st.composite
def _drawn(draw: st.DrawFn) -> EngineConfig:
    return swarm_config(lambda lo, hi: draw(st.integers(lo, hi)))


def swarm_configs() -> st.SearchStrategy[EngineConfig]:
    """Hypothesis strategy over :func:`swarm_config`; the fixed :func:`check_config` stays in
    the swarm as one point among many, about one example in 20 (``one_of(just(fixed), drawn)``
    gave it three in four: spec/invariants.md, swarm testing). A shrunk counterexample tends to
    the smallest drawn engine."""
    fixed = check_config()
    return st.integers(0, 7).flatmap(lambda i: st.just(fixed) if i == 7 else _drawn())


def draw_config(rng: np.random.Generator, tier_blocks: int = TIER_BLOCKS) -> EngineConfig:
    """:func:`swarm_config` sampled from a seeded generator."""
    return swarm_config(lambda lo, hi: int(rng.integers(lo, hi + 1)), tier_blocks)


def draw_weights(rng: np.random.Generator) -> Mapping[str, float]:
    """An op-weight vector for the raw-op generator: each op kept with probability 1/2 (at its
    default weight times a factor in [0.25, 4)), ``append`` and ``infer`` always kept so that a
    walk makes KV at all."""
    out: dict[str, float] = {}
    for op, w in OP_WEIGHTS.items():
        keep = op in ("open", "append", "infer") or rng.random() < 0.5
        out[op] = w * float(2.0 ** rng.uniform(-2.0, 2.0)) if keep else 0.0
    return out
