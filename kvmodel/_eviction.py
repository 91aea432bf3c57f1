"""Where victims come from: the policy's order over a candidate snapshot, or a rank index.

Both sources answer the engine's three questions during one inference: how many blocks are
evictable (``evictable``), which block to evict next from a set of tiers (``next_victim``), and
"the classes of some blocks changed under you" (``invalidate``). They must give identical
answers for a rank policy; a differential test replays random traces through both.

* :class:`PolicyOrder` -- any policy: list the candidates (O(resident blocks), from snapshots
  kept current by the marks: only blocks that changed are looked at again), ask the policy for
  an order once per inference, consume it lazily.
* :class:`~kvmodel._rank_index.RankIndex` -- a :class:`~kvmodel.policy.BasePolicy` whose order is
  its declarative ``rank``: a persistent heap of rank keys with lazy deletion, in its own module.
  Only blocks whose features may have changed since the last look are keyed again, so an
  inference that must evict costs O((changed + victims) log n) instead of O(n log n).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from kvmodel.contexts import Context
from kvmodel.errors import KVModelError, PolicyError, is_interrupt, policy_raised
from kvmodel.ids import BlockId, BlockKey, ContextId, TierName
from kvmodel.lifecycle import BlockClass
from kvmodel.policy import Policy
from kvmodel.residency import Residency
from kvmodel.view import BlockInfo, ModelView

if TYPE_CHECKING:
    from kvmodel._resident import ResidentBlock

__all__ = ["EvictionHost", "PolicyOrder"]


class EvictionHost(Protocol):
    """What a victim source reads of the engine it serves."""

    @property
    def residency(self) -> Residency: ...

    @property
    def view(self) -> ModelView: ...

    @property
    def policy(self) -> Policy: ...

    @property
    def blocks(self) -> Mapping[BlockId, ResidentBlock]: ...

    @property
    def contexts(self) -> Mapping[ContextId, Context]: ...

    @property
    def index(self) -> Mapping[BlockKey, BlockId]: ...

    @property
    def tier_index(self) -> Mapping[TierName, int]: ...


class PolicyOrder:
    """Victims from ``policy.eviction_order`` over a snapshot of the candidates (spec PP1)."""

    def __init__(self, engine: EvictionHost) -> None:
        self.e = engine
        #: every resident block's snapshot (``view.block``), kept current from the marks: a block
        #: or a context whose features may have changed is looked at again at the next listing
        #: (a context's whole chain, as the rank index's eager mode does). None until the first
        #: listing, so an engine that never evicts keeps none.
        self._snap: dict[BlockId, BlockInfo] | None = None
        self._dirty: set[BlockId] = set()
        self._dirty_ctxs: set[ContextId] = set()
        self._cands: list[BlockInfo] | None = None
        self._iter: Iterator[BlockId] | None = None
        self._buf: list[BlockId] = []
        self._seen: set[BlockId] = set()
        self._ids: set[BlockId] = set()

    def mark_block(self, bid: BlockId) -> None:
        if self._snap is not None:
            self._dirty.add(bid)

    def mark_ctx(self, cid: ContextId) -> None:
        if self._snap is not None:
            self._dirty_ctxs.add(cid)

    def forget(self, bid: BlockId) -> None:
        if self._snap is not None:
            self._snap.pop(bid, None)
            self._dirty.discard(bid)

    def _snapshots(self) -> dict[BlockId, BlockInfo]:
        """Every resident block's current snapshot: those marked since the last listing (and
        every block of a marked context's chain) are looked up again. A block written or hit by
        the request in flight is marked when the request ends; until then it is no candidate."""
        e = self.e
        snap, dirty = self._snap, self._dirty
        if snap is None:
            snap = self._snap = {}
            dirty.update(e.blocks)
            self._dirty_ctxs.clear()
        for cid in self._dirty_ctxs:
            c = e.contexts.get(cid)
            if c is not None:
                dirty.update(e.index[s.key] for s in c.materialized if s.key is not None)
        self._dirty_ctxs.clear()
        blocks, view = e.blocks, e.view
        for bid in dirty:
            if bid in blocks:
                snap[bid] = view.block(bid)
            else:
                snap.pop(bid, None)
        dirty.clear()
        return snap

    def candidates(self) -> list[BlockInfo]:
        """Evictable blocks: resident, not in flight, not Pinned (spec M4.1), in the order of
        the engine's blocks."""
        e = self.e
        snap = self._snapshots()
        look, view = e.residency.evictable_info, e.view
        return [
            info
            for bid, b in e.blocks.items()
            if (info := look(b, view, snap.get(bid))) is not None
        ]

    def evictable(self) -> int:
        self._cands = self.candidates()  # reused by the first ranking: nothing moved yet
        return len(self._cands)

    def invalidate(self) -> None:
        self._iter = None
        self._cands = None

    def end(self) -> None:
        self._iter = None
        self._cands = None
        self._buf = []

    def next_victim(self, tiers: Sequence[TierName]) -> ResidentBlock | None:
        """The next block of the order that is still evictable and lies in ``tiers``.

        Blocks pulled for another tier wait in a buffer for a later allocation.
        """
        e = self.e
        if self._iter is None:
            cands = self._cands if self._cands is not None else self.candidates()
            self._cands = None
            self._ids = {c.id for c in cands}
            try:
                self._iter = iter(e.policy.eviction_order(e.view, cands))
            except KVModelError:
                raise
            except BaseException as err:
                if is_interrupt(err):
                    raise
                raise policy_raised(e.policy.name, "eviction_order", err) from err
            self._buf = []
            self._seen = set()
        keep: list[BlockId] = []
        found: ResidentBlock | None = None
        for bid in self._buf:
            b = e.blocks.get(bid)
            if b is None or e.residency.in_flight(b):
                continue
            if found is None and b.tier in tiers:
                found = b
            else:
                keep.append(bid)
        self._buf = keep
        if found is not None:
            return found
        while True:
            try:
                bid = next(self._iter)
            except StopIteration:
                break
            except KVModelError:
                raise
            except BaseException as err:  # a lazy order raises while it is consumed
                if is_interrupt(err):
                    raise
                raise policy_raised(e.policy.name, "eviction_order", err) from err
            if bid not in self._ids or bid in self._seen:
                raise self._refusal(bid)
            self._seen.add(bid)
            b = e.blocks.get(bid)
            if b is None or e.residency.in_flight(b):
                continue
            if b.tier in tiers:
                return b
            self._buf.append(bid)
        return None

    def _refusal(self, bid: BlockId) -> PolicyError:
        e = self.e
        name = e.policy.name
        if bid in self._seen:
            return PolicyError(
                f"policy {name!r} eviction_order yielded block {bid} twice", kind="duplicate"
            )
        b = e.blocks.get(bid)
        if b is not None and e.residency.in_flight(b):
            return PolicyError(
                f"policy {name!r} chose block {bid}, which the inference being "
                "admitted is using (in flight)",
                kind="evict-in-flight",
            )
        if b is not None and e.view.block(bid).state is BlockClass.PINNED:
            return PolicyError(f"policy {name!r} chose pinned block {bid}", kind="evict-pinned")
        return PolicyError(
            f"policy {name!r} eviction_order yielded non-candidate {bid}", kind="non-candidate"
        )
