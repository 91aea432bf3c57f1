"""Trace format v1: typed ops, a validating JSONL reader, a canonical writer (spec T1-T3).

A trace is JSONL, one op per line, with an optional first line ``{"kvtrace": 1, ...}`` holding
metadata. Every op has ``t`` (seconds, non-decreasing). Unknown ops and unknown fields are errors;
so are wrong types, ``tokens < 1`` and time going backwards. Checks that need the model's state
(unknown or closed context, index out of range) are made during replay, which reports them with
the same file/line/op/field location.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

from kvmodel.errors import TraceError
from kvmodel.ids import ContextId, MessageId, SessionId
from kvmodel.io.ops import (
    OP_NAMES,
    TRACE_VERSION,
    Append,
    Close,
    EndSession,
    Fork,
    Infer,
    Op,
    Open,
    Pin,
    Remove,
    Replace,
    Return,
    Trace,
    TraceHeader,
    TurnEnd,
    Unpin,
    carried_messages,
    named_ids,
    op_name,
    renamed,
    scaled_clock,
    with_messages,
)
from kvmodel.messages import AgentKind, Message, MessageKind, Role, SpawnRecord

__all__ = [
    "MAX_CONTEXT_TOKENS",
    "MAX_INT",
    "MAX_MESSAGE_TOKENS",
    "MAX_STRING",
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
    "dump_trace",
    "dumps_op",
    "iter_trace_lines",
    "load_trace",
    "named_ids",
    "op_name",
    "op_to_json",
    "parse_op",
    "parse_trace_lines",
    "renamed",
    "scaled_clock",
    "with_messages",
]

# --------------------------------------------------------------------------- reading


#: Bounds on hostile input (spec/trace-format.md T3): work must stay proportional to what a
#: line can justify. A message of more tokens than any model's context window, an index or
#: count beyond any real context, a name longer than any id is an error, not a long run.
MAX_MESSAGE_TOKENS = 1_000_000
MAX_INT = 10_000_000
#: a context's logical sequence, checked when messages are admitted (kvmodel.contexts)
MAX_CONTEXT_TOKENS = 10_000_000
MAX_STRING = 10_000


class _Fields:
    """Typed access to one op's JSON object; every failure names the op and field."""

    def __init__(self, obj: Mapping[str, Any], op: str, allowed: frozenset[str]) -> None:
        self.obj = obj
        self.op = op
        unknown = sorted(set(obj) - allowed - {"op"})
        if unknown:
            raise TraceError(
                f"unknown field (allowed: {', '.join(sorted(allowed))})", op=op, field=unknown[0]
            )

    def err(self, field: str, expected: str, got: object) -> TraceError:
        return TraceError(f"expected {expected} (got {got!r})", op=self.op, field=field)

    def has(self, field: str) -> bool:
        return field in self.obj and self.obj[field] is not None

    def string(self, field: str) -> str:
        v = self.obj.get(field)
        if not isinstance(v, str) or not v:
            raise self.err(field, "a non-empty string", v)
        return self.text(field, v)

    def text(self, field: str, v: str, *, bounded: bool = True) -> str:
        """``v`` if it is Unicode text (a lone surrogate, which only a JSON escape can carry,
        is not) and, when ``bounded`` (a name, not prose), at most :data:`MAX_STRING`
        characters."""
        if bounded and len(v) > MAX_STRING:
            raise self.err(field, f"a string of at most {MAX_STRING:,} characters", v[:40] + "...")
        if not v.isascii():
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                raise self.err(field, "Unicode text (no lone surrogate)", v) from None
        return v

    def number(self, field: str, *, minimum: float = 0.0) -> float:
        v = self.obj.get(field)
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise self.err(field, "a finite number", v)
        if v < minimum:
            raise self.err(field, f"a number >= {minimum:g}", v)
        return float(v)

    def integer(self, field: str, *, minimum: int = 0) -> int:
        v = self.obj.get(field)
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.err(field, "an integer", v)
        if v < minimum or v > MAX_INT:
            raise self.err(field, f"an integer in [{minimum}, {MAX_INT:,}]", v)
        return v

    def boolean(self, field: str) -> bool:
        v = self.obj.get(field, False)
        if not isinstance(v, bool):
            raise self.err(field, "true or false", v)
        return v

    def opt_integer(self, field: str, *, minimum: int = 0) -> int | None:
        return self.integer(field, minimum=minimum) if self.has(field) else None

    def message(self, field: str, v: object) -> Message:
        if not isinstance(v, dict):
            raise self.err(field, "a message object {id, role, kind, tokens, hash?}", v)
        allowed = {"id", "role", "kind", "tokens", "hash"}
        unknown = sorted(set(v) - allowed)
        if unknown:
            raise self.err(f"{field}.{unknown[0]}", "no such message field", v[unknown[0]])
        mid = v.get("id")
        if not isinstance(mid, str) or not mid:
            raise self.err(f"{field}.id", "a non-empty string", mid)
        self.text(f"{field}.id", mid)
        role = _enum(Role, v.get("role"), lambda e: self.err(f"{field}.role", e, v.get("role")))
        kind = _enum(
            MessageKind, v.get("kind"), lambda e: self.err(f"{field}.kind", e, v.get("kind"))
        )
        tokens = v.get("tokens")
        if (
            isinstance(tokens, bool)
            or not isinstance(tokens, int)
            or not 1 <= tokens <= MAX_MESSAGE_TOKENS
        ):
            raise self.err(f"{field}.tokens", f"an integer in [1, {MAX_MESSAGE_TOKENS:,}]", tokens)
        h = v.get("hash")
        if h is not None and (not isinstance(h, str) or not h):
            raise self.err(f"{field}.hash", "a non-empty string or absent", h)
        if h is not None:
            self.text(f"{field}.hash", h)
        return Message(MessageId(mid), role, kind, tokens, h)

    def messages(self, field: str, *, allow_empty: bool) -> tuple[Message, ...]:
        v = self.obj.get(field, [] if allow_empty else None)
        if not isinstance(v, list) or (not v and not allow_empty):
            raise self.err(
                field,
                "a non-empty list of messages" if not allow_empty else "a list of messages",
                v,
            )
        return tuple(self.message(f"{field}[{i}]", m) for i, m in enumerate(v))


_E = TypeVar("_E", Role, MessageKind, AgentKind)


def _enum(cls: type[_E], v: object, fail: Callable[[str], TraceError]) -> _E:
    for member in cls:
        if member.value == v:
            return member
    raise fail("one of " + "|".join(m.value for m in cls))


def _parse_spawn(f: _Fields) -> SpawnRecord | None:
    if not f.has("spawn"):
        return None
    v = f.obj["spawn"]
    if not isinstance(v, dict):
        raise f.err("spawn", "an object {instruction, tools, context_tokens, agent_type}", v)
    unknown = sorted(set(v) - {"instruction", "tools", "context_tokens", "agent_type"})
    if unknown:
        raise f.err(f"spawn.{unknown[0]}", "no such spawn field", v[unknown[0]])
    ins = v.get("instruction", "")
    if not isinstance(ins, str):
        raise f.err("spawn.instruction", "a string", ins)
    f.text("spawn.instruction", ins, bounded=False)  # prose: any length
    tools = v.get("tools", [])
    if not isinstance(tools, list) or not all(isinstance(x, str) for x in tools):
        raise f.err("spawn.tools", "a list of strings", tools)
    for i, x in enumerate(tools):
        f.text(f"spawn.tools[{i}]", x)
    ct = v.get("context_tokens", 0)
    if isinstance(ct, bool) or not isinstance(ct, int) or not 0 <= ct <= MAX_INT:
        raise f.err("spawn.context_tokens", f"an integer in [0, {MAX_INT:,}]", ct)
    kind = v.get("agent_type", "")
    if not isinstance(kind, str):
        raise f.err("spawn.agent_type", "a string", kind)
    f.text("spawn.agent_type", kind)
    return SpawnRecord(ins, tuple(tools), ct, kind)


def _ctx(f: _Fields, field: str = "ctx") -> ContextId:
    return ContextId(f.string(field))


def _p_open(f: _Fields, t: float) -> Op:
    agent = _enum(AgentKind, f.obj.get("agent"), lambda e: f.err("agent", e, f.obj.get("agent")))
    return Open(
        t,
        _ctx(f),
        SessionId(f.string("session")),
        agent,
        ContextId(f.string("parent")) if f.has("parent") else None,
        _parse_spawn(f),
        f.boolean("one_shot"),
    )


def _p_fork(f: _Fields, t: float) -> Op:
    return Fork(t, _ctx(f), ContextId(f.string("src")), f.opt_integer("upto"))


def _p_append(f: _Fields, t: float) -> Op:
    return Append(t, _ctx(f), f.messages("messages", allow_empty=False), f.boolean("temporary"))


def _p_replace(f: _Fields, t: float) -> Op:
    return Replace(t, _ctx(f), f.integer("index"), f.message("message", f.obj.get("message")))


def _p_remove(f: _Fields, t: float) -> Op:
    count = f.integer("count", minimum=1) if f.has("count") else 1
    return Remove(t, _ctx(f), f.integer("index"), count)


def _p_pin(f: _Fields, t: float) -> Op:
    ttl = f.number("ttl") if f.has("ttl") else None
    if ttl is not None and ttl <= 0:
        raise f.err("ttl", "a number > 0", f.obj["ttl"])
    return Pin(t, _ctx(f), f.opt_integer("start"), f.opt_integer("stop"), ttl)


def _p_unpin(f: _Fields, t: float) -> Op:
    if f.has("ttl"):
        raise f.err("ttl", "no ttl on unpin (a TTL belongs to the pin it bounds)", f.obj["ttl"])
    return Unpin(t, _ctx(f), f.opt_integer("start"), f.opt_integer("stop"))


def _p_infer(f: _Fields, t: float) -> Op:
    duration = f.number("duration") if f.has("duration") else 0.0
    return Infer(t, _ctx(f), f.messages("output", allow_empty=True), duration)


def _p_turn_end(f: _Fields, t: float) -> Op:
    return TurnEnd(t, _ctx(f))


def _p_return(f: _Fields, t: float) -> Op:
    return Return(t, _ctx(f), ContextId(f.string("into")), f.message("result", f.obj.get("result")))


def _p_close(f: _Fields, t: float) -> Op:
    return Close(t, _ctx(f))


def _p_end_session(f: _Fields, t: float) -> Op:
    return EndSession(t, SessionId(f.string("session")))


_PARSERS: dict[str, tuple[frozenset[str], Callable[[_Fields, float], Op]]] = {
    "open": (frozenset({"t", "ctx", "session", "agent", "parent", "spawn", "one_shot"}), _p_open),
    "fork": (frozenset({"t", "ctx", "src", "upto"}), _p_fork),
    "append": (frozenset({"t", "ctx", "messages", "temporary"}), _p_append),
    "replace": (frozenset({"t", "ctx", "index", "message"}), _p_replace),
    "remove": (frozenset({"t", "ctx", "index", "count"}), _p_remove),
    "pin": (frozenset({"t", "ctx", "start", "stop", "ttl"}), _p_pin),
    "unpin": (frozenset({"t", "ctx", "start", "stop", "ttl"}), _p_unpin),
    "infer": (frozenset({"t", "ctx", "output", "duration"}), _p_infer),
    "turn_end": (frozenset({"t", "ctx"}), _p_turn_end),
    "return": (frozenset({"t", "ctx", "into", "result"}), _p_return),
    "close": (frozenset({"t", "ctx"}), _p_close),
    "end_session": (frozenset({"t", "session"}), _p_end_session),
}


def parse_op(obj: object) -> Op:
    """One op from its decoded JSON object. Raises :class:`TraceError` (without a location)."""
    if not isinstance(obj, dict):
        raise TraceError(f"expected a JSON object per line (got {type(obj).__name__})")
    name = obj.get("op")
    if not isinstance(name, str) or name not in _PARSERS:
        raise TraceError(
            f"expected one of {', '.join(sorted(_PARSERS))} (got {name!r})", field="op"
        )
    allowed, parse = _PARSERS[name]
    f = _Fields(obj, name, allowed)
    return parse(f, f.number("t"))


def parse_trace_lines(lines: Iterable[str], *, source: str | None = None) -> Trace:
    """Parse JSONL text. Blank lines are skipped; errors carry ``source`` and the line number."""
    header = TraceHeader()
    ops: list[Op] = []
    numbers: list[int] = []
    last_t = -math.inf
    for lineno, raw in enumerate(lines, start=1):
        text = raw.strip()
        if not text:
            continue
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as e:
            raise TraceError(
                f"malformed JSON: {e.msg} at column {e.colno}", file=source, line=lineno
            ) from None
        except RecursionError:
            raise TraceError(
                "JSON nested too deeply (a trace line nests a few levels)", file=source, line=lineno
            ) from None
        if isinstance(obj, dict) and "kvtrace" in obj:
            if ops or numbers or header.meta:
                raise TraceError(
                    "the kvtrace header must be the first line",
                    file=source,
                    line=lineno,
                    field="kvtrace",
                )
            if obj["kvtrace"] != TRACE_VERSION:
                raise TraceError(
                    f"expected trace version {TRACE_VERSION} (got {obj['kvtrace']!r})",
                    file=source,
                    line=lineno,
                    field="kvtrace",
                )
            header = TraceHeader(TRACE_VERSION, dict(obj))
            continue
        try:
            op = parse_op(obj)
        except TraceError as e:
            raise e.located(file=source, line=lineno, op=None) from None
        if op.t < last_t:
            raise TraceError(
                f"time went backwards: expected t >= {last_t:g} (got {op.t:g})",
                file=source,
                line=lineno,
                op=op_name(op),
                field="t",
            )
        last_t = op.t
        ops.append(op)
        numbers.append(lineno)
    return Trace(header, tuple(ops), tuple(numbers), source)


def load_trace(path: str | Path) -> Trace:
    """Read a trace file; an unreadable file is a :class:`TraceError` naming it."""
    p = Path(path)
    try:
        with p.open(encoding="utf-8") as fh:
            return parse_trace_lines(fh, source=str(p))
    except OSError as e:
        raise TraceError(f"cannot read trace file: {e.strerror}", file=str(p)) from None
    except UnicodeDecodeError as e:
        raise TraceError(f"not UTF-8 text: {e.reason}", file=str(p)) from None


# --------------------------------------------------------------------------- writing


def _message_json(m: Message) -> dict[str, Any]:
    d: dict[str, Any] = {"id": m.id, "role": m.role.value, "kind": m.kind.value, "tokens": m.tokens}
    if m.hash is not None:
        d["hash"] = m.hash
    return d


def _num(x: float) -> int | float:
    return int(x) if float(x).is_integer() else x


def op_to_json(op: Op) -> dict[str, Any]:
    """The canonical JSON object of an op: ``op`` first, ``t`` second, defaults omitted."""
    d: dict[str, Any] = {"op": op_name(op), "t": _num(op.t)}
    match op:
        case Open():
            d |= {"ctx": op.ctx, "session": op.session, "agent": op.agent.value}
            if op.parent is not None:
                d["parent"] = op.parent
            if op.spawn is not None:
                d["spawn"] = {
                    "instruction": op.spawn.instruction,
                    "tools": list(op.spawn.tools),
                    "context_tokens": op.spawn.context_tokens,
                }
                if op.spawn.agent_type:
                    d["spawn"]["agent_type"] = op.spawn.agent_type
            if op.one_shot:
                d["one_shot"] = True
        case Fork():
            d |= {"ctx": op.ctx, "src": op.src}
            if op.upto is not None:
                d["upto"] = op.upto
        case Append():
            d |= {"ctx": op.ctx, "messages": [_message_json(m) for m in op.messages]}
            if op.temporary:
                d["temporary"] = True
        case Replace():
            d |= {"ctx": op.ctx, "index": op.index, "message": _message_json(op.message)}
        case Remove():
            d |= {"ctx": op.ctx, "index": op.index}
            if op.count != 1:
                d["count"] = op.count
        case Pin() | Unpin():
            d["ctx"] = op.ctx
            if op.start is not None:
                d["start"] = op.start
            if op.stop is not None:
                d["stop"] = op.stop
            if isinstance(op, Pin) and op.ttl is not None:
                d["ttl"] = _num(op.ttl)
        case Infer():
            d |= {"ctx": op.ctx, "output": [_message_json(m) for m in op.output]}
            if op.duration:
                d["duration"] = _num(op.duration)
        case TurnEnd() | Close():
            d["ctx"] = op.ctx
        case Return():
            d |= {"ctx": op.ctx, "into": op.into, "result": _message_json(op.result)}
        case EndSession():
            d["session"] = op.session
    return d


def dumps_op(op: Op) -> str:
    return json.dumps(op_to_json(op), separators=(",", ":"), ensure_ascii=False)


def iter_trace_lines(trace: Trace) -> Iterator[str]:
    if trace.header.meta:
        meta = dict(trace.header.meta)
        meta.pop("kvtrace", None)
        yield json.dumps(
            {"kvtrace": TRACE_VERSION, **meta},
            separators=(",", ":"),
            ensure_ascii=False,
            sort_keys=False,
        )
    for op in trace.ops:
        yield dumps_op(op)


def dump_trace(trace: Trace, path: str | Path) -> None:
    """Write a trace atomically (a temporary file renamed into place)."""
    p = Path(path)
    tmp = p.with_name(p.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        for line in iter_trace_lines(trace):
            fh.write(line + "\n")
    tmp.replace(p)
