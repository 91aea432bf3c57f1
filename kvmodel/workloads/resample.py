"""A multi-tenant workload resampled from real sessions (``kvmodel generate --from-traces``).

The input is one or more traces of real runs (``kvmodel import`` output). Each *session* in them
is a pool entry; the output holds ``sessions`` copies drawn uniformly with replacement from the
pool, the k-th arriving ``gap`` seconds (exponential, mean ``session_gap_s``) after the one
before: Poisson arrivals, each copy keeping its own session's timing, message sizes and edits.

A copy is another user running the same kind of task. It shares the fixed prefix with every
other copy -- its ``system`` messages keep their KV identity -- and nothing else: every other
message's identity is made the copy's own (ids prefixed ``r<k>.``, content hashes suffixed
``#<k>``), so two copies of one real session do not hit each other's conversation, which two
users would not send. Every random choice comes from ``numpy.random.default_rng(seed)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import numpy as np

from kvmodel.errors import ConfigError, TraceError
from kvmodel.ids import ContextId, MessageId, SessionId
from kvmodel.io.trace import EndSession, Fork, Op, Open, Trace, TraceHeader, op_name
from kvmodel.messages import Message, MessageKind
from kvmodel.workloads.timeline import batch_start, merge_streams

__all__ = ["ResampleParams", "resample_sessions", "sessions_of"]

#: op fields that name a context, and the one that names a session
_CTX_FIELDS = ("ctx", "src", "parent", "into")


@attrs.frozen(slots=True)
class ResampleParams:
    seed: int = 0
    sessions: int | None = None  # default: as many as the pool holds
    session_gap_s: float = 30.0  # mean gap between arrivals
    #: arrivals in batches of this many, as the generator's ``arrival_batch`` (one definition:
    #: :func:`~kvmodel.workloads.timeline.batch_start`); 1, every copy at its own arrival
    arrival_batch: int = attrs.field(default=1, validator=attrs.validators.ge(1))


def sessions_of(traces: Sequence[Trace]) -> list[list[Op]]:
    """Each session's ops, in trace order, sessions in order of first appearance."""
    owner: dict[ContextId, SessionId] = {}
    out: dict[SessionId, list[Op]] = {}
    for tr in traces:
        for i, op in enumerate(tr.ops):
            if isinstance(op, Open):
                owner[op.ctx] = op.session
            elif isinstance(op, Fork):
                owner[op.ctx] = _owner(owner, op.src, tr, i, "src")
            if isinstance(op, EndSession):
                sid = op.session
            else:
                sid = _owner(owner, op.ctx, tr, i, "ctx")
            out.setdefault(sid, []).append(op)
    return list(out.values())


def _owner(
    owner: dict[ContextId, SessionId], ctx: ContextId, tr: Trace, i: int, field: str
) -> SessionId:
    """The session of a context the trace opened before op ``i``, or a located error: a
    resampled session must hold every op of its contexts (an op on a context never opened is
    not a valid trace, spec T3)."""
    sid = owner.get(ctx)
    if sid is None:
        raise TraceError(f"context {ctx!r} was never opened before this op", field=field).located(
            file=tr.source, line=tr.line_of(i), op=op_name(tr.ops[i])
        )
    return sid


def _message(m: Message, k: int) -> Message:
    if m.kind is MessageKind.SYSTEM:  # the shared fixed prefix keeps its identity
        return attrs.evolve(m, id=MessageId(f"r{k}.{m.id}"), hash=m.content_key)
    return attrs.evolve(
        m, id=MessageId(f"r{k}.{m.id}"), hash=None if m.hash is None else f"{m.hash}#{k}"
    )


def _copy(op: Op, k: int, shift: float) -> Op:
    """``op`` of copy ``k``: its contexts, session and messages renamed, its time shifted."""
    changes: dict[str, Any] = {"t": round(op.t + shift, 6)}
    for f in attrs.fields(type(op)):
        v = getattr(op, f.name)
        if v is None:
            continue
        if f.name in _CTX_FIELDS:
            changes[f.name] = ContextId(f"r{k}.{v}")
        elif f.name == "session":
            changes[f.name] = SessionId(f"r{k}.{v}")
        elif isinstance(v, Message):
            changes[f.name] = _message(v, k)
        elif isinstance(v, tuple) and v and isinstance(v[0], Message):
            changes[f.name] = tuple(_message(m, k) for m in v)
    return attrs.evolve(op, **changes)


def _session_ids(pool: list[list[Op]], picks: np.ndarray) -> list[str]:
    """The original session id of each copy (a session's open or end_session names it)."""
    out = []
    for i in picks.tolist():
        out.append(next(str(op.session) for op in pool[i] if isinstance(op, Open | EndSession)))
    return out


def resample_sessions(
    traces: Sequence[Trace], p: ResampleParams, sources: Sequence[str] = ()
) -> Trace:
    pool = sessions_of(traces)
    if not pool:
        raise ConfigError("--from-traces: the traces hold no session to resample")
    n = p.sessions if p.sessions is not None else len(pool)
    rng = np.random.default_rng(p.seed)
    picks = rng.integers(0, len(pool), size=n)
    gaps = rng.exponential(p.session_gap_s, size=n)
    arrivals = (np.concatenate([[0.0], np.cumsum(gaps[:-1])]) if n else np.zeros(0)).tolist()
    streams = []
    for k, i in enumerate(picks.tolist()):
        ops = pool[i]
        at = arrivals[k] if p.arrival_batch == 1 else batch_start(arrivals, k, p.arrival_batch)
        shift = float(at) - ops[0].t
        streams.append([_copy(op, k, shift) for op in ops])
    meta = {
        "kvtrace": 1,
        "generator": "from-traces",
        "sources": list(sources),
        "pool_sessions": len(pool),
        **attrs.asdict(p),
        "sessions": n,
    }
    if p.arrival_batch == 1:  # (the header of a trace resampled before batches, unchanged)
        del meta["arrival_batch"]
    # what the sources assumed holds of the copies: made-up times stay made up (under the
    # copies' names), an assumed clock or decode time is still assumed
    untimed = {s for tr in traces for s in tr.header.meta.get("untimed_sessions", ())}
    if untimed:
        meta["untimed_sessions"] = [
            f"r{k}.{sid}" for k, sid in enumerate(_session_ids(pool, picks)) if sid in untimed
        ]
    for key in ("retimed", "inference_time"):
        said = [tr.header.meta[key] for tr in traces if key in tr.header.meta]
        if said:
            meta[key] = said[0] if len(traces) == 1 else said
    return Trace(TraceHeader(1, meta), tuple(merge_streams(streams)))
