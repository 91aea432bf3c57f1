"""Claim mutants: for every claim of every built-in policy, a mutant of that policy caught
breaking it (kvmodel issue 12). Each bug is a mixin an outside policy author could plausibly
write -- evict the oldest (shallowest) KV first, rate-limit or batch reclaim, reclaim only at
boundaries, free Expired KV as if Dead, rank Dead after Suspended, forget the bypass flag, place
every segment HBM-first -- applied to every policy that claims what it breaks.

Part of the mutant zoo: :data:`CLAIM_MUTANTS` is merged into
:data:`checkers.search.mutants.MUTANTS`, the one manifest, and each mutant resolves by import
path (``kvmodel check checkers.search.claim_mutants:CappedReclaimKVTether``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import ClassVar

import attrs

from kvmodel.ids import BlockId, TierName
from kvmodel.io.trace import Close, EndSession, Op, Return, TurnEnd
from kvmodel.lifecycle import BlockClass
from kvmodel.policy import BasePolicy, Placement, RankTerm, Reclaim
from kvmodel.view import BlockInfo, ModelView, NewBlock
from policies.discovered import Discovered
from policies.kvtether import KVTether
from policies.lachesis import Lachesis, LachesisDet, SegmentClass
from policies.offline import Belady, OptPlacement
from policies.offload import KVTetherOffload, LRUDemote, LRUOffload, VLLMOffload, VLLMOffloadARC
from policies.prediction import TTL
from policies.tether_lachesis import TetherLachesis
from policies.vllm_prefix import VLLMPrefix

__all__ = [
    "CLAIM_MUTANTS",
    "AllHBMFirstDiscovered",
    "AllHBMFirstLachesis",
    "AllHBMFirstTetherLachesis",
    "BoundaryReclaimDiscovered",
    "BoundaryReclaimKVTether",
    "BoundaryReclaimKVTetherOffload",
    "BoundaryReclaimLachesis",
    "BoundaryReclaimLachesisDet",
    "BoundaryReclaimOptPlacement",
    "BoundaryReclaimTetherLachesis",
    "CappedReclaimDiscovered",
    "CappedReclaimKVTether",
    "CappedReclaimKVTetherOffload",
    "CappedReclaimLachesis",
    "CappedReclaimLachesisDet",
    "CappedReclaimTetherLachesis",
    "DeadAfterSuspendedDiscovered",
    "DeadAfterSuspendedKVTetherOffload",
    "DeadAfterSuspendedLachesis",
    "DeadAfterSuspendedLachesisDet",
    "DeadAfterSuspendedTetherLachesis",
    "LateReclaimDiscovered",
    "LateReclaimKVTether",
    "LateReclaimKVTetherOffload",
    "LateReclaimLachesis",
    "LateReclaimLachesisDet",
    "LateReclaimOptPlacement",
    "LateReclaimTetherLachesis",
    "MRUInvertedDiscovered",
    "MRUInvertedKVTetherOffload",
    "MRUInvertedTetherLachesis",
    "NoBypassDiscovered",
    "NoBypassKVTetherOffload",
    "NoBypassTetherLachesis",
    "ReclaimsExpiredDiscovered",
    "ReclaimsExpiredKVTetherOffload",
    "ReclaimsExpiredLachesis",
    "ReclaimsExpiredLachesisDet",
    "ReclaimsExpiredOptPlacement",
    "ReclaimsExpiredTetherLachesis",
    "ShallowFirstBelady",
    "ShallowFirstLRUDemote",
    "ShallowFirstLRUOffload",
    "ShallowFirstTTL",
    "ShallowFirstVLLM",
    "ShallowFirstVLLMOffload",
    "ShallowFirstVLLMOffloadARC",
    "StateBlindKVTetherOffload",
    "StateBlindTetherLachesis",
    "suspended_lru",
]

_C = BlockClass


def suspended_lru(rank: Sequence[RankTerm]) -> tuple[RankTerm, ...]:
    """``rank`` with its order within Suspended inverted: LRU where MRU is claimed."""
    return tuple(
        attrs.evolve(t, descending=False) if t.feature == "suspend_time" else t for t in rank
    )


class _DeadAfterSuspended(BasePolicy):
    """No eager reclaim, and Dead ranks after Suspended: live KV is evicted while dead KV
    waits."""

    rank: ClassVar[tuple[RankTerm, ...]] = (
        RankTerm("state", order=(_C.SUSPENDED, _C.DEAD, _C.EXPIRED, _C.TEMPORARY, _C.ACTIVE)),
        RankTerm("last_access"),
        RankTerm("depth", descending=True),
    )

    reclaim: ClassVar[Reclaim | None] = Reclaim.NONE


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
    rank: ClassVar[tuple[RankTerm, ...]] = suspended_lru(TetherLachesis.rank)


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
    rank: ClassVar[tuple[RankTerm, ...]] = suspended_lru(Discovered.rank)


class NoBypassDiscovered(_NoBypass, Discovered):
    name: ClassVar[str] = "mutant-no-bypass-discovered"


class AllHBMFirstDiscovered(_AllHBMFirst, Discovered):
    name: ClassVar[str] = "mutant-all-hbm-first-discovered"


class CappedReclaimKVTetherOffload(_CappedReclaim, KVTetherOffload):
    name: ClassVar[str] = "mutant-capped-reclaim-kvtether-offload"


class BoundaryReclaimKVTetherOffload(_ReclaimAtBoundaries, KVTetherOffload):
    name: ClassVar[str] = "mutant-boundary-reclaim-kvtether-offload"


class LateReclaimKVTetherOffload(_ReclaimOneOpLate, KVTetherOffload):
    name: ClassVar[str] = "mutant-late-reclaim-kvtether-offload"


class ReclaimsExpiredKVTetherOffload(_ReclaimsExpired, KVTetherOffload):
    name: ClassVar[str] = "mutant-reclaims-expired-kvtether-offload"


class DeadAfterSuspendedKVTetherOffload(_DeadAfterSuspended, KVTetherOffload):
    name: ClassVar[str] = "mutant-dead-after-suspended-kvtether-offload"


class MRUInvertedKVTetherOffload(KVTetherOffload):
    """kvtether-offload with KVTether's Suspended order inverted (LRU where MRU is claimed)."""

    name: ClassVar[str] = "mutant-mru-inverted-kvtether-offload"
    rank: ClassVar[tuple[RankTerm, ...]] = suspended_lru(KVTetherOffload.rank)


class StateBlindKVTetherOffload(KVTetherOffload):
    """kvtether-offload ranking by recency alone (the lifecycle rank dropped in a refactor)."""

    name: ClassVar[str] = "mutant-state-blind-kvtether-offload"
    rank: ClassVar[tuple[RankTerm, ...]] = (RankTerm("last_access"), RankTerm("depth", True))


class NoBypassKVTetherOffload(_NoBypass, KVTetherOffload):
    name: ClassVar[str] = "mutant-no-bypass-kvtether-offload"


class ShallowFirstLRUOffload(_ShallowFirst, LRUOffload):
    name: ClassVar[str] = "mutant-shallow-first-lru-offload"


class ShallowFirstLRUDemote(_ShallowFirst, LRUDemote):
    name: ClassVar[str] = "mutant-shallow-first-lru-demote"


class ShallowFirstVLLMOffload(_ShallowFirst, VLLMOffload):
    name: ClassVar[str] = "mutant-shallow-first-vllm-offload"


class ShallowFirstVLLMOffloadARC(_ShallowFirst, VLLMOffloadARC):
    name: ClassVar[str] = "mutant-shallow-first-vllm-offload-arc"


#: import path -> the invariant it must be caught breaking (merged into ``MUTANTS``)
CLAIM_MUTANTS: Mapping[str, str] = MappingProxyType(
    {
        "checkers.search.claim_mutants:ShallowFirstBelady": "prefix-closed-residency",
        "checkers.search.claim_mutants:CappedReclaimKVTetherOffload": "prefix-closed-residency",
        "checkers.search.claim_mutants:BoundaryReclaimKVTetherOffload": "no-zombie-kv",
        "checkers.search.claim_mutants:LateReclaimKVTetherOffload": "free-at-boundary",
        "checkers.search.claim_mutants:ReclaimsExpiredKVTetherOffload": "reclaim-dead-only",
        "checkers.search.claim_mutants:DeadAfterSuspendedKVTetherOffload": (
            "no-live-eviction-before-dead-reclaim"
        ),
        "checkers.search.claim_mutants:MRUInvertedKVTetherOffload": "suspended-mru",
        "checkers.search.claim_mutants:StateBlindKVTetherOffload": "state-priority-eviction",
        "checkers.search.claim_mutants:NoBypassKVTetherOffload": "temporary-bypass",
        "checkers.search.claim_mutants:ShallowFirstLRUOffload": "prefix-closed-residency",
        "checkers.search.claim_mutants:ShallowFirstLRUDemote": "prefix-closed-residency",
        "checkers.search.claim_mutants:ShallowFirstVLLMOffload": "prefix-closed-residency",
        "checkers.search.claim_mutants:ShallowFirstVLLMOffloadARC": "prefix-closed-residency",
        "checkers.search.claim_mutants:CappedReclaimKVTether": "prefix-closed-residency",
        "checkers.search.claim_mutants:CappedReclaimLachesis": "prefix-closed-residency",
        "checkers.search.claim_mutants:CappedReclaimLachesisDet": "prefix-closed-residency",
        "checkers.search.claim_mutants:CappedReclaimTetherLachesis": "prefix-closed-residency",
        "checkers.search.claim_mutants:ShallowFirstTTL": "prefix-closed-residency",
        "checkers.search.claim_mutants:ShallowFirstVLLM": "prefix-closed-residency",
        "checkers.search.claim_mutants:BoundaryReclaimKVTether": "no-zombie-kv",
        "checkers.search.claim_mutants:BoundaryReclaimLachesis": "no-zombie-kv",
        "checkers.search.claim_mutants:BoundaryReclaimLachesisDet": "no-zombie-kv",
        "checkers.search.claim_mutants:BoundaryReclaimTetherLachesis": "no-zombie-kv",
        "checkers.search.claim_mutants:BoundaryReclaimOptPlacement": "no-zombie-kv",
        "checkers.search.claim_mutants:LateReclaimKVTether": "free-at-boundary",
        "checkers.search.claim_mutants:LateReclaimLachesis": "free-at-boundary",
        "checkers.search.claim_mutants:LateReclaimLachesisDet": "free-at-boundary",
        "checkers.search.claim_mutants:LateReclaimTetherLachesis": "free-at-boundary",
        "checkers.search.claim_mutants:LateReclaimOptPlacement": "free-at-boundary",
        "checkers.search.claim_mutants:ReclaimsExpiredLachesis": "reclaim-dead-only",
        "checkers.search.claim_mutants:ReclaimsExpiredLachesisDet": "reclaim-dead-only",
        "checkers.search.claim_mutants:ReclaimsExpiredTetherLachesis": "reclaim-dead-only",
        "checkers.search.claim_mutants:ReclaimsExpiredOptPlacement": "reclaim-dead-only",
        "checkers.search.claim_mutants:DeadAfterSuspendedLachesis": (
            "no-live-eviction-before-dead-reclaim"
        ),
        "checkers.search.claim_mutants:DeadAfterSuspendedLachesisDet": (
            "no-live-eviction-before-dead-reclaim"
        ),
        "checkers.search.claim_mutants:DeadAfterSuspendedTetherLachesis": (
            "no-live-eviction-before-dead-reclaim"
        ),
        "checkers.search.claim_mutants:MRUInvertedTetherLachesis": "suspended-mru",
        "checkers.search.claim_mutants:StateBlindTetherLachesis": "state-priority-eviction",
        "checkers.search.claim_mutants:NoBypassTetherLachesis": "temporary-bypass",
        "checkers.search.claim_mutants:AllHBMFirstLachesis": "deterministic-placement",
        "checkers.search.claim_mutants:AllHBMFirstTetherLachesis": "deterministic-placement",
        "checkers.search.claim_mutants:CappedReclaimDiscovered": "prefix-closed-residency",
        "checkers.search.claim_mutants:BoundaryReclaimDiscovered": "no-zombie-kv",
        "checkers.search.claim_mutants:LateReclaimDiscovered": "free-at-boundary",
        "checkers.search.claim_mutants:ReclaimsExpiredDiscovered": "reclaim-dead-only",
        "checkers.search.claim_mutants:DeadAfterSuspendedDiscovered": (
            "no-live-eviction-before-dead-reclaim"
        ),
        "checkers.search.claim_mutants:MRUInvertedDiscovered": "suspended-mru",
        "checkers.search.claim_mutants:NoBypassDiscovered": "temporary-bypass",
        "checkers.search.claim_mutants:AllHBMFirstDiscovered": "deterministic-placement",
    }
)
