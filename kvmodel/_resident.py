"""The engine's record of one resident block slot (private: policies see ``BlockInfo``)."""

from __future__ import annotations

from kvmodel.blocks import BlockSpec
from kvmodel.errors import InternalError
from kvmodel.ids import BlockId, ContextId, TierName
from kvmodel.lifecycle import BlockClass
from kvmodel.messages import AgentKind

__all__ = ["Placed", "ResidentBlock"]


class ResidentBlock:
    """A block slot holding KV (mutable, engine-internal)."""

    __slots__ = (
        "alloc_time",
        "birth_state",
        "depth",
        "holders",
        "id",
        "indexed",
        "spec",
        "tier",
        "touch",
        "touch_op",
        "version",
        "writer",
        "writer_agent",
    )

    def __init__(
        self,
        bid: BlockId,
        spec: BlockSpec,
        tier: TierName,
        t: float,
        writer: ContextId,
        writer_agent: AgentKind,
        birth_state: BlockClass,
    ) -> None:
        self.id = bid
        self.tier = tier
        #: open contexts whose materialized chain holds this block
        self.holders: set[ContextId] = set()
        self.renew(spec, t, writer, writer_agent, birth_state)

    def renew(
        self,
        spec: BlockSpec,
        t: float,
        writer: ContextId,
        writer_agent: AgentKind,
        birth_state: BlockClass,
    ) -> None:
        """Hold a new block written to this slot: every field but the slot's id and tier is
        the new block's. The engine renews the record of the block it evicted for room as it
        writes to its slot (spec M4; once dropped, nothing holds the evicted block's record),
        which saves building a record per write on a cache that turns over."""
        if self.holders:
            raise InternalError(f"block {self.id} renewed while a chain holds it")
        self.spec = spec
        self.depth = spec.depth
        self.indexed = False
        #: last use recorded on the block itself; holders' ``last_infer`` is folded in lazily
        self.touch = t
        #: the trace op index of that use (vLLM's release order is the order of requests)
        self.touch_op = -1
        self.alloc_time = t
        self.writer = writer
        self.writer_agent = writer_agent
        #: its class in the writing context; its class while in flight with no holder
        self.birth_state = birth_state
        #: drawn from the engine's counter whenever the block's features may change
        self.version = 0


#: A block an inference wrote (or rewrote in place): ``(spec, block, bypass, fresh)`` -- the
#: context's packed spec, the resident block, whether it bypassed the index, and whether it was
#: newly allocated (False: an orphan rewritten in place). A plain tuple, unpacked where read:
#: one is built for every block written, and a NamedTuple's construction cost 3.5x as much
Placed = tuple[BlockSpec, ResidentBlock, bool, bool]
