"""The engine's record of one resident block slot (private: policies see ``BlockInfo``)."""

from __future__ import annotations

from typing import NamedTuple

from kvmodel.blocks import BlockSpec
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
        self.spec = spec
        self.depth = spec.depth
        self.tier = tier
        self.indexed = False
        #: open contexts whose materialized chain holds this block
        self.holders: set[ContextId] = set()
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


class Placed(NamedTuple):
    """A block an inference wrote (or rewrote in place); a tuple: one is built per block."""

    spec: BlockSpec
    block: ResidentBlock
    bypass: bool
    fresh: bool  # newly allocated (False: an orphan rewritten in place)
