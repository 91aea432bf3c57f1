"""The random-walk explorer: breadth where the Hypothesis machine gives depth and shrinking.

Each walk is a raw random trace (:mod:`kvmodel.workloads.random_ops`, every op kind) under a
swarm configuration (:mod:`checkers.search.swarm`): its own engine, op-weight vector with some ops
switched off, token sizes, sharing, TTLs and clock rate. The walk is checked by
:func:`checkers.invariants.replay.check_ops` (the one monitor); its first violation of each
invariant is kept with the trace up to it and the engine it ran on, and
:func:`checkers.search.driver.search` shrinks it by delta debugging like any other find.

Walk ``i`` of seed ``s`` is drawn from ``numpy.random.default_rng([s, i])`` alone, so a walk
replays on its own, in any process, and ``-j N`` merges results in walk order: the same walks
give the same finds whatever the parallelism.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence

import attrs
import numpy as np
from hypothesis import strategies as st

from checkers.invariants.replay import check_ops
from checkers.invariants.structural import Violation
from checkers.search.coverage import SearchStats, run_coverage
from checkers.search.scope import CROWD_EVERY, DEFAULT_SCOPE, WALK_OPS, WalkScope
from checkers.search.swarm import draw_config, draw_weights
from kvmodel.config import EngineConfig
from kvmodel.io.trace import Op, Trace, op_name
from kvmodel.policy import resolve_policy
from kvmodel.studies.sweep import executor
from kvmodel.workloads.random_ops import RandomParams, random_trace

__all__ = [
    "CLOCK_SCALES",
    "TOKEN_SCALES",
    "WALK_OPS",
    "WalkFind",
    "WalkOutcome",
    "explore",
    "random_walks",
    "run_walk",
    "walk_params",
    "walk_recipe",
]


def walk_recipe(
    seed: int, index: int, config: EngineConfig | None = None, scope: WalkScope = DEFAULT_SCOPE
) -> tuple[EngineConfig, RandomParams]:
    """Walk ``index`` of ``seed``: its engine (``config`` if given, else drawn within
    ``scope``'s tier sizes for this walk, :meth:`WalkScope.tier_cap`) and generator parameters,
    at most ``scope.ops`` ops long."""
    rng = np.random.default_rng([seed, index])
    cfg = draw_config(rng, scope.tier_cap(index)) if config is None else config
    capacity = cfg.block_size * sum(t.blocks for t in cfg.tiers)
    params = walk_params(rng, scope.ops, capacity=capacity)
    # drawn last, so that every earlier draw of a walk is what it was before token scales;
    # a fixed engine keeps its block size, and so its walks their token counts
    scale = TOKEN_SCALES[int(rng.integers(0, len(TOKEN_SCALES)))]
    if config is None and scale != 1:
        cfg = attrs.evolve(cfg, block_size=cfg.block_size * scale)
        params = attrs.evolve(params, token_scale=scale)
    # and the clock scale after it, for every engine (the clock is not the engine's)
    clock = CLOCK_SCALES[int(rng.integers(0, len(CLOCK_SCALES)))]
    if clock != 1:
        params = attrs.evolve(params, clock_scale=clock)
    # last, a crowd of background agents (a walk that draws none is the walk it was)
    crowd = scope.crowd_of(int(rng.integers(0, CROWD_EVERY)) == CROWD_EVERY - 1)
    return cfg, params if not crowd else attrs.evolve(params, crowd=crowd)


#: a walk's context cap, as a multiple of the engine's capacity in tokens; None: no cap
CONTEXT_CAPS = (None, 0.5, 0.75, 1.0)
#: the probability that a walk's opened context starts with a shared system prompt
SYSTEM_PROMPTS = (0.0, 0.5, 1.0)
#: the probability that a walk's op lands exactly on the nearest TTL pin deadline ahead
DEADLINE_LANDINGS = (0.0, 0.2, 0.5)
#: a walk's token scale: its token counts and its engine's block size multiplied by it, the
#: same walk block for block, at the sizes of real prompts (spec/invariants.md, swarm testing)
TOKEN_SCALES = (1, 16, 256)
#: a walk's clock scale: its times (op times, durations, TTLs) multiplied by it, powers of two so
#: that it is the same walk op for op, on clocks of hours and days (a default walk's clock
#: stays within minutes): a policy's constants in seconds come into play
#: (spec/invariants.md, swarm testing)
CLOCK_SCALES = (1, 64, 4096)


def walk_params(
    rng: np.random.Generator, max_ops: int = WALK_OPS, capacity: int | None = None
) -> RandomParams:
    """A swarm draw of the raw-op generator's parameters: length, token sizes, open contexts,
    sharing, temporaries, one-shot contexts, TTLs, op weights and clock rate -- and, given the
    engine's ``capacity`` in tokens, a context cap from :data:`CONTEXT_CAPS` and a system-prompt
    probability from :data:`SYSTEM_PROMPTS` (spec/invariants.md, swarm testing); last, how often an
    op lands exactly on a TTL pin's deadline (:data:`DEADLINE_LANDINGS`). Uncapped, a walk's
    contexts soon outgrow a 2-16-block memory and most inferences are rejected (4 walks in 5
    rejected, 1 in 4 evicted at all, before caps); capped, several contexts share the memory and
    compete for it, and the compactions edit contexts whose KV is resident."""
    params = RandomParams(
        seed=int(rng.integers(0, 2**31)),
        ops=int(rng.integers(min(20, max_ops), max_ops + 1)),
        max_tokens=int(rng.choice([4, 12, 24, 48])),
        max_open=int(rng.integers(1, 7)),
        shared_hashes=int(rng.integers(0, 6)),
        p_temporary=float(rng.choice([0.0, 0.15, 0.5])),
        p_one_shot=float(rng.choice([0.0, 0.1, 0.4])),
        p_ttl=float(rng.choice([0.0, 0.5, 1.0])),
        weights=tuple(draw_weights(rng).items()),
        mean_gap=float(rng.choice([0.1, 1.0, 5.0])),
    )
    if capacity is not None:
        factor = CONTEXT_CAPS[int(rng.integers(0, len(CONTEXT_CAPS)))]
        params = attrs.evolve(
            params,
            max_context_tokens=None if factor is None else max(2, int(factor * capacity)),
            p_system=float(rng.choice(SYSTEM_PROMPTS)),
        )
    # drawn last, so that every earlier draw of a walk is what it was before deadlines
    return attrs.evolve(params, p_deadline=float(rng.choice(DEADLINE_LANDINGS)))


def random_walks(max_ops: int = WALK_OPS) -> st.SearchStrategy[Trace]:
    """Hypothesis strategy: swarm random walks (for lockstep and differential search). A walk is
    drawn from a seed, so Hypothesis cannot shrink inside it: shrink a find by delta debugging
    (:func:`checkers.search.shrink.shrink`)."""
    return st.integers(0, 2**32 - 1).map(
        lambda s: random_trace(walk_params(np.random.default_rng(s), max_ops))
    )


@attrs.frozen
class WalkFind:
    invariant: str
    ops: tuple[Op, ...]
    violation: Violation
    config: EngineConfig
    walk: int
    #: the clock scale the walk was drawn at (its shrinking tries to undo it)
    clock_scale: int = 1


@attrs.frozen
class WalkOutcome:
    walk: int
    finds: tuple[WalkFind, ...]
    coverage: Counter[str]
    ops: Counter[str]
    length: int


def run_walk(
    policy: str,
    invariants: Sequence[str],
    seed: int,
    index: int,
    config: EngineConfig | None,
    scope: WalkScope = DEFAULT_SCOPE,
) -> WalkOutcome:
    """Generate walk ``index`` (within ``scope``) and check it under ``policy``."""
    cfg, params = walk_recipe(seed, index, config, scope)
    ops = random_trace(params).ops
    run = check_ops(ops, policy, cfg, invariants)
    run.require_accepted(ops, f"walk {index} of seed {seed} under {policy}")
    offline = callable(getattr(resolve_policy(policy), "prepare", None))
    finds = []
    seen: set[str] = set()
    for v in run.violations:
        if v.invariant in seen:
            continue
        seen.add(v.invariant)
        # an offline policy plans over the whole trace: its find keeps the future too
        n = len(ops) if offline or v.op is None else v.op + 1
        finds.append(WalkFind(v.invariant, tuple(ops[:n]), v, cfg, index, params.clock_scale))
    applied = ops[: run.applied]
    return WalkOutcome(
        index,
        tuple(finds),
        run_coverage(run.engine, applied),
        Counter(op_name(o) for o in applied),
        len(ops),
    )


def _chunk(
    args: tuple[str, tuple[str, ...], int, list[int], EngineConfig | None, WalkScope],
) -> list[WalkOutcome]:
    policy, invariants, seed, indices, config, scope = args
    return [run_walk(policy, invariants, seed, i, config, scope) for i in indices]


def explore(
    policy: str,
    invariants: Iterable[str],
    *,
    seed: int = 0,
    walks: int = 0,
    seconds: float | None = None,
    jobs: int = 1,
    config: EngineConfig | None = None,
    stats: SearchStats | None = None,
    on_find: Callable[[WalkFind], None] | None = None,
    scheduler: str | None = None,
    scope: WalkScope = DEFAULT_SCOPE,
) -> SearchStats:
    """Run at least ``walks`` walks within ``scope`` and, with ``seconds``, keep going
    until that much wall time has passed; ``jobs`` > 1 runs rounds of ``jobs`` chunks of walks
    in worker processes -- or on the Dask scheduler at ``scheduler``. Finds go to ``on_find``
    in walk order (the first find of an invariant is the lowest-numbered walk's), so the walks
    and finds do not depend on where they ran."""
    names = tuple(invariants)
    st = stats if stats is not None else SearchStats()
    deadline = None if seconds is None else time.monotonic() + seconds
    chunk = 8

    def more() -> bool:
        return (deadline is not None and time.monotonic() < deadline) or st.walks < walks

    def batches() -> Iterator[list[int]]:
        i = 0
        while True:
            hi = i + chunk if deadline is not None else min(i + chunk, walks)
            yield list(range(i, hi))
            i = hi

    def take(outcomes: list[WalkOutcome]) -> None:
        for o in outcomes:
            st.walks += 1
            st.ops.update(o.ops)
            st.add(o.coverage)
            for f in o.finds:
                if on_find is not None:
                    on_find(f)

    gen = batches()
    if jobs <= 1 and scheduler is None:
        while more():
            take(_chunk((policy, names, seed, next(gen), config, scope)))
        return st
    with executor(jobs, scheduler) as pool:
        while more():
            # one round of `jobs` chunks at a time, merged in walk order
            futures = [
                pool.submit(_chunk, (policy, names, seed, next(gen), config, scope))
                for _ in range(jobs)
            ]
            for fut in futures:
                take(fut.result())
    return st
