"""The mutant zoo: deliberately broken policies (and a few engines), each breaking one invariant
subtly. ``kvmodel check`` must catch every one; the expected verdicts say which invariant.

Each mutant resolves by import path like any third-party policy
(``checkers.search.mutants:MRUInverted``) and is listed in :data:`MUTANTS` with the invariant it
breaks. Engine bugs are planted through a policy's ``engine_class`` (see
:func:`checkers.invariants.replay.engine_for`).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import ClassVar

import attrs

from checkers.search.engine_mutants import ENGINE_MUTANTS
from checkers.search.outside_mutants import OUTSIDE_MUTANTS
from kvmodel._rank_index import RankIndex
from kvmodel.engine import Engine
from kvmodel.ids import BlockId, ContextId, TierName
from kvmodel.io.trace import Close, EndSession, Infer, Op, Remove, Replace, Return, TurnEnd
from kvmodel.lifecycle import BlockClass, MsgState
from kvmodel.policy import BasePolicy, Placement, RankTerm, Reclaim, rank_key
from kvmodel.view import BlockInfo, ModelView, NewBlock
from policies.discovered import Discovered
from policies.kvtether import KVTether
from policies.lachesis import Lachesis, LachesisDet, SegmentClass
from policies.lru import LRU
from policies.offline import Belady, OptPlacement
from policies.prediction import TTL
from policies.tether_lachesis import TetherLachesis
from policies.vllm_prefix import VLLMPrefix

__all__ = [
    "MUTANTS",
    "AllHBMFirstDiscovered",
    "AllHBMFirstLachesis",
    "AllHBMFirstTetherLachesis",
    "BoundaryReclaimDiscovered",
    "BoundaryReclaimKVTether",
    "BoundaryReclaimLachesis",
    "BoundaryReclaimLachesisDet",
    "BoundaryReclaimOptPlacement",
    "BoundaryReclaimTetherLachesis",
    "CappedReclaimDiscovered",
    "CappedReclaimKVTether",
    "CappedReclaimLachesis",
    "CappedReclaimLachesisDet",
    "CappedReclaimTetherLachesis",
    "DeadAfterSuspendedDiscovered",
    "DeadAfterSuspendedLachesis",
    "DeadAfterSuspendedLachesisDet",
    "DeadAfterSuspendedTetherLachesis",
    "DoubleFreeOnClose",
    "DropsForkPrefix",
    "EvictsInFlight",
    "EvictsPinnedWhenFull",
    "ForgetsHolder",
    "FreesSharedAtReturn",
    "IdleTimeoutReclaim",
    "IndexesTemporary",
    "LateDeadReclaim",
    "LateReclaimDiscovered",
    "LateReclaimKVTether",
    "LateReclaimLachesis",
    "LateReclaimLachesisDet",
    "LateReclaimOptPlacement",
    "LateReclaimTetherLachesis",
    "LazyIndexUnderMRU",
    "LeadInHBM",
    "MRUInverted",
    "MRUInvertedDiscovered",
    "MRUInvertedTetherLachesis",
    "NoBypassDiscovered",
    "NoBypassTetherLachesis",
    "RaisesOnCompactor",
    "ReclaimsExpiredDiscovered",
    "ReclaimsExpiredLachesis",
    "ReclaimsExpiredLachesisDet",
    "ReclaimsExpiredOptPlacement",
    "ReclaimsExpiredTetherLachesis",
    "ResurrectsRemoved",
    "RootFirstLRU",
    "ShallowFirstBelady",
    "ShallowFirstTTL",
    "ShallowFirstVLLM",
    "SharedCursorLRU",
    "StaleCachedOrder",
    "StaleGroupIndex",
    "StaleHitAfterReplace",
    "StateBlindTetherLachesis",
    "WritesPerSegment",
]

_C = BlockClass


class _DeadAfterSuspended(BasePolicy):
    """No eager reclaim, and Dead ranks after Suspended: live KV is evicted while dead KV
    waits."""

    rank: ClassVar[tuple[RankTerm, ...]] = (
        RankTerm("state", order=(_C.SUSPENDED, _C.DEAD, _C.EXPIRED, _C.TEMPORARY, _C.ACTIVE)),
        RankTerm("last_access"),
        RankTerm("depth", descending=True),
    )

    reclaim: ClassVar[Reclaim | None] = Reclaim.NONE


class LateDeadReclaim(_DeadAfterSuspended, KVTether):
    """KVTether reclaiming dead KV only after a live eviction (:class:`_DeadAfterSuspended`)."""

    name: ClassVar[str] = "mutant-late-dead-reclaim"


class MRUInverted(KVTether):
    """Within Suspended, the *least* recently suspended goes first (LRU where MRU is claimed)."""

    name: ClassVar[str] = "mutant-mru-inverted"
    rank: ClassVar[tuple[RankTerm, ...]] = (
        KVTether.rank[0],
        RankTerm("suspend_time", only=frozenset({_C.SUSPENDED})),
        *KVTether.rank[2:],
    )


class IndexesTemporary(KVTether):
    """Claims temporary-bypass but lets Temporary KV into the reuse store."""

    name: ClassVar[str] = "mutant-indexes-temporary"

    def place(self, view: ModelView, block: NewBlock) -> Placement:
        return Placement(tuple(t.name for t in view.tiers()))


class EvictsPinnedWhenFull(KVTether):
    """When a tier is full, frees a pinned block to make room."""

    name: ClassVar[str] = "mutant-evicts-pinned"

    def on_op(self, view: ModelView, op: Op) -> Iterable[BlockId]:
        dead = list(view.dead())
        if dead or all(t.free for t in view.tiers()):
            return dead
        pinned = [b for b in view.resident() if view.block(b).state is _C.PINNED]
        return pinned[-1:]


class EvictsInFlight(KVTether):
    """Offers the running request's own prefix as the first victims."""

    name: ClassVar[str] = "mutant-evicts-in-flight"

    def __init__(self) -> None:
        self._running = ContextId("")

    def place(self, view: ModelView, block: NewBlock) -> Placement:
        self._running = block.ctx
        return super().place(view, block)

    def eviction_order(self, view: ModelView, candidates: Sequence[BlockInfo]) -> Iterable[BlockId]:
        running = self._running
        mine = list(view.chain(running)) if running in view.open_contexts() else []
        rest = [b for b in super().eviction_order(view, candidates) if b not in mine]
        return [*reversed(mine), *rest]


class DropsForkPrefix(KVTether):
    """When a context closes, frees every block it wrote -- including a prefix a fork still
    uses."""

    name: ClassVar[str] = "mutant-drops-fork-prefix"

    def on_op(self, view: ModelView, op: Op) -> Iterable[BlockId]:
        out = set(view.dead())
        if isinstance(op, Close):
            out |= {b for b in view.resident() if view.block(b).writer == op.ctx}
        return sorted(out)


class FreesSharedAtReturn(KVTether):
    """At a worker's return, frees every block the worker held, even ones another context
    shares (a common system prompt, or the lead's prefix)."""

    name: ClassVar[str] = "mutant-frees-shared-at-return"

    def __init__(self) -> None:
        self._held: dict[ContextId, list[BlockId]] = {}

    def on_op(self, view: ModelView, op: Op) -> Iterable[BlockId]:
        out = set(view.dead())
        if isinstance(op, Infer) and op.ctx in view.open_contexts():
            self._held[op.ctx] = list(view.chain(op.ctx))
        if isinstance(op, Return):
            resident = set(view.resident())
            out |= {b for b in self._held.pop(op.ctx, []) if b in resident}
        return sorted(out)


class LeadInHBM(LachesisDet):
    """Places the lead's (long-lived) segment in HBM."""

    name: ClassVar[str] = "mutant-lead-in-hbm"

    def tiers_for(self, view: ModelView, cls: object) -> tuple[str, ...]:  # type: ignore[override]
        return tuple(t.name for t in view.tiers())


class RootFirstLRU(LRU):
    """LRU whose tie-break goes head-first: equally recent parents go before their children."""

    name: ClassVar[str] = "mutant-root-first-lru"
    rank: ClassVar[tuple[RankTerm, ...]] = (RankTerm("last_access"), RankTerm("depth"))


class _StaleHitEngine(Engine):
    """Forgets suffix invalidation on ``replace``: the stale KV is kept by count."""

    def apply(self, op: Op) -> None:
        if isinstance(op, Replace) and op.ctx in self.contexts:
            valid = self.contexts[op.ctx].valid
            super().apply(op)
            self.contexts[op.ctx].valid = valid
            return
        super().apply(op)


class StaleHitAfterReplace(KVTether):
    """Runs on an engine that serves stale KV after a ``replace``."""

    name: ClassVar[str] = "mutant-stale-hit"
    engine_class: ClassVar[type[Engine]] = _StaleHitEngine


class _SegmentWriteEngine(Engine):
    """Counts one write per tier per inference, not one per block."""

    def apply(self, op: Op) -> None:
        before = dict(self.memory.writes)
        super().apply(op)
        if isinstance(op, Infer):
            for tier, n in self.memory.writes.items():
                if n > before[tier]:
                    self.memory.writes[tier] = before[tier] + 1


class WritesPerSegment(KVTether):
    """Runs on an engine that counts HBF writes per segment instead of per block."""

    name: ClassVar[str] = "mutant-writes-per-segment"
    engine_class: ClassVar[type[Engine]] = _SegmentWriteEngine


class _ForgetfulEngine(Engine):
    """After each inference, forgets that the context holds its last chain block."""

    def apply(self, op: Op) -> None:
        super().apply(op)
        if isinstance(op, Infer) and op.ctx in self.contexts:
            c = self.contexts[op.ctx]
            last = self.residency.hit(c.materialized[-1].key) if c.materialized else None
            if c.is_open and last is not None:
                last.holders.discard(c.id)


class ForgetsHolder(KVTether):
    """Runs on an engine whose chain bookkeeping loses a holder."""

    name: ClassVar[str] = "mutant-forgets-holder"
    engine_class: ClassVar[type[Engine]] = _ForgetfulEngine


class _ResurrectingEngine(Engine):
    """A ``remove`` forgets that the removed message expired (Expired -> live: illegal)."""

    def apply(self, op: Op) -> None:
        super().apply(op)
        if isinstance(op, Remove) and op.ctx in self.contexts:
            c = self.contexts[op.ctx]
            for uid, st in list(c.stored.items()):
                if st is MsgState.EXPIRED:
                    del c.stored[uid]


class ResurrectsRemoved(KVTether):
    """Runs on an engine that brings removed messages back to life."""

    name: ClassVar[str] = "mutant-resurrects-removed"
    engine_class: ClassVar[type[Engine]] = _ResurrectingEngine


# -- written the way an outside policy author errs (kvmodel issue 12): a refused decision, an
# exception, nondeterminism, a production idle-timeout rule, a cached order


class DoubleFreeOnClose(KVTether):
    """At a ``close``, names every dead block twice (a list concatenated with itself): the
    engine refuses the second free, which a trusting engine would have carried out."""

    name: ClassVar[str] = "mutant-double-free-on-close"

    def on_op(self, view: ModelView, op: Op) -> Iterable[BlockId]:
        dead = list(view.dead())
        return dead + dead if isinstance(op, Close) else dead


class RaisesOnCompactor(KVTether):
    """Keeps a per-agent-kind table that forgot compactors: ``on_op`` raises ``KeyError`` on
    any op of a compactor context."""

    name: ClassVar[str] = "mutant-raises-on-compactor"
    _weight: ClassVar[dict[str, int]] = {"main": 0, "lead": 0, "worker": 1, "reviewer": 2}

    def on_op(self, view: ModelView, op: Op) -> Iterable[BlockId]:
        ctx = getattr(op, "ctx", None)
        if ctx is not None and ctx in view.open_contexts():
            _ = self._weight[view.context(ctx).agent.value]
        return view.dead()


class SharedCursorLRU(LRU):
    """LRU whose ties (equal ``last_access``) rotate with a cursor kept at module level, shared
    by every instance: the second run of the same trace breaks ties the other way."""

    name: ClassVar[str] = "mutant-shared-cursor-lru"
    rank: ClassVar[tuple[RankTerm, ...]] = ()

    def __init__(self) -> None:
        self.flip = next(_SHARED_CURSOR) % 2 == 1

    def eviction_order(self, view: ModelView, candidates: Sequence[BlockInfo]) -> Iterable[BlockId]:
        sign = -1 if self.flip else 1
        return [b.id for b in sorted(candidates, key=lambda b: (b.last_access, sign * b.id))]


_SHARED_CURSOR = itertools.count()


class IdleTimeoutReclaim(KVTether):
    """KVTether plus a common production rule: free any block idle for 4 time units or more --
    pinned ones included."""

    name: ClassVar[str] = "mutant-idle-timeout-reclaim"

    def on_op(self, view: ModelView, op: Op) -> Iterable[BlockId]:
        dead = set(view.dead())
        idle = {b for b in view.resident() if view.now - view.block(b).last_access >= 4.0}
        return sorted(dead | idle)


class StaleCachedOrder(KVTether):
    """Sorts the candidates by KVTether's rank once and keeps evicting from that cached order
    until it runs dry, although states change between evictions."""

    name: ClassVar[str] = "mutant-stale-cached-order"
    rank: ClassVar[tuple[RankTerm, ...]] = ()

    def __init__(self) -> None:
        self._order: list[BlockId] = []

    def eviction_order(self, view: ModelView, candidates: Sequence[BlockInfo]) -> Iterable[BlockId]:
        ids = {b.id for b in candidates}
        if not any(b in ids for b in self._order):
            ranked = sorted(candidates, key=lambda b: rank_key(KVTether.rank, b))
            self._order = [b.id for b in ranked]
        return [b for b in self._order if b in ids] + sorted(ids - set(self._order))


# -- the engine's rank index, the way a port of it errs (issue 18): every invariant still holds
# -- a victim of the right class is chosen -- but not the one the declared rank orders first;
# the engine's self-check (the declared rank over the contract model's candidates) sees it


class _HeadsOnlyIndex(RankIndex):
    """Grouped keying that, on a change to a context, re-keys its loose blocks and its groups'
    first blocks but never takes out the members the change made unplain (an edit cut the
    valid prefix, a pin covered them): they wait behind a live head in their old place."""

    def _context_changed(self, cid: ContextId) -> None:
        held = self.ctxs.get(cid)
        if held is None:
            return
        self.dirty_blocks.update(held.loose)
        for tier in held.groups:
            self.unheaded.add((cid, tier))


class _HeadsOnlyEngine(Engine):
    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        if isinstance(self.victims, RankIndex):
            index = _HeadsOnlyIndex(self, self.victims.terms, self.victims.features)
            self.victims = index
            self.residency.marks = index


class StaleGroupIndex(KVTether):
    """Runs on an engine whose rank index leaves Expired and Pinned blocks in their context's
    group of plain blocks."""

    name: ClassVar[str] = "mutant-stale-group-index"
    engine_class: ClassVar[type[Engine]] = _HeadsOnlyEngine


class _AlwaysLazyEngine(Engine):
    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        if isinstance(self.victims, RankIndex):
            self.victims.lazy, self.victims.grouped = True, False


class LazyIndexUnderMRU(KVTether):
    """Runs on an engine whose rank index keys every rank lazily -- as if a context's change
    could only raise a key -- although suspending a context lowers its blocks' keys under
    KVTether's rank (Active -> Suspended, and MRU within Suspended)."""

    name: ClassVar[str] = "mutant-lazy-index-under-mru"
    engine_class: ClassVar[type[Engine]] = _AlwaysLazyEngine


# -- one mutant for every claim of every built-in policy (kvmodel issue 12). Each bug is a mixin
# an outside author could plausibly write, applied to every policy that claims what it breaks.


class _ShallowFirst(BasePolicy):
    """Evicts the shallowest candidates first ("the oldest KV goes first"), keeping the
    parent's order among blocks of equal depth: a chain loses its head before its tail."""

    def eviction_order(self, view: ModelView, candidates: Sequence[BlockInfo]) -> Iterable[BlockId]:
        depth = {b.id: b.depth for b in candidates}
        return sorted(super().eviction_order(view, candidates), key=lambda b: depth[b])


class _CappedReclaim(BasePolicy):
    """Rate-limits reclaim to two blocks per op, shallowest first ("free the oldest KV
    first"). Under a policy that reclaims dead KV eagerly a chain's blocks die together, so the
    heads go and the tails stay resident: orphans (and zombie KV until later ops catch up)."""

    def on_op(self, view: ModelView, op: Op) -> Iterable[BlockId]:
        return sorted(super().on_op(view, op), key=lambda b: view.block(b).depth)[:2]


class _ReclaimAtBoundaries(BasePolicy):
    """Reclaims dead KV only at turn and context boundaries (``turn_end``, ``return``,
    ``close``, ``end_session``): what a ``remove`` or ``replace`` kills stays resident."""

    def on_op(self, view: ModelView, op: Op) -> Iterable[BlockId]:
        out = list(super().on_op(view, op))
        if isinstance(op, TurnEnd | Return | Close | EndSession):
            return out
        dead = set(view.dead())
        return [b for b in out if b not in dead]


class _ReclaimOneOpLate(BasePolicy):
    """Batches reclaim: frees the blocks that were already dead at the previous op, so what an
    op kills survives it (a lazy free list flushed one op late)."""

    def __init__(self) -> None:
        super().__init__()
        self._was_dead: set[BlockId] = set()

    def on_op(self, view: ModelView, op: Op) -> Iterable[BlockId]:
        out = list(super().on_op(view, op))
        dead = set(view.dead())
        late = [b for b in out if b not in dead or b in self._was_dead]
        self._was_dead = dead - set(late)
        return late


class _ReclaimsExpired(BasePolicy):
    """Treats Expired like Dead ("nobody will ask for it again") and frees it at once,
    although a live context may still hold it."""

    def on_op(self, view: ModelView, op: Op) -> Iterable[BlockId]:
        out = set(super().on_op(view, op))
        out |= {b for b in view.resident() if view.block(b).state is _C.EXPIRED}
        return sorted(out)


class _NoBypass(BasePolicy):
    """Indexes Temporary KV like any other (the bypass flag forgotten)."""

    def place(self, view: ModelView, block: NewBlock) -> Placement:
        return attrs.evolve(super().place(view, block), bypass=False)


class _AllHBMFirst(LachesisDet):
    """Every segment HBM-first, whatever its lifetime class."""

    def tiers_for(self, view: ModelView, cls: SegmentClass) -> tuple[TierName, ...]:
        return tuple(t.name for t in view.tiers())


class ShallowFirstBelady(_ShallowFirst, Belady):
    name: ClassVar[str] = "mutant-shallow-first-belady"


class CappedReclaimKVTether(_CappedReclaim, KVTether):
    name: ClassVar[str] = "mutant-capped-reclaim-kvtether"


class CappedReclaimLachesis(_CappedReclaim, Lachesis):
    name: ClassVar[str] = "mutant-capped-reclaim-lachesis"


class CappedReclaimLachesisDet(_CappedReclaim, LachesisDet):
    name: ClassVar[str] = "mutant-capped-reclaim-lachesis-det"


class CappedReclaimTetherLachesis(_CappedReclaim, TetherLachesis):
    name: ClassVar[str] = "mutant-capped-reclaim-tether-lachesis"


class ShallowFirstTTL(_ShallowFirst, TTL):
    name: ClassVar[str] = "mutant-shallow-first-ttl"


class ShallowFirstVLLM(_ShallowFirst, VLLMPrefix):
    name: ClassVar[str] = "mutant-shallow-first-vllm"


class BoundaryReclaimKVTether(_ReclaimAtBoundaries, KVTether):
    name: ClassVar[str] = "mutant-boundary-reclaim-kvtether"


class BoundaryReclaimLachesis(_ReclaimAtBoundaries, Lachesis):
    name: ClassVar[str] = "mutant-boundary-reclaim-lachesis"


class BoundaryReclaimLachesisDet(_ReclaimAtBoundaries, LachesisDet):
    name: ClassVar[str] = "mutant-boundary-reclaim-lachesis-det"


class BoundaryReclaimTetherLachesis(_ReclaimAtBoundaries, TetherLachesis):
    name: ClassVar[str] = "mutant-boundary-reclaim-tether-lachesis"


class BoundaryReclaimOptPlacement(_ReclaimAtBoundaries, OptPlacement):
    name: ClassVar[str] = "mutant-boundary-reclaim-opt-placement"


class LateReclaimKVTether(_ReclaimOneOpLate, KVTether):
    name: ClassVar[str] = "mutant-late-reclaim-kvtether"


class LateReclaimLachesis(_ReclaimOneOpLate, Lachesis):
    name: ClassVar[str] = "mutant-late-reclaim-lachesis"


class LateReclaimLachesisDet(_ReclaimOneOpLate, LachesisDet):
    name: ClassVar[str] = "mutant-late-reclaim-lachesis-det"


class LateReclaimTetherLachesis(_ReclaimOneOpLate, TetherLachesis):
    name: ClassVar[str] = "mutant-late-reclaim-tether-lachesis"


class LateReclaimOptPlacement(_ReclaimOneOpLate, OptPlacement):
    name: ClassVar[str] = "mutant-late-reclaim-opt-placement"


class ReclaimsExpiredLachesis(_ReclaimsExpired, Lachesis):
    name: ClassVar[str] = "mutant-reclaims-expired-lachesis"


class ReclaimsExpiredLachesisDet(_ReclaimsExpired, LachesisDet):
    name: ClassVar[str] = "mutant-reclaims-expired-lachesis-det"


class ReclaimsExpiredTetherLachesis(_ReclaimsExpired, TetherLachesis):
    name: ClassVar[str] = "mutant-reclaims-expired-tether-lachesis"


class ReclaimsExpiredOptPlacement(_ReclaimsExpired, OptPlacement):
    name: ClassVar[str] = "mutant-reclaims-expired-opt-placement"


class DeadAfterSuspendedLachesis(_DeadAfterSuspended, Lachesis):
    name: ClassVar[str] = "mutant-dead-after-suspended-lachesis"


class DeadAfterSuspendedLachesisDet(_DeadAfterSuspended, LachesisDet):
    name: ClassVar[str] = "mutant-dead-after-suspended-lachesis-det"


class DeadAfterSuspendedTetherLachesis(_DeadAfterSuspended, TetherLachesis):
    name: ClassVar[str] = "mutant-dead-after-suspended-tether-lachesis"


class MRUInvertedTetherLachesis(TetherLachesis):
    """tether-lachesis with KVTether's Suspended order inverted (LRU where MRU is claimed)."""

    name: ClassVar[str] = "mutant-mru-inverted-tether-lachesis"
    rank: ClassVar[tuple[RankTerm, ...]] = MRUInverted.rank


class StateBlindTetherLachesis(TetherLachesis):
    """tether-lachesis ranking by recency alone (the lifecycle rank dropped in a refactor)."""

    name: ClassVar[str] = "mutant-state-blind-tether-lachesis"
    rank: ClassVar[tuple[RankTerm, ...]] = (RankTerm("last_access"), RankTerm("depth", True))


class NoBypassTetherLachesis(_NoBypass, TetherLachesis):
    name: ClassVar[str] = "mutant-no-bypass-tether-lachesis"


class AllHBMFirstLachesis(_AllHBMFirst, Lachesis):
    name: ClassVar[str] = "mutant-all-hbm-first-lachesis"


class AllHBMFirstTetherLachesis(_AllHBMFirst, TetherLachesis):
    name: ClassVar[str] = "mutant-all-hbm-first-tether-lachesis"


class CappedReclaimDiscovered(_CappedReclaim, Discovered):
    name: ClassVar[str] = "mutant-capped-reclaim-discovered"


class BoundaryReclaimDiscovered(_ReclaimAtBoundaries, Discovered):
    name: ClassVar[str] = "mutant-boundary-reclaim-discovered"


class LateReclaimDiscovered(_ReclaimOneOpLate, Discovered):
    name: ClassVar[str] = "mutant-late-reclaim-discovered"


class ReclaimsExpiredDiscovered(_ReclaimsExpired, Discovered):
    name: ClassVar[str] = "mutant-reclaims-expired-discovered"


class DeadAfterSuspendedDiscovered(_DeadAfterSuspended, Discovered):
    name: ClassVar[str] = "mutant-dead-after-suspended-discovered"


class MRUInvertedDiscovered(Discovered):
    """The discovered policy with its Suspended order inverted (LRU where MRU is claimed)."""

    name: ClassVar[str] = "mutant-mru-inverted-discovered"
    rank: ClassVar[tuple[RankTerm, ...]] = tuple(
        attrs.evolve(t, descending=False) if t.feature == "suspend_time" else t
        for t in Discovered.rank
    )


class NoBypassDiscovered(_NoBypass, Discovered):
    name: ClassVar[str] = "mutant-no-bypass-discovered"


class AllHBMFirstDiscovered(_AllHBMFirst, Discovered):
    name: ClassVar[str] = "mutant-all-hbm-first-discovered"


#: import path -> the invariant it must be caught breaking
MUTANTS: Mapping[str, str] = MappingProxyType(
    {
        "checkers.search.mutants:LateDeadReclaim": "no-live-eviction-before-dead-reclaim",
        "checkers.search.mutants:MRUInverted": "suspended-mru",
        "checkers.search.mutants:IndexesTemporary": "temporary-bypass",
        "checkers.search.mutants:EvictsPinnedWhenFull": "pinned-never-evicted",
        "checkers.search.mutants:EvictsInFlight": "no-eviction-in-flight",
        "checkers.search.mutants:DropsForkPrefix": "reclaim-dead-only",
        "checkers.search.mutants:FreesSharedAtReturn": "reclaim-dead-only",
        "checkers.search.mutants:LeadInHBM": "deterministic-placement",
        "checkers.search.mutants:RootFirstLRU": "prefix-closed-residency",
        "checkers.search.mutants:StaleHitAfterReplace": "no-stale-hit",
        "checkers.search.mutants:WritesPerSegment": "accounting",
        "checkers.search.mutants:ForgetsHolder": "chains",
        "checkers.search.mutants:ResurrectsRemoved": "legal-transitions",
        "checkers.search.mutants:DoubleFreeOnClose": "accounting",
        "checkers.search.mutants:RaisesOnCompactor": "policy-protocol",
        "checkers.search.mutants:SharedCursorLRU": "nondeterministic",
        "checkers.search.mutants:IdleTimeoutReclaim": "pinned-never-evicted",
        "checkers.search.mutants:StaleCachedOrder": "state-priority-eviction",
        # one for every claim of every built-in policy
        "checkers.search.mutants:ShallowFirstBelady": "prefix-closed-residency",
        "checkers.search.mutants:CappedReclaimKVTether": "prefix-closed-residency",
        "checkers.search.mutants:CappedReclaimLachesis": "prefix-closed-residency",
        "checkers.search.mutants:CappedReclaimLachesisDet": "prefix-closed-residency",
        "checkers.search.mutants:CappedReclaimTetherLachesis": "prefix-closed-residency",
        "checkers.search.mutants:ShallowFirstTTL": "prefix-closed-residency",
        "checkers.search.mutants:ShallowFirstVLLM": "prefix-closed-residency",
        "checkers.search.mutants:BoundaryReclaimKVTether": "no-zombie-kv",
        "checkers.search.mutants:BoundaryReclaimLachesis": "no-zombie-kv",
        "checkers.search.mutants:BoundaryReclaimLachesisDet": "no-zombie-kv",
        "checkers.search.mutants:BoundaryReclaimTetherLachesis": "no-zombie-kv",
        "checkers.search.mutants:BoundaryReclaimOptPlacement": "no-zombie-kv",
        "checkers.search.mutants:LateReclaimKVTether": "free-at-boundary",
        "checkers.search.mutants:LateReclaimLachesis": "free-at-boundary",
        "checkers.search.mutants:LateReclaimLachesisDet": "free-at-boundary",
        "checkers.search.mutants:LateReclaimTetherLachesis": "free-at-boundary",
        "checkers.search.mutants:LateReclaimOptPlacement": "free-at-boundary",
        "checkers.search.mutants:ReclaimsExpiredLachesis": "reclaim-dead-only",
        "checkers.search.mutants:ReclaimsExpiredLachesisDet": "reclaim-dead-only",
        "checkers.search.mutants:ReclaimsExpiredTetherLachesis": "reclaim-dead-only",
        "checkers.search.mutants:ReclaimsExpiredOptPlacement": "reclaim-dead-only",
        "checkers.search.mutants:DeadAfterSuspendedLachesis": (
            "no-live-eviction-before-dead-reclaim"
        ),
        "checkers.search.mutants:DeadAfterSuspendedLachesisDet": (
            "no-live-eviction-before-dead-reclaim"
        ),
        "checkers.search.mutants:DeadAfterSuspendedTetherLachesis": (
            "no-live-eviction-before-dead-reclaim"
        ),
        "checkers.search.mutants:MRUInvertedTetherLachesis": "suspended-mru",
        "checkers.search.mutants:StateBlindTetherLachesis": "state-priority-eviction",
        "checkers.search.mutants:NoBypassTetherLachesis": "temporary-bypass",
        "checkers.search.mutants:AllHBMFirstLachesis": "deterministic-placement",
        "checkers.search.mutants:AllHBMFirstTetherLachesis": "deterministic-placement",
        "checkers.search.mutants:CappedReclaimDiscovered": "prefix-closed-residency",
        "checkers.search.mutants:BoundaryReclaimDiscovered": "no-zombie-kv",
        "checkers.search.mutants:LateReclaimDiscovered": "free-at-boundary",
        "checkers.search.mutants:ReclaimsExpiredDiscovered": "reclaim-dead-only",
        "checkers.search.mutants:DeadAfterSuspendedDiscovered": (
            "no-live-eviction-before-dead-reclaim"
        ),
        "checkers.search.mutants:MRUInvertedDiscovered": "suspended-mru",
        "checkers.search.mutants:NoBypassDiscovered": "temporary-bypass",
        "checkers.search.mutants:AllHBMFirstDiscovered": "deterministic-placement",
        # engine bugs that no invariant sees: caught by the engine's self-check
        "checkers.search.mutants:StaleGroupIndex": "engine-contract",
        "checkers.search.mutants:LazyIndexUnderMRU": "engine-contract",
        **ENGINE_MUTANTS,
        # written after the search, to test it on bugs it was not shaped for
        **OUTSIDE_MUTANTS,
    }
)
