"""The rank index: victims of a :class:`~kvmodel.policy.BasePolicy` whose order is its declarative
``rank``, from a persistent priority queue of rank keys kept current incrementally (spec PP3,
performance note). It answers what :class:`~kvmodel._eviction.PolicyOrder` answers, and must
answer it identically; a differential test replays random and agentic traces through both.
"""

from __future__ import annotations

import functools
import heapq
import re
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from kvmodel._engine_view import ONE_HOLDER, one_holder_lambda
from kvmodel._eviction import EvictionHost
from kvmodel.contexts import Context
from kvmodel.errors import InternalError
from kvmodel.ids import BlockId, ContextId, TierName
from kvmodel.lifecycle import BlockClass
from kvmodel.policy import (
    RankTerm,
    fixed_key_function,
    fixed_positions,
    key_function,
    key_source,
    raised_by_contexts,
    separable_by_contexts,
)
from kvmodel.view import Featured

if TYPE_CHECKING:
    from kvmodel._resident import ResidentBlock

__all__ = ["OneHolderEntry", "RankIndex", "one_holder_entry"]


#: A one-holder block's queue entry: ``entry(r, c, s, T, seq, clock)``, the names as in
#: :data:`~kvmodel._engine_view.ONE_HOLDER`.
OneHolderEntry = Callable[
    ["ResidentBlock", Context, BlockClass, Mapping[TierName, int], int, int], tuple[Any, ...]
]


@functools.lru_cache(maxsize=256)
def one_holder_entry(terms: tuple[RankTerm, ...]) -> OneHolderEntry | None:
    """The index's entry ``(*rank key, block id, seq, clock)`` for a block ``r`` with one
    holder, its key read straight from :data:`~kvmodel._engine_view.ONE_HOLDER` (each feature
    the rank reads replaced by its expression there): the key of its features, which are not
    built. None for a rank with a term read by a call (:func:`~kvmodel.policy.key_source`).
    Cached by the terms, as the rank's own key is."""
    src = key_source(terms)
    if src is None:
        return None
    key = re.sub(r"\bb\.(\w+)", lambda m: f"({ONE_HOLDER[m.group(1)]})", src)
    return cast(OneHolderEntry, one_holder_lambda(f"({key}, r.id, q, k)", "q", "k"))


class _Queue:
    """A min-queue of distinct entries: a heap, and beside it a *run* -- entries pushed in
    ascending order, in a deque. The front is the smaller of the two fronts.

    Under a recency rank the entries keyed after an inference carry its recency, above every
    earlier entry's, so a batch pushed sorted (:meth:`push_sorted`) joins the run whole and
    leaves it from the front: O(1) a push and a pop where a heap pays O(log n) a pop. An entry
    below the run's last (a key re-made for an older use, a stashed entry put back) goes to the
    heap. Under any other rank the run is short and this is the heap it replaces.

    An entry below the run's first joins the run at its front (the run stays sorted): O(1) where
    the heap pays O(log n) a push and a pop. Under a grouped rank that is the usual case -- the
    next head of the group whose head was just evicted is keyed below everything waiting, and is
    most often the next victim (5% of KVTether's replay on issue 18's workload)."""

    __slots__ = ("heap", "run")

    def __init__(self) -> None:
        self.heap: list[tuple[Any, ...]] = []
        self.run: deque[tuple[Any, ...]] = deque()

    def __len__(self) -> int:
        return len(self.heap) + len(self.run)

    def push(self, x: tuple[Any, ...]) -> None:
        run = self.run
        if not run or x > run[-1]:
            run.append(x)
        elif x < run[0]:
            run.appendleft(x)
        else:
            heapq.heappush(self.heap, x)

    def push_sorted(self, xs: list[tuple[Any, ...]]) -> None:
        """Push every entry of ``xs`` (sorted here, in place)."""
        xs.sort()
        run = self.run
        if xs and (not run or xs[0] > run[-1]):
            run.extend(xs)
            return
        for x in xs:
            self.push(x)

    def pop(self) -> tuple[Any, ...]:
        heap, run = self.heap, self.run
        if heap and (not run or heap[0] < run[0]):
            return heapq.heappop(heap)
        return run.popleft()

    def keep(self, live: Callable[[tuple[Any, ...]], bool]) -> None:
        """Drop every entry but those ``live`` keeps (order kept: the run stays sorted)."""
        self.heap = [x for x in self.heap if live(x)]
        heapq.heapify(self.heap)
        self.run = deque(x for x in self.run if live(x))


class _Group:
    """(grouped) One context's plain blocks in one tier: a min-heap of ``(*fixed key, block
    id, join seq)`` with lazy deletion; its first entry, the head, alone has an entry in the
    index's heap."""

    __slots__ = ("count", "head", "head_fixed", "heap")

    def __init__(self) -> None:
        self.heap: list[tuple[Any, ...]] = []
        self.count = 0
        self.head: BlockId | None = None
        self.head_fixed: tuple[Any, ...] = ()  # the head's fixed key (its entry's first part)


class _Held:
    """(grouped) What the index keeps for one context: its groups by tier, its members by
    depth (with bounds on their depths), and its loose blocks -- the blocks of its chain keyed
    one by one (shared, Pinned, or otherwise not plain), re-keyed at every change to it."""

    __slots__ = ("groups", "hi", "lo", "loose", "members")

    def __init__(self) -> None:
        self.groups: dict[TierName, _Group] = {}
        self.members: dict[int, BlockId] = {}
        self.lo = 1 << 62  # every member's depth is in [lo, hi)
        self.hi = 0
        self.loose: set[BlockId] = set()

    def empty(self) -> bool:
        return not self.groups and not self.members and not self.loose


class RankIndex:
    """A persistent min-queue (:class:`_Queue`) of ``(*rank key, block id, entry seq, clock)``
    with lazy deletion (``clock``: :meth:`Residency.clock` when the key was computed).

    An entry is live iff ``entry[block] == seq``. Re-keying pushes a new entry; removal forgets
    the seq. Pinned blocks have no entry. A block popped while in flight is forgotten until
    its inference ends: then its hits and writes are marked dirty (the engine bumps them), and
    so are the blocks of its kept prefix that were popped (:meth:`end`), so each comes back
    with its new key.

    A change to a context may change the features of every block on its chain. The index
    handles that in one of three ways, decided by the rank alone (spec PP3, performance note):

    * **lazy** -- a rank such changes can only raise (:func:`~kvmodel.policy.raised_by_contexts`:
      recency and fixed features, e.g. ``lru``, ``vllm-prefix``): a stale entry's key is a lower
      bound of the block's key, so a popped entry whose block's stamp is newer than the entry's
      clock (a version drawn since it was keyed) is re-keyed then, and pushed back if its key
      grew; the smallest entry whose key is current is the smallest key. Only pinning must stay
      exact (``evictable()`` counts it), and a context can change it only at or above its pin
      depth, so that part of the chain is re-keyed at once.
    * **grouped** -- a rank in which blocks sharing a context's part of the features are ordered
      by their fixed features alone (:func:`~kvmodel.policy.separable_by_contexts`, e.g.
      ``kvtether``, ``lachesis``): a context's *plain* blocks (it is their only holder, they
      cover no message with a stored state, lie below every pin and within the valid prefix,
      and were last used by its last inference) share their class, recency and suspension with
      it, so they wait in one group per tier ordered by their fixed key, and only the group's
      first block has an entry. A change to the context re-keys that entry and the context's
      loose blocks (shared, Pinned, or otherwise not plain), and takes out of the group the
      members the change made unplain -- those beyond its valid prefix or at or above its pin
      depth, the only ways a context change can (spec, performance note).
    * **eager** -- any other rank: the chain is re-keyed at the next look (O(chain)).
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
        #: blocks that share a context's features are ordered by their fixed ones: group them
        self.grouped = not self.lazy and separable_by_contexts(self.terms)
        self.fixed_key = fixed_key_function(self.terms)
        #: (ungrouped, a rank of plain numeric terms) a one-holder block's entry straight from
        #: the block and its holder, without its features built (one_holder_entry); None under
        #: a view of the engine's own (Engine.use_view: every key is then that view's features')
        self.one_entry: OneHolderEntry | None = (
            None if self.grouped else one_holder_entry(self.terms)
        )
        #: where the fixed key's values sit in a whole key (the block id last)
        self.fixed_at = fixed_positions(self.terms)
        #: (lazy) per context, the deepest block found Pinned while it held it since its chain
        #: was last looked at: a change to the context can unpin no deeper block
        self.pin_depths: dict[ContextId, int] = {}
        #: entries ``(*rank key, block id, seq, clock)``, flat so that the queue compares floats,
        #: not tuples (the seq is unique: the clock, the residency's clock when the entry was
        #: keyed, never decides; only a lazy index reads it, one clock read for a whole refresh
        #: instead of a stamp per block)
        self.queue = _Queue()
        self.entry: dict[BlockId, int] = {}
        self.pinned: set[BlockId] = set()
        #: blocks to key at the next look, a dict for its order: they are keyed in the order
        #: they were marked. After an inference that is its chain's order (Residency.end_flight),
        #: and a recency rank's keys for them are then in order already, which the batch's sort
        #: (_Queue.push_sorted) passes in one pass
        self.dirty_blocks: dict[BlockId, None] = {}
        self.dirty_ctxs: set[ContextId] = set()
        #: blocks of the kept prefix in flight whose entry was popped: re-keyed by end()
        self.held: list[BlockId] = []
        #: the context in flight, if it changed: its chain is keyed after the inference
        self.deferred: ContextId | None = None
        self.seq = 0
        #: (grouped) per context, its groups and loose blocks; per member, (context, tier, join
        #: seq, depth); per loose block, the contexts whose loose set holds it; groups to head again
        self.ctxs: dict[ContextId, _Held] = {}
        self.member: dict[BlockId, tuple[ContextId, TierName, int, int]] = {}
        self.loose_in: dict[BlockId, tuple[ContextId, ...]] = {}
        self.unheaded: set[tuple[ContextId, TierName]] = set()
        #: blocks the index keyed, re-keyed or looked at to see whether they are plain (from
        #: their features, or a one-holder block's entry straight from ONE_HOLDER): what an
        #: inference costs it, counted for tests and benchmarks
        self.keyed = 0
        #: (a steered index, ungrouped) which of the candidates tied at the front on the rank's
        #: terms is the victim: their index in key order, None for the first -- the oracle's
        #: follower choosing as the implementation did (checkers/conformance/oracle.py). None:
        #: the first, always
        self.choose: Callable[[Sequence[ResidentBlock]], int | None] | None = None

    def __getstate__(self) -> dict[str, Any]:
        # the compiled keys are closures (no pickle: the exhaustive search copies engines by
        # pickling them); they are compiled again from the terms
        state = dict(self.__dict__)
        del state["key"]
        del state["fixed_key"]
        state["one_entry"] = state["one_entry"] is not None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.key = key_function(self.terms)
        self.fixed_key = fixed_key_function(self.terms)
        self.one_entry = one_holder_entry(self.terms) if state["one_entry"] else None

    def mark_block(self, bid: BlockId) -> None:
        self.dirty_blocks[bid] = None

    def mark_ctx(self, cid: ContextId) -> None:
        self.dirty_ctxs.add(cid)

    def forget(self, bid: BlockId) -> None:
        """``bid`` left memory: its entry goes (a popped entry of it is stale from now on)."""
        if self.grouped:
            self._unregister(bid)
        self.entry.pop(bid, None)
        self.pinned.discard(bid)
        self.dirty_blocks.pop(bid, None)

    def refresh(self) -> None:
        if not self.dirty_blocks and not self.dirty_ctxs and not self.unheaded:
            return
        e = self.e
        if self.dirty_ctxs:
            # the chain of the context being admitted is all in flight (its kept prefix; its
            # hits and writes are flying), so no candidate: it is keyed after the inference,
            # when its features have changed again anyway (and evictable() is unaffected: a
            # block both in flight and pinned is subtracted once each way)
            flight = e.residency.flight_context()
            for cid in self.dirty_ctxs:
                if cid == flight:
                    self.deferred = cid  # (end() marks it again)
                    continue
                if self.grouped:
                    self._context_changed(cid)
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
                        self.dirty_blocks[e.index[s.key]] = None
            self.dirty_ctxs.clear()
        flying = e.residency.flying_blocks()
        features = self.features
        grouped, lazy = self.grouped, self.lazy
        blocks, entry, pinned, key = e.blocks, self.entry, self.pinned, self.key
        clock = e.residency.clock() if lazy else 0
        pushed: list[tuple[Any, ...]] = []
        pinned_class = BlockClass.PINNED
        keyed = 0
        one, ctxs, tier_index = self.one_entry, e.contexts, e.tier_index
        for bid in self.dirty_blocks:
            b = blocks.get(bid)
            if b is None:
                if grouped:
                    self._unregister(bid)
                entry.pop(bid, None)
                pinned.discard(bid)
                continue
            if bid in flying:
                # written or hit by the inference being admitted: not a candidate until it ends,
                # and its end marks each such block dirty again (or its drop forgets it): key it
                # once, then, not at every look in between. A stale entry popped meanwhile is
                # forgotten by next_victim (a group's head: the next member heads).
                continue
            if one is not None and len(b.holders) == 1:
                # its entry without its features built (most blocks; a Pinned one is keyed below)
                (h,) = b.holders
                c = ctxs[h]
                cls = c.block_class(b.depth)
                if cls is not pinned_class:
                    keyed += 1
                    pinned.discard(bid)
                    self.seq = seq = self.seq + 1
                    pushed.append(one(b, c, cls, tier_index, seq, clock))
                    entry[bid] = seq
                    continue
            info = features(b)
            keyed += 1
            if grouped:
                m = self.member.get(bid)
                if m is not None and m[0] in b.holders and self._plain(b, info):
                    # still plain in its holder's group (a block's depth and tier never
                    # change): its key is its context's part and its own fixed part, and
                    # neither moved; a head popped while in flight gets its entry back
                    if bid not in self.entry and self.ctxs[m[0]].groups[m[1]].head == bid:
                        self.unheaded.add((m[0], m[1]))
                    continue
                self._unregister(bid)
            if info.state is pinned_class:
                pinned.add(bid)
                entry.pop(bid, None)
                if grouped:  # a change to any holder may unpin it
                    self._loosen(bid, b)
                elif lazy:  # a change to any holder may unpin it: it is in that prefix
                    for h in b.holders:
                        if self.pin_depths.get(h, -1) < b.depth:
                            self.pin_depths[h] = b.depth
                continue
            pinned.discard(bid)
            if grouped:
                if self._plain(b, info):
                    self._join(b, info)
                    continue
                self._loosen(bid, b)
            self.seq = seq = self.seq + 1
            pushed.append((*key(info), bid, seq, clock))
            entry[bid] = seq
        self.keyed += keyed
        self.queue.push_sorted(pushed)
        self.dirty_blocks.clear()
        for cid, tier in self.unheaded:
            self._head(cid, tier)
        self.unheaded.clear()
        if len(self.queue) > 2 * len(self.entry) + 1024:
            self.queue.keep(lambda x: entry.get(x[-3]) == x[-2])

    # ------------------------------------------------------------------ grouped keying

    def _plain(self, b: ResidentBlock, info: Featured) -> bool:
        """``b``'s class, recency and suspension are its one holder's: it is Active or
        Suspended as the holder's phase is, and last used by the holder's last inference."""
        if len(b.holders) != 1:
            return False
        for cid in b.holders:
            c = self.e.contexts[cid]
            return (
                c.last_infer is not None
                and info.state is c.phase_class()
                and info.last_access == c.last_infer
                and info.last_op == c.last_infer_op
            )
        return False  # pragma: no cover - one holder

    def _join(self, b: ResidentBlock, info: Featured) -> None:
        """Park plain ``b`` in its holder's group of its tier (the group is headed again)."""
        (cid,) = b.holders
        held = self.ctxs.get(cid)
        if held is None:
            held = self.ctxs[cid] = _Held()
        g = held.groups.get(b.tier)
        if g is None:
            g = held.groups[b.tier] = _Group()
        self.seq += 1
        fixed = self.fixed_key(info)
        heapq.heappush(g.heap, (*fixed, b.id, self.seq))
        g.count += 1
        self.member[b.id] = (cid, b.tier, self.seq, b.depth)
        held.members[b.depth] = b.id
        held.lo = min(held.lo, b.depth)
        held.hi = max(held.hi, b.depth + 1)
        self.entry.pop(b.id, None)  # only a head has an entry
        if g.head is None or fixed < g.head_fixed:  # it goes before the head: it heads
            self.unheaded.add((cid, b.tier))

    def _loosen(self, bid: BlockId, b: ResidentBlock) -> None:
        """``b`` is keyed on its own: every change to a holder re-keys it."""
        holders = tuple(b.holders)
        for h in holders:
            held = self.ctxs.get(h)
            if held is None:
                held = self.ctxs[h] = _Held()
            held.loose.add(bid)
        self.loose_in[bid] = holders

    def _unregister(self, bid: BlockId) -> None:
        """``bid`` leaves its group (which is headed again) or the loose sets holding it."""
        m = self.member.pop(bid, None)
        if m is not None:
            cid, tier, _, depth = m
            held = self.ctxs[cid]
            if held.members.get(depth) == bid:
                del held.members[depth]
            g = held.groups[tier]
            g.count -= 1
            if g.head == bid:  # (another member's leaving leaves the head as it is)
                g.head = None
                self.entry.pop(bid, None)
                self.unheaded.add((cid, tier))
        for h in self.loose_in.pop(bid, ()):
            held_h = self.ctxs.get(h)
            if held_h is not None:
                held_h.loose.discard(bid)
                if held_h.empty():
                    del self.ctxs[h]

    def _context_changed(self, cid: ContextId) -> None:
        """A change to ``cid``: its loose blocks are re-keyed, its groups' heads keyed again,
        and members the change took beyond the valid prefix or under a pin leave the group."""
        held = self.ctxs.get(cid)
        if held is None:
            return
        self.dirty_blocks.update(dict.fromkeys(held.loose))
        if held.members:
            c = self.e.contexts[cid]
            valid = c.valid if c.is_open else 0
            pin = c.pin_depth() if c.is_open else -1
            members = held.members
            if held.hi > valid:
                for d in range(max(valid, held.lo), held.hi):
                    bid = members.get(d)
                    if bid is not None:
                        self.dirty_blocks[bid] = None
                held.hi = max(valid, 0)
            if pin >= held.lo:
                for d in range(held.lo, min(pin + 1, held.hi)):
                    bid = members.get(d)
                    if bid is not None:
                        self.dirty_blocks[bid] = None
                held.lo = pin + 1
        for tier in held.groups:
            self.unheaded.add((cid, tier))

    def _head(self, cid: ContextId, tier: TierName, after: tuple[Any, ...] | None = None) -> None:
        """Give group ``(cid, tier)`` an entry keyed now: its first live member's. ``after``:
        the current key of the head just evicted from it; the new head shares its context's
        part and takes its own fixed part, so its key is spliced, not computed."""
        held = self.ctxs.get(cid)
        g = held.groups.get(tier) if held is not None else None
        if held is None or g is None:
            return
        heap, member = g.heap, self.member
        while heap:
            top = heap[0]
            m = member.get(top[-2])
            if m is not None and m[2] == top[-1]:
                break
            heapq.heappop(heap)
        if not heap:
            del held.groups[tier]
            if held.empty():
                del self.ctxs[cid]
            return
        if len(heap) > 2 * g.count + 64:
            g.heap = heap = [x for x in heap if (m := member.get(x[-2])) and m[2] == x[-1]]
            heapq.heapify(heap)
        top = heap[0]
        bid: BlockId = top[-2]
        if g.head is not None and g.head != bid:
            self.entry.pop(g.head, None)
        g.head = bid
        g.head_fixed = top[:-2]
        self.seq += 1
        if after is not None:
            key = list(after)
            for i, at in enumerate(self.fixed_at):
                key[at] = top[i]
            self.queue.push((*key, bid, self.seq, 0))
        else:
            self.keyed += 1
            info = self.features(self.e.blocks[bid])
            self.queue.push((*self.key(info), bid, self.seq, 0))
        self.entry[bid] = self.seq

    # ------------------------------------------------------------------ looks

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
        (its hits and writes are marked by the end of the flight; these are not), and so is its
        context's chain if the context changed since it was admitted."""
        if self.held:
            self.dirty_blocks.update(dict.fromkeys(self.held))
            self.held = []
        if self.deferred is not None:
            self.dirty_ctxs.add(self.deferred)
            self.deferred = None

    def _rekeyed(self, b: ResidentBlock, item: tuple[Any, ...]) -> bool:
        """(lazy) Push ``b`` again if its key grew since ``item``, its popped entry, was made:
        if no version of ``b`` or a holder was drawn since (its stamp is no newer than the
        entry's clock), its features, and so its key, are those it was keyed with."""
        res = self.e.residency
        if res.stamp(b) <= item[-1]:
            return False
        info = self.features(b)
        if info.state is BlockClass.PINNED:
            if res.in_flight(b):
                return False  # held, and keyed (into the pinned set) when the inference ends
            raise InternalError(f"block {b.id} became Pinned without being re-keyed")
        self.keyed += 1
        key = self.key(info)
        if key == item[:-3]:
            return False
        self.seq += 1
        self.queue.push((*key, b.id, self.seq, res.clock()))
        self.entry[b.id] = self.seq
        return True

    def next_victim(self, tiers: Sequence[TierName]) -> ResidentBlock | None:
        if self.dirty_blocks or self.dirty_ctxs or self.unheaded:  # (refresh's own test: a call
            self.refresh()  # fewer per eviction)
        stash: list[tuple[Any, ...]] = []
        found: ResidentBlock | None = None
        queue, live = self.queue, self._live
        while queue.heap or queue.run:  # (len(queue), without the call)
            item = queue.pop()
            b = live(item, tiers, stash)
            if b is None:
                continue
            if self.choose is not None:
                item, b = self._chosen(item, b, tiers, stash)
            del self.entry[b.id]
            found = b
            m = self.member.get(b.id) if self.grouped else None
            if m is not None:  # a group's head: the next member heads, its key spliced
                self._unregister(b.id)
                self._head(m[0], m[1], after=item[:-3])
                self.unheaded.discard((m[0], m[1]))
            break
        for item in stash:
            queue.push(item)
        return found

    def _live(
        self, item: tuple[Any, ...], tiers: Sequence[TierName], stash: list[tuple[Any, ...]]
    ) -> ResidentBlock | None:
        """The block of ``item``, an entry just popped, if it can be the victim now (its entry
        current, resident, not in flight, in ``tiers``, its key current); else None, with the
        entry dealt with: dropped, held for the inference's end, stashed (another tier's), or
        pushed again with its grown key."""
        bid: BlockId = item[-3]
        entry = self.entry
        if entry.get(bid) != item[-2]:
            return None
        e = self.e
        b = e.blocks.get(bid)
        if b is None:
            del entry[bid]
            return None
        if e.residency.in_flight(b):
            if not e.residency.flying(bid):  # of the kept prefix
                if self.lazy and self._rekeyed(b, item):
                    return None  # its key had grown: back in its place, for later
                # keyed again by end(); a group's head stays its head with no entry, so
                # the rest of the group (the same context's, all in flight) waits too
                self.held.append(bid)
                del entry[bid]
                return None
            del entry[bid]
            m = self.member.get(bid) if self.grouped else None
            if m is not None:  # a head hit by the inference: the next member heads
                self._unregister(bid)
                self._head(m[0], m[1])
                self.unheaded.discard((m[0], m[1]))
            return None
        if b.tier not in tiers:
            stash.append(item)
            return None
        # (_rekeyed's own first test, made here: most victims' entries are current)
        if self.lazy and e.residency.stamp(b) > item[-1] and self._rekeyed(b, item):
            return None  # its key had grown: back in its place
        return b

    def _chosen(
        self,
        item: tuple[Any, ...],
        b: ResidentBlock,
        tiers: Sequence[TierName],
        stash: list[tuple[Any, ...]],
    ) -> tuple[tuple[Any, ...], ResidentBlock]:
        """(:attr:`choose` set) The victim :attr:`choose` picks among every candidate tied with
        ``b`` (entry ``item``, the front's) on the rank's terms; the others' entries go back."""
        terms = item[:-4]  # (an entry: the terms, the id as a float, the id, seq, clock)
        tied = [(item, b)]
        queue = self.queue
        while queue.heap or queue.run:
            nxt = queue.pop()
            if nxt[:-4] != terms:
                queue.push(nxt)
                break
            if (c := self._live(nxt, tiers, stash)) is not None:
                tied.append((nxt, c))
        assert self.choose is not None
        k = self.choose([c for _, c in tied])
        pick = tied[0 if k is None else k]
        for x in tied:
            if x is not pick:
                queue.push(x[0])
        return pick
