"""The residency store: what KV is resident and who holds it (spec M3, M4, B6).

It owns the resident blocks, the prefix index (key -> block), the materialized-chain holders of
every block, the dead set, the request in flight and the feature versions. Admission
(:mod:`kvmodel._admission`), the victim sources (:mod:`kvmodel._eviction`), the view
(:mod:`kvmodel._engine_view`) and the engine's op dispatch change it only through the methods
below, so each rule is written once -- among them the one definition of *evictable* (M4.1).

The contexts' chains (``Context.materialized``) are the contexts'; the store keeps the other
side of that relation (``ResidentBlock.holders``) and the dead set consistent with them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from typing import Protocol

from kvmodel._resident import ResidentBlock
from kvmodel.blocks import BlockSpec
from kvmodel.contexts import Context
from kvmodel.errors import InternalError
from kvmodel.ids import BlockId, BlockKey, ContextId
from kvmodel.lifecycle import BlockClass, aggregate_across_contexts
from kvmodel.memory import Memory
from kvmodel.view import BlockInfo, ModelView

__all__ = ["Marks", "Residency"]


class Marks(Protocol):
    """Told of every change that may alter a block's features (the rank index re-keys them)."""

    def mark_block(self, bid: BlockId) -> None: ...

    def mark_ctx(self, cid: ContextId) -> None: ...

    def forget(self, bid: BlockId) -> None: ...

    def invalidate(self) -> None: ...


class _Unmarked:
    def mark_block(self, bid: BlockId) -> None:
        pass

    def mark_ctx(self, cid: ContextId) -> None:
        pass

    def forget(self, bid: BlockId) -> None:
        pass

    def invalidate(self) -> None:
        pass


class Residency:
    """Resident blocks, their holders, the prefix index, the dead set and the request in
    flight."""

    def __init__(self, contexts: Mapping[ContextId, Context], memory: Memory) -> None:
        self.contexts = contexts  # the engine's: chains are read from the holding contexts
        self.memory = memory
        self.blocks: dict[BlockId, ResidentBlock] = {}
        #: full blocks that can be hit, by hash-chain key (B6)
        self.index: dict[BlockKey, BlockId] = {}
        #: resident blocks no open context holds and no request uses (L5.2 Dead)
        self.dead: set[BlockId] = set()
        #: the victim source, told of feature changes (set by the engine once it is built)
        self.marks: Marks = _Unmarked()
        self._tick = 0
        # the request in flight (M4.2): its context, the kept prefix, its hits and writes
        self._flight_ctx: Context | None = None
        self._flight_valid = 0
        #: its hits and writes, a dict for its order: the order they joined, which is their
        #: chain's (end_flight marks them in it)
        self._flying: dict[BlockId, None] = {}

    # ------------------------------------------------------------------ versions

    def bump(self, x: ResidentBlock | Context) -> None:
        """``x``'s features may have changed: a new version (cached features go stale) and a
        mark for the victim source -- except for a block of the request in flight, which is no
        candidate until the request ends, and :meth:`end_flight` marks every such block then."""
        if isinstance(x, ResidentBlock):
            self.bump_block(x)
        else:
            self._tick += 1
            x.version = self._tick
            self.marks.mark_ctx(x.id)

    def bump_block(self, b: ResidentBlock) -> None:
        """:meth:`bump` for a block (the hot path's: no type dispatch)."""
        self._tick += 1
        b.version = self._tick
        if b.id not in self._flying:
            self.marks.mark_block(b.id)

    def clock(self) -> int:
        """The newest version drawn so far: every version drawn from now on is newer, so
        features computed now are current while the block's :meth:`stamp` is no newer."""
        return self._tick

    def stamp(self, b: ResidentBlock) -> int:
        """The newest version among ``b`` and its holders. Every change to ``b``'s features
        draws a newer one from the shared counter (a holder joining or leaving bumps ``b``
        itself), so features computed when this was the stamp are current iff it still is."""
        stamp = b.version
        ctxs = self.contexts
        for h in b.holders:
            v = ctxs[h].version
            if v > stamp:
                stamp = v
        return stamp

    # ------------------------------------------------------------------ chains

    def block_of(self, spec: BlockSpec) -> ResidentBlock:
        """The resident block a chain entry names."""
        bid = self.index.get(spec.key) if spec.key is not None else None
        if bid is None:
            raise InternalError(f"chain entry {spec.key!r} at depth {spec.depth} is not resident")
        return self.blocks[bid]

    def hit(self, key: BlockKey | None) -> ResidentBlock | None:
        """The indexed block with ``key``, if any."""
        bid = self.index.get(key) if key is not None else None
        return None if bid is None else self.blocks[bid]

    def attach(self, c: Context, b: ResidentBlock) -> None:
        """``c``'s chain now holds ``b`` (the caller appends its spec to the chain)."""
        self.attach_all(c, (b,))

    def attach_all(self, c: Context, bs: Iterable[ResidentBlock]) -> None:
        """:meth:`attach` of each of ``bs`` in turn (an inference's new chain tail: one call)."""
        cid, dead, flying, mark = c.id, self.dead, self._flying, self.marks.mark_block
        for b in bs:
            b.holders.add(cid)
            self._tick += 1  # (bump_block, inlined: per block attached)
            b.version = self._tick
            if b.id not in flying:
                mark(b.id)
            dead.discard(b.id)

    def detach(self, c: Context, spec: BlockSpec) -> None:
        """``c``'s chain no longer holds the block ``spec`` names (its recency folded in)."""
        b = self.block_of(spec)
        if c.last_infer is not None and c.last_infer > b.touch:
            b.touch = c.last_infer  # fold the holder's recency in before it stops holding
        b.touch_op = max(b.touch_op, c.last_infer_op)
        b.holders.discard(c.id)
        self.bump_block(b)
        self.refresh_dead(b)

    def detach_from(self, c: Context, depth: int) -> None:
        """Cut ``c``'s chain at ``depth``: every entry from there on is detached."""
        for spec in c.materialized[depth:]:
            self.detach(c, spec)
        del c.materialized[depth:]

    def add(self, b: ResidentBlock, *, indexed: bool) -> None:
        """A block just written for the request in flight; ``indexed``: a full block that can
        be hit from now on (B6), not bypassed (B4)."""
        self._flying[b.id] = None
        # bump_block, inlined (per block written): the block is flying, so nothing is marked
        self._tick += 1
        b.version = self._tick
        self.blocks[b.id] = b
        if indexed:
            key = b.spec.key
            assert key is not None
            self.index[key] = b.id
            b.indexed = True

    def drop(self, b: ResidentBlock, *, keep_slot: bool = False) -> None:
        """Remove a block from memory; every chain holding it is cut there (spec M4.3).
        ``keep_slot``: its slot stays taken, for :meth:`Memory.reuse` at once."""
        key = b.spec.key
        if b.indexed and key is not None:  # (only a full block, which has a key, is indexed)
            del self.index[key]
        holders = b.holders
        if holders:
            d = b.depth
            for h in sorted(holders) if len(holders) > 1 else holders:
                c = self.contexts[h]
                chain = c.materialized
                if len(chain) > d + 1:  # blocks below it leave the chain: their classes change
                    self.marks.invalidate()
                    for spec in chain[d + 1 :]:
                        self.detach(c, spec)
                del chain[d:]
                if c.valid > d:
                    c.valid = d
            holders.clear()
        bid = b.id
        del self.blocks[bid]
        self.marks.forget(bid)
        self.dead.discard(bid)
        self._flying.pop(bid, None)
        if not keep_slot:
            self.memory.free(bid)

    # ------------------------------------------------------------------ the request in flight

    def begin_flight(self, c: Context, valid: int, hits: Iterable[ResidentBlock]) -> None:
        """``c``'s inference is being admitted: its kept prefix (``valid`` entries of its
        chain) and its hits are in flight -- never evicted, never Dead -- until it ends."""
        self._flight_ctx, self._flight_valid = c, valid
        self._flying = {}
        self.bump(c)
        for b in hits:
            self.fly(b)

    def fly(self, b: ResidentBlock) -> None:
        """``b`` joins the request in flight (a hit, or an orphan rewritten in place)."""
        self._flying[b.id] = None
        self.dead.discard(b.id)
        self.bump_block(b)

    def end_flight(self) -> None:
        """The inference is over: what it used is classed by its holders again."""
        flying = self._flying
        self._flight_ctx, self._flight_valid, self._flying = None, 0, {}
        blocks, dead, mark = self.blocks, self.dead, self.marks.mark_block
        # in the order they joined the flight, their chain's: the rank index keys blocks in the
        # order they were marked, so a recency rank's batch is pushed already in order. (Their
        # order decides no comparison: the versions drawn here are consecutive, so each compares
        # with any other version -- a context's, a clock read -- as any other of them does.)
        for bid in flying:
            b = blocks.get(bid)
            if b is not None:
                # bump_block and refresh_dead, inlined (per block the request used): nothing
                # is in flight now, so the bump marks it and it is Dead iff it has no holder
                self._tick += 1
                b.version = self._tick
                mark(bid)
                if b.holders:
                    dead.discard(bid)
                else:
                    dead.add(bid)

    def flight_context(self) -> ContextId | None:
        """The context whose inference is being admitted (None between inferences)."""
        c = self._flight_ctx
        return None if c is None else c.id

    def flying(self, bid: BlockId) -> bool:
        """Written or hit by the request in flight (its kept prefix aside)."""
        return bid in self._flying

    def flying_blocks(self) -> AbstractSet[BlockId]:
        """The blocks :meth:`flying` is true of, for a caller that asks of many at once: a live
        view until the flight begins or ends (a new one then), read-only to the caller."""
        return self._flying.keys()

    def in_flight(self, b: ResidentBlock) -> bool:
        """Used by the inference being admitted: its kept prefix, hits and writes (M4.2)."""
        if b.id in self._flying:
            return True
        c = self._flight_ctx
        return c is not None and b.depth < self._flight_valid and c.id in b.holders

    def in_flight_count(self) -> int:
        """Blocks of the inference being admitted: its kept prefix, hits and writes (M4.2)."""
        return len(self._flying) + self._flight_valid

    def evictable(self, b: ResidentBlock, view: ModelView) -> bool:
        """Spec M4.1: a resident block is evictable unless the request in flight uses it or it
        is Pinned (the one definition is :meth:`evictable_info`)."""
        return self.evictable_info(b, view) is not None

    def evictable_info(
        self, b: ResidentBlock, view: ModelView, info: BlockInfo | None = None
    ) -> BlockInfo | None:
        """Spec M4.1, the one definition: ``b``'s snapshot in ``view`` if it is evictable --
        the request in flight does not use it and it is not Pinned (its class, L5.2, as
        ``view`` has it; read only for a block not in flight) -- else None. The snapshot is
        returned for a caller that needs both (the general path's candidates); ``info``: ``b``'s
        current snapshot, if the caller keeps one (``view`` is not asked then)."""
        if self.in_flight(b):
            return None
        if info is None:
            info = view.block(b.id)
        return None if info.state is BlockClass.PINNED else info

    # ------------------------------------------------------------------ classes

    def refresh_dead(self, b: ResidentBlock) -> None:
        if not b.holders and not self.in_flight(b) and b.id in self.blocks:
            self.dead.add(b.id)
        else:
            self.dead.discard(b.id)

    def block_class(self, b: ResidentBlock) -> BlockClass:
        """Spec L5.2; a block written by the in-flight request and not yet on a chain keeps the
        class it had in the writing context."""
        holders = b.holders
        if len(holders) == 1:  # most blocks; one context's class is never Dead, so it is the max
            for h in holders:
                return self.contexts[h].block_class(b.depth)
        if not holders and b.id in self._flying:
            return b.birth_state
        return aggregate_across_contexts(self.contexts[h].block_class(b.depth) for h in b.holders)
