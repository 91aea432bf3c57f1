"""An inference's eviction candidates as the contract model (:class:`~checkers.invariants.
nversion.Shadow`) keeps them while it follows the engine's evictions: each block's terms found
once (:class:`KeptTerms`), the evictable blocks by tier (:class:`TierCandidates`), and each
eviction summarised for the checks (:class:`Candidates`; spec/invariants.md, Self-checks of the
engine).
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter
from collections.abc import Sequence

from checkers.invariants.predicates import OrderTerm
from checkers.invariants.shadow_state import ShadowState
from checkers.invariants.shadow_terms import Eviction, EvictionTerms, ShadowContext
from kvmodel.ids import BlockKey, ContextId
from kvmodel.lifecycle import BlockClass
from kvmodel.policy import RankTerm, key_function

__all__ = ["Candidates", "KeptTerms", "Pool", "TierCandidates"]


class KeptTerms:
    """One inference's eviction terms of each block, computed at most once: while its records
    are followed no message state, pin or suspension changes, and a block that is no candidate
    (in flight) is the only kind used. A block's terms change only when a chain stops holding
    it -- a drop cuts the chain there (:meth:`cut`) -- so only those are computed again."""

    __slots__ = ("holders", "pins", "terms")

    def __init__(
        self, holders: dict[BlockKey, list[ShadowContext]], pins: dict[ContextId, int]
    ) -> None:
        self.holders = holders
        self.pins = pins
        self.terms: dict[BlockKey, EvictionTerms] = {}

    def cut(self, victim: BlockKey, cut: list[tuple[BlockKey, ShadowContext]]) -> None:
        """``victim`` left memory, and the chains holding it lost ``cut``."""
        self.terms.pop(victim, None)
        for key, h in cut:
            self.terms.pop(key, None)
            hs = self.holders.get(key)
            if hs is not None:
                hs[:] = [x for x in hs if x is not h]


class TierCandidates:
    """One tier's evictable blocks during an inference: their terms, how many have each
    (class, suspension time), and heaps by key for each such pair and by rank key. The heaps are
    pruned lazily: an entry is stale once its block left or its terms were computed again."""

    __slots__ = ("by_term", "count", "members", "ranked")

    def __init__(self) -> None:
        self.members: dict[BlockKey, EvictionTerms] = {}
        self.count: Counter[OrderTerm] = Counter()
        #: (key, entry number, terms); (rank key, key, entry number, terms): the entry number
        #: orders a block's entries from before and after its terms were computed again
        self.by_term: dict[OrderTerm, list[tuple[BlockKey, int, EvictionTerms]]] = {}
        self.ranked: list[tuple[tuple[float, ...], BlockKey, int, EvictionTerms]] = []

    def least(self, term: OrderTerm) -> tuple[BlockKey, EvictionTerms]:
        """The member of smallest key with ``term`` (there is one: ``count[term]`` > 0)."""
        heap = self.by_term[term]
        while self.members.get(heap[0][0]) is not heap[0][2]:
            heapq.heappop(heap)
        return heap[0][0], heap[0][2]

    def first_ranked(self) -> tuple[tuple[float, ...], EvictionTerms] | None:
        """The member the rank orders first, with its rank key (None: no member)."""
        heap = self.ranked
        while heap and self.members.get(heap[0][1]) is not heap[0][3]:
            heapq.heappop(heap)
        return (heap[0][0], heap[0][3]) if heap else None


class Pool:
    """The evictable blocks kept from one inference that evicts to the next (the contract
    model's, ``ShadowState.pool``): by tier, as :class:`Candidates` keeps them within one. At
    each such inference it is brought up to date on the blocks whose terms can have changed
    since (:meth:`affected`) -- those of every context whose stamp moved (its chain then and
    now), those an op used, wrote or dropped (``dirty``, marked by the model as it does), and
    those going into or out of flight -- instead of every resident block."""

    __slots__ = ("chains", "dirty", "entries", "flight", "stamps", "synced", "tiers", "where")

    def __init__(self) -> None:
        self.tiers: dict[str, TierCandidates] = {}
        #: each member's tier (a block that left and was written again may be elsewhere)
        self.where: dict[BlockKey, str] = {}
        #: the open contexts' stamps and chain keys at the last sync, and its blocks in flight
        self.stamps: dict[ContextId, tuple[object, ...]] = {}
        self.chains: dict[ContextId, list[BlockKey]] = {}
        self.flight: set[BlockKey] = set()
        #: blocks used, written, indexed or dropped since the last sync
        self.dirty: set[BlockKey] = set()
        self.entries = itertools.count()
        self.synced = False

    def affected(
        self,
        shadow: ShadowState,
        stamps: dict[ContextId, tuple[object, ...]],
        flight: set[BlockKey],
    ) -> set[BlockKey]:
        """The blocks whose membership or terms can have changed since the last sync (every
        resident block at the first), and the sync's record of the contexts as they are now."""
        if not self.synced:
            out = set(shadow.resident) | set(self.where)
        else:
            out = self.dirty | self.flight | flight
            old = self.chains
            for cid, st in stamps.items():
                if self.stamps.get(cid) != st:
                    out.update(k for k, _ in shadow.ctxs[cid].chain)
                    out.update(old.get(cid, ()))
            for cid in self.stamps.keys() - stamps.keys():  # (closed since)
                out.update(old.get(cid, ()))
        chains = {}
        for cid, st in stamps.items():
            same = self.synced and self.stamps.get(cid) == st
            chains[cid] = self.chains[cid] if same else [k for k, _ in shadow.ctxs[cid].chain]
        self.stamps, self.chains, self.flight = stamps, chains, flight
        self.dirty = set()
        self.synced = True
        return out

    def leave(self, key: BlockKey) -> None:
        tier = self.where.pop(key, None)
        t = self.tiers.get(tier) if tier is not None else None
        info = t.members.pop(key, None) if t is not None else None
        if t is not None and info is not None:
            term = (info.state, info.suspend_time)
            t.count[term] -= 1
            if not t.count[term]:
                del t.count[term]
                t.by_term.pop(term, None)

    def compact(self) -> None:
        """Rebuild a heap whose stale entries outnumber its live ones (kept across inferences,
        entries pruned lazily would otherwise grow with the run)."""
        for t in self.tiers.values():
            if len(t.ranked) > 2 * len(t.members) + 64:
                t.ranked = [e for e in t.ranked if t.members.get(e[1]) is e[3]]
                heapq.heapify(t.ranked)
            for term, heap in t.by_term.items():
                if len(heap) > 2 * t.count[term] + 64:
                    live = [e for e in heap if t.members.get(e[0]) is e[2]]
                    heapq.heapify(live)
                    t.by_term[term] = live


class Candidates:
    """One inference's evictable blocks (resident, not in flight, not Pinned), by tier, kept
    from its first eviction to its last: computed once, then changed by what changes them --
    a victim leaves, a block goes into flight (an orphan rewritten), a drop cuts chains (the
    blocks cut have their terms computed again, :class:`KeptTerms`). Each eviction is then judged
    on a summary (:class:`~checkers.invariants.shadow_terms.Eviction`) in work proportional to
    its distinct (class, suspension time) pairs and a heap's log, where a scan of every
    resident block per eviction made a checked replay's work evictions x memory (a 1,595-op
    agentic trace on 4,608 blocks: 3 min; spec/invariants.md, Self-checks of the engine).
    ``tests/test_nversion.py`` compares every summary with one from a scan."""

    def __init__(
        self,
        shadow: ShadowState,
        memo: KeptTerms,
        flight: set[BlockKey],
        rank: tuple[RankTerm, ...] | None,
    ) -> None:
        self.shadow, self.memo, self.flight = shadow, memo, flight
        self.rank = rank
        self._key = key_function(rank) if rank is not None else None
        pool = shadow.pool
        if pool is None:
            pool = shadow.pool = Pool()
        self.pool = pool
        self.tiers = pool.tiers
        # (each context's stamp now, :meth:`~ShadowContext.stamp`: which changed since the
        # last sync)
        stamps = {c.id: c.stamp() for c in shadow.ctxs.values() if c.open}
        for key in pool.affected(shadow, stamps, flight):
            self.leave(key)
            if key in shadow.resident and key not in flight:
                self._enter(key)
        pool.compact()

    def _enter(self, key: BlockKey) -> None:
        memo = self.memo
        info = memo.terms.get(key)
        if info is None:
            info = memo.terms[key] = self.shadow.evictable(key, memo.holders, memo.pins)
        if info.state is BlockClass.PINNED:
            return
        t = self.tiers.get(tier := self.shadow.tier[key])
        if t is None:
            t = self.tiers[tier] = TierCandidates()
        t.members[key] = info
        self.pool.where[key] = tier
        term = (info.state, info.suspend_time)
        t.count[term] += 1
        n = next(self.pool.entries)
        heapq.heappush(t.by_term.setdefault(term, []), (key, n, info))
        if self._key is not None:
            heapq.heappush(t.ranked, (self._key(info), key, n, info))

    def leave(self, key: BlockKey) -> None:
        """``key`` is no candidate any more (evicted, gone into flight, or its terms changed)."""
        self.pool.leave(key)

    def cut(self, victim: BlockKey, lost: list[tuple[BlockKey, ShadowContext]]) -> None:
        """``victim`` left memory and the chains holding it lost ``lost`` (after the drop)."""
        self.memo.cut(victim, lost)
        for key in dict.fromkeys(k for k, _ in lost):
            self.leave(key)
            if key in self.shadow.resident and key not in self.flight:
                self._enter(key)

    def eviction(self, victim: BlockKey, tiers: Sequence[str]) -> Eviction:
        """The eviction of ``victim`` from ``tiers``, summarised; the victim's terms computed
        afresh, and the victim no candidate from now on."""
        self.leave(victim)
        memo = self.memo
        least: dict[OrderTerm, tuple[BlockKey, EvictionTerms]] = {}
        count = 0
        first: tuple[tuple[float, ...], EvictionTerms] | None = None
        for tn in dict.fromkeys(tiers):
            t = self.tiers.get(tn)
            if t is None:
                continue
            count += len(t.members)
            for term in t.count:
                c = t.least(term)
                if term not in least or c[0] < least[term][0]:
                    least[term] = c
            if (top := t.first_ranked()) is not None and (first is None or top[0] < first[0]):
                first = top
        reps = tuple(c for _, c in sorted(least.values(), key=lambda kc: kc[0]))
        mine = self.shadow.evictable(victim, memo.holders, memo.pins)
        ranked = first[1] if first is not None else None
        return Eviction(mine, reps, victim in self.flight, count, ranked)
