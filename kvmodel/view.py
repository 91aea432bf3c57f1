"""What a policy sees: read-only values and the :class:`ModelView` protocol (STYLE §2).

A policy never touches the engine's objects. It receives frozen snapshots -- :class:`BlockInfo`
for a resident block, :class:`NewBlock` for a block about to be placed, :class:`ContextInfo`,
:class:`TierInfo` -- through a :class:`ModelView`, and answers with a decision.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import attrs

from kvmodel.ids import BlockId, BlockKey, ContextId, SessionId, TierName
from kvmodel.lifecycle import BlockClass, MsgState
from kvmodel.messages import AgentKind, MessageKind, SpawnRecord

__all__ = ["BlockInfo", "ContextInfo", "Featured", "ModelView", "NewBlock", "TierInfo"]


class Featured(Protocol):
    """The block features a rank term reads (spec PP3, :data:`kvmodel.policy.FEATURES`): a
    :class:`BlockInfo` has them, and so has the engine's leaner record of the same values,
    computed by the same code, from which its rank index keys blocks without a snapshot."""

    @property
    def id(self) -> BlockId: ...

    @property
    def tier_index(self) -> int: ...

    @property
    def depth(self) -> int: ...

    @property
    def state(self) -> BlockClass: ...

    @property
    def last_access(self) -> float: ...

    @property
    def last_op(self) -> int: ...

    @property
    def suspend_time(self) -> float | None: ...

    @property
    def alloc_time(self) -> float: ...

    @property
    def holders(self) -> tuple[ContextId, ...]: ...


@attrs.frozen(slots=True)
class BlockInfo:
    """A resident block's features, the vocabulary of declarative rank keys (spec PP3).

    * ``state`` -- lifecycle class aggregated over holding contexts (spec L5);
    * ``last_access`` -- the time of the last inference that used (hit, kept or wrote) it;
    * ``last_op`` -- the trace index of that inference (orders uses at one time);
    * ``suspend_time`` -- among holders in which it is Suspended, the *earliest* suspension time
      (the holder that will resume soonest decides how near its reuse is); ``None`` if none;
    * ``depth`` -- position in its hash chain (0 = first block of a context);
    * ``tier_index`` -- position of its tier in the configuration.
    """

    id: BlockId
    key: BlockKey | None
    tier: TierName
    tier_index: int
    depth: int
    state: BlockClass
    last_access: float
    last_op: int
    suspend_time: float | None
    alloc_time: float
    holders: tuple[ContextId, ...]
    writer: ContextId
    writer_agent: AgentKind
    kinds: frozenset[MessageKind]
    indexed: bool


@attrs.frozen(slots=True)
class NewBlock:
    """A block about to be written for ``ctx``'s inference (spec PP2).

    ``state`` is its class in ``ctx`` (Temporary if it covers a temporary message, else Active);
    ``in_prompt`` is False for blocks produced by decoding the inference's output; ``partial``
    marks the tail block that will be freed after the inference whatever the policy says.
    """

    key: BlockKey | None
    depth: int
    ctx: ContextId
    session: SessionId
    agent: AgentKind
    state: BlockClass
    kinds: frozenset[MessageKind]
    in_prompt: bool
    partial: bool
    #: completed turns of ``ctx`` (``turn_end`` count) and the first block of the current turn:
    #: blocks below it were written in earlier turns (Lachesis's reasoning-stripped history)
    turn: int = 0
    turn_start_block: int = 0
    #: the block holding the context's first reasoning token (None: no reasoning): KV before
    #: it survives turn-end strips
    reasoning_block: int | None = None


@attrs.frozen(slots=True)
class ContextInfo:
    """A policy's snapshot of one context: identity, spawn relation, lifecycle phase (spec L4),
    sizes in messages, tokens and blocks, and when it was opened and closed."""

    id: ContextId
    session: SessionId
    agent: AgentKind
    parent: ContextId | None
    spawn: SpawnRecord | None
    one_shot: bool
    is_open: bool
    phase: MsgState
    messages: int
    tokens: int
    materialized_blocks: int
    valid_blocks: int
    opened_at: float
    closed_at: float | None
    last_infer: float | None
    suspended_at: float | None


@attrs.frozen(slots=True)
class TierInfo:
    """A policy's snapshot of one tier: its place in the order, capacity and free blocks in
    blocks, writes so far, and its P/E-cycle budget (None: it does not wear)."""

    name: TierName
    index: int
    capacity: int
    free: int
    writes: int
    pe_cycles: int | None


class ModelView(Protocol):
    """The read-only face of the model that policies and checkers use."""

    @property
    def now(self) -> float: ...

    @property
    def block_size(self) -> int: ...

    @property
    def now_op(self) -> int:
        """Index of the trace op being applied (offline policies key their plans on it)."""
        ...

    def tiers(self) -> Sequence[TierInfo]: ...

    def tier_names(self) -> tuple[TierName, ...]:
        """The configured tiers' names, fastest first: ``tuple(t.name for t in tiers())``
        without building the per-tier figures (what a placement reads on every block)."""
        ...

    def block(self, block: BlockId) -> BlockInfo: ...

    def resident(self) -> Sequence[BlockId]: ...

    def dead(self) -> Sequence[BlockId]: ...

    def context(self, ctx: ContextId) -> ContextInfo: ...

    def open_contexts(self) -> Sequence[ContextId]: ...

    def chain(self, ctx: ContextId) -> Sequence[BlockId]: ...

    def evictable(self, block: BlockId) -> bool:
        """Resident, not in flight and not Pinned: a candidate for eviction now (spec M4.1)."""
        ...
