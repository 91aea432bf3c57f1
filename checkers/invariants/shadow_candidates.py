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

__all__ = ["Candidates", "KeptTerms", "TierCandidates"]


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
        self.tiers: dict[str, TierCandidates] = {}
        self._entries = itertools.count()
        #: each holder's stamp now (:meth:`~ShadowContext.stamp`), for the terms kept from
        #: earlier inferences (``shadow.kept``)
        self._stamps = {c.id: c.stamp() for c in shadow.ctxs.values() if c.open}
        for key in shadow.resident:
            if key not in flight:
                self._enter(key)

    def _terms(self, key: BlockKey, fresh: bool) -> EvictionTerms:
        """``key``'s terms: those an earlier inference found, if nothing they read has changed
        since -- its holders (each by its stamp), when it was used, written and where it is --
        else computed. ``fresh``: computed (a cut within this inference changed holders after
        the stamps were taken), and not kept."""
        memo, shadow = self.memo, self.shadow
        if fresh:
            return shadow.evictable(key, memo.holders, memo.pins)
        stamps = self._stamps
        hs = memo.holders.get(key)
        # (one holder, most blocks: its stamp alone -- never equal to a tuple of stamps)
        held = stamps[hs[0].id] if hs and len(hs) == 1 else tuple(stamps[h.id] for h in hs or ())
        stamp = (
            held,
            shadow.touch[key],
            shadow.touch_op[key],
            shadow.born[key],
            shadow.slot[key],
            shadow.tier[key],
        )
        kept = shadow.kept.get(key)
        if kept is not None and kept[0] == stamp:
            return kept[1]
        info = shadow.evictable(key, memo.holders, memo.pins)
        shadow.kept[key] = (stamp, info)
        return info

    def _enter(self, key: BlockKey, fresh: bool = False) -> None:
        memo = self.memo
        info = memo.terms.get(key)
        if info is None:
            info = memo.terms[key] = self._terms(key, fresh)
        if info.state is BlockClass.PINNED:
            return
        t = self.tiers.get(tier := self.shadow.tier[key])
        if t is None:
            t = self.tiers[tier] = TierCandidates()
        t.members[key] = info
        term = (info.state, info.suspend_time)
        t.count[term] += 1
        n = next(self._entries)
        heapq.heappush(t.by_term.setdefault(term, []), (key, n, info))
        if self._key is not None:
            heapq.heappush(t.ranked, (self._key(info), key, n, info))

    def leave(self, key: BlockKey) -> None:
        """``key`` is no candidate any more (evicted, gone into flight, or its terms changed)."""
        t = self.tiers.get(self.shadow.tier.get(key, ""))
        info = t.members.pop(key, None) if t is not None else None
        if t is not None and info is not None:
            term = (info.state, info.suspend_time)
            t.count[term] -= 1
            if not t.count[term]:
                del t.count[term]

    def cut(self, victim: BlockKey, lost: list[tuple[BlockKey, ShadowContext]]) -> None:
        """``victim`` left memory and the chains holding it lost ``lost`` (after the drop)."""
        self.memo.cut(victim, lost)
        for key in dict.fromkeys(k for k, _ in lost):
            self.leave(key)
            if key in self.shadow.resident and key not in self.flight:
                self._enter(key, fresh=True)

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
