"""The contract model's vocabulary (:class:`checkers.invariants.nversion.Shadow`): what it keeps
of each message and context, the lifecycle classes a context gives the blocks of its chain
(spec lifecycle.md L5.1, L5.3: written here from the message states, not read from the engine),
the decision rules it predicts with, and the figures it reports for comparison with the engine.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

import attrs

from kvmodel.ids import BlockId, BlockKey, ContextId
from kvmodel.lifecycle import BlockClass, MsgState
from kvmodel.messages import MessageKind

__all__ = [
    "KEEP",
    "TETHER",
    "BlockFigures",
    "Eviction",
    "EvictionTerms",
    "InferFigures",
    "Rules",
    "ShadowContext",
    "ShadowMessage",
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


@attrs.define
class ShadowContext:
    id: ContextId
    session: str
    one_shot: bool
    open: bool = True
    runnable: bool = True  # L4: runnable from creation and every run until infer_end
    seq: list[ShadowMessage] = attrs.Factory(list)
    state: dict[int, MsgState] = attrs.Factory(dict)  # every instance ever admitted
    deadline: dict[int, float | None] = attrs.Factory(dict)  # pinned instances: when the pin ends
    chain: list[tuple[BlockKey, tuple[int, ...]]] = attrs.Factory(list)  # (key, covered uids)
    valid: int = 0
    next_uid: int = 0
    suspended_at: float | None = None
    last_infer: float | None = None

    def starts(self) -> list[int]:
        out, pos = [], 0
        for m in self.seq:
            out.append(pos)
            pos += m.tokens
        return out

    def tokens(self) -> int:
        return sum(m.tokens for m in self.seq)

    def span(self, start: int | None, stop: int | None) -> list[ShadowMessage]:
        """The messages an op's ``start``/``stop`` range names (None: from the first, to the
        last)."""
        return self.seq[0 if start is None else start : len(self.seq) if stop is None else stop]

    def within(self, uids: Iterable[int]) -> BlockClass:
        """L5.1: the class of a block covering the message instances ``uids`` of this context,
        before its pinned prefix (L5.3) is applied."""
        states = {self.state[u] for u in uids}
        if len(states) == 1:
            (one,) = states
            return _ONE[one]
        if MsgState.EXPIRED in states:
            return BlockClass.EXPIRED
        if MsgState.TEMPORARY in states:
            return BlockClass.TEMPORARY
        return max((_AS_CLASS[s] for s in states), key=_ACROSS.__getitem__)

    def pin_depth(self, block_size: int) -> int:
        """The deepest block covering a Pinned message (-1: none)."""
        if MsgState.PINNED not in self.state.values():  # (most contexts: no pin to look for)
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


@attrs.frozen
class Eviction:
    """One eviction as the contract sees it: the victim, the other evictable blocks in the
    tiers the allocation could evict from (M4.1), and whether the victim was in flight (M4.2)."""

    victim: EvictionTerms
    candidates: tuple[EvictionTerms, ...]
    in_flight: bool
