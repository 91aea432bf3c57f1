"""Metamorphic relations of the engine: pairs of traces whose runs the contract ties together.

Each relation takes a valid trace, builds its partner (a renaming, a split edit, an inserted no-op
pair, a fork in place of an inference, ...), runs both on the engine under test and returns a
message when the runs differ where the spec says they cannot (spec/invariants.md §Self-checks of
the engine, which names the clause each one pins). None of them reads the engine's internals:
they compare observation logs and inference figures, so they hold a port to the same contract.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import numpy as np

from kvmodel.config import EngineConfig
from kvmodel.engine import Engine
from kvmodel.ids import ContextId, MessageId
from kvmodel.io.observations import InferObs, observation_to_json
from kvmodel.io.ops import named_ids, renamed
from kvmodel.io.trace import Append, Close, Fork, Infer, Op, Open, Pin, Remove, Replace, Unpin
from kvmodel.logical import Sequences
from kvmodel.policy import Policy

__all__ = [
    "PAIR_RELATIONS",
    "RELATIONS",
    "Run",
    "batched_edits",
    "fork_holds_the_prefix",
    "interleaving",
    "inverse_edit",
    "no_op_pin",
    "renaming",
    "retiming",
    "runner",
    "snapshot",
]

Run = Callable[[Sequence[Op]], Engine]


def runner(policy: Callable[[], Policy], config: EngineConfig, engine: type[Engine]) -> Run:
    def run(ops: Sequence[Op]) -> Engine:
        e = engine(config, policy())
        for op in ops:
            e.apply(op)
        return e

    return run


def _records(e: Engine, *, drop: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    out = []
    for o in e.log:
        d = observation_to_json(o)
        for f in ("seq", "op", *drop):
            d.pop(f, None)
        out.append(d)
    return out


def _figures(e: Engine) -> list[tuple[str, int, int, int]]:
    return [
        (o.ctx, o.prompt_tokens, o.hit_tokens, o.miss_tokens)
        for o in e.log
        if isinstance(o, InferObs)
    ]


def _first_difference(a: Sequence[object], b: Sequence[object]) -> str:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return f"record {i}: {x!r} vs {y!r}"
    return f"{len(a)} records vs {len(b)}"


# ------------------------------------------------------------------ the relations


def renaming(ops: Sequence[Op], run: Run, seed: int = 0) -> str | None:
    """Context, session and message ids, and content hashes, renamed by a seeded permutation
    (so their order changes too): the log is the same but for names and keys (B1, B3)."""
    names = sorted(_names(ops))
    perm = np.random.default_rng(seed).permutation(len(names))
    new = {n: f"n{perm[i]}" for i, n in enumerate(names)}
    partner = [renamed(op, new) for op in ops]
    a = _records(run(ops), drop=frozenset({"ctx", "key"}))
    b = _records(run(partner), drop=frozenset({"ctx", "key"}))
    return None if a == b else f"renaming ids changes the log: {_first_difference(a, b)}"


def no_op_pin(ops: Sequence[Op], run: Run) -> str | None:
    """A ``pin`` and an ``unpin`` of a whole never-pinned context just before its inference
    change nothing (L3 rows pin, unpin_*; pins are not inherited by forks, L6)."""
    pinned: set[str] = set()
    out: list[Op] = []
    for op in ops:
        if isinstance(op, Pin):
            pinned.add(op.ctx)
        if isinstance(op, Infer) and op.ctx not in pinned:
            out += [Pin(op.t, op.ctx), Unpin(op.t, op.ctx)]
        out.append(op)
    a, b = _records(run(ops)), _records(run(out))
    return None if a == b else f"pin+unpin changes the log: {_first_difference(a, b)}"


def batched_edits(ops: Sequence[Op], run: Run) -> str | None:
    """A ``remove`` of n messages equals n removes of one, and an ``append`` of n messages n
    appends of one (deferred application, P3: only the next inference acts on the edits)."""
    out: list[Op] = []
    for op in ops:
        if isinstance(op, Remove) and op.count > 1:
            out += [attrs.evolve(op, count=1)] * op.count
        elif isinstance(op, Append) and len(op.messages) > 1:
            out += [attrs.evolve(op, messages=(m,)) for m in op.messages]
        else:
            out.append(op)
    a, b = _records(run(ops)), _records(run(out))
    return None if a == b else f"splitting edits changes the log: {_first_difference(a, b)}"


def inverse_edit(ops: Sequence[Op], run: Run, block_size: int) -> str | None:
    """A ``replace`` undone by another before the next inference leaves that inference's
    prompt, hit and miss tokens as they were, on memory that cannot fill (P3, B5: the chain is
    only cut at the inference, and the KV beyond the edit point is still there to hit)."""
    plain = _plain_contexts(ops)
    seqs = Sequences(block_size)
    out: list[Op] = []
    for k, op in enumerate(ops):
        if isinstance(op, Infer) and op.ctx in plain and seqs.messages(op.ctx):
            msgs = seqs.messages(op.ctx)
            i = k % len(msgs)
            other = attrs.evolve(msgs[i], id=MessageId(f"inverse-edit-{k}"), hash=None)
            out += [Replace(op.t, op.ctx, i, other), Replace(op.t, op.ctx, i, msgs[i])]
        out.append(op)
        seqs.apply(op)
    a, b = _figures(run(ops)), _figures(run(out))
    if a == b:
        return None
    return f"an edit and its inverse change the figures: {_first_difference(a, b)}"


def fork_holds_the_prefix(ops: Sequence[Op], run: Run) -> str | None:
    """Forking a context and closing the source before the fork's first inference gives that
    inference the figures the source's own would have had (P5: the fork holds the source's
    valid prefix from its creation, so no reclaim can take it)."""
    opened = {op.ctx for op in ops if isinstance(op, Open | Fork)}
    for k in range(len(ops) - 1, -1, -1):
        op = ops[k]
        if not isinstance(op, Infer) or op.ctx not in opened:
            continue
        out = tuple(attrs.evolve(m, id=MessageId(f"fork-{m.id}")) for m in op.output)
        base = [*ops[:k], attrs.evolve(op, output=out)]
        branch = ContextId(f"fork-of-{op.ctx}")
        forked = [
            *ops[:k],
            Fork(op.t, branch, op.ctx),
            Close(op.t, op.ctx),
            Infer(op.t, branch, out, op.duration),
        ]
        a = [f[1:] for f in _figures(run(base))[-1:]]
        b = [f[1:] for f in _figures(run(forked))[-1:]]
        if a != b:
            return f"a fork whose source closed infers {b} where the source infers {a} (op {k})"
        return None
    return None


def interleaving(ops: Sequence[Op], other: Sequence[Op], run: Run, seed: int = 0) -> str | None:
    """Two traces of independent sessions (``other`` renamed apart: no shared id, session or
    content) merged by a seeded random interleaving: without memory pressure every inference of
    ``ops`` has the figures it has alone (P3-P7: a context's KV depends only on its own ops and
    content). Times become the merged position, in both runs."""
    names = _names(other)
    apart = [renamed(op, {n: f"other.{n}" for n in names}) for op in other]
    rng = np.random.default_rng(seed)
    order = rng.permutation([0] * len(ops) + [1] * len(apart))
    merged: list[Op] = []
    mine: list[Op] = []
    it = [iter(ops), iter(apart)]
    for t, side in enumerate(order):
        op = attrs.evolve(next(it[side]), t=float(t))
        merged.append(op)
        if side == 0:
            mine.append(op)
    own = set(_names(ops))
    a = _figures(run(mine))
    b = [f for f in _figures(run(merged)) if f[0] in own]
    if a == b:
        return None
    return f"interleaving another session changes the figures: {_first_difference(a, b)}"


def snapshot(ops: Sequence[Op], run: Run) -> str | None:
    """A run copied at its midpoint and continued gives the log of the whole run: the engine's
    state is all in the engine (no globals, no identity-keyed caches)."""
    whole = run(ops)
    half = run(ops[: len(ops) // 2])
    twin = copy.deepcopy(half)
    for op in ops[len(ops) // 2 :]:
        twin.apply(op)
    a, b = _records(whole), _records(twin)
    return None if a == b else f"a mid-run copy diverges: {_first_difference(a, b)}"


def retiming(ops: Sequence[Op], run: Run, seed: int = 0) -> str | None:
    """Every time point of the trace -- op times, and the ends of inference durations and pin
    ttls -- moved by a seeded strictly increasing map (integer gaps, so sums stay exact): the log
    is the same but for its times. It holds for an engine and a policy whose decisions compare
    times and never measure them, the premise on which ``checkers.symbolic.reach`` merges states up
    to re-timing (``compares_times_only``); a policy with an idle timeout breaks it."""
    points: set[float] = set()
    for op in ops:
        points.add(op.t)
        if isinstance(op, Infer):
            points.add(op.t + op.duration)
        if isinstance(op, Pin) and (d := op.deadline) is not None:
            points.add(d)
    order = sorted(points)
    gaps = np.random.default_rng(seed).integers(1, 50, len(order))
    new = dict(zip(order, (float(x) for x in np.cumsum(gaps)), strict=True))
    out: list[Op] = []
    for op in ops:
        moved = attrs.evolve(op, t=new[op.t])
        if isinstance(op, Infer) and isinstance(moved, Infer):
            moved = attrs.evolve(moved, duration=new[op.t + op.duration] - new[op.t])
        if isinstance(op, Pin) and isinstance(moved, Pin) and (d := op.deadline) is not None:
            moved = attrs.evolve(moved, ttl=new[d] - new[op.t])
        out.append(moved)
    a = [{**r, "t": new[r["t"]]} if "t" in r else r for r in _records(run(ops))]
    b = _records(run(out))
    return None if a == b else f"re-timing the trace changes the log: {_first_difference(a, b)}"


#: name -> (relation, whether it needs memory that cannot fill)
RELATIONS: dict[str, tuple[Callable[..., str | None], bool]] = {
    "renaming": (renaming, False),
    "no-op-pin": (no_op_pin, False),
    "batched-edits": (batched_edits, False),
    "inverse-edit": (inverse_edit, True),
    "fork-holds-the-prefix": (fork_holds_the_prefix, True),
    "snapshot": (snapshot, False),
    "retiming": (retiming, False),
}
#: relations over two traces (not in :data:`RELATIONS`): name -> (relation, needs ample memory)
PAIR_RELATIONS: dict[str, tuple[Callable[..., str | None], bool]] = {
    "interleaving": (interleaving, True),
}


# ------------------------------------------------------------------ helpers


def _plain_contexts(ops: Sequence[Op]) -> set[str]:
    """Contexts that are never pinned, never given temporaries and not one-shot (an edit and
    its inverse restore their states exactly)."""
    out: set[str] = {op.ctx for op in ops if isinstance(op, Open) and not op.one_shot}
    out |= {op.ctx for op in ops if isinstance(op, Fork)}
    for op in ops:
        if isinstance(op, Pin) or (isinstance(op, Append) and op.temporary):
            out.discard(op.ctx)
        if isinstance(op, Fork) and op.src not in out:
            out.discard(op.ctx)
    return out


def _names(ops: Sequence[Op]) -> set[str]:
    return {name for op in ops for _, name in named_ids(op)}
