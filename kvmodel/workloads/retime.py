"""Give a log's untimed sessions the generator's clock (spec/metrics.md E9, "untimed families").

Some logs record what an agent did and not when (tau-bench's: the importer spaces their ops a
second apart and lists them as ``untimed_sessions``, spec/importers.md R5). Such sessions'
waits, lengths and overlap are made up, and a comparison run on them measures the made-up
clock: 24 real tau-bench sessions resampled at the fitted preset's mean gap ran 0.5 at once
where the preset ran 5, so no policy had anything to gain on them. The preset's own times are
the generator's, not measured either; :func:`with_waits_of` puts the real sessions on the same
generator's clock, so that a comparison between the two differs in the sessions' structure
alone, which is what the real logs do record.

Each untimed session keeps its start and its ops' order. Every wait its ops end -- the gap
after a context's inference up to the op that gives it input next, kind by kind as
``kvmodel stats`` reads it (:func:`kvmodel.workloads.stats.waiting_on`) -- is drawn as the
generator draws it: a tool's result after a log-normal wait of median ``tool_wait_median_s``
and sigma ``tool_wait_sigma``, a user's message after one of median ``user_delay_median_s`` and
sigma 1; every other op follows the one before at once, and inferences take no time (as a
preset fitted to a log does, ``timed_inferences`` off). Timed sessions are left as they are.
Every draw comes from ``numpy.random.default_rng(seed)``, in trace order.
"""

from __future__ import annotations

import attrs
import numpy as np

from kvmodel.ids import ContextId
from kvmodel.io.trace import Infer, Op, Trace, TraceHeader
from kvmodel.workloads.agentic import USER_WAIT_SIGMA, AgenticParams
from kvmodel.workloads.resample import sessions_of
from kvmodel.workloads.stats import waiting_on
from kvmodel.workloads.timeline import merge_streams

__all__ = ["with_waits_of"]


def _lognormal(rng: np.random.Generator, median: float, sigma: float) -> float:
    """A wait as the generator draws one (``_Session.lognormal``, to the millisecond)."""
    return round(float(median * np.exp(sigma * rng.standard_normal())), 3)


def _retimed(ops: list[Op], p: AgenticParams, rng: np.random.Generator) -> list[Op]:
    t = ops[0].t
    pending: set[ContextId] = set()  # contexts whose last inference awaits its next input
    out: list[Op] = []
    for op in ops:
        ctx, kind = waiting_on(op)
        if ctx is not None and ctx in pending and kind is not None:
            pending.discard(ctx)
            if kind == "tool":
                t += _lognormal(rng, p.tool_wait_median_s, p.tool_wait_sigma)
            elif kind == "user":
                t += _lognormal(rng, p.user_delay_median_s, USER_WAIT_SIGMA)
        if isinstance(op, Infer):
            pending.add(op.ctx)
            op = attrs.evolve(op, t=round(t, 6), duration=0.0)
        else:
            op = attrs.evolve(op, t=round(t, 6))
        out.append(op)
    return out


def with_waits_of(trace: Trace, p: AgenticParams, *, seed: int = 0) -> Trace:
    """``trace`` with every session its header lists as untimed put on ``p``'s clock (module
    docstring); the header drops the list and records the assumption as ``retimed``. A trace
    with no untimed session is returned as it is."""
    untimed = set(trace.header.meta.get("untimed_sessions", ()))
    if not untimed:
        return trace
    rng = np.random.default_rng(seed)
    streams = []
    for ops in sessions_of([trace]):
        # (a session's open or end_session names it)
        mine = any(getattr(op, "session", None) in untimed for op in ops)
        streams.append(_retimed(ops, p, rng) if mine else ops)
    meta = {k: v for k, v in trace.header.meta.items() if k != "untimed_sessions"}
    meta["retimed"] = {
        "sessions": sorted(untimed),
        "seed": seed,
        "tool_wait_median_s": p.tool_wait_median_s,
        "tool_wait_sigma": p.tool_wait_sigma,
        "user_delay_median_s": p.user_delay_median_s,
        "user_wait_sigma": USER_WAIT_SIGMA,
    }
    return Trace(TraceHeader(trace.header.version, meta), tuple(merge_streams(streams)))
