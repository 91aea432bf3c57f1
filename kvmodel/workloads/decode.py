"""Give a trace's inferences the time prefill and decode take (spec/metrics.md E9, "decode
time"): an assumption laid over a log that times requests only.

A log of agent calls records when each request was sent, not how long its answer took, so an
imported inference takes no time (spec/importers.md R8: its context has no Active phase). How
much a lifecycle policy gains depends on that phase (E9: on the refitted mini-swe-agent preset,
KVTether goes from +5.5% to -30.0% against LRU at 0.5x when inferences take the generator's
time). :func:`with_inference_time` states the assumption explicitly: each inference takes its
prompt's tokens at ``prefill_tok_per_s`` plus its output's at ``tpot_s`` (the generator's
defaults), cut so that it ends no later than its context's next op -- the next request came
when the log says it came, so a decode can only have been shorter than the gap.
"""

from __future__ import annotations

import math

import attrs

from kvmodel.ids import ContextId
from kvmodel.io.trace import EndSession, Fork, Infer, Op, Open, Return, Trace, TraceHeader
from kvmodel.logical import Sequences
from kvmodel.workloads.agentic import AgenticParams

__all__ = ["with_inference_time"]

_DEFAULT = AgenticParams()


def _contexts(op: Op, of_session: dict[str, list[ContextId]]) -> list[ContextId]:
    if isinstance(op, EndSession):
        return of_session.get(op.session, [])
    if isinstance(op, Return):
        return [op.ctx, op.into]
    if isinstance(op, Fork):
        return [op.ctx, op.src]
    return [op.ctx]


def with_inference_time(
    trace: Trace,
    *,
    tpot_s: float = _DEFAULT.tpot_s,
    prefill_tok_per_s: float = _DEFAULT.prefill_tok_per_s,
) -> Trace:
    """``trace`` with every inference's duration set as the module docstring says (times of
    ops unchanged; the header records the assumption)."""
    seqs = Sequences(16)
    prompts: list[int] = []
    of_session: dict[str, list[ContextId]] = {}
    for op in trace.ops:
        if isinstance(op, Open):
            of_session.setdefault(op.session, []).append(op.ctx)
        elif isinstance(op, Fork):
            for ctxs in of_session.values():
                if op.src in ctxs:
                    ctxs.append(op.ctx)
        if isinstance(op, Infer):
            prompts.append(sum(m.tokens for m in seqs.messages(op.ctx)))
        seqs.apply(op)
    # the next op touching each context, from the end back
    nxt: dict[ContextId, float] = {}
    limit: list[float | None] = [None] * len(trace.ops)
    for i in range(len(trace.ops) - 1, -1, -1):
        op = trace.ops[i]
        if isinstance(op, Infer):
            limit[i] = nxt.get(op.ctx)
        for c in _contexts(op, of_session):
            nxt[c] = op.t
    ops: list[Op] = []
    k = 0
    for i, op in enumerate(trace.ops):
        if isinstance(op, Infer):
            out = sum(m.tokens for m in op.output)
            dur = prompts[k] / prefill_tok_per_s + out * tpot_s
            k += 1
            cap = limit[i]
            if cap is not None:
                dur = min(dur, max(0.0, cap - op.t))
            op = attrs.evolve(op, duration=math.floor(dur * 1000) / 1000)  # (never past cap)
        ops.append(op)
    assumed = {"tpot_s": tpot_s, "prefill_tok_per_s": prefill_tok_per_s}
    meta = {**trace.header.meta, "inference_time": assumed}
    return Trace(TraceHeader(trace.header.version, meta), tuple(ops))
