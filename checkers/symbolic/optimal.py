"""Z3 Optimize: the fewest block writes any eviction schedule can achieve on a small trace, to
cross-check the offline policies (``belady``) against a solver rather than against themselves.

The trace is replayed once with unbounded memory to read, per inference, the set of full blocks
it uses (kept, hit or written). The optimum is then an offline paging problem on one tier of
``K`` slots: at each inference its whole set must be resident; a block becomes resident only by
being written at an inference that uses it; at most ``K`` blocks are resident at once. Z3's
``Optimize`` minimises the number of writes. Scope: one tier, no partial blocks, no rejections
(the caller's trace must admit every inference), which is where Belady is optimal (spec
policies.md §belady).
"""

from __future__ import annotations

from collections.abc import Sequence

import z3

from kvmodel.config import EngineConfig
from kvmodel.engine import Engine
from kvmodel.errors import InternalError
from kvmodel.ids import BlockKey, TierName
from kvmodel.io.observations import AllocObs, FreeObs, HitObs
from kvmodel.io.trace import Infer, Trace
from kvmodel.memory import TierConfig
from kvmodel.policy import resolve_policy
from policies.offline import roomy_config

__all__ = ["access_sets", "lifetimes", "min_hbf_writes", "min_writes"]


def access_sets(trace: Trace, block_size: int) -> list[frozenset[BlockKey]]:
    """Per inference, the keys of the full blocks it uses (unbounded memory, no eviction).

    Raises ``ValueError`` for a trace whose inferences leave a partial block: the engine gives
    a partial block a slot and a write too, which this model of the problem leaves out, so the
    "minimum" would be a loose bound that a policy could appear to beat (issue 13)."""
    cfg = roomy_config(trace, EngineConfig(block_size, (TierConfig(TierName("all"), 1),)))
    engine = Engine(cfg, resolve_policy("lachesis-det"))  # reclaims Dead blocks, no bypass
    out: list[frozenset[BlockKey]] = []
    for i, op in enumerate(trace.ops):
        if not isinstance(op, Infer):
            engine.apply(op)
            continue
        c = engine.contexts.get(op.ctx)
        tokens = (c.total_tokens if c is not None else 0) + sum(m.tokens for m in op.output)
        if tokens % block_size:
            raise ValueError(
                f"op {i} (infer {op.ctx}): {tokens} tokens leave a partial block of "
                f"{tokens % block_size}; min_writes models full blocks only"
            )
        kept = list(engine.view.chain(op.ctx))[: engine.contexts[op.ctx].valid]
        used = {engine.view.block(b).key for b in kept}
        seen = len(engine.log)
        engine.apply(op)
        for o in engine.log.since(seen):
            if isinstance(o, HitObs | AllocObs):
                used.add(o.key)
        out.append(frozenset(k for k in used if k is not None))
    _roomy_enough(engine)
    return out


def _roomy_enough(engine: Engine) -> None:
    if any(o.kind in ("evict", "reject") for o in engine.log):
        raise InternalError("the unbounded replay evicted or rejected: its tier was too small")


def min_writes(
    sets: Sequence[frozenset[BlockKey]], slots: int, *, timeout_ms: int = 60_000
) -> int | None:
    """The minimum number of block writes, or None if infeasible (a set larger than ``slots``)
    or the solver timed out."""
    if any(len(s) > slots for s in sets):
        return None
    keys = sorted({k for s in sets for k in s})
    opt = z3.Optimize()
    opt.set("timeout", timeout_ms)
    prev = {k: z3.BoolVal(False) for k in keys}
    writes = []
    for j, s in enumerate(sets):
        cur = {k: z3.Bool(f"r{j}_{n}") for n, k in enumerate(keys)}
        for k in keys:
            if k in s:
                opt.add(cur[k])
                writes.append(z3.If(prev[k], 0, 1))
            else:
                opt.add(z3.Implies(cur[k], prev[k]))  # nothing appears without being written
        opt.add(z3.Sum([z3.If(cur[k], 1, 0) for k in keys]) <= slots)
        prev = cur
    total = z3.Sum(writes) if writes else z3.IntVal(0)
    h = opt.minimize(total)
    if opt.check() != z3.sat:
        return None
    return int(opt.lower(h).as_long())


def lifetimes(trace: Trace, block_size: int) -> list[tuple[int, int]]:
    """Each written block's lifetime ``[write, free)`` in log positions, under eager reclaim of
    Dead blocks and unbounded memory (the intervals a placement must fit; still-resident blocks
    end at the end of the log)."""
    cfg = roomy_config(trace, EngineConfig(block_size, (TierConfig(TierName("all"), 1),)))
    engine = Engine(cfg, resolve_policy("lachesis-det"))  # reclaims every Dead block, no bypass
    for op in trace.ops:
        engine.apply(op)
    _roomy_enough(engine)
    live: dict[int, int] = {}
    spans: list[list[int]] = []
    for o in engine.log:
        if isinstance(o, AllocObs) and not o.rewrite:
            live[o.block] = len(spans)
            spans.append([o.seq, len(engine.log)])
        elif isinstance(o, FreeObs) and o.block in live:
            spans[live.pop(o.block)][1] = o.seq
    return [(a, b) for a, b in spans]


def min_hbf_writes(
    spans: Sequence[tuple[int, int]], hbm_slots: int, *, timeout_ms: int = 60_000
) -> int | None:
    """Two tiers, HBM of ``hbm_slots`` and an HBF that never fills: the fewest blocks that must
    be written to HBF, each block living in the tier it was written to for its whole lifetime.

    Solved as a linear program over reals: the constraint matrix (time points x lifetimes) has
    the consecutive-ones property, so it is totally unimodular and the LP optimum is the integer
    optimum. (The 0/1 formulation is the same problem, but Z3's MaxSAT search times out on a
    hundred intervals where its simplex takes milliseconds.)
    """
    opt = z3.Optimize()
    opt.set("timeout", timeout_ms)
    in_hbm = [z3.Real(f"h{i}") for i in range(len(spans))]
    for x in in_hbm:
        opt.add(x >= 0, x <= 1)
    for a, _ in spans:  # half-open intervals: the load peaks at some interval's start
        alive = [in_hbm[j] for j, (s, e) in enumerate(spans) if s <= a < e]
        opt.add(z3.Sum(alive) <= hbm_slots)
    total = z3.Sum([1 - x for x in in_hbm]) if spans else z3.RealVal(0)
    h = opt.minimize(total)
    if opt.check() != z3.sat:
        return None
    best = opt.lower(h)
    if isinstance(best, z3.IntNumRef):
        return int(best.as_long())
    if isinstance(best, z3.RatNumRef) and best.denominator_as_long() == 1:
        return int(best.numerator_as_long())
    return None  # a fractional optimum cannot happen for a totally unimodular system
