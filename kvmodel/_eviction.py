"""Where victims come from: the policy's order over a candidate snapshot, or a rank index.

Both sources answer the engine's three questions during one inference: how many blocks are
evictable (``evictable``), which block to evict next from a set of tiers (``next_victim``), and
"the classes of some blocks changed under you" (``invalidate``). They must give identical
answers for a rank policy; a differential test replays random traces through both.

* :class:`PolicyOrder` -- any policy: snapshot the candidates (O(resident blocks)), ask the
  policy for an order once per inference, consume it lazily.
* :class:`RankIndex` -- a :class:`~kvmodel.policy.BasePolicy` whose order is its declarative
  ``rank``: a persistent heap of rank keys with lazy deletion. Only blocks whose features may have
  changed since the last look (dirty blocks, and the chains of dirty contexts) are re-keyed, so an
  inference that must evict costs O((dirty + victims) log n) instead of O(n log n).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from kvmodel.contexts import Context
from kvmodel.errors import InternalError, KVModelError, PolicyError, policy_raised
from kvmodel.ids import BlockId, BlockKey, ContextId, TierName
from kvmodel.lifecycle import BlockClass
from kvmodel.policy import Policy, RankTerm, key_function, raised_by_contexts
from kvmodel.residency import Residency
from kvmodel.view import BlockInfo, Featured, ModelView

if TYPE_CHECKING:
    from kvmodel._resident import ResidentBlock

__all__ = ["EvictionHost", "PolicyOrder", "RankIndex"]


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


class PolicyOrder:
    """Victims from ``policy.eviction_order`` over a snapshot of the candidates (spec PP1)."""

    def __init__(self, engine: EvictionHost) -> None:
        self.e = engine
        self._cands: list[BlockInfo] | None = None
        self._iter: Iterator[BlockId] | None = None
        self._buf: list[BlockId] = []
        self._seen: set[BlockId] = set()
        self._ids: set[BlockId] = set()

    def mark_block(self, bid: BlockId) -> None:
        """Nothing to do: the snapshot is retaken every inference."""

    def mark_ctx(self, cid: ContextId) -> None:
        """Nothing to do: the snapshot is retaken every inference."""

    def forget(self, bid: BlockId) -> None:
        """Nothing to do: the snapshot is retaken every inference."""

    def candidates(self) -> list[BlockInfo]:
        """Evictable blocks: resident, not in flight, not Pinned (spec M4.1)."""
        e = self.e
        res, view = e.residency, e.view
        return [view.block(b.id) for b in e.blocks.values() if res.evictable(b, view)]

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
            except Exception as err:
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
            except Exception as err:  # a lazy order raises while it is consumed
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


class RankIndex:
    """A persistent min-heap of ``(*rank key, block id, entry seq, stamp)`` with lazy deletion.

    An entry is live iff ``entry[block] == seq``. Re-keying pushes a new entry; removal forgets
    the seq. Pinned blocks have no entry. A block popped while in flight is forgotten until
    its inference ends: then its hits and writes are marked dirty (the engine bumps them), and
    so are the blocks of its kept prefix that were popped (:meth:`end`), so each comes back
    with its new key.

    A change to a context may change the features of every block on its chain. Under most ranks
    the chain is re-keyed then (O(chain)). Under a rank that such changes can only raise
    (:func:`~kvmodel.policy.raised_by_contexts`: recency and fixed features, e.g. ``lru``,
    ``vllm-prefix``) a stale entry's key is a lower bound of the block's key, so the index
    re-keys lazily instead: a popped entry whose block's stamp moved since it was keyed is
    re-keyed then, and pushed back if its key grew; the smallest entry whose key is current is
    the smallest key. Only pinning must stay exact (``evictable()`` counts it), and a context
    can change it only at or above its pin depth, so that part of the chain is re-keyed at once.
    """

    def __init__(
        self,
        engine: EvictionHost,
        terms: Sequence[RankTerm],
        features: Callable[[ResidentBlock], Featured],
    ) -> None:
        """``features``: a resident block's rank features, as its view snapshot has them."""
        self.e = engine
        self.terms = tuple(terms)
        self.features = features
        self.key = key_function(self.terms)
        #: context changes only raise keys: re-key a chain's blocks when they are popped
        self.lazy = raised_by_contexts(self.terms)
        #: (lazy) per context, the deepest block found Pinned while it held it since its chain
        #: was last looked at: a change to the context can unpin no deeper block
        self.pin_depths: dict[ContextId, int] = {}
        #: entries ``(*rank key, block id, seq, stamp)``, flat so that the heap compares floats,
        #: not tuples (the seq is unique: the stamp, the block's stamp when keyed, never decides)
        self.heap: list[tuple[Any, ...]] = []
        self.entry: dict[BlockId, int] = {}
        self.pinned: set[BlockId] = set()
        self.dirty_blocks: set[BlockId] = set()
        self.dirty_ctxs: set[ContextId] = set()
        #: blocks of the kept prefix in flight whose entry was popped: re-keyed by end()
        self.held: list[BlockId] = []
        self.seq = 0

    def __getstate__(self) -> dict[str, Any]:
        # the compiled key is a closure (no pickle: the exhaustive search copies engines by
        # pickling them); it is compiled again from the terms
        state = dict(self.__dict__)
        del state["key"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.key = key_function(self.terms)

    def mark_block(self, bid: BlockId) -> None:
        self.dirty_blocks.add(bid)

    def mark_ctx(self, cid: ContextId) -> None:
        self.dirty_ctxs.add(cid)

    def forget(self, bid: BlockId) -> None:
        """``bid`` left memory: its entry goes (a popped entry of it is stale from now on)."""
        self.entry.pop(bid, None)
        self.pinned.discard(bid)
        self.dirty_blocks.discard(bid)

    def refresh(self) -> None:
        if not self.dirty_blocks and not self.dirty_ctxs:
            return
        e = self.e
        if self.dirty_ctxs:
            # the chain of the context being admitted is all in flight (its kept prefix; its
            # hits and writes are flying), so no candidate: it is keyed after the inference,
            # when its features have changed again anyway (and evictable() is unaffected: a
            # block both in flight and pinned is subtracted once each way)
            flight = e.residency.flight_context()
            deferred = flight in self.dirty_ctxs
            for cid in self.dirty_ctxs:
                if cid == flight:
                    continue
                chain = e.contexts[cid].materialized
                if self.lazy:
                    # only pinning must be current now, and only this context's pinned prefix
                    # (before or after the change) can have changed it
                    c = e.contexts[cid]
                    depth = c.pin_depth() if c.is_open else -1  # (a closed chain is empty)
                    chain = chain[: max(depth, self.pin_depths.pop(cid, -1)) + 1]
                for s in chain:
                    if s.key is not None:
                        self.dirty_blocks.add(e.index[s.key])
            self.dirty_ctxs.clear()
            if deferred:
                assert flight is not None
                self.dirty_ctxs.add(flight)
        flying = e.residency.flying
        features = self.features
        for bid in self.dirty_blocks:
            b = e.blocks.get(bid)
            if b is None:
                self.entry.pop(bid, None)
                self.pinned.discard(bid)
                continue
            if flying(bid):
                # written or hit by the inference being admitted: not a candidate until it ends,
                # and its end marks each such block dirty again (or its drop forgets it): key it
                # once, then, not at every look in between. A stale entry popped meanwhile is
                # forgotten by next_victim.
                continue
            info = features(b)
            if info.state is BlockClass.PINNED:
                self.pinned.add(bid)
                self.entry.pop(bid, None)
                if self.lazy:  # a change to any holder may unpin it: it is in that prefix
                    for h in b.holders:
                        if self.pin_depths.get(h, -1) < b.depth:
                            self.pin_depths[h] = b.depth
                continue
            self.pinned.discard(bid)
            self.seq += 1
            stamp = e.residency.stamp(b) if self.lazy else 0
            heapq.heappush(self.heap, (*self.key(info), bid, self.seq, stamp))
            self.entry[bid] = self.seq
        self.dirty_blocks.clear()
        if len(self.heap) > 2 * len(self.entry) + 1024:
            self.heap = [x for x in self.heap if self.entry.get(x[-3]) == x[-2]]
            heapq.heapify(self.heap)

    def evictable(self) -> int:
        self.refresh()
        e = self.e
        in_flight = e.residency.in_flight_count()
        overlap = sum(1 for p in self.pinned if e.residency.in_flight(e.blocks[p]))
        return len(e.blocks) - in_flight - len(self.pinned) + overlap

    def invalidate(self) -> None:
        """Nothing to do: changed blocks were marked dirty and are re-keyed on the next look."""

    def end(self) -> None:
        """The inference is over: blocks of its kept prefix popped meanwhile are keyed again
        (its hits and writes are marked by the end of the flight; these are not)."""
        if self.held:
            self.dirty_blocks.update(self.held)
            self.held = []

    def _rekeyed(self, b: ResidentBlock, item: tuple[Any, ...]) -> bool:
        """(lazy) Push ``b`` again if its key grew since ``item``, its popped entry, was made."""
        stamp = self.e.residency.stamp(b)
        if stamp == item[-1]:
            return False
        info = self.features(b)
        if info.state is BlockClass.PINNED:
            if self.e.residency.in_flight(b):
                return False  # held, and keyed (into the pinned set) when the inference ends
            raise InternalError(f"block {b.id} became Pinned without being re-keyed")
        key = self.key(info)
        if key == item[:-3]:
            return False
        self.seq += 1
        heapq.heappush(self.heap, (*key, b.id, self.seq, stamp))
        self.entry[b.id] = self.seq
        return True

    def next_victim(self, tiers: Sequence[TierName]) -> ResidentBlock | None:
        self.refresh()
        e = self.e
        stash: list[tuple[Any, ...]] = []
        found: ResidentBlock | None = None
        while self.heap:
            item = heapq.heappop(self.heap)
            bid: BlockId = item[-3]
            seq: int = item[-2]
            if self.entry.get(bid) != seq:
                continue
            b = e.blocks.get(bid)
            if b is None:
                del self.entry[bid]
                continue
            if e.residency.in_flight(b):
                if not e.residency.flying(bid):  # of the kept prefix
                    if self.lazy and self._rekeyed(b, item):
                        continue  # its key had grown: back in its place, for later
                    self.held.append(bid)  # keyed again by end()
                del self.entry[bid]
                continue
            if b.tier not in tiers:
                stash.append(item)
                continue
            if self.lazy and self._rekeyed(b, item):
                continue  # its key had grown: back in its place
            del self.entry[bid]
            found = b
            break
        for item in stash:
            heapq.heappush(self.heap, item)
        return found
