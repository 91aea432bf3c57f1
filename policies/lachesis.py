"""Lachesis: lifetime-aware placement across HBM and HBF (spec/policies.md §lachesis*).

**Deterministic path** (``lachesis-det``). Harness knowledge fixes a segment's lifetime class:

* main agent (single-agent): KV from the context's first reasoning token on is the
  reasoning-laden segment, *short-lived* (the turn-end strip discards it); KV before it survives
  every strip -- the reasoning-stripped history, re-materialised after each strip, and the
  system prompt and user message written before the turn's first reasoning -- *long-lived*;
* multi-agent: the lead's KV is long-lived; workers', reviewers' and compactors' short-lived.

Short-lived KV goes HBM-first, long-lived KV HBF-first (the configured tier order is read as
fast-to-flash: first tier = HBM, last = HBF). Dead KV is freed at once (a segment's blocks go at
its closing boundary). Under pressure: dead/expired first, then least recently used.

**Predictive path** (``lachesis``): every open worker of every session is ranked by a ridge
model over its spawn signal (:mod:`policies.spawn_predictor`); a worker is admitted to HBM when
its place in that ranking is within the number of workers HBM's free blocks, after a reservation
for reviewers, have room for; the others go HBF-first.

:meth:`LachesisDet.segment_table` lists the live segments: id, class, closing boundary, blocks.
"""

from __future__ import annotations

import enum
import functools
import math
from pathlib import Path
from typing import ClassVar

import attrs

from kvmodel.ids import BlockId, BlockKey, ContextId, TierName
from kvmodel.io.trace import Op, Open
from kvmodel.lifecycle import BlockClass
from kvmodel.messages import AgentKind
from kvmodel.policy import STRUCTURAL_CLAIMS, BasePolicy, Placement, RankTerm, Reclaim
from kvmodel.view import ModelView, NewBlock
from policies.spawn_predictor import SpawnPredictor

__all__ = ["DEFAULT_WEIGHTS", "Lachesis", "LachesisDet", "SegmentClass", "SegmentRow", "classify"]

DEFAULT_WEIGHTS = Path(__file__).with_name("lachesis_weights.json")

_C = BlockClass


class SegmentClass(enum.Enum):
    SHORT = "short"
    LONG = "long"


@attrs.frozen(slots=True)
class SegmentRow:
    """One live segment: blocks that share a lifetime and a closing boundary."""

    segment: str
    cls: SegmentClass
    closes_at: str
    blocks: tuple[BlockId, ...]


_LIFECYCLE_RANK = (
    RankTerm("state", order=(_C.DEAD, _C.EXPIRED, _C.TEMPORARY)),
    RankTerm("last_access"),
    RankTerm("depth", descending=True),
)


def classify(block: NewBlock) -> tuple[SegmentClass, str, str]:
    """(class, segment id, closing boundary) of a block about to be written (deterministic)."""
    match block.agent:
        case AgentKind.LEAD:
            return SegmentClass.LONG, f"{block.ctx}/lead", "close"
        case AgentKind.WORKER | AgentKind.REVIEWER:
            return SegmentClass.SHORT, f"{block.ctx}/{block.agent.value}", "return"
        case AgentKind.COMPACTOR:
            return SegmentClass.SHORT, f"{block.ctx}/compaction", "inference end"
        case _:
            # only KV at or after the first reasoning token dies at the turn-end strip
            if block.reasoning_block is None or block.depth < block.reasoning_block:
                return SegmentClass.LONG, f"{block.ctx}/history", "close"
            return SegmentClass.SHORT, f"{block.ctx}/turn{block.turn}", "turn_end"


#: how far the segment table may outgrow its last sweep before the next
#: (:meth:`LachesisDet._forget_gone`): a sweep reads every resident block's key (~3 us a block),
#: and a table eight times what was resident makes that ~1% of a replay in which every write
#: is of a key evicted before (the vLLM comparison's workload: 2x made it 10%)
_FORGET_GROWTH = 8
_FORGET_SLACK = 4096


@functools.lru_cache(maxsize=64)
def _placement(tiers: tuple[TierName, ...]) -> Placement:
    """The placement in ``tiers``, one object per tier order (frozen, so shared): a placement is
    returned for every block written."""
    return Placement(tiers)


class LachesisDet(BasePolicy):
    name: ClassVar[str] = "lachesis-det"
    rank: ClassVar[tuple[RankTerm, ...]] = _LIFECYCLE_RANK
    claims: ClassVar[frozenset[str]] = STRUCTURAL_CLAIMS | frozenset(
        {
            "deterministic-placement",
            "free-at-boundary",
            "no-live-eviction-before-dead-reclaim",
            "no-zombie-kv",
            "prefix-closed-residency",
            "reclaim-dead-only",
        }
    )

    def __init__(self) -> None:
        #: the segment of each block key placed, kept for the resident ones (segment_table):
        #: an entry outlives its block until the next :meth:`_forget_gone`
        self._segment_of: dict[BlockKey, str] = {}
        self._segments: dict[str, tuple[SegmentClass, str]] = {}
        self._forget_at = _FORGET_SLACK

    def segment_class(self, view: ModelView, block: NewBlock) -> SegmentClass:
        return classify(block)[0]

    def tiers_for(self, view: ModelView, cls: SegmentClass) -> tuple[TierName, ...]:
        names = view.tier_names()
        return names if cls is SegmentClass.SHORT else names[::-1]

    #: place reads the agent kind, context and kinds of a block (its segment class) only
    compares_times_only: ClassVar[bool] = True
    #: place picks tiers; it bypasses nothing
    bypasses: ClassVar[frozenset[BlockClass] | None] = frozenset()

    def place(self, view: ModelView, block: NewBlock) -> Placement:
        cls = self.segment_class(view, block)
        if block.key is not None:  # (a partial block joins no segment)
            _, seg, closes = classify(block)
            if len(self._segment_of) >= self._forget_at:
                self._forget_gone(view)  # (before this key joins: its block is not yet written)
            self._segment_of[block.key] = seg
            self._segments[seg] = (cls, closes)
        return _placement(self.tiers_for(view, cls))

    def _forget_gone(self, view: ModelView) -> None:
        """Drop the segments of keys no longer resident. A policy is not told of evictions, so
        the table is swept when it has grown eightfold since the last sweep (plus a slack): its
        size follows what is resident, not every key a long trace ever wrote, at an amortized
        constant cost per block placed. Exact for :meth:`segment_table`, which reads resident
        keys alone, and a key that comes back is placed again."""
        resident = {k for bid in view.resident() if (k := view.block(bid).key) is not None}
        self._segment_of = {k: s for k, s in self._segment_of.items() if k in resident}
        live = set(self._segment_of.values())
        self._segments = {s: v for s, v in self._segments.items() if s in live}
        self._forget_at = _FORGET_GROWTH * len(self._segment_of) + _FORGET_SLACK

    #: segments are freed at their boundary: every Dead block after every op
    reclaim: ClassVar[Reclaim | None] = Reclaim.DEAD

    def segment_table(self, view: ModelView) -> list[SegmentRow]:
        """Live segments and their resident blocks, sorted by segment id."""
        members: dict[str, list[BlockId]] = {}
        for bid in view.resident():
            info = view.block(bid)
            seg = self._segment_of.get(info.key) if info.key is not None else None
            if seg is not None:
                members.setdefault(seg, []).append(bid)
        return [
            SegmentRow(seg, *self._segments[seg], tuple(bids))
            for seg, bids in sorted(members.items())
        ]


class Lachesis(LachesisDet):
    """``lachesis-det`` plus HBM admission of workers ranked by predicted lifetime."""

    name: ClassVar[str] = "lachesis"
    #: workers are placed by the predictive path (deterministic-placement exempts them)
    predicts_workers: ClassVar[bool] = True
    #: the predictive path reads spawn times and durations
    compares_times_only: ClassVar[bool] = False
    #: fraction of HBM kept free for reviewers when admitting workers
    reviewer_reserve: ClassVar[float] = 0.1

    def __init__(self, predictor: SpawnPredictor | None = None) -> None:
        super().__init__()
        self.predictor = (
            predictor if predictor is not None else SpawnPredictor.load(DEFAULT_WEIGHTS)
        )
        self._position: dict[ContextId, int] = {}
        self._spawned: dict[str, int] = {}
        self._admitted: dict[ContextId, bool] = {}

    def observe(self, view: ModelView, op: Op) -> None:
        """Each worker's position among its session's spawns (a predictor feature); the
        reclaim is lachesis-det's declared rule."""
        if isinstance(op, Open) and op.agent is AgentKind.WORKER:
            n = self._spawned.get(op.session, 0)
            self._position[op.ctx] = n
            self._spawned[op.session] = n + 1

    def _predicted(self, view: ModelView, ctx: ContextId) -> float:
        info = view.context(ctx)
        if info.spawn is None:
            return math.inf
        return self.predictor.predict(info.spawn, self._position.get(ctx, 0))

    def _admit(self, view: ModelView, ctx: ContextId) -> bool:
        """Spec §lachesis: the worker's place among *every* open worker of every session the
        node serves, ranked by predicted lifetime (ties by context id), against the number of
        workers HBM's free blocks have room for after the reviewer reservation."""
        ranking = sorted(
            (c for c in view.open_contexts() if view.context(c).agent is AgentKind.WORKER),
            key=lambda c: (self._predicted(view, c), c),
        )
        hbm = view.tiers()[0]
        reserve = math.ceil(self.reviewer_reserve * hbm.capacity)
        footprint = max(1.0, self.predictor.mean_worker_tokens / view.block_size)
        k = max(0, math.ceil((hbm.free - reserve) / footprint))
        return ranking.index(ctx) < k if ctx in ranking else False

    def segment_class(self, view: ModelView, block: NewBlock) -> SegmentClass:
        if block.agent is not AgentKind.WORKER:
            return super().segment_class(view, block)
        if block.ctx not in self._admitted:
            self._admitted[block.ctx] = self._admit(view, block.ctx)
        return SegmentClass.SHORT if self._admitted[block.ctx] else SegmentClass.LONG
