"""Mutants written after the search was, the way an outside author porting KVTether would err.

The zoo in :mod:`checkers.search.mutants` was planted by the people who wrote the search; these
two were written afterwards, to test the search on bugs it was not shaped for. Both are KVTether
with its eviction order written as code (so the engine takes the general path, not the rank
index) and the "most recently suspended first" rule read differently for a block that more than
one context holds, or that another context wrote:

* :class:`LatestHolderMRU` takes the *latest* suspension among a block's holders, where the
  contract (spec PP3, ``suspend_time``) takes the earliest: the holder that resumes soonest
  decides how near the block's reuse is. (Its engine-side twin, an engine whose features do
  this, is ``engine_mutants.LatestSuspension``, caught by the contract comparison; a policy's
  own order can only be caught by the invariant);
* :class:`WriterMRU` takes the suspension of the context that *wrote* the block, which a shared
  system prompt or a fork's prefix outlives.

Both break ``suspended-mru`` only when a Suspended block's holders (or its writer) disagree
with another Suspended candidate's time: about one random walk in 100. Before walks were capped
to the engine's capacity and drew shared system prompts (spec/invariants.md, swarm testing)
``kvmodel check`` at the ci profile passed both.

Written later still (2026-12-03), by the same rule -- the bug first, the search run after:

* :class:`LastAccessMRU` reads "most recently suspended" as "most recently used": a context
  suspends when its inference ends, so the two agree unless inferences run for different
  times, which the harness's clock lets them (spec/invariants.md);
* :class:`ReclaimAtInfer` frees dead KV when an inference needs memory, i.e. at ``infer`` ops
  only: the KV a ``close`` kills stays resident until the next inference.

A third, KVTether with Temporary ranked ahead of Expired ("scratch KV goes first"), passed
``kvmodel check``, rightly: no evictable block is ever Temporary (spec lifecycle.md L5.4), so it
is KVTether under another name -- an equivalent mutant, which tests/test_lifecycle.py pins
instead (it replays to KVTether's log).

And engines, the way an outside engine's author errs (the users of ``kvmodel oracle``), each
run as KVTether on it (``engine_class``):

* :class:`PinEndsLate` ends a TTL pin after its deadline instead of at it (``<`` for ``<=``,
  spec P6): wrong for exactly the ops at a deadline. It passed ``kvmodel check`` until the
  machine drew TTL pins as often as untimed ones and could wait for a deadline, and the
  contract comparison looked at message states on every op (spec/invariants.md);
* :class:`ForkKeepsInvalidTail` reads the source's chain length where it should read its valid
  count (P5): a fork taken after an edit, before the next inference, holds stale KV as valid;
* :class:`SuspendAtStart` takes an inference's start for its context's suspension time, not its
  end (``t + duration``, P7.6);
* :class:`ForkCopiesPins` lets a fork inherit the source's pins (L6 says they are not);
* :class:`RefusesEmptyPin` refuses, as bad input, a pin whose range covers no message ("pinning
  nothing is the caller's bug"), where the trace format has it pin nothing (``start <= stop``).
  Before the monitor asked the reference whether refused input was bad (spec/invariants.md,
  Findings), ``kvmodel check`` stopped on it with exit status 2, as if its own input were bad;
* :class:`LastPinWins` lets a pin over a message already pinned set its deadline anew ("the
  last pin wins"), where overlapping pins keep the longer protection (L6; no TTL is the
  longest): a message pinned for 10 and then for 0.5 is unpinned after 0.5. It shows only
  after a second, shorter pin over the same message and before the first one's deadline: the
  ci profile's walks catch it (seed 0), the dev profile's 50 do not, 200 do.

Written 2026-12-04, the bug first, the search run after; the contract model did not check an
inference's admission then, and now does (M4.4; spec/invariants.md, Self-checks of the engine):

* :class:`CountsFreeOnly` admits an inference only if its writes fit in the *free* slots,
  forgetting the blocks it could evict: a full cache rejects instead of evicting. It passed
  ``kvmodel check`` at the ci profile: it never evicts, so the eviction invariants had nothing
  to judge, and a rejection was a recorded result nothing checked (the run's coverage line said
  "evictions 0", and its warnings that no eviction invariant was exercised);
* :class:`OptimisticAdmission` skips the pre-check and writes until a block finds no slot, then
  rolls the request back (P7.7's mid-allocation path): it evicts KV for a request it then
  refuses. Before, the ci profile caught it only by a side effect, ``temporary-bypass`` (a
  bypassed block rolled back is freed as a rejection's, not as a bypass), and under a policy
  that bypasses nothing not at all;
* :class:`EvictsBeforeSpilling` keeps KV in fast memory: while anything is evictable, its
  free-slot lookup sees only the first tier's free slots, so a full HBM evicts where M4 writes
  into the next preferred tier's free slot. Every invariant held at the ci profile under LRU
  and KVTether; the contract model now checks, at each eviction, that every tier the allocation
  could take was full;
* :class:`SpillsToLastTier` sends what a full first tier cannot take to the *last* tier with a
  free slot, not the next (capacity tiers as the overflow): with HBM full, a block goes to SSD
  while HBF has room. It evicts nothing it should not and rejects nothing, and no invariant a
  policy without a placement rule claims reads a tier; the contract model now checks that each
  new block takes the first of its placement's tiers with a free slot.

Written 2026-12-05, the same way: fifteen more policies, all caught by ``kvmodel check`` at the
ci profile and not kept, since each repeats a bug class the zoo has (docs/checking-a-policy.md,
How much the search finds), and this one, which is kept:

* :class:`AgentWeightTable` weighs candidates by the agent kind that wrote them, from a table
  that has no reviewer: its ``eviction_order`` raises ``KeyError`` in the middle of an
  admission. It was caught (``policy-protocol``), but at the dev profile it was also reported
  ``nondeterministic``: the machine went on applying a rule's later ops after the run had
  stopped mid-op, and a find made on that state did not replay. A stopped run now stays
  stopped (spec/invariants.md, Findings).
* :class:`HourClockLRU` orders by recency in whole seconds modulo an hour. The ci profile
  passed it, because no walk of the default length ran its clock past an hour (a 64 s wrap is
  caught at once). Walks of up to 2,000 ops caught it (``kvmodel check --walk-ops``): the zoo's
  first mutant outside the default search's scope, kept with the walk length it needed
  (:data:`SCOPE_NEEDED`), until walks were drawn at a clock scale (below).
* :class:`WindowedLRU` bounds its eviction scan, as an engine written for speed might: it sorts
  the first 64 candidates and leaves the rest in the order given. No engine then drawn held
  more than 48 blocks, so the default search could not reach it; walks on tiers of up to 128
  blocks (``kvmodel check --tier-blocks 128``) caught it at the default walk length.
* :class:`WindowedTether` is KVTether with the same bounded scan over 32 candidates. Engines
  held up to 48 blocks, yet the default search passed it too: no eviction of its walks or
  examples chose among more than 37 blocks (the coverage line's widest choice), and none
  reached past the window. ``--tier-blocks 128`` caught it.

Since then one random walk in four is *wide* by default, on tiers of up to 128 blocks, and the
default search catches both. Beyond the wide walks' reach, kept for the scope it needs:

* :class:`ByteDepthLRU` keeps depth in an 8-bit field for its tie-break. Its bug needs a
  context of more than 256 blocks in memory, which no default walk builds; wide walks on tiers
  of up to 512 blocks (``kvmodel check --tier-blocks 512``) catch it.

Written 2026-12-05, the bug first, the search run after:

* :class:`BigContextFirstTether` sends the blocks of contexts over 8,192 tokens first, ahead of
  dead KV. ``kvmodel check`` passed it: no walk or example had made a prompt of 8,192 tokens
  (messages of at most 48, contexts at most the engine's capacity), and the coverage line did
  not say how large prompts grew. Now two walks in three are drawn at a token scale (16 or 256
  tokens for each one drawn, blocks as many times larger: the same walk block for block), the
  coverage line gives the largest prompt, and the default search catches it.

Written 2026-12-06, the bug first, the search run after:

* :class:`IdleDayTether` sends KV suspended for over a day ahead of dead KV. ``kvmodel check``
  passed it: walk clocks ran for minutes (at most 417 s over the ci profile's walks), the
  coverage line said so, and no scope option reached a day. Now two walks in three are drawn at
  a clock scale (64 or 4,096 seconds for each one drawn, a power of two: the same walk op for
  op), and the default search catches it, and :class:`HourClockLRU` with it.
* :class:`SlotTableTether` keeps each agent's suspension time in a table of 32 slots. It passed:
  walks opened at most 6 contexts at once and the machine 26, and the coverage line did not
  say so. Now the line gives the most contexts open at once, one walk in eight draws a crowd of
  40 background agents waiting on their tools, and the default search catches it.
* :class:`WideSlotTableTether` is the same table with 128 slots, sized for a serving engine's
  batch. A crowd of 40 cannot reach it; the crowd's size is a scope option (``kvmodel check
  --crowd 160`` catches it), and it is kept for the scope it needs.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, ClassVar

import attrs

from checkers.search.scope import WalkScope
from kvmodel.engine import Engine
from kvmodel.errors import TraceError
from kvmodel.ids import BlockId, ContextId, TierName
from kvmodel.io.trace import Fork, Infer, Op, Pin
from kvmodel.lifecycle import BlockClass, MsgState
from kvmodel.memory import Memory
from kvmodel.policy import Reclaim
from kvmodel.view import BlockInfo, ModelView
from policies.kvtether import KVTether
from policies.lru import LRU

__all__ = [
    "OUTSIDE_MUTANTS",
    "SCOPE_NEEDED",
    "AgentWeightTable",
    "BigContextFirstTether",
    "ByteDepthLRU",
    "CountsFreeOnly",
    "CountsFreeOnlyTether",
    "EvictsBeforeSpilling",
    "EvictsBeforeSpillingTether",
    "ForkCopiesPins",
    "ForkCopiesPinsTether",
    "ForkKeepsInvalidTail",
    "ForkKeepsInvalidTailTether",
    "HourClockLRU",
    "IdleDayTether",
    "LastAccessMRU",
    "LastPinWins",
    "LastPinWinsTether",
    "LatestHolderMRU",
    "OptimisticAdmission",
    "OptimisticAdmissionTether",
    "PinEndsLate",
    "PinEndsLateTether",
    "ReclaimAtInfer",
    "RefusesEmptyPin",
    "RefusesEmptyPinTether",
    "SlotTableTether",
    "SpillsToLastTier",
    "SpillsToLastTierTether",
    "SuspendAtStart",
    "SuspendAtStartTether",
    "WideSlotTableTether",
    "WindowedLRU",
    "WindowedTether",
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


class PinEndsLate(Engine):
    """A TTL pin ends after its deadline, not at it: still pinned at the op at the deadline."""

    def _expire_pins(self, t: float) -> None:
        super()._expire_pins(math.nextafter(t, -math.inf))  # deadline < t, not <= t


class ForkKeepsInvalidTail(Engine):
    """A fork keeps the source's whole chain inside the shared messages, valid or not."""

    def _fork(self, op: Fork) -> None:
        src = self.contexts.get(op.src)
        if src is None:
            super()._fork(op)
            return
        valid, src.valid = src.valid, len(src.materialized)
        try:
            super()._fork(op)
        finally:
            src.valid = valid


class SuspendAtStart(Engine):
    """A context is suspended from its inference's start, not its end."""

    def apply(self, op: Op) -> None:
        super().apply(op)
        if isinstance(op, Infer) and op.ctx in self.contexts:
            c = self.contexts[op.ctx]
            if c.is_open and c.suspended_at is not None:
                c.suspended_at = op.t
                self._bump(c)


class ForkCopiesPins(Engine):
    """A fork's copies of pinned messages are pinned too, until the source's deadlines."""

    def _fork(self, op: Fork) -> None:
        super()._fork(op)
        src, child = self.contexts[op.src], self.contexts[op.ctx]
        for i, (_m, uid) in enumerate(child.entries):
            if src.stored.get(uid) is MsgState.PINNED:
                deadline = src.pin_deadline.get(uid)
                ttl = None if deadline is None else deadline - op.t
                self._pin(Pin(op.t, child.id, i, i + 1, ttl))


class RefusesEmptyPin(Engine):
    """A pin over an empty range is refused as bad input."""

    def _pin(self, op: Pin) -> None:
        c = self.contexts.get(op.ctx)
        if c is not None:
            start = 0 if op.start is None else op.start
            stop = len(c) if op.stop is None else op.stop
            if start >= stop:
                raise TraceError(f"pin range [{start}, {stop}) covers no message", field="stop")
        super()._pin(op)


class LastPinWins(Engine):
    """A pin over a message already pinned sets its deadline anew: the last pin wins."""

    def _pin(self, op: Pin) -> None:
        c = self.context(op.ctx)
        before = set(c.pin_deadline)
        super()._pin(op)
        lo = 0 if op.start is None else op.start
        hi = len(c) if op.stop is None else op.stop
        for _m, uid in c.entries[lo:hi]:
            if uid in before and uid in c.pin_deadline:
                c.pin_deadline[uid] = op.deadline
                if op.deadline is not None:
                    heapq.heappush(self._pins, (op.deadline, self._pin_seq, c.id, uid))
                    self._pin_seq += 1


class _Counted:
    """The engine's victim source with another count of evictable blocks for the admission
    pre-check (M4.4); every other question goes to the source itself."""

    def __init__(self, source: Any, count: int | None) -> None:
        self._source = source
        self._count = count

    def evictable(self) -> int:
        n: int = self._source.evictable()
        return n if self._count is None else self._count

    def __getattr__(self, name: str) -> Any:
        source = self.__dict__.get("_source")  # (absent while a copy is being built)
        if source is None:
            raise AttributeError(name)
        return getattr(source, name)


class CountsFreeOnly(Engine):
    """Admission counts the free slots only: a full cache rejects instead of evicting."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.victims = _Counted(self.victims, 0)  # type: ignore[assignment]


class OptimisticAdmission(Engine):
    """No admission pre-check: blocks are written (evicting as needed) until one finds no slot,
    and then the request is rolled back."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.victims = _Counted(self.victims, 1 << 40)  # type: ignore[assignment]


class _FastMemoryFirst(Memory):
    """Free slots of a tier but the first hidden while the engine has an evictable block."""

    victims: _Counted | None = None  # (set by the engine: its victim source)

    def free_count(self, tier: TierName) -> int:
        if tier != self.names[0] and self.victims is not None and self.victims.evictable():
            return 0
        return super().free_count(tier)


class EvictsBeforeSpilling(Engine):
    """While anything is evictable, a full first tier evicts instead of spilling."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.memory.__class__ = _FastMemoryFirst  # its own free-slot lookup, same slots
        assert isinstance(self.memory, _FastMemoryFirst)
        self.memory.victims = _Counted(self.victims, None)


class _LastTierFirst(Memory):
    """Free slots of a tier past the first hidden while a later tier has one."""

    def free_count(self, tier: TierName) -> int:
        at = self.names.index(tier)
        if at and any(super(_LastTierFirst, self).free_count(t) for t in self.names[at + 1 :]):
            return 0
        return super().free_count(tier)


class SpillsToLastTier(Engine):
    """What the first preferred tier cannot take goes to the last tier with a free slot."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.memory.__class__ = _LastTierFirst  # its own free-slot lookup, same slots


class PinEndsLateTether(KVTether):
    name: ClassVar[str] = "mutant-pin-ends-late"
    engine_class: ClassVar[type[Engine]] = PinEndsLate


class ForkKeepsInvalidTailTether(KVTether):
    name: ClassVar[str] = "mutant-fork-keeps-invalid-tail"
    engine_class: ClassVar[type[Engine]] = ForkKeepsInvalidTail


class SuspendAtStartTether(KVTether):
    name: ClassVar[str] = "mutant-suspend-at-start"
    engine_class: ClassVar[type[Engine]] = SuspendAtStart


class ForkCopiesPinsTether(KVTether):
    name: ClassVar[str] = "mutant-fork-copies-pins"
    engine_class: ClassVar[type[Engine]] = ForkCopiesPins


class RefusesEmptyPinTether(KVTether):
    name: ClassVar[str] = "mutant-refuses-empty-pin"
    engine_class: ClassVar[type[Engine]] = RefusesEmptyPin


class LastPinWinsTether(KVTether):
    name: ClassVar[str] = "mutant-last-pin-wins"
    engine_class: ClassVar[type[Engine]] = LastPinWins


class CountsFreeOnlyTether(KVTether):
    name: ClassVar[str] = "mutant-counts-free-only"
    engine_class: ClassVar[type[Engine]] = CountsFreeOnly


class OptimisticAdmissionTether(KVTether):
    name: ClassVar[str] = "mutant-optimistic-admission"
    engine_class: ClassVar[type[Engine]] = OptimisticAdmission


class EvictsBeforeSpillingTether(KVTether):
    name: ClassVar[str] = "mutant-evicts-before-spilling"
    engine_class: ClassVar[type[Engine]] = EvictsBeforeSpilling


class SpillsToLastTierTether(KVTether):
    name: ClassVar[str] = "mutant-spills-to-last-tier"
    engine_class: ClassVar[type[Engine]] = SpillsToLastTier


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


class HourClockLRU(LRU):
    """LRU as code that orders by recency in whole seconds modulo an hour first (a 12-bit field
    of packed block metadata): a block used just after the hour turns looks older than one
    used just before it. It was outside the default search's scope while walk clocks ran for
    minutes; walks drawn at a clock scale find it (spec/invariants.md, swarm testing)."""

    name: ClassVar[str] = "mutant-hour-clock-lru"

    def eviction_order(self, view: ModelView, candidates: Sequence[BlockInfo]) -> Iterable[BlockId]:
        def key(b: BlockInfo) -> tuple[int, float, int, int]:
            return (int(b.last_access) % 3600, b.last_access, -b.depth, int(b.id))

        return [b.id for b in sorted(candidates, key=key)]


class WindowedLRU(LRU):
    """LRU as code that bounds its eviction scan: it sorts the first :attr:`WINDOW` candidates
    by recency (deeper first at a tie) and puts the rest after them as given. Up to 64
    evictable blocks it is LRU; beyond, a block in the window goes before its own child outside
    it. Narrow walks, whose engines hold at most 48 blocks, pass it; the default search's wide
    walks (tiers of up to 128 blocks) find it."""

    name: ClassVar[str] = "mutant-windowed-lru"
    WINDOW: ClassVar[int] = 64

    def eviction_order(self, view: ModelView, candidates: Sequence[BlockInfo]) -> Iterable[BlockId]:
        def key(b: BlockInfo) -> tuple[float, int, int]:
            return (b.last_access, -b.depth, int(b.id))

        head = sorted(candidates[: self.WINDOW], key=key)
        return [b.id for b in head] + [b.id for b in candidates[self.WINDOW :]]


class WindowedTether(KVTether):
    """KVTether as code with a bounded eviction scan: its order over the first :attr:`WINDOW`
    candidates, then the rest as given. Beyond 32 evictable blocks a live block in the window
    goes before a dead one outside it. Narrow walks pass it, though their engines hold up to 48
    blocks (none of their evictions chooses among more than 32); the default search's wide
    walks find it."""

    name: ClassVar[str] = "mutant-windowed-tether"
    WINDOW: ClassVar[int] = 32

    def eviction_order(self, view: ModelView, candidates: Sequence[BlockInfo]) -> Iterable[BlockId]:
        head = list(super().eviction_order(view, candidates[: self.WINDOW]))
        return head + [b.id for b in candidates[self.WINDOW :]]


class ByteDepthLRU(LRU):
    """LRU as code that keeps a block's depth in an 8-bit field of packed block metadata, for
    its deeper-first tie-break: among blocks last used together, depth 256 looks shallower
    than depth 255, and a parent goes before its child. Outside the default search's scope: no
    default walk's context reaches 256 blocks; walks on tiers of up to 512 blocks find it
    (:data:`SCOPE_NEEDED`)."""

    name: ClassVar[str] = "mutant-byte-depth-lru"

    def eviction_order(self, view: ModelView, candidates: Sequence[BlockInfo]) -> Iterable[BlockId]:
        def key(b: BlockInfo) -> tuple[float, int, int]:
            return (b.last_access, -(b.depth % 256), int(b.id))

        return [b.id for b in sorted(candidates, key=key)]


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


#: import path -> the invariant it must be caught breaking
OUTSIDE_MUTANTS: Mapping[str, str] = MappingProxyType(
    {
        "checkers.search.outside_mutants:LatestHolderMRU": "suspended-mru",
        "checkers.search.outside_mutants:WriterMRU": "suspended-mru",
        "checkers.search.outside_mutants:LastAccessMRU": "suspended-mru",
        "checkers.search.outside_mutants:ReclaimAtInfer": "free-at-boundary",
        "checkers.search.outside_mutants:PinEndsLateTether": "engine-contract",
        "checkers.search.outside_mutants:ForkKeepsInvalidTailTether": "no-stale-hit",
        "checkers.search.outside_mutants:SuspendAtStartTether": "engine-contract",
        "checkers.search.outside_mutants:ForkCopiesPinsTether": "engine-contract",
        "checkers.search.outside_mutants:RefusesEmptyPinTether": "engine-internal",
        "checkers.search.outside_mutants:LastPinWinsTether": "engine-contract",
        "checkers.search.outside_mutants:CountsFreeOnlyTether": "engine-contract",
        "checkers.search.outside_mutants:OptimisticAdmissionTether": "engine-contract",
        "checkers.search.outside_mutants:EvictsBeforeSpillingTether": "engine-contract",
        "checkers.search.outside_mutants:SpillsToLastTierTether": "engine-contract",
        "checkers.search.outside_mutants:AgentWeightTable": "policy-protocol",
        "checkers.search.outside_mutants:HourClockLRU": "prefix-closed-residency",
        "checkers.search.outside_mutants:WindowedLRU": "prefix-closed-residency",
        "checkers.search.outside_mutants:WindowedTether": "no-live-eviction-before-dead-reclaim",
        "checkers.search.outside_mutants:ByteDepthLRU": "prefix-closed-residency",
        "checkers.search.outside_mutants:BigContextFirstTether": (
            "no-live-eviction-before-dead-reclaim"
        ),
        "checkers.search.outside_mutants:IdleDayTether": "no-live-eviction-before-dead-reclaim",
        "checkers.search.outside_mutants:SlotTableTether": "suspended-mru",
        "checkers.search.outside_mutants:WideSlotTableTether": "suspended-mru",
    }
)

#: mutants whose bug lies outside the default search's scope, and the walks (``kvmodel check
#: --walk-ops``, ``--tier-blocks``, ``--crowd``) that bring it in (spec/invariants.md,
#: Counterexamples)
SCOPE_NEEDED: Mapping[str, WalkScope] = MappingProxyType(
    {
        "checkers.search.outside_mutants:ByteDepthLRU": WalkScope(tier_blocks=512),
        "checkers.search.outside_mutants:WideSlotTableTether": WalkScope(crowd=160),
    }
)
