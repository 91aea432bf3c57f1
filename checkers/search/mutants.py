"""The mutant zoo: deliberately broken policies (and a few engines), each breaking one invariant
subtly. ``kvmodel check`` must catch every one; the expected verdicts say which invariant.

Each mutant resolves by import path like any third-party policy
(``checkers.search.mutants:MRUInverted``) and is listed in :data:`MUTANTS` with the invariant it
breaks. Engine bugs are planted through a policy's ``engine_class`` (see
:func:`checkers.invariants.replay.engine_for`). :data:`MUTANTS` is the one manifest of the zoo:
it also takes in the mutants of :mod:`checkers.search.claim_mutants` (one for every claim of
every built-in policy), :mod:`checkers.search.engine_mutants` and
:mod:`checkers.search.outside_mutants`.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import ClassVar

from checkers.search.claim_mutants import CLAIM_MUTANTS, _DeadAfterSuspended
from checkers.search.engine_mutants import ENGINE_MUTANTS
from checkers.search.movement_mutants import MOVEMENT_MUTANTS
from checkers.search.outside_mutants import OUTSIDE_MUTANTS
from kvmodel._rank_index import RankIndex
from kvmodel.engine import Engine
from kvmodel.ids import BlockId, ContextId
from kvmodel.io.trace import Close, Infer, Op, Remove, Replace, Return
from kvmodel.lifecycle import BlockClass, MsgState
from kvmodel.policy import Placement, RankTerm, rank_key
from kvmodel.view import BlockInfo, ModelView, NewBlock
from policies.kvtether import KVTether
from policies.lachesis import LachesisDet
from policies.lru import LRU

__all__ = [
    "MUTANTS",
    "DoubleFreeOnClose",
    "DropsForkPrefix",
    "EvictsInFlight",
    "EvictsPinnedWhenFull",
    "ForgetsHolder",
    "FreesSharedAtReturn",
    "IdleTimeoutReclaim",
    "IndexesTemporary",
    "LateDeadReclaim",
    "LazyIndexUnderMRU",
    "LeadInHBM",
    "MRUInverted",
    "RaisesOnCompactor",
    "ResurrectsRemoved",
    "RootFirstLRU",
    "SharedCursorLRU",
    "StaleCachedOrder",
    "StaleGroupIndex",
    "StaleHitAfterReplace",
    "WritesPerSegment",
]

_C = BlockClass


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
        self.dirty_blocks.update(dict.fromkeys(held.loose))
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
        **CLAIM_MUTANTS,
        # engine bugs that no invariant sees: caught by the engine's self-check
        "checkers.search.mutants:StaleGroupIndex": "engine-contract",
        "checkers.search.mutants:LazyIndexUnderMRU": "engine-contract",
        **ENGINE_MUTANTS,
        # written after the search, to test it on bugs it was not shaped for
        **OUTSIDE_MUTANTS,
        # the movement layer's (spec/movement.md MV10)
        **MOVEMENT_MUTANTS,
    }
)
