"""Offline optima: they read the whole trace first (``prepare``, spec PP5).

* ``belady`` -- single-tier eviction: evict the block whose next use is furthest in the future
  (never used again first). Next uses are the prompt blocks of every later inference, computed
  from the trace by packing each prompt (keys do not depend on the policy); an inference larger
  than all of memory is always rejected and uses nothing. Optimal among policies that reject
  the same requests (rejection depends on what is resident, so it is not a universal bound).
* ``opt-placement`` -- two-tier placement that writes the most blocks to HBM. Every block write is
  an interval from its allocation to its free under eager reclaim; choosing the writes that go to
  an HBM of ``k`` blocks is maximum interval scheduling on ``k`` identical machines, solved
  exactly by the greedy of :func:`max_k_intervals` (earliest end first, each interval onto the
  machine that became free latest). Exact when the reference replay evicts nothing; the
  reference uses a single tier as large as everything the trace can write.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Sequence
from typing import ClassVar

from kvmodel.config import EngineConfig
from kvmodel.engine import Engine
from kvmodel.ids import BlockId, BlockKey, ContextId, TierName
from kvmodel.io.observations import AllocObs, FreeObs
from kvmodel.io.trace import Infer, Trace
from kvmodel.lifecycle import BlockClass
from kvmodel.memory import TierConfig
from kvmodel.policy import STRUCTURAL_CLAIMS, BasePolicy, Placement, Reclaim
from kvmodel.view import BlockInfo, ModelView, NewBlock

__all__ = ["Belady", "OptPlacement", "max_k_intervals", "roomy_config"]


class _ReclaimAll(BasePolicy):
    """Reference behaviour for the offline passes: one tier, every dead block freed at once."""

    name: ClassVar[str] = "offline-reference"

    reclaim: ClassVar[Reclaim | None] = Reclaim.DEAD


def roomy_config(trace: Trace, config: EngineConfig) -> EngineConfig:
    """One tier large enough that replaying ``trace`` with eager reclaim of Dead blocks never
    evicts (offline plans, Z3 bounds)."""
    bs = config.block_size
    written = sum(
        (sum(m.tokens for m in op.output) + bs) // bs + 1
        for op in trace.ops
        if isinstance(op, Infer)
    )
    added = 0  # every token a context can hold enters through one of these fields
    for op in trace.ops:
        added += sum(m.tokens for m in getattr(op, "messages", ()))
        for one in (getattr(op, "message", None), getattr(op, "result", None)):
            added += one.tokens if one is not None else 0
    prompt_bound = added // bs + 1
    return EngineConfig(bs, (TierConfig(TierName("ref"), written + prompt_bound + 16),))


class Belady(BasePolicy):
    name: ClassVar[str] = "belady"
    claims: ClassVar[frozenset[str]] = STRUCTURAL_CLAIMS | frozenset(
        {
            "prefix-closed-residency",
        }
    )

    def __init__(self) -> None:
        self._uses: dict[BlockKey, list[int]] = {}

    def prepare(self, trace: Trace, config: EngineConfig) -> None:
        engine = Engine(roomy_config(trace, config), _ReclaimAll())
        bs = config.block_size
        capacity = sum(t.blocks for t in config.tiers)
        uses: dict[BlockKey, list[int]] = {}
        for i, op in enumerate(trace.ops):
            if isinstance(op, Infer):
                c = engine.contexts.get(op.ctx)
                out = sum(m.tokens for m in op.output)
                # a request larger than all memory is always rejected: it uses nothing
                if c is not None and c.is_open and -(-(c.total_tokens + out) // bs) <= capacity:
                    full = c.total_tokens // bs
                    for s in c.pack_from(0)[:full]:
                        if s.key is not None:
                            uses.setdefault(s.key, []).append(i)
            engine.apply(op)
        self._uses = uses

    def next_use(self, key: BlockKey | None, now_op: int) -> float:
        if key is None:
            return math.inf
        xs = self._uses.get(key, [])
        j = bisect.bisect_left(xs, now_op)
        return float(xs[j]) if j < len(xs) else math.inf

    def eviction_order(self, view: ModelView, candidates: Sequence[BlockInfo]) -> Iterable[BlockId]:
        now = view.now_op
        return [
            b.id
            for b in sorted(candidates, key=lambda b: (-self.next_use(b.key, now), -b.depth, b.id))
        ]


def max_k_intervals(intervals: Sequence[tuple[float, float]], k: int) -> list[int]:
    """Indices of a largest subset of half-open intervals with at most ``k`` overlapping at any
    point: earliest end first; each onto the machine whose last end is the latest <= its start."""
    if k <= 0:
        return []
    order = sorted(range(len(intervals)), key=lambda i: (intervals[i][1], intervals[i][0], i))
    machines: list[float] = [-math.inf] * k  # last end per machine, kept sorted
    chosen = []
    for i in order:
        start, end = intervals[i]
        j = bisect.bisect_right(machines, start) - 1
        if j < 0:
            continue
        machines.pop(j)
        bisect.insort(machines, end)
        chosen.append(i)
    return sorted(chosen)


class OptPlacement(BasePolicy):
    name: ClassVar[str] = "opt-placement"
    claims: ClassVar[frozenset[str]] = STRUCTURAL_CLAIMS | frozenset(
        {
            "free-at-boundary",
            "no-zombie-kv",
            "reclaim-dead-only",
        }
    )

    def __init__(self) -> None:
        self._hbm: set[tuple[int, ContextId, int]] = set()
        self.reference_writes = 0

    def prepare(self, trace: Trace, config: EngineConfig) -> None:
        engine = Engine(roomy_config(trace, config), _ReclaimAll())
        for op in trace.ops:
            engine.apply(op)
        live: dict[BlockId, int] = {}
        ids: list[tuple[int, ContextId, int]] = []
        spans: list[tuple[float, float]] = []
        for o in engine.log:
            if isinstance(o, AllocObs) and not o.rewrite:
                live[o.block] = len(ids)
                ids.append((o.op, o.ctx, o.depth))
                spans.append((float(o.seq), math.inf))
            elif isinstance(o, FreeObs) and o.block in live:
                w = live.pop(o.block)
                spans[w] = (spans[w][0], float(o.seq))
        k = config.tiers[0].blocks
        self._hbm = {ids[i] for i in max_k_intervals(spans, k)}
        self.reference_writes = len(ids)

    #: place picks the tier from the plan; it bypasses nothing
    bypasses: ClassVar[frozenset[BlockClass] | None] = frozenset()

    def place(self, view: ModelView, block: NewBlock) -> Placement:
        names = view.tier_names()
        if (view.now_op, block.ctx, block.depth) in self._hbm:
            return Placement(names)
        return Placement(names[::-1])

    reclaim: ClassVar[Reclaim | None] = Reclaim.DEAD
