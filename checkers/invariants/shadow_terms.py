"""The contract model's vocabulary (:class:`checkers.invariants.nversion.Shadow`): what it keeps
of each message and context, the lifecycle classes a context gives the blocks of its chain
(spec lifecycle.md L5.1, L5.3: written here from the message states, not read from the engine),
the decision rules it predicts with, and the figures it reports for comparison with the engine.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import attrs

from kvmodel.blocks import ROOT_KEY, Segment, chain_key
from kvmodel.ids import BlockId, BlockKey, ContentKey, ContextId
from kvmodel.lifecycle import BlockClass, MsgState
from kvmodel.messages import Message, MessageKind

__all__ = [
    "KEEP",
    "TETHER",
    "Admission",
    "BlockFigures",
    "Eviction",
    "EvictionTerms",
    "InferFigures",
    "Packer",
    "Rules",
    "ShadowContext",
    "ShadowMessage",
    "StateMap",
    "highest",
]

# L5.2: the class of a block is the highest over its holders
_ACROSS = {
    BlockClass.EXPIRED: 1,
    BlockClass.TEMPORARY: 2,
    BlockClass.SUSPENDED: 3,
    BlockClass.ACTIVE: 4,
    BlockClass.PINNED: 5,
}
_AS_CLASS = {
    MsgState.PINNED: BlockClass.PINNED,
    MsgState.ACTIVE: BlockClass.ACTIVE,
    MsgState.SUSPENDED: BlockClass.SUSPENDED,
}
# L5.1 for a block whose covered messages are all in one state
_ONE = {MsgState.EXPIRED: BlockClass.EXPIRED, MsgState.TEMPORARY: BlockClass.TEMPORARY, **_AS_CLASS}


def highest(classes: Iterable[BlockClass]) -> BlockClass:
    """L5.2: a block's class over the contexts holding it, from its class in each (Dead if
    none holds it)."""
    return max(classes, key=_ACROSS.__getitem__, default=BlockClass.DEAD)


class Packer:
    """B2-B3 from block 0, the contract model's own packing of a whole sequence at every
    inference (the engine packs incrementally); the key is the spec's hash over it
    (:func:`kvmodel.blocks.chain_key`, B3's one definition)."""

    def __init__(self, block_size: int) -> None:
        self.bs = block_size
        #: every key packed so far -> its depth
        self.key_depth: dict[BlockKey, int] = {}
        self._keys: dict[tuple[BlockKey, tuple[tuple[str, int, int], ...]], BlockKey] = {}

    def pack(self, seq: Sequence[ShadowMessage]) -> list[tuple[BlockKey | None, tuple[int, ...]]]:
        """B2-B3 from block 0: (key, or None for the partial tail; covered uids) per block. The
        packing is the shadow's own; the key is the spec's hash over it (B3's one definition)."""
        out: list[tuple[BlockKey | None, tuple[int, ...]]] = []
        parent = ROOT_KEY
        i, offset, total = 0, 0, sum(m.tokens for m in seq)  # message i, token offset in it
        while total:
            take = min(self.bs, total)
            total -= take
            segs: list[Segment] = []
            uids: list[int] = []
            while take:
                m = seq[i]
                n = min(take, m.tokens - offset)
                segs.append(Segment(ContentKey(m.content), offset, offset + n))
                uids.append(m.uid)
                take -= n
                offset += n
                if offset == m.tokens:
                    i, offset = i + 1, 0
            if sum(g.stop - g.start for g in segs) < self.bs:
                out.append((None, tuple(uids)))
                break
            memo = (parent, tuple((g.key, g.start, g.stop) for g in segs))
            key = self._keys.get(memo)
            if key is None:
                key = self._keys[memo] = chain_key(parent, segs)
            self.key_depth[key] = len(out)
            out.append((key, tuple(uids)))
            parent = key
        return out


@attrs.frozen
class Rules:
    """What the policy does when memory never runs out."""

    bypass: bool  # a block whose class in its writer is Temporary is written, never indexed
    reclaim: bool  # every Dead block is freed after every op


KEEP = Rules(bypass=False, reclaim=False)
TETHER = Rules(bypass=True, reclaim=True)


@attrs.define
class ShadowMessage:
    uid: int
    id: str
    content: str
    tokens: int
    kind: MessageKind


class StateMap(dict[int, MsgState]):
    """A context's message states, counting every change (``version``): what a block's class
    reads of its holder changes only with a change here or in the holder's chain, valid count,
    phase or suspension (:meth:`ShadowContext.stamp`)."""

    #: (a class default, not set in ``__init__``: a copy -- ``copy.deepcopy`` of a shadow, as
    #: the discovery search makes -- builds the map without calling it)
    version = 0

    def __setitem__(self, key: int, value: MsgState) -> None:
        self.version += 1
        super().__setitem__(key, value)

    def __delitem__(self, key: int) -> None:
        self.version += 1
        super().__delitem__(key)

    def _changed(self) -> None:
        self.version += 1

    def pop(self, *args: Any) -> Any:
        self._changed()
        return super().pop(*args)

    def popitem(self) -> tuple[int, MsgState]:
        self._changed()
        return super().popitem()

    def clear(self) -> None:
        self._changed()
        super().clear()

    def update(self, *args: Any, **kwargs: Any) -> None:
        self._changed()
        super().update(*args, **kwargs)

    def setdefault(self, key: int, default: Any = None) -> Any:
        self._changed()
        return super().setdefault(key, default)

    def __ior__(self, other: Any) -> StateMap:  # type: ignore[misc,override]
        self._changed()
        super().update(other)
        return self


#: each context's serial number, in order of creation (a stamp tells two contexts apart)
_SERIALS = itertools.count()


@attrs.define
class ShadowContext:
    id: ContextId
    session: str
    one_shot: bool
    open: bool = True
    runnable: bool = True  # L4: runnable from creation and every run until infer_end
    seq: list[ShadowMessage] = attrs.Factory(list)
    state: StateMap = attrs.Factory(StateMap)  # every instance ever admitted
    #: exactly the Pinned instances, each with when its pin ends (None: no TTL): a pin sets the
    #: entry, and whatever ends the pin (unpin, expiry, an edit or strip, close) drops it
    deadline: dict[int, float | None] = attrs.Factory(dict)
    chain: list[tuple[BlockKey, tuple[int, ...]]] = attrs.Factory(list)  # (key, covered uids)
    valid: int = 0
    #: the full blocks of its sequence packed at its last inference, cut by edits and not by
    #: evictions (spec/movement.md MV6: what keeps a copy live)
    packed: int = 0
    next_uid: int = 0
    suspended_at: float | None = None
    last_infer: float | None = None
    serial: int = attrs.Factory(lambda: next(_SERIALS))

    def stamp(self) -> tuple[object, ...]:
        """Everything :meth:`block_class` and a block's suspension read of this context, in a
        form that changes whenever they may: its phase, suspension, valid count, message
        states (each change counted) and sequence length, and its chain by length and last key
        (a key names its whole prefix; the messages each block covers change only with a
        state). Equal stamps of one context: each of its blocks has the class it had."""
        last = self.chain[-1][0] if self.chain else None
        return (self.serial, self.open, self.runnable, self.suspended_at, self.valid,
                len(self.seq), len(self.chain), last, self.state.version)  # fmt: skip

    def starts(self) -> list[int]:
        out, pos = [], 0
        for m in self.seq:
            out.append(pos)
            pos += m.tokens
        return out

    def tokens(self) -> int:
        return sum(m.tokens for m in self.seq)

    def message(self, m: Message) -> ShadowMessage:
        """A new instance of ``m`` in this context (its next uid)."""
        out = ShadowMessage(
            self.next_uid, m.id, m.hash if m.hash is not None else m.id, m.tokens, m.kind
        )
        self.next_uid += 1
        return out

    def admit(self, m: Message, *, temporary: bool) -> None:
        msg = self.message(m)
        live = MsgState.TEMPORARY if temporary or self.one_shot else MsgState.ACTIVE
        self.state[msg.uid] = live
        self.seq.append(msg)

    def run(self) -> None:
        self.runnable = True
        for m in self.seq:
            if self.state[m.uid] is MsgState.SUSPENDED:
                self.state[m.uid] = MsgState.ACTIVE

    def unpin(self, uid: int) -> None:
        if self.state[uid] is MsgState.PINNED:
            self.state[uid] = MsgState.ACTIVE if self.runnable else MsgState.SUSPENDED
        self.deadline.pop(uid, None)

    def invalidate(self, index: int, block_size: int) -> None:
        """B5: every block from the edit's token offset on is invalid."""
        if index < len(self.seq):
            cut = self.starts()[index] // block_size
            self.valid = min(self.valid, cut)
            self.packed = min(self.packed, cut)

    def close(self) -> None:
        for m in self.seq:
            self.state[m.uid] = MsgState.EXPIRED
        self.seq, self.chain, self.valid, self.deadline, self.open = [], [], 0, {}, False
        self.packed = 0

    def span(self, start: int | None, stop: int | None) -> list[ShadowMessage]:
        """The messages an op's ``start``/``stop`` range names (None: from the first, to the
        last)."""
        return self.seq[0 if start is None else start : len(self.seq) if stop is None else stop]

    def within(self, uids: Sequence[int]) -> BlockClass:
        """L5.1: the class of a block covering the message instances ``uids`` of this context
        (a block covers at least one), before its pinned prefix (L5.3) is applied."""
        state = self.state
        one = state[uids[0]]
        for u in uids:  # (most blocks cover messages in one state: no set built)
            if state[u] is not one:
                break
        else:
            return _ONE[one]
        states = {state[u] for u in uids}
        if MsgState.EXPIRED in states:
            return BlockClass.EXPIRED
        if MsgState.TEMPORARY in states:
            return BlockClass.TEMPORARY
        return max((_AS_CLASS[s] for s in states), key=_ACROSS.__getitem__)

    def pin_depth(self, block_size: int) -> int:
        """The deepest block covering a Pinned message (-1: none)."""
        if not self.deadline:  # (its keys are the Pinned instances: most contexts have none)
            return -1
        starts = self.starts()
        return max(
            (
                (starts[i] + m.tokens - 1) // block_size
                for i, m in enumerate(self.seq)
                if self.state[m.uid] is MsgState.PINNED
            ),
            default=-1,
        )

    def block_class(self, depth: int, block_size: int, pin_depth: int | None = None) -> BlockClass:
        """L5.1 with the L5.3 pinned prefix: the class of this context's chain block at
        ``depth``. ``pin_depth``: :meth:`pin_depth`, if the caller has it."""
        if depth >= self.valid:
            return BlockClass.EXPIRED
        cls = self.within(self.chain[depth][1])
        if pin_depth is None:
            pin_depth = self.pin_depth(block_size)
        if depth <= pin_depth and cls in _ACROSS and _ACROSS[cls] >= 3:
            return BlockClass.PINNED
        return cls


@attrs.frozen
class InferFigures:
    prompt_tokens: int
    hit_tokens: int
    miss_tokens: int
    output_tokens: int
    own_blocks: int
    hits: int
    writes: int


class BlockFigures(NamedTuple):
    """A resident block's figures (a tuple: one is built per block per comparison)."""

    depth: int
    state: BlockClass
    holders: tuple[str, ...]
    suspend_time: float | None
    last_access: float
    last_op: int
    alloc_time: float


class EvictionTerms(NamedTuple):
    """What the eviction-order checks read of a block at the moment of an eviction: its slot,
    class and suspension (the invariants), and every other rank feature (the declared rank's
    order, spec PP3): the :class:`~kvmodel.view.Featured` protocol, from the contract. A tuple:
    one is built per candidate per eviction."""

    id: BlockId
    state: BlockClass
    suspend_time: float | None
    depth: int
    tier_index: int
    last_access: float
    last_op: int
    alloc_time: float
    holders: tuple[ContextId, ...]
    #: its hash-chain key: the name a user finds in a log (the slot is the engine's)
    key: BlockKey | None = None


@attrs.frozen
class Admission:
    """The pre-check of one inference (spec M4.4, P7.4): the blocks it must write into new slots
    (misses that are not resident: a resident miss, an orphan, is rewritten in place), the free
    slots of all tiers, the evictable blocks (resident, not in flight, not Pinned), and the
    orphans among them (evictable now, in flight once rewritten)."""

    needed: int
    free: int
    evictable: int
    orphans: int

    @property
    def fits(self) -> bool:
        """Admitted: the writes fit in the free slots and the blocks that may be evicted."""
        return self.needed <= self.free or self.needed <= self.free + self.evictable - self.orphans

    def __str__(self) -> str:
        return (
            f"needs {self.needed} blocks; {self.free} free and "
            f"{self.evictable - self.orphans} evictable"
        )


@attrs.frozen
class Eviction:
    """One eviction as the contract sees it: the victim, the other evictable blocks in the
    tiers the allocation could evict from (M4.1) as the eviction-order checks read them, and
    whether the victim was in flight (M4.2).

    Of the other evictable blocks: ``count``, how many; ``representatives``, for each distinct
    (class, suspension time) among them the one of smallest key, in key order (the order
    invariants and :func:`~checkers.invariants.predicates.contested` read those two terms
    alone, so a block ordered before the victim exists iff a representative is, and the first
    in key order is one); ``first_ranked``, the one the declared rank (if the model was given
    one) orders first. Not every block: an eviction among thousands is judged on these, kept
    as an inference's evictions go (spec/invariants.md, Self-checks of the engine)."""

    victim: EvictionTerms
    representatives: tuple[EvictionTerms, ...]
    in_flight: bool
    count: int
    first_ranked: EvictionTerms | None
