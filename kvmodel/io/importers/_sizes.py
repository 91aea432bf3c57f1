"""Message sizes from a log's own counts, shared by the importers (spec R4).

:func:`split_tokens` divides a logged token count among messages in proportion to their
characters-based estimates; :func:`calibrated` applies it to a Claude Code import, call by call;
:func:`track_live` follows each context's live messages through a list of ops.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvmodel.ids import ContextId, MessageId
from kvmodel.io.trace import Append, Infer, Op, Open, Remove, Return, TurnEnd
from kvmodel.messages import Message, MessageKind

__all__ = ["calibrated", "split_tokens", "track_live"]


def calibrated(ops: list[Op], prompt_sizes: dict[int, int]) -> list[Op]:
    """Sizes from the provider's counts (R4): at each call that logged its prompt size, the
    messages its context gained since its last such call (tool results, the last call's outputs,
    a new prompt) share what the size leaves after the messages already sized, in proportion to
    their characters-based estimates; a message keeps one size wherever it is copied. Where the
    estimate of the older messages already exceeds the count, nothing is rescaled."""
    live: dict[ContextId, list[Message]] = {}
    size: dict[MessageId, int] = {}
    settled: set[MessageId] = set()
    for op in ops:
        if isinstance(op, Infer) and id(op) in prompt_sizes:
            msgs = live.get(op.ctx, [])
            fresh = [m for m in msgs if m.id not in settled]
            old = sum(size.get(m.id, m.tokens) for m in msgs if m.id in settled)
            room = prompt_sizes[id(op)] - old
            if fresh and room >= len(fresh):
                est = [size.get(m.id, m.tokens) for m in fresh]
                for m, n in zip(fresh, split_tokens(room, est), strict=True):
                    size[m.id] = n
            settled.update(m.id for m in msgs)
        track_live(live, op)
    return [_resized(op, size) for op in ops] if size else ops


def split_tokens(total: int, weights: Sequence[int]) -> list[int]:
    """``total`` tokens split in proportion to ``weights``, at least one each (``total`` must
    be at least ``len(weights)``); the remainder goes to the largest fractions, earliest first,
    so the shares sum to ``total`` exactly."""
    spare = total - len(weights)
    w = sum(weights)
    raw = [spare * x / w for x in weights]
    out = [int(r) for r in raw]
    order = sorted(range(len(raw)), key=lambda i: (out[i] - raw[i], i))
    for i in order[: spare - sum(out)]:
        out[i] += 1
    return [1 + n for n in out]


def _resized(op: Op, size: dict[MessageId, int]) -> Op:
    def fix(m: Message) -> Message:
        n = size.get(m.id)
        return m if n is None or n == m.tokens else Message(m.id, m.role, m.kind, n, m.hash)

    match op:
        case Append():
            return Append(op.t, op.ctx, tuple(fix(m) for m in op.messages), op.temporary)
        case Infer():
            return Infer(op.t, op.ctx, tuple(fix(m) for m in op.output), op.duration)
        case Return():
            return Return(op.t, op.ctx, op.into, fix(op.result))
        case _:
            return op


def track_live(live: dict[ContextId, list[Message]], op: Op) -> None:
    """Each context's live messages, so that a marker can name a range or copy a context."""
    match op:
        case Open():
            live[op.ctx] = []
        case Append():
            live.setdefault(op.ctx, []).extend(op.messages)
        case Infer():
            live.setdefault(op.ctx, []).extend(op.output)
        case Remove():
            del live.setdefault(op.ctx, [])[op.index : op.index + op.count]
        case Return():
            live.setdefault(op.into, []).append(op.result)
        case TurnEnd():
            live[op.ctx] = [m for m in live.get(op.ctx, []) if m.kind is not MessageKind.REASONING]
        case _:
            pass  # end_session: nothing to track
