"""Outside mutants that are policies: KVTether or LRU ported with its order written as code, and
read differently (the package docstring tells each one's story)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import ClassVar

import attrs

from kvmodel.ids import BlockId, ContextId
from kvmodel.io.trace import Infer, Op
from kvmodel.lifecycle import BlockClass, MsgState
from kvmodel.policy import Reclaim
from kvmodel.view import BlockInfo, ModelView
from policies.kvtether import KVTether

__all__ = [
    "AgentWeightTable",
    "BigContextFirstTether",
    "IdleDayTether",
    "LastAccessMRU",
    "LatestHolderMRU",
    "ReclaimAtInfer",
    "SlotTableTether",
    "WideSlotTableTether",
    "WriterMRU",
]


_C = BlockClass
#: KVTether's class order, as a port would write it out
_CLASS_ORDER = {_C.DEAD: 0, _C.EXPIRED: 1, _C.TEMPORARY: 2, _C.SUSPENDED: 3, _C.ACTIVE: 4}


class _CodedTether(KVTether):
    """KVTether's order as code (an overridden ``eviction_order``: the general path, and no
    rank proof): class, then (Suspended) the suspension time given by :meth:`suspended_at`,
    latest first, then least recently used, deepest, id."""

    def suspended_at(self, view: ModelView, b: BlockInfo) -> float | None:
        raise NotImplementedError

    def eviction_order(self, view: ModelView, candidates: Sequence[BlockInfo]) -> Iterable[BlockId]:
        def key(b: BlockInfo) -> tuple[int, float, float, int, int]:
            t = self.suspended_at(view, b) if b.state is _C.SUSPENDED else None
            return (
                _CLASS_ORDER.get(b.state, len(_CLASS_ORDER)),
                -t if t is not None else 0.0,
                b.last_access,
                -b.depth,
                int(b.id),
            )

        return [b.id for b in sorted(candidates, key=key)]


class LatestHolderMRU(_CodedTether):
    """A shared block is as recently suspended as its most recently suspended holder."""

    name: ClassVar[str] = "mutant-latest-holder-mru"

    def suspended_at(self, view: ModelView, b: BlockInfo) -> float | None:
        times = [
            c.suspended_at
            for c in map(view.context, b.holders)
            if c.phase is MsgState.SUSPENDED and c.suspended_at is not None
        ]
        return max(times, default=None)


class WriterMRU(_CodedTether):
    """A block is as recently suspended as the context that wrote it."""

    name: ClassVar[str] = "mutant-writer-mru"

    def suspended_at(self, view: ModelView, b: BlockInfo) -> float | None:
        return view.context(b.writer).suspended_at


class LastAccessMRU(_CodedTether):
    """A Suspended block is as recently suspended as it was last used."""

    name: ClassVar[str] = "mutant-last-access-mru"

    def suspended_at(self, view: ModelView, b: BlockInfo) -> float | None:
        return b.last_access


class ReclaimAtInfer(KVTether):
    """Dead KV is freed when an inference comes to need memory: after ``infer`` ops only."""

    name: ClassVar[str] = "mutant-reclaim-at-infer"
    reclaim: ClassVar[Reclaim | None] = None  # the rule is code (on_op)

    def on_op(self, view: ModelView, op: Op) -> Iterable[BlockId]:
        return view.dead() if isinstance(op, Infer) else ()


class AgentWeightTable(_CodedTether):
    """KVTether as code with a per-agent-kind weight ahead of its order, to be tuned later (all
    0 for now, so the order is KVTether's), from a table written before reviewers existed: when
    a reviewer's block is a candidate, ``eviction_order`` raises ``KeyError`` -- in the middle
    of an inference's admission, with some of its blocks already written."""

    name: ClassVar[str] = "mutant-agent-weight-table"
    _weight: ClassVar[dict[str, int]] = {"main": 0, "lead": 0, "worker": 0, "compactor": 0}

    def suspended_at(self, view: ModelView, b: BlockInfo) -> float | None:
        return b.suspend_time

    def eviction_order(self, view: ModelView, candidates: Sequence[BlockInfo]) -> Iterable[BlockId]:
        weight = {b.id: self._weight[b.writer_agent.value] for b in candidates}
        order = list(super().eviction_order(view, candidates))
        return sorted(order, key=lambda bid: weight[bid])  # (stable: KVTether's order kept)


class _FirstTether(KVTether):
    """KVTether with the blocks :meth:`first` picks put ahead of its whole order (the shape of
    the tweaks below: each author meant them first among the live classes)."""

    def first(self, view: ModelView, b: BlockInfo) -> bool:
        raise NotImplementedError

    def eviction_order(self, view: ModelView, candidates: Sequence[BlockInfo]) -> Iterable[BlockId]:
        order = list(super().eviction_order(view, candidates))
        picked = {b.id for b in candidates if self.first(view, b)}
        return [x for x in order if x in picked] + [x for x in order if x not in picked]


class BigContextFirstTether(_FirstTether):
    """KVTether with a size-aware tweak, as an author adds one: a context over
    :attr:`LIMIT` tokens is expensive to keep resident, so its blocks go first -- put ahead of
    the whole order, where it was meant among the live classes, so a live block of a big
    context goes before a dead block. Only a prompt over 8,192 tokens shows it: walks whose
    messages had at most 48 tokens, and contexts at most the engine's capacity, never made one,
    and ``kvmodel check`` passed it; walks drawn at a token scale find it (spec/invariants.md,
    swarm testing)."""

    name: ClassVar[str] = "mutant-big-context-first-tether"
    LIMIT: ClassVar[int] = 8192

    def first(self, view: ModelView, b: BlockInfo) -> bool:
        return any(view.context(h).tokens > self.LIMIT for h in b.holders)


class IdleDayTether(_FirstTether):
    """KVTether with an idle rule, as an author adds one: KV suspended for over a day belongs to
    an agent that is not coming back, so it goes first -- put ahead of the whole order, where
    it was meant among the live classes, so a Suspended block idle for a day goes before a dead
    block. Only a clock past a day shows it: walks whose clocks ran for minutes never made one,
    and ``kvmodel check`` passed it; walks drawn at a clock scale find it (spec/invariants.md,
    swarm testing)."""

    name: ClassVar[str] = "mutant-idle-day-tether"
    IDLE_S: ClassVar[float] = 86_400.0

    def first(self, view: ModelView, b: BlockInfo) -> bool:
        return b.suspend_time is not None and view.now - b.suspend_time > self.IDLE_S


class SlotTableTether(KVTether):
    """KVTether with each agent's suspension time kept in a table of :attr:`SLOTS` slots, as an
    engine with a fixed number of sequence slots keeps per-sequence state: the open agents take
    the slots in the order they opened, and past the table's size an agent's slot is shared
    (its number modulo the size), the later agent's time written over the earlier's. Up to
    32 agents in flight it is KVTether; beyond, two agents that share a slot share a suspension
    time, and the later suspension's KV no longer goes first. Walks opened at most 6 contexts
    at once and the machine 26: ``kvmodel check`` passed it; walks with a crowd of background
    agents find it (spec/invariants.md, swarm testing)."""

    name: ClassVar[str] = "mutant-slot-table-tether"
    SLOTS: ClassVar[int] = 32

    def eviction_order(self, view: ModelView, candidates: Sequence[BlockInfo]) -> Iterable[BlockId]:
        agents = sorted(view.open_contexts(), key=lambda c: (view.context(c).opened_at, c))
        table: list[float | None] = [None] * self.SLOTS
        slot: dict[ContextId, int] = {}
        for n, c in enumerate(agents):
            slot[c] = n % self.SLOTS
            table[slot[c]] = view.context(c).suspended_at
        seen = []
        for b in candidates:
            h = b.holders[0] if len(b.holders) == 1 else None
            if b.suspend_time is not None and h is not None and h in slot:
                b = attrs.evolve(b, suspend_time=table[slot[h]])
            seen.append(b)
        return super().eviction_order(view, seen)


class WideSlotTableTether(SlotTableTether):
    """:class:`SlotTableTether` with a table of 128 slots: its author, told of the 32-slot bug,
    sized the table for a serving engine's batch of sequences (vLLM's ``max_num_seqs`` is 256 by
    default, 128 on smaller deployments) rather than doing without one. The bug is the same and
    needs more than 128 agents in flight; the default walks' crowd of 40 (at most 45 contexts
    open at once) misses it, and ``kvmodel check --crowd 160`` catches it (spec/invariants.md,
    swarm testing)."""

    name: ClassVar[str] = "mutant-wide-slot-table-tether"
    SLOTS: ClassVar[int] = 128
