"""The trace's vocabulary: one frozen class per op (spec T2), the ``Op`` union, their trace
names, and a trace as the reader returns it (header, ops, source lines). Reading and writing
JSONL is :mod:`kvmodel.io.trace`, which re-exports everything here.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TypeAlias

import attrs

from kvmodel.ids import ContextId, MessageId, SessionId
from kvmodel.messages import AgentKind, Message, SpawnRecord

__all__ = [
    "OP_NAMES",
    "TRACE_VERSION",
    "Append",
    "Close",
    "EndSession",
    "Fork",
    "Infer",
    "Op",
    "Open",
    "Pin",
    "Remove",
    "Replace",
    "Return",
    "Trace",
    "TraceHeader",
    "TurnEnd",
    "Unpin",
    "carried_messages",
    "named_ids",
    "op_name",
    "renamed",
    "scaled_clock",
    "with_messages",
]

TRACE_VERSION = 1


@attrs.frozen(slots=True)
class Open:
    t: float
    ctx: ContextId
    session: SessionId
    agent: AgentKind
    parent: ContextId | None = None
    spawn: SpawnRecord | None = None
    one_shot: bool = False


@attrs.frozen(slots=True)
class Fork:
    t: float
    ctx: ContextId
    src: ContextId
    upto: int | None = None


@attrs.frozen(slots=True)
class Append:
    t: float
    ctx: ContextId
    messages: tuple[Message, ...]
    temporary: bool = False


@attrs.frozen(slots=True)
class Replace:
    t: float
    ctx: ContextId
    index: int
    message: Message


@attrs.frozen(slots=True)
class Remove:
    t: float
    ctx: ContextId
    index: int
    count: int = 1


@attrs.frozen(slots=True)
class Pin:
    t: float
    ctx: ContextId
    start: int | None = None
    stop: int | None = None
    ttl: float | None = None

    @property
    def deadline(self) -> float | None:
        """When the pin ends (``t + ttl``; None: held until unpinned), the one computation of
        it: a search that aims an op at a deadline meets the engine's float exactly."""
        return None if self.ttl is None else self.t + self.ttl


@attrs.frozen(slots=True)
class Unpin:
    t: float
    ctx: ContextId
    start: int | None = None
    stop: int | None = None


@attrs.frozen(slots=True)
class Infer:
    t: float
    ctx: ContextId
    output: tuple[Message, ...] = ()
    duration: float = 0.0


@attrs.frozen(slots=True)
class TurnEnd:
    t: float
    ctx: ContextId


@attrs.frozen(slots=True)
class Return:
    t: float
    ctx: ContextId
    into: ContextId
    result: Message


@attrs.frozen(slots=True)
class Close:
    t: float
    ctx: ContextId


@attrs.frozen(slots=True)
class EndSession:
    t: float
    session: SessionId


Op: TypeAlias = (
    Open
    | Fork
    | Append
    | Replace
    | Remove
    | Pin
    | Unpin
    | Infer
    | TurnEnd
    | Return
    | Close
    | EndSession
)

_OP_NAMES: dict[type[Any], str] = {
    Open: "open",
    Fork: "fork",
    Append: "append",
    Replace: "replace",
    Remove: "remove",
    Pin: "pin",
    Unpin: "unpin",
    Infer: "infer",
    TurnEnd: "turn_end",
    Return: "return",
    Close: "close",
    EndSession: "end_session",
}


#: every op kind, by its trace name, in spec order (read by the generators and the checkers)
OP_NAMES: tuple[str, ...] = tuple(_OP_NAMES.values())


def op_name(op: Op) -> str:
    """The op's name as written in a trace (``"turn_end"``, ...)."""
    return _OP_NAMES[type(op)]


def carried_messages(op: Op) -> tuple[Message, ...]:
    """The messages ``op`` carries, in order: an append's, an inference's output, a replace's
    new message, a return's result (none for every other op)."""
    if isinstance(op, Append):
        return op.messages
    if isinstance(op, Infer):
        return op.output
    if isinstance(op, Replace):
        return (op.message,)
    if isinstance(op, Return):
        return (op.result,)
    return ()


def with_messages(op: Op, messages: Sequence[Message]) -> Op:
    """``op`` carrying ``messages`` in place of :func:`carried_messages` (as many, in order;
    an op that carries none is returned as it is)."""
    if len(messages) != len(carried_messages(op)):
        raise ValueError(
            f"{op_name(op)} carries {len(carried_messages(op))} messages, not {len(messages)}"
        )
    if isinstance(op, Append):
        return attrs.evolve(op, messages=tuple(messages))
    if isinstance(op, Infer):
        return attrs.evolve(op, output=tuple(messages))
    if isinstance(op, Replace):
        return attrs.evolve(op, message=messages[0])
    if isinstance(op, Return):
        return attrs.evolve(op, result=messages[0])
    return op


#: the fields of an op that name a context
_CONTEXT_FIELDS = ("ctx", "src", "into", "parent")


def named_ids(op: Op) -> Iterator[tuple[str, str]]:
    """The ids ``op`` names, in order, each with its kind: ``"context"`` (its context, a fork's
    source, a return's target, an open's parent), ``"session"``, ``"message"`` (the messages
    it carries) and ``"hash"`` (their content hashes)."""
    for f in _CONTEXT_FIELDS:
        v = getattr(op, f, None)
        if isinstance(v, str):
            yield "context", v
    session = getattr(op, "session", None)
    if isinstance(session, str):
        yield "session", session
    for m in carried_messages(op):
        yield "message", m.id
        if m.hash is not None:
            yield "hash", m.hash


def renamed(op: Op, names: Mapping[str, str]) -> Op:
    """``op`` with every id :func:`named_ids` lists replaced by ``names[id]`` (an id not in
    ``names`` is kept)."""
    ms = [
        attrs.evolve(
            m,
            id=MessageId(names.get(m.id, m.id)),
            hash=None if m.hash is None else names.get(m.hash, m.hash),
        )
        for m in carried_messages(op)
    ]
    changes: dict[str, Any] = {
        f: names.get(v, v)
        for f in (*_CONTEXT_FIELDS, "session")
        if isinstance(v := getattr(op, f, None), str)
    }
    return attrs.evolve(with_messages(op, ms), **changes)


def scaled_clock(op: Op, k: float) -> Op:
    """``op`` with every time it carries multiplied by ``k``: its time, an inference's
    duration, a pin's TTL. For ``k`` a power of two (a half, 64, ...) the product is exact in
    binary floating point, and so is every sum and difference of scaled times: each comparison
    of times, a pin's deadline ``t + ttl`` against an op's time included, comes out as before,
    and only what reads a time's magnitude sees a difference (spec/invariants.md, swarm
    testing)."""
    if isinstance(op, Infer):
        return attrs.evolve(op, t=op.t * k, duration=op.duration * k)
    if isinstance(op, Pin) and op.ttl is not None:
        return attrs.evolve(op, t=op.t * k, ttl=op.ttl * k)
    return attrs.evolve(op, t=op.t * k)


@attrs.frozen(slots=True)
class TraceHeader:
    """The optional first line. ``meta`` keeps every other key, verbatim."""

    version: int = TRACE_VERSION
    meta: Mapping[str, Any] = attrs.field(factory=dict)


@attrs.frozen(slots=True)
class Trace:
    """A parsed trace (spec T1): its header and ops, and each op's source line for errors."""

    header: TraceHeader
    ops: tuple[Op, ...]
    #: 1-based source line of each op (for error messages); empty for traces built in code.
    lines: tuple[int, ...] = ()
    source: str | None = None

    def line_of(self, i: int) -> int:
        return self.lines[i] if self.lines else i + 1 + (1 if self.header.meta else 0)
