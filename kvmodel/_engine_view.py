"""The engine's :class:`~kvmodel.view.ModelView` (private: users get it as ``engine.view``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from kvmodel.contexts import Context
from kvmodel.ids import BlockId, BlockKey, ContextId, SessionId, TierName
from kvmodel.io.trace import EndSession, Fork, Op, Return
from kvmodel.lifecycle import BlockClass, aggregate_across_contexts
from kvmodel.memory import Memory
from kvmodel.residency import Residency
from kvmodel.view import BlockInfo, ContextInfo, TierInfo

if TYPE_CHECKING:
    from kvmodel._resident import ResidentBlock

__all__ = [
    "ONE_HOLDER",
    "EngineView",
    "Features",
    "ViewHost",
    "named_contexts",
    "one_holder_lambda",
]


class Features(NamedTuple):
    """A resident block's rank features (:class:`~kvmodel.view.Featured`), without the rest of a
    :class:`~kvmodel.view.BlockInfo` snapshot: what the rank index keys a block by. A tuple,
    as one is built for every block keyed."""

    id: BlockId
    tier_index: int
    depth: int
    state: BlockClass
    last_access: float
    last_op: int
    suspend_time: float | None
    alloc_time: float
    holders: tuple[ContextId, ...]


#: A resident block ``r`` with one holder ``c``, its class there ``s``
#: (``c.block_class(r.depth)``) and the tier order ``T``: each of its :class:`Features` as a
#: Python expression (spec PP3). The one definition of such a block's features, and most blocks
#: have one holder: :meth:`EngineView.features` builds them from it, and a rank of plain numeric
#: terms keys such a block from it without building them (the rank index's one-holder entries).
ONE_HOLDER: Mapping[str, str] = {
    "id": "r.id",
    "tier_index": "T[r.tier]",
    "depth": "r.depth",
    "state": "s",
    "last_access": (
        "(c.last_infer if c.last_infer is not None and c.last_infer > r.touch else r.touch)"
    ),
    "last_op": "(c.last_infer_op if c.last_infer_op > r.touch_op else r.touch_op)",
    "suspend_time": "(c.suspended_at if s is SUSPENDED else None)",
    "alloc_time": "r.alloc_time",
    "holders": "(c.id,)",
}


def one_holder_lambda(body: str, *more: str) -> Any:
    """``lambda r, c, s, T, *more: <body>``, compiled, with the names :data:`ONE_HOLDER` reads
    (``more``: further parameters' names); the body is made from :data:`ONE_HOLDER` and a
    rank's terms, never from input."""
    names = {"Features": Features, "SUSPENDED": BlockClass.SUSPENDED}
    return eval(f"lambda {', '.join(('r', 'c', 's', 'T', *more))}: {body}", names)


#: :data:`ONE_HOLDER`'s features as one :class:`Features` (``tuple.__new__``, as NamedTuple's
#: own ``__new__`` does, without its Python-level call: one is built for every block keyed)
_one_holder_features: Callable[
    [ResidentBlock, Context, BlockClass, Mapping[TierName, int]], Features
] = one_holder_lambda(
    f"tuple.__new__(Features, ({', '.join(ONE_HOLDER[f] for f in Features.__annotations__)},))"
)


class ViewHost(Protocol):
    """What the view reads of the engine it shows."""

    @property
    def now(self) -> float: ...

    @property
    def op_index(self) -> int: ...

    @property
    def block_size(self) -> int: ...

    @property
    def memory(self) -> Memory: ...

    @property
    def residency(self) -> Residency: ...

    @property
    def blocks(self) -> Mapping[BlockId, ResidentBlock]: ...

    @property
    def index(self) -> Mapping[BlockKey, BlockId]: ...

    @property
    def dead(self) -> AbstractSet[BlockId]: ...

    @property
    def contexts(self) -> Mapping[ContextId, Context]: ...

    @property
    def sessions(self) -> Mapping[SessionId, list[ContextId]]: ...

    @property
    def tier_index(self) -> Mapping[TierName, int]: ...

    def block_class(self, b: ResidentBlock) -> BlockClass: ...


def named_contexts(op: Op, engine: ViewHost) -> list[ContextId]:
    """Contexts whose features an op may have changed (their cached block features go stale)."""
    match op:
        case EndSession():
            return list(engine.sessions.get(op.session, ()))
        case Fork():
            return [op.src, op.ctx]
        case Return():
            return [op.ctx, op.into]
        case _:
            return [op.ctx]


class EngineView:
    """:class:`ModelView` over an :class:`~kvmodel.engine.Engine` (read-only by construction: it
    copies)."""

    def __init__(self, engine: ViewHost) -> None:
        self._e = engine
        #: a block's BlockInfo is reused while its stamp (the newest of its own version and its
        #: holders', all drawn from one counter) is unchanged; a slot's entry outlives its
        #: block, but a new block in that slot has a newer version, so the old entry never
        #: matches
        self._info: dict[BlockId, tuple[int, BlockInfo]] = {}

    @property
    def now(self) -> float:
        return self._e.now

    @property
    def now_op(self) -> int:
        return self._e.op_index

    @property
    def block_size(self) -> int:
        return self._e.block_size

    def tier_names(self) -> tuple[TierName, ...]:
        return self._e.memory.names

    def tiers(self) -> Sequence[TierInfo]:
        m = self._e.memory
        return [
            TierInfo(t.name, i, t.blocks, m.free_count(t.name), m.writes[t.name], t.pe_cycles)
            for i, t in enumerate(m.tiers)
        ]

    def block(self, block: BlockId) -> BlockInfo:
        e = self._e
        b = e.blocks[block]
        stamp = e.residency.stamp(b)  # a cached snapshot is current iff this is its stamp
        hit = self._info.get(block)
        if hit is not None and hit[0] == stamp:
            return hit[1]
        f = self.features(b)
        info = BlockInfo(
            b.id,
            b.spec.key,
            b.tier,
            f.tier_index,
            b.depth,
            f.state,
            f.last_access,
            f.last_op,
            f.suspend_time,
            b.alloc_time,
            f.holders,
            b.writer,
            b.writer_agent,
            b.spec.kinds,
            b.indexed,
        )
        self._info[block] = (stamp, info)
        return info

    def features(self, b: ResidentBlock) -> Features:
        """The features of ``b`` that a rank reads (spec PP3): those of its :meth:`block`
        snapshot, computed here once for both."""
        e = self._e
        if len(b.holders) == 1:  # most blocks (their one definition: ONE_HOLDER)
            (h,) = b.holders
            c = e.contexts[h]
            return _one_holder_features(b, c, c.block_class(b.depth), e.tier_index)
        # none or several holders: ONE_HOLDER's features, taken over them (the highest class,
        # the earliest suspension among those Suspended, the latest use)
        last = b.touch
        last_op = b.touch_op
        suspend: float | None = None
        classes = []
        for h in b.holders:
            c = e.contexts[h]
            cls = c.block_class(b.depth)
            classes.append(cls)
            if (
                cls is BlockClass.SUSPENDED
                and c.suspended_at is not None
                and (suspend is None or c.suspended_at < suspend)
            ):
                suspend = c.suspended_at
            if c.last_infer is not None and c.last_infer > last:
                last = c.last_infer
            if c.last_infer_op > last_op:
                last_op = c.last_infer_op
        state = aggregate_across_contexts(classes) if classes else e.block_class(b)
        holders = tuple(sorted(b.holders))
        return tuple.__new__(
            Features,
            (
                b.id,
                e.tier_index[b.tier],
                b.depth,
                state,
                last,
                last_op,
                suspend,
                b.alloc_time,
                holders,
            ),
        )

    def resident(self) -> Sequence[BlockId]:
        return sorted(self._e.blocks)

    def dead(self) -> Sequence[BlockId]:
        return sorted(self._e.dead)

    def context(self, ctx: ContextId) -> ContextInfo:
        c = self._e.contexts[ctx]
        return ContextInfo(
            c.id,
            c.session,
            c.agent,
            c.parent,
            c.spawn,
            c.one_shot,
            c.is_open,
            c.phase,
            len(c),
            c.total_tokens,
            len(c.materialized),
            c.valid,
            c.opened_at,
            c.closed_at,
            c.last_infer,
            c.suspended_at,
        )

    def open_contexts(self) -> Sequence[ContextId]:
        return [cid for cid, c in self._e.contexts.items() if c.is_open]

    def chain(self, ctx: ContextId) -> Sequence[BlockId]:
        e = self._e
        return [e.index[s.key] for s in e.contexts[ctx].materialized if s.key is not None]

    def evictable(self, block: BlockId) -> bool:
        b = self._e.blocks.get(block)
        return b is not None and self._e.residency.evictable(b, self)
