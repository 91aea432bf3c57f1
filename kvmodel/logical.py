"""The trace's logical semantics alone: which messages each context holds after every op.

An implementation under test (a port, a simulator, a wrapper around a real engine's block
manager) keeps its own KV state but needs the trace's *meaning* -- what a context's prompt is
at an ``infer`` after appends, edits, turn-end strips, temporaries, forks and returns (spec
primitives.md). :class:`Sequences` gives that without any KV decision: it runs the reference
engine on one slot whose every inference is rejected, which by P7.7 still advances the logical
state and changes no memory. The packed blocks it returns carry the spec's hash-chain keys
(B3), the names the observation log and the oracle use.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from kvmodel.blocks import ROOT_KEY, BlockSpec, pack
from kvmodel.config import EngineConfig
from kvmodel.engine import Engine
from kvmodel.ids import ContextId, TierName
from kvmodel.io.trace import Op
from kvmodel.memory import TierConfig
from kvmodel.messages import Message
from kvmodel.policy import BasePolicy

__all__ = ["Sequences"]


class _NoKV(BasePolicy):
    name: ClassVar[str] = "logical-only"


class Sequences:
    """Apply trace ops; ask for a context's messages and their packed blocks."""

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        cfg = EngineConfig(block_size, (TierConfig(TierName("logical"), 1),))
        self._engine = Engine(cfg, _NoKV(), observe=False)  # (nothing reads its records)

    def apply(self, op: Op) -> None:
        """Apply one op (raises :class:`~kvmodel.errors.TraceError` on bad input)."""
        self._engine.apply(op)

    def messages(self, ctx: ContextId) -> tuple[Message, ...]:
        """The context's logical sequence now (before the next op)."""
        return tuple(m for m, _ in self._engine.contexts[ctx].entries)

    def blocks(self, ctx: ContextId, output: Sequence[Message] = ()) -> list[BlockSpec]:
        """The packed blocks of the context's messages followed by ``output`` (an inference's
        prompt and its output), from block 0, with their hash-chain keys."""
        msgs = [*self.messages(ctx), *output]
        starts, pos = [], 0
        for m in msgs:
            starts.append(pos)
            pos += m.tokens
        return pack(
            [(m, i) for i, m in enumerate(msgs)],
            starts,
            first_block=0,
            parent=ROOT_KEY,
            block_size=self.block_size,
        )
