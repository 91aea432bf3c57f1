"""Tiny helpers for writing golden scenarios as trace dicts (they go through the real parser)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import attrs

from kvmodel.config import EngineConfig
from kvmodel.engine import Engine
from kvmodel.ids import TierName
from kvmodel.io.observations import (
    AllocObs,
    BypassObs,
    EvictObs,
    FreeObs,
    HitObs,
    InferObs,
    Observation,
    RejectObs,
)
from kvmodel.io.trace import Infer, Op, Trace, carried_messages, parse_trace_lines, with_messages
from kvmodel.memory import TierConfig
from kvmodel.policy import Policy
from kvmodel.replay import ReplayResult, replay


def msg(mid: str, tokens: int, kind: str = "user", h: str | None = None) -> dict[str, Any]:
    role = {
        "system": "system",
        "reasoning": "assistant",
        "output": "assistant",
        "tool_call": "assistant",
        "summary": "assistant",
        "observation": "tool",
    }.get(kind, "user")
    d: dict[str, Any] = {"id": mid, "role": role, "kind": kind, "tokens": tokens}
    if h is not None:
        d["hash"] = h
    return d


def turn(
    t: float, ctx: str, session: str, body: str, tokens: int, **open_fields: Any
) -> tuple[dict[str, Any], ...]:
    """A new context's first turn: open it, append one user message, infer -- all at ``t``."""
    return (
        {"op": "open", "t": t, "ctx": ctx, "session": session, "agent": "main", **open_fields},
        {"op": "append", "t": t, "ctx": ctx, "messages": [msg(body, tokens)]},
        {"op": "infer", "t": t, "ctx": ctx, "output": []},
    )


def trace(*ops: dict[str, Any]) -> Trace:
    return parse_trace_lines([json.dumps(o) for o in ops], source="scenario")


def config(blocks: int = 16, block_size: int = 4, hbf: int = 0) -> EngineConfig:
    tiers = [TierConfig(TierName("hbm"), blocks)]
    if hbf:
        tiers.append(
            TierConfig(
                TierName("hbf"), hbf, bytes_per_block=1024, pe_cycles=100, write_amplification=1.0
            )
        )
    return EngineConfig(block_size, tuple(tiers))


def run(policy: str | Policy, cfg: EngineConfig, *ops: dict[str, Any]) -> ReplayResult:
    return replay(trace(*ops), policy, cfg)


def describe(o: Observation) -> str:
    """One observation as a short, stable string for golden lists."""
    match o:
        case InferObs():
            return (
                f"infer {o.ctx} prompt={o.prompt_tokens} hit={o.hit_tokens} "
                f"miss={o.miss_tokens} own={o.own_blocks}"
            )
        case HitObs():
            return f"hit {o.block} d{o.depth}"
        case AllocObs():
            rw = " rewrite" if o.rewrite else ""
            return f"alloc {o.block} d{o.depth} {o.tier} {o.state.value}{rw}"
        case EvictObs():
            return f"evict {o.block} d{o.depth} {o.state.value}"
        case FreeObs():
            return f"free {o.block} d{o.depth} {o.reason}"
        case BypassObs():
            return f"bypass {o.block} d{o.depth}"
        case RejectObs():
            return f"reject {o.ctx}"
    raise AssertionError(o)


def log_of(engine: Engine, op: int | None = None) -> list[str]:
    return [describe(o) for o in engine.log if op is None or o.op == op]


def simpler_by_one(ops: Sequence[Op]) -> list[list[Op]]:
    """Every trace one step simpler than ``ops``: the messages of one content key one token
    smaller (each message on its own where the key's sizes differ), an op at the previous op's
    time or, at a whole time, a second earlier, an inference with no duration (what
    value-minimal rules out)."""
    where: dict[str, list[tuple[int, int]]] = {}
    for i, op in enumerate(ops):
        for j, m in enumerate(carried_messages(op)):
            where.setdefault(m.content_key, []).append((i, j))
    out: list[list[Op]] = []
    for places in where.values():
        sizes = {carried_messages(ops[i])[j].tokens for i, j in places}
        for group in [places] if len(sizes) == 1 else [[p] for p in places]:
            fewer = list(ops)
            for i, j in group:
                ms = list(carried_messages(fewer[i]))
                if ms[j].tokens == 1:
                    break
                ms[j] = attrs.evolve(ms[j], tokens=ms[j].tokens - 1)
                fewer[i] = with_messages(fewer[i], ms)
            else:
                out.append(fewer)
    for i, op in enumerate(ops):
        prev = ops[i - 1].t if i else 0.0
        if op.t > prev:
            out.append([*ops[:i], attrs.evolve(op, t=prev), *ops[i + 1 :]])
        if op.t == int(op.t) and op.t - 1 > prev:
            out.append([*ops[:i], attrs.evolve(op, t=op.t - 1), *ops[i + 1 :]])
        if isinstance(op, Infer) and op.duration:
            out.append([*ops[:i], attrs.evolve(op, duration=0.0), *ops[i + 1 :]])
    return out
